//! Records and progress: popping and waiting for a comm's final task records, and caller-mode
//! driving (`nrt_proxy_tick`, `nrt_proxy_drive_until`).

use proxy_abi::*;
use proxy_core::base::status::NrtStatus;
use proxy_core::driver::queue::Tick;
use proxy_core::driver::record::TaskRecord;
use std::collections::VecDeque;

use proxy_abi::boundary::c_out;
use proxy_abi::entry;

use crate::handles::with_comm;
use crate::objects::deadline_after;
use crate::types::*;

/// Pops the next final status record of the comm's tasks, if one is ready (also after a leave:
/// the records it collected).
///
/// Returns `NRT_SUCCESS` with `*record` filled; `NRT_QUEUE_EMPTY` when none is ready;
/// `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` for a NULL `record`.
///
/// # Safety
/// `record` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_try_pop(
    comm: *mut NrtProxyComm,
    record: *mut NrtProxyTaskRecord,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_try_pop", {
        with_comm(WHAT, comm, |e| {
            // SAFETY: `record`: the C caller's pointer, valid or NULL by this function's contract.
            let out = unsafe { c_out(WHAT, "record", record) }?;
            let r = match e.leftover.pop_front() {
                Some(r) => r,
                None => e
                    .member
                    .as_mut()
                    .and_then(|m| m.slot.try_pop_record())
                    .ok_or(NrtStatus::QueueEmpty)?,
            };
            *out = e.note(r);
            Ok(())
        })
    })
}

/// Waits at most `timeout_ms` for the next final record (spins for the spin budget, then
/// parks; in caller mode it drives the queue while the drive token is free).
///
/// Returns `NRT_SUCCESS` with `*record` filled; `NRT_TIMEOUT` (nothing lost);
/// `NRT_QUEUE_EMPTY` when no task is outstanding; `NRT_INVALID_HANDLE`; `NRT_INVALID` for a
/// NULL `record`; `NRT_CLOSED` for a comm that is not joined (and has no leftover records).
///
/// With a worker thread, a timeout of at least 1 s (and twice `worker_nap_us`) in which the
/// worker began no tick means the worker is stuck inside a call (a device callback, a
/// transport call), which no task's own limit can end: the call then also writes the queue's
/// state dump to the log and makes `nrt_proxy_comm_last_error` say so ("... began no tick
/// ... stuck inside a call ..."). A plain timeout (the worker ticks; the tasks wait for the
/// device or a peer) sets no last error.
///
/// # Safety
/// `record` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_wait(
    comm: *mut NrtProxyComm,
    timeout_ms: u64,
    record: *mut NrtProxyTaskRecord,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_wait", {
        with_comm(WHAT, comm, |e| {
            // SAFETY: `record`: the C caller's pointer, valid or NULL by this function's contract.
            let out = unsafe { c_out(WHAT, "record", record) }?;
            *out = e.wait_record(WHAT, VecDeque::pop_front, |m, waiter| {
                m.slot
                    .wait_record_until(waiter, Some(deadline_after(timeout_ms)))
            })?;
            Ok(())
        })
    })
}

/// Caller mode: one tick of the comm's proxy queue by the calling thread; `*tick` says what it
/// did (`NRT_PROXY_TICK_IDLE`, `_NO_PROGRESS`, `_PROGRESS`).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE`; `NRT_INVALID` for a NULL `tick`, a queue with a
/// worker thread, or one another thread is driving right now; `NRT_CLOSED` when not joined.
///
/// # Safety
/// `tick` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_tick(comm: *mut NrtProxyComm, tick: *mut u32) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_tick", {
        with_comm(WHAT, comm, |e| {
            // SAFETY: `tick`: the C caller's pointer, valid or NULL by this function's contract.
            let out = unsafe { c_out(WHAT, "tick", tick) }?;
            let m = e.member(WHAT)?;
            let t = m.slot.queue().tick().inspect_err(|_| {
                proxy_abi::refusal::refuse(
                    WHAT,
                    "not the driver",
                    format_args!("the queue has a worker thread, or another thread drives it"),
                );
            })?;
            *out = match t {
                Tick::Park => NRT_PROXY_TICK_IDLE,
                Tick::NoProgress => NRT_PROXY_TICK_NO_PROGRESS,
                Tick::Continue => NRT_PROXY_TICK_PROGRESS,
            };
            Ok(())
        })
    })
}

/// Drives (caller mode, while the drive token is free) or waits for the queue until the final
/// record of task `task_id` is there, at most `timeout_ms`, and returns it; records of other
/// tasks met meanwhile stay for the next pops, in order.
///
/// Returns `NRT_SUCCESS` with `*record` filled; `NRT_TIMEOUT` (a stuck worker is told apart
/// as in `nrt_proxy_wait`); `NRT_QUEUE_EMPTY` when no task is outstanding;
/// `NRT_INVALID_HANDLE`; `NRT_INVALID` for a NULL `record`; `NRT_CLOSED` when not joined.
///
/// # Safety
/// `record` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_drive_until(
    comm: *mut NrtProxyComm,
    task_id: u32,
    timeout_ms: u64,
    record: *mut NrtProxyTaskRecord,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_drive_until", {
        with_comm(WHAT, comm, |e| {
            // SAFETY: `record`: the C caller's pointer, valid or NULL by this function's contract.
            let out = unsafe { c_out(WHAT, "record", record) }?;
            let leftover = |l: &mut VecDeque<TaskRecord>| {
                let i = l.iter().position(|r| r.task_id == task_id)?;
                l.remove(i)
            };
            *out = e.wait_record(WHAT, leftover, |m, waiter| {
                m.slot
                    .drive_until(task_id, Some(deadline_after(timeout_ms)), waiter, None)
            })?;
            Ok(())
        })
    })
}
