//! Park / wake: how a quiescent worker (or a consumer waiting for a status record) sleeps
//! without losing a wakeup.
//!
//! The protocol is std's parker, on one state word changed only by read-modify-write
//! (the classic lost-wakeup trap: a check then a sleep loses a wakeup unless both sides
//! change one word by read-modify-write), with one extra state so that the waiter's registration
//! (how to wake it) needs no lock: `EMPTY` / `PARKED` / `NOTIFYING` / `NOTIFIED`.
//!
//! * The waiter ([`WaitCell::park`]) writes its [`Unpark`] handle into the cell while the word
//!   is `EMPTY`, moves `EMPTY → PARKED` (a pending `NOTIFIED` is consumed instead and it returns
//!   at once), re-checks its condition (and, if it now holds, moves `PARKED → EMPTY` and
//!   returns), then blocks in the platform's [`Park::park`] until it can move `NOTIFIED → EMPTY`.
//! * A notifier ([`WaitCell::notify`]) makes its change (a ring push, a state store) and then
//!   changes the word by RMW, always writing: `EMPTY → NOTIFIED`, `NOTIFIED → NOTIFIED`,
//!   `NOTIFYING → NOTIFYING`, or `PARKED → NOTIFYING`; only in the last case does it read the
//!   registration (a clone of the handle), store `NOTIFIED` by RMW and then unpark the waiter.
//!
//! Why no wakeup is lost: every change of the word is an RMW, so waiter and notifiers are
//! totally ordered on it, and each notifier's RMW is a release in the chain the waiter's
//! acquire consumption of `NOTIFIED` reads from, so every notifier's change is visible to the
//! waiter once it returns. If a notifier comes before the waiter's `EMPTY → PARKED`, the waiter
//! finds `NOTIFIED` and does not block. If it comes after, the word is `PARKED` or `NOTIFYING`;
//! whoever took `PARKED → NOTIFYING` unparks after storing `NOTIFIED`, and the platform's park
//! has token semantics, so an unpark that lands before the block still ends it.
//!
//! Why no lock: the registration is written only in `EMPTY` and read only in `NOTIFYING`; the
//! waiter leaves `PARKED` only by `PARKED → EMPTY` (nobody is reading) or by consuming
//! `NOTIFIED` (the reader is done), so the two never overlap. No spin-wait on another thread
//! anywhere, which also keeps the loom models free of spin loops (loom cannot schedule those
//! under a preemption bound). No store→load pattern is involved, so no `SeqCst` fence.
//!
//! Seed: `enc_proxy_queue::cv` (+0x080) `wait` / `append_task`'s `notify_all`, §2; docs/design.md §4.

use alloc::boxed::Box;

use crate::base::sync::{spin_loop, AtomicU32, Ordering, PlainArc, UnsafeCell};
use crate::base::time::Clock;

/// Wakes one particular thread (the platform's half of the protocol).
///
/// Token semantics are required: an `unpark` that happens before the thread blocks makes its
/// next [`Park::park`] return at once (as `std::thread::Thread::unpark` does).
pub trait Unpark: Send + Sync {
    /// Makes the thread's token available and wakes it if it is blocked.
    fn unpark(&self);

    /// A second handle on the same thread.
    fn clone_box(&self) -> Box<dyn Unpark>;

    /// `true` when this handle wakes the calling thread: a waiter that parks again keeps its
    /// registration instead of making a new one (no allocation per park). Default `false`
    /// (always register anew).
    fn is_current(&self) -> bool {
        false
    }
}

/// Blocks the calling thread (the platform's half of the protocol).
pub trait Park {
    /// Blocks until the token is available, then consumes it. May return spuriously: callers
    /// loop and re-check.
    fn park(&self);

    /// A handle that wakes the calling thread (the thread that will call [`Park::park`]).
    fn unparker(&self) -> Box<dyn Unpark>;

    /// [`Park::unparker`] as a shared handle, what a [`WaitCell`] keeps as its registration.
    /// Default: a new one per call (an allocation); a platform may hand out one per thread
    /// instead, so that a thread's first park on another cell allocates nothing.
    fn shared_unparker(&self) -> PlainArc<dyn Unpark> {
        PlainArc::from(self.unparker())
    }

    /// As [`Park::park`], but returns after at most about `timeout_ns` nanoseconds even without
    /// the token (a bounded wait). May return early.
    fn park_timeout(&self, timeout_ns: u64);

