//! A comm's abort (from any thread), the invalidation of a range about to be freed (applied by
//! the proxy queue's driver at a safe point), its health (async error, last error) and the
//! state dump of its proxy queue.

use std::ffi::{c_char, c_void};
use std::ptr;

use proxy_abi::*;
use proxy_core::base::status::NrtStatus;
use proxy_core::driver::inval::Invalidation;
use proxy_core::driver::task::CommHandle;

use proxy_abi::boundary::{bad, c_out};
use proxy_abi::entry;

use crate::handles::with_comm;
use crate::objects::{aborts, deadline_after};
use crate::types::*;

/// Requests an abort of a comm, from any thread at any time (also while another thread is in a
/// call on it): the comm's tasks end `NRT_CLOSED` at their next step, and the progress half's
/// comm is aborted (`nccom_comm_abort`: its seam calls answer `NRT_CLOSED`). A second abort
/// changes nothing. The comm must still leave and be destroyed.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown comm.
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_abort(comm: *mut NrtProxyComm) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_comm_abort", {
        let h = comm.addr();
        let Some((_, abort, nccom, f)) = aborts().iter().find(|(k, ..)| *k == h).cloned() else {
            log::error!("{WHAT}: {h:#x} is not a live comm of this library");
            return Err(NrtStatus::InvalidHandle);
        };
        if !abort.abort() {
            log::info!("{WHAT}: comm {h:#x} was already aborted");
        }
        if let Some(f) = f {
            // SAFETY: the progress half checks its handle (a comm destroyed meanwhile answers
            // NRT_INVALID_HANDLE, never a dereference).
            let s = unsafe { f(ptr::without_provenance_mut(nccom)) };
            if s != NRT_SUCCESS && s != NRT_INVALID_HANDLE {
                log::warn!(
                    "{WHAT}: nccom_comm_abort: {}",
                    NrtStatus::from_code(s).unwrap_or(NrtStatus::Failure)
                );
            }
        }
        Ok(())
    })
}

/// The caller is about to free `[addr, addr + len)`: the progress half drops its transport's
/// cached registrations of the range (`nccom_comm_invalidate_range`). Works at any time, also
/// while tasks of the comm run: when it returns `NRT_SUCCESS`, no later post of the comm uses a
/// stale registration of the range, and registrations that requests in flight still use are
/// detached (closed when those requests complete; the memory itself must stay valid until the
/// tasks that post from it are popped, as always). Free the range only after `NRT_SUCCESS`.
///
/// A joined comm's invalidation is applied by the thread that drives its proxy queue, at the
/// start of its next tick, before it steps any task (docs/design.md §9, "Invalidation while the
/// driver runs"): in thread mode the call wakes the worker and waits for its answer; in caller
/// mode it waits for the thread that holds the drive token, or takes the free token and applies
/// it itself. It waits at most 10 s for a safe point. A comm that is
/// not joined (never joined, or left) is invalidated by the calling thread at once.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE`; the progress half's status (`NRT_INVALID` for a
/// NULL `addr`, a zero `len` or a wrapping range; `NRT_NETWORK_PROXY_FAILURE` when the provider
/// refused to close a registration); `NRT_TIMEOUT` when the queue's driver did not reach a safe
/// point in time: the range was **not** invalidated (do not free it yet; the last error and the
/// log name the driver's activity; call again); `NRT_FAILURE` for a progress half without the
/// entry (ABI 1.0), or while another thread is inside a call on the same comm.
///
/// # Safety
/// None beyond the C contract (the range is only compared).
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_invalidate_range(
    comm: *mut NrtProxyComm,
    addr: *const c_void,
    len: usize,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_comm_invalidate_range", {
        with_comm(WHAT, comm, |e| {
            let waiter = e.waiter();
            let lib = e.inst.lib;
            let nccom = e.comm.as_ptr();
            let Some(m) = e.member.as_mut() else {
                // Not on a queue: no driver calls into the comm.
                return e.comm.invalidate_range(addr.cast(), len);
            };
            let Some(invalidate) = lib.invalidate_fn() else {
                return bad(
                    WHAT,
                    format_args!("the progress half has no nccom_comm_invalidate_range (ABI 1.0)"),
                );
            };
            // SAFETY: the comm's handle lives in the entry until after the membership left
            // (as for the network tasks, which carry the same handle).
            let comm = unsafe { CommHandle::new(nccom.cast()) }.ok_or(NrtStatus::InvalidHandle)?;
            let request = Invalidation {
                comm,
                invalidate,
                addr: addr.addr(),
                len,
            };
            m.slot
                .invalidate_until(request, &waiter, Some(deadline_after(INVALIDATE_TIMEOUT_MS)))
                .inspect_err(|s| {
                    if *s == NrtStatus::Timeout {
                        proxy_abi::refusal::refuse(
                            WHAT,
                            "driver busy",
                            format_args!(
                                "the proxy queue's driver did not reach a safe point within \
                                 {INVALIDATE_TIMEOUT_MS} ms (driver {}); the range {addr:p}+{len:#x} \
                                 was not invalidated: do not free it yet",
                                m.slot.queue().driver_activity().name()
                            ),
                        );
                    }
                })
        })
    })
}

