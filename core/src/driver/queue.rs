//! The proxy queue: producer slots, their submission and status rings, the per-slot active
//! lists, and the worker's `tick()` (docs/design.md §4; seed §2).
//!
//! Shape: [`ProxyQueue::new`] returns the shared queue (behind an `Arc`) and the one [`Worker`]
//! that owns every consumer end of the submission rings and every producer end of the status
//! rings. A comm joins with [`ProxyQueue::join`] and gets a [`SlotHandle`] (the other ends); it
//! submits tasks, collects final records, and leaves with [`SlotHandle::leave`]. No mutex on
//! the hot path: a submission is a ring push plus one wake-word swap.
//!
//! Slot state machine (one word per slot, [`SlotState`]; the edges are [`SlotEdge`], so an
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
//! model 11 (`loom-tests/tests/leave_timeout.rs`, plant `SlotDropLeavingFreesClosing`). Ownership of the slot's owner-side ring ends (kept in the slot between owners)
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

use crate::base::dump_lines::{Counting, LogLines, Opt, Prefixed, DUMP_PREFIX};
use crate::base::ring::{self, Consumer, Observer, Producer};
use crate::base::status::NrtStatus;
use crate::base::sync::{
    spin_loop, Arc, AtomicBool, AtomicU32, CachePadded, DiagAtomicU32, DiagOrdering, Ordering,
    UnsafeCell,
};
use crate::base::time::Clock;
use crate::driver::dump::{
    next_queue_id, ActivityWord, DriverActivity, DumpOutcome, DumpReason, DumpRequests,
};
use crate::driver::inval::{InvalCell, InvalEdge, InvalState, Invalidation};
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

impl ProxyQueue {
    /// A queue with `cfg`'s sizes in [`DriveMode::Thread`], and its worker (to be run on one
    /// thread: tick, then park / spin / yield as [`Tick`] says), which holds the drive token.
    /// `clock` is read once per tick for the tasks' timeouts.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] from [`QueueConfig::validate`].
    pub fn new(cfg: QueueConfig, clock: Box<dyn Clock>) -> Result<(Arc<Self>, Worker), NrtStatus> {
        let queue = Self::build(cfg, clock, DriveMode::Thread)?;
        // The token is free in a new queue; the worker keeps it for its life.
        let taken = queue.take_token();
        debug_assert!(taken);
        Ok((queue.clone(), Worker { queue }))
    }

    /// A queue with `cfg`'s sizes in [`DriveMode::Caller`]: no worker; runtime threads drive it
    /// ([`ProxyQueue::tick`], [`ProxyQueue::try_drive`], the slots' waits). `clock` is read once
    /// per tick for the tasks' timeouts.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] from [`QueueConfig::validate`].
    pub fn new_caller(cfg: QueueConfig, clock: Box<dyn Clock>) -> Result<Arc<Self>, NrtStatus> {
        Self::build(cfg, clock, DriveMode::Caller)
    }

    fn build(
        cfg: QueueConfig,
        clock: Box<dyn Clock>,
        mode: DriveMode,
    ) -> Result<Arc<Self>, NrtStatus> {
        cfg.validate()?;
        let mut shared = Vec::with_capacity(cfg.slots);
        let mut worker_slots = Vec::with_capacity(cfg.slots);
        for _ in 0..cfg.slots {
            let (stx, srx, sobs) = ring::channel_observed::<Submitted>(cfg.submit_capacity);
            let (rtx, rrx, robs) = ring::channel_observed::<TaskRecord>(cfg.status_capacity);
            let (btx, brx) = ring::channel::<TaskBox>(cfg.status_capacity);
            shared.push(CachePadded::new(SharedSlot {
                state: AtomicU32::new(SlotState::Free as u32),
                owner: UnsafeCell::new(Some(OwnerEnds {
                    submit: stx,
                    status: rrx,
                    returned: brx,
                    early: VecDeque::with_capacity(cfg.status_capacity),
                })),
                waiter: WaitCell::new(),
                wants_drive: AtomicBool::new(false),
                submit_seen: sobs,
                status_seen: robs,
                inval: InvalCell::new(),
            }));
            worker_slots.push(WorkerSlot {
                submit: srx,
                status: rtx,
                returned: btx,
                active: VecDeque::new(),
            });
        }
        Ok(Arc::new(Self {
            slots: shared.into_boxed_slice(),
            worker_wait: WaitCell::new(),
            stop: AtomicBool::new(false),
            dump: DumpRequests::new(),
            activity: ActivityWord::default(),
            id: next_queue_id(),
            group: DiagAtomicU32::new(u32::MAX),
            exited: AtomicBool::new(false),
            status_capacity: cfg.status_capacity,
            mode,
            drive: AtomicU32::new(0),
            high_water: AtomicU32::new(0),
            holder: DiagAtomicU32::new(0),
            driver: UnsafeCell::new(DriverState {
                slots: worker_slots,
                clock,
                busy_comms: Vec::with_capacity(cfg.slots),
                ended: Vec::new(),
                woke_from: DriverActivity::Undriven,
                by_requester: false,
                dump_served: 0,
            }),
        }))
    }

    /// How the queue is driven.
    pub fn mode(&self) -> DriveMode {
        self.mode
    }

    /// Takes the drive token if it is free (free → driven by one RMW; Acquire: the previous
    /// holder's changes to the driver state are visible).
    fn take_token(&self) -> bool {
        self.drive.fetch_or(DRIVEN, Ordering::AcqRel) & DRIVEN == 0
    }

    /// `true` while some thread holds the drive token.
    pub fn is_driven(&self) -> bool {
        self.drive.load(Ordering::Acquire) & DRIVEN != 0
    }

    /// Number of threads registered as waiting for the drive token (for tests and dumps).
    pub fn token_waiters(&self) -> u32 {
        self.drive.load(Ordering::Acquire) / WAITER
    }

    /// Releases the drive token and wakes every slot owner waiting for it.
    fn release_token(&self) {
        // One RMW that both releases and reads the waiter count: a waiter registers by an RMW
        // on the same word, so either its registration is in `prev` (we wake it) or it comes
        // after our release (its re-check before blocking finds the token free).
        // PLANT: DriveReleaseChecksWaitersFirst reads the waiter count by a load before the
        // release: a waiter that registers in between is neither counted nor sees the token
        // free in its re-check (the lost-wakeup trap).
        let prev = plant!(
            DriveReleaseChecksWaitersFirst,
            {
                let waiters = self.drive.load(Ordering::Acquire);
                self.drive.fetch_and(!DRIVEN, Ordering::AcqRel);
                waiters
            },
            self.drive.fetch_and(!DRIVEN, Ordering::AcqRel)
        );
        self.activity.set(DriverActivity::Undriven);
        if prev >= WAITER {
            for slot in self.slots.iter() {
                if slot.wants_drive.load(Ordering::Acquire) {
                    slot.waiter.notify();
                }
            }
        }
    }

