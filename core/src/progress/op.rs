//! The proxy op (`ncclProxyArgs`, 352 bytes), its pool blocks, the request tracker, and the
//! intrusive op lists the op-FIFO is made of.
//!
//! Seed: `ncclProxyArgs` (352 B), `ncclProxyPool` (calloc 0xB008 = 8 hdr + 128×352), the
//! requestTracker ring, §4.

use alloc::boxed::Box;
use core::mem::{offset_of, size_of};
use core::ptr;

use crate::base::desc::{NetDestAddr, NetSrcAddr};
use crate::base::state::{self, Machine};
use crate::base::status::NrtStatus;
use crate::base::trace;
use crate::progress::device::DeviceCallbacks;
use crate::progress::net::{RequestId, Transport};
use crate::progress::stats::ProtocolStats;

/// A pointer-sized value in an 8-byte, 8-aligned slot, so the op layout is the same on 32-bit
/// targets (docs/design.md §3).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot8<T: Copy>(pub T);

/// An op's transport progress function (the seed's `op->progress`): advances the op one tick.
///
/// It sets `op.idle` (1 = nothing posted, completed or handshaken this tick) and the op's
/// [`OpState`] (DONE once every request of the op has completed at the transport).
///
/// # Errors
/// A transport or protocol failure; the comm then fails (sticky).
///
/// Seed: `op->progress` = `netNeuronSendProxy` / `netNeuronRecvProxy`, §4.
pub type OpProgressFn = fn(op: &mut ProxyOp, ctx: &mut OpCtx<'_>) -> Result<(), NrtStatus>;

/// The seed's `op->transportComm`: what kind of op this is and how its requests are made and
/// torn down.
///
/// Seed: `ncclTransportComm` (`netNeuronAllocRequest` / `netNeuronFreeRequest`), §4.
#[derive(Debug)]
pub struct OpKind {
    /// Name for logs (`"send"`, `"recv"`, `"scripted"`).
    pub name: &'static str,
    /// Which side of a transfer ops of this kind are (the protocol counters count by it).
    pub side: OpSide,
    /// The progress function installed in new ops of this kind.
    pub progress: OpProgressFn,
}

/// The side of a transfer an op kind drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpSide {
    /// Sends the op's source entries (`netNeuronSendProxy`).
    Send,
    /// Receives into the op's destination entries (`netNeuronRecvProxy`).
    Recv,
    /// Neither: a test's scripted op.
    Neither,
}

/// Everything an op's progress function may touch besides the op itself.
pub struct OpCtx<'a> {
    /// The comm's transport.
    pub transport: &'a mut dyn Transport,
    /// The device callbacks (`nec_*`).
    pub device: &'a dyn DeviceCallbacks,
    /// Source entries of the op's block (an op uses `entry_base .. entry_base + n_entries`).
    pub src: &'a [NetSrcAddr],
    /// Destination entries of the op's block.
    pub dst: &'a [NetDestAddr],
    /// The comm id (in every transport tag).
    pub comm_id: u32,
    /// This comm's rank.
    pub rank: u32,
    /// The stream the op runs on (0..=3).
    pub stream: u32,
    /// The comm's protocol counters: the op kinds add to them (plain adds on the thread that
    /// drives the comm, [`crate::progress::stats`]).
    pub stats: &'a mut ProtocolStats,
    /// Test scaffolding (feature `testing`): the comm's scripts of its scripted ops.
    #[cfg(any(test, feature = "testing"))]
    pub scripts: &'a crate::progress::script::ScriptTable,
}

/// Capacity of an op's request tracker ring (the seed's 128-entry requestTracker).
pub const REQUEST_TRACKER_SIZE: usize = 128;

/// One outstanding transport request of an op.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackedRequest {
    /// The transport's request id.
    pub id: RequestId,
    /// FIFO entry number (within the op) the request carries.
    pub entry: u32,
    /// The transport copied the payload at post (sends).
    pub payload_copied: bool,
    /// `cancel` was asked for it.
    pub cancel_requested: bool,
}

/// The outstanding requests of one op, oldest first: a ring of [`REQUEST_TRACKER_SIZE`].
///
/// Seed: requestTracker (`requests[0]` of `ncclProxyArgs`), §4.
#[derive(Debug)]
pub struct RequestTracker {
    ring: [TrackedRequest; REQUEST_TRACKER_SIZE],
    /// Index of the oldest request, in `0..REQUEST_TRACKER_SIZE`.
    head: usize,
    /// Number of outstanding requests, in `0..=REQUEST_TRACKER_SIZE`.
    len: usize,
}

