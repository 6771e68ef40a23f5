use super::*;

/// A fake provider: records every registration's `(key, start, end)` and every close.
#[derive(Default)]
struct Fake {
    /// `(requested key, start, end)` of every registration made, in order.
    made: Vec<(u64, u64, u64)>,
    /// Keys of the closed registrations, in order.
    closed: Vec<u64>,
    /// Refuse the next registration.
    refuse: bool,
}

impl Registrar for Fake {
    fn provider(&self) -> &str {
        "fake"
    }
    fn register(&mut self, start: u64, len: u64, key: u64) -> Result<Registration, String> {
        if std::mem::take(&mut self.refuse) {
            return Err("fi_mr_reg: refused by the fake".into());
        }
        self.made.push((key, start, start + len));
        Ok(Registration {
            mr: ptr::without_provenance_mut(key as usize),
            desc: ptr::without_provenance_mut(0x1000 + key as usize),
            key,
        })
    }
    fn close(&mut self, r: &Registration) -> Result<(), String> {
        assert!(
            !self.closed.contains(&r.key),
            "registration {:#x} closed twice",
            r.key
        );
        self.closed.push(r.key);
        Ok(())
    }
}

impl Fake {
    /// Requested key of the last registration covering `addr`.
    fn key_of(&self, addr: u64) -> u64 {
        self.made
            .iter()
            .rev()
            .find(|(_, s, e)| *s <= addr && addr < *e)
            .map(|m| m.0)
            .expect("a registration covers the address")
    }
}

fn cache(max_entries: usize, max_bytes: u64) -> MrCache {
    MrCache::new(MrCacheLimits {
        max_entries,
        max_bytes,
    })
}

const A: u64 = 0x10_0000;
const B: u64 = 0x20_0000;
const C: u64 = 0x30_0000;

#[test]
fn page_range_widens_to_whole_pages() {
    assert_eq!(page_range(0x1001, 1), Some((0x1000, 0x2000)));
    assert_eq!(page_range(0x1000, 0x1000), Some((0x1000, 0x2000)));
    assert_eq!(page_range(0x1fff, 2), Some((0x1000, 0x3000)));
    assert_eq!(page_range(u64::MAX - 1, 1), None);
}

#[test]
fn hits_reuse_the_region_and_the_descriptor() {
    let (mut f, mut c) = (Fake::default(), cache(4, 0));
    let (r1, d1) = c.acquire(&mut f, A + 8, 100).unwrap();
    let (r2, d2) = c.acquire(&mut f, A + 200, 3000).unwrap();
    assert_eq!((r1, d1), (r2, d2), "one page-widened region covers both");
    assert_eq!(f.made, vec![(1, A, A + 4096)]);
    // A range past the page needs a new one.
    let (r3, _) = c.acquire(&mut f, A + 4000, 200).unwrap();
    assert_ne!(r3, r1);
    assert_eq!(f.made[1], (2, A, A + 8192));
    assert_eq!(c.len(), 2);
}

#[test]
fn invalidate_then_reuse_registers_afresh_and_closes_the_stale_one_once() {
    let (mut f, mut c) = (Fake::default(), cache(4, 0));
    let (r, _) = c.acquire(&mut f, A, 4096).unwrap();
    c.release(&mut f, r);
    assert_eq!(
        c.invalidate(&mut f, A, 4096).unwrap(),
        Invalidated {
            closed: 1,
            deferred: 0
        }
    );
    assert_eq!(
        f.closed,
        vec![1],
        "the stale registration is closed once, now"
    );
    // The buffer is freed; a new, longer one lands at the same address.
    let (r2, d2) = c.acquire(&mut f, A, 3 * 4096).unwrap();
    assert_ne!(r2, r);
    assert_eq!(f.made, vec![(1, A, A + 4096), (2, A, A + 3 * 4096)]);
    assert_eq!(
        d2,
        ptr::without_provenance_mut(0x1002),
        "the new descriptor"
    );
    c.release(&mut f, r2);
    // A second invalidate of the old range closes the new region, not the old one again.
    assert_eq!(c.invalidate(&mut f, A + 4096, 1).unwrap().closed, 1);
    assert_eq!(f.closed, vec![1, 2]);
    assert_eq!(
        c.invalidate(&mut f, A, 4096).unwrap(),
        Invalidated::default()
    );
    c.close_all(&mut f).unwrap();
    assert_eq!(f.closed, vec![1, 2], "close_all closes nothing twice");
    assert_eq!(c.stats().registered, c.stats().closed);
}

