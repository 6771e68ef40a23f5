//! Handle tables of `libnrt_proxy.so`: the C side never holds a pointer to the library's
//! objects, only an opaque handle that encodes `(instance, kind, generation, slot index)`.
//! Every call looks the handle up before it touches anything, so NULL, a destroyed handle, a
//! handle of another kind, a handle made by another loaded copy of this library, and any pointer
//! the library never handed out are answered without a dereference.
//!
//! ```text
//!  handle bits (64-bit):  [ instance:12 | kind:4 | generation:36 | index:12 ]
//!
//!  slot word = generation << 2 | state
//!
//!            (1) insert: CAS             (2) publish value,        (3) lookup: CAS
//!   FREE(g) ─────────────► RESERVED(g+1) ───────────────► LIVE(g+1) ◄──────────────► BUSY(g+1)
//!      ▲                                  store Release        │     (4) release: store
//!      │                                                       │
//!      └──────── (6) store FREE(g+1) ◄── RESERVED(g+1) ◄───────┘ (5) remove: CAS
//! ```
//! The slot protocol is the progress library's (`ffi/src/handles.rs`, same diagram), copied
//! rather than shared because that module lives in the `proxy-ffi` cdylib crate, which this
//! library must not link (it would export the progress half's symbols). What differs is the
//! top 16 bits: an *instance id*, drawn at random (`getrandom`) once per loaded copy of the
//! library, and the kind. A copy of the library loaded twice (two paths, `RTLD_LOCAL`) has two
//! tables whose handles decode alike but for the instance id, so a handle of one copy given to
//! the other is answered `NotAHandle` (a chance of 1 in 4094 of equal ids, then the generation,
//! which starts at a random value per copy too, still tells them apart with high probability).
//!
//! On 64-bit targets the top 16 bits are neither all zeros nor all ones, so no real pointer can
//! decode as a handle. A lookup holds the slot BUSY for one call: a second concurrent call on
//! the same handle is refused (`Busy`), never given a torn object.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Slots per table (12 index bits).
pub(crate) const INDEX_BITS: u32 = 12;
/// Largest number of live objects of one kind.
pub(crate) const CAPACITY: usize = 1 << INDEX_BITS;

const GEN_BITS: u32 = 36;
const TAG_SHIFT: u32 = INDEX_BITS + GEN_BITS;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;
const INDEX_MASK: usize = CAPACITY - 1;

const FREE: u64 = 0;
const LIVE: u64 = 1;
const BUSY: u64 = 2;
const RESERVED: u64 = 3;
const STATE_MASK: u64 = 3;

#[cfg(not(target_pointer_width = "64"))]
compile_error!("libnrt_proxy's handles need a 64-bit target");

const fn word(generation: u64, state: u64) -> u64 {
    (generation & GEN_MASK) << 2 | state
}
const fn generation_of(w: u64) -> u64 {
    w >> 2
}

/// 64 random bits from the kernel (`getrandom`), or, should it fail, bits of the clock, the
/// pid and the address of a static (which differs per loaded copy).
fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom((&raw mut v).cast(), 8, 0) };
    if n == 8 {
        return v;
    }
    static ANCHOR: u8 = 0;
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32) ^ (&raw const ANCHOR as u64)
}

/// This loaded copy's instance id (1..=0xFFE) and the first generation of its slots.
fn instance() -> (usize, u64) {
    static ID: OnceLock<(usize, u64)> = OnceLock::new();
    *ID.get_or_init(|| {
        let r = random_u64();
        let id = (r & 0xFFF) as usize % 0xFFE + 1;
        let first_gen = (r >> 12) & (GEN_MASK >> 1);
        (id, first_gen)
    })
}

/// This loaded copy's instance id (logged at init).
pub fn instance_id() -> usize {
    instance().0
}

