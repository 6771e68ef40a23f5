//! `--tune FILE`: calibrates the planner's cost model on this machine. All-reduce is timed with
//! direct, recursive doubling, Rabenseifner and ring at every size of the sweep (in process, on
//! the in-memory transport; the least of [`PASSES`] sweeps), and the four constants of the model
//!
//! ```text
//! T = steps · α + entries · o + sent · β + reduced · γ
//! ```
//!
//! (`proxy_collectives::planner::tuner`) are fitted to the times by least squares on the
//! relative errors (each measurement weighs as much as any other, whatever its size), with no
//! constant below zero (a negative one is set to zero and the others fitted again: the active
//! set method of Lawson and Hanson's NNLS, which with four unknowns ends in at most four
//! rounds). The terms are the model's own ([`tuner::terms`]), so the fit is of the model the
//! planner uses. The four algorithms give the fit what it needs to tell the constants apart:
//! direct has one step and many entries, recursive doubling `log2 n` steps, the ring `2(n−1)`
//! steps and no reduction outside its transfers, Rabenseifner sends twice what it reduces.
//! The result goes to FILE ([`TuneFile`], written whole or not at all) and is printed with each
//! measurement against the fitted model and the tuner's choices with the old and the new
//! constants.

use std::io::Write as _;

use clap::ValueEnum;

use proxy_collectives::planner::tuner::{self, CostModel, Terms};
use proxy_collectives::planner::{Algorithm, Collective, PlanParams};
use proxy_runtime::tune_file::{TuneFile, Tuning};

use crate::args::{AlgoArg, Args, CollArg, TransportArg};
use crate::run::World;

/// The algorithms timed, all-reduce's four.
pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::Direct,
    Algorithm::RecursiveDoubling,
    Algorithm::Rabenseifner,
    Algorithm::Ring,
];

/// Sweeps per algorithm; each size's time is the least of them.
pub const PASSES: usize = 3;

/// One measurement: the model's terms and the time measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Bytes of the all-reduce.
    pub bytes: u64,
    /// The model's terms for it.
    pub terms: Terms,
    /// The time measured, ns.
    pub time_ns: f64,
}

impl Sample {
    fn row(&self) -> [f64; 4] {
        let t = &self.terms;
        // The unknowns in ns: α, o per step / entry; β, γ per byte.
        [
            t.steps as f64,
            t.entries as f64,
            t.sent as f64,
            t.reduced as f64,
        ]
    }
}

/// Solves the `k × k` system `a x = b` (Gaussian elimination with partial pivoting); `None`
/// when it is singular.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let k = b.len();
    for col in 0..k {
        let p = (col..k).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[p][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, p);
        b.swap(col, p);
        let (upper, lower) = a.split_at_mut(col + 1);
        let prow = &upper[col];
        let bcol = b[col];
        for (row, br) in lower.iter_mut().zip(b[col + 1..].iter_mut()) {
            let f = row[col] / prow[col];
            for (x, &p) in row[col..].iter_mut().zip(&prow[col..]) {
                *x -= f * p;
            }
            *br -= f * bcol;
        }
    }
    let mut x = vec![0.0; k];
    for r in (0..k).rev() {
        let s: f64 = (r + 1..k).map(|c| a[r][c] * x[c]).sum();
        x[r] = (b[r] - s) / a[r][r];
    }
    Some(x)
}

/// The constants (α, o in ns; β, γ in ns per byte) that minimise `Σ ((model − t) / t)²` over
/// `samples` with none below zero, or `None` when the samples cannot tell them apart.
pub fn fit(samples: &[Sample]) -> Option<[f64; 4]> {
    let mut free = [true; 4];
    for _ in 0..=4 {
        let idx: Vec<usize> = (0..4).filter(|&i| free[i]).collect();
        if idx.is_empty() {
            return Some([0.0; 4]);
        }
        // Normal equations of the weighted (relative) problem over the free unknowns.
        let mut a = vec![vec![0.0; idx.len()]; idx.len()];
        let mut b = vec![0.0; idx.len()];
        for s in samples {
            let w = 1.0 / s.time_ns.max(1.0);
            let row = s.row();
            for (i, &p) in idx.iter().enumerate() {
                b[i] += row[p] * w * s.time_ns * w;
                for (j, &q) in idx.iter().enumerate() {
                    a[i][j] += row[p] * w * row[q] * w;
                }
            }
        }
        let x = solve(a, b)?;
        let mut out = [0.0; 4];
        for (i, &p) in idx.iter().enumerate() {
            out[p] = x[i];
        }
        match (0..4)
            .filter(|&i| free[i] && out[i] < 0.0)
            .min_by(|&i, &j| out[i].total_cmp(&out[j]))
        {
            Some(neg) => free[neg] = false,
            None => return Some(out),
        }
    }
    None
}

/// The planner's constants from [`fit`]'s (rounded; β and γ to whole ps per byte).
pub fn model_of(x: [f64; 4]) -> CostModel {
    let r = |v: f64| v.max(0.0).round() as u64;
    CostModel {
        step_ns: r(x[0]),
        entry_ns: r(x[1]),
        byte_ps: r(x[2] * 1000.0),
        reduce_ps: r(x[3] * 1000.0),
    }
}

