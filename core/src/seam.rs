//! The seam: the three progress-half entry points as a `repr(C)` table of `extern "C"` function
//! pointers, exactly the C signatures of docs/design.md §8.
//!
//! The driver half (the network task) calls the progress half only through a [`SeamTable`], so
//! the table can be filled in-process (this crate's own progress half) or from a `dlopen`ed
//! library (the `ffi` crate's `libnccom_proxy.so`).
//!
//! Seed: the `.bss` neuron-slot table (nrt:0xc967b8..) populated at dlopen, and the trampolines
//! `ncclStartNetworkProxy` / `ncclNetworkProxyProgress` / `ncclStopNetworkProxy`, §1 and §3.

use core::ffi::{c_int, c_void};

use crate::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr};
use crate::base::status::NrtStatus;
use crate::progress::comm::Comm;

/// `NRT_STATUS neuronStartNetworkProxy(nccom_comm_t *comm, uint32_t stream, uint32_t bb,
/// const op_info *ops, size_t n_ops, const src_addr *src, size_t n_src, const dest_addr *dst,
/// size_t n_dst)`.
///
/// Seed: `neuronStartNetworkProxy` (nccom:0x483a0), B1.
pub type StartFn = unsafe extern "C" fn(
    comm: *mut c_void,
    stream: u32,
    bb: u32,
    ops: *const NetOpInfo,
    n_ops: usize,
    src: *const NetSrcAddr,
    n_src: usize,
    dst: *const NetDestAddr,
    n_dst: usize,
) -> u32;

/// `NRT_STATUS neuronNetworkProxyProgress(nccom_comm_t *comm, uint32_t stream, uint32_t bb,
/// int *idle, int *done)`: ANDs its results into `*idle` / `*done` (non-zero = true).
///
/// Seed: `neuronNetworkProxyProgress` (nccom:0x48930), B2, the seam call.
pub type ProgressFn = unsafe extern "C" fn(
    comm: *mut c_void,
    stream: u32,
    bb: u32,
    idle: *mut c_int,
    done: *mut c_int,
) -> u32;

/// `NRT_STATUS neuronStopNetworkProxy(nccom_comm_t *comm, uint32_t stream)`.
///
/// Seed: `neuronStopNetworkProxy` (nccom:0x487d0), B3.
pub type StopFn = unsafe extern "C" fn(comm: *mut c_void, stream: u32) -> u32;

/// `NRT_STATUS neuronStopNetworkProxyStep(nccom_comm_t *comm, uint32_t stream, int *done)`:
/// one bounded, non-blocking step of a stream teardown (not in the seed; docs/design.md §3,
/// "Stepped teardown"). Writes `*done` non-zero once the stream's cancelled requests are
/// confirmed (or, with `NRT_TIMEOUT`, orphaned at the drain limit), zero while some are still
/// pending: call again later. Any status other than `NRT_SUCCESS` ends the stream's teardown
/// (`*done` is then non-zero).
pub type StopStepFn = unsafe extern "C" fn(comm: *mut c_void, stream: u32, done: *mut c_int) -> u32;

/// The seam table: the progress half's three entry points, and the optional stepped stop.
///
/// Seed: the neuron-slot table in libnrt's `.bss`, §1 (`stop_step` is not in the seed).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SeamTable {
    /// `neuronStartNetworkProxy`.
    pub start: StartFn,
    /// `neuronNetworkProxyProgress`.
    pub progress: ProgressFn,
    /// `neuronStopNetworkProxy`: synchronous, drains before it returns (the C ABI's contract:
    /// a caller may free its buffers once it returns).
    pub stop: StopFn,
    /// `neuronStopNetworkProxyStep`, when the progress half has it: the network task then
    /// tears its streams down one bounded step per tick instead of blocking the tick in
    /// `stop` (docs/design.md §3). `None`: the task calls `stop`.
    pub stop_step: Option<StopStepFn>,
}

impl SeamTable {
    /// Files one block's FIFOs on `stream` of `comm` (the trampoline `ncclStartNetworkProxy`).
    ///
    /// # Errors
    /// The status the progress half returned (an unknown code maps to `Failure`).
    ///
    /// # Safety
    /// `comm` must be a live comm handle of the library this table came from, not used
    /// concurrently by another thread.
    pub unsafe fn start(
        &self,
        comm: *mut c_void,
        stream: u32,
        bb: u32,
        ops: &[NetOpInfo],
        src: &[NetSrcAddr],
        dst: &[NetDestAddr],
    ) -> Result<(), NrtStatus> {
        // SAFETY: the slices are valid for their lengths; `comm` per this function's contract.
        NrtStatus::result_of_code(unsafe {
            (self.start)(
                comm,
                stream,
                bb,
                ops.as_ptr(),
                ops.len(),
                src.as_ptr(),
                src.len(),
                dst.as_ptr(),
                dst.len(),
            )
        })
    }

