//! Model 15: a one-shot hand-over (a library thread's launch outcome against its waiter).
#![cfg(loom)]

use loom_tests::harness::oneshot::oneshot_set_vs_wait;
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

#[test]
fn the_waiter_gets_the_value_set_and_never_sleeps_past_it() {
    check(PREEMPTIONS, oneshot_set_vs_wait);
}

/// `OneShot::set` notifies before the value is ready: a waiter that looked and parks again
/// sleeps past the set.
#[test]
fn plant_notify_before_ready_is_caught() {
    assert_loom_catches(
        Plant::OneShotNotifyBeforeReady,
        PREEMPTIONS,
        &["deadlock"],
        oneshot_set_vs_wait,
    );
}

/// `OneShot::set` publishes `ready` Relaxed: the waiter may read the value before its write.
#[test]
fn plant_ready_relaxed_is_caught() {
    assert_loom_catches(
        Plant::OneShotReadyRelaxed,
        PREEMPTIONS,
        &["Causality violation"],
        oneshot_set_vs_wait,
    );
}
