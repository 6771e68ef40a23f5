//! The proxy side of `proxy-perf` behind one small trait, [`Engine`]: the full driver
//! ([`Engine`]: proxy queues, worker threads, network and barrier tasks, status rings).
//!
//! It goes through [`counting_seam`]: the in-process seam with a counter on `start`, so tests can
//! check that `--loop` files each block once per stream for the whole run. The driver engine
//! also steps comms of a progress half loaded with `dlopen` ([`EngineComm::Loaded`], through
//! [`counting_loaded_seam`]) and runs its barrier tasks through a hierarchical barrier (shared
//! memory per host, the host leaders over the bootstrap) when the ranks are processes
//! ([`EngineBarrier::Bootstrap`], [`HostBarrier`]).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_utils::CachePadded;

use proxy_collectives::planner::Fifos;
use proxy_core::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr};
use proxy_core::base::host_word::HostWord;
use proxy_core::base::status::NrtStatus;
use proxy_core::base::time::{Clock, MonotonicClock};
use proxy_core::driver::queue::{ProxyQueue, TaskBox};
use proxy_core::driver::wake::{ThreadPark, Waiter};

/// Longest single park of a producer waiting for a record (then it checks its device).
const PARK_SLICE_NS: u64 = 1_000_000;
use proxy_core::driver::record::TaskRecord;
use proxy_core::driver::registry::Membership;
use proxy_core::driver::task::{
    BarrierChannel, BarrierTask, BarrierTaskSpec, BarrierTicket, BlockFifos, CollectiveLabel,
    CommHandle, NetworkTask, NetworkTaskSpec, SharedMemBarrier, SharedMemBarrierEndpoint, TaskKind,
};
use proxy_core::driver::trigger::TriggerWords;
use proxy_core::progress::comm::Comm;
use proxy_core::progress::stats::ProtocolStats;
use proxy_core::seam::{
    in_process_progress, in_process_start, in_process_stop, in_process_stop_step, SeamTable,
    StartFn,
};

use proxy_bootstrap::{HostBarrier, HostBarrierConfig, SharedBootstrap};
use proxy_emulator::WaitPolicy;
use proxy_runtime::loader::LoadedComm;
use proxy_runtime::{Config, LinuxRegistry};

/// Shards of the seam-start counter.
const SEAM_SHARDS: usize = 16;

/// `start` calls made through [`counting_seam`] in this process, one shard per driving thread
/// (round-robin past [`SEAM_SHARDS`] threads), each on its own cache line: every rank's thread
/// counts at every execution, and one shared counter moved its line between the CPUs at each
/// (1.3 % of an 8-rank in-process 8 B all-reduce's profile).
static SEAM_STARTS: [CachePadded<AtomicU64>; SEAM_SHARDS] =
    [const { CachePadded::new(AtomicU64::new(0)) }; SEAM_SHARDS];

/// The next thread's shard.
static NEXT_SEAM_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shard of [`SEAM_STARTS`].
    static SEAM_SHARD: usize = NEXT_SEAM_SHARD.fetch_add(1, Ordering::Relaxed) % SEAM_SHARDS;
}

/// Counts one `start` on this thread's shard.
fn count_seam_start() {
    let shard = SEAM_SHARD.with(|s| *s);
    SEAM_STARTS[shard].fetch_add(1, Ordering::Relaxed);
}

/// `start` calls made through [`counting_seam`] so far in this process (the sum of the
/// shards: exact once the counting threads' calls happened before, as the runs read it).
pub fn seam_starts() -> u64 {
    SEAM_STARTS.iter().map(|c| c.load(Ordering::Relaxed)).sum()
}

/// Ticks begun on all queues between two reads of [`Engine::queue_ticks`] (exact while fewer
/// than 2^32 pass on one queue between them).
pub fn ticks_between(earlier: &[u32], later: &[u32]) -> u64 {
    earlier
        .iter()
        .zip(later)
        .map(|(a, b)| u64::from(b.wrapping_sub(*a)))
        .sum()
}

/// `neuronStartNetworkProxy` of the in-process seam, counted.
///
/// # Safety
/// As [`in_process_start`].
unsafe extern "C" fn counting_start(
    comm: *mut c_void,
    stream: u32,
    bb: u32,
    ops: *const NetOpInfo,
    n_ops: usize,
    src: *const NetSrcAddr,
    n_src: usize,
    dst: *const NetDestAddr,
    n_dst: usize,
) -> u32 {
    count_seam_start();
    // SAFETY: forwarded under this function's contract.
    unsafe { in_process_start(comm, stream, bb, ops, n_ops, src, n_src, dst, n_dst) }
}

