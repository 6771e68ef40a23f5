//! The measurement: ranks, buffers, host words, device emulators and the proxy engine; per
//! size, warm-up, timed iterations and checked runs, out of place and in place.
//!
//! A [`World`] runs the *local* ranks of the comm: every rank with the in-process transport
//! ([`World::new`]), or the one rank of this process when ranks are processes over libfabric
//! (`World::join`); then the processes combine their wrong counts and timings with a
//! bootstrap all-gather after each measurement, so every process reports the same row.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proxy_abi::{
    NccomCommConfig, NccomDeviceCallbacks, NccomHostWord, NccomLibfabricDesc, NccomTransportDesc,
    NCCOM_TRANSPORT_MEM,
};
use proxy_collectives::planner::data::{count_wrong, fill_input, POISON};
use proxy_collectives::planner::{
    plan_blocks, Addresses, BlockPlans, Collective, CollectiveLabel, Fifos, NecOptions, PlanParams,
};
use proxy_core::base::status::NrtStatus;
use proxy_core::driver::trigger::TRIGGER_ARMED;
use proxy_core::progress::comm::{Comm, CommConfig};
use proxy_core::progress::fault::{FaultPlan, FaultTransport, PPM};
use proxy_core::progress::mem_transport::MemFabric;
use proxy_core::progress::net::{NetError, Transport};
use proxy_core::progress::stats::ProtocolStats;

use super::args::{Args, DeviceArg, DriverArg, FaultArg, WaitArg};
use super::engine::{
    counting_loaded_seam, seam_starts, Engine, EngineBarrier, EngineComm, EngineRank, Execution,
};
use proxy_bootstrap::SharedBootstrap;
use proxy_collectives::interpreter::JobBlock;
use proxy_core::base::abort::AbortHandle;
use proxy_core::base::time::{Clock, MonotonicClock};
use proxy_core::driver::queue::DriveMode;
use proxy_core::driver::wake::{ThreadPark, Waiter};
use proxy_emulator::{
    DeviceError, DeviceThread, Fault, Job, PlayedDevice, PolledDevice, WaitPolicy,
};
use proxy_runtime::hostmem::{HostMem, HostMemCallbacks, LINE};
use proxy_runtime::loader::ProgressLib;
use proxy_runtime::worker::QueueBell;
use proxy_runtime::Config;

/// Bytes between host words (each alone on a host-memory line).
const WORD_STRIDE: u64 = LINE as u64;
/// Trigger-word sets per rank (executions in flight at once).
const TRIGGER_SETS: usize = 2;
/// Network trigger words per set: one per stream, as the seed's
/// `start_proxy_task_host_mem_addrs` (at most four per task).
const NET_TRIGGERS: usize = proxy_core::base::desc::NUM_STREAMS;
/// Host-memory lines of the fixed words: per set a network trigger word per stream and a
/// barrier trigger word, then the barrier-done semaphore.
const FIXED_LINES: usize = (NET_TRIGGERS + 1) * TRIGGER_SETS + 1;

/// One side (out of place or in place) of a row.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Measure {
    /// Timed iterations (`-n`, else calibrated to `--min-time`; the in-place side runs the
    /// out-of-place side's count).
    pub iters: u32,
    /// Time per iteration in µs.
    pub time_us: f64,
    /// Bytes / time in GB/s (1e9).
    pub algbw: f64,
    /// algbw × the collective's factor.
    pub busbw: f64,
    /// Wrong elements over every rank and checked run; `None` without checks.
    pub wrong: Option<u64>,
    /// Seam `start` calls during the timed iterations (all ranks).
    pub timed_starts: u64,
    /// Program executions the devices ran during the timed iterations (all ranks).
    pub timed_device_execs: u64,
    /// Bytes the devices saw received during the timed iterations (all ranks).
    pub timed_recv_bytes: u64,
    /// Bytes all ranks receive in one execution of the block.
    pub recv_bytes_per_exec: u64,
    /// (stream, block) parts filed per execution, summed over the ranks (each is one `start`
    /// at the network task's INIT).
    pub filed_blocks: u64,
    /// Ops in the in-process comms' op pools (summed over ranks) after the warm-up and after
    /// the checked runs: equal when recycled ops are filed again instead of new ones taken;
    /// `None` with a loaded progress half.
    pub pool_ops: Option<(u64, u64)>,
    /// What the timed iterations cost this process (every thread of it): context switches
    /// and CPU time (`getrusage`; with ranks as processes, this process's only).
    pub cost: crate::cost::ProcCost,
    /// Ticks begun on this process's proxy queues during the timed iterations, all queues
    /// together (a tick is one pass over a queue's tasks, by its worker or a caller).
    pub ticks: u64,
}

