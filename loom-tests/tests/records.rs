//! Model 2: submission → worker `tick()` → task step → status record → consumer.
#![cfg(loom)]

use loom_tests::harness::driver::{record_handoff, RealDriver};
use loom_tests::twins::queue::{bug, TwinDriver};
use loom_tests::twins::record;
use loom_tests::{assert_loom_catches, check};
use proxy_core::driver::task::TaskCore;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

#[test]
fn done_record_is_final_and_the_consumer_is_woken() {
    check(PREEMPTIONS, record_handoff::<RealDriver, TaskCore>);
}

#[test]
fn twin_copies_without_their_bugs_pass() {
    check(
        PREEMPTIONS,
        record_handoff::<TwinDriver<{ bug::NONE }>, record::TaskCore<false>>,
    );
}

#[test]
fn twin_with_relaxed_run_state_is_caught() {
    assert_loom_catches(
        "run_state stored Relaxed",
        PREEMPTIONS,
        &["another field was not final"],
        record_handoff::<RealDriver, record::TaskCore<true>>,
    );
}

#[test]
fn twin_with_notify_skipping_an_empty_word_is_caught() {
    assert_loom_catches(
        "a notify that skips an EMPTY wake word",
        PREEMPTIONS,
        &["deadlock"],
        record_handoff::<TwinDriver<{ bug::NOTIFY_SKIPS_WHEN_EMPTY }>, TaskCore>,
    );
}
