//! The trampolines: `ncclStartNetworkProxy`, `ncclNetworkProxyProgress`,
//! `ncclStopNetworkProxy`, the seed's libnrt exports that call the first loaded progress half's
//! seam, for a runtime that drives the seam itself.

use proxy_abi::*;
use proxy_core::base::status::NrtStatus;
use proxy_runtime::loader::ProgressLib;

use proxy_abi::boundary::c_out;
use proxy_abi::entry;

use crate::libs::DEFAULT_LIB;

fn default_lib(what: &str) -> Result<&'static ProgressLib, NrtStatus> {
    DEFAULT_LIB.get().copied().ok_or_else(|| {
        log::error!("{what}: no progress half loaded (call nrt_proxy_init first)");
        NrtStatus::Uninitialized
    })
}

/// Trampoline to the loaded progress half's `neuronStartNetworkProxy` (the first one loaded):
/// files one basic block's FIFOs on `stream` of `comm` (a handle from `nrt_proxy_comm_nccom`).
///
/// Returns the progress half's status; `NRT_UNINITIALIZED` before the first `nrt_proxy_init`.
///
/// # Safety
/// As `neuronStartNetworkProxy` (`nccom_proxy.h`).
///
/// Seed: `ncclStartNetworkProxy` (libnrt trampoline → `neuronStartNetworkProxy`), §3 B1.
#[no_mangle]
pub unsafe extern "C" fn ncclStartNetworkProxy(
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
    entry!(WHAT = "ncclStartNetworkProxy", {
        let lib = default_lib(WHAT)?;
        // SAFETY: the caller's contract; the progress half checks the handle and the arrays.
        NrtStatus::result_of_code(unsafe {
            (lib.seam().start)(comm.cast(), stream, bb, ops, n_ops, src, n_src, dst, n_dst)
        })
    })
}

/// Trampoline to `neuronNetworkProxyProgress`, with `bool` out-parameters as the seed's driver
/// side has them: the results are AND-ed into `*idle` / `*done` (seed both with `true` before a
/// round of calls); a failed call writes `false` to both.
///
/// Returns the progress half's status; `NRT_INVALID` for a NULL `idle` / `done`;
/// `NRT_UNINITIALIZED` before the first `nrt_proxy_init`.
///
/// # Safety
/// As `neuronNetworkProxyProgress`; `idle` / `done` NULL or writable `bool`s.
///
/// Seed: `ncclNetworkProxyProgress` (nrt:0x1c1aa0 → `neuronNetworkProxyProgress`), §3 B2.
#[no_mangle]
pub unsafe extern "C" fn ncclNetworkProxyProgress(
    comm: *mut NccomComm,
    stream: u32,
    bb: u32,
    idle: *mut bool,
    done: *mut bool,
) -> NRT_STATUS {
    entry!(WHAT = "ncclNetworkProxyProgress", {
        // SAFETY: `idle`: the C caller's pointer, valid or NULL by this function's contract.
        let idle = unsafe { c_out(WHAT, "idle", idle) }?;
        // SAFETY: `done`: the C caller's pointer, valid or NULL by this function's contract.
        let done = unsafe { c_out(WHAT, "done", done) }?;
        let lib = default_lib(WHAT)?;
        // SAFETY: the caller's contract; the progress half checks the handle.
        unsafe { lib.seam().progress(comm.cast(), stream, bb, idle, done) }
    })
}

/// Trampoline to `neuronStopNetworkProxy`: tears `stream` of `comm` down.
///
/// Returns the progress half's status; `NRT_UNINITIALIZED` before the first `nrt_proxy_init`.
///
/// # Safety
/// As `neuronStopNetworkProxy`.
///
/// Seed: `ncclStopNetworkProxy` (libnrt trampoline → `neuronStopNetworkProxy`), §3 B3.
#[no_mangle]
pub unsafe extern "C" fn ncclStopNetworkProxy(comm: *mut NccomComm, stream: u32) -> NRT_STATUS {
    entry!(WHAT = "ncclStopNetworkProxy", {
        let lib = default_lib(WHAT)?;
        // SAFETY: the caller's contract; the progress half checks the handle.
        unsafe { lib.seam().stop(comm.cast(), stream) }
    })
}
