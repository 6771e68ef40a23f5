//! The collective planner: from (collective, algorithm, count, data type, reduction op, rank,
//! nranks, chunk bytes, root, buffer layout) to one rank's op infos, source and destination
//! FIFOs with their marks, the host words the ops need, and the device program the emulator
//! runs (docs/design.md §5, issue 6).
//!
//! # Shape of a plan
//! A [`RankPlan`] is one basic block (one collective call) of one rank:
//! * [`RankPlan::ops`]: the network ops, each a send side and/or a recv side with a peer and a
//!   `tag` shared with the partner op on the peer;
//! * [`RankPlan::src`] / [`RankPlan::dst`]: the FIFO entries, grouped by op, each in the order
//!   the device posts them, as buffer-relative locations ([`Loc`]);
//! * [`RankPlan::program`]: the device's instruction list ([`Instr`]): arm the handshakes, post
//!   entries (raise a host index), wait for completions (read a semaphore), reduce and copy.
//!
//! [`RankPlan::fifos`] turns the plan into the three `repr(C)` FIFOs `start` takes, once the
//! caller has placed the buffers and the host words ([`Addresses`]). Op `k` uses host words
//! `6k .. 6k + 6` ([`OpWord`]).
//!
//! # Streams, basic blocks and the `nec.h` options
//! [`plan`] makes one block. [`plan_blocks`] splits the collective over [`PlanParams::streams`]
//! stream slices and [`PlanParams::blocks`] basic blocks per slice, at chunk granularity, each
//! part planned with the whole collective's algorithm and moved into the whole buffers, with its
//! own scratch, op tags and host words ([`BlockPlans`], [`BlockPlan`]; the `split` module's docs
//! say how). [`PlanParams::nec`] ([`NecOptions`]) goes into every op info ([`RankPlan::fifos`]);
//! the early receive credits are lowered per op to what its program can promise
//! ([`PlannedOp::ending_recv_credits`]). The interpreter honours each option as a device would
//! (docs/design.md §5, "The `nec.h` options").
//!
//! # How waits are placed
//! Each algorithm only says, in a pipelined order, which entries to post and which local
//! reductions and copies to do; a hazard tracker (`builder`) inserts the minimum waits so that
//! no byte range is read while a receive into it is in flight, nor written while a send from it
//! or a receive into it is in flight (in-place layouts alias the input and the output, and the
//! tracker sees that). The planner's own tests run every plan through an in-memory simulation
//! of the device, the proxy and the transport with an independent race detector, once with
//! sends completing as they meet their receives and once with each rank's sends completing in
//! posting order (the shm provider).
//!
//! # How sends are paced
//! A send entry is posted no earlier than the program point where the peer posts the matching
//! receive. Sends that need no data (a ring's step 0, direct all-reduce / reduce-scatter) go
//! out `pipeline_depth` chunks ahead, then one chunk per receive-window slot the program
//! re-posts. Without this a provider that completes sends in posting order deadlocks any
//! program that waits on a send mid-way (docs/design.md §5, "Sends never run ahead of the
//! peer's receives"; issue 13).
//!
//! # Algorithms
//! * ring (bandwidth): all-reduce = reduce-scatter then all-gather around the ring, `2(n−1)`
//!   steps; all-gather and reduce-scatter `n−1` steps; broadcast a chain from the root; each
//!   step pipelined in chunks of `chunk_bytes`.
//! * direct (latency, one network step): every rank exchanges with every peer at once (the
//!   pairwise pattern); reductions fold in rank order, so every rank computes bit-identical
//!   results.
//! * recursive doubling (all-reduce, all-gather), Rabenseifner (all-reduce), recursive
//!   halving (reduce-scatter), Bruck (all-gather, all-to-all), binomial and scatter +
//!   all-gather (broadcast): `log n`
//!   steps for any rank count (the extra ranks above a power of two folded in and out), in
//!   `algos/` ([`Algorithm`] says how each works and where it comes from).
//! * send-recv (`r → r+1`, `r−1 → r`) has one algorithm, direct; all-to-all direct (pairwise)
//!   or Bruck.
//! * [`Algorithm::Auto`] asks the [`tuner`]: the cheapest algorithm by an α–β cost model,
//!   direct only at or below [`PlanParams::direct_threshold_bytes`] where a ring exists.
//!
//! With one rank every collective is a local copy and the plan has no ops.
//!
//! Seed: the producer of `enc_fifo_set` (`build_fifo_block_ids`, nrt:0x124f20) and the
//! on-device collective program it pairs with, §3 and §5.

