//! Calls on a live comm besides the seam: memory registration, invalidation of a range about
//! to be freed, abort (from any thread), and the protocol counters.

use std::ffi::c_void;
use std::ptr;

use proxy_abi::*;
use proxy_core::base::status::NrtStatus;

use proxy_abi::boundary::c_handle;
use proxy_abi::entry;

use crate::comms::{side_entry, with_comm};

/// The start of a range argument `name` of the call `what` as an address, NULL refused.
///
/// # Errors
/// `NrtStatus::Invalid` for NULL, logged as `<what>: NULL <name>`.
fn range_start(what: &str, name: &str, p: *const c_void) -> Result<u64, NrtStatus> {
    if p.is_null() {
        log::error!("{what}: NULL {name}");
        return Err(NrtStatus::Invalid);
    }
    Ok(p.addr() as u64)
}

/// Registers `[base, base + len)` with a comm created with `NCCOM_COMM_CHECK_ADDRESSES`: every
/// buffer and host word given to `neuronStartNetworkProxy` must lie in a registered range.
/// Without the flag the call is accepted and has no effect.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` for a NULL `base`,
/// a zero `len` or a range that wraps.
///
/// # Safety
/// The range must stay valid until the comm is destroyed; host words in it are accessed only
/// atomically.
#[no_mangle]
pub unsafe extern "C" fn nccom_comm_register_memory(
    comm: *mut NccomComm,
    base: *const c_void,
    len: usize,
) -> NRT_STATUS {
    entry!(WHAT = "nccom_comm_register_memory", {
        with_comm(WHAT, comm, |c| {
            let base = range_start(WHAT, "base", base)?;
            // SAFETY: per this function's contract.
            unsafe { c.register_memory(base, len as u64) }
        })
    })
}

/// The caller is about to free or unmap `[addr, addr + len)`: the comm's transport drops its
/// cached memory registrations overlapping the range, so that a buffer later allocated at the
/// same address is registered afresh instead of being posted with the stale registration
/// (silent corruption on efa). Call it for every buffer that was given to
/// `neuronStartNetworkProxy` before freeing it. A registration that requests in flight still use
/// is not closed under them: it is closed when its last request completes and never used again.
/// Transports that register nothing (the in-memory transport; tcp unless forced) accept the call
/// and do nothing. Works on a failed or aborted comm. Ranges given to
/// `nccom_comm_register_memory` are not changed.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` for a NULL `addr`,
/// a zero `len` or a range that wraps; `NRT_NETWORK_PROXY_FAILURE` when the provider refused to
/// close a registration (it is gone anyway; logged); `NRT_FAILURE` for a comm in use by another
/// thread or a caught panic.
///
/// # Safety
/// None beyond the C contract (the handle is checked, never dereferenced; the range is only
/// compared, never accessed).
#[no_mangle]
pub unsafe extern "C" fn nccom_comm_invalidate_range(
    comm: *mut NccomComm,
    addr: *const c_void,
    len: usize,
) -> NRT_STATUS {
    entry!(WHAT = "nccom_comm_invalidate_range", {
        with_comm(WHAT, comm, |c| {
            c.invalidate_range(range_start(WHAT, "addr", addr)?, len as u64)
        })
    })
}

/// Requests an abort of a comm. Callable from any thread at any time, also while another thread
/// is inside `neuronNetworkProxyProgress` (or any other call) on the same comm: the call only
/// sets the comm's abort word and returns. The thread that drives the comm applies the abort at
/// its next `neuronStartNetworkProxy` / `neuronNetworkProxyProgress` (every stream is stopped:
/// requests cancelled and drained within the drain limit). From then on both answer
/// `NRT_CLOSED` (and progress writes 0 to `*idle` and `*done`); `neuronStopNetworkProxy` and
/// `nccom_comm_invalidate_range` still work; `nccom_comm_destroy` is an ordinary destroy (the
/// streams are already empty). A second abort changes nothing and also answers `NRT_SUCCESS`.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown comm (an abort
/// racing a destroy answers one or the other; either way nothing is freed twice).
///
/// Not async-signal-safe (it takes a lock).
///
/// # Safety
/// None beyond the C contract (the handle is checked, never dereferenced).
///
/// Seed: none (the seed has no abort; `nrt_close` waits for the proxy); docs/design.md §9.
#[no_mangle]
pub unsafe extern "C" fn nccom_comm_abort(comm: *mut NccomComm) -> NRT_STATUS {
    entry!(WHAT = "nccom_comm_abort", {
        let h = c_handle(WHAT, "comm", comm)?;
        let (_, abort, _) = side_entry(WHAT, h)?;
        if !abort.abort() {
            log::info!("{WHAT}: comm {h:#x} was already aborted");
        }
        Ok(())
    })
}

/// Copies a comm's protocol counters (cumulative since the comm was created: `start` calls,
/// block switches, early send completions, receives posted ahead of the host index and the most
/// ahead, host-index wraps, peak outstanding send / receive requests; docs/design.md §5,
/// "Protocol counters") into `*out`. Versioned by size: on input `out->size` is the number of
/// bytes the caller's struct has (at least 8, the `size` and `reserved` words); the library
/// writes at most that many bytes of its `nccom_protocol_stats_t` and sets `out->size` to the
/// number it wrote (`sizeof(nccom_protocol_stats_t)` of this library when the caller's struct
/// is at least as large; bytes past that are left as they were). Works on a failed or aborted
/// comm (its counters stay readable).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown comm;
/// `NRT_INVALID` for a NULL or misaligned `out` or an `out->size` below 8 (nothing written);
/// `NRT_FAILURE` for a comm in use by another thread (the counters belong to the thread that
/// drives the comm) or a caught panic.
///
/// # Safety
/// A non-null `out` must point to `out->size` writable bytes, 8-aligned.
///
/// Seed: none (ABI 1.2).
#[no_mangle]
pub unsafe extern "C" fn nccom_comm_protocol_stats(
    comm: *mut NccomComm,
    out: *mut NccomProtocolStats,
) -> NRT_STATUS {
    entry!(WHAT = "nccom_comm_protocol_stats", {
        with_comm(WHAT, comm, |c| {
            if out.is_null() || !out.is_aligned() {
                log::error!("{WHAT}: NULL or misaligned out ({out:p})");
                return Err(NrtStatus::Invalid);
            }
            // SAFETY: non-null and aligned; the caller's struct has at least its `size` word.
            let have = unsafe { ptr::addr_of!((*out).size).read() } as usize;
            const HEADER: usize = 8;
            if have < HEADER {
                log::error!("{WHAT}: out->size {have} is below {HEADER}");
                return Err(NrtStatus::Invalid);
            }
            let mut stats = NccomProtocolStats::from(c.protocol_stats());
            let n = have.min(std::mem::size_of::<NccomProtocolStats>());
            stats.size = n as u32;
            // SAFETY: `out` has `have >= n` writable bytes (the caller's contract); the source
            // is a local of at least `n` bytes; the two do not overlap.
            unsafe {
                ptr::copy_nonoverlapping(ptr::addr_of!(stats).cast::<u8>(), out.cast::<u8>(), n);
            }
            Ok(())
        })
    })
}
