//! State-machine tests of the network and barrier tasks, with a scripted seam.

extern crate std;

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::base::host_word::HostWord;
use crate::base::status::NrtStatus;
use crate::driver::record::RunState;
use crate::driver::trigger::{TriggerWords, TRIGGER_ARMED};
use crate::testutil::{block, seam, Call, Script, Words};

const GO: StepEnv = StepEnv {
    now_ns: 0,
    may_begin: true,
    stamp: crate::base::trace::TickStamp::NONE,
};

fn at(now_ns: u64) -> StepEnv {
    StepEnv {
        now_ns,
        may_begin: true,
        stamp: crate::base::trace::TickStamp::NONE,
    }
}

fn spec(s: &Script, blocks: Vec<BlockFifos>) -> NetworkTaskSpec {
    NetworkTaskSpec {
        task_id: 1,
        // SAFETY: every test keeps its script alive until its tasks are reported.
        comm: unsafe { s.handle() },
        comm_id: 9,
        seam: seam(),
        blocks,
        schedule: None,
        triggers: TriggerWords::none(),
        wait_for_device: false,
        skip: false,
        timeout_ns: None,
    }
}

/// Steps until DONE (at most `max` steps); returns the number of steps.
fn run(t: &mut NetworkTask, max: usize) -> usize {
    for i in 1..=max {
        if t.step(&GO) == Step::Done {
            return i;
        }
    }
    panic!("task not DONE after {max} steps: {t:?}");
}

// ---- INIT ---------------------------------------------------------------------------------

#[test]
fn skip_flag_goes_done_without_touching_the_seam() {
    let s = Script::new(1);
    let mut t = NetworkTask::new(NetworkTaskSpec {
        skip: true,
        ..spec(&s, vec![block(0, 1)])
    })
    .unwrap();
    assert_eq!(t.step(&GO), Step::Done);
    assert_eq!(t.record().status(), NrtStatus::Success);
    assert_eq!(s.counts(), (0, 0, 0));
}

#[test]
fn init_files_every_block_of_every_stream_then_progresses() {
    let s = Script::new(1);
    let mut t = NetworkTask::new(spec(
        &s,
        vec![block(0, 10), block(1, 10), block(0, 20), block(1, 20)],
    ))
    .unwrap();
    assert_eq!(t.record().streams, 0b11);
    assert_eq!(t.step(&GO), Step::Progressed);
    assert_eq!(t.state(), RunState::Progressing);
    assert_eq!(s.counts(), (4, 0, 0));
    assert_eq!(t.schedule(), &[10, 20]);
    run(&mut t, 10);
    assert_eq!(s.progress_bbs(0), [10, 20]);
    assert_eq!(s.progress_bbs(1), [10, 20]);
    // stop once per stream, at the end, never on a switch
    let calls = s.calls();
    assert_eq!(
        &calls[calls.len() - 2..],
        &[Call::Stop { stream: 0 }, Call::Stop { stream: 1 }]
    );
    assert_eq!(s.counts(), (4, 4, 2));
    assert_eq!(t.record().status(), NrtStatus::Success);
    assert!(t.record().is_done());
}

#[test]
fn init_waits_behind_an_earlier_task_and_never_times_out_there() {
    let s = Script::new(1);
    let mut t = NetworkTask::new(NetworkTaskSpec {
        timeout_ns: Some(10),
        ..spec(&s, vec![block(0, 1)])
    })
    .unwrap();
    let behind = StepEnv {
        now_ns: 1_000_000,
        may_begin: false,
        stamp: crate::base::trace::TickStamp::NONE,
    };
    for _ in 0..5 {
        assert_eq!(t.step(&behind), Step::Idle);
    }
    assert_eq!(t.state(), RunState::Init);
    assert_eq!(s.counts(), (0, 0, 0));
}

#[test]
fn start_failure_stops_each_stream_and_ends_with_the_error() {
    let s = Script::new(1);
    s.fail_start
        .store(true, crate::base::sync::Ordering::SeqCst);
    let mut t = NetworkTask::new(spec(&s, vec![block(0, 1), block(2, 1)])).unwrap();
    assert_eq!(t.step(&GO), Step::Done);
    assert_eq!(t.record().status(), NrtStatus::Invalid);
    assert_eq!(s.counts(), (1, 0, 2));
}

#[test]
fn bad_blocks_are_rejected_before_any_call() {
    let s = Script::new(1);
    assert_eq!(
        NetworkTask::new(spec(&s, vec![block(4, 1)])).err(),
        Some(NrtStatus::Invalid)
    );
    assert_eq!(
        NetworkTask::new(spec(&s, vec![block(0, u32::MAX)])).err(),
        Some(NrtStatus::Invalid)
    );
    assert_eq!(s.counts(), (0, 0, 0));
}

// ---- WAITING_DEVICE_TRIGGER ----------------------------------------------------------------

