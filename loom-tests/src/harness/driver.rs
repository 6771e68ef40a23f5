//! Models 2, 3 and 4: the driver half's queue — submission ring → worker `tick()` → task step →
//! status record → consumer; the worker's park/wake; slot release and reuse.
//!
//! The bodies run proxy-core's real queue, wake word and task bookkeeping; a planted run
//! executes the same body with one plant selected (`proxy_core::plant`).
//!
//! Observer flags (did the owner leave? did the task finish?) are `std` atomics, not loom's:
//! they are not part of any handoff, they only record where the model's schedule is (loom runs
//! one thread at a time, so a `SeqCst` std atomic reads the schedule order), and they add no
//! branch points.

use std::sync::atomic::{AtomicBool as StdAtomicBool, Ordering as StdOrdering};

use proxy_core::base::status::NrtStatus;
use proxy_core::base::sync::{Arc, AtomicU32, Ordering};
use proxy_core::base::time::NoClock;
use proxy_core::driver::queue::{
    ProxyQueue, QueueConfig, SlotHandle, SlotState, TaskBox, Tick, Worker,
};
use proxy_core::driver::record::{RunState, StatusRecord, TaskRecord};
use proxy_core::driver::task::{ProxyTask, Step, StepEnv, TaskCore, TaskKind};
use proxy_core::driver::wake::WaitCell;

use super::{thread, waiter, ModelPark};

/// A queue of `cfg`'s sizes (no task timeouts: its clock never moves) and its worker.
pub fn new_queue(cfg: QueueConfig) -> (Arc<ProxyQueue>, Worker) {
    ProxyQueue::new(cfg, Box::new(NoClock)).expect("valid config")
}

/// `SlotHandle::submit`, the rejection's status only.
///
/// # Errors
/// The rejection's status.
pub fn submit(handle: &mut SlotHandle, task: TaskBox) -> Result<(), NrtStatus> {
    handle.submit(task).map_err(|r| r.status)
}

/// A model task: `steps` steps that make progress (PROGRESSING), then DONE with `final_status`.
/// Optionally it checks that it is never stepped or closed after its owner left the queue, and
/// flags when it is DONE.
pub struct ModelTask {
    core: TaskCore,
    steps: u32,
    final_status: NrtStatus,
    owner_left: Option<std::sync::Arc<StdAtomicBool>>,
    done: Option<std::sync::Arc<StdAtomicBool>>,
}

impl ModelTask {
    /// A task with id `task_id` (comm 3, streams 0b101) that progresses `steps` times, then
    /// ends DONE with `final_status`.
    pub fn new(task_id: u32, steps: u32, final_status: NrtStatus) -> Self {
        Self {
            core: TaskCore::new(TaskKind::Barrier, task_id, COMM_ID, STREAMS, None),
            steps,
            final_status,
            owner_left: None,
            done: None,
        }
    }

    /// Panics if the worker steps or closes the task once `owner_left` is set (its comm's
    /// `leave` has returned: the worker must no longer touch the slot's tasks).
    pub fn guarded_by(mut self, owner_left: std::sync::Arc<StdAtomicBool>) -> Self {
        self.owner_left = Some(owner_left);
        self
    }

    /// Sets `done` when the task reaches DONE (on the worker thread).
    pub fn flagging(mut self, done: std::sync::Arc<StdAtomicBool>) -> Self {
        self.done = Some(done);
        self
    }

    /// The live record.
    pub fn live(&self) -> Arc<StatusRecord> {
        self.core.status_record()
    }

    fn check_owner(&self, what: &str) {
        if let Some(left) = &self.owner_left {
            assert!(
                !left.load(StdOrdering::SeqCst),
                "the worker {what} task {} after its comm left the slot",
                self.core.record().task_id
            );
        }
    }

    fn finish(&mut self, status: NrtStatus) {
        self.core.transition(RunState::Done, status);
        if let Some(d) = &self.done {
            d.store(true, StdOrdering::SeqCst);
        }
    }
}

impl ProxyTask for ModelTask {
    fn step(&mut self, _env: &StepEnv) -> Step {
        self.check_owner("stepped");
        if self.core.state() == RunState::Done {
            return Step::Done;
        }
        if self.steps == 0 {
            self.finish(self.final_status);
            return Step::Done;
        }
        self.steps -= 1;
        self.core
            .transition(RunState::Progressing, NrtStatus::Success);
        Step::Progressed
    }

