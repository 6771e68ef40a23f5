//! One rank of the engine ([`EngineRank`]): its network and barrier tasks built from an
//! execution, submitted to its proxy queue, waited for (worker or caller mode), and settled at
//! the end; with `--inject`, the duplicate watch and the injected abort or exit.

use super::*;

impl EngineRank {
    /// The waiting flag of the rank's barrier between processes
    /// (`proxy_bootstrap::HostBarrier::waiting`; `None` for a barrier in process).
    pub fn host_barrier_waiting(&self) -> Option<Arc<std::sync::atomic::AtomicBool>> {
        match &self.barrier {
            RankBarrier::Host(hb) => Some(hb.lock().unwrap_or_else(|p| p.into_inner()).waiting()),
            RankBarrier::Shared(_) => None,
        }
    }

    /// The proxy queue that serves this rank and the rank's slot in it (`None` once left).
    pub fn queue_slot(&self) -> Option<(Arc<ProxyQueue>, usize)> {
        let m = self.member.as_ref()?;
        Some((m.slot.queue().clone(), m.slot.slot() as usize))
    }

    /// Submits `exec`'s network task and barrier task through the rank's slot (new tasks, not
    /// kept after they end).
    ///
    /// # Errors
    /// A message when a task cannot be built or the slot refuses it.
    ///
    /// # Safety
    /// As [`Engine::submit`].
    pub unsafe fn submit(
        &mut self,
        exec: Execution,
        timeout_ns: Option<u64>,
    ) -> Result<(), String> {
        let id = exec.id;
        // SAFETY: forwarded under this function's contract.
        let (net, barrier) = unsafe { self.build(exec, timeout_ns) }?;
        self.push(net, barrier, id, None)
    }

    /// Submits execution `id` on trigger set `set` (0 or 1) of the shape `key` (the caller's
    /// name for "these FIFOs, words and schedule"): re-arms the two tasks kept from the last
    /// execution of that set and shape ([`proxy_core::driver::task::ProxyTask::rearm`], nothing
    /// allocated), or builds
    /// them from `build()` when there are none. Either way the tasks come back when they end
    /// ([`SlotHandle::submit_returning`](proxy_core::driver::queue::SlotHandle::submit_returning))
    /// and are kept for the next execution of the set.
    ///
    /// # Errors
    /// A message when `build` fails, a task cannot be built or re-armed, or the slot refuses
    /// it.
    ///
    /// # Safety
    /// As [`Engine::submit`], for the execution `build` describes (a re-armed task carries the
    /// same addresses as the one `build` made for this key).
    pub unsafe fn submit_keyed(
        &mut self,
        key: u64,
        set: usize,
        id: u32,
        timeout_ns: Option<u64>,
        build: impl FnOnce() -> Result<Execution, String>,
    ) -> Result<(), String> {
        let kept = self.cache[set].take().filter(|k| k.key == key);
        let (net, barrier) = match kept {
            Some(mut k) => {
                k.net
                    .rearm(id.wrapping_mul(2))
                    .map_err(|e| format!("re-arming the network task: {e}"))?;
                k.barrier
                    .rearm(id.wrapping_mul(2).wrapping_add(1))
                    .map_err(|e| format!("re-arming the barrier task: {e}"))?;
                (k.net, k.barrier)
            }
            None => {
                let exec = build()?;
                debug_assert_eq!(exec.id, id);
                // SAFETY: forwarded under this function's contract.
                unsafe { self.build(exec, timeout_ns) }?
            }
        };
        self.push(net, barrier, id, Some((set, key)))
    }

