//! Model 3f: a device launched on another thread and played by the worker (`driver::poller`),
//! against the worker's park. The launch stores the device's work, then wakes the driver
//! (`ProxyQueue::wake_driver`); the worker polls the slot's poller at every tick and must not
//! park while the device waits. Every park is untimed: a worker that parks with the device
//! still waiting, and nobody to wake it, is a deadlock, which loom reports.

use std::sync::atomic::{AtomicBool as StdAtomicBool, Ordering as StdOrdering};

use proxy_core::base::sync::{AtomicU32, Ordering, PlainArc};
use proxy_core::driver::poller::{Polled, Poller};
use proxy_core::driver::queue::{ProxyQueue, Tick};

use super::driver::{new_queue, one_slot};
use super::{thread, waiter, ModelPark};

/// The model's device: a launch gives it `polls` polls to make (it waits at each but the
/// last); only the worker polls it.
struct ModelDevice {
    left: AtomicU32,
    /// Observer: the device ended (read by the worker's loop, not part of any handoff).
    ended: std::sync::Arc<StdAtomicBool>,
}

impl Poller for ModelDevice {
    fn poll(&self) -> Polled {
        match self.left.load(Ordering::Acquire) {
            0 => Polled::Idle,
            1 => {
                self.left.store(0, Ordering::Release);
                self.ended.store(true, StdOrdering::SeqCst);
                Polled::Moved
            }
            n => {
                self.left.store(n - 1, Ordering::Release);
                Polled::Waiting
            }
        }
    }

    fn busy(&self) -> bool {
        self.left.load(Ordering::Acquire) > 0
    }
}

/// Polls a launch needs: two waits, then the end (one wait could be consumed by the launch's
/// own wake-up; the second is what only the poller handling can carry).
const POLLS: u32 = 3;

/// Model 3f — the launcher stores the device's work and wakes the driver, while the worker
/// ticks (polling the device) and parks when its tick says so. The worker must run the device
/// to its end: it leaves its loop only then, and the main thread joins it.
pub fn worker_plays_a_launched_device() {
    let (queue, worker) = new_queue(one_slot());
    let h = ProxyQueue::join(&queue).expect("join a free slot");
    let ended = std::sync::Arc::new(StdAtomicBool::new(false));
    let dev = PlainArc::new(ModelDevice {
        left: AtomicU32::new(0),
        ended: ended.clone(),
    });
    let wired: PlainArc<dyn Poller> = dev.clone();
    assert!(queue
        .slot_poller(0)
        .expect("slot 0")
        .wire(Some(wired))
        .is_none());
    let ended2 = ended.clone();
    let worker = thread::spawn(move || {
        let mut worker = worker;
        while !ended2.load(StdOrdering::SeqCst) {
            match worker.tick() {
                Tick::Park => worker.park(&ModelPark::default()),
                Tick::NoProgress => thread::yield_now(),
                Tick::Continue => {}
            }
        }
        worker
    });
    // The launcher: the work, then the wake-up.
    dev.left.store(POLLS, Ordering::Release);
    queue.wake_driver();
    drop(worker.join().unwrap());
    assert!(ended.load(StdOrdering::SeqCst));
    assert!(!dev.busy());
    assert!(h.leave(&waiter(0)).is_empty());
}
