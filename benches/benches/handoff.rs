//! Hand-off: a standalone ping-pong of one queue pair between two spinning threads (not the
//! engine). The submitter pushes a value ("submit"), the worker pops it ("first step") and
//! pushes it back on the reply queue ("record"), the submitter pops the reply ("seen"). Each
//! round trip is timed on its own (two `Instant::now` calls, ~2 × 20 ns, are inside every
//! sample); p50 / p99 / mean are printed per queue.
//!
//! Queues: our SPSC ring (`proxy_core::base::ring`), `rtrb`, `crossbeam_queue::ArrayQueue`,
//! `std::sync::mpsc` (`try_recv`), and `Mutex<VecDeque>` + `Condvar` (push notifies, the
//! consumer spins on the lock as the others spin on their queue).
//!
//! Both threads spin, pinned to two different CPUs (unless `BENCH_NO_PIN` is set): on a
//! machine whose other load takes those CPUs the numbers are partly scheduler time slices.
//! Criterion's group `handoff` gives each queue's mean; the summary rows come from a plain
//! run after it (`rounds`: 5 rounds, every queue in turn in each round, medians of the
//! rounds' p50 and p99), so a burst of load hits every queue alike.
//!
//! `cargo bench -p proxy-benches --bench handoff` (one queue in criterion:
//! `-- 'handoff/rtrb'`; only the rounds: `-- rounds`).
#![allow(missing_docs)]

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::Criterion;
use crossbeam_queue::ArrayQueue;
use proxy_benches::quick;
use proxy_benches::stats::{percentile, row};

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

impl Tx for proxy_core::base::ring::Producer<u64> {
    fn push(&mut self, v: u64) {
        while proxy_core::base::ring::Producer::push(self, v).is_err() {
            std::hint::spin_loop();
        }
    }
}
impl Rx for proxy_core::base::ring::Consumer<u64> {
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

/// The queues compared.
#[derive(Clone, Copy, Debug)]
enum Kind {
    ProxyRing,
    Rtrb,
    ArrayQueue,
    StdMpsc,
    MutexDeque,
}

const KINDS: [Kind; 5] = [
    Kind::ProxyRing,
    Kind::Rtrb,
    Kind::ArrayQueue,
    Kind::StdMpsc,
    Kind::MutexDeque,
];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ProxyRing => "proxy_ring",
            Kind::Rtrb => "rtrb",
            Kind::ArrayQueue => "crossbeam_array_queue",
            Kind::StdMpsc => "std_mpsc",
            Kind::MutexDeque => "mutex_deque_condvar",
        }
    }

    /// One (tx, rx) queue of this kind, boxed.
    fn pair(self) -> (Box<dyn Tx>, Box<dyn Rx>) {
        match self {
            Kind::ProxyRing => {
                let (t, r) = proxy_core::base::ring::channel::<u64>(CAP);
                (Box::new(t), Box::new(r))
            }
            Kind::Rtrb => {
                let (t, r) = rtrb::RingBuffer::<u64>::new(CAP);
                (Box::new(t), Box::new(r))
            }
            Kind::ArrayQueue => {
                let q = Arc::new(ArrayQueue::new(CAP));
                (Box::new(ArrayQ(q.clone())), Box::new(ArrayQ(q)))
            }
            Kind::StdMpsc => {
                let (t, r) = mpsc::channel::<u64>();
                (Box::new(t), Box::new(r))
            }
            Kind::MutexDeque => {
                let q: LockedDeque = Arc::new((Mutex::new(VecDeque::new()), Condvar::new()));
                (Box::new(MutexQ(q.clone())), Box::new(MutexQ(q)))
            }
        }
    }
}

/// CPUs to pin the submitter and the worker to (`None`: no pinning: fewer than 2 CPUs, or
/// `BENCH_NO_PIN` set). Pinned to different CPUs, the two spinning threads can never be
/// placed on one CPU by the scheduler (which turns a round trip into time slices).
fn pin_cpus() -> Option<(usize, usize)> {
    // Read once, before `main` pins itself (after that the affinity mask has one CPU).
    static PIN: std::sync::OnceLock<Option<(usize, usize)>> = std::sync::OnceLock::new();
    *PIN.get_or_init(|| {
        if std::env::var_os("BENCH_NO_PIN").is_some() {
            return None;
        }
        let ids = core_affinity::get_core_ids()?;
        (ids.len() >= 2).then(|| (ids[0].id, ids[1].id))
    })
}