impl RequestTracker {
    /// An empty tracker.
    pub const fn new() -> Self {
        Self {
            ring: [TrackedRequest {
                id: 0,
                entry: 0,
                payload_copied: false,
                cancel_requested: false,
            }; REQUEST_TRACKER_SIZE],
            head: 0,
            len: 0,
        }
    }

    /// Outstanding requests.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when nothing is outstanding.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends a request.
    ///
    /// # Errors
    /// `Err(r)` when [`REQUEST_TRACKER_SIZE`] requests are outstanding.
    pub fn push(&mut self, r: TrackedRequest) -> Result<(), TrackedRequest> {
        if self.len == REQUEST_TRACKER_SIZE {
            return Err(r);
        }
        self.ring[(self.head + self.len) % REQUEST_TRACKER_SIZE] = r;
        self.len += 1;
        Ok(())
    }

    /// The oldest outstanding request.
    pub fn front(&self) -> Option<&TrackedRequest> {
        (self.len > 0).then(|| &self.ring[self.head])
    }

    /// Removes the oldest request.
    pub fn pop_front(&mut self) -> Option<TrackedRequest> {
        if self.len == 0 {
            return None;
        }
        let r = self.ring[self.head];
        self.head = (self.head + 1) % REQUEST_TRACKER_SIZE;
        self.len -= 1;
        Some(r)
    }

    /// The outstanding requests, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &TrackedRequest> {
        (0..self.len).map(move |i| &self.ring[(self.head + i) % REQUEST_TRACKER_SIZE])
    }

    /// The outstanding requests, oldest first, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut TrackedRequest> {
        let (head, len) = (self.head, self.len);
        let (a, b) = self.ring.split_at_mut(head);
        b.iter_mut().chain(a.iter_mut()).take(len)
    }

    /// Empties the ring in place (the storage is kept): what a re-armed op starts from.
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// Removes the first request for which `f` is true (used when draining at `stop`).
    pub fn remove_where(
        &mut self,
        mut f: impl FnMut(&TrackedRequest) -> bool,
    ) -> Option<TrackedRequest> {
        let pos = self.iter().position(&mut f)?;
        let removed = self.ring[(self.head + pos) % REQUEST_TRACKER_SIZE];
        for i in pos..self.len - 1 {
            self.ring[(self.head + i) % REQUEST_TRACKER_SIZE] =
                self.ring[(self.head + i + 1) % REQUEST_TRACKER_SIZE];
        }
        self.len -= 1;
        Some(removed)
    }
}

impl Default for RequestTracker {
    fn default() -> Self {
        Self::new()
    }
}

/// A proxy op's state (the seed's `ncclProxyArgs::state`, a `u32` at offset 0x18): the one
/// state machine of every op kind, set only through [`ProxyOp::set_state`].
///
/// ```text
///                      (2) handshake: host index reads 0xFFFF_FFFF,
///        (1) rearm         write 0, +1 handshake semaphore
///  free ───────► HANDSHAKE(1) ─────────────────────────────► TRANSFER(2)
///  (all zero)      ▲    │                                       │  each tick: post what the
///                  │    │ (5) complete without a transfer       │  device posted, test in
///                  │    │     (scripted test ops)               │  order, +n complete sem
///                  │    ▼                                       │
///                  └── DONE(0) ◄────────────────────────────────┘
///             (4) rearm       (3) last entry completed at the transport
///            (recycle)
/// ```
/// Edge 1: `Comm::start` (through `ProxyOp::rearm`); edges 2 and 3: the send/recv progress
/// functions (`progress::sendrecv`); edge 4: the op walk's recycle (`Comm::progress`, the seed's
/// `recycleOp`, again through `ProxyOp::rearm`); edge 5: the scripted test kind. The walk
/// recycles an op the tick it reaches DONE. The numbers are the seed's: an all-zero (free) op
/// reads DONE.
///
/// Seed: `ncclProxyArgs::state` (0 = done, recycled by `ncclProxyProgressOps`), §4.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct OpState(u32);

