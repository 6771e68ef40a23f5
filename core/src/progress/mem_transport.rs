//! The in-memory transport: ranks in one address space exchange real bytes by `(peer, tag)`,
//! with no mutex anywhere (the embedded default, `no_std` + `alloc`).
//!
//! # Shape
//! * A [`MemFabric`] for `nranks` ranks owns, for every ordered (sender, receiver) pair, one
//!   bounded single-producer single-consumer mailbox ([`crate::base::ring`]). Each rank takes its
//!   [`MemTransport`] endpoint once ([`MemFabric::endpoint`]): the endpoint is the one producer
//!   of its outgoing mailboxes and the one consumer of its incoming ones. Endpoints are `Send`;
//!   each is used by one thread at a time (its rank's worker, docs/design.md §8), different endpoints
//!   by different threads.
//! * A send becomes one descriptor (`SendShared`: tag, payload, a 32-bit state word) shared by
//!   the two endpoints through [`crate::base::sync::Arc`]; the sender keeps one reference in its
//!   request slab and pushes the other through the mailbox.
//! * The receiver does all matching and all copying. `poll` drains the incoming mailboxes whose
//!   senders flagged it since the last poll (one bit per sender, set after the push:
//!   `mem_transport/arrivals.rs`), and `test` and `irecv` drain their own peer's; a message
//!   that finds no posted receive goes to the *unexpected list*; a receive that finds no
//!   unexpected message goes to the *posted list*.
//!   Both are kept per peer and per tag in posting order, so the *k*-th send from A to B with
//!   tag *t* meets the *k*-th receive on B from A with tag *t* (withdrawn sends do not count),
//!   whatever order the two sides post in.
//! * **Eager** messages (size ≤ [`EAGER_MAX`]) are copied into the descriptor at `isend`, which
//!   answers `payload_copied: true`: the sender's buffer is free at once (what lets
//!   `early_send_completion` apply, docs/design.md §5). **Large** messages stay in the sender's
//!   buffer and are copied exactly once, sender's buffer → receiver's buffer, by the receiver
//!   when both sides are posted (no staging copy); the sender's buffer stays lent until the
//!   receiver confirms the copy through the state word. In both cases the send *request* reports
//!   `Done` only when the receiver has taken the bytes.
//! * The state word (`PENDING → COPYING → DONE` by the receiver, `PENDING → REJECTED` by the
//!   receiver on a size mismatch, `PENDING → CANCELLED` by the sender's cancel) is the only
//!   cross-thread handoff besides the mailbox and its arrival flag; its diagram and memory orderings are in
//!   `mem_transport/handoff.rs`. A cancelled send reports `Cancelled` only once the receiver can
//!   no longer touch its buffer: if the receiver is mid-copy, `test` answers `Pending` until the
//!   copy ends and then `Done` (the cancel lost the race).
//!
//! # Back-pressure and limits
//! `isend` answers "cannot start now" (`Ok(None)`) when the mailbox to the peer is full (the
//! receiver has not polled), or when the endpoint already has [`MAX_REQUESTS`] requests in
//! flight; nothing is lost, the caller retries. The unexpected list is unbounded (bounded in
//! practice by what the peers post). The fabric makes `nranks²` mailboxes up front, so it is
//! meant for small rank counts (at most [`MAX_FABRIC_RANKS`]).
//!
//! # Errors
//! A size mismatch fails both requests (`test` → [`NetError`], the receive's message says
//! "truncation" when the receive is the smaller). A request whose peer endpoint was dropped or
//! closed fails at its next `test` (what the peer had already sent is still delivered first).
//! Bad arguments (peer out of range, size over [`MAX_MSG_SIZE`], null buffer with a non-zero
//! size, unknown request id) are [`NetError::invalid`].
//!
//! # Examples
//! ```
//! use proxy_core::progress::mem_transport::MemFabric;
//! use proxy_core::progress::net::{TestOutcome, Transport};
//!
//! let fabric = MemFabric::new(2).unwrap();
//! let (mut a, mut b) = (fabric.endpoint(0).unwrap(), fabric.endpoint(1).unwrap());
//! let src = *b"hello";
//! let mut dst = [0u8; 5];
//! // SAFETY: both buffers outlive their requests and are not touched until `test` says done.
//! let s = unsafe { a.isend(1, src.as_ptr(), 5, 42) }.unwrap().unwrap();
//! let r = unsafe { b.irecv(0, dst.as_mut_ptr(), 5, 42) }.unwrap().unwrap();
//! assert!(s.payload_copied); // 5 bytes ≤ EAGER_MAX: copied at post
//! assert_eq!(b.test(r.request).unwrap(), TestOutcome::Done { size: 5 });
//! assert_eq!(a.test(s.request).unwrap(), TestOutcome::Done { size: 5 });
//! assert_eq!(&dst, b"hello");
//! ```
//!
//! Seed: the `ncclNet` plugin the proxy ops drive (`ncclNet->{isend,irecv,test}`, §1 and §4),
//! here without a network; docs/design.md §2 (the in-memory transport lives in `core`), §5 (tags,
//! sizes, early send completion), §8 (one thread per endpoint, `poll` once per round of stream calls).