/// One rank's protocol counters after a run (`--stats`, `--json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankProtocol {
    /// Global rank.
    pub rank: u32,
    /// The comm's counters since it was created, or why they could not be read (a loaded
    /// library older than C ABI 1.2 answers `NRT_FAILURE`).
    pub stats: Result<ProtocolStats, String>,
}

impl RankProtocol {
    /// Words of one rank in the all-gather between processes.
    const WORDS: usize = 10;

    fn encode(&self, out: &mut Vec<u8>) {
        let s = self.stats.clone().unwrap_or_default();
        let words = [
            u64::from(self.rank),
            u64::from(self.stats.is_ok()),
            s.starts,
            s.block_switches,
            s.early_send_completions,
            s.recvs_posted_ahead,
            s.max_recv_ahead,
            s.index_wraps,
            s.peak_outstanding_send,
            s.peak_outstanding_recv,
        ];
        out.extend(words.iter().flat_map(|w| w.to_le_bytes()));
    }

    fn decode(b: &[u8]) -> Option<Vec<Self>> {
        if !b.len().is_multiple_of(8 * Self::WORDS) {
            return None;
        }
        let w = |c: &[u8], i: usize| {
            u64::from_le_bytes(c[8 * i..8 * i + 8].try_into().expect("8 bytes"))
        };
        b.chunks(8 * Self::WORDS)
            .map(|c| {
                let stats = (w(c, 1) == 1)
                    .then(|| ProtocolStats {
                        starts: w(c, 2),
                        block_switches: w(c, 3),
                        early_send_completions: w(c, 4),
                        recvs_posted_ahead: w(c, 5),
                        max_recv_ahead: w(c, 6),
                        index_wraps: w(c, 7),
                        peak_outstanding_send: w(c, 8),
                        peak_outstanding_recv: w(c, 9),
                        ..ProtocolStats::new()
                    })
                    .ok_or_else(|| "not readable in its process".to_string());
                Some(Self {
                    rank: u32::try_from(w(c, 0)).ok()?,
                    stats,
                })
            })
            .collect()
    }
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Bytes of the larger buffer (nccl-tests' `size`).
    pub size: u64,
    /// Elements per rank as nccl-tests prints them (its `paramcount`): of the whole buffer for
    /// all-reduce, broadcast and send-recv; of one rank's block (`size / type size / nranks`)
    /// for all-gather, reduce-scatter and all-to-all.
    pub count: u64,
    /// The algorithm used.
    pub algorithm: &'static str,
    /// Out of place.
    pub oop: Measure,
    /// In place.
    pub ip: Measure,
}

/// Page-aligned-enough backing store (u64 words; the kernels need element alignment only).
fn alloc_bytes(bytes: u64) -> Vec<u64> {
    vec![u64::from_ne_bytes([POISON; 8]); (bytes as usize).div_ceil(8) + 1]
}

fn ptr(v: &mut [u64]) -> u64 {
    v.as_mut_ptr() as usize as u64
}

/// A rank's buffers for one size: out-of-place input/output, the in-place shared buffer and
/// scratch.
struct RankMem {
    input: Vec<u64>,
    output: Vec<u64>,
    shared: Vec<u64>,
    scratch: Vec<u64>,
}

/// Per rank: its host-memory region: the fixed words (per trigger set a network trigger word
/// per stream and a barrier trigger word, then barrier-done) on lines `0..FIXED_LINES`, then
/// the plan's host words, one per line.
struct FixedWords {
    mem: Arc<HostMem>,
}

impl FixedWords {
    fn addr(&self, line: usize) -> u64 {
        self.mem.base_addr() + (line * LINE) as u64
    }
    fn plan_words(&self) -> u64 {
        self.addr(FIXED_LINES)
    }
    fn net_trigger(&self, set: usize, stream: usize) -> u64 {
        self.addr((NET_TRIGGERS + 1) * set + stream)
    }
    /// The network trigger words of set `set`: one per stream that has a part (stream 0's
    /// when none has: the task still waits for its device).
    fn net_triggers(&self, set: usize, plans: &BlockPlans) -> Vec<u64> {
        let streams = plans.streams();
        if streams.is_empty() {
            return vec![self.net_trigger(set, 0)];
        }
        streams
            .iter()
            .map(|&s| self.net_trigger(set, s as usize))
            .collect()
    }
    fn barrier_trigger(&self, set: usize) -> u64 {
        self.addr((NET_TRIGGERS + 1) * set + NET_TRIGGERS)
    }
    fn barrier_done(&self) -> u64 {
        self.addr((NET_TRIGGERS + 1) * TRIGGER_SETS)
    }
}

/// Everything of one run.
///
/// Vectors indexed "by local index" hold one entry per rank of [`World::local_ranks`] order.
pub struct World {
    args: Args,
    /// What the tuner is told about the ranks' host (the same on every process).
    tuner_host: setup::TunerHost,
    /// (worker spin, device/producer spins) in use, for the header.
    spin: (std::time::Duration, u32),
    collective: Collective,
    /// The global ranks this process runs, ascending (every rank with the in-process
    /// transport; one with libfabric).
    local: Vec<u32>,
    /// Set when the ranks are spread over processes: results are combined through it.
    peers: Option<SharedBootstrap>,
    /// The transport, for the header (`mem`, `libfabric (provider tcp;ofi_rxm)`).
    transport: String,
    /// Where the progress half comes from, for the header.
    progress_half: String,
    /// Who drives the proxy queues and how the devices run (resolved: flags, else the static
    /// rule of [`default_modes`]).
    modes: Modes,
    /// No-progress limit of the tasks; in caller mode also each execution's drive deadline.
    exec_timeout: Option<Duration>,
    /// Dropped before the buffers below: the comms (and their transports' registrations) go
    /// first.
    engine: Engine,
    devices: Vec<RankDevice>,
    /// By local index.
    fixed: Vec<FixedWords>,
    next_exec: u32,
    /// `prepare` calls so far (the generation of the next [`Prepared`]).
    preparations: u32,
    /// Every local rank's barrier-done semaphore, by local index (the leader raises them all).
    done_words: Vec<u64>,
    /// The first failure: the world runs nothing after it (tasks may still be in flight).
    failed: Option<String>,
    /// Buffers kept until the engine is gone: of earlier rows when a transport may have
    /// registered them (libfabric's registration cache does not watch the address space), and
    /// of a failed row (tasks may still use them).
    retired: Vec<Vec<RankMem>>,
    /// `--inject stall-rank`'s switch: the run's end lets the stalled driving thread go on.
    stall: Arc<StallSwitch>,
}

/// The driver and device modes of a run (`--driver`, `--device`), and the thread counts the rule
/// weighed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Modes {
    /// Who drives the proxy queues.
    pub driver: DriverArg,
    /// How the device emulators run.
    pub device: DeviceArg,
    /// `true` when neither flag chose: [`default_modes`] did.
    pub by_rule: bool,
    /// The host-wide mode rule's answer and inputs (weighed also when a flag chose).
    pub advice: proxy_runtime::modes::ModeAdvice,
}

