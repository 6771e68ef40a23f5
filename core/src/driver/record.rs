//! The published status of a proxy task: the run-state enum and the 24-byte status record.
//!
//! Two forms of one layout (docs/design.md §4):
//! * [`StatusRecord`]: the live record a task owns (behind an `Arc`) and a consumer may read at
//!   any time without a lock: six `u32` atomics; the worker stores the other five fields first
//!   and `run_state` (0x14) last with release, so a consumer that reads `run_state == DONE` with
//!   acquire sees every other field final.
//! * [`TaskRecord`]: a plain copy of the same 24 bytes, what goes to a slot's status ring when
//!   the task ends.
//!
//! Seed: `enc_proxy_task_state` (24 B: `progress_status`, `run_state` @ +0x14) and
//! `proxy_task_run_state_t`, §2 and §3.

use core::fmt;

use crate::base::state::Machine;
use crate::base::status::NrtStatus;
use crate::base::sync::{AtomicU32, Ordering};

/// The run state of a proxy task. The numbers are ABI (they appear at offset 0x14 of the status
/// record).
///
/// This is the one run-state diagram of the project: both task kinds cite its edge numbers.
///
/// ```text
///   INIT(0) ──(1) skip flag ─────────────────────────────────────────────────┐
///    │  │  (stays: network — an earlier network task of its comm is not DONE) │
///    │  └─(2) network: every block filed, no device wait ──► PROGRESSING(1)   │
///    │        barrier: trigger already seen, written 0, arrived  ▲    │       │
///    │                                                           │(5) │(5)    │
///    └─(3) network: every block filed, wait for the device       │    ▼       │
///          barrier: trigger not written yet (timeout starts)     │  IDLE(3)   │
///          ──► WAITING_DEVICE_TRIGGER(2) ──(4) every trigger  ──►┘            │
///                                           word ≠ 0xFFFF_FFFF,               │
///                                           write 0 to each                   │
///                                           (barrier: and arrive)             ▼
///   PROGRESSING / IDLE ──(6) success: every stream's schedule ran; ───────► DONE(4)
///                            barrier passed, leader incremented               ▲
///   INIT / WAITING / PROGRESSING / IDLE ──(7) a start / progress / channel ──┤
///                                              error                          │
///   WAITING / PROGRESSING / IDLE ──(8) no progress past the timeout ─────────┤
///   any state but DONE ──(9) close: the comm leaves, the worker exits, or ───┘
///                            the comm's abort request is seen at a step
///
///   DONE(4) ──(10) resubmit: the owner re-arms the finished task in place ──► INIT(0)
///                  (new task id, FIFOs kept; outside the queue, before it submits again)
///
///   any state but DONE ──(11) network: the task ends (the cause of 6–9) but ──► CLOSING(5)
///                             a stream's stepped teardown has cancelled
///                             requests not yet confirmed
///   CLOSING(5) ──(12) every stream's teardown confirmed, or its drain limit ──► DONE(4)
///                     passed (NRT_TIMEOUT), or a synchronous close (the worker exits)
/// ```
/// CLOSING carries the final status from the cause of edge 11 (a teardown error replaces a
/// success); the no-progress limit does not apply there (the progress half's drain limit
/// bounds it, docs/design.md §3).
/// Network task (`driver::task::network`): edges 1–3 (and 7 on a `start` failure) in
/// `step_init`, 4 in `step_waiting`, 5–8 in
/// `step_progress` (8 also in `step_waiting`), 6–9 end through `finish`, which tears down
/// each stream when the task filed its blocks (one step of the seam's stepped stop, or the
/// synchronous stop) and takes edge 11 instead while a teardown is pending; 12 in
/// `step_closing` (or `close`); 9 in `close` / `begin_close` and at the top of `step` (abort).
/// Barrier task (`driver::task::barrier`): 1, 2, 3 and 7 in `step_init`, 4, 7 and 8 in
/// `step_trigger`, 5–8 in `step_wait`, 9 in `close` and at the top of `step` (abort).
/// Every wait is bounded by the task's no-progress limit (edge 8) once the task has left
/// INIT; only a network task waiting in INIT behind an earlier task of its comm (whose own
/// limit bounds it) has none.
/// Every edge goes through the task's one transition function, `TaskCore::transition`, which
/// logs `state=A=>B`; edge 10 goes through `TaskCore::rearm`, which takes the same edge body
/// (it alone may leave DONE), called by the task's owner through `ProxyTask::rearm`
/// (`NetworkTask::rearm_with`, `BarrierTask::rearm_with`), never by the worker. DONE is final for an execution: stepping a DONE task logs once and changes
/// nothing, and the record is reused only by an explicit resubmit (edge 10).
///
/// Seed: `proxy_task_run_state_t`, §3 (`INIT=0 .. DONE=4`; CLOSING=5 is this project's).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunState {
    /// `PROXY_TASK_STATE_INIT` (0): not started (or waiting behind an earlier task of its comm).
    Init = 0,
    /// `PROXY_TASK_STATE_PROGRESSING` (1): the last step made progress.
    Progressing = 1,
    /// `PROXY_TASK_STATE_WAITING_DEVICE_TRIGGER` (2): blocks filed, waiting for the trigger words.
    WaitingDeviceTrigger = 2,
    /// `PROXY_TASK_STATE_IDLE` (3): in flight, the last step made no progress. Not terminal.
    Idle = 3,
    /// `PROXY_TASK_STATE_DONE` (4): finished (the record's status says how); removed by the queue.
    Done = 4,
    /// CLOSING (5, not in the seed): a network task that has ended, its final status in the
    /// record, still waiting for its streams' cancelled requests to be confirmed (one bounded
    /// step per tick, docs/design.md §3). Not terminal: the buffers may still be in use.
    Closing = 5,
}

