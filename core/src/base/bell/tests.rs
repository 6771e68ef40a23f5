use super::*;
use crate::base::sync::{DiagAtomicU32, DiagOrdering};

struct Count(DiagAtomicU32);
impl Bell for Count {
    fn ring(&self) {
        self.0.fetch_add(1, DiagOrdering::Relaxed);
    }
}

#[test]
fn a_slot_rings_the_bell_wired_last_and_nothing_once_unwired() {
    let slot = BellSlot::new();
    slot.ring(); // unwired: nothing
    let a = PlainArc::new(Count(DiagAtomicU32::new(0)));
    let b = PlainArc::new(Count(DiagAtomicU32::new(0)));
    assert!(!slot.is_wired());
    assert!(slot.wire(Some(a.clone())).is_none());
    slot.ring();
    assert!(slot.wire(Some(b.clone())).is_some());
    assert!(slot.is_wired());
    slot.ring();
    slot.ring();
    assert!(slot.wire(None).is_some());
    slot.ring();
    assert_eq!(a.0.load(DiagOrdering::Relaxed), 1);
    assert_eq!(b.0.load(DiagOrdering::Relaxed), 2);
}
