//! Proxy-queue tests in one process: a worker thread driven by the test, scripted seams.

extern crate std;

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use std::time::{Duration, Instant};

use super::*;
use crate::base::time::MonotonicClock;
use crate::base::time::NoClock;
use crate::driver::record::RunState;
use crate::driver::task::{
    BarrierTask, BarrierTaskSpec, NetworkTask, NetworkTaskSpec, SharedMemBarrier, TaskKind,
};
use crate::driver::trigger::TriggerWords;
use crate::driver::wake::ThreadPark;
use crate::testutil::{block, seam, waiter, Call, Script};

fn net(s: &Script, id: u32, bb: u32) -> TaskBox {
    Box::new(
        NetworkTask::new(NetworkTaskSpec {
            task_id: id,
            // SAFETY: every test keeps its script alive until its tasks are reported.
            comm: unsafe { s.handle() },
            comm_id: 7,
            seam: seam(),
            blocks: vec![block(0, bb), block(1, bb)],
            schedule: None,
            triggers: TriggerWords::none(),
            wait_for_device: false,
            skip: false,
            timeout_ns: None,
        })
        .unwrap(),
    )
}

fn small(slots: usize, cap: usize) -> (Arc<ProxyQueue>, Worker) {
    ProxyQueue::new(
        QueueConfig {
            slots,
            submit_capacity: cap,
            status_capacity: cap,
        },
        Box::new(NoClock),
    )
    .unwrap()
}

/// Runs the worker loop on a thread until stop; returns the join handle.
fn spawn_worker(mut w: Worker) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !w.stop_requested() {
            match w.tick() {
                Tick::Park => w.park(&ThreadPark),
                Tick::NoProgress => std::thread::yield_now(),
                Tick::Continue => {}
            }
        }
    })
}

fn tick_until(w: &mut Worker, h: &mut SlotHandle, n: usize) -> Vec<TaskRecord> {
    let mut out = Vec::new();
    for _ in 0..10_000 {
        w.tick();
        while let Some(r) = h.try_pop_record() {
            out.push(r);
        }
        if out.len() >= n {
            return out;
        }
    }
    panic!("only {} of {n} records", out.len());
}

#[test]
fn network_tasks_of_one_comm_run_one_after_the_other() {
    let s = Script::new(2);
    let (q, mut w) = small(2, 8);
    let mut h = ProxyQueue::join(&q).unwrap();
    assert_eq!(w.tick(), Tick::Park);
    for (id, bb) in [(1, 10), (2, 20), (3, 30)] {
        h.submit(net(&s, id, bb)).unwrap();
    }
    let recs = tick_until(&mut w, &mut h, 3);
    assert_eq!(
        recs.iter().map(|r| r.task_id).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(recs.iter().all(|r| r.is_done() && r.slot == h.slot()));
    // each task's starts come after the previous task's stops
    let calls = s.calls();
    let first_start = |bb| {
        calls
            .iter()
            .position(|c| matches!(c, Call::Start { bb: b, .. } if *b == bb))
            .unwrap()
    };
    let last_stop_before = |i: usize| {
        calls[..i]
            .iter()
            .filter(|c| matches!(c, Call::Stop { .. }))
            .count()
    };
    assert_eq!(last_stop_before(first_start(20)), 2);
    assert_eq!(last_stop_before(first_start(30)), 4);
    assert_eq!(s.counts(), (6, 12, 6));
    assert_eq!(w.tick(), Tick::Park);
}

#[test]
fn admission_limit_is_the_status_ring_capacity() {
    let s = Script::new(1);
    let (q, mut w) = small(1, 4);
    let mut h = ProxyQueue::join(&q).unwrap();
    for id in 0..4 {
        h.submit(net(&s, id, 1)).unwrap();
    }
    let back = h.submit(net(&s, 4, 1)).unwrap_err();
    assert_eq!(back.status, NrtStatus::QueueFull);
    assert_eq!(back.task.record().task_id, 4);
    // the worker finishing tasks is not enough: the records must be collected
    for _ in 0..20 {
        w.tick();
    }
    assert_eq!(
        h.submit(back.task).unwrap_err().status,
        NrtStatus::QueueFull
    );
    assert!(h.try_pop_record().is_some());
    let again = net(&s, 4, 1);
    h.submit(again).unwrap();
    assert_eq!(h.outstanding(), 4);
}

#[test]
fn barrier_runs_beside_a_network_task() {
    let s = Script::new(0);
    s.idle.store(true, crate::base::sync::Ordering::SeqCst);
    let (q, mut w) = small(1, 8);
    let mut h = ProxyQueue::join(&q).unwrap();
    h.submit(net(&s, 1, 1)).unwrap();
    let b = SharedMemBarrier::new(1).unwrap();
    h.submit(Box::new(BarrierTask::new(BarrierTaskSpec {
        task_id: 2,
        comm_id: 7,
        channel: Box::new(b.endpoint(0).unwrap()),
        triggers: TriggerWords::none(),
        leader: true,
        done_semaphores: vec![],
        skip: false,
        timeout_ns: None,
    })))
    .unwrap();
    let recs = tick_until(&mut w, &mut h, 1);
    assert_eq!(
        recs[0].task_id, 2,
        "barrier completes while the network task idles"
    );
    assert_eq!(w.tick(), Tick::NoProgress);
    assert_eq!(w.active_count(), 1);
}

#[test]
fn leave_closes_queued_and_active_tasks_once() {
    let s = Script::new(0); // never done
    let (q, w) = small(2, 8);
    let worker = spawn_worker(w);
    let clock = MonotonicClock;
    let mut h = ProxyQueue::join(&q).unwrap();
    let mut lives = Vec::new();
    for id in 0..3 {
        let t = net(&s, id, 1);
        lives.push(t.status_record());
        h.submit(t).unwrap();
    }
    // wait (bounded) until the first task is active at the seam
    let t0 = Instant::now();
    while s.progresses.load(crate::base::sync::Ordering::SeqCst) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "worker never progressed"
        );
        std::thread::yield_now();
    }
    let recs = h.leave(&waiter(&clock));
    assert_eq!(recs.len(), 3);
    let mut ids: Vec<u32> = recs.iter().map(|r| r.task_id).collect();
    ids.sort();
    assert_eq!(ids, [0, 1, 2]);
    assert!(recs
        .iter()
        .all(|r| r.is_done() && r.status() == NrtStatus::Closed));
    assert!(lives.iter().all(|l| l.load().is_done()));
    // only the task that filed stops its two streams
    assert_eq!(s.counts().0, 2);
    assert_eq!(s.counts().2, 2);
    assert_eq!(q.slot_state(0), SlotState::Free);
    // the slot is reusable
    let h2 = ProxyQueue::join(&q).unwrap();
    assert_eq!(h2.slot(), 0);
    assert!(h2.leave(&waiter(&clock)).is_empty());
    q.request_stop();
    worker.join().unwrap();
    assert!(q.worker_exited());
}

#[test]
fn slots_are_separate_and_exhaustible() {
    let (q, mut w) = small(2, 2);
    let a = ProxyQueue::join(&q).unwrap();
    let b = ProxyQueue::join(&q).unwrap();
    assert_ne!(a.slot(), b.slot());
    assert_eq!(ProxyQueue::join(&q).unwrap_err(), NrtStatus::Resource);
    drop(a); // abandoned: the worker frees it
    assert_eq!(q.slot_state(0), SlotState::Abandoned);
    w.tick();
    assert_eq!(q.slot_state(0), SlotState::Free);
    let c = ProxyQueue::join(&q).unwrap();
    assert_eq!(c.slot(), 0);
    q.request_stop();
    assert_eq!(ProxyQueue::join(&q).unwrap_err(), NrtStatus::Closed);
    drop(w);
    drop((b, c));
}

#[test]
fn worker_gone_means_leave_does_not_wait() {
    let s = Script::new(0);
    let (q, mut w) = small(1, 4);
    let clock = MonotonicClock;
    let mut h = ProxyQueue::join(&q).unwrap();
    h.submit(net(&s, 1, 1)).unwrap();
    w.tick();
    drop(w);
    assert_eq!(
        h.submit(net(&s, 2, 1)).unwrap_err().status,
        NrtStatus::Closed
    );
    let recs = h.leave(&waiter(&clock));
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].status(), NrtStatus::Closed);
    assert_eq!(s.counts().2, 2);
}

#[test]
fn kinds_and_dump_do_not_panic() {
    let s = Script::new(0);
    let (q, mut w) = small(1, 4);
    let mut h = ProxyQueue::join(&q).unwrap();
    h.submit(net(&s, 1, 1)).unwrap();
    q.request_dump();
    w.tick();
    w.dump();
    assert_eq!(w.active_count(), 1);
    let t = net(&s, 2, 1);
    assert_eq!(t.kind(), TaskKind::Network);
}

