//! Park / wake: how a quiescent worker (or a consumer waiting for a status record) sleeps
//! without losing a wakeup.
//!
//! The protocol is std's parker, on one state word changed only by read-modify-write
//! (STYLE.md, "the lost-wakeup trap"): `EMPTY` / `PARKED` / `NOTIFIED`.
//!
//! * The waiter ([`WaitCell::park`]) registers how to wake it, moves `EMPTY → PARKED` with a
//!   compare-exchange (a pending `NOTIFIED` is consumed instead and the waiter returns at once),
//!   re-checks its condition, and then blocks in the platform's [`Park::park`] until the word
//!   reads `NOTIFIED`, which it moves back to `EMPTY`.
//! * The notifier ([`WaitCell::notify`]) makes its change (a ring push, a state store) and then
//!   swaps the word to `NOTIFIED`; only when the swap returns `PARKED` does it call the
//!   waiter's [`Unpark::unpark`] (the syscall is skipped while the waiter is awake).
//!
//! Why no wakeup is lost: both sides change the one word by RMW, so they are totally ordered on
//! it. If the notifier's swap comes first, the waiter's compare-exchange fails on `NOTIFIED`
//! (acquire: it then sees the notifier's change) and the waiter does not block. If the waiter's
//! compare-exchange comes first, the swap returns `PARKED` and the notifier unparks; the
//! platform's park has token semantics, so an unpark that lands before the block still ends it.
//! No store→load pattern is involved, so no `SeqCst` fence is needed (and loom, which models
//! SeqCst accesses as AcqRel, checks exactly this code).
//!
//! Seed: `enc_proxy_queue::cv` (+0x080) `wait` / `append_task`'s `notify_all`, §2; DESIGN.md §4.

use alloc::boxed::Box;

use crate::sync::{spin_loop, AtomicBool, AtomicU32, Ordering, UnsafeCell};
use crate::time::Clock;

/// Wakes one particular thread (the platform's half of the protocol).
///
/// Token semantics are required: an `unpark` that happens before the thread blocks makes its
/// next [`Park::park`] return at once (as `std::thread::Thread::unpark` does).
pub trait Unpark: Send + Sync {
    /// Makes the thread's token available and wakes it if it is blocked.
    fn unpark(&self);
}

/// Blocks the calling thread (the platform's half of the protocol).
pub trait Park {
    /// Blocks until the token is available, then consumes it. May return spuriously: callers
    /// loop and re-check.
    fn park(&self);

    /// A handle that wakes the calling thread (the thread that will call [`Park::park`]).
    fn unparker(&self) -> Box<dyn Unpark>;
}

const EMPTY: u32 = 0;
const PARKED: u32 = 1;
const NOTIFIED: u32 = 2;

/// One waiter's wake word: the `EMPTY / PARKED / NOTIFIED` protocol of this module.
///
/// At most one thread waits on a cell at a time (the worker on the queue's cell, a slot's owner
/// on the slot's cell); any number of threads may notify.
pub struct WaitCell {
    /// `EMPTY`, `PARKED` or `NOTIFIED`; changed only by RMW.
    state: AtomicU32,
    /// Guards `unparker` (held for a handful of instructions, or one unpark call).
    lock: AtomicBool,
    /// How to wake the current waiter; written by the waiter before it moves to `PARKED`.
    unparker: UnsafeCell<Option<Box<dyn Unpark>>>,
}

// SAFETY: `unparker` is only accessed under `lock` (acquire/release), and `Box<dyn Unpark>` is
// Send + Sync; the state word is atomic.
unsafe impl Send for WaitCell {}
// SAFETY: as above.
unsafe impl Sync for WaitCell {}

impl core::fmt::Debug for WaitCell {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WaitCell")
            .field("state", &self.state.load(Ordering::Relaxed))
            .finish()
    }
}

impl Default for WaitCell {
    fn default() -> Self {
        Self::new()
    }
}

impl WaitCell {
    /// An empty cell (no waiter, no pending notification).
    pub fn new() -> Self {
        Self {
            state: AtomicU32::new(EMPTY),
            lock: AtomicBool::new(false),
            unparker: UnsafeCell::new(None),
        }
    }

    fn with_unparker<R>(&self, f: impl FnOnce(&mut Option<Box<dyn Unpark>>) -> R) -> R {
        // Acquire: the previous holder's writes to `unparker` are visible to us.
        while self.lock.swap(true, Ordering::Acquire) {
            spin_loop();
        }
        // SAFETY: we hold `lock`, so no other access to `unparker` overlaps this one.
        let r = self.unparker.with_mut(|p| f(unsafe { &mut *p }));
        // Release: our writes to `unparker` happen-before the next holder's reads.
        self.lock.store(false, Ordering::Release);
        r
    }

    /// Wakes the waiter: to be called after the change the waiter waits for is made.
    ///
    /// Always one atomic swap; the platform's unpark only when the waiter is parked.
    pub fn notify(&self) {
        // AcqRel: Release publishes our change to a waiter that reads NOTIFIED; Acquire pairs
        // with the waiter's release on PARKED, so its unparker registration is visible.
        if self.state.swap(NOTIFIED, Ordering::AcqRel) == PARKED {
            self.with_unparker(|u| {
                if let Some(u) = u.as_ref() {
                    u.unpark();
                }
            });
        }
    }