mod arrivals;
mod endpoint;
#[doc(hidden)]
pub mod handoff; // public for the loom models in `loom-tests` (model 7); not a stable API
#[cfg(all(test, not(loom)))]
mod tests;

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::vec::Vec;
use core::fmt;

use crate::base::bell::BellSlot;
use crate::base::ring::{self, Consumer, Producer};
use crate::base::slab::Slab;
use crate::base::sync::{fence, spin_loop, Arc, AtomicBool, Ordering, PlainArc, UnsafeCell};
use crate::progress::net::{NetError, Posted, RequestId, TestOutcome, Transport, MAX_NRANKS};
use arrivals::Arrivals;
use handoff::{Claim, LentBuf, Payload, SendShared, SendState};

/// Largest message, in bytes, that `isend` copies into the mailbox at post (4 KiB, inclusive).
///
/// Sends of at most this many bytes answer `payload_copied: true` and the caller may reuse the
/// buffer as soon as `isend` returns; larger sends lend the buffer until the request finishes.
pub const EAGER_MAX: usize = 4096;

/// Slots per (sender, receiver) mailbox in real builds (one per in-flight send not yet drained
/// by the receiver; 128 matches the proxy op's request-tracker ring).
pub const MAILBOX_CAPACITY_REAL: usize = 128;

/// Slots per (sender, receiver) mailbox used by [`MemFabric::new`]: [`MAILBOX_CAPACITY_REAL`],
/// shrunk to 2 under `--cfg loom` so models reach the full-mailbox edge in few steps.
#[cfg(not(loom))]
pub const MAILBOX_CAPACITY: usize = MAILBOX_CAPACITY_REAL;
/// Slots per (sender, receiver) mailbox used by [`MemFabric::new`]: [`MAILBOX_CAPACITY_REAL`],
/// shrunk to 2 under `--cfg loom` so models reach the full-mailbox edge in few steps.
#[cfg(loom)]
pub const MAILBOX_CAPACITY: usize = 2;

/// Largest message in bytes ([`Transport::max_msg_size`]): `u32::MAX` (4 GiB − 1), or
/// `isize::MAX` (2 GiB − 1) on 32-bit targets, the largest object Rust can address there.
pub const MAX_MSG_SIZE: u64 = if (isize::MAX as u64) < u32::MAX as u64 {
    isize::MAX as u64
} else {
    u32::MAX as u64
};

/// Largest `nranks` a [`MemFabric`] accepts (it makes `nranks²` mailboxes up front).
pub const MAX_FABRIC_RANKS: u32 = 256;

/// Requests (sends + receives) one endpoint keeps in flight at most; a post beyond it answers
/// "cannot start now" until `test` releases some.
pub const MAX_REQUESTS: usize = 1 << 20;

/// Polls the endpoint's drop spins (spin hint) while a peer copies out of a lent buffer,
/// before it calls the relax hook between polls.
pub const WITHDRAW_SPIN_POLLS: u64 = 1 << 10;
/// Polls after which the endpoint's drop warns that it still waits for a peer's copy.
pub const WITHDRAW_WARN_POLLS: u64 = 1 << 20;

