//! The comm and its four streams: the op-FIFO (three lists plus the deferred-by-basic-block
//! map), and the three entry points `start`, `progress`, `stop` as a safe Rust API.
//!
//! ```text
//!            start (validate all, build on next_ops)        progress: active empty →
//!  pool ─────────────────────────────────► next_ops ──────► blocks[bb] ─────────────► active
//!   ▲          (rejected start: back to pool)     (whole call ok)   reload pending, else bb  │
//!   │                                                        ▲                           │
//!   │                                                        └──── recycle (state 0) ────┘
//!   └──────────────── stop (cancel + drain requests; every op of the stream) ──────────────┘
//! ```
//!
//! Seed: `ncclProxyState` (192 B × 4), `ncclProxySaveNeuron` / `ncclProxyStart`,
//! `ncclProxyProgress`, `ncclProxyProgressOps`, `proxyReloadProxyArgs`, `recycleOp`,
//! `neuronStopNetworkProxy`, §4; DESIGN.md §3 is the exact contract.

use alloc::alloc::{alloc_zeroed, dealloc, Layout};
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ptr::{self, NonNull};

use crate::progress::desc::{
    NetDestAddr, NetOpInfo, NetSrcAddr, EXEC_COMPLETE, MAX_ENTRIES_PER_OP, MAX_OP_TAG,
    NET_OP_COMPLETE, NET_TRANSFER, NO_PEER,
};
use crate::progress::device::DeviceCallbacks;
use crate::progress::net::{RequestId, TestOutcome, Transport, MAX_COMM_ID, MAX_NRANKS};
use crate::progress::op::{OpCtx, OpList, PoolBlock, ProxyOp, OPS_PER_POOL_BLOCK, OP_STATE_DONE};
use crate::progress::sendrecv;
use crate::status::NrtStatus;
use crate::sync::spin_loop;
use crate::time::Clock;

/// Streams per comm.
pub const NUM_STREAMS: usize = 4;
/// Block id meaning "none" (`(uint32)-1`).
pub const BB_NONE: u32 = u32::MAX;
/// Default drain limit of `stop`: 1 s.
pub const DEFAULT_DRAIN_LIMIT_NS: u64 = 1_000_000_000;
/// Default cap on `stop`'s drain polls (bounds the drain even with a clock that does not move).
pub const DEFAULT_DRAIN_MAX_POLLS: u64 = 50_000_000;

/// What a comm is created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommConfig {
    /// This comm's rank, `< nranks`.
    pub rank: u32,
    /// Ranks in the comm, `1..=65536`.
    pub nranks: u32,
    /// Id shared by every rank of the comm, `< 2^15` (it is in every transport tag).
    pub comm_id: u32,
    /// `stop` waits at most this long (ns) for cancelled requests to be confirmed.
    pub drain_limit_ns: u64,
    /// `stop` polls the transport at most this many times while draining.
    pub drain_max_polls: u64,
}

impl CommConfig {
    /// A config with the default drain limits.
    pub const fn new(rank: u32, nranks: u32, comm_id: u32) -> Self {
        Self {
            rank,
            nranks,
            comm_id,
            drain_limit_ns: DEFAULT_DRAIN_LIMIT_NS,
            drain_max_polls: DEFAULT_DRAIN_MAX_POLLS,
        }
    }
}

/// A block's filed ops and the FIFO entries they use (grouped by op).
#[derive(Debug, Default)]
pub struct BlockFiles {
    /// Ops filed under the block, in filing order (the deferred queue of the seed).
    pub ops: OpList,
    /// Source entries, grouped by op (a send op uses `entry_base .. entry_base + n_entries`).
    pub src: Vec<NetSrcAddr>,
    /// Destination entries, grouped by op.
    pub dst: Vec<NetDestAddr>,
}

/// One stream's op-FIFO: three lists plus the deferred-by-basic-block map.
///
/// Invariant: every op of the stream's pool blocks is on exactly one of `pool`, `next_ops`,
/// `active`, or one `blocks[bb].ops`; ops on `active` all have `basic_block_id == current_bb`.
///
/// Seed: `ncclProxyState` (192 B), §4.
#[derive(Debug)]
pub struct StreamState {
    /// Active ops (`ops`, +8), walked by `progress`.
    pub active: OpList,
    /// Ops being built by a `start` call (`nextOps`, +16); empty between calls.
    pub next_ops: OpList,
    /// Free ops (`pool`, +32).
    pub pool: OpList,
    /// The pool blocks (`pools`, +40), freed when the comm is destroyed.
    pool_blocks: Vec<NonNull<PoolBlock>>,
    /// The deferred-by-basic-block map (`basic_block_args_map`, +120).
    pub blocks: BTreeMap<u32, BlockFiles>,
    /// Block whose ops are on `active`, or [`BB_NONE`].
    pub current_bb: u32,
    /// Block to load when `active` drains, or [`BB_NONE`] (`pending_basic_block_id`, +176).
    pub pending_bb: u32,
}

