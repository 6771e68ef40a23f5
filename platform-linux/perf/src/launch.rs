//! `proxy-perf --transport libfabric` or `shm` without a launcher: start one copy of this
//! executable per rank on this machine, with the same arguments, through the bootstrap's
//! [`LocalLaunch`] (root on 127.0.0.1, a free port; `FI_TCP_IFACE=lo`, so tcp stays on the
//! loopback interface), forward rank 0's stdout (the table) to ours and every rank's stderr to ours with
//! a `[rank r]` prefix, and exit with the worst child status.
//!
//! Every wait is bounded: once a child has failed, the others get
//! [`failure_grace`] to exit on their own (their bootstrap notices the lost peer, their tasks
//! time out), and the whole launch gets `PROXY_PERF_LAUNCH_TIMEOUT` seconds (default
//! [`DEFAULT_LAUNCH_TIMEOUT`]); children still running then are killed (only the children
//! this launch spawned, by their process ids).

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use super::args::Args;
use super::{EXIT_ERROR, EXIT_WRONG};
use proxy_bootstrap::launch::{LocalLaunch, OutStream, RankExit};
use proxy_bootstrap::{DEFAULT_TIMEOUT, TIMEOUT_ENV};

/// Bound of a whole local launch unless `PROXY_PERF_LAUNCH_TIMEOUT` (seconds) says otherwise.
pub const DEFAULT_LAUNCH_TIMEOUT: Duration = Duration::from_secs(3600);

/// The launch-timeout variable, in seconds.
pub const LAUNCH_TIMEOUT_ENV: &str = "PROXY_PERF_LAUNCH_TIMEOUT";

/// How long the other children may still run after one has failed: the bootstrap timeout (the
/// bound of their blocking bootstrap calls) plus the default task timeout and a margin.
pub fn failure_grace() -> Duration {
    let boot = std::env::var(TIMEOUT_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0 && s.is_finite())
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64);
    boot + Duration::from_secs(45)
}

fn launch_timeout() -> Result<Duration, String> {
    match std::env::var(LAUNCH_TIMEOUT_ENV) {
        Err(_) => Ok(DEFAULT_LAUNCH_TIMEOUT),
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s > 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
            _ => Err(format!(
                "{LAUNCH_TIMEOUT_ENV}={v:?} is not a positive number of seconds"
            )),
        },
    }
}

/// The exit status a child's end maps to: its own code, [`EXIT_ERROR`] when it was killed (by
/// a signal, or at the deadline) or could not be reaped.
pub fn exit_code(e: &RankExit) -> i32 {
    if e.killed_at_deadline {
        return EXIT_ERROR;
    }
    e.status.and_then(|s| s.code()).unwrap_or(EXIT_ERROR)
}

/// The worst of the children's statuses: an error beats wrong values, which beat success.
pub fn worst(codes: impl IntoIterator<Item = i32>) -> i32 {
    codes.into_iter().fold(0, |w, c| {
        let rank = |c: i32| match c {
            0 => 0,
            EXIT_WRONG => 1,
            _ => 2,
        };
        if rank(c) > rank(w) {
            c
        } else {
            w
        }
    })
}

/// Runs `args` as `args.ranks` local processes; returns the worst exit status.
///
/// # Errors
/// A message when the root address, the executable or a spawn fails (children already
/// started are killed).
pub fn run(args: &Args) -> Result<i32, String> {
    let limit = launch_timeout()?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut l = LocalLaunch::reserving(args.ranks, false)
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))?;
    let root = l.root();
    for r in 0..args.ranks {
        let mut c = Command::new(&exe);
        c.args(std::env::args_os().skip(1))
            // tcp on the loopback interface only: every rank is on this machine.
            .env("FI_TCP_IFACE", "lo");
        l.spawn(r, c)
            .map_err(|e| format!("cannot start rank {r} ({}): {e}", exe.display()))?;
    }
    log::info!(
        "launched {} local processes of {} (bootstrap root {root})",
        args.ranks,
        exe.display()
    );
    let start = Instant::now();
    let mut failed_at: Option<Instant> = None;
    let forward = |line: proxy_bootstrap::launch::Line| match (line.rank, line.stream) {
        (0, OutStream::Stdout) => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", line.text);
            let _ = out.flush();
        }
        (r, _) => eprintln!("[rank {r}] {}", line.text),
    };
    loop {
        // The first line waits a little; then what is queued, a bounded number at a time (a
        // chatty child must not keep the exits from being checked).
        let mut wait = Duration::from_millis(20);
        for _ in 0..1000 {
            let Some(line) = l.next_line(wait) else { break };
            forward(line);
            wait = Duration::ZERO;
        }
        let running = l.poll_exits();
        if running == 0 {
            break;
        }
        if failed_at.is_none() && l.exits().iter().any(|e| exit_code(e) != 0) {
            failed_at = Some(Instant::now());
        }
        let over = start.elapsed() >= limit;
        let given_up = failed_at.is_some_and(|t| t.elapsed() >= failure_grace());
        if over || given_up {
            eprintln!(
                "proxy-perf: {running} rank process(es) still running {}: killing them",
                if over {
                    format!("after {limit:?} ({LAUNCH_TIMEOUT_ENV})")
                } else {
                    "long after another rank failed".to_owned()
                }
            );
            break;
        }
    }
    // Everyone has exited (or is killed now); the readers are joined, so every line is queued.
    let exits = l.wait_all(Duration::ZERO);
    while let Some(line) = l.next_line(Duration::ZERO) {
        forward(line);
    }
    for e in &exits {
        if exit_code(e) != 0 {
            eprintln!(
                "proxy-perf: rank {} ended with {}",
                e.rank,
                match (e.killed_at_deadline, e.status) {
                    (true, _) => "a kill at the deadline".to_owned(),
                    (false, Some(s)) => s.to_string(),
                    (false, None) => "an unknown status".to_owned(),
                }
            );
        }
    }
    Ok(worst(exits.iter().map(exit_code)))
}
