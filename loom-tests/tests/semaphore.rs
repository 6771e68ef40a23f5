//! Model 6: the semaphore reverse edge (`nec_inc_semaphore`), proxy thread → device thread.
#![cfg(loom)]

use loom_tests::harness::semaphore_edge;
use loom_tests::{assert_loom_catches, check, ENV_BOUND};
use proxy_core::plant::Plant;

#[test]
fn semaphore_counts_never_run_ahead_of_completions() {
    check(ENV_BOUND, semaphore_edge);
}

#[test]
fn semaphore_plant_relaxed_increment_is_caught() {
    assert_loom_catches(
        Plant::SemaphoreRelaxedIncrement,
        ENV_BOUND,
        &["Causality violation"],
        semaphore_edge,
    );
}
