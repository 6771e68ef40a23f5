//! Model 1: the SPSC ring (submission and status rings, transport mailboxes).
#![cfg(loom)]

use loom_tests::harness::spsc_ring;
use loom_tests::{assert_loom_catches, check, ENV_BOUND};
use proxy_core::plant::Plant;

#[test]
fn spsc_ring_fifo_nothing_lost_edges() {
    check(ENV_BOUND, spsc_ring);
}

#[test]
fn spsc_ring_plant_relaxed_tail_is_caught() {
    assert_loom_catches(
        Plant::RingRelaxedTail,
        ENV_BOUND,
        &["Causality violation"],
        spsc_ring,
    );
}