// ---- caller-driven progress (docs/design.md §9) ----

fn small_caller(slots: usize, cap: usize) -> Arc<ProxyQueue> {
    ProxyQueue::new_caller(
        QueueConfig {
            slots,
            submit_capacity: cap,
            status_capacity: cap,
        },
        Box::new(NoClock),
    )
    .unwrap()
}

/// A deadline `secs` from now on the monotonic clock (what the waits compare against).
fn deadline(clock: &MonotonicClock, secs: u64) -> Option<u64> {
    Some(clock.now_ns() + secs * 1_000_000_000)
}

#[test]
fn caller_mode_ticks_and_a_second_driver_is_refused() {
    let s = Script::new(2);
    let q = small_caller(2, 8);
    assert_eq!(q.mode(), DriveMode::Caller);
    let mut h = ProxyQueue::join(&q).unwrap();
    h.submit(net(&s, 1, 10)).unwrap();
    let mut d = q.try_drive().expect("a free token");
    assert!(q.is_driven());
    // Another thread's tick (and try_drive) is refused while we hold the token.
    let q2 = q.clone();
    let refused = std::thread::spawn(move || (q2.tick(), q2.try_drive().is_none()))
        .join()
        .unwrap();
    assert_eq!(refused, (Err(NrtStatus::Invalid), true));
    let mut recs = Vec::new();
    for _ in 0..100 {
        d.tick();
        if let Some(r) = h.try_pop_record() {
            recs.push(r);
            break;
        }
    }
    assert_eq!(recs.len(), 1);
    assert!(recs[0].is_done() && recs[0].status() == NrtStatus::Success);
    drop(d);
    assert!(!q.is_driven());
    assert_eq!(q.tick(), Ok(Tick::Park));
}

#[test]
fn a_worker_queue_refuses_caller_ticks() {
    let (q, w) = small(1, 4);
    assert_eq!(q.mode(), DriveMode::Thread);
    assert_eq!(q.tick(), Err(NrtStatus::Invalid));
    assert!(q.try_drive().is_none());
    drop(w);
}

#[test]
fn drive_until_ticks_runs_the_hook_and_keeps_other_records_in_order() {
    let s = Script::new(3);
    let clock = MonotonicClock;
    let q = small_caller(1, 8);
    let mut h = ProxyQueue::join(&q).unwrap();
    for id in [1, 2, 3] {
        h.submit(net(&s, id, id * 10)).unwrap();
    }
    let mut hooks = 0u32;
    let r = h
        .drive_until(
            3,
            deadline(&clock, 10),
            &waiter(&clock),
            Some(&mut || {
                hooks += 1;
                false
            }),
        )
        .unwrap();
    assert_eq!((r.task_id, r.status()), (3, NrtStatus::Success));
    assert!(hooks >= 3, "the hook runs between ticks ({hooks})");
    assert!(!q.is_driven(), "the token is released on return");
    // Tasks 1 and 2 finished first: their records wait, in order.
    assert_eq!(h.outstanding(), 2);
    assert_eq!(h.try_pop_record().map(|r| r.task_id), Some(1));
    assert_eq!(h.try_pop_record().map(|r| r.task_id), Some(2));
    assert_eq!(h.try_pop_record(), None);
    assert_eq!(
        h.drive_until(9, None, &waiter(&clock), None),
        Err(NrtStatus::Invalid),
        "nothing outstanding: nothing would come"
    );
    assert!(h.leave(&waiter(&clock)).is_empty());
}

/// Network task `id` of one block that waits for the device's trigger in `words`' word 0.
fn triggered(s: &Script, words: &crate::testutil::Words, id: u32) -> TaskBox {
    Box::new(
        NetworkTask::new(NetworkTaskSpec {
            task_id: id,
            // SAFETY: every test keeps its script alive until its tasks are reported.
            comm: unsafe { s.handle() },
            comm_id: 7,
            seam: seam(),
            blocks: vec![block(0, 1)],
            schedule: None,
            triggers: TriggerWords::new(&[words.get(0)]).unwrap(),
            wait_for_device: true,
            skip: false,
            timeout_ns: None,
        })
        .unwrap(),
    )
}

#[test]
fn bounded_waits_time_out_and_lose_nothing() {
    let words = crate::testutil::Words::new(&[crate::driver::trigger::TRIGGER_ARMED]);
    let s = Script::new(1);
    let clock = MonotonicClock;
    let q = small_caller(1, 4);
    let mut h = ProxyQueue::join(&q).unwrap();
    h.submit(triggered(&s, &words, 5)).unwrap();
    // The device never writes the trigger: both bounded waits answer Timeout.
    let soon = Some(clock.now_ns() + 20_000_000);
    assert_eq!(
        h.wait_record_until(&waiter(&clock), soon),
        Err(NrtStatus::Timeout)
    );
    assert_eq!(
        h.drive_until(5, soon, &waiter(&clock), None),
        Err(NrtStatus::Timeout)
    );
    assert_eq!(h.outstanding(), 1, "the task is still outstanding");
    // The device writes it: the record comes, once.
    words.get(0).store(1); // the device reached the net stage
    let r = h
        .wait_record_until(&waiter(&clock), deadline(&clock, 10))
        .unwrap();
    assert_eq!((r.task_id, r.status()), (5, NrtStatus::Success));
    assert_eq!(h.try_pop_record(), None);
    assert!(h.leave(&waiter(&clock)).is_empty());
}

/// An idle wait that plays the network: armed every time, and at its third sleep the device
/// reaches the net stage (the trigger word) and the sleep ends signalled.
struct TriggerAtThirdSleep {
    words: Arc<crate::testutil::Words>,
    arms: crate::base::sync::DiagAtomicU32,
    sleeps: crate::base::sync::DiagAtomicU32,
    longest_ms: crate::base::sync::DiagAtomicU32,
}

impl crate::driver::idle::IdleWait for TriggerAtThirdSleep {
    fn arm(&self) -> crate::driver::idle::Armed {
        self.arms
            .fetch_add(1, crate::base::sync::DiagOrdering::Relaxed);
        crate::driver::idle::Armed::Armed
    }

    fn sleep(&self, timeout_ns: u64) -> bool {
        let ms = u32::try_from(timeout_ns / 1_000_000).unwrap_or(u32::MAX);
        self.longest_ms
            .fetch_max(ms, crate::base::sync::DiagOrdering::Relaxed);
        let n = self
            .sleeps
            .fetch_add(1, crate::base::sync::DiagOrdering::Relaxed)
            + 1;
        if n == 3 {
            self.words.get(0).store(1);
            return true;
        }
        false
    }
}

/// Caller mode with an idle wait wired (`driver::idle`): a driver whose tick found nothing
/// blocks on the wait (armed first, every time) instead of yielding, never longer than the
/// time left to its deadline, and the event the wait reports brings the record.
#[test]
fn a_caller_with_nothing_to_do_blocks_on_the_idle_wait() {
    let words = Arc::new(crate::testutil::Words::new(&[
        crate::driver::trigger::TRIGGER_ARMED,
    ]));
    let s = Script::new(1);
    let clock = MonotonicClock;
    let q = small_caller(1, 4);
    let idle = Arc::new(TriggerAtThirdSleep {
        words: words.clone(),
        arms: 0.into(),
        sleeps: 0.into(),
        longest_ms: 0.into(),
    });
    assert!(q.idle_wait().wire(Some(idle.clone())).is_none());
    let mut h = ProxyQueue::join(&q).unwrap();
    h.submit(triggered(&s, &words, 5)).unwrap();
    let limit = deadline(&clock, 10);
    let r = h.drive_until(5, limit, &waiter(&clock), None).unwrap();
    assert_eq!((r.task_id, r.status()), (5, NrtStatus::Success));
    let load =
        |a: &crate::base::sync::DiagAtomicU32| a.load(crate::base::sync::DiagOrdering::Relaxed);
    assert_eq!(
        load(&idle.sleeps),
        3,
        "slept until the wait reported the event"
    );
    assert_eq!(q.idle_wait().sleeps(), 3, "the slot counted every sleep");
    let mut head = alloc::string::String::new();
    q.write_header(crate::driver::dump::DumpReason::Request, &mut head)
        .unwrap();
    // The heartbeat: one tick begun per sleep at least (every sleep follows a tick that found
    // nothing).
    assert!(q.ticks() >= 3, "{head}");
    assert!(
        head.ends_with(&alloc::format!(
            " idle=wired idle_sleeps=3 ticks={}",
            q.ticks()
        )),
        "{head}"
    );
    // The submission kicked the idle wait (every notification of the driver does): the first
    // arm found the kick and did not sleep; every sleep came after an arm.
    assert_eq!(
        load(&idle.arms),
        4,
        "armed before every sleep, and once kicked"
    );
    let longest = idle
        .longest_ms
        .load(crate::base::sync::DiagOrdering::Relaxed);
    assert!(
        longest <= 10_000,
        "no sleep past the deadline ({longest} ms)"
    );
    assert!(h.leave(&waiter(&clock)).is_empty());
}

