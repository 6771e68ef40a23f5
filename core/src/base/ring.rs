//! A bounded, lock-free single-producer single-consumer ring.
//!
//! The submission ring (producer: a comm's thread, consumer: the worker) and the status ring
//! (producer: the worker, consumer: the comm's thread) of every proxy-queue slot, and the
//! in-memory transport's per-pair mailboxes, are this ring. Written against [`crate::base::sync`] so the
//! loom models check the exact code that ships.
//!
//! Shape (after rtrb): `head` (next slot to read, written only by the consumer) and `tail` (next
//! slot to write, written only by the producer) are free-running `usize` counters on their own
//! cache lines; `tail - head` (wrapping) is the fill level, in `0..=capacity`. Each side caches
//! the other side's counter and reloads it only when the cached value says full / empty.
//!
//! Seed: replaces `enc_proxy_queue::queue` (a mutex-guarded deque) and `state_queue`, §2;
//! docs/design.md §4 ("no mutex on the hot path").

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::mem::MaybeUninit;

use crate::base::sync::{Arc, AtomicUsize, CachePadded, Ordering, UnsafeCell};

struct Shared<T> {
    /// Next index the consumer reads; written by the consumer only (release), in any `usize`
    /// value (free-running, wrapping).
    head: CachePadded<AtomicUsize>,
    /// Next index the producer writes; written by the producer only (release).
    tail: CachePadded<AtomicUsize>,
    /// `capacity` slots; slot `i & mask` holds an initialised `T` iff `head <= i < tail`.
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    /// `capacity - 1` (capacity is a power of two).
    mask: usize,
    /// Handles that share the ring: 2, or 3 with an [`Observer`] (for `is_abandoned`).
    handles: usize,
}

// SAFETY: the ring hands each `T` from exactly one producer thread to exactly one consumer
// thread; a slot is accessed by one side at a time, ordered by the release/acquire pairs on
// `head` and `tail`. So the ring is Send/Sync whenever `T` can be sent between threads.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above: shared access is only through the SPSC protocol.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // Both handles are gone: no concurrent access. Drop the items still queued.
        let mut head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        while head != tail {
            let slot = &self.slots[head & self.mask];
            // SAFETY: `head..tail` holds initialised items (the invariant on `slots`), and we
            // have exclusive access in drop.
            slot.with_mut(|p| unsafe { (*p).assume_init_drop() });
            head = head.wrapping_add(1);
        }
    }
}

/// Creates a ring of `capacity` slots and returns its two handles.
///
/// # Panics
/// If `capacity` is zero or not a power of two (a programming error, caught at construction).
///
/// # Examples
/// ```
/// let (mut tx, mut rx) = proxy_core::base::ring::channel::<u32>(4);
/// tx.push(7).unwrap();
/// assert_eq!(rx.pop(), Some(7));
/// assert_eq!(rx.pop(), None);
/// ```
pub fn channel<T>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    let (tx, rx, _) = build(capacity, 2);
    (tx, rx)
}

/// [`channel`], and an [`Observer`] that reads the ring's fill level from any third thread (a
/// state dump of a queue whose driving thread does not answer).
///
/// # Panics
/// As [`channel`].
pub fn channel_observed<T>(capacity: usize) -> (Producer<T>, Consumer<T>, Observer<T>) {
    let (tx, rx, obs) = build(capacity, 3);
    (tx, rx, obs.expect("three handles"))
}

fn build<T>(capacity: usize, handles: usize) -> (Producer<T>, Consumer<T>, Option<Observer<T>>) {
    assert!(
        capacity.is_power_of_two(),
        "ring capacity {capacity} is not a power of two"
    );
    let slots: Vec<UnsafeCell<MaybeUninit<T>>> = (0..capacity)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let shared = Arc::new(Shared {
        head: CachePadded::new(AtomicUsize::new(0)),
        tail: CachePadded::new(AtomicUsize::new(0)),
        slots: slots.into_boxed_slice(),
        mask: capacity - 1,
        handles,
    });
    let observer = (handles == 3).then(|| Observer {
        shared: shared.clone(),
    });
    (
        Producer {
            shared: shared.clone(),
            tail: 0,
            cached_head: 0,
        },
        Consumer {
            shared,
            head: 0,
            cached_tail: 0,
        },
        observer,
    )
}