    /// Blocks the calling thread until [`WaitCell::notify`] is called (a notification that
    /// came before this call counts), unless `ready` answers `true` after the cell is marked
    /// parked (the last re-check of the waiter's condition).
    ///
    /// Returns after one notification (or `ready`); the caller re-checks its condition and calls
    /// again if needed (a notification may be for a change it has already seen).
    pub fn park(&self, park: &dyn Park, ready: impl FnOnce() -> bool) {
        let me = park.unparker();
        self.with_unparker(|u| *u = Some(me));
        // AcqRel on success: Release publishes the registration to a notifier's swap. Acquire
        // on failure: a pending NOTIFIED's change is visible to us.
        if self
            .state
            .compare_exchange(EMPTY, PARKED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // NOTIFIED: consume it and return.
            self.state.swap(EMPTY, Ordering::Acquire);
            return;
        }
        if ready() {
            // Leave PARKED; a notification that raced in is consumed (its change is already
            // seen or will be by the caller's re-check).
            self.state.swap(EMPTY, Ordering::Acquire);
            return;
        }
        loop {
            park.park();
            // Acquire: the notifier's change is visible once we consume NOTIFIED.
            if self
                .state
                .compare_exchange(NOTIFIED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            // Spurious return (or an old token): still PARKED, block again.
        }
    }
}

/// How a consumer waits: spin for `spin_ns` (measured on `clock`, and at most
/// [`Waiter::MAX_SPINS`] polls), then park on a [`WaitCell`] until notified.
///
/// DESIGN.md §4: "a consumer waiting for it spins for the spin budget and then parks".
pub struct Waiter<'a> {
    /// The calling thread's parker.
    pub park: &'a dyn Park,
    /// The clock that measures the spin budget.
    pub clock: &'a dyn Clock,
    /// Spin budget in nanoseconds (0: park at once).
    pub spin_ns: u64,
}

impl core::fmt::Debug for Waiter<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Waiter")
            .field("spin_ns", &self.spin_ns)
            .finish()
    }
}

impl Waiter<'_> {
    /// Upper bound on polls in the spin phase, whatever the clock says (a clock that does not
    /// move cannot make a waiter spin forever).
    pub const MAX_SPINS: u32 = 1 << 20;

    /// Polls `poll` until it yields a value: spins first, then parks on `cell` between polls.
    /// Whoever makes `poll` succeed must call [`WaitCell::notify`] on `cell` afterwards.
    pub fn wait_on<T>(&self, cell: &WaitCell, mut poll: impl FnMut() -> Option<T>) -> T {
        if self.spin_ns > 0 {
            let start = self.clock.now_ns();
            let mut spins = 0u32;
            loop {
                if let Some(v) = poll() {
                    return v;
                }
                spins += 1;
                if spins >= Self::MAX_SPINS
                    || (spins.is_multiple_of(64)
                        && self.clock.now_ns().saturating_sub(start) >= self.spin_ns)
                {
                    break;
                }
                spin_loop();
            }
        }
        loop {
            if let Some(v) = poll() {
                return v;
            }
            let mut got = None;
            cell.park(self.park, || {
                got = poll();
                got.is_some()
            });
            if let Some(v) = got {
                return v;
            }
        }
    }
}

/// loom's park/unpark as a [`Park`] (only under `--cfg loom`), for the loom models.
#[cfg(loom)]
#[derive(Debug, Default, Clone, Copy)]
pub struct LoomPark;

#[cfg(loom)]
struct LoomUnpark(loom::thread::Thread);

#[cfg(loom)]
impl Unpark for LoomUnpark {
    fn unpark(&self) {
        self.0.unpark();
    }
}

#[cfg(loom)]
impl Park for LoomPark {
    fn park(&self) {
        loom::thread::park();
    }

    fn unparker(&self) -> Box<dyn Unpark> {
        Box::new(LoomUnpark(loom::thread::current()))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::time::NoClock;
    use core::cell::Cell;

    /// A parker for single-threaded tests: `park` panics unless a token is present.
    #[derive(Default)]
    struct TokenPark {
        token: alloc::sync::Arc<AtomicBool>,
    }
    struct TokenUnpark(alloc::sync::Arc<AtomicBool>);
    impl Unpark for TokenUnpark {
        fn unpark(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    impl Park for TokenPark {
        fn park(&self) {
            assert!(
                self.token.swap(false, Ordering::SeqCst),
                "would block forever"
            );
        }
        fn unparker(&self) -> Box<dyn Unpark> {
            Box::new(TokenUnpark(self.token.clone()))
        }
    }

    #[test]
    fn notification_before_park_is_not_lost() {
        let c = WaitCell::new();
        let p = TokenPark::default();
        c.notify();
        c.park(&p, || false); // returns at once: NOTIFIED was pending
        assert_eq!(c.state.load(Ordering::SeqCst), EMPTY);
    }

    #[test]
    fn ready_recheck_skips_the_block() {
        let c = WaitCell::new();
        let p = TokenPark::default();
        c.park(&p, || true);
        assert_eq!(c.state.load(Ordering::SeqCst), EMPTY);
    }

    #[test]
    fn waiter_spins_then_parks() {
        let c = WaitCell::new();
        let p = TokenPark::default();
        let n = Cell::new(0);
        let w = Waiter {
            park: &p,
            clock: &NoClock,
            spin_ns: 1,
        };
        // Notify up front so the park phase returns; the poll succeeds after the spin phase.
        c.notify();
        let v = w.wait_on(&c, || {
            n.set(n.get() + 1);
            (n.get() > Waiter::MAX_SPINS + 1).then_some(5)
        });
        assert_eq!(v, 5);
    }
}