#[test]
fn a_waiter_is_woken_when_the_driver_releases_the_token() {
    let s = Script::new(2);
    let q = small_caller(2, 8);
    let mut h = ProxyQueue::join(&q).unwrap();
    h.submit(net(&s, 1, 10)).unwrap();
    let d = q.try_drive().expect("a free token");
    let q2 = q.clone();
    let t = std::thread::spawn(move || {
        let clock = MonotonicClock;
        let w = Waiter {
            park: &ThreadPark,
            clock: &clock,
            spin_ns: 0, // park at once: the release must wake us
        };
        let r = h.drive_until(1, deadline(&clock, 20), &w, None);
        (r, h.leave(&waiter(&clock)).len())
    });
    // Hold the token until the other thread has registered as a token waiter (bounded).
    let start = Instant::now();
    while q2.token_waiters() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the owner never waited for the token"
        );
        std::thread::yield_now();
    }
    drop(d);
    let (r, left) = t.join().unwrap();
    let r = r.expect("woken by the release, then drove the task to DONE");
    assert_eq!((r.task_id, r.status()), (1, NrtStatus::Success));
    assert_eq!(left, 0);
}

#[test]
fn drive_until_on_a_worker_queue_waits_for_the_worker() {
    // The task waits for a trigger word that only the waiter's hook writes, so the worker
    // cannot finish it before the waiter runs its hook (the assertion does not depend on how
    // the two threads are scheduled).
    let words = crate::testutil::Words::new(&[crate::driver::trigger::TRIGGER_ARMED]);
    let s = Script::new(2);
    let clock = MonotonicClock;
    let (q, w) = small(1, 8);
    let handle = spawn_worker(w);
    let mut h = ProxyQueue::join(&q).unwrap();
    let task = NetworkTask::new(NetworkTaskSpec {
        task_id: 4,
        // SAFETY: the script outlives the task (declared first; the task ends before leave).
        comm: unsafe { s.handle() },
        comm_id: 7,
        seam: seam(),
        blocks: vec![block(0, 10), block(1, 10)],
        schedule: None,
        triggers: TriggerWords::new(&[words.get(0)]).unwrap(),
        wait_for_device: true,
        skip: false,
        timeout_ns: None,
    })
    .unwrap();
    h.submit(Box::new(task)).unwrap();
    let mut hooks = 0;
    let r = h
        .drive_until(
            4,
            deadline(&clock, 20),
            &waiter(&clock),
            Some(&mut || {
                hooks += 1;
                if hooks == 1 {
                    words.get(0).store(1); // the device reached the net stage
                }
                true
            }),
        )
        .unwrap();
    assert_eq!((r.task_id, r.status()), (4, NrtStatus::Success));
    assert!(
        hooks > 0,
        "a waiter with a hook keeps running it while the worker drives"
    );
    assert_eq!(words.get(0).load(), 0, "the worker consumed the trigger");
    assert!(h.leave(&waiter(&clock)).is_empty());
    q.request_stop();
    handle.join().unwrap();
}

#[test]
fn leave_in_caller_mode_drives_the_close_itself() {
    let s = Script::new(1_000_000);
    let clock = MonotonicClock;
    let q = small_caller(1, 8);
    let mut h = ProxyQueue::join(&q).unwrap();
    h.submit(net(&s, 1, 10)).unwrap();
    h.submit(net(&s, 2, 20)).unwrap();
    assert_eq!(q.tick(), Ok(Tick::Continue));
    let recs = h.leave(&waiter(&clock));
    assert_eq!(recs.iter().map(|r| r.task_id).collect::<Vec<_>>(), [1, 2]);
    assert!(recs.iter().all(|r| r.status() == NrtStatus::Closed));
    assert_eq!(q.slot_state(0), SlotState::Free);
    assert!(!q.is_driven());
}

#[test]
fn returned_boxes_come_back_after_their_records() {
    let s = Script::new(1);
    let q = small_caller(1, 2);
    let mut h = ProxyQueue::join(&q).unwrap();
    h.submit_returning(net(&s, 1, 10)).unwrap();
    h.submit_returning(net(&s, 2, 20)).unwrap();
    for _ in 0..100 {
        q.tick().unwrap();
    }
    let one = h.take_returned().expect("task 1's box is back");
    assert_eq!(one.record().task_id, 1);
    assert!(one.record().is_done());
    // Capacity 2: a third returning submission waits until a box is taken back.
    assert!(h.try_pop_record().is_some() && h.try_pop_record().is_some());
    h.submit_returning(net(&s, 3, 30)).unwrap();
    assert_eq!(
        h.submit_returning(net(&s, 4, 40)).unwrap_err().status,
        NrtStatus::QueueFull,
        "two boxes out (one back, not taken; one in flight)"
    );
    let two = h.take_returned().unwrap();
    assert_eq!(two.record().task_id, 2);
    assert!(two.record().is_done());
    assert!(h.leave(&waiter(&MonotonicClock)).len() <= 1);
}

// ---- bounded leave (docs/design.md §9) ----

/// A deadline 20 ms from now: long enough to be a real wait, short for a test that expects
/// `NRT_TIMEOUT` (the status is asserted, never the time).
fn soon(clock: &MonotonicClock) -> Option<u64> {
    Some(clock.now_ns() + 20_000_000)
}

#[test]
fn bounded_leave_times_out_keeps_every_record_and_a_retry_finishes() {
    let quick = Script::new(1);
    let never = Script::new(0);
    let clock = MonotonicClock;
    let (q, mut w) = small(1, 8); // the test is the worker: nothing ticks unless it does
    let mut h = ProxyQueue::join(&q).unwrap();
    h.submit(net(&quick, 1, 1)).unwrap();
    h.submit(net(&never, 2, 1)).unwrap();
    h.submit(net(&never, 3, 1)).unwrap();
    for _ in 0..4 {
        w.tick(); // task 1 completes; its record stays unpopped; 2 is active, 3 waits
    }
    assert_eq!(w.active_count(), 2);
    let (status, mut h) = h
        .leave_until(&waiter(&clock), soon(&clock))
        .expect_err("nobody closes the slot");
    assert_eq!(status, NrtStatus::Timeout);
    assert!(h.is_leaving());
    assert_eq!(q.slot_state(0), SlotState::Closing);
    assert_eq!(h.outstanding(), 3, "nothing reported yet");
    let refused = h
        .submit(net(&quick, 4, 1))
        .expect_err("a leaving slot refuses tasks");
    assert_eq!(refused.status, NrtStatus::Closed);
    // A second timed-out try does not take the leave edge again.
    let (status, h) = h
        .leave_until(&waiter(&clock), soon(&clock))
        .expect_err("still nobody closes it");
    assert_eq!(status, NrtStatus::Timeout);
    w.tick(); // the worker closes the slot's tasks: CLOSED
    assert_eq!(q.slot_state(0), SlotState::Closed);
    let recs = h
        .leave_until(&waiter(&clock), deadline(&clock, 10))
        .expect("the slot is closed");
    let got: Vec<(u32, NrtStatus)> = recs.iter().map(|r| (r.task_id, r.status())).collect();
    assert_eq!(
        got,
        [
            (1, NrtStatus::Success),
            (2, NrtStatus::Closed),
            (3, NrtStatus::Closed)
        ],
        "every record exactly once, in push order"
    );
    assert_eq!(
        never.counts(),
        (2, never.counts().1, 2),
        "only task 2 filed and stopped"
    );
    assert_eq!(q.slot_state(0), SlotState::Free);
    let again = ProxyQueue::join(&q).unwrap();
    assert_eq!(again.slot(), 0, "the slot is reusable");
    let (_, again) = again
        .leave_until(&waiter(&clock), soon(&clock))
        .expect_err("the test has not ticked");
    w.tick();
    assert!(again
        .leave_until(&waiter(&clock), deadline(&clock, 10))
        .unwrap()
        .is_empty());
}

