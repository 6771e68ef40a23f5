//! The measurement: ranks, buffers, host words, device emulators and the proxy engine; per
//! size, warm-up, timed iterations and checked runs, out of place and in place.
//!
//! A [`World`] runs the *local* ranks of the comm: every rank with the in-process transport
//! ([`World::new`]), or the one rank of this process when ranks are processes over libfabric
//! ([`World::join`]); then the processes combine their wrong counts and timings with a
//! bootstrap all-gather after each measurement, so every process reports the same row.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proxy_abi::{
    NccomCommConfig, NccomDeviceCallbacks, NccomHostWord, NccomLibfabricDesc, NccomTransportDesc,
    NCCOM_TRANSPORT_MEM,
};
use proxy_collectives::planner::data::{count_wrong, fill_input, POISON};
use proxy_collectives::planner::{
    plan_blocks, Addresses, BlockPlans, Collective, Fifos, NecOptions, PlanParams,
};
use proxy_core::base::status::NrtStatus;
use proxy_core::driver::trigger::TRIGGER_ARMED;
use proxy_core::progress::comm::{Comm, CommConfig};
use proxy_core::progress::fault::{FaultPlan, FaultTransport, PPM};
use proxy_core::progress::mem_transport::MemFabric;
use proxy_core::progress::net::{NetError, Posted, RequestId, TestOutcome, Transport};
use proxy_core::progress::stats::ProtocolStats;

use super::args::{Args, DeviceArg, DriverArg, FaultArg};
use super::engine::{
    counting_loaded_seam, seam_starts, DriverEngine, DriverRank, Engine, EngineBarrier, EngineComm,
    Execution,
};
use proxy_bootstrap::SharedBootstrap;
use proxy_collectives::interpreter::JobBlock;
use proxy_core::base::abort::AbortHandle;
use proxy_core::base::time::{Clock, MonotonicClock};
use proxy_core::driver::queue::DriveMode;
use proxy_core::driver::wake::{ThreadPark, Waiter};
use proxy_emulator::{DeviceError, DeviceThread, Fault, Job, PolledDevice, WaitPolicy};
use proxy_runtime::hostmem::{HostMem, HostMemCallbacks, LINE};
use proxy_runtime::loader::ProgressLib;
use proxy_runtime::Config;

/// Bytes between host words (each alone on a host-memory line).
const WORD_STRIDE: u64 = LINE as u64;
/// Trigger-word sets per rank (executions in flight at once).
const TRIGGER_SETS: usize = 2;
/// Network trigger words per set: one per stream, as the seed's
/// `start_proxy_task_host_mem_addrs` (at most four per task).
const NET_TRIGGERS: usize = proxy_core::base::desc::NUM_STREAMS;
/// Host-memory lines of the fixed words: per set a network trigger word per stream and a
/// barrier trigger word, then the barrier-done semaphore.
const FIXED_LINES: usize = (NET_TRIGGERS + 1) * TRIGGER_SETS + 1;

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
    /// (stream, block) parts filed per execution, summed over the ranks (each is one `start`
    /// at the network task's INIT).
    pub filed_blocks: u64,
    /// Ops in the in-process comms' op pools (summed over ranks) after the warm-up and after
    /// the checked runs: equal when recycled ops are filed again instead of new ones taken;
    /// `None` with a loaded progress half.
    pub pool_ops: Option<(u64, u64)>,
}

/// One rank's protocol counters after a run (`--stats`, `--json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankProtocol {
    /// Global rank.
    pub rank: u32,
    /// The comm's counters since it was created, or why they could not be read (a loaded
    /// library older than C ABI 1.2 answers `NRT_FAILURE`).
    pub stats: Result<ProtocolStats, String>,
}

impl RankProtocol {
    /// Words of one rank in the all-gather between processes.
    const WORDS: usize = 10;

    fn encode(&self, out: &mut Vec<u8>) {
        let s = self.stats.clone().unwrap_or_default();
        let words = [
            u64::from(self.rank),
            u64::from(self.stats.is_ok()),
            s.starts,
            s.block_switches,
            s.early_send_completions,
            s.recvs_posted_ahead,
            s.max_recv_ahead,
            s.index_wraps,
            s.peak_outstanding_send,
            s.peak_outstanding_recv,
        ];
        out.extend(words.iter().flat_map(|w| w.to_le_bytes()));
    }

