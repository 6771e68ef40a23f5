//! Model 4: producer slots — release and reuse while the worker ticks; two comms racing for one
//! free slot.
#![cfg(loom)]

use loom_tests::harness::driver::{claim_race, slot_release_and_reuse};
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 2;

#[test]
fn released_slot_is_unread_and_reusable() {
    check(PREEMPTIONS, slot_release_and_reuse);
}

#[test]
fn plant_leaving_without_the_closing_handshake_is_caught() {
    assert_loom_catches(
        Plant::SlotLeaveWithoutHandshake,
        PREEMPTIONS,
        &["after its comm left the slot", "exactly once"],
        slot_release_and_reuse,
    );
}

#[test]
fn exactly_one_comm_claims_a_free_slot() {
    check(PREEMPTIONS, claim_race);
}

#[test]
fn plant_claiming_by_load_and_store_is_caught() {
    assert_loom_catches(
        Plant::SlotClaimByLoadStore,
        PREEMPTIONS,
        &[
            "exactly one comm claims",
            "a FREE slot holds its owner ends",
            "Causality violation",
        ],
        claim_race,
    );
}
