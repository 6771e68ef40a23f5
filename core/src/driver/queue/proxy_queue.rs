//! The shared queue's own operations ([`ProxyQueue`]): create, join a slot, the drive token
//! (`try_drive`, `tick`), stop, the dump request and the dump a requester writes without the
//! driving thread. The module docs of `driver::queue` draw the slot machine and the token.

use super::*;

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

    pub(super) fn build(
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
                bell: BellSlot::new(),
                poller: PollerSlot::new(),
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
            ticks: DiagAtomicU32::new(0),
            id: next_queue_id(),
            group: DiagAtomicU32::new(u32::MAX),
            exited: AtomicBool::new(false),
            status_capacity: cfg.status_capacity,
            mode,
            drive: AtomicU32::new(0),
            high_water: AtomicU32::new(0),
            holder: DiagAtomicU32::new(0),
            idle: IdleSlot::new(),
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
    pub(super) fn take_token(&self) -> bool {
        let taken = self.drive.fetch_or(DRIVEN, Ordering::AcqRel) & DRIVEN == 0;
        if taken {
            self.trace(trace::Kind::TokenTake);
        }
        taken
    }

    /// Records `kind` for this queue (event recording, `crate::base::trace`; `op` is the
    /// queue's id).
    pub(super) fn trace(&self, kind: trace::Kind) {
        trace::emit(kind.class(), || trace::Record {
            op: self.id,
            ..trace::Record::new(kind)
        });
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
    pub(super) fn release_token(&self) {
        self.trace(trace::Kind::TokenRelease);
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
                stamp: trace::TickStamp::here(),
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
    pub(super) unsafe fn with_driver<R>(&self, f: impl FnOnce(&mut DriverState) -> R) -> R {
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
            this.notify_driver();
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
        self.notify_driver();
    }

    /// `true` once [`ProxyQueue::request_stop`] was called.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Wakes the driving thread if it sleeps in [`Worker::nap`] or [`Worker::park`]: for a
    /// thread that made a change the driver polls for (a device's host write, a message
    /// arriving in an in-memory mailbox). One RMW when nobody sleeps; never blocks.
    pub fn wake_driver(&self) {
        self.notify_driver();
    }

    /// Every notification of the driving thread: its `WaitCell` (a parked worker) and its idle
    /// wait (a driver blocked on its network's descriptor, `driver::idle`).
    pub(super) fn notify_driver(&self) {
        self.worker_wait.notify();
        self.idle.kick();
    }

    /// Slot `index`'s bell (`None` out of range): wire the bell of the device of the rank that
    /// holds the slot, and the driving thread rings it after every tick in which a task of the
    /// slot made progress, so the device may sleep while it waits for the proxy.
    pub fn slot_bell(&self, index: usize) -> Option<&BellSlot> {
        self.slots.get(index).map(|s| &s.bell)
    }

    /// The queue's idle wait (`driver::idle`): wire what the driving thread may block on when
    /// a tick found nothing to do (a transport's completion-queue descriptor) when every comm
    /// of the queue completes through it; unwired, the driver yields. Every notification of
    /// the driver (a submission, [`ProxyQueue::wake_driver`]) kicks it.
    pub fn idle_wait(&self) -> &IdleSlot {
        &self.idle
    }

    /// Slot `index`'s poller (`None` out of range): wire what the driving thread should
    /// advance at every tick for the rank that holds the slot (its emulated device, so that the
    /// device needs no thread of its own; `driver::poller`). Whoever launches work for the
    /// poller calls [`ProxyQueue::wake_driver`] after the launch.
    pub fn slot_poller(&self, index: usize) -> Option<&PollerSlot> {
        self.slots.get(index).map(|s| &s.poller)
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

    /// The driving thread's heartbeat: the number of ticks begun on this queue so far
    /// (wrapping `u32`), by whichever thread drove it. A waiter compares two reads: while its
    /// tasks are outstanding, a healthy driving thread ticks at least once per nap, so a count
    /// that stays the same for longer than the tasks' no-progress limit means the driving
    /// thread is stuck inside a call (it cannot time the tasks out either: their limit is
    /// checked in a tick). Also `ticks=` in the dump header. A relaxed diagnostic read: it
    /// orders nothing.
    pub fn ticks(&self) -> u32 {
        self.ticks.load(DiagOrdering::Relaxed)
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
        self.notify_driver();
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
    pub(super) fn write_header(
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
             dumps={requested}/{written} slots={} high_water={} stop={} exited={} idle={} \
             idle_sleeps={} ticks={}",
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
            if self.idle.is_wired() { "wired" } else { "none" },
            self.idle.sleeps(),
            self.ticks(),
        )
    }

    /// The part of a dump that needs no driver: header, and per used slot its state, ring fill
    /// levels (from the observers) and token flag; to the log.
    pub(super) fn dump_without_driver(&self, reason: DumpReason) {
        let mut log = LogLines::new();
        let _ = self.write_without_driver(reason, &mut log);
        log.finish();
    }

    pub(super) fn write_without_driver(
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
