//! The emulated device of each local rank ([`RankDevice`]: a device thread or a polled device),
//! the job of one execution, the trigger words it arms, and a group of ranks run together
//! (`GroupRun`).

use super::*;
use proxy_core::base::backoff::{Backoff, BackoffPolicy, StdPause};

impl RankDevice {
    pub(super) fn new(
        mode: DeviceArg,
        driver: DriverArg,
        rank: u32,
        fault: Option<Fault>,
        wait: WaitPolicy,
        cpu: Option<usize>,
    ) -> Result<Self, String> {
        let dev = match mode {
            DeviceArg::Thread => DeviceKind::Thread(
                DeviceThread::spawn(rank, fault, wait, cpu).map_err(|e| format!("device: {e}"))?,
            ),
            DeviceArg::Polled if driver == DriverArg::Thread => {
                DeviceKind::Played(Arc::new(PlayedDevice::new(rank, fault, wait.timeout)), wait)
            }
            DeviceArg::Polled => {
                DeviceKind::Polled(Box::new(PolledDevice::new(rank, fault, wait.timeout)))
            }
        };
        Ok(Self {
            stalled: false,
            dev,
            jobs: [None, None],
            current: None,
        })
    }

    /// The device thread's bell (`None` for a polled device: its driving thread polls it).
    pub(super) fn bell(&self) -> Option<Arc<dyn proxy_core::base::bell::Bell>> {
        match &self.dev {
            DeviceKind::Thread(d) => d.bell(),
            DeviceKind::Polled(_) | DeviceKind::Played(..) => None,
        }
    }

    /// The device the rank's worker plays, to be wired into its slot (`None` otherwise).
    pub(super) fn played(&self) -> Option<&Arc<PlayedDevice>> {
        match &self.dev {
            DeviceKind::Played(d, _) => Some(d),
            _ => None,
        }
    }

    pub(super) fn stats(&self) -> &Arc<proxy_emulator::DeviceStats> {
        match &self.dev {
            DeviceKind::Thread(d) => d.stats(),
            DeviceKind::Polled(d) => d.stats(),
            DeviceKind::Played(d, _) => d.stats(),
        }
    }

    /// Launches the job of trigger set `set` and shape `key`: the one kept from the last
    /// execution of that set and shape, else `build()`'s.
    ///
    /// # Safety
    /// As [`DeviceThread::launch`] for the job `build` describes.
    pub(super) unsafe fn launch(&mut self, key: u64, set: usize, build: impl FnOnce() -> Job) {
        if self.stalled {
            return;
        }
        if let Some((k, s)) = self.current.take() {
            let back = match &mut self.dev {
                DeviceKind::Thread(d) => d.take_job(),
                DeviceKind::Polled(d) => d.take_job(),
                DeviceKind::Played(d, _) => d.take_job(),
            };
            if let Some(j) = back {
                self.jobs[s] = Some((k, j));
            }
        }
        let job = match self.jobs[set].take() {
            Some((k, j)) if k == key => j,
            _ => build(),
        };
        self.current = Some((key, set));
        match &mut self.dev {
            // SAFETY: forwarded under this function's contract.
            DeviceKind::Thread(d) => unsafe { d.launch(job) },
            // SAFETY: as above.
            DeviceKind::Polled(d) => unsafe { d.launch(job) },
            // SAFETY: as above.
            DeviceKind::Played(d, _) => unsafe { d.launch(job) },
        }
    }

    /// The drive hook: advances a polled device; `true` when it moved. A device thread runs by
    /// itself, a played one is polled by its worker (`false`).
    pub(super) fn poll(&mut self) -> bool {
        match &mut self.dev {
            DeviceKind::Thread(_) | DeviceKind::Played(..) => false,
            DeviceKind::Polled(d) => {
                let _ = d.poll_once();
                d.moved()
            }
        }
    }

    pub(super) fn failed(&self) -> bool {
        match &self.dev {
            DeviceKind::Thread(d) => d.failed(),
            DeviceKind::Polled(d) => d.failed(),
            DeviceKind::Played(d, _) => d.failed(),
        }
    }

    pub(super) fn abort(&mut self) {
        match &mut self.dev {
            DeviceKind::Thread(d) => d.abort(),
            DeviceKind::Polled(d) => d.abort(),
            DeviceKind::Played(d, _) => d.abort(),
        }
    }

    /// Waits for the launched job to end (a polled device is polled to its end, bounded by
    /// its own no-progress timeout).
    pub(super) fn wait(&mut self) -> Result<(), DeviceError> {
        self.wait_unless(&|| false)
    }

    /// As [`RankDevice::wait`], but gives the device up ([`RankDevice::abort`]: the wait ends
    /// with [`DeviceError::Aborted`]) as soon as `give_up` answers `true` while it has not
    /// finished (checked between polls, or between yields while a device thread runs).
    pub(super) fn wait_unless(&mut self, give_up: &dyn Fn() -> bool) -> Result<(), DeviceError> {
        if self.stalled {
            return Ok(());
        }
        match &mut self.dev {
            DeviceKind::Thread(d) => {
                // Spin, then yield, then nap between checks (the device thread needs the CPU
                // more than this check does; the project's one backoff); the device's own
                // timeout bounds the wait.
                let mut backoff = Backoff::new(BackoffPolicy {
                    spins: 63,
                    yields: 960,
                    nap_ns: 20_000,
                    max_nap_ns: 20_000,
                });
                while !d.finished() {
                    if give_up() {
                        d.abort();
                        break;
                    }
                    backoff.pause(&StdPause);
                }
                d.wait()
            }
            DeviceKind::Played(d, wait) => d.wait_unless(*wait, give_up),
            DeviceKind::Polled(d) => loop {
                if let Some(r) = d.poll_once() {
                    break r;
                }
                if give_up() {
                    d.abort();
                }
                std::thread::yield_now();
            },
        }
    }
}

