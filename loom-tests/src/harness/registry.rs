//! Model 8: the registry — comms joining and leaving one group while its worker starts and
//! stops.
//!
//! The spawner runs each worker on a model thread and counts the workers that are running in a
//! `std` atomic (an observer of the schedule, not part of the protocol under test).

use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering as StdOrdering};

use proxy_core::base::status::NrtStatus;
use proxy_core::base::sync::Arc;
use proxy_core::base::time::{Clock, NoClock};
use proxy_core::driver::queue::{QueueConfig, Worker};
use proxy_core::driver::registry::{Registry, RegistryConfig, Spawner};

use super::driver::run_worker;
use super::{thread, waiter};

/// A spawner that runs each worker on a model thread and counts the running ones.
#[derive(Debug, Clone, Default)]
pub struct ModelSpawner {
    /// Workers started and not yet exited.
    pub running: std::sync::Arc<StdAtomicUsize>,
}

impl Spawner for ModelSpawner {
    type Handle = thread::JoinHandle<()>;

    fn spawn(&self, group: u32, worker: Worker) -> Result<Self::Handle, NrtStatus> {
        let before = self.running.fetch_add(1, StdOrdering::SeqCst);
        assert_eq!(
            before, 0,
            "a second worker started for group {group} while another one still runs"
        );
        let running = self.running.clone();
        Ok(thread::spawn(move || {
            run_worker(worker);
            running.fetch_sub(1, StdOrdering::SeqCst);
        }))
    }

    fn join(&self, handle: Self::Handle) {
        handle.join().unwrap();
    }

    fn thread_id(&self, _handle: &Self::Handle) -> Option<u64> {
        None
    }

    fn clock(&self) -> Box<dyn Clock> {
        Box::new(NoClock)
    }
}

/// Holds a value and, when dropped during a panic, leaks it instead: a model that has already
/// failed must not run blocking teardown (a registry's drop stops and joins workers) while it
/// unwinds, which loom would turn into a second panic.
pub struct LeakOnPanic<T>(Option<T>);

impl<T> LeakOnPanic<T> {
    /// Wraps `v`.
    pub fn new(v: T) -> Self {
        Self(Some(v))
    }
}

impl<T> core::ops::Deref for LeakOnPanic<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_ref().expect("present until drop")
    }
}

impl<T> Drop for LeakOnPanic<T> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            core::mem::forget(self.0.take());
        }
    }
}

/// One comm's life: join the group, check that its queue has a running worker and that it is
/// the only worker, leave.
fn comm(reg: &Registry<ModelSpawner>, running: &StdAtomicUsize, rank: u32) {
    let m = reg.join(rank).expect("join");
    let q = m.slot.queue();
    assert!(
        !q.stop_requested() && !q.worker_exited(),
        "a member's queue has a running worker"
    );
    assert_eq!(
        running.load(StdOrdering::SeqCst),
        1,
        "exactly one worker while the group has members"
    );
    assert!(reg.leave(m, &waiter(0)).is_empty());
}

/// Model 8 — two comms of one group (ranks 0 and 1, two ranks per proxy) join and leave
/// concurrently while the group's worker starts and stops (and may start again, when one comm
/// leaves before the other joins). Exactly one worker runs while the group has members (never
/// two at once); after both have left, the group is gone and no worker runs.
pub fn registry_join_leave() {
    let spawner = ModelSpawner::default();
    let running = spawner.running.clone();
    let cfg = RegistryConfig {
        ranks_per_network_proxy: 2,
        queue: QueueConfig {
            slots: 2,
            submit_capacity: 2,
            status_capacity: 2,
        },
        mode: proxy_core::driver::queue::DriveMode::Thread,
    };
    let reg = Arc::new(Registry::new(spawner, cfg).expect("valid config"));
    let other = {
        let reg = LeakOnPanic::new(reg.clone());
        let running = running.clone();
        thread::spawn(move || comm(&reg, &running, 1))
    };
    let reg = LeakOnPanic::new(reg);
    comm(&reg, &running, 0);
    other.join().unwrap();
    assert_eq!(
        reg.group_count(),
        0,
        "the group is gone after the last leave"
    );
    assert_eq!(
        running.load(StdOrdering::SeqCst),
        0,
        "no worker runs after the last leave"
    );
}

#[cfg(all(test, not(loom)))]
mod tests;
