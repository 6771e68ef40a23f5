//! A value handed from one thread to another once, with a bounded wait for it ([`OneShot`]):
//! the outcome of a launch that a library thread runs (`nrt_proxy_host_device_start` /
//! `nrt_proxy_host_device_wait` in `proxy-driver-ffi`).
//!
//! ```text
//!   setter:  value = v  ──(1) ready: store true, Release──►  notify the cell
//!   waiter:  ready? (Acquire) ── yes ──► read value
//!              │ no
//!              └──(2) park on the cell, re-checking ready; bounded by the deadline ──► ready?
//! ```
//! The value is written before `ready` (release) and read only after `ready` was seen
//! (acquire). The waiter parks on a [`WaitCell`], whose park re-checks `ready` after it
//! registers, so a `set` between the waiter's look and its park is never lost (loom model 15,
//! `loom-tests/tests/oneshot.rs`, plants `OneShotNotifyBeforeReady` and `OneShotReadyRelaxed`).
//! One waiter parks at a time (the cell's contract): a second concurrent waiter polls with
//! the project's backoff instead.
//!
//! Seed: none (the seed's launches run on the device); docs/design.md §8.

use crate::base::backoff::{Backoff, BackoffPolicy};
use crate::base::sync::{AtomicBool, Ordering, UnsafeCell};
use crate::base::time::Clock;
use crate::driver::wake::{Park, ParkPause, WaitCell};

/// A value set once by one thread and waited for by others (module docs).
pub struct OneShot<T> {
    /// Written once, by the setter, before `ready`; read only after `ready` was seen.
    value: UnsafeCell<Option<T>>,
    /// `true` once `value` holds the value (release by the setter, acquire by readers).
    ready: AtomicBool,
    /// Set while a waiter parks on `cell` (only one may).
    parked: AtomicBool,
    /// The waiter parks here; `set` notifies it.
    cell: WaitCell,
}

// SAFETY: `value` is written by the one setter before `ready` is released and only read after
// `ready` is acquired, never written again; so sharing
// the cell is as safe as sharing a `T` that is `Send + Sync`.
unsafe impl<T: Send + Sync> Sync for OneShot<T> {}
// SAFETY: the cell owns its value; moving it moves the value.
unsafe impl<T: Send> Send for OneShot<T> {}

impl<T> core::fmt::Debug for OneShot<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OneShot")
            .field("ready", &self.ready.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<T: Clone> Default for OneShot<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// How a waiter that may not park (another one does) polls.
const POLL_BACKOFF: BackoffPolicy = BackoffPolicy {
    spins: 64,
    yields: 256,
    nap_ns: 50_000,
    max_nap_ns: 1_000_000,
};

impl<T: Clone> OneShot<T> {
    /// An empty cell.
    pub fn new() -> Self {
        Self {
            value: UnsafeCell::new(None),
            ready: AtomicBool::new(false),
            parked: AtomicBool::new(false),
            cell: WaitCell::new(),
        }
    }

    /// Stores `v` and wakes the waiter (edge 1). The cell's one setter calls it once; a second
    /// call is refused (`false`, nothing changes).
    pub fn set(&self, v: T) -> bool {
        if self.ready.load(Ordering::Acquire) {
            return false;
        }
        // PLANT: OneShotNotifyBeforeReady wakes the waiter before the value is ready, and not
        // after: a waiter that looks, finds nothing and parks again sleeps past the set (a lost
        // wake-up).
        plant!(OneShotNotifyBeforeReady => {
            self.cell.notify();
            // SAFETY: as below.
            self.value.with_mut(|p| unsafe { *p = Some(v) });
            self.ready.store(true, Ordering::Release);
            return true;
        });
        // SAFETY: the one setter writes before `ready` is released; no reader reads before it
        // has acquired `ready`, and `ready` was false above, so no reader reads now.
        self.value.with_mut(|p| unsafe { *p = Some(v) });
        // PLANT: OneShotReadyRelaxed publishes `ready` with Relaxed: a reader that sees it may
        // read the value before its write is visible.
        let order = plant!(OneShotReadyRelaxed, Ordering::Relaxed, Ordering::Release);
        self.ready.store(true, order);
        self.cell.notify();
        true
    }

    /// The value, once set (non-blocking).
    pub fn get(&self) -> Option<T> {
        if !self.ready.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: `ready` was acquired: the setter's write is visible and it writes no more.
        self.value.with(|p| unsafe { (*p).clone() })
    }

    /// Waits for the value at most `timeout_ns` (`None`: unbounded), parking with `park`
    /// between looks (edge 2); `None` when the time passed first. `clock` measures the wait.
    pub fn wait(&self, park: &dyn Park, clock: &dyn Clock, timeout_ns: Option<u64>) -> Option<T> {
        let deadline = timeout_ns.map(|t| clock.now_ns().saturating_add(t));
        let left = |clock: &dyn Clock| deadline.map(|d| d.saturating_sub(clock.now_ns()));
        // Only one waiter parks on the cell; another polls.
        if self
            .parked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            let mut backoff = Backoff::new(POLL_BACKOFF);
            loop {
                if let Some(v) = self.get() {
                    return Some(v);
                }
                match left(clock) {
                    Some(0) => return None,
                    l => {
                        backoff.pause_at_most(&ParkPause(park), l.unwrap_or(u64::MAX));
                    }
                }
            }
        }
        let got = loop {
            if let Some(v) = self.get() {
                break Some(v);
            }
            let l = left(clock);
            if l == Some(0) {
                break None;
            }
            self.cell
                .park_timeout(park, || self.ready.load(Ordering::Acquire), l);
        };
        self.parked.store(false, Ordering::Release);
        got
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
