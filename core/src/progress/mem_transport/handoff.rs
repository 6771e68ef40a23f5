//! The one object two threads share per posted send: the message descriptor and its state word.
//!
//! The sender's endpoint creates a [`SendShared`] at `isend`, keeps one `Arc` to it in its
//! request slab and pushes another through the (sender, receiver) mailbox. From then on the two
//! endpoints talk about this send only through [`SendShared::state`]:
//!
//! ```text
//!                 (1) Claim: receiver, claim_and_copy()      (2) Finish: receiver, claim_and_copy()
//!   PENDING ─────────────────────────────────────► COPYING ─────────────────────────────────► DONE
//!    │   │
//!    │   │ (3) Reject: receiver, claim_and_copy()  (sizes differ; the buffer is never read)
//!    │   └─────────────────────────────────────────► REJECTED
//!    │
//!    │ (4) Withdraw: sender, MemTransport::cancel() / close() / drop
//!    └─────────────────────────────────────────────► CANCELLED
//! ```
//!
//! Edges (1), (3) and (4) leave `PENDING` by compare-and-swap, so exactly one of them happens:
//! either the receiver owns the buffer (and will finish), or the sender has withdrawn it and the
//! receiver will never read it. Edge (2) is a plain release store by the thread that took (1).
//! `COPYING` never outlives one call on the receiving endpoint (only a `memcpy` and a trace log
//! line run between (1) and (2)). Nothing on the sender's driving path waits for it: `cancel`
//! and `close` withdraw what is `PENDING` and leave a send being copied to finish (its next
//! `test` reports it); only the endpoint's drop waits, and only for a lent buffer being copied
//! (see `MemTransport`'s `Drop`).
//!
//! `DONE`, `CANCELLED` and `REJECTED` are final; the sender's `test` reports them and drops its
//! `Arc`.
//!
//! Seed: the completion half of `ncclNet->isend` / `ncclNet->test`, §1 and §4.

use alloc::vec::Vec;
use core::fmt;

use crate::base::sync::{AtomicU32, Ordering};

/// The state of one posted send, as stored in [`SendShared::state`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendState {
    /// Posted, not matched, not withdrawn: the sender's buffer is lent to the transport.
    Pending = 0,
    /// The receiver has claimed the message and is copying out of the sender's buffer.
    Copying = 1,
    /// The receiver has copied the bytes; the sender's buffer is free again.
    Done = 2,
    /// The sender withdrew the message before any receiver claimed it; never read.
    Cancelled = 3,
    /// The receiver matched it with a receive of a different size; never read.
    Rejected = 4,
}

impl SendState {
    /// Decodes a state word. Only the values above are ever stored.
    fn from_word(word: u32) -> Self {
        match word {
            0 => Self::Pending,
            1 => Self::Copying,
            2 => Self::Done,
            3 => Self::Cancelled,
            _ => Self::Rejected,
        }
    }
}

/// One legal transition of [`SendState`] (the numbered edges of the module diagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Edge {
    /// (1) `PENDING => COPYING`, receiver.
    Claim,
    /// (2) `COPYING => DONE`, receiver, after the copy.
    Finish,
    /// (3) `PENDING => REJECTED`, receiver, sizes differ.
    Reject,
    /// (4) `PENDING => CANCELLED`, sender.
    Withdraw,
}

impl Edge {
    /// The edge's source and target states.
    const fn endpoints(self) -> (SendState, SendState) {
        match self {
            Edge::Claim => (SendState::Pending, SendState::Copying),
            Edge::Finish => (SendState::Copying, SendState::Done),
            Edge::Reject => (SendState::Pending, SendState::Rejected),
            Edge::Withdraw => (SendState::Pending, SendState::Cancelled),
        }
    }
}

/// A byte range the `isend` caller lent to the transport.
///
/// Valid for reads of `len` bytes and unmodified until the send request is finished
/// (the [`crate::progress::net::Transport::isend`] contract); `ptr` may be dangling or null when `len == 0`.
#[derive(Clone, Copy)]
pub struct LentBuf {
    pub ptr: *const u8,
    pub len: usize,
}

// SAFETY: the range is only read, by the one receiver that won edge (1), and the state machine
// orders those reads before the sender's reuse (edge (2) release / the sender's acquire load).
// The pointer is just an address until then, so moving or sharing it between threads is sound.
unsafe impl Send for LentBuf {}
// SAFETY: as above; shared access is read-only and guarded by the state word.
unsafe impl Sync for LentBuf {}

/// Where the receiver copies from.
pub enum Payload {
    /// Small message (≤ `EAGER_MAX`): copied at `isend`, owned by this object (a `Vec` so a
    /// reused descriptor copies into the capacity it already has).
    Copied(Vec<u8>),
    /// Large message: still in the sender's buffer (single copy at match time).
    Lent(LentBuf),
}