impl OpState {
    /// State 0: every request of the op has completed; the loop recycles it.
    pub const DONE: Self = Self(0);
    /// State 1: armed, waiting for the device handshake (a new or recycled op).
    pub const HANDSHAKE: Self = Self(1);
    /// State 2: handshake done, posting and testing entries.
    pub const TRANSFER: Self = Self(2);

    /// The raw value (the seed's numbers).
    pub const fn as_u32(self) -> u32 {
        self.0
    }
}

impl Machine for OpState {
    const NAME: &'static str = "op";

    /// An op's begin (from DONE) and end (to DONE) are [`crate::base::trace::mask::OPS`], its
    /// HANDSHAKE → TRANSFER [`crate::base::trace::mask::STEPS`]. (The walk's re-arm of an op
    /// the tick it reached DONE, edge 4, is recorded as STEPS: [`ProxyOp::recycle_in`].)
    fn trace_class(from: Self, to: Self) -> u32 {
        use crate::base::trace::mask;
        if from == Self::DONE || to == Self::DONE {
            mask::OPS
        } else {
            mask::STEPS
        }
    }

    fn code(self) -> u8 {
        u8::try_from(self.0).unwrap_or(u8::MAX)
    }

    /// The edges of the diagram above (1/4: DONE→HANDSHAKE, 2: HANDSHAKE→TRANSFER,
    /// 3: TRANSFER→DONE, 5: HANDSHAKE→DONE).
    fn edge(from: Self, to: Self) -> Option<u8> {
        match (from, to) {
            (Self::DONE, Self::HANDSHAKE) => Some(1),
            (Self::HANDSHAKE, Self::TRANSFER) => Some(2),
            (Self::TRANSFER, Self::DONE) => Some(3),
            (Self::HANDSHAKE, Self::DONE) => Some(5),
            _ => None,
        }
    }
}

/// An op as its transitions name it: `<kind> op <index> block <bb> peer <peer>`.
struct OpName<'a>(&'a ProxyOp);

impl core::fmt::Display for OpName<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let op = self.0;
        write!(
            f,
            "{} {} block {} peer {}",
            op.kind_name(),
            op.net_op_idx,
            op.basic_block_id,
            op.peer
        )
    }
}

impl core::fmt::Debug for OpState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::DONE => f.write_str("Done"),
            Self::HANDSHAKE => f.write_str("Handshake"),
            Self::TRANSFER => f.write_str("Transfer"),
            Self(n) => write!(f, "Invalid({n})"),
        }
    }
}

/// Flag bit in [`ProxyOp::flags`]: `early_send_completion`.
pub const FLAG_EARLY_SEND_COMPLETION: u32 = 1;
/// Flag bit in [`ProxyOp::flags`]: `early_recv_posting`.
pub const FLAG_EARLY_RECV_POSTING: u32 = 2;

