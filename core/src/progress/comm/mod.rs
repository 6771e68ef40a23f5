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
//! Steady state (docs/design.md §3): an execution of a shape the comm has run before allocates
//! nothing: trackers are emptied in place and kept by freed ops, the block map and the scratch
//! of `start` / `stop` keep their storage. The transport is polled once per round of stream
//! calls (a call on a stream at or below the previous call's stream, or the first call after a
//! `start` or `stop`, starts a round, docs/design.md §8).
//!
//! Seed: `ncclProxyState` (192 B × 4), `ncclProxySaveNeuron` / `ncclProxyStart`,
//! `ncclProxyProgress`, `ncclProxyProgressOps`, `proxyReloadProxyArgs`, `recycleOp`,
//! `neuronStopNetworkProxy`, §4; docs/design.md §3 is the exact contract.

use crate::base::sync::PlainArc;
use alloc::alloc::{alloc_zeroed, dealloc, Layout};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ptr::{self, NonNull};

use crate::base::abort::AbortHandle;
use crate::base::desc::{
    NetDestAddr, NetOpInfo, NetSrcAddr, EXEC_COMPLETE, MAX_ENTRIES_PER_OP, MAX_OP_TAG,
    NET_OP_COMPLETE, NET_TRANSFER, NO_PEER, NUM_STREAMS,
};
use crate::base::status::NrtStatus;
use crate::base::sync::spin_loop;
use crate::base::time::Clock;
use crate::progress::device::DeviceCallbacks;
use crate::progress::net::{RequestId, TestOutcome, Transport, MAX_COMM_ID, MAX_NRANKS};
use crate::progress::op::{OpCtx, OpList, OpState, PoolBlock, ProxyOp, OPS_PER_POOL_BLOCK};
use crate::progress::sendrecv;
use crate::progress::stats::{OpPeak, ProtocolStats};

/// Block id meaning "none" (`(uint32)-1`).
pub const BB_NONE: u32 = u32::MAX;
/// Default drain limit of `stop`: 1 s.
pub const DEFAULT_DRAIN_LIMIT_NS: u64 = 1_000_000_000;
/// Default cap on `stop`'s drain polls (bounds the drain even with a clock that does not move).
pub const DEFAULT_DRAIN_MAX_POLLS: u64 = 50_000_000;
/// Polls of a drain that spin (`spin_loop` between them) before it backs off to the comm's
/// relax hook ([`Comm::set_drain_relax`]) between polls.
pub const DRAIN_SPIN_POLLS: u64 = 64;
/// Polls of a synchronous drain that call the relax hook, after the [`DRAIN_SPIN_POLLS`] that
/// spin, before it parks ([`Comm::set_drain_park`], when the platform gave a park hook).
pub const DRAIN_RELAX_POLLS: u64 = 1024;
/// First park of a synchronous drain's backoff, in ns; each later park doubles it, up to
/// [`DRAIN_PARK_MAX_NS`], and no park goes past the teardown's deadline.
pub const DRAIN_PARK_FIRST_NS: u64 = 10_000;
/// Longest park of a synchronous drain's backoff, in ns (1 ms).
pub const DRAIN_PARK_MAX_NS: u64 = 1_000_000;
/// Transport polls one call of [`Comm::stop_step`] makes at most (one step of a stepped
/// teardown, docs/design.md §3).
pub const STOP_STEP_POLLS: u64 = 4;

/// What a comm is created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommConfig {
    /// This comm's rank, `< nranks`.
    pub rank: u32,
    /// Ranks in the comm, `1..=65536`.
    pub nranks: u32,
    /// Id shared by every rank of the comm, `< 2^15` (it is in every transport tag).
    pub comm_id: u32,
    /// A teardown (the `stop` calls in a row that end a task, or a destroy) waits at most
    /// this long (ns) for cancelled requests to be confirmed, over all its streams together.
    pub drain_limit_ns: u64,
    /// A teardown polls the transport at most this many times while draining, over all its
    /// streams together.
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