    fn decode(b: &[u8]) -> Option<Vec<Self>> {
        if !b.len().is_multiple_of(8 * Self::WORDS) {
            return None;
        }
        let w = |c: &[u8], i: usize| {
            u64::from_le_bytes(c[8 * i..8 * i + 8].try_into().expect("8 bytes"))
        };
        b.chunks(8 * Self::WORDS)
            .map(|c| {
                let stats = (w(c, 1) == 1)
                    .then(|| ProtocolStats {
                        starts: w(c, 2),
                        block_switches: w(c, 3),
                        early_send_completions: w(c, 4),
                        recvs_posted_ahead: w(c, 5),
                        max_recv_ahead: w(c, 6),
                        index_wraps: w(c, 7),
                        peak_outstanding_send: w(c, 8),
                        peak_outstanding_recv: w(c, 9),
                        ..ProtocolStats::new()
                    })
                    .ok_or_else(|| "not readable in its process".to_string());
                Some(Self {
                    rank: u32::try_from(w(c, 0)).ok()?,
                    stats,
                })
            })
            .collect()
    }
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Bytes of the larger buffer (nccl-tests' `size`).
    pub size: u64,
    /// Elements per rank as nccl-tests prints them (its `paramcount`): of the whole buffer for
    /// all-reduce, broadcast and send-recv; of one rank's block (`size / type size / nranks`)
    /// for all-gather, reduce-scatter and all-to-all.
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

/// Per rank: its host-memory region: the fixed words (per trigger set a network trigger word
/// per stream and a barrier trigger word, then barrier-done) on lines `0..FIXED_LINES`, then
/// the plan's host words, one per line.
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
    fn net_trigger(&self, set: usize, stream: usize) -> u64 {
        self.addr((NET_TRIGGERS + 1) * set + stream)
    }
    /// The network trigger words of set `set`: one per stream that has a part (stream 0's
    /// when none has: the task still waits for its device).
    fn net_triggers(&self, set: usize, plans: &BlockPlans) -> Vec<u64> {
        let streams = plans.streams();
        if streams.is_empty() {
            return vec![self.net_trigger(set, 0)];
        }
        streams
            .iter()
            .map(|&s| self.net_trigger(set, s as usize))
            .collect()
    }
    fn barrier_trigger(&self, set: usize) -> u64 {
        self.addr((NET_TRIGGERS + 1) * set + NET_TRIGGERS)
    }
    fn barrier_done(&self) -> u64 {
        self.addr((NET_TRIGGERS + 1) * TRIGGER_SETS)
    }
}

/// Everything of one run.
///
/// Vectors indexed "by local index" hold one entry per rank of [`World::local`] order.
pub struct World {
    args: Args,
    /// (worker spin, device/producer spins) in use, for the header.
    spin: (std::time::Duration, u32),
    collective: Collective,
    /// The global ranks this process runs, ascending (every rank with the in-process
    /// transport; one with libfabric).
    local: Vec<u32>,
    /// Set when the ranks are spread over processes: results are combined through it.
    peers: Option<SharedBootstrap>,
    /// The transport, for the header (`mem`, `libfabric (provider tcp;ofi_rxm)`).
    transport: String,
    /// Where the progress half comes from, for the header.
    progress_half: String,
    /// Who drives the proxy queues and how the devices run (resolved: flags, else the static
    /// rule of [`default_modes`]).
    modes: Modes,
    /// No-progress limit of the tasks; in caller mode also each execution's drive deadline.
    exec_timeout: Option<Duration>,
    /// Dropped before the buffers below: the comms (and their transports' registrations) go
    /// first.
    engine: DriverEngine,
    devices: Vec<RankDevice>,
    /// By local index.
    fixed: Vec<FixedWords>,
    next_exec: u32,
    /// `prepare` calls so far (the generation of the next [`Prepared`]).
    preparations: u32,
    /// Every local rank's barrier-done semaphore, by local index (the leader raises them all).
    done_words: Vec<u64>,
    /// The first failure: the world runs nothing after it (tasks may still be in flight).
    failed: Option<String>,
    /// Buffers kept until the engine is gone: of earlier rows when a transport may have
    /// registered them (libfabric's registration cache does not watch the address space), and
    /// of a failed row (tasks may still use them).
    retired: Vec<Vec<RankMem>>,
    /// `--inject stall-rank`: set to let the stalled driving thread go on.
    stall_release: Arc<AtomicBool>,
}

/// The driver and device modes of a run (`--driver`, `--device`), and the thread counts the rule
/// weighed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modes {
    /// Who drives the proxy queues.
    pub driver: DriverArg,
    /// How the device emulators run.
    pub device: DeviceArg,
    /// `true` when neither flag chose: [`default_modes`] did.
    pub by_rule: bool,
    /// Busy threads on this host in worker mode (every process of the run on this host).
    pub thread_mode_threads: usize,
    /// Busy threads on this host in caller + polled mode.
    pub caller_mode_threads: usize,
    /// CPUs this process may use.
    pub cpus: usize,
}

impl Modes {
    /// For the header, e.g. `driver caller, device polled (rule: worker mode needs 5 busy
    /// threads, caller mode 2, 2 CPUs)`.
    pub fn describe(&self) -> String {
        let name = |d: DriverArg| match d {
            DriverArg::Thread => "thread",
            DriverArg::Caller => "caller",
        };
        let dev = match self.device {
            DeviceArg::Thread => "thread",
            DeviceArg::Polled => "polled",
        };
        let why = if self.by_rule {
            format!(
                " (rule: worker mode needs {} busy threads, caller mode {}, {} CPUs)",
                self.thread_mode_threads, self.caller_mode_threads, self.cpus
            )
        } else {
            " (flags)".into()
        };
        format!("driver {}, device {dev}{why}", name(self.driver))
    }
}

fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The static rule for the modes when no flag chooses, from the busy threads each needs on this
/// host (`procs` processes of the run here, `local` ranks each): worker mode needs per process
/// a device thread per rank, a worker per group (`thread_groups`) and the producer; caller +
/// polled mode one thread per group (`caller_groups`).
///
/// 1. Worker mode when its threads fit on the CPUs (the seed's shape).
/// 2. Else caller + polled when its threads fit.
/// 3. Else worker mode: oversubscribed either way, and spinning callers then degrade more
///    (measured here, 8 B all-reduce over libfabric with 4 processes on 2 CPUs: 53–110 µs in
///    worker mode against 153–222 µs caller + polled; BENCHMARKS.md).
///
/// A flag given alone fixes its half; `--device polled` implies `--driver caller`.
///
/// # Errors
/// `--driver thread --device polled` (a polled device needs the driving thread's hook).
pub fn default_modes(
    driver: Option<DriverArg>,
    device: Option<DeviceArg>,
    procs: u32,
    local: u32,
    thread_groups: u32,
    caller_groups: u32,
) -> Result<Modes, String> {
    let cpus = available_cpus();
    let procs = procs.max(1) as usize;
    let thread_mode_threads = procs * (local as usize + thread_groups as usize + 1);
    let caller_mode_threads = procs * caller_groups as usize;
    let worker_fits = thread_mode_threads <= cpus;
    let caller = !worker_fits && caller_mode_threads <= cpus;
    let by_rule = driver.is_none() && device.is_none();
    let (driver, device) = match (driver, device) {
        (Some(DriverArg::Thread), Some(DeviceArg::Polled)) => {
            return Err(
                "--device polled runs from the driving thread's hook: it needs --driver caller"
                    .into(),
            )
        }
        (Some(d), Some(v)) => (d, v),
        (Some(DriverArg::Thread), None) => (DriverArg::Thread, DeviceArg::Thread),
        (Some(DriverArg::Caller), None) => (DriverArg::Caller, DeviceArg::Polled),
        (None, Some(DeviceArg::Polled)) => (DriverArg::Caller, DeviceArg::Polled),
        (None, Some(DeviceArg::Thread)) => (
            if caller {
                DriverArg::Caller
            } else {
                DriverArg::Thread
            },
            DeviceArg::Thread,
        ),
        (None, None) if caller => (DriverArg::Caller, DeviceArg::Polled),
        (None, None) => (DriverArg::Thread, DeviceArg::Thread),
    };
    Ok(Modes {
        driver,
        device,
        by_rule,
        thread_mode_threads,
        caller_mode_threads,
        cpus,
    })
}

