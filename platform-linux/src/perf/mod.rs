//! `proxy-perf`: nccl-tests-style measurement of collectives through the whole engine
//! (issue 6). The binary is `src/bin/proxy-perf.rs`; everything it does is here so tests can
//! reuse it.
//!
//! Per size: every rank plans the collective ([`proxy_core::planner`]), the proxy engine files
//! the block and steps it, the device emulators ([`crate::emulator`]) play the device side
//! through host words, the in-process transport moves the bytes; warm-up, timed iterations
//! (one execution each, or with `--loop` one execution looping over the block), then `-c`
//! checked runs into poisoned outputs, out of place and in place.

pub mod args;
pub mod engine;
pub mod report;
pub mod run;

use std::io::{IsTerminal, Write};
use std::time::Instant;

use args::{Args, TransportArg};

/// `std::time::Instant` as the core's [`proxy_core::time::Clock`] (nanoseconds since the first
/// read in this process).
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

impl proxy_core::time::Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Exit status when a value was wrong.
pub const EXIT_WRONG: i32 = 1;
/// Exit status for a usage or setup error, or a failed execution.
pub const EXIT_ERROR: i32 = 2;

/// `NEURON_RT_RANKS_PER_NETWORK_PROXY` (default 1).
///
/// # Errors
/// A message for a value that is not a positive integer.
pub fn ranks_per_proxy_from_env() -> Result<u32, String> {
    match std::env::var("NEURON_RT_RANKS_PER_NETWORK_PROXY") {
        Err(_) => Ok(1),
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!(
                "NEURON_RT_RANKS_PER_NETWORK_PROXY='{v}' is not a positive integer"
            )),
        },
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
    if args.transport == TransportArg::Libfabric {
        return Err(if cfg!(feature = "libfabric") {
            "--transport libfabric: proxy-perf does not drive the libfabric transport yet \
             (ranks as processes arrive with its own issue); use --transport mem"
                .into()
        } else {
            "--transport libfabric: this proxy-perf was not built with libfabric \
             (build with --features libfabric once proxy-perf drives it); use --transport mem"
                .into()
        });
    }
    if args.ranks == 0 || args.ranks > proxy_core::mem_transport::MAX_FABRIC_RANKS {
        return Err(format!(
            "--ranks {} out of range (1..={})",
            args.ranks,
            proxy_core::mem_transport::MAX_FABRIC_RANKS
        ));
    }
    if args.root >= args.ranks {
        return Err(format!(
            "--root {} is not a rank (ranks {})",
            args.root, args.ranks
        ));
    }
    let rpp = match args.ranks_per_proxy {
        Some(r) => r,
        None => ranks_per_proxy_from_env()?,
    };
    let mut world = run::World::new(args)?;
    let engine = world.engine_name();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", report::header(args, &engine, rpp));
    let _ = out.flush();
    let sizes = args.sizes();
    let progress = std::io::stderr().is_terminal();
    let mut rows = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        if progress {
            eprint!("\r[{}/{}] {} bytes ...", i + 1, sizes.len(), size);
        }
        let row = world.row(size)?;
        let _ = writeln!(out, "{}", report::row_line(args, &row));
        let _ = out.flush();
        rows.push(row);
    }
    if progress {
        eprint!("\r{:60}\r", "");
    }
    let _ = writeln!(out, "{}", report::footer(&rows));
    let _ = out.flush();
    if let Some(p) = &args.json {
        report::write_json(p, args, &engine, &rows)
            .map_err(|e| format!("--json {}: {e}", p.display()))?;
    }
    if let Some(p) = &args.plot {
        report::write_plot(p, args, &rows)?;
    }
    Ok(if report::total_wrong(&rows) == 0 {
        0
    } else {
        EXIT_WRONG
    })
}
