use super::*;
use crate::base::sync::PlainArc;
use crate::base::time::NoClock;
use crate::progress::comm::CommConfig;
use crate::testing::{NullTransport, RecordingDevice};
use alloc::boxed::Box;

/// A failed progress call (here: a stream out of range) writes 0 to both out-parameters,
/// through the `extern "C"` entry and through the table's `bool` trampoline; a good call
/// on an empty stream ANDs in "idle and done".
#[test]
fn a_failed_progress_call_is_neither_idle_nor_done() {
    let mut comm = Comm::new(
        CommConfig::new(0, 2, 7),
        Box::new(NullTransport::default()),
        PlainArc::new(RecordingDevice::default()),
        PlainArc::new(NoClock),
    )
    .unwrap();
    let p = &mut comm as *mut Comm as *mut c_void;
    let (mut i, mut d): (c_int, c_int) = (1, 1);
    // SAFETY: `p` is a live comm; the out-parameters are live locals.
    let r = unsafe { in_process_progress(p, 7, 1, &mut i, &mut d) };
    assert_eq!(r, NrtStatus::Invalid.code());
    assert_eq!((i, d), (0, 0));
    let table = SeamTable::in_process();
    let (mut bi, mut bd) = (true, true);
    // SAFETY: as above.
    let r = unsafe { table.progress(p, 7, 1, &mut bi, &mut bd) };
    assert_eq!(r, Err(NrtStatus::Invalid));
    assert_eq!((bi, bd), (false, false));
    let (mut i, mut d): (c_int, c_int) = (1, 1);
    // SAFETY: as above.
    let r = unsafe { in_process_progress(p, 0, 1, &mut i, &mut d) };
    assert_eq!(r, NrtStatus::Success.code());
    assert_eq!((i, d), (1, 1));
}

/// The C form of `stop` keeps the seed's contract: it returns only once the cancelled
/// requests are confirmed (here after 50 polls), also on a stream whose stepped teardown
/// is under way; the stepped C form answers "not done" until then.
#[test]
fn the_c_stop_drains_before_it_returns_and_the_step_does_not() {
    use crate::progress::scripted::Script;
    use crate::testing::SlowCancelTransport;
    let t = SlowCancelTransport {
        confirm_after_polls: 50,
        ..SlowCancelTransport::default()
    };
    let polls = t.polls.clone();
    let mut comm = Comm::new(
        CommConfig::new(0, 2, 7),
        Box::new(t),
        PlainArc::new(RecordingDevice::default()),
        PlainArc::new(NoClock),
    )
    .unwrap();
    let script = Script {
        complete_after: 100,
        idle_mask: 0,
        fail_tick: 0,
    };
    for s in 0..2 {
        comm.start_scripted(s, 1, &[script]).unwrap();
        let (mut i, mut d) = (true, true);
        comm.progress(s, 1)
            .map(|t| t.and_into(&mut i, &mut d))
            .unwrap();
        comm.track_test_requests(s, 1, &[u64::from(s) + 1]).unwrap();
    }
    let p = &mut comm as *mut Comm as *mut c_void;
    let mut done: c_int = 1;
    // SAFETY: `p` is a live comm used by this thread only; `done` is a live local.
    let r = unsafe { in_process_stop_step(p, 0, &mut done) };
    assert_eq!(
        (r, done),
        (NrtStatus::Success.code(), 0),
        "a step does not wait"
    );
    let n = || polls.load(crate::base::sync::Ordering::Relaxed);
    assert!(n() < 50);
    // SAFETY: as above.
    let r = unsafe { in_process_stop(p, 1) };
    assert_eq!(r, NrtStatus::Success.code());
    assert_eq!(n(), 50, "stop returned only at the confirming poll");
    let st = comm.stream(1);
    assert!(!st.closing());
    assert_eq!(st.pool().len(), st.capacity());
    // Stream 0's stepped teardown: its request was confirmed meanwhile; a C stop finishes
    // it at once.
    // SAFETY: as above.
    let r = unsafe { in_process_stop(p, 0) };
    assert_eq!(r, NrtStatus::Success.code());
    assert!(!comm.stream(0).closing());
    assert_eq!(comm.stream(0).pool().len(), comm.stream(0).capacity());
    assert_eq!(comm.fatal_error(), None);
    // A null `done` is refused.
    // SAFETY: as above; a null out-parameter is part of the contract.
    let r = unsafe { in_process_stop_step(p, 0, core::ptr::null_mut()) };
    assert_eq!(r, NrtStatus::Invalid.code());
}
