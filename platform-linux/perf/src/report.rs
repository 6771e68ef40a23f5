//! Output: nccl-tests' header, table and footer; `--json` rows (`--plot`: [`crate::plot`]).

use std::fmt::Write as _;
use std::path::Path;

use proxy_collectives::planner::{Algorithm, Collective};

use super::args::{Args, TransportArg};
use super::run::{Measure, RankProtocol, Row};

/// Number of whitespace-separated fields of a data row.
pub const ROW_FIELDS: usize = 13;

/// What the header says beyond the arguments.
#[derive(Clone, Copy, Debug)]
pub struct HeaderInfo<'a> {
    /// What runs the proxy.
    pub engine: &'a str,
    /// The transport (`mem`, `libfabric (provider tcp;ofi_rxm)`).
    pub transport: &'a str,
    /// Where the progress half comes from (`in-process`, `loaded from PATH ...`).
    pub progress_half: &'a str,
    /// Ranks per network proxy.
    pub ranks_per_proxy: u32,
    /// The hosts and CPUs the tuner is told of (`World::hosts_line`).
    pub hosts: &'a str,
}

/// The header: what ran, then the two column-title lines.
pub fn header(args: &Args, info: &HeaderInfo<'_>) -> String {
    let c: Collective = args.collective.into();
    let mode = match (args.loop_mode, args.barrier) {
        (true, _) => {
            "loop (one execution whose block schedule repeats the block -n times; ops recycled)"
        }
        (false, crate::args::BarrierArg::End) => {
            "execution (one network task + one barrier task per rank per iteration; barrier \
             triggered at the end)"
        }
        (false, crate::args::BarrierArg::Launch) => {
            "execution (one network task + one barrier task per rank per iteration; barrier \
             triggered at the launch)"
        }
    };
    let step = if args.step_bytes > 0 {
        format!("{}(bytes)", args.step_bytes)
    } else {
        format!("{}(factor)", args.step_factor.max(2))
    };
    let mut s = String::new();
    let _ = writeln!(s, "# proxy-perf {}", c.name());
    let _ = writeln!(
        s,
        "#  ranks {} | transport {} | ranks per network proxy {} | mode: {}",
        args.ranks, info.transport, info.ranks_per_proxy, mode
    );
    let _ = writeln!(s, "#  proxy: {}", info.engine);
    let _ = writeln!(s, "#  progress half: {}", info.progress_half);
    let _ = writeln!(s, "#  protocol: {}", args.protocol_line());
    let _ = writeln!(s, "#  tuner: {}", args.tuner_line());
    let _ = writeln!(s, "#  hosts: {}", info.hosts);
    let _ = writeln!(
        s,
        "#  minBytes {} maxBytes {} step: {} warmup iters: {} iters: {} check iters: {} type {} op {} root {} algo {} chunk {}",
        args.min_bytes,
        args.max_bytes,
        step,
        args.warmup,
        args.iters_label(),
        args.check,
        args.dtype.name(),
        args.op.name(),
        args.root,
        Algorithm::from(args.algo).name(),
        args.chunk
    );
    let _ = writeln!(s, "#");
    let _ = writeln!(s, "#{:>60}{:>35}", "out-of-place", "in-place");
    let _ = writeln!(
        s,
        "#{:>11} {:>13} {:>9} {:>7} {:>7} {:>9} {:>7} {:>7} {:>6} {:>9} {:>7} {:>7} {:>6}",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong"
    );
    let _ = write!(
        s,
        "#{:>11} {:>13} {:>9} {:>7} {:>7} {:>9} {:>7} {:>7} {:>6} {:>9} {:>7} {:>7} {:>6}",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
    );
    s
}

/// The transport's short name.
pub fn transport_name(t: TransportArg) -> &'static str {
    match t {
        TransportArg::Mem => "mem",
        TransportArg::Libfabric => "libfabric",
        TransportArg::Shm => "shm",
    }
}

fn side(m: &Measure) -> String {
    let wrong = m.wrong.map_or_else(|| "N/A".to_string(), |w| w.to_string());
    let time = if m.time_us >= 10_000.0 {
        format!("{:.0}", m.time_us)
    } else {
        format!("{:.2}", m.time_us)
    };
    format!("{:>9} {:>7.2} {:>7.2} {:>6}", time, m.algbw, m.busbw, wrong)
}