/// The in-process seam with a counter on `start` ([`seam_starts`]).
///
/// Seed: the neuron-slot table, §1 (here filled in-process, wrapped).
pub const fn counting_seam() -> SeamTable {
    SeamTable {
        start: counting_start,
        progress: in_process_progress,
        stop: in_process_stop,
        stop_step: Some(in_process_stop_step),
    }
}

/// `neuronStartNetworkProxy` of the loaded library that [`counting_loaded_seam`] forwards to
/// (the first library wrapped in this process).
static LOADED_START: std::sync::OnceLock<StartFn> = std::sync::OnceLock::new();

/// `neuronStartNetworkProxy` of a loaded library ([`LOADED_START`]), counted.
///
/// # Safety
/// As the library's `neuronStartNetworkProxy`: `comm` a live comm of that library.
unsafe extern "C" fn counting_loaded_start(
    comm: *mut c_void,
    stream: u32,
    bb: u32,
    ops: *const NetOpInfo,
    n_ops: usize,
    src: *const NetSrcAddr,
    n_src: usize,
    dst: *const NetDestAddr,
    n_dst: usize,
) -> u32 {
    let Some(start) = LOADED_START.get() else {
        // Unreachable: the table is handed out only after the cell is set.
        return NrtStatus::Failure.code();
    };
    count_seam_start();
    // SAFETY: forwarded under this function's contract to the library's own entry point.
    unsafe { start(comm, stream, bb, ops, n_ops, src, n_src, dst, n_dst) }
}

/// A loaded library's seam table with a counter on `start` ([`seam_starts`]), as
/// [`counting_seam`] is for the in-process one. Only the first library wrapped in a process is
/// counted (the wrapper has no state but a static); another library's table is returned as it
/// is, uncounted, with a log line.
///
/// Seed: the neuron-slot table filled by `dlopen`, §1 (wrapped).
pub fn counting_loaded_seam(table: SeamTable) -> SeamTable {
    let first = *LOADED_START.get_or_init(|| table.start);
    if first as usize != table.start as usize {
        log::warn!(
            "a second progress-half library in this process: its start calls are not counted"
        );
        return table;
    }
    SeamTable {
        start: counting_loaded_start,
        ..table
    }
}

/// One execution of one rank as the runtime submits it: the network task's blocks and block
/// schedule, and the barrier task.
#[derive(Clone, Debug, Default)]
pub struct Execution {
    /// Producer's id of the execution (task ids derive from it).
    pub id: u32,
    /// `(stream, block id, FIFOs)` filed at the network task's INIT.
    pub blocks: Vec<(u32, u32, Fifos)>,
    /// The block schedule (a block repeated `n` times is a loop over it).
    pub schedule: Vec<u32>,
    /// The network task's trigger words (armed by the producer before submitting).
    pub net_triggers: Vec<u64>,
    /// The barrier task's trigger words (armed by the producer before submitting).
    pub barrier_triggers: Vec<u64>,
    /// Leader only: the barrier-done semaphore of every rank of the comm in this process.
    pub barrier_done: Vec<u64>,
    /// This rank leads the barrier (lowest rank of the comm in this process).
    pub leader: bool,
    /// The collective, algorithm and why, named in the network task's state-dump line.
    pub label: Option<CollectiveLabel>,
}

/// A rank's barrier endpoint shared by its successive barrier tasks (the endpoint counts
/// generations, and each task takes its channel by value). Only one barrier task of a rank is
/// active at a time, so the lock is never contended.
struct SharedEndpoint<T>(Arc<Mutex<T>>);

impl<T: BarrierChannel> BarrierChannel for SharedEndpoint<T> {
    fn arrive(&mut self) -> Result<BarrierTicket, NrtStatus> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).arrive()
    }

    fn poll(&mut self, ticket: BarrierTicket) -> Result<bool, NrtStatus> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .poll(ticket)
    }

    fn passed(&mut self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).passed();
    }
}

