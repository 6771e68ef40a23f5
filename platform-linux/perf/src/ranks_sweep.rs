//! `--ranks-sweep N,N,...`: the cost of one collective size against the number of ranks (in
//! process), beside the tuner's model, as a table and (with `--plot`) a log-log chart of time
//! against ranks with other runs' lines (`--compare-ranks`, e.g. Open MPI's at the same
//! counts). The question it answers: does the time grow like `log n` (the `log n`
//! algorithms) or like `n` (ring, direct)?

use std::io::Write as _;
use std::path::Path;

use proxy_collectives::planner::tuner;

use crate::args::{Args, TransportArg};
use crate::run::World;

pub use crate::plot::{RanksRow, RanksSeries};

/// Reads a `--compare-ranks` file: `ranks time_us` per line, `#` comments and blank lines
/// skipped.
///
/// # Errors
/// `"<file>:<line>: ..."` for a line that is not two numbers, or the file's read error.
pub fn read_series(path: &Path) -> Result<RanksSeries, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut points = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let bad = || {
            format!(
                "{}:{}: want `ranks time_us`, got {line:?}",
                path.display(),
                i + 1
            )
        };
        if f.len() != 2 {
            return Err(bad());
        }
        let n: f64 = f[0].parse().map_err(|_| bad())?;
        let t: f64 = f[1].parse().map_err(|_| bad())?;
        points.push((n, t));
    }
    let label = path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    );
    Ok(RanksSeries { label, points })
}

/// Runs the sweep; returns the exit status (`EXIT_WRONG` when a value was wrong).
///
/// # Errors
/// A message for arguments that do not suit it, a failed run, a bad `--compare-ranks` file or
/// plot.
pub fn run(args: &Args) -> Result<i32, String> {
    if args.transport != TransportArg::Mem {
        return Err("--ranks-sweep runs in process (--transport mem)".into());
    }
    if args.hosts.is_some() {
        return Err("--ranks-sweep takes no --hosts (the rank count changes)".into());
    }
    let compare = args
        .compare_ranks
        .iter()
        .map(|f| read_series(f))
        .collect::<Result<Vec<_>, _>>()?;
    let size = args.min_bytes;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "# proxy-perf {} --ranks-sweep: {size} B, in process; {}\n#  protocol: {}\n#\n# {:>6} {:>20} {:>12} {:>12} {:>12} {:>7}",
        proxy_collectives::planner::Collective::from(args.collective).name(),
        args.tuner_line(),
        args.protocol_line(),
        "ranks",
        "algorithm",
        "oop us",
        "ip us",
        "model us",
        "#wrong"
    );
    let mut rows = Vec::new();
    for &n in &args.ranks_sweep {
        let mut a = args.clone();
        a.ranks = n;
        a.root = a.root.min(n.saturating_sub(1));
        let mut world = World::new(&a)?;
        let row = world.row(size)?;
        let p = world.params_for(size);
        // A hierarchy asked for where the tuner would not offer it: its own cost.
        let model = tuner::modelled_ns(&p, p.resolved_algorithm())
            .unwrap_or_else(|| tuner::hierarchical_cost(&p));
        let r = RanksRow {
            ranks: n,
            algorithm: row.algorithm,
            oop_us: row.oop.time_us,
            ip_us: row.ip.time_us,
            model_us: model as f64 / 1000.0,
            wrong: row.oop.wrong.unwrap_or(0) + row.ip.wrong.unwrap_or(0),
        };
        let _ = writeln!(
            out,
            "  {:>6} {:>20} {:>12.2} {:>12.2} {:>12.2} {:>7}",
            r.ranks, r.algorithm, r.oop_us, r.ip_us, r.model_us, r.wrong
        );
        rows.push(r);
    }
    for s in &compare {
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|(n, t)| format!("{n} ranks {t:.2} us"))
            .collect();
        let _ = writeln!(out, "# {}: {}", s.label, pts.join(", "));
    }
    if let Some(p) = &args.plot {
        crate::plot::write_ranks_plot(p, args, size, &rows, &compare)?;
    }
    Ok(if rows.iter().all(|r| r.wrong == 0) {
        0
    } else {
        crate::EXIT_WRONG
    })
}