/// `poll` prunes withdrawn messages from the unexpected list every this many calls.
const SWEEP_INTERVAL: u32 = 256;

/// Finished send descriptors an endpoint keeps for reuse.
pub const SPARE_DESCRIPTORS: usize = 1024;

/// Per peer, the posted and unexpected lists keep the (empty) queue of a tag whose last
/// request or message left, so the next one with that tag allocates nothing; the sweep drops
/// empty queues only when a peer's map holds more than this many tags.
pub const KEEP_EMPTY_TAGS: usize = 1024;
/// Room a tag's posted and unexpected queues get when the tag is first seen (a steady shape
/// has one or two messages per tag in flight: no queue grows later).
const TAG_QUEUE_CAPACITY: usize = 4;

/// What travels through a mailbox: the descriptor of one send.
type Msg = Arc<SendShared>;

/// The ring handles of one endpoint.
struct Parts {
    /// Producer of mailbox (this rank → receiver), indexed by receiver rank.
    tx: Vec<Producer<Msg>>,
    /// Consumer of mailbox (sender → this rank), indexed by sender rank.
    rx: Vec<Consumer<Msg>>,
    /// Every rank's bell (shared by the fabric and all its endpoints).
    bells: PlainArc<[BellSlot]>,
    /// Every receiver's arrival flags (shared likewise).
    arrivals: PlainArc<Arrivals>,
}

/// One rank's endpoint, waiting to be taken.
struct RankSlot {
    /// `false` until [`MemFabric::endpoint`] takes the endpoint; set once, by compare-and-swap.
    taken: AtomicBool,
    /// `Some` until taken. Accessed only by the one caller that won the CAS on `taken` (and by
    /// the fabric's own drop, which has exclusive access).
    parts: UnsafeCell<Option<Parts>>,
}

// SAFETY: the only shared-reference access to `parts` is in `MemFabric::endpoint`, after winning
// the `false => true` CAS on `taken`, which happens once per slot: at most one thread ever
// touches the cell through `&self`. Everything in `Parts` is `Send`.
unsafe impl Sync for RankSlot {}

/// The shared object that links the ranks of one address space: one bounded SPSC mailbox per
/// ordered (sender, receiver) pair, including a rank to itself.
///
/// Created once, shared by `Arc`; each rank takes its [`MemTransport`] with
/// [`MemFabric::endpoint`]. The fabric may be dropped once the endpoints are taken: they keep
/// the mailboxes alive.
///
/// Seed: none (stands in for the network under `ncclNet`, §1).
pub struct MemFabric {
    nranks: u32,
    mailbox_capacity: usize,
    /// One per rank.
    ranks: Box<[RankSlot]>,
    /// Rank `r`'s bell: rung after a message is pushed into one of `r`'s mailboxes and after a
    /// receiver finished copying out of a buffer `r` lent ([`MemFabric::bell`]).
    bells: PlainArc<[BellSlot]>,
}

impl MemFabric {
    /// A fabric for `nranks` ranks with [`MAILBOX_CAPACITY`] slots per mailbox.
    ///
    /// # Errors
    /// [`NetError::invalid`] when `nranks` is 0 or above [`MAX_FABRIC_RANKS`].
    pub fn new(nranks: u32) -> Result<Arc<Self>, NetError> {
        Self::with_mailbox_capacity(nranks, MAILBOX_CAPACITY)
    }

