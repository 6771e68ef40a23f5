//! Model 13 — the C libraries' generation-checked handle table
//! (`proxy_abi::handles::HandleTable`): every C call looks its handle up there, from
//! whichever thread the runtime calls on, so the slot word (FREE → RESERVED → LIVE ⇄ BUSY →
//! RESERVED → FREE, edges 1–6 of the module diagram) is the handoff of each object between the
//! threads that create it, use it and destroy it. The bodies use one- and two-slot tables, so
//! every insert races for the same slot.

use proxy_abi::handles::{HandleTable, LookupError};
use proxy_core::base::sync::Arc;

use super::thread;

/// The tag of the models' tables (any fixed magic).
const MAGIC: u16 = 0xC0CC;

/// Two threads create an object each in a one-slot table: exactly one gets the slot (and its
/// handle finds its own object), the other gets its object back ("table full").
pub fn insert_race() {
    let t = Arc::new(HandleTable::<u32, 1>::new(MAGIC));
    let spawn = |v: u32| {
        let t = t.clone();
        thread::spawn(move || t.insert(v))
    };
    let (a, b) = (spawn(1), spawn(2));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    match (a, b) {
        (Ok(h), Err(2)) => assert_eq!(t.with(h, |v| *v), Ok(1), "the winner's own object"),
        (Err(1), Ok(h)) => assert_eq!(t.with(h, |v| *v), Ok(2), "the winner's own object"),
        (a, b) => panic!("two inserts got one slot: {a:?} {b:?}"),
    }
    assert_eq!(t.live(), 1);
}

/// Two threads call into one object at once (each adds 1 to it): each call either runs alone on
/// the object or is refused `Busy`; the object ends with exactly one increment per call that
/// ran, and each call sees the object as the inserter or the previous call left it.
pub fn concurrent_calls() {
    let t = Arc::new(HandleTable::<u32, 2>::new(MAGIC));
    let h = t.insert(10).unwrap();
    let call = || {
        let t = t.clone();
        thread::spawn(move || {
            match t.with(h, |v| {
                *v += 1;
                *v
            }) {
                Ok(seen) => {
                    assert!(seen == 11 || seen == 12, "a call saw {seen}");
                    1
                }
                Err(e) => {
                    assert_eq!(e, LookupError::Busy, "the other call holds the object");
                    0
                }
            }
        })
    };
    let (a, b) = (call(), call());
    let ran = a.join().unwrap() + b.join().unwrap();
    assert!(ran >= 1, "at least one call runs");
    assert_eq!(t.remove(h), Ok(10 + ran), "one increment per call that ran");
}

/// One thread destroys the only object of a one-slot table while another creates one: the
/// destroy returns the object it destroyed, the create either reuses the slot under a new
/// generation (the old handle stays stale) or finds the table full.
pub fn remove_vs_insert() {
    let t = Arc::new(HandleTable::<u32, 1>::new(MAGIC));
    let old = t.insert(1).unwrap();
    let remover = {
        let t = t.clone();
        thread::spawn(move || t.remove(old))
    };
    let inserter = {
        let t = t.clone();
        thread::spawn(move || t.insert(2))
    };
    assert_eq!(
        remover.join().unwrap(),
        Ok(1),
        "the remove returns the object it removed"
    );
    match inserter.join().unwrap() {
        Ok(new) => {
            assert_ne!(new, old, "a reused slot has a new handle");
            assert_eq!(t.with(new, |v| *v), Ok(2));
            assert_eq!(t.with(old, |v| *v), Err(LookupError::Stale));
            assert_eq!(t.live(), 1);
        }
        Err(v) => {
            assert_eq!(v, 2, "a full table gives the object back");
            assert_eq!(t.live(), 0);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
