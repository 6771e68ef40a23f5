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
//!    ▲                        │                     │                                       │
//!    │                        │                     └─(7) leave, the worker gone ─► FREE     │
//!    │                        └─(4) handle dropped without leave──► ABANDONED               │
//!    ├──────────(5) worker closes its tasks, drops its records────────┘                     │
//!    └──────────────────────────(6) leave collects the last records ◄──────────────────────┘
//! ```
//! Edge 1 is taken by [`ProxyQueue::join`], 2, 6 and 7 by [`SlotHandle::leave`], 4 by
//! `SlotHandle::drop`, 3 and 5 by [`Worker::tick`]; all through `slot_transition`, which logs
//! `state=A=>B`. Ownership of the slot's owner-side ring ends (kept in the slot between owners)
//! follows the state: the joiner owns them from ACTIVE until it stores FREE or ABANDONED; the
//! worker owns them in ABANDONED. Every edge is a release (or AcqRel) RMW/store and every read of
//! the state an acquire load, so the ring ends and the rings' contents change hands cleanly.
//!
//! Seed: `enc_proxy_queue` (296 B: `queue` deque +0x000, `active_tasks` map +0x050,
//! `state_queue` +0x0d8, `stop` +0x120) and `enc_proxy_queue::process` (nrt:0x1cf7c0), §2.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::driver::record::TaskRecord;
use crate::driver::ring::{self, Consumer, Producer};
use crate::driver::task::{ProxyTask, Step, StepEnv};
use crate::driver::wake::{Park, WaitCell, Waiter};
use crate::status::NrtStatus;
use crate::sync::{Arc, AtomicBool, AtomicU32, CachePadded, Ordering, UnsafeCell};
use crate::time::Clock;

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
    submit: Producer<TaskBox>,
    status: Consumer<TaskRecord>,
}

struct SharedSlot {
    /// A [`SlotState`].
    state: AtomicU32,
    /// The owner-side ends while no handle holds them (FREE, CLOSED-after-leave, ABANDONED).
    /// Accessed only by the party the state says owns them (module docs).
    owner: UnsafeCell<Option<OwnerEnds>>,
    /// The owner waits here for records and for CLOSED; the worker notifies.
    waiter: WaitCell,
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
    /// Set by [`ProxyQueue::request_dump`]; the worker dumps and clears it.
    dump: AtomicBool,
    /// Set when the [`Worker`] is dropped (its thread ended): nothing steps tasks any more.
    exited: AtomicBool,
    status_capacity: usize,
}