    /// A fabric for `nranks` ranks with `capacity` slots per mailbox (in-flight sends per pair
    /// that the receiver has not drained yet).
    ///
    /// # Errors
    /// [`NetError::invalid`] when `nranks` is 0 or above [`MAX_FABRIC_RANKS`], or `capacity` is
    /// not a power of two (which includes 0).
    pub fn with_mailbox_capacity(nranks: u32, capacity: usize) -> Result<Arc<Self>, NetError> {
        const _: () = assert!(MAX_FABRIC_RANKS <= MAX_NRANKS);
        if nranks == 0 || nranks > MAX_FABRIC_RANKS {
            return Err(NetError::invalid(
                None,
                format!("mem fabric: nranks {nranks} not in 1..={MAX_FABRIC_RANKS}"),
            ));
        }
        if !capacity.is_power_of_two() {
            return Err(NetError::invalid(
                None,
                format!("mem fabric: mailbox capacity {capacity} is not a power of two"),
            ));
        }
        let n = nranks as usize;
        let mut tx: Vec<Vec<Producer<Msg>>> = (0..n).map(|_| Vec::with_capacity(n)).collect();
        let mut rx: Vec<Vec<Consumer<Msg>>> = (0..n).map(|_| Vec::with_capacity(n)).collect();
        // Sender-major order, so `rx[receiver]` fills in sender order: `rx[r][s]` is (s → r).
        for sender_tx in tx.iter_mut() {
            for receiver_rx in rx.iter_mut() {
                let (p, c) = ring::channel(capacity);
                sender_tx.push(p);
                receiver_rx.push(c);
            }
        }
        let bells: PlainArc<[BellSlot]> = (0..n).map(|_| BellSlot::new()).collect();
        let arrivals = PlainArc::new(Arrivals::new(n));
        let ranks: Vec<RankSlot> = tx
            .into_iter()
            .zip(rx)
            .map(|(tx, rx)| RankSlot {
                taken: AtomicBool::new(false),
                parts: UnsafeCell::new(Some(Parts {
                    tx,
                    rx,
                    bells: bells.clone(),
                    arrivals: arrivals.clone(),
                })),
            })
            .collect();
        Ok(Arc::new(Self {
            nranks,
            mailbox_capacity: capacity,
            ranks: ranks.into_boxed_slice(),
            bells,
        }))
    }

    /// Number of ranks.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// Slots per mailbox.
    pub fn mailbox_capacity(&self) -> usize {
        self.mailbox_capacity
    }

    /// Rank `rank`'s bell (`None` out of range): wire the bell of the thread that drives the
    /// rank's endpoint (`base::bell`), and it is rung whenever a message arrives for the rank
    /// and whenever a receiver has finished with a buffer the rank lent (its send completes),
    /// so that thread may sleep while it waits for the fabric. Unwired: nobody is rung (the
    /// driving thread polls).
    pub fn bell(&self, rank: u32) -> Option<&BellSlot> {
        self.bells.get(rank as usize)
    }

    /// Takes rank `rank`'s endpoint. Each rank's endpoint can be taken once.
    ///
    /// # Errors
    /// [`NetError::invalid`] when `rank >= nranks` or the endpoint was already taken.
    pub fn endpoint(&self, rank: u32) -> Result<MemTransport, NetError> {
        let Some(slot) = self.ranks.get(rank as usize) else {
            return Err(NetError::invalid(
                None,
                format!(
                    "mem fabric: rank {rank} out of range (nranks {})",
                    self.nranks
                ),
            ));
        };
        // Relaxed would do for exclusivity (one RMW wins); Acquire is free here and orders the
        // take after the winner's view of the fabric, whatever path made it reachable. The
        // parts themselves were written before the fabric was shared (Arc / thread spawn give
        // that happens-before).
        if slot
            .taken
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(NetError::invalid(
                None,
                format!("mem fabric: endpoint of rank {rank} already taken"),
            ));
        }
        // SAFETY: we won the `false => true` CAS on `taken`, which happens once per slot, so no
        // other access to `parts` exists or will exist except the fabric's drop (exclusive).
        let parts = slot.parts.with_mut(|p| unsafe { (*p).take() });
        let Some(parts) = parts else {
            // Unreachable: `parts` is `Some` until the one winner takes it.
            return Err(NetError::failure(
                None,
                format!("mem fabric: endpoint of rank {rank} missing"),
            ));
        };
        Ok(MemTransport::new(rank, self.nranks, parts))
    }
}