#[test]
fn armed_trigger_blocks_progress_until_a_device_thread_writes_it() {
    let ws = Words::new(&[0, 0]);
    let s = Script::new(1);
    let (w0, w1) = (ws.get(0), ws.get(1));
    let triggers = TriggerWords::new(&[w0, w1]).unwrap();
    triggers.arm();
    let mut t = NetworkTask::new(NetworkTaskSpec {
        triggers,
        wait_for_device: true,
        ..spec(&s, vec![block(0, 1), block(1, 1)])
    })
    .unwrap();
    assert_eq!(t.step(&GO), Step::Progressed);
    assert_eq!(t.state(), RunState::WaitingDeviceTrigger);
    for _ in 0..100 {
        assert_eq!(t.step(&GO), Step::Idle);
    }
    assert_eq!(s.progresses.load(crate::base::sync::Ordering::SeqCst), 0);
    // one word written is not enough
    w0.store(1);
    assert_eq!(t.step(&GO), Step::Idle);
    assert_eq!(t.state(), RunState::WaitingDeviceTrigger);
    std::thread::spawn(move || w1.store(1)).join().unwrap();
    assert_eq!(t.step(&GO), Step::Progressed);
    assert_eq!(t.state(), RunState::Progressing);
    assert_eq!((w0.load(), w1.load()), (0, 0), "trigger consumed");
    assert_eq!(s.progresses.load(crate::base::sync::Ordering::SeqCst), 0);
    assert_eq!(t.step(&GO), Step::Done);
    assert_eq!(s.counts(), (2, 2, 2));
}

#[test]
fn trigger_wait_times_out_and_stops_streams() {
    let ws = Words::new(&[TRIGGER_ARMED]);
    let s = Script::new(1);
    let w = ws.get(0);
    let mut t = NetworkTask::new(NetworkTaskSpec {
        triggers: TriggerWords::new(&[w]).unwrap(),
        wait_for_device: true,
        timeout_ns: Some(100),
        ..spec(&s, vec![block(0, 1)])
    })
    .unwrap();
    assert_eq!(t.step(&at(0)), Step::Progressed);
    assert_eq!(t.step(&at(100)), Step::Idle);
    assert_eq!(t.step(&at(101)), Step::Done);
    assert_eq!(t.record().status(), NrtStatus::Timeout);
    assert_eq!(s.counts(), (1, 0, 1));
}

// ---- PROGRESSING / IDLE --------------------------------------------------------------------

#[test]
fn schedule_with_repeats_runs_each_block_the_right_number_of_times() {
    let s = Script::new(1);
    // stream 1 needs 3 calls per block, stream 0 one: stream 0 finishes first.
    s.needed[1].store(3, crate::base::sync::Ordering::SeqCst);
    let mut t = NetworkTask::new(NetworkTaskSpec {
        schedule: Some(vec![1, 2, 1]),
        ..spec(&s, vec![block(0, 1), block(0, 2), block(1, 1), block(1, 2)])
    })
    .unwrap();
    run(&mut t, 20);
    assert_eq!(
        s.progress_bbs(0),
        [1, 2, 1],
        "finished stream not called again"
    );
    assert_eq!(s.progress_bbs(1), [1, 1, 1, 2, 2, 2, 1, 1, 1]);
    assert_eq!(s.counts().2, 2);
}

#[test]
fn idle_rounds_report_idle_and_busy_rounds_progressing() {
    let s = Script::new(3);
    let mut t = NetworkTask::new(spec(&s, vec![block(0, 1)])).unwrap();
    t.step(&GO);
    assert_eq!(t.step(&GO), Step::Progressed);
    assert_eq!(t.state(), RunState::Progressing);
    s.idle.store(true, crate::base::sync::Ordering::SeqCst);
    assert_eq!(t.step(&GO), Step::Idle);
    assert_eq!(t.state(), RunState::Idle);
    // IDLE is not terminal: the next call completes the block
    assert_eq!(t.step(&GO), Step::Done);
}

#[test]
fn progress_failure_stops_each_stream_once() {
    let s = Script::new(0);
    s.fail_progress_at
        .store(3, crate::base::sync::Ordering::SeqCst);
    let mut t = NetworkTask::new(spec(&s, vec![block(0, 1), block(3, 1)])).unwrap();
    t.step(&GO);
    assert_eq!(t.step(&GO), Step::Progressed);
    assert_eq!(t.step(&GO), Step::Done);
    assert_eq!(t.record().status(), NrtStatus::NetworkProxyFailure);
    assert_eq!(s.counts(), (2, 3, 2));
    // DONE: stepping again changes nothing
    assert_eq!(t.step(&GO), Step::Done);
    assert_eq!(s.counts(), (2, 3, 2));
}

