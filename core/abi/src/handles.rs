//! Generation-checked handle tables, shared by both C libraries (`libnccom_proxy.so` and
//! `libnrt_proxy.so`; each links its own copy, so each has its own tables and exports nothing
//! from here). The C side never holds a pointer to a library's objects, only an opaque handle
//! that encodes `(tag, generation, slot index)`. Every call looks the handle up before it
//! touches anything, so NULL, a destroyed handle, a handle of another kind, a handle made by
//! another loaded copy of the library, and any pointer the library never handed out are
//! answered without a dereference.
//!
//! ```text
//!  handle bits (64-bit):  [ tag:16 | generation:36 | index:12 ]
//!  handle bits (32-bit):  [ tag:8  | generation:12 | index:12 ]   (fixed tags only)
//!  tag: a fixed magic per table            (HandleTable::new, the progress library), or
//!       [ instance:12 | kind:4 ]            (HandleTable::with_instance, the driver library)
//!
//!  slot word = generation << 2 | state
//!
//!            (1) insert: CAS             (2) publish value,        (3) lookup: CAS
//!   FREE(g) ─────────────► RESERVED(g+1) ───────────────► LIVE(g+1) ◄──────────────► BUSY(g+1)
//!      ▲                                  store Release        │     (4) release: store
//!      │                                                       │
//!      └──────── (6) store FREE(g+1) ◄── RESERVED(g+1) ◄───────┘ (5) remove: CAS
//! ```
//! A lookup holds the slot BUSY for the duration of one call, so the one-thread-per-comm rule of
//! docs/design.md §8 is enforced rather than assumed: a second concurrent call on the same handle
//! (or a destroy racing a progress call) sees BUSY and is refused, never a torn object. Slots of
//! different handles are independent (no lock, no shared word on the lookup path).
//!
//! **Instances.** A table made [`HandleTable::with_instance`] asks its [`Instance`] function
//! (once per call; the function caches) for a per-loaded-copy id (`1..=0xFFE`, drawn at random
//! by the library) and a first generation: a copy of the library loaded twice (two paths,
//! `RTLD_LOCAL`) has two tables whose handles differ in the instance id, so a handle of one copy
//! given to the other is answered `NotAHandle` (equal ids have a chance of 1 in 4094; the random
//! first generation then still tells them apart with high probability). A table made
//! [`HandleTable::new`] uses a fixed magic and generations from 1 (instance 0).
//!
//! On 64-bit targets the tag makes the handle a non-canonical address (top 16 bits neither all
//! zeros nor all ones), so no real pointer can ever decode as a handle. Generations wrap after
//! 2^36 reuses of one slot (2^12 on 32-bit targets).

#[cfg(not(loom))]
use core::sync::atomic::AtomicU64;
#[cfg(loom)]
use loom::sync::atomic::AtomicU64;
// proxy-core's facade: loom's atomics and `UnsafeCell` under `--cfg loom`, so the model of
// this table (`loom-tests/tests/handles.rs`) checks the code as it ships.
use proxy_core::base::sync::{AtomicUsize, Ordering, UnsafeCell};

/// A planted line (`proxy_core::plant`): under `--cfg loom` the buggy variant when its plant is
/// selected, else (and in every other build) the correct code alone. Every planted line carries
/// a `// PLANT:` comment.
#[cfg(loom)]
macro_rules! plant {
    ($plant:ident, $buggy:expr, $correct:expr $(,)?) => {
        if proxy_core::plant::active(proxy_core::plant::Plant::$plant) {
            $buggy
        } else {
            $correct
        }
    };
}
#[cfg(not(loom))]
macro_rules! plant {
    ($plant:ident, $buggy:expr, $correct:expr $(,)?) => {
        $correct
    };
}

