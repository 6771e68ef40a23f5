//! Criterion benchmarks: engine pieces against baselines in one run (see the crate docs).
#![allow(missing_docs)]

use std::sync::Arc;
use std::thread;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;
use proxy_core::base::time::NoClock;
use proxy_core::progress::comm::{Comm, CommConfig};
use proxy_core::progress::mem_transport::MemFabric;
use proxy_core::progress::net::{TestOutcome, Transport};
use proxy_core::progress::scripted::Script;
use proxy_core::seam::SeamTable;
use proxy_core::testing::{NullTransport, RecordingDevice};

const ITEMS: u64 = 100_000;

fn spsc_ring(c: &mut Criterion) {
    let mut g = c.benchmark_group("spsc_ring");
    g.throughput(Throughput::Elements(1));
    g.bench_function("proxy_ring/push_pop_1thread", |b| {
        let (mut tx, mut rx) = proxy_core::base::ring::channel::<u64>(1024);
        b.iter(|| {
            tx.push(std::hint::black_box(7)).unwrap();
            rx.pop().unwrap()
        })
    });
    g.bench_function("crossbeam_array_queue/push_pop_1thread", |b| {
        let q = ArrayQueue::<u64>::new(1024);
        b.iter(|| {
            q.push(std::hint::black_box(7)).unwrap();
            q.pop().unwrap()
        })
    });
    g.throughput(Throughput::Elements(ITEMS));
    g.bench_function("proxy_ring/2threads_100k", |b| {
        b.iter(|| {
            let (mut tx, mut rx) = proxy_core::base::ring::channel::<u64>(1024);
            let h = thread::spawn(move || {
                for i in 0..ITEMS {
                    let mut v = i;
                    while let Err(back) = tx.push(v) {
                        v = back;
                        thread::yield_now();
                    }
                }
            });
            let mut n = 0;
            while n < ITEMS {
                if rx.pop().is_some() {
                    n += 1;
                } else {
                    thread::yield_now();
                }
            }
            h.join().unwrap();
        })
    });
    g.bench_function("crossbeam_array_queue/2threads_100k", |b| {
        b.iter(|| {
            let q = Arc::new(ArrayQueue::<u64>::new(1024));
            let q2 = q.clone();
            let h = thread::spawn(move || {
                for i in 0..ITEMS {
                    let mut v = i;
                    while let Err(back) = q2.push(v) {
                        v = back;
                        thread::yield_now();
                    }
                }
            });
            let mut n = 0;
            while n < ITEMS {
                if q.pop().is_some() {
                    n += 1;
                } else {
                    thread::yield_now();
                }
            }
            h.join().unwrap();
        })
    });
    g.finish();
}

fn idle_comm(ops: usize) -> Comm {
    let mut c = Comm::new(
        CommConfig::new(0, 2, 1),
        Box::new(NullTransport::default()),
        Arc::new(RecordingDevice::default()),
        Arc::new(NoClock),
    )
    .unwrap();
    // Ops that stay active and idle for ~forever: the tick walks all of them.
    let scripts = vec![
        Script {
            complete_after: u32::MAX,
            idle_mask: !0,
            fail_tick: 0
        };
        ops
    ];
    c.start_scripted(0, 1, &scripts).unwrap();
    c
}

fn progress_tick(c: &mut Criterion) {
    let mut g = c.benchmark_group("progress_tick");
    for ops in [1usize, 16, 128] {
        g.throughput(Throughput::Elements(ops as u64));
        g.bench_with_input(BenchmarkId::from_parameter(ops), &ops, |b, &ops| {
            b.iter_batched_ref(
                || idle_comm(ops),
                |comm| {
                    let (mut idle, mut done) = (true, true);
                    comm.progress(0, 1)
                        .map(|t| t.and_into(&mut idle, &mut done))
                        .unwrap();
                    (idle, done)
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn seam(c: &mut Criterion) {
    let mut g = c.benchmark_group("seam");
    let mut comm = idle_comm(1);
    let table = SeamTable::in_process();
    let handle = &mut comm as *mut Comm as *mut core::ffi::c_void;
    g.bench_function("in_process_table", |b| {
        b.iter(|| {
            let (mut idle, mut done) = (true, true);
            // SAFETY: `handle` points to `comm`, alive and used by this thread only.
            unsafe { table.progress(handle, 0, 1, &mut idle, &mut done) }.unwrap();
            (idle, done)
        })
    });
    let mut comm = idle_comm(1);
    g.bench_function("direct_call", |b| {
        b.iter(|| {
            let (mut idle, mut done) = (true, true);
            comm.progress(0, 1)
                .map(|t| t.and_into(&mut idle, &mut done))
                .unwrap();
            (idle, done)
        })
    });
    g.finish();
}

fn mem_transport(c: &mut Criterion) {
    const SIZE: usize = 1 << 20;
    let mut g = c.benchmark_group("mem_transport");
    g.throughput(Throughput::Bytes(SIZE as u64));
    let fabric = MemFabric::new(2).unwrap();
    let mut a = fabric.endpoint(0).unwrap();
    let mut bt = fabric.endpoint(1).unwrap();
    let src = vec![3u8; SIZE];
    let mut dst = vec![0u8; SIZE];
    let mut tag = 0u64;
    g.bench_function("isend_irecv_1MiB", |b| {
        b.iter(|| {
            tag += 1;
            // SAFETY: both buffers outlive the requests, which are tested to completion here.
            let s = unsafe { a.isend(1, src.as_ptr(), SIZE as u64, tag) }
                .unwrap()
                .unwrap();
            // SAFETY: as above.
            let r = unsafe { bt.irecv(0, dst.as_mut_ptr(), SIZE as u64, tag) }
                .unwrap()
                .unwrap();
            while !matches!(bt.test(r.request).unwrap(), TestOutcome::Done { .. }) {}
            while !matches!(a.test(s.request).unwrap(), TestOutcome::Done { .. }) {}
        })
    });
    g.bench_function("memcpy_1MiB_baseline", |b| {
        b.iter(|| dst.copy_from_slice(std::hint::black_box(&src)))
    });
    g.finish();
}

criterion_group!(benches, spsc_ring, progress_tick, seam, mem_transport);
criterion_main!(benches);