#[test]
fn no_progress_past_the_timeout_ends_with_timeout() {
    let s = Script::new(0);
    s.idle.store(true, crate::base::sync::Ordering::SeqCst);
    let mut t = NetworkTask::new(NetworkTaskSpec {
        timeout_ns: Some(1_000),
        ..spec(&s, vec![block(0, 1), block(1, 1)])
    })
    .unwrap();
    assert_eq!(t.step(&at(5)), Step::Progressed);
    assert_eq!(t.step(&at(500)), Step::Idle);
    // a busy call restarts the clock
    s.idle.store(false, crate::base::sync::Ordering::SeqCst);
    assert_eq!(t.step(&at(900)), Step::Progressed);
    s.idle.store(true, crate::base::sync::Ordering::SeqCst);
    assert_eq!(t.step(&at(1_900)), Step::Idle);
    assert_eq!(t.step(&at(1_901)), Step::Done);
    assert_eq!(t.record().status(), NrtStatus::Timeout);
    assert_eq!(s.counts().2, 2);
}

#[test]
fn empty_schedule_finishes_with_stops_only() {
    let s = Script::new(1);
    let mut t = NetworkTask::new(NetworkTaskSpec {
        schedule: Some(vec![]),
        ..spec(&s, vec![block(2, 1)])
    })
    .unwrap();
    run(&mut t, 3);
    assert_eq!(s.counts(), (1, 0, 1));
}

// ---- close ---------------------------------------------------------------------------------

#[test]
fn close_stops_only_a_task_that_filed() {
    let s = Script::new(0);
    let mut a = NetworkTask::new(spec(&s, vec![block(0, 1)])).unwrap();
    a.close(NrtStatus::Closed);
    assert_eq!(a.record().status(), NrtStatus::Closed);
    assert_eq!(s.counts(), (0, 0, 0));
    let mut b = NetworkTask::new(spec(&s, vec![block(0, 1), block(1, 1)])).unwrap();
    b.step(&GO);
    b.step(&GO);
    b.close(NrtStatus::Closed);
    b.close(NrtStatus::Closed);
    assert!(b.record().is_done());
    assert_eq!(b.record().status(), NrtStatus::Closed);
    assert_eq!(s.counts(), (2, 2, 2));
}

#[test]
fn status_record_is_published_with_the_state() {
    let s = Script::new(1);
    let mut t = NetworkTask::new(spec(&s, vec![block(0, 1)])).unwrap();
    t.bind_slot(5);
    let live = t.status_record();
    assert_eq!(live.load().slot, 5);
    t.step(&GO);
    assert_eq!(live.load().state(), Some(RunState::Progressing));
    t.step(&GO);
    assert_eq!(live.load(), t.record());
    assert!(live.load().is_done());
}

// ---- barrier -------------------------------------------------------------------------------

fn barrier(
    b: &SharedMemBarrier,
    rank: u32,
    trig: HostWord,
    leader: bool,
    sems: &[HostWord],
) -> BarrierTask {
    BarrierTask::new(BarrierTaskSpec {
        task_id: rank,
        comm_id: 3,
        channel: Box::new(b.endpoint(rank).unwrap()),
        triggers: TriggerWords::new(&[trig]).unwrap(),
        leader,
        done_semaphores: sems.to_vec(),
        skip: false,
        timeout_ns: None,
    })
}

#[test]
fn barrier_gates_on_trigger_waits_for_every_rank_and_leader_increments() {
    let ws = Words::new(&[TRIGGER_ARMED, TRIGGER_ARMED, 0, 0]);
    let b = SharedMemBarrier::new(2).unwrap();
    let (t0, t1) = (ws.get(0), ws.get(1));
    let sems = [ws.get(2), ws.get(3)];
    let mut r0 = barrier(&b, 0, t0, true, &sems);
    let mut r1 = barrier(&b, 1, t1, false, &sems);
    // Edge 3: no trigger yet, the task waits for it (timed) in WAITING_DEVICE_TRIGGER.
    assert_eq!(r0.step(&GO), Step::Progressed);
    assert_eq!(r0.state(), RunState::WaitingDeviceTrigger);
    assert_eq!(r0.step(&GO), Step::Idle);
    assert_eq!(r0.state(), RunState::WaitingDeviceTrigger);
    assert_eq!(
        t0.load(),
        TRIGGER_ARMED,
        "an unwritten trigger is not consumed"
    );
    t0.store(1);
    // Edge 4: trigger seen, consumed, arrived.
    assert_eq!(r0.step(&GO), Step::Progressed);
    assert_eq!(r0.state(), RunState::Progressing);
    assert_eq!(t0.load(), 0);
    for _ in 0..3 {
        assert_eq!(r0.step(&GO), Step::Idle);
    }
    assert_eq!(r0.state(), RunState::Idle);
    assert_eq!(sems[0].load(), 0);
    t1.store(1);
    assert_eq!(r1.step(&GO), Step::Progressed);
    assert_eq!(r1.step(&GO), Step::Done);
    assert_eq!(
        sems[0].load() + sems[1].load(),
        0,
        "only the leader increments"
    );
    assert_eq!(r0.step(&GO), Step::Done);
    assert_eq!((sems[0].load(), sems[1].load()), (1, 1));
    assert_eq!(r0.step(&GO), Step::Done);
    assert_eq!(sems[0].load(), 1);
}