/// The wait policy and proxy configuration of a run with `ranks` ranks (`procs` processes),
/// its modes, and whether the machine is oversubscribed.
fn run_config(
    args: &Args,
    ranks: u32,
    procs: u32,
) -> Result<(Config, WaitPolicy, bool, Modes), String> {
    let mut cfg = Config::from_env().map_err(|e| e.to_string())?;
    if let Some(rpp) = args.ranks_per_proxy {
        cfg.ranks_per_network_proxy = rpp;
    }
    let procs = procs.clamp(1, ranks.max(1));
    let local = ranks.div_ceil(procs);
    let groups = local.div_ceil(cfg.ranks_per_network_proxy.max(1));
    // Caller mode groups the local ranks so its threads fit, unless the user chose.
    let chosen = args.ranks_per_proxy.is_some()
        || std::env::var_os("NEURON_RT_RANKS_PER_NETWORK_PROXY").is_some();
    let caller_rpp = if chosen {
        cfg.ranks_per_network_proxy.max(1)
    } else {
        (local as usize).div_ceil(available_cpus()).max(1) as u32
    };
    let modes = default_modes(
        args.driver,
        args.device,
        procs,
        local,
        groups,
        local.div_ceil(caller_rpp),
    )?;
    cfg.drive_mode = match modes.driver {
        DriverArg::Thread => DriveMode::Thread,
        DriverArg::Caller => DriveMode::Caller,
    };
    // Caller mode runs one thread per proxy group: unless the user chose the grouping, group
    // the local ranks so that the threads fit on the CPUs (4 ranks on 2 CPUs: 2 per group).
    if modes.driver == DriverArg::Caller {
        cfg.ranks_per_network_proxy = caller_rpp;
    }
    let oversubscribed = match modes.driver {
        DriverArg::Thread => oversubscribed_procs(ranks, cfg.ranks_per_network_proxy, procs),
        // One thread per group on every process here (plus a device thread per rank with
        // `--device thread`).
        DriverArg::Caller => {
            let devices = if modes.device == DeviceArg::Thread {
                procs as usize * local as usize
            } else {
                0
            };
            let groups =
                procs as usize * local.div_ceil(cfg.ranks_per_network_proxy.max(1)) as usize;
            groups + devices > available_cpus()
        }
    };
    if oversubscribed && std::env::var_os("NEURON_RT_PROXY_SPIN_US").is_none() {
        // More threads than cores: a spinning worker only keeps the thread it waits for
        // off the core. Yield at once unless the user asked otherwise.
        cfg.spin = std::time::Duration::ZERO;
    }
    Ok((
        cfg,
        wait_policy_from_env(oversubscribed),
        oversubscribed,
        modes,
    ))
}

/// Host-memory lines per rank: the fixed words, then per (stream, block) part 6 plan words per
/// op, at most 2(n − 1) ops (ring all-reduce) and a margin.
fn host_lines(n: u32, streams: u32, blocks: u32) -> usize {
    FIXED_LINES + (streams as usize * blocks as usize) * (12 * n as usize + 6)
}

/// `nec_inc_semaphore` for comms of a loaded progress half: the words are the tool's own host
/// memory.
///
/// # Safety
/// `addr` must be a live, aligned host word accessed only atomically.
unsafe extern "C" fn perf_inc_semaphore(addr: *mut NccomHostWord, val: u32) {
    // SAFETY: the caller's contract (the library passes the semaphore addresses the tool's
    // FIFOs gave it: words of a live HostMem).
    unsafe { AtomicU32::from_ptr(addr) }.fetch_add(val, Ordering::Release);
}

/// Callbacks handed to a loaded library's comms (copied at creation).
const PERF_CALLBACKS: NccomDeviceCallbacks = NccomDeviceCallbacks {
    nec_inc_semaphore: Some(perf_inc_semaphore),
    nec_load_host_index: None,
    nec_store_host_index: None,
};

/// What [`World::assemble`] takes.
struct Assembly {
    local: Vec<u32>,
    /// By local index.
    mems: Vec<Arc<HostMem>>,
    engine: DriverEngine,
    peers: Option<SharedBootstrap>,
    transport: String,
    progress_half: String,
    spin: (std::time::Duration, u32),
    wait: WaitPolicy,
    /// By local index.
    cpus: Vec<Option<usize>>,
    modes: Modes,
    exec_timeout: Option<Duration>,
    stall_release: Arc<AtomicBool>,
}

/// One measured mode's plans and placements (by local index).
struct Prepared {
    /// Every non-empty (stream, block) part of each rank's collective.
    plans: Vec<Arc<BlockPlans>>,
    /// The whole rank's buffers and host words (each part's FIFOs and device program apply its
    /// own word base).
    addrs: Vec<Addresses>,
    /// `(stream, block id, FIFOs)` of every part, filed at the network task's INIT.
    fifos: Vec<Vec<(u32, u32, Fifos)>>,
    /// The device programs of each rank's parts, with the addresses each runs with.
    device: Vec<Vec<JobBlock>>,
    /// Which `prepare` made it (unique in the World): with the reps, the shape key of its
    /// executions' kept tasks and jobs.
    generation: u32,
}

/// The key under which the tasks and device jobs of `prep`'s executions with `reps` program
/// executions are kept for re-arming.
fn shape_key(prep: &Prepared, reps: u32) -> u64 {
    (u64::from(prep.generation) << 32) | u64::from(reps)
}

impl World {
    /// Dumps every proxy queue of this process (`--dump-on-exit`; docs/design.md §6), waiting
    /// up to 2 s for each driving thread (in caller mode with nothing driving, this thread
    /// takes each queue's drive token and writes its dump itself).
    pub fn dump_all(&self) {
        self.engine.dump_all(Duration::from_secs(2));
    }

