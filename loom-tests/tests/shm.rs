//! Model 19: the shared-memory transport between processes (`proxy-shm`): the mailbox ring's
//! indices, and a large send's state word racing the sender's withdrawal against the
//! receiver's claim.
#![cfg(loom)]

use loom_tests::harness::shm::{shm_ring, shm_withdraw_vs_claim};
use loom_tests::{assert_loom_catches, check, ENV_BOUND};
use proxy_core::plant::Plant;

#[test]
fn shm_ring_fifo_nothing_lost_edges() {
    check(ENV_BOUND, shm_ring);
}

#[test]
fn shm_ring_plant_relaxed_tail_is_caught() {
    assert_loom_catches(
        Plant::ShmTailRelaxed,
        ENV_BOUND,
        &["Causality violation"],
        shm_ring,
    );
}

#[test]
fn shm_withdraw_vs_claim_one_wins() {
    check(ENV_BOUND, shm_withdraw_vs_claim);
}

#[test]
fn shm_withdraw_vs_claim_plant_load_store_is_caught() {
    assert_loom_catches(
        Plant::ShmClaimByLoadStore,
        ENV_BOUND,
        &["read a withdrawn send", "Causality violation"],
        shm_withdraw_vs_claim,
    );
}
