use core::cell::Cell;

use super::*;

/// A scripted source: answers `arm` with `answer`, counts arms and sleeps, and says it
/// signalled when `signal` is set.
struct Script {
    answer: Armed,
    signal: bool,
    arms: spin::Mutex<Cell<u32>>,
    slept: spin::Mutex<Cell<Option<u64>>>,
}

impl Script {
    fn new(answer: Armed, signal: bool) -> Self {
        Self {
            answer,
            signal,
            arms: spin::Mutex::new(Cell::new(0)),
            slept: spin::Mutex::new(Cell::new(None)),
        }
    }
}

impl IdleWait for Script {
    fn arm(&self) -> Armed {
        let a = self.arms.lock();
        a.set(a.get() + 1);
        self.answer
    }

    fn sleep(&self, timeout_ns: u64) -> bool {
        self.slept.lock().set(Some(timeout_ns));
        self.signal
    }
}

#[test]
fn only_an_armed_source_is_slept_on() {
    for (answer, signal, want, slept) in [
        (Armed::Ready, true, Idled::Ready, None),
        (Armed::Unavailable, true, Idled::Unavailable, None),
        (Armed::Armed, true, Idled::Slept(true), Some(500)),
        (Armed::Armed, false, Idled::Slept(false), Some(500)),
    ] {
        let s = Script::new(answer, signal);
        assert_eq!(block_idle(&s, 500, || true), want, "{answer:?}");
        assert_eq!(s.arms.lock().get(), 1, "armed once first ({answer:?})");
        assert_eq!(s.slept.lock().get(), slept, "{answer:?}");
    }
}

#[test]
fn an_unwired_slot_is_unavailable_and_a_wired_one_forwards() {
    let slot = IdleSlot::new();
    assert!(!slot.is_wired());
    assert_eq!(slot.block(1_000), Idled::Unavailable);
    let s = PlainArc::new(Script::new(Armed::Armed, true));
    assert!(slot.wire(Some(s.clone())).is_none());
    assert!(slot.is_wired());
    assert_eq!(slot.block(1_000), Idled::Slept(true));
    assert_eq!(s.slept.lock().get(), Some(1_000));
    assert!(slot.wire(None).is_some());
    assert_eq!(slot.block(1_000), Idled::Unavailable);
    assert_eq!(s.arms.lock().get(), 1);
}

#[test]
fn an_announce_that_declines_cancels_the_sleep() {
    let s = Script::new(Armed::Armed, true);
    assert_eq!(block_idle(&s, 500, || false), Idled::Ready);
    assert_eq!(s.slept.lock().get(), None, "no sleep");
}

/// A kick while the driver is awake is kept: the next block does not sleep (and clears it);
/// the one after sleeps again.
#[test]
fn a_kick_before_the_sleep_cancels_it_once() {
    let slot = IdleSlot::new();
    let s = PlainArc::new(Script::new(Armed::Armed, false));
    slot.wire(Some(s.clone()));
    slot.kick();
    assert_eq!(slot.block(1_000), Idled::Ready, "the kick came first");
    assert_eq!(s.slept.lock().get(), None);
    assert_eq!(slot.block(1_000), Idled::Slept(false));
    assert_eq!(s.slept.lock().get(), Some(1_000));
}