/// How long `nrt_proxy_comm_invalidate_range` waits for the proxy queue's driver to reach a safe
/// point (the start of its next tick): 10 s.
const INVALIDATE_TIMEOUT_MS: u64 = 10_000;

/// The comm's health, as NCCL's `ncclCommGetAsyncError`: `*status` is `NRT_SUCCESS` while no
/// task of the comm has failed, `NRT_CLOSED` once it is aborted, else the status of the first
/// failed task record popped (`NRT_TIMEOUT`, `NRT_NETWORK_PROXY_FAILURE`, ...).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE`; `NRT_INVALID` for a NULL `status`.
///
/// # Safety
/// `status` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_get_async_error(
    comm: *mut NrtProxyComm,
    status: *mut NRT_STATUS,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_comm_get_async_error", {
        with_comm(WHAT, comm, |e| {
            // SAFETY: `status`: the C caller's pointer, valid or NULL by this function's contract.
            let out = unsafe { c_out(WHAT, "status", status) }?;
            *out = if e.async_error != NrtStatus::Success {
                e.async_error.code()
            } else if let Some(s) = e.abort.aborted() {
                s.code()
            } else {
                NRT_SUCCESS
            };
            Ok(())
        })
    })
}

/// The comm's most recent failure as text (empty when none): a call on the comm that was
/// refused, with the refusal's cause and the argument or peer it names (`nrt_proxy_submit_network:
/// block 0 entry 3: src size 65536 above max 4096 (NRT_INVALID)`), or a task record that ended in
/// failure (`task 7 of comm 3 (rank 1) ended NRT_TIMEOUT`), whichever came last. A refusal of this
/// very call (NULL `buf`) is not recorded. Copied into `buf` (at most `len - 1` bytes and a NUL;
/// truncated to fit).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE`; `NRT_INVALID` for a NULL `buf` or a zero `len`.
///
/// # Safety
/// `buf` NULL or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_last_error(
    comm: *mut NrtProxyComm,
    buf: *mut c_char,
    len: usize,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_comm_last_error", {
        // Checked outside the comm: this call's own refusal must not replace what it reports.
        if buf.is_null() || len == 0 {
            return bad(WHAT, format_args!("NULL buf or zero len"));
        }
        with_comm(WHAT, comm, |e| {
            let text = if !e.last_error.is_empty() {
                e.last_error.clone()
            } else if let Some(s) = e.abort.aborted() {
                format!("comm {} (rank {}) was aborted ({s})", e.comm_id, e.rank)
            } else {
                String::new()
            };
            let n = text.len().min(len - 1);
            // SAFETY: `buf` is writable for `len` bytes (the contract); `n + 1 <= len`.
            unsafe {
                ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
            Ok(())
        })
    })
}

/// Writes the state dump of the comm's proxy queue (every slot and task, the driver's
/// activity) to the log (target `proxy_dump`, level `WARN`), asking the queue's driver and
/// waiting at most `timeout_ms` for it (without an answer the requester writes what it can read).
///
/// Returns `NRT_SUCCESS` when the driver wrote it; `NRT_TIMEOUT` when it did not answer in time
/// (the partial dump was written); `NRT_INVALID_HANDLE`; `NRT_CLOSED` when not joined.
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_dump(
    comm: *mut NrtProxyComm,
    timeout_ms: u64,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_comm_dump", {
        with_comm(WHAT, comm, |e| {
            let waiter = e.waiter();
            let m = e.member(WHAT)?;
            match m
                .slot
                .queue()
                .dump_until(&waiter, deadline_after(timeout_ms))
            {
                proxy_core::driver::dump::DumpOutcome::Written => Ok(()),
                proxy_core::driver::dump::DumpOutcome::NotAnswered
                | proxy_core::driver::dump::DumpOutcome::DriverGone => Err(NrtStatus::Timeout),
            }
        })
    })
}