#[test]
fn invalidate_of_a_region_in_use_defers_its_close_and_never_hands_it_out() {
    let (mut f, mut c) = (Fake::default(), cache(4, 0));
    let (old, _) = c.acquire(&mut f, A, 4096).unwrap(); // a posted request
    assert_eq!(
        c.invalidate(&mut f, A, 4096).unwrap(),
        Invalidated {
            closed: 0,
            deferred: 1
        }
    );
    assert!(f.closed.is_empty(), "not closed under its posted request");
    // A post at the same address gets a fresh registration.
    let (new, _) = c.acquire(&mut f, A, 4096).unwrap();
    assert_ne!(new, old);
    assert_eq!(f.key_of(A), 2);
    assert_eq!(c.len(), 2);
    // The old request completes: its region closes, once; the new one stays.
    c.release(&mut f, old);
    assert_eq!(f.closed, vec![1]);
    c.release(&mut f, old); // a stray release of a closed region is ignored
    assert_eq!(f.closed, vec![1]);
    let (again, _) = c.acquire(&mut f, A, 64).unwrap();
    assert_eq!(again, new, "the fresh region is cached");
    c.release(&mut f, again);
    c.release(&mut f, new);
    c.close_all(&mut f).unwrap();
    assert_eq!(f.closed, vec![1, 2]);
    let s = c.stats();
    assert_eq!((s.invalidated, s.deferred, s.evicted), (1, 1, 0));
}

#[test]
fn eviction_takes_the_least_recently_used_region() {
    let (mut f, mut c) = (Fake::default(), cache(2, 0));
    for addr in [A, B] {
        let (r, _) = c.acquire(&mut f, addr, 64).unwrap();
        c.release(&mut f, r);
    }
    // Use A again: B is now the least recently used.
    let (ra, _) = c.acquire(&mut f, A, 64).unwrap();
    c.release(&mut f, ra);
    let (rc, _) = c.acquire(&mut f, C, 64).unwrap();
    c.release(&mut f, rc);
    assert_eq!(f.closed, vec![2], "B (key 2) evicted, A kept");
    assert_eq!(c.stats().evicted, 1);
    let (ra2, _) = c.acquire(&mut f, A, 64).unwrap();
    assert_eq!(ra2, ra, "A still cached");
    c.release(&mut f, ra2);
    // B comes back as a new registration and evicts C (older than A now).
    let (rb, _) = c.acquire(&mut f, B, 64).unwrap();
    c.release(&mut f, rb);
    assert_eq!(f.closed, vec![2, 3]);
    assert_eq!(f.key_of(B), 4);
    assert_eq!(c.len(), 2);
}

/// Reusing the most recently used region leaves the LRU as it is (no tree update), and the
/// order stays right for the next eviction.
#[test]
fn reusing_the_most_recent_region_keeps_the_lru_order() {
    let (mut f, mut c) = (Fake::default(), cache(2, 0));
    for addr in [A, B, B, B] {
        let (r, _) = c.acquire(&mut f, addr, 64).unwrap();
        c.release(&mut f, r);
    }
    // B used three times in a row, A once before it: A is the least recently used.
    let (rc, _) = c.acquire(&mut f, C, 64).unwrap();
    c.release(&mut f, rc);
    assert_eq!(f.closed, vec![1], "A (key 1) evicted, B kept");
    // B again (not the most recent after C: a full update), then A back evicts C.
    for addr in [B, A] {
        let (r, _) = c.acquire(&mut f, addr, 64).unwrap();
        c.release(&mut f, r);
    }
    assert_eq!(
        f.closed,
        vec![1, 3],
        "C (key 3) evicted: B was used after it"
    );
    assert_eq!(c.stats().evicted, 2);
}

#[test]
fn a_pinned_region_is_never_evicted_and_a_full_cache_registers_uncached() {
    let (mut f, mut c) = (Fake::default(), cache(1, 0));
    let (ra, _) = c.acquire(&mut f, A, 64).unwrap(); // in flight: pinned
    let (rb, _) = c.acquire(&mut f, B, 64).unwrap();
    assert!(f.closed.is_empty(), "A is pinned: not evicted");
    assert_eq!(c.stats().uncached, 1);
    assert_eq!(c.len(), 2);
    // B is uncached: a second post of B registers again.
    let (rb2, _) = c.acquire(&mut f, B, 64).unwrap();
    assert_ne!(rb2, rb);
    assert_eq!(f.made.len(), 3);
    // Each uncached region closes when its request completes.
    c.release(&mut f, rb);
    c.release(&mut f, rb2);
    assert_eq!(f.closed, vec![2, 3]);
    // An explicit registration pins as well.
    c.release(&mut f, ra);
    let h = c.register(&mut f, A, 64).unwrap();
    let (rc, _) = c.acquire(&mut f, C, 64).unwrap();
    c.release(&mut f, rc);
    assert_eq!(f.closed, vec![2, 3, 4], "C uncached, A kept");
    c.deregister(&mut f, h).unwrap();
    // Unpinned now: the next new region evicts A.
    let (rc, _) = c.acquire(&mut f, C, 64).unwrap();
    assert_eq!(f.closed, vec![2, 3, 4, 1]);
    c.release(&mut f, rc);
    assert_eq!(c.len(), 1);
    let s = c.stats();
    assert_eq!((s.uncached, s.evicted), (3, 1));
}