    /// The two tasks of `exec`.
    ///
    /// # Safety
    /// As [`Engine::submit`].
    pub(super) unsafe fn build(
        &mut self,
        exec: Execution,
        timeout_ns: Option<u64>,
    ) -> Result<(TaskBox, TaskBox), String> {
        let r = self;
        let comm_ptr = r.comm.handle();
        let comm_id = r.comm.comm_id();
        // SAFETY: the comm (boxed, or a library handle) lives in `self` until after the
        // membership left (Drop), which ends every task carrying the handle; only the queue's
        // worker calls the seam on it while a task is submitted.
        let handle = unsafe { CommHandle::new(comm_ptr) }.ok_or("null comm")?;
        let net = NetworkTask::new(NetworkTaskSpec {
            task_id: exec.id.wrapping_mul(2),
            comm: handle,
            comm_id,
            seam: r.comm.seam(),
            blocks: exec
                .blocks
                .into_iter()
                .map(|(stream, bb, f)| BlockFifos {
                    stream,
                    bb,
                    ops: f.ops,
                    src: f.src,
                    dst: f.dst,
                })
                .collect(),
            schedule: Some(exec.schedule),
            triggers: TriggerWords::new(&host_words(&exec.net_triggers)?)
                .map_err(|e| format!("trigger words: {e}"))?,
            wait_for_device: true,
            skip: r.skip,
            timeout_ns,
        })
        .map_err(|e| format!("network task: {e}"))?;
        // In-process comms can be aborted (docs/design.md §9): their tasks watch the comm's
        // abort word. A loaded library's comm has no abort entry in the C ABI yet.
        let abort = r.comm.abort_handle();
        let net = match &abort {
            Some(a) => net.with_abort(a.clone()),
            None => net,
        };
        let net = match exec.label {
            Some(l) => net.with_label(l),
            None => net,
        };
        let net = match r.comm.comm_dump() {
            // SAFETY: an in-process comm's handle is a `*mut Comm`, which `in_process_dump`
            // takes.
            Some(d) => unsafe { net.with_comm_dump(d) },
            None => net,
        };
        let barrier = BarrierTask::new(BarrierTaskSpec {
            task_id: exec.id.wrapping_mul(2).wrapping_add(1),
            comm_id,
            channel: r.barrier.channel(),
            triggers: TriggerWords::new(&host_words(&exec.barrier_triggers)?)
                .map_err(|e| format!("barrier trigger words: {e}"))?,
            leader: exec.leader,
            done_semaphores: host_words(&exec.barrier_done)?,
            skip: r.skip,
            timeout_ns,
        });
        let barrier = match abort {
            Some(a) => barrier.with_abort(a),
            None => barrier,
        };
        Ok((Box::new(net), Box::new(barrier)))
    }

    /// Submits the two tasks of execution `id`; `keep`: returned and kept for trigger set and
    /// shape `(set, key)`.
    pub(super) fn push(
        &mut self,
        net: TaskBox,
        barrier: TaskBox,
        id: u32,
        keep: Option<(usize, u64)>,
    ) -> Result<(), String> {
        let ids = [id.wrapping_mul(2), id.wrapping_mul(2).wrapping_add(1)];
        let slot = &mut self.member.as_mut().ok_or("rank left")?.slot;
        let submit = |slot: &mut proxy_core::driver::queue::SlotHandle, t: TaskBox| {
            if keep.is_some() {
                slot.submit_returning(t)
            } else {
                slot.submit(t)
            }
        };
        submit(slot, net).map_err(|e| format!("submit: {}", e.status))?;
        self.stats.submitted += 1;
        if let Err(e) = submit(slot, barrier) {
            // The network task is in: its record belongs to this execution's wait.
            self.pending.push_back(Pending {
                ids,
                n: 1,
                keep: None,
            });
            return Err(format!("submit: {}", e.status));
        }
        self.pending.push_back(Pending { ids, n: 2, keep });
        self.stats.submitted += 1;
        if self.abort_at == Some(id) {
            if let Some(a) = self.comm.abort_handle() {
                log::warn!(
                    "--inject drop-comm: rank {} aborts its comm mid-run",
                    self.comm.rank()
                );
                a.abort();
            }
        }
        if self.exit_at == Some(id) {
            log::warn!(
                "--inject exit-rank: rank {} exits its process mid-run",
                self.comm.rank()
            );
            std::process::exit(3);
        }
        Ok(())
    }

    /// The slot's counts so far.
    pub fn stats(&self) -> &RankStats {
        &self.stats
    }

    /// Watches for a task reported twice (`RankStats::twice`; keeps every task id seen).
    pub fn watch_duplicates(&mut self) {
        self.stats.seen.get_or_insert_with(Default::default);
    }

    /// `--inject`: abort the comm (`abort`) or exit the process (`exit`) once execution `id`
    /// is submitted.
    pub fn inject_at(&mut self, id: u32, abort: bool, exit: bool) {
        if abort {
            self.abort_at = Some(id);
        }
        if exit {
            self.exit_at = Some(id);
        }
    }

    /// Lets every task still outstanding end by itself (each has the no-progress limit),
    /// collecting its record, until `deadline_ns` (monotonic); in caller mode this thread drives
    /// the queue meanwhile. Then leaves the slot (tasks still running end `NRT_CLOSED`) and
    /// counts the records the leave hands back. The rank's [`RankStats`] are then complete.
    pub fn settle(&mut self, waiter: &Waiter<'_>, deadline_ns: u64) {
        self.pending.clear();
        // Noted when they were popped.
        self.early.clear();
        let Some(m) = self.member.as_mut() else {
            return;
        };
        while m.slot.outstanding() > 0 {
            match m.slot.wait_record_until(waiter, Some(deadline_ns)) {
                Ok(rec) => self.stats.note(&rec),
                Err(_) => break,
            }
        }
    }

