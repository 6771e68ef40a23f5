//! The proxy queue: producer slots, their submission and status rings, the per-slot active
//! lists, and the worker's `tick()` (docs/design.md §4; seed §2).
//!
//! Shape: [`ProxyQueue::new`] returns the shared queue (behind an `Arc`) and the one [`Worker`]
//! that owns every consumer end of the submission rings and every producer end of the status
//! rings. A comm joins with [`ProxyQueue::join`] and gets a [`SlotHandle`] (the other ends); it
//! submits tasks, collects final records, and leaves with [`SlotHandle::leave`]. No mutex on
//! the hot path: a submission is a ring push plus one wake-word swap.
//!
//! Slot state machine (one word per slot, [`SlotState`]; the edges are `SlotEdge`, so an
//! edge that is not drawn here cannot be asked for):
//! ```text
//!  FREE ──(1) join: CAS──► ACTIVE ──(2) leave──► CLOSING ──(3) worker closes its tasks──► CLOSED
//!    ▲                        │                     │  │                                    │
//!    │                        │                     │  └─(7) leave, the worker gone ─► FREE  │
//!    │                        │                     └─(8) handle of a timed-out leave        │
//!    │                        │                           dropped ──► ABANDONED              │
//!    │                        └─(4) handle dropped without leave──► ABANDONED               │
//!    ├──────────(5) worker closes its tasks, drops its records────────┘                     │
//!    └──────────────────────────(6) leave collects the last records ◄──────────────────────┘
//! ```
//! Edge 1 is taken by [`ProxyQueue::join`], 2, 6 and 7 by [`SlotHandle::leave`] /
//! [`SlotHandle::leave_until`] (6 and 7 also by `SlotHandle::drop` of a handle whose bounded
//! leave timed out, with the records dropped), 4 and 8 by `SlotHandle::drop`, 3 and 5 by
//! [`Worker::tick`]; all through `slot_transition`, which logs `state=A=>B`.
//!
//! **Bounded leave** (docs/design.md §9): [`SlotHandle::leave_until`] takes edge 2 once and
//! waits for CLOSED until a deadline. At the deadline it answers `NRT_TIMEOUT` and hands the
//! handle back with every record collected so far kept in it (nothing is lost): the caller
//! may pop them, retry the leave (which does not take edge 2 again), or drop the handle
//! (edge 8: the worker closes what is left and frees the slot). A leaving handle refuses
//! submissions (`NRT_CLOSED`). The drop of a leaving handle against the worker's close is loom
//! model 11 (`loom-tests/tests/leave_timeout.rs`, plants `SlotDropLeavingFreesClosing` and
//! `WorkerClosedAssumed`, the drop between the worker's load of CLOSING and its edge). Ownership of the slot's owner-side ring ends (kept in the slot between owners)
//! follows the state: the joiner owns them from ACTIVE until it stores FREE or ABANDONED; the
//! worker owns them in ABANDONED. Every edge is a release (or AcqRel) RMW/store and every read of
//! the state an acquire load, so the ring ends and the rings' contents change hands cleanly.
//!
//! **Who drives** (docs/design.md §9): a queue has exactly one driver at a time, the holder of
//! its drive token (one word, `drive`: bit 0 = driven, the rest counts threads waiting for the
//! token). In [`DriveMode::Thread`] (the default) the [`Worker`] takes the token when the queue
//! is made and keeps it: the platform's worker thread runs `tick()`. In [`DriveMode::Caller`]
//! no thread is spawned: runtime threads drive with [`ProxyQueue::tick`] or
//! [`ProxyQueue::try_drive`] (a [`Driver`] guard), and a slot's owner that waits for a record
//! ([`SlotHandle::drive_until`], [`SlotHandle::wait_record_until`], [`SlotHandle::leave`])
//! takes the token when it is free and drives itself, or, while another thread holds it, parks
//! on its slot's wake cell, woken by a pushed record or by the token's release. The release is
//! one RMW that returns the waiter count (registration is an RMW on the same word), so a waiter
//! that registered before the release is always woken, and one that registers after it finds
//! the token free in its last re-check: no lost wakeup (loom model `tests/drive.rs`, plant
//! `DriveReleaseChecksWaitersFirst`).
//!
//! Seed: `enc_proxy_queue` (296 B: `queue` deque +0x000, `active_tasks` map +0x050,
//! `state_queue` +0x0d8, `stop` +0x120) and `enc_proxy_queue::process` (nrt:0x1cf7c0), §2.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;

use core::fmt::Write as _;

