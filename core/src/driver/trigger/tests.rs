use super::*;
use crate::testutil::Words;

#[test]
fn gate_opens_only_when_every_word_is_written() {
    let ws = Words::new(&[7, 7]);
    let (a, b) = (ws.get(0), ws.get(1));
    let t = TriggerWords::new(&[a, b]).unwrap();
    t.arm();
    assert_eq!(a.load(), TRIGGER_ARMED);
    assert!(!t.can_start());
    a.store(1);
    assert!(!t.can_start());
    b.store(1);
    assert!(t.can_start());
    t.consume();
    assert_eq!((a.load(), b.load()), (0, 0));
    b.store(TRIGGER_ARMED);
    let line = alloc::format!("{}", t.describe());
    assert_eq!(
        line,
        alloc::format!("[{:#x}=0x0, {:#x}=0xffffffff]", a.addr(), b.addr())
    );
    assert_eq!(alloc::format!("{}", TriggerWords::none().describe()), "[]");
}

#[test]
fn limits_and_addresses() {
    let ws = Words::new(&[0]);
    let w = ws.get(0);
    assert!(TriggerWords::new(&[w; 5]).is_err());
    assert!(TriggerWords::none().can_start());
    // SAFETY: the address comes from `ws`, which outlives the handle.
    let again = unsafe { HostWord::from_addr(w.addr()) }.unwrap();
    assert_eq!(again, w);
    // SAFETY: 0 and misaligned addresses are rejected before any access.
    unsafe {
        assert!(HostWord::from_addr(0).is_none());
        assert!(HostWord::from_addr(w.addr() + 1).is_none());
    }
    assert_eq!(w.fetch_add(3), 0);
    assert_eq!(w.load(), 3);
}