/// One network operation of a stream's op-FIFO: `#[repr(C)]`, exactly 352 bytes, with
/// `requests` at 128, `idle` at 192 and `next` at 320 (the seed's offsets), pointer-sized
/// fields in 8-byte slots so the layout is the same on 32-bit targets.
///
/// Ops live in [`PoolBlock`]s and move between a stream's lists by their `next` link; they are
/// recycled (re-armed and re-filed under their block), not freed, until the stream is stopped.
/// An all-zero op is a valid free op; a free op may also keep its (empty) request tracker.
///
/// Seed: `ncclProxyArgs` (352 B), §4.
#[repr(C)]
#[derive(Debug)]
pub struct ProxyOp {
    /// The op's progress function (`op->progress`); `None` only for a free op.
    pub progress: Slot8<Option<OpProgressFn>>,
    /// The op's kind (`op->transportComm`).
    pub transport_comm: Slot8<Option<&'static OpKind>>,
    /// Sequence number given by `start` (`opCount`); always below the comm's last op count.
    pub op_count: u64,
    /// The op's state; set only through [`ProxyOp::set_state`].
    state: OpState,
    /// The basic block the op was filed under (`basic_block_id`).
    pub basic_block_id: u32,
    /// Stream index 0..=3.
    pub stream: u32,
    /// Peer rank of the op's entries (send: destination, recv: source).
    pub peer: i32,
    /// Op tag shared with the partner op (14 bits).
    pub tag: u32,
    /// Index of the op info within its `start` call.
    pub net_op_idx: u32,
    /// Number of FIFO entries of this op side.
    pub n_entries: u32,
    /// First of the op's entries in its block's source (send) or destination (recv) entries.
    pub entry_base: u32,
    /// Entries posted to the transport in this execution (`posted`).
    pub posted: u32,
    /// Entries the device has posted in this execution, as read from the host index
    /// (`pre_post_fifo_idx`).
    pub pre_post_fifo_idx: u32,
    /// Entries whose request completed at the transport.
    pub completed: u32,
    /// Entries counted to the complete semaphore.
    pub credited: u32,
    /// Most requests outstanding at once (1..=128).
    pub max_outstanding: u32,
    /// Host-index wrap (0 = 2^32).
    pub loop_size: u32,
    /// `ending_recv_credits` (recv ops with early posting).
    pub early_credits: u32,
    /// [`FLAG_EARLY_SEND_COMPLETION`] | [`FLAG_EARLY_RECV_POSTING`].
    pub flags: u32,
    /// Address of the op side's host index word.
    pub host_idx_addr: u64,
    /// Address of the op side's handshake semaphore.
    pub handshake_sem_addr: u64,
    /// Address of the op side's complete semaphore.
    pub complete_sem_addr: u64,
    /// Raw host-index value last read (for the modulo-`loop_size` difference).
    pub last_host_idx: u32,
    /// Element size in bytes.
    pub data_type_sz: u32,
    /// Ticks of this execution, counted by the op's kind if it wants them (reset on re-arm).
    pub ticks: u32,
    /// Executions completed by this op since it was built.
    pub executions: u32,
    /// Request slots; `requests[0]` holds the request tracker, the rest are the NCCL-legacy
    /// `NCCL_STEPS` slots, unused. Invariant: `requests[0]` is null or a `Box` owned by this
    /// op (set only by `alloc_request`, freed only by `free_request`), hence private.
    requests: [Slot8<*mut RequestTracker>; 8],
    /// 1 when the op made no progress on its last tick (ANDed across ops by the loop).
    pub idle: i32,
    /// Most requests this op had outstanding at once since `start` built it (protocol
    /// counters, [`crate::progress::stats`]; kept across recycles, zeroed by `reset`).
    pub peak_outstanding: u32,
    /// Most receives this (recv) op had posted beyond its host index at once since built.
    pub max_recv_ahead: u32,
    /// Where the op's protocol record last was in its comm's records (an index into
    /// [`crate::progress::comm::Comm::op_peaks`]): a hint, checked against the record's key
    /// before use (a record filed later may have moved it), so that folding the op's counters
    /// finds it without a search. Set when `start` files the op's block.
    pub peak_slot: u32,
    /// Send entries this op counted complete before the transport finished them, since built.
    pub early_send_completions: u64,
    /// Receives this op posted beyond its host index, since built.
    pub recvs_ahead: u64,
    /// Host-index wrap-arounds this op saw, since built.
    pub index_wraps: u64,
    _reserved: [u8; 0x140 - 0xE8],
    /// Link to the next op of whichever list the op is on; written only by [`OpList`] (its
    /// invariant), hence private.
    next: Slot8<*mut ProxyOp>,
    _reserved_tail: [u8; 0x160 - 0x148],
}

const _: () = assert!(size_of::<Slot8<*mut ProxyOp>>() == 8);
const _: () = assert!(size_of::<Slot8<Option<OpProgressFn>>>() == 8);
const _: () = assert!(size_of::<ProxyOp>() == 352);
const _: () = assert!(offset_of!(ProxyOp, requests) == 128);
const _: () = assert!(offset_of!(ProxyOp, idle) == 192);
const _: () = assert!(offset_of!(ProxyOp, next) == 320);
const _: () = assert!(offset_of!(ProxyOp, op_count) == 0x10);
const _: () = assert!(offset_of!(ProxyOp, state) == 0x18);
const _: () = assert!(size_of::<OpState>() == 4);
const _: () = assert!(offset_of!(ProxyOp, basic_block_id) == 0x1C);
const _: () = assert!(offset_of!(ProxyOp, posted) == 0x38);
const _: () = assert!(offset_of!(ProxyOp, pre_post_fifo_idx) == 0x3C);
const _: () = assert!(offset_of!(ProxyOp, host_idx_addr) == 0x58);
const _: () = assert!(offset_of!(ProxyOp, peak_outstanding) == 0xC4);
const _: () = assert!(offset_of!(ProxyOp, early_send_completions) == 0xD0);
const _: () = assert!(offset_of!(ProxyOp, index_wraps) == 0xE0);