/// A constructor that is `const` in normal builds (the C libraries keep their tables in
/// statics) and not under `--cfg loom` (loom's atomics have no `const` constructor; a model
/// builds its table at run time).
macro_rules! loom_const_fn {
    ($(#[$m:meta])* $v:vis fn $($rest:tt)*) => {
        #[cfg(not(loom))]
        $(#[$m])* $v const fn $($rest)*
        #[cfg(loom)]
        $(#[$m])* $v fn $($rest)*
    };
}

/// Index bits of a handle: at most `2^12` slots per table.
pub const INDEX_BITS: u32 = 12;
/// Slots of a table by default (the largest possible): the largest number of live objects of
/// one kind.
pub const CAPACITY: usize = 1 << INDEX_BITS;

#[cfg(target_pointer_width = "64")]
const GEN_BITS: u32 = 36;
#[cfg(not(target_pointer_width = "64"))]
const GEN_BITS: u32 = 12;
const TAG_SHIFT: u32 = INDEX_BITS + GEN_BITS;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;
const INDEX_MASK: usize = CAPACITY - 1;

const FREE: u64 = 0;
const LIVE: u64 = 1;
const BUSY: u64 = 2;
const RESERVED: u64 = 3;
const STATE_MASK: u64 = 3;

const fn word(generation: u64, state: u64) -> u64 {
    (generation & GEN_MASK) << 2 | state
}
const fn generation_of(w: u64) -> u64 {
    w >> 2
}

/// A loaded copy's identity for [`HandleTable::with_instance`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstanceId {
    /// The instance id, `1..=0xFFE` (12 bits; never all zeros or all ones, so the tag is never
    /// 0 or `0xFFFF`).
    pub id: u16,
    /// The generation a never-used slot starts from (below 2^35).
    pub first_generation: u64,
}

/// Gives the loaded copy's [`InstanceId`]; called on every encode and decode, so it should
/// cache its answer (a `OnceLock`).
pub type Instance = fn() -> InstanceId;

/// Where a table's tag comes from.
#[derive(Clone, Copy)]
enum Tag {
    /// A fixed magic (instance 0).
    Fixed(u16),
    /// `instance << 4 | kind`.
    #[cfg(target_pointer_width = "64")]
    PerCopy { kind: u8, instance: Instance },
}

/// Why a lookup failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupError {
    /// Not a handle of this table at all (NULL, another kind, another loaded copy, a pointer).
    NotAHandle,
    /// A handle of this table whose object was destroyed (its generation has passed).
    Stale,
    /// The object is in use by another call right now (concurrent calls on one handle).
    Busy,
}

struct Slot<T> {
    /// `generation << 2 | state`; see the module diagram.
    word: AtomicU64,
    /// `Some` exactly while the slot is LIVE or BUSY (and during RESERVED transitions, by the
    /// thread that reserved it). Accessed only by the thread that moved the slot to BUSY or
    /// RESERVED with a successful CAS.
    value: UnsafeCell<Option<T>>,
}

/// A fixed table of up to `N` live objects of one kind (`1..=`[`CAPACITY`], default
/// `CAPACITY`; the loom model uses one or two slots), keyed by opaque handles.
pub struct HandleTable<T, const N: usize = CAPACITY> {
    /// The tag in the top bits of every handle.
    tag: Tag,
    /// Where the next insert starts scanning (a hint only).
    next: AtomicUsize,
    slots: [Slot<T>; N],
}

// SAFETY: a slot's value is only accessed by the one thread that won the CAS into BUSY or
// RESERVED for it (exclusive until it stores LIVE or FREE with Release, which the next winner's
// Acquire CAS synchronizes with); values move between threads, hence `T: Send`.
unsafe impl<T: Send, const N: usize> Sync for HandleTable<T, N> {}

/// Releases a BUSY slot back to LIVE when dropped (also on unwind).
struct BusyGuard<'a> {
    word: &'a AtomicU64,
    live: u64,
}

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        // Edge (4). Release: everything the call did to the object happens-before the next
        // lookup's Acquire CAS of this slot.
        self.word.store(self.live, Ordering::Release);
    }
}

impl<T> Slot<T> {
    loom_const_fn! {
        /// A FREE slot at generation 0.
        fn free() -> Self {
            Slot {
                word: AtomicU64::new(FREE),
                value: UnsafeCell::new(None),
            }
        }
    }
}

impl<T, const N: usize> HandleTable<T, N> {
    loom_const_fn! {
        /// An empty table with `tag`: every slot FREE at generation 0.
        fn with_tag(tag: Tag) -> Self {
            assert!(N > 0 && N <= CAPACITY);
            Self {
                tag,
                next: AtomicUsize::new(0),
                #[cfg(not(loom))]
                slots: [const { Slot::free() }; N],
                #[cfg(loom)]
                slots: core::array::from_fn(|_| Slot::free()),
            }
        }
    }

    loom_const_fn! {
        /// An empty table whose handles carry the fixed `magic` (non-zero; on 64-bit targets
        /// not `0xFFFF`, on 32-bit targets at most `0xFF`).
        pub fn new(magic: u16) -> Self {
            assert!(magic != 0 && magic != 0xFFFF);
            #[cfg(not(target_pointer_width = "64"))]
            assert!(magic <= 0xFF);
            Self::with_tag(Tag::Fixed(magic))
        }
    }

    loom_const_fn! {
        /// An empty table of handles of `kind` (1..=15) whose tag also carries the loaded
        /// copy's instance id (module docs). 64-bit targets only.
        #[cfg(target_pointer_width = "64")]
        pub fn with_instance(kind: u8, instance: Instance) -> Self {
            assert!(kind != 0 && kind < 16);
            Self::with_tag(Tag::PerCopy { kind, instance })
        }
    }

