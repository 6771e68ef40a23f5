//! Model 5: the device trigger word against the network task's gate.
#![cfg(loom)]

use loom_tests::harness::trigger::{trigger_gate, RealGated};
use loom_tests::twins::trigger::{bug, TwinGated};
use loom_tests::{assert_loom_catches, check};

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

#[test]
fn task_starts_once_after_the_device_write_and_the_consume_is_seen() {
    check(PREEMPTIONS, trigger_gate::<RealGated>);
}

#[test]
fn twin_copy_passes() {
    check(PREEMPTIONS, trigger_gate::<TwinGated<{ bug::NONE }>>);
}

#[test]
fn twin_with_relaxed_can_start_is_caught() {
    assert_loom_catches(
        "can_start with Relaxed loads",
        PREEMPTIONS,
        &["Causality violation"],
        trigger_gate::<TwinGated<{ bug::CAN_START_RELAXED }>>,
    );
}

#[test]
fn twin_with_relaxed_consume_is_caught() {
    assert_loom_catches(
        "consume with Relaxed stores",
        PREEMPTIONS,
        &["Causality violation"],
        trigger_gate::<TwinGated<{ bug::CONSUME_RELAXED }>>,
    );
}