#[test]
fn the_byte_bound_evicts_until_the_new_region_fits() {
    let (mut f, mut c) = (Fake::default(), cache(100, 3 * 4096));
    for addr in [A, B] {
        let (r, _) = c.acquire(&mut f, addr, 4096).unwrap();
        c.release(&mut f, r);
    }
    let (r, _) = c.acquire(&mut f, C, 2 * 4096).unwrap();
    c.release(&mut f, r);
    assert_eq!(f.closed, vec![1], "A evicted: B + C = 3 pages fit");
    // A region larger than the bound is still cached when the cache is empty.
    let (r, _) = c.acquire(&mut f, A, 8 * 4096).unwrap();
    c.release(&mut f, r);
    assert_eq!(f.closed, vec![1, 2, 3]);
    assert_eq!(c.len(), 1);
    assert_eq!(c.stats().uncached, 0);
}

#[test]
fn invalidate_ends_explicit_registrations_and_rejects_bad_ranges() {
    let (mut f, mut c) = (Fake::default(), cache(4, 0));
    let h = c.register(&mut f, A, 64).unwrap();
    assert_eq!(c.invalidate(&mut f, A, 1).unwrap().closed, 1);
    let e = c.deregister(&mut f, h).unwrap_err();
    assert_eq!(e.status, proxy_core::NrtStatus::Invalid);
    assert!(e.message.contains("invalidated"), "{e}");
    for (addr, len) in [(A, 0), (u64::MAX - 10, 100)] {
        let e = c.invalidate(&mut f, addr, len).unwrap_err();
        assert_eq!(e.status, proxy_core::NrtStatus::Invalid, "{e}");
    }
    let e = c.acquire(&mut f, u64::MAX - 10, 100).unwrap_err();
    assert!(e.message.contains("wraps"), "{e}");
    f.refuse = true;
    let e = c.acquire(&mut f, B, 64).unwrap_err();
    assert!(e.message.contains("refused by the fake"), "{e}");
    assert_eq!(c.len(), 0);
}

#[test]
fn close_all_closes_cached_and_detached_regions_once() {
    let (mut f, mut c) = (Fake::default(), cache(1, 0));
    let (ra, _) = c.acquire(&mut f, A, 64).unwrap();
    let (_rb, _) = c.acquire(&mut f, B, 64).unwrap(); // uncached, in flight
    c.invalidate(&mut f, A, 64).unwrap(); // A detached, in flight
    c.close_all(&mut f).unwrap();
    let mut closed = f.closed.clone();
    closed.sort_unstable();
    assert_eq!(closed, vec![1, 2]);
    c.release(&mut f, ra); // the request fails after close: nothing left to close
    assert_eq!(c.len(), 0);
}

#[test]
fn quarantine_takes_every_region_unclosed_and_only_once() {
    let (mut f, mut c) = (Fake::default(), cache(1, 0));
    let (ra, _) = c.acquire(&mut f, A, 64).unwrap(); // cached, in flight
    let (_rb, _) = c.acquire(&mut f, B, 64).unwrap(); // uncached (detached), in flight
    let q = c.quarantine_all(&mut f);
    let mut keys: Vec<u64> = q.iter().map(|r| r.key).collect();
    keys.sort_unstable();
    assert_eq!(keys, vec![1, 2]);
    assert!(f.closed.is_empty(), "a quarantined region was closed");
    assert_eq!(c.len(), 0);
    assert_eq!(c.stats().quarantined, 2);
    // The transport's later close and a late release close nothing.
    c.release(&mut f, ra);
    c.close_all(&mut f).unwrap();
    assert!(f.closed.is_empty());
    assert!(c.quarantine_all(&mut f).is_empty());
}

#[test]
fn limits_from_the_environment() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    assert_eq!(
        MrCacheLimits::from_lookup(env(&[])).unwrap(),
        MrCacheLimits::default()
    );
    assert_eq!(
        MrCacheLimits::from_lookup(env(&[
            (MR_CACHE_ENTRIES_VAR, "16"),
            (MR_CACHE_BYTES_VAR, "1048576")
        ]))
        .unwrap(),
        MrCacheLimits {
            max_entries: 16,
            max_bytes: 1 << 20
        }
    );
    for bad in [
        &[(MR_CACHE_ENTRIES_VAR, "0")][..],
        &[(MR_CACHE_ENTRIES_VAR, "many")][..],
        &[(MR_CACHE_BYTES_VAR, "-1")][..],
    ] {
        let e = MrCacheLimits::from_lookup(env(bad)).unwrap_err();
        assert!(e.message.contains(bad[0].0), "{e}");
    }
}