use crate::base::bell::{Bell, BellSlot};
use crate::base::dump_lines::{Counting, LogLines, Opt, Prefixed, DUMP_PREFIX};
use crate::base::ring::{self, Consumer, Observer, Producer};
use crate::base::status::NrtStatus;
use crate::base::sync::{
    spin_loop, Arc, AtomicBool, AtomicU32, CachePadded, DiagAtomicU32, DiagOrdering, Ordering,
    UnsafeCell,
};
use crate::base::time::Clock;
use crate::base::trace;
use crate::driver::dump::{
    next_queue_id, ActivityWord, DriverActivity, DumpOutcome, DumpReason, DumpRequests,
};
use crate::driver::idle::{IdleSlot, Idled};
use crate::driver::inval::{InvalCell, InvalEdge, InvalState, Invalidation};
use crate::driver::poller::{Polled, PollerSlot};
use crate::driver::record::TaskRecord;
use crate::driver::task::{ProxyTask, Step, StepEnv};
use crate::driver::wake::{Park, WaitCell, Waiter};

/// Default number of producer slots per queue (real size; 2 under loom).
pub const DEFAULT_SLOTS: usize = if cfg!(loom) { 2 } else { DEFAULT_SLOTS_REAL };
/// Real default number of producer slots.
pub const DEFAULT_SLOTS_REAL: usize = 64;
/// Default submission-ring capacity per slot (real size; 2 under loom).
pub const DEFAULT_SUBMIT_CAPACITY: usize = if cfg!(loom) {
    2
} else {
    DEFAULT_SUBMIT_CAPACITY_REAL
};
/// Real default submission-ring capacity.
pub const DEFAULT_SUBMIT_CAPACITY_REAL: usize = 256;
/// Default status-ring capacity per slot, which is also the slot's limit on unreported tasks
/// (real size; 2 under loom).
pub const DEFAULT_STATUS_CAPACITY: usize = if cfg!(loom) {
    2
} else {
    DEFAULT_STATUS_CAPACITY_REAL
};
/// Real default status-ring capacity.
pub const DEFAULT_STATUS_CAPACITY_REAL: usize = 256;

/// A task as the queue holds it.
pub type TaskBox = Box<dyn ProxyTask>;

/// Who drives a queue's `tick()` (docs/design.md §9), fixed when the queue is made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DriveMode {
    /// A worker thread (`proxy-<tid>` on Linux) owns the drive token for the queue's life and
    /// runs the loop of docs/design.md §4. The default.
    #[default]
    Thread,
    /// No thread: runtime threads drive the queue (one at a time, by the drive token) with
    /// [`ProxyQueue::tick`], [`ProxyQueue::try_drive`] or a slot's waits. A firmware has only
    /// this mode.
    Caller,
}

/// A submitted task and whether its box goes back to the owner when it is DONE.
struct Submitted {
    task: TaskBox,
    /// `true`: returned through the slot's return ring ([`SlotHandle::take_returned`]) for
    /// re-arming; `false`: dropped by the driver once its record is pushed.
    keep: bool,
}

/// Drive-token word: bit 0 set while a thread drives the queue.
const DRIVEN: u32 = 1;
/// Drive-token word: one waiter registered (the count lives in bits 1..).
const WAITER: u32 = 2;

/// Sizes of a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// Number of producer slots (comms that may be joined at once), ≥ 1.
    pub slots: usize,
    /// Submission-ring capacity per slot: a power of two.
    pub submit_capacity: usize,
    /// Status-ring capacity per slot: a power of two; also the most unreported tasks a slot
    /// admits.
    pub status_capacity: usize,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            slots: DEFAULT_SLOTS,
            submit_capacity: DEFAULT_SUBMIT_CAPACITY,
            status_capacity: DEFAULT_STATUS_CAPACITY,
        }
    }
}

impl QueueConfig {
    /// Checks the sizes.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when `slots` is 0 or a capacity is not a power of two.
    pub fn validate(&self) -> Result<(), NrtStatus> {
        if self.slots == 0
            || self.slots > u32::MAX as usize
            || !self.submit_capacity.is_power_of_two()
            || !self.status_capacity.is_power_of_two()
        {
            return Err(NrtStatus::Invalid);
        }
        Ok(())
    }
}

/// The state of a producer slot (see the module docs for the diagram).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Unclaimed; its rings are empty.
    Free = 0,
    /// Claimed by a comm: submissions flow.
    Active = 1,
    /// Its comm is leaving: the worker closes its tasks next tick.
    Closing = 2,
    /// The worker has closed every task and pushed every record; it no longer reads the slot.
    Closed = 3,
    /// Its handle was dropped without `leave`: the worker closes its tasks and frees it.
    Abandoned = 4,
}

