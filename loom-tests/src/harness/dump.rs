//! Model 12: a queue's dump request word (`driver::dump::DumpRequests`) — a request from
//! another thread (an API call, a signal's watcher) vs the driving thread serving it at its
//! tick (docs/design.md §6, "State dump").
//!
//! Two scenarios:
//! * [`dump_request_vs_serve`]: the word alone, as the queue's tick uses it. A requester first
//!   does something the dump must show (here: stores 1 in a word the dump reads), then asks for
//!   a dump; the driving thread serves twice, each dump recording what it saw. Checked: a ticket
//!   that reads answered was answered by a dump that saw the requester's write (it began after
//!   the request), and a request made before the driver's last serve is answered.
//! * [`parked_worker_serves_a_dump`]: the real queue. The worker has nothing to do and parks;
//!   another thread requests a dump and waits (bounded) for it. Checked: the parked worker is
//!   woken and writes the dump (the park's re-check sees the pending request).

use proxy_core::base::sync::{Arc, AtomicU32, Ordering};
use proxy_core::driver::dump::DumpRequests;
use proxy_core::driver::queue::ProxyQueue;

use super::driver::{new_queue, one_slot, run_worker, SPIN_BOUND};
use super::thread;

/// Scenario 1 (see the module docs).
pub fn dump_request_vs_serve() {
    let requests = Arc::new(DumpRequests::new());
    // What the requester did before asking (the dump must show it), and what each dump saw.
    let before = Arc::new(AtomicU32::new(0));
    let seen = Arc::new(AtomicU32::new(u32::MAX));
    let requester = {
        let (requests, before) = (requests.clone(), before.clone());
        thread::spawn(move || {
            before.store(1, Ordering::Relaxed);
            requests.request()
        })
    };
    let mut served = 0;
    for _ in 0..2 {
        requests.serve(&mut served, || {
            seen.store(before.load(Ordering::Relaxed), Ordering::Relaxed)
        });
        thread::yield_now();
    }
    let ticket = requester.join().unwrap();
    if requests.answered(ticket) {
        assert_eq!(
            seen.load(Ordering::Relaxed),
            1,
            "a dump that answers a request shows what was done before the request"
        );
    }
    // A last serve (the driver's next tick) answers any request still pending.
    requests.serve(&mut served, || {
        seen.store(before.load(Ordering::Relaxed), Ordering::Relaxed)
    });
    assert!(
        requests.answered(ticket),
        "a request is answered by the next serve"
    );
    assert_eq!(seen.load(Ordering::Relaxed), 1);
}

/// Scenario 2 (see the module docs).
pub fn parked_worker_serves_a_dump() {
    let (queue, worker) = new_queue(one_slot());
    let w = thread::spawn(move || run_worker(worker));
    let ticket = queue.request_dump();
    let mut polls = 0;
    while !queue.dump_answered(ticket) {
        polls += 1;
        assert!(
            polls < SPIN_BOUND,
            "the parked worker never wrote the requested dump"
        );
        thread::yield_now();
    }
    queue.request_stop();
    w.join().unwrap();
    drop::<Arc<ProxyQueue>>(queue);
}

#[cfg(all(test, not(loom)))]
mod tests;
