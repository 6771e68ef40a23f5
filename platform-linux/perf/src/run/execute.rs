//! Running the measurement: plan, prepare buffers and words, submit and complete executions
//! (worker and caller modes), fill, poison and check the data, time the iterations
//! (`World::measure`), and one table row per size (`World::row`).

use super::*;
use proxy_collectives::planner::HostMap;

impl World {
    /// The header's `hosts:` line: the host map the plans get, the CPUs its ranks progress
    /// on, and the groups the hierarchical all-reduce works in ([`PlanParams::groups`]), e.g.
    /// `one host of 4 ranks progressing on 2 CPUs (crowded); the hierarchy in CPU groups 2,2`.
    pub fn hosts_line(&self) -> String {
        let p = self.params(8, 0, false);
        let list = |m: &HostMap| {
            m.sizes()
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        let hosts = match p.hosts.sizes().len() {
            0 => "hosts unknown (every rank its own)".to_owned(),
            1 => format!("one host of {} ranks", p.nranks),
            h => format!("{h} hosts of {} ranks", list(&p.hosts)),
        };
        let cpus = match p.progress_cpus {
            0 => " (progress CPUs unknown)".to_owned(),
            c if proxy_collectives::planner::tuner::crowding(&p).is_some() => {
                format!(" progressing on {c} CPUs (crowded)")
            }
            c => format!(" progressing on {c} CPUs"),
        };
        let groups = if p.groups() == p.hosts {
            String::new()
        } else {
            format!("; the hierarchy in CPU groups {}", list(&p.groups()))
        };
        format!("{hosts}{cpus}{groups}")
    }

    /// Rank 0's plan parameters of `size`, out of place (before the algorithm is resolved).
    pub fn params_for(&self, size: u64) -> PlanParams {
        self.params(size, 0, false)
    }

    pub(super) fn params(&self, size: u64, rank: u32, in_place: bool) -> PlanParams {
        let a = &self.args;
        let elt = a.dtype.size() as u64;
        let n = u64::from(a.ranks);
        let count = match self.collective {
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
                (size / elt / n).max(1)
            }
            _ => (size / elt).max(1),
        };
        let mut p = PlanParams::new(self.collective, count, a.dtype, rank, a.ranks);
        p.algorithm = a.algo.into();
        p.cost_model = a.tuning.model(a.link);
        p.inter_host_model = a.tuning.inter_host_model(a.link);
        if let Some(h) = a.hosts {
            p.hosts = h.0;
        } else if let Some(h) = self.one_host() {
            p.hosts = h;
        }
        p.progress_cpus = self.progress_cpus();
        p.cpu_groups = self.cpu_groups();
        p.op = a.op;
        p.root = a.root;
        p.chunk_bytes = a.chunk;
        p.in_place = in_place;
        p.streams = a.streams;
        p.blocks = a.blocks;
        p.nec = NecOptions {
            early_recv: a.early_recv,
            early_send: a.early_send,
            idx_wrap: a.idx_wrap,
            credits: a.credits,
        };
        p
    }

    /// The host map of a run whose ranks all share this host (`None` when they may not): in
    /// process always; ranks as processes when the bootstrap saw one host identity. Several
    /// hosts come from `--hosts` or the bootstrap ([`World::args`]).
    fn one_host(&self) -> Option<HostMap> {
        self.tuner_host
            .one_host
            .then(|| HostMap::new(&[self.args.ranks]))
            .flatten()
    }

    /// Which of this host's ranks share a CPU ([`PlanParams::cpu_groups`]; the same on every
    /// process, `setup::TunerHost`).
    pub fn cpu_groups(&self) -> HostMap {
        self.tuner_host.cpu_groups
    }

    /// The CPUs this host's ranks make progress on at once (the tuner's
    /// [`PlanParams::progress_cpus`], the same on every process; `setup::TunerHost`).
    pub fn progress_cpus(&self) -> u32 {
        self.tuner_host.progress_cpus
    }

