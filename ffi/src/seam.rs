//! The seam (docs/design.md §8): the four calls a driver makes on a comm's streams,
//! `neuronStartNetworkProxy`, `neuronNetworkProxyProgress`, `neuronStopNetworkProxy` and the
//! stepped teardown `neuronStopNetworkProxyStep`.

use std::ffi::c_int;

use proxy_abi::*;
use proxy_core::base::status::NrtStatus;

use proxy_abi::boundary::{c_out, c_slice};
use proxy_abi::entry;

use crate::comms::with_comm;

/// Files one basic block's FIFOs on `stream` of `comm` (docs/design.md §3, `start`): validates the
/// whole call, builds a send proxy op per op info with `tx_entry_cnt > 0` and a recv proxy op
/// per op info with `rx_entry_cnt > 0`, and files them under `bb`. A rejected call files nothing.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown comm;
/// `NRT_INVALID` for stream >= 4, `bb == NCCOM_BB_NONE`, an empty op FIFO, a NULL FIFO with a
/// non-zero length, FIFO lengths that differ from the ops' entry counts, `net_op_idx` out of
/// range, a wrong or unknown mark, a peer >= nranks, a bad size or address; `NRT_RESOURCE` when
/// no proxy op can be allocated; the comm's sticky error when it has failed; `NRT_FAILURE` for a
/// comm in use by another thread or a caught panic.
///
/// # Safety
/// Each non-NULL FIFO pointer must be valid for reads of its length; every address in the
/// FIFOs must follow the memory contract (crate docs; the header's opening comment).
///
/// Seed: `neuronStartNetworkProxy` (nccom:0x483a0), B1.
#[no_mangle]
pub unsafe extern "C" fn neuronStartNetworkProxy(
    comm: *mut NccomComm,
    stream: u32,
    bb: u32,
    ops: *const NetOpInfo,
    n_ops: usize,
    src: *const NetSrcAddr,
    n_src: usize,
    dst: *const NetDestAddr,
    n_dst: usize,
) -> NRT_STATUS {
    entry!(WHAT = "neuronStartNetworkProxy", {
        with_comm(WHAT, comm, |c| {
            // SAFETY: per this function's contract.
            let (o, s, d) = unsafe {
                (
                    c_slice("neuronStartNetworkProxy", "ops", ops, n_ops)?,
                    c_slice("neuronStartNetworkProxy", "src", src, n_src)?,
                    c_slice("neuronStartNetworkProxy", "dst", dst, n_dst)?,
                )
            };
            c.start(stream, bb, o, s, d)
        })
    })
}

/// One progress tick on `stream` of `comm` (docs/design.md §3, `progress`): loads a block when the
/// stream has no active ops (the pending block, else `bb`), walks the active ops once, recycles
/// finished ones, and ANDs its results into `*idle` / `*done` (non-zero = true). Seed both with
/// 1 before a round of calls (one per stream); after the round they say "all idle" / "all done".
/// A call that fails (any status but `NRT_SUCCESS`, after the pointers were checked) writes 0 to
/// both.
/// A stream with nothing filed (or stopped) reports idle and done.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` for stream >= 4 or
/// a NULL `idle` / `done`; `NRT_NETWORK_PROXY_FAILURE` once the comm has failed (sticky);
/// `NRT_FAILURE` for a comm in use by another thread or a caught panic.
///
/// # Safety
/// `idle` and `done` must be NULL or point to writable `int`s. Calls `nec_inc_semaphore`.
///
/// Seed: `neuronNetworkProxyProgress` (nccom:0x48930), B2, the seam call.
#[no_mangle]
pub unsafe extern "C" fn neuronNetworkProxyProgress(
    comm: *mut NccomComm,
    stream: u32,
    bb: u32,
    idle: *mut c_int,
    done: *mut c_int,
) -> NRT_STATUS {
    entry!(WHAT = "neuronNetworkProxyProgress", {
        with_comm(WHAT, comm, |c| {
            // SAFETY: `idle`: the C caller's pointer, valid or NULL by this function's contract.
            let idle = unsafe { c_out(WHAT, "idle", idle) }?;
            // SAFETY: `done`: the C caller's pointer, valid or NULL by this function's contract.
            let done = unsafe { c_out(WHAT, "done", done) }?;
            let (mut i, mut d) = (true, true);
            let r = c.progress(stream, bb).map(|t| t.and_into(&mut i, &mut d));
            // A failed call reports neither idle nor done.
            let ok = r.is_ok();
            *idle = c_int::from(ok && *idle != 0 && i);
            *done = c_int::from(ok && *done != 0 && d);
            r
        })
    })
}

