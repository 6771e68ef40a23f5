//! Pollers: work that the thread driving a proxy queue advances between its tasks' steps,
//! so that it needs no thread of its own: an emulated device polled by the worker (a real
//! device runs by itself and costs no host thread; an emulated one on its own thread is one
//! more busy thread per rank on a host whose CPUs are already shared).
//!
//! A poller is wired into a slot ([`ProxyQueue::slot_poller`]) before the threads that use it
//! run. Every tick of the queue ([`crate::driver::queue::Worker::tick`],
//! [`ProxyQueue::tick`]) polls every wired poller of its slots once, after the steps: an
//! answer of [`Polled::Moved`] counts as progress, [`Polled::Waiting`] keeps the driver from
//! parking (its tick answers `NoProgress`, not `Park`).
//!
//! The handoff that makes work for a poller (a launch on another thread) must end with
//! [`ProxyQueue::wake_driver`]: the worker may have parked after a tick that found the poller
//! idle, and only a notification of the queue's `WaitCell` (kept when it comes before the
//! park) ends that park. The park also re-checks [`Poller::busy`] after marking itself
//! parked. Loom model 3f (`loom-tests/tests/park_wake.rs`) runs a launch against a parking
//! worker, with the plant `PollerIgnoredAtPark` caught.
//!
//! [`ProxyQueue::slot_poller`]: crate::driver::queue::ProxyQueue::slot_poller
//! [`ProxyQueue::tick`]: crate::driver::queue::ProxyQueue::tick
//! [`ProxyQueue::wake_driver`]: crate::driver::queue::ProxyQueue::wake_driver

use crate::base::sync::{PlainArc, SwitchAtomicBool as AtomicBool, SwitchOrdering as Ordering};

/// What one [`Poller::poll`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polled {
    /// Nothing to do: no work launched, or the last one ended and was reported.
    Idle,
    /// Work is running but did not move at this poll (it waits for something).
    Waiting,
    /// Work moved on (or ended) at this poll.
    Moved,
}

/// Work a queue's driving thread advances between ticks (see the module docs).
pub trait Poller: Send + Sync {
    /// Advances the work as far as it can without blocking.
    fn poll(&self) -> Polled;

    /// `true` while work is launched and not ended: one atomic load, no lock (read by a
    /// driver about to park).
    fn busy(&self) -> bool;
}

/// A slot's poller, wired once the poller exists (`None` until then: polls answer
/// [`Polled::Idle`]). A slot with nothing wired costs a poll one load (every tick polls every
/// slot); a wired one a reader lock (`spin::RwLock`: two RMWs). [`PollerSlot::wire`] takes a
/// writer lock held for one pointer swap.
#[derive(Default)]
pub struct PollerSlot {
    /// Set while a poller is wired (written under the writer lock; a switch word, not loom's:
    /// wired before the threads that poll it run, read at every tick).
    wired: AtomicBool,
    poller: spin::RwLock<Option<PlainArc<dyn Poller>>>,
}

impl core::fmt::Debug for PollerSlot {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PollerSlot")
            .field("wired", &self.wired.load(Ordering::Relaxed))
            .finish()
    }
}

impl PollerSlot {
    /// An unwired slot.
    pub const fn new() -> Self {
        Self {
            wired: AtomicBool::new(false),
            poller: spin::RwLock::new(None),
        }
    }

    /// Wires `poller` (`None` unwires), returning the poller wired before.
    pub fn wire(&self, poller: Option<PlainArc<dyn Poller>>) -> Option<PlainArc<dyn Poller>> {
        let mut slot = self.poller.write();
        self.wired.store(poller.is_some(), Ordering::Release);
        core::mem::replace(&mut *slot, poller)
    }

    /// Polls the wired poller ([`Polled::Idle`] when none).
    #[inline]
    pub fn poll(&self) -> Polled {
        if !self.wired.load(Ordering::Acquire) {
            return Polled::Idle;
        }
        match &*self.poller.read() {
            Some(p) => p.poll(),
            None => Polled::Idle,
        }
    }

    /// [`Poller::busy`] of the wired poller (`false` when none).
    #[inline]
    pub fn busy(&self) -> bool {
        self.wired.load(Ordering::Acquire) && self.poller.read().as_ref().is_some_and(|p| p.busy())
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