impl Modes {
    /// For the header, e.g. `driver caller, device polled (rule: caller (worker mode needs 12
    /// busy threads on this host, caller mode 4; ...))`, or `(flags; rule: ...)`.
    pub fn describe(&self) -> String {
        let name = |d: DriverArg| match d {
            DriverArg::Thread => "thread",
            DriverArg::Caller => "caller",
        };
        let dev = match self.device {
            DeviceArg::Thread => "thread",
            DeviceArg::Polled => "polled",
        };
        let why = if self.by_rule { "rule" } else { "flags; rule" };
        let pinned = match self.driver {
            DriverArg::Caller => format!("; {}", self.caller_pinning()),
            DriverArg::Thread => String::new(),
        };
        format!(
            "driver {}, device {dev} ({why}: {}){pinned}",
            name(self.driver),
            self.advice
        )
    }

    /// How caller mode pins its driving threads ([`caller_cpu`], over the CPUs of the
    /// affinity mask), for the header: `caller threads not pinned`, `... pinned, one CPU
    /// each`, or `... pinned, N per CPU in blocks of consecutive ranks`.
    pub fn caller_pinning(&self) -> String {
        let (threads, cpus) = (self.advice.caller_threads, self.advice.inputs.cpus.affinity);
        if caller_cpu(0, threads, cpus).is_none() {
            "caller threads not pinned".into()
        } else if threads <= cpus {
            "caller threads pinned, one CPU each".into()
        } else {
            format!(
                "caller threads pinned, {} per CPU in blocks of consecutive ranks",
                if threads % cpus == 0 {
                    (threads / cpus).to_string()
                } else {
                    format!("{}-{}", threads / cpus, threads.div_ceil(cpus))
                }
            )
        }
    }
}