/// Stream teardown (docs/design.md §3, `stop`): cancels the requests of ops in flight, waits for the
/// transport to confirm them (at most the drain limit), and returns every op of the stream to
/// its pool. Works on a failed comm. Afterwards the stream is empty and reusable; progress on it
/// reports idle and done.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` for stream >= 4;
/// `NRT_TIMEOUT` when the drain limit passed (the comm is then failed); `NRT_FAILURE` for a comm
/// in use by another thread or a caught panic.
///
/// # Safety
/// None beyond the C contract (the handle is checked, never dereferenced). Stop never calls
/// the device callbacks.
///
/// Seed: `neuronStopNetworkProxy` (nccom:0x487d0), B3.
#[no_mangle]
pub unsafe extern "C" fn neuronStopNetworkProxy(comm: *mut NccomComm, stream: u32) -> NRT_STATUS {
    entry!(
        WHAT = "neuronStopNetworkProxy",
        with_comm(WHAT, comm, |c| c.stop(stream))
    )
}

/// One step of a stream teardown that never blocks (ABI 1.1; docs/design.md §3, "Stepped
/// teardown"): the first call on a stream cancels the requests of its ops in flight and keeps
/// the ops that still have requests out of the pool; every call polls the transport a few
/// times (at most 4) and writes `*done = 1` once the cancelled requests are confirmed and every
/// op of the stream is back in its pool. Until then `*done` is 0 and `start` / `progress` on the
/// stream answer `NRT_INVALID`; call it again (a driver calls it once per tick, so a comm that
/// is leaving does not stall the other comms it drives). A driver that needs the seed's
/// synchronous teardown calls `neuronStopNetworkProxy`, which finishes a stepped one too.
///
/// Returns `NRT_SUCCESS`; `NRT_TIMEOUT` (with `*done = 1`) when the teardown's drain limit
/// passed: the unconfirmed requests stay with the transport until destroy and the comm is
/// failed; `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` for stream >= 4 or a NULL
/// `done`; `NRT_FAILURE` for a comm in use by another thread or a caught panic. On an error
/// other than `NRT_TIMEOUT`, `*done` is left as it was.
///
/// # Safety
/// `done` must be NULL or point to a writable `int`. Never calls the device callbacks.
///
/// Seed: none (the seed's `neuronStopNetworkProxy`, nccom:0x487d0, drains before it returns).
#[no_mangle]
pub unsafe extern "C" fn neuronStopNetworkProxyStep(
    comm: *mut NccomComm,
    stream: u32,
    done: *mut c_int,
) -> NRT_STATUS {
    entry!(WHAT = "neuronStopNetworkProxyStep", {
        with_comm(WHAT, comm, |c| {
            // SAFETY: `done`: the C caller's pointer, valid or NULL by this function's contract.
            let done = unsafe { c_out(WHAT, "done", done) }?;
            let mut d = false;
            let r = c.stop_step(stream, &mut d);
            // A teardown that ended at its drain limit is over too.
            if r.is_ok() || r == Err(NrtStatus::Timeout) {
                *done = c_int::from(d || r.is_err());
            }
            r
        })
    })
}
