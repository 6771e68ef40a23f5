//! Model 10: an abort requested from other threads while the driving thread steps the comm's
//! network task (docs/design.md §9, "Abort").
//!
//! Two requesters race: a user abort (`NRT_CLOSED`) and a failure detector
//! (`NRT_NETWORK_PROXY_FAILURE`), each on its own thread, while the driving thread steps a
//! network task that carries the comm's [`AbortHandle`] and never finishes by itself (its
//! scripted progress half reports idle and not done). The handoff under test is the abort word:
//! exactly one request wins (one CAS from 0), the task ends DONE with the winner's status at a
//! step after the request (never another one's), and it stops its stream exactly once if it
//! had filed it.
//!
//! The progress half here is a scripted [`SeamTable`] of `extern "C"` functions that only count
//! calls in plain `Cell`s (touched by the driving thread alone, so no loom object, and no
//! panic, inside them).

use core::cell::Cell;
use core::ffi::{c_int, c_void};

use proxy_core::base::abort::AbortHandle;
use proxy_core::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr};
use proxy_core::base::status::NrtStatus;
use proxy_core::driver::record::RunState;
use proxy_core::driver::task::{
    BlockFifos, CommHandle, NetworkTask, NetworkTaskSpec, ProxyTask, Step, StepEnv,
};
use proxy_core::driver::trigger::TriggerWords;
use proxy_core::seam::SeamTable;

use super::driver::SPIN_BOUND;
use super::thread;

/// The scripted comm: `(start, progress, stop)` call counts.
#[derive(Default)]
struct CountingComm {
    starts: Cell<u32>,
    progresses: Cell<u32>,
    stops: Cell<u32>,
}

/// The comm behind a seam call's handle.
///
/// # Safety
/// `comm` is the address of a live [`CountingComm`] (every handle of this model is).
unsafe fn comm_of<'a>(comm: *mut c_void) -> &'a CountingComm {
    // SAFETY: the caller's contract.
    unsafe { &*(comm as *const CountingComm) }
}

unsafe extern "C" fn counting_start(
    comm: *mut c_void,
    _stream: u32,
    _bb: u32,
    _ops: *const NetOpInfo,
    _n_ops: usize,
    _src: *const NetSrcAddr,
    _n_src: usize,
    _dst: *const NetDestAddr,
    _n_dst: usize,
) -> u32 {
    // SAFETY: the model's only comm handle points at a live CountingComm.
    let c = unsafe { comm_of(comm) };
    c.starts.set(c.starts.get() + 1);
    0
}

unsafe extern "C" fn counting_progress(
    comm: *mut c_void,
    _stream: u32,
    _bb: u32,
    _idle: *mut c_int,
    done: *mut c_int,
) -> u32 {
    // SAFETY: as for `counting_start`.
    let c = unsafe { comm_of(comm) };
    c.progresses.set(c.progresses.get() + 1);
    // SAFETY: the driver passes valid out-parameters (seeded idle = done = 1): idle, not done.
    unsafe { *done = 0 };
    0
}

unsafe extern "C" fn counting_stop(comm: *mut c_void, _stream: u32) -> u32 {
    // SAFETY: as for `counting_start`.
    let c = unsafe { comm_of(comm) };
    c.stops.set(c.stops.get() + 1);
    0
}

/// Model 10 — see the module docs. Checks: exactly one of the two racing requests is told it
/// aborted the comm; the comm's abort status is the winner's; the task ends DONE with that
/// status (a status the driving thread read from the word, which a losing request must never
/// replace); it stops its stream exactly once if it filed (at most once), never otherwise.
pub fn abort_race() {
    let comm = Box::new(CountingComm::default());
    let abort = AbortHandle::new();
    // SAFETY: `comm` outlives the task (dropped after it, below) and only this thread, which
    // steps the task, calls the seam.
    let handle =
        unsafe { CommHandle::new(&*comm as *const CountingComm as *mut c_void) }.expect("non-null");
    let mut task = NetworkTask::new(NetworkTaskSpec {
        task_id: 1,
        comm: handle,
        comm_id: 4,
        seam: SeamTable {
            start: counting_start,
            progress: counting_progress,
            stop: counting_stop,
            stop_step: None,
        },
        blocks: vec![BlockFifos {
            stream: 0,
            bb: 1,
            ..Default::default()
        }],
        schedule: None,
        triggers: TriggerWords::none(),
        wait_for_device: false,
        skip: false,
        timeout_ns: None,
    })
    .expect("valid spec")
    .with_abort(abort.clone());
    let user = {
        let h = abort.clone();
        thread::spawn(move || h.abort())
    };
    let detector = {
        let h = abort.clone();
        thread::spawn(move || h.abort_with(NrtStatus::NetworkProxyFailure))
    };
    let env = StepEnv {
        now_ns: 0,
        may_begin: true,
        stamp: proxy_core::base::trace::TickStamp::NONE,
    };
    let mut steps = 0;
    while task.step(&env) != Step::Done {
        steps += 1;
        assert!(steps < SPIN_BOUND, "the aborted task never ended");
        thread::yield_now();
    }
    let rec = task.record();
    let (by_user, by_detector) = (user.join().unwrap(), detector.join().unwrap());
    assert!(
        by_user != by_detector,
        "exactly one abort request wins (user: {by_user}, detector: {by_detector})"
    );
    let winner = if by_user {
        NrtStatus::Closed
    } else {
        NrtStatus::NetworkProxyFailure
    };
    assert_eq!(
        abort.aborted(),
        Some(winner),
        "the comm's abort status is not the winner's"
    );
    assert_eq!(
        (rec.state(), rec.status()),
        (Some(RunState::Done), winner),
        "the task ended with another status than the comm's abort"
    );
    // An abort seen at the first step ends the task before it files (no seam call at all);
    // otherwise it filed once and stops once.
    assert!(comm.starts.get() <= 1, "filed at most once");
    assert_eq!(
        comm.stops.get(),
        comm.starts.get(),
        "a task that filed stops its stream exactly once, one that did not never"
    );
    drop(task);
    drop(comm);
}

#[cfg(all(test, not(loom)))]
mod tests;
