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

use crate::base::sync::PlainArc;
use crate::base::wired::Wired;

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
/// slot); a wired one a reader lock ([`Wired`]).
#[derive(Debug, Default)]
pub struct PollerSlot(Wired<dyn Poller>);

impl PollerSlot {
    /// An unwired slot.
    pub const fn new() -> Self {
        Self(Wired::new())
    }

    /// Wires `poller` (`None` unwires), returning the poller wired before.
    pub fn wire(&self, poller: Option<PlainArc<dyn Poller>>) -> Option<PlainArc<dyn Poller>> {
        self.0.wire(poller)
    }

    /// Polls the wired poller ([`Polled::Idle`] when none).
    #[inline]
    pub fn poll(&self) -> Polled {
        self.0.with(|p| p.poll()).unwrap_or(Polled::Idle)
    }

    /// [`Poller::busy`] of the wired poller (`false` when none).
    #[inline]
    pub fn busy(&self) -> bool {
        self.0.with(|p| p.busy()).unwrap_or(false)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