#[test]
fn barrier_generations_tolerate_a_rank_running_ahead() {
    let b = SharedMemBarrier::new(2).unwrap();
    let (mut e0, mut e1) = (b.endpoint(0).unwrap(), b.endpoint(1).unwrap());
    let g0 = e0.arrive().unwrap();
    let g1 = e1.arrive().unwrap();
    let g1b = e1.arrive().unwrap(); // rank 1 runs into the next barrier
    assert!(e0.poll(g0).unwrap());
    assert!(e1.poll(g1).unwrap());
    assert!(!e1.poll(g1b).unwrap());
    let g0b = e0.arrive().unwrap();
    assert!(e0.poll(g0b).unwrap() && e1.poll(g1b).unwrap());
    assert!(SharedMemBarrier::new(0).is_err());
    assert!(b.endpoint(2).is_err());
}

#[test]
fn barrier_times_out_and_closes() {
    let b = SharedMemBarrier::new(2).unwrap();
    let mut t = BarrierTask::new(BarrierTaskSpec {
        timeout_ns: Some(10),
        ..BarrierTaskSpec {
            task_id: 0,
            comm_id: 0,
            channel: Box::new(b.endpoint(0).unwrap()),
            triggers: TriggerWords::none(),
            leader: true,
            done_semaphores: vec![],
            skip: false,
            timeout_ns: None,
        }
    });
    assert_eq!(t.step(&at(0)), Step::Progressed);
    assert_eq!(t.step(&at(10)), Step::Idle);
    assert_eq!(t.step(&at(11)), Step::Done);
    assert_eq!(t.record().status(), NrtStatus::Timeout);
    let mut c = BarrierTask::new(BarrierTaskSpec {
        task_id: 1,
        comm_id: 0,
        channel: Box::new(b.endpoint(1).unwrap()),
        triggers: TriggerWords::none(),
        leader: false,
        done_semaphores: vec![],
        skip: false,
        timeout_ns: None,
    });
    c.close(NrtStatus::Closed);
    assert_eq!(c.record().status(), NrtStatus::Closed);
    assert_eq!(c.step(&GO), Step::Done);
}

// ---- re-arm (edge 10, resubmit) -------------------------------------------------------------

#[test]
fn network_rearm_is_refused_unless_done_and_changes_nothing() {
    let s = Script::new(2);
    let mut t = NetworkTask::new(spec(&s, vec![block(0, 1)])).unwrap();
    assert_eq!(t.rearm(2), Err(NrtStatus::Invalid), "INIT");
    assert_eq!(t.step(&GO), Step::Progressed);
    assert_eq!(t.rearm(2), Err(NrtStatus::Invalid), "PROGRESSING");
    assert_eq!(t.record().task_id, 1);
    assert_eq!(t.state(), RunState::Progressing);
    run(&mut t, 10);
    assert_eq!(s.counts(), (1, 2, 1));
}

#[test]
fn network_rearm_runs_the_same_blocks_again_in_place() {
    let s = Script::new(1);
    let mut t = NetworkTask::new(spec(&s, vec![block(0, 10), block(1, 10), block(0, 20)])).unwrap();
    t.bind_slot(4);
    let live = t.status_record();
    run(&mut t, 10);
    let first = s.counts();
    assert_eq!(
        first,
        (3, 4, 2),
        "3 starts, blocks 10 and 20 on both streams, 2 stops"
    );
    let (ops_ptr, sched_ptr) = (t.blocks()[0].ops.as_ptr(), t.schedule().as_ptr());
    for exec in 2..=4u32 {
        t.rearm(exec).unwrap();
        let r = t.record();
        assert_eq!(
            (r.task_id, r.slot, r.state(), r.status(), r.streams),
            (
                exec,
                u32::MAX,
                Some(RunState::Init),
                NrtStatus::Success,
                0b11
            )
        );
        assert_eq!(live.load(), r, "the same shared record, reset in place");
        run(&mut t, 10);
        assert_eq!(
            s.counts(),
            (first.0 * exec, first.1 * exec, first.2 * exec),
            "execution {exec} repeats the first"
        );
        assert!(live.load().is_done());
    }
    assert_eq!(t.blocks()[0].ops.as_ptr(), ops_ptr, "FIFOs kept");
    assert_eq!(t.schedule().as_ptr(), sched_ptr, "schedule kept");
}

