use super::*;
use crate::base::sync::{DiagAtomicU32, DiagOrdering};

/// A poller that needs `left` polls after a launch, waiting at each but the last.
struct Countdown {
    left: DiagAtomicU32,
    polls: DiagAtomicU32,
}

impl Poller for Countdown {
    fn poll(&self) -> Polled {
        self.polls.fetch_add(1, DiagOrdering::Relaxed);
        match self.left.load(DiagOrdering::Relaxed) {
            0 => Polled::Idle,
            1 => {
                self.left.store(0, DiagOrdering::Relaxed);
                Polled::Moved
            }
            n => {
                self.left.store(n - 1, DiagOrdering::Relaxed);
                Polled::Waiting
            }
        }
    }
    fn busy(&self) -> bool {
        self.left.load(DiagOrdering::Relaxed) > 0
    }
}

#[test]
fn an_unwired_slot_is_idle_and_a_wired_one_forwards() {
    let slot = PollerSlot::new();
    assert_eq!(slot.poll(), Polled::Idle);
    assert!(!slot.busy());
    let p = PlainArc::new(Countdown {
        left: DiagAtomicU32::new(3),
        polls: DiagAtomicU32::new(0),
    });
    assert!(slot.wire(Some(p.clone())).is_none());
    assert!(slot.busy());
    assert_eq!(slot.poll(), Polled::Waiting);
    assert_eq!(slot.poll(), Polled::Waiting);
    assert_eq!(slot.poll(), Polled::Moved);
    assert!(!slot.busy());
    assert_eq!(slot.poll(), Polled::Idle);
    assert!(slot.wire(None).is_some());
    assert_eq!(slot.poll(), Polled::Idle);
    assert_eq!(p.polls.load(DiagOrdering::Relaxed), 4);
}