/// What [`World::assemble`] takes.
struct Assembly {
    local: Vec<u32>,
    /// The in-process fabric, when the comms are this process's own over it: each rank's
    /// arrival bell is wired to its queue's driver.
    fabric: Option<Arc<MemFabric>>,
    /// By local index.
    mems: Vec<Arc<HostMem>>,
    engine: Engine,
    peers: Option<SharedBootstrap>,
    transport: String,
    progress_half: String,
    spin: (std::time::Duration, u32),
    wait: WaitPolicy,
    /// By local index.
    cpus: Vec<Option<usize>>,
    modes: Modes,
    exec_timeout: Option<Duration>,
    stall: Arc<StallSwitch>,
}

/// One measured mode's plans and placements (by local index).
struct Prepared {
    /// Every non-empty (stream, block) part of each rank's collective.
    plans: Vec<Arc<BlockPlans>>,
    /// The whole rank's buffers and host words (each part's FIFOs and device program apply its
    /// own word base).
    addrs: Vec<Addresses>,
    /// `(stream, block id, FIFOs)` of every part, filed at the network task's INIT.
    fifos: Vec<Vec<(u32, u32, Fifos)>>,
    /// The device programs of each rank's parts, with the addresses each runs with.
    device: Vec<Vec<JobBlock>>,
    /// Which `prepare` made it (unique in the World): with the reps, the shape key of its
    /// executions' kept tasks and jobs.
    generation: u32,
    /// The collective, algorithm and why, for the network tasks' state-dump lines.
    label: CollectiveLabel,
    /// When the devices trigger the barrier task (`--barrier`).
    barrier_at: proxy_collectives::interpreter::BarrierAt,
}

/// The key under which the tasks and device jobs of `prep`'s executions with `reps` program
/// executions are kept for re-arming.
fn shape_key(prep: &Prepared, reps: u32) -> u64 {
    (u64::from(prep.generation) << 32) | u64::from(reps)
}

impl World {
    /// Dumps every proxy queue of this process (`--dump-on-exit`; docs/design.md §6), waiting
    /// up to 2 s for each driving thread (in caller mode with nothing driving, this thread
    /// takes each queue's drive token and writes its dump itself).
    pub fn dump_all(&self) {
        self.engine.dump_all(Duration::from_secs(2));
    }

    /// After this process's run failed with `reason`: tells the other processes through the
    /// bootstrap ([`proxy_bootstrap::Bootstrap::abort`]: a peer found lost within its grace is
    /// named as lost, else every peer is told this rank aborted), so that none waits for its
    /// exec timeout behind a clean close. Nothing to do when the ranks share this process.
    pub fn abort_peers(&self, reason: &str) {
        if let Some(peers) = &self.peers {
            let told = peers.lock().abort(NrtStatus::Failure, reason);
            log::debug!("proxy-perf: the other processes were told: {told}");
        }
    }

