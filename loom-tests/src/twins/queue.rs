//! Twin of `proxy_core::driver::queue` (with the `WaitCell` and `Waiter::wait_on` of
//! `proxy_core::driver::wake` it runs on): a copy of the shipping code in which the const parameter
//! `BUG` plants exactly one of the bugs in [`bug`] (and [`bug::NONE`] plants none: that
//! instantiation must pass every model, which shows the copy is faithful and that a twin's
//! failure comes from its planted bug).
//!
//! Kept in step with the shipping code by hand: the logic is a verbatim copy except for the
//! lines marked `PLANTED BUG`; docs are shortened, the dump's body is left out (the dump flag
//! and its atomic accesses are kept), and `Rejected`, `Tick`, `QueueConfig`, `SlotState`,
//! `TaskBox` and the task trait are the shipping ones.
#![allow(missing_docs, dead_code, clippy::all)]

use std::boxed::Box;
use std::collections::VecDeque;
use std::vec::Vec;

use proxy_core::driver::queue::{QueueConfig, Rejected, SlotState, TaskBox, Tick};
use proxy_core::driver::record::TaskRecord;
use proxy_core::driver::ring::{self, Consumer, Producer};
use proxy_core::driver::task::{Step, StepEnv};
use proxy_core::driver::wake::{Park, Unpark, Waiter};
use proxy_core::status::NrtStatus;
use proxy_core::sync::{spin_loop, Arc, AtomicBool, AtomicU32, CachePadded, Ordering, UnsafeCell};
use proxy_core::time::{Clock, NoClock};

use crate::harness::driver::{Driver, WakeWord};

/// The bugs a [`TwinDriver`] can plant, one per instantiation.
pub mod bug {
    /// No bug: the copy as it ships.
    pub const NONE: u8 = 0;
    /// `WaitCell::notify` reads the wake word with a plain load and returns when it is EMPTY
    /// ("nobody is parked, skip the RMW") — the classic lost-wakeup trap: the waiter's
    /// EMPTY → PARKED and its re-check can both miss the notifier's change.
    pub const NOTIFY_SKIPS_WHEN_EMPTY: u8 = 1;
    /// `WaitCell::park` marks itself PARKED with a load and a plain store instead of a CAS: a
    /// NOTIFIED that lands between them is overwritten and lost.
    pub const PARK_BY_PLAIN_STORE: u8 = 2;
    /// `SlotHandle::leave` frees the slot directly (ACTIVE → FREE) without the closing
    /// handshake (ACTIVE → CLOSING, the worker closes the slot's tasks and confirms CLOSED).
    pub const LEAVE_WITHOUT_HANDSHAKE: u8 = 3;
    /// `ProxyQueue::join` claims a slot with a load and a store instead of a CAS.
    pub const CLAIM_BY_LOAD_STORE: u8 = 4;
}

// ---- wake word (copy of proxy_core::driver::wake::WaitCell) ------------------------------------------

const EMPTY: u32 = 0;
const PARKED: u32 = 1;
const NOTIFYING: u32 = 2;
const NOTIFIED: u32 = 3;

pub struct WaitCell<const BUG: u8> {
    state: AtomicU32,
    unparker: UnsafeCell<Option<Box<dyn Unpark>>>,
}

// SAFETY: as the shipping WaitCell: `unparker` is written only by the one waiter while the word
// is EMPTY and read only by the one notifier that holds NOTIFYING (unless a planted bug breaks
// that, which is what the models are there to report).
unsafe impl<const BUG: u8> Send for WaitCell<BUG> {}
// SAFETY: as above.
unsafe impl<const BUG: u8> Sync for WaitCell<BUG> {}

impl<const BUG: u8> WaitCell<BUG> {
    pub fn new() -> Self {
        Self {
            state: AtomicU32::new(EMPTY),
            unparker: UnsafeCell::new(None),
        }
    }