impl SlotState {
    fn from_u32(v: u32) -> Self {
        match v {
            0 => Self::Free,
            1 => Self::Active,
            2 => Self::Closing,
            3 => Self::Closed,
            _ => Self::Abandoned,
        }
    }
}

/// The owner-side ring ends of a slot.
struct OwnerEnds {
    submit: Producer<Submitted>,
    status: Consumer<TaskRecord>,
    /// Boxes of DONE tasks submitted with [`SlotHandle::submit_returning`].
    returned: Consumer<TaskBox>,
    /// Records popped while waiting for a particular task (drive-until), handed out first by
    /// the other pops. Capacity: the status ring's (allocated once).
    early: VecDeque<TaskRecord>,
}

struct SharedSlot {
    /// A [`SlotState`].
    state: AtomicU32,
    /// The owner-side ends while no handle holds them (FREE, CLOSED-after-leave, ABANDONED).
    /// Accessed only by the party the state says owns them (module docs).
    owner: UnsafeCell<Option<OwnerEnds>>,
    /// The owner waits here for records and for CLOSED; the worker notifies, and so does a
    /// caller-mode driver releasing the token while `wants_drive` is set.
    waiter: WaitCell,
    /// Set while the slot's owner waits for the drive token (read by the releasing driver).
    wants_drive: AtomicBool,
    /// Fill levels of the slot's submission and status rings, readable without the driver (a
    /// dump the driving thread did not answer).
    submit_seen: Observer<Submitted>,
    status_seen: Observer<TaskRecord>,
    /// The owner's invalidation request, served by the driving thread at its next tick
    /// (`driver::inval`).
    inval: InvalCell,
    /// Rung by the driving thread after a tick in which a task of this slot made progress
    /// (it may have written words the slot's device waits for): the device's bell
    /// ([`ProxyQueue::slot_bell`]).
    bell: BellSlot,
    /// Polled by the driving thread at every tick: the slot's rank's emulated device when the
    /// worker plays it (`driver::poller`, [`ProxyQueue::slot_poller`]).
    poller: PollerSlot,
}

/// The edges of the slot state machine (the numbers of the module diagram). Only these can be
/// taken: `slot_transition` takes an edge, not a pair of states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotEdge {
    /// (1) FREE → ACTIVE: a comm claims the slot.
    Join,
    /// (2) ACTIVE → CLOSING: its comm leaves.
    Leave,
    /// (3) CLOSING → CLOSED: the worker has closed the slot's tasks and pushed their records.
    WorkerClosed,
    /// (4) ACTIVE → ABANDONED: the handle was dropped without `leave`.
    Abandon,
    /// (5) ABANDONED → FREE: the worker closed the tasks and dropped their records.
    WorkerFreed,
    /// (6) CLOSED → FREE: `leave` collected the last records.
    Collected,
    /// (7) CLOSING → FREE: `leave` with the worker gone (nothing will close the tasks).
    CollectedWorkerGone,
    /// (8) CLOSING → ABANDONED: the handle of a timed-out bounded leave was dropped before the
    /// worker confirmed.
    AbandonLeaving,
    /// ACTIVE → FREE without the closing handshake: the planted bug `SlotLeaveWithoutHandshake`.
    #[cfg(any(loom, feature = "plants"))]
    PlantedLeaveWithoutHandshake,
}

impl SlotEdge {
    /// The edge's `(from, to)` states.
    const fn states(self) -> (SlotState, SlotState) {
        use SlotState as S;
        match self {
            Self::Join => (S::Free, S::Active),
            Self::Leave => (S::Active, S::Closing),
            Self::WorkerClosed => (S::Closing, S::Closed),
            Self::Abandon => (S::Active, S::Abandoned),
            Self::WorkerFreed => (S::Abandoned, S::Free),
            Self::Collected => (S::Closed, S::Free),
            Self::CollectedWorkerGone => (S::Closing, S::Free),
            Self::AbandonLeaving => (S::Closing, S::Abandoned),
            #[cfg(any(loom, feature = "plants"))]
            Self::PlantedLeaveWithoutHandshake => (S::Active, S::Free),
        }
    }
}