    /// After this process's run failed with `reason`: tells the other processes through the
    /// bootstrap ([`proxy_bootstrap::Bootstrap::abort`]: a peer found lost within its grace is
    /// named as lost, else every peer is told this rank aborted), so that none waits for its
    /// exec timeout behind a clean close. Nothing to do when the ranks share this process.
    pub fn abort_peers(&self, reason: &str) {
        if let Some(peers) = &self.peers {
            let told = peers.lock().abort(NrtStatus::Failure, reason);
            log::debug!("proxy-perf: the other processes were told: {told}");
        }
    }

    /// Sets up `args.ranks` ranks on the in-process transport, all in this process; with
    /// `args.progress_lib`, the progress half is loaded from that library (its comms over one
    /// of its in-memory groups, its seam in every network task).
    ///
    /// # Errors
    /// A message when a comm, thread, the library or the transport cannot be set up.
    pub fn new(args: &Args) -> Result<Self, String> {
        let n = args.ranks;
        if args.inject.is_some_and(|i| i.fault == FaultArg::ExitRank) {
            return Err(
                "--inject exit-rank needs --transport libfabric (ranks as processes)".into(),
            );
        }
        let target = inject_target(args)?;
        let stall_release = Arc::new(AtomicBool::new(false));
        let stall_for = stall_limit(args)?;
        let (cfg, wait, _, modes) = run_config(args, n, 1)?;
        let lines = host_lines(n, args.streams, args.blocks);
        let mems = (0..n)
            .map(|_| HostMem::new(lines).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("host memory: {e}"))?;
        let cpus = rank_cpus(n, args.pin);
        let (engine, progress_half): (DriverEngine, String) = match &args.progress_lib {
            Some(path) => {
                let lib = ProgressLib::open(path).map_err(|e| e.to_string())?.leak();
                let seam = counting_loaded_seam(lib.seam());
                let group = lib
                    .mem_group(n)
                    .map_err(|e| format!("{}: nccom_mem_group_create: {e}", path.display()))?;
                let mut comms = Vec::new();
                for r in 0..n {
                    let config = NccomCommConfig {
                        rank: r,
                        nranks: n,
                        comm_id: 1,
                        flags: 0,
                        transport: NccomTransportDesc {
                            kind: NCCOM_TRANSPORT_MEM,
                            reserved: 0,
                            mem_group: group.as_ptr(),
                            libfabric: NccomLibfabricDesc {
                                provider: std::ptr::null(),
                                root_addr: std::ptr::null(),
                                bootstrap_timeout_ms: 0,
                            },
                        },
                        callbacks: &PERF_CALLBACKS,
                        drain_limit_ns: 0,
                    };
                    // SAFETY: the config is valid (callbacks a live table, the group this
                    // library's); flags 0 make the comm trust every address: the tool owns
                    // every buffer and word it hands to `start` and keeps them alive until the
                    // executions that use them are complete (the engine, and with it the comm,
                    // is dropped before the buffers).
                    let comm = unsafe { lib.create_comm(&config) }.map_err(|e| {
                        format!("{}: nccom_comm_create rank {r}: {e}", path.display())
                    })?;
                    comms.push(EngineComm::Loaded {
                        rank: r,
                        comm_id: 1,
                        comm,
                        seam,
                    });
                }
                // The comms keep what they use of the group.
                drop(group);
                let engine = DriverEngine::with_comms(comms, EngineBarrier::InProcess, &cfg, wait)?;
                (
                    engine,
                    format!(
                        "loaded from {} through dlopen (C ABI {:#x})",
                        lib.path().display(),
                        lib.abi_version()
                    ),
                )
            }
            None => {
                let fabric = MemFabric::new(n).map_err(|e| format!("mem transport: {e}"))?;
                let mut comms = Vec::new();
                for (r, mem) in (0..n).zip(&mems) {
                    let mut t = fabric
                        .endpoint(r)
                        .map_err(|e| format!("mem transport endpoint {r}: {e}"))?;
                    t.set_relax(std::thread::yield_now);
                    let t = wrap_transport(target, r, Box::new(t), &stall_release, stall_for);
                    let mut c = Comm::new(
                        CommConfig::new(r, n, 1),
                        t,
                        Arc::new(HostMemCallbacks::new(mem.clone())),
                        Arc::new(proxy_core::base::time::MonotonicClock),
                    )
                    .map_err(|e| format!("comm {r}: {e}"))?;
                    c.set_drain_relax(std::thread::yield_now);
                    c.set_drain_park(|ns| std::thread::sleep(Duration::from_nanos(ns)));
                    // SAFETY: the tool owns every buffer and word it hands to `start`, and
                    // keeps them alive until the executions that use them are complete.
                    unsafe { c.trust_all_addresses() };
                    comms.push(c);
                }
                (
                    DriverEngine::new(comms, &cfg, wait)?,
                    "in-process".to_owned(),
                )
            }
        };
        Self::assemble(
            args,
            Assembly {
                local: (0..n).collect(),
                mems,
                engine,
                peers: None,
                transport: "mem".into(),
                progress_half,
                spin: (cfg.spin, wait.spins),
                wait,
                cpus,
                modes,
                exec_timeout: cfg.exec_timeout,
                stall_release,
            },
        )
    }

