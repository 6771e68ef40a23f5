use super::*;
use alloc::rc::Rc;
use core::cell::Cell;

#[test]
fn fifo_full_and_empty_edges() {
    let (mut tx, mut rx) = channel::<u32>(4);
    assert_eq!(rx.pop(), None);
    for i in 0..4 {
        tx.push(i).unwrap();
    }
    assert_eq!(tx.push(99), Err(99));
    assert_eq!(rx.len(), 4);
    assert_eq!(rx.pop(), Some(0));
    tx.push(4).unwrap();
    assert_eq!(tx.push(5), Err(5));
    let got: Vec<u32> = core::iter::from_fn(|| rx.pop()).collect();
    assert_eq!(got, [1, 2, 3, 4]);
    assert!(rx.is_empty());
    assert_eq!(tx.free_slots(), 4);
}

#[test]
fn wraps_many_times() {
    let (mut tx, mut rx) = channel::<usize>(2);
    for i in 0..1000 {
        tx.push(i).unwrap();
        assert_eq!(rx.pop(), Some(i));
    }
}

struct Counted(Rc<Cell<u32>>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

#[test]
fn drop_releases_queued_items_once() {
    let drops = Rc::new(Cell::new(0));
    {
        let (mut tx, mut rx) = channel::<Counted>(4);
        for _ in 0..3 {
            assert!(tx.push(Counted(drops.clone())).is_ok());
        }
        drop(rx.pop());
        assert_eq!(drops.get(), 1);
        assert!(!tx.is_abandoned());
        drop(rx);
        assert!(tx.is_abandoned());
    }
    assert_eq!(drops.get(), 3);
}

#[test]
#[should_panic(expected = "not a power of two")]
fn rejects_non_power_of_two() {
    let _ = channel::<u8>(3);
}