/// A communicator's progress half: rank, nranks, comm id, transport, device callbacks, four
/// streams, the op count and the sticky fatal error.
///
/// Used by one thread at a time (the worker of its group, docs/design.md §8): `Comm` is `Send`, not
/// `Sync`, and every entry point takes `&mut self`.
///
/// Seed: `ncclComm` (`proxyStateStream[4]` at +18384, `lastOpCount` at +17696, `fatalError` at
/// +18184), §4.
pub struct Comm {
    config: CommConfig,
    streams: [StreamState; NUM_STREAMS],
    last_op_count: u64,
    fatal: Option<NrtStatus>,
    /// The rank the fatal error names, when the transport named one (a lost peer).
    fatal_peer: Option<u32>,
    transport: Box<dyn Transport>,
    device: PlainArc<dyn DeviceCallbacks>,
    clock: PlainArc<dyn Clock>,
    /// Registered host memory `(base, len)`; `None` = addresses are not checked (C callers).
    regions: Option<Vec<(u64, u64)>>,
    /// Requests `stop` could not drain: left with the transport until destroy.
    orphans: Vec<RequestId>,
    /// `start`'s scratch, kept between calls (cleared, not freed): per op info, the count and
    /// then the next placement index of its `[source, destination]` entries.
    start_scratch: Vec<[u32; 2]>,
    /// The budget of the teardown under way, `(deadline_ns, polls_left)`: set by the first
    /// drain after a `start` / `progress` (or at destroy), shared by the drains that follow,
    /// so one teardown of up to four streams waits at most one drain limit.
    teardown: Option<(u64, u64)>,
    /// Called between drain polls once [`DRAIN_SPIN_POLLS`] have spun (default: a spin hint;
    /// a std platform passes its thread yield).
    relax: fn(),
    /// Parks the thread for about the given ns between drain polls once the relax polls are
    /// spent ([`Comm::set_drain_park`]; `None`: keep calling the relax hook).
    park: Option<fn(u64)>,
    /// The comm's abort request (shared with its tasks and any thread that may abort it).
    abort: AbortHandle,
    /// `true` once the abort was applied (streams stopped, comm failed with its status).
    abort_applied: bool,
    /// The stream of the last `progress` call that got past the argument checks, or
    /// [`BB_NONE`] before the first and after a `start` or `stop`: a call on a stream `<=` it
    /// (or while it is none) starts a new round.
    round_last_stream: u32,
    /// `true` once the transport was polled in the current round (docs/design.md §8).
    round_polled: bool,
    /// The protocol counters since creation ([`Comm::protocol_stats`]).
    stats: ProtocolStats,
    /// One record per filed (stream, block, op), sorted by that key ([`Comm::op_peaks`]).
    op_peaks: Vec<OpPeak>,
    /// Test scaffolding (feature `testing`): the scripts of this comm's scripted ops, keyed by
    /// the op's address (`progress::scripted`), so no script field sits in the 352-byte op.
    #[cfg(any(test, feature = "testing"))]
    scripts: crate::progress::script::ScriptTable,
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
            .field("fatal_peer", &self.fatal_peer)
            .finish_non_exhaustive()
    }
}

macro_rules! reject {
    ($($arg:tt)*) => {{
        log::error!($($arg)*);
        return Err(NrtStatus::Invalid);
    }};
}

mod peaks;
mod start;
mod stream;
mod teardown;
#[cfg(all(test, not(loom)))]
mod tests;
mod validate;
mod walk;

pub use stream::{BlockFiles, BlockMap, StreamState};
use validate::check_stream;
pub use walk::StreamTick;