#[test]
fn network_rearm_with_new_triggers_and_schedule_then_gates_again() {
    let ws = Words::new(&[TRIGGER_ARMED]);
    let s = Script::new(1);
    let mut t = NetworkTask::new(spec(&s, vec![block(0, 1), block(0, 2)])).unwrap();
    run(&mut t, 10);
    assert_eq!(s.progress_bbs(0), vec![1, 2]);
    let trig = TriggerWords::new(&[ws.get(0)]).unwrap();
    assert_eq!(t.rearm_with(2, Some(trig), Some(&[2, 1, 2])), Ok(()));
    assert_eq!(t.schedule(), &[2, 1, 2]);
    assert_eq!(t.step(&GO), Step::Progressed, "INIT files");
    assert_eq!(
        t.state(),
        RunState::Progressing,
        "no device wait in this spec"
    );
    run(&mut t, 10);
    assert_eq!(s.progress_bbs(0), vec![1, 2, 2, 1, 2]);
    assert_eq!(
        t.rearm_with(3, None, Some(&[u32::MAX])),
        Err(NrtStatus::Invalid)
    );
    assert_eq!(t.record().task_id, 2, "a refused rearm changes nothing");
}

#[test]
fn replace_fifos_copies_into_the_existing_vectors() {
    let s = Script::new(1);
    let mut b0 = block(0, 1);
    b0.ops = vec![crate::base::desc::NetOpInfo::default(); 4];
    let mut t = NetworkTask::new(spec(&s, vec![b0])).unwrap();
    let ptr = t.blocks()[0].ops.as_ptr();
    let mut b1 = block(2, 7);
    b1.ops = vec![
        crate::base::desc::NetOpInfo {
            tag: 9,
            ..Default::default()
        };
        3
    ];
    t.replace_fifos(core::slice::from_ref(&b1)).unwrap();
    assert_eq!(
        t.blocks()[0].ops.as_ptr(),
        ptr,
        "same storage (capacity 4 >= 3)"
    );
    assert_eq!(t.blocks(), core::slice::from_ref(&b1));
    assert_eq!(
        t.schedule(),
        &[7],
        "the default schedule follows the blocks"
    );
    assert_eq!(t.record().streams, 0b100);
    assert_eq!(t.step(&GO), Step::Progressed);
    assert_eq!(
        t.replace_fifos(&[block(0, 1)]),
        Err(NrtStatus::Invalid),
        "not while the blocks are filed"
    );
    run(&mut t, 10);
    assert_eq!(s.calls().first(), Some(&Call::Start { stream: 2, bb: 7 }));
    assert_eq!(
        t.replace_fifos(&[block(4, 1)]),
        Err(NrtStatus::Invalid),
        "stream 4"
    );
    t.replace_fifos(&[block(1, 3), block(1, 4)]).unwrap();
    t.rearm(2).unwrap();
    assert_eq!(t.record().streams, 0b10);
    run(&mut t, 10);
    assert_eq!(s.progress_bbs(1), vec![3, 4]);
}

#[test]
fn barrier_rearm_runs_the_next_generation() {
    let ws = Words::new(&[TRIGGER_ARMED, TRIGGER_ARMED, 0, 0]);
    let b = SharedMemBarrier::new(2).unwrap();
    let (t0, t1) = (ws.get(0), ws.get(1));
    let sems = [ws.get(2), ws.get(3)];
    let mut r0 = barrier(&b, 0, t0, true, &sems);
    let mut r1 = barrier(&b, 1, t1, false, &sems);
    assert_eq!(r0.rearm(5), Err(NrtStatus::Invalid), "INIT");
    for exec in 1..=3u32 {
        if exec > 1 {
            r0.rearm(10 + exec).unwrap();
            r1.rearm_with(20 + exec, Some(TriggerWords::new(&[t1]).unwrap()))
                .unwrap();
            assert_eq!(r0.state(), RunState::Init);
            assert_eq!(r1.record().task_id, 20 + exec);
            TriggerWords::new(&[t0, t1]).unwrap().arm();
        }
        assert_eq!(r0.step(&GO), Step::Progressed, "gated on the trigger again");
        assert_eq!(r0.state(), RunState::WaitingDeviceTrigger);
        t0.store(1);
        t1.store(1);
        assert_eq!(r0.step(&GO), Step::Progressed);
        assert_eq!(
            r0.step(&GO),
            Step::Idle,
            "rank 1 has not arrived at this generation"
        );
        assert_eq!(r1.step(&GO), Step::Progressed);
        assert_eq!(r1.step(&GO), Step::Done);
        assert_eq!(r0.step(&GO), Step::Done);
        assert_eq!((sems[0].load(), sems[1].load()), (exec, exec));
    }
    r0.replace_done_semaphores(&sems[..1]).unwrap();
    r0.rearm(99).unwrap();
    TriggerWords::new(&[t0, t1]).unwrap().arm();
    t0.store(1);
    t1.store(1);
    r0.step(&GO);
    r1.rearm(98).unwrap();
    r1.step(&GO);
    assert_eq!(r0.step(&GO), Step::Done);
    assert_eq!(
        (sems[0].load(), sems[1].load()),
        (4, 3),
        "only the one semaphore left"
    );
}

// ---- bounded waits (docs/design.md §9) -------------------------------------------------------

use crate::base::abort::AbortHandle;
use crate::driver::task::WAIT_WARN_INTERVAL_NS;