// SAFETY: the only non-Sync field is each slot's `owner` cell, accessed by one party at a time
// as the slot's state word says (module docs); everything else is atomic.
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
    /// A queue with `cfg`'s sizes, and its worker (to be run on one thread: tick, then park /
    /// spin / yield as [`Tick`] says). `clock` is read once per tick for the tasks' timeouts.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] from [`QueueConfig::validate`].
    pub fn new(cfg: QueueConfig, clock: Box<dyn Clock>) -> Result<(Arc<Self>, Worker), NrtStatus> {
        cfg.validate()?;
        let mut shared = Vec::with_capacity(cfg.slots);
        let mut worker_slots = Vec::with_capacity(cfg.slots);
        for _ in 0..cfg.slots {
            let (stx, srx) = ring::channel::<TaskBox>(cfg.submit_capacity);
            let (rtx, rrx) = ring::channel::<TaskRecord>(cfg.status_capacity);
            shared.push(CachePadded::new(SharedSlot {
                state: AtomicU32::new(SlotState::Free as u32),
                owner: UnsafeCell::new(Some(OwnerEnds {
                    submit: stx,
                    status: rrx,
                })),
                waiter: WaitCell::new(),
            }));
            worker_slots.push(WorkerSlot {
                submit: srx,
                status: rtx,
                active: VecDeque::new(),
            });
        }
        let queue = Arc::new(Self {
            slots: shared.into_boxed_slice(),
            worker_wait: WaitCell::new(),
            stop: AtomicBool::new(false),
            dump: AtomicBool::new(false),
            exited: AtomicBool::new(false),
            status_capacity: cfg.status_capacity,
        });
        let worker = Worker {
            queue: queue.clone(),
            slots: worker_slots,
            clock,
            busy_comms: Vec::new(),
        };
        Ok((queue, worker))
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
            // A FREE slot's rings are empty (leave drained them); make sure of the status ring.
            while ends.status.pop().is_some() {}
            this.worker_wait.notify();
            return Ok(SlotHandle {
                queue: queue.clone(),
                index: index as u32,
                ends: Some(ends),
                outstanding: 0,
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

    /// Asks the worker to write its state (every slot, ring and task) to the log at its next
    /// tick, and wakes it.
    pub fn request_dump(&self) {
        self.dump.store(true, Ordering::Release);
        self.worker_wait.notify();
    }
}

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
    /// the queue's worker is gone.
    pub fn submit(&mut self, mut task: TaskBox) -> Result<(), Rejected> {
        let full = self.outstanding >= self.queue.status_capacity;
        let gone = self.queue.worker_exited();
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
        if let Err(task) = ends.submit.push(task) {
            return Err(Rejected {
                status: NrtStatus::QueueFull,
                task,
            });
        }
        self.outstanding += 1;
        self.queue.worker_wait.notify();
        Ok(())
    }

    /// Pops the next final record, if one is ready.
    pub fn try_pop_record(&mut self) -> Option<TaskRecord> {
        let r = self.ends.as_mut()?.status.pop()?;
        self.outstanding -= 1;
        Some(r)
    }

    /// Waits for the next final record: spins for the waiter's budget, then parks until the
    /// worker pushes one. `None` at once when no task is outstanding (nothing would come).
    pub fn wait_record(&mut self, waiter: &Waiter<'_>) -> Option<TaskRecord> {
        if self.outstanding == 0 {
            return None;
        }
        let slot = &self.queue.slots[self.index as usize];
        let ends = self.ends.as_mut()?;
        let r = waiter.wait_on(&slot.waiter, || ends.status.pop());
        self.outstanding -= 1;
        Some(r)
    }

    /// Leaves the queue: the slot goes CLOSING, the worker ends every queued and active task of
    /// the slot DONE with [`NrtStatus::Closed`] (network tasks that filed blocks call `stop`
    /// first) and pushes their records, then confirms (CLOSED); the handle collects every
    /// record not yet popped and frees the slot. Returns those records, in push order.
    ///
    /// Waits (spin, then park) for the worker. If the worker is gone (its [`Worker`] was
    /// dropped, which closes and reports every task it held), leave does not wait for it.
    pub fn leave(mut self, waiter: &Waiter<'_>) -> Vec<TaskRecord> {
        let mut out = Vec::new();
        let index = self.index as usize;
        let queue = self.queue.clone();
        let slot = &queue.slots[index];
        let Some(mut ends) = self.ends.take() else {
            return out;
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
            return out;
        });
        let moved = slot_transition(slot, index, SlotEdge::Leave);
        debug_assert!(moved, "leave on a slot that is not ACTIVE");
        queue.worker_wait.notify();
        waiter.wait_on(&slot.waiter, || {
            while let Some(r) = ends.status.pop() {
                out.push(r);
            }
            let closed = slot.state.load(Ordering::Acquire) == SlotState::Closed as u32;
            (closed || queue.worker_exited()).then_some(())
        });
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
        // SAFETY: the slot is CLOSED (or CLOSING with the worker gone) and we are its owner:
        // nobody else touches `owner` until our release edge to FREE.
        slot.owner.with_mut(|p| unsafe { *p = Some(ends) });
        if !slot_transition(slot, index, SlotEdge::Collected) {
            let freed = slot_transition(slot, index, SlotEdge::CollectedWorkerGone);
            debug_assert!(freed, "leave: slot neither CLOSED nor CLOSING");
        }
        out
    }
}