/// The one transition function of the slot state machine: takes `edge` by CAS of its `from`
/// state to its `to` state (AcqRel), logging `state=A=>B` at trace level. Returns `false` (and
/// changes nothing) when the slot is not in the edge's `from` state.
fn slot_transition(slot: &SharedSlot, index: usize, edge: SlotEdge) -> bool {
    let (from, to) = edge.states();
    // AcqRel: Release hands over the ring ends / ring contents written before the edge;
    // Acquire takes over what the previous owner released.
    let ok = slot
        .state
        .compare_exchange(from as u32, to as u32, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok();
    if ok {
        log::trace!("slot={index} state={from:?}=>{to:?}");
    }
    ok
}

/// A queue's bell wakes its driving thread ([`ProxyQueue::wake_driver`]).
impl Bell for ProxyQueue {
    fn ring(&self) {
        self.wake_driver();
    }
}

/// The shared part of a proxy queue.
///
/// Seed: `enc_proxy_queue`, §2.
pub struct ProxyQueue {
    slots: Box<[CachePadded<SharedSlot>]>,
    /// The worker parks here; submissions, joins, leaves and stop notify it.
    worker_wait: WaitCell,
    /// Set once by [`ProxyQueue::request_stop`] (seed: `stop` +0x120).
    stop: AtomicBool,
    /// The dump requests ([`ProxyQueue::request_dump`]), served by the driving thread at its
    /// next tick (`driver::dump`).
    dump: DumpRequests,
    /// What the driving thread is doing (a diagnostic word for dumps).
    activity: ActivityWord,
    /// The driving thread's heartbeat: ticks begun so far (wrapping), written only by the
    /// drive token's holder, read by anyone ([`ProxyQueue::ticks`]). Diagnostic: it hands
    /// nothing over.
    ticks: DiagAtomicU32,
    /// Process-unique id, `queue=<id>` in dump lines.
    id: u32,
    /// The registry's group id of the queue (`u32::MAX`: none), for dump lines.
    group: DiagAtomicU32,
    /// Set when the [`Worker`] is dropped (its thread ended): nothing steps tasks any more.
    exited: AtomicBool,
    status_capacity: usize,
    mode: DriveMode,
    /// The drive token: bit 0 [`DRIVEN`], bits 1.. the number of threads waiting for it
    /// ([`WAITER`] each). Changed only by RMW.
    drive: AtomicU32,
    /// The driver-side state: touched only by the token's holder.
    driver: UnsafeCell<DriverState>,
    /// One past the highest slot index ever claimed: a tick looks at no slot above it (a
    /// queue of 64 slots with 2 comms scans 2). Only grows (`fetch_max` at join, release; the
    /// driver's acquire load then sees the claimed slot's state).
    high_water: AtomicU32,
    /// The thread tag ([`Park::thread_tag`]) of the token's holder when it took the token with
    /// [`ProxyQueue::try_drive_as`] (0: unknown). Only compared with the caller's own tag (a
    /// thread finds its own tag here only while it holds the token), so it hands nothing over.
    holder: DiagAtomicU32,
    /// What the driving thread blocks on when a tick found nothing (`driver::idle`,
    /// [`ProxyQueue::idle_wait`]); unwired, it yields.
    idle: IdleSlot,
}

// SAFETY: the non-Sync fields are each slot's `owner` cell, accessed by one party at a time
// as the slot's state word says, and `driver`, accessed only by the holder of the drive token
// (taken and released by AcqRel RMWs on `drive`; module docs); everything else is atomic.
unsafe impl Sync for ProxyQueue {}
// SAFETY: as above; the ring ends are Send (TaskBox is Send).
unsafe impl Send for ProxyQueue {}

impl core::fmt::Debug for ProxyQueue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let states: Vec<SlotState> = self
            .slots
            .iter()
            .map(|s| SlotState::from_u32(s.state.load(Ordering::Relaxed)))
            .collect();
        f.debug_struct("ProxyQueue")
            .field("slots", &states)
            .field("stop", &self.stop.load(Ordering::Relaxed))
            .finish()
    }
}

/// What the worker does after a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tick {
    /// Nothing active and nothing submitted: park ([`Worker::park`]) until woken.
    Park,
    /// No task made progress this tick: spin for the spin budget, then yield (or keep spinning
    /// with `one_thread_per_core`).
    NoProgress,
    /// Something moved: tick again at once.
    Continue,
}

/// A task handed back by [`SlotHandle::submit`]: nothing is lost on back-pressure.
pub struct Rejected {
    /// Why: [`NrtStatus::QueueFull`] (ring full or too many unreported tasks) or
    /// [`NrtStatus::Closed`].
    pub status: NrtStatus,
    /// The task, unchanged except for its slot binding.
    pub task: TaskBox,
}

impl core::fmt::Debug for Rejected {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Rejected")
            .field("status", &self.status)
            .field("task", &self.task.record())
            .finish()
    }
}