/// Why a lookup failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupError {
    /// Not a handle of this table at all (NULL, another kind, another loaded copy, a pointer).
    NotAHandle,
    /// A handle of this table whose object was destroyed (its generation has passed).
    Stale,
    /// The object is in use by another call right now.
    Busy,
}

struct Slot<T> {
    /// `generation << 2 | state`; see the module diagram.
    word: AtomicU64,
    /// `Some` exactly while the slot is LIVE or BUSY. Accessed only by the thread that moved
    /// the slot to BUSY or RESERVED with a successful CAS.
    value: UnsafeCell<Option<T>>,
}

/// A fixed table of live objects of one kind, keyed by opaque handles.
pub struct HandleTable<T> {
    /// The kind (1..=15), in bits 48..52 of every handle.
    kind: usize,
    /// Where the next insert starts scanning (a hint only).
    next: AtomicUsize,
    slots: [Slot<T>; CAPACITY],
}

// SAFETY: a slot's value is only accessed by the one thread that won the CAS into BUSY or
// RESERVED for it (exclusive until it stores LIVE or FREE with Release, which the next winner's
// Acquire CAS synchronizes with); values move between threads, hence `T: Send`.
unsafe impl<T: Send> Sync for HandleTable<T> {}

/// Releases a BUSY slot back to LIVE when dropped (also on unwind).
struct BusyGuard<'a> {
    word: &'a AtomicU64,
    live: u64,
}

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        // Release: everything the call did to the object happens-before the next lookup.
        self.word.store(self.live, Ordering::Release);
    }
}

impl<T> HandleTable<T> {
    /// An empty table of handles of `kind` (1..=15).
    pub const fn new(kind: u8) -> Self {
        assert!(kind != 0 && kind < 16);
        Self {
            kind: kind as usize,
            next: AtomicUsize::new(0),
            slots: [const {
                Slot {
                    word: AtomicU64::new(FREE),
                    value: UnsafeCell::new(None),
                }
            }; CAPACITY],
        }
    }

    fn tag(&self) -> usize {
        (instance().0 << 4 | self.kind) << TAG_SHIFT
    }

    fn encode(&self, index: usize, generation: u64) -> usize {
        self.tag() | ((generation & GEN_MASK) as usize) << INDEX_BITS | index
    }

    /// `(index, generation)` of `handle`, or `NotAHandle`.
    fn decode(&self, handle: usize) -> Result<(usize, u64), LookupError> {
        let tag_mask = usize::MAX << TAG_SHIFT;
        if handle & tag_mask != self.tag() {
            return Err(LookupError::NotAHandle);
        }
        let index = handle & INDEX_MASK;
        let generation = ((handle & !tag_mask) >> INDEX_BITS) as u64;
        if generation == 0 {
            return Err(LookupError::NotAHandle);
        }
        Ok((index, generation))
    }