    /// The tag shifted into place.
    fn tag(&self) -> usize {
        let t = match self.tag {
            Tag::Fixed(m) => m as usize,
            #[cfg(target_pointer_width = "64")]
            Tag::PerCopy { kind, instance } => {
                ((instance)().id as usize & 0xFFF) << 4 | kind as usize
            }
        };
        t << TAG_SHIFT
    }

    /// The generation before the first of a never-used slot.
    fn first_generation(&self) -> u64 {
        match self.tag {
            Tag::Fixed(_) => 0,
            #[cfg(target_pointer_width = "64")]
            Tag::PerCopy { instance, .. } => (instance)().first_generation & (GEN_MASK >> 1),
        }
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
        if generation == 0 || index >= N {
            // Generation 0 is never handed out; a smaller table has no such slot.
            return Err(LookupError::NotAHandle);
        }
        Ok((index, generation))
    }

    /// Stores `value` in a free slot and returns its handle, or gives `value` back when the
    /// table is full.
    pub fn insert(&self, value: T) -> Result<usize, T> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for k in 0..N {
            let index = (start.wrapping_add(k)) % N;
            let slot = &self.slots[index];
            let w = slot.word.load(Ordering::Relaxed);
            if w & STATE_MASK != FREE {
                continue;
            }
            // A never-used slot starts at the table's first generation.
            let base = if w == FREE {
                self.first_generation()
            } else {
                generation_of(w)
            };
            let mut generation = (base + 1) & GEN_MASK;
            if generation == 0 {
                generation = 1;
            }
            // Edge (1). Acquire: the previous owner's Release store of FREE (after it took the
            // value out) happens-before our write of the value.
            let reserved = plant!(
                HandleReserveByLoadStore,
                // PLANT: the slot was FREE when loaded above; claim it with a plain store, so
                // two inserters can both "win" it.
                {
                    slot.word
                        .store(word(generation, RESERVED), Ordering::Release);
                    true
                },
                slot.word
                    .compare_exchange(
                        w,
                        word(generation, RESERVED),
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            );
            if !reserved {
                continue;
            }
            // SAFETY: we won FREE → RESERVED, so no other thread accesses the value.
            slot.value.with_mut(|v| unsafe { *v = Some(value) });
            // Edge (2). Release: the value is written before any lookup's Acquire CAS sees LIVE.
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
        // Edge (3). Acquire: pairs with the Release store of LIVE by the inserter or the
        // previous caller, so their writes to the object are visible here.
        let acquire = plant!(
            HandleLookupRelaxed,
            // PLANT: Relaxed, so the inserter's or the previous caller's writes to the object
            // may not be visible to this call.
            Ordering::Relaxed,
            Ordering::Acquire
        );
        if let Err(seen) =
            slot.word
                .compare_exchange(live, word(generation, BUSY), acquire, Ordering::Relaxed)
        {
            return Err(Self::why(seen, generation));
        }
        let _guard = BusyGuard {
            word: &slot.word,
            live,
        };
        // SAFETY: we won LIVE → BUSY for this generation: exclusive access until the guard
        // stores LIVE again (edge 4). The value is `Some` while the slot is LIVE.
        slot.value.with_mut(|v| match unsafe { (*v).as_mut() } {
            Some(v) => Ok(f(v)),
            None => Err(LookupError::Stale),
        })
    }

    /// Removes and returns the object of `handle`; the handle (and every copy of it) is stale
    /// from now on.
    ///
    /// # Errors
    /// `NotAHandle`, `Stale` (already removed: a double destroy) or `Busy`.
    pub fn remove(&self, handle: usize) -> Result<T, LookupError> {
        let (index, generation) = self.decode(handle)?;
        let slot = &self.slots[index];
        // Edge (5).
        if let Err(seen) = slot.word.compare_exchange(
            word(generation, LIVE),
            word(generation, RESERVED),
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            return Err(Self::why(seen, generation));
        }
        let take = || {
            // SAFETY: we won LIVE → RESERVED: exclusive access until we store FREE.
            slot.value.with_mut(|v| unsafe { (*v).take() })
        };
        let value = plant!(
            HandleRemoveFreesFirst,
            // PLANT: the slot is FREE before its value is taken out, so an inserter may
            // write its value into the slot while (or before) this thread takes it.
            {
                slot.word.store(word(generation, FREE), Ordering::Release);
                take()
            },
            {
                let value = take();
                // Edge (6). Release: the slot is empty before any inserter's Acquire CAS sees
                // FREE.
                slot.word.store(word(generation, FREE), Ordering::Release);
                value
            }
        );
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
mod tests;
