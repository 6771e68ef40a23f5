//! A planned all-reduce on two ranks through the real engine (comms over the in-memory
//! transport, network and barrier tasks on a proxy queue), with the device threaded and
//! polled: both complete with the right data.

mod common;

use common::{assert_completed, run, Mode, DEVICE_TIMEOUT};

#[test]
fn threaded_devices_complete_a_planned_all_reduce() {
    assert_completed(&run(Mode::Threaded, DEVICE_TIMEOUT * 100));
}

/// One thread plays producer, proxy (it ticks the queue) and both devices.
#[test]
fn polled_devices_complete_a_planned_all_reduce_on_the_ticking_thread() {
    assert_completed(&run(Mode::Polled, DEVICE_TIMEOUT * 100));
}