    /// `--inject`: ends the run's accounting. Lets the stalled driving thread go
    /// (`stall-rank`), lets every task still outstanding end by itself (bounded: the
    /// no-progress limit and 2 s more), leaves every slot, prints every local rank's final
    /// status (`# rank R: final status NRT_... at execution E (tasks T, reported T, twice 0)`, E the
    /// execution of the first failure, else the last one completed) and answers the
    /// failure that explains the others (`failure_cause`; a planted stall, `stall_cause`).
    ///
    /// # Errors
    /// `rank R ended NRT_...` naming the cause, then the other failed ranks (`also: rank Q
    /// NRT_TIMEOUT, ...`).
    pub fn finish(&mut self) -> Result<(), String> {
        self.stall.release.store(true, Ordering::Release);
        let clock = MonotonicClock;
        let limit = self.exec_timeout.unwrap_or(Duration::from_secs(5)) + Duration::from_secs(2);
        let deadline = clock
            .now_ns()
            .saturating_add(u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX));
        for d in &mut self.devices {
            d.abort();
        }
        let stats = self.engine.settle_and_leave(deadline);
        let mut failed = Vec::new();
        let mut out = std::io::stdout().lock();
        for (rank, s) in &stats {
            let execution = s
                .execution()
                .map_or_else(|| "none".into(), |e| e.to_string());
            let _ = writeln!(
                out,
                "# rank {rank}: final status {} at execution {execution} (tasks {}, reported {}, \
                 twice {})",
                s.status().as_str(),
                s.submitted,
                s.reported,
                s.twice
            );
            if s.status() != NrtStatus::Success {
                failed.push((*rank, s.status()));
            }
        }
        let _ = out.flush();
        if let Some(e) = stall_missed(&self.args, &self.local, &self.stall) {
            // Before any rank's status: a run that planted nothing tested nothing.
            return Err(e);
        }
        // A stall planted here explains every status: its peers time out, and its own rank's
        // tasks end when the run releases the thread (NRT_CLOSED when the run's end left the
        // slots first), which `failure_cause` would name as the cause.
        let cause = match stalled_rank(&self.args, &self.local, &self.stall) {
            Some(rank) => stall_cause(rank, &failed),
            None => failure_cause(&failed),
        };
        match cause {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Every rank's protocol counters (docs/design.md §5, "Protocol counters"), in rank order:
    /// this process's ranks read from their comms (in-process through `Comm::protocol_stats`,
    /// a loaded library's through `nccom_comm_protocol_stats`), the other processes' ranks
    /// gathered over the bootstrap (collective: every process of the run calls it). Call it
    /// between rows or after the sweep, when no execution is in flight.
    ///
    /// # Errors
    /// A message when the processes' all-gather fails or a process sent malformed counters.
    pub fn protocol_stats(&self) -> Result<Vec<RankProtocol>, String> {
        let mine: Vec<RankProtocol> = self
            .engine
            .protocol_stats()
            .into_iter()
            .map(|(rank, s)| RankProtocol {
                rank,
                stats: s.map_err(|e| format!("{} (C ABI older than 1.2?)", e.as_str())),
            })
            .collect();
        let Some(peers) = &self.peers else {
            return Ok(mine);
        };
        let mut bytes = Vec::new();
        for r in &mine {
            r.encode(&mut bytes);
        }
        let all = peers
            .lock()
            .all_gather(&bytes)
            .map_err(|e| format!("gathering the protocol counters of the processes: {e}"))?;
        let mut out = Vec::new();
        for (p, b) in all.iter().enumerate() {
            out.extend(RankProtocol::decode(b).ok_or_else(|| {
                format!(
                    "process {p} sent malformed protocol counters ({} bytes)",
                    b.len()
                )
            })?);
        }
        out.sort_by_key(|r| r.rank);
        Ok(out)
    }

    /// The global ranks this process runs, ascending.
    pub fn local_ranks(&self) -> &[u32] {
        &self.local
    }

    /// The global rank of this process's first rank (0 with the in-process transport): only
    /// the process that runs rank 0 prints.
    pub fn first_rank(&self) -> u32 {
        self.local[0]
    }

    /// The transport, for the header: `mem`, or `libfabric (provider P)`.
    pub fn transport_name(&self) -> &str {
        &self.transport
    }

    /// Where the progress half comes from, for the header: `in-process`, or `loaded from PATH
    /// through dlopen (C ABI V)`.
    pub fn progress_half(&self) -> &str {
        &self.progress_half
    }

    /// What runs the proxy (for the header).
    pub fn engine_name(&self) -> String {
        format!(
            "{}; {}; worker spin {} us, device spins {}",
            self.engine.describe(),
            self.modes.describe(),
            self.spin.0.as_micros(),
            self.spin.1
        )
    }

    /// The resolved driver and device modes.
    pub fn modes(&self) -> Modes {
        self.modes
    }

    /// The abort handles of this process's comms (in-process progress half only; none with
    /// `--progress-lib`), for a caller that aborts a run from another thread (the soak test):
    /// the run's tasks then end `NRT_CLOSED`, the running measurement returns an error and the
    /// world runs nothing more; dropping it ends and frees everything.
    pub fn abort_handles(&self) -> Vec<AbortHandle> {
        self.engine.abort_handles()
    }

    /// Ranks per proxy queue in effect (`--ranks-per-proxy`, else the environment, else in
    /// caller mode the local ranks spread over the CPUs).
    pub fn ranks_per_proxy(&self) -> u32 {
        self.engine.ranks_per_proxy()
    }
}

/// One process's part of a measurement, combined over the processes of a run: the slowest
/// process's time (a collective is done when its last rank is), everything else summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counts {
    elapsed_ns: u64,
    timed_starts: u64,
    execs: u64,
    bytes: u64,
    wrong: Option<u64>,
    recv_bytes_per_exec: u64,
    filed_blocks: u64,
    /// Op-pool sizes before and after (`None`: not visible).
    pool: Option<(u64, u64)>,
}