    /// One progress tick on `stream` (the trampoline `ncclNetworkProxyProgress`, with `bool`
    /// out-parameters as the seed's driver side has them): ANDs into `idle` / `done`; a failed
    /// call leaves both `false`.
    ///
    /// # Errors
    /// The status the progress half returned.
    ///
    /// # Safety
    /// As [`SeamTable::start`].
    pub unsafe fn progress(
        &self,
        comm: *mut c_void,
        stream: u32,
        bb: u32,
        idle: &mut bool,
        done: &mut bool,
    ) -> Result<(), NrtStatus> {
        let mut i: c_int = c_int::from(*idle);
        let mut d: c_int = c_int::from(*done);
        // SAFETY: `i` and `d` are live locals; `comm` per this function's contract.
        let r =
            NrtStatus::result_of_code(unsafe { (self.progress)(comm, stream, bb, &mut i, &mut d) });
        // A failed call is neither idle nor done, whatever the library wrote.
        *idle = r.is_ok() && i != 0;
        *done = r.is_ok() && d != 0;
        r
    }

    /// Tears down `stream` (the trampoline `ncclStopNetworkProxy`).
    ///
    /// # Errors
    /// The status the progress half returned.
    ///
    /// # Safety
    /// As [`SeamTable::start`].
    pub unsafe fn stop(&self, comm: *mut c_void, stream: u32) -> Result<(), NrtStatus> {
        // SAFETY: per this function's contract.
        NrtStatus::result_of_code(unsafe { (self.stop)(comm, stream) })
    }

    /// One step of a stream teardown: `Ok(true)` once the stream's teardown is over, `Ok(false)`
    /// while cancelled requests are still pending (call again on a later tick). Without a
    /// `stop_step` entry this is the synchronous [`SeamTable::stop`] (always over when it
    /// returns).
    ///
    /// # Errors
    /// The status the progress half returned; the stream's teardown is then over.
    ///
    /// # Safety
    /// As [`SeamTable::start`].
    pub unsafe fn stop_step(&self, comm: *mut c_void, stream: u32) -> Result<bool, NrtStatus> {
        let Some(step) = self.stop_step else {
            // SAFETY: per this function's contract.
            return unsafe { self.stop(comm, stream) }.map(|()| true);
        };
        let mut done: c_int = 1;
        // SAFETY: `done` is a live local; `comm` per this function's contract.
        NrtStatus::result_of_code(unsafe { step(comm, stream, &mut done) }).map(|()| done != 0)
    }
}

/// Builds a slice from a C pointer and length: NULL with length 0 is the empty slice; NULL with a
/// non-zero length is `Invalid`.
///
/// # Safety
/// A non-null `ptr` must be valid for `len` reads of `T` for the returned lifetime.
pub unsafe fn slice_from_c<'a, T>(ptr: *const T, len: usize) -> Result<&'a [T], NrtStatus> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        log::error!("NULL FIFO pointer with length {len}");
        return Err(NrtStatus::Invalid);
    }
    // SAFETY: non-null and valid for `len` reads per the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// `neuronStartNetworkProxy` over this crate's own [`Comm`] (the in-process seam).
///
/// # Safety
/// `comm` must be null or a live `*mut Comm` used by no other thread; the FIFO pointers must be
/// valid for their lengths.
pub unsafe extern "C" fn in_process_start(
    comm: *mut c_void,
    stream: u32,
    bb: u32,
    ops: *const NetOpInfo,
    n_ops: usize,
    src: *const NetSrcAddr,
    n_src: usize,
    dst: *const NetDestAddr,
    n_dst: usize,
) -> u32 {
    // SAFETY: per this function's contract.
    let Some(comm) = (unsafe { (comm as *mut Comm).as_mut() }) else {
        return NrtStatus::InvalidHandle.code();
    };
    // SAFETY: per this function's contract.
    let slices = unsafe {
        (
            slice_from_c(ops, n_ops),
            slice_from_c(src, n_src),
            slice_from_c(dst, n_dst),
        )
    };
    let r = match slices {
        (Ok(o), Ok(s), Ok(d)) => comm.start(stream, bb, o, s, d),
        _ => Err(NrtStatus::Invalid),
    };
    NrtStatus::from_result(r).code()
}

