//! `proxy-perf`: nccl-tests-style measurement of collectives through the whole engine
//! (issue 6). The binary is `src/main.rs`; everything it does is here so tests can reuse it.
//!
//! Dependencies: `proxy-core` (its `std` clock), `proxy-collectives` (planner),
//! `proxy-runtime` (registry, workers, host memory, loader), `proxy-bootstrap`,
//! `proxy-emulator`, `proxy-abi`, `log`, and the only users of `clap`, `serde_json` and `plotters` in the workspace; feature
//! `libfabric`: `proxy-libfabric`.
//!
//! Per size: every rank plans the collective ([`proxy_collectives::planner`]), the proxy engine files
//! the block and steps it, the device emulators ([`proxy_emulator`]) play the device side
//! through host words, the in-process transport moves the bytes; warm-up, timed iterations
//! (one execution each, or with `--loop` one execution looping over the block), then `-c`
//! checked runs into poisoned outputs, out of place and in place.
//!
//! `--transport libfabric` (feature `libfabric`) and `--transport shm` (the engine's own shared
//! memory, every build) make the ranks processes: without launcher
//! variables the tool starts one copy of itself per rank on this machine (`launch`: bootstrap
//! on 127.0.0.1, `FI_TCP_IFACE=lo`) and forwards rank 0's output; with them (a copy started by
//! that launcher, `mpirun`, `srun`, ...) it joins the launch as one rank. `--progress-lib PATH`
//! loads the progress half with `dlopen` ([`proxy_runtime::loader`]).

pub mod args;
pub mod compare;
pub mod cost;
pub mod engine;
pub mod launch;
pub mod plot;
pub mod ranks_sweep;
pub mod report;
pub mod run;
pub mod trace;
pub mod tune;

use std::io::{IsTerminal, Write};

use args::{Args, TransportArg};

/// Exit status when a value was wrong.
pub const EXIT_WRONG: i32 = 1;
/// Exit status for a usage or setup error, or a failed execution.
pub const EXIT_ERROR: i32 = 2;

/// The tool's logger: `LEVEL target: message` lines on stderr.
struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!("{} {}: {}", r.level(), r.target(), r.args());
        }
    }

    fn flush(&self) {}
}

/// Installs the tool's stderr logger (once per process) at `NEURON_RT_LOG_LEVEL`'s level,
/// WARN when it is unset or malformed (the malformed value is reported by the run itself).
pub fn init_logging() {
    static LOGGER: StderrLogger = StderrLogger;
    if log::set_logger(&LOGGER).is_ok() {
        let level = proxy_runtime::Config::from_env()
            .ok()
            .and_then(|c| c.log_level)
            .unwrap_or(log::LevelFilter::Warn);
        log::set_max_level(level);
    }
}

/// Runs the tool; returns the process exit status (0 ok, [`EXIT_WRONG`] when any value was
/// wrong, [`EXIT_ERROR`] for errors). Output goes to stdout, errors and progress to stderr.
pub fn run_cli(args: &Args) -> i32 {
    match run_inner(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("proxy-perf: error: {e}");
            EXIT_ERROR
        }
    }
}

