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

use crate::base::sync::{AtomicBool, AtomicU32, DiagAtomicU32, DiagOrdering, Ordering, PlainArc};
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
/// `arm` and `sleep` are called by the thread that holds the queue's drive token, between
/// ticks: an implementation may rely on no other thread using the transport behind it
/// meanwhile. `kick` comes from any thread.
pub trait IdleWait: Send + Sync {
    /// Arms the source: [`Armed::Armed`] only when nothing is queued and the source will
    /// signal the next event (libfabric's `fi_trywait` answering 0).
    fn arm(&self) -> Armed;

    /// Sleeps until the armed source signals, a [`IdleWait::kick`] comes, or about
    /// `timeout_ns` nanoseconds passed (an implementation may shorten it to its own bound).
    /// `true` when woken (signalled or kicked).
    fn sleep(&self, timeout_ns: u64) -> bool;

    /// Ends the sleep in progress, or the next one, from another thread (an eventfd written).
    /// Default: nothing (the sleep runs to its signal or its bound).
    fn kick(&self) {}
}

/// An idle wait that answers [`Armed::Unavailable`] while its flag is set and is `W`
/// otherwise: a rank whose barrier between processes is pending waits for the other
/// processes' arrivals, which signal no completion descriptor, so its driver yields then
/// instead of sleeping (on Linux the flag is `HostBarrier::waiting`).
pub struct Gated<W> {
    /// The source slept on while the flag is clear.
    pub wait: W,
    /// Set while the source must not be slept on; `None`: never set.
    pub closed: Option<PlainArc<AtomicBool>>,
}

impl<W: IdleWait> IdleWait for Gated<W> {
    fn arm(&self) -> Armed {
        // Relaxed: a stale answer either way costs one yield or one bounded sleep.
        if self
            .closed
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return Armed::Unavailable;
        }
        self.wait.arm()
    }

    fn sleep(&self, timeout_ns: u64) -> bool {
        self.wait.sleep(timeout_ns)
    }

    fn kick(&self) {
        self.wait.kick();
    }
}

/// A shared source is a source.
impl<W: IdleWait + ?Sized> IdleWait for PlainArc<W> {
    fn arm(&self) -> Armed {
        (**self).arm()
    }

    fn sleep(&self, timeout_ns: u64) -> bool {
        (**self).sleep(timeout_ns)
    }

    fn kick(&self) {
        (**self).kick();
    }
}

/// Arms `w`, then, when it armed and `announce` agrees, sleeps on it at most `timeout_ns` (see
/// the module docs). `announce` runs between the arm and the sleep (the queue marks itself
/// sleeping there; `false` cancels the sleep: [`Idled::Ready`]).
pub fn block_idle(w: &dyn IdleWait, timeout_ns: u64, announce: impl FnOnce() -> bool) -> Idled {
    // PLANT: IdleSleepsUnarmed — sleep without arming: queued completions never signal.
    let armed = plant!(IdleSleepsUnarmed, Armed::Armed, w.arm());
    match armed {
        Armed::Ready => Idled::Ready,
        Armed::Unavailable => Idled::Unavailable,
        Armed::Armed if !announce() => Idled::Ready,
        Armed::Armed => Idled::Slept(w.sleep(timeout_ns)),
    }
}

/// [`IdleSlot`]'s word: the driver sleeps on the wait.
const SLEEPING: u32 = 1;
/// [`IdleSlot`]'s word: a kick came since the driver last looked.
const KICKED: u32 = 2;

/// A queue's idle wait, wired once its source exists (`None` until then: the driver yields),
/// and the kick protocol that lets another thread end the driver's sleep
/// ([`IdleSlot::kick`], from every notification of the queue's driver: a submission, a
/// device's host write, a stop).
///
/// One word, changed only by RMW: the driver swaps in `SLEEPING` before it sleeps (a `KICKED`
/// found there cancels the sleep) and swaps in 0 after; a kicker ORs in `KICKED` and kicks the
/// wait only when it found `SLEEPING`. Both sides on one word, so either the driver sees the
/// kick before it sleeps or the kicker sees the sleeper: never neither. Loom model 17
/// (`tests/idle.rs`, second scenario) catches the plant `IdleKickSkipsAwake` (a kicker that
/// decides "awake, nothing to do" on a plain load) as a deadlock.
#[derive(Debug)]
pub struct IdleSlot {
    hook: Wired<dyn IdleWait>,
    word: AtomicU32,
    /// Sleeps taken so far ([`Idled::Slept`]), for the queue's state dump (`idle_sleeps=`);
    /// a diagnostic word, wrapping.
    sleeps: DiagAtomicU32,
}

impl Default for IdleSlot {
    fn default() -> Self {
        Self::new()
    }
}

impl IdleSlot {
    /// An unwired slot.
    pub fn new() -> Self {
        Self {
            hook: Wired::new(),
            word: AtomicU32::new(0),
            sleeps: DiagAtomicU32::new(0),
        }
    }

    /// Wires `wait` (`None` unwires), returning the one wired before.
    pub fn wire(&self, wait: Option<PlainArc<dyn IdleWait>>) -> Option<PlainArc<dyn IdleWait>> {
        self.hook.wire(wait)
    }

    /// `true` while a wait is wired.
    pub fn is_wired(&self) -> bool {
        self.hook.is_wired()
    }

    /// How many times the driver slept on a wired wait so far ([`Idled::Slept`], signalled or
    /// timed out; wraps at 2^32): the state dump's `idle_sleeps=`.
    pub fn sleeps(&self) -> u32 {
        self.sleeps.load(DiagOrdering::Relaxed)
    }

    /// The driver found nothing: [`block_idle`] on the wired wait, with the kick protocol;
    /// [`Idled::Unavailable`] when none is wired.
    #[inline]
    pub fn block(&self, timeout_ns: u64) -> Idled {
        self.hook
            .with(|w| {
                let mut announced = false;
                let r = block_idle(w, timeout_ns, || {
                    announced = true;
                    self.word.swap(SLEEPING, Ordering::AcqRel) & KICKED == 0
                });
                if announced {
                    // Awake again; any kick so far is seen (the caller ticks next).
                    self.word.swap(0, Ordering::AcqRel);
                }
                if let Idled::Slept(_) = r {
                    self.sleeps.fetch_add(1, DiagOrdering::Relaxed);
                }
                r
            })
            .unwrap_or(Idled::Unavailable)
    }

    /// Ends the driver's idle sleep, or its next one (see the type's docs). One RMW; the
    /// wait's kick (a system call) only when the driver sleeps.
    #[inline]
    pub fn kick(&self) {
        if !self.hook.is_wired() {
            return;
        }
        // PLANT: IdleKickSkipsAwake — decide "awake" on a plain load and record nothing: a
        // driver about to mark itself sleeping misses the kick.
        let before = plant!(
            IdleKickSkipsAwake,
            {
                if self.word.load(Ordering::Acquire) & SLEEPING == 0 {
                    return;
                }
                self.word.fetch_or(KICKED, Ordering::AcqRel)
            },
            self.word.fetch_or(KICKED, Ordering::AcqRel)
        );
        if before & SLEEPING != 0 {
            self.hook.with(|w| w.kick());
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