/// Root mean square of the relative errors of `m` over `samples`.
pub fn rms_relative_error(samples: &[Sample], m: &CostModel) -> f64 {
    let sq: f64 = samples
        .iter()
        .map(|s| {
            let e = (s.terms.time_ns(m) as f64 - s.time_ns) / s.time_ns.max(1.0);
            e * e
        })
        .sum();
    (sq / samples.len().max(1) as f64).sqrt()
}

/// The model's terms of an all-reduce of `bytes` with `algorithm` under `args`' ranks, chunk
/// and split.
fn terms_of(args: &Args, algorithm: Algorithm, bytes: u64) -> Option<Terms> {
    tuner::terms(
        Collective::AllReduce,
        algorithm,
        bytes,
        args.ranks,
        args.chunk,
        args.streams.saturating_mul(args.blocks) > 1,
    )
}

/// Runs the calibration (`--tune FILE`); returns the exit status.
///
/// # Errors
/// A message when the arguments do not suit a calibration, a run fails, the fit has no
/// solution or FILE cannot be written.
pub fn run(args: &Args, file: &std::path::Path) -> Result<i32, String> {
    if args.transport != TransportArg::Mem || args.progress_lib.is_some() {
        return Err("--tune runs in process (--transport mem, no --progress-lib)".into());
    }
    if args.ranks < 2 {
        return Err("--tune needs --ranks 2 or more".into());
    }
    let mut out = std::io::stdout().lock();
    let sizes = args.sizes();
    let _ = writeln!(
        out,
        "# proxy-perf --tune {}: all-reduce, {} ranks, sizes {}..{} B; {}; {}",
        file.display(),
        args.ranks,
        args.min_bytes,
        args.max_bytes,
        args.tuner_line(),
        args.protocol_line()
    );
    let mut samples = Vec::new();
    for algorithm in ALGORITHMS {
        let mut a = args.clone();
        a.collective = CollArg::AllReduce;
        a.algo = AlgoArg::from_str(algorithm.name(), false)?;
        let mut world = World::new(&a)?;
        // The least of PASSES sweeps (each size's two sides): the machine's other work only
        // ever adds time.
        let mut best: Vec<Option<(u64, f64)>> = vec![None; sizes.len()];
        for _ in 0..PASSES {
            for (b, &size) in best.iter_mut().zip(&sizes) {
                let row = world.row(size)?;
                if crate::report::total_wrong(std::slice::from_ref(&row)) != 0 {
                    return Err(format!("{} {size} B: wrong values", algorithm.name()));
                }
                let t = row.oop.time_us.min(row.ip.time_us);
                if b.is_none_or(|(_, old)| t < old) {
                    *b = Some((row.size, t));
                }
            }
        }
        for (bytes, time_us) in best.into_iter().flatten() {
            let Some(terms) = terms_of(&a, algorithm, bytes) else {
                continue;
            };
            let row_size = bytes;
            samples.push(Sample {
                algorithm,
                bytes: row_size,
                terms,
                time_ns: time_us * 1000.0,
            });
        }
    }
    let x = fit(&samples).ok_or("the measurements cannot tell the constants apart")?;
    let m = model_of(x);
    let rms = rms_relative_error(&samples, &m);
    let _ = writeln!(
        out,
        "#\n# {:>18} {:>10} {:>12} {:>12} {:>7}",
        "algorithm", "bytes", "measured us", "model us", "error"
    );
    for s in &samples {
        let model = s.terms.time_ns(&m) as f64;
        let _ = writeln!(
            out,
            "  {:>18} {:>10} {:>12.2} {:>12.2} {:>6.0}%",
            s.algorithm.name(),
            s.bytes,
            s.time_ns / 1000.0,
            model / 1000.0,
            (model - s.time_ns) / s.time_ns.max(1.0) * 100.0
        );
    }
    let old = args.tuning.model();
    let _ = writeln!(
        out,
        "#\n# fitted: α {} ns/step, o {} ns/entry, β {} ps/B sent, γ {} ps/B reduced; {} samples, \
         rms relative error {:.0} % (the old constants: {:.0} %)",
        m.step_ns,
        m.entry_ns,
        m.byte_ps,
        m.reduce_ps,
        samples.len(),
        rms * 100.0,
        rms_relative_error(&samples, &old) * 100.0
    );
    let choice = |model: &CostModel, size: u64| {
        let mut p = PlanParams::new(
            Collective::AllReduce,
            (size / args.dtype.size() as u64).max(1),
            args.dtype,
            0,
            args.ranks,
        );
        p.chunk_bytes = args.chunk;
        p.cost_model = *model;
        tuner::pick(&p).name()
    };
    for &size in &sizes {
        let _ = writeln!(
            out,
            "#  tuner's all-reduce choice at {:>10} B: {:>18} (old constants) {:>18} (fitted)",
            size,
            choice(&old, size),
            choice(&m, size)
        );
    }
    let measured_on = format!(
        "proxy-perf --tune: all-reduce, transport mem, {} ranks, {}..{} B, {} CPUs available",
        args.ranks,
        args.min_bytes,
        args.max_bytes,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    TuneFile::new(m, measured_on, samples.len() as u32, rms).write(file)?;
    let _ = writeln!(
        out,
        "# wrote {} (use it: NEURON_RT_PROXY_TUNE_FILE={}); it reads back as: {}",
        file.display(),
        file.display(),
        Tuning::File(file.to_owned(), TuneFile::read(file)?).describe()
    );
    Ok(0)
}

#[cfg(test)]
mod tests;