    /// Gives the CPU to another runnable thread, if the platform has threads (a caller-driven
    /// loop that found nothing to do). Default: a spin hint (a firmware's main loop).
    fn yield_now(&self) {
        spin_loop();
    }

    /// A tag of the calling thread, unique among the process's threads (never 0), or 0 when
    /// the platform has none. The drive token remembers its holder's tag
    /// (`ProxyQueue::try_drive_as`) so that a request this same thread makes while it holds the
    /// token is not made to wait for itself. Default 0 (a firmware's one main loop).
    fn thread_tag(&self) -> u32 {
        0
    }
}

const EMPTY: u32 = 0;
const PARKED: u32 = 1;
const NOTIFYING: u32 = 2;
const NOTIFIED: u32 = 3;

/// One waiter's wake word: the `EMPTY / PARKED / NOTIFYING / NOTIFIED` protocol of this
/// module.
///
/// At most one thread waits on a cell at a time (the worker on the queue's cell, a slot's owner
/// on the slot's cell); any number of threads may notify.
pub struct WaitCell {
    /// `EMPTY`, `PARKED`, `NOTIFYING` or `NOTIFIED`; changed only by RMW.
    state: AtomicU32,
    /// How to wake the current waiter: written by the waiter in `EMPTY`, read by the notifier
    /// that moved `PARKED → NOTIFYING`.
    /// Shared (reference-counted, never a loom type: not part of the modelled handoff) so that a
    /// notifier can keep the handle past its `NOTIFIED` store while the waiter re-registers.
    unparker: UnsafeCell<Option<PlainArc<dyn Unpark>>>,
}

