//! Setting a run up: the modes the CPUs allow (`default_modes`, the oversubscription rule, the
//! wait policy, rank pinning), the comm configuration, the host-word layout, and the two ways to
//! build a [`World`]: every rank in this process (`World::new`) or this process's one rank of a
//! multi-process run (`World::join`), both through `World::assemble`.

use super::*;
use proxy_collectives::planner::HostMap;

pub(super) fn available_cpus() -> usize {
    proxy_runtime::modes::host_cpus().usable
}

/// The modes when no flag chooses, by the host-wide mode rule (`proxy_runtime::modes`): this
/// tool's busy threads per process (worker mode: a device thread per rank, a worker per group
/// (`thread_groups`) and the producer; caller + polled mode: one thread per group
/// (`caller_groups`)), times the processes of the job on this host (`procs`, the ranks this
/// tool's launcher started here, unless a launcher's variable says otherwise), against the
/// CPUs of the affinity mask and the cgroup quota. Worker mode when it fits, else caller mode
/// when it fits, else the one with fewer busy threads.
///
/// A flag given alone fixes its half: `--device polled` implies `--driver caller`,
/// `--driver thread` a device the worker plays (`--device polled`; `--device thread` for a
/// thread per device).
///
/// `--driver thread --device polled` makes the worker play the device (no device thread).
///
/// # Errors
/// A malformed launcher variable (`OMPI_COMM_WORLD_LOCAL_SIZE`, ...).
pub fn default_modes(
    driver: Option<DriverArg>,
    device: Option<DeviceArg>,
    procs: u32,
    local: u32,
    thread_groups: u32,
    caller_groups: u32,
) -> Result<Modes, String> {
    use proxy_runtime::modes::{advise, host_cpus, local_processes_from_env, LocalProcesses};
    let processes = local_processes_from_env()?.unwrap_or(LocalProcesses {
        count: procs.max(1),
        source: "proxy-perf launcher",
    });
    let advice = advise(proxy_runtime::modes::ModeInputs {
        cpus: host_cpus(),
        processes,
        worker_threads: local as usize + thread_groups as usize + 1,
        caller_threads: caller_groups as usize,
    });
    let caller = advice.mode == DriveMode::Caller;
    let by_rule = driver.is_none() && device.is_none();
    let (driver, device) = match (driver, device) {
        (Some(d), Some(v)) => (d, v),
        // Worker mode asked for: the workers play the devices (no device threads).
        (Some(DriverArg::Thread), None) => (DriverArg::Thread, DeviceArg::Polled),
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
        advice,
    })
}