const SEC: u64 = 1_000_000_000;

#[test]
fn barrier_whose_trigger_never_comes_times_out_without_arriving() {
    let ws = Words::new(&[TRIGGER_ARMED, 0]);
    let b = SharedMemBarrier::new(2).unwrap();
    let (trig, sem) = (ws.get(0), ws.get(1));
    let mut t = BarrierTask::new(BarrierTaskSpec {
        timeout_ns: Some(30 * SEC),
        ..barrier_spec(&b, 0, trig, &[sem])
    });
    assert_eq!(t.step(&at(5 * SEC)), Step::Progressed, "edge 3");
    assert_eq!(t.state(), RunState::WaitingDeviceTrigger);
    for k in 2..=7 {
        // every 5 s up to 35 s: exactly the limit at 35 s, still waiting
        assert_eq!(t.step(&at(k * 5 * SEC)), Step::Idle, "at {} s", k * 5);
    }
    assert_eq!(t.step(&at(35 * SEC + 1)), Step::Done, "edge 8");
    let r = t.record();
    assert_eq!(
        (r.state(), r.status()),
        (Some(RunState::Done), NrtStatus::Timeout)
    );
    assert_eq!(trig.load(), TRIGGER_ARMED, "the trigger was never consumed");
    assert_eq!(sem.load(), 0, "nothing incremented");
    // It never arrived: rank 1's barrier of the same generation does not pass alone.
    let mut e1 = b.endpoint(1).unwrap();
    let g = e1.arrive().unwrap();
    assert!(!e1.poll(g).unwrap(), "rank 0 never arrived");
    assert_eq!(
        t.core().wait_warnings(),
        3,
        "warned at 10 s, 20 s and 30 s of waiting"
    );
}

#[test]
fn barrier_trigger_arriving_late_within_the_limit_runs_the_barrier() {
    let ws = Words::new(&[TRIGGER_ARMED, TRIGGER_ARMED, 0]);
    let b = SharedMemBarrier::new(2).unwrap();
    let (t0, t1, sem) = (ws.get(0), ws.get(1), ws.get(2));
    let mut r0 = BarrierTask::new(BarrierTaskSpec {
        timeout_ns: Some(10 * SEC),
        ..barrier_spec(&b, 0, t0, &[sem])
    });
    let mut r1 = BarrierTask::new(BarrierTaskSpec {
        timeout_ns: Some(10 * SEC),
        leader: false,
        ..barrier_spec(&b, 1, t1, &[])
    });
    assert_eq!(r0.step(&at(0)), Step::Progressed);
    t0.store(1);
    assert_eq!(
        r0.step(&at(9 * SEC)),
        Step::Progressed,
        "edge 4, restarts the clock"
    );
    assert_eq!(r0.state(), RunState::Progressing);
    // Rank 1's trigger was written before its first step: edge 2 straight away.
    t1.store(1);
    assert_eq!(r1.step(&at(18 * SEC)), Step::Progressed);
    assert_eq!(r1.state(), RunState::Progressing);
    assert_eq!(
        r0.step(&at(18 * SEC)),
        Step::Done,
        "9 s after arriving: within the limit"
    );
    assert_eq!(r0.record().status(), NrtStatus::Success);
    assert_eq!(sem.load(), 1);
    assert_eq!(r1.step(&at(18 * SEC)), Step::Done);
    assert_eq!(r1.record().status(), NrtStatus::Success);
}

fn barrier_spec(
    b: &SharedMemBarrier,
    rank: u32,
    trig: HostWord,
    sems: &[HostWord],
) -> BarrierTaskSpec {
    BarrierTaskSpec {
        task_id: 40 + rank,
        comm_id: 3,
        channel: Box::new(b.endpoint(rank).unwrap()),
        triggers: TriggerWords::new(&[trig]).unwrap(),
        leader: true,
        done_semaphores: sems.to_vec(),
        skip: false,
        timeout_ns: None,
    }
}

#[test]
fn a_waiting_task_warns_every_interval_and_progress_restarts_the_count() {
    let s = Script::new(0);
    s.idle.store(true, crate::base::sync::Ordering::SeqCst);
    let mut t = NetworkTask::new(spec(&s, vec![block(0, 1), block(1, 1)])).unwrap();
    assert_eq!(t.step(&at(0)), Step::Progressed, "filed");
    let warnings = |t: &NetworkTask| t.core().wait_warnings();
    assert_eq!(t.step(&at(WAIT_WARN_INTERVAL_NS - 1)), Step::Idle);
    assert_eq!(warnings(&t), 0);
    t.step(&at(WAIT_WARN_INTERVAL_NS));
    assert_eq!(warnings(&t), 1, "at 10 s");
    for k in 1..=5 {
        t.step(&at(WAIT_WARN_INTERVAL_NS + k * SEC));
    }
    assert_eq!(warnings(&t), 1, "once per interval, however often stepped");
    t.step(&at(5 * WAIT_WARN_INTERVAL_NS));
    assert_eq!(
        warnings(&t),
        2,
        "one warning for several intervals passed between steps"
    );
    t.step(&at(5 * WAIT_WARN_INTERVAL_NS + 1));
    assert_eq!(warnings(&t), 2);
    // A busy round is progress: the count of this wait starts again from it.
    s.idle.store(false, crate::base::sync::Ordering::SeqCst);
    let busy_at = 6 * WAIT_WARN_INTERVAL_NS;
    assert_eq!(t.step(&at(busy_at)), Step::Progressed);
    s.idle.store(true, crate::base::sync::Ordering::SeqCst);
    t.step(&at(busy_at + WAIT_WARN_INTERVAL_NS - 1));
    assert_eq!(warnings(&t), 2);
    t.step(&at(busy_at + WAIT_WARN_INTERVAL_NS));
    assert_eq!(warnings(&t), 3);
    assert_eq!(
        t.state(),
        RunState::Idle,
        "no limit: a warning never ends the task"
    );
}

