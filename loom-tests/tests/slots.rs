//! Model 4: producer slots — release and reuse while the worker ticks; two comms racing for one
//! free slot.
#![cfg(loom)]

use loom_tests::harness::driver::{claim_race, slot_release_and_reuse, RealDriver};
use loom_tests::twins::queue::{bug, TwinDriver};
use loom_tests::{assert_loom_catches, check};
use proxy_core::driver::task::TaskCore;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 2;

#[test]
fn released_slot_is_unread_and_reusable() {
    check(PREEMPTIONS, slot_release_and_reuse::<RealDriver, TaskCore>);
}

#[test]
fn released_slot_twin_copy_passes() {
    check(
        PREEMPTIONS,
        slot_release_and_reuse::<TwinDriver<{ bug::NONE }>, TaskCore>,
    );
}

#[test]
fn twin_leaving_without_the_closing_handshake_is_caught() {
    assert_loom_catches(
        "a leave without the closing handshake",
        PREEMPTIONS,
        &["after its comm left the slot", "exactly once"],
        slot_release_and_reuse::<TwinDriver<{ bug::LEAVE_WITHOUT_HANDSHAKE }>, TaskCore>,
    );
}

#[test]
fn exactly_one_comm_claims_a_free_slot() {
    check(PREEMPTIONS, claim_race::<RealDriver, TaskCore>);
}

#[test]
fn claim_race_twin_copy_passes() {
    check(
        PREEMPTIONS,
        claim_race::<TwinDriver<{ bug::NONE }>, TaskCore>,
    );
}

#[test]
fn twin_claiming_by_load_and_store_is_caught() {
    assert_loom_catches(
        "a claim by load + store",
        PREEMPTIONS,
        &[
            "exactly one comm claims",
            "a FREE slot holds its owner ends",
            "Causality violation",
        ],
        claim_race::<TwinDriver<{ bug::CLAIM_BY_LOAD_STORE }>, TaskCore>,
    );
}