    /// Joins a run whose ranks are processes: this process runs rank `boot.rank()` of
    /// `boot.nranks()` (which must equal `args.ranks`) over libfabric (`provider`: a libfabric
    /// provider name, or `None` for `FI_PROVIDER` / the automatic choice). Its barrier tasks and
    /// the combination of results run over the bootstrap connections. Every process of the
    /// bootstrap must call it, with the same arguments.
    ///
    /// # Errors
    /// A message when the comm (on any rank), a thread or the engine cannot be set up.
    #[cfg(feature = "libfabric")]
    pub fn join(
        args: &Args,
        boot: proxy_bootstrap::Bootstrap,
        provider: Option<String>,
    ) -> Result<Self, String> {
        use proxy_libfabric::net_setup::{open_libfabric_comm, LibfabricCommConfig};
        use proxy_libfabric::Options;

        let (rank, n) = (boot.rank(), boot.nranks());
        // Shared from here: the comm's transport watches it for lost peers (docs/design.md §9,
        // "Liveness"); the barrier tasks and the combination of results use it too.
        let peers = SharedBootstrap::new(boot);
        if n != args.ranks {
            return Err(format!(
                "this process is rank {rank} of {n} processes, but --ranks is {}",
                args.ranks
            ));
        }
        if args.progress_lib.is_some() {
            return Err("--progress-lib runs with --transport mem only".into());
        }
        let (cfg, wait, _, modes) = run_config(args, n, n)?;
        let mem = Arc::new(
            HostMem::new(host_lines(n, args.streams, args.blocks))
                .map_err(|e| format!("host memory: {e}"))?,
        );
        let lf = LibfabricCommConfig {
            transport: Options {
                provider,
                ..Options::default()
            },
            ..LibfabricCommConfig::default()
        };
        let mut comm = open_libfabric_comm(
            &peers,
            &lf,
            Arc::new(HostMemCallbacks::new(mem.clone())),
            Arc::new(proxy_core::base::time::MonotonicClock),
        )
        .map_err(|e| e.to_string())?;
        // SAFETY: the tool owns every buffer and word it hands to `start`, and keeps them alive
        // until the executions that use them are complete (buffers of finished rows are
        // retired, not freed, until the comm is gone).
        unsafe { comm.trust_all_addresses() };
        let prov = comm
            .transport()
            .name()
            .strip_prefix("libfabric/")
            .unwrap_or(comm.transport().name());
        // shm: how its large messages move (CMA, or mmap when CMA is unavailable), as the
        // transport detected it at open.
        let transport = match proxy_libfabric::shm_cma::shm_large_messages() {
            Some(shm) if prov == "shm" => {
                format!(
                    "libfabric (provider shm; large messages: {})",
                    shm.describe()
                )
            }
            _ => format!("libfabric (provider {prov})"),
        };
        let engine = DriverEngine::with_comms(
            vec![EngineComm::InProcess {
                rank,
                comm: Box::new(comm),
            }],
            EngineBarrier::Bootstrap(peers.clone()),
            &cfg,
            wait,
        )?;
        let cpus = rank_cpus(n, args.pin);
        Self::assemble(
            args,
            Assembly {
                local: vec![rank],
                mems: vec![mem],
                engine,
                peers: Some(peers),
                transport,
                progress_half: "in-process".into(),
                spin: (cfg.spin, wait.spins),
                wait,
                cpus: vec![cpus[rank as usize]],
                modes,
                exec_timeout: cfg.exec_timeout,
                stall_release: Arc::new(AtomicBool::new(false)),
            },
        )
    }

    /// The rest of the set-up, shared by [`World::new`] and [`World::join`]: a device per local
    /// rank.
    fn assemble(args: &Args, mut a: Assembly) -> Result<Self, String> {
        let n = args.ranks;
        let target = inject_target(args)?;
        let mut devices = Vec::new();
        for (&r, cpu) in a.local.iter().zip(&a.cpus) {
            let fault = (args.fault_inject && r == n - 1).then_some(Fault { entry: None });
            let mut dev = RankDevice::new(a.modes.device, r, fault, a.wait, *cpu)?;
            if let Some((FaultArg::StallDevice, t)) = target {
                if t == r {
                    log::warn!("--inject stall-device: rank {r}'s device never triggers");
                    dev.stalled = true;
                }
            }
            devices.push(dev);
        }
        if target.is_some() {
            for rank in a.engine.ranks_mut() {
                rank.watch_duplicates();
            }
        }
        if let Some((fault @ (FaultArg::DropComm | FaultArg::ExitRank), t)) = target {
            if let Some(i) = a.local.iter().position(|&r| r == t) {
                // The first execution (ids start at 1): aborted or exited once submitted.
                a.engine.ranks_mut()[i].inject_at(
                    1,
                    fault == FaultArg::DropComm,
                    fault == FaultArg::ExitRank,
                );
            }
        }
        Ok(Self {
            args: args.clone(),
            collective: args.collective.into(),
            spin: a.spin,
            local: a.local,
            peers: a.peers,
            transport: a.transport,
            progress_half: a.progress_half,
            modes: a.modes,
            exec_timeout: a.exec_timeout,
            engine: a.engine,
            devices,
            done_words: a
                .mems
                .iter()
                .map(|mem| FixedWords { mem: mem.clone() }.barrier_done())
                .collect(),
            fixed: a.mems.into_iter().map(|mem| FixedWords { mem }).collect(),
            next_exec: 0,
            preparations: 0,
            failed: None,
            retired: Vec::new(),
            stall_release: a.stall_release,
        })
    }

