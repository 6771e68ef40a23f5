//! Twin of `proxy_core::driver::registry::Registry` with the const parameter `BUG` planting one bug (see
//! [`bug`]; [`bug::NONE`] plants none and must pass the same model).
//!
//! A verbatim copy of `join`, `leave`, `group_count` and `Drop` over the shipping queue and
//! the shipping `Spawner` trait (the lookups and dumps the model does not use are left out).
//! Keep it in step with the shipping code by hand.
#![allow(missing_docs, dead_code, clippy::all)]

use proxy_core::driver::queue::{ProxyQueue, SlotHandle};
use proxy_core::driver::record::TaskRecord;
use proxy_core::driver::registry::{RegistryConfig, Spawner};
use proxy_core::driver::wake::Waiter;
use proxy_core::status::NrtStatus;
use proxy_core::sync::{Arc, Mutex};

use crate::harness::registry::{ModelSpawner, Reg};

/// The bugs a [`Registry`] can plant, one per instantiation.
pub mod bug {
    /// No bug: the copy as it ships.
    pub const NONE: u8 = 0;
    /// `leave` reads the refcount in one critical section and writes the decrement (and decides
    /// "last") in a second one: the decrement is not one read-modify-write, so two comms leaving
    /// at once can both write `refs - 1` and neither stops the worker.
    pub const SPLIT_DECREMENT: u8 = 1;
    /// The last `leave` removes the group under the lock but stops and joins its worker after
    /// releasing it (how `Registry::leave` was written before model 8 found it): a join of the
    /// same group in between starts a second worker while the old one still runs.
    pub const STOP_OUTSIDE_LOCK: u8 = 2;
}

struct Group<H> {
    id: u32,
    queue: Arc<ProxyQueue>,
    refs: u32,
    handle: H,
}

#[derive(Debug)]
pub struct Membership {
    group: u32,
    pub slot: SlotHandle,
}

struct GroupLock<T>(Mutex<T>);

impl<T> GroupLock<T> {
    fn new(value: T) -> Self {
        Self(Mutex::new(value))
    }

    #[cfg(not(loom))]
    fn with<R>(&self, relax: impl Fn(), f: impl FnOnce(&mut T) -> R) -> R {
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

pub struct Registry<S: Spawner, const BUG: u8> {
    spawner: S,
    cfg: RegistryConfig,
    groups: GroupLock<Vec<Group<S::Handle>>>,
}

impl<S: Spawner, const BUG: u8> Registry<S, BUG> {
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

    pub fn group_of(&self, rank: u32) -> u32 {
        rank / self.cfg.ranks_per_network_proxy
    }

    fn with_groups<R>(&self, f: impl FnOnce(&mut Vec<Group<S::Handle>>) -> R) -> R {
        self.groups.with(|| self.spawner.relax(), f)
    }

    pub fn join(&self, rank: u32) -> Result<Membership, NrtStatus> {
        let group = self.group_of(rank);
        self.with_groups(|groups| {
            if let Some(g) = groups.iter_mut().find(|g| g.id == group) {
                let slot = ProxyQueue::join(&g.queue)?;
                g.refs += 1;
                return Ok(Membership { group, slot });
            }
            let (queue, worker) = ProxyQueue::new(self.cfg.queue, self.spawner.clock())?;
            let handle = self.spawner.spawn(group, worker)?;
            let slot = match ProxyQueue::join(&queue) {
                Ok(s) => s,
                Err(e) => {
                    queue.request_stop();
                    self.spawner.join(handle);
                    return Err(e);
                }
            };
            groups.push(Group {
                id: group,
                queue,
                refs: 1,
                handle,
            });
            Ok(Membership { group, slot })
        })
    }

    pub fn leave(&self, m: Membership, waiter: &Waiter<'_>) -> Vec<TaskRecord> {
        let group = m.group;
        let records = m.slot.leave(waiter);
        if BUG == bug::SPLIT_DECREMENT {
            // PLANTED BUG: read the count in one critical section ...
            let refs =
                self.with_groups(|groups| groups.iter().find(|g| g.id == group).map(|g| g.refs));
            let Some(refs) = refs else {
                return records;
            };
            // ... and write `refs - 1` (and decide "last") in another.
            self.with_groups(|groups| {
                let Some(i) = groups.iter().position(|g| g.id == group) else {
                    return;
                };
                groups[i].refs = refs - 1;
                if groups[i].refs == 0 {
                    let g = groups.swap_remove(i);
                    g.queue.request_stop();
                    self.spawner.join(g.handle);
                }
            });
            return records;
        }
        if BUG == bug::STOP_OUTSIDE_LOCK {
            let last = self.with_groups(|groups| {
                let i = groups.iter().position(|g| g.id == group)?;
                groups[i].refs -= 1;
                (groups[i].refs == 0).then(|| groups.swap_remove(i))
            });
            // PLANTED BUG: stop and join after the lock is released.
            if let Some(g) = last {
                g.queue.request_stop();
                self.spawner.join(g.handle);
            }
            return records;
        }
        self.with_groups(|groups| {
            let Some(i) = groups.iter().position(|g| g.id == group) else {
                return;
            };
            groups[i].refs -= 1;
            if groups[i].refs == 0 {
                let g = groups.swap_remove(i);
                g.queue.request_stop();
                self.spawner.join(g.handle);
            }
        });
        records
    }

    pub fn group_count(&self) -> usize {
        self.with_groups(|g| g.len())
    }
}

impl<S: Spawner, const BUG: u8> Drop for Registry<S, BUG> {
    fn drop(&mut self) {
        let groups = self.with_groups(core::mem::take);
        for g in groups {
            g.queue.request_stop();
            self.spawner.join(g.handle);
        }
    }
}

impl<const BUG: u8> Reg for Registry<ModelSpawner, BUG> {
    type Member = Membership;

    fn new(spawner: ModelSpawner, cfg: RegistryConfig) -> Self {
        Registry::new(spawner, cfg).expect("valid config")
    }
    fn join(&self, rank: u32) -> Result<Membership, NrtStatus> {
        Registry::join(self, rank)
    }
    fn leave(&self, m: Membership, waiter: &Waiter<'_>) -> Vec<TaskRecord> {
        Registry::leave(self, m, waiter)
    }
    fn group_count(&self) -> usize {
        Registry::group_count(self)
    }
    fn queue_of(m: &Membership) -> &Arc<ProxyQueue> {
        m.slot.queue()
    }
}