#[test]
fn dropping_a_timed_out_leave_frees_the_slot_in_either_state() {
    let never = Script::new(0);
    let clock = MonotonicClock;
    let (q, mut w) = small(1, 4);
    // Dropped while CLOSING: edge 8, then the worker closes the task and frees the slot.
    let mut h = ProxyQueue::join(&q).unwrap();
    let t = net(&never, 1, 1);
    let live = t.status_record();
    h.submit(t).unwrap();
    w.tick();
    let (_, h) = h.leave_until(&waiter(&clock), soon(&clock)).unwrap_err();
    drop(h);
    assert_eq!(q.slot_state(0), SlotState::Abandoned);
    w.tick();
    assert_eq!(q.slot_state(0), SlotState::Free);
    let r = live.load();
    assert_eq!(
        (r.state(), r.status()),
        (Some(RunState::Done), NrtStatus::Closed)
    );
    assert_eq!(
        (never.counts().0, never.counts().2),
        (2, 2),
        "filed and stopped once"
    );
    // Dropped once CLOSED: the handle frees the slot itself (edge 6).
    let mut h = ProxyQueue::join(&q).unwrap();
    h.submit(net(&never, 2, 1)).unwrap();
    w.tick();
    let (_, h) = h.leave_until(&waiter(&clock), soon(&clock)).unwrap_err();
    w.tick();
    assert_eq!(q.slot_state(0), SlotState::Closed);
    drop(h);
    assert_eq!(q.slot_state(0), SlotState::Free);
    assert_eq!(w.tick(), Tick::Park, "nothing left");
}

#[test]
fn bounded_leave_in_caller_mode_times_out_while_another_thread_drives() {
    let never = Script::new(0);
    let clock = MonotonicClock;
    let q = small_caller(1, 4);
    let mut h = ProxyQueue::join(&q).unwrap();
    h.submit(net(&never, 1, 1)).unwrap();
    let d = q.try_drive().expect("a free token");
    // The token is held (by this thread, as if by another driver that never ticks).
    let (status, h) = h.leave_until(&waiter(&clock), soon(&clock)).unwrap_err();
    assert_eq!(status, NrtStatus::Timeout);
    drop(d);
    let recs = h
        .leave_until(&waiter(&clock), deadline(&clock, 10))
        .expect("the leave drives the close itself");
    assert_eq!(recs.len(), 1);
    assert_eq!((recs[0].task_id, recs[0].status()), (1, NrtStatus::Closed));
    assert_eq!(q.slot_state(0), SlotState::Free);
}

#[test]
fn registry_bounded_leave_keeps_the_reference_until_the_slot_is_left() {
    use crate::driver::registry::{Registry, RegistryConfig, Spawner};
    /// Caller mode: no thread is ever spawned.
    struct NoThreads;
    impl Spawner for NoThreads {
        type Handle = ();
        fn spawn(&self, _group: u32, _worker: Worker) -> Result<(), NrtStatus> {
            Err(NrtStatus::Invalid)
        }
        fn join(&self, _handle: ()) {}
        fn thread_id(&self, _handle: &()) -> Option<u64> {
            None
        }
        fn clock(&self) -> Box<dyn Clock> {
            Box::new(NoClock)
        }
    }
    let never = Script::new(0);
    let clock = MonotonicClock;
    let reg = Registry::new(
        NoThreads,
        RegistryConfig {
            mode: DriveMode::Caller,
            ..RegistryConfig::default()
        },
    )
    .unwrap();
    let mut m = reg.join(0).unwrap();
    m.slot.submit(net(&never, 1, 1)).unwrap();
    let q = m.slot.queue().clone();
    let d = q.try_drive().unwrap();
    let (status, m) = reg
        .leave_until(m, &waiter(&clock), soon(&clock))
        .unwrap_err();
    assert_eq!(status, NrtStatus::Timeout);
    assert_eq!(reg.group_count(), 1, "the reference is kept");
    drop(d);
    let recs = reg
        .leave_until(m, &waiter(&clock), deadline(&clock, 10))
        .unwrap();
    assert_eq!(
        recs.iter().map(|r| r.status()).collect::<Vec<_>>(),
        [NrtStatus::Closed]
    );
    assert_eq!(reg.group_count(), 0, "the last leave removed the group");
}

// ---- abort and failure of one comm among several (docs/design.md §9) ----

#[test]
fn an_aborted_or_failing_comm_does_not_stop_the_queue_for_the_others() {
    use crate::base::abort::AbortHandle;
    let a = Script::new(0); // never done: aborted mid-run
    let f = Script::new(0); // fails at its third progress call
    f.fail_progress_at
        .store(3, crate::base::sync::Ordering::SeqCst);
    let b = Script::new(20); // a healthy comm beside them
    let (q, mut w) = small(3, 8);
    let mut ha = ProxyQueue::join(&q).unwrap();
    let mut hf = ProxyQueue::join(&q).unwrap();
    let mut hb = ProxyQueue::join(&q).unwrap();
    let abort = AbortHandle::new();
    let with_abort = |s: &Script, id: u32| -> TaskBox {
        Box::new(
            NetworkTask::new(NetworkTaskSpec {
                task_id: id,
                // SAFETY: the script outlives the task (it ends before the test returns).
                comm: unsafe { s.handle() },
                comm_id: 8,
                seam: seam(),
                blocks: vec![block(0, 1), block(1, 1)],
                schedule: None,
                triggers: TriggerWords::none(),
                wait_for_device: false,
                skip: false,
                timeout_ns: None,
            })
            .unwrap()
            .with_abort(abort.clone()),
        )
    };
    ha.submit(with_abort(&a, 1)).unwrap();
    ha.submit(with_abort(&a, 2)).unwrap(); // queued behind task 1 (same comm)
    hf.submit(net(&f, 10, 1)).unwrap();
    hb.submit(net(&b, 20, 1)).unwrap();
    for _ in 0..3 {
        w.tick();
    }
    let requester = {
        let abort = abort.clone();
        std::thread::spawn(move || abort.abort())
    };
    assert!(requester.join().unwrap());
    let mut recs = Vec::new();
    for _ in 0..100 {
        w.tick();
        for h in [&mut ha, &mut hf, &mut hb] {
            while let Some(r) = h.try_pop_record() {
                recs.push((r.task_id, r.status()));
            }
        }
        if recs.len() == 4 {
            break;
        }
    }
    recs.sort_by_key(|r| r.0);
    assert_eq!(
        recs,
        [
            (1, NrtStatus::Closed),
            (2, NrtStatus::Closed),
            (10, NrtStatus::NetworkProxyFailure),
            (20, NrtStatus::Success)
        ],
        "each task reported once; the healthy comm completed"
    );
    assert_eq!(
        a.counts().2,
        2,
        "the aborted task stopped its two streams once"
    );
    assert_eq!(
        a.counts().0,
        2,
        "the queued task of the aborted comm never filed"
    );
    // The queue serves the next comm after the failure: the failed comm leaves, a new one
    // takes its slot and runs to success.
    let (_, hf) = hf
        .leave_until(&waiter(&MonotonicClock), Some(0))
        .unwrap_err();
    w.tick();
    assert!(hf
        .leave_until(&waiter(&MonotonicClock), deadline(&MonotonicClock, 10))
        .unwrap()
        .is_empty());
    let c = Script::new(2);
    let mut hc = ProxyQueue::join(&q).unwrap();
    hc.submit(net(&c, 30, 1)).unwrap();
    let got = tick_until(&mut w, &mut hc, 1);
    assert_eq!((got[0].task_id, got[0].status()), (30, NrtStatus::Success));
    assert_eq!(
        w.tick(),
        Tick::Park,
        "nothing active is left: the worker may park"
    );
    drop((ha, hb, hc));
}

// ------------------------------------------------- stepped teardown: off the tick (issue 13)