mod algos;
mod builder;
mod collective;
pub mod data;
mod hosts;
pub mod kernels;
mod plan;
mod split;
#[cfg(test)]
mod tests;
pub mod tuner;

pub use plan::plan;
pub use split::{plan_blocks, tags_per_part, BlockPlan, BlockPlans};

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;

use proxy_core::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr, MAX_ENTRIES_PER_OP, NO_PEER};
pub use proxy_core::driver::task::CollectiveLabel;

pub use collective::{Algorithm, Collective};
pub use hosts::{HostMap, MAX_HOSTS};

/// The flat algorithm the leaders of a hierarchical all-reduce run (`algos::hier`).
pub(crate) fn algos_leaders(p: &PlanParams, h_n: u32) -> Algorithm {
    algos::leaders_algorithm(p, h_n)
}

/// Pieces the hierarchical all-reduce cuts a vector of `count` elements into, in chunks of
/// `chunk_elems`, for `h_n` hosts (the algorithm's `hier_pieces`; [`tuner::hierarchical_cost`]).
pub fn hier_pieces(count: u64, chunk_elems: u64, h_n: u32) -> u64 {
    algos::hier_pieces(count, chunk_elems, h_n)
}
pub use kernels::{DataType, RedOp};

/// Default chunk: 512 KiB per FIFO entry (NCCL's ring step size with its default buffers).
pub const DEFAULT_CHUNK_BYTES: u64 = 512 << 10;
/// Default pipeline depth: receives in flight per op side into scratch slots.
pub const DEFAULT_PIPELINE_DEPTH: u32 = 4;
/// Default size (bytes of the larger buffer) at or below which [`Algorithm::Auto`] picks the
/// direct (one-step) algorithm with 3 or more ranks. Measured crossover (proxy-perf all-reduce,
/// caller + polled, in-process, 2-core VM, 2026-12-01): direct is faster up to 128 KiB with 3
/// and 4 ranks (e.g. 40 vs 50 µs and 64 vs 76 µs at 128 KiB), ring from 256 KiB (89–130 vs
/// 77–88 µs with 3 ranks, 110–121 vs 219–282 µs with 4); see BENCHMARKS.md.
pub const DEFAULT_DIRECT_THRESHOLD_BYTES: u64 = 128 << 10;
/// [`DEFAULT_DIRECT_THRESHOLD_BYTES`] for 2 ranks, where direct stays ahead up to 256 KiB (17–18
/// vs 32 µs) and the two are level at 512 KiB.
pub const DEFAULT_DIRECT_THRESHOLD_BYTES_2_RANKS: u64 = 256 << 10;