/// The part of a posted send that both endpoints reach (through `crate::base::sync::Arc`).
pub struct SendShared {
    /// A [`SendState`] as `u32` (32-bit word: `thumbv7em` has no 64-bit atomics).
    state: AtomicU32,
    /// The 64-bit matching tag (docs/design.md §5). Immutable.
    pub tag: u64,
    /// The bytes to deliver. Immutable while shared.
    payload: Payload,
    /// A copy buffer kept while the payload is lent, for the next eager reuse.
    spare: Vec<u8>,
}

impl fmt::Debug for SendShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendShared")
            .field("state", &self.state())
            .field("tag", &self.tag)
            .field("len", &self.len())
            .field("eager", &matches!(self.payload, Payload::Copied(_)))
            .finish()
    }
}

/// What the receiver's attempt to take a message ended in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The bytes are in the receive buffer (this many).
    Copied(usize),
    /// Sizes differ: both requests fail; nothing was read or written.
    Rejected,
    /// The sender withdrew the message first: drop it; the receive stays posted.
    Withdrawn,
}

impl SendShared {
    /// A new descriptor in state `PENDING`.
    pub fn new(tag: u64, payload: Payload) -> Self {
        Self {
            state: AtomicU32::new(SendState::Pending as u32),
            tag,
            payload,
            spare: Vec::new(),
        }
    }

    /// Makes this descriptor a new `PENDING` send of `len` bytes at `buf` with `tag`: the
    /// sender's reuse of a descriptor that no other endpoint holds any more (`&mut` proves it:
    /// the caller got it from `Arc::get_mut`). With `eager`, the bytes are copied into the
    /// buffer the descriptor already has (allocating only when it is too small); otherwise
    /// the buffer is lent, and the copy buffer is kept for a later eager reuse.
    ///
    /// # Safety
    /// With `eager` and `len > 0`, `buf` must be readable for `len` bytes for this call.
    /// Without `eager`, `buf` as [`LentBuf`] requires.
    ///
    /// (Under `--cfg loom` the endpoint does not reuse descriptors: loom's `Arc` has no
    /// `get_mut`; the handoff it models is the same either way.)
    pub unsafe fn reuse(&mut self, tag: u64, buf: *const u8, len: usize, eager: bool) {
        let mut copy = match core::mem::replace(&mut self.payload, Payload::Copied(Vec::new())) {
            Payload::Copied(v) => v,
            Payload::Lent(_) => core::mem::take(&mut self.spare),
        };
        if eager {
            copy.clear();
            if len > 0 {
                // SAFETY: this function's contract: `buf` is readable for `len` bytes.
                copy.extend_from_slice(unsafe { core::slice::from_raw_parts(buf, len) });
            }
            self.payload = Payload::Copied(copy);
        } else {
            self.spare = copy;
            self.payload = Payload::Lent(LentBuf { ptr: buf, len });
        }
        self.tag = tag;
        // A fresh word: no other endpoint holds this descriptor, so nothing races with it.
        self.state = AtomicU32::new(SendState::Pending as u32);
    }

    /// `true` while the payload is the sender's lent buffer (a large message): only such a
    /// send makes a sender that goes away wait for a copy under way. An eager send's bytes
    /// live in this descriptor, which the receiver keeps alive by its own `Arc`.
    pub fn is_lent(&self) -> bool {
        matches!(self.payload, Payload::Lent(_))
    }

    /// `true` for a zero-byte message.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The message size in bytes.
    pub fn len(&self) -> usize {
        match &self.payload {
            Payload::Copied(b) => b.len(),
            Payload::Lent(l) => l.len,
        }
    }

    /// The current state, with acquire ordering.
    ///
    /// Acquire pairs with the release store of edge (2): once the sender reads `DONE` here,
    /// every read the receiver made of the sender's buffer happens-before the sender's next
    /// write to it. (For `CANCELLED` and `REJECTED` the receiver never read the buffer.)
    pub fn state(&self) -> SendState {
        SendState::from_word(self.state.load(Ordering::Acquire))
    }

