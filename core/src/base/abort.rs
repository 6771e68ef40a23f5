//! The abort request of a comm: one shared word that any thread may set and the thread that
//! drives the comm applies at its next step (docs/design.md §9, "Abort").
//!
//! A [`Comm`](crate::progress::comm::Comm) is owned by the thread that drives it (`Send`, not
//! `Sync`), so an abort cannot call into it. Instead the comm and every task that carries it
//! share an [`AbortHandle`]: a reference-counted `u32` holding 0 while the comm runs, or the
//! `NRT_STATUS` code its tasks must end with once it is aborted (never 0: success is not an
//! abort reason). The driving thread reads the word with acquire at each task step and at each
//! `start` / `progress` of the comm, and applies it there (the tasks end DONE with the status,
//! the comm's streams are stopped: requests cancelled and drained).
//!
//! ```text
//!   RUNNING(0) ──(1) abort / abort_with(s): the first request, by CAS ──► ABORTED(s)
//!   ABORTED(s) ── a later request changes nothing (answers false) ── ABORTED(s)
//! ```
//! The first request wins (one compare-and-swap from 0), so when a user abort and a failure
//! detector race, every task of the comm ends with one status, and exactly one caller is told
//! it aborted the comm (the one that logs it). Loom model 10 (`loom-tests/tests/abort.rs`),
//! plant `AbortFirstByLoadStore`.
//!
//! Seed: none (the seed has no abort; `nrt_close` waits for the proxy); docs/design.md §9.

use crate::base::status::NrtStatus;
use crate::base::sync::{Arc, AtomicU32, Ordering};

/// A comm's abort request, shared by the comm, its tasks and any thread that may abort it.
///
/// `Clone` shares the word; `Send + Sync`, so [`AbortHandle::abort`] may be called from any
/// thread, at any time, any number of times (only the first counts). Reading it
/// ([`AbortHandle::aborted`]) is one acquire load.
#[derive(Clone, Debug, Default)]
pub struct AbortHandle {
    /// 0 while running, else the status code the comm's tasks end with.
    word: Arc<AtomicU32>,
}

impl AbortHandle {
    /// A handle on a new word (not aborted).
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests an abort: the comm's tasks end `NRT_CLOSED`. Same as
    /// `abort_with(NrtStatus::Closed)`.
    ///
    /// Returns `true` when this call made the request, `false` when the comm was already
    /// aborted (its status is unchanged).
    pub fn abort(&self) -> bool {
        self.abort_with(NrtStatus::Closed)
    }

    /// Requests an abort whose tasks end with `status` (e.g. `NRT_NETWORK_PROXY_FAILURE` from a
    /// failure detector). [`NrtStatus::Success`] is not a reason: it is taken as
    /// [`NrtStatus::Closed`]. The first request wins.
    ///
    /// Returns `true` when this call made the request, `false` when the comm was already
    /// aborted (by this or another thread; the earlier status stays).
    pub fn abort_with(&self, status: NrtStatus) -> bool {
        let code = match status {
            NrtStatus::Success => NrtStatus::Closed.code(),
            s => s.code(),
        };
        // Release: what the requester did before (e.g. its log line, its own state) is visible
        // to the driving thread that acquires the word. One CAS from 0: exactly one request
        // wins, however many race.
        // PLANT: AbortFirstByLoadStore decides "first" on a load and then stores: two racing
        // requests can both win, and the later store replaces the status the driver applied.
        let won = plant!(
            AbortFirstByLoadStore,
            {
                let free = self.word.load(Ordering::Acquire) == 0;
                if free {
                    self.word.store(code, Ordering::Release);
                }
                free
            },
            self.word
                .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        );
        if won {
            log::warn!("abort requested: the comm's tasks end with {status}");
        }
        won
    }

    /// The status the comm's tasks end with, once an abort was requested (`None` while it
    /// runs). One acquire load: the driving thread calls it at every step.
    pub fn aborted(&self) -> Option<NrtStatus> {
        match self.word.load(Ordering::Acquire) {
            0 => None,
            code => Some(NrtStatus::from_code(code).unwrap_or(NrtStatus::Closed)),
        }
    }

    /// `true` when `self` and `other` share one word (the same comm's handle).
    pub fn same_as(&self, other: &AbortHandle) -> bool {
        Arc::ptr_eq(&self.word, &other.word)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