/// A rank's device emulator: its own thread, or polled from the rank's driving thread.
enum DeviceKind {
    /// A `device-<rank>` thread.
    Thread(DeviceThread),
    /// Polled from the rank's driving thread between ticks (caller mode). Boxed: it holds the
    /// interpreter's state inline.
    Polled(Box<PolledDevice>),
    /// Played by the worker of the rank's queue (`--driver thread --device polled`): wired into
    /// the rank's slot as its poller; the producer launches and waits with `WaitPolicy`.
    Played(Arc<PlayedDevice>, WaitPolicy),
}

/// A rank's device and the jobs of its last executions, kept per trigger set for the next
/// execution of the same shape (no allocation per execution).
struct RankDevice {
    /// `--inject stall-device`: nothing is launched; the device never triggers.
    stalled: bool,
    dev: DeviceKind,
    /// Per trigger set: `(shape key, job)` of its last finished execution.
    jobs: [Option<(u64, Job)>; TRIGGER_SETS],
    /// `(shape key, trigger set)` of the job the device holds now.
    current: Option<(u64, usize)>,
}

/// What a group thread of a caller-mode run needs (read only): the group's ranks are the local
/// indices `first..first + ranks.len()`.
struct GroupRun<'a> {
    /// Local index of the group's first rank.
    first: usize,
    fixed: &'a [FixedWords],
    /// Every local rank's barrier-done semaphore (the leader raises them all).
    done_words: &'a [u64],
    prep: &'a Prepared,
    reps: u32,
    first_id: u32,
    timeout_ns: Option<u64>,
    spin: Duration,
    /// The abort handles of every local comm: a group's device may wait for words that another
    /// group's tasks raise (the barrier leader raises every local rank's barrier-done
    /// semaphore), which an aborted comm never does.
    aborts: &'a [AbortHandle],
}

/// `--inject stall-rank`: its `after`-th send post blocks the driving thread (sleeping 1 ms at a
/// time) until the switch's `release` is set or `limit` has passed, and sets its `fired`: the
/// rank's driver stops while a peer waits for that message (a stall at a poll, or before a
/// receive, could fall where no peer waits for the rank: the run then went on, late, with
/// nothing timed out).
struct StallTransport {
    inner: Box<dyn Transport>,
    sends: u64,
    after: u64,
    switch: Arc<StallSwitch>,
    limit: Duration,
    name: String,
}

/// The longest a `stall-rank` stall lasts (the run releases it when it ends).
const STALL_LIMIT: Duration = Duration::from_secs(120);

impl Drop for World {
    /// Lets a stalled driving thread go before the engine leaves its slots.
    fn drop(&mut self) {
        self.stall.release.store(true, Ordering::Release);
    }
}

mod calibrate;
mod device;
mod execute;
mod idle;
mod inject;
mod pinning;
mod process_comm;
mod setup;
pub use setup::host_map_of;

