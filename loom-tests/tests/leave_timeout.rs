//! Model 11: a bounded leave that times out and whose handle is dropped, while the worker
//! ticks; then a new comm takes the slot.
#![cfg(loom)]

use loom_tests::harness::driver::leave_timeout_then_drop;
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model (as model 4, whose slot handoff it extends).
const PREEMPTIONS: usize = 2;

#[test]
fn a_dropped_timed_out_leave_hands_the_slot_to_the_worker() {
    check(PREEMPTIONS, leave_timeout_then_drop);
}

/// The drop frees the CLOSING slot at once (edge 7, as if the worker were gone): the worker
/// still runs or closes the old comm's task while the new comm owns the slot.
#[test]
fn plant_dropping_a_leaving_handle_without_the_worker_is_caught() {
    assert_loom_catches(
        Plant::SlotDropLeavingFreesClosing,
        PREEMPTIONS,
        &[
            "the new owner's leave reports only its own task",
            "before the old comm's task had ended",
        ],
        leave_timeout_then_drop,
    );
}

/// The worker loaded CLOSING and closed the tasks; the owner's timed-out leave is dropped
/// before the worker's CLOSING → CLOSED edge (CLOSING → ABANDONED), and the worker must free
/// the slot as ABANDONED. The model reaches that interleaving: the code before 85da72f, which
/// asserted the edge, panics in it.
#[test]
fn plant_a_worker_that_assumes_its_closed_edge_is_caught() {
    assert_loom_catches(
        Plant::WorkerClosedAssumed,
        PREEMPTIONS,
        &["the worker's CLOSING => CLOSED edge failed"],
        leave_timeout_then_drop,
    );
}