    fn close(&mut self, status: NrtStatus) {
        self.check_owner("closed");
        if self.core.state() != RunState::Done {
            self.finish(status);
        }
    }

    fn core(&self) -> &TaskCore {
        &self.core
    }

    fn core_mut(&mut self) -> &mut TaskCore {
        &mut self.core
    }

    fn comm_key(&self) -> Option<usize> {
        None
    }
}

/// The comm id of every model task.
pub const COMM_ID: u32 = 3;
/// The stream mask of every model task.
pub const STREAMS: u32 = 0b101;

/// How often a model thread retries before it declares that another thread never made the
/// change it waits for: small under loom (each retry yields, and loom runs the other threads
/// until they block or yield, so a handful suffice; a large bound only burns the branch
/// budget), large on real threads.
pub const SPIN_BOUND: u32 = if cfg!(loom) { 30 } else { 10_000_000 };

/// One slot, rings of 2 (the loom sizes).
pub fn one_slot() -> QueueConfig {
    QueueConfig {
        slots: 1,
        submit_capacity: 2,
        status_capacity: 2,
    }
}

/// The worker thread's loop, as the platform runs it (tick; park when told, yield when no task
/// moved) until stop is requested.
pub fn run_worker(worker: Worker) {
    drop(run_worker_until(worker, Worker::stop_requested));
}

/// The worker thread's loop until `done` answers `true` (checked before each tick); gives the
/// worker back.
pub fn run_worker_until(mut worker: Worker, done: impl Fn(&Worker) -> bool) -> Worker {
    while !done(&worker) {
        match worker.tick() {
            Tick::Park => worker.park(&ModelPark::default()),
            Tick::NoProgress => thread::yield_now(),
            Tick::Continue => {}
        }
    }
    worker
}

/// Model 2 — submission → worker `tick()` → task step → status record → consumer.
///
/// The consumer (the comm's thread) has joined; the worker starts; the consumer submits a task
/// that ends DONE with `NRT_NETWORK_PROXY_FAILURE` (a final status unlike the in-flight one) on
/// its first step. While the worker runs it, the consumer reads the task's live status record
/// once, at whatever point loom puts the read: if it reads `run_state == DONE`, every other
/// field must be final (in flight, a field may already show a later publish: the contract
/// promises nothing more). Then it waits for the final record on its status ring (spin, then
/// park): it must be woken, and the ring's record and the live record must both be final.
///
/// To keep the model small the worker thread ends once it has reported the task (no stop
/// request, no leave against a running worker: models 3 and 4 cover those).
pub fn record_handoff() {
    let (queue, worker) = new_queue(one_slot());
    let mut h = ProxyQueue::join(&queue).expect("join a free slot");
    let done = std::sync::Arc::new(StdAtomicBool::new(false));
    let done2 = done.clone();
    let worker =
        thread::spawn(move || run_worker_until(worker, |_| done2.load(StdOrdering::SeqCst)));
    let task = ModelTask::new(TASK_A, 0, NrtStatus::NetworkProxyFailure).flagging(done);
    let live = task.live();
    submit(&mut h, Box::new(task)).expect("submit");
    let expected = TaskRecord {
        task_id: TASK_A,
        slot: 0,
        comm_id: COMM_ID,
        streams: STREAMS,
        progress_status: NrtStatus::NetworkProxyFailure.code(),
        run_state: RunState::Done as u32,
    };
    let snap = live.load();
    match snap.state() {
        Some(RunState::Done) => assert_eq!(
            snap, expected,
            "a consumer read run_state == DONE but another field was not final"
        ),
        Some(RunState::Init) => {
            assert_eq!(
                (snap.task_id, snap.slot, snap.comm_id, snap.streams),
                (TASK_A, 0, COMM_ID, STREAMS),
                "an in-flight record with another task's fields"
            );
            assert!(
                [NrtStatus::Success, NrtStatus::NetworkProxyFailure].contains(&snap.status()),
                "an in-flight record with a status never published: {snap:?}"
            );
        }
        other => panic!("unexpected run state {other:?} in {snap:?}"),
    }
    // Spin (2 polls under loom), then park: the worker's push must wake us.
    let rec = h.wait_record(&waiter(1)).expect("one task outstanding");
    assert_eq!(rec, expected, "the final record on the status ring");
    assert_eq!(
        live.load(),
        expected,
        "the live record after the ring handoff"
    );
    drop(worker.join().unwrap()); // the worker is gone: leave does not wait for it
    assert!(h.leave(&waiter(0)).is_empty(), "nothing left to report");
}

