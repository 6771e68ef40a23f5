//! The Linux side of the engine's event trace (`proxy_core::base::trace`, issue 28): the
//! process's [`Tracer`] ([`tracer`]: the platform clock, a thread id per OS thread with the
//! thread's name kept for the timeline), draining it into a [`Trace`], and the one writer of
//! the timeline as Chrome Trace Event / Perfetto JSON ([`chrome`], [`write`](fn@write)) and of
//! the per-op latency breakdown in text ([`breakdown`]). `proxy-perf --trace` and the C
//! libraries (`libnrt_proxy.so`'s `nrt_proxy_trace_*` and `NEURON_RT_PROXY_TRACE`) both write
//! through it; docs/tracing.md walks through a trace.
//!
//! **One timeline from several copies of the core.** Each shared library links its own copy
//! of the core and so has its own tracer; the driver library merges the progress library's
//! records into its own (over the nccom ABI's `nccom_trace_collect`). For the records to line
//! up, both copies stamp them the same way: the time from [`clock::clock`] (`CLOCK_MONOTONIC`,
//! read on x86_64 as the calibrated TSC and re-fitted at each drain) and the thread as its OS
//! thread id (`gettid`), so one thread is one track whichever library recorded it.
//!
//! [`Trace::new`] sorts the records by time and fills in each record's rank where the
//! recording site did not know it (task transitions, the drive token, sleep and wake-up) from
//! the rank of the records its thread wrote around it.

pub mod breakdown;
pub mod c_record;
pub mod chrome;
pub mod clock;
mod process;
#[cfg(feature = "testing")]
pub mod testing;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use proxy_core::base::trace::{Drained, Record, Tracer, NONE};

pub use process::{
    from_env, os_thread_name, start, stop, thread_id, thread_lane, thread_names, tracer,
    DEFAULT_CAPACITY, LANES, TRACE_ENV, TRACE_MASK_ENV,
};

/// The drained records of a run.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Every record, sorted by time; `rank` filled in from the thread where it was [`NONE`]
    /// (still [`NONE`] when the thread recorded no rank at all).
    pub records: Vec<Record>,
    /// Thread names by thread id.
    pub threads: HashMap<u32, String>,
    /// What the drain saw (records, pending, dropped; summed over the tracers merged).
    pub drained: Drained,
}

impl Trace {
    /// A [`Trace`] of `records` (any order): sorts them by time and fills in missing ranks.
    pub fn new(mut records: Vec<Record>, threads: HashMap<u32, String>, drained: Drained) -> Self {
        records.sort_by_key(|r| r.ts_ns);
        attribute_ranks(&mut records);
        Self {
            records,
            threads,
            drained,
        }
    }

    /// The ranks the records name, ascending ([`NONE`] left out).
    pub fn ranks(&self) -> Vec<u32> {
        let mut ranks: Vec<u32> = self
            .records
            .iter()
            .map(|r| r.rank)
            .filter(|&r| r != NONE)
            .collect();
        ranks.sort_unstable();
        ranks.dedup();
        ranks
    }
}

/// Drains `tracer`'s ring: its records in claim order, their times re-fitted to
/// `CLOCK_MONOTONIC` ([`clock::refine`]), and the drain's counts.
pub fn drain(tracer: &Tracer) -> (Vec<Record>, Drained) {
    let mut records = Vec::new();
    let refine = clock::refine();
    let drained = tracer.ring().drain(|r| {
        records.push(Record {
            ts_ns: refine(r.ts_ns),
            ..*r
        })
    });
    (records, drained)
}

/// Drains `tracer`'s ring into a [`Trace`], with the names of this process's threads.
pub fn collect(tracer: &Tracer) -> Trace {
    let (records, drained) = drain(tracer);
    Trace::new(records, thread_names(), drained)
}

/// The sum of two drains' counts (one timeline of two tracers).
pub fn add_counts(a: Drained, b: Drained) -> Drained {
    Drained {
        records: a.records + b.records,
        pending: a.pending + b.pending,
        dropped: a.dropped + b.dropped,
    }
}

/// Gives a record without a rank the rank of the last record with one on its thread (a
/// thread drives its ranks one tick at a time), or, before the thread's first such record,
/// that first record's.
fn attribute_ranks(records: &mut [Record]) {
    let mut first: HashMap<u32, u32> = HashMap::new();
    for r in records.iter().filter(|r| r.rank != NONE) {
        first.entry(r.thread).or_insert(r.rank);
    }
    let mut last: HashMap<u32, u32> = HashMap::new();
    for r in records.iter_mut() {
        if r.rank == NONE {
            if let Some(&k) = last.get(&r.thread).or_else(|| first.get(&r.thread)) {
                r.rank = k;
            }
        } else {
            last.insert(r.thread, r.rank);
        }
    }
}

/// The file `pattern` names for `rank`: `%r` replaced by the rank.
pub fn path_for(pattern: &Path, rank: u32) -> PathBuf {
    let s = pattern.to_string_lossy();
    PathBuf::from(s.replace("%r", &rank.to_string()))
}

/// `true` when `pattern` has a `%r` (one file per rank).
pub fn per_rank(pattern: &Path) -> bool {
    pattern.to_string_lossy().contains("%r")
}

/// Writes `trace` as Chrome Trace JSON ([`chrome::document`], `source` in its `otherData`):
/// with `%r` in `pattern` one file per rank of `ranks`, else one file of every rank. Returns
/// the files written.
///
/// # Errors
/// A message naming the file that could not be written.
pub fn write(
    pattern: &Path,
    trace: &Trace,
    ranks: &[u32],
    source: &str,
) -> Result<Vec<PathBuf>, String> {
    let write = |path: &Path, only: Option<u32>| {
        let doc = chrome::document(trace, only, source);
        let text = serde_json::to_string(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("trace {}: {e}", path.display()))
    };
    if per_rank(pattern) {
        let mut out = Vec::new();
        for &r in ranks {
            let p = path_for(pattern, r);
            write(&p, Some(r))?;
            out.push(p);
        }
        Ok(out)
    } else {
        write(pattern, None)?;
        Ok(vec![pattern.to_owned()])
    }
}

#[cfg(test)]
mod tests;