impl StreamState {
    fn new() -> Self {
        Self {
            active: OpList::new(),
            next_ops: OpList::new(),
            pool: OpList::new(),
            pool_blocks: Vec::new(),
            blocks: BTreeMap::new(),
            current_bb: BB_NONE,
            pending_bb: BB_NONE,
        }
    }

    /// Ops in the stream's pool blocks (128 per block).
    pub fn capacity(&self) -> u32 {
        (self.pool_blocks.len() * OPS_PER_POOL_BLOCK) as u32
    }

    /// Number of pool blocks allocated.
    pub fn pool_block_count(&self) -> usize {
        self.pool_blocks.len()
    }

    /// Ops filed under `bb` (not counting active ones).
    pub fn filed(&self, bb: u32) -> u32 {
        self.blocks.get(&bb).map_or(0, |b| b.ops.len())
    }

    /// Allocates one more pool block and threads its 128 ops onto the free list.
    fn grow(&mut self) -> Result<(), NrtStatus> {
        let layout = Layout::new::<PoolBlock>();
        // SAFETY: the layout has non-zero size; an all-zero `PoolBlock` is valid (an all-zero
        // `ProxyOp` is a valid free op, see `ProxyOp::reset`).
        let raw = unsafe { alloc_zeroed(layout) } as *mut PoolBlock;
        let Some(block) = NonNull::new(raw) else {
            log::error!(
                "proxy op pool: cannot allocate a {}-byte pool block",
                layout.size()
            );
            return Err(NrtStatus::Resource);
        };
        self.pool_blocks.push(block);
        for i in 0..OPS_PER_POOL_BLOCK {
            // SAFETY: `block` is live and exclusively ours; the op is not on any list yet.
            unsafe {
                let op = ptr::addr_of_mut!((*block.as_ptr()).ops[i]);
                self.pool.push_back(op);
            }
        }
        Ok(())
    }

    /// Makes sure `n` ops are free, growing by whole blocks.
    fn reserve(&mut self, n: u32) -> Result<(), NrtStatus> {
        while self.pool.len() < n {
            self.grow()?;
        }
        Ok(())
    }

    /// Returns every op of `list` to the pool, cleared.
    fn release_list(pool: &mut OpList, list: &mut OpList) {
        while let Some(op) = list.pop_front() {
            // SAFETY: ops on a stream's lists are live ops of its pool blocks, now unlinked.
            unsafe {
                (*op).reset();
                pool.push_back(op);
            }
        }
    }
}

impl Drop for StreamState {
    fn drop(&mut self) {
        // Free the request trackers still held by ops on any list, then the blocks.
        let mut all = OpList::new();
        all.append(&mut self.active);
        all.append(&mut self.next_ops);
        for b in self.blocks.values_mut() {
            all.append(&mut b.ops);
        }
        Self::release_list(&mut self.pool, &mut all);
        self.pool = OpList::new();
        for block in self.pool_blocks.drain(..) {
            // SAFETY: every block was allocated in `grow` with this layout and is freed once;
            // no list refers to its ops any more.
            unsafe { dealloc(block.as_ptr() as *mut u8, Layout::new::<PoolBlock>()) };
        }
    }
}

/// A communicator's progress half: rank, nranks, comm id, transport, device callbacks, four
/// streams, the op count and the sticky fatal error.
///
/// Used by one thread at a time (the worker of its group, DESIGN.md §8): `Comm` is `Send`, not
/// `Sync`, and every entry point takes `&mut self`.
///
/// Seed: `ncclComm` (`proxyStateStream[4]` at +18384, `lastOpCount` at +17696, `fatalError` at
/// +18184), §4.
pub struct Comm {
    config: CommConfig,
    streams: [StreamState; NUM_STREAMS],
    last_op_count: u64,
    fatal: Option<NrtStatus>,
    transport: Box<dyn Transport>,
    device: Arc<dyn DeviceCallbacks>,
    clock: Arc<dyn Clock>,
    /// Registered host memory `(base, len)`; `None` = addresses are not checked (C callers).
    regions: Option<Vec<(u64, u64)>>,
    /// Requests `stop` could not drain: left with the transport until destroy.
    orphans: Vec<RequestId>,
}

// SAFETY: the raw op pointers inside the streams point into pool blocks owned by this comm and
// are only touched through `&mut self`; the transport and device callbacks are `Send`
// (`DeviceCallbacks: Send + Sync`). Moving the whole comm to another thread is therefore sound.
unsafe impl Send for Comm {}

impl core::fmt::Debug for Comm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Comm")
            .field("config", &self.config)
            .field("transport", &self.transport.name())
            .field("last_op_count", &self.last_op_count)
            .field("fatal", &self.fatal)
            .finish_non_exhaustive()
    }
}

