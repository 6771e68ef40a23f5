//! Arrival flags: which of a receiver's mailboxes may hold something, so `poll` looks into those
//! and not into all `nranks` of them.
//!
//! Every receiver has one bit per sender, in 32-bit words (`thumbv7em` has no 64-bit atomics),
//! each word on its own cache line. The handoff, in two numbered steps per side:
//!
//! ```text
//! sender s → receiver r                      receiver r, in `poll`
//! (1) push the descriptor into (s → r)       (3) bits = word.swap(0)        [Acquire]
//!     (the ring's tail store, Release)       (4) drain (s → r) for every set bit s;
//! (2) word(r, s).fetch_or(bit s)  [Release]      a drain that stopped at the mailbox's
//!                                                capacity sets bit s again (more may wait)
//! ```
//!
//! **No lost arrival.** If (3) reads the value (2) wrote (or a later one: RMWs continue the
//! release sequence), the push in (1) happens-before the drain in (4), which then finds the
//! message. If (3) comes before (2) in the word's modification order, bit `s` is set again after
//! (3) and the next `poll` drains it. Either way a pushed message is drained by a later `poll`.
//! A flag without a message (the drain found it already drained by `irecv` or `test`, which
//! drain their own peer without looking at the flags) costs one empty drain.
//!
//! The order of (1) and (2) is the whole protocol: a sender that flags first lets (3) and (4)
//! run between its flag and its push, and the message then waits unflagged until the sender's
//! *next* send to that receiver (plant `MemArrivalBeforePush`, loom model 7, "a pushed message
//! is drained by poll alone").
//!
//! A receiver with no flag set costs one relaxed load per word in `poll` (one word up to 32
//! ranks), instead of one look into every sender's mailbox.
//!
//! Seed: none (the in-memory transport's own notification; a NIC's doorbell plays this part).

use alloc::boxed::Box;

use crate::base::sync::{AtomicU32, CachePadded, Ordering};

/// Bits per flag word.
const BITS: usize = 32;

/// The arrival flags of every receiver of one fabric (shared by all its endpoints).
pub(super) struct Arrivals {
    /// Receiver `r`'s words are `words[r * per_rank..(r + 1) * per_rank]`; bit `s % 32` of word
    /// `s / 32` stands for sender `s`.
    words: Box<[CachePadded<AtomicU32>]>,
    /// Words per receiver: `ceil(nranks / 32)`.
    per_rank: usize,
}

impl Arrivals {
    /// All flags clear, for `nranks` ranks.
    pub(super) fn new(nranks: usize) -> Self {
        let per_rank = nranks.div_ceil(BITS);
        Self {
            words: (0..nranks * per_rank)
                .map(|_| CachePadded::new(AtomicU32::new(0)))
                .collect(),
            per_rank,
        }
    }

    /// Words per receiver.
    pub(super) fn per_rank(&self) -> usize {
        self.per_rank
    }

    /// Step (2): `sender` tells `receiver` that its mailbox (sender → receiver) may hold
    /// something. Call it after the push (step (1)), never before.
    pub(super) fn flag(&self, receiver: usize, sender: usize) {
        // Release: the push before this (the ring's tail store) happens-before the receiver's
        // drain after its acquire swap that reads this value.
        self.words[receiver * self.per_rank + sender / BITS]
            .fetch_or(1 << (sender % BITS), Ordering::Release);
    }

    /// Step (3): takes receiver `receiver`'s word `word` (senders `32 * word ..`), clearing it;
    /// 0 at once, without writing, when no bit is set.
    pub(super) fn take(&self, receiver: usize, word: usize) -> u32 {
        let w = &self.words[receiver * self.per_rank + word];
        // Relaxed peek: a stale 0 only delays the drain to the next poll (the bit stays set).
        if w.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        // Acquire: pairs with the senders' release `fetch_or` after their pushes (step (2)).
        w.swap(0, Ordering::Acquire)
    }

    /// The receiver sets its own flag for `sender` again (a drain stopped at the mailbox's
    /// capacity: more may wait). Relaxed: only the receiver reads what it drains next time,
    /// and what the senders pushed is ordered by their own flags.
    pub(super) fn reflag(&self, receiver: usize, sender: usize) {
        self.words[receiver * self.per_rank + sender / BITS]
            .fetch_or(1 << (sender % BITS), Ordering::Relaxed);
    }
}

/// The senders whose bits are set in `bits`, word `word` of a receiver's flags.
pub(super) fn senders(word: usize, mut bits: u32) -> impl Iterator<Item = usize> {
    core::iter::from_fn(move || {
        if bits == 0 {
            return None;
        }
        let b = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        Some(word * BITS + b)
    })
}