    /// Stores `value` in a free slot and returns its handle, or gives `value` back when the
    /// table is full.
    pub fn insert(&self, value: T) -> Result<usize, T> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for k in 0..CAPACITY {
            let index = (start + k) & INDEX_MASK;
            let slot = &self.slots[index];
            let w = slot.word.load(Ordering::Relaxed);
            if w & STATE_MASK != FREE {
                continue;
            }
            // A never-used slot starts at this copy's random first generation.
            let base = if w == FREE {
                instance().1
            } else {
                generation_of(w)
            };
            let mut generation = (base + 1) & GEN_MASK;
            if generation == 0 {
                generation = 1;
            }
            // Acquire: the previous owner's Release store of FREE happens-before our write.
            if slot
                .word
                .compare_exchange(
                    w,
                    word(generation, RESERVED),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                continue;
            }
            // SAFETY: we won FREE → RESERVED, so no other thread accesses the value.
            unsafe { *slot.value.get() = Some(value) };
            // Release: the value is written before any lookup's Acquire CAS sees LIVE.
            slot.word.store(word(generation, LIVE), Ordering::Release);
            return Ok(self.encode(index, generation));
        }
        Err(value)
    }

    /// Runs `f` on the object of `handle`, holding its slot BUSY for the duration.
    ///
    /// # Errors
    /// `NotAHandle`, `Stale` or `Busy` (see [`LookupError`]); `f` is not called then.
    pub fn with<R>(&self, handle: usize, f: impl FnOnce(&mut T) -> R) -> Result<R, LookupError> {
        let (index, generation) = self.decode(handle)?;
        let slot = &self.slots[index];
        let live = word(generation, LIVE);
        // Acquire: pairs with the Release store of LIVE by the inserter or the previous caller.
        if let Err(seen) = slot.word.compare_exchange(
            live,
            word(generation, BUSY),
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            return Err(Self::why(seen, generation));
        }
        let _guard = BusyGuard {
            word: &slot.word,
            live,
        };
        // SAFETY: we won LIVE → BUSY for this generation: exclusive access until the guard
        // stores LIVE again.
        let value = unsafe { (*slot.value.get()).as_mut() };
        match value {
            Some(v) => Ok(f(v)),
            None => Err(LookupError::Stale),
        }
    }

    /// Removes and returns the object of `handle`; the handle is stale from now on.
    ///
    /// # Errors
    /// `NotAHandle`, `Stale` (already removed) or `Busy`.
    pub fn remove(&self, handle: usize) -> Result<T, LookupError> {
        let (index, generation) = self.decode(handle)?;
        let slot = &self.slots[index];
        if let Err(seen) = slot.word.compare_exchange(
            word(generation, LIVE),
            word(generation, RESERVED),
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            return Err(Self::why(seen, generation));
        }
        // SAFETY: we won LIVE → RESERVED: exclusive access.
        let value = unsafe { (*slot.value.get()).take() };
        // Release: the slot is empty before any inserter's Acquire CAS sees FREE.
        slot.word.store(word(generation, FREE), Ordering::Release);
        value.ok_or(LookupError::Stale)
    }

    fn why(seen: u64, generation: u64) -> LookupError {
        let same_generation = generation_of(seen) == generation & GEN_MASK;
        match seen & STATE_MASK {
            BUSY | RESERVED if same_generation => LookupError::Busy,
            _ => LookupError::Stale,
        }
    }

    /// Number of live objects (a scan; for tests and diagnostics).
    pub fn live(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.word.load(Ordering::Relaxed) & STATE_MASK != FREE)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_lookup_remove_stale_and_foreign() {
        let t: Box<HandleTable<u32>> = Box::new(HandleTable::new(3));
        let other: Box<HandleTable<u32>> = Box::new(HandleTable::new(4));
        let h = t.insert(7).unwrap();
        assert_eq!(h >> 60, instance_id() >> 8, "instance id in the top bits");
        assert_eq!(t.with(h, |v| *v), Ok(7));
        assert_eq!(
            other.with(h, |v| *v),
            Err(LookupError::NotAHandle),
            "other kind"
        );
        // The same slot and generation with another instance id: another loaded copy's handle.
        let foreign = h ^ (1 << (TAG_SHIFT + 4));
        assert_eq!(t.with(foreign, |v| *v), Err(LookupError::NotAHandle));
        let local = 5u64;
        for p in [0usize, 1, &local as *const u64 as usize, usize::MAX] {
            assert_eq!(t.with(p, |_| ()), Err(LookupError::NotAHandle), "{p:#x}");
        }
        t.with(h, |_| {
            assert_eq!(t.with(h, |_| ()), Err(LookupError::Busy));
            assert_eq!(t.remove(h), Err(LookupError::Busy));
        })
        .unwrap();
        assert_eq!(t.remove(h), Ok(7));
        assert_eq!(t.with(h, |v| *v), Err(LookupError::Stale));
        assert_eq!(t.remove(h), Err(LookupError::Stale), "double destroy");
        assert_eq!(t.live(), 0);
    }
}