fn check_stream(stream: u32) -> Result<usize, NrtStatus> {
    if (stream as usize) < NUM_STREAMS {
        Ok(stream as usize)
    } else {
        log::error!("invalid stream {stream} (a comm has {NUM_STREAMS})");
        Err(NrtStatus::Invalid)
    }
}

macro_rules! reject {
    ($($arg:tt)*) => {{
        log::error!($($arg)*);
        return Err(NrtStatus::Invalid);
    }};
}

impl Comm {
    /// Creates a comm over `transport`, calling back into the device through `device`.
    ///
    /// # Errors
    /// `Invalid` when `nranks` is 0 or above 65536, `rank >= nranks`, or `comm_id >= 2^15`.
    pub fn new(
        config: CommConfig,
        transport: Box<dyn Transport>,
        device: Arc<dyn DeviceCallbacks>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, NrtStatus> {
        if config.nranks == 0 || config.nranks > MAX_NRANKS || config.rank >= config.nranks {
            reject!(
                "invalid comm: rank {} of nranks {}",
                config.rank,
                config.nranks
            );
        }
        if config.comm_id >= MAX_COMM_ID {
            reject!(
                "invalid comm id {} (must be < {MAX_COMM_ID})",
                config.comm_id
            );
        }
        Ok(Self {
            config,
            streams: [
                StreamState::new(),
                StreamState::new(),
                StreamState::new(),
                StreamState::new(),
            ],
            last_op_count: 0,
            fatal: None,
            transport,
            device,
            clock,
            regions: Some(Vec::new()),
            orphans: Vec::new(),
        })
    }

    /// This comm's configuration.
    pub fn config(&self) -> &CommConfig {
        &self.config
    }

    /// The sticky fatal error, if the comm has failed.
    pub fn fatal_error(&self) -> Option<NrtStatus> {
        self.fatal
    }

    /// The comm's last op count (`start` gives each new op this value, then advances it).
    pub fn last_op_count(&self) -> u64 {
        self.last_op_count
    }

    /// One stream's state, for inspection (tests, state dumps).
    ///
    /// # Panics
    /// If `stream >= 4`.
    pub fn stream(&self, stream: usize) -> &StreamState {
        &self.streams[stream]
    }

    /// The transport, for inspection.
    pub fn transport(&self) -> &dyn Transport {
        &*self.transport
    }

    /// Writes the comm's state (every stream, block and op) to `out`, one line per item: the
    /// on-demand dump of DESIGN.md §6, also logged when a task times out.
    ///
    /// # Errors
    /// Whatever `out` returns.
    pub fn dump(&self, out: &mut dyn core::fmt::Write) -> core::fmt::Result {
        writeln!(
            out,
            "comm {} rank {}/{} transport {} last_op_count {} fatal {:?}",
            self.config.comm_id,
            self.config.rank,
            self.config.nranks,
            self.transport.name(),
            self.last_op_count,
            self.fatal
        )?;
        for (s, st) in self.streams.iter().enumerate() {
            writeln!(
                out,
                "  stream {s}: current {:#x} pending {:#x} active {} free {}/{} blocks {}",
                st.current_bb,
                st.pending_bb,
                st.active.len(),
                st.pool.len(),
                st.capacity(),
                st.blocks.len()
            )?;
            let lists = core::iter::once(("active", &st.active))
                .chain(st.blocks.values().map(|f| ("filed", &f.ops)));
            for (what, list) in lists {
                for opp in list.iter() {
                    // SAFETY: ops on the stream's lists are live; `&self` excludes mutation.
                    let op = unsafe { &*opp };
                    writeln!(
                        out,
                        "    {what} {} op {} bb {} count {} state {} peer {} posted {}/{} device {} completed {} credited {} outstanding {}",
                        op.kind_name(),
                        op.net_op_idx,
                        op.basic_block_id,
                        op.op_count,
                        op.state,
                        op.peer,
                        op.posted,
                        op.n_entries,
                        op.pre_post_fifo_idx,
                        op.completed,
                        op.credited,
                        op.tracker().map_or(0, |t| t.len())
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Declares `base .. base + len` as memory the device and the transport may use: every
    /// buffer and host-word address given to [`Comm::start`] must lie inside a registered range.
    ///
    /// # Errors
    /// `Invalid` for an empty or wrapping range.
    ///
    /// # Safety
    /// The range must stay valid (allocated, and not accessed in ways that conflict with the
    /// device and transport) until the comm is dropped; host words in it are accessed only
    /// atomically.
    pub unsafe fn register_memory(&mut self, base: u64, len: u64) -> Result<(), NrtStatus> {
        if len == 0 || base.checked_add(len).is_none() {
            reject!("cannot register memory range {base:#x}+{len:#x}");
        }
        if let Some(r) = self.regions.as_mut() {
            r.push((base, len));
        }
        Ok(())
    }

    /// Stops checking addresses against registered memory: the caller vouches for every
    /// address given to `start` (the C ABI, whose callers own their memory model).
    ///
    /// # Safety
    /// Every address later given to [`Comm::start`] must be valid as [`Comm::register_memory`]
    /// requires, until the comm is dropped.
    pub unsafe fn trust_all_addresses(&mut self) {
        self.regions = None;
    }

    fn check_range(&self, what: &str, addr: u64, len: u64) -> Result<(), NrtStatus> {
        let Some(regions) = &self.regions else {
            return Ok(());
        };
        let end = addr.checked_add(len);
        let ok = end.is_some_and(|end| regions.iter().any(|&(b, l)| addr >= b && end <= b + l));
        if !ok {
            reject!("{what}: range {addr:#x}+{len:#x} is not in registered memory");
        }
        Ok(())
    }

    fn check_word(&self, what: &str, addr: u64) -> Result<(), NrtStatus> {
        if addr == 0 || !addr.is_multiple_of(4) {
            reject!("{what}: host word address {addr:#x} is null or not 4-byte aligned");
        }
        self.check_range(what, addr, 4)
    }

    fn check_peer(&self, what: &str, peer: i32) -> Result<(), NrtStatus> {
        if peer < 0 || peer as u32 >= self.config.nranks {
            reject!(
                "{what}: peer {peer} out of range (nranks {})",
                self.config.nranks
            );
        }
        Ok(())
    }

    /// Validates one `start` call as a whole (DESIGN.md §6); nothing is touched.
    fn validate(
        &self,
        bb: u32,
        ops: &[NetOpInfo],
        src: &[NetSrcAddr],
        dst: &[NetDestAddr],
    ) -> Result<(), NrtStatus> {
        if bb == BB_NONE {
            reject!("start: block id {bb:#x} is reserved for 'none'");
        }
        if ops.is_empty() {
            reject!("start: empty op FIFO");
        }
        let (mut tx_total, mut rx_total) = (0u64, 0u64);
        let max = self.transport.max_msg_size();
        for (k, op) in ops.iter().enumerate() {
            if op.tx_entry_cnt == 0 && op.rx_entry_cnt == 0 {
                reject!("start: op {k} has no entries");
            }
            if op.tx_entry_cnt > MAX_ENTRIES_PER_OP || op.rx_entry_cnt > MAX_ENTRIES_PER_OP {
                reject!("start: op {k} has more than {MAX_ENTRIES_PER_OP} entries on a side");
            }
            if op.tag >= MAX_OP_TAG {
                reject!("start: op {k} tag {} does not fit 14 bits", op.tag);
            }
            if !matches!(op.data_type_sz, 1 | 2 | 4 | 8) {
                reject!(
                    "start: op {k} data_type_sz {} is not 1, 2, 4 or 8",
                    op.data_type_sz
                );
            }
            if op.initial_send_credits > crate::progress::op::REQUEST_TRACKER_SIZE as u32 {
                reject!(
                    "start: op {k} initial_send_credits {} above 128",
                    op.initial_send_credits
                );
            }
            if op.reserved != [0; 2] || op.early_send_completion > 1 || op.early_recv_posting > 1 {
                reject!("start: op {k} has non-zero reserved bytes or a flag other than 0/1");
            }
            if op.tx_entry_cnt > 0 {
                self.check_peer("start: send peer", op.send_peer)?;
                self.check_word("start: post_send host index", op.post_send_idx_addr)?;
                self.check_word(
                    "start: send handshake semaphore",
                    op.send_handshake_sem_addr,
                )?;
                self.check_word("start: send complete semaphore", op.send_complete_sem_addr)?;
            }
            if op.rx_entry_cnt > 0 {
                self.check_peer("start: recv peer", op.recv_peer)?;
                self.check_word("start: post_recv host index", op.post_recv_idx_addr)?;
                self.check_word(
                    "start: recv handshake semaphore",
                    op.recv_handshake_sem_addr,
                )?;
                self.check_word("start: recv complete semaphore", op.recv_complete_sem_addr)?;
            }
            tx_total += u64::from(op.tx_entry_cnt);
            rx_total += u64::from(op.rx_entry_cnt);
        }
        if tx_total != src.len() as u64 || rx_total != dst.len() as u64 {
            reject!(
                "start: FIFO lengths differ from the ops' entry counts: src {} (ops say {tx_total}), dst {} (ops say {rx_total})",
                src.len(),
                dst.len()
            );
        }
        // Per op: how many entries seen so far, to check counts and marks.
        let mut seen_tx: Vec<u32> = alloc::vec![0; ops.len()];
        let mut seen_rx: Vec<u32> = alloc::vec![0; ops.len()];
        let entries = src
            .iter()
            .map(|e| {
                (
                    true,
                    e.net_op_idx,
                    e.mark,
                    e.addr,
                    e.size,
                    e.dest_rank,
                    e.reserved,
                )
            })
            .chain(dst.iter().map(|e| {
                (
                    false,
                    e.net_op_idx,
                    e.mark,
                    e.addr,
                    e.size,
                    e.src_rank,
                    e.reserved,
                )
            }));
        for (i, (is_src, k, mark, addr, size, peer, reserved)) in entries.enumerate() {
            let side = if is_src { "src" } else { "dst" };
            let Some(op) = ops.get(k as usize) else {
                reject!(
                    "start: {side} entry {i}: net_op_idx {k} out of range ({} ops)",
                    ops.len()
                );
            };
            let (seen, count) = if is_src {
                (&mut seen_tx[k as usize], op.tx_entry_cnt)
            } else {
                (&mut seen_rx[k as usize], op.rx_entry_cnt)
            };
            *seen += 1;
            if *seen > count {
                reject!("start: op {k} has more {side} entries than its count {count}");
            }
            let last = *seen == count;
            match (mark, last) {
                (NET_TRANSFER, false) | (NET_OP_COMPLETE | EXEC_COMPLETE, true) => {}
                (NET_TRANSFER | NET_OP_COMPLETE | EXEC_COMPLETE, _) => {
                    reject!(
                        "start: op {k} {side} entry {} of {count}: mark {mark} (only the last entry is marked complete)",
                        *seen
                    )
                }
                _ => reject!("start: {side} entry {i}: unknown mark {mark}"),
            }
            if reserved != 0 {
                reject!("start: {side} entry {i}: reserved field is not zero");
            }
            if peer != NO_PEER {
                self.check_peer("start: entry peer", peer)?;
            }
            if !size.is_multiple_of(u64::from(op.data_type_sz)) {
                reject!(
                    "start: {side} entry {i}: size {size} is not a multiple of data_type_sz {}",
                    op.data_type_sz
                );
            }
            if size > max {
                reject!("start: {side} entry {i}: size {size} above the transport's maximum {max}");
            }
            if size > 0 {
                self.check_range("start: buffer", addr, size)?;
            }
        }
        Ok(())
    }

    /// Files one block's ops on `stream`: validates the whole call, builds a send proxy op for
    /// every op info with `tx_entry_cnt > 0` and a recv proxy op for every one with
    /// `rx_entry_cnt > 0` on `next_ops`, then moves them in order to the tail of the deferred
    /// map entry for `bb`. May be called for many blocks before the first `progress`.
    ///
    /// # Errors
    /// * the sticky fatal error when the comm has failed;
    /// * `Invalid` for stream ≥ 4, `bb == u32::MAX`, an empty op FIFO, FIFO lengths that differ
    ///   from the ops' entry counts, `net_op_idx` out of range, a wrong or unknown mark, a peer
    ///   ≥ nranks, a size that is not a multiple of `data_type_sz` or is above the transport's
    ///   maximum, a missing or unregistered address (the log line names the range);
    /// * `Resource` when a pool block cannot be allocated.
    ///
    /// A rejected call files nothing.
    ///
    /// Seed: `neuronStartNetworkProxy` → `ncclProxySaveNeuron` + `ncclProxyStart`, §1/§4.
    pub fn start(
        &mut self,
        stream: u32,
        bb: u32,
        ops: &[NetOpInfo],
        src: &[NetSrcAddr],
        dst: &[NetDestAddr],
    ) -> Result<(), NrtStatus> {
        if let Some(e) = self.fatal {
            log::error!("start on failed comm {} rejected: {e}", self.config.comm_id);
            return Err(e);
        }
        let s = check_stream(stream)?;
        self.validate(bb, ops, src, dst)?;
        let n_ops: u32 = ops
            .iter()
            .map(|o| u32::from(o.tx_entry_cnt > 0) + u32::from(o.rx_entry_cnt > 0))
            .sum();

        // Group each side's entries by op (stable: FIFO order within an op).
        let st = &self.streams[s];
        let (src_base, dst_base) = st
            .blocks
            .get(&bb)
            .map_or((0, 0), |b| (b.src.len() as u32, b.dst.len() as u32));
        let mut src_grouped: Vec<NetSrcAddr> = Vec::with_capacity(src.len());
        let mut dst_grouped: Vec<NetDestAddr> = Vec::with_capacity(dst.len());
        let mut src_start: Vec<u32> = Vec::with_capacity(ops.len());
        let mut dst_start: Vec<u32> = Vec::with_capacity(ops.len());
        for k in 0..ops.len() as u32 {
            src_start.push(src_base + src_grouped.len() as u32);
            src_grouped.extend(src.iter().filter(|e| e.net_op_idx == k));
            dst_start.push(dst_base + dst_grouped.len() as u32);
            dst_grouped.extend(dst.iter().filter(|e| e.net_op_idx == k));
        }

        // Build on next_ops (ncclProxySaveNeuron): a send op, then a recv op, per op info.
        let sides: Vec<(usize, bool)> = ops
            .iter()
            .enumerate()
            .flat_map(|(k, o)| [(k, true, o.tx_entry_cnt), (k, false, o.rx_entry_cnt)])
            .filter(|&(_, _, count)| count > 0)
            .map(|(k, send, _)| (k, send))
            .collect();
        self.build_ops(s, stream, bb, n_ops, |op, i| {
            let (k, send) = sides[i as usize];
            if send {
                sendrecv::init_send(op, &ops[k], k as u32, src_start[k]);
            } else {
                sendrecv::init_recv(op, &ops[k], k as u32, dst_start[k]);
            }
        })?;
        let st = &mut self.streams[s];
        // File (ncclProxyStart): next_ops → tail of blocks[bb].
        let files = st.blocks.entry(bb).or_default();
        files.src.extend_from_slice(&src_grouped);
        files.dst.extend_from_slice(&dst_grouped);
        files.ops.append(&mut st.next_ops);
        log::debug!(
            "start: comm {} rank {} stream {stream} block {bb}: filed {n_ops} proxy ops",
            self.config.comm_id,
            self.config.rank
        );
        Ok(())
    }

    /// Files ops of the scripted test kind (see [`crate::progress::scripted`]) under `bb` on `stream`,
    /// one per script, exactly as `start` files send/recv ops.
    ///
    /// # Errors
    /// As [`Comm::start`] for the comm state, stream, block id and allocation.
    pub fn start_scripted(
        &mut self,
        stream: u32,
        bb: u32,
        scripts: &[crate::progress::scripted::Script],
    ) -> Result<(), NrtStatus> {
        if let Some(e) = self.fatal {
            return Err(e);
        }
        let s = check_stream(stream)?;
        if bb == BB_NONE || scripts.is_empty() {
            reject!("start_scripted: block {bb:#x} / {} scripts", scripts.len());
        }
        self.build_ops(s, stream, bb, scripts.len() as u32, |op, i| {
            crate::progress::scripted::init(op, &scripts[i as usize], i);
        })?;
        let st = &mut self.streams[s];
        st.blocks
            .entry(bb)
            .or_default()
            .ops
            .append(&mut st.next_ops);
        Ok(())
    }

    /// Builds `n` ops on stream `s`'s `next_ops` (the seed's `ncclProxySaveNeuron`): each taken
    /// from the pool (grown by whole blocks first), set up by `init(op, i)`, given the comm's
    /// next op count and armed. On failure every op built returns to the pool and nothing is
    /// filed.
    fn build_ops(
        &mut self,
        s: usize,
        stream: u32,
        bb: u32,
        n: u32,
        mut init: impl FnMut(&mut ProxyOp, u32),
    ) -> Result<(), NrtStatus> {
        let st = &mut self.streams[s];
        st.reserve(n)?;
        for i in 0..n {
            let armed = match st.pool.pop_front() {
                None => Err(NrtStatus::Resource),
                Some(opp) => {
                    // SAFETY: `opp` is a live op of this stream's pool blocks, just unlinked.
                    let op = unsafe { &mut *opp };
                    init(op, i);
                    op.stream = stream;
                    op.basic_block_id = bb;
                    op.op_count = self.last_op_count;
                    self.last_op_count += 1;
                    let armed = op.rearm();
                    // `op` is not used past this point: the links are written through `opp`.
                    // SAFETY: `opp` is live and on no list.
                    unsafe { st.next_ops.push_back(opp) };
                    armed
                }
            };
            if let Err(e) = armed {
                let mut built = core::mem::take(&mut st.next_ops);
                StreamState::release_list(&mut st.pool, &mut built);
                log::error!(
                    "start: comm {} stream {stream} block {bb}: {e}; nothing filed",
                    self.config.comm_id
                );
                return Err(e);
            }
        }
        Ok(())
    }

    fn fail(&mut self, status: NrtStatus) -> NrtStatus {
        if self.fatal.is_none() {
            self.fatal = Some(status);
        }
        NrtStatus::NetworkProxyFailure
    }

    /// One progress tick on `stream` (DESIGN.md §3): loads a block when `active` is empty
    /// (the pending block first, else `bb`), remembers `bb` as pending otherwise, walks the
    /// active ops once, recycles the ops that reached state 0 under their own block, and ANDs
    /// "all idle" / "all done" into `*idle` / `*done` (the caller seeds both with `true`).
    /// Done while another block is pending reports `idle = done = false`.
    ///
    /// A stream with nothing filed (or stopped) reports idle and done.
    ///
    /// # Errors
    /// * `Invalid` for stream ≥ 4 (the comm is not failed by it);
    /// * `NetworkProxyFailure` when the comm has failed, now or earlier (sticky): a transport
    ///   error, or a broken op invariant (op count not below the comm's last op count, or an
    ///   active op of another block), each logged with comm, stream, block and op.
    ///
    /// Seed: `neuronNetworkProxyProgress` → `ncclProxyProgress` → `ncclProxyProgressOps`, §4.
    pub fn progress(
        &mut self,
        stream: u32,
        bb: u32,
        idle: &mut bool,
        done: &mut bool,
    ) -> Result<(), NrtStatus> {
        let s = check_stream(stream)?;
        if self.fatal.is_some() {
            return Err(NrtStatus::NetworkProxyFailure);
        }
        let comm_id = self.config.comm_id;
        let st = &mut self.streams[s];

        // 1. Reload (proxyReloadProxyArgs) or remember pending.
        if st.active.is_empty() {
            let load = if st.pending_bb != BB_NONE {
                core::mem::replace(&mut st.pending_bb, BB_NONE)
            } else {
                bb
            };
            st.current_bb = BB_NONE;
            if let Some(files) = st.blocks.get_mut(&load) {
                if !files.ops.is_empty() {
                    st.active.append(&mut files.ops);
                    st.current_bb = load;
                }
            }
        } else if bb != st.current_bb {
            st.pending_bb = bb;
        }
        // 2. Nothing to run.
        if st.current_bb == BB_NONE {
            return Ok(());
        }
        // The transport's own progress, once per call before the op walk.
        if let Err(e) = self.transport.poll() {
            log::error!("comm {comm_id} stream {stream}: transport poll failed: {e}");
            return Err(self.fail(e.status));
        }
        // 3. Walk the active ops (ncclProxyProgressOps).
        let st = &mut self.streams[s];
        let mut all_idle = true;
        let mut prev: *mut ProxyOp = ptr::null_mut();
        let mut cur = st.active.head();
        let mut failure = None;
        while !cur.is_null() {
            // SAFETY: `cur` is an op on `active` (live, in this stream's pool blocks); no other
            // reference to it exists while `op` is used.
            let op = unsafe { &mut *cur };
            if op.op_count >= self.last_op_count {
                log::error!(
                    "progressOps: comm {comm_id} stream {stream} block {}: op {} ({}) has op count {} not below the comm's last op count {}",
                    st.current_bb, op.net_op_idx, op.kind_name(), op.op_count, self.last_op_count
                );
                failure = Some(NrtStatus::NetworkProxyFailure);
                break;
            }
            if op.basic_block_id != st.current_bb {
                log::error!(
                    "progressOps: comm {comm_id} stream {stream}: op {} ({}) of block {} is active while block {} is current",
                    op.net_op_idx, op.kind_name(), op.basic_block_id, st.current_bb
                );
                failure = Some(NrtStatus::NetworkProxyFailure);
                break;
            }
            let Some(files) = st.blocks.get(&op.basic_block_id) else {
                log::error!(
                    "recycleOp: comm {comm_id} stream {stream}: block {} of op {} is not in the map",
                    op.basic_block_id, op.net_op_idx
                );
                failure = Some(NrtStatus::NetworkProxyFailure);
                break;
            };
            let Some(progress) = op.progress.0 else {
                log::error!(
                    "progressOps: comm {comm_id} stream {stream}: op {} has no progress function",
                    op.net_op_idx
                );
                failure = Some(NrtStatus::NetworkProxyFailure);
                break;
            };
            let mut ctx = OpCtx {
                transport: &mut *self.transport,
                device: &*self.device,
                src: &files.src,
                dst: &files.dst,
                comm_id,
                rank: self.config.rank,
                stream,
            };
            if let Err(e) = progress(op, &mut ctx) {
                log::error!(
                    "comm {comm_id} rank {} stream {stream} block {} op {} ({}, peer {}): {e}",
                    self.config.rank,
                    op.basic_block_id,
                    op.net_op_idx,
                    op.kind_name(),
                    op.peer
                );
                failure = Some(e);
                break;
            }
            all_idle &= op.idle != 0;
            let next = op.next.0;
            if op.state == OP_STATE_DONE {
                // Recycle: re-arm, unlink, file again under its own block. `op` is last used
                // here; the list links are then written through raw pointers only.
                op.executions += 1;
                let armed = op.rearm();
                let bb_of_op = op.basic_block_id;
                // SAFETY: `prev` is null or the op before `cur` on `active`.
                let unlinked = unsafe { st.active.unlink_after(prev) };
                debug_assert_eq!(unlinked, cur);
                if let Some(files) = st.blocks.get_mut(&bb_of_op) {
                    // SAFETY: `cur` is live and on no list.
                    unsafe { files.ops.push_back(cur) };
                }
                if let Err(e) = armed {
                    failure = Some(e);
                    break;
                }
            } else {
                prev = cur;
            }
            cur = next;
        }
        if let Some(e) = failure {
            return Err(self.fail(e));
        }
        // 4. Done = active empty; done with a pending block is neither idle nor done.
        let st = &self.streams[s];
        let my_done = st.active.is_empty();
        if my_done && st.pending_bb != BB_NONE {
            *idle = false;
            *done = false;
        } else {
            *idle &= all_idle;
            *done &= my_done;
        }
        Ok(())
    }

    /// Stream teardown: cancels the requests of ops in flight, polls the transport until each
    /// reports completion or cancellation (at most the drain limit), then returns every op of
    /// the stream (active, filed, being built) to the pool and sets current and pending blocks
    /// to none. Works on a failed comm. The stream is then empty and reusable.
    ///
    /// # Errors
    /// * `Invalid` for stream ≥ 4;
    /// * `Timeout` when the drain limit passed: the comm is marked failed and the undrained
    ///   requests stay with the transport until the comm is dropped (no buffer is reused while
    ///   the transport may still touch it). The stream is torn down all the same.
    ///
    /// Seed: `neuronStopNetworkProxy` (nccom:0x487d0), §4; DESIGN.md §3.
    pub fn stop(&mut self, stream: u32) -> Result<(), NrtStatus> {
        let s = check_stream(stream)?;
        let comm_id = self.config.comm_id;
        // A stream torn down with ops still active (task failure, timeout, a comm leaving):
        // log the comm's state, every block and op, for the post-mortem (DESIGN.md §6).
        if !self.streams[s].active.is_empty() && log::log_enabled!(log::Level::Warn) {
            let mut dump = alloc::string::String::new();
            let _ = self.dump(&mut dump);
            log::warn!(
                "stop: comm {comm_id} stream {stream} torn down with active ops; state:\n{dump}"
            );
        }
        // Cancel every outstanding request of the active ops.
        let mut pending: Vec<RequestId> = Vec::new();
        for opp in self.streams[s].active.iter() {
            // SAFETY: ops on `active` are live; no other reference to them exists here.
            let op = unsafe { &mut *opp };
            if let Some(t) = op.tracker_mut() {
                while let Some(r) = t.pop_front() {
                    pending.push(r.id);
                }
            }
        }
        for &id in &pending {
            if let Err(e) = self.transport.cancel(id) {
                log::warn!(
                    "stop: comm {comm_id} stream {stream}: cancel of request {id} failed: {e}"
                );
            }
        }
        let result = self.drain(&mut pending, &alloc::format!("stop: stream {stream}"));
        // Everything back to the pool.
        let st = &mut self.streams[s];
        let mut all = OpList::new();
        all.append(&mut st.active);
        all.append(&mut st.next_ops);
        for files in st.blocks.values_mut() {
            all.append(&mut files.ops);
        }
        StreamState::release_list(&mut st.pool, &mut all);
        st.blocks.clear();
        st.current_bb = BB_NONE;
        st.pending_bb = BB_NONE;
        result
    }

    /// Tests `pending` until each reports finished or failed, bounded by the drain limits.
    fn drain(&mut self, pending: &mut Vec<RequestId>, what: &str) -> Result<(), NrtStatus> {
        if pending.is_empty() {
            return Ok(());
        }
        let deadline = self
            .clock
            .now_ns()
            .saturating_add(self.config.drain_limit_ns);
        let mut polls = 0u64;
        loop {
            let _ = self.transport.poll();
            let transport = &mut self.transport;
            pending.retain(|&id| match transport.test(id) {
                Ok(TestOutcome::Pending) => true,
                Ok(_) => false,
                Err(e) => {
                    log::debug!("stop: request {id} ended with {e}");
                    false
                }
            });
            if pending.is_empty() {
                return Ok(());
            }
            polls += 1;
            if polls >= self.config.drain_max_polls || self.clock.now_ns() > deadline {
                log::error!(
                    "{what}: comm {}: {} requests not confirmed within the drain limit; comm failed",
                    self.config.comm_id,
                    pending.len()
                );
                self.orphans.append(pending);
                self.fail(NrtStatus::Timeout);
                return Err(NrtStatus::Timeout);
            }
            spin_loop();
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        for s in 0..NUM_STREAMS as u32 {
            let _ = self.stop(s);
        }
        if !self.orphans.is_empty() {
            let mut orphans = core::mem::take(&mut self.orphans);
            let _ = self.drain(&mut orphans, "destroy: requests stop left behind");
            if !orphans.is_empty() {
                log::error!(
                    "destroy: comm {}: {} requests still with the transport at close",
                    self.config.comm_id,
                    orphans.len()
                );
            }
        }
        if let Err(e) = self.transport.close() {
            log::warn!(
                "destroy: comm {}: transport close: {e}",
                self.config.comm_id
            );
        }
    }
}
