//! Twin of `proxy_core::driver::record::StatusRecord` and of the part of `proxy_core::driver::task::TaskCore`
//! that publishes it, with one planted bug: `publish` stores `run_state` with `Relaxed` instead
//! of `Release`, so a consumer that acquires `run_state == DONE` may still read stale fields.
//! `RELAXED = false` is the copy without the bug (it must pass the same model).
//!
//! Everything else is a verbatim copy (the timeout bookkeeping, which the models do not use, is
//! left out).
#![allow(missing_docs, dead_code, clippy::all)]

use proxy_core::driver::record::{RunState, StatusRecord as RealStatusRecord, TaskRecord};
use proxy_core::status::NrtStatus;
use proxy_core::sync::{Arc, AtomicU32, Ordering};

use crate::harness::driver::Core;

#[repr(C)]
#[derive(Debug)]
pub struct StatusRecord<const RELAXED: bool> {
    task_id: AtomicU32,
    slot: AtomicU32,
    comm_id: AtomicU32,
    streams: AtomicU32,
    progress_status: AtomicU32,
    run_state: AtomicU32,
}

impl<const RELAXED: bool> StatusRecord<RELAXED> {
    pub fn new(r: TaskRecord) -> Self {
        Self {
            task_id: AtomicU32::new(r.task_id),
            slot: AtomicU32::new(r.slot),
            comm_id: AtomicU32::new(r.comm_id),
            streams: AtomicU32::new(r.streams),
            progress_status: AtomicU32::new(r.progress_status),
            run_state: AtomicU32::new(r.run_state),
        }
    }

    pub fn publish(&self, r: &TaskRecord) {
        self.task_id.store(r.task_id, Ordering::Relaxed);
        self.slot.store(r.slot, Ordering::Relaxed);
        self.comm_id.store(r.comm_id, Ordering::Relaxed);
        self.streams.store(r.streams, Ordering::Relaxed);
        self.progress_status
            .store(r.progress_status, Ordering::Relaxed);
        // PLANTED BUG (RELAXED): Relaxed instead of Release: the stores above are not published.
        let order = if RELAXED {
            Ordering::Relaxed
        } else {
            Ordering::Release
        };
        self.run_state.store(r.run_state, order);
    }

    pub fn load(&self) -> TaskRecord {
        let run_state = self.run_state.load(Ordering::Acquire);
        TaskRecord {
            task_id: self.task_id.load(Ordering::Relaxed),
            slot: self.slot.load(Ordering::Relaxed),
            comm_id: self.comm_id.load(Ordering::Relaxed),
            streams: self.streams.load(Ordering::Relaxed),
            progress_status: self.progress_status.load(Ordering::Relaxed),
            run_state,
        }
    }
}

/// Copy of `TaskCore`'s record bookkeeping over the twin record.
pub struct TaskCore<const RELAXED: bool> {
    rec: TaskRecord,
    shared: Arc<StatusRecord<RELAXED>>,
}

impl<const RELAXED: bool> TaskCore<RELAXED> {
    pub fn new(task_id: u32, comm_id: u32, streams: u32) -> Self {
        let rec = TaskRecord {
            task_id,
            slot: u32::MAX,
            comm_id,
            streams,
            progress_status: NrtStatus::Success.code(),
            run_state: RunState::Init as u32,
        };
        Self {
            rec,
            shared: Arc::new(StatusRecord::new(rec)),
        }
    }

    pub fn state(&self) -> RunState {
        RunState::from_u32(self.rec.run_state).unwrap_or(RunState::Done)
    }

    pub fn bind_slot(&mut self, slot: u32) {
        self.rec.slot = slot;
        self.shared.publish(&self.rec);
    }

    pub fn transition(&mut self, to: RunState, status: NrtStatus) {
        let from = self.state();
        debug_assert!(from != RunState::Done);
        let changed = from != to || self.rec.progress_status != status.code();
        self.rec.run_state = to as u32;
        self.rec.progress_status = status.code();
        if changed {
            self.shared.publish(&self.rec);
        }
    }
}

impl<const RELAXED: bool> Core for TaskCore<RELAXED> {
    type Live = StatusRecord<RELAXED>;

    fn new(task_id: u32, comm_id: u32, streams: u32) -> Self {
        TaskCore::new(task_id, comm_id, streams)
    }
    fn live(&self) -> Arc<Self::Live> {
        self.shared.clone()
    }
    fn load(live: &Self::Live) -> TaskRecord {
        live.load()
    }
    fn state(&self) -> RunState {
        TaskCore::state(self)
    }
    fn transition(&mut self, to: RunState, status: NrtStatus) {
        TaskCore::transition(self, to, status);
    }
    fn record(&self) -> TaskRecord {
        self.rec
    }
    fn bind_slot(&mut self, slot: u32) {
        TaskCore::bind_slot(self, slot);
    }
    /// The queue never asks for it; answers a snapshot in a shipping record.
    fn status_record(&self) -> Arc<RealStatusRecord> {
        Arc::new(RealStatusRecord::new(self.rec))
    }
}
