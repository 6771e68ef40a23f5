//! The static heap: `embedded-alloc`'s linked-list first-fit allocator over a `static` array,
//! wrapped to count the bytes in use and their high-water mark (32-bit atomics only).

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicUsize, Ordering};

use embedded_alloc::LlffHeap;

/// Bytes of the heap (in `.bss`): room for the two runs with a wide margin (the summary prints
/// the high-water mark).
pub const HEAP_BYTES: usize = 512 * 1024;

/// The heap's memory.
struct Arena(UnsafeCell<[MaybeUninit<u8>; HEAP_BYTES]>);

// SAFETY: the arena is handed to the allocator once (`init`) and only the allocator touches it
// afterwards, inside its critical sections.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(UnsafeCell::new([MaybeUninit::uninit(); HEAP_BYTES]));

/// The allocator with its counters.
pub struct CountingHeap {
    heap: LlffHeap,
    /// Bytes requested and not freed.
    used: AtomicUsize,
    /// The largest `used` seen.
    peak: AtomicUsize,
}

impl CountingHeap {
    /// An empty heap: [`CountingHeap::init`] must run before the first allocation.
    pub const fn empty() -> Self {
        Self {
            heap: LlffHeap::empty(),
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// Hands [`ARENA`] to the allocator.
    ///
    /// # Panics
    /// When called twice (embedded-alloc's check).
    pub fn init(&self) {
        // SAFETY: `ARENA` is a static of `HEAP_BYTES` bytes that nothing else uses; the
        // allocator asserts it is initialised only once.
        unsafe { self.heap.init(ARENA.0.get() as usize, HEAP_BYTES) }
    }

    /// Bytes requested and not freed now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Starts a new high-water mark at the bytes in use now (per run figures).
    pub fn reset_peak(&self) {
        self.peak.store(self.used(), Ordering::Relaxed);
    }

    /// High-water mark of [`CountingHeap::used`] (bytes requested; the allocator's own
    /// overhead, 8 bytes or so per block, is not in it).
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
}

// SAFETY: every call is forwarded to `LlffHeap`, a sound `GlobalAlloc`; the counters only
// observe sizes.
unsafe impl GlobalAlloc for CountingHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's `GlobalAlloc::alloc` contract, forwarded.
        let p = unsafe { GlobalAlloc::alloc(&self.heap, layout) };
        if !p.is_null() {
            let now = self.used.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's `GlobalAlloc::dealloc` contract, forwarded.
        unsafe { GlobalAlloc::dealloc(&self.heap, ptr, layout) };
        self.used.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}
