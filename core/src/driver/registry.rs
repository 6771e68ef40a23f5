//! The registry of shared proxy queues: one queue (and one worker thread) per shared-proxy
//! group, refcounted by the comms that joined it.
//!
//! Group id = `global rank / ranks_per_network_proxy`. The first comm of a group creates the
//! queue and starts its worker through the platform's [`Spawner`]; later ones take a reference
//! and a slot; the last leave sets stop, wakes the worker and joins it. A spawn failure (e.g. a
//! CPU outside the allowed set) fails that join and leaves nothing behind.
//!
//! The group table is guarded by a small lock (join and leave are cold paths; the hot path,
//! submit and tick, never takes it); a waiter for the lock spins with [`Spawner::relax`].
//!
//! Seed: `g_shared_proxy_queues` (nrt:0xc91320) under `g_shared_proxy_queues_lock`
//! (nrt:0xc912e0), `enc_setup_global_comm_internal` (nrt:0x10b050), `enc_free_global_comm`,
//! `enc_proxy_queue::start` (nrt:0x1ce4d0), §2.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::base::status::NrtStatus;
use crate::base::sync::{spin_loop, Arc, Mutex};
use crate::base::time::Clock;
use crate::driver::dump::DumpOutcome;
use crate::driver::queue::{DriveMode, ProxyQueue, QueueConfig, SlotHandle, Worker};
use crate::driver::record::TaskRecord;
use crate::driver::wake::Waiter;

/// The platform's part of the registry: start and join worker threads.
pub trait Spawner: Send + Sync {
    /// A running worker thread.
    type Handle: Send;

    /// Starts a thread that runs `worker`'s loop (tick; park / spin / yield) until its queue's
    /// stop is requested. Returns once the thread is running, or with the reason it could not
    /// start (then `worker` is dropped and the queue torn down).
    ///
    /// # Errors
    /// The reason, e.g. [`NrtStatus::Invalid`] for a CPU outside the allowed set or
    /// [`NrtStatus::Resource`] when no thread can be created.
    fn spawn(&self, group: u32, worker: Worker) -> Result<Self::Handle, NrtStatus>;

    /// Waits for a worker whose queue's stop has been requested to exit.
    fn join(&self, handle: Self::Handle);

    /// The worker's thread id (on Linux the kernel tid), if the platform knows it.
    fn thread_id(&self, handle: &Self::Handle) -> Option<u64>;

    /// A clock for a new queue's worker (read once per tick).
    fn clock(&self) -> Box<dyn Clock>;

    /// Called between attempts to take the registry's lock. Default: a spin hint.
    fn relax(&self) {
        spin_loop();
    }
}

/// Sizes and grouping of a registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegistryConfig {
    /// Ranks per shared proxy (group id = rank / this); ≥ 1.
    /// (`NEURON_RT_RANKS_PER_NETWORK_PROXY`, default 1.)
    pub ranks_per_network_proxy: u32,
    /// Sizes of each queue.
    pub queue: QueueConfig,
    /// Who drives each group's queue: a worker thread started through the [`Spawner`] (the
    /// default), or the comms' own threads ([`DriveMode::Caller`]: no thread is started).
    pub mode: DriveMode,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            ranks_per_network_proxy: 1,
            queue: QueueConfig::default(),
            mode: DriveMode::Thread,
        }
    }
}

struct Group<H> {
    id: u32,
    queue: Arc<ProxyQueue>,
    refs: u32,
    /// The worker thread (`None` in caller mode).
    handle: Option<H>,
}

/// A comm's membership of a group: its group id and its slot of the group's queue.
#[derive(Debug)]
pub struct Membership {
    group: u32,
    /// The comm's slot: submit tasks and collect records here.
    pub slot: SlotHandle,
}

impl Membership {
    /// The group id.
    pub fn group(&self) -> u32 {
        self.group
    }
}

/// Process-wide (or, in tests, private) registry of shared proxy queues.
///
/// Seed: `g_shared_proxy_queues`, §2.
pub struct Registry<S: Spawner> {
    spawner: S,
    cfg: RegistryConfig,
    groups: GroupLock<Vec<Group<S::Handle>>>,
}

/// The group table's lock: [`Mutex`] from the facade (a test-and-set lock whose waiters call
/// [`Spawner::relax`] between attempts; under loom, loom's `Mutex`, because loom cannot
/// schedule a spin loop under its preemption bound and the models would report a livelock that
/// is not there).
struct GroupLock<T>(Mutex<T>);

impl<T> GroupLock<T> {
    fn new(value: T) -> Self {
        Self(Mutex::new(value))
    }

    #[cfg(not(loom))]
    fn with<R>(&self, relax: impl Fn(), f: impl FnOnce(&mut T) -> R) -> R {
        // `try_lock` acquires on success and the guard releases on drop: the previous holder's
        // changes are visible, and ours are visible to the next holder.
        loop {
            if let Some(mut guard) = self.0.try_lock() {
                return f(&mut guard);
            }
            relax();
        }
    }

    #[cfg(loom)]
    fn with<R>(&self, _relax: impl Fn(), f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.0.lock().unwrap())
    }
}

