//! A sample recorder for criterion's `iter_custom`, and the summary rows the benches print.
//!
//! Criterion reports a mean and its confidence interval; the hand-off and wake benches also
//! need percentiles, and every bench prints one pasteable row per case. The recorder keeps
//! what the bench itself measured (batches and single latencies), dropping what came before
//! the warm-up window ended, and answers means and percentiles of that.

use std::cell::RefCell;
use std::time::{Duration, Instant};

/// Measurements of one bench case: batches (`iters`, total time) and single latencies (ns).
///
/// What is recorded during the warm-up window is kept apart and used only when nothing came
/// after it (criterion's `--test` mode runs each routine once).
///
/// Not `Sync`: one case records from the thread that runs criterion's routine.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    warm_up: Duration,
    /// `[warm-up, measured]` batches.
    batches: [RefCell<Vec<(u64, Duration)>>; 2],
    /// `[warm-up, measured]` single latencies in ns (the warm-up set keeps at most 1000).
    samples: [RefCell<Vec<u64>>; 2],
}

impl Recorder {
    /// A recorder whose warm-up window is the first `warm_up` after now.
    pub fn new(warm_up: Duration) -> Self {
        Self {
            start: Instant::now(),
            warm_up,
            batches: Default::default(),
            samples: Default::default(),
        }
    }

    fn phase(&self) -> usize {
        usize::from(self.start.elapsed() >= self.warm_up)
    }

    /// Records a batch: `iters` iterations took `total`.
    pub fn batch(&self, iters: u64, total: Duration) {
        self.batches[self.phase()].borrow_mut().push((iters, total));
    }

    /// Records one latency in ns.
    pub fn sample(&self, ns: u64) {
        let phase = self.phase();
        let mut s = self.samples[phase].borrow_mut();
        if phase == 0 && s.len() >= 1000 {
            s.clear();
        }
        s.push(ns);
    }

    fn batches(&self) -> Vec<(u64, Duration)> {
        let m = self.batches[1].borrow();
        if m.is_empty() {
            self.batches[0].borrow().clone()
        } else {
            m.clone()
        }
    }

    fn samples(&self) -> Vec<u64> {
        let m = self.samples[1].borrow();
        if m.is_empty() {
            self.samples[0].borrow().clone()
        } else {
            m.clone()
        }
    }

    /// Mean time per iteration over the recorded batches, in ns (`None` if nothing recorded).
    pub fn mean_ns(&self) -> Option<f64> {
        let b = self.batches();
        let iters: u64 = b.iter().map(|(i, _)| i).sum();
        let total: Duration = b.iter().map(|(_, d)| *d).sum();
        (iters > 0).then(|| total.as_nanos() as f64 / iters as f64)
    }

    /// Number of single latencies the percentiles are taken over.
    pub fn sample_count(&self) -> usize {
        self.samples().len()
    }

    /// The `p`-th percentile (0..=100, nearest rank) of the single latencies, in ns.
    pub fn percentile(&self, p: f64) -> Option<u64> {
        percentile(&mut self.samples(), p)
    }

    /// Mean of the single latencies, in ns.
    pub fn sample_mean(&self) -> Option<f64> {
        let s = self.samples();
        (!s.is_empty()).then(|| s.iter().sum::<u64>() as f64 / s.len() as f64)
    }
}

/// The `p`-th percentile (0..=100, nearest rank) of `v` (sorted in place); `None` when empty.
pub fn percentile(v: &mut [u64], p: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// Prints one summary row, `| bench | case | metric | value | unit |`, to stdout.
pub fn row(bench: &str, case: &str, metric: &str, value: f64, unit: &str) {
    let v = if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    };
    println!("| {bench} | {case} | {metric} | {v} | {unit} |");
}

/// Prints the 1-minute load average (`/proc/loadavg`) as a row: on a shared machine the
/// numbers that follow are only as quiet as this.
pub fn row_load(bench: &str) {
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()));
    if let Some(l) = load {
        row(bench, "machine", "load average (1 min) at start", l, "");
    }
}

/// Prints the mean-per-element row of a batch recorder (`elements` per iteration), if it
/// recorded anything.
pub fn row_per_element(bench: &str, case: &str, rec: &Recorder, elements: u64, unit: &str) {
    if let Some(m) = rec.mean_ns() {
        row(bench, case, "mean", m / elements.max(1) as f64, unit);
    }
}

/// Prints p50, p99 and mean rows of a latency recorder, if it recorded anything.
pub fn row_latency(bench: &str, case: &str, rec: &Recorder) {
    if let (Some(p50), Some(p99), Some(mean)) = (
        rec.percentile(50.0),
        rec.percentile(99.0),
        rec.sample_mean(),
    ) {
        let n = rec.sample_count();
        row(bench, case, &format!("p50 (n={n})"), p50 as f64, "ns");
        row(bench, case, "p99", p99 as f64, "ns");
        row(bench, case, "mean", mean, "ns");
    }
}

#[cfg(test)]
mod tests;