// SAFETY: `unparker` is written only by the one waiter while the word is EMPTY and read only by
// the one notifier that holds NOTIFYING (module docs), ordered by the AcqRel RMWs on `state`;
// `Box<dyn Unpark>` is Send + Sync.
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
            unparker: UnsafeCell::new(None),
        }
    }

    /// Wakes the waiter: to be called after the change the waiter waits for is made.
    ///
    /// One RMW on the wake word (a CAS loop that retries only when the word changed under it);
    /// the platform's unpark only when the waiter is parked.
    pub fn notify(&self) {
        let mut cur = self.state.load(Ordering::Relaxed);
        // PLANT: WakeNotifySkipsEmpty decides "nobody is parked" on this plain load and skips
        // the RMW: the lost-wakeup trap (the waiter's EMPTY → PARKED and re-check can miss us).
        plant!(WakeNotifySkipsEmpty => {
            if cur == EMPTY {
                return;
            }
        });
        loop {
            let next = match cur {
                PARKED => NOTIFYING,
                EMPTY => NOTIFIED,
                other => other, // NOTIFIED / NOTIFYING: write the same value (join the chain)
            };
            // AcqRel: Release publishes our change to the waiter (its acquire consumption of
            // NOTIFIED reads this RMW chain); Acquire, for PARKED, makes the waiter's
            // registration (released by its EMPTY → PARKED) visible to us.
            match self
                .state
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        if cur != PARKED {
            return;
        }
        // We hold NOTIFYING: the registration is ours to read until we leave it.
        // SAFETY: module docs: the waiter writes `unparker` only in EMPTY, and cannot leave
        // PARKED/NOTIFYING for EMPTY until we store NOTIFIED below.
        let u = self.unparker.with(|p| unsafe { (*p).clone() });
        // AcqRel RMW (not a plain store), so the release chain to the waiter is unbroken.
        self.state.swap(NOTIFIED, Ordering::AcqRel);
        if let Some(u) = u {
            u.unpark();
        }
    }

    /// Blocks the calling thread until [`WaitCell::notify`] is called (a notification that
    /// came before this call counts), unless `ready` answers `true` after the cell is marked
    /// parked (the last re-check of the waiter's condition).
    ///
    /// Returns after one notification (or `ready`); the caller re-checks its condition and calls
    /// again if needed (a notification may be for a change it has already seen).
    pub fn park(&self, park: &dyn Park, ready: impl FnOnce() -> bool) {
        if !self.begin_park(park, ready) {
            return;
        }
        // PARKED, NOTIFYING or NOTIFIED: wait for NOTIFIED and consume it.
        while !self.try_consume() {
            park.park();
        }
    }

    /// The first half of both parks: consumes a pending notification, registers, marks the cell
    /// PARKED and re-checks `ready`. `true`: the caller must block until NOTIFIED (the word is
    /// PARKED, NOTIFYING or NOTIFIED); `false`: it returns at once (the word is EMPTY).
    fn begin_park(&self, park: &dyn Park, ready: impl FnOnce() -> bool) -> bool {
        if self.try_consume() {
            return false;
        }
        // SAFETY: the word is EMPTY or NOTIFIED (we are the only waiter, every park returns in
        // EMPTY, and notifiers move EMPTY only to NOTIFIED), so no notifier reads the
        // registration now (that happens only in NOTIFYING).
        unsafe { self.register(park) };
        // AcqRel on success: Release publishes the registration to the notifier that takes
        // PARKED → NOTIFYING. Acquire on failure: a NOTIFIED that raced in is consumed next.
        // PLANT: WakeParkByPlainStore marks PARKED by a load, a check and a plain store: a
        // NOTIFIED stored in between is overwritten and lost.
        let marked = plant!(
            WakeParkByPlainStore,
            {
                let empty = self.state.load(Ordering::Acquire) == EMPTY;
                if empty {
                    self.state.store(PARKED, Ordering::Release);
                }
                empty
            },
            self.state
                .compare_exchange(EMPTY, PARKED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        );
        if !marked {
            // Only a notifier's EMPTY → NOTIFIED can have intervened.
            let consumed = self.try_consume();
            debug_assert!(consumed);
            return false;
        }
        if ready()
            && self
                .state
                .compare_exchange(PARKED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return false;
        }
        true
    }

    /// [`WaitCell::park`] bounded by `timeout_ns` (`None`: unbounded, as `park`): blocks at most
    /// once for about `timeout_ns`. On a timeout the cell goes back `PARKED → EMPTY`; if a
    /// notifier took `PARKED → NOTIFYING` in between, waits for its `NOTIFIED` (it stores it right
    /// after reading the registration, then unparks us) and consumes it. Returns after a
    /// notification, `ready`, the timeout or a spurious wake-up: the caller re-checks.
    pub fn park_timeout(
        &self,
        park: &dyn Park,
        ready: impl FnOnce() -> bool,
        timeout_ns: Option<u64>,
    ) {
        let Some(timeout_ns) = timeout_ns else {
            return self.park(park, ready);
        };
        if !self.begin_park(park, ready) {
            return;
        }
        if timeout_ns > 0 {
            park.park_timeout(timeout_ns);
        }
        if self.try_consume()
            || self
                .state
                .compare_exchange(PARKED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return;
        }
        // A notifier holds NOTIFYING: its NOTIFIED and unpark follow at once.
        while !self.try_consume() {
            park.park();
        }
    }

    /// Registers the calling thread's unpark handle, keeping the current one when it already
    /// wakes this thread ([`Unpark::is_current`]).
    ///
    /// # Safety
    /// The word is EMPTY or NOTIFIED and the caller is the cell's one waiter (no notifier reads
    /// the registration now).
    unsafe fn register(&self, park: &dyn Park) {
        // SAFETY: the caller's contract: nobody else touches the registration now.
        let current = self
            .unparker
            .with(|p| unsafe { (*p).as_ref().is_some_and(|u| u.is_current()) });
        if !current {
            let me = park.shared_unparker();
            // SAFETY: as above.
            self.unparker.with_mut(|p| unsafe { *p = Some(me) });
        }
    }

    /// Moves `NOTIFIED → EMPTY` (acquire: every notifier's change is visible); `false` if the
    /// word was something else.
    fn try_consume(&self) -> bool {
        self.state
            .compare_exchange(NOTIFIED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }
}

/// How a consumer waits: spin for `spin_ns` (measured on `clock`, and at most
/// [`Waiter::MAX_SPINS`] polls), then park on a [`WaitCell`] until notified.
///
/// docs/design.md §4: "a consumer waiting for it spins for the spin budget and then parks".
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
    /// move cannot make a waiter spin forever). Under loom 2 (real size:
    /// [`Waiter::MAX_SPINS_REAL`]), so the models go through the spin phase into the park phase
    /// in a few steps instead of exhausting their branch budget.
    pub const MAX_SPINS: u32 = if cfg!(loom) { 2 } else { Self::MAX_SPINS_REAL };

    /// Real upper bound on polls in the spin phase.
    pub const MAX_SPINS_REAL: u32 = 1 << 20;

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

/// A [`Park`] as the project's backoff's [`Pause`](crate::base::backoff::Pause): yields with
/// the parker, naps with `park_timeout`, so an unpark ends a nap early (the waiter polls again).
#[derive(Clone, Copy)]
pub struct ParkPause<'a>(pub &'a dyn Park);

impl crate::base::backoff::Pause for ParkPause<'_> {
    fn yield_now(&self) {
        self.0.yield_now();
    }

    fn nap(&self, ns: u64) {
        self.0.park_timeout(ns);
    }
}

