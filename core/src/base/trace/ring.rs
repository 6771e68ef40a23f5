//! The trace ring ([`TraceRing`]): a fixed array of record slots shared by every recording
//! thread, handed out to *lanes* a chunk at a time, so that a thread's records touch its lane's
//! word and its own chunk's slots and nothing another thread writes (issue 28: one shared claim
//! word per record cost a cache-line transfer between the rank threads at every event).
//!
//! **Claim-once.** Slot `k` is written at most once: a writer claims it, writes the record and
//! publishes it with the slot's `state` (Release; the drain reads it with Acquire). A drain may
//! run at any time, also while writers record: it reads the published slots and counts the
//! claimed but unpublished ones as pending. When every chunk has been handed out and a writer's
//! lane has used up its own, the record is dropped and counted ([`TraceRing::dropped`]): the
//! ring keeps the first events (a truncated trace, never an overwritten one).
//!
//! **Lanes and chunks.** The ring's slots are cut into chunks of `chunk` slots (the last may be
//! shorter). A lane is one word: the next slot of the chunk it owns now. A writer names its
//! lane (the platform gives each thread its own while there are lanes enough; two threads on
//! one lane are correct, only slower) and claims that slot with a compare-and-swap on the lane
//! word, which stays in the writer's cache. When the lane's chunk is used up, the writer takes
//! the next chunk from the ring-wide chunk counter (one `fetch_add`, shared by every lane: once
//! per `chunk` records) and installs it in the lane. If another writer of the same lane installed
//! a chunk first, this writer's record takes the first slot of the chunk it took and the rest of
//! that chunk is marked void (skipped by the drain): a few slots lost to a race only threads
//! sharing a lane can run. A truncated ring may so hold up to a chunk fewer records per lane
//! than its capacity (the lanes' unused tails).
//!
//! Loom model 16 (`loom-tests/tests/trace.rs`) checks the handoff from writers to a concurrent
//! drain (plant `TraceReadyRelaxed`) and two writers sharing a lane (plant
//! `TraceLaneClaimByLoadStore`).

use alloc::boxed::Box;
use alloc::vec::Vec;

use super::Record;
use crate::base::sync::{AtomicU8, AtomicUsize, CachePadded, Ordering, UnsafeCell};

/// A slot nothing was written to (yet).
const EMPTY: u8 = 0;
/// A slot whose record is written and published.
const READY: u8 = 1;
/// A slot of a chunk a writer took and could not install in its lane (never written).
const VOID: u8 = 2;

/// The most slots a lane takes from the ring at a time ([`TraceRing::chunk_for`]): 64 records
/// are 5 KiB.
pub const MAX_CHUNK: usize = 64;

/// One slot: written once by the writer that claimed it, then `READY`.
struct Slot {
    /// [`EMPTY`], [`READY`] (set with Release after the record is written) or [`VOID`]; never
    /// changes again once not `EMPTY`.
    state: AtomicU8,
    rec: UnsafeCell<Record>,
}

/// What a drain saw ([`TraceRing::drain`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Records handed to the drain's callback.
    pub records: usize,
    /// Slots claimed by a writer that had not published them yet, or of a chunk being handed
    /// to a lane (recording was under way).
    pub pending: usize,
    /// Records dropped because the ring was full.
    pub dropped: usize,
}

/// The fixed-size, multi-writer, claim-once ring of [`Record`]s, handed out to lanes a chunk
/// at a time (module docs).
pub struct TraceRing {
    /// Chunks handed out so far; at most `chunks` plus the writers that raced past the full
    /// check (each then drops).
    next: CachePadded<AtomicUsize>,
    /// Each lane's next slot: 0 before its first chunk; at a multiple of `chunk` (or at the
    /// capacity) its chunk is used up.
    lanes: Box<[CachePadded<AtomicUsize>]>,
    /// Records dropped because the ring was full (wraps at `usize::MAX`).
    dropped: AtomicUsize,
    /// Slots per chunk (a power of two).
    chunk: usize,
    /// Chunks in the ring.
    chunks: usize,
    slots: Box<[Slot]>,
}