use self::device::*;
use self::inject::*;
pub use self::pinning::{caller_cpu, rank_cpus};
use self::setup::*;
pub use self::setup::{default_modes, oversubscribed, oversubscribed_procs, wait_policy_from_env};

/// The exit message of a run whose ranks `failed` (rank, status; in rank order): the rank that
/// explains the others first, `rank R ended NRT_...`, then `(also: rank Q NRT_..., ...)`. The
/// cause is the lowest rank whose status is not `NRT_TIMEOUT` (a timeout is what a rank sees
/// when a peer failed or stopped: a peer's error completion, closed comm or lost process ends
/// its own rank otherwise), else the lowest rank. `None` when no rank failed.
pub(crate) fn failure_cause(failed: &[(u32, NrtStatus)]) -> Option<String> {
    let cause = failed
        .iter()
        .find(|(_, s)| *s != NrtStatus::Timeout)
        .or_else(|| failed.first())?;
    let mut msg = format!("rank {} ended {}", cause.0, cause.1.as_str());
    let others: Vec<String> = failed
        .iter()
        .filter(|f| f.0 != cause.0)
        .map(|(r, s)| format!("rank {r} {}", s.as_str()))
        .collect();
    if !others.is_empty() {
        msg.push_str(&format!(" (also: {})", others.join(", ")));
    }
    Some(msg)
}

/// The exit message of a `--inject stall-rank` run whose driving thread of `rank` stalled and
/// whose ranks `failed` (rank, status; in rank order): `rank R: its driving thread stalled
/// (--inject stall-rank)`, then every failed rank's status (`also: rank Q NRT_..., ...`).
/// `None` when no rank failed (a stall shorter than the no-progress limit).
pub(crate) fn stall_cause(rank: u32, failed: &[(u32, NrtStatus)]) -> Option<String> {
    if failed.is_empty() {
        return None;
    }
    let all: Vec<String> = failed
        .iter()
        .map(|(r, s)| format!("rank {r} {}", s.as_str()))
        .collect();
    Some(format!(
        "rank {rank}: its driving thread stalled (--inject stall-rank) (also: {})",
        all.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::{failure_cause, stall_cause};
    use proxy_core::base::status::NrtStatus::{Closed, NetworkProxyFailure, Timeout};

    #[test]
    fn the_exit_names_the_failure_the_timeouts_follow() {
        assert_eq!(failure_cause(&[]), None);
        // An error completion at rank 3: its peers time out; rank 3 is named first.
        let f = [
            (0, Timeout),
            (1, Timeout),
            (2, Timeout),
            (3, NetworkProxyFailure),
        ];
        assert_eq!(
            failure_cause(&f).as_deref(),
            Some(
                "rank 3 ended NRT_NETWORK_PROXY_FAILURE (also: rank 0 NRT_TIMEOUT, rank 1 \
                 NRT_TIMEOUT, rank 2 NRT_TIMEOUT)"
            )
        );
        // Only timeouts (a stalled device): the lowest rank.
        assert_eq!(
            failure_cause(&[(2, Timeout), (5, Timeout)]).as_deref(),
            Some("rank 2 ended NRT_TIMEOUT (also: rank 5 NRT_TIMEOUT)")
        );
        // Two causes: the lowest of them, the other listed.
        assert_eq!(
            failure_cause(&[(1, Closed), (4, NetworkProxyFailure)]).as_deref(),
            Some("rank 1 ended NRT_CLOSED (also: rank 4 NRT_NETWORK_PROXY_FAILURE)")
        );
        assert_eq!(
            failure_cause(&[(7, Closed)]).as_deref(),
            Some("rank 7 ended NRT_CLOSED")
        );
    }

    #[test]
    fn a_planted_stall_is_named_before_the_statuses_it_caused() {
        // Rank 5's thread (ranks 4-7) stalled: its rank 4 ended NRT_CLOSED when the run
        // released it, which is not the cause.
        let f = [(0, Timeout), (4, Closed), (5, Timeout)];
        assert_eq!(
            stall_cause(5, &f).as_deref(),
            Some(
                "rank 5: its driving thread stalled (--inject stall-rank) (also: rank 0 \
                 NRT_TIMEOUT, rank 4 NRT_CLOSED, rank 5 NRT_TIMEOUT)"
            )
        );
        assert_eq!(stall_cause(5, &[]), None);
    }
}
