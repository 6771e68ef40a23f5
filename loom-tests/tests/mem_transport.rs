//! Model 7: the in-memory transport: two workers exchanging messages through one mailbox, the
//! per-send handoff racing cancel against the receiver's claim, and delivery by `poll` alone
//! through the arrival flags.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::harness::handoff_cancel_vs_claim;
use loom_tests::{assert_loom_catches, check, ENV_BOUND};
use proxy_core::plant::Plant;
use proxy_core::progress::mem_transport::MemFabric;
use proxy_core::progress::net::{TestOutcome, Transport};

/// Preemption bound of the two-message exchange (at the environment's 3 it takes minutes).
const EXCHANGE_PREEMPTIONS: usize = 2;

/// Sender's worker and receiver's worker exchange two messages (one eager, one lent) through
/// one mailbox, the receives posted in either order; the bytes arrive whole, once.
fn exchange(recv_reversed: bool) {
    let fabric = MemFabric::new(2).unwrap();
    let mut a = fabric.endpoint(0).unwrap();
    let mut b = fabric.endpoint(1).unwrap();
    let sender = thread::spawn(move || {
        let small = [5u8; 8];
        let large = vec![6u8; proxy_core::progress::mem_transport::EAGER_MAX + 1];
        let mut reqs = Vec::new();
        for (tag, buf) in [(1u64, &small[..]), (2, &large[..])] {
            loop {
                // SAFETY: the buffers outlive the requests (we test them to completion below).
                match unsafe { a.isend(1, buf.as_ptr(), buf.len() as u64, tag) }.unwrap() {
                    Some(p) => {
                        reqs.push(p.request);
                        break;
                    }
                    None => thread::yield_now(),
                }
            }
        }
        for r in reqs {
            let mut n = 0;
            loop {
                a.poll().unwrap();
                match a.test(r).unwrap() {
                    TestOutcome::Done { .. } => break,
                    TestOutcome::Pending => thread::yield_now(),
                    TestOutcome::Cancelled => panic!("cancelled"),
                }
                n += 1;
                assert!(n < 200, "send never completed");
            }
        }
        drop(large);
    });
    let mut small = [0u8; 8];
    let mut large = vec![0u8; proxy_core::progress::mem_transport::EAGER_MAX + 1];
    let (sp, lp) = (small.as_mut_ptr(), large.as_mut_ptr());
    let mut posts = vec![(1u64, sp, 8u64), (2, lp, large.len() as u64)];
    if recv_reversed {
        posts.reverse();
    }
    let mut reqs = Vec::new();
    for (tag, ptr, len) in posts {
        // SAFETY: the buffers outlive the requests.
        let p = unsafe { b.irecv(0, ptr, len, tag) }
            .unwrap()
            .expect("receive posted");
        reqs.push(p.request);
    }
    for r in reqs {
        let mut n = 0;
        loop {
            b.poll().unwrap();
            match b.test(r).unwrap() {
                TestOutcome::Done { .. } => break,
                TestOutcome::Pending => thread::yield_now(),
                TestOutcome::Cancelled => panic!("cancelled"),
            }
            n += 1;
            assert!(n < 200, "receive never completed");
        }
    }
    sender.join().unwrap();
    assert_eq!(small, [5; 8]);
    assert!(large.iter().all(|&x| x == 6));
}

#[test]
fn two_messages_one_mailbox_recv_in_order() {
    check(EXCHANGE_PREEMPTIONS, || exchange(false));
}

#[test]
fn two_messages_one_mailbox_recv_reversed() {
    check(EXCHANGE_PREEMPTIONS, || exchange(true));
}

#[test]
fn cancel_races_claim_exactly_one_wins() {
    check(ENV_BOUND, handoff_cancel_vs_claim);
}

#[test]
fn handoff_plant_withdraw_by_load_and_store_is_caught() {
    assert_loom_catches(
        Plant::HandoffWithdrawByLoadStore,
        ENV_BOUND,
        &[
            "Causality violation",
            "bytes arrive whole",
            "never copied",
            "agree on the outcome",
        ],
        handoff_cancel_vs_claim,
    );
}

/// `senders` ranks each post `per_sender` eager sends to the last rank, which posts no receive
/// and calls only `poll` (no `irecv`, no `test`: those drain their own peer without the flags).
/// Once every sender has finished (seen before a poll), that poll must have filed every message
/// as unexpected: a pushed message is drained by `poll` alone.
fn delivery_by_poll(senders: u32, per_sender: u64) {
    let fabric = MemFabric::new(senders + 1).unwrap();
    let receiver = senders;
    let finished = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..senders)
        .map(|s| {
            let mut ep = fabric.endpoint(s).unwrap();
            let finished = finished.clone();
            thread::spawn(move || {
                let bytes = [s as u8; 4];
                for tag in 0..per_sender {
                    // SAFETY: 4 bytes ≤ EAGER_MAX: copied at post, the buffer is free at once.
                    let posted = unsafe { ep.isend(receiver, bytes.as_ptr(), 4, tag) }.unwrap();
                    assert!(
                        posted.is_some(),
                        "the mailbox has room for the model's sends"
                    );
                }
                finished.fetch_add(1, Ordering::Release);
                ep // kept alive until the receiver has looked (a drop withdraws the sends)
            })
        })
        .collect();
    let mut b = fabric.endpoint(receiver).unwrap();
    let expected = (senders as u64 * per_sender) as usize;
    loop {
        // Acquire: every push and flag of a finished sender happens-before this poll.
        let all_done = finished.load(Ordering::Acquire) == senders as usize;
        b.poll().unwrap();
        if b.unexpected_len() == expected {
            break;
        }
        assert!(!all_done, "a pushed message is drained by poll alone");
        thread::yield_now();
    }
    for h in handles {
        drop(h.join().unwrap());
    }
}

#[test]
fn poll_alone_drains_two_messages_from_one_sender() {
    check(ENV_BOUND, || delivery_by_poll(1, 2));
}

#[test]
fn poll_alone_drains_two_senders_sharing_a_flag_word() {
    check(EXCHANGE_PREEMPTIONS, || delivery_by_poll(2, 1));
}

#[test]
fn arrival_plant_flag_before_push_is_caught() {
    assert_loom_catches(
        Plant::MemArrivalBeforePush,
        ENV_BOUND,
        &["a pushed message is drained by poll alone"],
        || delivery_by_poll(1, 2),
    );
}
