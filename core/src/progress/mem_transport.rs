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
//! * The receiver does all matching and all copying. `poll` (and `test`, and `irecv` for its own
//!   peer) drains incoming mailboxes; a message that finds no posted receive goes to the
//!   *unexpected list*; a receive that finds no unexpected message goes to the *posted list*.
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
//!   cross-thread handoff besides the mailbox; its diagram and memory orderings are in
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

#[doc(hidden)]
pub mod handoff; // public for the loom models in `loom-tests` (model 7); not a stable API
#[cfg(all(test, not(loom)))]
mod tests;

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::vec::Vec;
use core::fmt;

use crate::base::ring::{self, Consumer, Producer};
use crate::base::sync::{fence, spin_loop, Arc, AtomicBool, Ordering, UnsafeCell};
use crate::progress::net::{NetError, Posted, RequestId, TestOutcome, Transport, MAX_NRANKS};
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
        let ranks: Vec<RankSlot> = tx
            .into_iter()
            .zip(rx)
            .map(|(tx, rx)| RankSlot {
                taken: AtomicBool::new(false),
                parts: UnsafeCell::new(Some(Parts { tx, rx })),
            })
            .collect();
        Ok(Arc::new(Self {
            nranks,
            mailbox_capacity: capacity,
            ranks: ranks.into_boxed_slice(),
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

/// One slot of the request slab.
struct Entry {
    /// Bumped each time the slot is released, so a stale id is recognised (never 0).
    generation: u32,
    req: Option<Request>,
}

/// Request ids: `generation << 32 | index` into `entries`.
#[derive(Default)]
struct Slab {
    entries: Vec<Entry>,
    /// Indices of free entries.
    free: Vec<u32>,
    /// Occupied entries.
    live: usize,
}

impl Slab {
    fn is_full(&self) -> bool {
        self.live >= MAX_REQUESTS
    }

    /// Stores `req`; the caller has checked `!is_full()`. Returns (index, id).
    fn insert(&mut self, req: Request) -> (u32, RequestId) {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.entries.push(Entry {
                    generation: 1,
                    req: None,
                });
                // Fits: at most MAX_REQUESTS (< u32::MAX) entries ever exist.
                (self.entries.len() - 1) as u32
            }
        };
        let entry = &mut self.entries[index as usize];
        entry.req = Some(req);
        self.live += 1;
        (
            index,
            (u64::from(entry.generation) << 32) | u64::from(index),
        )
    }

    /// The index of live request `id`, or `None` for an unknown or released id.
    fn lookup(&self, id: RequestId) -> Option<u32> {
        let index = id as u32;
        let entry = self.entries.get(index as usize)?;
        (u64::from(entry.generation) == id >> 32 && entry.req.is_some()).then_some(index)
    }

    fn get_mut(&mut self, index: u32) -> Option<&mut Request> {
        self.entries.get_mut(index as usize)?.req.as_mut()
    }

    /// Releases entry `index` and hands back its request (the caller may keep a send's
    /// descriptor for reuse).
    fn remove(&mut self, index: u32) -> Option<Request> {
        let entry = &mut self.entries[index as usize];
        let req = entry.req.take();
        if req.is_some() {
            entry.generation = entry.generation.wrapping_add(1).max(1);
            self.free.push(index);
            self.live -= 1;
        }
        req
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut Request)> {
        self.entries
            .iter_mut()
            .enumerate()
            .filter_map(|(i, e)| e.req.as_mut().map(|r| (i as u32, r)))
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
    slab: Slab,
    /// Descriptors of finished sends, kept for reuse by the next `isend` (so a steady state of
    /// sends allocates no descriptor and, for eager sends, no payload copy buffer).
    spare: Vec<Msg>,
    /// `poll` calls since the last prune of withdrawn unexpected messages.
    polls_since_sweep: u32,
    /// Set by `close`: posts fail, `poll` does nothing.
    closed: bool,
    /// Called between polls while the drop waits for a peer's copy (after the spin phase).
    relax: fn(),
}

// Compile-time check: the endpoint can move to its worker thread.
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<MemTransport>();
};

impl MemTransport {
    fn new(rank: u32, nranks: u32, parts: Parts) -> Self {
        let n = nranks as usize;
        Self {
            rank,
            nranks,
            tx: parts.tx,
            rx: parts.rx,
            posted: (0..n).map(|_| BTreeMap::new()).collect(),
            unexpected: (0..n).map(|_| BTreeMap::new()).collect(),
            unexpected_len: 0,
            slab: Slab::default(),
            spare: Vec::new(),
            polls_since_sweep: 0,
            closed: false,
            relax: spin_loop,
        }
    }

    /// This endpoint's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks in the fabric.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// Requests posted and not yet released by `test` (sends and receives).
    pub fn outstanding(&self) -> usize {
        self.slab.live
    }

    /// Messages waiting in the unexpected list (arrived before their receive was posted).
    pub fn unexpected_len(&self) -> usize {
        self.unexpected_len
    }

    /// Checks a post's arguments; returns the size as `usize`.
    fn check_post(&self, peer: u32, null: bool, size: u64) -> Result<usize, NetError> {
        if self.closed {
            return Err(NetError::failure(
                Some(peer),
                format!("mem: rank {} is closed", self.rank),
            ));
        }
        if peer >= self.nranks {
            return Err(NetError::invalid(
                Some(peer),
                format!("mem: peer {peer} out of range (nranks {})", self.nranks),
            ));
        }
        if size > MAX_MSG_SIZE {
            return Err(NetError::invalid(
                Some(peer),
                format!("mem: size {size} over the maximum {MAX_MSG_SIZE}"),
            ));
        }
        if null && size > 0 {
            return Err(NetError::invalid(
                Some(peer),
                format!("mem: null buffer for {size} bytes"),
            ));
        }
        // Fits: MAX_MSG_SIZE <= isize::MAX.
        Ok(size as usize)
    }

    /// A `PENDING` send descriptor for `len` bytes at `buf`: a finished one from the spare
    /// list that no peer holds any more, re-initialised in place, else a new one.
    ///
    /// # Safety
    /// `buf` as [`Transport::isend`] requires; `len > 0` implies `buf` is not null.
    unsafe fn descriptor(&mut self, tag: u64, buf: *const u8, len: usize, eager: bool) -> Msg {
        #[cfg(not(loom))]
        {
            // The newest spare first; one a receiver still holds (it drops its reference right
            // after its copy, which may not have happened yet on its thread) is skipped.
            let unique = (0..self.spare.len())
                .rev()
                .find(|&i| Arc::get_mut(&mut self.spare[i]).is_some());
            if let Some(i) = unique {
                let mut msg = self.spare.swap_remove(i);
                if let Some(m) = Arc::get_mut(&mut msg) {
                    // SAFETY: this function's contract.
                    unsafe { m.reuse(tag, buf, len, eager) };
                    return msg;
                }
            }
        }
        let payload = if !eager {
            Payload::Lent(LentBuf { ptr: buf, len })
        } else if len == 0 {
            Payload::Copied(Vec::new())
        } else {
            // SAFETY: this function's contract: `buf..buf+len` is readable for this call;
            // `len > 0` so `buf` is not null, and `u8` needs no alignment.
            Payload::Copied(Vec::from(unsafe { core::slice::from_raw_parts(buf, len) }))
        };
        Arc::new(SendShared::new(tag, payload))
    }

    /// Keeps the descriptor of a finished send for reuse (at most [`SPARE_DESCRIPTORS`]).
    fn recycle(&mut self, msg: Msg) {
        if cfg!(not(loom)) && self.spare.len() < SPARE_DESCRIPTORS {
            self.spare.push(msg);
        }
    }

    /// Moves what `peer` has sent us so far (at most one mailbox-full, so the call is bounded
    /// even while the peer keeps sending) into matching receives or the unexpected list.
    fn drain(&mut self, peer: usize) {
        for _ in 0..self.rx[peer].capacity() {
            let Some(msg) = self.rx[peer].pop() else {
                break;
            };
            self.deliver(peer, msg);
        }
    }

    /// Matches an arriving message against the oldest posted receive with its tag, else files
    /// it as unexpected.
    fn deliver(&mut self, peer: usize, msg: Msg) {
        let tag = msg.tag;
        if let Some(queue) = self.posted[peer].get_mut(&tag) {
            // An empty queue (kept for reuse) means no receive is posted: unexpected below.
            if let Some(&index) = queue.front() {
                if let Some(Request::Recv { buf, state, .. }) = self.slab.get_mut(index) {
                    // SAFETY: `buf` comes from a pending `irecv`, whose caller keeps it writable
                    // and otherwise unaccessed until the request finishes (it is still
                    // `Posted`); we popped `msg` from our own mailbox, so we are its one
                    // receiver.
                    match unsafe { msg.claim_and_copy(buf.ptr, buf.len) } {
                        Claim::Copied(n) => *state = RecvState::Done(n),
                        Claim::Rejected => {
                            *state =
                                RecvState::Failed(mismatch(peer as u32, tag, msg.len(), buf.len))
                        }
                        // The sender withdrew it: drop it; the receive stays posted.
                        Claim::Withdrawn => return,
                    }
                    queue.pop_front();
                    return;
                }
            }
        }
        self.unexpected[peer].entry(tag).or_default().push_back(msg);
        self.unexpected_len += 1;
    }

    /// Looks for the oldest unexpected message from `peer` with `tag` and takes it into `buf`.
    /// `None`: nothing (live) is waiting; the receive must be posted.
    ///
    /// # Safety
    /// `buf` as in [`Transport::irecv`].
    unsafe fn take_unexpected(&mut self, peer: u32, tag: u64, buf: RecvBuf) -> Option<RecvState> {
        let map = &mut self.unexpected[peer as usize];
        // The tag's (empty) queue is made at its first receive, kept, and found by every later
        // arrival: whether a message comes before or after its receive is a race between the
        // two threads, and neither order may allocate once the tag has been seen.
        let queue = map
            .entry(tag)
            .or_insert_with(|| VecDeque::with_capacity(TAG_QUEUE_CAPACITY));
        let mut result = None;
        // Bounded by the queue's length.
        while let Some(msg) = queue.pop_front() {
            self.unexpected_len -= 1;
            // SAFETY: `buf` per this function's contract; the message came from our own
            // mailbox, so we are its one receiver.
            match unsafe { msg.claim_and_copy(buf.ptr, buf.len) } {
                Claim::Copied(n) => result = Some(RecvState::Done(n)),
                Claim::Rejected => {
                    result = Some(RecvState::Failed(mismatch(peer, tag, msg.len(), buf.len)))
                }
                Claim::Withdrawn => continue,
            }
            break;
        }
        result
    }

    /// Drops unexpected messages whose senders withdrew them.
    fn sweep(&mut self) {
        self.polls_since_sweep = 0;
        let mut len = 0;
        for map in &mut self.unexpected {
            let prune = map.len() > KEEP_EMPTY_TAGS;
            map.retain(|_, queue| {
                queue.retain(|m| !m.is_withdrawn());
                len += queue.len();
                !(prune && queue.is_empty())
            });
        }
        for map in &mut self.posted {
            if map.len() > KEEP_EMPTY_TAGS {
                map.retain(|_, queue| !queue.is_empty());
            }
        }
        self.unexpected_len = len;
    }

    /// `test`'s progress for request `index`: drains the request's peer mailbox, and settles
    /// the request if the peer's endpoint is gone (dropped or closed), so that it fails instead
    /// of staying pending forever.
    fn progress_request(&mut self, index: u32) {
        let Some(req) = self.slab.get_mut(index) else {
            return;
        };
        let peer = req.peer() as usize;
        // The peer's end of the mailbox we depend on: it receives our sends, it sends to us.
        let gone = match req {
            Request::Send { .. } => self.tx[peer].is_abandoned(),
            Request::Recv { .. } => self.rx[peer].is_abandoned(),
        };
        if gone {
            // Acquire fence: `is_abandoned` read the ring's reference count (a relaxed load),
            // which the peer's handle dropped with a release decrement after its last push.
            // The fence makes that push's tail store visible to the drain below, so "still
            // posted after the drain" really means "never sent".
            fence(Ordering::Acquire);
        }
        self.drain(peer);
        if !gone {
            return;
        }
        match self.slab.get_mut(index) {
            Some(Request::Send { msg, peer_gone, .. }) => {
                // No receiver will ever claim it; withdraw it so the verdict rests on the
                // state word (an RMW reads the latest value: a copy that did happen shows as
                // `DONE`, acquired).
                *peer_gone = msg.try_withdraw().is_ok();
            }
            Some(Request::Recv {
                tag, buf, state, ..
            }) if matches!(state, RecvState::Posted) => {
                let (tag, len) = (*tag, buf.len);
                *state = RecvState::Failed(NetError::failure(
                    Some(peer as u32),
                    format!(
                        "mem: peer {peer} closed its endpoint without sending tag {tag:#x} \
                         ({len}-byte receive)"
                    ),
                ));
                remove_posted(&mut self.posted[peer], tag, index);
            }
            _ => {}
        }
    }

    /// Withdraws every send still `PENDING`, without waiting: a send the receiver is copying
    /// right now finishes (its `test` answers `Pending`, then `Done`). Returns the number of
    /// sends still being copied.
    fn withdraw_pending_sends(&mut self) -> usize {
        let mut copying = 0;
        for (_, req) in self.slab.iter_mut() {
            if let Request::Send { msg, .. } = req {
                copying += usize::from(!msg.withdraw());
            }
        }
        copying
    }

    /// The endpoint's drop: withdraws every send, and waits for the copies under way out of a
    /// *lent* buffer (an eager send's bytes live in its descriptor, which the receiver keeps
    /// alive), so that no peer reads the caller's buffers once the endpoint is gone. The wait
    /// backs off: [`WITHDRAW_SPIN_POLLS`] polls with a spin hint, then the relax hook
    /// ([`MemTransport::set_relax`]) between polls; past [`WITHDRAW_WARN_POLLS`] it logs a
    /// warning naming the send, once.
    ///
    /// This is the one wait with no limit, and at the bound it warns and keeps waiting: it
    /// waits for a `memcpy` another thread is already running inside its own transport call
    /// (`COPYING` never waits for anything itself), never for a peer's progress or the
    /// network; returning earlier would let the caller free a buffer that is being read. It
    /// runs only at destroy, off the driving path: the comm's teardown has already drained
    /// (bounded) every request it knew.
    fn withdraw_all_sends_for_drop(&mut self) {
        let relax = self.relax;
        for (_, req) in self.slab.iter_mut() {
            let Request::Send { peer, msg, .. } = req else {
                continue;
            };
            let mut polls: u64 = 0;
            while !msg.withdraw() {
                if !msg.is_lent() {
                    break; // our bytes are in the descriptor the receiver holds
                }
                polls += 1;
                if polls == WITHDRAW_WARN_POLLS {
                    log::warn!(
                        "mem: rank {}: drop waits for peer {peer} to finish copying the {}-byte \
                         message with tag {:#x} out of the lent buffer",
                        self.rank,
                        msg.len(),
                        msg.tag
                    );
                }
                if polls < WITHDRAW_SPIN_POLLS {
                    spin_loop();
                } else {
                    relax();
                }
            }
        }
    }

    /// Sets the hook the endpoint's drop calls between polls while it waits for a peer's copy
    /// out of a lent buffer, once [`WITHDRAW_SPIN_POLLS`] have spun (default: a spin hint; a
    /// std platform passes `std::thread::yield_now`).
    pub fn set_relax(&mut self, relax: fn()) {
        self.relax = relax;
    }
}

/// Takes posted receive `index` out of its peer's posted list (keeping the list free of empty
/// queues).
fn remove_posted(map: &mut BTreeMap<u64, VecDeque<u32>>, tag: u64, index: u32) {
    if let Some(queue) = map.get_mut(&tag) {
        queue.retain(|&i| i != index);
    }
}

/// The error both sides of a size mismatch report.
fn mismatch(peer: u32, tag: u64, msg_len: usize, recv_len: usize) -> NetError {
    let what = if recv_len < msg_len {
        "truncation"
    } else {
        "receive larger than the message"
    };
    NetError::failure(
        Some(peer),
        format!(
            "mem: {what}: tag {tag:#x}: message of {msg_len} bytes, receive of {recv_len} bytes \
             (sizes must match exactly)"
        ),
    )
}

impl Transport for MemTransport {
    fn name(&self) -> &str {
        "mem"
    }

    fn max_msg_size(&self) -> u64 {
        MAX_MSG_SIZE
    }

    /// Drains every incoming mailbox (at most one mailbox-full each) into matching receives and
    /// the unexpected list. Never fails.
    fn poll(&mut self) -> Result<(), NetError> {
        if self.closed {
            return Ok(());
        }
        for peer in 0..self.rx.len() {
            self.drain(peer);
        }
        self.polls_since_sweep += 1;
        if self.polls_since_sweep >= SWEEP_INTERVAL {
            self.sweep();
        }
        Ok(())
    }

    /// Posts a send. Sizes up to [`EAGER_MAX`] are copied now (`payload_copied: true`); larger
    /// ones lend `buf` until `test` reports the request finished. `Ok(None)` when the mailbox to
    /// `peer` is full or [`MAX_REQUESTS`] are in flight.
    unsafe fn isend(
        &mut self,
        peer: u32,
        buf: *const u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        let len = self.check_post(peer, buf.is_null(), size)?;
        // Back-pressure before any copy or allocation. We are the mailbox's only producer, so
        // a free slot seen here is still free at the push below.
        if self.slab.is_full() || self.tx[peer as usize].free_slots() == 0 {
            return Ok(None);
        }
        let eager = len <= EAGER_MAX;
        // SAFETY: the `isend` contract makes `buf..buf+len` readable for this call (and lent
        // until the request finishes); `len > 0` means `buf` is not null (checked).
        let msg = unsafe { self.descriptor(tag, buf, len, eager) };
        if self.tx[peer as usize].push(msg.clone()).is_err() {
            // Not reachable (see above); answered as back-pressure, nothing is lost.
            return Ok(None);
        }
        let (_, request) = self.slab.insert(Request::Send {
            peer,
            msg,
            peer_gone: false,
        });
        Ok(Some(Posted {
            request,
            payload_copied: eager,
        }))
    }

    /// Posts a receive of exactly `size` bytes. It is matched at once against what `peer` has
    /// already sent (the copy then happens inside this call), else on a later `poll` / `test`.
    /// `Ok(None)` only when [`MAX_REQUESTS`] are in flight.
    unsafe fn irecv(
        &mut self,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        let len = self.check_post(peer, buf.is_null(), size)?;
        if self.slab.is_full() {
            return Ok(None);
        }
        // Whatever `peer` sent before this receive goes ahead of it (posting order).
        self.drain(peer as usize);
        let buf = RecvBuf { ptr: buf, len };
        // SAFETY: the `irecv` contract is this function's.
        let state = unsafe { self.take_unexpected(peer, tag, buf) }.unwrap_or(RecvState::Posted);
        let posted = matches!(state, RecvState::Posted);
        let (index, request) = self.slab.insert(Request::Recv {
            peer,
            tag,
            buf,
            state,
        });
        // The tag's posted queue exists from its first receive on, matched or not (see
        // `take_unexpected`): no allocation later whichever side of the race wins.
        let queue = self.posted[peer as usize]
            .entry(tag)
            .or_insert_with(|| VecDeque::with_capacity(TAG_QUEUE_CAPACITY));
        if posted {
            queue.push_back(index);
        }
        Ok(Some(Posted {
            request,
            payload_copied: false,
        }))
    }

    /// Drains the request's peer mailbox, then reports. A send is `Done` once the receiver has
    /// the bytes; a receive once its buffer is filled. A size mismatch fails both sides.
    fn test(&mut self, request: RequestId) -> Result<TestOutcome, NetError> {
        let Some(index) = self.slab.lookup(request) else {
            return Err(NetError::invalid(
                None,
                format!("mem: unknown request {request:#x}"),
            ));
        };
        if !self.closed {
            self.progress_request(index);
        }
        let outcome = match self.slab.get_mut(index) {
            Some(Request::Send {
                peer,
                msg,
                peer_gone,
            }) => match msg.state() {
                SendState::Pending | SendState::Copying => return Ok(TestOutcome::Pending),
                SendState::Done => Ok(TestOutcome::Done {
                    size: msg.len() as u64,
                }),
                SendState::Cancelled if *peer_gone => Err(NetError::failure(
                    Some(*peer),
                    format!(
                        "mem: peer {peer} closed its endpoint before receiving the {}-byte \
                         message with tag {:#x}",
                        msg.len(),
                        msg.tag
                    ),
                )),
                SendState::Cancelled => Ok(TestOutcome::Cancelled),
                SendState::Rejected => Err(NetError::failure(
                    Some(*peer),
                    format!(
                        "mem: peer {peer} rejected the {}-byte message with tag {:#x}: its \
                         receive has another size (sizes must match exactly)",
                        msg.len(),
                        msg.tag
                    ),
                )),
            },
            Some(Request::Recv { state, .. }) => match state {
                RecvState::Posted => return Ok(TestOutcome::Pending),
                RecvState::Done(n) => Ok(TestOutcome::Done { size: *n as u64 }),
                RecvState::Cancelled => Ok(TestOutcome::Cancelled),
                RecvState::Failed(e) => Err(e.clone()),
            },
            None => return Ok(TestOutcome::Pending), // unreachable: `lookup` found it live
        };
        if let Some(Request::Send { msg, .. }) = self.slab.remove(index) {
            self.recycle(msg);
        }
        outcome
    }

    /// A send still unmatched is withdrawn (its next `test` says `Cancelled`); one the receiver
    /// is copying finishes (`test` says `Pending`, then `Done`). A posted receive is withdrawn.
    /// Finished requests are left as they are.
    fn cancel(&mut self, request: RequestId) -> Result<(), NetError> {
        let Some(index) = self.slab.lookup(request) else {
            return Err(NetError::invalid(
                None,
                format!("mem: unknown request {request:#x}"),
            ));
        };
        match self.slab.get_mut(index) {
            Some(Request::Send { msg, .. }) => {
                let _ = msg.withdraw();
            }
            Some(Request::Recv {
                peer, tag, state, ..
            }) if matches!(state, RecvState::Posted) => {
                remove_posted(&mut self.posted[*peer as usize], *tag, index);
                *state = RecvState::Cancelled;
            }
            _ => {}
        }
        Ok(())
    }

    /// Withdraws every send still unmatched and every posted receive, drops the unexpected
    /// list and the mailboxes; later posts fail. Never waits: a send the receiver is copying
    /// right now finishes on the receiver's side (its `test` answers `Pending`, then `Done`).
    /// Requests stay testable: each reports `Done` or `Cancelled`. Peers' requests with this
    /// rank then fail at their next `test` ("closed its endpoint"), as after a drop.
    fn close(&mut self) -> Result<(), NetError> {
        self.closed = true;
        let copying = self.withdraw_pending_sends();
        if copying > 0 {
            log::debug!(
                "mem: rank {}: close with {copying} sends being copied by their receivers",
                self.rank
            );
        }
        for (_, req) in self.slab.iter_mut() {
            if let Request::Recv { state, .. } = req {
                if matches!(state, RecvState::Posted) {
                    *state = RecvState::Cancelled;
                }
            }
        }
        for map in &mut self.posted {
            map.clear();
        }
        for map in &mut self.unexpected {
            map.clear();
        }
        self.unexpected_len = 0;
        // Our sends are withdrawn or being copied by a receiver that already popped them, so
        // dropping the ring handles is safe (a descriptor lives as long as its last `Arc`);
        // peers then see this endpoint as gone and fail their requests with it instead of
        // waiting forever.
        self.tx.clear();
        self.rx.clear();
        Ok(())
    }
}

impl Drop for MemTransport {
    fn drop(&mut self) {
        self.withdraw_all_sends_for_drop();
    }
}

impl fmt::Debug for MemTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemTransport")
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .field("outstanding", &self.slab.live)
            .field("unexpected", &self.unexpected_len)
            .field("closed", &self.closed)
            .finish()
    }
}