#[test]
fn trigger_wait_warns_while_it_waits() {
    let ws = Words::new(&[TRIGGER_ARMED]);
    let s = Script::new(1);
    let mut t = NetworkTask::new(NetworkTaskSpec {
        triggers: TriggerWords::new(&[ws.get(0)]).unwrap(),
        wait_for_device: true,
        timeout_ns: Some(25 * SEC),
        ..spec(&s, vec![block(0, 1)])
    })
    .unwrap();
    assert_eq!(t.step(&at(0)), Step::Progressed);
    for k in 1..=25 {
        assert_eq!(t.step(&at(k * SEC)), Step::Idle);
    }
    assert_eq!(t.core().wait_warnings(), 2, "at 10 s and 20 s");
    assert_eq!(t.step(&at(25 * SEC + 1)), Step::Done);
    assert_eq!(t.record().status(), NrtStatus::Timeout);
    assert_eq!(
        s.counts(),
        (1, 0, 1),
        "filed, never progressed, stopped once"
    );
}

#[test]
fn a_slow_peer_that_keeps_moving_never_times_out() {
    // Every round takes 0.9 of the limit and moves something (not idle); the whole run is
    // 50 limits long. Timeout = no progress, so the task ends with success.
    let s = Script::new(50);
    s.idle.store(false, crate::base::sync::Ordering::SeqCst);
    let limit = 1_000;
    let mut t = NetworkTask::new(NetworkTaskSpec {
        timeout_ns: Some(limit),
        ..spec(&s, vec![block(0, 1)])
    })
    .unwrap();
    let mut now = 0;
    let mut steps = 0;
    while t.step(&at(now)) != Step::Done {
        now += limit * 9 / 10;
        steps += 1;
        assert!(steps < 1_000, "task never finished");
    }
    assert!(
        now > 40 * limit,
        "the run outlasted the limit many times over ({now} ns)"
    );
    assert_eq!(t.record().status(), NrtStatus::Success);
    assert_eq!(s.counts(), (1, 50, 1));
}

#[test]
fn abort_ends_a_network_task_in_every_state_with_one_stop_per_filed_stream() {
    let ws = Words::new(&[TRIGGER_ARMED]);
    // INIT (never filed): no seam call at all.
    let s = Script::new(5);
    let h = AbortHandle::new();
    let mut t = NetworkTask::new(spec(&s, vec![block(0, 1), block(1, 1)]))
        .unwrap()
        .with_abort(h.clone());
    assert!(h.abort());
    assert_eq!(t.step(&GO), Step::Done);
    assert_eq!(t.record().status(), NrtStatus::Closed);
    assert_eq!(s.counts(), (0, 0, 0));
    // WAITING_DEVICE_TRIGGER: stops each filed stream once.
    let s = Script::new(5);
    let h = AbortHandle::new();
    let mut t = NetworkTask::new(NetworkTaskSpec {
        triggers: TriggerWords::new(&[ws.get(0)]).unwrap(),
        wait_for_device: true,
        ..spec(&s, vec![block(0, 1), block(1, 1)])
    })
    .unwrap()
    .with_abort(h.clone());
    assert_eq!(t.step(&GO), Step::Progressed);
    assert_eq!(t.step(&GO), Step::Idle);
    assert!(h.abort_with(NrtStatus::NetworkProxyFailure));
    assert!(!h.abort(), "the first reason stays");
    assert_eq!(t.step(&GO), Step::Done);
    assert_eq!(t.record().status(), NrtStatus::NetworkProxyFailure);
    assert_eq!(s.counts(), (2, 0, 2));
    assert_eq!(t.step(&GO), Step::Done, "DONE stays DONE");
    assert_eq!(s.counts(), (2, 0, 2));
    // PROGRESSING, across a re-arm: the handle is kept.
    let s = Script::new(5);
    let h = AbortHandle::new();
    let mut t = NetworkTask::new(spec(&s, vec![block(0, 1)]))
        .unwrap()
        .with_abort(h.clone());
    run(&mut t, 10);
    t.rearm(2).unwrap();
    assert_eq!(t.step(&GO), Step::Progressed);
    assert_eq!(t.step(&GO), Step::Progressed);
    h.abort();
    assert_eq!(t.step(&GO), Step::Done);
    assert_eq!(t.record().status(), NrtStatus::Closed);
    assert_eq!(
        s.counts(),
        (2, 5 + 1, 2),
        "two executions filed and stopped once each"
    );
}

