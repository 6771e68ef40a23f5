//! Idle waits: what the thread driving a proxy queue blocks on when a tick found nothing to do,
//! instead of yielding, so that on a crowded host a rank with nothing to do gives its CPU to
//! the ranks that have work until its network has something for it.
//!
//! The source is the transport's completion queue where the provider offers a wait object (a
//! file descriptor for libfabric tcp, `fi_control(FI_GETWAIT)`); the platform wires an
//! [`IdleWait`] into the queue ([`ProxyQueue::idle_wait`]) when the queue's comms complete
//! through that one source and nothing else they wait for comes from another process without a
//! wake-up (the platform's waiter answers [`Armed::Unavailable`] while, say, a barrier between
//! processes is pending, and the driver yields as before).
//!
//! The arm / check / sleep protocol ([`block_idle`]): a driver that found nothing arms the
//! source first ([`IdleWait::arm`], libfabric's `fi_trywait`), which answers
//! [`Armed::Ready`] when completions are already queued (a post's own progress may have moved
//! them off the descriptor, which then stays quiet), and only an [`Armed::Armed`] source may be
//! slept on. Sleeping without arming is the classic lost wake-up: the completion is in the
//! queue, the descriptor never fires, and the driver sleeps out its whole timeout. Every sleep
//! is bounded ([`IdleWait::sleep`]'s timeout). Loom model 17 (`loom-tests/tests/idle.rs`) runs a
//! delivery against a driver whose own progress moves it, with the plant `IdleSleepsUnarmed`
//! caught as a deadlock.
//!
//! ```text
//!   tick: nothing ──► arm ──(Ready)──────────────► tick again (no sleep)
//!                      ├──(Unavailable)──────────► yield, tick again
//!                      └──(Armed)──► sleep ≤ timeout ──► tick again
//! ```
//!
//! Seed: none (the seed's worker spins, then yields, §2 `process()`); design §4, "Worker loop".
//!
//! [`ProxyQueue::idle_wait`]: crate::driver::queue::ProxyQueue::idle_wait

use crate::base::sync::PlainArc;
use crate::base::wired::Wired;

/// What [`IdleWait::arm`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Armed {
    /// Something is already there (completions queued): do not sleep, tick again.
    Ready,
    /// Armed: nothing queued, and the source will signal what comes next.
    Armed,
    /// The source cannot be slept on now (closed, or a wait that no signal ends is pending):
    /// the driver yields instead.
    Unavailable,
}

/// What one [`block_idle`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idled {
    /// The source had something: no sleep.
    Ready,
    /// Slept until the source signalled (`true`) or the timeout passed (`false`).
    Slept(bool),
    /// The source could not be slept on: the caller yields.
    Unavailable,
}

/// A source the driving thread may block on when it has nothing to do (see the module docs).
///
/// Both calls are made by the thread that holds the queue's drive token, between ticks: an
/// implementation may rely on no other thread using the transport behind it meanwhile.
pub trait IdleWait: Send + Sync {
    /// Arms the source: [`Armed::Armed`] only when nothing is queued and the source will
    /// signal the next event (libfabric's `fi_trywait` answering 0).
    fn arm(&self) -> Armed;

    /// Sleeps until the armed source signals or about `timeout_ns` nanoseconds passed (an
    /// implementation may shorten it to its own bound). `true` when the source signalled.
    fn sleep(&self, timeout_ns: u64) -> bool;
}

/// Arms `w`, then sleeps on it at most `timeout_ns` when it armed (see the module docs).
pub fn block_idle(w: &dyn IdleWait, timeout_ns: u64) -> Idled {
    // PLANT: IdleSleepsUnarmed — sleep without arming: queued completions never signal.
    let armed = plant!(IdleSleepsUnarmed, Armed::Armed, w.arm());
    match armed {
        Armed::Ready => Idled::Ready,
        Armed::Unavailable => Idled::Unavailable,
        Armed::Armed => Idled::Slept(w.sleep(timeout_ns)),
    }
}

/// A queue's idle wait, wired once its source exists (`None` until then: the driver yields).
/// Unwired, a look costs one load; wired, a reader lock ([`Wired`]).
#[derive(Debug, Default)]
pub struct IdleSlot(Wired<dyn IdleWait>);

impl IdleSlot {
    /// An unwired slot.
    pub const fn new() -> Self {
        Self(Wired::new())
    }

    /// Wires `wait` (`None` unwires), returning the one wired before.
    pub fn wire(&self, wait: Option<PlainArc<dyn IdleWait>>) -> Option<PlainArc<dyn IdleWait>> {
        self.0.wire(wait)
    }

    /// `true` while a wait is wired.
    pub fn is_wired(&self) -> bool {
        self.0.is_wired()
    }

    /// [`block_idle`] on the wired wait; [`Idled::Unavailable`] when none is wired.
    #[inline]
    pub fn block(&self, timeout_ns: u64) -> Idled {
        self.0
            .with(|w| block_idle(w, timeout_ns))
            .unwrap_or(Idled::Unavailable)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
