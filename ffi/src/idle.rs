//! The idle wait of a comm through the C ABI (ABI 1.4; `proxy_core::driver::idle`): a comm
//! created with `NCCOM_COMM_IDLE_WAIT` over a provider whose completion queue has a wait
//! descriptor (libfabric tcp) lets the thread that drives it block there when a progress round
//! found nothing to do, instead of yielding: arm ([`nccom_comm_idle_arm`], `fi_trywait`), and
//! only when armed sleep ([`nccom_comm_idle_sleep`], `ppoll` on the descriptor and a kick
//! eventfd, at most 1 ms); another thread ends a sleep with [`nccom_comm_idle_kick`].
//!
//! Arm and sleep go through the comm's handle slot like every other call on the comm (a call
//! while another thread is inside the comm answers `NRT_FAILURE`), so the library itself keeps
//! them apart from the progress calls (libfabric's `FI_THREAD_DOMAIN` needs that). The kick
//! goes through the side table of `comms.rs` (as `nccom_comm_abort`): any thread, any time.
//! A comm without an idle wait (in-memory, shm, or created without the flag) answers "none":
//! available 0, arm `NCCOM_IDLE_UNAVAILABLE`, sleep returns at once, kick does nothing.
//!
//! Seed: none (the seed's worker spins, then yields); issue 25.

use proxy_abi::*;
use proxy_core::driver::idle::Armed;

use proxy_abi::boundary::{c_handle, c_out};
use proxy_abi::entry;

use crate::comms::{side_entry, with_entry};

/// Writes to `*available` 1 when the comm has an idle wait (a completion-queue descriptor to
/// block on: a libfabric comm created with `NCCOM_COMM_IDLE_WAIT` over a provider that has one,
/// tcp), else 0 (in-memory comms, shm, no flag).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown comm;
/// `NRT_INVALID` for a NULL `available`; `NRT_FAILURE` for a comm in use by another thread.
///
/// # Safety
/// `available` NULL or writable.
///
/// Seed: none (ABI 1.4).
#[no_mangle]
pub unsafe extern "C" fn nccom_comm_idle_available(
    comm: *mut NccomComm,
    available: *mut u32,
) -> NRT_STATUS {
    entry!(WHAT = "nccom_comm_idle_available", {
        // SAFETY: `available`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "available", available) }?;
        *out = with_entry(WHAT, comm, |e| Ok(u32::from(e.idle.is_some())))?;
        Ok(())
    })
}

/// Arms the comm's idle wait (libfabric's `fi_trywait` on its completion queue) and writes the
/// outcome to `*armed`: `NCCOM_IDLE_ARMED` (nothing queued; the descriptor will signal the next
/// completion: `nccom_comm_idle_sleep` may block), `NCCOM_IDLE_READY` (completions are queued:
/// progress again, do not sleep), `NCCOM_IDLE_UNAVAILABLE` (no idle wait, its transport
/// closed, or completions stayed queued over 16 arms in a row that the comm does not read now,
/// which passes: yield instead). Call it from the thread that drives the comm, after a progress round
/// that found nothing to do; sleeping without arming first can miss a completion already
/// queued (the descriptor never fires) and sleep out the whole timeout.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown comm;
/// `NRT_INVALID` for a NULL `armed`; `NRT_FAILURE` for a comm in use by another thread.
///
/// # Safety
/// `armed` NULL or writable.
///
/// Seed: none (ABI 1.4).
#[no_mangle]
pub unsafe extern "C" fn nccom_comm_idle_arm(comm: *mut NccomComm, armed: *mut u32) -> NRT_STATUS {
    entry!(WHAT = "nccom_comm_idle_arm", {
        // SAFETY: `armed`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "armed", armed) }?;
        let a = with_entry(WHAT, comm, |e| {
            Ok(e.idle.as_ref().map_or(Armed::Unavailable, |w| w.arm()))
        })?;
        *out = match a {
            Armed::Ready => NCCOM_IDLE_READY,
            Armed::Armed => NCCOM_IDLE_ARMED,
            Armed::Unavailable => NCCOM_IDLE_UNAVAILABLE,
        };
        Ok(())
    })
}

/// Sleeps on the comm's armed idle wait until its descriptor signals, a
/// `nccom_comm_idle_kick` comes, or `timeout_ns` passed (at most 1 ms per call: a wake-up that
/// never comes costs that much); writes 1 to `*woken` when signalled or kicked, else 0. A comm
/// without an idle wait returns at once (0). Call it only after `nccom_comm_idle_arm` answered
/// `NCCOM_IDLE_ARMED`, from the same thread, with no progress call in between.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown comm;
/// `NRT_INVALID` for a NULL `woken`; `NRT_FAILURE` for a comm in use by another thread.
///
/// # Safety
/// `woken` NULL or writable.
///
/// Seed: none (ABI 1.4).
#[no_mangle]
pub unsafe extern "C" fn nccom_comm_idle_sleep(
    comm: *mut NccomComm,
    timeout_ns: u64,
    woken: *mut u32,
) -> NRT_STATUS {
    entry!(WHAT = "nccom_comm_idle_sleep", {
        // SAFETY: `woken`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "woken", woken) }?;
        let w = with_entry(WHAT, comm, |e| {
            Ok(e.idle.as_ref().is_some_and(|w| w.sleep(timeout_ns)))
        })?;
        *out = u32::from(w);
        Ok(())
    })
}

/// Ends the comm's idle sleep in progress, or its next one (writes the wait's eventfd), from
/// any thread at any time, also while another thread is inside a call on the comm (it never
/// takes the comm's handle slot: a side table, as `nccom_comm_abort`). A comm without an idle
/// wait: nothing to do.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown comm.
///
/// Not async-signal-safe (it takes a lock).
///
/// # Safety
/// None beyond the C contract (the handle is checked, never dereferenced).
///
/// Seed: none (ABI 1.4).
#[no_mangle]
pub unsafe extern "C" fn nccom_comm_idle_kick(comm: *mut NccomComm) -> NRT_STATUS {
    entry!(WHAT = "nccom_comm_idle_kick", {
        let h = c_handle(WHAT, "comm", comm)?;
        if let (_, _, Some(w)) = side_entry(WHAT, h)? {
            w.kick();
        }
        Ok(())
    })
}