impl Drop for SlotHandle {
    fn drop(&mut self) {
        let Some(ends) = self.ends.take() else {
            return;
        };
        let index = self.index as usize;
        let slot = &self.queue.slots[index];
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

/// The worker side of one slot.
struct WorkerSlot {
    submit: Consumer<TaskBox>,
    status: Producer<TaskRecord>,
    /// Active tasks in submission order (seed: `active_tasks[rank]`, keyed by slot here).
    active: VecDeque<TaskBox>,
}

/// The worker of a queue: owns the worker-side ring ends and the active lists. Run it on one
/// thread: `loop { match tick() { Park => park(), NoProgress => spin/yield, Continue => {} } }`
/// until [`Worker::stop_requested`].
///
/// Seed: `enc_proxy_queue::process` (nrt:0x1cf7c0), §2.
pub struct Worker {
    queue: Arc<ProxyQueue>,
    slots: Vec<WorkerSlot>,
    clock: Box<dyn Clock>,
    /// Scratch for one tick: comms with a network task not DONE seen so far.
    busy_comms: Vec<usize>,
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
        self.slots.iter().map(|s| s.active.len()).sum()
    }

    /// One tick of the driver loop: drain every submission ring into the active lists, step
    /// every active task once (network tasks of one comm in submission order, a later one held
    /// in INIT while an earlier one is not DONE), remove DONE tasks and push their final record
    /// to the slot's status ring (waking the slot's owner), close the tasks of leaving slots.
    ///
    /// Seed: one iteration of `enc_proxy_queue::process` (drain → step → recycle), §2.
    pub fn tick(&mut self) -> Tick {
        let now_ns = self.clock.now_ns();
        let queue = self.queue.clone();
        if queue.dump.swap(false, Ordering::AcqRel) {
            self.dump();
        }
        let mut drained = false;
        let mut progressed = false;
        let mut timed_out = false;
        for (index, ws) in self.slots.iter_mut().enumerate() {
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
                    close_slot(index, slot, ws, state);
                    progressed = true;
                }
            }
        }
        self.busy_comms.clear();
        let mut any_active = false;
        for (index, ws) in self.slots.iter_mut().enumerate() {
            if ws.active.is_empty() {
                continue;
            }
            any_active = true;
            let mut pushed = false;
            let busy = &mut self.busy_comms;
            let status = &mut ws.status;
            ws.active.retain_mut(|t| {
                let key = t.comm_key();
                let may_begin = key.is_none_or(|k| !busy.contains(&k));
                match t.step(&StepEnv { now_ns, may_begin }) {
                    Step::Done => {
                        let rec = t.record();
                        timed_out |= rec.status() == NrtStatus::Timeout;
                        push_record(index, status, rec);
                        pushed = true;
                        progressed = true;
                        false
                    }
                    s => {
                        progressed |= s == Step::Progressed;
                        if let Some(k) = key {
                            busy.push(k);
                        }
                        true
                    }
                }
            });
            if pushed {
                queue.slots[index].waiter.notify();
            }
        }
        if timed_out {
            self.dump();
        }
        if !any_active && !drained && !progressed {
            Tick::Park
        } else if progressed || drained {
            Tick::Continue
        } else {
            Tick::NoProgress
        }
    }

    /// Parks the worker until a submission, a join, a leave or a stop wakes it; re-checks every
    /// submission ring and slot state after marking itself parked (so nothing that arrived
    /// since the last tick is slept through).
    ///
    /// Seed: `cv.wait(mtx)` in `enc_proxy_queue::process`, §2.
    pub fn park(&mut self, park: &dyn Park) {
        let queue = self.queue.clone();
        let slots = &mut self.slots;
        queue.worker_wait.park(park, || {
            queue.stop_requested()
                || queue.dump.load(Ordering::Acquire)
                || slots.iter_mut().enumerate().any(|(i, ws)| {
                    match SlotState::from_u32(queue.slots[i].state.load(Ordering::Acquire)) {
                        SlotState::Active => !ws.submit.is_empty(),
                        SlotState::Closing | SlotState::Abandoned => true,
                        SlotState::Free | SlotState::Closed => false,
                    }
                })
        });
    }

    /// Writes the queue's state to the log (error level): every non-free slot with its ring
    /// fill levels and every active task's record.
    pub fn dump(&mut self) {
        log::error!(
            "proxy queue dump: {} slots, {} active tasks",
            self.slots.len(),
            self.active_count()
        );
        for (index, ws) in self.slots.iter_mut().enumerate() {
            let state = SlotState::from_u32(self.queue.slots[index].state.load(Ordering::Acquire));
            if state == SlotState::Free && ws.active.is_empty() {
                continue;
            }
            log::error!(
                "  slot {index}: {state:?}, submitted-not-drained {}, status free {}, active {}",
                ws.submit.len(),
                ws.status.free_slots(),
                ws.active.len()
            );
            for t in &ws.active {
                log::error!("    {:?} {:?}", t.kind(), t.record());
            }
        }
    }
}

impl Drop for Worker {
    /// The worker's thread is ending (after a stop request, or unwinding): close every task it
    /// still holds (NRT_CLOSED, records pushed), confirm leaving slots, mark the queue exited
    /// and wake every slot owner, so no leave waits for a worker that is gone.
    fn drop(&mut self) {
        let queue = self.queue.clone();
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
                    for mut t in ws.active.drain(..) {
                        t.close(NrtStatus::Closed);
                        push_record(index, &mut ws.status, t.record());
                    }
                }
                SlotState::Closing | SlotState::Abandoned => close_slot(index, slot, ws, state),
            }
        }
        // Release: the records pushed above are visible to an owner that acquires `exited`.
        queue.exited.store(true, Ordering::Release);
        for slot in queue.slots.iter() {
            slot.waiter.notify();
        }
    }
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
fn close_slot(index: usize, slot: &SharedSlot, ws: &mut WorkerSlot, state: SlotState) {
    // The owner's pushes happened before its release edge (acquired by our load).
    while let Some(t) = ws.submit.pop() {
        ws.active.push_back(t);
    }
    for mut t in ws.active.drain(..) {
        t.close(NrtStatus::Closed);
        push_record(index, &mut ws.status, t.record());
    }
    match state {
        SlotState::Closing => {
            let moved = slot_transition(slot, index, SlotEdge::WorkerClosed);
            debug_assert!(moved);
            slot.waiter.notify();
        }
        _ => {
            // ABANDONED: the owner is gone and the ends are ours; drop the records nobody will
            // read, then free the slot.
            slot.owner.with_mut(|p| {
                // SAFETY: the slot is ABANDONED: the worker owns `owner` until its edge to FREE.
                if let Some(ends) = unsafe { (*p).as_mut() } {
                    while ends.status.pop().is_some() {}
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