/// Everything a plan is made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanParams {
    /// The collective.
    pub collective: Collective,
    /// The algorithm ([`Algorithm::Auto`] chooses by size).
    pub algorithm: Algorithm,
    /// Elements (per-collective meaning: see [`Collective`]).
    pub count: u64,
    /// Element type.
    pub dtype: DataType,
    /// Reduction op (used by all-reduce and reduce-scatter only).
    pub op: RedOp,
    /// This rank, `< nranks`.
    pub rank: u32,
    /// Ranks, `1..=MAX_OP_TAG`.
    pub nranks: u32,
    /// Largest FIFO entry in bytes (rounded down to whole elements, at least one element).
    pub chunk_bytes: u64,
    /// Root of a broadcast, `< nranks`.
    pub root: u32,
    /// In place: input and output share one buffer ([`Collective::in_place_offsets`]).
    pub in_place: bool,
    /// Receives in flight per op side into scratch slots, `>= 1`.
    pub pipeline_depth: u32,
    /// [`Algorithm::Auto`] considers direct only at or below this many bytes (larger buffer),
    /// for the collectives that have a ring (above it direct was measured to lose to ring).
    pub direct_threshold_bytes: u64,
    /// The constants [`Algorithm::Auto`]'s cost model uses ([`tuner`]).
    pub cost_model: tuner::CostModel,
    /// Streams the collective is split over by [`plan_blocks`], `1..=4` (slice `s` on stream
    /// `s`); [`plan`] ignores it.
    pub streams: u32,
    /// Basic blocks each stream's slice is split into by [`plan_blocks`] (block ids `1..=B`),
    /// `>= 1`; [`plan`] ignores it.
    pub blocks: u32,
    /// The `nec.h` options written into every op info ([`RankPlan::fifos`]) and honoured by
    /// the device program ([`crate::interpreter`]).
    pub nec: NecOptions,
    /// Which ranks share a host ([`Algorithm::Hierarchical`], and the tuner's choice when
    /// ranks span hosts); [`HostMap::NONE`]: unknown (every rank its own host).
    pub hosts: HostMap,
    /// The cost model's constants of a link between hosts ([`tuner`]): what the flat
    /// algorithms pay when ranks span hosts, and the leaders' phase of
    /// [`Algorithm::Hierarchical`]. Default: [`tuner::DEFAULT_COST_MODEL`] (hosts as fast as
    /// the host); proxy-perf and the C library set their link kind's
    /// [`tuner::LinkKind::default_inter_host_model`] without a calibration file.
    pub inter_host_model: tuner::CostModel,
    /// The CPUs that one host's ranks make progress on at once: the host's CPUs (affinity
    /// mask, cgroup quota) or the threads that drive its ranks' proxy queues, whichever is
    /// fewer. With fewer than the host's ranks, the tuner bounds each algorithm's time below by
    /// the host's total work over these CPUs, and considers [`Algorithm::Hierarchical`] on any
    /// host map, one host included ([`tuner`], "Crowded hosts"; without a map every rank is
    /// its own host and nothing is crowded). The same on every rank, like every parameter.
    /// Default 0: unknown (every rank progresses on a CPU of its own; the bound is off).
    pub progress_cpus: u32,
    /// Which of one host's ranks share a CPU, as groups of consecutive ranks (a launcher that
    /// pins the threads driving them in blocks says so; proxy-perf's caller mode does):
    /// [`Algorithm::Hierarchical`] on one crowded host then gathers and broadcasts inside each
    /// group and all-reduces among the groups' leaders ([`PlanParams::groups`]), so most
    /// messages stay between ranks of one CPU. Default [`HostMap::NONE`]: unknown.
    pub cpu_groups: HostMap,
}

/// The `nec.h` protocol options of a plan (docs/design.md §5, "The two early flags"); all off
/// by default. Seed: the fields of `net_ops_info_t`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NecOptions {
    /// `ending_recv_credits`: a recv op may post receives up to this many entries ahead of
    /// the host index (`early_recv_posting`); 0 = off. The planner lowers it per op to what
    /// the op's program can promise ([`PlannedOp::ending_recv_credits`]).
    pub early_recv: u32,
    /// `early_send_completion`: a send entry whose payload the transport copied counts as
    /// complete at once.
    pub early_send: bool,
    /// `net_idx_loop_size`: the host indices wrap modulo this, and the device never has this
    /// many entries posted and not completed per op side; 0 = no wrap, else `>= 2`.
    pub idx_wrap: u32,
    /// `initial_send_credits`: requests a send op keeps outstanding, `0..=128`; 0 = the
    /// progress half's default (128).
    pub credits: u32,
}

impl PlanParams {
    /// Parameters with the defaults: auto algorithm, sum, root 0, out of place,
    /// [`DEFAULT_CHUNK_BYTES`], [`DEFAULT_PIPELINE_DEPTH`], [`DEFAULT_DIRECT_THRESHOLD_BYTES`]
    /// ([`DEFAULT_DIRECT_THRESHOLD_BYTES_2_RANKS`] with 2 ranks),
    /// [`tuner::DEFAULT_COST_MODEL`].
    pub const fn new(
        collective: Collective,
        count: u64,
        dtype: DataType,
        rank: u32,
        nranks: u32,
    ) -> Self {
        Self {
            collective,
            algorithm: Algorithm::Auto,
            count,
            dtype,
            op: RedOp::Sum,
            rank,
            nranks,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            root: 0,
            in_place: false,
            pipeline_depth: DEFAULT_PIPELINE_DEPTH,
            direct_threshold_bytes: if nranks == 2 {
                DEFAULT_DIRECT_THRESHOLD_BYTES_2_RANKS
            } else {
                DEFAULT_DIRECT_THRESHOLD_BYTES
            },
            cost_model: tuner::DEFAULT_COST_MODEL,
            streams: 1,
            blocks: 1,
            nec: NecOptions {
                early_recv: 0,
                early_send: false,
                idx_wrap: 0,
                credits: 0,
            },
            hosts: HostMap::NONE,
            inter_host_model: tuner::DEFAULT_COST_MODEL,
            progress_cpus: 0,
            cpu_groups: HostMap::NONE,
        }
    }