/// `std::thread::park` / `Thread::unpark` as a [`Park`]: the parker of every std platform
/// (the Linux runtime's workers and consumers), of the tests and of the models' real-thread
/// runs. Token semantics: an unpark that lands before the park still ends it. Feature `std`.
#[cfg(any(test, feature = "std"))]
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadPark;

/// Wakes one std thread (the [`Unpark`] half of [`ThreadPark`]).
#[cfg(any(test, feature = "std"))]
#[derive(Debug, Clone)]
pub struct ThreadUnpark(pub std::thread::Thread);

#[cfg(any(test, feature = "std"))]
impl Unpark for ThreadUnpark {
    fn unpark(&self) {
        self.0.unpark();
    }

    fn clone_box(&self) -> Box<dyn Unpark> {
        Box::new(self.clone())
    }

    fn is_current(&self) -> bool {
        // Thread ids are never reused within a process.
        self.0.id() == std::thread::current().id()
    }
}

/// A std thread's unpark as a bell (`base::bell`): ends the thread's `park` / `park_timeout`
/// (or makes its next one return at once: token semantics, so a ring is never lost).
#[cfg(any(test, feature = "std"))]
impl crate::base::bell::Bell for ThreadUnpark {
    fn ring(&self) {
        self.0.unpark();
    }
}

#[cfg(any(test, feature = "std"))]
impl Park for ThreadPark {
    fn park(&self) {
        std::thread::park();
    }

    fn park_timeout(&self, timeout_ns: u64) {
        std::thread::park_timeout(core::time::Duration::from_nanos(timeout_ns));
    }

    fn yield_now(&self) {
        std::thread::yield_now();
    }

    fn unparker(&self) -> Box<dyn Unpark> {
        Box::new(ThreadUnpark(std::thread::current()))
    }

    /// One handle per thread, made at the thread's first call (the one allocation) and shared
    /// by every cell it parks on afterwards.
    fn shared_unparker(&self) -> PlainArc<dyn Unpark> {
        std::thread_local!(
            static ME: core::cell::RefCell<Option<PlainArc<dyn Unpark>>> =
                const { core::cell::RefCell::new(None) }
        );
        ME.with(|me| {
            me.borrow_mut()
                .get_or_insert_with(|| PlainArc::new(ThreadUnpark(std::thread::current())))
                .clone()
        })
    }

    /// A number per thread, from a process-wide counter at the thread's first call (never 0;
    /// unique until 2^32 - 1 threads have asked).
    fn thread_tag(&self) -> u32 {
        // A diagnostic-kind word (never loom's): a counter that hands nothing over.
        static NEXT: crate::base::sync::DiagAtomicU32 = crate::base::sync::DiagAtomicU32::new(1);
        std::thread_local!(static TAG: core::cell::Cell<u32> = const { core::cell::Cell::new(0) });
        TAG.with(|t| {
            if t.get() == 0 {
                let mut tag = NEXT.fetch_add(1, crate::base::sync::DiagOrdering::Relaxed);
                if tag == 0 {
                    tag = NEXT.fetch_add(1, crate::base::sync::DiagOrdering::Relaxed);
                }
                t.set(tag);
            }
            t.get()
        })
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

    fn clone_box(&self) -> Box<dyn Unpark> {
        Box::new(LoomUnpark(self.0.clone()))
    }
}

#[cfg(loom)]
impl Park for LoomPark {
    fn park(&self) {
        loom::thread::park();
    }

    /// loom has no timed park: the models use no deadlines, so this parks (token semantics).
    fn park_timeout(&self, _timeout_ns: u64) {
        loom::thread::park();
    }

    fn yield_now(&self) {
        loom::thread::yield_now();
    }

    fn unparker(&self) -> Box<dyn Unpark> {
        Box::new(LoomUnpark(loom::thread::current()))
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