impl fmt::Debug for MemFabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let taken = self
            .ranks
            .iter()
            .filter(|s| s.taken.load(Ordering::Relaxed))
            .count();
        f.debug_struct("MemFabric")
            .field("nranks", &self.nranks)
            .field("mailbox_capacity", &self.mailbox_capacity)
            .field("endpoints_taken", &taken)
            .finish()
    }
}

/// A receive buffer lent by the `irecv` caller: writable for `len` bytes until the request is
/// finished; `ptr` may be null when `len == 0`.
#[derive(Clone, Copy)]
struct RecvBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: only the endpoint that owns the request writes through it (the receiver does every
// copy), from whichever one thread holds the endpoint; the pointer itself is just an address.
unsafe impl Send for RecvBuf {}

/// Where a receive stands (receives are local to their endpoint: no atomics).
enum RecvState {
    /// In the posted list, waiting for its message.
    Posted,
    /// Filled with this many bytes.
    Done(usize),
    /// Matched a message of another size (reported by `test`).
    Failed(NetError),
    /// Withdrawn by `cancel` (or `close`) before a message arrived.
    Cancelled,
}

/// One in-flight request of an endpoint.
enum Request {
    Send {
        peer: u32,
        msg: Msg,
        /// Withdrawn because the peer's endpoint is gone (reported as an error, not as
        /// `Cancelled`).
        peer_gone: bool,
    },
    Recv {
        peer: u32,
        tag: u64,
        buf: RecvBuf,
        state: RecvState,
    },
}

impl Request {
    fn peer(&self) -> u32 {
        match self {
            Request::Send { peer, .. } | Request::Recv { peer, .. } => *peer,
        }
    }
}

/// One rank's endpoint of a [`MemFabric`]; implements [`Transport`].
///
/// `Send`, not `Sync`: one thread at a time drives it (docs/design.md §8).
/// [`Transport::close`] and [`Transport::cancel`] withdraw every send still unmatched without
/// waiting (a send the receiver is copying finishes, and its `test` says so). Dropping the
/// endpoint withdraws every send and waits out a copy the receiver may be in the middle of
/// out of a lent buffer (spin, then the relax hook, [`MemTransport::set_relax`]), so no peer
/// touches this endpoint's buffers afterwards; the peers' requests with this rank then fail at
/// their next `test` instead of staying pending.
///
/// Seed: one comm's `ncclNet` instance (`isend` / `irecv` / `test`, §1 and §4).
pub struct MemTransport {
    rank: u32,
    nranks: u32,
    /// Producer of mailbox (self → r), indexed by `r`.
    tx: Vec<Producer<Msg>>,
    /// Consumer of mailbox (s → self), indexed by `s`.
    rx: Vec<Consumer<Msg>>,
    /// Per peer, per tag: slab indices of posted receives, in posting order. A queue may be
    /// empty (kept for the tag's next receive; see [`KEEP_EMPTY_TAGS`]).
    posted: Vec<BTreeMap<u64, VecDeque<u32>>>,
    /// Per peer, per tag: messages that arrived before their receive, in arrival order. A
    /// queue may be empty (kept for reuse, as in `posted`).
    unexpected: Vec<BTreeMap<u64, VecDeque<Msg>>>,
    /// Messages in `unexpected`.
    unexpected_len: usize,
    slab: Slab<Request>,
    /// Descriptors of finished sends, kept for reuse by the next `isend` (so a steady state of
    /// sends allocates no descriptor and, for eager sends, no payload copy buffer).
    spare: Vec<Msg>,
    /// `poll` calls since the last prune of withdrawn unexpected messages.
    polls_since_sweep: u32,
    /// Set by `close`: posts fail, `poll` does nothing.
    closed: bool,
    /// Called between polls while the drop waits for a peer's copy (after the spin phase).
    relax: fn(),
    /// Every rank's bell ([`MemFabric::bell`]).
    bells: PlainArc<[BellSlot]>,
    /// Every receiver's arrival flags (`mem_transport/arrivals.rs`): `isend` flags the
    /// receiver after its push, `poll` drains only the flagged mailboxes.
    arrivals: PlainArc<Arrivals>,
}

// Compile-time check: the endpoint can move to its worker thread.
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<MemTransport>();
};