    /// The same parameters for another rank.
    pub const fn for_rank(mut self, rank: u32) -> Self {
        self.rank = rank;
        self
    }

    /// The algorithm a plan with these parameters uses (never [`Algorithm::Auto`]): the one
    /// asked for, or [`tuner::pick`]'s choice for [`Algorithm::Auto`]. Ring and direct on
    /// send-recv and all-to-all resolve to direct (the pairwise exchange). An algorithm the
    /// collective does not support is returned as asked; [`plan`] refuses it
    /// ([`PlanError::Unsupported`]).
    pub fn resolved_algorithm(&self) -> Algorithm {
        match (self.collective, self.algorithm) {
            (_, Algorithm::Auto) => tuner::pick(self),
            (Collective::SendRecv | Collective::AllToAll, Algorithm::Ring) => Algorithm::Direct,
            (_, a) => a,
        }
    }

    /// The state-dump label of a plan made from these parameters (before the algorithm is
    /// resolved): the collective's name, [`PlanParams::resolved_algorithm`]'s name and
    /// [`tuner::why`]. A producer that chose the algorithm from an override replaces `why`
    /// (`env`, `api`).
    pub fn label(&self) -> CollectiveLabel {
        CollectiveLabel {
            collective: self.collective.name(),
            algorithm: self.resolved_algorithm().name(),
            why: tuner::why(self),
        }
    }

    /// Bytes of the larger of the rank's two buffers (what the tuner and the tools size by);
    /// saturates at `u64::MAX`.
    pub fn bytes(&self) -> u64 {
        let (i, o) = self.collective.buffer_elems(self.count, self.nranks);
        i.max(o).saturating_mul(self.dtype.size() as u64)
    }

    /// Elements per chunk: `chunk_bytes` rounded down to whole elements, at least 1.
    pub fn chunk_elems(&self) -> u64 {
        (self.chunk_bytes / self.dtype.size() as u64).max(1)
    }
}

/// Why a plan cannot be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// `nranks` is 0 or above the op-tag range, or `rank` / `root` is not below it.
    BadRank,
    /// `pipeline_depth` is 0.
    BadDepth,
    /// The buffers would not fit in 64-bit byte counts.
    TooLarge,
    /// An op side would need more than 2^16 entries: the chunk is too small for the count.
    TooManyEntries,
    /// `streams` is not in `1..=4` or `blocks` is 0.
    BadSplit,
    /// `nec.credits` is above 128 or `nec.idx_wrap` is 1.
    BadNec,
    /// The (stream, block, op) tags do not fit below 2^14: fewer streams, blocks or ranks.
    TooManyTags,
    /// The algorithm does not support the collective ([`Algorithm::supports`]).
    Unsupported,
    /// The host map's ranks do not add up to `nranks`.
    BadHosts,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PlanError::BadRank => "rank, root or nranks out of range",
            PlanError::BadDepth => "pipeline depth must be at least 1",
            PlanError::TooLarge => "buffer sizes overflow",
            PlanError::TooManyEntries => {
                "an op would need more than 65536 FIFO entries: use a larger chunk"
            }
            PlanError::BadSplit => "streams must be 1..=4 and blocks at least 1",
            PlanError::BadNec => "send credits above 128, or an index wrap of 1",
            PlanError::TooManyTags => {
                "the (stream, block, op) tags do not fit below 2^14: fewer streams or blocks"
            }
            PlanError::Unsupported => "the algorithm does not support this collective",
            PlanError::BadHosts => "the host map's ranks do not add up to nranks",
        })
    }
}

/// Which of a rank's buffers a location is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buf {
    /// The collective's input (send buffer).
    Input,
    /// The collective's output (receive buffer).
    Output,
    /// The rank's scratch area ([`Layout::scratch_bytes`]).
    Scratch,
}

