//! A played device is polled by a real proxy queue's worker thread: launched while the worker
//! is parked, it runs (the launch rang the driver) and, with no proxy answering, times out on
//! its trigger; with nothing polling it, the wait gives it up.

use super::*;
use crate::tests::setup;
use crate::WaitingFor;
use proxy_core::base::bell::Bell;
use proxy_core::base::time::MonotonicClock;
use proxy_core::driver::queue::{ProxyQueue, QueueConfig, Tick};
use proxy_core::driver::wake::ThreadPark;

fn quick() -> WaitPolicy {
    WaitPolicy {
        spins: 0,
        yields: 10,
        nap: Duration::from_micros(100),
        timeout: Duration::from_secs(60),
    }
}

struct Wake(Arc<ProxyQueue>);
impl Bell for Wake {
    fn ring(&self) {
        self.0.wake_driver();
    }
}

#[test]
fn the_worker_plays_a_launched_device_to_its_timeout() {
    let s = setup();
    let (queue, mut worker) = ProxyQueue::new(
        QueueConfig {
            slots: 1,
            submit_capacity: 4,
            status_capacity: 4,
        },
        Box::new(MonotonicClock),
    )
    .unwrap();
    let slot = ProxyQueue::join(&queue).unwrap();
    let dev = Arc::new(PlayedDevice::new(0, None, Duration::from_millis(50)));
    queue.slot_poller(0).unwrap().wire(Some(dev.clone()));
    dev.driver_bell().wire(Some(Arc::new(Wake(queue.clone()))));
    let ticks = thread::spawn(move || {
        let mut parks = 0u32;
        let start = Instant::now();
        while !worker.stop_requested() && start.elapsed() < Duration::from_secs(20) {
            match worker.tick() {
                Tick::Park => {
                    parks += 1;
                    worker.park(&ThreadPark);
                }
                Tick::NoProgress => thread::yield_now(),
                Tick::Continue => {}
            }
        }
        (worker, parks)
    });
    // Give the worker time to park with nothing to do.
    thread::sleep(Duration::from_millis(20));
    // SAFETY: `s` outlives the launch (waited for below).
    unsafe { dev.launch(s.job.clone()) };
    let r = dev.wait(quick());
    let want = s.job.net_triggers[0];
    assert!(
        matches!(&r, Err(DeviceError::Timeout { rank: 0, waiting_for: WaitingFor::NetTrigger { addr, .. } }) if *addr == want),
        "{r:?}"
    );
    assert_eq!(
        s.words[0].load(Ordering::Acquire),
        1,
        "the worker wrote the trigger"
    );
    assert!(dev.failed());
    assert!(dev.take_job().is_none(), "a timed-out launch was abandoned");
    queue.request_stop();
    let (worker, parks) = ticks.join().unwrap();
    assert!(parks >= 1, "the worker parked before the launch");
    drop(worker);
    drop(slot);
}

#[test]
fn a_device_nothing_polls_is_given_up_after_twice_its_timeout() {
    let s = setup();
    let dev = PlayedDevice::new(3, None, Duration::from_millis(20));
    // SAFETY: `s` outlives the launch (waited for below).
    unsafe { dev.launch(s.job.clone()) };
    assert!(!dev.finished());
    let start = Instant::now();
    assert_eq!(dev.wait(quick()), Err(DeviceError::Unpolled { rank: 3 }));
    assert!(start.elapsed() >= Duration::from_millis(40));
    assert!(dev.finished());
    assert_eq!(dev.poll(), Polled::Idle);
}

#[test]
fn abort_ends_a_launch_without_a_poll() {
    let s = setup();
    let dev = PlayedDevice::new(1, None, Duration::from_secs(60));
    // SAFETY: `s` outlives the launch (waited for below).
    unsafe { dev.launch(s.job.clone()) };
    assert!(dev.busy());
    dev.abort();
    assert!(!dev.busy());
    assert_eq!(dev.wait(quick()), Err(DeviceError::Aborted { rank: 1 }));
}