/// One data row.
pub fn row_line(args: &Args, r: &Row) -> String {
    let c: Collective = args.collective.into();
    let redop = if c.reduces() { args.op.name() } else { "none" };
    let root: i64 = if c.rooted() { i64::from(args.root) } else { -1 };
    format!(
        " {:>11} {:>13} {:>9} {:>7} {:>7} {} {}",
        r.size,
        r.count,
        args.dtype.name(),
        redop,
        root,
        side(&r.oop),
        side(&r.ip)
    )
}

/// Wrong elements over every row, both sides.
pub fn total_wrong(rows: &[Row]) -> u64 {
    rows.iter()
        .map(|r| r.oop.wrong.unwrap_or(0) + r.ip.wrong.unwrap_or(0))
        .sum()
}

/// `key` of each run of sizes with the same key, e.g. `direct 8..65536, ring 131072`.
fn runs_of<K: PartialEq + std::fmt::Display>(rows: &[Row], key: impl Fn(&Row) -> K) -> String {
    let mut runs: Vec<(K, u64, u64)> = Vec::new();
    for r in rows {
        let k = key(r);
        match runs.last_mut() {
            Some((a, _, hi)) if *a == k => *hi = r.size,
            _ => runs.push((k, r.size, r.size)),
        }
    }
    runs.iter()
        .map(|(k, lo, hi)| {
            if lo == hi {
                format!("{k} {lo}")
            } else {
                format!("{k} {lo}..{hi}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The algorithm of each run of sizes, e.g. `direct 8..65536, ring 131072..67108864` (the
/// planner's choice by size with `--algo auto`).
pub fn algorithms(rows: &[Row]) -> String {
    runs_of(rows, |r| r.algorithm)
}

/// The timed iterations per size, runs of equal counts joined: `20000 8..64, 20 1048576`.
pub fn iterations(rows: &[Row]) -> String {
    runs_of(rows, |r| r.oop.iters)
}

/// nccl-tests' footer, the algorithm and the timed iterations per size.
pub fn footer(rows: &[Row]) -> String {
    let wrong = total_wrong(rows);
    let avg = if rows.is_empty() {
        0.0
    } else {
        rows.iter().map(|r| r.oop.busbw + r.ip.busbw).sum::<f64>() / (2 * rows.len()) as f64
    };
    format!(
        "# Out of bounds values : {} {}\n# Avg bus bandwidth    : {:.4} \n# Algorithm by size (B)  : {}\n# Iterations by size (B) : {}\n#",
        wrong,
        if wrong == 0 { "OK" } else { "FAILED" },
        avg,
        algorithms(rows),
        iterations(rows)
    )
}

/// `--stats`: what one collective cost this process, per size (out of place): voluntary and
/// involuntary context switches (a thread blocked; the scheduler took a CPU) and CPU time
/// over all its threads, from `getrusage` around the timed iterations; and the ticks its
/// proxy queues began (passes over their tasks, all queues together).
pub fn cost_footer(rows: &[Row]) -> String {
    let mut s = String::from(
        "# Cost per collective of this process (out of place; size B: voluntary + involuntary \
         context switches, CPU µs, proxy queue ticks):\n",
    );
    for r in rows {
        let (v, i) = r.oop.cost.switches_per(u64::from(r.oop.iters));
        let n = f64::from(r.oop.iters.max(1));
        let cpu = r.oop.cost.cpu.as_secs_f64() * 1e6 / n;
        let ticks = r.oop.ticks as f64 / n;
        let _ = writeln!(
            s,
            "#   {:>12}: {v:.1} + {i:.1} switches, {cpu:.1} µs CPU, {ticks:.1} ticks",
            r.size
        );
    }
    s.push('#');
    s
}

/// `--stats`: every rank's protocol counters, one row per rank, as a `#` footer table (columns:
/// rank, starts, block switches, early send completions, receives posted ahead, most ahead,
/// index wraps, peak outstanding sends, peak outstanding receives).
pub fn protocol_footer(ranks: &[RankProtocol]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Protocol counters per rank (cumulative over the sweep):"
    );
    let _ = write!(
        s,
        "#{:>5} {:>9} {:>9} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9}",
        "rank",
        "starts",
        "switches",
        "early_send",
        "recv_ahead",
        "max_ahead",
        "wraps",
        "peak_send",
        "peak_recv"
    );
    for r in ranks {
        match &r.stats {
            Ok(p) => {
                let _ = write!(
                    s,
                    "\n#{:>5} {:>9} {:>9} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9}",
                    r.rank,
                    p.starts,
                    p.block_switches,
                    p.early_send_completions,
                    p.recvs_posted_ahead,
                    p.max_recv_ahead,
                    p.index_wraps,
                    p.peak_outstanding_send,
                    p.peak_outstanding_recv
                );
            }
            Err(e) => {
                let _ = write!(s, "\n#{:>5} not available: {e}", r.rank);
            }
        }
    }
    s
}

/// One rank's `protocol` object of the JSON output (the field names of `ProtocolStats`), or
/// `null` when its counters could not be read.
fn protocol_json(r: &RankProtocol) -> serde_json::Value {
    match &r.stats {
        Ok(p) => serde_json::json!({
            "starts": p.starts,
            "block_switches": p.block_switches,
            "early_send_completions": p.early_send_completions,
            "recvs_posted_ahead": p.recvs_posted_ahead,
            "max_recv_ahead": p.max_recv_ahead,
            "index_wraps": p.index_wraps,
            "peak_outstanding_send": p.peak_outstanding_send,
            "peak_outstanding_recv": p.peak_outstanding_recv,
        }),
        Err(_) => serde_json::Value::Null,
    }
}

fn measure_json(m: &Measure) -> serde_json::Value {
    serde_json::json!({
        "iters": m.iters,
        "time_us": m.time_us,
        "algbw_gbps": m.algbw,
        "busbw_gbps": m.busbw,
        "wrong": m.wrong,
        "timed_seam_starts": m.timed_starts,
        "timed_device_executions": m.timed_device_execs,
        "timed_recv_bytes": m.timed_recv_bytes,
        "recv_bytes_per_execution": m.recv_bytes_per_exec,
        "filed_blocks": m.filed_blocks,
        "pool_ops_before": m.pool_ops.map(|p| p.0),
        "pool_ops_after": m.pool_ops.map(|p| p.1),
        "voluntary_switches": m.cost.voluntary,
        "involuntary_switches": m.cost.involuntary,
        "cpu_us": m.cost.cpu.as_secs_f64() * 1e6,
        "timed_ticks": m.ticks,
    })
}

/// Writes every row as JSON (an object with the settings, a `rows` array and a `ranks` array
/// with each rank's `protocol` counters, cumulative over the sweep: `{"rank": 0, "protocol":
/// {"starts": .., ..}}`, `"protocol": null` plus `"protocol_error"` when a rank's counters could
/// not be read).
///
/// # Errors
/// The I/O error.
pub fn write_json(
    path: &Path,
    args: &Args,
    transport: &str,
    engine: &str,
    rows: &[Row],
    protocol: &[RankProtocol],
) -> std::io::Result<()> {
    let c: Collective = args.collective.into();
    let v = serde_json::json!({
        "collective": c.name(),
        "ranks": args.ranks,
        "transport": transport_name(args.transport),
        "transport_detail": transport,
        "mode": if args.loop_mode { "loop" } else { "execution" },
        "engine": engine,
        "type": args.dtype.name(),
        "op": args.op.name(),
        "root": args.root,
        "iters": args.fixed_iters(),
        "min_time_ms": args.min_time_ms,
        "warmup_iters": args.warmup,
        "check_iters": args.check,
        "busbw_factor": c.busbw_factor(args.ranks),
        "protocol_options": args.protocol_json(),
        "rows": rows.iter().map(|r| serde_json::json!({
            "size": r.size,
            "count": r.count,
            "algorithm": r.algorithm,
            "out_of_place": measure_json(&r.oop),
            "in_place": measure_json(&r.ip),
        })).collect::<Vec<_>>(),
        "ranks": protocol.iter().map(|r| {
            let mut v = serde_json::json!({ "rank": r.rank, "protocol": protocol_json(r) });
            if let Err(e) = &r.stats {
                v["protocol_error"] = serde_json::Value::from(e.as_str());
            }
            v
        }).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&v).map_err(std::io::Error::other)?;
    std::fs::write(path, text + "\n")
}
