//! What one recording site costs, in ns per event (BENCHMARKS.md, "Tracing"): `emit` in a loop
//! on 1 or 2 threads, with no tracer installed, installed and off, on with the class masked
//! out, and on, with the platform clock this process picked (`NEURON_RT_PROXY_TRACE_CLOCK=monotonic`
//! for `CLOCK_MONOTONIC`, else the TSC where it is invariant). The minimum of 7 rounds of
//! 200,000 events each (the ring is sized so that nothing drops).
//!
//! `cargo run --release -p proxy-trace --example emit_cost [threads]`

use std::time::Instant;

use proxy_core::base::trace::{self, mask, Kind, Record};

const N: u64 = 200_000;
const ROUNDS: usize = 7;

/// ns per event of `threads` threads emitting `N` events each at once (the slowest thread).
fn per_event(threads: usize) -> f64 {
    let run = || {
        let t0 = Instant::now();
        for i in 0..N {
            trace::emit(mask::OPS, || Record {
                op: i as u32,
                rank: 0,
                ..Record::new(Kind::Transition)
            });
        }
        t0.elapsed().as_nanos() as f64 / N as f64
    };
    let hs: Vec<_> = (0..threads).map(|_| std::thread::spawn(run)).collect();
    hs.into_iter()
        .map(|h| h.join().unwrap())
        .fold(0.0, f64::max)
}

fn min_of(threads: usize) -> f64 {
    (0..ROUNDS)
        .map(|_| per_event(threads))
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let none = min_of(threads);
    // Enough for every round of the "on" case.
    let cap = (N as usize) * threads * ROUNDS + 16;
    let t = proxy_trace::tracer(cap).unwrap();
    let off = min_of(threads);
    t.set_mask(mask::TRANSPORT);
    t.set_on(true);
    let masked = min_of(threads);
    t.set_mask(mask::ALL);
    let on = min_of(threads);
    t.set_on(false);
    let d = t.ring().drain(|_| {});
    println!(
        "{threads} thread(s), ns per event (min of {ROUNDS} x {N}): none {none:.2}, \
         installed+off {off:.2}, on+masked {masked:.2}, on {on:.2} (records {}, dropped {})",
        d.records, d.dropped
    );
}