/// A running ping-pong: the submitter's ends and the worker thread (pinned if `pin`).
struct PingPong {
    req: Box<dyn Tx>,
    rep: Box<dyn Rx>,
    worker: Option<thread::JoinHandle<()>>,
    next: u64,
}

impl PingPong {
    fn start(kind: Kind, worker_cpu: Option<usize>) -> Self {
        let (req, mut req_rx) = kind.pair();
        let (mut rep_tx, rep) = kind.pair();
        let worker = thread::spawn(move || {
            if let Some(id) = worker_cpu {
                core_affinity::set_for_current(core_affinity::CoreId { id });
            }
            loop {
                let v = pop_spin(&mut *req_rx);
                if v == STOP {
                    return;
                }
                rep_tx.push(v);
            }
        });
        Self {
            req,
            rep,
            worker: Some(worker),
            next: 0,
        }
    }

    /// One round trip: submit, the worker's first step, the record seen.
    #[inline]
    fn trip(&mut self) -> Duration {
        self.next += 1;
        let t = Instant::now();
        self.req.push(self.next);
        let seen = pop_spin(&mut *self.rep);
        let d = t.elapsed();
        debug_assert_eq!(seen, self.next);
        d
    }
}

impl Drop for PingPong {
    fn drop(&mut self) {
        self.req.push(STOP);
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// Criterion's view (mean and its interval) of each queue.
fn handoff(c: &mut Criterion) {
    let pin = pin_cpus();
    let mut g = c.benchmark_group("handoff");
    for kind in KINDS {
        let mut pp: Option<PingPong> = None;
        g.bench_function(kind.name(), |b| {
            let pp = pp.get_or_insert_with(|| PingPong::start(kind, pin.map(|p| p.1)));
            b.iter_custom(|iters| (0..iters).map(|_| pp.trip()).sum())
        });
    }
    g.finish();
}

/// The summary rows: `ROUNDS` rounds, each running every queue in turn (so a burst of load
/// on this shared machine hits every queue alike), `TRIPS` timed round trips per queue and
/// round (at most `ROUND_LIMIT` of wall time) after 1000 untimed ones; p50 and p99 per round;
/// the rows are the medians over the rounds, and the best round's p50.
fn rounds() {
    const ROUNDS: usize = 5;
    const TRIPS: usize = 20_000;
    const ROUND_LIMIT: Duration = Duration::from_millis(400);
    let pin = pin_cpus();
    proxy_benches::stats::row_load("handoff");
    row(
        "handoff",
        "threads",
        match pin {
            Some(_) => "pinned to 2 CPUs",
            None => "not pinned",
        },
        2.0,
        "threads",
    );
    let mut p50s = vec![Vec::new(); KINDS.len()];
    let mut p99s = vec![Vec::new(); KINDS.len()];
    let mut samples = Vec::with_capacity(TRIPS);
    for _ in 0..ROUNDS {
        for (i, kind) in KINDS.iter().enumerate() {
            let mut pp = PingPong::start(*kind, pin.map(|p| p.1));
            for _ in 0..1000 {
                pp.trip();
            }
            samples.clear();
            let t0 = Instant::now();
            while samples.len() < TRIPS && t0.elapsed() < ROUND_LIMIT {
                samples.push(pp.trip().as_nanos() as u64);
            }
            p50s[i].push(percentile(&mut samples, 50.0).unwrap_or(0));
            p99s[i].push(percentile(&mut samples, 99.0).unwrap_or(0));
        }
    }
    for (i, kind) in KINDS.iter().enumerate() {
        let case = format!("{} round trip", kind.name());
        let best = *p50s[i].iter().min().unwrap_or(&0);
        let p50 = percentile(&mut p50s[i], 50.0).unwrap_or(0);
        let p99 = percentile(&mut p99s[i], 50.0).unwrap_or(0);
        row(
            "handoff",
            &case,
            "p50 (median of 5 rounds)",
            p50 as f64,
            "ns",
        );
        row(
            "handoff",
            &case,
            "p99 (median of 5 rounds)",
            p99 as f64,
            "ns",
        );
        row("handoff", &case, "p50 (best round)", best as f64, "ns");
    }
}

fn main() {
    if let Some((main_cpu, _)) = pin_cpus() {
        core_affinity::set_for_current(core_affinity::CoreId { id: main_cpu });
    }
    let mut c = quick().configure_from_args();
    handoff(&mut c);
    c.final_summary();
    if proxy_benches::plain_run_selected("rounds") {
        rounds();
    }
}