    /// Takes `edge`. Returns `Err(actual)` when the word was not in the edge's source state
    /// (only possible for the compare-and-swap edges (1), (3), (4)).
    ///
    /// Every transition goes through here and logs `state=A=>B` at trace level.
    fn transition(&self, edge: Edge) -> Result<(), SendState> {
        let (from, to) = edge.endpoints();
        let result = match edge {
            // (1) Claim. Relaxed on success: the receiver's coming reads of the payload need the
            // sender's writes (made before `isend`) to happen-before them, and that is already
            // given by the mailbox (the sender pushed this descriptor with a release store of the
            // ring's tail after those writes; we popped it with an acquire load). Exclusivity
            // against (4) comes from the read-modify-write itself, not from its ordering.
            // Relaxed on failure: seeing `CANCELLED` we drop the descriptor without reading.
            Edge::Claim => self
                .state
                .compare_exchange(from as u32, to as u32, Ordering::Relaxed, Ordering::Relaxed)
                .map(|_| ()),
            // (2) Finish. Release: our reads of the sender's buffer happen-before the sender's
            // acquire load that sees `DONE` and then reuses or frees that buffer.
            Edge::Finish => {
                self.state.store(to as u32, Ordering::Release);
                Ok(())
            }
            // (3) Reject. Relaxed: nothing was read or written; the sender learns only the
            // verdict, and its own sizes are its own.
            Edge::Reject => self
                .state
                .compare_exchange(from as u32, to as u32, Ordering::Relaxed, Ordering::Relaxed)
                .map(|_| ()),
            // (4) Withdraw. Relaxed on success: winning the CAS from `PENDING` means no receiver
            // took (1), so no receiver ever read the buffer; there is nothing to synchronise
            // with. Acquire on failure: if the word is `DONE`, the sender will treat the buffer
            // as free, which needs the receiver's reads ordered before (pairs with (2)).
            // PLANT: HandoffWithdrawByLoadStore withdraws by a load, a check and a plain store,
            // so a receiver's claim can slip in between and both sides win.
            Edge::Withdraw => plant!(
                HandoffWithdrawByLoadStore,
                {
                    let now = self.state.load(Ordering::Acquire);
                    if now == from as u32 {
                        crate::base::sync::spin_loop();
                        self.state.store(to as u32, Ordering::Relaxed);
                        Ok(())
                    } else {
                        Err(now)
                    }
                },
                self.state
                    .compare_exchange(from as u32, to as u32, Ordering::Relaxed, Ordering::Acquire)
                    .map(|_| ())
            ),
        };
        match result {
            Ok(()) => {
                log::trace!("mem: send tag={:#x} state={:?}=>{:?}", self.tag, from, to);
                Ok(())
            }
            Err(actual) => Err(SendState::from_word(actual)),
        }
    }

    /// Receiver side: tries to take this message into `dst` (`dst_len` bytes), taking (1)+(2)
    /// or (3), or finding that the sender took (4).
    ///
    /// # Safety
    /// `dst` must be valid for writes of `dst_len` bytes and not accessed by anything else during
    /// the call (the `irecv` contract). It may overlap the message payload: a comm's send to its
    /// own rank whose source and destination overlap in its registered memory is a call that
    /// the safe `Comm::start` accepts, so the copy is a `memmove` (the received bytes are then
    /// whatever the overlap leaves, never undefined behaviour). The caller must be the one
    /// receiver of this descriptor (it popped it from the mailbox).
    pub unsafe fn claim_and_copy(&self, dst: *mut u8, dst_len: usize) -> Claim {
        let len = self.len();
        if len != dst_len {
            return match self.transition(Edge::Reject) {
                Ok(()) => Claim::Rejected,
                Err(state) => {
                    debug_assert_eq!(state, SendState::Cancelled, "one receiver per message");
                    Claim::Withdrawn
                }
            };
        }
        if let Err(state) = self.transition(Edge::Claim) {
            debug_assert_eq!(state, SendState::Cancelled, "one receiver per message");
            return Claim::Withdrawn;
        }
        // Nothing between the claim and the finish may panic or block: the sender may be
        // spinning on `COPYING` (close / drop).
        if len > 0 {
            let src = match &self.payload {
                Payload::Copied(b) => b.as_ptr(),
                Payload::Lent(l) => l.ptr,
            };
            // SAFETY: `src` is readable for `len` bytes: either our own boxed copy (alive while
            // `self` is), or the sender's lent buffer, which the `isend` caller keeps valid and
            // unmodified until the request is finished, and it cannot finish while the word is
            // `COPYING` (we won (1), so (4) cannot happen and (2) is ours). `dst` is writable for
            // `dst_len == len` bytes (this function's contract). `len > 0`, so neither pointer
            // may be null or dangling. `copy`, not `copy_nonoverlapping`: the ranges may overlap
            // (a self-send within one comm's registered memory, see the contract).
            unsafe { core::ptr::copy(src, dst, len) };
        }
        // A failure here is impossible: we hold `COPYING`, which only we leave.
        let _ = self.transition(Edge::Finish);
        Claim::Copied(len)
    }

    /// Sender side: `true` when the receiver can no longer touch the buffer, i.e. the word is
    /// final (`DONE`, `CANCELLED` or `REJECTED`), withdrawing the message first if it is still
    /// `PENDING`. `false` means `COPYING`: ask again (the copy is one `memcpy` away from done).
    pub fn withdraw(&self) -> bool {
        !matches!(self.try_withdraw(), Err(SendState::Copying))
    }

    /// Sender side: takes edge (4) if the word is still `PENDING`; `Err(actual)` otherwise
    /// (`DONE` read this way is acquired, see [`Edge::Withdraw`]).
    pub fn try_withdraw(&self) -> Result<(), SendState> {
        self.transition(Edge::Withdraw)
    }

    /// `true` once the sender withdrew it (a relaxed peek, used to prune the unexpected list:
    /// the caller only drops the descriptor, never reads the payload, after a `true`).
    pub fn is_withdrawn(&self) -> bool {
        self.state.load(Ordering::Relaxed) == SendState::Cancelled as u32
    }
}
