//! Model 17: the idle wait (`driver::idle::block_idle`) against a message arriving while the
//! driver's own progress may move it off the descriptor.
#![cfg(loom)]

use loom_tests::harness::idle::{idle_kick_vs_sleep, idle_wait_vs_arrival};
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

#[test]
fn the_driver_reads_the_message_and_never_sleeps_past_it() {
    check(PREEMPTIONS, idle_wait_vs_arrival);
}

/// `block_idle` sleeps without arming: a message a post's progress already queued never wakes
/// the descriptor.
#[test]
fn plant_sleeps_unarmed_is_caught() {
    assert_loom_catches(
        Plant::IdleSleepsUnarmed,
        PREEMPTIONS,
        &["deadlock"],
        idle_wait_vs_arrival,
    );
}

#[test]
fn a_kicked_driver_never_sleeps_past_the_submission() {
    check(PREEMPTIONS, idle_kick_vs_sleep);
}

/// `IdleSlot::kick` decides "awake" on a plain load: a driver about to sleep misses the kick.
#[test]
fn plant_kick_skips_awake_is_caught() {
    assert_loom_catches(
        Plant::IdleKickSkipsAwake,
        PREEMPTIONS,
        &["deadlock"],
        idle_kick_vs_sleep,
    );
}