mod teardown {
    use super::*;
    use crate::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr};
    use crate::base::sync::{AtomicU32, PlainArc};
    use crate::progress::comm::{Comm, CommConfig, STOP_STEP_POLLS};
    use crate::progress::scripted::Script as OpScript;
    use crate::seam::{in_process_progress, in_process_stop, in_process_stop_step, SeamTable};
    use crate::testing::{NullTransport, RecordingDevice, SlowCancelTransport};
    use core::ffi::c_void;

    /// `start` of these tests' seam: files one scripted op on the in-process comm that
    /// completes after `bb` progress calls, and gives it `n_ops` outstanding requests (ids
    /// `1..=n_ops`), as if it had posted them.
    ///
    /// # Safety
    /// `comm` is a live `*mut Comm` used by this thread only.
    #[allow(clippy::too_many_arguments)]
    unsafe extern "C" fn scripted_start(
        comm: *mut c_void,
        stream: u32,
        bb: u32,
        _ops: *const NetOpInfo,
        n_ops: usize,
        _src: *const NetSrcAddr,
        _n_src: usize,
        _dst: *const NetDestAddr,
        _n_dst: usize,
    ) -> u32 {
        // SAFETY: per this function's contract.
        let c = unsafe { &mut *(comm as *mut Comm) };
        let script = OpScript {
            complete_after: bb,
            idle_mask: 0,
            fail_tick: 0,
        };
        let ids: Vec<u64> = (1..=n_ops as u64).collect();
        let r = c.start_scripted(stream, bb, &[script]).and_then(|()| {
            if ids.is_empty() {
                Ok(())
            } else {
                c.track_test_requests(stream, bb, &ids)
            }
        });
        NrtStatus::from_result(r).code()
    }

    fn seam() -> SeamTable {
        SeamTable {
            start: scripted_start,
            progress: in_process_progress,
            stop: in_process_stop,
            stop_step: Some(in_process_stop_step),
        }
    }

    fn comm(transport: Box<dyn crate::progress::net::Transport>, max_polls: u64) -> Box<Comm> {
        let mut cfg = CommConfig::new(0, 2, 7);
        cfg.drain_max_polls = max_polls;
        Box::new(
            Comm::new(
                cfg,
                transport,
                PlainArc::new(RecordingDevice::default()),
                PlainArc::new(NoClock),
            )
            .unwrap(),
        )
    }

    /// A network task on stream 0 of `c`: one block whose scripted op completes after
    /// `ticks` progress calls and has `requests` outstanding requests.
    fn task(c: &mut Comm, id: u32, ticks: u32, requests: usize) -> TaskBox {
        let p = c as *mut Comm as *mut c_void;
        Box::new(
            NetworkTask::new(NetworkTaskSpec {
                task_id: id,
                // SAFETY: every test keeps its comm alive (and untouched) until its task is
                // reported, and ticks the queue on its own thread.
                comm: unsafe { CommHandle::new(p) }.unwrap(),
                comm_id: id,
                seam: seam(),
                blocks: vec![BlockFifos {
                    stream: 0,
                    bb: ticks,
                    ops: vec![NetOpInfo::default(); requests],
                    ..Default::default()
                }],
                schedule: None,
                triggers: TriggerWords::none(),
                wait_for_device: false,
                skip: false,
                timeout_ns: None,
            })
            .unwrap(),
        )
    }

    use crate::driver::task::{BlockFifos, CommHandle};

    /// Comm A (slow or stuck cancels) leaves while its task has two requests in flight;
    /// comm B, on the same queue, runs a 12-call block. Returns (tick at which B's task was
    /// DONE, tick at which A's was DONE, most polls of A's transport in one tick, A's polls in
    /// all), ticks counted from the leave, and checks the records, both comms' pools and
    /// the slot's close.
    fn leave_with_requests_in_flight(
        confirm_after_polls: u64,
        max_polls: u64,
    ) -> (u32, u32, u32, u32, Box<Comm>) {
        let clock = MonotonicClock;
        let (q, mut w) = small(2, 8);
        let t = SlowCancelTransport {
            confirm_after_polls,
            ..SlowCancelTransport::default()
        };
        let a_polls: PlainArc<AtomicU32> = t.polls.clone();
        let mut a = comm(Box::new(t), max_polls);
        let mut b = comm(Box::new(NullTransport::default()), max_polls);
        let ha = ProxyQueue::join(&q).unwrap();
        let mut hb = ProxyQueue::join(&q).unwrap();
        let ta = task(&mut a, 1, 1_000_000, 2);
        let tb = task(&mut b, 2, 12, 0);
        let (ra, rb) = (ta.status_record(), tb.status_record());
        let mut ha = ha;
        ha.submit(ta).unwrap();
        hb.submit(tb).unwrap();
        // Tick 1 files both blocks, tick 2 makes the first progress call of each.
        w.tick();
        w.tick();
        assert_eq!(ra.load().state(), Some(RunState::Progressing));
        assert_eq!(rb.load().state(), Some(RunState::Progressing));
        // A leaves: edge 2 now; the bounded leave returns at once (this test is the worker).
        let Err((NrtStatus::Timeout, ha)) = ha.leave_until(&waiter(&clock), Some(0)) else {
            panic!("the leave waits for the worker");
        };
        let (mut ticks, mut b_done, mut a_done, mut most) = (0u32, 0u32, 0u32, 0u32);
        while a_done == 0 || b_done == 0 {
            let before = a_polls.load(Ordering::Relaxed);
            w.tick();
            ticks += 1;
            most = most.max(a_polls.load(Ordering::Relaxed) - before);
            if b_done == 0 && rb.load().is_done() {
                b_done = ticks;
            }
            if a_done == 0 && ra.load().is_done() {
                a_done = ticks;
            } else if a_done == 0 {
                assert_eq!(ra.load().state(), Some(RunState::Closing), "tick {ticks}");
                assert_eq!(
                    q.slot_state(ha.slot() as usize),
                    SlotState::Closing,
                    "the slot waits for its task"
                );
            }
            assert!(ticks < 1_000, "bounded");
        }
        assert_eq!(rb.load().status(), NrtStatus::Success);
        assert_eq!(ra.load().status(), NrtStatus::Closed);
        // A's op is back in the pool, nothing held.
        let st = a.stream(0);
        assert!(!st.closing());
        assert_eq!(st.pool().len(), st.capacity());
        assert_eq!(b.stream(0).pool().len(), b.stream(0).capacity());
        // The next tick takes the slot's edge 3; the leave then collects A's record.
        w.tick();
        let recs = ha.leave_until(&waiter(&clock), Some(0)).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!((recs[0].task_id, recs[0].status()), (1, NrtStatus::Closed));
        assert_eq!(hb.try_pop_record().map(|r| r.task_id), Some(2));
        let polls = a_polls.load(Ordering::Relaxed);
        drop(hb);
        drop(w);
        (b_done, a_done, most, polls, a)
    }

    #[test]
    fn a_leaving_comm_whose_cancels_confirm_slowly_never_stalls_the_other_comm() {
        let (b_done, a_done, most, polls, a) = leave_with_requests_in_flight(80, 1_000_000);
        // B needs 11 more progress calls after the leave: one per tick, none lost to A.
        assert_eq!(b_done, 11);
        // A: one teardown step at the close and one in the step loop of the first tick
        // (polls 2..9), then one per tick; the 80th poll confirms, in tick 19.
        assert_eq!(a_done, 19);
        assert!(b_done < a_done, "B finished while A was still closing");
        assert_eq!(
            most,
            2 * STOP_STEP_POLLS as u32,
            "no tick drains A to the end"
        );
        assert_eq!(polls, 80, "not one poll after the confirmation");
        assert_eq!(a.fatal_error(), None);
        assert_eq!(a.orphan_count(), 0);
    }

    #[test]
    fn a_leaving_comm_whose_cancels_never_confirm_ends_at_the_drain_limit() {
        let (b_done, a_done, most, polls, a) = leave_with_requests_in_flight(u64::MAX, 20);
        assert_eq!(b_done, 11, "B is not slowed down");
        // Budget of 20 polls from the first step: 8 in tick 1, then 4 a tick: spent in tick 4.
        assert_eq!(a_done, 4);
        assert_eq!(most, 2 * STOP_STEP_POLLS as u32);
        assert_eq!(
            polls,
            1 + 20,
            "one progress round, then the teardown's budget"
        );
        assert_eq!(a.fatal_error(), Some(NrtStatus::Timeout));
        assert_eq!(
            a.orphan_count(),
            2,
            "the unconfirmed requests left with the transport"
        );
    }

    #[test]
    fn the_worker_exiting_finishes_a_closing_task_synchronously() {
        let clock = MonotonicClock;
        let (q, mut w) = small(2, 8);
        let t = SlowCancelTransport {
            confirm_after_polls: u64::MAX,
            ..SlowCancelTransport::default()
        };
        let polls: PlainArc<AtomicU32> = t.polls.clone();
        let mut a = comm(Box::new(t), 1_000);
        let mut ha = ProxyQueue::join(&q).unwrap();
        let ta = task(&mut a, 1, 1_000_000, 2);
        let ra = ta.status_record();
        ha.submit(ta).unwrap();
        w.tick();
        w.tick();
        let Err((_, ha)) = ha.leave_until(&waiter(&clock), Some(0)) else {
            panic!("the leave waits for the worker");
        };
        w.tick();
        assert_eq!(ra.load().state(), Some(RunState::Closing));
        assert_eq!(
            polls.load(Ordering::Relaxed),
            1 + 2 * STOP_STEP_POLLS as u32
        );
        // The worker goes: nothing will step the task again, so its close is synchronous
        // (the blocking stop, at most the drain budget).
        drop(w);
        assert_eq!(ra.load().state(), Some(RunState::Done));
        assert_eq!(ra.load().status(), NrtStatus::Closed);
        assert_eq!(polls.load(Ordering::Relaxed), 1 + 1_000);
        assert_eq!(a.fatal_error(), Some(NrtStatus::Timeout));
        assert_eq!(a.orphan_count(), 2);
        let recs = ha.leave_until(&waiter(&clock), Some(0)).unwrap();
        assert_eq!(recs.len(), 1);
        assert!(q.worker_exited());
    }
}