impl ProxyOp {
    /// The op's request tracker, if allocated.
    pub fn tracker(&self) -> Option<&RequestTracker> {
        // SAFETY: `requests[0]` is either null or a pointer from `Box::into_raw` owned by this
        // op (set only by `alloc_request`, cleared by `free_request`).
        unsafe { self.requests[0].0.as_ref() }
    }

    /// The op's request tracker, mutably, if allocated.
    pub fn tracker_mut(&mut self) -> Option<&mut RequestTracker> {
        // SAFETY: as `tracker`; `&mut self` makes the access unique.
        unsafe { self.requests[0].0.as_mut() }
    }

    /// Makes a fresh, empty request tracker (the seed's `allocRequest`).
    ///
    /// # Errors
    /// `Resource` when the allocation fails.
    pub fn alloc_request(&mut self) -> Result<(), NrtStatus> {
        self.free_request();
        let t = Box::new(RequestTracker::new());
        self.requests[0] = Slot8(Box::into_raw(t));
        Ok(())
    }

    /// Drops the request tracker (the seed's `freeRequest`). Outstanding requests in it must
    /// have been drained first.
    pub fn free_request(&mut self) {
        let p = core::mem::replace(&mut self.requests[0].0, ptr::null_mut());
        if !p.is_null() {
            // SAFETY: `p` came from `Box::into_raw` in `alloc_request` and is owned by this op;
            // it was just unhooked, so it is freed exactly once.
            drop(unsafe { Box::from_raw(p) });
        }
    }

    /// Re-arms the op for its next execution (the seed's inlined `recycleOp`): the request
    /// tracker emptied in place (made only the first time the op is armed, so a recycle or a
    /// re-filed pool op allocates nothing, docs/design.md §3), ring cursors reset, state 1.
    ///
    /// # Errors
    /// `Resource` when the op has no tracker yet and it cannot be allocated.
    pub fn rearm(&mut self) -> Result<(), NrtStatus> {
        self.rearm_in(trace::NONE, trace::NONE)
    }

    /// [`ProxyOp::rearm`] by a caller that knows the op's comm (`rank`, `comm_id`: into the
    /// transition's event record, as [`ProxyOp::set_state_in`]).
    ///
    /// # Errors
    /// As [`ProxyOp::rearm`].
    pub fn rearm_in(&mut self, rank: u32, comm: u32) -> Result<(), NrtStatus> {
        self.clear_for_rearm()?;
        // Shared stamp: `start` arms a block's ops one after the other, no transport call
        // between them (`trace::TickStamp`).
        let from = self.state;
        self.transition(OpState::HANDSHAKE, rank, comm, false, || {
            OpState::trace_class(from, OpState::HANDSHAKE)
        })
    }

    /// [`ProxyOp::rearm_in`] by the op walk's recycle (edge 4), the tick the op reached DONE:
    /// its event record is of the class [`trace::mask::STEPS`], not [`trace::mask::OPS`], as
    /// the op's end (recorded with `ops`) implies it (the op is re-armed at once; with `ops`
    /// alone a drain begins the op's next execution at its previous end, `proxy-trace`'s
    /// Chrome writer). Saves one of an op's three `ops` records per execution where each
    /// execution's `start` arms an op (the recycled one goes back to the pool unused).
    ///
    /// # Errors
    /// As [`ProxyOp::rearm`].
    pub fn recycle_in(&mut self, rank: u32, comm: u32) -> Result<(), NrtStatus> {
        self.clear_for_rearm()?;
        self.transition(OpState::HANDSHAKE, rank, comm, true, || trace::mask::STEPS)
    }

    /// What a re-arm clears: cursors, counters, the request tracker (made the first time).
    fn clear_for_rearm(&mut self) -> Result<(), NrtStatus> {
        self.posted = 0;
        self.pre_post_fifo_idx = 0;
        self.completed = 0;
        self.credited = 0;
        self.last_host_idx = 0;
        self.ticks = 0;
        match self.tracker_mut() {
            Some(t) => t.clear(),
            None => self.alloc_request()?,
        }
        Ok(())
    }