fn run_inner(args: &Args) -> Result<i32, String> {
    if args.ranks == 0 || args.ranks > proxy_core::progress::mem_transport::MAX_FABRIC_RANKS {
        return Err(format!(
            "--ranks {} out of range (1..={})",
            args.ranks,
            proxy_core::progress::mem_transport::MAX_FABRIC_RANKS
        ));
    }
    if let Some(h) = &args.hosts {
        if h.0.ranks() != u64::from(args.ranks) {
            return Err(format!(
                "--hosts adds up to {} ranks, --ranks is {}",
                h.0.ranks(),
                args.ranks
            ));
        }
    }
    if args.root >= args.ranks {
        return Err(format!(
            "--root {} is not a rank (ranks {})",
            args.root, args.ranks
        ));
    }
    let (algo, coll) = (
        proxy_collectives::planner::Algorithm::from(args.algo),
        proxy_collectives::planner::Collective::from(args.collective),
    );
    if !algo.supports(coll) {
        return Err(format!(
            "algorithm {} does not support {} (--algo, or {})",
            algo.name(),
            coll.name(),
            args::algo_env(coll)
        ));
    }
    if args.provider.is_some() && args.transport != TransportArg::Libfabric {
        return Err("--provider needs --transport libfabric".into());
    }
    if args.transport.is_processes() && args.progress_lib.is_some() {
        // The processes share one bootstrap for their barrier tasks and results; a loaded
        // library's libfabric comm would run a bootstrap of its own.
        return Err("--progress-lib runs with --transport mem only".into());
    }
    if let Some(i) = args.inject.filter(|i| i.fault.wraps_transport()) {
        if args.transport != TransportArg::Mem || args.progress_lib.is_some() {
            // Silently planting nothing would pass the run off as a fault test.
            return Err(format!(
                "--inject {} wraps the in-process transport: it needs --transport mem without \
                 --progress-lib",
                i.fault.name()
            ));
        }
    }
    // --compare files are read now, so that a bad one fails before the sweep.
    let factor = Into::<proxy_collectives::planner::Collective>::into(args.collective)
        .busbw_factor(args.ranks);
    for f in &args.compare {
        compare::read(f, factor)?;
    }
    if let Some(t) = &args.trace {
        if args.check == 0 && !args.trace_all {
            return Err(
                "--trace records the checked executions: give -c 1 or more, or --trace-all".into(),
            );
        }
        if args.transport.is_processes() && !trace::per_rank(t) {
            return Err(format!(
                "--trace {}: the ranks are processes, give a per-rank pattern with %r",
                t.display()
            ));
        }
        // Before any thread of the run starts (they then see it at once).
        let t = trace::tracer()?;
        t.set_mask(args.trace_mask);
        if args.trace_all {
            t.mark(0);
            t.set_on(true);
        }
    }
    if let Some(file) = &args.tune {
        return tune::run(args, file);
    }
    if !args.ranks_sweep.is_empty() {
        return ranks_sweep::run(args);
    }
    match args.transport {
        TransportArg::Mem => {
            let mut world = run::World::new(args)?;
            let result = sweep(args, &mut world);
            let result = finish(args, &mut world, result);
            finish_trace(args, &world, result)
        }
        TransportArg::Libfabric | TransportArg::Shm => processes(args),
    }
}

/// The end of a run: with `--inject`, every local rank's final status (printed) decides the
/// exit status (a failed rank fails the run, naming its status); without it, `result` as is.
fn finish(args: &Args, world: &mut run::World, result: Result<i32, String>) -> Result<i32, String> {
    if args.inject.is_none() {
        return result;
    }
    if let Err(e) = &result {
        eprintln!("proxy-perf: the run failed: {e}");
    }
    world.finish()?;
    result
}

/// `Ok` unless `args` asks for `--transport libfabric` from a build without the `libfabric`
/// feature.
///
/// # Errors
/// A message naming the feature, and the transports that need no libfabric (`shm`, `mem`).
pub fn libfabric_built(args: &Args) -> Result<(), String> {
    if cfg!(feature = "libfabric") || args.transport != TransportArg::Libfabric {
        return Ok(());
    }
    Err(NO_LIBFABRIC.into())
}

/// The refusal of `--transport libfabric` by a build without the `libfabric` feature.
pub const NO_LIBFABRIC: &str = "--transport libfabric: this proxy-perf was not built with \
     libfabric (build it with `--features libfabric`, which needs libfabric-dev >= 1.17); \
     --transport shm (ranks as processes over the engine's own shared memory) and mem need no \
     libfabric";

/// `--transport libfabric` or `shm` (ranks as processes): joins an external launch when
/// launcher variables are set, else launches one process per rank on this machine.
///
/// # Errors
/// `--transport libfabric` from a build without the `libfabric` feature, refused before any
/// process starts ([`libfabric_built`]); `shm` needs no libfabric and runs in every build.
fn processes(args: &Args) -> Result<i32, String> {
    use proxy_bootstrap::LAUNCHER_VARS;
    libfabric_built(args)?;
    if LAUNCHER_VARS
        .iter()
        .any(|(rank_var, _)| std::env::var_os(rank_var).is_some())
    {
        join(args)
    } else {
        launch::run(args)
    }
}

/// One rank of a multi-process run: bootstrap (rank, size and root from the launcher
/// variables and `NEURON_RT_ROOT_COMM_ID`), the comm over libfabric or own shm, the sweep;
/// only rank 0 prints.
fn join(args: &Args) -> Result<i32, String> {
    use proxy_bootstrap::{Bootstrap, BootstrapConfig};
    let cfg = BootstrapConfig::from_env(None, None, None).map_err(|e| e.to_string())?;
    if cfg.nranks != args.ranks {
        return Err(format!(
            "the launcher runs {} processes but --ranks is {} (give --ranks {} to match)",
            cfg.nranks, args.ranks, cfg.nranks
        ));
    }
    let boot = Bootstrap::init(&cfg).map_err(|e| e.to_string())?;
    let provider = args.provider.map(|p| p.fi_name().to_owned());
    let mut world = run::World::join(args, boot, provider)?;
    let result = sweep(args, &mut world);
    let result = finish(args, &mut world, result);
    if let Err(e) = &result {
        world.abort_peers(e);
    }
    finish_trace(args, &world, result)
}