/// A comm the driver engine steps, with the global rank it belongs to.
pub enum EngineComm {
    /// An in-process comm ([`Comm`]), stepped through [`counting_seam`].
    InProcess {
        /// Global rank (selects the proxy queue group).
        rank: u32,
        /// The comm.
        comm: Box<Comm>,
    },
    /// A comm of a progress half loaded with `dlopen`, stepped through that library's seam.
    Loaded {
        /// Global rank (selects the proxy queue group).
        rank: u32,
        /// The id every rank of the comm shares (as given at creation).
        comm_id: u32,
        /// The comm (destroyed through its library on drop).
        comm: LoadedComm<'static>,
        /// The library's seam table (e.g. [`counting_loaded_seam`] of it).
        seam: SeamTable,
    },
}

impl EngineComm {
    fn rank(&self) -> u32 {
        match self {
            Self::InProcess { rank, .. } | Self::Loaded { rank, .. } => *rank,
        }
    }

    fn comm_id(&self) -> u32 {
        match self {
            Self::InProcess { comm, .. } => comm.config().comm_id,
            Self::Loaded { comm_id, .. } => *comm_id,
        }
    }

    /// The comm's abort handle (in-process comms only).
    fn abort_handle(&self) -> Option<proxy_core::base::abort::AbortHandle> {
        match self {
            Self::InProcess { comm, .. } => Some(comm.abort_handle()),
            Self::Loaded { .. } => None,
        }
    }

    /// The comm's protocol counters ([`Comm::protocol_stats`]; a loaded comm's through
    /// `nccom_comm_protocol_stats`, `Failure` from a library older than ABI 1.2).
    fn protocol_stats(&self) -> Result<ProtocolStats, NrtStatus> {
        match self {
            Self::InProcess { comm, .. } => Ok(comm.protocol_stats()),
            Self::Loaded { comm, .. } => comm.protocol_stats(),
        }
    }

    /// The comm's dump for a queue's state dump (in-process comms only).
    fn comm_dump(&self) -> Option<proxy_core::seam::CommDumpFn> {
        match self {
            Self::InProcess { .. } => Some(proxy_core::seam::in_process_dump),
            Self::Loaded { .. } => None,
        }
    }

    fn seam(&self) -> SeamTable {
        match self {
            Self::InProcess { .. } => counting_seam(),
            Self::Loaded { seam, .. } => *seam,
        }
    }

    /// The handle the seam takes (a `*mut Comm` for the in-process seam, the library's handle
    /// otherwise).
    fn handle(&mut self) -> *mut c_void {
        match self {
            Self::InProcess { comm, .. } => &mut **comm as *mut Comm as *mut c_void,
            Self::Loaded { comm, .. } => comm.as_ptr(),
        }
    }
}

/// Where the barrier tasks of the engine's comms meet.
#[derive(Clone, Debug)]
pub enum EngineBarrier {
    /// Every rank of the comm is in this process: a shared-memory barrier among them.
    InProcess,
    /// Each process runs one rank of the comm: the barrier between processes is a
    /// [`HostBarrier`] of the comm set up over this bootstrap (shared memory among the
    /// processes of a host, the host leaders over the bootstrap connections).
    Bootstrap(SharedBootstrap),
}

/// A rank's barrier endpoint.
enum RankBarrier {
    /// Shared by its successive barrier tasks (the endpoint counts generations).
    Shared(Arc<Mutex<SharedMemBarrierEndpoint>>),
    /// The comm's hierarchical barrier between processes, shared likewise.
    Host(Arc<Mutex<HostBarrier>>),
}

impl RankBarrier {
    fn channel(&self) -> Box<dyn BarrierChannel> {
        match self {
            Self::Shared(ep) => Box::new(SharedEndpoint(ep.clone())),
            Self::Host(hb) => Box::new(SharedEndpoint(hb.clone())),
        }
    }
}

/// An execution in flight: its task ids (`n` of them submitted) and, for tasks that come back,
/// the trigger set and shape they are kept for.
#[derive(Clone, Copy, Debug)]
struct Pending {
    ids: [u32; 2],
    n: usize,
    keep: Option<(usize, u64)>,
}

/// The two tasks of a finished execution, kept for re-arming.
struct Kept {
    key: u64,
    net: TaskBox,
    barrier: TaskBox,
}