// ---- state dump (docs/design.md §6) ----

mod dump {
    use super::*;
    use crate::base::abort::AbortHandle;
    use crate::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr};
    use crate::base::host_word::HostWord;
    use crate::base::sync::{AtomicU32, PlainArc};
    use crate::base::time::{Clock, ManualClock};
    use crate::driver::dump::DumpOutcome;
    use crate::progress::comm::{Comm, CommConfig};
    use crate::progress::scripted::Script as OpScript;
    use crate::seam::{
        in_process_dump, in_process_progress, in_process_stop, in_process_stop_step, SeamTable,
    };
    use crate::testing::{NullTransport, RecordingDevice};
    use crate::testutil::dump_lines_of;
    use alloc::string::String;
    use core::ffi::c_void;

    /// `start` of a seam over a real [`Comm`] that files two scripted ops that never complete
    /// (and are never idle) for the block, whatever the FIFOs say.
    unsafe extern "C" fn scripted_start(
        comm: *mut c_void,
        stream: u32,
        bb: u32,
        _ops: *const NetOpInfo,
        _n_ops: usize,
        _src: *const NetSrcAddr,
        _n_src: usize,
        _dst: *const NetDestAddr,
        _n_dst: usize,
    ) -> u32 {
        // SAFETY: the tests' handles point at a live Comm used only by the driving thread.
        let c = unsafe { &mut *(comm as *mut Comm) };
        let stuck = OpScript {
            complete_after: u32::MAX,
            idle_mask: 0,
            fail_tick: 0,
        };
        NrtStatus::from_result(c.start_scripted(stream, bb, &[stuck, stuck])).code()
    }

    fn comm() -> Box<Comm> {
        Box::new(
            Comm::new(
                CommConfig::new(1, 2, 9),
                Box::new(NullTransport::default()),
                PlainArc::new(RecordingDevice::default()),
                PlainArc::new(NoClock),
            )
            .unwrap(),
        )
    }

    /// A network task over `comm` on streams 0 and 1 (blocks 5 then 6), waiting for `trigger`
    /// when it is armed, with the in-process comm dump.
    fn task(comm: &mut Comm, trigger: HostWord, timeout_ns: Option<u64>) -> NetworkTask {
        let t = NetworkTask::new(NetworkTaskSpec {
            task_id: 12,
            // SAFETY: each test keeps its comm alive until its task is reported.
            comm: unsafe { CommHandle::new(comm as *mut Comm as *mut c_void) }.unwrap(),
            comm_id: 9,
            seam: SeamTable {
                start: scripted_start,
                progress: in_process_progress,
                stop: in_process_stop,
                stop_step: Some(in_process_stop_step),
            },
            blocks: vec![block(0, 5), block(1, 5), block(0, 6), block(1, 6)],
            schedule: None,
            triggers: TriggerWords::new(&[trigger]).unwrap(),
            wait_for_device: true,
            skip: false,
            timeout_ns,
        })
        .unwrap();
        // SAFETY: the handle is a `*mut Comm` of this crate's progress half.
        unsafe { t.with_comm_dump(in_process_dump) }
    }

    use crate::driver::task::{CollectiveLabel, CommHandle};

    struct StaticClock(&'static ManualClock);
    impl Clock for StaticClock {
        fn now_ns(&self) -> u64 {
            self.0.now_ns()
        }
    }

    fn cfg() -> QueueConfig {
        QueueConfig {
            slots: 4,
            submit_capacity: 4,
            status_capacity: 4,
        }
    }

    fn assert_has(lines: &[String], want: &str) {
        assert!(
            lines.iter().any(|l| l.contains(want)),
            "no dump line contains {want:?}:\n{}",
            lines.join("\n")
        );
    }

    /// A network task mid-run, blocked on its device's trigger: the dump has one line per
    /// queue, slot, task, stream cursor, comm, comm stream and op, each prefixed by the queue
    /// (and slot and task), and counts its lines; the task line names its collective, algorithm
    /// and why ([`NetworkTask::with_label`]).
    #[test]
    fn a_dump_shows_a_network_task_blocked_on_its_device() {
        static CLOCK: ManualClock = ManualClock::new(1_000_000_000);
        let word = AtomicU32::new(0);
        // SAFETY: `word` outlives the task (dropped at the end of the test, after leave).
        let trigger = unsafe { HostWord::from_ref(&word) };
        let mut c = comm();
        let t = task(&mut c, trigger, Some(5_000_000_000)).with_label(CollectiveLabel {
            collective: "all-reduce",
            algorithm: "rabenseifner",
            why: "tuner",
        });
        TriggerWords::new(&[trigger]).unwrap().arm();
        let (q, mut w) = ProxyQueue::new(cfg(), Box::new(StaticClock(&CLOCK))).unwrap();
        let _ = ProxyQueue::join(&q).unwrap();
        let mut h = ProxyQueue::join(&q).unwrap();
        h.submit(Box::new(t)).unwrap();
        w.tick();
        w.tick();
        CLOCK.advance(2_000_000);
        let mut out = String::new();
        w.dump_to(&mut out).unwrap();
        let lines: Vec<String> = out.lines().map(String::from).collect();
        let id = q.id();
        let head = alloc::format!("proxy-dump queue={id} ");
        assert!(lines.iter().all(|l| l.starts_with(&head)), "{out}");
        assert!(!out.contains("  "), "single spaces only: {out}");
        assert_has(
            &lines,
            "group=none reason=request mode=thread driver=ticking token=held token_waiters=0 \
             dumps=0/0 slots=4 high_water=2 stop=0 exited=0 idle=none idle_sleeps=0 ticks=2 \
             before=ticking writer=driver active=1",
        );
        assert_has(&lines, "slot=1 state=Active submit=0/4 status=0/4 active=1");
        let task = alloc::format!("{head}slot=1 task=12 ");
        assert_has(
            &lines,
            &alloc::format!(
                "{task}kind=network state=WaitingDeviceTrigger status=NRT_SUCCESS comm=9 \
                 streams=0x3 waited_ms=2 limit_ms=5000 warnings=0 filed=1 stopped=0 \
                 triggers={:#x}:0xffffffff collective=all-reduce algo=rabenseifner why=tuner",
                trigger.addr()
            ),
        );
        assert_has(&lines, &alloc::format!("{task}stream=0 block=5 pos=1/2"));
        assert_has(&lines, &alloc::format!("{task}stream=1 block=5 pos=1/2"));
        assert_has(
            &lines,
            &alloc::format!(
                "{task}comm=9 rank=1 nranks=2 transport=null last_op_count=8 fatal=none \
                 fatal_peer=none aborted=none orphans=0"
            ),
        );
        assert_has(
            &lines,
            &alloc::format!("{task}comm=9 stream=0 current=0xffffffff pending=0xffffffff active=0"),
        );
        // Two ops filed per (stream, block): 8 op lines, each with its peer and counters.
        let ops: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains(" op=") && l.contains("list=filed kind=scripted"))
            .collect();
        assert_eq!(ops.len(), 8, "{out}");
        assert!(ops.iter().all(|l| l.contains(" peer=")
            && l.contains(" posted=")
            && l.contains(" completed=")
            && l.contains(" credited=")
            && l.contains(" outstanding=")));
        assert_eq!(
            lines.last().unwrap(),
            &alloc::format!("{head}end lines={}", lines.len())
        );
        // The worker's exit closes the task (its comm still live), then the leave collects it.
        drop(w);
        let recs = h.leave(&waiter(&MonotonicClock));
        assert_eq!(recs.len(), 1);
        drop(c);
    }

    /// A dump requested from another thread is written by the worker, parked until then, at
    /// its next tick; the requester's bounded wait says it was written.
    #[test]
    fn a_requested_dump_wakes_a_parked_worker_and_is_written_by_it() {
        dump_lines_of(u32::MAX);
        let (q, w) = small(2, 4);
        let h = ProxyQueue::join(&q).unwrap();
        let worker = spawn_worker(w);
        let clock = MonotonicClock;
        let wt = waiter(&clock);
        // Wait until the worker parks (bounded). Seen once, not read again: a park may return
        // spuriously (Miri does that), and the worker then ticks and parks again.
        let parked = (0..1_000_000).any(|_| {
            let p = q.driver_activity() == DriverActivity::Parked;
            if !p {
                std::thread::yield_now();
            }
            p
        });
        assert!(parked, "the worker never parked: {:?}", q.driver_activity());
        let deadline = clock.now_ns() + 10_000_000_000;
        assert_eq!(q.dump_until(&wt, deadline), DumpOutcome::Written);
        let lines = dump_lines_of(q.id());
        assert_has(&lines, "reason=request mode=thread driver=ticking");
        // Parked when the dump was asked for, unless a spurious wake-up had it ticking then.
        assert!(
            lines.iter().any(|l| {
                l.contains("before=parked writer=driver active=0")
                    || l.contains("before=ticking writer=driver active=0")
            }),
            "{lines:?}"
        );
        assert_has(&lines, "slot=0 state=Active submit=0/4 status=0/4 active=0");
        assert_has(&lines, "end lines=3");
        let _ = h.leave(&wt);
        q.request_stop();
        worker.join().unwrap();
        assert_eq!(q.driver_activity(), DriverActivity::Exited);
        // A dump of a queue whose worker is gone: what is readable, said so.
        assert_eq!(q.dump_until(&wt, deadline), DumpOutcome::DriverGone);
        assert_has(&dump_lines_of(q.id()), "reason=driver-gone");
    }

    /// A driver that does not answer (here: another thread holds a caller-mode queue's token
    /// and never ticks): the bounded wait ends, says so, and the requester dumps what it reads
    /// without the driver. With the token free, the requester dumps as the driver itself.
    #[test]
    fn a_dump_the_driver_does_not_answer_is_written_without_it() {
        dump_lines_of(u32::MAX);
        let q = small_caller(2, 4);
        let mut h = ProxyQueue::join(&q).unwrap();
        h.submit(net(&Script::new(0), 3, 1)).unwrap();
        let clock = MonotonicClock;
        let wt = waiter(&clock);
        {
            let _held = q.try_drive().unwrap();
            let q2 = q.clone();
            let out = std::thread::spawn(move || {
                let clock = MonotonicClock;
                let deadline = clock.now_ns() + 20_000_000;
                q2.dump_until(&waiter(&clock), deadline)
            })
            .join()
            .unwrap();
            assert_eq!(out, DumpOutcome::NotAnswered);
        }
        let lines = dump_lines_of(q.id());
        assert_has(
            &lines,
            "reason=not-answered mode=caller driver=undriven token=held token_waiters=0 \
             dumps=1/0",
        );
        assert_has(
            &lines,
            "slot=0 state=Active submit=1/4 status=0/4 active=unknown wants_drive=0",
        );
        assert_has(&lines, "writer=requester-without-driver active=unknown");
        assert_has(&lines, "end lines=3");
        // Token free: this thread takes it and writes the whole dump (the task not drained
        // yet: no tick ran).
        let deadline = clock.now_ns() + 10_000_000_000;
        assert_eq!(q.dump_until(&wt, deadline), DumpOutcome::Written);
        assert_has(
            &dump_lines_of(q.id()),
            "reason=request mode=caller driver=undriven token=held",
        );
        // No tick ran: the task is still in the submission ring.
        assert_has(
            &dump_lines_of(q.id()),
            "before=undriven writer=requester active=0",
        );
        assert_has(&dump_lines_of(q.id()), "submit=1/4 status=0/4 active=0");
        assert!(!q.is_driven());
        let _ = h.leave(&wt);
    }

    /// The timeout path: the dump is written before the task ends, with the task still live
    /// (its state and comm as they were stuck); a failure is dumped after, naming the ended
    /// task.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "about 30 s under Miri; the dump's unsafe paths are run by the other dump tests"
    )]
    fn timeouts_and_failures_write_the_dump() {
        dump_lines_of(u32::MAX);
        static CLOCK: ManualClock = ManualClock::new(1_000_000_000);
        let word = AtomicU32::new(0);
        // SAFETY: `word` outlives the tasks (dropped at the end of the test, after leave).
        let trigger = unsafe { HostWord::from_ref(&word) };
        let mut c = comm();
        let t = task(&mut c, trigger, Some(1_000_000));
        TriggerWords::new(&[trigger]).unwrap().arm();
        let (q, mut w) = ProxyQueue::new(cfg(), Box::new(StaticClock(&CLOCK))).unwrap();
        q.set_group(3);
        let mut h = ProxyQueue::join(&q).unwrap();
        h.submit(Box::new(t)).unwrap();
        w.tick();
        assert!(dump_lines_of(q.id()).is_empty(), "no dump before the limit");
        CLOCK.advance(2_000_000);
        w.tick();
        let r = h.try_pop_record().expect("the task ended");
        assert_eq!(r.status(), NrtStatus::Timeout);
        let lines = dump_lines_of(q.id());
        assert_has(&lines, "group=3 reason=timeout mode=thread");
        assert_has(
            &lines,
            "slot=0 task=12 kind=network state=WaitingDeviceTrigger status=NRT_SUCCESS comm=9",
        );
        assert_has(&lines, "slot=0 task=12 comm=9 stream=1 op=");
        assert_eq!(
            lines.iter().filter(|l| l.contains(" end lines=")).count(),
            1,
            "one dump"
        );
        // A failure: the comm aborted by a failure detector ends the task; dumped after.
        let abort = AbortHandle::new();
        let mut c2 = comm();
        let t2 = task(&mut c2, trigger, None).with_abort(abort.clone());
        h.submit(Box::new(t2)).unwrap();
        w.tick();
        abort.abort_with(NrtStatus::NetworkProxyFailure);
        w.tick();
        assert_eq!(
            h.try_pop_record().map(|r| r.status()),
            Some(NrtStatus::NetworkProxyFailure)
        );
        let lines = dump_lines_of(q.id());
        assert_has(&lines, "reason=failure");
        assert_has(
            &lines,
            "slot=0 task=12 ended=1 kind=network status=NRT_NETWORK_PROXY_FAILURE comm=9",
        );
        drop(w);
        let _ = h.leave(&waiter(&MonotonicClock));
        drop((c, c2));
    }
}

