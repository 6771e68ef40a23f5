//! Host-memory words: a [`HostWord`] is a handle on one 32-bit word in host memory that the
//! device (or its emulator, possibly in another process) reads and writes: trigger words, host
//! indices, semaphores, barrier-done words. Both halves use them (the driver's trigger words and
//! barrier semaphores, the progress half's host indices), so the handle lives below both.
//!
//! Seed: the `volatile uint32_t *` host-memory words of §5; docs/design.md §4, §5.

use core::fmt;
use core::ptr::NonNull;

use crate::base::sync::{AtomicU32, Ordering};

/// Value (`-1`, `nec.h`) the device writes to an op side's host index to say "ready for the
/// handshake"; the proxy answers by writing 0 and adding 1 to the handshake semaphore. The C
/// ABI spells it `NCCOM_HOST_WORD_READY`. (The same number in a trigger word means the opposite,
/// "device not at the net stage yet": that is `driver::trigger::TRIGGER_ARMED`.)
pub const HOST_INDEX_READY: u32 = 0xFFFF_FFFF;

/// A handle on one 4-byte-aligned `u32` word in host memory, accessed only atomically.
///
/// `Copy`, `Send` and `Sync`: it is an address. Liveness is the platform's business: the
/// host-memory region that holds the word (on Linux an mmap'd region, possibly shared with
/// another process) must outlive every handle and every task that carries one; see
/// [`HostWord::from_addr`].
///
/// Seed: the `volatile uint32_t *` host-memory words of §5 and `nec_inc_semaphore`'s target.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HostWord {
    ptr: NonNull<AtomicU32>,
}

// SAFETY: a HostWord is an address of a word that is only ever accessed atomically (the
// constructors' contract), so using it from any thread is as safe as sharing `&AtomicU32`.
unsafe impl Send for HostWord {}
// SAFETY: as above.
unsafe impl Sync for HostWord {}

impl HostWord {
    /// A handle on the word at `addr`, or `None` when `addr` is 0 or not 4-byte aligned.
    ///
    /// Under `--cfg loom` only handles made by [`HostWord::from_static`] may be used (a raw
    /// address is not a loom atomic).
    ///
    /// # Safety
    /// `addr` must be the address of a live `u32` in memory that stays mapped for as long as
    /// this handle or any copy of it is used, and that is only ever accessed atomically (by this
    /// process and by any other process or device sharing the memory).
    pub unsafe fn from_addr(addr: u64) -> Option<Self> {
        if addr == 0 || !addr.is_multiple_of(4) || addr > usize::MAX as u64 {
            return None;
        }
        NonNull::new(addr as usize as *mut AtomicU32).map(|ptr| Self { ptr })
    }

    /// A handle on a word that lives for the rest of the program (tests, loom models, statics).
    pub fn from_static(word: &'static AtomicU32) -> Self {
        Self {
            ptr: NonNull::from(word),
        }
    }

    /// A handle on `word` (keeps its provenance; works under loom).
    ///
    /// # Safety
    /// `word` must outlive every use of the handle and of its copies.
    pub unsafe fn from_ref(word: &AtomicU32) -> Self {
        Self {
            ptr: NonNull::from(word),
        }
    }

    /// The word's address (what goes into an op info's `*_addr` field).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as usize as u64
    }

    pub(crate) fn word(&self) -> &AtomicU32 {
        // SAFETY: the constructors' contract: the word is live and only accessed atomically
        // while any handle is used.
        unsafe { self.ptr.as_ref() }
    }

    /// Reads the word with acquire ordering: what the writer stored before its release store
    /// (or RMW) is visible after this load.
    pub fn load(&self) -> u32 {
        self.word().load(Ordering::Acquire)
    }

    /// Writes `val` with release ordering.
    pub fn store(&self, val: u32) {
        self.word().store(val, Ordering::Release);
    }

    /// Adds `val` (wrapping) with release ordering and returns the previous value: a semaphore
    /// increment (seed: `nec_inc_semaphore`).
    pub fn fetch_add(&self, val: u32) -> u32 {
        self.word().fetch_add(val, Ordering::Release)
    }
}

impl fmt::Debug for HostWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostWord({:#x})", self.addr())
    }
}