/// Rank `r`'s execution `id` on trigger set `set` (`reps` program executions of the block).
pub(super) fn execution_of(
    prep: &Prepared,
    f: &FixedWords,
    r: usize,
    set: usize,
    id: u32,
    reps: u32,
    done_words: &[u64],
) -> Execution {
    let leader = r == 0;
    Execution {
        id,
        blocks: prep.fifos[r].clone(),
        schedule: prep.plans[r].schedule(reps),
        net_triggers: f.net_triggers(set, &prep.plans[r]),
        barrier_triggers: vec![f.barrier_trigger(set)],
        barrier_done: if leader {
            done_words.to_vec()
        } else {
            Vec::new()
        },
        leader,
        label: Some(prep.label),
    }
}

/// Rank `r`'s device job for trigger set `set`.
pub(super) fn job_of(prep: &Prepared, f: &FixedWords, r: usize, set: usize, reps: u32) -> Job {
    Job {
        blocks: prep.device[r].clone(),
        schedule: prep.plans[r].schedule(reps),
        net_triggers: f.net_triggers(set, &prep.plans[r]),
        barrier_triggers: vec![f.barrier_trigger(set)],
        barrier_done: Some(f.barrier_done()),
        barrier_at: prep.barrier_at,
    }
}

/// Arms rank `f`'s trigger words of set `set` (before its tasks are submitted, docs/design.md
/// §4).
pub(super) fn arm_triggers(f: &FixedWords, set: usize) -> Result<(), String> {
    let net = (0..NET_TRIGGERS).map(|s| f.net_trigger(set, s));
    for t in net.chain([f.barrier_trigger(set)]) {
        f.mem
            .word_at(t)
            .ok_or_else(|| format!("trigger word {t:#x} outside the host memory"))?
            .store(TRIGGER_ARMED);
    }
    Ok(())
}

impl GroupRun<'_> {
    /// Execution `i` of the group's ranks: for each, arm trigger set 0 (one execution in
    /// flight: its tasks and job are re-armed, nothing allocated), submit the network and
    /// barrier tasks and launch the device; then drive the group's queue until every rank's
    /// records are final, every device of the group polled in the hook; then collect the
    /// devices' ends.
    pub(super) fn execution(
        &self,
        ranks: &mut [EngineRank],
        devs: &mut [RankDevice],
        i: u32,
    ) -> Result<(), String> {
        let set = 0;
        let id = self.first_id.wrapping_add(i);
        let key = shape_key(self.prep, self.reps);
        let (prep, reps, done) = (self.prep, self.reps, self.done_words);
        for (k, (rank, dev)) in ranks.iter_mut().zip(devs.iter_mut()).enumerate() {
            let r = self.first + k;
            let f = &self.fixed[r];
            arm_triggers(f, set)?;
            // SAFETY: the buffers and words live in the World / the caller's RankMem until this
            // execution has been driven to its end below, or, after a failure, until the engine
            // is gone (`row` retires the buffers; fields drop in order).
            unsafe {
                rank.submit_keyed(key, set, id, self.timeout_ns, || {
                    Ok(execution_of(prep, f, r, set, id, reps, done))
                })
            }
            .map_err(|e| format!("local rank {r}: {e}"))?;
            // SAFETY: as for the submission.
            unsafe { dev.launch(key, set, || job_of(prep, f, r, set, reps)) };
        }
        let clock = MonotonicClock;
        let waiter = Waiter {
            park: &ThreadPark,
            clock: &clock,
            spin_ns: u64::try_from(self.spin.as_nanos()).unwrap_or(u64::MAX),
        };
        let deadline = self.timeout_ns.map(|t| clock.now_ns().saturating_add(t));
        let mut drove = Ok(());
        for (k, rank) in ranks.iter_mut().enumerate() {
            let mut hook = || devs.iter_mut().fold(false, |moved, d| d.poll() | moved);
            if let Err(e) = rank.drive(&waiter, deadline, &mut hook) {
                drove = Err(format!("local rank {}: {e}", self.first + k));
                break;
            }
        }
        if drove.is_err() {
            devs.iter_mut().for_each(RankDevice::abort);
        }
        let mut device_err = None;
        // A comm aborted while this group's tasks completed (by another thread, or another
        // group's tasks ending with it) may leave this group's device waiting for a word an
        // aborted task would have raised (the leader's barrier-done semaphore): the wait gives
        // the device up then, and the execution fails with the abort.
        let aborted = || self.aborts.iter().find_map(AbortHandle::aborted);
        for (k, dev) in devs.iter_mut().enumerate() {
            match dev.wait_unless(&|| aborted().is_some()) {
                Ok(()) => {}
                Err(DeviceError::Aborted { .. }) => {
                    if let (Ok(()), Some(s)) = (&drove, aborted()) {
                        device_err.get_or_insert(format!(
                            "local rank {}: the comm was aborted ({s}); its device was given up",
                            self.first + k
                        ));
                    }
                }
                Err(e) => {
                    device_err.get_or_insert(format!("local rank {}: {e}", self.first + k));
                }
            }
        }
        // A device's own failure names the cause better than the proxy's timeout.
        match device_err {
            Some(e) => Err(e),
            None => drove,
        }
    }
}