    /// Takes the drive token, or `None` while another thread holds it (always, in
    /// [`DriveMode::Thread`]: the worker holds it). The [`Driver`] releases it when dropped.
    pub fn try_drive(&self) -> Option<Driver<'_>> {
        // Not `then_some`: a Driver made eagerly and dropped would release a token we never took.
        if self.take_token() {
            Some(Driver {
                queue: self,
                tagged: false,
            })
        } else {
            None
        }
    }

    /// [`ProxyQueue::try_drive`], and the token remembers the calling thread
    /// ([`Park::thread_tag`] of `park`, the calling thread's parker) while the [`Driver`] lives:
    /// an invalidation asked for by this same thread while it holds the token (from a drive
    /// hook, between ticks) is then applied at once instead of waiting for a tick that this
    /// thread would have to make ([`SlotHandle::invalidate_until`]). The slots' waits drive
    /// through this.
    pub fn try_drive_as(&self, park: &dyn Park) -> Option<Driver<'_>> {
        let mut d = self.try_drive()?;
        let tag = park.thread_tag();
        if tag != 0 {
            self.holder.store(tag, DiagOrdering::Relaxed);
            d.tagged = true;
        }
        Some(d)
    }

    /// `true` when the calling thread (whose parker is `park`) holds the drive token, taken with
    /// [`ProxyQueue::try_drive_as`]. Always `false` on a platform without thread tags.
    pub fn held_by_current(&self, park: &dyn Park) -> bool {
        let tag = park.thread_tag();
        // Only this thread stores its own tag, and it clears it before it releases the token:
        // finding it here means this thread holds the token now.
        tag != 0 && self.is_driven() && self.holder.load(DiagOrdering::Relaxed) == tag
    }

    /// One tick by the calling thread (caller mode): takes the drive token, ticks once
    /// ([`Driver::tick`]), releases it.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when another thread holds the token (or the queue has a worker).
    pub fn tick(&self) -> Result<Tick, NrtStatus> {
        let mut d = self.try_drive().ok_or(NrtStatus::Invalid)?;
        Ok(d.tick())
    }

    /// Runs `f` on the driver state.
    ///
    /// # Safety
    /// The calling thread holds the drive token (a [`Driver`] or the [`Worker`]).
    unsafe fn with_driver<R>(&self, f: impl FnOnce(&mut DriverState) -> R) -> R {
        // SAFETY: the caller holds the token, so nobody else touches the state until it is
        // released (the release RMW publishes our writes to the next holder).
        self.driver.with_mut(|p| f(unsafe { &mut *p }))
    }

    /// Number of slots.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The state of slot `index` (for tests and dumps).
    ///
    /// # Panics
    /// If `index` is out of range.
    pub fn slot_state(&self, index: usize) -> SlotState {
        SlotState::from_u32(self.slots[index].state.load(Ordering::Acquire))
    }

    /// Claims a free slot (CAS FREE → ACTIVE) and wakes the worker.
    ///
    /// # Errors
    /// [`NrtStatus::Resource`] when every slot is taken; [`NrtStatus::Closed`] after
    /// [`ProxyQueue::request_stop`].
    ///
    /// An associated function (`ProxyQueue::join(&queue)`) because loom's `Arc` cannot be a
    /// method receiver.
    pub fn join(queue: &Arc<Self>) -> Result<SlotHandle, NrtStatus> {
        let this: &Self = queue;
        if this.stop_requested() {
            return Err(NrtStatus::Closed);
        }
        for (index, slot) in this.slots.iter().enumerate() {
            if slot.state.load(Ordering::Relaxed) != SlotState::Free as u32 {
                continue;
            }
            // PLANT: SlotClaimByLoadStore claims by a load and a store, not a CAS: two comms can
            // both win the slot.
            let claimed = plant!(
                SlotClaimByLoadStore,
                {
                    let free = slot.state.load(Ordering::Acquire) == SlotState::Free as u32;
                    if free {
                        slot.state
                            .store(SlotState::Active as u32, Ordering::Release);
                    }
                    free
                },
                slot_transition(slot, index, SlotEdge::Join)
            );
            if !claimed {
                continue; // lost the race for this slot: try the next one
            }
            // SAFETY: our CAS made us the slot's owner; only the owner touches `owner` while
            // the slot is ACTIVE, and the previous owner's writes were released by its edge to
            // FREE (acquired by our CAS).
            let mut ends = slot
                .owner
                .with_mut(|p| unsafe { (*p).take() })
                .expect("a FREE slot holds its owner ends");
            // A FREE slot's rings are empty (leave drained them); make sure of the owner's.
            while ends.status.pop().is_some() {}
            while ends.returned.pop().is_some() {}
            ends.early.clear();
            // An answer the previous owner did not collect (its handle was dropped): ours now.
            let _ = slot.inval.collect(index);
            this.high_water
                .fetch_max(index as u32 + 1, Ordering::AcqRel);
            this.worker_wait.notify();
            return Ok(SlotHandle {
                queue: queue.clone(),
                index: index as u32,
                ends: Some(ends),
                outstanding: 0,
                kept_out: 0,
                leaving: false,
                inval_stale: false,
            });
        }
        Err(NrtStatus::Resource)
    }

    /// Asks the worker to stop and wakes it (the registry does this after the last leave).
    pub fn request_stop(&self) {
        // Release: paired with the worker's acquire load in `stop_requested`.
        self.stop.store(true, Ordering::Release);
        self.worker_wait.notify();
    }

    /// `true` once [`ProxyQueue::request_stop`] was called.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// `true` once the worker is gone (its thread ended, normally after a stop request).
    pub fn worker_exited(&self) -> bool {
        self.exited.load(Ordering::Acquire)
    }

    /// The queue's process-unique id (`queue=<id>` in its dump lines).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Names the registry group the queue serves (`group=<g>` in its dump header).
    pub fn set_group(&self, group: u32) {
        self.group.store(group, DiagOrdering::Relaxed);
    }

    /// What the driving thread last said it does (parked, spinning, ticking...).
    pub fn driver_activity(&self) -> DriverActivity {
        if self.worker_exited() {
            return DriverActivity::Exited;
        }
        self.activity.get()
    }

    /// Asks the driving thread to write the queue's state dump (docs/design.md §6: every slot,
    /// ring, task, stream and op, one line each, to the log at error level, target
    /// [`crate::base::dump_lines::DUMP_TARGET`]) at its next tick, and wakes a parked worker.
    /// Returns the ticket [`ProxyQueue::wait_dump`] waits for. Any thread, any time; requests
    /// that arrive together are answered by one dump. A caller-mode queue that no thread drives
    /// is dumped at its next drive (or by [`ProxyQueue::wait_dump`], which takes the free token).
    pub fn request_dump(&self) -> u32 {
        let ticket = self.dump.request();
        self.worker_wait.notify();
        ticket
    }

    /// `true` once the dump of `ticket` ([`ProxyQueue::request_dump`]) was written.
    pub fn dump_answered(&self, ticket: u32) -> bool {
        self.dump.answered(ticket)
    }

    /// Waits, bounded, for the dump of `ticket` (see [`ProxyQueue::request_dump`]): until the
    /// driving thread has written it, polling and yielding (`waiter.park.yield_now`) between
    /// polls. In caller mode, when the drive token is free, this thread takes it and writes the
    /// dump itself (it is then the driving thread). When the driver does not answer by
    /// `deadline_ns` (on `waiter.clock`), or after [`DUMP_WAIT_MAX_POLLS`] polls, or when the
    /// worker is gone, this thread writes what it can read without the driver (slot states,
    /// ring fill levels, the drive-token word, the driver's activity word), marked
    /// `reason=not-answered` or `reason=driver-gone`, and says so in its answer.
    pub fn wait_dump(&self, ticket: u32, waiter: &Waiter<'_>, deadline_ns: u64) -> DumpOutcome {
        let mut polls = 0u64;
        loop {
            if self.dump.answered(ticket) {
                return DumpOutcome::Written;
            }
            if self.worker_exited() {
                self.dump_without_driver(DumpReason::DriverGone);
                return DumpOutcome::DriverGone;
            }
            if let Some(mut d) = self.try_drive() {
                d.serve_dump();
                continue;
            }
            polls += 1;
            if polls >= DUMP_WAIT_MAX_POLLS || waiter.clock.now_ns() >= deadline_ns {
                log::error!(
                    "proxy queue {}: the driving thread did not write the requested dump \
                     (driver {}); dumping what is readable without it",
                    self.id,
                    self.driver_activity().name()
                );
                self.dump_without_driver(DumpReason::NotAnswered);
                return DumpOutcome::NotAnswered;
            }
            waiter.park.yield_now();
        }
    }

    /// [`ProxyQueue::request_dump`] then [`ProxyQueue::wait_dump`].
    pub fn dump_until(&self, waiter: &Waiter<'_>, deadline_ns: u64) -> DumpOutcome {
        let ticket = self.request_dump();
        self.wait_dump(ticket, waiter, deadline_ns)
    }

    /// The dump header's fields (no newline): everything readable from any thread.
    fn write_header(
        &self,
        reason: DumpReason,
        out: &mut dyn core::fmt::Write,
    ) -> core::fmt::Result {
        let drive = self.drive.load(Ordering::Acquire);
        let (requested, written) = self.dump.counts();
        let group = self.group.load(DiagOrdering::Relaxed);
        write!(
            out,
            "{DUMP_PREFIX} queue={} group={} reason={} mode={} driver={} token={} token_waiters={} \
             dumps={requested}/{written} slots={} high_water={} stop={} exited={}",
            self.id,
            Opt((group != u32::MAX).then_some(group)),
            reason.name(),
            match self.mode {
                DriveMode::Thread => "thread",
                DriveMode::Caller => "caller",
            },
            self.driver_activity().name(),
            if drive & DRIVEN != 0 { "held" } else { "free" },
            drive / WAITER,
            self.slots.len(),
            self.high_water.load(Ordering::Acquire),
            u8::from(self.stop_requested()),
            u8::from(self.worker_exited()),
        )
    }

    /// The part of a dump that needs no driver: header, and per used slot its state, ring fill
    /// levels (from the observers) and token flag; to the log.
    fn dump_without_driver(&self, reason: DumpReason) {
        let mut log = LogLines::new();
        let _ = self.write_without_driver(reason, &mut log);
        log.finish();
    }

    fn write_without_driver(
        &self,
        reason: DumpReason,
        out: &mut dyn core::fmt::Write,
    ) -> core::fmt::Result {
        let mut out = Counting { out, lines: 0 };
        self.write_header(reason, &mut out)?;
        writeln!(
            out,
            " before=unknown writer=requester-without-driver active=unknown"
        )?;
        let hw = (self.high_water.load(Ordering::Acquire) as usize).min(self.slots.len());
        for (index, slot) in self.slots[..hw].iter().enumerate() {
            let state = SlotState::from_u32(slot.state.load(Ordering::Acquire));
            if state == SlotState::Free {
                continue;
            }
            writeln!(
                out,
                "{DUMP_PREFIX} queue={} slot={index} state={state:?} submit={}/{} status={}/{} \
                 active=unknown wants_drive={}",
                self.id,
                slot.submit_seen.len(),
                slot.submit_seen.capacity(),
                slot.status_seen.len(),
                slot.status_seen.capacity(),
                u8::from(slot.wants_drive.load(Ordering::Relaxed)),
            )?;
        }
        let lines = out.lines + 1;
        writeln!(out, "{DUMP_PREFIX} queue={} end lines={lines}", self.id)
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

impl SlotHandle {
    /// The slot index (goes into every record of this slot).
    pub fn slot(&self) -> u32 {
        self.index
    }

    /// The queue.
    pub fn queue(&self) -> &Arc<ProxyQueue> {
        &self.queue
    }

    /// Tasks submitted and not yet reported (their final record not popped).
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Submits `task` (binds it to this slot, pushes it, wakes the worker).
    ///
    /// Seed: `enc_proxy_queue::append_task` (nrt:0x1cf3c0) + `cv.notify_all`, §2.
    ///
    /// # Errors
    /// [`Rejected`] with [`NrtStatus::QueueFull`] when the slot already has as many unreported
    /// tasks as its status ring holds, or its submission ring is full: the task comes back and
    /// the caller retries after collecting records. Nothing is lost. [`NrtStatus::Closed`] when
    /// the queue's worker is gone, or the handle is leaving (a timed-out
    /// [`SlotHandle::leave_until`]).
    pub fn submit(&mut self, task: TaskBox) -> Result<(), Rejected> {
        self.push(task, false)
    }

    /// As [`SlotHandle::submit`], and the task's box comes back once it is DONE: after its
    /// record is popped, [`SlotHandle::take_returned`] hands it out for re-arming and
    /// resubmission (the allocation-free steady state: no new box per execution).
    ///
    /// # Errors
    /// As [`SlotHandle::submit`].
    pub fn submit_returning(&mut self, task: TaskBox) -> Result<(), Rejected> {
        self.push(task, true)
    }

    fn push(&mut self, mut task: TaskBox, keep: bool) -> Result<(), Rejected> {
        let full = self.outstanding >= self.queue.status_capacity
            || (keep && self.kept_out >= self.queue.status_capacity);
        let gone = self.queue.worker_exited() || self.leaving;
        let Some(ends) = self.ends.as_mut().filter(|_| !gone) else {
            return Err(Rejected {
                status: NrtStatus::Closed,
                task,
            });
        };
        if full {
            return Err(Rejected {
                status: NrtStatus::QueueFull,
                task,
            });
        }
        task.bind_slot(self.index);
        if let Err(s) = ends.submit.push(Submitted { task, keep }) {
            return Err(Rejected {
                status: NrtStatus::QueueFull,
                task: s.task,
            });
        }
        self.outstanding += 1;
        self.kept_out += usize::from(keep);
        self.queue.worker_wait.notify();
        Ok(())
    }

    /// The box of a DONE task submitted with [`SlotHandle::submit_returning`], in the order the
    /// tasks ended (`None` when none is back yet). A box is back before its record is pushed:
    /// once a task's record was popped, its box is here.
    pub fn take_returned(&mut self) -> Option<TaskBox> {
        let t = self.ends.as_mut()?.returned.pop()?;
        self.kept_out -= 1;
        Some(t)
    }

    /// Pops the next final record, if one is ready.
    pub fn try_pop_record(&mut self) -> Option<TaskRecord> {
        let ends = self.ends.as_mut()?;
        let r = ends.early.pop_front().or_else(|| ends.status.pop())?;
        self.outstanding -= 1;
        Some(r)
    }

    /// Waits for the next final record: spins for the waiter's budget, then parks until the
    /// worker pushes one; in [`DriveMode::Caller`] it drives the queue itself whenever the
    /// drive token is free. `None` at once when no task is outstanding (nothing would come).
    /// Unbounded: prefer [`SlotHandle::wait_record_until`].
    pub fn wait_record(&mut self, waiter: &Waiter<'_>) -> Option<TaskRecord> {
        self.wait_record_until(waiter, None).ok()
    }

    /// [`SlotHandle::wait_record`] with a deadline on `waiter.clock` (`None`: no deadline).
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when no task is outstanding; [`NrtStatus::Timeout`] when the
    /// deadline passed first (nothing is lost: the record stays in the ring for a later pop).
    pub fn wait_record_until(
        &mut self,
        waiter: &Waiter<'_>,
        deadline_ns: Option<u64>,
    ) -> Result<TaskRecord, NrtStatus> {
        if self.outstanding == 0 {
            return Err(NrtStatus::Invalid);
        }
        let r = self.wait_driving(waiter, deadline_ns, None, |ends| {
            ends.early.pop_front().or_else(|| ends.status.pop())
        })?;
        self.outstanding -= 1;
        Ok(r)
    }

    /// Drives (or waits for) the queue until the final record of task `task_id` is popped and
    /// returns it; records of other tasks popped meanwhile are kept for the next
    /// [`SlotHandle::try_pop_record`] / waits, in order. With the drive token (caller mode,
    /// token free) the calling thread ticks the queue and calls `hook` between ticks (the polled
    /// device runs there; it answers `true` when it made progress). While another thread holds
    /// the token (the worker, or another caller) it keeps calling `hook` between polls of the
    /// status ring, yielding when the hook did nothing, and never parks: the hook's device may be
    /// what the driver waits for. Idle driving (no tick and no hook made progress) spins for the
    /// waiter's budget, then yields between ticks
    /// ([`Park::yield_now`](crate::driver::wake::Park::yield_now)). A wait with no device to
    /// run (`hook` `None`, or [`SlotHandle::wait_record_until`]) parks instead, woken by a
    /// record push or the token's release.
    ///
    /// Seed: none (the seed's libnrt always has a worker thread); docs/design.md §9.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when no task is outstanding; [`NrtStatus::Timeout`] when
    /// `deadline_ns` (on `waiter.clock`) passed first.
    pub fn drive_until(
        &mut self,
        task_id: u32,
        deadline_ns: Option<u64>,
        waiter: &Waiter<'_>,
        hook: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<TaskRecord, NrtStatus> {
        if self.outstanding == 0 {
            return Err(NrtStatus::Invalid);
        }
        let r = self.wait_driving(waiter, deadline_ns, hook, |ends| {
            if let Some(i) = ends.early.iter().position(|r| r.task_id == task_id) {
                return ends.early.remove(i);
            }
            while let Some(r) = ends.status.pop() {
                if r.task_id == task_id {
                    return Some(r);
                }
                // Room: early + ring together never hold more than the status capacity.
                ends.early.push_back(r);
            }
            None
        })?;
        self.outstanding -= 1;
        Ok(r)
    }

    /// The owner's one wait loop: polls `poll` on the owner ends until it yields a value. When
    /// the drive token is free, takes it and drives (tick, `hook`) until `poll` succeeds or the
    /// deadline; otherwise spins, then parks on the slot's cell, registered as a token waiter
    /// (woken by a record push or the token's release). Answers `Timeout` at the deadline.
    fn wait_driving<T>(
        &mut self,
        waiter: &Waiter<'_>,
        deadline_ns: Option<u64>,
        hook: Option<&mut dyn FnMut() -> bool>,
        mut poll: impl FnMut(&mut OwnerEnds) -> Option<T>,
    ) -> Result<T, NrtStatus> {
        let queue = &*self.queue;
        let index = self.index as usize;
        let ends = self.ends.as_mut().ok_or(NrtStatus::Closed)?;
        wait_driving(queue, index, ends, waiter, deadline_ns, hook, &mut poll)
    }

    /// Leaves the queue: the slot goes CLOSING, the worker ends every queued and active task of
    /// the slot DONE with [`NrtStatus::Closed`] (network tasks that filed blocks call `stop`
    /// first) and pushes their records, then confirms (CLOSED); the handle collects every
    /// record not yet popped and frees the slot. Returns those records, in push order.
    ///
    /// Waits (spin, then park) for the worker, without a deadline: prefer
    /// [`SlotHandle::leave_until`]. If the worker is gone (its [`Worker`] was dropped, which
    /// closes and reports every task it held), leave does not wait for it.
    pub fn leave(self, waiter: &Waiter<'_>) -> Vec<TaskRecord> {
        match self.leave_until(waiter, None) {
            Ok(records) => records,
            Err((status, handle)) => {
                // Not reachable: a wait without a deadline ends only with its value.
                log::error!(
                    "slot {}: leave without a deadline ended {status}",
                    handle.index
                );
                debug_assert!(false, "an undeadlined leave ended {status}");
                Vec::new()
            }
        }
    }

    /// [`SlotHandle::leave`] with a deadline on `waiter.clock` (`None`: none).
    ///
    /// The first call takes edge 2 (ACTIVE → CLOSING) and wakes the worker; then it waits
    /// (in caller mode drives the queue itself while the drive token is free) for CLOSED.
    /// Returns every record not popped before, in push order.
    ///
    /// Seed: none (the seed's `enc_free_global_comm` waits unbounded); docs/design.md §9.
    ///
    /// # Errors
    /// `(NrtStatus::Timeout, handle)` when the deadline passed first: nothing is lost. The
    /// records collected so far stay in the handle (the next [`SlotHandle::try_pop_record`],
    /// waits or leave hand them out first, in order), the slot stays CLOSING (or CLOSED, once
    /// the worker confirms), submissions answer [`NrtStatus::Closed`]. Call `leave_until`
    /// again to finish leaving (it does not take edge 2 again), or drop the handle: the worker
    /// then closes what is left and frees the slot (edge 8; the records are dropped).
    // The error hands the handle itself back by value (nothing is lost and nothing is
    // allocated on the timeout path); its size is the handle's.
    #[allow(clippy::result_large_err)]
    pub fn leave_until(
        mut self,
        waiter: &Waiter<'_>,
        deadline_ns: Option<u64>,
    ) -> Result<Vec<TaskRecord>, (NrtStatus, SlotHandle)> {
        let mut out = Vec::new();
        let index = self.index as usize;
        let queue = self.queue.clone();
        let slot = &queue.slots[index];
        let Some(mut ends) = self.ends.take() else {
            return Ok(out);
        };
        // PLANT: SlotLeaveWithoutHandshake frees the slot at once (ACTIVE → FREE), with no
        // ACTIVE → CLOSING → (worker) CLOSED handshake: the worker may still run the tasks.
        plant!(SlotLeaveWithoutHandshake => {
            while let Some(r) = ends.status.pop() {
                out.push(r);
            }
            self.outstanding = 0;
            // SAFETY: (as the plant has it) we are the owner until our edge to FREE.
            slot.owner.with_mut(|p| unsafe { *p = Some(ends) });
            let freed = slot_transition(slot, index, SlotEdge::PlantedLeaveWithoutHandshake);
            debug_assert!(freed);
            queue.worker_wait.notify();
            return Ok(out);
        });
        if !self.leaving {
            let moved = slot_transition(slot, index, SlotEdge::Leave);
            debug_assert!(moved, "leave on a slot that is not ACTIVE");
            queue.worker_wait.notify();
        }
        // Records popped early by drive-until (or kept by a timed-out leave) come first (push
        // order).
        out.extend(ends.early.drain(..));
        // Wait for CLOSED; in caller mode drive the queue ourselves (the tick closes the slot).
        let waited = wait_driving(
            &queue,
            index,
            &mut ends,
            waiter,
            deadline_ns,
            None,
            &mut |ends| {
                while let Some(r) = ends.status.pop() {
                    out.push(r);
                }
                let closed = slot.state.load(Ordering::Acquire) == SlotState::Closed as u32;
                (closed || queue.worker_exited()).then_some(())
            },
        );
        if let Err(status) = waited {
            // Keep what we collected, in order, for the next pop or leave: `early` holds at
            // most the status capacity (every record here is of an outstanding task).
            ends.early.extend(out);
            self.ends = Some(ends);
            self.leaving = true;
            log::warn!(
                "slot {index}: leave timed out waiting for the driver to close the slot's \
                 tasks ({} records kept, {} tasks outstanding); retry or drop the handle",
                self.ends.as_ref().map_or(0, |e| e.early.len()),
                self.outstanding
            );
            return Err((status, self));
        }
        // CLOSED (or `exited`) was stored after the last push (release; acquired above):
        // drain the rest.
        while let Some(r) = ends.status.pop() {
            out.push(r);
        }
        if out.len() != self.outstanding {
            log::error!(
                "slot {index}: {} tasks outstanding, {} records collected at leave",
                self.outstanding,
                out.len()
            );
        }
        self.outstanding = 0;
        self.kept_out = 0;
        self.leaving = false;
        // Boxes not taken back are dropped with the slot's next join (or here, now).
        while ends.returned.pop().is_some() {}
        // The answer of an invalidation that timed out after the driver took it (CLOSED is
        // stored after the driver's serve, so it is APPLIED by now).
        let _ = slot.inval.collect(index);
        self.inval_stale = false;
        // SAFETY: the slot is CLOSED (or CLOSING with the worker gone) and we are its owner:
        // nobody else touches `owner` until our release edge to FREE.
        slot.owner.with_mut(|p| unsafe { *p = Some(ends) });
        if !slot_transition(slot, index, SlotEdge::Collected) {
            let freed = slot_transition(slot, index, SlotEdge::CollectedWorkerGone);
            debug_assert!(freed, "leave: slot neither CLOSED nor CLOSING");
        }
        Ok(out)
    }

    /// `true` once a bounded leave timed out on this handle (the slot is CLOSING or CLOSED;
    /// submissions are refused; call [`SlotHandle::leave_until`] again or drop it).
    pub fn is_leaving(&self) -> bool {
        self.leaving
    }

    /// The caller is about to free `request.addr .. + request.len`: drops the comm's transport
    /// registrations of the range (`request.invalidate` on `request.comm`, this slot's comm)
    /// before any further post of the comm, at any time, also while tasks of the comm run
    /// (docs/design.md §9, "Invalidation while the driver runs"). When it returns `Ok`, the
    /// progress half has applied it: no later post uses a stale registration of the range, and
    /// registrations that in-flight requests still use are detached (closed when they complete;
    /// the memory itself must stay valid until then, as every post's contract says).
    ///
    /// Where it is applied (`driver::inval`): by the queue's driving thread at the start of its
    /// next tick, before it steps any task (this thread posts the request in the slot's cell,
    /// wakes the worker and waits: spins for the waiter's budget, then parks, woken by the
    /// answer or by the token's release); in caller mode with the drive token free, by this
    /// thread, which takes the token and ticks; by this thread at once when it holds the token
    /// itself (taken with [`ProxyQueue::try_drive_as`]: the slots' waits, so also from a drive
    /// hook) or the queue's worker is gone. A thread that holds the token through
    /// [`ProxyQueue::try_drive`] must not call this (it would wait for its own tick until the
    /// deadline).
    ///
    /// # Errors
    /// The progress half's status ([`NrtStatus::Invalid`] for a NULL address, a zero length or
    /// a wrapping range; the transport's failure). [`NrtStatus::Closed`] after a leave.
    /// [`NrtStatus::Timeout`] when `deadline_ns` (on `waiter.clock`; `None`: none) passed before
    /// the driving thread reached a safe point: the request was withdrawn and **not applied** (do
    /// not free the range yet; the log names the driver's activity), or the driver took it and
    /// did not answer within [`INVALIDATE_GRACE_NS`] more (its answer is collected by the next
    /// call).
    pub fn invalidate_until(
        &mut self,
        request: Invalidation,
        waiter: &Waiter<'_>,
        deadline_ns: Option<u64>,
    ) -> Result<(), NrtStatus> {
        let queue = &*self.queue;
        let index = self.index as usize;
        let cell = &queue.slots[index].inval;
        let ends = self.ends.as_mut().ok_or(NrtStatus::Closed)?;
        if self.inval_stale {
            // An earlier request the driver took and did not answer in time: its answer first.
            let earlier = wait_driving(queue, index, ends, waiter, deadline_ns, None, &mut |_| {
                cell.collect(index)
            })
            .inspect_err(|_| {
                log::error!(
                    "slot {index}: invalidate {:#x}+{:#x}: an earlier invalidation is still \
                     being applied by the queue's driver (driver {}); not applied",
                    request.addr,
                    request.len,
                    queue.driver_activity().name()
                );
            })?;
            self.inval_stale = false;
            if let Err(e) = earlier {
                log::warn!("slot {index}: the earlier, late invalidation answered {e}");
            }
        }
        if queue.held_by_current(waiter.park) || queue.worker_exited() {
            // SAFETY: this thread holds the drive token and is between ticks (the slots' waits
            // call the hook between ticks; the seam's callbacks may not call back into the
            // driver), or the worker is gone (its exit, acquired above, ended every call into
            // the queue's comms): no thread is inside the comm.
            return unsafe { request.apply() };
        }
        if !cell.post(index, request) {
            log::error!("slot {index}: invalidate: the slot's request cell is busy (bug)");
            return Err(NrtStatus::Failure);
        }
        queue.worker_wait.notify();
        /// What the owner's wait ends with.
        enum Ended {
            Answer(Result<(), NrtStatus>),
            DriverGone,
        }
        let mut poll = |_: &mut OwnerEnds| {
            cell.collect(index)
                .map(Ended::Answer)
                .or_else(|| queue.worker_exited().then_some(Ended::DriverGone))
        };
        match wait_driving(queue, index, ends, waiter, deadline_ns, None, &mut poll) {
            Ok(Ended::Answer(r)) => return r,
            Ok(Ended::DriverGone) | Err(_) => {}
        }
        let gone = queue.worker_exited();
        if cell.transition(index, InvalEdge::Withdraw) {
            if gone {
                // SAFETY: the worker is gone (see above) and the request is ours again.
                return unsafe { request.apply() };
            }
            log::error!(
                "slot {index}: invalidate {:#x}+{:#x}: the queue's driver did not reach a safe \
                 point before the deadline (driver {}, token {}); withdrawn, not applied",
                request.addr,
                request.len,
                queue.driver_activity().name(),
                if queue.is_driven() { "held" } else { "free" }
            );
            return Err(NrtStatus::Timeout);
        }
        // The driver took it: it is applying it now (one call of the progress half).
        let grace = waiter.clock.now_ns().saturating_add(INVALIDATE_GRACE_NS);
        match wait_driving(queue, index, ends, waiter, Some(grace), None, &mut |_| {
            cell.collect(index)
        }) {
            Ok(r) => r,
            Err(s) => {
                self.inval_stale = true;
                log::error!(
                    "slot {index}: invalidate {:#x}+{:#x}: the queue's driver took the request \
                     but did not answer within {} ms after the deadline (driver {}); do not \
                     free the range yet",
                    request.addr,
                    request.len,
                    INVALIDATE_GRACE_NS / 1_000_000,
                    queue.driver_activity().name()
                );
                Err(s)
            }
        }
    }
}

/// How long [`SlotHandle::invalidate_until`] keeps waiting, past its deadline, for a request the
/// driving thread has already taken (it is inside the one progress-half call that applies it):
/// 1 s.
pub const INVALIDATE_GRACE_NS: u64 = 1_000_000_000;

impl Drop for SlotHandle {
    fn drop(&mut self) {
        let Some(ends) = self.ends.take() else {
            return;
        };
        let index = self.index as usize;
        let slot = &self.queue.slots[index];
        if self.leaving {
            self.drop_leaving(index, ends);
            return;
        }
        log::warn!(
            "slot {index}: handle dropped without leave; its tasks end NRT_CLOSED unreported"
        );
        // SAFETY: we own the slot (ACTIVE); our release edge to ABANDONED hands `owner` to the
        // worker.
        slot.owner.with_mut(|p| unsafe { *p = Some(ends) });
        let moved = slot_transition(slot, index, SlotEdge::Abandon);
        debug_assert!(moved);
        self.queue.worker_wait.notify();
    }
}

impl SlotHandle {
    /// Drop of a handle whose bounded leave timed out: the slot is CLOSING (the worker has not
    /// confirmed yet) or CLOSED. CLOSING: edge 8 to ABANDONED, the worker closes what is left
    /// and frees the slot (or edge 7 when the worker is gone). CLOSED: the records are dropped
    /// here and edge 6 frees the slot. Never waits.
    fn drop_leaving(&mut self, index: usize, mut ends: OwnerEnds) {
        let slot = &self.queue.slots[index];
        log::warn!(
            "slot {index}: handle of a timed-out leave dropped; {} records not collected",
            self.outstanding
        );
        // PLANT: SlotDropLeavingFreesClosing frees a CLOSING slot at once (edge 7, as if the
        // worker were gone), without the worker's confirmation: it may still run the old tasks.
        plant!(SlotDropLeavingFreesClosing => {
            while ends.status.pop().is_some() {}
            ends.early.clear();
            // SAFETY: (as the plant has it) we own the slot until our edge to FREE.
            slot.owner.with_mut(|p| unsafe { *p = Some(ends) });
            if !slot_transition(slot, index, SlotEdge::CollectedWorkerGone) {
                let _ = slot_transition(slot, index, SlotEdge::Collected);
            }
            return;
        });
        if slot.state.load(Ordering::Acquire) == SlotState::Closing as u32
            && !self.queue.worker_exited()
        {
            // SAFETY: the slot is CLOSING and we are its owner; our release edge to ABANDONED
            // hands `owner` to the worker (which drops the records and frees the slot).
            slot.owner.with_mut(|p| unsafe { *p = Some(ends) });
            if slot_transition(slot, index, SlotEdge::AbandonLeaving) {
                self.queue.worker_wait.notify();
                return;
            }
            // The worker confirmed (CLOSED) in between: the ends are still ours (CLOSED is an
            // owner state); take them back.
            // SAFETY: the CAS failed, so the slot is CLOSED and we still own `owner`.
            ends = match slot.owner.with_mut(|p| unsafe { (*p).take() }) {
                Some(e) => e,
                None => return,
            };
        }
        // CLOSED (or CLOSING with the worker gone): nothing will push any more.
        while ends.status.pop().is_some() {}
        while ends.returned.pop().is_some() {}
        ends.early.clear();
        // SAFETY: we own the slot (CLOSED, or CLOSING with the worker gone) until our release
        // edge to FREE.
        slot.owner.with_mut(|p| unsafe { *p = Some(ends) });
        if !slot_transition(slot, index, SlotEdge::Collected) {
            let freed = slot_transition(slot, index, SlotEdge::CollectedWorkerGone);
            debug_assert!(
                freed,
                "drop of a leaving handle: slot neither CLOSED nor CLOSING"
            );
        }
    }
}

/// The owner's one wait loop (see [`SlotHandle::wait_driving`]).
fn wait_driving<T>(
    queue: &ProxyQueue,
    index: usize,
    ends: &mut OwnerEnds,
    waiter: &Waiter<'_>,
    deadline_ns: Option<u64>,
    mut hook: Option<&mut dyn FnMut() -> bool>,
    poll: &mut dyn FnMut(&mut OwnerEnds) -> Option<T>,
) -> Result<T, NrtStatus> {
    let slot = &queue.slots[index];
    let past = |now: u64| deadline_ns.is_some_and(|d| now >= d);
    loop {
        if let Some(v) = poll(ends) {
            return Ok(v);
        }
        if let Some(mut d) = queue.try_drive_as(waiter.park) {
            // We drive: tick and run the hook until our value comes (the token is released
            // when `d` drops, on every return).
            let mut idle_since: Option<u64> = None;
            let mut rounds = 0u32;
            loop {
                let t = d.tick();
                let moved = hook.as_deref_mut().is_some_and(|h| h());
                if let Some(v) = poll(ends) {
                    return Ok(v);
                }
                rounds = rounds.wrapping_add(1);
                let busy = t == Tick::Continue || moved;
                // The clock only every 64 rounds while something moves (or without a spin
                // budget): the deadline is coarse, a clock read is not free.
                if (busy || waiter.spin_ns == 0) && !rounds.is_multiple_of(64) {
                    if !busy {
                        waiter.park.yield_now();
                    }
                    continue;
                }
                let now = waiter.clock.now_ns();
                if past(now) {
                    return Err(NrtStatus::Timeout);
                }
                if busy {
                    idle_since = None;
                    continue;
                }
                let since = *idle_since.get_or_insert(now);
                if now.saturating_sub(since) >= waiter.spin_ns {
                    waiter.park.yield_now();
                } else {
                    spin_loop();
                }
            }
        }
        // Another thread drives. With a hook (a polled device), keep running it between polls
        // and yield: the device may be what the driver waits for, and nothing would wake us
        // for it.
        if let Some(hook) = hook.as_deref_mut() {
            loop {
                let moved = hook();
                if let Some(v) = poll(ends) {
                    return Ok(v);
                }
                if !queue.is_driven() {
                    break;
                }
                if past(waiter.clock.now_ns()) {
                    return Err(NrtStatus::Timeout);
                }
                if !moved {
                    waiter.park.yield_now();
                }
            }
            continue;
        }
        // No hook: spin for the budget (bounded in polls too), then park.
        let now = waiter.clock.now_ns();
        if past(now) {
            return Err(NrtStatus::Timeout);
        }
        // Register as a token waiter (the flag before the RMW that the releaser reads), then
        // park with a last re-check of both conditions.
        slot.wants_drive.store(true, Ordering::Relaxed);
        queue.drive.fetch_add(WAITER, Ordering::AcqRel);
        let mut got = None;
        let timeout_ns = deadline_ns.map(|d| d.saturating_sub(now));
        slot.waiter.park_timeout(
            waiter.park,
            || {
                got = poll(ends);
                got.is_some() || !queue.is_driven()
            },
            timeout_ns,
        );
        slot.wants_drive.store(false, Ordering::Relaxed);
        queue.drive.fetch_sub(WAITER, Ordering::AcqRel);
        if let Some(v) = got {
            return Ok(v);
        }
    }
}

/// The drive token, held by the calling thread ([`ProxyQueue::try_drive`]): tick the queue;
/// dropping it releases the token and wakes the slot owners waiting for it.
pub struct Driver<'q> {
    queue: &'q ProxyQueue,
    /// `true` when it was taken with [`ProxyQueue::try_drive_as`] (the holder's tag is set).
    tagged: bool,
}

impl core::fmt::Debug for Driver<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Driver").field("queue", self.queue).finish()
    }
}

