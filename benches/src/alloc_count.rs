//! A counting global allocator: live bytes, bytes ever allocated and allocation calls, over
//! the system allocator. A bench binary installs it with
//! `#[global_allocator] static A: CountingAlloc = CountingAlloc::new();` and reads
//! [`CountingAlloc::snapshot`] before and after building what it measures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting (all counters relaxed: read them from the thread that did
/// the allocations, or after joining the threads that did).
#[derive(Debug)]
pub struct CountingAlloc {
    live: AtomicU64,
    total: AtomicU64,
    calls: AtomicU64,
}

/// The counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocSnapshot {
    /// Bytes allocated and not yet freed (requested sizes, not the allocator's rounding).
    pub live: u64,
    /// Bytes ever allocated (a `realloc` counts its new size).
    pub total: u64,
    /// `alloc`, `alloc_zeroed` and `realloc` calls.
    pub calls: u64,
}

impl AllocSnapshot {
    /// `self - earlier`, counter by counter (live bytes may go down: signed).
    pub fn since(&self, earlier: &AllocSnapshot) -> (i64, u64, u64) {
        (
            self.live as i64 - earlier.live as i64,
            self.total - earlier.total,
            self.calls - earlier.calls,
        )
    }
}

impl CountingAlloc {
    /// A fresh allocator with zero counters.
    pub const fn new() -> Self {
        Self {
            live: AtomicU64::new(0),
            total: AtomicU64::new(0),
            calls: AtomicU64::new(0),
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> AllocSnapshot {
        AllocSnapshot {
            live: self.live.load(Ordering::Relaxed),
            total: self.total.load(Ordering::Relaxed),
            calls: self.calls.load(Ordering::Relaxed),
        }
    }

    fn added(&self, size: usize) {
        self.live.fetch_add(size as u64, Ordering::Relaxed);
        self.total.fetch_add(size as u64, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

impl Default for CountingAlloc {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged (so the
// `GlobalAlloc` contract is `System`'s) and only adds relaxed counter updates.
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
        self.live.fetch_sub(layout.size() as u64, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            self.live.fetch_sub(layout.size() as u64, Ordering::Relaxed);
            self.added(new_size);
        }
        p
    }
}
