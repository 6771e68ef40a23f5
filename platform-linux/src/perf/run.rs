//! The measurement: ranks, buffers, host words, device emulators and the proxy engine; per
//! size, warm-up, timed iterations and checked runs, out of place and in place.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use proxy_core::comm::{Comm, CommConfig};
use proxy_core::mem_transport::MemFabric;
use proxy_core::planner::data::{count_wrong, fill_input, POISON};
use proxy_core::planner::{plan, Addresses, Collective, Fifos, PlanParams, RankPlan};

use super::args::{Args, EngineArg};
use super::engine::{seam_starts, DirectEngine, DriverEngine, Engine, Execution};
use crate::emulator::{DeviceThread, Fault, Job, WaitPolicy};
use crate::hostmem::{HostMem, HostMemCallbacks, LINE};
use crate::Config;

/// Block id every collective call uses (one block per call).
pub const BLOCK: u32 = 1;
/// Bytes between host words (each alone on a host-memory line).
const WORD_STRIDE: u64 = LINE as u64;
/// Trigger-word sets per rank (executions in flight at once).
const TRIGGER_SETS: usize = 2;
/// Host-memory lines of the fixed words: per set a network and a barrier trigger word, then
/// the barrier-done semaphore.
const FIXED_LINES: usize = 2 * TRIGGER_SETS + 1;

/// One side (out of place or in place) of a row.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Measure {
    /// Time per iteration in µs.
    pub time_us: f64,
    /// Bytes / time in GB/s (1e9).
    pub algbw: f64,
    /// algbw × the collective's factor.
    pub busbw: f64,
    /// Wrong elements over every rank and checked run; `None` without checks.
    pub wrong: Option<u64>,
    /// Seam `start` calls during the timed iterations (all ranks).
    pub timed_starts: u64,
    /// Program executions the devices ran during the timed iterations (all ranks).
    pub timed_device_execs: u64,
    /// Bytes the devices saw received during the timed iterations (all ranks).
    pub timed_recv_bytes: u64,
    /// Bytes all ranks receive in one execution of the block.
    pub recv_bytes_per_exec: u64,
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Bytes of the larger buffer.
    pub size: u64,
    /// Elements of the larger buffer.
    pub count: u64,
    /// The algorithm used.
    pub algorithm: &'static str,
    /// Out of place.
    pub oop: Measure,
    /// In place.
    pub ip: Measure,
}

/// Page-aligned-enough backing store (u64 words; the kernels need element alignment only).
fn alloc_bytes(bytes: u64) -> Vec<u64> {
    vec![u64::from_ne_bytes([POISON; 8]); (bytes as usize).div_ceil(8) + 1]
}

fn ptr(v: &mut [u64]) -> u64 {
    v.as_mut_ptr() as usize as u64
}

/// A rank's buffers for one size: out-of-place input/output, the in-place shared buffer and
/// scratch.
struct RankMem {
    input: Vec<u64>,
    output: Vec<u64>,
    shared: Vec<u64>,
    scratch: Vec<u64>,
}

/// Per rank: its host-memory region: the fixed words (trigger words of the network and barrier
/// tasks, barrier-done) on lines 0..3, then the plan's host words, one per line.
struct FixedWords {
    mem: Arc<HostMem>,
}

impl FixedWords {
    fn addr(&self, line: usize) -> u64 {
        self.mem.base_addr() + (line * LINE) as u64
    }
    fn plan_words(&self) -> u64 {
        self.addr(FIXED_LINES)
    }
    fn net_trigger(&self, set: usize) -> u64 {
        self.addr(2 * set)
    }
    fn barrier_trigger(&self, set: usize) -> u64 {
        self.addr(2 * set + 1)
    }
    fn barrier_done(&self) -> u64 {
        self.addr(2 * TRIGGER_SETS)
    }
}

/// Everything of one run.
pub struct World {
    args: Args,
    /// (worker spin, device/producer spins) in use, for the header.
    spin: (std::time::Duration, u32),
    collective: Collective,
    engine: Box<dyn Engine>,
    devices: Vec<DeviceThread>,
    fixed: Vec<FixedWords>,
    next_exec: u32,
}

/// One measured mode's plans and placements.
struct Prepared {
    plans: Vec<Arc<RankPlan>>,
    addrs: Vec<Addresses>,
    fifos: Vec<Fifos>,
}