// ---------------------------------------------------------------- invalidation while running

/// A request to invalidate `[addr, addr + 0x1000)` of the script's comm.
fn inval(s: &Script, addr: usize) -> crate::driver::inval::Invalidation {
    crate::driver::inval::Invalidation {
        // SAFETY: every test keeps its script alive until its tasks are reported.
        comm: unsafe { s.handle() },
        invalidate: crate::testing::invalidate,
        addr,
        len: 0x1000,
    }
}

/// The deadline `ms` from now on `clock`.
fn within(clock: &MonotonicClock, ms: u64) -> Option<u64> {
    Some(clock.now_ns() + ms * 1_000_000)
}

/// Waits (bounded) until the script has seen `n` more progress calls than `from`.
fn progresses_past(s: &Script, from: u32, n: u32) {
    let t0 = Instant::now();
    while s.counts().1 < from + n {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the comm's task made no progress"
        );
        std::thread::yield_now();
    }
}

/// Checks one invalidation in the script's log: there, with progress calls (the comm's posts)
/// both before and after it: it was applied between two rounds, mid-run.
fn applied_mid_run(s: &Script, addr: usize) {
    let calls = s.calls();
    let at = calls
        .iter()
        .position(|c| matches!(c, Call::Invalidate { addr: a, .. } if *a == addr))
        .unwrap_or_else(|| panic!("invalidation {addr:#x} did not reach the comm"));
    assert!(
        calls[..at]
            .iter()
            .any(|c| matches!(c, Call::Progress { .. })),
        "invalidation {addr:#x} before the task ran"
    );
    assert!(
        calls[at + 1..]
            .iter()
            .any(|c| matches!(c, Call::Progress { .. })),
        "no post after invalidation {addr:#x}"
    );
}

/// Thread mode: while the worker thread runs the comm's task (never done: it progresses every
/// tick), the comm's owner invalidates ranges from its own thread. Each call answers success,
/// and when it returns the invalidation is in the comm's log (it reached the transport before
/// the call returned, so before the next post); the task kept running around it; never were
/// two calls inside the comm at once.
#[test]
fn invalidate_while_the_worker_runs_the_comm() {
    let clock = MonotonicClock;
    let s = Script::new(0);
    let (q, w) = small(2, 8);
    let worker = spawn_worker(w);
    let mut h = ProxyQueue::join(&q).unwrap();
    h.submit(net(&s, 1, 1)).unwrap();
    progresses_past(&s, 0, 3);
    for i in 0..20usize {
        let addr = 0x10_0000 + i * 0x1000;
        let before = s.invalidations().len();
        assert_eq!(
            h.invalidate_until(inval(&s, addr), &waiter(&clock), within(&clock, 10_000)),
            Ok(())
        );
        let after = s.invalidations();
        assert_eq!(
            after.len(),
            before + 1,
            "applied once, before the call returned"
        );
        assert_eq!(after.last(), Some(&(addr, 0x1000)));
        progresses_past(&s, s.counts().1, 1);
    }
    for i in 0..20usize {
        applied_mid_run(&s, 0x10_0000 + i * 0x1000);
    }
    // A bad range: the progress half's status, from the driver's thread.
    assert_eq!(
        h.invalidate_until(
            crate::driver::inval::Invalidation {
                len: 0,
                ..inval(&s, 0x5000)
            },
            &waiter(&clock),
            within(&clock, 10_000)
        ),
        Err(NrtStatus::Invalid)
    );
    assert_eq!(
        s.overlaps.load(Ordering::SeqCst),
        0,
        "two threads inside the comm"
    );
    let recs = h.leave(&waiter(&clock));
    assert_eq!(recs.len(), 1);
    q.request_stop();
    worker.join().unwrap();
}