impl<S: Spawner> core::fmt::Debug for Registry<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Registry").field("cfg", &self.cfg).finish()
    }
}

impl<S: Spawner> Registry<S> {
    /// An empty registry.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when `ranks_per_network_proxy` is 0 or the queue sizes are
    /// invalid.
    pub fn new(spawner: S, cfg: RegistryConfig) -> Result<Self, NrtStatus> {
        if cfg.ranks_per_network_proxy == 0 {
            return Err(NrtStatus::Invalid);
        }
        cfg.queue.validate()?;
        Ok(Self {
            spawner,
            cfg,
            groups: GroupLock::new(Vec::new()),
        })
    }

    /// The spawner.
    pub fn spawner(&self) -> &S {
        &self.spawner
    }

    /// The group id of `rank`.
    pub fn group_of(&self, rank: u32) -> u32 {
        rank / self.cfg.ranks_per_network_proxy
    }

    fn with_groups<R>(&self, f: impl FnOnce(&mut Vec<Group<S::Handle>>) -> R) -> R {
        self.groups.with(|| self.spawner.relax(), f)
    }

    /// Joins `rank`'s group: takes a reference on its queue (creating the queue and starting
    /// its worker when it is the first) and claims a slot.
    ///
    /// Seed: `enc_setup_global_comm_internal` (nrt:0x10b050), §2.
    ///
    /// # Errors
    /// The spawner's error when the worker cannot start (nothing is left behind);
    /// [`NrtStatus::Resource`] when the group's queue has no free slot.
    pub fn join(&self, rank: u32) -> Result<Membership, NrtStatus> {
        let group = self.group_of(rank);
        self.with_groups(|groups| {
            if let Some(g) = groups.iter_mut().find(|g| g.id == group) {
                let slot = ProxyQueue::join(&g.queue)?;
                g.refs += 1;
                log::debug!("group {group}: rank {rank} joined (refs {})", g.refs);
                return Ok(Membership { group, slot });
            }
            let (queue, handle) = match self.cfg.mode {
                DriveMode::Thread => {
                    let (queue, worker) = ProxyQueue::new(self.cfg.queue, self.spawner.clock())?;
                    queue.set_group(group);
                    let handle = self.spawner.spawn(group, worker).inspect_err(|e| {
                        log::error!("group {group}: worker failed to start: {e}");
                    })?;
                    (queue, Some(handle))
                }
                DriveMode::Caller => {
                    let queue = ProxyQueue::new_caller(self.cfg.queue, self.spawner.clock())?;
                    queue.set_group(group);
                    (queue, None)
                }
            };
            let slot = match ProxyQueue::join(&queue) {
                Ok(s) => s,
                Err(e) => {
                    queue.request_stop();
                    self.join_worker(handle);
                    return Err(e);
                }
            };
            log::debug!("group {group}: rank {rank} created the queue");
            groups.push(Group {
                id: group,
                queue,
                refs: 1,
                handle,
            });
            Ok(Membership { group, slot })
        })
    }

    /// Leaves: gives the slot back ([`SlotHandle::leave`]: queued and active tasks end
    /// `NRT_CLOSED`), drops the reference, and when it was the last, stops, wakes and joins the
    /// worker. Returns the records the slot had not reported yet.
    ///
    /// The last leave stops and joins the worker while it holds the registry's lock, so a join
    /// of the same group that comes next starts its worker only once the old one is gone: one
    /// worker per group at any time. The worker never takes the lock (and `join` already waits
    /// for a starting worker under it), so this cannot deadlock; other joins and leaves wait for
    /// one worker's exit, on a cold path.
    ///
    /// Seed: `enc_free_global_comm` → `~enc_proxy_queue` (stop, notify, join), §2.
    pub fn leave(&self, m: Membership, waiter: &Waiter<'_>) -> Vec<TaskRecord> {
        match self.leave_until(m, waiter, None) {
            Ok(records) => records,
            Err((status, m)) => {
                // Not reachable: a leave without a deadline ends only with its records.
                log::error!("group {}: leave without a deadline ended {status}", m.group);
                debug_assert!(false, "an undeadlined leave ended {status}");
                Vec::new()
            }
        }
    }

    /// [`Registry::leave`] with a deadline on `waiter.clock` for the slot's part
    /// ([`SlotHandle::leave_until`]: the driver closing the comm's tasks).
    ///
    /// The reference is dropped (and, for the last one, the worker stopped and joined) only
    /// once the slot is left. Joining a stopped worker is bounded by one tick of it: every task
    /// step is non-blocking, and a stream's teardown drains for at most its comm's drain limit
    /// (docs/design.md §9, "Bounded waits").
    ///
    /// # Errors
    /// `(NrtStatus::Timeout, membership)` when the deadline passed before the slot was closed:
    /// nothing is lost, the reference is kept, and the membership's slot keeps the records
    /// collected so far (see [`SlotHandle::leave_until`]). Call `leave_until` again, or drop
    /// the membership (the group then keeps its reference until the registry is dropped).
    // The error hands the handle itself back by value (nothing is lost and nothing is
    // allocated on the timeout path); its size is the handle's.
    #[allow(clippy::result_large_err)]
    pub fn leave_until(
        &self,
        m: Membership,
        waiter: &Waiter<'_>,
        deadline_ns: Option<u64>,
    ) -> Result<Vec<TaskRecord>, (NrtStatus, Membership)> {
        let group = m.group;
        let records = match m.slot.leave_until(waiter, deadline_ns) {
            Ok(r) => r,
            Err((status, slot)) => return Err((status, Membership { group, slot })),
        };
        self.drop_ref(group);
        Ok(records)
    }