// SAFETY: every slot's record is written by the one writer that claimed it (a unique index:
// from the lane word's compare-and-swap, or the first slot of a chunk from the chunk counter's
// `fetch_add`) before its `state` is set READY with Release, and read only after READY is seen
// with Acquire; `Record` is plain data (`&'static str` is Sync).
unsafe impl Sync for TraceRing {}
// SAFETY: as above; the ring owns its slots.
unsafe impl Send for TraceRing {}

impl TraceRing {
    /// A ring of `capacity` records (at least 1) with one lane, allocated now (`capacity` × 80
    /// bytes: a record and its state).
    pub fn new(capacity: usize) -> Self {
        Self::with_lanes(capacity, 1, Self::chunk_for(capacity, 1))
    }

    /// A ring of `capacity` records (at least 1) for `lanes` lanes (at least 1), handed out
    /// `chunk` slots at a time (rounded down to a power of two, at least 1: a record's claim
    /// tests the end of its chunk with a mask, not a division), allocated now.
    pub fn with_lanes(capacity: usize, lanes: usize, chunk: usize) -> Self {
        let capacity = capacity.max(1);
        let chunk = 1 << chunk.max(1).ilog2();
        let slots: Vec<Slot> = (0..capacity)
            .map(|_| Slot {
                state: AtomicU8::new(EMPTY),
                rec: UnsafeCell::new(Record::default()),
            })
            .collect();
        let lanes: Vec<CachePadded<AtomicUsize>> = (0..lanes.max(1))
            .map(|_| CachePadded::new(AtomicUsize::new(0)))
            .collect();
        Self {
            next: CachePadded::new(AtomicUsize::new(0)),
            lanes: lanes.into_boxed_slice(),
            dropped: AtomicUsize::new(0),
            chunk,
            chunks: capacity.div_ceil(chunk),
            slots: slots.into_boxed_slice(),
        }
    }

    /// The chunk a ring of `capacity` records for `lanes` lanes is handed out in: a quarter of
    /// a lane's even share rounded down to a power of two, 1 to [`MAX_CHUNK`] slots (so a few
    /// busy lanes cannot take a small ring's slots from the others).
    pub const fn chunk_for(capacity: usize, lanes: usize) -> usize {
        let share = capacity / (4 * if lanes == 0 { 1 } else { lanes });
        if share < 1 {
            1
        } else if share > MAX_CHUNK {
            MAX_CHUNK
        } else {
            1 << share.ilog2()
        }
    }

    /// Records in the ring at most.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The ring's lanes.
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// Slots a lane takes at a time.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Records dropped so far because the ring was full.
    pub fn dropped(&self) -> usize {
        self.dropped.load(Ordering::Relaxed)
    }

    /// `true` once every chunk has been handed out (a push drops once its lane's chunk is used
    /// up; with one lane and chunks of 1, every further push).
    pub fn is_full(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.chunks
    }