    /// Leaves the rank's slot through `registry`, counting the records it hands back.
    pub(super) fn leave(&mut self, registry: &LinuxRegistry, waiter: &Waiter<'_>) {
        if let Some(m) = self.member.take() {
            for rec in registry.leave(m, waiter) {
                self.stats.note(&rec);
            }
        }
    }

    /// After execution `p` completed: keeps its two returned tasks for the next execution of
    /// its trigger set and shape.
    pub(super) fn keep_returned(&mut self, p: &Pending) {
        let Some((set, key)) = p.keep else {
            return;
        };
        let Some(m) = self.member.as_mut() else {
            return;
        };
        let (mut net, mut barrier) = (None, None);
        // The boxes are back before their records (both popped): the next two in the ring, in
        // the order the tasks ended. Checked by task id; a box of another task is dropped (the
        // next execution of the set then builds new tasks).
        for _ in 0..2 {
            let Some(t) = m.slot.take_returned() else {
                break;
            };
            let id = t.record().task_id;
            if id == p.ids[0] && t.kind() == TaskKind::Network {
                net = Some(t);
            } else if id == p.ids[1] && t.kind() == TaskKind::Barrier {
                barrier = Some(t);
            } else {
                log::debug!("a returned task {id} that is not of execution {:?}", p.ids);
            }
        }
        if let (Some(net), Some(barrier)) = (net, barrier) {
            self.cache[set] = Some(Kept { key, net, barrier });
        }
    }

    /// Waits for the oldest execution in flight (see [`Engine::wait`]), polling the status
    /// ring with `poll`; with `park`, parking on the slot after the spins (the world's bells
    /// are wired: nothing the rank waits for is left unrung). `limit_ns` is the tasks'
    /// no-progress limit (`None`: none): when the queue's driving thread has not begun a tick
    /// for that long and `STUCK_GRACE` more, the wait ends (see `Heartbeat`).
    ///
    /// # Errors
    /// As [`Engine::wait`].
    pub fn wait(
        &mut self,
        poll: WaitPolicy,
        park: bool,
        limit_ns: Option<u64>,
        device_failed: &dyn Fn() -> bool,
    ) -> Result<(), String> {
        let poll = WaitPolicy {
            // Parking: spin and a few yields first (a zero timeout ends the wait at the first
            // clock read past the spins), then park.
            timeout: if park {
                std::time::Duration::ZERO
            } else {
                std::time::Duration::from_millis(2)
            },
            ..poll
        };
        // After the first 2 ms: check the ring (and the device) every 100 µs nap, 100 ms per
        // round; rounds go on while the device is fine and the driving thread ticks (the tasks'
        // own no-progress timeout bounds them then; the heartbeat bounds a stuck driver).
        let slow = WaitPolicy {
            spins: 0,
            yields: 0,
            nap: std::time::Duration::from_micros(100),
            timeout: std::time::Duration::from_millis(100),
        };
        let Some(p) = self.pending.pop_front() else {
            return Ok(());
        };
        let r = &mut *self;
        let slot = &mut r.member.as_mut().ok_or("rank left")?.slot;
        // The driving thread's heartbeat, watched from the first slow round on (the fast path
        // pays nothing for it).
        let mut heartbeat: Option<(Arc<ProxyQueue>, Heartbeat)> = None;
        let stuck_after = limit_ns.map(|l| std::time::Duration::from_nanos(l) + STUCK_GRACE);
        // The execution's task ids still missing (no allocation: at most two).
        let mut missing = [Some(p.ids[0]), (p.n == 2).then_some(p.ids[1])];
        while missing.iter().any(Option::is_some) {
            let rec = match r
                .early
                .iter()
                .position(|e| missing.contains(&Some(e.task_id)))
            {
                Some(i) => r.early.swap_remove(i),
                None => {
                    // Yield-poll the status ring first, then nap-poll it (a parked consumer
                    // costs the worker a wake-up syscall per record), watching the device: a
                    // failed device never reaches the barrier stage, so the barrier task would
                    // never end.
                    let mut got = None;
                    let mut policy = poll;
                    loop {
                        let _ = policy.wait(|| {
                            got = slot.try_pop_record();
                            got.is_some()
                        });
                        if got.is_none() && park {
                            // Bells wired: park on the slot until the worker pushes a record
                            // (a wake-up per record is the price of not spinning on a crowded
                            // host), in slices that watch the device.
                            let clock = MonotonicClock;
                            let w = Waiter {
                                park: &ThreadPark,
                                clock: &clock,
                                spin_ns: 0,
                            };
                            let until = clock.now_ns().saturating_add(PARK_SLICE_NS);
                            got = slot.wait_record_until(&w, Some(until)).ok();
                        }
                        if let Some(rec) = &got {
                            r.stats.note(rec);
                        }
                        if got.is_some() {
                            break;
                        }
                        if device_failed() {
                            return Err(format!(
                                "the device failed; tasks {:?} abandoned",
                                missing.iter().flatten().collect::<Vec<_>>()
                            ));
                        }
                        if let Some(after) = stuck_after {
                            let (queue, beat) = heartbeat.get_or_insert_with(|| {
                                let q = slot.queue().clone();
                                let b = Heartbeat::new(&q);
                                (q, b)
                            });
                            if let Some(quiet) = beat.stuck(queue, after) {
                                return Err(stuck(queue, quiet, &missing));
                            }
                        }
                        policy = slow;
                    }
                    got.expect("loop ends with a record")
                }
            };
            let Some(m) = missing.iter_mut().find(|m| **m == Some(rec.task_id)) else {
                // Room: reserved for a full status ring when the rank was made.
                r.early.push(rec);
                continue;
            };
            *m = None;
            if rec.status() != NrtStatus::Success {
                // The other task of the execution may never end (a barrier task waits for a
                // device that waits for the failed network task): do not wait for it.
                return Err(format!("task {} ended {}", rec.task_id, rec.status()));
            }
        }
        self.keep_returned(&p);
        Ok(())
    }

