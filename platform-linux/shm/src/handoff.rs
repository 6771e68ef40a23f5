//! The state word of one large send: the only thing the sender and the receiver of a lent
//! buffer share besides the mailbox. It lives in the sender's segment, one per send in flight
//! (`SEND_WORDS`), and carries the send's generation in its high half, so a word reused for a
//! later send is never moved by a message about an earlier one.
//!
//! ```text
//!            (0) Arm: sender, isend (new generation)
//!   (free) ─────────────────────────────────────────► PENDING
//!
//!            (1) Claim: receiver, match              (2) Finish: receiver, after the read
//!   PENDING ──────────────────────────────► COPYING ─────────────────────────────────► DONE
//!    │  │                                     │
//!    │  │                                     │ (5) Fail: receiver, the read failed
//!    │  │                                     └──────────────────────────────────────► FAILED
//!    │  │ (3) Reject: receiver, sizes differ (the buffer is never read)
//!    │  └────────────────────────────────────────────────────────────────────────────► REJECTED
//!    │ (4) Withdraw: sender, cancel / close
//!    └───────────────────────────────────────────────────────────────────────────────► CANCELLED
//! ```
//!
//! Edges (1), (3) and (4) leave `PENDING` by compare-and-swap on the whole word (generation
//! and state), so exactly one of them happens. (2) and (5) are release stores by the receiver
//! that took (1). The final states are read by the sender's `test`, which then frees the word.
//!
//! A receiver that finds the word withdrawn, or already armed for a later send (another
//! generation), drops the message: it does not count.
//!
//! The receiver's process can write anything into the word. The sender never trusts it beyond
//! a value: a word with another generation or an unknown state is reported as a corrupt peer,
//! and the sender's buffer is never touched by the word's value (the receiver reads it through
//! the kernel, which checks every access).
//!
//! Seed: the completion half of `ncclNet->isend` / `ncclNet->test` (§1, §4); the same state
//! machine as the in-memory transport's (`proxy_core::progress::mem_transport::handoff`),
//! across processes.

use core::fmt;

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// The state of one large send, the low half of its word.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendState {
    /// Posted, not matched, not withdrawn: the buffer is lent.
    Pending = 1,
    /// The receiver is reading the buffer.
    Copying = 2,
    /// The receiver has read the bytes: the buffer is free.
    Done = 3,
    /// The sender withdrew it before any receiver claimed it: never read.
    Cancelled = 4,
    /// The receiver's receive had another size: never read.
    Rejected = 5,
    /// The receiver's read failed (the kernel refused it): the receive failed too.
    Failed = 6,
}

impl SendState {
    fn from_low(low: u32) -> Option<Self> {
        Some(match low {
            1 => Self::Pending,
            2 => Self::Copying,
            3 => Self::Done,
            4 => Self::Cancelled,
            5 => Self::Rejected,
            6 => Self::Failed,
            _ => return None,
        })
    }
}

/// One legal transition (the numbered edges of the diagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    /// (1) `PENDING => COPYING`, receiver.
    Claim,
    /// (2) `COPYING => DONE`, receiver.
    Finish,
    /// (3) `PENDING => REJECTED`, receiver.
    Reject,
    /// (4) `PENDING => CANCELLED`, sender.
    Withdraw,
    /// (5) `COPYING => FAILED`, receiver.
    Fail,
}

impl Edge {
    /// The edge's source and target: the one table of legal edges.
    const fn ends(self) -> (SendState, SendState) {
        match self {
            Self::Claim => (SendState::Pending, SendState::Copying),
            Self::Finish => (SendState::Copying, SendState::Done),
            Self::Reject => (SendState::Pending, SendState::Rejected),
            Self::Withdraw => (SendState::Pending, SendState::Cancelled),
            Self::Fail => (SendState::Copying, SendState::Failed),
        }
    }
}

/// What a refused edge found in the word instead of its source state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The generation in the word.
    pub generation: u32,
    /// The state in the word (`None`: a value no state has).
    pub state: Option<SendState>,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.state {
            Some(s) => write!(f, "{s:?} (generation {})", self.generation),
            None => write!(f, "an unknown state (generation {})", self.generation),
        }
    }
}

const fn pack(generation: u32, state: SendState) -> u64 {
    ((generation as u64) << 32) | state as u64
}

/// Splits a word into its generation and state.
pub fn unpack(word: u64) -> Refused {
    Refused {
        generation: (word >> 32) as u32,
        state: SendState::from_low(word as u32),
    }
}

/// Edge (0): the sender arms a free word for a new send of `generation`. Release: a receiver
/// that later sees the message (published by the mailbox's release store after this one) sees
/// the armed word.
pub fn arm(word: &AtomicU64, generation: u32) {
    log::trace!("send word g{generation}: free=>Pending");
    word.store(pack(generation, SendState::Pending), Ordering::Release);
}

/// Takes `edge` on the word of the send of `generation`: compare-and-swap from the edge's
/// source for (1), (3), (4); a release store for (2) and (5), which only the claimer takes.
/// Traces `A=>B`.
///
/// # Errors
/// The word was not in the edge's source state for this generation (the other side took
/// another edge first, or the word belongs to another send): what it holds.
pub fn transition(word: &AtomicU64, generation: u32, edge: Edge) -> Result<(), Refused> {
    let (from, to) = edge.ends();
    let (old, new) = (pack(generation, from), pack(generation, to));
    let r = match edge {
        // PLANT: ShmClaimByLoadStore reads, then stores: both sides can leave PENDING.
        Edge::Claim | Edge::Reject | Edge::Withdraw
            if crate::plant!(ShmClaimByLoadStore, true, false) =>
        {
            let seen = word.load(Ordering::Acquire);
            if seen == old {
                word.store(new, Ordering::Release);
                Ok(())
            } else {
                Err(unpack(seen))
            }
        }
        Edge::Claim | Edge::Reject | Edge::Withdraw => word
            .compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
            .map_err(unpack),
        Edge::Finish | Edge::Fail => {
            word.store(new, Ordering::Release);
            Ok(())
        }
    };
    match &r {
        Ok(()) => log::trace!("send word g{generation}: {from:?}=>{to:?}"),
        Err(found) => log::trace!("send word g{generation}: {edge:?} refused, found {found}"),
    }
    r
}

/// The sender's read of its word (acquire: after `Done`, the receiver's read of the buffer is
/// over).
///
/// # Errors
/// The word holds another generation or no state: the receiver wrote something the protocol
/// never writes.
pub fn read(word: &AtomicU64, generation: u32) -> Result<SendState, Refused> {
    let found = unpack(word.load(Ordering::Acquire));
    match found.state {
        Some(s) if found.generation == generation => Ok(s),
        _ => Err(found),
    }
}
