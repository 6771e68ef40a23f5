//! Criterion benchmarks of the proxy engine and the baselines they compare against, and the
//! helpers they share (fixtures over the real engine types, a sample recorder that prints
//! table rows, a counting allocator, the thread CPU clock).
//!
//! Run one binary with `cargo bench -p proxy-benches --bench NAME`, one group with
//! `cargo bench -p proxy-benches --bench NAME -- GROUP` (criterion's filter is a regex on
//! `group/case`). Every binary is configured short ([`quick`]: 10 samples, 0.3 s warm-up, 1 s
//! measurement per case); `BENCH_QUIESCENT_MS` sets the quiescent-worker window of `wake`.
//! Each case also prints one markdown table row, `| bench | case | metric | value | unit |`
//! (collect them with `grep '^| '`). BENCHMARKS.md at the repository root has the results.
//!
//! | binary | group | engine | baseline |
//! | --- | --- | --- | --- |
//! | `engine` | `spsc_ring` | `proxy_core::base::ring` push+pop, one thread and two threads | `crossbeam_queue::ArrayQueue` |
//! | `engine` | `progress_tick` | one `Comm::progress` over 1, 16, 128 active scripted ops | — (per-op cost) |
//! | `engine` | `seam` | a progress call through the in-process `SeamTable` | `Comm::progress` called directly |
//! | `engine` | `mem_transport` | one 1 MiB isend/irecv/test through `MemTransport` | `copy_from_slice` of 1 MiB |
//! | `tick` | `tick_cost` | `Comm::progress` over K ∈ {1, 8, 128, 1024} idle send ops (host index not posted), ns per op; the same with `RecordingDevice` (no host-word reads) | the seed's std shapes: `Mutex<Vec<Box<dyn Op>>>` walk, `HashMap<u32, Vec<Box<dyn Op>>>` lookup + walk, `Mutex<VecDeque<Box<Task>>>` + `Condvar` push/pop |
//! | `handoff` | `handoff`, then `rounds` | submit → first step → record seen, two spinning threads pinned to two CPUs, our ring (p50 / p99 over 5 interleaved rounds) | `rtrb`, `crossbeam_queue::ArrayQueue`, `std::sync::mpsc`, `Mutex<VecDeque>` + `Condvar` |
//! | `wake` | `wake` | submit → first step with the worker parked: `ProxyQueue` + `Worker::park` (`WaitCell` + `ThreadPark`), and a bare ring + `WaitCell` | `Mutex<VecDeque>` + `Condvar` |
//! | `wake` | (plain run) | CPU per second of a quiescent `Worker` looping spin / yield / park | — |
//! | `scale` | `scale_tasks` | `Worker::tick` and bytes per task with 1 → 10,000 idle barrier tasks on one queue | — |
//! | `scale` | `scale_ops` | `Comm::progress` and bytes per op with 128 → 16,384 idle ops on one stream | — |
//!
//! These are benchmarks, not tests: nothing here asserts a time. They compile in CI's clippy
//! step and are run by hand.

/// The counting global allocator (the `proxy-alloc-count` crate, shared with the tests).
pub use proxy_alloc_count as alloc_count;
pub mod cpu;
pub mod fixtures;
pub mod stats;

use std::time::Duration;

/// The short criterion configuration every binary of this crate uses: 10 samples, 0.3 s
/// warm-up, 1 s measurement per case (a few seconds per case instead of criterion's ~8 s).
/// Command-line options (`--sample-size`, `--measurement-time`, a filter) still apply.
pub fn quick() -> criterion::Criterion {
    criterion::Criterion::default()
        .sample_size(10)
        .warm_up_time(WARM_UP)
        .measurement_time(Duration::from_secs(1))
}

/// `true` when a bench binary's plain (non-criterion) part `name` should run: only under
/// `cargo bench` (which passes `--bench`), not in `--test` / `--list` mode, and without a
/// filter argument or with one that `name` contains (or that contains `name`).
pub fn plain_run_selected(name: &str) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--test" || a == "--list") {
        return false;
    }
    match args.iter().find(|a| !a.starts_with('-')) {
        None => true,
        Some(f) => name.contains(f.as_str()) || f.contains(name),
    }
}

/// The warm-up time of [`quick`]: [`stats::Recorder`] ignores what was recorded before it.
pub const WARM_UP: Duration = Duration::from_millis(300);
