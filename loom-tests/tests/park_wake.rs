//! Model 3: the worker's park/wake against a submission, a join and a stop request, and the
//! wake word alone with two notifiers. Every wait is a park without a timeout: a lost wakeup is
//! a deadlock, which loom reports.
#![cfg(loom)]

use loom_tests::harness::driver::{
    wake_word_two_notifiers, worker_wakes_for_a_join, worker_wakes_for_a_submission,
    worker_wakes_for_stop, RealDriver,
};
use loom_tests::twins::queue::{bug, TwinDriver, WaitCell};
use loom_tests::{assert_loom_catches, check};
use proxy_core::driver::task::TaskCore;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

type Copy = TwinDriver<{ bug::NONE }>;
type SkipNotify = TwinDriver<{ bug::NOTIFY_SKIPS_WHEN_EMPTY }>;
type StorePark = TwinDriver<{ bug::PARK_BY_PLAIN_STORE }>;

// ---- a submission ------------------------------------------------------------------------------

#[test]
fn worker_wakes_for_a_submission_real() {
    check(
        PREEMPTIONS,
        worker_wakes_for_a_submission::<RealDriver, TaskCore>,
    );
}

#[test]
fn worker_wakes_for_a_submission_twin_copy() {
    check(PREEMPTIONS, worker_wakes_for_a_submission::<Copy, TaskCore>);
}

#[test]
fn worker_wakes_for_a_submission_twin_skip_notify_is_caught() {
    assert_loom_catches(
        "a notify that skips an EMPTY word (submission)",
        PREEMPTIONS,
        &["deadlock"],
        worker_wakes_for_a_submission::<SkipNotify, TaskCore>,
    );
}

#[test]
fn worker_wakes_for_a_submission_twin_store_park_is_caught() {
    assert_loom_catches(
        "a park by plain store (submission)",
        PREEMPTIONS,
        &["deadlock"],
        worker_wakes_for_a_submission::<StorePark, TaskCore>,
    );
}

// ---- a join ------------------------------------------------------------------------------------

#[test]
fn worker_wakes_for_a_join_real() {
    check(PREEMPTIONS, worker_wakes_for_a_join::<RealDriver>);
}

#[test]
fn worker_wakes_for_a_join_twin_copy() {
    check(PREEMPTIONS, worker_wakes_for_a_join::<Copy>);
}

#[test]
fn worker_wakes_for_a_join_twin_skip_notify_is_caught() {
    assert_loom_catches(
        "a notify that skips an EMPTY word (join)",
        PREEMPTIONS,
        &["deadlock"],
        worker_wakes_for_a_join::<SkipNotify>,
    );
}

#[test]
fn worker_wakes_for_a_join_twin_store_park_is_caught() {
    assert_loom_catches(
        "a park by plain store (join)",
        PREEMPTIONS,
        &["deadlock"],
        worker_wakes_for_a_join::<StorePark>,
    );
}

// ---- a stop request ----------------------------------------------------------------------------

#[test]
fn worker_wakes_for_stop_real() {
    check(PREEMPTIONS, worker_wakes_for_stop::<RealDriver>);
}

#[test]
fn worker_wakes_for_stop_twin_copy() {
    check(PREEMPTIONS, worker_wakes_for_stop::<Copy>);
}

#[test]
fn worker_wakes_for_stop_twin_skip_notify_is_caught() {
    assert_loom_catches(
        "a notify that skips an EMPTY word (stop)",
        PREEMPTIONS,
        &["deadlock"],
        worker_wakes_for_stop::<SkipNotify>,
    );
}

#[test]
fn worker_wakes_for_stop_twin_store_park_is_caught() {
    assert_loom_catches(
        "a park by plain store (stop)",
        PREEMPTIONS,
        &["deadlock"],
        worker_wakes_for_stop::<StorePark>,
    );
}

// ---- the wake word alone, two notifiers --------------------------------------------------------

#[test]
fn wake_word_two_notifiers_real() {
    check(
        PREEMPTIONS,
        wake_word_two_notifiers::<proxy_core::driver::wake::WaitCell>,
    );
}

#[test]
fn wake_word_two_notifiers_twin_copy() {
    check(
        PREEMPTIONS,
        wake_word_two_notifiers::<WaitCell<{ bug::NONE }>>,
    );
}

#[test]
fn wake_word_two_notifiers_twin_skip_notify_is_caught() {
    assert_loom_catches(
        "a notify that skips an EMPTY word (wake word)",
        PREEMPTIONS,
        &["deadlock"],
        wake_word_two_notifiers::<WaitCell<{ bug::NOTIFY_SKIPS_WHEN_EMPTY }>>,
    );
}

#[test]
fn wake_word_two_notifiers_twin_store_park_is_caught() {
    assert_loom_catches(
        "a park by plain store (wake word)",
        PREEMPTIONS,
        &["deadlock"],
        wake_word_two_notifiers::<WaitCell<{ bug::PARK_BY_PLAIN_STORE }>>,
    );
}
