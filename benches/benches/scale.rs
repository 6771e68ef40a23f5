//! Scale: tick cost and memory as the work in flight grows.
//!
//! * `scale_tasks`: one `ProxyQueue` slot (rings of 16,384) with N ∈ {1, 10, 100, 1,000,
//!   10,000} real barrier tasks in flight whose step is idle (their channel never passes);
//!   `Worker::tick` in ns per task, and bytes allocated per task (submitted and drained).
//! * `scale_ops`: one stream with K ∈ {128, 1,024, 4,096, 16,384} idle send ops
//!   (`IdleStream`); `Comm::progress` in ns per op, and bytes allocated per op (comm + filed
//!   ops + the first tick). Also the time of one `start` call that files all K ops at once
//!   against K/1024 calls of 1,024 (`start` groups the entries per op with a scan per op).
//!
//! Bytes come from the counting global allocator of this binary (requested sizes).
//!
//! `cargo bench -p proxy-benches --bench scale` (one group: `-- scale_ops`).
#![allow(missing_docs)]

use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use proxy_benches::alloc_count::CountingAlloc;
use proxy_benches::fixtures::{idle_barrier_task, IdleStream};
use proxy_benches::stats::{row, row_per_element, Recorder};
use proxy_benches::{quick, WARM_UP};
use proxy_core::base::time::NoClock;
use proxy_core::driver::queue::{ProxyQueue, QueueConfig, Tick};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

const TASKS: [usize; 5] = [1, 10, 100, 1_000, 10_000];
const OPS: [usize; 4] = [128, 1_024, 4_096, 16_384];

fn scale_tasks(c: &mut Criterion) {
    let mut g = c.benchmark_group("scale_tasks");
    proxy_benches::stats::row_load("scale");
    for n in TASKS {
        let cfg = QueueConfig {
            slots: 1,
            submit_capacity: 16_384,
            status_capacity: 16_384,
        };
        let q0 = ALLOC.snapshot();
        let (queue, mut worker) = ProxyQueue::new(cfg, Box::new(NoClock)).expect("queue");
        let mut handle = ProxyQueue::join(&queue).expect("join");
        let q1 = ALLOC.snapshot();
        for i in 0..n {
            if handle.submit(idle_barrier_task(i as u32)).is_err() {
                panic!("submit {i} of {n} rejected");
            }
        }
        // Drain into the active list; every task arrives (INIT → PROGRESSING).
        assert_eq!(worker.tick(), Tick::Continue);
        assert_eq!(worker.active_count(), n);
        let q2 = ALLOC.snapshot();
        let (queue_bytes, _, _) = q1.since(&q0);
        let (task_bytes, _, task_allocs) = q2.since(&q1);

        g.throughput(Throughput::Elements(n as u64));
        let rec = Recorder::new(WARM_UP);
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    std::hint::black_box(worker.tick());
                }
                let d = t.elapsed();
                rec.batch(iters, d);
                d
            })
        });
        let case = format!("N={n} tasks");
        row_per_element("scale_tasks", &case, &rec, n as u64, "ns/task/tick");
        row(
            "scale_tasks",
            &case,
            "bytes per task",
            task_bytes as f64 / n as f64,
            "B",
        );
        row(
            "scale_tasks",
            &case,
            "allocations per task",
            task_allocs as f64 / n as f64,
            "",
        );
        if n == TASKS[0] {
            row(
                "scale_tasks",
                "queue (1 slot, rings of 16384)",
                "bytes",
                queue_bytes as f64,
                "B",
            );
        }
        drop(handle);
        queue.request_stop();
        drop(worker);
    }
    g.finish();
}

fn scale_ops(c: &mut Criterion) {
    let mut g = c.benchmark_group("scale_ops");
    for k in OPS {
        let a0 = ALLOC.snapshot();
        let mut s = IdleStream::new(k);
        let a1 = ALLOC.snapshot();
        let (bytes, _, allocs) = a1.since(&a0);
        // Host words of the fixture (4 B per op + 12 B) are not the engine's: take them out.
        let engine_bytes = bytes - 4 * (k as i64 + 3);

        g.throughput(Throughput::Elements(k as u64));
        let rec = Recorder::new(WARM_UP);
        g.bench_with_input(BenchmarkId::from_parameter(k), &k, |b, _| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    std::hint::black_box(s.tick());
                }
                let d = t.elapsed();
                rec.batch(iters, d);
                d
            })
        });
        let case = format!("K={k} ops");
        row_per_element("scale_ops", &case, &rec, k as u64, "ns/op/tick");
        row(
            "scale_ops",
            &case,
            "bytes per op (comm + ops, live)",
            engine_bytes as f64 / k as f64,
            "B",
        );
        row("scale_ops", &case, "allocations (setup)", allocs as f64, "");
        drop(s);

        // One start call for all K ops vs calls of 1024: the setup cost of a large block.
        if rec.mean_ns().is_some() {
            let t = Instant::now();
            drop(std::hint::black_box(IdleStream::with_starts(k, k)));
            let one = t.elapsed();
            let t = Instant::now();
            drop(std::hint::black_box(IdleStream::with_starts(k, 1024)));
            let chunked = t.elapsed();
            row(
                "scale_ops",
                &case,
                "setup, one start call",
                one.as_secs_f64() * 1e3,
                "ms",
            );
            row(
                "scale_ops",
                &case,
                "setup, start calls of 1024",
                chunked.as_secs_f64() * 1e3,
                "ms",
            );
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = quick();
    targets = scale_tasks, scale_ops
}
criterion_main!(benches);