/// One rank of a [`Engine`]: its comm, its slot of its group's proxy queue, its barrier
/// endpoint, its executions in flight. In caller mode
/// ([`DriveMode::Caller`](proxy_core::driver::queue::DriveMode::Caller)) each rank is run by its
/// own thread ([`Engine::ranks_mut`]), which submits, drives and waits.
pub struct EngineRank {
    /// Boxed (in-process) or a library handle: the network tasks carry its address.
    comm: EngineComm,
    member: Option<Membership>,
    barrier: RankBarrier,
    /// The executions submitted and not yet waited for, oldest first.
    pending: std::collections::VecDeque<Pending>,
    /// Per trigger set: the tasks of its last execution, kept for re-arming.
    cache: [Option<Kept>; 2],
    /// Final records popped ahead of their execution's turn.
    early: Vec<TaskRecord>,
    /// `NEURON_RT_DBG_PROXY_EARLY_COMPLETION`: every task is submitted with its skip flag
    /// (DONE at INIT, edge 1; a debug mode in which no data moves).
    skip: bool,
    /// Every task submitted and every final record seen, for the final report.
    stats: RankStats,
    /// `--inject drop-comm`: abort the comm once this execution is submitted.
    abort_at: Option<u32>,
    /// `--inject exit-rank`: exit the process once this execution is submitted.
    exit_at: Option<u32>,
}

/// What a rank's slot saw: tasks submitted, final records seen (each task's once), the first
/// failure and the execution it belongs to.
#[derive(Clone, Debug, Default)]
pub struct RankStats {
    /// Tasks submitted.
    pub submitted: u64,
    /// Final records seen.
    pub reported: u64,
    /// Records of a task already reported (must stay 0).
    pub twice: u64,
    /// The status of the first record that was not a success, and its execution's id.
    pub first_failure: Option<(NrtStatus, u32)>,
    /// The highest execution id with a task that ended in success.
    pub last_success: Option<u32>,
    /// Task ids seen, kept only when duplicates are watched for (`--inject`): the set grows, and
    /// a run without it allocates nothing per execution.
    seen: Option<std::collections::HashSet<u32>>,
}

impl RankStats {
    fn note(&mut self, rec: &TaskRecord) {
        self.reported += 1;
        if let Some(seen) = &mut self.seen {
            if !seen.insert(rec.task_id) {
                self.twice += 1;
            }
        }
        // Task ids are `2 × execution` (network) and `2 × execution + 1` (barrier).
        let execution = rec.task_id / 2;
        if rec.status() == NrtStatus::Success {
            self.last_success = self.last_success.max(Some(execution));
        } else if self.first_failure.is_none() {
            self.first_failure = Some((rec.status(), execution));
        }
    }

    /// The rank's final status: its first failure, else success.
    pub fn status(&self) -> NrtStatus {
        self.first_failure.map_or(NrtStatus::Success, |(s, _)| s)
    }

    /// The execution [`RankStats::status`] belongs to: the first failure's, else the last
    /// execution with a successful task (`None`: nothing was reported).
    pub fn execution(&self) -> Option<u32> {
        self.first_failure.map(|(_, e)| e).or(self.last_success)
    }
}

/// The real driver (docs/design.md §4): every rank's comm joins the process registry's proxy queue
/// of its group (`NEURON_RT_RANKS_PER_NETWORK_PROXY` ranks per group, one worker thread
/// `proxy-<tid>` each); each execution is one network task and one barrier task submitted
/// through the rank's slot, and completion is read from the slot's status ring.
pub struct Engine {
    /// The dump signal's handler (`NEURON_RT_PROXY_DUMP_SIGNAL`), removed first on drop.
    dump_signal: Option<proxy_runtime::dump::DumpSignal>,
    registry: Arc<LinuxRegistry>,
    ranks: Vec<EngineRank>,
    spin: std::time::Duration,
    timeout_ns: Option<u64>,
    rpp: u32,
    /// How the producer polls its status ring before parking.
    poll: WaitPolicy,
    /// Barrier tasks run over the bootstrap (for the description).
    across_processes: bool,
    /// The shared-memory barrier of in-process ranks (its bells are wired by the world).
    mem_barrier: Option<SharedMemBarrier>,
    /// The producer parks on a slot after its spins instead of nap-polling the status ring
    /// ([`Engine::set_park_consumers`]).
    park_consumers: bool,
}

