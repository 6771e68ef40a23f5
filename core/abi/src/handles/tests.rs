extern crate std;
use super::*;
use std::boxed::Box;
use std::vec::Vec;

#[test]
fn insert_lookup_remove_and_stale_handles() {
    let t: Box<HandleTable<u32>> = Box::new(HandleTable::new(0xC0CC));
    let h = t.insert(7).unwrap();
    assert_eq!(t.with(h, |v| *v), Ok(7));
    t.with(h, |v| *v += 1).unwrap();
    assert_eq!(t.remove(h), Ok(8));
    assert_eq!(t.with(h, |v| *v), Err(LookupError::Stale));
    assert_eq!(t.remove(h), Err(LookupError::Stale), "double destroy");
    // The slot is reused with a new generation: the old handle stays stale.
    let mut again = Vec::new();
    for i in 0..CAPACITY as u32 {
        again.push(t.insert(i).unwrap());
    }
    assert!(!again.contains(&h));
    assert_eq!(t.with(h, |v| *v), Err(LookupError::Stale));
    assert_eq!(t.insert(99), Err(99), "full");
    assert_eq!(t.live(), CAPACITY);
    for h in again {
        t.remove(h).unwrap();
    }
    assert_eq!(t.live(), 0);
}

#[test]
fn foreign_pointers_are_not_handles() {
    let t: Box<HandleTable<u32>> = Box::new(HandleTable::new(0xC0CC));
    let other: Box<HandleTable<u32>> = Box::new(HandleTable::new(0x6A0B));
    let h = t.insert(1).unwrap();
    let local = 5u64;
    for p in [
        0usize,
        1,
        0x1234,
        &local as *const u64 as usize,
        h & !(0xFFFF << TAG_SHIFT),
        usize::MAX,
    ] {
        assert_eq!(t.with(p, |_| ()), Err(LookupError::NotAHandle), "{p:#x}");
    }
    assert_eq!(other.with(h, |_| ()), Err(LookupError::NotAHandle));
    assert_eq!(other.remove(h), Err(LookupError::NotAHandle));
    // Right magic, generation never handed out for that slot.
    let forged = h + (1 << INDEX_BITS);
    assert_eq!(t.with(forged, |_| ()), Err(LookupError::Stale));
}

#[test]
fn a_busy_handle_refuses_nested_and_destroy() {
    let t: Box<HandleTable<u32>> = Box::new(HandleTable::new(0xC0CC));
    let h = t.insert(1).unwrap();
    t.with(h, |_| {
        assert_eq!(t.with(h, |_| ()), Err(LookupError::Busy));
        assert_eq!(t.remove(h), Err(LookupError::Busy));
    })
    .unwrap();
    // Released after a panic inside the call, too.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        t.with(h, |_| panic!("boom")).unwrap();
    }));
    assert!(r.is_err());
    assert_eq!(t.remove(h), Ok(1));
}

#[test]
fn concurrent_inserts_get_distinct_slots() {
    let t: &'static HandleTable<u32> = Box::leak(Box::new(HandleTable::new(0xC0CC)));
    let hs: Vec<Vec<usize>> = std::thread::scope(|s| {
        let js: Vec<_> = (0..4)
            .map(|k| s.spawn(move || (0..200).map(|i| t.insert(k * 1000 + i).unwrap()).collect()))
            .collect();
        js.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let mut all: Vec<usize> = hs.concat();
    for (k, v) in hs.iter().enumerate() {
        for (i, &h) in v.iter().enumerate() {
            assert_eq!(t.with(h, |x| *x), Ok(k as u32 * 1000 + i as u32));
        }
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 800);
}

#[test]
fn a_small_table_refuses_indices_beyond_its_slots() {
    let small: Box<HandleTable<u32, 2>> = Box::new(HandleTable::new(0xC0CC));
    let a = small.insert(1).unwrap();
    let b = small.insert(2).unwrap();
    assert_eq!(small.insert(3), Err(3), "two slots");
    let mut idx = [a & INDEX_MASK, b & INDEX_MASK];
    idx.sort_unstable();
    assert_eq!(idx, [0, 1]);
    // The same tag and generation at slot 2 or 4095: no such slot in this table.
    for index in [2, INDEX_MASK] {
        let beyond = (a & !INDEX_MASK) | index;
        assert_eq!(small.with(beyond, |v| *v), Err(LookupError::NotAHandle));
        assert_eq!(small.remove(beyond), Err(LookupError::NotAHandle));
    }
    assert_eq!(small.remove(a), Ok(1));
    assert_eq!(small.insert(4).map(|h| h & INDEX_MASK), Ok(a & INDEX_MASK));
}

fn test_instance() -> InstanceId {
    InstanceId {
        id: 0x5A5,
        first_generation: 1 << 30,
    }
}

#[test]
fn per_copy_tables_tell_kinds_and_instances_apart() {
    let t: Box<HandleTable<u32>> = Box::new(HandleTable::with_instance(3, test_instance));
    let other: Box<HandleTable<u32>> = Box::new(HandleTable::with_instance(4, test_instance));
    let h = t.insert(7).unwrap();
    assert_eq!(
        h >> TAG_SHIFT,
        0x5A5 << 4 | 3,
        "instance id and kind in the top bits"
    );
    assert_eq!(
        (h >> INDEX_BITS) as u64 & GEN_MASK,
        (1 << 30) + 1,
        "the first generation"
    );
    assert_eq!(t.with(h, |v| *v), Ok(7));
    assert_eq!(
        other.with(h, |v| *v),
        Err(LookupError::NotAHandle),
        "other kind"
    );
    // The same slot and generation with another instance id: another loaded copy's handle.
    let foreign = h ^ (1 << (TAG_SHIFT + 4));
    assert_eq!(t.with(foreign, |v| *v), Err(LookupError::NotAHandle));
    let fixed: Box<HandleTable<u32>> = Box::new(HandleTable::new(0xC0CC));
    assert_eq!(
        fixed.with(h, |v| *v),
        Err(LookupError::NotAHandle),
        "fixed tag"
    );
    assert_eq!(t.remove(h), Ok(7));
    assert_eq!(t.with(h, |v| *v), Err(LookupError::Stale));
    assert_eq!(t.live(), 0);
}