/// Header, one row per size, footer (printed by the process that runs rank 0 only; every
/// process measures every row); `--json` / `--plot` from that process too. Returns the exit
/// status.
fn sweep(args: &Args, world: &mut run::World) -> Result<i32, String> {
    // The grouping in effect (caller mode may have chosen it by the CPUs).
    let rpp = world.ranks_per_proxy();
    let printer = world.first_rank() == 0;
    let engine = world.engine_name();
    let mut out = std::io::stdout().lock();
    let mut print = |text: &str| {
        if printer {
            let _ = writeln!(out, "{text}");
            let _ = out.flush();
        }
    };
    print(&report::header(
        world.args(),
        &report::HeaderInfo {
            engine: &engine,
            transport: world.transport_name(),
            progress_half: world.progress_half(),
            ranks_per_proxy: rpp,
            hosts: &world.hosts_line(),
        },
    ));
    let sizes = args.sizes();
    let progress = printer && std::io::stderr().is_terminal();
    let mut rows = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        if progress {
            eprint!("\r[{}/{}] {} bytes ...", i + 1, sizes.len(), size);
        }
        let row = world.row(size)?;
        print(&report::row_line(args, &row));
        rows.push(row);
    }
    if progress {
        eprint!("\r{:60}\r", "");
    }
    print(&report::footer(&rows));
    // Every process reads its ranks' protocol counters (no execution is in flight now) and,
    // across processes, gathers the others'.
    let protocol = if args.stats || args.json.is_some() {
        world.protocol_stats()?
    } else {
        Vec::new()
    };
    if let Some(secs) = args.idle {
        let wall = std::time::Duration::from_secs(secs);
        let c0 = cost::ProcCost::now();
        std::thread::sleep(wall);
        let c = cost::ProcCost::now().since(&c0);
        print(&format!(
            "# Idle for {secs} s: {:.2} % of one CPU, {} voluntary + {} involuntary context \
             switches (this process, every thread)\n#",
            c.cpu_percent(wall),
            c.voluntary,
            c.involuntary
        ));
    }
    if args.stats {
        print(&report::cost_footer(&rows));
        print(&report::protocol_footer(&protocol));
    }
    if args.dump_on_exit {
        world.dump_all();
    }

    if printer {
        if let Some(p) = &args.json {
            report::write_json(p, args, world.transport_name(), &engine, &rows, &protocol)
                .map_err(|e| format!("--json {}: {e}", p.display()))?;
        }
        if let Some(p) = &args.plot {
            let factor = Into::<proxy_collectives::planner::Collective>::into(args.collective)
                .busbw_factor(args.ranks);
            let compare = args
                .compare
                .iter()
                .map(|f| compare::read(f, factor))
                .collect::<Result<Vec<_>, _>>()?;
            plot::write_plot(p, args, world.transport_name(), &rows, &compare.concat())?;
        }
    }
    Ok(if report::total_wrong(&rows) == 0 {
        0
    } else {
        EXIT_WRONG
    })
}

/// `--trace`, after the run, failed or not: stops recording, prints the latency breakdown
/// (from the process that runs rank 0) and writes the timeline; a failure to write it fails a
/// run that succeeded.
fn finish_trace(
    args: &Args,
    world: &run::World,
    result: Result<i32, String>,
) -> Result<i32, String> {
    let Some(pattern) = &args.trace else {
        return result;
    };
    let tracer = trace::tracer()?;
    tracer.set_on(false);
    let t = trace::collect(tracer);
    if world.first_rank() == 0 {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", trace::breakdown::text(&t));
        let _ = out.flush();
    }
    let written = trace::write(pattern, &t, world.local_ranks(), "proxy-perf --trace")
        .map(|_| ())
        .map_err(|e| format!("--{e}"));
    match (result, written) {
        (Ok(code), Err(e)) => {
            eprintln!("proxy-perf: error: {e}");
            Ok(code.max(EXIT_ERROR))
        }
        (result, Err(e)) => {
            eprintln!("proxy-perf: error: {e}");
            result
        }
        (result, Ok(())) => result,
    }
}