impl World {
    /// Sets up `args.ranks` ranks on the in-process transport.
    ///
    /// # Errors
    /// A message when a comm, thread or the transport cannot be set up.
    pub fn new(args: &Args) -> Result<Self, String> {
        let n = args.ranks;
        let mut cfg = Config::from_env().map_err(|e| e.to_string())?;
        if let Some(rpp) = args.ranks_per_proxy {
            cfg.ranks_per_network_proxy = rpp;
        }
        let oversubscribed = oversubscribed(n, cfg.ranks_per_network_proxy);
        if oversubscribed && std::env::var_os("NEURON_RT_PROXY_SPIN_US").is_none() {
            // More threads than cores: a spinning worker only keeps the thread it waits for
            // off the core. Yield at once unless the user asked otherwise.
            cfg.spin = std::time::Duration::ZERO;
        }
        let fabric = MemFabric::new(n).map_err(|e| format!("mem transport: {e}"))?;
        // Plan words: 6 per op, at most 2(n − 1) ops (ring all-reduce).
        let lines = FIXED_LINES + 12 * n as usize + 6;
        let mut fixed = Vec::new();
        let mut comms = Vec::new();
        for r in 0..n {
            let t = fabric
                .endpoint(r)
                .map_err(|e| format!("mem transport endpoint {r}: {e}"))?;
            let mem = Arc::new(HostMem::new(lines).map_err(|e| format!("host memory: {e}"))?);
            let mut c = Comm::new(
                CommConfig::new(r, n, 1),
                Box::new(t),
                Arc::new(HostMemCallbacks::new(mem.clone())),
                Arc::new(crate::perf::MonotonicClock),
            )
            .map_err(|e| format!("comm {r}: {e}"))?;
            // SAFETY: the tool owns every buffer and word it hands to `start`, and keeps them
            // alive until the executions that use them are complete.
            unsafe { c.trust_all_addresses() };
            comms.push(c);
            fixed.push(FixedWords { mem });
        }
        let wait = wait_policy_from_env(oversubscribed);
        let cpus = rank_cpus(n, args.pin);
        let engine: Box<dyn Engine> = match args.engine {
            EngineArg::Driver => Box::new(DriverEngine::new(comms, &cfg, wait)?),
            EngineArg::Direct => {
                Box::new(DirectEngine::new(comms, wait, &cpus).map_err(|e| format!("engine: {e}"))?)
            }
        };
        let mut devices = Vec::new();
        for r in 0..n {
            let fault = (args.fault_inject && r == n - 1).then_some(Fault { entry: None });
            devices.push(
                DeviceThread::spawn(r, fault, wait, cpus[r as usize])
                    .map_err(|e| format!("device: {e}"))?,
            );
        }
        Ok(Self {
            args: args.clone(),
            collective: args.collective.into(),
            spin: (cfg.spin, wait.spins),
            engine,
            devices,
            fixed,
            next_exec: 0,
        })
    }

    /// What runs the proxy (for the header).
    pub fn engine_name(&self) -> String {
        format!(
            "{}; worker spin {} us, device spins {}",
            self.engine.describe(),
            self.spin.0.as_micros(),
            self.spin.1
        )
    }

    fn params(&self, size: u64, rank: u32, in_place: bool) -> PlanParams {
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
        p.op = a.op;
        p.root = a.root;
        p.chunk_bytes = a.chunk;
        p.in_place = in_place;
        p
    }

    /// Arms trigger set `set` and submits one execution (`reps` program executions, block
    /// schedule `[BLOCK; reps]`) for every rank.
    fn submit(&mut self, prep: &Prepared, reps: u32, set: usize) -> Result<(), String> {
        let n = self.args.ranks as usize;
        let done_words: Vec<u64> = self.fixed.iter().map(FixedWords::barrier_done).collect();
        self.next_exec = self.next_exec.wrapping_add(1);
        for r in 0..n {
            let f = &self.fixed[r];
            // Arm the triggers before the tasks are submitted (DESIGN.md §4).
            for t in [f.net_trigger(set), f.barrier_trigger(set)] {
                // SAFETY: a live word of the rank's host memory.
                unsafe { &*(t as usize as *const AtomicU32) }.store(0xFFFF_FFFF, Ordering::Release);
            }
            let blocks = if prep.plans[r].ops.is_empty() {
                Vec::new()
            } else {
                vec![(0, BLOCK, prep.fifos[r].clone())]
            };
            let exec = Execution {
                id: self.next_exec,
                blocks,
                schedule: vec![BLOCK; reps as usize],
                net_triggers: vec![f.net_trigger(set)],
                barrier_triggers: vec![f.barrier_trigger(set)],
                barrier_done: if r == 0 {
                    done_words.clone()
                } else {
                    Vec::new()
                },
                leader: r == 0,
            };
            // SAFETY: the buffers and words live in `self` / the caller's RankMem until the
            // execution has been waited for (`complete`, always called before they go).
            unsafe { self.engine.submit(r as u32, exec) }?;
        }
        Ok(())
    }

