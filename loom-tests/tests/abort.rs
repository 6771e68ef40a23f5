//! Model 10: a comm's abort word — two requests racing (a user abort and a failure detector)
//! while the driving thread steps the comm's network task.
#![cfg(loom)]

use loom_tests::harness::abort::abort_race;
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

#[test]
fn one_abort_wins_and_the_task_ends_with_its_status() {
    check(PREEMPTIONS, abort_race);
}

/// `AbortHandle::abort_with` deciding "first" on a load and then storing: both requests win,
/// and the later store replaces the status the driving thread may already have applied.
#[test]
fn plant_abort_first_by_load_and_store_is_caught() {
    assert_loom_catches(
        Plant::AbortFirstByLoadStore,
        PREEMPTIONS,
        &[
            "exactly one abort request wins",
            "another status than the comm's abort",
        ],
        abort_race,
    );
}
