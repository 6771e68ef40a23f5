//! Wake: what a parked worker costs.
//!
//! 1. Group `wake`: submit → first step with the worker parked. Before each sample the
//!    submitter sleeps 100 µs (not timed), so the worker has gone to sleep; the sample is from
//!    the submit to the moment the submitter sees the task's DONE status record (the task is a
//!    real barrier task that skips: its first step ends it). Cases:
//!    * `proxy_queue_parked`: the real `ProxyQueue` / `SlotHandle::submit` / `Worker::tick` /
//!      `Worker::park` (`WaitCell` + `ThreadPark`), the worker loop of `proxy-runtime`;
//!    * `ring_waitcell_parked`: a bare SPSC ring + `WaitCell` + `ThreadPark` (the wake
//!      protocol without the queue);
//!    * `mutex_condvar_parked`: the seed's shape, `Mutex<VecDeque<Box<task>>>` + `Condvar`.
//! 2. Quiescent CPU (a plain run after the groups, skipped when a filter that does not match
//!    `quiescent` is given): a real `Worker` of a queue with one joined slot and nothing
//!    submitted, looping for `BENCH_QUIESCENT_MS` (default 1000) ms with each wait strategy:
//!    `spin` (tick, spin hint), `yield` (tick, `sched_yield`), `park` (tick, park on `Park`:
//!    the runtime's loop). CPU per second from the worker's `CLOCK_THREAD_CPUTIME_ID`, context
//!    switches from `getrusage(RUSAGE_THREAD)`.
//!
//! `cargo bench -p proxy-benches --bench wake` (only the quiescent run: `-- quiescent`).
#![allow(missing_docs)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::Criterion;
use proxy_benches::cpu::thread_usage;
use proxy_benches::fixtures::skip_barrier_task;
use proxy_benches::stats::{row, row_latency, Recorder};
use proxy_benches::{quick, WARM_UP};
use proxy_core::base::time::MonotonicClock;
use proxy_core::driver::queue::{ProxyQueue, QueueConfig, Tick};
use proxy_core::driver::record::{RunState, StatusRecord};
use proxy_core::driver::task::{ProxyTask, StepEnv};
use proxy_core::driver::wake::{ThreadPark, WaitCell, Waiter};

/// Untimed pause before each sample, so the worker is asleep when the task is submitted.
const PAUSE: Duration = Duration::from_micros(100);
/// Bound of every wait of the submitter.
const LIMIT: Duration = Duration::from_secs(5);

const ENV: StepEnv = StepEnv {
    now_ns: 0,
    may_begin: true,
    stamp: proxy_core::base::trace::TickStamp::NONE,
};

fn wait_done(rec: &StatusRecord) {
    let deadline = Instant::now() + LIMIT;
    while rec.run_state() != RunState::Done as u32 {
        assert!(
            Instant::now() < deadline,
            "the worker did not step the task within {LIMIT:?}"
        );
        std::hint::spin_loop();
    }
}

/// One parked-wake case: `submit` hands a task to the sleeping worker.
fn parked_case(c: &mut Criterion, name: &str, mut submit: impl FnMut(Box<dyn ProxyTask>)) {
    let rec = Recorder::new(WARM_UP);
    let mut id = 0;
    let mut g = c.benchmark_group("wake");
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                id += 1;
                let task = skip_barrier_task(id);
                let status = task.status_record();
                thread::sleep(PAUSE);
                let t = Instant::now();
                submit(task);
                wait_done(&status);
                let d = t.elapsed();
                rec.sample(d.as_nanos() as u64);
                total += d;
            }
            total
        })
    });
    g.finish();
    row_latency("wake", &format!("{name} submit->first step"), &rec);
}

fn proxy_queue_parked(c: &mut Criterion) {
    let cfg = QueueConfig {
        slots: 1,
        submit_capacity: 64,
        status_capacity: 64,
    };
    let (queue, mut worker) = ProxyQueue::new(cfg, Box::new(MonotonicClock)).expect("queue");
    let mut handle = ProxyQueue::join(&queue).expect("join");
    let th = thread::spawn(move || {
        while !worker.stop_requested() {
            match worker.tick() {
                Tick::Park => worker.park(&ThreadPark),
                Tick::NoProgress => thread::yield_now(),
                Tick::Continue => {}
            }
        }
    });
    parked_case(c, "proxy_queue_parked", |task| {
        if handle.submit(task).is_err() {
            panic!("submit rejected (records are collected after every sample)");
        }
        // Collect the final record (after the DONE the sample waited for; not timed apart).
        let deadline = Instant::now() + LIMIT;
        while handle.try_pop_record().is_none() {
            assert!(
                Instant::now() < deadline,
                "no final record within {LIMIT:?}"
            );
            std::hint::spin_loop();
        }
    });
    let waiter = Waiter {
        park: &ThreadPark,
        clock: &MonotonicClock,
        spin_ns: 0,
    };
    handle.leave(&waiter);
    queue.request_stop();
    th.join().expect("worker");
}

