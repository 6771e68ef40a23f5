//! Model 13: the C libraries' handle table — two creates racing for one slot, two calls into
//! one object, a destroy racing a create that reuses the slot.
#![cfg(loom)]

use loom_tests::harness::handles::{concurrent_calls, insert_race, remove_vs_insert};
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

#[test]
fn exactly_one_insert_takes_a_free_slot() {
    check(PREEMPTIONS, insert_race);
}

#[test]
fn plant_reserving_by_load_and_store_is_caught() {
    assert_loom_catches(
        Plant::HandleReserveByLoadStore,
        PREEMPTIONS,
        &["two inserts got one slot", "Causality violation"],
        insert_race,
    );
}

#[test]
fn calls_into_one_object_are_serialized() {
    check(PREEMPTIONS, concurrent_calls);
}

#[test]
fn plant_relaxed_lookup_is_caught() {
    assert_loom_catches(
        Plant::HandleLookupRelaxed,
        PREEMPTIONS,
        &["Causality violation"],
        concurrent_calls,
    );
}

#[test]
fn a_remove_and_an_insert_reusing_its_slot_do_not_overlap() {
    check(PREEMPTIONS, remove_vs_insert);
}

#[test]
fn plant_freeing_before_the_take_is_caught() {
    assert_loom_catches(
        Plant::HandleRemoveFreesFirst,
        PREEMPTIONS,
        &[
            "Causality violation",
            "the remove returns the object it removed",
        ],
        remove_vs_insert,
    );
}