    /// The state-dump label of `size`'s collective: the planner's
    /// ([`PlanParams::label`]), `why=env` when the algorithm came from
    /// `NEURON_RT_PROXY_ALGO_<COLL>`.
    pub(super) fn label(&self, size: u64, in_place: bool) -> CollectiveLabel {
        let mut l = self.params(size, 0, in_place).label();
        if self.args.algo_from_env {
            l.why = "env";
        }
        l
    }

    /// Rank `rank`'s (stream, block) parts of `size` ([`plan_blocks`]).
    pub(super) fn plan(&self, size: u64, rank: u32, in_place: bool) -> Result<BlockPlans, String> {
        plan_blocks(&self.params(size, rank, in_place)).map_err(|e| e.to_string())
    }

    /// Arms trigger set `set` and submits one execution (`reps` program executions, block
    /// schedule `[BLOCK; reps]`) for every local rank. The lowest local rank leads the barrier
    /// and raises the barrier-done semaphore of every local rank.
    pub(super) fn submit(&mut self, prep: &Prepared, reps: u32, set: usize) -> Result<(), String> {
        if let Some(e) = &self.failed {
            return Err(format!("an earlier execution failed: {e}"));
        }
        let n = self.local.len();
        self.next_exec = self.next_exec.wrapping_add(1);
        let id = self.next_exec;
        let key = shape_key(prep, reps);
        let timeout_ns = self.engine.timeout_ns();
        for r in 0..n {
            let f = &self.fixed[r];
            arm_triggers(f, set)?;
            let done = &self.done_words;
            // SAFETY: the buffers and words live in `self` / the caller's RankMem until the
            // execution has been waited for (`complete`), or, after a failure, until the
            // engine is gone (`row` retires the buffers; fields drop in order).
            let submitted = unsafe {
                self.engine.ranks_mut()[r].submit_keyed(key, set, id, timeout_ns, || {
                    Ok(execution_of(prep, f, r, set, id, reps, done))
                })
            };
            if let Err(e) = submitted {
                let e = format!("rank {}: {e}", self.local[r]);
                self.failed = Some(e.clone());
                return Err(e);
            }
        }
        Ok(())
    }