/// A task that waits for a host word a device writes: IDLE (no progress) until the word is
/// non-zero, then DONE (flagging `done`).
struct WordTask {
    core: TaskCore,
    word: Arc<AtomicU32>,
    done: std::sync::Arc<StdAtomicBool>,
}

impl ProxyTask for WordTask {
    fn step(&mut self, _env: &StepEnv) -> Step {
        // Acquire: pairs with the device's release store (what it wrote before is visible).
        if self.word.load(Ordering::Acquire) == 0 {
            return Step::Idle;
        }
        self.core.transition(RunState::Done, NrtStatus::Success);
        self.done.store(true, StdOrdering::SeqCst);
        Step::Done
    }

    fn close(&mut self, status: NrtStatus) {
        self.core.transition(RunState::Done, status);
    }

    fn core(&self) -> &TaskCore {
        &self.core
    }

    fn core_mut(&mut self) -> &mut TaskCore {
        &mut self.core
    }

    fn comm_key(&self) -> Option<usize> {
        None
    }
}

/// Model 3e — a worker that found nothing to do naps on its queue's bell (`Worker::nap`) while
/// a device writes the host word its task waits for and rings the bell
/// (`ProxyQueue::wake_driver`): the arm / check / sleep / wake of docs/design 04. The worker
/// must wake and finish the task. Under loom a nap has no timeout (`LoomPark::park_timeout`
/// parks), so a lost ring is a deadlock, which loom reports.
pub fn worker_naps_until_rung() {
    let (queue, worker) = new_queue(one_slot());
    let mut h = ProxyQueue::join(&queue).expect("join a free slot");
    let word = Arc::new(AtomicU32::new(0));
    let done = std::sync::Arc::new(StdAtomicBool::new(false));
    let task = WordTask {
        core: TaskCore::new(TaskKind::Network, TASK_A, COMM_ID, STREAMS, None),
        word: word.clone(),
        done: done.clone(),
    };
    submit(&mut h, Box::new(task)).expect("submit");
    let done2 = done.clone();
    let worker = thread::spawn(move || {
        let mut worker = worker;
        while !done2.load(StdOrdering::SeqCst) {
            match worker.tick() {
                Tick::Park => worker.park(&ModelPark::default()),
                Tick::NoProgress => worker.nap(&ModelPark::default(), 1_000_000),
                Tick::Continue => {}
            }
        }
        worker
    });
    // The device: its write, then the ring.
    word.store(1, Ordering::Release);
    queue.wake_driver();
    drop(worker.join().unwrap());
    assert!(done.load(StdOrdering::SeqCst));
    assert_eq!(h.try_pop_record().map(|r| r.task_id), Some(TASK_A));
    assert!(h.leave(&waiter(0)).is_empty());
}

/// Model 3d — the wake word alone: a waiter parks until two flags are set, while two notifiers
/// each set one and notify (so one notifier can find the word PARKED, the other NOTIFYING or
/// NOTIFIED). The waiter always wakes, and sees both flags once it stops waiting.
pub fn wake_word_two_notifiers() {
    use proxy_core::base::sync::{AtomicBool, Ordering};
    let flags = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
    let cell = Arc::new(WaitCell::new());
    let notifiers: Vec<_> = (0..2)
        .map(|i| {
            let (flags, cell) = (flags.clone(), cell.clone());
            thread::spawn(move || {
                flags[i].store(true, Ordering::Release);
                cell.notify();
            })
        })
        .collect();
    let both = || flags.iter().all(|f| f.load(Ordering::Acquire));
    while !both() {
        cell.park(&ModelPark::default(), both);
    }
    for n in notifiers {
        n.join().unwrap();
    }
}

/// Task ids of the models.
pub const TASK_A: u32 = 7;
/// Task ids of the models.
pub const TASK_B: u32 = 8;

/// Model 3a — the worker parks with nothing to do while a comm joins and submits (the
/// lost-wakeup case): the worker must wake and run the task. The worker thread leaves its loop
/// when the task is DONE (no stop request that could wake it instead), and the main thread
/// joins it: a lost wakeup is a deadlock, which loom reports.
pub fn worker_wakes_for_a_submission() {
    let (queue, worker) = new_queue(one_slot());
    let done = std::sync::Arc::new(StdAtomicBool::new(false));
    let done2 = done.clone();
    let worker =
        thread::spawn(move || run_worker_until(worker, |_| done2.load(StdOrdering::SeqCst)));
    let mut h = ProxyQueue::join(&queue).expect("join a free slot");
    let task = ModelTask::new(TASK_A, 0, NrtStatus::Success).flagging(done);
    submit(&mut h, Box::new(task)).expect("submit");
    let worker = worker.join().unwrap();
    assert_eq!(h.try_pop_record().map(|r| r.task_id), Some(TASK_A));
    drop(worker); // the worker is gone: leave does not wait for it
    assert!(h.leave(&waiter(0)).is_empty());
}

