//! The lease pool over `tcp;ofi_rxm` on loopback: a teardown that leaves a request pools its
//! endpoint, the next transport of the same key leases it, and a message of the earlier lease
//! never matches the later lease's receive.

use std::time::Duration;

use proxy_core::progress::net::{make_tag, TestOutcome, Transport};

use super::pool_stats;
use crate::tests::{close, drive, pair, pattern, recv, send, wait, TCP};
use crate::Options;

#[test]
fn a_stuck_teardown_pools_the_endpoint_and_the_next_lease_ignores_its_messages() {
    // Queue sizes no other test asks for: no other test's open takes this key's set.
    let opts = Options {
        tx_size: Some(300),
        rx_size: Some(300),
        close_drain: Duration::from_millis(50),
        ..Options::default()
    };
    let before = pool_stats();
    let mut ts = pair(TCP, opts.clone());
    assert_eq!(ts[0].leases(), 1, "a fresh set");
    // Rank 0: a 16 MiB (rendezvous) send that rank 1 never receives: rxm cannot cancel it.
    // Its buffer stays allocated for the life of the process (the rule for a stuck request).
    let big: &'static [u8] = Vec::leak(pattern(1, 16 << 20));
    let _stuck = send(&mut ts, 0, 1, big, make_tag(9, 0, 0, 1, 0));
    // Rank 1: a 4097 B (eager) message that rank 0 never receives, under the tag that the next
    // lease's receive will use.
    let tag = make_tag(9, 1, 0, 3, 0);
    let old = pattern(2, 4097);
    let s = send(&mut ts, 1, 0, &old, tag);
    assert_eq!(wait(&mut ts, 1, s), Ok(TestOutcome::Done { size: 4097 }));
    let mut rounds = 0;
    drive("deliver the unexpected message", &mut ts, |_| {
        rounds += 1;
        rounds > 2000
    });
    let first_generation = ts[0].generation();
    let e = ts[0].close().expect_err("a send rxm cannot cancel");
    assert!(e.message.contains("lease pool"), "{e}");
    ts[1].close().expect("rank 1 has nothing in flight");
    let mid = pool_stats();
    assert!(mid.sets > before.sets, "{before} -> {mid}");
    assert!(mid.idle >= 1, "{mid}");

    // The next pair's rank 0 leases the pooled set, with a new generation.
    let mut ts = pair(TCP, opts);
    assert_eq!(ts[0].leases(), 2, "the pooled set, leased again");
    assert_ne!(ts[0].generation(), first_generation);
    let new = pattern(3, 4097);
    let mut got = vec![0u8; 4097];
    let r = recv(&mut ts, 0, 1, got.as_mut_ptr(), got.len(), tag);
    let s = send(&mut ts, 1, 0, &new, tag);
    assert_eq!(wait(&mut ts, 1, s), Ok(TestOutcome::Done { size: 4097 }));
    assert_eq!(wait(&mut ts, 0, r), Ok(TestOutcome::Done { size: 4097 }));
    assert!(
        got == new,
        "the earlier lease's message matched the later lease's receive"
    );
    // A clean teardown of the tainted set returns it to the pool (closed never).
    close(&mut ts);
    let after = pool_stats();
    assert!(after.reuses > before.reuses, "{before} -> {after}");
}