    /// `--inject`: ends the run's accounting. Lets the stalled driving thread go
    /// (`stall-rank`), lets every task still outstanding end by itself (bounded: the
    /// no-progress limit and 2 s more), leaves every slot, prints every local rank's final
    /// status (`# rank R: final status NRT_... (tasks T, reported T, twice 0)`) and answers the
    /// first failure.
    ///
    /// # Errors
    /// `rank R ended NRT_...` for the first local rank whose status is not a success.
    pub fn finish(&mut self) -> Result<(), String> {
        self.stall_release.store(true, Ordering::Release);
        let clock = MonotonicClock;
        let limit = self.exec_timeout.unwrap_or(Duration::from_secs(5)) + Duration::from_secs(2);
        let deadline = clock
            .now_ns()
            .saturating_add(u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX));
        for d in &mut self.devices {
            d.abort();
        }
        let stats = self.engine.settle_and_leave(deadline);
        let mut first = None;
        let mut out = std::io::stdout().lock();
        for (rank, s) in &stats {
            let _ = writeln!(
                out,
                "# rank {rank}: final status {} (tasks {}, reported {}, twice {})",
                s.status().as_str(),
                s.submitted,
                s.reported,
                s.twice
            );
            if s.status() != NrtStatus::Success && first.is_none() {
                first = Some(format!("rank {rank} ended {}", s.status().as_str()));
            }
        }
        let _ = out.flush();
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Every rank's protocol counters (docs/design.md §5, "Protocol counters"), in rank order:
    /// this process's ranks read from their comms (in-process through `Comm::protocol_stats`,
    /// a loaded library's through `nccom_comm_protocol_stats`), the other processes' ranks
    /// gathered over the bootstrap (collective: every process of the run calls it). Call it
    /// between rows or after the sweep, when no execution is in flight.
    ///
    /// # Errors
    /// A message when the processes' all-gather fails or a process sent malformed counters.
    pub fn protocol_stats(&self) -> Result<Vec<RankProtocol>, String> {
        let mine: Vec<RankProtocol> = self
            .engine
            .protocol_stats()
            .into_iter()
            .map(|(rank, s)| RankProtocol {
                rank,
                stats: s.map_err(|e| format!("{} (C ABI older than 1.2?)", e.as_str())),
            })
            .collect();
        let Some(peers) = &self.peers else {
            return Ok(mine);
        };
        let mut bytes = Vec::new();
        for r in &mine {
            r.encode(&mut bytes);
        }
        let all = peers
            .lock()
            .all_gather(&bytes)
            .map_err(|e| format!("gathering the protocol counters of the processes: {e}"))?;
        let mut out = Vec::new();
        for (p, b) in all.iter().enumerate() {
            out.extend(RankProtocol::decode(b).ok_or_else(|| {
                format!(
                    "process {p} sent malformed protocol counters ({} bytes)",
                    b.len()
                )
            })?);
        }
        out.sort_by_key(|r| r.rank);
        Ok(out)
    }

    /// The global rank of this process's first rank (0 with the in-process transport): only
    /// the process that runs rank 0 prints.
    pub fn first_rank(&self) -> u32 {
        self.local[0]
    }

    /// The transport, for the header: `mem`, or `libfabric (provider P)`.
    pub fn transport_name(&self) -> &str {
        &self.transport
    }

    /// Where the progress half comes from, for the header: `in-process`, or `loaded from PATH
    /// through dlopen (C ABI V)`.
    pub fn progress_half(&self) -> &str {
        &self.progress_half
    }

    /// What runs the proxy (for the header).
    pub fn engine_name(&self) -> String {
        format!(
            "{}; {}; worker spin {} us, device spins {}",
            self.engine.describe(),
            self.modes.describe(),
            self.spin.0.as_micros(),
            self.spin.1
        )
    }

    /// The resolved driver and device modes.
    pub fn modes(&self) -> Modes {
        self.modes
    }

    /// The abort handles of this process's comms (in-process progress half only; none with
    /// `--progress-lib`), for a caller that aborts a run from another thread (the soak test):
    /// the run's tasks then end `NRT_CLOSED`, the running measurement returns an error and the
    /// world runs nothing more; dropping it ends and frees everything.
    pub fn abort_handles(&self) -> Vec<AbortHandle> {
        self.engine.abort_handles()
    }

