//! Model 8: the registry — two comms of one group joining and leaving while its worker starts
//! and stops.
#![cfg(loom)]

use loom_tests::harness::registry::registry_join_leave;
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model: 1. Each comm's leave runs the slot's closing handshake
/// against a live worker, and the worker may start twice; at 2 the model takes many minutes.
/// One preemption is what both plants below need (a switch between a leave's decision and its
/// effect), and their runs show the bound finds them.
const PREEMPTIONS: usize = 1;

#[test]
fn one_worker_while_the_group_has_members_none_after() {
    check(PREEMPTIONS, registry_join_leave);
}

#[test]
fn plant_split_refcount_decrement_is_caught() {
    assert_loom_catches(
        Plant::RegistrySplitDecrement,
        PREEMPTIONS,
        &["the group is gone", "no worker runs"],
        registry_join_leave,
    );
}

#[test]
fn plant_stopping_the_last_worker_outside_the_lock_is_caught() {
    assert_loom_catches(
        Plant::RegistryStopOutsideLock,
        PREEMPTIONS,
        &["a second worker started"],
        registry_join_leave,
    );
}