/// A byte location: `offset` bytes into `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Loc {
    /// The buffer.
    pub buf: Buf,
    /// Byte offset inside it (a multiple of the element size).
    pub offset: u64,
}

impl Loc {
    /// `offset` bytes into `buf`.
    pub const fn new(buf: Buf, offset: u64) -> Self {
        Self { buf, offset }
    }

    /// The location `bytes` further on.
    pub const fn add(self, bytes: u64) -> Self {
        Self {
            buf: self.buf,
            offset: self.offset + bytes,
        }
    }
}

/// The buffers a rank's plan needs, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Input size.
    pub input_bytes: u64,
    /// Output size.
    pub output_bytes: u64,
    /// Scratch size (receive slots, staging); may be 0.
    pub scratch_bytes: u64,
    /// Input and output share one buffer of `max(input, output)` bytes.
    pub in_place: bool,
    /// In place: the input's byte offset inside the shared buffer (else 0).
    pub input_offset: u64,
    /// In place: the output's byte offset inside the shared buffer (else 0).
    pub output_offset: u64,
}

impl Layout {
    /// Size of the one shared buffer when in place (`max(input, output)`).
    pub const fn shared_bytes(&self) -> u64 {
        if self.input_bytes > self.output_bytes {
            self.input_bytes
        } else {
            self.output_bytes
        }
    }
}

/// An op side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// The send side (source FIFO, `post_send`, `send_*` semaphores).
    Send = 0,
    /// The recv side (destination FIFO, `post_recv`, `recv_*` semaphores).
    Recv = 1,
}

/// Which of an op's six host-memory words, in the order they are laid out (op `k` at
/// `6k + word`). The words themselves are reached through `proxy_core::base::host_word::HostWord`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum OpWord {
    /// `post_send` host index (device → proxy).
    PostSend = 0,
    /// Send handshake semaphore (proxy → device).
    SendHandshake = 1,
    /// Send-complete semaphore (proxy → device).
    SendComplete = 2,
    /// `post_recv` host index (device → proxy).
    PostRecv = 3,
    /// Recv handshake semaphore (proxy → device).
    RecvHandshake = 4,
    /// Recv-complete semaphore (proxy → device).
    RecvComplete = 5,
}

/// Host words per op.
pub const WORDS_PER_OP: u32 = 6;

impl OpWord {
    /// Index of word `self` of op `op` in the plan's host-word array.
    pub const fn index(self, op: u32) -> u32 {
        op * WORDS_PER_OP + self as u32
    }

    /// The host index of `side`.
    pub const fn post(side: Side) -> Self {
        match side {
            Side::Send => OpWord::PostSend,
            Side::Recv => OpWord::PostRecv,
        }
    }

    /// The handshake semaphore of `side`.
    pub const fn handshake(side: Side) -> Self {
        match side {
            Side::Send => OpWord::SendHandshake,
            Side::Recv => OpWord::RecvHandshake,
        }
    }

    /// The complete semaphore of `side`.
    pub const fn complete(side: Side) -> Self {
        match side {
            Side::Send => OpWord::SendComplete,
            Side::Recv => OpWord::RecvComplete,
        }
    }
}

/// One network op of a plan (its FIFO entries are in [`RankPlan::src`] / [`RankPlan::dst`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedOp {
    /// Rank the send side sends to, or [`NO_PEER`].
    pub send_peer: i32,
    /// Rank the recv side receives from, or [`NO_PEER`].
    pub recv_peer: i32,
    /// Tag shared with the partner op on each peer (`< 2^14`).
    pub tag: u32,
    /// Source entries of this op: `src[src_base .. src_base + tx_entry_cnt]`.
    pub tx_entry_cnt: u32,
    /// Destination entries: `dst[dst_base .. dst_base + rx_entry_cnt]`.
    pub rx_entry_cnt: u32,
    /// First source entry of this op.
    pub src_base: u32,
    /// First destination entry of this op.
    pub dst_base: u32,
    /// `ending_recv_credits` of the recv side: [`NecOptions::early_recv`] lowered to what the
    /// program can promise (the device raises the host index only as far as the buffers of
    /// this many further entries are free, so every wait of the program must still be
    /// reachable); 0 = no early posting for this op.
    pub ending_recv_credits: u32,
}

