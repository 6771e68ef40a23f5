use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use proxy_core::base::time::MonotonicClock;
use proxy_core::driver::idle::Idled;
use proxy_core::driver::queue::QueueConfig;

use super::*;

#[test]
fn the_variable_takes_block_or_yield() {
    assert_eq!(parse_idle("block"), Ok(true));
    assert_eq!(parse_idle(" BLOCK "), Ok(true));
    assert_eq!(parse_idle("yield"), Ok(false));
    assert_eq!(parse_idle(""), Ok(false));
    let e = parse_idle("sleep").unwrap_err();
    assert!(e.contains("NEURON_RT_PROXY_IDLE=\"sleep\""), "{e}");
}

/// What the fake progress half's entry points were called with (one test uses them).
static ARMS: AtomicU32 = AtomicU32::new(0);
static SLEEPS: AtomicU32 = AtomicU32::new(0);
static KICKS: AtomicU32 = AtomicU32::new(0);

unsafe extern "C" fn fake_arm(_: *mut NccomComm, armed: *mut u32) -> NRT_STATUS {
    ARMS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: `CommIdle::arm` passes a live local.
    unsafe { *armed = NCCOM_IDLE_ARMED };
    NRT_SUCCESS
}

unsafe extern "C" fn fake_sleep(_: *mut NccomComm, _: u64, woken: *mut u32) -> NRT_STATUS {
    SLEEPS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: `CommIdle::sleep` passes a live local.
    unsafe { *woken = 1 };
    NRT_SUCCESS
}

unsafe extern "C" fn fake_kick(_: *mut NccomComm) -> NRT_STATUS {
    KICKS.fetch_add(1, Ordering::Relaxed);
    NRT_SUCCESS
}

fn fake(barrier_waiting: Option<Arc<AtomicBool>>) -> Arc<GatedIdle> {
    Arc::new(Gated {
        wait: CommIdle {
            nccom: std::ptr::null_mut(),
            arm: fake_arm,
            sleep: fake_sleep,
            kick: fake_kick,
        },
        closed: barrier_waiting,
    })
}

/// A queue's wait is wired while one of its comms has a descriptor, sleeps only while that
/// comm is the queue's only one and its barrier between processes does not wait, and is
/// unwired with the last such comm.
#[test]
fn a_queue_blocks_only_while_it_serves_one_comm_with_a_descriptor() {
    let q = ProxyQueue::new_caller(QueueConfig::default(), Box::new(MonotonicClock)).unwrap();
    joined(&q, 1, None);
    assert!(!q.idle_wait().is_wired(), "no comm with a descriptor");
    let waiting = Arc::new(AtomicBool::new(false));
    joined(&q, 2, Some(fake(Some(waiting.clone()))));
    assert!(q.idle_wait().is_wired());
    assert_eq!(
        q.idle_wait().block(1_000),
        Idled::Unavailable,
        "two comms on the queue"
    );
    assert_eq!(ARMS.load(Ordering::Relaxed), 0, "not even armed");
    left(&q, 1);
    assert_eq!(
        q.idle_wait().block(1_000),
        Idled::Slept(true),
        "the sole comm's"
    );
    assert_eq!(
        (ARMS.load(Ordering::Relaxed), SLEEPS.load(Ordering::Relaxed)),
        (1, 1)
    );
    assert_eq!(q.idle_wait().sleeps(), 1);
    waiting.store(true, Ordering::Relaxed);
    assert_eq!(
        q.idle_wait().block(1_000),
        Idled::Unavailable,
        "the barrier between processes waits"
    );
    assert_eq!(ARMS.load(Ordering::Relaxed), 1);
    waiting.store(false, Ordering::Relaxed);
    // A kick reaches the comm only while the driver sleeps (`IdleSlot::kick`); the queue's
    // wait forwards it to every comm with a descriptor.
    QueueIdle::kick(
        &queues()
            .iter()
            .find(|(k, _)| *k == Arc::as_ptr(&q).addr())
            .unwrap()
            .1,
    );
    assert_eq!(KICKS.load(Ordering::Relaxed), 1);
    left(&q, 2);
    assert!(!q.idle_wait().is_wired(), "unwired with the last comm");
    assert!(queues().iter().all(|(k, _)| *k != Arc::as_ptr(&q).addr()));
}
