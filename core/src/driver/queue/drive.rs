//! The driving side: the drive token held by a caller ([`Driver`]), the worker thread's loop
//! ([`Worker`]), and the state only the token's holder touches ([`DriverState`]): one tick over
//! every slot (joins, submissions, steps, records, closes), served dumps and invalidations.

use super::*;

impl Driver<'_> {
    /// One tick of the driver loop (see [`Worker::tick`]).
    pub fn tick(&mut self) -> Tick {
        let q = self.queue;
        let stamp = self.stamp;
        // SAFETY: this guard holds the drive token.
        unsafe { q.with_driver(|ds| ds.tick(q, stamp)) }
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
    pub(super) fn serve_dump(&mut self) {
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
        // The worker's thread records on its own lane (one lookup per tick while recording).
        let stamp = trace::TickStamp::here();
        // SAFETY: the worker holds the drive token for its life.
        unsafe { q.with_driver(|ds| ds.tick(q, stamp)) }
    }

    /// Parks the worker until a submission, a join, a leave or a stop wakes it; re-checks every
    /// submission ring and slot state after marking itself parked (so nothing that arrived
    /// since the last tick is slept through).
    ///
    /// Seed: `cv.wait(mtx)` in `enc_proxy_queue::process`, §2.
    pub fn park(&mut self, park: &dyn Park) {
        let q = &*self.queue;
        // SAFETY: the worker holds the drive token for its life.
        unsafe { q.with_driver(|ds| ds.park(q, park, None)) }
    }

    /// Sleeps at most about `timeout_ns` while tasks are active but nothing moves
    /// ([`Tick::NoProgress`]): as [`Worker::park`], and also woken by
    /// [`ProxyQueue::wake_driver`] (the queue's bell: a device's host write, an in-memory
    /// message). A wake that came since the last tick ends the nap at once (the `WaitCell`
    /// keeps it), so nothing rung is slept through; what nobody rings (a network completion
    /// of a transport without a bell) is seen at the next tick, after at most the nap.
    pub fn nap(&mut self, park: &dyn Park, timeout_ns: u64) {
        let q = &*self.queue;
        // SAFETY: the worker holds the drive token for its life.
        unsafe { q.with_driver(|ds| ds.park(q, park, Some(timeout_ns))) }
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
    pub(super) fn active_count(&self) -> usize {
        self.slots.iter().map(|s| s.active.len()).sum()
    }

    /// One tick; the records of the driving thread share `stamp`'s clock read while it runs
    /// (`trace::TickStamp`: dropped before every call out of the tick's bookkeeping).
    pub(super) fn tick(&mut self, queue: &ProxyQueue, stamp: trace::TickStamp) -> Tick {
        let _open = stamp.open();
        let now_ns = self.clock.now_ns();
        self.woke_from = queue.activity.get();
        queue.activity.set(DriverActivity::Ticking);
        // The heartbeat: only the token's holder writes it (a load and a store, no RMW).
        let beat = queue.ticks.load(DiagOrdering::Relaxed).wrapping_add(1);
        queue.ticks.store(beat, DiagOrdering::Relaxed);
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
        // A dump above may have taken a while: the steps' records read the clock afresh.
        stamp.clear();
        let mut any_active = false;
        for (index, ws) in self.slots[..hw].iter_mut().enumerate() {
            if ws.active.is_empty() {
                continue;
            }
            any_active = true;
            let mut pushed = false;
            let mut moved = false;
            let busy = &mut self.busy_comms;
            let ended = &mut self.ended;
            let status = &mut ws.status;
            let returned = &mut ws.returned;
            let mut k = 0;
            while k < ws.active.len() {
                let t = &mut ws.active[k].task;
                let key = t.comm_key();
                let may_begin = key.is_none_or(|k| !busy.contains(&k));
                match t.step(&StepEnv {
                    now_ns,
                    may_begin,
                    stamp,
                }) {
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
                        moved |= s == Step::Progressed;
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
            if pushed || moved {
                progressed = true;
                queue.slots[index].bell.ring();
                // A wake-up may be a system call: the next slot's records read the clock.
                stamp.clear();
            }
        }
        // The slots' pollers (an emulated device the worker plays), after the steps: a device
        // that waits keeps the driver from parking.
        for slot in &queue.slots[..hw] {
            // The device's work is not the tick's bookkeeping: its records read the clock.
            stamp.clear();
            match slot.poller.poll() {
                Polled::Moved => {
                    progressed = true;
                    any_active = true;
                }
                // PLANT: PollerWaitingIgnored — a waiting poller counts as idle.
                Polled::Waiting => any_active |= plant!(PollerWaitingIgnored, false, true),
                Polled::Idle => {}
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

    pub(super) fn park(&mut self, queue: &ProxyQueue, park: &dyn Park, timeout_ns: Option<u64>) {
        let slots = &mut self.slots;
        let served = self.dump_served;
        queue.activity.set(if timeout_ns.is_some() {
            DriverActivity::Napping
        } else {
            DriverActivity::Parked
        });
        queue.trace(trace::Kind::Sleep);
        let ready = || {
            queue.stop_requested()
                || queue.dump.pending_since(served)
                || queue
                    .slots
                    .iter()
                    .any(|s| s.inval.state() == InvalState::Posted)
                // PLANT: PollerWaitingIgnored — a busy poller does not stop the park.
                || plant!(
                    PollerWaitingIgnored,
                    false,
                    queue.slots.iter().any(|s| s.poller.busy())
                )
                || slots.iter_mut().enumerate().any(|(i, ws)| {
                    match SlotState::from_u32(queue.slots[i].state.load(Ordering::Acquire)) {
                        SlotState::Active => !ws.submit.is_empty(),
                        SlotState::Closing | SlotState::Abandoned => true,
                        SlotState::Free | SlotState::Closed => false,
                    }
                })
        };
        queue.worker_wait.park_timeout(park, ready, timeout_ns);
        queue.trace(trace::Kind::Wake);
    }

    /// Serves the pending dump requests by a requester that took a caller-mode queue's free
    /// drive token (no tick), with the clock read now.
    pub(super) fn serve_dump(&mut self, queue: &ProxyQueue) {
        let now_ns = self.clock.now_ns();
        self.woke_from = queue.activity.get();
        self.by_requester = true;
        self.serve_dump_at(queue, now_ns);
        self.by_requester = false;
    }

    pub(super) fn serve_dump_at(&mut self, queue: &ProxyQueue, now_ns: u64) {
        // One load while nobody asks (the request word's line stays shared).
        let mut served = self.dump_served;
        queue.dump.serve(&mut served, || {
            self.dump_to_log_at(queue, DumpReason::Request, now_ns)
        });
        self.dump_served = served;
    }

    pub(super) fn dump_to_log(&mut self, queue: &ProxyQueue, reason: DumpReason, ended: &[Ended]) {
        let now_ns = self.clock.now_ns();
        self.dump_to_log_at_with(queue, reason, now_ns, ended);
    }

    pub(super) fn dump_to_log_at(&mut self, queue: &ProxyQueue, reason: DumpReason, now_ns: u64) {
        self.dump_to_log_at_with(queue, reason, now_ns, &[]);
    }

    pub(super) fn dump_to_log_at_with(
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

    pub(super) fn write_dump(
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
    pub(super) fn write_dump_at(
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

    pub(super) fn exit(&mut self, queue: &ProxyQueue) {
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
pub(super) fn serve_invalidations(queue: &ProxyQueue, hw: usize) -> bool {
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
pub(super) fn finish(
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
pub(super) fn push_record(index: usize, status: &mut Producer<TaskRecord>, rec: TaskRecord) {
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
pub(super) fn close_slot(
    index: usize,
    slot: &SharedSlot,
    ws: &mut WorkerSlot,
    state: SlotState,
    sync: bool,
) {
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
    let abandoned = match state {
        SlotState::Closing => {
            if slot_transition(slot, index, SlotEdge::WorkerClosed) {
                slot.waiter.notify();
                false
            } else {
                // PLANT: WorkerClosedAssumed asserts the edge, as the code before 85da72f did.
                plant!(WorkerClosedAssumed => {
                    panic!("slot {index}: the worker's CLOSING => CLOSED edge failed");
                });
                // The owner's leave timed out and its handle was dropped since our load
                // (`AbandonLeaving`, CLOSING → ABANDONED, the only other edge out of CLOSING):
                // the ends are ours now. Acquire: takes what the owner released with that edge.
                let now = SlotState::from_u32(slot.state.load(Ordering::Acquire));
                debug_assert_eq!(now, SlotState::Abandoned);
                now == SlotState::Abandoned
            }
        }
        _ => true,
    };
    if abandoned {
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