impl Machine for RunState {
    const NAME: &'static str = "task";

    /// A task's begin (leaving INIT) and end (reaching DONE) are
    /// [`crate::base::trace::mask::OPS`], the rest (waiting, progressing, idle, closing, the
    /// re-arm) [`crate::base::trace::mask::STEPS`].
    fn trace_class(from: Self, to: Self) -> u32 {
        use crate::base::trace::mask;
        if from == Self::Init || to == Self::Done {
            mask::OPS
        } else {
            mask::STEPS
        }
    }

    /// The ABI value (`PROXY_TASK_STATE_*`).
    fn code(self) -> u8 {
        self as u8
    }

    /// The numbered edges of the diagram above (the lowest number where several join the same
    /// two states). A task staying in its state (a status update) is not an edge.
    fn edge(from: Self, to: Self) -> Option<u8> {
        use RunState as S;
        match (from, to) {
            (S::Init, S::Done) => Some(1),
            (S::Init, S::Progressing) => Some(2),
            (S::Init, S::WaitingDeviceTrigger) => Some(3),
            (S::WaitingDeviceTrigger, S::Progressing) => Some(4),
            (S::Progressing, S::Idle) | (S::Idle, S::Progressing) => Some(5),
            (S::Progressing | S::Idle, S::Done) => Some(6),
            (S::WaitingDeviceTrigger, S::Done) => Some(7),
            (S::Done, S::Init) => Some(10),
            (S::Init | S::WaitingDeviceTrigger | S::Progressing | S::Idle, S::Closing) => Some(11),
            (S::Closing, S::Done) => Some(12),
            _ => None,
        }
    }
}

impl RunState {
    /// The state with ABI value `v`.
    pub fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Init,
            1 => Self::Progressing,
            2 => Self::WaitingDeviceTrigger,
            3 => Self::Idle,
            4 => Self::Done,
            5 => Self::Closing,
            _ => return None,
        })
    }
}

/// A plain copy of a task's 24-byte status record: what the status ring carries.
///
/// Layout: `task_id` @0x00, `slot` @0x04, `comm_id` @0x08, `streams` @0x0C (bit mask of the
/// streams the task drives), `progress_status` @0x10 (an `NRT_STATUS` value), `run_state` @0x14
/// (a [`RunState`] value).
///
/// Seed: `enc_proxy_task_state`, §2.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TaskRecord {
    /// The producer's id for the task.
    pub task_id: u32,
    /// The queue slot the task was submitted through.
    pub slot: u32,
    /// The comm id (shared by every rank of the comm).
    pub comm_id: u32,
    /// Bit `s` set when the task drives stream `s` (0 for a barrier task).
    pub streams: u32,
    /// `NRT_STATUS` code: the last step's status, final once `run_state` is DONE.
    pub progress_status: u32,
    /// [`RunState`] code.
    pub run_state: u32,
}