/// Model 3b — the worker parks with nothing to do while a comm joins (no submission): the join
/// must wake it (the worker leaves its loop once it has seen the slot ACTIVE).
pub fn worker_wakes_for_a_join() {
    let (queue, mut worker) = new_queue(one_slot());
    let q = queue.clone();
    let worker = thread::spawn(move || {
        loop {
            let t = worker.tick();
            if q.slot_state(0) == SlotState::Active {
                break;
            }
            match t {
                Tick::Park => worker.park(&ModelPark::default()),
                Tick::NoProgress => thread::yield_now(),
                Tick::Continue => {}
            }
        }
        worker
    });
    let h = ProxyQueue::join(&queue).expect("join a free slot");
    drop(worker.join().unwrap());
    assert!(h.leave(&waiter(0)).is_empty());
}

/// Model 3c — the worker parks with nothing to do while stop is requested: it must wake and
/// leave its loop.
pub fn worker_wakes_for_stop() {
    let (queue, worker) = new_queue(one_slot());
    let worker = thread::spawn(move || run_worker(worker));
    queue.request_stop();
    worker.join().unwrap();
}

/// Model 4a — slot release and reuse while the worker ticks. One slot. Comm A holds it with a
/// task in flight and leaves while the worker ticks; then comm B claims the released slot at
/// once (the worker may still be finishing the tick that closed A's slot), submits a task and
/// leaves. The worker never steps or closes A's task after A's `leave` returned (it no longer
/// reads the released slot); each leave reports its own comm's task exactly once (nothing
/// crosses from the old owner to the new one); B gets the same slot.
///
/// A and B run on one thread, one after the other: with a third thread (B claiming while A
/// leaves) the model outgrows its time budget, and the race that matters — a claim against a
/// worker that has not finished with the previous owner — is there with two.
pub fn slot_release_and_reuse() {
    let (queue, worker) = new_queue(one_slot());
    let mut a = ProxyQueue::join(&queue).expect("join a free slot");
    let a_left = std::sync::Arc::new(StdAtomicBool::new(false));
    let task = ModelTask::new(TASK_A, 0, NrtStatus::Success).guarded_by(a_left.clone());
    submit(&mut a, Box::new(task)).expect("submit");
    let worker = thread::spawn(move || run_worker(worker));
    let recs = a.leave(&waiter(0));
    a_left.store(true, StdOrdering::SeqCst);
    assert_eq!(
        recs.iter().map(|r| r.task_id).collect::<Vec<_>>(),
        [TASK_A],
        "leave reports the leaving comm's task exactly once"
    );
    assert!(recs[0].is_done());
    let mut b = ProxyQueue::join(&queue).expect("the released slot is free again");
    assert_eq!(b.slot(), 0, "the released slot is reused");
    submit(
        &mut b,
        Box::new(ModelTask::new(TASK_B, 0, NrtStatus::Success)),
    )
    .expect("submit");
    let recs = b.leave(&waiter(0));
    assert_eq!(
        recs.iter().map(|r| (r.task_id, r.slot)).collect::<Vec<_>>(),
        [(TASK_B, 0)],
        "the new owner's leave reports only its own task, exactly once"
    );
    queue.request_stop();
    worker.join().unwrap();
}

/// Model 4b — two comms race to claim the one free slot: exactly one wins, and the winner's
/// slot works (its submission is accepted); the loser gets `NRT_RESOURCE`.
pub fn claim_race() {
    let (queue, worker) = new_queue(one_slot());
    let q = queue.clone();
    let other = thread::spawn(move || ProxyQueue::join(&q).ok());
    let mine = ProxyQueue::join(&queue).ok();
    let theirs = other.join().unwrap();
    assert_eq!(
        usize::from(mine.is_some()) + usize::from(theirs.is_some()),
        1,
        "exactly one comm claims the free slot"
    );
    let mut h = mine.or(theirs).unwrap();
    assert_eq!(h.slot(), 0);
    submit(
        &mut h,
        Box::new(ModelTask::new(TASK_A, 0, NrtStatus::Success)),
    )
    .expect("the winner's slot accepts a task");
    drop(worker); // closes the task; leave does not wait for a worker that is gone
    assert_eq!(h.leave(&waiter(0)).len(), 1);
}

