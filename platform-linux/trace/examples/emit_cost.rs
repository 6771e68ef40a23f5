//! What one recording site costs, in ns per event (BENCHMARKS.md, "Tracing"): `emit` in a loop
//! on 1 or 2 threads, with no tracer installed, installed and off, on with the class masked
//! out, and on, with the platform clock this process picked (`NEURON_RT_PROXY_TRACE_CLOCK=monotonic`
//! for `CLOCK_MONOTONIC`, else the TSC where it is invariant); then on inside one open tick
//! (every record after the first shares its clock read: `trace::TickStamp`), and the cost of an
//! empty tick's open, two clears and close while recording. The minimum of 7 rounds of 200,000 events each
//! (the ring is sized so that nothing drops). Last, one thread's records into small fresh
//! tracers whose rings stay in the cache, with a clock read each and in one open tick.
//!
//! `cargo run --release -p proxy-trace --example emit_cost [threads]`

use std::time::Instant;

use proxy_core::base::trace::{self, mask, Kind, Record, Tracer};

const N: u64 = 200_000;
const ROUNDS: usize = 7;

/// What each thread does per round.
#[derive(Clone, Copy)]
enum Case {
    /// `N` events.
    Emit,
    /// `N` events in one open tick.
    Shared,
    /// `N` empty ticks (open, two clears, close).
    Ticks,
}

/// ns per event (or tick) of `threads` threads at once (the slowest thread).
fn per_event(threads: usize, case: Case) -> f64 {
    let run = move || {
        let stamp = trace::TickStamp::here();
        let t0 = Instant::now();
        let emit = |i: u64| {
            trace::emit(mask::OPS, || Record {
                op: i as u32,
                rank: 0,
                ..Record::new(Kind::Transition)
            })
        };
        match case {
            Case::Emit => (0..N).for_each(emit),
            Case::Shared => {
                let _open = stamp.open();
                (0..N).for_each(emit);
            }
            Case::Ticks => {
                // What a tick with nothing to record does: open, drop the stamp before the
                // progress half and before the device poller, close.
                for i in 0..N {
                    let open = stamp.open();
                    open.stamp().clear();
                    std::hint::black_box(i);
                    open.stamp().clear();
                }
            }
        }
        t0.elapsed().as_nanos() as f64 / N as f64
    };
    let hs: Vec<_> = (0..threads).map(|_| std::thread::spawn(run)).collect();
    hs.into_iter()
        .map(|h| h.join().unwrap())
        .fold(0.0, f64::max)
}

fn min_of(threads: usize, case: Case) -> f64 {
    (0..ROUNDS)
        .map(|_| per_event(threads, case))
        .fold(f64::INFINITY, f64::min)
}

/// ns per record of one thread recording `SMALL` records into a fresh tracer of that many
/// (80 bytes each: the ring stays in the cache, as the rank threads' recent chunks do, where
/// the big ring of the cases above streams to memory), each with a clock read or (`shared`)
/// in one open tick; the minimum of `SMALL_ROUNDS` fresh tracers.
fn cached(shared: bool) -> f64 {
    (0..SMALL_ROUNDS)
        .map(|_| {
            let t: &'static Tracer = Box::leak(Box::new(Tracer::with_lanes(
                SMALL,
                proxy_trace::LANES,
                proxy_trace::clock::clock(),
                proxy_trace::thread_id,
                proxy_trace::thread_lane,
            )));
            let stamp = t.tick_stamp();
            let t0 = Instant::now();
            let open = shared.then(|| stamp.open());
            for i in 0..SMALL {
                t.record(Record {
                    op: i as u32,
                    rank: 0,
                    ..Record::new(Kind::Transition)
                });
            }
            drop(open);
            t0.elapsed().as_nanos() as f64 / SMALL as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// Records per cache-resident tracer ([`cached`]): 320 KiB.
const SMALL: usize = 4096;
/// Fresh tracers per [`cached`] case.
const SMALL_ROUNDS: usize = 50;

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let none = min_of(threads, Case::Emit);
    // Enough for every round of the two recording cases (a chunk per lane and round to spare).
    let cap = 2 * (N as usize) * threads * ROUNDS + 64 * 16 * ROUNDS;
    let t = proxy_trace::tracer(cap).unwrap();
    let off = min_of(threads, Case::Emit);
    t.set_mask(mask::TRANSPORT);
    t.set_on(true);
    let masked = min_of(threads, Case::Emit);
    t.set_mask(mask::ALL);
    let on = min_of(threads, Case::Emit);
    let shared = min_of(threads, Case::Shared);
    let ticks = min_of(threads, Case::Ticks);
    t.set_on(false);
    let d = t.ring().drain(|_| {});
    let (cached_on, cached_shared) = (cached(false), cached(true));
    println!(
        "{threads} thread(s), ns per event (min of {ROUNDS} x {N}): none {none:.2}, \
         installed+off {off:.2}, on+masked {masked:.2}, on {on:.2}, on in one tick {shared:.2}; \
         an empty tick's open, 2 clears and close while on {ticks:.2} (records {}, dropped {}); \
         a ring in the cache (one thread, min of {SMALL_ROUNDS} x {SMALL}): on {cached_on:.2}, \
         in one tick {cached_shared:.2}",
        d.records, d.dropped
    );
}