    /// The op's state.
    pub fn state(&self) -> OpState {
        self.state
    }

    /// The one transition function of the op state machine ([`OpState`], through
    /// [`state::check`]): traces `state=A=>B`; an edge that is not in the diagram is a bug in
    /// an op kind: refused (the state is kept) and answered as an error, which fails the op's
    /// stream like any progress error (a panic in a debug build).
    ///
    /// # Errors
    /// [`NrtStatus::Failure`] for an edge the diagram does not have.
    pub fn set_state(&mut self, to: OpState) -> Result<(), NrtStatus> {
        self.set_state_in(to, trace::NONE, trace::NONE)
    }

    /// [`ProxyOp::set_state`] by a caller that knows the op's comm (`rank`, `comm_id`: they go
    /// into the transition's event record, `crate::base::trace`; [`trace::NONE`] when not).
    ///
    /// # Errors
    /// [`NrtStatus::Failure`] for an edge the diagram does not have.
    pub fn set_state_in(&mut self, to: OpState, rank: u32, comm: u32) -> Result<(), NrtStatus> {
        let from = self.state;
        self.transition(to, rank, comm, true, || OpState::trace_class(from, to))
    }

    /// [`ProxyOp::set_state_in`] recording the transition as event class `class()` (run only
    /// while recording), with a time read now when `fresh` (the op walk's transitions follow
    /// transport calls: `trace::emit_fresh`), else the tick's shared stamp (`start`'s arms).
    fn transition(
        &mut self,
        to: OpState,
        rank: u32,
        comm: u32,
        fresh: bool,
        class: impl FnOnce() -> u32,
    ) -> Result<(), NrtStatus> {
        state::check_traced_as(self.state, to, &OpName(self), fresh, class, |r| {
            r.rank = rank;
            r.comm = comm;
            r.stream = u8::try_from(self.stream).unwrap_or(u8::MAX);
            r.op = self.net_op_idx;
            r.block = self.basic_block_id;
            r.peer = u32::try_from(self.peer).unwrap_or(trace::NONE);
            r.entry = self.completed;
            r.side = match self.kind_name() {
                "send" => trace::SEND,
                "recv" => trace::RECV,
                _ => u8::MAX,
            };
        })
        .map_err(|_| NrtStatus::Failure)?;
        self.state = to;
        Ok(())
    }

    /// Clears the op back to the free state: all zero but for its request tracker, which is
    /// kept (emptied) for the op's next use, so a stream stopped and filed again allocates no
    /// tracker. The tracker is freed by [`ProxyOp::free_request`] (the stream does it when
    /// its comm is destroyed). Outstanding requests in it must have been drained first.
    pub fn reset(&mut self) {
        let tracker = core::mem::replace(&mut self.requests[0].0, ptr::null_mut());
        // SAFETY: an all-zero `ProxyOp` is valid (every field is an integer, a nullable raw
        // pointer, or an `Option` of a reference / fn pointer, whose zero is `None`).
        unsafe { ptr::write_bytes(self as *mut ProxyOp, 0, 1) };
        // The invariant of `requests[0]` holds: null, or the Box this op owned a moment ago.
        self.requests[0] = Slot8(tracker);
        if let Some(t) = self.tracker_mut() {
            t.clear();
        }
    }

    /// The op after this one on its list (null at the tail or when on no list).
    pub fn next_op(&self) -> *mut ProxyOp {
        self.next.0
    }

    /// The op kind's name for logs.
    pub fn kind_name(&self) -> &'static str {
        self.transport_comm.0.map_or("free", |k| k.name)
    }
}

/// Ops per pool block.
pub const OPS_PER_POOL_BLOCK: usize = 128;

/// A pool block: an 8-byte header and 128 ops, 0xB008 bytes, allocated whole and returned to
/// the allocator only when its comm is destroyed.
///
/// Seed: `ncclProxyPool` (calloc 0xB008), §4.
#[repr(C)]
pub struct PoolBlock {
    /// Header: link to the next block of the stream (unused by the lists; kept for the layout).
    pub next: Slot8<*mut PoolBlock>,
    /// The ops.
    pub ops: [ProxyOp; OPS_PER_POOL_BLOCK],
}

const _: () = assert!(size_of::<PoolBlock>() == 0xB008);