/// Model 9 — the drive token of a caller-mode queue (docs/design.md §9). One slot; its owner
/// submits a task that needs two ticks (one that progresses, one that ends it DONE), then
/// drives until its record (`drive_until`, no spin: it parks at once when the token is held).
/// A second runtime thread takes the token if it is free, ticks once and releases it. Whatever
/// the interleaving, the owner must get its record: either it drives itself, or it waits
/// registered as a token waiter and is woken by a record push or by the release. Afterwards the
/// token is free and no waiter is left registered.
pub fn drive_token_handoff() {
    let queue = ProxyQueue::new_caller(one_slot(), Box::new(NoClock)).expect("valid config");
    let mut h = ProxyQueue::join(&queue).expect("join a free slot");
    submit(
        &mut h,
        Box::new(ModelTask::new(TASK_A, 1, NrtStatus::Success)),
    )
    .expect("submit");
    let q = queue.clone();
    let other = thread::spawn(move || {
        if let Some(mut d) = q.try_drive() {
            d.tick();
        }
    });
    let rec = h
        .drive_until(TASK_A, None, &waiter(0), None)
        .expect("one task outstanding");
    assert_eq!((rec.task_id, rec.status()), (TASK_A, NrtStatus::Success));
    other.join().expect("the other driver");
    assert!(!queue.is_driven(), "the token is released");
    assert_eq!(queue.token_waiters(), 0, "no waiter left registered");
    assert!(h.leave(&waiter(0)).is_empty());
}

/// Model 11 — a bounded leave that times out, and its handle dropped, while the worker ticks
/// (docs/design.md §9, "Bounded waits"). Comm A submits a task (two steps), leaves with a
/// deadline already past (so the leave answers `NRT_TIMEOUT` unless the worker has closed the
/// slot already) and drops the handle it gets back: the slot goes CLOSING → ABANDONED (edge 8)
/// or, if the worker confirmed first, the handle frees the CLOSED slot itself. Then comm B
/// joins (retrying while the slot is not free yet), submits a task and leaves. Checks: A's task
/// ended (DONE) before the slot was free again; B gets the same slot, and its leave reports only
/// its own task, exactly once (nothing of A's reaches the new owner).
pub fn leave_timeout_then_drop() {
    let (queue, worker) = new_queue(one_slot());
    let mut a = ProxyQueue::join(&queue).expect("join a free slot");
    let task = ModelTask::new(TASK_A, 1, NrtStatus::Success);
    let a_live = task.live();
    submit(&mut a, Box::new(task)).expect("submit");
    let worker = thread::spawn(move || run_worker(worker));
    match a.leave_until(&waiter(0), Some(0)) {
        Ok(recs) => assert_eq!(
            recs.iter().map(|r| r.task_id).collect::<Vec<_>>(),
            [TASK_A],
            "a leave that finished reports the task once"
        ),
        Err((status, handle)) => {
            assert_eq!(status, NrtStatus::Timeout);
            assert!(handle.is_leaving());
            drop(handle);
        }
    }
    let mut tries = 0;
    let mut b = loop {
        match ProxyQueue::join(&queue) {
            Ok(b) => break b,
            Err(e) => {
                assert_eq!(e, NrtStatus::Resource, "the one slot is still being freed");
                tries += 1;
                assert!(
                    tries < SPIN_BOUND,
                    "the dropped leave's slot was never freed"
                );
                thread::yield_now();
            }
        }
    };
    assert!(
        a_live.load().is_done(),
        "the slot was free again before the old comm's task had ended"
    );
    assert_eq!(b.slot(), 0, "the released slot is reused");
    submit(
        &mut b,
        Box::new(ModelTask::new(TASK_B, 0, NrtStatus::Success)),
    )
    .expect("submit");
    let recs = b.leave(&waiter(0));
    assert_eq!(
        recs.iter().map(|r| (r.task_id, r.slot)).collect::<Vec<_>>(),
        [(TASK_B, 0)],
        "the new owner's leave reports only its own task, exactly once"
    );
    queue.request_stop();
    worker.join().unwrap();
}

#[cfg(all(test, not(loom)))]
mod tests;