    pub fn notify(&self) {
        let mut cur = self.state.load(Ordering::Relaxed);
        if BUG == bug::NOTIFY_SKIPS_WHEN_EMPTY && cur == EMPTY {
            return; // PLANTED BUG: "nobody is parked", decided on a plain load
        }
        loop {
            let next = match cur {
                PARKED => NOTIFYING,
                EMPTY => NOTIFIED,
                other => other,
            };
            match self
                .state
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        if cur != PARKED {
            return;
        }
        // SAFETY: as the shipping notify: we hold NOTIFYING.
        let u = self
            .unparker
            .with(|p| unsafe { (*p).as_ref().map(|u| u.clone_box()) });
        self.state.swap(NOTIFIED, Ordering::AcqRel);
        if let Some(u) = u {
            u.unpark();
        }
    }

    pub fn park(&self, park: &dyn Park, ready: impl FnOnce() -> bool) {
        if self.try_consume() {
            return;
        }
        let me = park.unparker();
        // SAFETY: as the shipping park: the word is EMPTY or NOTIFIED.
        self.unparker.with_mut(|p| unsafe { *p = Some(me) });
        let marked = if BUG == bug::PARK_BY_PLAIN_STORE {
            // PLANTED BUG: load, check, plain store: a NOTIFIED stored in between is lost.
            if self.state.load(Ordering::Acquire) == EMPTY {
                self.state.store(PARKED, Ordering::Release);
                true
            } else {
                false
            }
        } else {
            self.state
                .compare_exchange(EMPTY, PARKED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        };
        if !marked {
            let consumed = self.try_consume();
            debug_assert!(consumed);
            return;
        }
        if ready()
            && self
                .state
                .compare_exchange(PARKED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return;
        }
        while !self.try_consume() {
            park.park();
        }
    }

    fn try_consume(&self) -> bool {
        self.state
            .compare_exchange(NOTIFIED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }
}

/// Copy of `Waiter::wait_on` over the twin's wake word.
pub fn wait_on<T, const BUG: u8>(
    w: &Waiter<'_>,
    cell: &WaitCell<BUG>,
    mut poll: impl FnMut() -> Option<T>,
) -> T {
    if w.spin_ns > 0 {
        let start = w.clock.now_ns();
        let mut spins = 0u32;
        loop {
            if let Some(v) = poll() {
                return v;
            }
            spins += 1;
            if spins >= Waiter::MAX_SPINS
                || (spins.is_multiple_of(64) && w.clock.now_ns().saturating_sub(start) >= w.spin_ns)
            {
                break;
            }
            spin_loop();
        }
    }
    loop {
        if let Some(v) = poll() {
            return v;
        }
        let mut got = None;
        cell.park(w.park, || {
            got = poll();
            got.is_some()
        });
        if let Some(v) = got {
            return v;
        }
    }
}

// ---- the queue (copy of proxy_core::driver::queue) ---------------------------------------------------

fn state_of(v: u32) -> SlotState {
    match v {
        0 => SlotState::Free,
        1 => SlotState::Active,
        2 => SlotState::Closing,
        3 => SlotState::Closed,
        _ => SlotState::Abandoned,
    }
}

struct OwnerEnds {
    submit: Producer<TaskBox>,
    status: Consumer<TaskRecord>,
}

struct SharedSlot<const BUG: u8> {
    state: AtomicU32,
    owner: UnsafeCell<Option<OwnerEnds>>,
    waiter: WaitCell<BUG>,
}

fn slot_transition<const BUG: u8>(
    slot: &SharedSlot<BUG>,
    index: usize,
    from: SlotState,
    to: SlotState,
) -> bool {
    let ok = slot
        .state
        .compare_exchange(from as u32, to as u32, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok();
    if ok {
        log::trace!("slot={index} state={from:?}=>{to:?}");
    }
    ok
}

pub struct ProxyQueue<const BUG: u8> {
    slots: Box<[CachePadded<SharedSlot<BUG>>]>,
    worker_wait: WaitCell<BUG>,
    stop: AtomicBool,
    dump: AtomicBool,
    exited: AtomicBool,
    status_capacity: usize,
}

// SAFETY: as the shipping queue: the owner cells are accessed by one party at a time as the
// slot's state word says (unless a planted bug breaks that, which the models report).
unsafe impl<const BUG: u8> Sync for ProxyQueue<BUG> {}
// SAFETY: as above.
unsafe impl<const BUG: u8> Send for ProxyQueue<BUG> {}

impl<const BUG: u8> ProxyQueue<BUG> {
    pub fn new(
        cfg: QueueConfig,
        clock: Box<dyn Clock>,
    ) -> Result<(Arc<Self>, Worker<BUG>), NrtStatus> {
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

    pub fn slot_state(&self, index: usize) -> SlotState {
        state_of(self.slots[index].state.load(Ordering::Acquire))
    }

    pub fn join(queue: &Arc<Self>) -> Result<SlotHandle<BUG>, NrtStatus> {
        let this: &Self = queue;
        if this.stop_requested() {
            return Err(NrtStatus::Closed);
        }
        for (index, slot) in this.slots.iter().enumerate() {
            if slot.state.load(Ordering::Relaxed) != SlotState::Free as u32 {
                continue;
            }
            if BUG == bug::CLAIM_BY_LOAD_STORE {
                // PLANTED BUG: the claim is a load and a store, not a CAS.
                if slot.state.load(Ordering::Acquire) != SlotState::Free as u32 {
                    continue;
                }
                slot.state
                    .store(SlotState::Active as u32, Ordering::Release);
            } else if !slot_transition(slot, index, SlotState::Free, SlotState::Active) {
                continue;
            }
            // SAFETY: as the shipping join: our claim made us the slot's owner.
            let mut ends = slot
                .owner
                .with_mut(|p| unsafe { (*p).take() })
                .expect("a FREE slot holds its owner ends");
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

    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.worker_wait.notify();
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    pub fn worker_exited(&self) -> bool {
        self.exited.load(Ordering::Acquire)
    }
}

pub struct SlotHandle<const BUG: u8> {
    queue: Arc<ProxyQueue<BUG>>,
    index: u32,
    ends: Option<OwnerEnds>,
    outstanding: usize,
}

impl<const BUG: u8> SlotHandle<BUG> {
    pub fn slot(&self) -> u32 {
        self.index
    }

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

    pub fn try_pop_record(&mut self) -> Option<TaskRecord> {
        let r = self.ends.as_mut()?.status.pop()?;
        self.outstanding -= 1;
        Some(r)
    }

    pub fn wait_record(&mut self, waiter: &Waiter<'_>) -> Option<TaskRecord> {
        if self.outstanding == 0 {
            return None;
        }
        let slot = &self.queue.slots[self.index as usize];
        let ends = self.ends.as_mut()?;
        let r = wait_on(waiter, &slot.waiter, || ends.status.pop());
        self.outstanding -= 1;
        Some(r)
    }

    pub fn leave(mut self, waiter: &Waiter<'_>) -> Vec<TaskRecord> {
        let mut out = Vec::new();
        let index = self.index as usize;
        let queue = self.queue.clone();
        let slot = &queue.slots[index];
        let Some(mut ends) = self.ends.take() else {
            return out;
        };
        if BUG == bug::LEAVE_WITHOUT_HANDSHAKE {
            // PLANTED BUG: no ACTIVE → CLOSING → (worker) CLOSED handshake: collect what is
            // there, hand the ends back and free the slot at once.
            while let Some(r) = ends.status.pop() {
                out.push(r);
            }
            self.outstanding = 0;
            // SAFETY: (as the bug has it) we are the owner until our edge to FREE.
            slot.owner.with_mut(|p| unsafe { *p = Some(ends) });
            let freed = slot_transition(slot, index, SlotState::Active, SlotState::Free);
            debug_assert!(freed);
            queue.worker_wait.notify();
            return out;
        }
        let moved = slot_transition(slot, index, SlotState::Active, SlotState::Closing);
        debug_assert!(moved, "leave on a slot that is not ACTIVE");
        queue.worker_wait.notify();
        wait_on(waiter, &slot.waiter, || {
            while let Some(r) = ends.status.pop() {
                out.push(r);
            }
            let closed = slot.state.load(Ordering::Acquire) == SlotState::Closed as u32;
            (closed || queue.worker_exited()).then_some(())
        });
        while let Some(r) = ends.status.pop() {
            out.push(r);
        }
        self.outstanding = 0;
        // SAFETY: as the shipping leave: the slot is CLOSED (or CLOSING with the worker gone).
        slot.owner.with_mut(|p| unsafe { *p = Some(ends) });
        if !slot_transition(slot, index, SlotState::Closed, SlotState::Free) {
            let freed = slot_transition(slot, index, SlotState::Closing, SlotState::Free);
            debug_assert!(freed, "leave: slot neither CLOSED nor CLOSING");
        }
        out
    }
}

impl<const BUG: u8> Drop for SlotHandle<BUG> {
    fn drop(&mut self) {
        let Some(ends) = self.ends.take() else {
            return;
        };
        let index = self.index as usize;
        let slot = &self.queue.slots[index];
        // SAFETY: as the shipping drop: our release edge to ABANDONED hands `owner` over.
        slot.owner.with_mut(|p| unsafe { *p = Some(ends) });
        let moved = slot_transition(slot, index, SlotState::Active, SlotState::Abandoned);
        debug_assert!(moved);
        self.queue.worker_wait.notify();
    }
}

struct WorkerSlot {
    submit: Consumer<TaskBox>,
    status: Producer<TaskRecord>,
    active: VecDeque<TaskBox>,
}

pub struct Worker<const BUG: u8> {
    queue: Arc<ProxyQueue<BUG>>,
    slots: Vec<WorkerSlot>,
    clock: Box<dyn Clock>,
    busy_comms: Vec<usize>,
}

impl<const BUG: u8> Worker<BUG> {
    pub fn stop_requested(&self) -> bool {
        self.queue.stop_requested()
    }

    pub fn tick(&mut self) -> Tick {
        let now_ns = self.clock.now_ns();
        let queue = self.queue.clone();
        if queue.dump.swap(false, Ordering::AcqRel) {
            // (the dump's body is left out of the twin)
        }
        let mut drained = false;
        let mut progressed = false;
        for (index, ws) in self.slots.iter_mut().enumerate() {
            let slot = &queue.slots[index];
            match state_of(slot.state.load(Ordering::Acquire)) {
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
                        push_record(index, status, t.record());
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
        if !any_active && !drained && !progressed {
            Tick::Park
        } else if progressed || drained {
            Tick::Continue
        } else {
            Tick::NoProgress
        }
    }

    pub fn park(&mut self, park: &dyn Park) {
        let queue = self.queue.clone();
        let slots = &mut self.slots;
        queue.worker_wait.park(park, || {
            queue.stop_requested()
                || queue.dump.load(Ordering::Acquire)
                || slots.iter_mut().enumerate().any(|(i, ws)| {
                    match state_of(queue.slots[i].state.load(Ordering::Acquire)) {
                        SlotState::Active => !ws.submit.is_empty(),
                        SlotState::Closing | SlotState::Abandoned => true,
                        SlotState::Free | SlotState::Closed => false,
                    }
                })
        });
    }
}

impl<const BUG: u8> Drop for Worker<BUG> {
    fn drop(&mut self) {
        let queue = self.queue.clone();
        for (index, ws) in self.slots.iter_mut().enumerate() {
            let slot = &queue.slots[index];
            let state = state_of(slot.state.load(Ordering::Acquire));
            match state {
                SlotState::Free | SlotState::Closed => {}
                SlotState::Active => {
                    while let Some(t) = ws.submit.pop() {
                        ws.active.push_back(t);
                    }
                    for mut t in ws.active.drain(..) {
                        t.close(NrtStatus::Closed);
                        push_record(index, &mut ws.status, t.record());
                    }
                }
                SlotState::Closing | SlotState::Abandoned => close_slot(index, slot, ws, state),
            }
        }
        queue.exited.store(true, Ordering::Release);
        for slot in queue.slots.iter() {
            slot.waiter.notify();
        }
    }
}

fn push_record(index: usize, status: &mut Producer<TaskRecord>, rec: TaskRecord) {
    if status.push(rec).is_err() {
        log::error!("slot {index}: status ring full, record {rec:?} lost (admission bug)");
        debug_assert!(false, "status ring full");
    }
}

fn close_slot<const BUG: u8>(
    index: usize,
    slot: &SharedSlot<BUG>,
    ws: &mut WorkerSlot,
    state: SlotState,
) {
    while let Some(t) = ws.submit.pop() {
        ws.active.push_back(t);
    }
    for mut t in ws.active.drain(..) {
        t.close(NrtStatus::Closed);
        push_record(index, &mut ws.status, t.record());
    }
    match state {
        SlotState::Closing => {
            let moved = slot_transition(slot, index, SlotState::Closing, SlotState::Closed);
            debug_assert!(moved);
            slot.waiter.notify();
        }
        _ => {
            slot.owner.with_mut(|p| {
                // SAFETY: as the shipping close_slot: ABANDONED hands `owner` to the worker.
                if let Some(ends) = unsafe { (*p).as_mut() } {
                    while ends.status.pop().is_some() {}
                }
            });
            let moved = slot_transition(slot, index, SlotState::Abandoned, SlotState::Free);
            debug_assert!(moved);
        }
    }
}

/// The twin queue as the models see it, with bug `BUG` planted (see [`bug`]).
pub struct TwinDriver<const BUG: u8>;

impl<const BUG: u8> Driver for TwinDriver<BUG> {
    type Queue = ProxyQueue<BUG>;
    type Handle = SlotHandle<BUG>;
    type Worker = Worker<BUG>;

    fn new(cfg: QueueConfig) -> (Arc<Self::Queue>, Self::Worker) {
        ProxyQueue::new(cfg, Box::new(NoClock)).expect("valid config")
    }
    fn join(queue: &Arc<Self::Queue>) -> Result<Self::Handle, NrtStatus> {
        ProxyQueue::join(queue)
    }
    fn request_stop(queue: &Self::Queue) {
        queue.request_stop();
    }
    fn slot_state(queue: &Self::Queue, index: usize) -> SlotState {
        queue.slot_state(index)
    }
    fn slot(handle: &Self::Handle) -> u32 {
        handle.slot()
    }
    fn submit(handle: &mut Self::Handle, task: TaskBox) -> Result<(), NrtStatus> {
        handle.submit(task).map_err(|r| r.status)
    }
    fn try_pop_record(handle: &mut Self::Handle) -> Option<TaskRecord> {
        handle.try_pop_record()
    }
    fn wait_record(handle: &mut Self::Handle, waiter: &Waiter<'_>) -> Option<TaskRecord> {
        handle.wait_record(waiter)
    }
    fn leave(handle: Self::Handle, waiter: &Waiter<'_>) -> Vec<TaskRecord> {
        handle.leave(waiter)
    }
    fn tick(worker: &mut Self::Worker) -> Tick {
        worker.tick()
    }
    fn park(worker: &mut Self::Worker, park: &dyn Park) {
        worker.park(park);
    }
    fn stop_requested(worker: &Self::Worker) -> bool {
        worker.stop_requested()
    }
}

impl<const BUG: u8> WakeWord for WaitCell<BUG> {
    fn new() -> Self {
        WaitCell::new()
    }
    fn notify(&self) {
        WaitCell::notify(self);
    }
    fn park(&self, park: &dyn Park, ready: &mut dyn FnMut() -> bool) {
        WaitCell::park(self, park, ready);
    }
}
