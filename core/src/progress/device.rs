//! The device side as the progress half sees it: the `nec_*` reverse edge (semaphore
//! increments) and the host-memory words it reads (host indices).
//!
//! Seed: `nec_inc_semaphore` (the libnccom → libnrt reverse import), §1 and §5; docs/design.md §5.

use crate::base::sync::{AtomicU32, Ordering};

/// The callbacks a proxy op uses to talk to the device, all through 32-bit host-memory words.
///
/// Addresses are the `*_addr` values of [`NetOpInfo`](crate::base::desc::NetOpInfo): 4-byte-aligned
/// `u32` words in host memory the device reaches. The ops never write a semaphore other than
/// through [`DeviceCallbacks::inc_semaphore`].
///
/// Implementations must be callable from the worker thread while the device (or its emulator)
/// reads and writes the same words from another thread or process.
pub trait DeviceCallbacks: Send + Sync {
    /// Adds `val` to the semaphore increment register at `addr` (wrapping). Release ordering:
    /// everything the proxy wrote before (received payload bytes) is visible to a device that
    /// reads the new value with acquire.
    ///
    /// Seed: `nec_inc_semaphore(volatile uint32_t *addr, uint32_t val)`.
    fn inc_semaphore(&self, addr: u64, val: u32);

    /// Reads the host index (or any handshake word) at `addr` with acquire ordering.
    fn load_host_index(&self, addr: u64) -> u32;

    /// Writes `val` to the host index (or any handshake word) at `addr` with release ordering.
    fn store_host_index(&self, addr: u64, val: u32);
}

/// [`DeviceCallbacks`] on plain host memory in this address space: each address is accessed
/// as an `AtomicU32`.
///
/// This is what the in-process engine and the device emulator use; the C ABI's callback table
/// (`nec_inc_semaphore` from the embedding runtime) replaces it at the binary boundary.
#[derive(Debug)]
pub struct DirectHostWords {
    _private: (),
}

impl DirectHostWords {
    /// Creates the accessor.
    ///
    /// # Safety
    /// Every address later passed to its methods must be the address of a live, 4-byte-aligned
    /// `u32` that is only ever accessed atomically, valid for as long as this value is used.
    /// [`Comm::start`](crate::progress::comm::Comm::start) checks each address against the comm's
    /// registered host memory before any op can use it.
    pub const unsafe fn new() -> Self {
        Self { _private: () }
    }

    /// The word at `addr`.
    ///
    /// # Safety
    /// `addr` must be the address of a live, 4-byte-aligned `u32` that is only accessed
    /// atomically, and the reference must not be used past the caller's use of the word (the
    /// `'static` lifetime is a lie the callers never let escape).
    unsafe fn word(addr: u64) -> &'static AtomicU32 {
        debug_assert!(
            addr != 0 && addr.is_multiple_of(4),
            "host word address {addr:#x}"
        );
        // SAFETY: the caller's contract (this function's `# Safety`).
        unsafe { &*(addr as usize as *const AtomicU32) }
    }
}

impl DeviceCallbacks for DirectHostWords {
    fn inc_semaphore(&self, addr: u64, val: u32) {
        // Release: the payload the proxy wrote (received bytes) happens-before the device's
        // acquire read of the incremented count.
        // PLANT: SemaphoreRelaxedIncrement increments Relaxed: the payload is not published.
        let order = plant!(
            SemaphoreRelaxedIncrement,
            Ordering::Relaxed,
            Ordering::Release
        );
        // SAFETY: the constructor's contract: every address given to this accessor is a live,
        // aligned u32 accessed only atomically; the reference ends with this statement.
        unsafe { Self::word(addr) }.fetch_add(val, order);
    }

    fn load_host_index(&self, addr: u64) -> u32 {
        // SAFETY: as in `inc_semaphore`.
        unsafe { Self::word(addr) }.load(Ordering::Acquire)
    }

    fn store_host_index(&self, addr: u64, val: u32) {
        // SAFETY: as in `inc_semaphore`.
        unsafe { Self::word(addr) }.store(val, Ordering::Release);
    }
}