impl Driver<'_> {
    /// One tick of the driver loop (see [`Worker::tick`]).
    pub fn tick(&mut self) -> Tick {
        let q = self.queue;
        // SAFETY: this guard holds the drive token.
        unsafe { q.with_driver(|ds| ds.tick(q)) }
    }

    /// Number of active tasks over all slots.
    pub fn active_count(&self) -> usize {
        let q = self.queue;
        // SAFETY: this guard holds the drive token.
        unsafe { q.with_driver(|ds| ds.active_count()) }
    }

    /// Writes the queue's state dump to the log (see [`Worker::dump`]).
    pub fn dump(&mut self) {
        let q = self.queue;
        // SAFETY: this guard holds the drive token.
        unsafe { q.with_driver(|ds| ds.dump_to_log(q, DumpReason::Request, &[])) }
    }

    /// Writes the queue's state dump to `out` (see [`Worker::dump_to`]).
    ///
    /// # Errors
    /// Whatever `out` returns.
    pub fn dump_to(&mut self, out: &mut dyn core::fmt::Write) -> core::fmt::Result {
        let q = self.queue;
        // SAFETY: this guard holds the drive token.
        unsafe { q.with_driver(|ds| ds.write_dump(q, DumpReason::Request, &[], out)) }
    }

    /// Serves the pending dump requests, if any, without ticking.
    fn serve_dump(&mut self) {
        let q = self.queue;
        // SAFETY: this guard holds the drive token.
        unsafe { q.with_driver(|ds| ds.serve_dump(q)) }
    }
}

