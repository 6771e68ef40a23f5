//! Smoke models of the driver half's handoffs (wake word, submit → tick → record, leave while
//! the worker ticks). Run with `RUSTFLAGS="--cfg loom" cargo test -p loom-tests --release`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

use proxy_core::queue::{ProxyQueue, QueueConfig, Tick, Worker};
use proxy_core::record::{RunState, StatusRecord, TaskRecord};
use proxy_core::status::NrtStatus;
use proxy_core::task::{ProxyTask, Step, StepEnv, TaskCore, TaskKind};
use proxy_core::time::NoClock;
use proxy_core::wake::{LoomPark, WaitCell, Waiter};

#[test]
fn wait_cell_never_loses_a_wakeup() {
    loom::model(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let cell = Arc::new(WaitCell::new());
        let (f2, c2) = (flag.clone(), cell.clone());
        let t = thread::spawn(move || {
            f2.store(true, Ordering::Release);
            c2.notify();
        });
        while !flag.load(Ordering::Acquire) {
            cell.park(&LoomPark, || flag.load(Ordering::Acquire));
        }
        t.join().unwrap();
    });
}

/// A task that is DONE on its first step.
struct Quick(TaskCore);

impl ProxyTask for Quick {
    fn step(&mut self, _env: &StepEnv) -> Step {
        if self.0.state() != RunState::Done {
            self.0.transition(RunState::Done, NrtStatus::Success);
        }
        Step::Done
    }
    fn close(&mut self, status: NrtStatus) {
        if self.0.state() != RunState::Done {
            self.0.transition(RunState::Done, status);
        }
    }
    fn record(&self) -> TaskRecord {
        self.0.record()
    }
    fn status_record(&self) -> Arc<StatusRecord> {
        self.0.status_record()
    }
    fn bind_slot(&mut self, slot: u32) {
        self.0.bind_slot(slot)
    }
    fn comm_key(&self) -> Option<usize> {
        None
    }
    fn kind(&self) -> TaskKind {
        TaskKind::Barrier
    }
}

fn quick(id: u32) -> Box<dyn ProxyTask> {
    Box::new(Quick(TaskCore::new(TaskKind::Barrier, id, 0, 0, None)))
}

fn run_worker(mut w: Worker) {
    while !w.stop_requested() {
        match w.tick() {
            Tick::Park => w.park(&LoomPark),
            Tick::NoProgress | Tick::Continue => thread::yield_now(),
        }
    }
}

fn cfg() -> QueueConfig {
    QueueConfig {
        slots: 1,
        submit_capacity: 2,
        status_capacity: 2,
    }
}

#[test]
fn submit_tick_record_with_a_parking_worker() {
    loom::model(|| {
        let (q, w) = ProxyQueue::new(cfg(), Box::new(NoClock)).unwrap();
        let worker = thread::spawn(move || run_worker(w));
        let waiter = Waiter {
            park: &LoomPark,
            clock: &NoClock,
            spin_ns: 0,
        };
        let mut h = ProxyQueue::join(&q).unwrap();
        h.submit(quick(1)).unwrap();
        let r = h.wait_record(&waiter).unwrap();
        assert_eq!((r.task_id, r.status()), (1, NrtStatus::Success));
        assert!(h.leave(&waiter).is_empty());
        q.request_stop();
        worker.join().unwrap();
    });
}

#[test]
fn leave_while_the_worker_ticks_reports_each_task_once() {
    loom::model(|| {
        let (q, w) = ProxyQueue::new(cfg(), Box::new(NoClock)).unwrap();
        let worker = thread::spawn(move || run_worker(w));
        let waiter = Waiter {
            park: &LoomPark,
            clock: &NoClock,
            spin_ns: 0,
        };
        let mut h = ProxyQueue::join(&q).unwrap();
        h.submit(quick(1)).unwrap();
        let recs = h.leave(&waiter);
        assert_eq!(recs.len(), 1);
        assert!(recs[0].is_done());
        q.request_stop();
        worker.join().unwrap();
    });
}
