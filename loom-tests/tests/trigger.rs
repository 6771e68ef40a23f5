//! Model 5: the device trigger word against the network task's gate.
#![cfg(loom)]

use loom_tests::harness::trigger::trigger_gate;
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

#[test]
fn task_starts_once_after_the_device_write_and_the_consume_is_seen() {
    check(PREEMPTIONS, trigger_gate);
}

#[test]
fn plant_relaxed_can_start_is_caught() {
    assert_loom_catches(
        Plant::TriggerCanStartRelaxed,
        PREEMPTIONS,
        &["Causality violation"],
        trigger_gate,
    );
}

#[test]
fn plant_relaxed_consume_is_caught() {
    assert_loom_catches(
        Plant::TriggerConsumeRelaxed,
        PREEMPTIONS,
        &["Causality violation"],
        trigger_gate,
    );
}

/// The protocol plant of `task/network.rs` (also caught by proxy-core's task tests): the task
/// never waits for the trigger, so it starts before the device's write and never consumes it.
#[test]
fn plant_skipping_the_trigger_gate_is_caught() {
    assert_loom_catches(
        Plant::NetworkSkipsTriggerGate,
        PREEMPTIONS,
        &[
            "Causality violation",
            "before the device's write",
            "never saw the trigger consumed",
        ],
        trigger_gate,
    );
}