    /// Caller mode: drives the rank's proxy queue from this thread until the oldest execution
    /// in flight is complete (both tasks' final records), calling `hook` between ticks (the
    /// polled device runs there). Gives up at `deadline_ns` (monotonic clock).
    ///
    /// # Errors
    /// A message naming the task that failed or timed out.
    pub fn drive(
        &mut self,
        waiter: &Waiter<'_>,
        deadline_ns: Option<u64>,
        hook: &mut dyn FnMut() -> bool,
    ) -> Result<(), String> {
        let Some(p) = self.pending.pop_front() else {
            return Ok(());
        };
        let slot = &mut self.member.as_mut().ok_or("rank left")?.slot;
        for &id in &p.ids[..p.n] {
            let rec = slot
                .drive_until(id, deadline_ns, waiter, Some(&mut *hook))
                .map_err(|e| format!("task {id}: driving the proxy queue: {e}"))?;
            self.stats.note(&rec);
            if rec.status() != NrtStatus::Success {
                return Err(format!("task {} ended {}", rec.task_id, rec.status()));
            }
        }
        self.keep_returned(&p);
        Ok(())
    }
}

/// How long past the tasks' no-progress limit a driving thread may go without beginning a tick
/// before a waiter calls it stuck: the tasks' own limit, checked in a tick, ends a healthy
/// driver's tasks first.
pub(super) const STUCK_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The driving thread's heartbeat as a waiter sees it ([`ProxyQueue::ticks`]): the last tick
/// count read and when it last changed. While a rank's tasks are outstanding a healthy
/// driving thread ticks at least once per nap; one that stops (stuck inside a provider call,
/// deadlocked) never times the tasks out either, so without this the producer's wait would
/// have no end.
pub(super) struct Heartbeat {
    ticks: u32,
    since: std::time::Instant,
}

impl Heartbeat {
    /// Starts watching `queue` now.
    pub(super) fn new(queue: &ProxyQueue) -> Self {
        Self {
            ticks: queue.ticks(),
            since: std::time::Instant::now(),
        }
    }

    /// `Some(quiet)` when `queue` has begun no tick for `quiet` ≥ `after` (since [`Heartbeat::new`]
    /// or the last change this call saw); `None` while it ticks.
    pub(super) fn stuck(
        &mut self,
        queue: &ProxyQueue,
        after: std::time::Duration,
    ) -> Option<std::time::Duration> {
        let now = queue.ticks();
        if now != self.ticks {
            self.ticks = now;
            self.since = std::time::Instant::now();
            return None;
        }
        let quiet = self.since.elapsed();
        (quiet >= after).then_some(quiet)
    }
}

/// The error of a wait whose driving thread stopped ticking: the queue's dump and verdict
/// ([`proxy_runtime::dump::stuck_driver`]) and the tasks given up on.
fn stuck(queue: &ProxyQueue, quiet: std::time::Duration, missing: &[Option<u32>]) -> String {
    format!(
        "{}; tasks {:?} abandoned",
        proxy_runtime::dump::stuck_driver(queue, quiet),
        missing.iter().flatten().collect::<Vec<_>>()
    )
}
