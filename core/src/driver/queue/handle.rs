//! A producer's side of one slot ([`SlotHandle`]): submit, pop records, drive until a task is
//! done (caller mode), leave with its closing handshake, invalidate while the driver runs, and
//! the owner's one bounded wait loop (`wait_driving`).

use super::*;

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

    pub(super) fn push(&mut self, mut task: TaskBox, keep: bool) -> Result<(), Rejected> {
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
        self.queue.notify_driver();
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
    /// waiter's budget, then yields between ticks ([`Park::yield_now`]). A wait with no device to
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
    pub(super) fn wait_driving<T>(
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
            queue.notify_driver();
            return Ok(out);
        });
        if !self.leaving {
            let moved = slot_transition(slot, index, SlotEdge::Leave);
            debug_assert!(moved, "leave on a slot that is not ACTIVE");
            queue.notify_driver();
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
        queue.notify_driver();
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
        self.queue.notify_driver();
    }
}

impl SlotHandle {
    /// Drop of a handle whose bounded leave timed out: the slot is CLOSING (the worker has not
    /// confirmed yet) or CLOSED. CLOSING: edge 8 to ABANDONED, the worker closes what is left
    /// and frees the slot (or edge 7 when the worker is gone). CLOSED: the records are dropped
    /// here and edge 6 frees the slot. Never waits.
    pub(super) fn drop_leaving(&mut self, index: usize, mut ends: OwnerEnds) {
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
                self.queue.notify_driver();
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
/// The driver found nothing to do: blocks on the queue's idle wait (at most `max_ns`) when one
/// is wired and can be slept on, else yields (`driver::idle`).
fn relax(queue: &ProxyQueue, waiter: &Waiter<'_>, max_ns: u64) {
    if queue.idle_wait().block(max_ns) == Idled::Unavailable {
        waiter.park.yield_now();
    }
}

pub(super) fn wait_driving<T>(
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
                        relax(queue, waiter, u64::MAX);
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
                    relax(queue, waiter, deadline_ns.map_or(u64::MAX, |d| d - now));
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
        queue.trace(trace::Kind::Sleep);
        slot.waiter.park_timeout(
            waiter.park,
            || {
                got = poll(ends);
                got.is_some() || !queue.is_driven()
            },
            timeout_ns,
        );
        queue.trace(trace::Kind::Wake);
        slot.wants_drive.store(false, Ordering::Relaxed);
        queue.drive.fetch_sub(WAITER, Ordering::AcqRel);
        if let Some(v) = got {
            return Ok(v);
        }
    }
}
