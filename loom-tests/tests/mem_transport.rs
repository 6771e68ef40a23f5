//! Model 7: the in-memory transport: two workers exchanging messages through one mailbox, and
//! the per-send handoff racing cancel against the receiver's claim.
#![cfg(loom)]

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
