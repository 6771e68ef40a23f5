//! Model 8: the registry — two comms of one group joining and leaving while its worker starts
//! and stops.
#![cfg(loom)]

use loom_tests::harness::registry::{registry_join_leave, ModelSpawner};
use loom_tests::twins::registry::{bug, Registry as TwinRegistry};
use loom_tests::{assert_loom_catches, check};
use proxy_core::driver::registry::Registry;

/// Preemption bound of this model: 1. Each comm's leave runs the slot's closing handshake
/// against a live worker, and the worker may start twice; at 2 the model takes many minutes.
/// One preemption is what both bugs below need (a switch between a leave's decision and its
/// effect), and the twins show the bound finds them.
const PREEMPTIONS: usize = 1;

#[test]
fn one_worker_while_the_group_has_members_none_after() {
    check(PREEMPTIONS, registry_join_leave::<Registry<ModelSpawner>>);
}

#[test]
fn twin_copy_passes() {
    check(
        PREEMPTIONS,
        registry_join_leave::<TwinRegistry<ModelSpawner, { bug::NONE }>>,
    );
}

#[test]
fn twin_with_a_split_refcount_decrement_is_caught() {
    assert_loom_catches(
        "a refcount decrement split across two critical sections",
        PREEMPTIONS,
        &["the group is gone", "no worker runs"],
        registry_join_leave::<TwinRegistry<ModelSpawner, { bug::SPLIT_DECREMENT }>>,
    );
}

#[test]
fn twin_stopping_the_last_worker_outside_the_lock_is_caught() {
    assert_loom_catches(
        "the last worker stopped and joined outside the lock",
        PREEMPTIONS,
        &["a second worker started"],
        registry_join_leave::<TwinRegistry<ModelSpawner, { bug::STOP_OUTSIDE_LOCK }>>,
    );
}