    /// Launches every device on the oldest submitted execution (trigger set `set`) and waits
    /// for the devices and for the execution's task records.
    fn complete(&mut self, prep: &Prepared, reps: u32, set: usize) -> Result<(), String> {
        let n = self.args.ranks as usize;
        for r in 0..n {
            let f = &self.fixed[r];
            let job = Job {
                plan: prep.plans[r].clone(),
                addrs: prep.addrs[r],
                reps,
                net_triggers: vec![f.net_trigger(set)],
                barrier_triggers: vec![f.barrier_trigger(set)],
                barrier_done: Some(f.barrier_done()),
            };
            // SAFETY: as in `submit`.
            unsafe { self.devices[r].launch(job) };
        }
        let mut first_err = None;
        for r in 0..n {
            if let Err(e) = self.devices[r].wait() {
                first_err.get_or_insert(e.to_string());
            }
            if let Err(e) = self.engine.wait(r as u32) {
                first_err.get_or_insert(format!("rank {r}: {e}"));
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Runs `count` executions of `reps` program executions each. With an engine that takes
    /// two executions in flight, execution `i + 1` is submitted before execution `i` is
    /// launched on the devices (alternating trigger sets), as a runtime enqueues proxy tasks
    /// ahead of the device: the worker never goes quiescent between iterations.
    fn run_execs(&mut self, prep: &Prepared, count: u32, reps: u32) -> Result<(), String> {
        let depth = self.engine.max_in_flight().clamp(1, TRIGGER_SETS) as u32;
        let mut submitted = 0;
        while submitted < count.min(depth) {
            self.submit(prep, reps, submitted as usize % TRIGGER_SETS)?;
            submitted += 1;
        }
        for i in 0..count {
            let r = self.complete(prep, reps, i as usize % TRIGGER_SETS);
            if r.is_err() {
                // Drain what is still in flight before reporting (its memory must not go).
                for j in i + 1..submitted {
                    let _ = self.complete(prep, reps, j as usize % TRIGGER_SETS);
                }
                return r;
            }
            if submitted < count {
                self.submit(prep, reps, submitted as usize % TRIGGER_SETS)?;
                submitted += 1;
            }
        }
        Ok(())
    }

    /// Runs one execution (`reps` program executions) on every rank.
    fn execute(&mut self, prep: &Prepared, reps: u32) -> Result<(), String> {
        self.run_execs(prep, 1, reps)
    }

    fn prepare(&self, mems: &mut [RankMem], size: u64, in_place: bool) -> Result<Prepared, String> {
        let mut prep = Prepared {
            plans: Vec::new(),
            addrs: Vec::new(),
            fifos: Vec::new(),
        };
        for (r, m) in mems.iter_mut().enumerate() {
            let p = plan(&self.params(size, r as u32, in_place)).map_err(|e| e.to_string())?;
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
            prep.fifos.push(p.fifos(&a));
            prep.addrs.push(a);
            prep.plans.push(Arc::new(p));
        }
        Ok(prep)
    }

    fn fill_inputs(&self, prep: &Prepared) {
        for (r, p) in prep.plans.iter().enumerate() {
            // SAFETY: the input range lies in the rank's live buffer; nothing runs now.
            let input = unsafe {
                std::slice::from_raw_parts_mut(
                    prep.addrs[r].input as usize as *mut u8,
                    p.layout.input_bytes as usize,
                )
            };
            fill_input(&p.params, r as u32, input);
        }
    }

    fn poison_outputs(&self, prep: &Prepared) {
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

    fn wrong(&self, prep: &Prepared) -> u64 {
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
                count_wrong(&p.params, r as u32, out)
            })
            .sum()
    }

    fn measure(
        &mut self,
        mems: &mut [RankMem],
        size: u64,
        in_place: bool,
    ) -> Result<Measure, String> {
        let prep = self.prepare(mems, size, in_place)?;
        let (iters, warmup, checks) = (self.args.iters.max(1), self.args.warmup, self.args.check);
        self.fill_inputs(&prep);
        if self.args.loop_mode {
            if warmup > 0 {
                self.execute(&prep, warmup)?;
            }
        } else {
            self.run_execs(&prep, warmup, 1)?;
        }
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
        let t0 = Instant::now();
        if self.args.loop_mode {
            self.execute(&prep, iters)?;
        } else {
            self.run_execs(&prep, iters, 1)?;
        }
        let elapsed = t0.elapsed();
        let timed_starts = seam_starts() - starts0;
        let (mut execs, mut bytes) = (0, 0);
        for (d, (e0, b0)) in self.devices.iter().zip(stats0) {
            let s = d.stats();
            execs += s.executions.load(Ordering::Relaxed) - e0;
            bytes += s.recv_bytes.load(Ordering::Relaxed) - b0;
        }
        let mut wrong = None;
        for _ in 0..checks {
            self.poison_outputs(&prep);
            if in_place {
                self.fill_inputs(&prep);
            }
            self.execute(&prep, 1)?;
            *wrong.get_or_insert(0) += self.wrong(&prep);
        }
        let time = elapsed.as_secs_f64() / f64::from(iters);
        let bytes_moved = size_of_row(&prep) as f64;
        let algbw = if time > 0.0 {
            bytes_moved / time / 1e9
        } else {
            0.0
        };
        Ok(Measure {
            time_us: time * 1e6,
            algbw,
            busbw: algbw * self.collective.busbw_factor(self.args.ranks),
            wrong,
            timed_starts,
            timed_device_execs: execs,
            timed_recv_bytes: bytes,
            recv_bytes_per_exec: prep
                .plans
                .iter()
                .map(|p| p.dst.iter().map(|e| e.bytes).sum::<u64>())
                .sum(),
        })
    }

    /// Measures one size (out of place, then in place).
    ///
    /// # Errors
    /// A message when planning, the proxy or a device fails.
    pub fn row(&mut self, size: u64) -> Result<Row, String> {
        let n = self.args.ranks;
        let probe = plan(&self.params(size, 0, false)).map_err(|e| e.to_string())?;
        let mut mems: Vec<RankMem> = (0..n)
            .map(|r| {
                let po = plan(&self.params(size, r, false)).expect("planned above");
                let pi = plan(&self.params(size, r, true)).expect("planned above");
                let lo = po.layout;
                RankMem {
                    input: alloc_bytes(lo.input_bytes),
                    output: alloc_bytes(lo.output_bytes),
                    shared: alloc_bytes(pi.layout.shared_bytes()),
                    scratch: alloc_bytes(lo.scratch_bytes.max(pi.layout.scratch_bytes)),
                }
            })
            .collect();
        let oop = self.measure(&mut mems, size, false)?;
        let ip = self.measure(&mut mems, size, true)?;
        let (i, o) = probe.params.collective.buffer_elems(probe.params.count, n);
        Ok(Row {
            size: i.max(o) * probe.params.dtype.size() as u64,
            count: i.max(o),
            algorithm: probe.params.algorithm.name(),
            oop,
            ip,
        })
    }
}

fn size_of_row(prep: &Prepared) -> u64 {
    let l = prep.plans[0].layout;
    l.input_bytes.max(l.output_bytes)
}

/// `true` when the tool's busy threads (a device per rank, a worker per group, the producer)
/// outnumber the CPUs: then every wait should yield at once instead of spinning.
pub fn oversubscribed(ranks: u32, ranks_per_proxy: u32) -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = ranks as usize + ranks.div_ceil(ranks_per_proxy.max(1)) as usize + 1;
    threads > cpus
}

/// The wait policy of every waiting thread of the tool: [`WaitPolicy::default`] (no spins
/// when `oversubscribed`), with `PROXY_PERF_SPINS` / `PROXY_PERF_YIELDS` / `PROXY_PERF_NAP_US`
/// overriding its fields (tuning experiments; unset in normal use).
pub fn wait_policy_from_env(oversubscribed: bool) -> WaitPolicy {
    let get = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
    let mut w = WaitPolicy::default();
    if oversubscribed {
        w.spins = 0;
    }
    if let Some(v) = get("PROXY_PERF_SPINS") {
        w.spins = v;
    }
    if let Some(v) = get("PROXY_PERF_YIELDS") {
        w.yields = v;
    }
    if let Some(v) = get("PROXY_PERF_NAP_US") {
        w.nap = std::time::Duration::from_micros(u64::from(v));
    }
    w
}

/// With `pin`, rank `r`'s device and proxy thread share CPU `r mod ncpus` (the pairs that hand
/// off most often then switch on one core instead of waiting for a remote one to be scheduled).
pub fn rank_cpus(n: u32, pin: bool) -> Vec<Option<usize>> {
    let ids = if pin {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    (0..n as usize)
        .map(|r| (!ids.is_empty()).then(|| ids[r % ids.len()].id))
        .collect()
}
