//! A counting global allocator for the test and bench binaries: the system allocator with
//! counters, so that a binary can assert "nothing allocated" or "no heap growth" over a stretch
//! of its own code. A binary installs it with
//! `#[global_allocator] static ALLOC: CountingAlloc = CountingAlloc::new();` (one per binary:
//! the counts are process-wide, so such a binary holds one test, or serializes its tests).
//!
//! Three kinds of counts:
//! * **live bytes** (allocated minus freed, requested sizes) and **totals** (bytes ever
//!   allocated, allocation calls): [`CountingAlloc::snapshot`], for the soak tests (heap flat
//!   over many cycles) and the scale bench (bytes per queue and task);
//! * **armed calls**: `alloc`, `alloc_zeroed` and `realloc` calls made while armed, for the
//!   allocation-free tests. Armed on every thread ([`CountingAlloc::arm_all_threads`], when the
//!   code under test runs on worker and device threads) or on the calling thread only
//!   ([`CountingAlloc::arm_this_thread`], when it runs on the test's thread and the harness's
//!   own threads must not count).
//!
//! Every counter is a relaxed atomic updated inside the allocator (no allocation, no lock);
//! read them after the threads that allocated have been joined or have handed their results
//! over (e.g. through a channel), or from the allocating thread itself.
//!
//! Seed: none (test infrastructure).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

std::thread_local! {
    /// This thread is armed ([`CountingAlloc::arm_this_thread`]).
    static ARMED_HERE: Cell<bool> = const { Cell::new(false) };
}

/// `true` on an armed thread (never during its thread-local teardown).
fn armed_here() -> bool {
    ARMED_HERE.try_with(Cell::get).unwrap_or(false)
}

/// The system allocator, counting (module docs).
#[derive(Debug)]
pub struct CountingAlloc {
    live: AtomicI64,
    total: AtomicU64,
    calls: AtomicU64,
    armed_all: AtomicBool,
    armed_calls: AtomicU64,
}

/// The counters at one moment ([`CountingAlloc::snapshot`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocSnapshot {
    /// Bytes allocated and not yet freed (requested sizes, not the allocator's rounding);
    /// negative when memory allocated before the counting began was freed.
    pub live: i64,
    /// Bytes ever allocated (a `realloc` counts its new size).
    pub total: u64,
    /// `alloc`, `alloc_zeroed` and `realloc` calls.
    pub calls: u64,
}

impl AllocSnapshot {
    /// `self - earlier`, counter by counter: `(live bytes, bytes allocated, calls)` (live bytes
    /// may go down: signed).
    pub fn since(&self, earlier: &AllocSnapshot) -> (i64, u64, u64) {
        (
            self.live - earlier.live,
            self.total - earlier.total,
            self.calls - earlier.calls,
        )
    }
}

impl CountingAlloc {
    /// An allocator with zero counters, disarmed.
    pub const fn new() -> Self {
        Self {
            live: AtomicI64::new(0),
            total: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            armed_all: AtomicBool::new(false),
            armed_calls: AtomicU64::new(0),
        }
    }

    /// The live-byte and total counters now.
    pub fn snapshot(&self) -> AllocSnapshot {
        AllocSnapshot {
            live: self.live.load(Ordering::SeqCst),
            total: self.total.load(Ordering::SeqCst),
            calls: self.calls.load(Ordering::SeqCst),
        }
    }

    /// Bytes allocated and not yet freed, every thread.
    pub fn live_bytes(&self) -> i64 {
        self.live.load(Ordering::SeqCst)
    }

    /// Arms (or disarms) the armed-call count on every thread.
    pub fn arm_all_threads(&self, on: bool) {
        self.armed_all.store(on, Ordering::SeqCst);
    }

    /// Arms (or disarms) the armed-call count on the calling thread only (of every
    /// `CountingAlloc`: the flag is the thread's).
    pub fn arm_this_thread(on: bool) {
        ARMED_HERE.with(|a| a.set(on));
    }

    /// Allocation calls (`alloc`, `alloc_zeroed`, `realloc`) counted while armed.
    pub fn armed_calls(&self) -> u64 {
        self.armed_calls.load(Ordering::SeqCst)
    }

    /// Returns [`Self::armed_calls`] and sets it to 0.
    pub fn take_armed_calls(&self) -> u64 {
        self.armed_calls.swap(0, Ordering::SeqCst)
    }

    fn added(&self, size: usize) {
        self.live.fetch_add(size as i64, Ordering::Relaxed);
        self.total.fetch_add(size as u64, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        if self.armed_all.load(Ordering::Relaxed) || armed_here() {
            self.armed_calls.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Default for CountingAlloc {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged (so the
// `GlobalAlloc` contract is `System`'s) and only adds atomic counter updates and a
// thread-local read (a const-initialized `Cell`, which never allocates).
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is; the caller upholds `alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            self.added(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            self.added(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) };
        self.live.fetch_sub(layout.size() as i64, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            self.live
                .fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
            self.total.fetch_add(new_size as u64, Ordering::Relaxed);
            self.calls.fetch_add(1, Ordering::Relaxed);
            if self.armed_all.load(Ordering::Relaxed) || armed_here() {
                self.armed_calls.fetch_add(1, Ordering::Relaxed);
            }
        }
        p
    }
}

#[cfg(test)]
mod tests;