impl PlannedOp {
    /// Entries on `side`.
    pub const fn entries(&self, side: Side) -> u32 {
        match side {
            Side::Send => self.tx_entry_cnt,
            Side::Recv => self.rx_entry_cnt,
        }
    }

    /// First entry of `side` in its FIFO.
    pub const fn base(&self, side: Side) -> u32 {
        match side {
            Side::Send => self.src_base,
            Side::Recv => self.dst_base,
        }
    }
}

/// One FIFO entry of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedEntry {
    /// Index of its op in [`RankPlan::ops`].
    pub op: u32,
    /// Where the payload is (source) or goes (destination).
    pub loc: Loc,
    /// Size in bytes (a multiple of the element size; 0 is valid).
    pub bytes: u64,
    /// [`proxy_core::base::desc::NET_TRANSFER`], [`proxy_core::base::desc::NET_OP_COMPLETE`] or
    /// [`proxy_core::base::desc::EXEC_COMPLETE`].
    pub mark: u32,
}

/// One instruction of a device program. Every count is relative to the current execution of
/// the block (the semaphores are cumulative; the device keeps the base).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instr {
    /// Write `0xFFFF_FFFF` to the side's host index (device ready for the handshake).
    Arm {
        /// Op index.
        op: u32,
        /// Side.
        side: Side,
    },
    /// Wait until the side's handshake semaphore has risen by one in this execution.
    WaitHandshake {
        /// Op index.
        op: u32,
        /// Side.
        side: Side,
    },
    /// Raise the side's host index to `upto` entries posted in this execution (the data of a
    /// send entry is ready; the buffer of a recv entry is free).
    Post {
        /// Op index.
        op: u32,
        /// Side.
        side: Side,
        /// Entries posted after this instruction.
        upto: u32,
    },
    /// Wait until the side's complete semaphore has risen by `upto` in this execution.
    Wait {
        /// Op index.
        op: u32,
        /// Side.
        side: Side,
        /// Entries that must be complete.
        upto: u32,
    },
    /// `dst[i] = a[i] op b[i]` for `elems` elements (`dst` may equal `a` or `b`, never
    /// overlap them otherwise).
    Reduce {
        /// Destination.
        dst: Loc,
        /// First operand.
        a: Loc,
        /// Second operand.
        b: Loc,
        /// Elements.
        elems: u64,
    },
    /// Copy `bytes` bytes from `src` to `dst` (never overlapping unless equal).
    Copy {
        /// Destination.
        dst: Loc,
        /// Source.
        src: Loc,
        /// Bytes.
        bytes: u64,
    },
}

/// Where a rank placed its buffers and host words (virtual addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addresses {
    /// Input buffer (in place: the shared buffer plus [`Layout::input_offset`]).
    pub input: u64,
    /// Output buffer (in place: the shared buffer plus [`Layout::output_offset`]).
    pub output: u64,
    /// Scratch area (unused when [`Layout::scratch_bytes`] is 0).
    pub scratch: u64,
    /// First host word; word `i` is at `words + word_stride × i` (4-byte aligned `u32`s).
    pub words: u64,
    /// Bytes between consecutive host words: 4 packs them; 64 gives each its own cache line
    /// (no false sharing between the device's and the proxy's writes). A multiple of 4.
    pub word_stride: u64,
}

impl Addresses {
    /// The address of `loc`.
    pub const fn of(&self, loc: Loc) -> u64 {
        let base = match loc.buf {
            Buf::Input => self.input,
            Buf::Output => self.output,
            Buf::Scratch => self.scratch,
        };
        base + loc.offset
    }

    /// The address of host word `index`.
    pub const fn word(&self, index: u32) -> u64 {
        self.words + self.word_stride * index as u64
    }
}

/// The three FIFOs of one `start` call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fifos {
    /// Op infos (`net_ops_info_fifo`).
    pub ops: Vec<NetOpInfo>,
    /// Source entries (`src_addr_fifo`), grouped by op.
    pub src: Vec<NetSrcAddr>,
    /// Destination entries (`dest_addr_fifo`), grouped by op.
    pub dst: Vec<NetDestAddr>,
}