impl Engine {
    /// Joins every comm (`comms[r]` is rank `r`'s; every rank of the comm is in this process)
    /// to a registry built from `cfg`; the producer polls status rings with `poll` before it
    /// parks.
    ///
    /// # Errors
    /// A message when the registry or a join fails (e.g. a worker CPU outside the allowed set).
    pub fn new(comms: Vec<Comm>, cfg: &Config, poll: WaitPolicy) -> Result<Self, String> {
        let comms = comms
            .into_iter()
            .enumerate()
            .map(|(r, c)| EngineComm::InProcess {
                rank: r as u32,
                comm: Box::new(c),
            })
            .collect();
        Self::with_comms(comms, EngineBarrier::InProcess, cfg, poll)
    }

    /// Joins `comms` (this process's ranks of one comm, in the order [`Engine::submit`] and
    /// [`Engine::wait`] index them) to a registry built from `cfg`, with barrier tasks meeting
    /// through `barrier`; the producer polls status rings with `poll` before it parks.
    ///
    /// # Errors
    /// A message when the registry, the barrier or a join fails.
    pub fn with_comms(
        comms: Vec<EngineComm>,
        barrier: EngineBarrier,
        cfg: &Config,
        poll: WaitPolicy,
    ) -> Result<Self, String> {
        let registry =
            Arc::new(proxy_runtime::registry(cfg).map_err(|e| format!("registry: {e}"))?);
        let dump_signal = match cfg.dump_signal {
            Some(sig) => {
                let reg = registry.clone();
                Some(
                    proxy_runtime::dump::DumpSignal::install(sig, move || {
                        proxy_runtime::dump::dump_all(&reg, proxy_runtime::dump::SIGNAL_DUMP_WAIT);
                    })
                    .map_err(|e| format!("NEURON_RT_PROXY_DUMP_SIGNAL: {e}"))?,
                )
            }
            None => None,
        };
        let shared = match &barrier {
            EngineBarrier::InProcess => Some(
                SharedMemBarrier::new(comms.len() as u32).map_err(|e| format!("barrier: {e}"))?,
            ),
            EngineBarrier::Bootstrap(_) => None,
        };
        // Collective over the bootstrap: every process of the run sets it up here.
        let host = match &barrier {
            EngineBarrier::Bootstrap(boot) => {
                let [c] = comms.as_slice() else {
                    return Err(format!(
                        "a barrier between processes needs one rank per process, not {}",
                        comms.len()
                    ));
                };
                let hb = HostBarrier::setup(boot, &HostBarrierConfig::new(c.comm_id()))
                    .map_err(|e| format!("barrier between processes: {e}"))?;
                Some(Arc::new(Mutex::new(hb)))
            }
            EngineBarrier::InProcess => None,
        };
        let mut ranks = Vec::new();
        for (i, comm) in comms.into_iter().enumerate() {
            let r = comm.rank();
            let member = registry
                .join(r)
                .map_err(|e| format!("rank {r}: joining the proxy queue failed: {e}"))?;
            let barrier = match (&shared, &barrier) {
                (Some(b), _) => RankBarrier::Shared(Arc::new(Mutex::new(
                    b.endpoint(i as u32)
                        .map_err(|e| format!("barrier endpoint {r}: {e}"))?,
                ))),
                (None, _) => RankBarrier::Host(host.clone().ok_or("no barrier")?),
            };
            ranks.push(EngineRank {
                comm,
                member: Some(member),
                barrier,
                pending: std::collections::VecDeque::with_capacity(cfg.queue.status_capacity),
                cache: [None, None],
                early: Vec::with_capacity(cfg.queue.status_capacity),
                skip: cfg.early_completion,
                stats: RankStats::default(),
                abort_at: None,
                exit_at: None,
            });
        }
        Ok(Self {
            dump_signal,
            registry,
            ranks,
            spin: cfg.spin,
            timeout_ns: cfg.timeout_ns(),
            rpp: cfg.ranks_per_network_proxy,
            poll,
            across_processes: matches!(barrier, EngineBarrier::Bootstrap(_)),
            mem_barrier: shared,
            park_consumers: false,
        })
    }

