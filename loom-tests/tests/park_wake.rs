//! Model 3: the worker's park/wake against a submission, a join and a stop request, its nap
//! against a device's ring (`base::bell`), a device the worker plays (`driver::poller`), and
//! the wake word alone with two notifiers. Every wait is a park without a timeout: a lost wakeup is
//! a deadlock, which loom reports.
#![cfg(loom)]

use loom_tests::harness::driver::{
    wake_word_two_notifiers, worker_naps_until_rung, worker_wakes_for_a_join,
    worker_wakes_for_a_submission, worker_wakes_for_stop,
};
use loom_tests::harness::poller::worker_plays_a_launched_device;
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

/// The real run of `$body` and one planted run per plant, each expected to deadlock.
macro_rules! model {
    ($real:ident, $body:path, $($planted:ident: $plant:ident),+ $(,)?) => {
        #[test]
        fn $real() {
            check(PREEMPTIONS, $body);
        }
        $(
            #[test]
            fn $planted() {
                assert_loom_catches(Plant::$plant, PREEMPTIONS, &["deadlock"], $body);
            }
        )+
    };
}

// ---- a submission ------------------------------------------------------------------------------
model!(
    worker_wakes_for_a_submission_real,
    worker_wakes_for_a_submission,
    worker_wakes_for_a_submission_plant_skip_notify_is_caught: WakeNotifySkipsEmpty,
    worker_wakes_for_a_submission_plant_store_park_is_caught: WakeParkByPlainStore,
);

// ---- a join ------------------------------------------------------------------------------------
model!(
    worker_wakes_for_a_join_real,
    worker_wakes_for_a_join,
    worker_wakes_for_a_join_plant_skip_notify_is_caught: WakeNotifySkipsEmpty,
    worker_wakes_for_a_join_plant_store_park_is_caught: WakeParkByPlainStore,
);

// ---- a stop request ----------------------------------------------------------------------------
model!(
    worker_wakes_for_stop_real,
    worker_wakes_for_stop,
    worker_wakes_for_stop_plant_skip_notify_is_caught: WakeNotifySkipsEmpty,
    worker_wakes_for_stop_plant_store_park_is_caught: WakeParkByPlainStore,
);

// ---- the wake word alone, two notifiers --------------------------------------------------------
model!(
    wake_word_two_notifiers_real,
    wake_word_two_notifiers,
    wake_word_two_notifiers_plant_skip_notify_is_caught: WakeNotifySkipsEmpty,
    wake_word_two_notifiers_plant_store_park_is_caught: WakeParkByPlainStore,
);

// ---- a nap ended by a bell (a device's host write) ---------------------------------------------
model!(
    worker_naps_until_rung_real,
    worker_naps_until_rung,
    worker_naps_until_rung_plant_skip_notify_is_caught: WakeNotifySkipsEmpty,
    worker_naps_until_rung_plant_store_park_is_caught: WakeParkByPlainStore,
);

// ---- a launched device the worker plays (a poller) ---------------------------------------------
model!(
    worker_plays_a_launched_device_real,
    worker_plays_a_launched_device,
    worker_plays_a_launched_device_plant_waiting_ignored_is_caught: PollerWaitingIgnored,
    worker_plays_a_launched_device_plant_skip_notify_is_caught: WakeNotifySkipsEmpty,
);
