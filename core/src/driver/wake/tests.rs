use super::*;
use crate::base::sync::AtomicBool;
use core::cell::Cell;

/// A parker for single-threaded tests: `park` panics unless a token is present.
#[derive(Default)]
struct TokenPark {
    token: crate::base::sync::PlainArc<AtomicBool>,
}
struct TokenUnpark(crate::base::sync::PlainArc<AtomicBool>);
impl Unpark for TokenUnpark {
    fn unpark(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    fn clone_box(&self) -> Box<dyn Unpark> {
        Box::new(TokenUnpark(self.0.clone()))
    }
}
impl Park for TokenPark {
    fn park(&self) {
        assert!(
            self.token.swap(false, Ordering::SeqCst),
            "would block forever"
        );
    }
    fn unparker(&self) -> Box<dyn Unpark> {
        Box::new(TokenUnpark(self.token.clone()))
    }
    fn park_timeout(&self, _timeout_ns: u64) {
        // A timed park in a single-threaded test: the time passes, the token stays.
    }
}

#[test]
fn notification_before_park_is_not_lost() {
    let c = WaitCell::new();
    let p = TokenPark::default();
    c.notify();
    c.park(&p, || false); // returns at once: NOTIFIED was pending
    assert_eq!(c.state.load(Ordering::SeqCst), EMPTY);
}

#[test]
fn notify_while_parked_unparks_and_leaves_notified() {
    let c = WaitCell::new();
    let p = TokenPark::default();
    // Simulate the waiter's registration + PARKED, then a notifier.
    // SAFETY: single-threaded test: no other access to the cell.
    c.unparker
        .with_mut(|u| unsafe { *u = Some(PlainArc::from(p.unparker())) });
    c.state.store(PARKED, Ordering::SeqCst);
    c.notify();
    assert_eq!(c.state.load(Ordering::SeqCst), NOTIFIED);
    assert!(p.token.load(Ordering::SeqCst));
    c.notify();
    assert_eq!(c.state.load(Ordering::SeqCst), NOTIFIED);
    assert!(c.try_consume());
}

#[test]
fn ready_recheck_skips_the_block() {
    let c = WaitCell::new();
    let p = TokenPark::default();
    c.park(&p, || true);
    assert_eq!(c.state.load(Ordering::SeqCst), EMPTY);
}

#[test]
fn waiter_spins_then_parks() {
    let c = WaitCell::new();
    let p = TokenPark::default();
    let clock = crate::base::time::ManualClock::new(0);
    let n = Cell::new(0u32);
    let w = Waiter {
        park: &p,
        clock: &clock,
        spin_ns: 100,
    };
    // Every poll moves the clock by 1 ns; the spin phase reads the clock every 64 polls, so
    // it ends after 128. Park phase: poll 129, consume the pending notification, poll 130,
    // register + PARKED, and poll 131 in the ready re-check succeeds (no block).
    c.notify();
    let v = w.wait_on(&c, || {
        clock.advance(1);
        n.set(n.get() + 1);
        (n.get() > 130).then_some(5)
    });
    assert_eq!(v, 5);
    assert_eq!(n.get(), 131);
}
