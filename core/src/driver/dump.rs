//! The state dump of a proxy queue (docs/design.md §6, "State dump"): its request word, the
//! driving thread's activity word, the reasons and outcomes, and the line writers.
//!
//! The live state of a queue (its active tasks, their comms, the driver ends of the rings)
//! belongs to the thread that drives it, so a dump asked for by another thread (an API call, a
//! signal's watcher thread) is never read from there. The requester bumps the queue's request
//! word ([`DumpRequests::request`], any thread, any number of times) and wakes the driver; the
//! driving thread serves it at its next tick ([`DumpRequests::serve`]: reads the request count,
//! writes the dump, then publishes the count it read as written). A requester waits, bounded,
//! until the written count reaches its ticket; when the driving thread does not answer in time
//! (a stuck driver is exactly what one wants to see), the requester writes the part it can read
//! without it: slot states, ring occupancy, the drive-token word, the activity word
//! (`ProxyQueue::dump_until`).
//!
//! ```text
//!   requested ──(1) request: fetch_add, release ──► requested+1      (any thread)
//!   written   ──(2) serve: load requested (acquire) = r; dump; store r (release) ──► r
//!                                                                     (the driving thread)
//!   a ticket t is answered once written - t ≥ 0 (wrapping): by a dump that began after it
//! ```
//! Requests that arrive together are answered by one dump. Loom model 12
//! (`loom-tests/tests/dump.rs`), plant `DumpServedReadAfterDump`.
//!
//! Format: one line per object, `proxy-dump queue=<id> ...`, `key=value` fields separated by
//! single spaces, no spaces inside a value; the lines of a task carry `slot=` and `task=`, the
//! lines of its comm `comm=` (and `stream=`, `op=`), so `grep 'queue=3 slot=0 task=12'` picks one
//! task. A dump ends with `proxy-dump queue=<id> end lines=<n>`. Written to the `log` facade at
//! error level with target [`DUMP_TARGET`](crate::base::dump_lines::DUMP_TARGET), one record per
//! line.
//!
//! Seed: none (the seed has no dump); docs/design.md §6.

use crate::base::sync::{AtomicU32, DiagAtomicU32, DiagOrdering, Ordering};

/// Why a dump is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpReason {
    /// Asked for ([`DumpRequests::request`]: an API call or a signal).
    Request,
    /// A task is about to end `NRT_TIMEOUT` (written before it ends, with the task still live).
    Timeout,
    /// A task ended with a failure (any status but success, `NRT_CLOSED` and `NRT_TIMEOUT`).
    Failure,
    /// Written by a requester without the driving thread, which did not answer in time.
    NotAnswered,
    /// Written by a requester: the queue's driver is gone (its worker exited).
    DriverGone,
}

impl DumpReason {
    /// The `reason=` value.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Timeout => "timeout",
            Self::Failure => "failure",
            Self::NotAnswered => "not-answered",
            Self::DriverGone => "driver-gone",
        }
    }
}

/// What a bounded dump request ended with (`ProxyQueue::dump_until`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpOutcome {
    /// The driving thread wrote the dump (or the requester, holding a caller-mode queue's free
    /// drive token, wrote the whole dump itself).
    Written,
    /// The driving thread did not answer before the deadline: the requester wrote what it can
    /// read without it (`reason=not-answered`).
    NotAnswered,
    /// The queue has no driver any more: the requester wrote what it can read
    /// (`reason=driver-gone`).
    DriverGone,
}

/// The request word of a queue's dump: two counters (see the module docs).
#[derive(Debug, Default)]
pub struct DumpRequests {
    /// Requests made so far (wrapping).
    requested: AtomicU32,
    /// The request count the last dump served (written by the driving thread only).
    written: AtomicU32,
}

impl DumpRequests {
    /// No request.
    pub fn new() -> Self {
        Self {
            requested: AtomicU32::new(0),
            written: AtomicU32::new(0),
        }
    }

