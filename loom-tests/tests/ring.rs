//! Model 1: the SPSC ring (submission and status rings, transport mailboxes).
#![cfg(loom)]

use loom_tests::harness::{spsc_ring, RealRing};
use loom_tests::loom_finds_failure;
use loom_tests::twins::ring::BuggyRing;

#[test]
fn spsc_ring_fifo_nothing_lost_edges() {
    loom::model(spsc_ring::<RealRing>);
}

#[test]
fn spsc_ring_twin_with_relaxed_tail_is_caught() {
    assert!(
        loom_finds_failure(spsc_ring::<BuggyRing>),
        "loom missed the Relaxed tail store"
    );
}
