//! Hand-off: a standalone ping-pong of one queue pair between two spinning threads (not the
//! engine). The submitter pushes a value ("submit"), the worker pops it ("first step") and
//! pushes it back on the reply queue ("record"), the submitter pops the reply ("seen"). Each
//! round trip is timed on its own (two `Instant::now` calls, ~2 × 20 ns, are inside every
//! sample); p50 / p99 / mean are printed per queue.
//!
//! Queues: our SPSC ring (`proxy_core::driver::ring`), `rtrb`, `crossbeam_queue::ArrayQueue`,
//! `std::sync::mpsc` (`try_recv`), and `Mutex<VecDeque>` + `Condvar` (push notifies, the
//! consumer spins on the lock as the others spin on their queue).
//!
//! Both threads spin: on a machine with fewer free cores than 2 the numbers are scheduler
//! time slices, not the queue.
//!
//! `cargo bench -p proxy-benches --bench handoff` (one queue: `-- 'handoff/rtrb'`).
#![allow(missing_docs)]

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use crossbeam_queue::ArrayQueue;
use proxy_benches::stats::{row_latency, Recorder};
use proxy_benches::{quick, WARM_UP};

/// Tells the worker to exit.
const STOP: u64 = u64::MAX;
/// Capacity of every bounded queue (a ping-pong never has more than one item in flight).
const CAP: usize = 64;

trait Tx: Send + 'static {
    fn push(&mut self, v: u64);
}
trait Rx: Send + 'static {
    fn try_pop(&mut self) -> Option<u64>;
}

impl Tx for proxy_core::driver::ring::Producer<u64> {
    fn push(&mut self, v: u64) {
        while proxy_core::driver::ring::Producer::push(self, v).is_err() {
            std::hint::spin_loop();
        }
    }
}
impl Rx for proxy_core::driver::ring::Consumer<u64> {
    fn try_pop(&mut self) -> Option<u64> {
        self.pop()
    }
}

impl Tx for rtrb::Producer<u64> {
    fn push(&mut self, v: u64) {
        while rtrb::Producer::push(self, v).is_err() {
            std::hint::spin_loop();
        }
    }
}
impl Rx for rtrb::Consumer<u64> {
    fn try_pop(&mut self) -> Option<u64> {
        self.pop().ok()
    }
}

struct ArrayQ(Arc<ArrayQueue<u64>>);
impl Tx for ArrayQ {
    fn push(&mut self, v: u64) {
        while self.0.push(v).is_err() {
            std::hint::spin_loop();
        }
    }
}
impl Rx for ArrayQ {
    fn try_pop(&mut self) -> Option<u64> {
        self.0.pop()
    }
}

impl Tx for mpsc::Sender<u64> {
    fn push(&mut self, v: u64) {
        self.send(v).expect("receiver alive");
    }
}
impl Rx for mpsc::Receiver<u64> {
    fn try_pop(&mut self) -> Option<u64> {
        self.try_recv().ok()
    }
}

type LockedDeque = Arc<(Mutex<VecDeque<u64>>, Condvar)>;
struct MutexQ(LockedDeque);
impl Tx for MutexQ {
    fn push(&mut self, v: u64) {
        self.0 .0.lock().unwrap().push_back(v);
        self.0 .1.notify_one();
    }
}
impl Rx for MutexQ {
    fn try_pop(&mut self) -> Option<u64> {
        self.0 .0.lock().unwrap().pop_front()
    }
}

fn pop_spin(rx: &mut dyn Rx) -> u64 {
    loop {
        if let Some(v) = rx.try_pop() {
            return v;
        }
        std::hint::spin_loop();
    }
}

/// Runs one queue's ping-pong: `pair` makes one (tx, rx) queue, called twice (request and
/// reply queues).
fn ping_pong<T: Tx, R: Rx>(c: &mut Criterion, name: &str, mut pair: impl FnMut() -> (T, R)) {
    let (mut req_tx, mut req_rx) = pair();
    let (mut rep_tx, mut rep_rx) = pair();
    let worker = thread::spawn(move || loop {
        let v = pop_spin(&mut req_rx);
        if v == STOP {
            return;
        }
        rep_tx.push(v);
    });
    let rec = Recorder::new(WARM_UP);
    let mut next = 0u64;
    let mut g = c.benchmark_group("handoff");
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            for _ in 0..iters {
                next += 1;
                let t = Instant::now();
                req_tx.push(next);
                let seen = pop_spin(&mut rep_rx);
                let d = t.elapsed();
                debug_assert_eq!(seen, next);
                rec.sample(d.as_nanos() as u64);
                total += d;
            }
            total
        })
    });
    g.finish();
    req_tx.push(STOP);
    worker.join().expect("worker");
    row_latency("handoff", &format!("{name} round trip"), &rec);
}

fn handoff(c: &mut Criterion) {
    proxy_benches::stats::row_load("handoff");
    ping_pong(c, "proxy_ring", || {
        proxy_core::driver::ring::channel::<u64>(CAP)
    });
    ping_pong(c, "rtrb", || rtrb::RingBuffer::<u64>::new(CAP));
    ping_pong(c, "crossbeam_array_queue", || {
        let q = Arc::new(ArrayQueue::new(CAP));
        (ArrayQ(q.clone()), ArrayQ(q))
    });
    ping_pong(c, "std_mpsc", mpsc::channel::<u64>);
    ping_pong(c, "mutex_deque_condvar", || {
        let q: LockedDeque = Arc::new((Mutex::new(VecDeque::new()), Condvar::new()));
        (MutexQ(q.clone()), MutexQ(q))
    });
}

criterion_group! {
    name = benches;
    config = quick();
    targets = handoff
}
criterion_main!(benches);