/// One rank's plan of one collective call (one basic block).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankPlan {
    /// The parameters, with the algorithm resolved (never [`Algorithm::Auto`]).
    pub params: PlanParams,
    /// The buffers the plan needs.
    pub layout: Layout,
    /// The network ops (none with one rank or zero elements).
    pub ops: Vec<PlannedOp>,
    /// Source entries, grouped by op, each op's in posting order.
    pub src: Vec<PlannedEntry>,
    /// Destination entries, grouped by op, each op's in posting order.
    pub dst: Vec<PlannedEntry>,
    /// The device program of one execution of the block.
    pub program: Vec<Instr>,
    /// Per destination entry (parallel to [`RankPlan::dst`]): `true` when no instruction
    /// touches its buffer before the `Post` that hands it out, so the buffer is free from the
    /// start of the block (empty when [`NecOptions::early_recv`] is 0). The early receive
    /// credits promise only such entries at the handshake; the device writes a canary into
    /// those it has not promised yet and checks it before it promises them (docs/design.md
    /// §5).
    pub recv_free: Vec<bool>,
}

impl RankPlan {
    /// Host words the plan needs ([`WORDS_PER_OP`] per op).
    pub fn host_words(&self) -> u32 {
        self.ops.len() as u32 * WORDS_PER_OP
    }

    /// Entries of `op`'s `side`, in posting order.
    pub fn entries(&self, op: u32, side: Side) -> &[PlannedEntry] {
        let o = &self.ops[op as usize];
        let (fifo, base, n) = match side {
            Side::Send => (&self.src, o.src_base, o.tx_entry_cnt),
            Side::Recv => (&self.dst, o.dst_base, o.rx_entry_cnt),
        };
        &fifo[base as usize..(base + n) as usize]
    }

    /// The `repr(C)` FIFOs for `start`, with the buffers and host words at `addrs`, and the
    /// plan's [`NecOptions`] in every op info: `early_recv_posting` and `ending_recv_credits`
    /// from [`PlannedOp::ending_recv_credits`] (recv sides only), `early_send_completion`,
    /// `net_idx_loop_size` and `initial_send_credits` as given.
    pub fn fifos(&self, addrs: &Addresses) -> Fifos {
        let w = |op: u32, word: OpWord| addrs.word(word.index(op));
        let nec = self.params.nec;
        let ops = self
            .ops
            .iter()
            .enumerate()
            .map(|(k, o)| {
                let k = k as u32;
                let send = o.tx_entry_cnt > 0;
                let recv = o.rx_entry_cnt > 0;
                let pick = |yes: bool, v: u64| if yes { v } else { 0 };
                NetOpInfo {
                    send_peer: if send { o.send_peer } else { NO_PEER },
                    recv_peer: if recv { o.recv_peer } else { NO_PEER },
                    tag: o.tag,
                    tx_entry_cnt: o.tx_entry_cnt,
                    rx_entry_cnt: o.rx_entry_cnt,
                    net_idx_loop_size: nec.idx_wrap,
                    initial_send_credits: nec.credits,
                    ending_recv_credits: if recv { o.ending_recv_credits } else { 0 },
                    early_send_completion: u8::from(send && nec.early_send),
                    early_recv_posting: u8::from(recv && o.ending_recv_credits > 0),
                    reserved: [0; 2],
                    data_type_sz: self.params.dtype.size() as u32,
                    post_send_idx_addr: pick(send, w(k, OpWord::PostSend)),
                    post_recv_idx_addr: pick(recv, w(k, OpWord::PostRecv)),
                    send_handshake_sem_addr: pick(send, w(k, OpWord::SendHandshake)),
                    send_complete_sem_addr: pick(send, w(k, OpWord::SendComplete)),
                    recv_handshake_sem_addr: pick(recv, w(k, OpWord::RecvHandshake)),
                    recv_complete_sem_addr: pick(recv, w(k, OpWord::RecvComplete)),
                }
            })
            .collect();
        let src = self
            .src
            .iter()
            .map(|e| NetSrcAddr {
                net_op_idx: e.op,
                mark: e.mark,
                addr: addrs.of(e.loc),
                size: e.bytes,
                dest_rank: NO_PEER,
                reserved: 0,
            })
            .collect();
        let dst = self
            .dst
            .iter()
            .map(|e| NetDestAddr {
                net_op_idx: e.op,
                mark: e.mark,
                addr: addrs.of(e.loc),
                size: e.bytes,
                src_rank: NO_PEER,
                reserved: 0,
            })
            .collect();
        Fifos { ops, src, dst }
    }
}