/// Caller mode: thread A drives the queue (its own slot's `drive_until`, holding the drive
/// token the whole time) while the comm of slot B, whose task A's ticks run, is invalidated by
/// B's owner from another thread: B's request waits for A's next tick and is applied there,
/// between two posts. With the token free afterwards, B's owner takes it and applies its next
/// request itself.
#[test]
fn invalidate_while_another_thread_drives_the_caller_mode_queue() {
    let clock = MonotonicClock;
    let (sa, sb) = (Script::new(0), Script::new(0));
    let q = ProxyQueue::new_caller(
        QueueConfig {
            slots: 2,
            submit_capacity: 8,
            status_capacity: 8,
        },
        Box::new(NoClock),
    )
    .unwrap();
    let mut ha = ProxyQueue::join(&q).unwrap();
    let mut hb = ProxyQueue::join(&q).unwrap();
    hb.submit(net(&sb, 2, 1)).unwrap();
    ha.submit(net(&sa, 1, 1)).unwrap();
    let stop = crate::base::sync::Arc::new(crate::base::sync::AtomicBool::new(false));
    let driver = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let clock = MonotonicClock;
            // Drive until told to stop, in 200 ms waits (the task never ends: each times out).
            while !stop.load(crate::base::sync::Ordering::SeqCst) {
                let r = ha.drive_until(1, within(&clock, 200), &waiter(&clock), None);
                assert_eq!(r.unwrap_err(), NrtStatus::Timeout);
            }
            ha
        })
    };
    progresses_past(&sb, 0, 3);
    for i in 0..20usize {
        let addr = 0x20_0000 + i * 0x1000;
        assert_eq!(
            hb.invalidate_until(inval(&sb, addr), &waiter(&clock), within(&clock, 10_000)),
            Ok(())
        );
        assert_eq!(sb.invalidations().last(), Some(&(addr, 0x1000)));
        progresses_past(&sb, sb.counts().1, 1);
    }
    stop.store(true, crate::base::sync::Ordering::SeqCst);
    let ha = driver.join().unwrap();
    for i in 0..20usize {
        applied_mid_run(&sb, 0x20_0000 + i * 0x1000);
    }
    // Nobody drives now: the owner takes the free token and applies it itself.
    assert!(!q.is_driven());
    assert_eq!(
        hb.invalidate_until(
            inval(&sb, 0x30_0000),
            &waiter(&clock),
            within(&clock, 10_000)
        ),
        Ok(())
    );
    assert_eq!(sb.invalidations().last(), Some(&(0x30_0000, 0x1000)));
    assert!(!q.is_driven(), "the token is released");
    assert_eq!(
        sb.overlaps.load(Ordering::SeqCst),
        0,
        "two threads inside the comm"
    );
    assert_eq!(hb.leave(&waiter(&clock)).len(), 1);
    assert_eq!(ha.leave(&waiter(&clock)).len(), 1);
}

/// Caller mode, one thread owning two slots: from inside the drive hook of slot A's
/// `drive_until` (the thread holds the drive token, between ticks) it invalidates slot B's
/// comm. The request is applied at once by this thread, not left waiting for a tick this thread
/// would have to make: no deadlock, no timeout.
#[test]
fn invalidate_from_the_drive_hook_of_the_token_holder() {
    let clock = MonotonicClock;
    let (sa, sb) = (Script::new(0), Script::new(0));
    let q = ProxyQueue::new_caller(
        QueueConfig {
            slots: 2,
            submit_capacity: 8,
            status_capacity: 8,
        },
        Box::new(NoClock),
    )
    .unwrap();
    let mut ha = ProxyQueue::join(&q).unwrap();
    let mut hb = ProxyQueue::join(&q).unwrap();
    hb.submit(net(&sb, 2, 1)).unwrap();
    ha.submit(net(&sa, 1, 1)).unwrap();
    let mut answers = Vec::new();
    let mut rounds = 0u32;
    let t0 = Instant::now();
    let mut hook = || {
        rounds += 1;
        if rounds.is_multiple_of(10) && answers.len() < 5 {
            let addr = 0x40_0000 + answers.len() * 0x1000;
            // The same thread holds the token: applied here and now.
            let r = hb.invalidate_until(inval(&sb, addr), &waiter(&clock), within(&clock, 5_000));
            answers.push((r, sb.invalidations().last().copied()));
        }
        true
    };
    let r = ha.drive_until(1, within(&clock, 300), &waiter(&clock), Some(&mut hook));
    assert_eq!(r.unwrap_err(), NrtStatus::Timeout, "task 1 never ends");
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "an invalidation from the hook waited for its own driver"
    );
    assert_eq!(answers.len(), 5);
    for (i, (r, last)) in answers.iter().enumerate() {
        assert_eq!(*r, Ok(()));
        assert_eq!(*last, Some((0x40_0000 + i * 0x1000, 0x1000)));
        applied_mid_run(&sb, 0x40_0000 + i * 0x1000);
    }
    assert_eq!(sb.overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(hb.leave(&waiter(&clock)).len(), 1);
    assert_eq!(ha.leave(&waiter(&clock)).len(), 1);
}

/// A driver that never reaches a safe point (here: a thread holds a caller-mode queue's token
/// and does not tick): the request is withdrawn at the deadline and answers `NRT_TIMEOUT`, not
/// applied; once the token is free again the next request is applied.
#[test]
fn invalidate_times_out_when_the_driver_never_ticks_and_is_not_applied() {
    let clock = MonotonicClock;
    let s = Script::new(0);
    let q = ProxyQueue::new_caller(
        QueueConfig {
            slots: 1,
            submit_capacity: 8,
            status_capacity: 8,
        },
        Box::new(NoClock),
    )
    .unwrap();
    let mut h = ProxyQueue::join(&q).unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let q2 = q.clone();
    let holder = std::thread::spawn(move || {
        let _d = q2.try_drive().expect("a free token");
        held_tx.send(()).unwrap();
        release_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    });
    held_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    let t0 = Instant::now();
    assert_eq!(
        h.invalidate_until(inval(&s, 0x7000), &waiter(&clock), within(&clock, 50)),
        Err(NrtStatus::Timeout)
    );
    assert!(t0.elapsed() >= Duration::from_millis(50));
    assert!(
        s.invalidations().is_empty(),
        "a withdrawn request is not applied"
    );
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(
        h.invalidate_until(inval(&s, 0x7000), &waiter(&clock), within(&clock, 10_000)),
        Ok(())
    );
    assert_eq!(s.invalidations(), [(0x7000, 0x1000)]);
    assert!(h.leave(&waiter(&clock)).is_empty());
}

/// Thread mode with the worker gone (stopped): nothing drives, so the owner applies the
/// request itself.
#[test]
fn invalidate_after_the_worker_exited_is_applied_by_the_owner() {
    let clock = MonotonicClock;
    let s = Script::new(0);
    let (q, w) = small(1, 8);
    let mut h = ProxyQueue::join(&q).unwrap();
    let worker = spawn_worker(w);
    q.request_stop();
    worker.join().unwrap();
    assert!(q.worker_exited());
    assert_eq!(
        h.invalidate_until(inval(&s, 0x9000), &waiter(&clock), within(&clock, 10_000)),
        Ok(())
    );
    assert_eq!(s.invalidations(), [(0x9000, 0x1000)]);
}

#[test]
fn a_waiting_poller_keeps_the_worker_from_parking_until_it_ends() {
    use crate::base::sync::DiagOrdering::Relaxed;
    let (q, mut w) = small(2, 8);
    let h = ProxyQueue::join(&q).unwrap();
    let dev = Arc::new(crate::testutil::Countdown::default());
    assert!(q.slot_poller(0).unwrap().wire(Some(dev.clone())).is_none());
    assert!(q.slot_poller(64).is_none());
    assert_eq!(w.tick(), Tick::Park, "an idle poller lets the worker park");
    dev.left.store(3, Relaxed);
    assert_eq!(w.tick(), Tick::NoProgress, "waiting: no park");
    assert_eq!(w.tick(), Tick::NoProgress);
    assert_eq!(w.tick(), Tick::Continue, "the poller's end is progress");
    assert_eq!(w.tick(), Tick::Park);
    drop(h);
}
