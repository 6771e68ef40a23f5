//! `--trace FILE`: the engine's event records (`proxy_core::base::trace`) drained into a
//! Chrome Trace Event / Perfetto JSON timeline ([`chrome`]) and a per-op latency breakdown in
//! text ([`breakdown`]); docs/tracing.md walks through one.
//!
//! This module installs the process's [`Tracer`] (ring of [`CAPACITY`] records, the
//! [`MonotonicClock`], a thread id per thread with the thread's name kept for the timeline),
//! and [`collect`]s the records into a [`Trace`]: sorted by time, each record's rank filled in
//! where the recording site did not know it (task transitions, the drive token, sleep and
//! wake-up) from the rank of the records its thread wrote around it.

pub mod breakdown;
pub mod chrome;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use proxy_core::base::time::MonotonicClock;
use proxy_core::base::trace::{self, Drained, Record, Tracer, NONE};

/// Records the ring holds (80 bytes each with the slot's flag: 80 MiB, allocated with `--trace`
/// only). A run records only the executions it traces (the checked ones, or with `--trace-all`
/// the whole run); past this the ring drops and counts.
pub const CAPACITY: usize = 1 << 20;

/// The names of the threads that recorded, by thread id.
static THREAD_NAMES: Mutex<Vec<(u32, String)>> = Mutex::new(Vec::new());
static NEXT_THREAD: AtomicU32 = AtomicU32::new(1);

thread_local! {
    static THREAD_ID: u32 = {
        let id = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
        let name = std::thread::current().name().unwrap_or("thread").to_owned();
        if let Ok(mut names) = THREAD_NAMES.lock() {
            names.push((id, name));
        }
        id
    };
}

/// The recording thread's id (1, 2, ... in the order threads first recorded; 0 while a thread
/// is being torn down).
fn thread_id() -> u32 {
    THREAD_ID.try_with(|t| *t).unwrap_or(0)
}

/// The process's tracer, installed at the first call (off until [`Tracer::set_on`]).
///
/// # Errors
/// A message when another tracer was installed in this process first (by a library).
pub fn tracer() -> Result<&'static Tracer, String> {
    static OURS: OnceLock<&'static Tracer> = OnceLock::new();
    static CLOCK: MonotonicClock = MonotonicClock;
    let t = *OURS.get_or_init(|| {
        let t: &'static Tracer = Box::leak(Box::new(Tracer::new(CAPACITY, &CLOCK, thread_id)));
        if !trace::install(t) {
            log::warn!("proxy-perf: an event tracer was installed already; using it");
        }
        t
    });
    match trace::installed() {
        Some(installed) if std::ptr::eq(installed, t) => Ok(t),
        Some(other) => Ok(other),
        None => Err("the event tracer could not be installed".into()),
    }
}

/// The drained records of a run.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Every record, sorted by time; `rank` filled in from the thread where it was [`NONE`]
    /// (still [`NONE`] when the thread recorded no rank at all).
    pub records: Vec<Record>,
    /// Thread names by thread id.
    pub threads: HashMap<u32, String>,
    /// What the drain saw (records, pending, dropped).
    pub drained: Drained,
}

/// Drains `tracer`'s ring into a [`Trace`] (module docs).
pub fn collect(tracer: &Tracer) -> Trace {
    let mut records = Vec::new();
    let drained = tracer.ring().drain(|r| records.push(*r));
    let threads = THREAD_NAMES
        .lock()
        .map(|n| n.iter().cloned().collect())
        .unwrap_or_default();
    from_records(records, threads, drained)
}

/// A [`Trace`] of `records` (any order): sorts them by time and fills in missing ranks.
pub fn from_records(
    mut records: Vec<Record>,
    threads: HashMap<u32, String>,
    drained: Drained,
) -> Trace {
    records.sort_by_key(|r| r.ts_ns);
    attribute_ranks(&mut records);
    Trace {
        records,
        threads,
        drained,
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
pub fn path_for(pattern: &std::path::Path, rank: u32) -> std::path::PathBuf {
    let s = pattern.to_string_lossy();
    std::path::PathBuf::from(s.replace("%r", &rank.to_string()))
}

/// `true` when `pattern` has a `%r` (one file per rank).
pub fn per_rank(pattern: &std::path::Path) -> bool {
    pattern.to_string_lossy().contains("%r")
}

#[cfg(test)]
mod tests;