    fn waiter(&self) -> Waiter<'static> {
        proxy_runtime::worker::waiter(self.spin)
    }

    /// Dumps every proxy queue of the engine's registry (docs/design.md §6), waiting up to
    /// `wait` for each driving thread; every group with its outcome.
    pub fn dump_all(
        &self,
        wait: std::time::Duration,
    ) -> Vec<(u32, proxy_core::driver::dump::DumpOutcome)> {
        proxy_runtime::dump::dump_all(&self.registry, wait)
    }

    /// Makes the producer park on a rank's slot, after its spins, while it waits for records
    /// (woken by the driver's push), instead of nap-polling the status ring: for a world whose
    /// every wake-up rings a bell, where a napping producer would sleep past its records.
    /// Call it on the producer's thread: it makes that thread's shared unpark handle now
    /// (`Park::shared_unparker`), so a first park late in a steady state allocates nothing.
    pub fn set_park_consumers(&mut self, park: bool) {
        self.park_consumers = park;
        if park {
            drop(proxy_core::driver::wake::Park::shared_unparker(&ThreadPark));
        }
    }

    /// The shared-memory barrier of the in-process ranks (`None` across processes).
    pub fn mem_barrier(&self) -> Option<&SharedMemBarrier> {
        self.mem_barrier.as_ref()
    }

    /// The ranks.
    pub fn ranks(&self) -> &[EngineRank] {
        &self.ranks
    }

    /// The ranks, for caller mode: each is run by its own thread.
    pub fn ranks_mut(&mut self) -> &mut [EngineRank] {
        &mut self.ranks
    }

    /// The spin budget of the waits (`NEURON_RT_PROXY_SPIN_US`, or 0 when oversubscribed).
    pub fn spin(&self) -> std::time::Duration {
        self.spin
    }

    /// The tasks' no-progress limit in ns (`NEURON_RT_EXEC_TIMEOUT`; `None`: no limit).
    pub fn timeout_ns(&self) -> Option<u64> {
        self.timeout_ns
    }

    /// Ranks per proxy queue.
    pub fn ranks_per_proxy(&self) -> u32 {
        self.rpp
    }

    /// The abort handles of the engine's in-process comms, one per rank in [`Engine::submit`]
    /// order (a loaded library's comm has none and is left out). Any thread may call
    /// [`AbortHandle::abort`](proxy_core::base::abort::AbortHandle::abort) on them at any
    /// time: every task of the comm then ends `NRT_CLOSED` at its next step (docs/design.md
    /// §9, "Abort").
    pub fn abort_handles(&self) -> Vec<proxy_core::base::abort::AbortHandle> {
        self.ranks
            .iter()
            .filter_map(|r| r.comm.abort_handle())
            .collect()
    }
}

fn host_words(addrs: &[u64]) -> Result<Vec<HostWord>, String> {
    addrs
        .iter()
        .map(|&a| {
            // SAFETY: Engine::submit's contract: the word is live until the execution is done.
            unsafe { HostWord::from_addr(a) }.ok_or_else(|| format!("bad host word {a:#x}"))
        })
        .collect()
}

impl Engine {
    /// One line for the output header (what runs the proxy).
    pub fn describe(&self) -> String {
        let driven = if self.registry.workers().iter().any(|(_, t)| t.is_some()) {
            "worker threads proxy-<tid>"
        } else {
            "driven by the ranks' threads (caller mode)"
        };
        format!(
            "driver: {} proxy queue(s), {} rank(s) per network proxy, {driven}; \
             network + barrier task per execution{}; completion from the status ring",
            self.registry.group_count(),
            self.rpp,
            if self.across_processes {
                " (barrier between processes: shared memory per host, leaders over the bootstrap)"
            } else {
                ""
            }
        )
    }

    /// Submits `exec` for `rank` (its network task and barrier task).
    ///
    /// # Errors
    /// A message when the engine cannot take it (no such rank, or the queue refused).
    ///
    /// # Safety
    /// Every address in `exec` (buffers, host words) must stay valid until
    /// [`Engine::wait`] for this rank has returned.
    pub unsafe fn submit(&mut self, rank: u32, exec: Execution) -> Result<(), String> {
        let timeout_ns = self.timeout_ns;
        let r = self
            .ranks
            .get_mut(rank as usize)
            .ok_or_else(|| format!("no rank {rank}"))?;
        // SAFETY: forwarded under this function's contract.
        unsafe { r.submit(exec, timeout_ns) }
    }