/// A read-only view of a ring's fill level, for a third thread (see [`channel_observed`]). It
/// reads the two indices and touches no slot.
pub struct Observer<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Observer<T> {
    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.shared.mask + 1
    }

    /// Items in the ring as of two loads (`tail - head`, capped at the capacity: the indices
    /// are read one after the other while both sides may move, so it is a snapshot, not exact).
    pub fn len(&self) -> usize {
        let head = self.shared.head.load(Ordering::Acquire);
        let tail = self.shared.tail.load(Ordering::Acquire);
        tail.wrapping_sub(head).min(self.capacity())
    }

    /// `true` when [`Observer::len`] reads 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The producing handle: `Send`, not `Clone` (one producer).
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    /// Our copy of `shared.tail` (only we write it).
    tail: usize,
    /// Last `shared.head` we read; may be stale (lower than the real head), which only makes the
    /// ring look fuller than it is.
    cached_head: usize,
}

/// The consuming handle: `Send`, not `Clone` (one consumer).
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    /// Our copy of `shared.head` (only we write it).
    head: usize,
    /// Last `shared.tail` we read; may be stale (lower than the real tail), which only makes the
    /// ring look emptier than it is.
    cached_tail: usize,
}

impl<T> Producer<T> {
    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.shared.mask + 1
    }

    /// Appends `value`, or gives it back when the ring is full (back-pressure: nothing lost).
    ///
    /// # Errors
    /// `Err(value)` when the ring holds `capacity` items.
    pub fn push(&mut self, value: T) -> Result<(), T> {
        if self.tail.wrapping_sub(self.cached_head) == self.capacity() {
            // Acquire: the consumer's reads of the slots it released happen-before our write.
            self.cached_head = self.shared.head.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.cached_head) == self.capacity() {
                return Err(value);
            }
        }
        let slot = &self.shared.slots[self.tail & self.shared.mask];
        // SAFETY: slot `tail` is outside `head..tail`, so the consumer does not touch it until
        // we publish the new tail below.
        slot.with_mut(|p| unsafe { (*p).write(value) });
        self.tail = self.tail.wrapping_add(1);
        // Release: the slot write happens-before the consumer's acquire load of `tail`.
        // PLANT: RingRelaxedTail stores Relaxed, so the slot write is not published.
        let order = plant!(RingRelaxedTail, Ordering::Relaxed, Ordering::Release);
        self.shared.tail.store(self.tail, order);
        Ok(())
    }

    /// Free slots as of now (may be an underestimate while the consumer pops).
    pub fn free_slots(&mut self) -> usize {
        self.cached_head = self.shared.head.load(Ordering::Acquire);
        self.capacity() - self.tail.wrapping_sub(self.cached_head)
    }

    /// `true` when the consumer handle has been dropped.
    pub fn is_abandoned(&self) -> bool {
        Arc::strong_count(&self.shared) < self.shared.handles
    }
}

impl<T> Consumer<T> {
    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.shared.mask + 1
    }

    /// Removes the oldest item, or `None` when the ring is empty.
    pub fn pop(&mut self) -> Option<T> {
        if self.head == self.cached_tail {
            // Acquire: pairs with the producer's release store of `tail`, so the slot's
            // contents are visible before we read them.
            self.cached_tail = self.shared.tail.load(Ordering::Acquire);
            if self.head == self.cached_tail {
                return None;
            }
        }
        let slot = &self.shared.slots[self.head & self.shared.mask];
        // SAFETY: `head < tail`, so the slot holds an initialised item that the producer will
        // not touch until we publish the new head.
        let value = slot.with(|p| unsafe { (*p).assume_init_read() });
        self.head = self.head.wrapping_add(1);
        // Release: our read of the slot happens-before the producer's reuse of it.
        self.shared.head.store(self.head, Ordering::Release);
        Some(value)
    }

    /// Items available as of now (may be an underestimate while the producer pushes).
    pub fn len(&mut self) -> usize {
        self.cached_tail = self.shared.tail.load(Ordering::Acquire);
        self.cached_tail.wrapping_sub(self.head)
    }

    /// `true` when no item is available as of now.
    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    /// `true` when the producer handle has been dropped.
    pub fn is_abandoned(&self) -> bool {
        Arc::strong_count(&self.shared) < self.shared.handles
    }
}

impl<T> core::fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.capacity())
            .field("tail", &self.tail)
            .finish()
    }
}

impl<T> core::fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.capacity())
            .field("head", &self.head)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