    /// Asks for a dump; returns the ticket that [`DumpRequests::answered`] checks. Any thread.
    pub fn request(&self) -> u32 {
        // Release: what the requester did before (its view of the queue, e.g. a join) is
        // visible to the dump that reads this count with acquire.
        self.requested
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1)
    }

    /// `true` while a request is not served (two loads; the driving thread uses
    /// [`DumpRequests::pending_since`] with its own copy of the written count: one load).
    pub fn pending(&self) -> bool {
        self.requested.load(Ordering::Relaxed) != self.written.load(Ordering::Relaxed)
    }

    /// `true` while a request made after the dump that served `served` is pending: one load
    /// (the driving thread keeps `served`, the count its last [`DumpRequests::serve`] wrote,
    /// and it travels with the drive token).
    pub fn pending_since(&self, served: u32) -> bool {
        self.requested.load(Ordering::Relaxed) != served
    }

    /// `true` once a dump that began after the request of `ticket` was written.
    pub fn answered(&self, ticket: u32) -> bool {
        // Acquire: pairs with the serving store, so the dump's lines were written before.
        (self.written.load(Ordering::Acquire).wrapping_sub(ticket) as i32) >= 0
    }

    /// The two counters `(requested, written)`, for a dump's header.
    pub fn counts(&self) -> (u32, u32) {
        (
            self.requested.load(Ordering::Relaxed),
            self.written.load(Ordering::Relaxed),
        )
    }

    /// Serves the pending requests, if any: reads the request count (acquire; one load when
    /// nothing is pending), runs `dump`, then publishes that count as written (release) and
    /// keeps it in `served` (the caller's copy of the written count: 0 for a new word). Only
    /// the driving thread calls it (the holder of the queue's drive token, which carries
    /// `served`). Returns `true` when it dumped.
    pub fn serve(&self, served: &mut u32, dump: impl FnOnce()) -> bool {
        // PLANT: DumpServedReadAfterDump reads the request count after the dump: a request that
        // arrives while the dump is written is marked answered by a dump that began before it.
        let count = plant!(
            DumpServedReadAfterDump,
            {
                if !self.pending_since(*served) {
                    return false;
                }
                dump();
                self.requested.load(Ordering::Acquire)
            },
            {
                let r = self.requested.load(Ordering::Acquire);
                if r == *served {
                    return false;
                }
                dump();
                r
            }
        );
        self.written.store(count, Ordering::Release);
        *served = count;
        true
    }
}

/// What the driving thread of a queue is doing, as far as it says (a diagnostic word: written
/// only by the driving thread, only on change, read `Relaxed` by a dump; it hands nothing over).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverActivity {
    /// No thread drives the queue (caller mode, token free; or before the worker's first tick).
    Undriven = 0,
    /// In a tick (stepping tasks).
    Ticking = 1,
    /// Between ticks with nothing moving, spinning (the worker's spin budget, or
    /// `one_thread_per_core`).
    Spinning = 2,
    /// Between ticks with nothing moving, yielding the CPU.
    Yielding = 3,
    /// Parked until a submission, join, leave, stop or dump request wakes it.
    Parked = 4,
    /// The worker has exited.
    Exited = 5,
    /// Between ticks with nothing moving, asleep for a bounded nap until a bell (a device's
    /// host write, an in-memory message), a submission or a stop wakes it.
    Napping = 6,
}

impl DriverActivity {
    /// The `driver=` value.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Undriven => "undriven",
            Self::Ticking => "ticking",
            Self::Spinning => "spinning",
            Self::Yielding => "yielding",
            Self::Parked => "parked",
            Self::Exited => "exited",
            Self::Napping => "napping",
        }
    }

    fn from_u32(v: u32) -> Self {
        match v {
            1 => Self::Ticking,
            2 => Self::Spinning,
            3 => Self::Yielding,
            4 => Self::Parked,
            5 => Self::Exited,
            6 => Self::Napping,
            _ => Self::Undriven,
        }
    }
}

/// The activity word (see [`DriverActivity`]).
#[derive(Debug, Default)]
pub struct ActivityWord(DiagAtomicU32);

impl ActivityWord {
    /// Sets `a` (a load first: the store only on change, so the word's line stays shared).
    #[inline]
    pub fn set(&self, a: DriverActivity) {
        if self.0.load(DiagOrdering::Relaxed) != a as u32 {
            self.0.store(a as u32, DiagOrdering::Relaxed);
        }
    }

    /// The last activity set.
    pub fn get(&self) -> DriverActivity {
        DriverActivity::from_u32(self.0.load(DiagOrdering::Relaxed))
    }
}

/// A process-unique queue id for dump lines (`queue=<id>`), from 0.
pub(crate) fn next_queue_id() -> u32 {
    static NEXT: DiagAtomicU32 = DiagAtomicU32::new(0);
    NEXT.fetch_add(1, DiagOrdering::Relaxed)
}

#[cfg(all(test, not(loom)))]
mod tests;