    /// Drops one reference on `group`; the last one stops, wakes and joins its worker under
    /// the registry's lock.
    fn drop_ref(&self, group: u32) {
        // PLANT: RegistrySplitDecrement reads the count in one critical section and writes
        // `refs - 1` (and decides "last") in a second: two leaves can both write the same value.
        plant!(RegistrySplitDecrement => {
            let refs =
                self.with_groups(|groups| groups.iter().find(|g| g.id == group).map(|g| g.refs));
            if let Some(refs) = refs {
                self.with_groups(|groups| {
                    if let Some(i) = groups.iter().position(|g| g.id == group) {
                        groups[i].refs = refs - 1;
                        if groups[i].refs == 0 {
                            let g = groups.swap_remove(i);
                            g.queue.request_stop();
                            self.join_worker(g.handle);
                        }
                    }
                });
            }
            return;
        });
        // PLANT: RegistryStopOutsideLock removes the last group under the lock but stops and
        // joins its worker after releasing it: a join in between starts a second worker.
        plant!(RegistryStopOutsideLock => {
            let last = self.with_groups(|groups| {
                let i = groups.iter().position(|g| g.id == group)?;
                groups[i].refs -= 1;
                (groups[i].refs == 0).then(|| groups.swap_remove(i))
            });
            if let Some(g) = last {
                g.queue.request_stop();
                self.join_worker(g.handle);
            }
            return;
        });
        self.with_groups(|groups| {
            let Some(i) = groups.iter().position(|g| g.id == group) else {
                return;
            };
            groups[i].refs -= 1;
            log::debug!("group {group}: left (refs {})", groups[i].refs);
            if groups[i].refs == 0 {
                let g = groups.swap_remove(i);
                g.queue.request_stop();
                self.join_worker(g.handle);
                log::debug!("group {group}: worker joined");
            }
        });
    }

    fn join_worker(&self, handle: Option<S::Handle>) {
        if let Some(h) = handle {
            self.spawner.join(h);
        }
    }

    /// Number of live groups (queues with a running worker).
    pub fn group_count(&self) -> usize {
        self.with_groups(|g| g.len())
    }

    /// Calls `f` with every live group's id and worker handle (under the registry's lock: keep
    /// `f` short).
    pub fn for_each_worker(&self, mut f: impl FnMut(u32, &S::Handle)) {
        self.with_groups(|groups| {
            for g in groups.iter() {
                if let Some(h) = &g.handle {
                    f(g.id, h);
                }
            }
        });
    }

    /// Dumps every proxy queue of the registry (docs/design.md §6, "State dump"): asks each
    /// group's queue for a dump ([`ProxyQueue::request_dump`], all at once, under the lock),
    /// then waits for each ([`ProxyQueue::wait_dump`], outside the lock) until `deadline_ns` on
    /// `waiter.clock`. Returns every group with what its dump ended with, in group order: a
    /// queue whose driving thread did not answer in time is dumped without it
    /// ([`DumpOutcome::NotAnswered`]).
    pub fn dump_all(&self, waiter: &Waiter<'_>, deadline_ns: u64) -> Vec<(u32, DumpOutcome)> {
        let mut asked: Vec<(u32, Arc<ProxyQueue>, u32)> = self.with_groups(|groups| {
            groups
                .iter()
                .map(|g| (g.id, g.queue.clone(), g.queue.request_dump()))
                .collect()
        });
        asked.sort_by_key(|a| a.0);
        asked
            .into_iter()
            .map(|(group, queue, ticket)| (group, queue.wait_dump(ticket, waiter, deadline_ns)))
            .collect()
    }

    /// Every live group with its worker's thread id.
    pub fn workers(&self) -> Vec<(u32, Option<u64>)> {
        self.with_groups(|groups| {
            groups
                .iter()
                .map(|g| {
                    (
                        g.id,
                        g.handle.as_ref().and_then(|h| self.spawner.thread_id(h)),
                    )
                })
                .collect()
        })
    }
}

impl<S: Spawner> Drop for Registry<S> {
    /// Stops and joins the worker of every group still live (comms that never left: their
    /// tasks end `NRT_CLOSED`, and their later `leave` returns without waiting).
    fn drop(&mut self) {
        let groups = self.with_groups(core::mem::take);
        for g in groups {
            log::warn!(
                "registry dropped with group {} still joined ({} refs)",
                g.id,
                g.refs
            );
            g.queue.request_stop();
            self.join_worker(g.handle);
        }
    }
}
