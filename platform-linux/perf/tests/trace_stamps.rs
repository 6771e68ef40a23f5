//! Issue 28: the event trace's clock reads. With `--trace-mask ops` a 2-rank 8 B all-reduce
//! records 8 events per rank thread per execution; the records a thread makes in one tick share
//! one clock read (`proxy_core::base::trace::TickStamp`), so a rank thread reads the clock about
//! 4 times per execution, not 8 (docs/tracing.md, "Cost"). Counted with a clock that counts its
//! reads per thread, installed as the process's tracer before `proxy-perf` runs in this process.

use std::collections::HashMap;
use std::sync::Mutex;

use clap::Parser;
use proxy_core::base::time::Clock;
use proxy_core::base::trace::{self, Record, Tracer};

/// Clock reads per thread id.
static READS: Mutex<Option<HashMap<u32, u64>>> = Mutex::new(None);

/// The platform's trace clock, counting its reads per thread.
struct Counting;

impl Clock for Counting {
    fn now_ns(&self) -> u64 {
        let tid = proxy_trace::thread_id();
        *READS
            .lock()
            .unwrap()
            .get_or_insert_with(HashMap::new)
            .entry(tid)
            .or_default() += 1;
        proxy_trace::clock::clock().now_ns()
    }
}

static CLOCK: Counting = Counting;

#[test]
fn ops_reads_the_clock_about_once_per_tick() {
    let t: &'static Tracer = Box::leak(Box::new(Tracer::with_lanes(
        1 << 20,
        proxy_trace::LANES,
        &CLOCK,
        proxy_trace::thread_id,
        proxy_trace::thread_lane,
    )));
    assert!(trace::install(t));
    let path = std::env::temp_dir().join(format!("proxy-perf-{}-stamps.json", std::process::id()));
    let (warmup, iters) = (10u64, 100u64);
    let cmd = format!(
        "proxy-perf all-reduce --ranks 2 -b 8 -e 8 -n {iters} -w {warmup} -c 1 --driver caller \
         --device polled --trace-all --trace-mask ops --trace"
    );
    let args = proxy_perf::args::Args::parse_from(
        cmd.split_whitespace()
            .map(String::from)
            .chain([path.to_str().expect("a UTF-8 temp path").to_owned()]),
    );
    assert_eq!(proxy_perf::run_cli(&args), 0);
    let _ = std::fs::remove_file(&path);
    // Out of place and in place: warm-up, timed and one checked execution each.
    let execs = 2 * (warmup + iters + 1);
    let names = proxy_trace::thread_names();
    let rank_thread = |tid: &u32| names.get(tid).is_some_and(|n| n.starts_with("rank-"));
    let mut by_thread: HashMap<u32, Vec<Record>> = HashMap::new();
    let d = t
        .ring()
        .drain(|r| by_thread.entry(r.thread).or_default().push(*r));
    assert_eq!((d.dropped, d.pending), (0, 0));
    let records: usize = by_thread
        .iter()
        .filter(|(tid, _)| rank_thread(tid))
        .map(|(_, v)| v.len())
        .sum();
    let reads: u64 = READS
        .lock()
        .unwrap()
        .as_ref()
        .unwrap()
        .iter()
        .filter(|(tid, _)| rank_thread(tid))
        .map(|(_, n)| n)
        .sum();
    // Per rank thread per execution (two rank threads).
    let per = |n: f64| n / (2 * execs) as f64;
    let (events, clock_reads) = (per(records as f64), per(reads as f64));
    eprintln!("per rank thread per execution: {events:.2} events, {clock_reads:.2} clock reads");
    // Each op's begin and end (a send and a receive op), the network and the barrier task's
    // begin and end.
    assert_eq!(records as u64, 2 * execs * 8, "{events}");
    // Before the tick stamp: one read per record, 8. Now 4: the tick of `start` (2 op arms
    // and the 2 tasks' begins share one read), the op ends (one read each, as each follows a
    // transport test; the network task's end shares the last), the barrier's end.
    assert!(
        clock_reads <= 4.5,
        "{clock_reads} clock reads per rank thread per execution"
    );
    assert!(clock_reads >= 3.0, "{clock_reads}");
    // Shared stamps keep each thread's records in order: times never go back in claim order.
    for (tid, v) in &by_thread {
        for w in v.windows(2) {
            assert!(
                w[0].ts_ns <= w[1].ts_ns,
                "thread {tid}: {:?} then {:?}",
                w[0],
                w[1]
            );
        }
    }
}
