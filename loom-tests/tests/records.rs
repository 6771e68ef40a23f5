//! Model 2: submission → worker `tick()` → task step → status record → consumer.
#![cfg(loom)]

use loom_tests::harness::driver::record_handoff;
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

#[test]
fn done_record_is_final_and_the_consumer_is_woken() {
    check(PREEMPTIONS, record_handoff);
}

#[test]
fn plant_relaxed_run_state_is_caught() {
    assert_loom_catches(
        Plant::RecordRelaxedRunState,
        PREEMPTIONS,
        &["another field was not final"],
        record_handoff,
    );
}

#[test]
fn plant_notify_skipping_an_empty_word_is_caught() {
    assert_loom_catches(
        Plant::WakeNotifySkipsEmpty,
        PREEMPTIONS,
        &["deadlock"],
        record_handoff,
    );
}