/// The most polls [`ProxyQueue::wait_dump`] makes before it gives up on the driver (its
/// deadline usually comes first).
pub const DUMP_WAIT_MAX_POLLS: u64 = 1 << 24;

/// A comm's claim on one slot of a queue: submit tasks, collect their final records, leave.
///
/// `Send`, not `Clone`: one producer thread at a time. Dropping it without
/// [`SlotHandle::leave`] abandons the slot: the worker closes its tasks (NRT_CLOSED), drops
/// their records and frees the slot.
pub struct SlotHandle {
    queue: Arc<ProxyQueue>,
    index: u32,
    /// `Some` until `leave` or drop hands them back.
    ends: Option<OwnerEnds>,
    /// Tasks submitted whose final record has not been popped yet (≤ status capacity).
    outstanding: usize,
    /// Tasks submitted with `keep` whose box has not been taken back yet (≤ status capacity,
    /// the return ring's size: so the driver always has room to return a box).
    kept_out: usize,
    /// `true` once a bounded leave took edge 2 (the slot is CLOSING or CLOSED) and timed out:
    /// submissions are refused, and a retry does not take edge 2 again.
    leaving: bool,
    /// `true` once an invalidation timed out after the driver took it (TAKEN or APPLIED): its
    /// answer is collected before the next request.
    inval_stale: bool,
}

impl core::fmt::Debug for SlotHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SlotHandle")
            .field("index", &self.index)
            .field("outstanding", &self.outstanding)
            .finish()
    }
}

/// How long [`SlotHandle::invalidate_until`] keeps waiting, past its deadline, for a request the
/// driving thread has already taken (it is inside the one progress-half call that applies it):
/// 1 s.
pub const INVALIDATE_GRACE_NS: u64 = 1_000_000_000;

/// The drive token, held by the calling thread ([`ProxyQueue::try_drive`]): tick the queue;
/// dropping it releases the token and wakes the slot owners waiting for it.
pub struct Driver<'q> {
    queue: &'q ProxyQueue,
    /// `true` when it was taken with [`ProxyQueue::try_drive_as`] (the holder's tag is set).
    tagged: bool,
    /// The taking thread's tick stamp (event recording: `trace::TickStamp`, looked up once per
    /// drive session, not per tick). A `Driver` ticks on the thread that took it.
    stamp: crate::base::trace::TickStamp,
}

impl core::fmt::Debug for Driver<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Driver").field("queue", self.queue).finish()
    }
}

/// The worker side of one slot.
struct WorkerSlot {
    submit: Consumer<Submitted>,
    status: Producer<TaskRecord>,
    /// Boxes of DONE tasks submitted with `keep`, back to the owner.
    returned: Producer<TaskBox>,
    /// Active tasks in submission order (seed: `active_tasks[rank]`, keyed by slot here).
    active: VecDeque<Submitted>,
}

/// The dump line of a task that ended this tick with a timeout or a failure.
#[derive(Clone, Copy, Debug)]
struct Ended {
    slot: usize,
    kind: crate::driver::task::TaskKind,
    record: TaskRecord,
}

/// The driver-side state of a queue: the worker ends of every slot's rings, the active lists,
/// the clock. Touched only by the drive token's holder.
struct DriverState {
    slots: Vec<WorkerSlot>,
    clock: Box<dyn Clock>,
    /// Scratch for one tick: comms with a network task not DONE seen so far.
    busy_comms: Vec<usize>,
    /// Scratch for one tick: tasks that ended with a timeout or a failure (dumped at its end).
    ended: Vec<Ended>,
    /// What the driving thread did before this tick (parked, spinning...): a dump's
    /// `before=` field.
    woke_from: DriverActivity,
    /// `true` while a requester that took the free token writes the dump (`writer=requester`).
    by_requester: bool,
    /// The dump request count the last served dump wrote (the driver's copy of the written
    /// count: the pending check is then one load).
    dump_served: u32,
}

/// The worker of a [`DriveMode::Thread`] queue: holds the queue's drive token for its life.
/// Run it on one thread: `loop { match tick() { Park => park(), NoProgress => spin/yield,
/// Continue => {} } }` until [`Worker::stop_requested`].
///
/// Seed: `enc_proxy_queue::process` (nrt:0x1cf7c0), §2.
pub struct Worker {
    queue: Arc<ProxyQueue>,
}

impl core::fmt::Debug for Worker {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Worker")
            .field("queue", &self.queue)
            .field("active", &self.active_count())
            .finish()
    }
}

mod drive;
mod handle;
mod proxy_queue;

#[cfg(all(test, not(loom)))]
mod tests;