    /// Ranks per proxy queue in effect (`--ranks-per-proxy`, else the environment, else in
    /// caller mode the local ranks spread over the CPUs).
    pub fn ranks_per_proxy(&self) -> u32 {
        self.engine.ranks_per_proxy()
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

    /// Rank `rank`'s (stream, block) parts of `size` ([`plan_blocks`]).
    fn plan(&self, size: u64, rank: u32, in_place: bool) -> Result<BlockPlans, String> {
        plan_blocks(&self.params(size, rank, in_place)).map_err(|e| e.to_string())
    }

    /// Arms trigger set `set` and submits one execution (`reps` program executions, block
    /// schedule `[BLOCK; reps]`) for every local rank. The lowest local rank leads the barrier
    /// and raises the barrier-done semaphore of every local rank.
    fn submit(&mut self, prep: &Prepared, reps: u32, set: usize) -> Result<(), String> {
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
    fn complete(&mut self, prep: &Prepared, reps: u32, set: usize) -> Result<(), String> {
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
    fn run_execs(&mut self, prep: &Prepared, count: u32, reps: u32) -> Result<Duration, String> {
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
    fn run_execs_caller(
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
        // When the group threads fit on the CPUs, each gets its own: two spinning drivers left
        // to the scheduler can share one CPU for a while, and then every hand-off between them
        // waits out a spin budget or a time slice (measured: 8 B executions at 170 µs instead
        // of 10).
        // Counted over every process of the run on this host; a thread's CPU follows its first
        // global rank, so the processes' threads spread too.
        let cpus = core_affinity::get_core_ids().unwrap_or_default();
        let host_threads = self.modes.caller_mode_threads;
        let pin = host_threads > 1 && host_threads <= cpus.len();
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
                    let cpu = pin.then(|| cpus[(local[g * per] as usize / per) % cpus.len()]);
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
    fn execute(&mut self, prep: &Prepared, reps: u32) -> Result<(), String> {
        self.run_execs(prep, 1, reps).map(|_| ())
    }

    fn prepare(
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

    fn fill_inputs(&self, prep: &Prepared) {
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
                count_wrong(&p.params, self.local[r], out)
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
        let elapsed = if self.args.loop_mode {
            self.run_execs(&prep, 1, iters)?
        } else {
            self.run_execs(&prep, iters, 1)?
        };
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
        })
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
    fn buffers(&self, size: u64) -> Result<Vec<RankMem>, String> {
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
        let oop = self.measure(&mut mems, size, false);
        let ip = oop.is_ok().then(|| self.measure(&mut mems, size, true));
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

/// One process's part of a measurement, combined over the processes of a run: the slowest
/// process's time (a collective is done when its last rank is), everything else summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counts {
    elapsed_ns: u64,
    timed_starts: u64,
    execs: u64,
    bytes: u64,
    wrong: Option<u64>,
    recv_bytes_per_exec: u64,
    filed_blocks: u64,
    /// Op-pool sizes before and after (`None`: not visible).
    pool: Option<(u64, u64)>,
}

impl Counts {
    const WORDS: usize = 9;

    fn encode(&self) -> Vec<u8> {
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

    fn decode(b: &[u8]) -> Option<Self> {
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
    fn combine(peers: &SharedBootstrap, mine: &Self) -> Result<Self, String> {
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

fn size_of_row(prep: &Prepared) -> u64 {
    let l = prep.plans[0].layout;
    l.input_bytes.max(l.output_bytes)
}

/// `true` when the tool's busy threads (a device per rank, a worker per group, the producer)
/// outnumber the CPUs: then every wait should yield at once instead of spinning.
pub fn oversubscribed(ranks: u32, ranks_per_proxy: u32) -> bool {
    oversubscribed_procs(ranks, ranks_per_proxy, 1)
}

/// [`oversubscribed`] for `ranks` spread over `procs` processes on this machine (a producer
/// per process; a proxy group never spans processes).
pub fn oversubscribed_procs(ranks: u32, ranks_per_proxy: u32, procs: u32) -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let procs = procs.clamp(1, ranks.max(1));
    let per_proc = ranks.div_ceil(procs);
    let groups = procs * per_proc.div_ceil(ranks_per_proxy.max(1));
    let threads = ranks as usize + groups as usize + procs as usize;
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

/// A rank's device emulator: its own thread, or polled from the rank's driving thread.
enum DeviceKind {
    /// A `device-<rank>` thread.
    Thread(DeviceThread),
    /// Polled from the rank's driving thread between ticks (caller mode). Boxed: it holds the
    /// interpreter's state inline.
    Polled(Box<PolledDevice>),
}

/// A rank's device and the jobs of its last executions, kept per trigger set for the next
/// execution of the same shape (no allocation per execution).
struct RankDevice {
    /// `--inject stall-device`: nothing is launched; the device never triggers.
    stalled: bool,
    dev: DeviceKind,
    /// Per trigger set: `(shape key, job)` of its last finished execution.
    jobs: [Option<(u64, Job)>; TRIGGER_SETS],
    /// `(shape key, trigger set)` of the job the device holds now.
    current: Option<(u64, usize)>,
}

impl RankDevice {
    fn new(
        mode: DeviceArg,
        rank: u32,
        fault: Option<Fault>,
        wait: WaitPolicy,
        cpu: Option<usize>,
    ) -> Result<Self, String> {
        let dev = match mode {
            DeviceArg::Thread => DeviceKind::Thread(
                DeviceThread::spawn(rank, fault, wait, cpu).map_err(|e| format!("device: {e}"))?,
            ),
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

    fn stats(&self) -> &Arc<proxy_emulator::DeviceStats> {
        match &self.dev {
            DeviceKind::Thread(d) => d.stats(),
            DeviceKind::Polled(d) => d.stats(),
        }
    }

    /// Launches the job of trigger set `set` and shape `key`: the one kept from the last
    /// execution of that set and shape, else `build()`'s.
    ///
    /// # Safety
    /// As [`DeviceThread::launch`] for the job `build` describes.
    unsafe fn launch(&mut self, key: u64, set: usize, build: impl FnOnce() -> Job) {
        if self.stalled {
            return;
        }
        if let Some((k, s)) = self.current.take() {
            let back = match &mut self.dev {
                DeviceKind::Thread(d) => d.take_job(),
                DeviceKind::Polled(d) => d.take_job(),
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
        }
    }

    /// The drive hook: advances a polled device; `true` when it moved. A device thread runs by
    /// itself (`false`).
    fn poll(&mut self) -> bool {
        match &mut self.dev {
            DeviceKind::Thread(_) => false,
            DeviceKind::Polled(d) => {
                let _ = d.poll_once();
                d.moved()
            }
        }
    }

    fn failed(&self) -> bool {
        match &self.dev {
            DeviceKind::Thread(d) => d.failed(),
            DeviceKind::Polled(d) => d.failed(),
        }
    }

    fn abort(&mut self) {
        match &mut self.dev {
            DeviceKind::Thread(d) => d.abort(),
            DeviceKind::Polled(d) => d.abort(),
        }
    }

    /// Waits for the launched job to end (a polled device is polled to its end, bounded by
    /// its own no-progress timeout).
    fn wait(&mut self) -> Result<(), DeviceError> {
        self.wait_unless(&|| false)
    }

    /// As [`RankDevice::wait`], but gives the device up ([`RankDevice::abort`]: the wait ends
    /// with [`DeviceError::Aborted`]) as soon as `give_up` answers `true` while it has not
    /// finished (checked between polls, or between yields while a device thread runs).
    fn wait_unless(&mut self, give_up: &dyn Fn() -> bool) -> Result<(), DeviceError> {
        if self.stalled {
            return Ok(());
        }
        match &mut self.dev {
            DeviceKind::Thread(d) => {
                // Spin, then yield, then nap between checks (the device thread needs the CPU
                // more than this check does); the device's own timeout bounds the wait.
                let mut checks = 0u32;
                while !d.finished() {
                    if give_up() {
                        d.abort();
                        break;
                    }
                    checks = checks.saturating_add(1);
                    if checks < 64 {
                        std::hint::spin_loop();
                    } else if checks < 1024 {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(Duration::from_micros(20));
                    }
                }
                d.wait()
            }
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
fn execution_of(
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
    }
}

/// Rank `r`'s device job for trigger set `set`.
fn job_of(prep: &Prepared, f: &FixedWords, r: usize, set: usize, reps: u32) -> Job {
    Job {
        blocks: prep.device[r].clone(),
        schedule: prep.plans[r].schedule(reps),
        net_triggers: f.net_triggers(set, &prep.plans[r]),
        barrier_triggers: vec![f.barrier_trigger(set)],
        barrier_done: Some(f.barrier_done()),
    }
}

/// Arms rank `f`'s trigger words of set `set` (before its tasks are submitted, docs/design.md
/// §4).
fn arm_triggers(f: &FixedWords, set: usize) -> Result<(), String> {
    let net = (0..NET_TRIGGERS).map(|s| f.net_trigger(set, s));
    for t in net.chain([f.barrier_trigger(set)]) {
        f.mem
            .word_at(t)
            .ok_or_else(|| format!("trigger word {t:#x} outside the host memory"))?
            .store(TRIGGER_ARMED);
    }
    Ok(())
}

/// What a group thread of a caller-mode run needs (read only): the group's ranks are the local
/// indices `first..first + ranks.len()`.
struct GroupRun<'a> {
    /// Local index of the group's first rank.
    first: usize,
    fixed: &'a [FixedWords],
    /// Every local rank's barrier-done semaphore (the leader raises them all).
    done_words: &'a [u64],
    prep: &'a Prepared,
    reps: u32,
    first_id: u32,
    timeout_ns: Option<u64>,
    spin: Duration,
    /// The abort handles of every local comm: a group's device may wait for words that another
    /// group's tasks raise (the barrier leader raises every local rank's barrier-done
    /// semaphore), which an aborted comm never does.
    aborts: &'a [AbortHandle],
}

impl GroupRun<'_> {
    /// Execution `i` of the group's ranks: for each, arm trigger set 0 (one execution in
    /// flight: its tasks and job are re-armed, nothing allocated), submit the network and
    /// barrier tasks and launch the device; then drive the group's queue until every rank's
    /// records are final, every device of the group polled in the hook; then collect the
    /// devices' ends.
    fn execution(
        &self,
        ranks: &mut [DriverRank],
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

/// `--inject`'s fault and target rank (default: the last rank).
///
/// # Errors
/// A target that is not a rank.
fn inject_target(args: &Args) -> Result<Option<(FaultArg, u32)>, String> {
    let Some(i) = args.inject else {
        return Ok(None);
    };
    let rank = i.rank.unwrap_or(args.ranks - 1);
    if rank >= args.ranks {
        return Err(format!(
            "--inject {}:{rank}: not a rank (ranks {})",
            i.fault.name(),
            args.ranks
        ));
    }
    Ok(Some((i.fault, rank)))
}

/// How long a `stall-rank` stall lasts: twice the no-progress limit and a second (every peer
/// has timed out by then; the run also releases it when it ends), [`STALL_LIMIT`] without a
/// limit.
///
/// # Errors
/// A bad `NEURON_RT_EXEC_TIMEOUT`.
fn stall_limit(_args: &Args) -> Result<Duration, String> {
    let cfg = Config::from_env().map_err(|e| e.to_string())?;
    Ok(cfg.exec_timeout.map_or(STALL_LIMIT, |t| {
        (t * 2 + Duration::from_secs(1)).min(STALL_LIMIT)
    }))
}

/// Rank `r`'s transport with `--inject`'s transport fault when `r` is the target:
/// `error-completion` and `eagain-storm` through core's `FaultTransport` (after 16 posts, so the
/// run gets going; seed = the rank), `stall-rank` through [`StallTransport`].
fn wrap_transport(
    target: Option<(FaultArg, u32)>,
    r: u32,
    t: Box<dyn Transport>,
    release: &Arc<AtomicBool>,
    stall_for: Duration,
) -> Box<dyn Transport> {
    let Some((fault, _)) = target.filter(|&(_, rank)| rank == r) else {
        return t;
    };
    let t_name = t.name().to_owned();
    let plan = FaultPlan {
        seed: u64::from(r),
        after_posts: 16,
        ..FaultPlan::default()
    };
    match fault {
        FaultArg::ErrorCompletion => Box::new(FaultTransport::new(
            t,
            FaultPlan {
                error_completion: PPM,
                ..plan
            },
        )),
        FaultArg::EagainStorm => Box::new(FaultTransport::new(
            t,
            FaultPlan {
                eagain: 200_000,
                eagain_burst: 16,
                delay: 100_000,
                delay_polls: 8,
                ..plan
            },
        )),
        FaultArg::StallRank => Box::new(StallTransport {
            inner: t,
            polls: 0,
            after: 8,
            release: release.clone(),
            limit: stall_for,
            name: format!("stall({})", t_name),
        }),
        _ => t,
    }
}

/// `--inject stall-rank`: after `after` polls, `poll` blocks the driving thread (sleeping 1 ms
/// at a time) until `release` is set or `limit` has passed: the rank's driver stops.
struct StallTransport {
    inner: Box<dyn Transport>,
    polls: u64,
    after: u64,
    release: Arc<AtomicBool>,
    limit: Duration,
    name: String,
}

/// The longest a `stall-rank` stall lasts (the run releases it when it ends).
const STALL_LIMIT: Duration = Duration::from_secs(120);

impl Transport for StallTransport {
    fn name(&self) -> &str {
        &self.name
    }

    fn max_msg_size(&self) -> u64 {
        self.inner.max_msg_size()
    }

    fn poll(&mut self) -> Result<(), NetError> {
        self.polls += 1;
        if self.polls == self.after {
            log::warn!("--inject stall-rank: the driving thread stops (blocked in poll)");
            let end = Instant::now() + self.limit;
            while !self.release.load(Ordering::Acquire) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(1));
            }
            log::warn!("--inject stall-rank: the driving thread goes on");
        }
        self.inner.poll()
    }

    unsafe fn isend(
        &mut self,
        peer: u32,
        buf: *const u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        // SAFETY: forwarded under this function's contract.
        unsafe { self.inner.isend(peer, buf, size, tag) }
    }

    unsafe fn irecv(
        &mut self,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        // SAFETY: forwarded under this function's contract.
        unsafe { self.inner.irecv(peer, buf, size, tag) }
    }

    fn test(&mut self, request: RequestId) -> Result<TestOutcome, NetError> {
        self.inner.test(request)
    }

    fn cancel(&mut self, request: RequestId) -> Result<(), NetError> {
        self.inner.cancel(request)
    }

    fn close(&mut self) -> Result<(), NetError> {
        self.inner.close()
    }

    fn dump_state(&self, out: &mut dyn std::fmt::Write) -> std::fmt::Result {
        self.inner.dump_state(out)
    }
}

impl Drop for World {
    /// Lets a stalled driving thread go before the engine leaves its slots.
    fn drop(&mut self) {
        self.stall_release.store(true, Ordering::Release);
    }
}