#[test]
fn abort_ends_a_barrier_task_waiting_for_its_trigger_or_the_other_ranks() {
    let ws = Words::new(&[TRIGGER_ARMED, 0]);
    let b = SharedMemBarrier::new(2).unwrap();
    let h = AbortHandle::new();
    let mut t =
        BarrierTask::new(barrier_spec(&b, 0, ws.get(0), &[ws.get(1)])).with_abort(h.clone());
    assert_eq!(t.step(&GO), Step::Progressed);
    h.abort();
    assert_eq!(t.step(&GO), Step::Done);
    assert_eq!(t.record().status(), NrtStatus::Closed);
    assert_eq!(ws.get(0).load(), TRIGGER_ARMED);
    // Waiting for the other rank (trigger written, arrived).
    let h = AbortHandle::new();
    let mut t =
        BarrierTask::new(barrier_spec(&b, 1, ws.get(0), &[ws.get(1)])).with_abort(h.clone());
    ws.get(0).store(1);
    assert_eq!(t.step(&GO), Step::Progressed);
    assert_eq!(t.step(&GO), Step::Idle);
    h.abort();
    assert_eq!(t.step(&GO), Step::Done);
    assert_eq!(t.record().status(), NrtStatus::Closed);
    assert_eq!(ws.get(1).load(), 0, "an aborted barrier increments nothing");
}

// ---- ending with a teardown pending (CLOSING, edges 11 and 12) ----------------------------

#[test]
fn a_task_whose_stepped_stops_are_pending_is_closing_until_every_stream_is_done() {
    let s = Script::new(1);
    s.stop_steps_pending
        .store(3, crate::base::sync::Ordering::SeqCst);
    let mut t = NetworkTask::new(NetworkTaskSpec {
        seam: crate::testing::stepped_seam(),
        ..spec(&s, vec![block(0, 1), block(1, 1)])
    })
    .unwrap();
    assert_eq!(t.step(&GO), Step::Progressed); // INIT => PROGRESSING
                                               // Both streams finish their block; stream 0 and 1's first stepped stops are pending.
    assert_eq!(t.step(&GO), Step::Progressed);
    assert_eq!(t.state(), RunState::Closing);
    assert_eq!(t.record().status(), NrtStatus::Success);
    assert_eq!(s.counts().2, 0, "no stream's teardown over yet");
    // A close on the tick changes nothing while CLOSING; the next step makes one more step
    // of each stream still draining: stream 0 pending (the third), stream 1 done.
    assert_eq!(t.begin_close(NrtStatus::Closed), Step::Idle);
    assert_eq!(t.step(&GO), Step::Progressed);
    assert_eq!(t.state(), RunState::Closing);
    assert_eq!(s.calls().last(), Some(&Call::Stop { stream: 1 }));
    // Stream 0 done: edge 12, with the status the task ended with.
    assert_eq!(t.step(&GO), Step::Done);
    assert_eq!(t.state(), RunState::Done);
    assert_eq!(t.record().status(), NrtStatus::Success);
    assert_eq!(s.counts().2, 2, "one teardown per stream");
    assert_eq!(t.step(&GO), Step::Done, "DONE is final");
}

#[test]
fn a_synchronous_close_finishes_a_closing_task_and_a_close_on_the_tick_may_close() {
    let s = Script::new(0); // never done
    s.stop_steps_pending
        .store(100, crate::base::sync::Ordering::SeqCst);
    let mut t = NetworkTask::new(NetworkTaskSpec {
        seam: crate::testing::stepped_seam(),
        ..spec(&s, vec![block(0, 1)])
    })
    .unwrap();
    t.step(&GO);
    t.step(&GO);
    // The comm leaves: edge 11 (a teardown pending), the status NRT_CLOSED.
    assert_eq!(t.begin_close(NrtStatus::Closed), Step::Progressed);
    assert_eq!(t.state(), RunState::Closing);
    assert_eq!(t.record().status(), NrtStatus::Closed);
    assert_eq!(t.step(&GO), Step::Idle, "nothing confirmed: idle, not done");
    // The worker exits: the blocking stop ends it (edge 12), keeping its status.
    t.close(NrtStatus::Closed);
    assert_eq!(t.state(), RunState::Done);
    assert_eq!(t.record().status(), NrtStatus::Closed);
    assert_eq!(s.counts().2, 1);
    assert_eq!(s.calls().last(), Some(&Call::Stop { stream: 0 }));
}