    /// Waits until `rank`'s oldest outstanding execution is complete (both tasks DONE) and
    /// returns its status. Stops waiting, with an error, as soon as a task of the execution has
    /// failed or `device_failed` answers `true` (the device will not reach the stages the
    /// remaining tasks wait for): the engine is then unusable and must be dropped (its drop ends
    /// every task still in flight). Also stops when the rank's queue's driving thread has begun
    /// no tick for the tasks' no-progress limit and a second (stuck inside a call: it cannot
    /// time the tasks out; not bounded so when the limit is off).
    ///
    /// # Errors
    /// A message naming the failed task and its status, saying that the device failed, or that
    /// the driving thread is stuck (after writing the queue's dump).
    pub fn wait(&mut self, rank: u32, device_failed: &dyn Fn() -> bool) -> Result<(), String> {
        let poll = self.poll;
        let park = self.park_consumers;
        let limit = self.timeout_ns;
        self.ranks[rank as usize].wait(poll, park, limit, device_failed)
    }

    /// Executions a rank may have submitted and not yet waited for.
    pub fn max_in_flight(&self) -> usize {
        2
    }
}

impl Engine {
    /// Every rank's protocol counters (global rank, counters or the library's status), in
    /// rank order of the engine. Call it only while no execution is in flight (between rows,
    /// after a sweep): the counters belong to the thread that drives the comm, and nothing
    /// drives a comm without a task.
    pub fn protocol_stats(&self) -> Vec<(u32, Result<ProtocolStats, NrtStatus>)> {
        self.ranks
            .iter()
            .map(|r| (r.comm.rank(), r.comm.protocol_stats()))
            .collect()
    }

    /// Ops in the op pools of every stream of every in-process comm (free or in use: the
    /// pools' capacity, [`proxy_core::progress::comm::StreamState::capacity`]), summed over the
    /// engine's ranks; `None` when a comm is a loaded library's (its pools are not visible).
    /// Call it only while no execution is in flight, as [`Engine::protocol_stats`].
    pub fn pool_ops(&self) -> Option<u64> {
        self.ranks
            .iter()
            .map(|r| match &r.comm {
                EngineComm::InProcess { comm, .. } => Some(
                    (0..proxy_core::base::desc::NUM_STREAMS)
                        .map(|s| u64::from(comm.stream(s).capacity()))
                        .sum::<u64>(),
                ),
                EngineComm::Loaded { .. } => None,
            })
            .sum()
    }

    /// Ticks begun so far on each proxy queue that serves this engine's ranks
    /// ([`ProxyQueue::ticks`], wrapping), one entry per queue in the order of the ranks: the
    /// same engine answers in the same order, so [`ticks_between`] can pair two reads.
    pub fn queue_ticks(&self) -> Vec<u32> {
        let mut queues: Vec<Arc<ProxyQueue>> = Vec::new();
        for (q, _) in self.ranks.iter().filter_map(|r| r.queue_slot()) {
            if !queues.iter().any(|k| Arc::ptr_eq(k, &q)) {
                queues.push(q);
            }
        }
        queues.iter().map(|q| q.ticks()).collect()
    }

    /// After a run (or its failure): lets every rank's outstanding tasks end by themselves
    /// until `deadline_ns` (monotonic), then leaves every slot, and returns every rank's
    /// counts (global rank, stats).
    pub fn settle_and_leave(&mut self, deadline_ns: u64) -> Vec<(u32, RankStats)> {
        let w = self.waiter();
        for r in &mut self.ranks {
            r.settle(&w, deadline_ns);
        }
        for r in &mut self.ranks {
            r.leave(&self.registry, &w);
        }
        self.ranks
            .iter()
            .map(|r| (r.comm.rank(), r.stats.clone()))
            .collect()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        drop(self.dump_signal.take());
        let w = self.waiter();
        for r in &mut self.ranks {
            if let Some(m) = r.member.take() {
                // Unbounded on purpose, also after a stuck-driver verdict (rank.rs `stuck`):
                // the buffers the tasks use are freed after this, and a worker that resumed
                // later would write into them.
                let _ = self.registry.leave(m, &w);
            }
        }
    }
}

mod rank;

#[cfg(test)]
mod tests {
    use super::ticks_between;

    /// Each queue's count is differenced on its own, across a wrap of its `u32`.
    #[test]
    fn ticks_between_pairs_queues_and_survives_a_wrap() {
        assert_eq!(ticks_between(&[u32::MAX - 1, 5], &[1, 9]), 3 + 4);
        assert_eq!(ticks_between(&[7], &[7]), 0);
        assert_eq!(ticks_between(&[], &[]), 0);
    }
}