    /// Counts one record dropped because the ring is full.
    fn count_drop(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// A slot of its own for a writer of lane `lane` (taken modulo the lanes), or `None` when
    /// the ring is full. Lock-free: a compare-and-swap on the lane's word, and once per chunk a
    /// `fetch_add` on the ring's chunk counter.
    #[inline]
    fn claim(&self, lane: usize) -> Option<usize> {
        let n = self.slots.len();
        let lanes = self.lanes.len();
        let word = &self.lanes[if lane < lanes { lane } else { lane % lanes }];
        // Relaxed throughout: the lane word and the chunk counter hand out indices and order
        // nothing; a slot's `state` publishes its record.
        let mut cur = word.load(Ordering::Relaxed);
        while cur & (self.chunk - 1) != 0 && cur < n {
            // PLANT: TraceLaneClaimByLoadStore claims the lane's next slot by the load above
            // and a plain store: two writers of one lane can claim the same slot and write its
            // record at once.
            let claimed = plant!(
                TraceLaneClaimByLoadStore,
                {
                    word.store(cur + 1, Ordering::Relaxed);
                    Ok(cur)
                },
                word.compare_exchange(cur, cur + 1, Ordering::Relaxed, Ordering::Relaxed)
            );
            match claimed {
                Ok(_) => return Some(cur),
                Err(now) => cur = now,
            }
        }
        // The lane's chunk is used up (or it has none yet): take the next one. The load first
        // keeps the counter from growing without bound once the ring is full (it could wrap on
        // a 32-bit target and hand out chunk 0 a second time).
        if self.next.load(Ordering::Relaxed) >= self.chunks {
            return None;
        }
        let k = self.next.fetch_add(1, Ordering::Relaxed);
        if k >= self.chunks {
            return None;
        }
        let first = k * self.chunk;
        let end = (first + self.chunk).min(n);
        if word
            .compare_exchange(cur, first + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            // Another writer of this lane installed a chunk first: this record takes the first
            // slot of ours, the rest is void (no writer will ever claim it).
            for s in &self.slots[first + 1..end] {
                s.state.store(VOID, Ordering::Relaxed);
            }
        }
        Some(first)
    }

    /// Appends `rec` on lane 0; `false` (and one more [`TraceRing::dropped`]) when the ring is
    /// full.
    pub fn push(&self, rec: Record) -> bool {
        self.push_on(0, rec, |_| {})
    }

    /// Claims a slot for a writer of lane `lane` (modulo the lanes), copies `rec` into it and
    /// lets `stamp` finish it in place (e.g. the time stamp: read once the slot is its own);
    /// `false` (and one more [`TraceRing::dropped`], `stamp` not run) when the ring is full.
    /// `stamp` writes the slot's fields in place (the record is not built a second time on the
    /// stack and copied).
    pub fn push_on(&self, lane: usize, rec: Record, stamp: impl FnOnce(&mut Record)) -> bool {
        let Some(i) = self.claim(lane) else {
            self.count_drop();
            return false;
        };
        let slot = &self.slots[i];
        // SAFETY: index `i` was claimed once (`claim`), so this call is the slot's only writer,
        // and no reader touches it before `state` is READY below.
        slot.rec.with_mut(|p| unsafe {
            p.write(rec);
            stamp(&mut *p);
        });
        // Release: a drain that sees READY (Acquire) sees the whole record.
        // PLANT: TraceReadyRelaxed publishes the slot with Relaxed: a drain that sees READY
        // may read the record before its write is visible.
        let order = plant!(TraceReadyRelaxed, Ordering::Relaxed, Ordering::Release);
        slot.state.store(READY, order);
        true
    }

    /// Hands every published record to `f`, chunk by chunk in the order they were handed out
    /// (each lane's records in its order; timestamps are out of order between lanes). May run
    /// while writers record (it reads what is published, and counts claimed slots not yet
    /// published as pending); does not empty the ring.
    pub fn drain(&self, mut f: impl FnMut(&Record)) -> Drained {
        let n = self.slots.len();
        let handed = self.next.load(Ordering::Relaxed).min(self.chunks);
        // Where each lane's unclaimed slots begin (Relaxed: this only tells unclaimed slots
        // from pending ones).
        let cursors: Vec<usize> = self
            .lanes
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .collect();
        let mut d = Drained {
            dropped: self.dropped(),
            ..Drained::default()
        };
        for k in 0..handed {
            let first = k * self.chunk;
            let end = (first + self.chunk).min(n);
            // The lane that owns this chunk now and has not used it up: from its cursor on,
            // nothing is claimed.
            let open = cursors
                .iter()
                .copied()
                .find(|&c| c > first && c < end)
                .unwrap_or(end);
            for (i, slot) in self.slots[first..end].iter().enumerate() {
                // Acquire: pairs with the writer's Release store of READY.
                match slot.state.load(Ordering::Acquire) {
                    READY => {
                        // SAFETY: READY is set only after the slot's one write, which happens
                        // before this read (Release/Acquire); the slot is never written again.
                        let rec = slot.rec.with(|p| unsafe { *p });
                        f(&rec);
                        d.records += 1;
                    }
                    VOID => {}
                    _ if first + i >= open => {}
                    _ => d.pending += 1,
                }
            }
        }
        d
    }
}