impl Comm {
    /// Creates a comm over `transport`, calling back into the device through `device`.
    ///
    /// # Errors
    /// `Invalid` when `nranks` is 0 or above 65536, `rank >= nranks`, or `comm_id >= 2^15`.
    pub fn new(
        config: CommConfig,
        transport: Box<dyn Transport>,
        device: PlainArc<dyn DeviceCallbacks>,
        clock: PlainArc<dyn Clock>,
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
            fatal_peer: None,
            transport,
            device,
            clock,
            regions: Some(Vec::new()),
            orphans: Vec::new(),
            start_scratch: Vec::new(),
            teardown: None,
            relax: spin_loop,
            park: None,
            abort: AbortHandle::new(),
            abort_applied: false,
            round_last_stream: BB_NONE,
            round_polled: false,
            stats: ProtocolStats::new(),
            op_peaks: Vec::new(),
            #[cfg(any(test, feature = "testing"))]
            scripts: Default::default(),
        })
    }

    /// This comm's configuration.
    pub fn config(&self) -> &CommConfig {
        &self.config
    }

    /// The sticky fatal error, if the comm has failed (an applied abort's status included).
    pub fn fatal_error(&self) -> Option<NrtStatus> {
        self.fatal
    }

    /// The rank the sticky fatal error names, when the transport's failure named one (e.g. a
    /// peer whose process or host was lost, docs/design.md §9 "Liveness"); `None` otherwise.
    pub fn fatal_peer(&self) -> Option<u32> {
        self.fatal_peer
    }

    /// The comm's abort handle (a clone sharing one word): any thread may call
    /// [`AbortHandle::abort`] on it at any time. The thread that drives the comm applies it at
    /// the comm's next `start` or `progress` (the comm fails with the abort's status, every
    /// stream's teardown begins, see below; `start` and `progress` then answer that status) and at the next step of every task that carries
    /// the handle (`NetworkTask::with_abort`, `BarrierTask::with_abort`: they end DONE with
    /// it). Applying it never blocks: each stream's teardown is begun as by
    /// [`Comm::stop_step`] (requests cancelled, one bounded step of the drain; ops with
    /// unconfirmed requests held out of the pool until a later `stop_step`, a `stop` or
    /// destroy sees them confirmed). Destroying an aborted comm is an ordinary destroy.
    ///
    /// Seed: none; docs/design.md §9 ("Abort").
    pub fn abort_handle(&self) -> AbortHandle {
        self.abort.clone()
    }

    /// Sets the hook a teardown's drain calls between transport polls once
    /// [`DRAIN_SPIN_POLLS`] polls have spun (the default is a spin hint; a std platform passes
    /// `std::thread::yield_now`, so a drain waiting for a slow transport gives the CPU to
    /// other threads, such as a peer's driving thread, instead of spinning on it).
    pub fn set_drain_relax(&mut self, relax: fn()) {
        self.relax = relax;
    }

    /// Sets the hook a synchronous drain (`stop`, destroy) calls between transport polls once
    /// [`DRAIN_SPIN_POLLS`] have spun and [`DRAIN_RELAX_POLLS`] have called the relax hook:
    /// `park(ns)` should block the calling thread for about `ns` nanoseconds (a std platform
    /// passes a `std::thread::sleep` wrapper). The parks back off from
    /// [`DRAIN_PARK_FIRST_NS`], doubling up to [`DRAIN_PARK_MAX_NS`], and none goes past the
    /// teardown's deadline. Without a hook (the default: `proxy-core` has no sleep) the drain
    /// keeps calling the relax hook. The stepped teardown ([`Comm::stop_step`]) never parks.
    pub fn set_drain_park(&mut self, park: fn(u64)) {
        self.park = Some(park);
    }

    /// Applies a requested abort once: the comm fails with the abort's status and every
    /// stream's teardown begins (cancel, one bounded step of the drain, one teardown budget). Returns the status while the
    /// comm is aborted (`None` when it is not).
    fn check_abort(&mut self) -> Option<NrtStatus> {
        let status = self.abort.aborted()?;
        if !self.abort_applied {
            self.abort_applied = true;
            log::warn!(
                "comm {} rank {}: abort applied ({status}): stopping every stream",
                self.config.comm_id,
                self.config.rank
            );
            if self.fatal.is_none() {
                self.fatal = Some(status);
            }
            // One bounded step of each stream's teardown, never a blocking drain: the caller
            // may be a driver's tick. What is still pending is finished by the stepped stops
            // of the task that ends (or a stop, or destroy).
            for s in 0..NUM_STREAMS as u32 {
                let mut done = false;
                let _ = self.stop_step(s, &mut done);
            }
        }
        Some(status)
    }

    /// The comm's protocol counters, cumulative since the comm was created (a copy; `size`
    /// set). See [`ProtocolStats`] for what each counts (docs/design.md §5, "Protocol
    /// counters").
    ///
    /// Seed: none (counts what `netNeuronSendProxy` / `netNeuronRecvProxy` do, §4).
    pub fn protocol_stats(&self) -> ProtocolStats {
        self.stats
    }

    /// Per-op detail of the blocks filed: one [`OpPeak`] per filed (stream, basic block, op),
    /// sorted by that key, replaced when the same block is filed again (a loop does not grow
    /// it). The counters are current as of each op's last finished execution or its stream's
    /// last `stop` (see [`OpPeak`]).
    pub fn op_peaks(&self) -> &[OpPeak] {
        &self.op_peaks
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

    /// Writes the comm's state to `out`, one line per object, `key=value` fields (the format of
    /// the state dump, docs/design.md §6; `driver::dump`): the comm
    /// (`comm=7 rank=0 nranks=2 transport=mem last_op_count=2 fatal=none fatal_peer=none
    /// aborted=none orphans=0 starts=1 block_switches=0 early_send_completions=0
    /// recvs_posted_ahead=0 max_recv_ahead=0 index_wraps=0 peak_outstanding_send=2
    /// peak_outstanding_recv=2`: `fatal_peer` the rank a lost-peer failure names, then the
    /// protocol counters, [`ProtocolStats`]), each stream
    /// (`comm=7 stream=2 current=0x4 pending=0xffffffff active=2 free=126/128 blocks=1
    /// closing=false closing_requests=0 closing_ops=0`: current and pending basic block, and a
    /// stepped teardown under way with its unconfirmed requests and held ops), and each op on a stream's active
    /// list or filed in its block map (`comm=7 stream=2 op=0 list=active kind=send bb=4
    /// count=1 state=2 peer=1 posted=3/8 device=3 completed=2 credited=2 outstanding=1`: entries
    /// posted of the op's entries, the device's pre-post index, entries completed and credited to
    /// the device, requests outstanding at the transport). Called by the thread that drives the
    /// comm: a dump never reads it from another thread.
    ///
    /// # Errors
    /// Whatever `out` returns.
    pub fn dump(&self, out: &mut dyn core::fmt::Write) -> core::fmt::Result {
        use crate::base::dump_lines::Opt;
        let id = self.config.comm_id;
        write!(
            out,
            "comm={id} rank={} nranks={} transport={} last_op_count={} fatal={} fatal_peer={} aborted={} orphans={} \
             starts={} block_switches={} early_send_completions={} recvs_posted_ahead={} max_recv_ahead={} index_wraps={} \
             peak_outstanding_send={} peak_outstanding_recv={}",
            self.config.rank,
            self.config.nranks,
            self.transport.name().replace(' ', "_"),
            self.last_op_count,
            Opt(self.fatal.map(NrtStatus::as_str)),
            Opt(self.fatal_peer),
            Opt(self.abort.aborted().map(NrtStatus::as_str)),
            self.orphans.len(),
            self.stats.starts,
            self.stats.block_switches,
            self.stats.early_send_completions,
            self.stats.recvs_posted_ahead,
            self.stats.max_recv_ahead,
            self.stats.index_wraps,
            self.stats.peak_outstanding_send,
            self.stats.peak_outstanding_recv
        )?;
        self.transport.dump_state(out)?;
        writeln!(out)?;
        for (s, st) in self.streams.iter().enumerate() {
            writeln!(
                out,
                "comm={id} stream={s} current={:#x} pending={:#x} active={} free={}/{} blocks={} closing={} closing_requests={} closing_ops={}",
                st.current_bb,
                st.pending_bb,
                st.active.len(),
                st.pool.len(),
                st.capacity(),
                st.blocks.len(),
                st.closing(),
                st.closing_requests(),
                st.closing_ops()
            )?;
            let lists = core::iter::once(("active", &st.active))
                .chain(st.blocks.values().map(|f| ("filed", &f.ops)));
            for (what, list) in lists {
                for opp in list.iter() {
                    // SAFETY: ops on the stream's lists are live; `&self` excludes mutation.
                    let op = unsafe { &*opp };
                    writeln!(
                        out,
                        "comm={id} stream={s} op={} list={what} kind={} bb={} count={} state={} peer={} posted={}/{} device={} completed={} credited={} outstanding={}",
                        op.net_op_idx,
                        op.kind_name(),
                        op.basic_block_id,
                        op.op_count,
                        op.state().as_u32(),
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

    /// The caller is about to free or unmap `addr .. addr + len`: the transport drops its cached
    /// memory registrations overlapping the range ([`Transport::invalidate`]), so that a later
    /// buffer at the same address is registered afresh instead of being posted with the stale
    /// registration. Registrations that requests in flight still use are released when those
    /// requests complete and are never used again. Works on a failed or aborted comm (its
    /// transport stays open until the comm is dropped). The ranges of
    /// [`Comm::register_memory`] are not changed.
    ///
    /// Like the seam, called by the comm's one thread. For a comm whose tasks a proxy queue
    /// runs, ask the queue instead ([`SlotHandle::invalidate_until`](
    /// crate::driver::queue::SlotHandle::invalidate_until) with
    /// [`crate::seam::in_process_invalidate_range`]): its driving thread calls this at a safe
    /// point, at any time, also while the tasks run.
    ///
    /// # Errors
    /// `Invalid` for an empty or wrapping range; the transport's status when it fails (the comm
    /// does not fail with it).
    pub fn invalidate_range(&mut self, addr: u64, len: u64) -> Result<(), NrtStatus> {
        if len == 0 || addr.checked_add(len).is_none() {
            reject!("cannot invalidate memory range {addr:#x}+{len:#x}: empty or wrapping");
        }
        self.transport.invalidate(addr, len).map_err(|e| {
            log::error!(
                "comm {} rank {}: invalidate {addr:#x}+{len:#x}: {e}",
                self.config.comm_id,
                self.config.rank
            );
            e.status
        })
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
}

impl Drop for Comm {
    /// Destroy: stops every stream and drains the requests an earlier stop left behind, all
    /// within one teardown budget of its own (one drain limit; see [`Comm::stop`]), then
    /// closes the transport. Runs once (Rust drops a value once), also after an abort or a
    /// failure: an aborted comm's streams are already empty, so nothing is stopped twice.
    fn drop(&mut self) {
        self.teardown = None;
        for s in 0..NUM_STREAMS as u32 {
            let _ = self.stop(s);
        }
        if !self.orphans.is_empty() {
            let mut orphans = core::mem::take(&mut self.orphans);
            let _ = self.drain(
                &mut orphans,
                "destroy: requests stop left behind",
                None,
                None,
            );
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
