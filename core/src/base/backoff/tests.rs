use super::*;
use core::cell::RefCell;
use std::vec::Vec;

/// Records what it was asked to do.
#[derive(Default)]
struct Log(RefCell<Vec<Pace>>);

impl Pause for Log {
    fn yield_now(&self) {
        self.0.borrow_mut().push(Pace::Yielded);
    }
    fn nap(&self, ns: u64) {
        self.0.borrow_mut().push(Pace::Napped(ns));
    }
}

const P: BackoffPolicy = BackoffPolicy {
    spins: 2,
    yields: 2,
    nap_ns: 100,
    max_nap_ns: 350,
};

#[test]
fn spins_then_yields_then_naps_doubling_up_to_the_cap() {
    let log = Log::default();
    let mut b = Backoff::new(P);
    let paces: Vec<Pace> = (0..8).map(|_| b.pause(&log)).collect();
    assert_eq!(
        paces,
        [
            Pace::Spun,
            Pace::Spun,
            Pace::Yielded,
            Pace::Yielded,
            Pace::Napped(100),
            Pace::Napped(200),
            Pace::Napped(350),
            Pace::Napped(350),
        ]
    );
    // The platform saw the yields and naps, not the spins.
    assert_eq!(log.0.borrow().len(), 6);
    assert!(b.napping());
}

#[test]
fn reset_spins_again_and_a_nap_never_passes_the_bound() {
    let log = Log::default();
    let mut b = Backoff::new(P);
    for _ in 0..6 {
        b.pause(&log);
    }
    b.reset();
    assert!(!b.napping());
    assert_eq!(b.pause(&log), Pace::Spun);
    let mut b = Backoff::new(BackoffPolicy {
        spins: 0,
        yields: 0,
        ..P
    });
    assert_eq!(b.pause_at_most(&log, 30), Pace::Napped(30));
    assert_eq!(
        b.pause_at_most(&log, 0),
        Pace::Napped(1),
        "never a zero nap"
    );
}

#[test]
fn next_nap_doubles_without_pausing() {
    let mut b = Backoff::new(P);
    assert_eq!([b.next_nap(), b.next_nap(), b.next_nap()], [100, 200, 350]);
}
