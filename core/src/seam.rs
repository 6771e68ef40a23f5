//! The seam: the three progress-half entry points as a `repr(C)` table of `extern "C"` function
//! pointers, exactly the C signatures of DESIGN.md §8.
//!
//! The driver half (the network task) calls the progress half only through a [`SeamTable`], so
//! the table can be filled in-process (this crate's own progress half) or from a `dlopen`ed
//! library (the `ffi` crate's `libnccom_proxy.so`).
//!
//! Seed: the `.bss` neuron-slot table (nrt:0xc967b8..) populated at dlopen, and the trampolines
//! `ncclStartNetworkProxy` / `ncclNetworkProxyProgress` / `ncclStopNetworkProxy`, §1 and §3.

use core::ffi::{c_int, c_void};

use crate::desc::{NetDestAddr, NetOpInfo, NetSrcAddr};
use crate::status::NrtStatus;

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

/// The seam table: the progress half's three entry points.
///
/// Seed: the neuron-slot table in libnrt's `.bss`, §1.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SeamTable {
    /// `neuronStartNetworkProxy`.
    pub start: StartFn,
    /// `neuronNetworkProxyProgress`.
    pub progress: ProgressFn,
    /// `neuronStopNetworkProxy`.
    pub stop: StopFn,
}

fn status(code: u32) -> Result<(), NrtStatus> {
    match NrtStatus::from_code(code) {
        Some(NrtStatus::Success) => Ok(()),
        Some(s) => Err(s),
        None => Err(NrtStatus::Failure),
    }
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
        status(unsafe {
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
    /// out-parameters as the seed's driver side has them): ANDs into `idle` / `done`.
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
        let r = status(unsafe { (self.progress)(comm, stream, bb, &mut i, &mut d) });
        *idle = i != 0;
        *done = d != 0;
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
        status(unsafe { (self.stop)(comm, stream) })
    }
}
