//! Model 14: an invalidation request — a slot's owner asks for a range to be dropped from its
//! comm while the queue's worker runs; the worker applies it at its next tick and answers; a
//! request whose deadline passed is withdrawn unless the worker took it.
#![cfg(loom)]

use loom_tests::harness::invalidate::{invalidate_vs_worker, invalidate_withdraw_vs_take};
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 2;

#[test]
fn an_invalidation_is_applied_by_the_worker_before_the_call_returns() {
    check(PREEMPTIONS, invalidate_vs_worker);
}

#[test]
fn a_withdrawn_invalidation_is_never_applied() {
    check(PREEMPTIONS, invalidate_withdraw_vs_take);
}

/// `InvalCell::serve` answering before it applies: the owner returns while the transport has
/// not dropped the range yet.
#[test]
fn plant_invalidate_answered_before_applied_is_caught() {
    assert_loom_catches(
        Plant::InvalidateAnsweredBeforeApplied,
        PREEMPTIONS,
        &[
            "the invalidation reached the transport before the call returned",
            "Causality violation",
        ],
        invalidate_vs_worker,
    );
}

/// The withdraw by a load and a store: the worker takes and applies the request in between, and
/// the owner still answers that it was not applied.
#[test]
fn plant_invalidate_withdraw_by_load_store_is_caught() {
    assert_loom_catches(
        Plant::InvalidateWithdrawByLoadStore,
        PREEMPTIONS,
        &[
            "a withdrawn invalidation is never applied",
            "only the driver leaves TAKEN",
            "Causality violation",
        ],
        invalidate_withdraw_vs_take,
    );
}