/// An intrusive singly linked FIFO of ops threaded through the ops' private `next` links ([`ProxyOp::next_op`]).
///
/// Invariant: `head` is null iff `len == 0`; following `next` from `head` reaches `tail` after
/// `len - 1` steps, and `tail.next` is null. Every op on a list belongs to a live pool block of
/// the same stream.
#[derive(Debug)]
pub struct OpList {
    head: *mut ProxyOp,
    tail: *mut ProxyOp,
    len: u32,
}

impl Default for OpList {
    fn default() -> Self {
        Self::new()
    }
}

impl OpList {
    /// An empty list.
    pub const fn new() -> Self {
        Self {
            head: ptr::null_mut(),
            tail: ptr::null_mut(),
            len: 0,
        }
    }

    /// Number of ops.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// `true` when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// First op (null when empty).
    pub fn head(&self) -> *mut ProxyOp {
        self.head
    }

    /// Appends `op`.
    ///
    /// # Safety
    /// `op` must point to a live op that is on no list.
    pub unsafe fn push_back(&mut self, op: *mut ProxyOp) {
        // SAFETY: `op` is live and unlinked (caller); `tail`, when non-null, is live (invariant).
        unsafe {
            (*op).next = Slot8(ptr::null_mut());
            if self.tail.is_null() {
                self.head = op;
            } else {
                (*self.tail).next = Slot8(op);
            }
        }
        self.tail = op;
        self.len += 1;
    }

    /// Prepends `op`.
    ///
    /// # Safety
    /// `op` must point to a live op that is on no list.
    pub unsafe fn push_front(&mut self, op: *mut ProxyOp) {
        // SAFETY: `op` is live and unlinked (caller).
        unsafe { (*op).next = Slot8(self.head) };
        if self.tail.is_null() {
            self.tail = op;
        }
        self.head = op;
        self.len += 1;
    }

    /// Removes the first op.
    pub fn pop_front(&mut self) -> Option<*mut ProxyOp> {
        if self.head.is_null() {
            return None;
        }
        let op = self.head;
        // SAFETY: `head` is live (invariant).
        unsafe {
            self.head = (*op).next.0;
            (*op).next = Slot8(ptr::null_mut());
        }
        if self.head.is_null() {
            self.tail = ptr::null_mut();
        }
        self.len -= 1;
        Some(op)
    }

    /// Moves every op of `other` to the tail of `self`, in order.
    pub fn append(&mut self, other: &mut OpList) {
        if other.is_empty() {
            return;
        }
        if self.tail.is_null() {
            self.head = other.head;
        } else {
            // SAFETY: `tail` is live (invariant).
            unsafe { (*self.tail).next = Slot8(other.head) };
        }
        self.tail = other.tail;
        self.len += other.len;
        *other = OpList::new();
    }

    /// Unlinks the op after `prev` (or the head when `prev` is null) and returns it.
    ///
    /// # Safety
    /// `prev` must be null or an op of this list that has a successor.
    pub unsafe fn unlink_after(&mut self, prev: *mut ProxyOp) -> *mut ProxyOp {
        // SAFETY: per the contract, the op to unlink exists and every pointer touched is live.
        unsafe {
            let op = if prev.is_null() {
                self.head
            } else {
                (*prev).next.0
            };
            let next = (*op).next.0;
            if prev.is_null() {
                self.head = next;
            } else {
                (*prev).next = Slot8(next);
            }
            if self.tail == op {
                self.tail = prev;
            }
            (*op).next = Slot8(ptr::null_mut());
            self.len -= 1;
            op
        }
    }

    /// The ops, first to last.
    pub fn iter(&self) -> OpIter<'_> {
        OpIter {
            cur: self.head,
            _list: core::marker::PhantomData,
        }
    }
}

/// Iterator over the ops of an [`OpList`] (raw pointers; the list must not change meanwhile).
#[derive(Debug)]
pub struct OpIter<'a> {
    cur: *mut ProxyOp,
    _list: core::marker::PhantomData<&'a OpList>,
}

impl Iterator for OpIter<'_> {
    type Item = *mut ProxyOp;
    fn next(&mut self) -> Option<*mut ProxyOp> {
        if self.cur.is_null() {
            return None;
        }
        let op = self.cur;
        // SAFETY: ops on a list are live (OpList invariant) and the list is borrowed.
        self.cur = unsafe { (*op).next.0 };
        Some(op)
    }
}
