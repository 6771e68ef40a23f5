//! Tick cost: one progress call on one stream with K idle ops (`Comm::progress` over real send
//! ops whose host index is never posted), in ns per op, against the seed's shapes in std:
//! a `Mutex<Vec<Box<dyn Op>>>` active list walked per tick, a `HashMap<u32, Vec<Box<dyn Op>>>`
//! block map looked up and walked per tick, and a `Mutex<VecDeque<Box<Task>>>` + `Condvar`
//! queue push/pop per task (against our SPSC ring's push/pop of the same boxes). The case
//! `engine_recording_device` walks the same ops with host indices that read as a constant
//! (`RecordingDevice`), which separates the host-word reads from the walk itself.
//!
//! `cargo bench -p proxy-benches --bench tick` (one case: `-- 'tick_cost/engine'`).
#![allow(missing_docs)]

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use proxy_benches::fixtures::IdleStream;
use proxy_benches::stats::{row_per_element, Recorder};
use proxy_benches::{quick, WARM_UP};
use proxy_core::base::host_word::HOST_INDEX_READY;

const KS: [usize; 4] = [1, 8, 128, 1024];

/// The seed's op shape: a virtual `progress` per op (seed: `ncclProxyArgs::progress`).
trait SeedOp: Send {
    /// One progress call; `true` = idle.
    fn progress(&mut self) -> bool;
}

/// A send op waiting for its host index, as the seed's op checks it: one acquire load of the
/// word, compared with the ready value.
struct SeedSendOp {
    words: Arc<[AtomicU32]>,
    index: usize,
    ticks: u64,
}

impl SeedOp for SeedSendOp {
    fn progress(&mut self) -> bool {
        self.ticks += 1;
        self.words[self.index].load(Ordering::Acquire) != HOST_INDEX_READY
    }
}

fn seed_ops(k: usize) -> Vec<Box<dyn SeedOp>> {
    let words: Arc<[AtomicU32]> = (0..k).map(|_| AtomicU32::new(0)).collect();
    (0..k)
        .map(|index| {
            Box::new(SeedSendOp {
                words: words.clone(),
                index,
                ticks: 0,
            }) as Box<dyn SeedOp>
        })
        .collect()
}

/// The seed's task shape (a boxed task in the proxy queue's deque).
struct SeedTask {
    _id: u64,
    _state: [u64; 4],
}

fn run_case(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    case: &str,
    k: usize,
    mut one_tick: impl FnMut(),
) {
    let rec = Recorder::new(WARM_UP);
    g.bench_with_input(BenchmarkId::new(case, k), &k, |b, _| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                one_tick();
            }
            let d = t.elapsed();
            rec.batch(iters, d);
            d
        })
    });
    row_per_element(
        "tick_cost",
        &format!("{case} K={k}"),
        &rec,
        k as u64,
        "ns/op",
    );
}

fn tick_cost(c: &mut Criterion) {
    let mut g = c.benchmark_group("tick_cost");
    proxy_benches::stats::row_load("tick_cost");
    for k in KS {
        g.throughput(Throughput::Elements(k as u64));

        // The engine: Comm::progress over K idle send ops.
        let mut s = IdleStream::new(k);
        run_case(&mut g, "engine", k, || {
            std::hint::black_box(s.tick());
        });
        drop(s);

        // The same walk with host indices that read as a constant (RecordingDevice): what
        // the reads of K distinct host words add.
        let mut s = IdleStream::with_recording_device(k);
        run_case(&mut g, "engine_recording_device", k, || {
            std::hint::black_box(s.tick());
        });
        drop(s);

        // Seed shape 1: the active list behind a mutex, walked per tick.
        let active = Mutex::new(seed_ops(k));
        run_case(&mut g, "seed_mutex_vec", k, || {
            let mut list = active.lock().unwrap();
            let mut idle = true;
            for op in list.iter_mut() {
                idle &= op.progress();
            }
            std::hint::black_box(idle);
        });

        // Seed shape 2: the block map, looked up by block id, then walked.
        let mut blocks: HashMap<u32, Vec<Box<dyn SeedOp>>> = HashMap::new();
        blocks.insert(1, seed_ops(k));
        blocks.insert(2, seed_ops(1));
        run_case(&mut g, "seed_hashmap_block", k, || {
            let bb = std::hint::black_box(1u32);
            let mut idle = true;
            if let Some(list) = blocks.get_mut(&bb) {
                for op in list.iter_mut() {
                    idle &= op.progress();
                }
            }
            std::hint::black_box(idle);
        });

        // Seed shape 3: the proxy queue, a deque behind a mutex with a condvar, one task
        // pushed (lock, push, notify) and popped (lock, pop) per element; one thread, so this
        // is the uncontended floor.
        let queue: (Mutex<VecDeque<Box<SeedTask>>>, Condvar) =
            (Mutex::new(VecDeque::with_capacity(k)), Condvar::new());
        let mut held: Vec<Box<SeedTask>> = (0..k as u64)
            .map(|i| {
                Box::new(SeedTask {
                    _id: i,
                    _state: [0; 4],
                })
            })
            .collect();
        run_case(&mut g, "seed_mutex_deque_condvar", k, || {
            for t in held.drain(..) {
                queue.0.lock().unwrap().push_back(t);
                queue.1.notify_one();
            }
            while let Some(t) = queue.0.lock().unwrap().pop_front() {
                held.push(t);
            }
        });

        // Ours for shape 3: the SPSC ring (the proxy queue's submission ring), same boxes.
        let (mut tx, mut rx) = proxy_core::base::ring::channel::<Box<SeedTask>>(1024);
        run_case(&mut g, "proxy_ring_push_pop", k, || {
            for t in held.drain(..) {
                if tx.push(t).is_err() {
                    unreachable!("a ring of 1024 holds K <= 1024 tasks");
                }
            }
            while let Some(t) = rx.pop() {
                held.push(t);
            }
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = quick();
    targets = tick_cost
}
criterion_main!(benches);