/// `neuronNetworkProxyProgress` over this crate's own [`Comm`]: ANDs into `*idle` / `*done`
/// (a call that fails writes 0 to both); any failure of the comm maps to
/// `NRT_NETWORK_PROXY_FAILURE`.
///
/// # Safety
/// As [`in_process_start`]; `idle` and `done` must be null or valid for reads and writes.
pub unsafe extern "C" fn in_process_progress(
    comm: *mut c_void,
    stream: u32,
    bb: u32,
    idle: *mut c_int,
    done: *mut c_int,
) -> u32 {
    // SAFETY: per this function's contract.
    let Some(comm) = (unsafe { (comm as *mut Comm).as_mut() }) else {
        return NrtStatus::InvalidHandle.code();
    };
    if idle.is_null() || done.is_null() {
        return NrtStatus::Invalid.code();
    }
    let (mut i, mut d) = (true, true);
    let r = comm
        .progress(stream, bb)
        .map(|t| t.and_into(&mut i, &mut d));
    // A failed call reports neither idle nor done (the driver must not end the task as if the
    // stream had drained).
    let ok = r.is_ok();
    // SAFETY: both non-null and valid per the contract.
    unsafe {
        *idle = c_int::from(ok && *idle != 0 && i);
        *done = c_int::from(ok && *done != 0 && d);
    }
    NrtStatus::from_result(r).code()
}

/// `neuronStopNetworkProxy` over this crate's own [`Comm`].
///
/// # Safety
/// As [`in_process_start`].
pub unsafe extern "C" fn in_process_stop(comm: *mut c_void, stream: u32) -> u32 {
    // SAFETY: per this function's contract.
    let Some(comm) = (unsafe { (comm as *mut Comm).as_mut() }) else {
        return NrtStatus::InvalidHandle.code();
    };
    NrtStatus::from_result(comm.stop(stream)).code()
}

/// `neuronStopNetworkProxyStep` over this crate's own [`Comm`] ([`Comm::stop_step`]).
///
/// # Safety
/// As [`in_process_start`]; `done` must be null or valid for writes (null: `Invalid`).
pub unsafe extern "C" fn in_process_stop_step(
    comm: *mut c_void,
    stream: u32,
    done: *mut c_int,
) -> u32 {
    // SAFETY: per this function's contract.
    let Some(comm) = (unsafe { (comm as *mut Comm).as_mut() }) else {
        return NrtStatus::InvalidHandle.code();
    };
    if done.is_null() {
        return NrtStatus::Invalid.code();
    }
    let mut d = true;
    let r = comm.stop_step(stream, &mut d);
    // SAFETY: non-null and valid per the contract.
    unsafe { *done = c_int::from(d || r.is_err()) };
    NrtStatus::from_result(r).code()
}

/// Writes the state of a comm behind a seam handle for a state dump (docs/design.md §6): the
/// optional fourth entry of a progress half, outside the C seam ([`NetworkTask::with_comm_dump`](
/// crate::driver::task::NetworkTask::with_comm_dump)).
///
/// # Safety
/// `comm` must be a live comm of the progress half the function belongs to, used by no other
/// thread during the call (the driving thread calls it, as it calls the seam).
pub type CommDumpFn =
    unsafe fn(comm: *mut c_void, out: &mut dyn core::fmt::Write) -> core::fmt::Result;

/// [`CommDumpFn`] over this crate's own [`Comm`] ([`Comm::dump`]).
///
/// # Safety
/// `comm` must be null or a live `*mut Comm` used by no other thread during the call.
///
/// # Errors
/// Whatever `out` returns; a null handle writes nothing.
pub unsafe fn in_process_dump(
    comm: *mut c_void,
    out: &mut dyn core::fmt::Write,
) -> core::fmt::Result {
    // SAFETY: per this function's contract.
    match unsafe { (comm as *const Comm).as_ref() } {
        Some(c) => c.dump(out),
        None => Ok(()),
    }
}

/// [`InvalidateFn`](crate::driver::inval::InvalidateFn) over this crate's own [`Comm`]:
/// [`Comm::invalidate_range`], as `nccom_comm_invalidate_range` of the C library does it.
/// Returns `NRT_SUCCESS`, `NRT_INVALID_HANDLE` for a null comm, `NRT_INVALID` for a NULL `addr`,
/// a zero `len` or a wrapping range, or the transport's failure.
///
/// # Safety
/// `comm` must be null or a live `*mut Comm` used by no other thread during the call (the
/// queue's driving thread calls it at a safe point, `driver::inval`).
pub unsafe extern "C" fn in_process_invalidate_range(
    comm: *mut c_void,
    addr: *const c_void,
    len: usize,
) -> u32 {
    // SAFETY: per this function's contract.
    let Some(comm) = (unsafe { (comm as *mut Comm).as_mut() }) else {
        return NrtStatus::InvalidHandle.code();
    };
    if addr.is_null() {
        log::error!("invalidate: NULL addr");
        return NrtStatus::Invalid.code();
    }
    NrtStatus::from_result(comm.invalidate_range(addr.addr() as u64, len as u64)).code()
}

impl SeamTable {
    /// The in-process seam: the table filled with this crate's own progress half (the stepped
    /// stop included); the comm handle is a `*mut Comm`.
    pub const fn in_process() -> Self {
        Self {
            start: in_process_start,
            progress: in_process_progress,
            stop: in_process_stop,
            stop_step: Some(in_process_stop_step),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
