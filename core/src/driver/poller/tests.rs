use super::*;
use crate::base::sync::DiagOrdering;
use crate::testutil::Countdown;

#[test]
fn an_unwired_slot_is_idle_and_a_wired_one_forwards() {
    let slot = PollerSlot::new();
    assert_eq!(slot.poll(), Polled::Idle);
    assert!(!slot.busy());
    let p = PlainArc::new(Countdown::default());
    p.left.store(3, DiagOrdering::Relaxed);
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