impl Drop for Driver<'_> {
    fn drop(&mut self) {
        if self.tagged {
            // Before the release: the next holder may store its own tag.
            self.queue.holder.store(0, DiagOrdering::Relaxed);
        }
        self.queue.release_token();
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

impl Worker {
    /// The queue this worker drives.
    pub fn queue(&self) -> &Arc<ProxyQueue> {
        &self.queue
    }

    /// `true` once the queue's stop was requested: leave the loop.
    pub fn stop_requested(&self) -> bool {
        self.queue.stop_requested()
    }

    /// Number of active tasks over all slots.
    pub fn active_count(&self) -> usize {
        // SAFETY: the worker holds the drive token for its life.
        unsafe { self.queue.with_driver(|ds| ds.active_count()) }
    }

    /// One tick of the driver loop: drain every submission ring into the active lists, step
    /// every active task once (network tasks of one comm in submission order, a later one held
    /// in INIT while an earlier one is not DONE), remove DONE tasks and push their final record
    /// to the slot's status ring (waking the slot's owner), close the tasks of leaving slots.
    ///
    /// Seed: one iteration of `enc_proxy_queue::process` (drain → step → recycle), §2.
    pub fn tick(&mut self) -> Tick {
        let q = &*self.queue;
        // SAFETY: the worker holds the drive token for its life.
        unsafe { q.with_driver(|ds| ds.tick(q)) }
    }

    /// Parks the worker until a submission, a join, a leave or a stop wakes it; re-checks every
    /// submission ring and slot state after marking itself parked (so nothing that arrived
    /// since the last tick is slept through).
    ///
    /// Seed: `cv.wait(mtx)` in `enc_proxy_queue::process`, §2.
    pub fn park(&mut self, park: &dyn Park) {
        let q = &*self.queue;
        // SAFETY: the worker holds the drive token for its life.
        unsafe { q.with_driver(|ds| ds.park(q, park)) }
    }

    /// Writes the queue's state dump to the log (error level, target
    /// [`crate::base::dump_lines::DUMP_TARGET`]; `reason=request`): see [`Worker::dump_to`].
    pub fn dump(&mut self) {
        let q = &*self.queue;
        // SAFETY: the worker holds the drive token for its life.
        unsafe { q.with_driver(|ds| ds.dump_to_log(q, DumpReason::Request, &[])) }
    }

    /// Writes the queue's state dump to `out` (docs/design.md §6; format in `driver::dump`):
    /// the header (queue, group, mode, driver activity, token, dump counts, slots), per used
    /// slot its state and ring fill levels, per active task its kind, run state, status, wait
    /// and schedule position, its streams and, for a network task with a comm dump, its comm's
    /// streams (current / pending block) and ops (peer, entries posted / completed / credited,
    /// requests outstanding); last `end lines=N`.
    ///
    /// # Errors
    /// Whatever `out` returns.
    pub fn dump_to(&mut self, out: &mut dyn core::fmt::Write) -> core::fmt::Result {
        let q = &*self.queue;
        // SAFETY: the worker holds the drive token for its life.
        unsafe { q.with_driver(|ds| ds.write_dump(q, DumpReason::Request, &[], out)) }
    }

    /// Says that the worker's loop is between ticks with nothing moving: spinning (`true`) or
    /// yielding (`false`), for the dump's `driver=` field.
    pub fn note_idle(&self, spinning: bool) {
        self.queue.activity.set(if spinning {
            DriverActivity::Spinning
        } else {
            DriverActivity::Yielding
        });
    }
}

impl Drop for Worker {
    /// The worker's thread is ending (after a stop request, or unwinding): close every task it
    /// still holds (NRT_CLOSED, records pushed), confirm leaving slots, mark the queue exited
    /// and wake every slot owner, so no leave waits for a worker that is gone.
    fn drop(&mut self) {
        let q = &*self.queue;
        // SAFETY: the worker holds the drive token for its life (it is never released: a
        // thread-mode queue has no other driver).
        unsafe { q.with_driver(|ds| ds.exit(q)) }
    }
}

impl DriverState {
    fn active_count(&self) -> usize {
        self.slots.iter().map(|s| s.active.len()).sum()
    }

    fn tick(&mut self, queue: &ProxyQueue) -> Tick {
        let now_ns = self.clock.now_ns();
        self.woke_from = queue.activity.get();
        queue.activity.set(DriverActivity::Ticking);
        let mut drained = false;
        let hw = (queue.high_water.load(Ordering::Acquire) as usize).min(self.slots.len());
        // The safe point: invalidations first, before any task of this tick is stepped (so
        // before any further post of their comms) and before a leaving slot's teardown.
        let mut progressed = serve_invalidations(queue, hw);
        for (index, ws) in self.slots[..hw].iter_mut().enumerate() {
            let slot = &queue.slots[index];
            match SlotState::from_u32(slot.state.load(Ordering::Acquire)) {
                SlotState::Free | SlotState::Closed => {}
                SlotState::Active => {
                    while let Some(t) = ws.submit.pop() {
                        ws.active.push_back(t);
                        drained = true;
                    }
                }
                state @ (SlotState::Closing | SlotState::Abandoned) => {
                    close_slot(index, slot, ws, state, false);
                    progressed = true;
                }
            }
        }
        // A requested dump, after the drain (so it shows what was submitted before the
        // request) and before the steps.
        self.serve_dump_at(queue, now_ns);
        // A task about to time out: dump the queue while the task is still live (its streams
        // and ops as they are stuck), once per tick.
        let timeout_dumped = self.slots[..hw]
            .iter()
            .any(|ws| ws.active.iter().any(|t| t.task.core().timeout_due(now_ns)));
        if timeout_dumped {
            self.dump_to_log_at(queue, DumpReason::Timeout, now_ns);
        }
        self.busy_comms.clear();
        self.ended.clear();
        let mut any_active = false;
        for (index, ws) in self.slots[..hw].iter_mut().enumerate() {
            if ws.active.is_empty() {
                continue;
            }
            any_active = true;
            let mut pushed = false;
            let busy = &mut self.busy_comms;
            let ended = &mut self.ended;
            let status = &mut ws.status;
            let returned = &mut ws.returned;
            let mut k = 0;
            while k < ws.active.len() {
                let t = &mut ws.active[k].task;
                let key = t.comm_key();
                let may_begin = key.is_none_or(|k| !busy.contains(&k));
                match t.step(&StepEnv { now_ns, may_begin }) {
                    Step::Done => {
                        let sub = ws.active.remove(k).expect("k < len");
                        let record = sub.task.record();
                        if !matches!(record.status(), NrtStatus::Success | NrtStatus::Closed) {
                            ended.push(Ended {
                                slot: index,
                                kind: sub.task.kind(),
                                record,
                            });
                        }
                        finish(index, status, returned, sub);
                        pushed = true;
                        progressed = true;
                    }
                    s => {
                        progressed |= s == Step::Progressed;
                        if let Some(c) = key {
                            busy.push(c);
                        }
                        k += 1;
                    }
                }
            }
            if pushed {
                queue.slots[index].waiter.notify();
            }
        }
        if !self.ended.is_empty() {
            let failed = self
                .ended
                .iter()
                .any(|e| e.record.status() != NrtStatus::Timeout);
            // A timeout was dumped before its task ended; a failure (or a timeout the check
            // above did not foresee) is dumped now, with the ended tasks' lines.
            if failed || !timeout_dumped {
                let reason = if failed {
                    DumpReason::Failure
                } else {
                    DumpReason::Timeout
                };
                let ended = core::mem::take(&mut self.ended);
                self.dump_to_log_at_with(queue, reason, now_ns, &ended);
                self.ended = ended;
            }
        }
        if !any_active && !drained && !progressed {
            Tick::Park
        } else if progressed || drained {
            Tick::Continue
        } else {
            Tick::NoProgress
        }
    }

    fn park(&mut self, queue: &ProxyQueue, park: &dyn Park) {
        let slots = &mut self.slots;
        let served = self.dump_served;
        queue.activity.set(DriverActivity::Parked);
        queue.worker_wait.park(park, || {
            queue.stop_requested()
                || queue.dump.pending_since(served)
                || queue
                    .slots
                    .iter()
                    .any(|s| s.inval.state() == InvalState::Posted)
                || slots.iter_mut().enumerate().any(|(i, ws)| {
                    match SlotState::from_u32(queue.slots[i].state.load(Ordering::Acquire)) {
                        SlotState::Active => !ws.submit.is_empty(),
                        SlotState::Closing | SlotState::Abandoned => true,
                        SlotState::Free | SlotState::Closed => false,
                    }
                })
        });
    }

    /// Serves the pending dump requests by a requester that took a caller-mode queue's free
    /// drive token (no tick), with the clock read now.
    fn serve_dump(&mut self, queue: &ProxyQueue) {
        let now_ns = self.clock.now_ns();
        self.woke_from = queue.activity.get();
        self.by_requester = true;
        self.serve_dump_at(queue, now_ns);
        self.by_requester = false;
    }

    fn serve_dump_at(&mut self, queue: &ProxyQueue, now_ns: u64) {
        // One load while nobody asks (the request word's line stays shared).
        let mut served = self.dump_served;
        queue.dump.serve(&mut served, || {
            self.dump_to_log_at(queue, DumpReason::Request, now_ns)
        });
        self.dump_served = served;
    }

    fn dump_to_log(&mut self, queue: &ProxyQueue, reason: DumpReason, ended: &[Ended]) {
        let now_ns = self.clock.now_ns();
        self.dump_to_log_at_with(queue, reason, now_ns, ended);
    }

    fn dump_to_log_at(&mut self, queue: &ProxyQueue, reason: DumpReason, now_ns: u64) {
        self.dump_to_log_at_with(queue, reason, now_ns, &[]);
    }

    fn dump_to_log_at_with(
        &mut self,
        queue: &ProxyQueue,
        reason: DumpReason,
        now_ns: u64,
        ended: &[Ended],
    ) {
        let mut log = LogLines::new();
        let _ = self.write_dump_at(queue, reason, now_ns, ended, &mut log);
        log.finish();
    }

    fn write_dump(
        &mut self,
        queue: &ProxyQueue,
        reason: DumpReason,
        ended: &[Ended],
        out: &mut dyn core::fmt::Write,
    ) -> core::fmt::Result {
        let now_ns = self.clock.now_ns();
        self.write_dump_at(queue, reason, now_ns, ended, out)
    }

    /// The whole dump (see [`Worker::dump_to`]), by the driving thread.
    fn write_dump_at(
        &mut self,
        queue: &ProxyQueue,
        reason: DumpReason,
        now_ns: u64,
        ended: &[Ended],
        out: &mut dyn core::fmt::Write,
    ) -> core::fmt::Result {
        let id = queue.id;
        let mut out = Counting { out, lines: 0 };
        queue.write_header(reason, &mut out)?;
        writeln!(
            out,
            " before={} writer={} active={}",
            self.woke_from.name(),
            if self.by_requester {
                "requester"
            } else {
                "driver"
            },
            self.active_count()
        )?;
        let mut prefix = alloc::string::String::new();
        for (index, ws) in self.slots.iter_mut().enumerate() {
            let slot = &queue.slots[index];
            let state = SlotState::from_u32(slot.state.load(Ordering::Acquire));
            if state == SlotState::Free && ws.active.is_empty() {
                continue;
            }
            let status_cap = ws.status.capacity();
            writeln!(
                out,
                "{DUMP_PREFIX} queue={id} slot={index} state={state:?} submit={}/{} status={}/{} \
                 active={} wants_drive={}",
                ws.submit.len(),
                ws.submit.capacity(),
                status_cap - ws.status.free_slots(),
                status_cap,
                ws.active.len(),
                u8::from(slot.wants_drive.load(Ordering::Relaxed)),
            )?;
            for t in &ws.active {
                prefix.clear();
                let rec = t.task.record();
                let _ = write!(
                    prefix,
                    "{DUMP_PREFIX} queue={id} slot={index} task={}",
                    rec.task_id
                );
                t.task.dump(now_ns, &mut Prefixed::new(&mut out, &prefix))?;
            }
        }
        for e in ended {
            writeln!(
                out,
                "{DUMP_PREFIX} queue={id} slot={} task={} ended=1 kind={} status={} comm={}",
                e.slot,
                e.record.task_id,
                match e.kind {
                    crate::driver::task::TaskKind::Network => "network",
                    crate::driver::task::TaskKind::Barrier => "barrier",
                },
                e.record.status().as_str(),
                e.record.comm_id
            )?;
        }
        let lines = out.lines + 1;
        writeln!(out, "{DUMP_PREFIX} queue={id} end lines={lines}")
    }

    fn exit(&mut self, queue: &ProxyQueue) {
        // Requests posted before the exit are answered (later ones see the worker gone and
        // apply themselves).
        serve_invalidations(queue, queue.slots.len());
        for (index, ws) in self.slots.iter_mut().enumerate() {
            let slot = &queue.slots[index];
            let state = SlotState::from_u32(slot.state.load(Ordering::Acquire));
            match state {
                SlotState::Free | SlotState::Closed => {}
                SlotState::Active => {
                    while let Some(t) = ws.submit.pop() {
                        ws.active.push_back(t);
                    }
                    if !ws.active.is_empty() {
                        log::warn!("slot {index}: worker exiting with active tasks; closing them");
                    }
                    while let Some(mut sub) = ws.active.pop_front() {
                        sub.task.close(NrtStatus::Closed);
                        finish(index, &mut ws.status, &mut ws.returned, sub);
                    }
                }
                SlotState::Closing | SlotState::Abandoned => {
                    close_slot(index, slot, ws, state, true)
                }
            }
        }
        queue.activity.set(DriverActivity::Exited);
        // Release: the records pushed above are visible to an owner that acquires `exited`.
        queue.exited.store(true, Ordering::Release);
        for slot in queue.slots.iter() {
            slot.waiter.notify();
        }
    }
}

/// Applies every POSTED invalidation request of the slots below `hw` and wakes their owners
/// (`driver::inval`); `true` when it applied one. Called by the drive token's holder only, at a
/// safe point (inside no comm). One load per slot while nothing is asked.
fn serve_invalidations(queue: &ProxyQueue, hw: usize) -> bool {
    let mut any = false;
    for (index, slot) in queue.slots[..hw].iter().enumerate() {
        // SAFETY: the caller holds the drive token at a safe point (this function's contract):
        // no other thread steps the queue's tasks, so none is inside the request's comm.
        if unsafe { slot.inval.serve(index) } {
            slot.waiter.notify();
            any = true;
        }
    }
    any
}

/// A DONE task leaves the driver: its box goes back to the owner if it was submitted with
/// `keep` (else it is dropped here), then its final record is pushed. Box first: an owner that
/// has popped the record finds the box already in the return ring.
fn finish(
    index: usize,
    status: &mut Producer<TaskRecord>,
    returned: &mut Producer<TaskBox>,
    sub: Submitted,
) {
    let rec = sub.task.record();
    if sub.keep {
        if returned.push(sub.task).is_err() {
            log::error!("slot {index}: return ring full, a task box dropped (admission bug)");
            debug_assert!(false, "return ring full");
        }
    } else {
        drop(sub.task);
    }
    push_record(index, status, rec);
}

/// Pushes a final record; there is always room (admission limit), so a failure is a bug that
/// is logged, never a lost wakeup.
fn push_record(index: usize, status: &mut Producer<TaskRecord>, rec: TaskRecord) {
    if status.push(rec).is_err() {
        log::error!("slot {index}: status ring full, record {rec:?} lost (admission bug)");
        debug_assert!(false, "status ring full");
    }
}

/// Edges 3 and 5: end every queued and active task of a leaving slot with NRT_CLOSED.
///
/// On the tick (`sync == false`) this never blocks: each task gets
/// [`ProxyTask::begin_close`] in submission order; a network task whose streams still have
/// cancelled requests pending stays active in CLOSING (the tick's step loop makes one bounded
/// teardown step of it per tick, docs/design.md §3) and the tasks behind it wait (they are
/// closed at the tick that finds it DONE, so records keep submission order); the slot takes
/// its edge only at the tick that finds its active list empty. The other comms of the group
/// keep being stepped meanwhile. At the
/// worker's exit (`sync`), which steps nothing afterwards, every task is closed synchronously
/// ([`ProxyTask::close`], the blocking stop, one drain limit per comm at most).
fn close_slot(index: usize, slot: &SharedSlot, ws: &mut WorkerSlot, state: SlotState, sync: bool) {
    // The owner's pushes happened before its release edge (acquired by our load).
    while let Some(t) = ws.submit.pop() {
        ws.active.push_back(t);
    }
    // In submission order, up to the first task that stays CLOSING: the tasks behind it are
    // closed at a later tick, so the records still come in submission order.
    while let Some(front) = ws.active.front_mut() {
        let step = if sync {
            front.task.close(NrtStatus::Closed);
            Step::Done
        } else {
            front.task.begin_close(NrtStatus::Closed)
        };
        if step != Step::Done {
            // Still CLOSING: the slot's edge waits for a later tick.
            return;
        }
        if let Some(sub) = ws.active.pop_front() {
            finish(index, &mut ws.status, &mut ws.returned, sub);
        }
    }
    match state {
        SlotState::Closing => {
            let moved = slot_transition(slot, index, SlotEdge::WorkerClosed);
            debug_assert!(moved);
            slot.waiter.notify();
        }
        _ => {
            // ABANDONED: the owner is gone and the ends are ours; drop the records and boxes
            // nobody will read, then free the slot.
            slot.owner.with_mut(|p| {
                // SAFETY: the slot is ABANDONED: the worker owns `owner` until its edge to FREE.
                if let Some(ends) = unsafe { (*p).as_mut() } {
                    while ends.status.pop().is_some() {}
                    while ends.returned.pop().is_some() {}
                    ends.early.clear();
                }
            });
            let moved = slot_transition(slot, index, SlotEdge::WorkerFreed);
            debug_assert!(moved);
        }
    }
}

#[cfg(all(test, not(loom)))]
#[path = "queue_tests.rs"]
mod tests;