fn ring_waitcell_parked(c: &mut Criterion) {
    let (mut tx, mut rx) = proxy_core::base::ring::channel::<Box<dyn ProxyTask>>(64);
    let cell = Arc::new(WaitCell::new());
    let stop = Arc::new(AtomicBool::new(false));
    let th = {
        let (cell, stop) = (cell.clone(), stop.clone());
        thread::spawn(move || loop {
            while let Some(mut t) = rx.pop() {
                t.step(&ENV);
            }
            if stop.load(Ordering::Acquire) {
                return;
            }
            cell.park(&ThreadPark, || {
                !rx.is_empty() || stop.load(Ordering::Acquire)
            });
        })
    };
    parked_case(c, "ring_waitcell_parked", |task| {
        if tx.push(task).is_err() {
            panic!("ring full (one task in flight at a time)");
        }
        cell.notify();
    });
    stop.store(true, Ordering::Release);
    cell.notify();
    th.join().expect("worker");
}

type Locked = Arc<(Mutex<(VecDeque<Box<dyn ProxyTask>>, bool)>, Condvar)>;

fn mutex_condvar_parked(c: &mut Criterion) {
    let q: Locked = Arc::new((Mutex::new((VecDeque::new(), false)), Condvar::new()));
    let th = {
        let q = q.clone();
        thread::spawn(move || loop {
            let next = {
                let mut g = q.0.lock().unwrap();
                loop {
                    if let Some(t) = g.0.pop_front() {
                        break Some(t);
                    }
                    if g.1 {
                        break None;
                    }
                    g = q.1.wait(g).unwrap();
                }
            };
            match next {
                Some(mut t) => {
                    t.step(&ENV);
                }
                None => return,
            }
        })
    };
    parked_case(c, "mutex_condvar_parked", |task| {
        q.0.lock().unwrap().0.push_back(task);
        q.1.notify_one();
    });
    q.0.lock().unwrap().1 = true;
    q.1.notify_one();
    th.join().expect("worker");
}

#[derive(Clone, Copy, Debug)]
enum Strategy {
    Spin,
    Yield,
    Park,
}

/// A quiescent worker (one joined slot, nothing submitted) looping with `strategy` for
/// `window`: prints CPU ms per second, ticks per second and context switches per second.
fn quiescent(strategy: Strategy, window: Duration) {
    let (queue, mut worker) =
        ProxyQueue::new(QueueConfig::default(), Box::new(MonotonicClock)).expect("queue");
    let handle = ProxyQueue::join(&queue).expect("join");
    let th = thread::spawn(move || {
        let before = thread_usage();
        let t0 = Instant::now();
        let mut ticks = 0u64;
        while !worker.stop_requested() {
            let tick = worker.tick();
            ticks += 1;
            match strategy {
                Strategy::Spin => std::hint::spin_loop(),
                Strategy::Yield => thread::yield_now(),
                Strategy::Park => match tick {
                    Tick::Park => worker.park(&ThreadPark),
                    Tick::NoProgress => thread::yield_now(),
                    Tick::Continue => {}
                },
            }
        }
        (thread_usage().since(&before), t0.elapsed(), ticks)
    });
    thread::sleep(window);
    queue.request_stop();
    let (usage, wall, ticks) = th.join().expect("worker");
    drop(handle);
    let secs = wall.as_secs_f64();
    let case = format!("{strategy:?}").to_lowercase();
    row(
        "quiescent_cpu",
        &case,
        "CPU per s",
        usage.cpu_ns as f64 / 1e6 / secs,
        "ms/s",
    );
    row(
        "quiescent_cpu",
        &case,
        "ticks per s",
        ticks as f64 / secs,
        "1/s",
    );
    row(
        "quiescent_cpu",
        &case,
        "context switches per s (vol+invol)",
        (usage.voluntary_cs + usage.involuntary_cs) as f64 / secs,
        "1/s",
    );
}

fn main() {
    let mut c = quick().configure_from_args();
    proxy_benches::stats::row_load("wake");
    proxy_queue_parked(&mut c);
    ring_waitcell_parked(&mut c);
    mutex_condvar_parked(&mut c);
    c.final_summary();

    if !proxy_benches::plain_run_selected("quiescent") {
        return;
    }
    let ms = std::env::var("BENCH_QUIESCENT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000u64);
    for s in [Strategy::Spin, Strategy::Yield, Strategy::Park] {
        quiescent(s, Duration::from_millis(ms));
    }
}