/// The wait policy and proxy configuration of a run with `ranks` ranks (`procs` processes),
/// its modes, and whether the machine is oversubscribed.
pub(super) fn run_config(
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
    // Worker mode with the devices played by the workers: a worker per group and the producer
    // per process; unless the user chose, group the local ranks so that they fit on this
    // process's share of the CPUs (2 ranks on 2 CPUs: one worker for both).
    if modes.driver == DriverArg::Thread && modes.device == DeviceArg::Polled && !chosen {
        let share = (available_cpus() / procs as usize).max(1);
        let workers = share.saturating_sub(1).max(1);
        cfg.ranks_per_network_proxy = (local as usize).div_ceil(workers).max(1) as u32;
    }
    let oversubscribed = match (modes.driver, modes.device) {
        (DriverArg::Thread, DeviceArg::Thread) => {
            oversubscribed_procs(ranks, cfg.ranks_per_network_proxy, procs)
        }
        // The workers play the devices: a worker per group and the producer, per process.
        (DriverArg::Thread, DeviceArg::Polled) => {
            let groups =
                procs as usize * local.div_ceil(cfg.ranks_per_network_proxy.max(1)) as usize;
            groups + procs as usize > available_cpus()
        }
        // One thread per group on every process here (plus a device thread per rank with
        // `--device thread`).
        (DriverArg::Caller, _) => {
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
pub(super) fn host_lines(n: u32, streams: u32, blocks: u32) -> usize {
    FIXED_LINES + (streams as usize * blocks as usize) * (12 * n as usize + 6)
}

/// `nec_inc_semaphore` for comms of a loaded progress half: the words are the tool's own host
/// memory.
///
/// # Safety
/// `addr` must be a live, aligned host word accessed only atomically.
pub(super) unsafe extern "C" fn perf_inc_semaphore(addr: *mut NccomHostWord, val: u32) {
    // SAFETY: the caller's contract (the library passes the semaphore addresses the tool's
    // FIFOs gave it: words of a live HostMem).
    unsafe { AtomicU32::from_ptr(addr) }.fetch_add(val, Ordering::Release);
}

/// Callbacks handed to a loaded library's comms (copied at creation).
pub(super) const PERF_CALLBACKS: NccomDeviceCallbacks = NccomDeviceCallbacks {
    nec_inc_semaphore: Some(perf_inc_semaphore),
    nec_load_host_index: None,
    nec_store_host_index: None,
};

/// The host map of ranks whose host identities are `ids` (by rank), when they span two or
/// more hosts and each host's ranks are contiguous (a [`HostMap`] describes only that);
/// `None` otherwise.
pub fn host_map_of(ids: &[Vec<u8>]) -> Option<proxy_collectives::planner::HostMap> {
    let mut sizes: Vec<u32> = Vec::new();
    let mut seen: Vec<&Vec<u8>> = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        if i > 0 && ids[i - 1] == *id {
            *sizes.last_mut()? += 1;
        } else {
            if seen.contains(&id) {
                return None;
            }
            seen.push(id);
            sizes.push(1);
        }
    }
    (sizes.len() >= 2)
        .then(|| proxy_collectives::planner::HostMap::new(&sizes))
        .flatten()
}

impl World {
    /// The arguments the world runs with (with the bootstrap's host map when the ranks are
    /// processes on several hosts and `--hosts` was not given).
    pub fn args(&self) -> &Args {
        &self.args
    }

    /// Sets the largest FIFO entry (`--chunk`, bytes) of the collectives planned from now on
    /// (the calibration's entries pass, [`crate::tune`]).
    pub fn set_chunk(&mut self, chunk: u64) {
        self.args.chunk = chunk;
    }

    /// Measures `collective` with `algo` from the next row on (`--tune` times several
    /// algorithms on one comm: ranks that are processes cannot make a new comm for each).
    pub fn set_collective(&mut self, collective: crate::args::CollArg, algo: crate::args::AlgoArg) {
        self.args.collective = collective;
        self.args.algo = algo;
        self.args.algo_from_env = false;
        self.collective = collective.into();
    }

    /// Sets up `args.ranks` ranks on the in-process transport, all in this process; with
    /// `args.progress_lib`, the progress half is loaded from that library (its comms over one
    /// of its in-memory groups, its seam in every network task).
    ///
    /// # Errors
    /// A message when a comm, thread, the library or the transport cannot be set up.
    pub fn new(args: &Args) -> Result<Self, String> {
        // In process every message is a ring push: the tuner's memory constants.
        let mut args = args.clone();
        args.link = proxy_collectives::planner::tuner::LinkKind::Memory;
        let args = &args;
        let n = args.ranks;
        if args.inject.is_some_and(|i| i.fault == FaultArg::ExitRank) {
            return Err(
                "--inject exit-rank needs ranks as processes (--transport libfabric or shm)".into(),
            );
        }
        let target = inject_target(args)?;
        let stall = Arc::new(StallSwitch::default());
        let stall_for = stall_limit(args)?;
        let (mut cfg, mut wait, _, modes) = run_config(args, n, 1)?;
        let lines = host_lines(n, args.streams, args.blocks);
        let mems = (0..n)
            .map(|_| HostMem::new(lines).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("host memory: {e}"))?;
        let cpus = rank_cpus(n, args.pin);
        let mut fabric = None;
        let (engine, progress_half): (Engine, String) = match &args.progress_lib {
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
                let engine = Engine::with_comms(comms, EngineBarrier::InProcess, &cfg, wait)?;
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
                let f = MemFabric::new(n).map_err(|e| format!("mem transport: {e}"))?;
                if args.wait == Some(WaitArg::Sleep) {
                    // Every event a waiting thread of this world waits for rings a bell (wired
                    // in `assemble`): the in-memory fabric's arrivals, the devices' host
                    // writes, the barrier's arrivals and pass, the drivers' progress. So an
                    // idle worker naps instead of yielding, and a waiting device or producer
                    // yields a few times, then sleeps until rung.
                    cfg.worker_nap = Some(BELLED_NAP);
                    // Spin for what a block-and-wake costs here, then sleep (2-competitive),
                    // unless the user chose the budget.
                    if std::env::var_os("NEURON_RT_PROXY_SPIN_US").is_none() && !cfg.spin.is_zero()
                    {
                        cfg.spin = proxy_runtime::wake_cost::wake_latency().min(cfg.spin);
                    }
                    wait.yields = wait.yields.min(BELLED_YIELDS);
                    wait.nap = BELLED_NAP;
                    fabric = Some(f.clone());
                }
                let mut comms = Vec::new();
                for (r, mem) in (0..n).zip(&mems) {
                    let mut t = f
                        .endpoint(r)
                        .map_err(|e| format!("mem transport endpoint {r}: {e}"))?;
                    t.set_relax(std::thread::yield_now);
                    let t = wrap_transport(target, r, Box::new(t), &stall, stall_for);
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
                (Engine::new(comms, &cfg, wait)?, "in-process".to_owned())
            }
        };
        Self::assemble(
            args,
            Assembly {
                local: (0..n).collect(),
                fabric,
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
                stall,
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
    pub fn join(
        args: &Args,
        boot: proxy_bootstrap::Bootstrap,
        provider: Option<String>,
    ) -> Result<Self, String> {
        let (rank, n) = (boot.rank(), boot.nranks());
        // The host map from the bootstrap (every rank's host identity) unless --hosts gave one.
        let mut joined = args.clone();
        if joined.hosts.is_none() {
            joined.hosts = host_map_of(boot.hosts()).map(crate::args::HostsArg);
        }
        let args = &joined;
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
        let block = super::idle::blocks_when_idle(args, &modes);
        let opened = super::process_comm::open(args, &peers, &mem, block, provider)?;
        let (comm, cq_idle, transport) = (opened.comm, opened.cq_idle, opened.transport);
        // The tuner's default constants follow the link the comm opened.
        joined.link = opened.link;
        let args = &joined;
        let engine = Engine::with_comms(
            vec![EngineComm::InProcess {
                rank,
                comm: Box::new(comm),
            }],
            EngineBarrier::Bootstrap(peers.clone()),
            &cfg,
            wait,
        )?;
        if let Some(cq) = cq_idle {
            let r = &engine.ranks()[0];
            if let Some((queue, _)) = r.queue_slot() {
                let w: Arc<dyn proxy_core::driver::idle::IdleWait> =
                    Arc::new(proxy_core::driver::idle::Gated {
                        wait: cq,
                        closed: r.host_barrier_waiting(),
                    });
                queue.idle_wait().wire(Some(w));
            }
        }
        let cpus = rank_cpus(n, args.pin);
        // Every rank on one host: every process's host identity the same.
        let one_host = peers.lock().hosts().windows(2).all(|w| w[0] == w[1]);
        let mut world = Self::assemble(
            args,
            Assembly {
                local: vec![rank],
                fabric: None,
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
                stall: Arc::new(StallSwitch::default()),
            },
        )?;
        world.agree_on_tuner_host(one_host)?;
        Ok(world)
    }

    /// Ranks as processes: the tuner's host inputs the same on every process (every rank plans
    /// with the same parameters, or `auto` could resolve to different algorithms on different
    /// ranks): one host when the bootstrap saw one host identity, the fewest progress CPUs any
    /// process counted, and the CPU groups of the pinning when every process computed the same
    /// ones (none otherwise: processes whose affinity masks differ). Collective: every process
    /// calls it, at the end of its join.
    ///
    /// # Errors
    /// A message when the all-gather between processes fails or a process sent malformed data.
    fn agree_on_tuner_host(&mut self, one_host: bool) -> Result<(), String> {
        let Some(peers) = &self.peers else {
            return Ok(());
        };
        let mine = TunerHost {
            one_host,
            cpu_groups: HostMap::NONE,
            ..self.tuner_host
        }
        .with_cpu_groups(&self.modes, &self.engine, self.args.ranks);
        // Progress CPUs, then the groups' sizes, each a little-endian u32.
        let mut payload = mine.progress_cpus.to_le_bytes().to_vec();
        for s in mine.cpu_groups.sizes() {
            payload.extend(s.to_le_bytes());
        }
        let all = peers
            .lock()
            .all_gather(&payload)
            .map_err(|e| format!("sharing the tuner's progress CPUs of the processes: {e}"))?;
        let mut fewest = u32::MAX;
        let mut groups = None;
        let mut same = true;
        for (p, b) in all.iter().enumerate() {
            if b.len() < 4 || b.len() % 4 != 0 {
                return Err(format!(
                    "process {p} sent malformed progress CPUs ({} bytes)",
                    b.len()
                ));
            }
            let words: Vec<u32> = b
                .chunks_exact(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect();
            fewest = fewest.min(words[0]);
            let g = HostMap::new(&words[1..]).unwrap_or(HostMap::NONE);
            same &= *groups.get_or_insert(g) == g;
        }
        self.tuner_host = TunerHost {
            one_host,
            progress_cpus: fewest,
            cpu_groups: groups.filter(|_| same).unwrap_or(HostMap::NONE),
        };
        Ok(())
    }

    /// The rest of the set-up, shared by [`World::new`] and [`World::join`]: a device per local
    /// rank.
    pub(super) fn assemble(args: &Args, mut a: Assembly) -> Result<Self, String> {
        let n = args.ranks;
        let target = inject_target(args)?;
        let mut devices = Vec::new();
        for (&r, cpu) in a.local.iter().zip(&a.cpus) {
            let fault = (args.fault_inject && r == n - 1).then_some(Fault { entry: None });
            let mut dev = RankDevice::new(a.modes.device, a.modes.driver, r, fault, a.wait, *cpu)?;
            if let Some((FaultArg::StallDevice, t)) = target {
                if t == r {
                    log::warn!("--inject stall-device: rank {r}'s device never triggers");
                    dev.stalled = true;
                }
            }
            devices.push(dev);
        }
        wire_players(&a, &devices)?;
        if a.fabric.is_some() {
            wire_bells(&mut a, &devices);
        } else if a.modes.driver == DriverArg::Thread && args.wait == Some(WaitArg::Sleep) {
            // Ranks as processes, worker mode, `--wait sleep`: the producer parks for its
            // records (the worker's push wakes it) instead of yielding for 2 ms and then
            // nap-polling the status ring.
            a.engine.set_park_consumers(true);
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
        let tuner_host = TunerHost::local(a.peers.is_none(), &a.modes, &a.engine, a.local.len(), n);
        Ok(Self {
            args: args.clone(),
            collective: args.collective.into(),
            tuner_host,
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
            stall: a.stall,
        })
    }
}

/// What the tuner is told about the ranks' host ([`World::params`]): whether every rank is on
/// this host (then the plans get a map of one host), and the CPUs the host's ranks progress on
/// at once (`PlanParams::progress_cpus`). The same on every process of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TunerHost {
    pub(super) one_host: bool,
    pub(super) progress_cpus: u32,
    /// Which ranks share a CPU (`PlanParams::cpu_groups`): in caller mode with every rank on
    /// this host, the groups its pinning makes ([`super::pinning::caller_groups`]), else none.
    pub(super) cpu_groups: HostMap,
}

impl TunerHost {
    /// This process's view: every rank on this host when the ranks are this process's own
    /// (`in_process`); the CPUs are the mode rule's usable CPUs or the threads that drive the
    /// host's proxy queues (this process's queues, `local` ranks at the engine's ranks per
    /// proxy, times the processes on the host), whichever is fewer.
    fn local(in_process: bool, modes: &Modes, engine: &Engine, local: usize, ranks: u32) -> Self {
        let adv = &modes.advice;
        let queues = local
            .div_ceil(engine.ranks_per_proxy().max(1) as usize)
            .max(1);
        let threads = queues.saturating_mul(adv.inputs.processes.count.max(1) as usize);
        Self {
            one_host: in_process,
            progress_cpus: u32::try_from(adv.inputs.cpus.usable.min(threads)).unwrap_or(u32::MAX),
            cpu_groups: HostMap::NONE,
        }
        .with_cpu_groups(modes, engine, ranks)
    }

    /// `self` with its CPU groups: the caller-mode pinning's over the `ranks` ranks of the run
    /// (`adv.caller_threads` driving threads on the affinity mask's CPUs) when every rank is
    /// on this host; none in worker mode or across hosts. Ranks as processes keep them only
    /// when every process computed the same (`World::agree_on_tuner_host`), so that every rank
    /// plans alike.
    pub(super) fn with_cpu_groups(mut self, modes: &Modes, engine: &Engine, ranks: u32) -> Self {
        let adv = &modes.advice;
        self.cpu_groups = if self.one_host && modes.driver == DriverArg::Caller {
            super::pinning::caller_groups(
                ranks,
                engine.ranks_per_proxy().max(1),
                adv.caller_threads,
                adv.inputs.cpus.affinity,
            )
            .unwrap_or(HostMap::NONE)
        } else {
            HostMap::NONE
        };
        self
    }
}

/// Wires every device the worker plays (`--driver thread --device polled`) into its rank's
/// slot as the slot's poller, and the queue's driver as the bell its launches ring.
///
/// # Errors
/// A rank without a slot of an in-process queue (a loaded library's progress half drives it).
fn wire_players(a: &Assembly, devices: &[RankDevice]) -> Result<(), String> {
    for ((rank, dev), &r) in a.engine.ranks().iter().zip(devices).zip(&a.local) {
        let Some(played) = dev.played() else {
            continue;
        };
        let (queue, slot) = rank.queue_slot().ok_or_else(|| {
            format!(
                "rank {r}: --device polled with --driver thread needs an in-process proxy queue"
            )
        })?;
        let poller: Arc<dyn proxy_core::driver::poller::Poller> = played.clone();
        queue
            .slot_poller(slot)
            .ok_or_else(|| format!("rank {r}: slot {slot} is outside its queue"))?
            .wire(Some(poller));
        played.driver_bell().wire(Some(QueueBell::of(&queue)));
    }
    Ok(())
}

/// Longest nap of a waiting thread whose wake-ups all ring bells (a bound on a missed ring's
/// cost, not a latency: a ring ends the nap).
pub const BELLED_NAP: Duration = Duration::from_millis(1);
/// Yields of a waiting device or producer before it naps, when its wake-ups ring bells.
pub const BELLED_YIELDS: u32 = 8;

/// With `--wait sleep` in process (`a.fabric` set), wires the bells (`proxy_core::base::bell`)
/// of every local rank, and makes the producer park for its records: its device's host writes and
/// (in process) its fabric arrivals and the other ranks' barrier arrivals ring the driver of its
/// queue; its queue's progress on its slot and the barrier leader's pass ring its device
/// thread.
fn wire_bells(a: &mut Assembly, devices: &[RankDevice]) {
    a.engine.set_park_consumers(true);
    for ((rank, dev), &r) in a.engine.ranks().iter().zip(devices).zip(&a.local) {
        let Some((queue, slot)) = rank.queue_slot() else {
            continue;
        };
        dev.stats().host_bell.wire(Some(QueueBell::of(&queue)));
        if let (Some(bell), Some(s)) = (dev.bell(), queue.slot_bell(slot)) {
            s.wire(Some(bell));
        }
        if let Some(b) = a.fabric.as_ref().and_then(|f| f.bell(r)) {
            b.wire(Some(QueueBell::of(&queue)));
        }
        if let Some(barrier) = a.engine.mem_barrier() {
            if let Some(b) = barrier.arrival_bell(r) {
                b.wire(Some(QueueBell::of(&queue)));
            }
            if let (Some(bell), Some(b)) = (dev.bell(), barrier.pass_bell(r)) {
                b.wire(Some(bell));
            }
        }
    }
}

pub(super) fn size_of_row(prep: &Prepared) -> u64 {
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