    /// Launches every local device on the oldest submitted execution (trigger set `set`) and
    /// waits for the devices and for the execution's task records.
    pub(super) fn complete(
        &mut self,
        prep: &Prepared,
        reps: u32,
        set: usize,
    ) -> Result<(), String> {
        let n = self.local.len();
        let key = shape_key(prep, reps);
        for r in 0..n {
            let f = &self.fixed[r];
            // SAFETY: as in `submit`.
            unsafe { self.devices[r].launch(key, set, || job_of(prep, f, r, set, reps)) };
        }
        // The proxy side first: it stops waiting as soon as a task failed or the rank's device
        // did; then the devices, aborted if the proxy side gave up (they would only wait for
        // it until their timeout).
        let mut proxy_err = None;
        for r in 0..n {
            let dev = &self.devices[r];
            if let Err(e) = self.engine.wait(r as u32, &|| dev.failed()) {
                proxy_err.get_or_insert(format!("rank {}: {e}", self.local[r]));
                for d in &mut self.devices {
                    d.abort();
                }
            }
        }
        let mut device_err = None;
        for d in &mut self.devices {
            match d.wait() {
                Ok(()) | Err(DeviceError::Aborted { .. }) => {}
                Err(e) => {
                    device_err.get_or_insert(e.to_string());
                }
            }
        }
        // A device's own failure names the cause better than "the device failed".
        match device_err.or(proxy_err) {
            Some(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// Runs `count` executions of `reps` program executions each and returns how long they
    /// took. With the worker driver, execution `i + 1` is submitted before execution `i` is
    /// launched on the devices (alternating trigger sets), as a runtime enqueues proxy tasks
    /// ahead of the device: the worker never goes quiescent between iterations. With the caller
    /// driver every local rank runs on its own thread ([`World::run_execs_caller`]).
    pub(super) fn run_execs(
        &mut self,
        prep: &Prepared,
        count: u32,
        reps: u32,
    ) -> Result<Duration, String> {
        if self.modes.driver == DriverArg::Caller {
            return self.run_execs_caller(prep, count, reps, 0, None);
        }
        let t0 = Instant::now();
        let depth = self.engine.max_in_flight().clamp(1, TRIGGER_SETS) as u32;
        let mut submitted = 0;
        while submitted < count.min(depth) {
            self.submit(prep, reps, submitted as usize % TRIGGER_SETS)?;
            submitted += 1;
        }
        for i in 0..count {
            // On failure the world is done (`failed`): what is still in flight ends when the
            // engine is dropped, before any memory it may use (`retired`, `fixed`).
            self.complete(prep, reps, i as usize % TRIGGER_SETS)?;
            if submitted < count {
                self.submit(prep, reps, submitted as usize % TRIGGER_SETS)?;
                submitted += 1;
            }
        }
        Ok(t0.elapsed())
    }

    /// Caller mode: one scoped thread per local rank runs its `count` executions (arm the
    /// triggers, submit the network and barrier tasks, launch its device, drive its queue until
    /// both records are final with the polled device in the hook), as nccl-tests runs a thread
    /// per rank. The ranks first run `warmup` untimed executions, then meet (a barrier), and
    /// `arm(true)` is called (by rank 0's thread, with every rank between executions) before
    /// the `count` timed ones and `arm(false)` after them; the slowest rank's time is returned.
    /// A rank that fails stops executing but still meets the others, so none waits forever.
    pub(super) fn run_execs_caller(
        &mut self,
        prep: &Prepared,
        count: u32,
        reps: u32,
        warmup: u32,
        arm: Option<&(dyn Fn(bool) + Sync)>,
    ) -> Result<Duration, String> {
        if let Some(e) = &self.failed {
            return Err(format!("an earlier execution failed: {e}"));
        }
        let first_id = self.next_exec.wrapping_add(1);
        self.next_exec = self.next_exec.wrapping_add(warmup).wrapping_add(count);
        let timeout_ns = self
            .exec_timeout
            .map(|t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX));
        let spin = self.engine.spin();
        // One thread per proxy group: it is the producer of the group's ranks, drives the
        // group's queue and polls the group's devices (with one rank per group, a thread per
        // rank).
        let per = self.engine.ranks_per_proxy().max(1) as usize;
        let n = self.local.len();
        let threads = n.div_ceil(per);
        let start = std::sync::Barrier::new(threads);
        // Every group thread is pinned (`pinning::caller_cpu`): when they fit on the CPUs each
        // gets its own (two spinning drivers left to the scheduler can share one CPU for a
        // while, and then every hand-off between them waits out a spin budget or a time slice:
        // measured, 8 B executions at 170 µs instead of 10); when they do not, every CPU
        // carries the same number. Counted over every process of the run on this host; a
        // thread's place follows its first global rank, so the processes' threads spread too.
        let cpus = core_affinity::get_core_ids().unwrap_or_default();
        let host_threads = self.modes.advice.caller_threads;
        let fixed = &self.fixed;
        let local = &self.local;
        let aborts = self.engine.abort_handles();
        let ranks = self.engine.ranks_mut();
        let devices = &mut self.devices;
        let results: Vec<Result<Duration, String>> = std::thread::scope(|sc| {
            let handles: Vec<_> = ranks
                .chunks_mut(per)
                .zip(devices.chunks_mut(per))
                .enumerate()
                .map(|(g, (ranks, devs))| {
                    let ctx = GroupRun {
                        first: g * per,
                        fixed,
                        done_words: &self.done_words,
                        prep,
                        reps,
                        first_id,
                        timeout_ns,
                        spin,
                        aborts: &aborts,
                    };
                    let start = &start;
                    let name = format!("rank-{}", local[g * per]);
                    let cpu = caller_cpu(local[g * per] as usize / per, host_threads, cpus.len())
                        .map(|c| cpus[c]);
                    std::thread::Builder::new()
                        .name(name)
                        .spawn_scoped(sc, move || {
                            if let Some(c) = cpu {
                                core_affinity::set_for_current(c);
                            }
                            let mut err = None;
                            let mut run = |from: u32, to: u32| {
                                for i in from..to {
                                    if err.is_some() {
                                        break;
                                    }
                                    if let Err(e) = ctx.execution(ranks, devs, i) {
                                        err = Some(e);
                                    }
                                }
                            };
                            start.wait();
                            run(0, warmup);
                            start.wait();
                            if let (0, Some(arm)) = (g, arm) {
                                arm(true);
                            }
                            start.wait();
                            let t0 = Instant::now();
                            run(warmup, warmup + count);
                            let elapsed = t0.elapsed();
                            start.wait();
                            if let (0, Some(arm)) = (g, arm) {
                                arm(false);
                            }
                            err.map_or(Ok(elapsed), Err)
                        })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h {
                    Ok(h) => h
                        .join()
                        .unwrap_or_else(|_| Err("a rank thread panicked".into())),
                    Err(e) => Err(format!("cannot start a rank thread: {e}")),
                })
                .collect()
        });
        let mut slowest = Duration::ZERO;
        for r in results {
            match r {
                Ok(d) => slowest = slowest.max(d),
                Err(e) => {
                    self.failed.get_or_insert(e.clone());
                    return Err(e);
                }
            }
        }
        Ok(slowest)
    }

    /// Runs one execution (`reps` program executions) on every rank.
    pub(super) fn execute(&mut self, prep: &Prepared, reps: u32) -> Result<(), String> {
        self.run_execs(prep, 1, reps).map(|_| ())
    }

    pub(super) fn prepare(
        &mut self,
        mems: &mut [RankMem],
        size: u64,
        in_place: bool,
    ) -> Result<Prepared, String> {
        self.preparations = self.preparations.wrapping_add(1);
        let mut prep = Prepared {
            plans: Vec::new(),
            addrs: Vec::new(),
            fifos: Vec::new(),
            device: Vec::new(),
            generation: self.preparations,
            label: self.label(size, in_place),
            barrier_at: self.args.barrier.into(),
        };
        for (r, m) in mems.iter_mut().enumerate() {
            let p = self.plan(size, self.local[r], in_place)?;
            let lines = self.fixed[r].mem.lines();
            if FIXED_LINES + p.host_words() as usize > lines {
                return Err(format!("plan needs {} host words", p.host_words()));
            }
            let l = p.layout;
            let (input, output) = if in_place {
                let b = ptr(&mut m.shared);
                (b + l.input_offset, b + l.output_offset)
            } else {
                (ptr(&mut m.input), ptr(&mut m.output))
            };
            let a = Addresses {
                input,
                output,
                scratch: ptr(&mut m.scratch),
                words: self.fixed[r].plan_words(),
                word_stride: WORD_STRIDE,
            };
            prep.device.push(JobBlock::of_plans(&p, &a));
            // A part without ops (one rank: nothing to send) is not filed.
            prep.fifos.push(
                p.blocks
                    .iter()
                    .filter(|b| !b.plan.ops.is_empty())
                    .map(|b| (b.stream, b.block, b.fifos(&a)))
                    .collect(),
            );
            prep.addrs.push(a);
            prep.plans.push(Arc::new(p));
        }
        Ok(prep)
    }

    pub(super) fn fill_inputs(&self, prep: &Prepared) {
        for (r, p) in prep.plans.iter().enumerate() {
            // SAFETY: the input range lies in the rank's live buffer; nothing runs now.
            let input = unsafe {
                std::slice::from_raw_parts_mut(
                    prep.addrs[r].input as usize as *mut u8,
                    p.layout.input_bytes as usize,
                )
            };
            fill_input(&p.params, self.local[r], input);
        }
    }

    pub(super) fn poison_outputs(&self, prep: &Prepared) {
        for (r, p) in prep.plans.iter().enumerate() {
            // SAFETY: as above, the output range.
            let out = unsafe {
                std::slice::from_raw_parts_mut(
                    prep.addrs[r].output as usize as *mut u8,
                    p.layout.output_bytes as usize,
                )
            };
            out.fill(POISON);
        }
    }

    pub(super) fn wrong(&self, prep: &Prepared) -> u64 {
        prep.plans
            .iter()
            .enumerate()
            .map(|(r, p)| {
                // SAFETY: as above.
                let out = unsafe {
                    std::slice::from_raw_parts(
                        prep.addrs[r].output as usize as *const u8,
                        p.layout.output_bytes as usize,
                    )
                };
                count_wrong(&p.params, self.local[r], out)
            })
            .sum()
    }

    /// One side of a row: warm-up, the timed count (`iters`, else [`World::iterations`]
    /// decides it), the timed iterations, the checked runs.
    pub(super) fn measure(
        &mut self,
        mems: &mut [RankMem],
        size: u64,
        in_place: bool,
        iters: Option<u32>,
    ) -> Result<Measure, String> {
        let prep = self.prepare(mems, size, in_place)?;
        let (warmup, checks) = (self.args.warmup, self.args.check);
        self.fill_inputs(&prep);
        if self.args.loop_mode {
            if warmup > 0 {
                self.execute(&prep, warmup)?;
            }
        } else {
            self.run_execs(&prep, warmup, 1)?;
        }
        let iters = match iters {
            Some(n) => n,
            None => self.iterations(&prep)?,
        };
        let pool0 = self.engine.pool_ops();
        let starts0 = seam_starts();
        let stats0: Vec<(u64, u64)> = self
            .devices
            .iter()
            .map(|d| {
                let s = d.stats();
                (
                    s.executions.load(Ordering::Relaxed),
                    s.recv_bytes.load(Ordering::Relaxed),
                )
            })
            .collect();
        let ticks0 = self.engine.queue_ticks();
        let cost0 = crate::cost::ProcCost::now();
        let elapsed = self.timed(&prep, iters)?;
        let cost = crate::cost::ProcCost::now().since(&cost0);
        let ticks = crate::engine::ticks_between(&ticks0, &self.engine.queue_ticks());
        let timed_starts = seam_starts() - starts0;
        let (mut execs, mut bytes) = (0, 0);
        for (d, (e0, b0)) in self.devices.iter().zip(stats0) {
            let s = d.stats();
            execs += s.executions.load(Ordering::Relaxed) - e0;
            bytes += s.recv_bytes.load(Ordering::Relaxed) - b0;
        }
        // `--trace`: a recording window per checked execution (`--trace-all` records all).
        let tracer = self.tracer().filter(|_| !self.args.trace_all);
        let mut wrong = None;
        for _ in 0..checks {
            self.poison_outputs(&prep);
            if in_place {
                self.fill_inputs(&prep);
            }
            tracer.inspect(|t| start_window(t));
            let done = self.execute(&prep, 1);
            tracer.inspect(|t| t.set_on(false));
            done?;
            *wrong.get_or_insert(0) += self.wrong(&prep);
        }
        let recv_bytes_per_exec = prep
            .plans
            .iter()
            .flat_map(|p| &p.blocks)
            .map(|b| b.plan.dst.iter().map(|e| e.bytes).sum::<u64>())
            .sum();
        let filed_blocks = prep.fifos.iter().map(|f| f.len() as u64).sum();
        let pool = pool0.zip(self.engine.pool_ops());
        let mut local = Counts {
            elapsed_ns: u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            timed_starts,
            execs,
            bytes,
            wrong,
            recv_bytes_per_exec,
            filed_blocks,
            pool,
        };
        if let Some(peers) = &self.peers {
            local = Counts::combine(peers, &local)?;
        }
        let Counts {
            elapsed_ns,
            timed_starts,
            execs,
            bytes,
            wrong,
            recv_bytes_per_exec,
            filed_blocks,
            pool,
        } = local;
        let time = elapsed_ns as f64 / 1e9 / f64::from(iters);
        let bytes_moved = size_of_row(&prep) as f64;
        let algbw = if time > 0.0 {
            bytes_moved / time / 1e9
        } else {
            0.0
        };
        Ok(Measure {
            iters,
            time_us: time * 1e6,
            algbw,
            busbw: algbw * self.collective.busbw_factor(self.args.ranks),
            wrong,
            timed_starts,
            timed_device_execs: execs,
            timed_recv_bytes: bytes,
            recv_bytes_per_exec,
            filed_blocks,
            pool_ops: pool,
            cost,
            ticks,
        })
    }

    /// With `--trace`, the process's event tracer (`crate::trace`), else `None`.
    fn tracer(&self) -> Option<&'static proxy_core::base::trace::Tracer> {
        self.args
            .trace
            .as_ref()
            .and_then(|_| crate::trace::tracer().ok())
    }

    /// The allocation-free steady state, measured from outside: runs `warmup` executions of
    /// `size` (out of place, execution mode: one network and one barrier task per rank per
    /// execution), then calls `arm(true)`, runs `iters` more, calls `arm(false)`, and returns
    /// the wrong elements of a checked execution after them. A caller's counting allocator
    /// that counts while armed sees what the steady state allocates, on every thread. With the
    /// caller driver the calls happen on rank 0's thread while every rank thread is between
    /// executions.
    ///
    /// # Errors
    /// A message when planning, the proxy or a device fails.
    pub fn count_steady_state(
        &mut self,
        size: u64,
        warmup: u32,
        iters: u32,
        arm: &(dyn Fn(bool) + Sync),
    ) -> Result<u64, String> {
        let mut mems = self.buffers(size)?;
        let prep = self.prepare(&mut mems, size, false)?;
        self.fill_inputs(&prep);
        let r = if self.modes.driver == DriverArg::Caller {
            self.run_execs_caller(&prep, iters, 1, warmup, Some(arm))
                .map(|_| ())
        } else {
            self.run_execs(&prep, warmup, 1).and_then(|_| {
                arm(true);
                let r = self.run_execs(&prep, iters, 1);
                arm(false);
                r.map(|_| ())
            })
        };
        let wrong = r.and_then(|()| {
            self.poison_outputs(&prep);
            self.execute(&prep, 1)?;
            Ok(self.wrong(&prep))
        });
        self.retired.push(mems);
        wrong
    }

    /// Every local rank's buffers for `size` (out of place and in place).
    pub(super) fn buffers(&self, size: u64) -> Result<Vec<RankMem>, String> {
        self.local
            .iter()
            .map(|&r| {
                let po = self.plan(size, r, false)?;
                let pi = self.plan(size, r, true)?;
                let lo = po.layout;
                Ok(RankMem {
                    input: alloc_bytes(lo.input_bytes),
                    output: alloc_bytes(lo.output_bytes),
                    shared: alloc_bytes(pi.layout.shared_bytes()),
                    scratch: alloc_bytes(lo.scratch_bytes.max(pi.layout.scratch_bytes)),
                })
            })
            .collect()
    }

    /// Measures one size (out of place, then in place).
    ///
    /// # Errors
    /// A message when planning, the proxy or a device fails.
    pub fn row(&mut self, size: u64) -> Result<Row, String> {
        if let Some(e) = &self.failed {
            return Err(format!("an earlier execution failed: {e}"));
        }
        let n = self.args.ranks;
        let probe = self.plan(size, 0, false)?;
        let mut mems = self.buffers(size)?;
        // In place runs the count out of place chose (calibrated or `-n`).
        let oop = self.measure(&mut mems, size, false, self.args.fixed_iters());
        let ip = match &oop {
            Ok(m) => Some(self.measure(&mut mems, size, true, Some(m.iters))),
            Err(_) => None,
        };
        if self.peers.is_some() || self.failed.is_some() {
            // The transport may hold registrations of these buffers until it closes; after a
            // failure, tasks still in flight may use them until the engine is dropped.
            self.retired.push(mems);
        }
        let (oop, ip) = (oop?, ip.expect("measured when oop is ok")?);
        let (i, o) = probe.params.collective.buffer_elems(probe.params.count, n);
        Ok(Row {
            size: i.max(o) * probe.params.dtype.size() as u64,
            count: probe.params.count,
            algorithm: probe.params.algorithm.name(),
            oop,
            ip,
        })
    }
}

impl Counts {
    const WORDS: usize = 9;

    pub(super) fn encode(&self) -> Vec<u8> {
        [
            self.elapsed_ns,
            self.timed_starts,
            self.execs,
            self.bytes,
            self.wrong.unwrap_or(u64::MAX),
            self.recv_bytes_per_exec,
            self.filed_blocks,
            self.pool.map_or(u64::MAX, |p| p.0),
            self.pool.map_or(u64::MAX, |p| p.1),
        ]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect()
    }

    pub(super) fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != 8 * Self::WORDS {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        Some(Self {
            elapsed_ns: w(0),
            timed_starts: w(1),
            execs: w(2),
            bytes: w(3),
            wrong: (w(4) != u64::MAX).then(|| w(4)),
            recv_bytes_per_exec: w(5),
            filed_blocks: w(6),
            pool: (w(7) != u64::MAX).then(|| (w(7), w(8))),
        })
    }

    /// All-gathers `mine` over `peers` and combines every process's counts.
    pub(super) fn combine(peers: &SharedBootstrap, mine: &Self) -> Result<Self, String> {
        let all = peers
            .lock()
            .all_gather(&mine.encode())
            .map_err(|e| format!("combining the results of the processes: {e}"))?;
        let mut total = Self {
            elapsed_ns: 0,
            timed_starts: 0,
            execs: 0,
            bytes: 0,
            wrong: None,
            recv_bytes_per_exec: 0,
            filed_blocks: 0,
            pool: Some((0, 0)),
        };
        for (r, b) in all.iter().enumerate() {
            let c = Self::decode(b)
                .ok_or_else(|| format!("rank {r} sent malformed results ({} bytes)", b.len()))?;
            total.elapsed_ns = total.elapsed_ns.max(c.elapsed_ns);
            total.timed_starts += c.timed_starts;
            total.execs += c.execs;
            total.bytes += c.bytes;
            if let Some(w) = c.wrong {
                *total.wrong.get_or_insert(0) += w;
            }
            total.recv_bytes_per_exec += c.recv_bytes_per_exec;
            total.filed_blocks += c.filed_blocks;
            total.pool = match (total.pool, c.pool) {
                (Some(t), Some(p)) => Some((t.0 + p.0, t.1 + p.1)),
                _ => None,
            };
        }
        Ok(total)
    }
}

/// The key under which the tasks and device jobs of `prep`'s executions with `reps` program
/// executions are kept for re-arming.
pub(super) fn shape_key(prep: &Prepared, reps: u32) -> u64 {
    (u64::from(prep.generation) << 32) | u64::from(reps)
}

/// Switches `t` on with a mark (recording windows are numbered from 1).
fn start_window(t: &proxy_core::base::trace::Tracer) {
    static WINDOWS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    t.mark(WINDOWS.fetch_add(1, Ordering::Relaxed));
    t.set_on(true);
}