const _: () = assert!(core::mem::size_of::<TaskRecord>() == 24);
const _: () = assert!(core::mem::offset_of!(TaskRecord, task_id) == 0x00);
const _: () = assert!(core::mem::offset_of!(TaskRecord, slot) == 0x04);
const _: () = assert!(core::mem::offset_of!(TaskRecord, comm_id) == 0x08);
const _: () = assert!(core::mem::offset_of!(TaskRecord, streams) == 0x0C);
const _: () = assert!(core::mem::offset_of!(TaskRecord, progress_status) == 0x10);
const _: () = assert!(core::mem::offset_of!(TaskRecord, run_state) == 0x14);

impl TaskRecord {
    /// The run state (`None` for a value outside the enum, which a record never holds).
    pub fn state(&self) -> Option<RunState> {
        RunState::from_u32(self.run_state)
    }

    /// The status (`Failure` for an unknown code).
    pub fn status(&self) -> NrtStatus {
        NrtStatus::from_code(self.progress_status).unwrap_or(NrtStatus::Failure)
    }

    /// `true` when `run_state` is DONE.
    pub fn is_done(&self) -> bool {
        self.run_state == RunState::Done as u32
    }
}

impl fmt::Debug for TaskRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskRecord")
            .field("task_id", &self.task_id)
            .field("slot", &self.slot)
            .field("comm_id", &self.comm_id)
            .field("streams", &format_args!("{:#x}", self.streams))
            .field("progress_status", &self.status())
            .field("run_state", &self.state())
            .finish()
    }
}

/// The live 24-byte status record of a task, readable from any thread without a lock.
///
/// Same layout as [`TaskRecord`], each field an `AtomicU32` (offsets asserted at compile time
/// with the real atomics; loom's atomics are larger). Written only by the thread that steps the
/// task (the worker), through [`StatusRecord::publish`].
///
/// Seed: `enc_proxy_task_state` (`proxy_state`), §2: "the only shared surface" between the worker
/// and the consumer.
#[repr(C)]
#[derive(Debug)]
pub struct StatusRecord {
    task_id: AtomicU32,
    slot: AtomicU32,
    comm_id: AtomicU32,
    streams: AtomicU32,
    progress_status: AtomicU32,
    run_state: AtomicU32,
}

#[cfg(not(loom))]
const _: () = {
    assert!(core::mem::size_of::<StatusRecord>() == 24);
    assert!(core::mem::offset_of!(StatusRecord, progress_status) == 0x10);
    assert!(core::mem::offset_of!(StatusRecord, run_state) == 0x14);
};

impl StatusRecord {
    /// A record holding `r`.
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

    /// Stores `r`: the first five fields relaxed, then `run_state` with release, so a reader
    /// that acquires the new `run_state` sees the other fields of this or a later publish.
    pub fn publish(&self, r: &TaskRecord) {
        self.task_id.store(r.task_id, Ordering::Relaxed);
        self.slot.store(r.slot, Ordering::Relaxed);
        self.comm_id.store(r.comm_id, Ordering::Relaxed);
        self.streams.store(r.streams, Ordering::Relaxed);
        self.progress_status
            .store(r.progress_status, Ordering::Relaxed);
        // Release: publishes the stores above to a reader that acquires run_state.
        // PLANT: RecordRelaxedRunState stores Relaxed, so the stores above are not published.
        let order = plant!(RecordRelaxedRunState, Ordering::Relaxed, Ordering::Release);
        self.run_state.store(r.run_state, order);
    }

    /// The run state (acquire).
    pub fn run_state(&self) -> u32 {
        self.run_state.load(Ordering::Acquire)
    }

    /// Reads the record: `run_state` first with acquire, then the rest. Once `run_state` reads
    /// DONE the copy is final (the worker never publishes after DONE).
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

#[cfg(all(test, not(loom)))]
mod tests;
