//! The device-program interpreter: plays the Neuron device's side of a planned collective
//! through the host-memory words only (docs/design.md §5), so the proxy has a real peer to
//! interlock with.
//!
//! A [`Job`] is one *launch*: [`Device::launch`] stores it, and every [`Device::poll`] advances
//! it as far as the host-memory words allow and returns without blocking: [`DevicePoll::Pending`]
//! names the one word (and the value) the device waits for ([`WaitingFor`]), [`DevicePoll::Done`]
//! says the launch completed, an error says the proxy broke the protocol. A launch runs in
//! three stages:
//! 1. **net stage**: write 1 to every trigger word of the network task, wait until the proxy
//!    consumed each (reads 0) — a proxy that skips the trigger gate stalls here;
//! 2. the block schedule ([`Job::schedule`]) on every stream of the job, each stream on its own:
//!    its blocks ([`JobBlock`]) in schedule order, a block begun only after the one before ran
//!    (the proxy loads the next block when the one before drained). Each block's device
//!    program ([`Instr`]): arm each op side's host index with
//!    [`HOST_INDEX_READY`], wait for the handshake semaphore, raise the host indices as send data
//!    is ready and receive buffers are free, wait on the complete semaphores, reduce received
//!    chunks into the output (the planner's kernels: tight loops the compiler vectorises),
//!    copy; a proxy that skips a handshake or a semaphore leaves the device pending;
//! 3. **barrier**: write 1 to the barrier task's trigger words, wait until its barrier-done
//!    semaphore rose (the barrier leader increments it), then report the launch complete.
//!
//! The stage is one enum, [`Stage`], changed only by one transition function (which logs
//! `device R state=A=>B` at trace level). Its diagram, the reference the code cites by edge
//! number:
//!
//! ```text
//! Idle ──(1) launch──► Launched ──(2) write the net triggers──► NetWait
//!                         │                                        │
//!                         │ (4) no net triggers                    │ (3) every net trigger reads 0
//!                         ▼                                        │
//!                     Program{0} ◄─────────────────────────────────┘
//!                         │  ▲
//!                         │  └─(5) every stream ran schedule entry rep, rep + 1 < reps:
//!                         │        Program{rep+1} (each stream snapshots a block's
//!                         │        semaphores when it begins it)
//!                         ├─(6) the last execution ran; barrier triggers and a barrier-done
//!                         │     word: snapshot it, write the triggers ──► BarrierWait ──┐
//!                         │                                                             │ (8) barrier-done
//!                         └─(7) the last execution ran, nothing to wait for             │     rose by 1
//!                               (barrier triggers, if any, written) ──► Done ◄──────────┘
//! (1) launch is taken from every stage (a launch in flight is dropped as it is)
//! Launched / NetWait / Program / BarrierWait ──(9) protocol error ──► Failed
//! any stage ──(10) abandon (the caller's timeout or abort) ──► Idle
//! ```
//!
//! `Pending` is no edge: the device stays in its stage, at the same instruction, and the next
//! poll re-reads the same word. A program that needs no wait runs through in one poll. With
//! `reps = 0`, `Program{0}` takes edge 6 or 7 at once.
//!
//! Semaphores are cumulative; the device snapshots each one when a stream begins a block
//! (between executions nobody touches them), so counts in the program are per execution.
//!
//! The `nec.h` options of a block's plan ([`crate::planner::NecOptions`]) are honoured as a
//! device would: the host index rises only while fewer than `net_idx_loop_size` entries are
//! posted and not complete (written modulo it), a recv index only as far as the buffers of the
//! next `ending_recv_credits` entries are free (receive buffers free from the block's start
//! and not yet promised carry a canary, checked before the device promises them), and with
//! early send completion every send source seen complete is overwritten until the program
//! touches it again, unless a receive may still land there (docs/design.md §5, "The `nec.h`
//! options"). A semaphore that runs ahead of what the device posted, or a canary written
//! before its promise, is a proxy bug and fails the launch ([`DeviceError::Protocol`]). Two
//! test knobs make proxy bugs observable: [`Device::set_recv_lag`] (a device slow to post its
//! receives) and [`Device::watch_peer_recv`] (send completions checked against the peer's
//! receive host index).
//!
//! The interpreter never blocks, names a thread or reads a clock: timeouts belong to the caller
//! (on Linux `proxy-emulator`'s device thread with its spin / yield / nap policy, or its polled
//! device driven between proxy ticks), which names the word from [`WaitingFor`]. The counters a
//! tool reads are reported through [`DeviceEnv::record`]. Steady state allocates nothing: the
//! per-op semaphore baselines live in the [`Device`] and are reset in place at each launch
//! (their capacity reused), and the job is moved in, never cloned.
//!
//! Fault injection ([`Fault`]): flips one byte of one received chunk in every execution, after
//! the device has seen the chunk complete and before it uses it; a correct checker must then
//! report wrong elements.
//!
//! Seed: the on-device collective program that the proxy interlocks with: trigger words
//! (`start_proxy_task_host_mem_addrs`, §5), the `-1` host-index handshake and `nec_inc_semaphore`
//! completions (§5), the barrier-done semaphore (`inc_leader_sps_barrier_done_semas`, §3).

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use proxy_core::base::host_word::HostWord;
use proxy_core::base::host_word::HOST_INDEX_READY;
use proxy_core::base::state::{self, Machine};

use crate::planner::kernels::reduce_raw;
use crate::planner::{Addresses, BlockPlans, Instr, OpWord, RankPlan, Side};

/// Something the interpreter counts (reported through [`DeviceEnv::record`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// One program execution completed.
    Execution,
    /// One receive entry was seen complete, `bytes` long.
    RecvEntry {
        /// Bytes of the entry.
        bytes: u64,
    },
    /// Fault injection flipped one byte.
    FaultInjected,
}

/// The platform under the interpreter: where the counters go. (It does not wait: the
/// interpreter returns [`DevicePoll::Pending`] instead, and the caller decides how to wait.)
pub trait DeviceEnv {
    /// Counts `event` (the default ignores it).
    fn record(&self, event: Event) {
        let _ = event;
    }
}

/// The platform that counts nothing.
impl DeviceEnv for () {}

/// The one host word a pending device waits for, and the value it waits for: what a caller's
/// timeout message names. `seen` is the value the device read last; every other field is fixed
/// for one wait, so a change of the whole value means the device moved on (or the word moved).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitingFor {
    /// Net stage (edge 3): the network task's trigger word at `addr` to be consumed (read 0).
    NetTrigger {
        /// Address of the trigger word.
        addr: u64,
        /// The value read last (1 while the proxy has not consumed it).
        seen: u32,
    },
    /// `WaitHandshake`: the handshake semaphore of `op`'s `side` to reach `target` (its value
    /// at the start of the execution + 1).
    Handshake {
        /// Op index in the plan.
        op: u32,
        /// Op side.
        side: Side,
        /// Address of the handshake semaphore.
        addr: u64,
        /// The value that ends the wait.
        target: u32,
        /// The value read last.
        seen: u32,
    },
    /// `Wait`: the complete semaphore of `op`'s `side` to reach `target` (its value at the
    /// start of the execution + `upto` entries).
    Complete {
        /// Op index in the plan.
        op: u32,
        /// Op side.
        side: Side,
        /// Address of the complete semaphore.
        addr: u64,
        /// Entries of this execution that must be complete.
        upto: u32,
        /// The value that ends the wait.
        target: u32,
        /// The value read last.
        seen: u32,
    },
    /// Barrier stage (edge 8): the barrier-done semaphore to reach `target` (its value before
    /// the barrier trigger + 1).
    BarrierDone {
        /// Address of the barrier-done semaphore.
        addr: u64,
        /// The value that ends the wait.
        target: u32,
        /// The value read last.
        seen: u32,
    },
}

impl WaitingFor {
    /// Address of the word waited on.
    pub const fn addr(&self) -> u64 {
        match *self {
            WaitingFor::NetTrigger { addr, .. }
            | WaitingFor::Handshake { addr, .. }
            | WaitingFor::Complete { addr, .. }
            | WaitingFor::BarrierDone { addr, .. } => addr,
        }
    }

    /// The value of the word read last.
    pub const fn seen(&self) -> u32 {
        match *self {
            WaitingFor::NetTrigger { seen, .. }
            | WaitingFor::Handshake { seen, .. }
            | WaitingFor::Complete { seen, .. }
            | WaitingFor::BarrierDone { seen, .. } => seen,
        }
    }
}

impl fmt::Display for WaitingFor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WaitingFor::NetTrigger { addr, seen } => {
                write!(
                    f,
                    "net trigger word {addr:#x} to be consumed (last value {seen:#x})"
                )
            }
            WaitingFor::Handshake {
                op,
                side,
                addr,
                target,
                seen,
            } => write!(
                f,
                "op {op} {side:?} handshake semaphore {addr:#x} to reach {target} (last value \
                 {seen})"
            ),
            WaitingFor::Complete {
                op,
                side,
                addr,
                upto,
                target,
                seen,
            } => write!(
                f,
                "op {op} {side:?} complete semaphore {addr:#x} to reach {target} (+{upto}; last \
                 value {seen})"
            ),
            WaitingFor::BarrierDone { addr, target, seen } => write!(
                f,
                "barrier-done semaphore {addr:#x} to reach {target} (last value {seen})"
            ),
        }
    }
}

/// What one [`Device::poll`] reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevicePoll {
    /// The launch waits for a host word; poll again later.
    Pending {
        /// The word and the value waited for.
        waiting_for: WaitingFor,
    },
    /// The launch completed (answered again by every later poll until the next launch).
    Done,
    /// Nothing is launched (never, or the launch was abandoned).
    Idle,
}

/// A device failure: the proxy did not answer in time, or broke the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// The caller's time limit passed while the device waited for `waiting_for` (the
    /// interpreter itself never times out: its callers do).
    Timeout {
        /// Rank of the device.
        rank: u32,
        /// What it waited for (the last [`DevicePoll::Pending`]).
        waiting_for: WaitingFor,
    },
    /// A semaphore rose beyond what the protocol allows (e.g. more completions than posted
    /// entries, or two handshakes in one execution), the job names an invalid host word, or
    /// its program does not fit its plan.
    Protocol {
        /// Rank of the device.
        rank: u32,
        /// What was seen.
        what: String,
    },
    /// The launcher gave up on the execution while the device waited (its abort flag).
    Aborted {
        /// Rank of the device.
        rank: u32,
    },
    /// The device's thread ended without reporting the launch's end (it panicked).
    Lost {
        /// Rank of the device.
        rank: u32,
    },
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Timeout { rank, waiting_for } => {
                write!(f, "device {rank}: timed out waiting for {waiting_for}")
            }
            DeviceError::Protocol { rank, what } => {
                write!(f, "device {rank}: protocol violation: {what}")
            }
            DeviceError::Aborted { rank } => write!(f, "device {rank}: execution aborted"),
            DeviceError::Lost { rank } => {
                write!(
                    f,
                    "device {rank}: the device thread ended during the launch"
                )
            }
        }
    }
}

impl core::error::Error for DeviceError {}

/// One (stream, block) program of a launch: a part of the rank's collective
/// ([`crate::planner::BlockPlan`]) with the addresses its program uses.
#[derive(Clone, Debug)]
pub struct JobBlock {
    /// The stream the block runs on (`0..4`).
    pub stream: u32,
    /// The basic block id (what the schedule names).
    pub block: u32,
    /// The block's plan (program, entries, `nec` options in its params).
    pub plan: Arc<RankPlan>,
    /// Where its buffers and host words are (for a [`crate::planner::BlockPlan`]:
    /// [`crate::planner::BlockPlan::addresses`]).
    pub addrs: Addresses,
}

impl JobBlock {
    /// Every (stream, block) part of one rank's `plans`, each with the addresses its program
    /// uses when the rank's buffers and host words are at `addrs`: the blocks of a launch.
    pub fn of_plans(plans: &BlockPlans, addrs: &Addresses) -> Vec<JobBlock> {
        plans
            .blocks
            .iter()
            .map(|b| JobBlock {
                stream: b.stream,
                block: b.block,
                plan: Arc::new(b.plan.clone()),
                addrs: b.addresses(addrs),
            })
            .collect()
    }
}

/// One launch: the schedule of blocks of every stream between the net-stage trigger and the
/// barrier. Each stream runs its blocks in schedule order, one after the other (the next
/// block's handshakes come when the proxy loads it, after the one before drained), and
/// independently of the other streams; a schedule entry with no block on a stream is done at
/// once there. A block repeated in the schedule is a device program looping over it.
#[derive(Clone, Debug)]
pub struct Job {
    /// Every (stream, block) program of the launch.
    pub blocks: Vec<JobBlock>,
    /// Block ids in the order each stream runs them (repeats allowed); its length is the
    /// launch's executions (empty runs only the net stage and the barrier).
    pub schedule: Vec<u32>,
    /// The network task's trigger words (one per stream); empty = no net-stage gate.
    pub net_triggers: Vec<u64>,
    /// The barrier task's trigger words; empty = no barrier stage.
    pub barrier_triggers: Vec<u64>,
    /// The barrier-done semaphore the device waits on after the barrier trigger (if any).
    pub barrier_done: Option<u64>,
}

impl Job {
    /// A launch of one block (stream 0, block 1) executed `reps` times.
    pub fn single(
        plan: Arc<RankPlan>,
        addrs: Addresses,
        reps: u32,
        net_triggers: Vec<u64>,
        barrier_triggers: Vec<u64>,
        barrier_done: Option<u64>,
    ) -> Self {
        Self {
            blocks: alloc::vec![JobBlock {
                stream: 0,
                block: 1,
                plan,
                addrs,
            }],
            schedule: alloc::vec![1; reps as usize],
            net_triggers,
            barrier_triggers,
            barrier_done,
        }
    }

    /// Executions of the launch (the schedule's length).
    pub fn reps(&self) -> u32 {
        self.schedule.len() as u32
    }
}

/// Fault injection: flip one byte of one received chunk in every execution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fault {
    /// Index in the plan's destination FIFO of the chunk to corrupt; `None` = the first
    /// non-empty one.
    pub entry: Option<usize>,
}

/// Where a launch is (see the module docs for the diagram and its edge numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Nothing launched (or the launch was abandoned, edge 10).
    Idle,
    /// A job is in; no word touched yet (edge 1).
    Launched,
    /// The net triggers are written; waiting for the proxy to consume each (edge 2).
    NetWait,
    /// Running execution `rep` (0-based) of the program; `rep = reps` once all ran.
    Program {
        /// The execution.
        rep: u32,
    },
    /// The barrier triggers are written; waiting for the barrier-done semaphore (edge 6).
    BarrierWait,
    /// The launch completed (edges 7, 8).
    Done,
    /// The launch failed (edge 9); later polls answer the same error.
    Failed,
}

impl Machine for Stage {
    const NAME: &'static str = "device";

    /// The numbered edges of the diagram (module docs).
    fn edge(from: Self, to: Self) -> Option<u8> {
        use Stage::*;
        match (from, to) {
            (_, Launched) => Some(1),
            (Launched, NetWait) => Some(2),
            (NetWait, Program { rep: 0 }) => Some(3),
            (Launched, Program { rep: 0 }) => Some(4),
            (Program { rep: a }, Program { rep: b }) if b == a + 1 => Some(5),
            (Program { .. }, BarrierWait) => Some(6),
            (Program { .. }, Done) => Some(7),
            (BarrierWait, Done) => Some(8),
            (Launched | NetWait | Program { .. } | BarrierWait, Failed) => Some(9),
            (_, Idle) => Some(10),
            _ => None,
        }
    }
}

/// Where one stream is in the schedule.
#[derive(Clone, Copy, Debug)]
struct StreamRun {
    stream: u32,
    /// The schedule entry it runs (or the next one to begin).
    step: usize,
    /// The job block of that entry once begun.
    block: Option<usize>,
    /// The next instruction of the block's program.
    cursor: usize,
}

/// A send source the device overwrote after an early completion, and where its bytes are
/// kept (restored before the program touches the range again, and at the end of the block).
#[derive(Clone, Copy, Debug)]
struct Scribble {
    addr: u64,
    len: u64,
    saved: usize,
}

/// Byte written over a send source the device reuses after an early completion.
const SCRIBBLE: u8 = 0xA5;

/// Byte of the canary the device writes into a receive buffer it has not promised yet.
const CANARY: u8 = 0x5C;

/// The receive host index of the peer op that a send op's entries meet
/// ([`Device::watch_peer_recv`]).
#[derive(Clone, Copy, Debug)]
struct PeerRecv {
    block: usize,
    op: u32,
    addr: u64,
    ahead: u32,
}

/// Where a launch is inside its stage, and the per-op semaphore state of the execution; kept
/// apart from the job so that a poll can borrow both.
#[derive(Debug)]
struct Exec {
    rank: u32,
    stage: Stage,
    /// `NetWait`: the next trigger to see consumed.
    cursor: usize,
    /// `BarrierWait`: the barrier-done value before the trigger.
    done_base: u32,
    /// The fault target as (op, index within the op's recv side, byte offset) of the first
    /// block, if any.
    fault_target: Option<(u32, u32, u64)>,
    /// The fault was injected in this execution.
    flipped: bool,
    /// Per job block: its first slot in the per-op vectors.
    op_base: Vec<usize>,
    /// Per job block: it may hold entries back (an index wrap or early receive credits).
    holds: Vec<bool>,
    /// Per op, per side: the handshake semaphore at the start of the block's execution.
    hs_base: Vec<[u32; 2]>,
    /// Per op, per side: the complete semaphore at the start of the block's execution.
    cpl_base: Vec<[u32; 2]>,
    /// Per op, per side: entries the program has handed out (`Post`) in this execution.
    authorized: Vec<[u32; 2]>,
    /// Per op, per side: entries posted to the proxy (the host index, before the wrap).
    posted: Vec<[u32; 2]>,
    /// Per op, per side: the most entries a `Wait` of this execution needs posted.
    need: Vec<[u32; 2]>,
    /// Per op, per side: entries seen complete in this execution.
    seen: Vec<[u32; 2]>,
    /// Per stream with blocks: where it is.
    streams: Vec<StreamRun>,
    /// Send sources overwritten after an early completion.
    scribbles: Vec<Scribble>,
    /// Their saved bytes.
    saved: Vec<u8>,
    /// Polls of this launch so far (the recv lag's clock).
    polls: u64,
    /// Per job block: `polls` when its stream began it.
    begun: Vec<u64>,
    /// Polls after a block begins during which the device raises no recv host index
    /// ([`Device::set_recv_lag`]).
    recv_lag: u32,
    /// Peer receive host indices to check send completions against
    /// ([`Device::watch_peer_recv`]).
    peer_recv: Vec<PeerRecv>,
    /// The error of a failed launch (answered by every poll until the next launch).
    error: Option<DeviceError>,
}

/// The device of one rank: launches jobs and advances them through [`Device::poll`], never
/// blocking (see the module docs).
#[derive(Debug)]
pub struct Device {
    fault: Option<Fault>,
    job: Option<Job>,
    exec: Exec,
}

impl Device {
    /// A device for `rank`, injecting `fault` if given.
    pub fn new(rank: u32, fault: Option<Fault>) -> Self {
        Self {
            fault,
            job: None,
            exec: Exec {
                rank,
                stage: Stage::Idle,
                cursor: 0,
                done_base: 0,
                fault_target: None,
                flipped: false,
                op_base: Vec::new(),
                holds: Vec::new(),
                hs_base: Vec::new(),
                cpl_base: Vec::new(),
                authorized: Vec::new(),
                posted: Vec::new(),
                need: Vec::new(),
                seen: Vec::new(),
                streams: Vec::new(),
                scribbles: Vec::new(),
                saved: Vec::new(),
                polls: 0,
                begun: Vec::new(),
                recv_lag: 0,
                peer_recv: Vec::new(),
                error: None,
            },
        }
    }

    /// Makes the device lag: for `polls` polls after each block begins it raises no recv host
    /// index (sends and the handshakes go on), as a slow device would. A test knob: with
    /// early receive posting, a peer whose sends are ready at once then lands any receive the
    /// proxy posts beyond `ending_recv_credits` in a buffer the device has not promised, where
    /// its canary shows it (docs/design.md §5). 0 (the default) = no lag.
    pub fn set_recv_lag(&mut self, polls: u32) {
        self.exec.recv_lag = polls;
    }

    /// A test oracle for send completions without `early_send_completion`: job block `block`'s
    /// send op `op` meets the receives of a peer op whose recv host index is the word at
    /// `addr`, with `ahead` = that op's `ending_recv_credits`. Without the flag a send entry
    /// counts complete only once the transport finished it, which needs the peer's receive
    /// posted, so the device fails the launch when it sees send entry `i` complete while that
    /// index says fewer than `i + 1 − ahead` entries posted (a proxy that completed a send
    /// early without the flag). Kept until cleared by [`Device::clear_peer_watch`]; meaningful
    /// only for a block run once per launch (a peer that began the block again has reset its
    /// index) and without an index wrap (the index is read as a count).
    ///
    /// # Safety
    /// `addr` must be a live 4-byte-aligned host word, accessed only atomically, for as long
    /// as any launch of this device can be polled.
    pub unsafe fn watch_peer_recv(&mut self, block: usize, op: u32, addr: u64, ahead: u32) {
        self.exec.peer_recv.push(PeerRecv {
            block,
            op,
            addr,
            ahead,
        });
    }

    /// Drops every watch of [`Device::watch_peer_recv`].
    pub fn clear_peer_watch(&mut self) {
        self.exec.peer_recv.clear();
    }

    /// The rank of this device.
    pub fn rank(&self) -> u32 {
        self.exec.rank
    }

    /// Where the launch is.
    pub fn stage(&self) -> Stage {
        self.exec.stage
    }

    /// The job launched last (kept until the next launch or [`Device::abandon`]).
    pub fn job(&self) -> Option<&Job> {
        self.job.as_ref()
    }

    /// Stores `job` and resets the launch state in place (edge 1); no host word is touched
    /// until the next [`Device::poll`]. A launch still in flight is dropped as it is.
    ///
    /// # Safety
    /// Every address of `job` (buffers per the plan's layout, host words, trigger and barrier
    /// words) must be live and valid for the accesses the program makes for as long as this
    /// launch can be polled: until a poll answered [`DevicePoll::Done`] or an error, or the
    /// device is launched again, abandoned or dropped. Host words are only ever accessed
    /// atomically; no other thread touches the buffers except the transport as the protocol
    /// allows (between a post and its completion).
    pub unsafe fn launch(&mut self, job: Job) {
        let e = &mut self.exec;
        e.cursor = 0;
        e.done_base = 0;
        e.flipped = false;
        e.error = None;
        e.fault_target = None;
        self.job = Some(job);
        e.set_stage(Stage::Launched);
    }

    /// Gives up on the launch in flight (edge 10: the caller's timeout or abort) and hands the
    /// job back; the words stay as the device left them. Later polls answer
    /// [`DevicePoll::Idle`].
    pub fn abandon(&mut self) -> Option<Job> {
        self.exec.set_stage(Stage::Idle);
        self.job.take()
    }

    /// Advances the launch as far as the host words allow, counting into `env`; never blocks.
    ///
    /// # Errors
    /// [`DeviceError::Protocol`] when the proxy broke the protocol, a word address is invalid,
    /// or the program does not fit its plan (edge 9; every later poll answers the same error).
    pub fn poll(&mut self, env: &impl DeviceEnv) -> Result<DevicePoll, DeviceError> {
        let Device { fault, job, exec } = self;
        exec.polls += 1;
        let r = match job.as_ref() {
            None => Ok(DevicePoll::Idle),
            // SAFETY: `launch`'s contract: the job's addresses stay valid while it can be
            // polled.
            Some(job) => unsafe { exec.advance(job, *fault, env) },
        };
        if let Err(e) = &r {
            if exec.stage != Stage::Failed {
                exec.error = Some(e.clone());
                exec.set_stage(Stage::Failed);
            }
        }
        r
    }
}

impl Exec {
    /// The one transition function of [`Stage`] (module docs: the diagram), through
    /// [`state::step`]: traces `state=A=>B`, refuses an edge the diagram does not have.
    fn set_stage(&mut self, to: Stage) {
        let rank = self.rank;
        let _ = state::step(&mut self.stage, to, &rank);
    }

    fn protocol(&self, what: String) -> DeviceError {
        DeviceError::Protocol {
            rank: self.rank,
            what,
        }
    }

    /// The checked handle on the host word at `addr`.
    ///
    /// # Safety
    /// As [`Device::launch`]: `addr` is a live host word of the launched job, accessed only
    /// atomically.
    unsafe fn word(&self, addr: u64) -> Result<HostWord, DeviceError> {
        // SAFETY: the caller's contract.
        unsafe { HostWord::from_addr(addr) }
            .ok_or_else(|| self.protocol(format!("host word address {addr:#x} is not valid")))
    }

    /// Checks that the program and the entries fit the plan (no op index or entry range out of
    /// bounds), so that the rest of the interpreter indexes without panicking.
    fn check_plan(&self, plan: &RankPlan) -> Result<(), DeviceError> {
        let n = plan.ops.len();
        for (k, o) in plan.ops.iter().enumerate() {
            let fits = |base: u32, cnt: u32, len: usize| {
                (base as usize)
                    .checked_add(cnt as usize)
                    .is_some_and(|end| end <= len)
            };
            if !fits(o.src_base, o.tx_entry_cnt, plan.src.len())
                || !fits(o.dst_base, o.rx_entry_cnt, plan.dst.len())
            {
                return Err(self.protocol(format!("op {k}: entries outside the plan's FIFOs")));
            }
        }
        for e in plan.src.iter().chain(&plan.dst) {
            if e.op as usize >= n {
                return Err(self.protocol(format!("an entry names op {} of {n}", e.op)));
            }
        }
        for ins in &plan.program {
            let op = match *ins {
                Instr::Arm { op, .. }
                | Instr::WaitHandshake { op, .. }
                | Instr::Post { op, .. }
                | Instr::Wait { op, .. } => op,
                Instr::Reduce { .. } | Instr::Copy { .. } => continue,
            };
            if op as usize >= n {
                return Err(self.protocol(format!("the program names op {op} of {n}")));
            }
        }
        Ok(())
    }

    /// The fault target as (op, index within the op's recv side, byte offset), if any.
    fn fault_target(fault: Option<Fault>, plan: &RankPlan) -> Option<(u32, u32, u64)> {
        let f = fault?;
        let e = match f.entry {
            Some(i) => i,
            None => plan.dst.iter().position(|e| e.bytes > 0)?,
        };
        let entry = plan.dst.get(e)?;
        let op = plan.ops.get(entry.op as usize)?;
        // The most significant byte of the first element: a change no op can hide for sums.
        let byte = (plan.params.dtype.size() as u64 - 1).min(entry.bytes.saturating_sub(1));
        Some((entry.op, (e as u32).checked_sub(op.dst_base)?, byte))
    }

    /// Lays out the per-op state of `job` and the streams (edge 1's reset, at the first poll).
    fn setup(&mut self, job: &Job, fault: Option<Fault>) -> Result<(), DeviceError> {
        self.op_base.clear();
        self.holds.clear();
        let mut total = 0;
        for b in &job.blocks {
            self.check_plan(&b.plan)?;
            self.op_base.push(total);
            // A lagging device (a test knob) holds its receives back too.
            self.holds.push(
                self.recv_lag > 0
                    || b.plan.params.nec.idx_wrap > 0
                    || b.plan.ops.iter().any(|o| o.ending_recv_credits > 0),
            );
            total += b.plan.ops.len();
        }
        for v in [
            &mut self.hs_base,
            &mut self.cpl_base,
            &mut self.authorized,
            &mut self.posted,
            &mut self.need,
            &mut self.seen,
        ] {
            v.clear();
            v.resize(total, [0; 2]);
        }
        self.streams.clear();
        for b in &job.blocks {
            if b.stream >= 4 {
                return Err(self.protocol(format!("block {} on stream {}", b.block, b.stream)));
            }
            if !self.streams.iter().any(|s| s.stream == b.stream) {
                self.streams.push(StreamRun {
                    stream: b.stream,
                    step: 0,
                    block: None,
                    cursor: 0,
                });
            }
        }
        self.scribbles.clear();
        self.saved.clear();
        self.polls = 0;
        self.begun.clear();
        self.begun.resize(job.blocks.len(), 0);
        self.fault_target = job
            .blocks
            .first()
            .and_then(|b| Self::fault_target(fault, &b.plan));
        Ok(())
    }

    /// Begins job block `j` on its stream: snapshots every semaphore its program waits on,
    /// clears the per-execution counts, and writes a canary into every receive buffer the
    /// device will promise later (before the proxy can post early receives).
    ///
    /// # Safety
    /// As [`Exec::word`], for the job's words.
    unsafe fn begin_block(&mut self, job: &Job, j: usize) -> Result<(), DeviceError> {
        let b = &job.blocks[j];
        let a = &b.addrs;
        for (k, o) in b.plan.ops.iter().enumerate() {
            let slot = self.op_base[j] + k;
            for side in [Side::Send, Side::Recv] {
                let s = side as usize;
                let (hs, cpl) = if o.entries(side) > 0 {
                    // SAFETY: the caller's contract.
                    let hs = unsafe { self.word(a.word(OpWord::handshake(side).index(k as u32))) }?;
                    // SAFETY: as above.
                    let cpl = unsafe { self.word(a.word(OpWord::complete(side).index(k as u32))) }?;
                    (hs.load(), cpl.load())
                } else {
                    (0, 0)
                };
                self.hs_base[slot][s] = hs;
                self.cpl_base[slot][s] = cpl;
                self.authorized[slot][s] = 0;
                self.posted[slot][s] = 0;
                self.need[slot][s] = 0;
                self.seen[slot][s] = 0;
            }
            for i in Self::canaried(&b.plan, k as u32) {
                let e = b.plan.dst[o.dst_base as usize + i as usize];
                // SAFETY: the entry's buffer lies in the rank's buffers (launch's contract);
                // no instruction of the block touched it yet and the proxy may not receive
                // into it before the device promises it.
                unsafe {
                    core::ptr::write_bytes(
                        a.of(e.loc) as usize as *mut u8,
                        CANARY,
                        e.bytes as usize,
                    )
                };
            }
        }
        self.begun[j] = self.polls;
        if j == 0 {
            self.flipped = false;
        }
        Ok(())
    }

    /// Advances the launch of `job` as far as the words allow.
    ///
    /// # Safety
    /// As [`Device::launch`], for `job` (the launched job).
    unsafe fn advance(
        &mut self,
        job: &Job,
        fault: Option<Fault>,
        env: &impl DeviceEnv,
    ) -> Result<DevicePoll, DeviceError> {
        loop {
            match self.stage {
                Stage::Idle => return Ok(DevicePoll::Idle),
                Stage::Done => return Ok(DevicePoll::Done),
                Stage::Failed => {
                    return Err(self
                        .error
                        .clone()
                        .unwrap_or_else(|| self.protocol("failed launch".into())))
                }
                Stage::Launched => {
                    self.setup(job, fault)?;
                    if job.net_triggers.is_empty() {
                        // Edge 4.
                        self.set_stage(Stage::Program { rep: 0 });
                    } else {
                        for &t in &job.net_triggers {
                            // SAFETY: the caller's contract.
                            unsafe { self.word(t) }?.store(1);
                        }
                        self.cursor = 0;
                        // Edge 2.
                        self.set_stage(Stage::NetWait);
                    }
                }
                Stage::NetWait => {
                    while let Some(&t) = job.net_triggers.get(self.cursor) {
                        // SAFETY: the caller's contract.
                        let seen = unsafe { self.word(t) }?.load();
                        if seen != 0 {
                            return Ok(DevicePoll::Pending {
                                waiting_for: WaitingFor::NetTrigger { addr: t, seen },
                            });
                        }
                        self.cursor += 1;
                    }
                    // Edge 3.
                    self.set_stage(Stage::Program { rep: 0 });
                }
                Stage::Program { rep } => {
                    let steps = job.schedule.len();
                    let mut pending = None;
                    for i in 0..self.streams.len() {
                        // SAFETY: the caller's contract.
                        if let Some(w) = unsafe { self.run_stream(job, i, env) }? {
                            pending.get_or_insert(w);
                        }
                    }
                    // Executions every stream completed (no stream: the whole schedule).
                    let all = self
                        .streams
                        .iter()
                        .map(|s| s.step)
                        .min()
                        .unwrap_or(steps)
                        .min(steps) as u32;
                    let mut r = rep;
                    while r < all {
                        env.record(Event::Execution);
                        r += 1;
                        if (r as usize) < steps {
                            // Edge 5.
                            self.set_stage(Stage::Program { rep: r });
                        }
                    }
                    if let Some(w) = pending {
                        return Ok(DevicePoll::Pending { waiting_for: w });
                    }
                    // SAFETY: the caller's contract.
                    unsafe { self.restore_all() };
                    // SAFETY: the caller's contract.
                    unsafe { self.end_programs(job) }?;
                }
                Stage::BarrierWait => {
                    let Some(a) = job.barrier_done else {
                        // Unreachable: edge 6 is taken only with a barrier-done word.
                        self.set_stage(Stage::Done);
                        continue;
                    };
                    // SAFETY: the caller's contract.
                    let v = unsafe { self.word(a) }?.load();
                    let rose = v.wrapping_sub(self.done_base);
                    if rose == 0 {
                        return Ok(DevicePoll::Pending {
                            waiting_for: WaitingFor::BarrierDone {
                                addr: a,
                                target: self.done_base.wrapping_add(1),
                                seen: v,
                            },
                        });
                    }
                    if rose > 1 {
                        return Err(self.protocol(format!(
                            "barrier-done semaphore rose by {rose} in one execution"
                        )));
                    }
                    // Edge 8.
                    self.set_stage(Stage::Done);
                }
            }
        }
    }

    /// Runs stream `i` as far as the words allow: its blocks in schedule order. `Some` = it
    /// waits for that word.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    unsafe fn run_stream(
        &mut self,
        job: &Job,
        i: usize,
        env: &impl DeviceEnv,
    ) -> Result<Option<WaitingFor>, DeviceError> {
        loop {
            let run = self.streams[i];
            let j = match run.block {
                Some(j) => j,
                None => {
                    let Some(&id) = job.schedule.get(run.step) else {
                        return Ok(None);
                    };
                    let found = job
                        .blocks
                        .iter()
                        .position(|b| b.stream == run.stream && b.block == id);
                    let Some(j) = found else {
                        // No block `id` on this stream: done at once.
                        self.streams[i].step += 1;
                        continue;
                    };
                    // SAFETY: the caller's contract.
                    unsafe { self.begin_block(job, j) }?;
                    self.streams[i].block = Some(j);
                    self.streams[i].cursor = 0;
                    j
                }
            };
            let program = &job.blocks[j].plan.program;
            while let Some(ins) = program.get(self.streams[i].cursor) {
                // SAFETY: the caller's contract.
                if let Some(w) = unsafe { self.step(job, j, *ins, env) }? {
                    // Hand out what the wrap or the early credits held back meanwhile:
                    // completions elsewhere may depend on it.
                    // SAFETY: the caller's contract.
                    unsafe { self.flush_block(job, j) }?;
                    return Ok(Some(w));
                }
                self.streams[i].cursor += 1;
            }
            // The block ran: everything it posted is complete.
            // SAFETY: the caller's contract.
            unsafe { self.restore_all() };
            self.streams[i].block = None;
            self.streams[i].step += 1;
        }
    }

    /// After the last execution: edge 6 (barrier to wait for) or 7.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    unsafe fn end_programs(&mut self, job: &Job) -> Result<(), DeviceError> {
        // Snapshot the barrier-done semaphore before the trigger: the barrier cannot pass
        // (and the leader cannot increment it) before every device triggered.
        let wait = match job.barrier_done {
            Some(a) if !job.barrier_triggers.is_empty() => {
                // SAFETY: the caller's contract.
                self.done_base = unsafe { self.word(a) }?.load();
                true
            }
            _ => false,
        };
        for &t in &job.barrier_triggers {
            // SAFETY: the caller's contract.
            unsafe { self.word(t) }?.store(1);
        }
        self.set_stage(if wait {
            Stage::BarrierWait
        } else {
            Stage::Done
        });
        Ok(())
    }

    /// Completions of op `op`'s `side` in block `j` as the complete semaphore says now.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    unsafe fn completions(
        &self,
        job: &Job,
        j: usize,
        op: u32,
        side: Side,
    ) -> Result<(u32, u32), DeviceError> {
        let addr = job.blocks[j].addrs.word(OpWord::complete(side).index(op));
        // SAFETY: the caller's contract.
        let v = unsafe { self.word(addr) }?.load();
        let base = self.cpl_base[self.op_base[j] + op as usize][side as usize];
        Ok((v, v.wrapping_sub(base)))
    }

    /// The receive entries of op `op` that carry a canary until the device promises them:
    /// with early receive posting, those past the handshake's promise (`ending_recv_credits`)
    /// whose buffers are free from the start of the block ([`RankPlan::recv_free`]).
    fn canaried(plan: &RankPlan, op: u32) -> impl Iterator<Item = u32> + '_ {
        let o = plan.ops[op as usize];
        let c = o.ending_recv_credits;
        let flags = if c == 0 {
            &[][..]
        } else {
            plan.recv_free
                .get(o.dst_base as usize..(o.dst_base + o.rx_entry_cnt) as usize)
                .unwrap_or(&[])
        };
        flags
            .iter()
            .enumerate()
            .skip(c as usize)
            .filter(|(_, &f)| f)
            .map(|(i, _)| i as u32)
    }

    /// Checks the canaries of op `op`'s receive entries `from..to` of block `j` (about to be
    /// promised): a receive posted beyond the credits landed in one.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    unsafe fn check_canaries(
        &self,
        job: &Job,
        j: usize,
        op: u32,
        from: u32,
        to: u32,
    ) -> Result<(), DeviceError> {
        let b = &job.blocks[j];
        let o = b.plan.ops[op as usize];
        for i in Self::canaried(&b.plan, op).filter(|&i| from <= i && i < to) {
            let e = b.plan.dst[(o.dst_base + i) as usize];
            // SAFETY: the entry's buffer lies in the rank's buffers (launch's contract); a
            // racing write there is the proxy bug this check reports.
            let buf = unsafe {
                core::slice::from_raw_parts(
                    b.addrs.of(e.loc) as usize as *const u8,
                    e.bytes as usize,
                )
            };
            if let Some(at) = buf.iter().position(|&x| x != CANARY) {
                return Err(self.protocol(format!(
                    "stream {} block {} op {op} recv entry {i}: its buffer was written (byte \
                     {at}) before the device promised it (ending_recv_credits {}, host index \
                     {}): a receive posted beyond the credits",
                    b.stream,
                    b.block,
                    o.ending_recv_credits,
                    self.posted[self.op_base[j] + op as usize][Side::Recv as usize]
                )));
            }
        }
        Ok(())
    }

    /// Raises the host index of op `op`'s `side` in block `j` as far as the device may: to
    /// the entries the program handed out, held back by the early receive credits (the
    /// buffers of the next `ending_recv_credits` entries must be free: handed out) and by the
    /// wrap (never `net_idx_loop_size` or more entries posted and not complete). Writes the
    /// index modulo the loop size.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    unsafe fn flush(
        &mut self,
        job: &Job,
        j: usize,
        op: u32,
        side: Side,
    ) -> Result<(), DeviceError> {
        let b = &job.blocks[j];
        let o = &b.plan.ops[op as usize];
        let (slot, s) = (self.op_base[j] + op as usize, side as usize);
        let a = self.authorized[slot][s];
        if side == Side::Recv
            && self.recv_lag > 0
            && self.polls - self.begun[j] < u64::from(self.recv_lag)
        {
            return Ok(());
        }
        let mut target = a;
        let credits = o.ending_recv_credits;
        if side == Side::Recv && credits > 0 {
            // The promise covers the `credits` entries past the index: their buffers must be
            // handed out (past the op's last entry there is nothing to promise). Entries a
            // wait needs are posted anyway (the planner keeps them within the promise).
            target = a.saturating_sub(credits).max(self.need[slot][s]).min(a);
        }
        let wrap = b.plan.params.nec.idx_wrap;
        if wrap > 0 && target > self.posted[slot][s] {
            // SAFETY: the caller's contract.
            let (_, done) = unsafe { self.completions(job, j, op, side) }?;
            target = target.min(done.saturating_add(wrap - 1));
        }
        if target > self.posted[slot][s] {
            if side == Side::Recv && credits > 0 {
                // Entries the raise promises for the first time: their canaries are intact.
                let n = o.rx_entry_cnt;
                let (from, to) = (
                    self.posted[slot][s].saturating_add(credits).min(n),
                    target.saturating_add(credits).min(n),
                );
                // SAFETY: the caller's contract.
                unsafe { self.check_canaries(job, j, op, from, to) }?;
            }
            self.posted[slot][s] = target;
            let value = if wrap > 0 { target % wrap } else { target };
            // Release (HostWord::store): the data of the posted send entries (written by
            // this thread) is visible to the proxy that reads the index with acquire.
            // SAFETY: the caller's contract.
            unsafe { self.word(b.addrs.word(OpWord::post(side).index(op))) }?.store(value);
        }
        Ok(())
    }

    /// [`Exec::flush`] for every op side of block `j` that holds entries back.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    unsafe fn flush_block(&mut self, job: &Job, j: usize) -> Result<(), DeviceError> {
        if !self.holds[j] {
            return Ok(());
        }
        for k in 0..job.blocks[j].plan.ops.len() {
            let slot = self.op_base[j] + k;
            for side in [Side::Send, Side::Recv] {
                let s = side as usize;
                if self.posted[slot][s] < self.authorized[slot][s] {
                    // SAFETY: the caller's contract.
                    unsafe { self.flush(job, j, k as u32, side) }?;
                }
            }
        }
        Ok(())
    }

    /// Puts back every overwritten send source whose range overlaps `addr..addr+len` (all
    /// with `len == u64::MAX`).
    ///
    /// # Safety
    /// The scribbled ranges lie in the launched job's buffers, and no transfer touches them
    /// (a scribble is made only where none is in flight, and a post over it restores first).
    unsafe fn restore(&mut self, addr: u64, len: u64) {
        let mut i = 0;
        while i < self.scribbles.len() {
            let sc = self.scribbles[i];
            let overlaps =
                len == u64::MAX || (sc.addr < addr.saturating_add(len) && addr < sc.addr + sc.len);
            if overlaps {
                // SAFETY: the function's contract; `saved` holds `len` bytes at `saved`.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        self.saved.as_ptr().add(sc.saved),
                        sc.addr as usize as *mut u8,
                        sc.len as usize,
                    )
                };
                self.scribbles.swap_remove(i);
            } else {
                i += 1;
            }
        }
        if self.scribbles.is_empty() {
            self.saved.clear();
        }
    }

    /// [`Exec::restore`] of everything.
    ///
    /// # Safety
    /// As [`Exec::restore`].
    unsafe fn restore_all(&mut self) {
        if !self.scribbles.is_empty() {
            // SAFETY: the caller's contract.
            unsafe { self.restore(0, u64::MAX) };
        }
    }

    /// After send entries `from..to` of op `op` in block `j` were seen complete with early
    /// completion on: overwrites each one's source (saving it) unless a transfer of the block
    /// that may still touch it overlaps it: an entry handed out and not seen complete, or a
    /// receive the proxy may have posted early (within `ending_recv_credits` of the host
    /// index, handed out or not), whose data would land under the overwrite and be lost to
    /// the restore. A send that was counted complete before the transport had its own copy
    /// then carries the overwritten bytes.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    unsafe fn scribble(&mut self, job: &Job, j: usize, op: u32, from: u32, to: u32) {
        let b = &job.blocks[j];
        let plan = &b.plan;
        for e in &plan.entries(op, Side::Send)[from as usize..to as usize] {
            if e.bytes == 0 {
                continue;
            }
            let (start, end) = (b.addrs.of(e.loc), b.addrs.of(e.loc) + e.bytes);
            let busy = (0..plan.ops.len()).any(|k| {
                let slot = self.op_base[j] + k;
                [Side::Send, Side::Recv].into_iter().any(|side| {
                    let s = side as usize;
                    let entries = plan.entries(k as u32, side);
                    let mut hi = self.authorized[slot][s];
                    if side == Side::Recv {
                        // Receives the proxy may have posted ahead of the host index.
                        let ahead = self.posted[slot][s]
                            .saturating_add(plan.ops[k].ending_recv_credits)
                            .min(entries.len() as u32);
                        hi = hi.max(ahead);
                    }
                    let lo = self.seen[slot][s].min(hi);
                    entries[lo as usize..hi as usize].iter().any(|x| {
                        let a = b.addrs.of(x.loc);
                        x.bytes > 0 && a < end && start < a + x.bytes
                    })
                })
            }) || self
                .scribbles
                .iter()
                .any(|sc| sc.addr < end && start < sc.addr + sc.len);
            if busy {
                continue;
            }
            let at = self.saved.len();
            // SAFETY: the entry's source lies in the rank's buffers (launch's contract); the
            // device saw it complete and nothing of the block is in flight over it.
            let src = unsafe {
                core::slice::from_raw_parts_mut(start as usize as *mut u8, e.bytes as usize)
            };
            self.saved.extend_from_slice(src);
            src.fill(SCRIBBLE);
            self.scribbles.push(Scribble {
                addr: start,
                len: e.bytes,
                saved: at,
            });
        }
    }

    /// [`Device::watch_peer_recv`]'s check: `done` send entries of op `op` in block `j` are
    /// complete without early completion, so the peer has posted at least `done − ahead`.
    ///
    /// # Safety
    /// As [`Exec::advance`], and the watched words are live ([`Device::watch_peer_recv`]).
    unsafe fn check_peer_recv(
        &self,
        job: &Job,
        j: usize,
        op: u32,
        done: u32,
    ) -> Result<(), DeviceError> {
        for w in self.peer_recv.iter().filter(|w| w.block == j && w.op == op) {
            // Acquire (HostWord::load): the peer device raised the index before its proxy
            // posted the receive that let the transport finish this send, and the proxy's
            // completion count this device read with acquire follows that.
            // SAFETY: the caller's contract.
            let v = unsafe { self.word(w.addr) }?.load();
            let posted = if v == HOST_INDEX_READY { 0 } else { v };
            if posted.saturating_add(w.ahead) < done {
                let b = &job.blocks[j];
                return Err(self.protocol(format!(
                    "stream {} block {} op {op}: send entry {} counted complete while the peer \
                     had posted {posted} receives (+{} early): completed before the transport \
                     finished it, without early_send_completion",
                    b.stream,
                    b.block,
                    done - 1,
                    w.ahead
                )));
            }
        }
        Ok(())
    }

    /// Runs one instruction of job block `j`; `Some` = it waits for that word (run it again
    /// on the next poll).
    ///
    /// # Safety
    /// As [`Exec::advance`].
    unsafe fn step(
        &mut self,
        job: &Job,
        j: usize,
        ins: Instr,
        env: &impl DeviceEnv,
    ) -> Result<Option<WaitingFor>, DeviceError> {
        let blk = &job.blocks[j];
        let plan = &*blk.plan;
        let a = &blk.addrs;
        let p = plan.params;
        let w = |op: u32, hw: OpWord| a.word(hw.index(op));
        let slot = |op: u32| self.op_base[j] + op as usize;
        match ins {
            Instr::Arm { op, side } => {
                // SAFETY: the caller's contract.
                unsafe { self.word(w(op, OpWord::post(side))) }?.store(HOST_INDEX_READY);
            }
            Instr::WaitHandshake { op, side } => {
                let base = self.hs_base[slot(op)][side as usize];
                let addr = w(op, OpWord::handshake(side));
                // SAFETY: the caller's contract.
                let v = unsafe { self.word(addr) }?.load();
                let rose = v.wrapping_sub(base);
                if rose == 0 {
                    return Ok(Some(WaitingFor::Handshake {
                        op,
                        side,
                        addr,
                        target: base.wrapping_add(1),
                        seen: v,
                    }));
                }
                if rose != 1 {
                    return Err(self.protocol(format!(
                        "op {op} {side:?}: handshake semaphore rose by {rose} in one execution"
                    )));
                }
                // The proxy writes 0 to the host index before it increments the handshake.
                // SAFETY: the caller's contract.
                let idx = unsafe { self.word(w(op, OpWord::post(side))) }?.load();
                if idx != 0 {
                    return Err(self.protocol(format!(
                        "op {op} {side:?}: host index {idx:#x} after the handshake (want 0)"
                    )));
                }
            }
            Instr::Post { op, side, upto } => {
                let k = slot(op);
                let from = self.authorized[k][side as usize];
                if !self.scribbles.is_empty() {
                    for e in plan
                        .entries(op, side)
                        .get(from as usize..upto as usize)
                        .unwrap_or(&[])
                    {
                        // SAFETY: the caller's contract.
                        unsafe { self.restore(a.of(e.loc), e.bytes) };
                    }
                }
                self.authorized[k][side as usize] = upto;
                // SAFETY: the caller's contract.
                unsafe { self.flush(job, j, op, side) }?;
            }
            Instr::Wait { op, side, upto } => {
                let (k, s) = (slot(op), side as usize);
                let base = self.cpl_base[k][s];
                // SAFETY: the caller's contract.
                let (v, done) = unsafe { self.completions(job, j, op, side) }?;
                let max = self.posted[k][s];
                if done > max {
                    return Err(self.protocol(format!(
                        "op {op} {side:?}: {done} entries complete, only {max} posted"
                    )));
                }
                let entries = plan.entries(op, side);
                if done as usize > entries.len() {
                    return Err(self.protocol(format!(
                        "op {op} {side:?}: the program posts {max} entries, the op has {}",
                        entries.len()
                    )));
                }
                if done < upto && self.posted[k][s] < upto {
                    // Entries held back by the early receive credits are posted as the
                    // program waits for them, one past those seen complete: the proxy keeps
                    // its receives `credits` ahead of the index meanwhile.
                    let need = &mut self.need[k][s];
                    *need = (*need).max(upto.min(done + 1));
                    // SAFETY: the caller's contract.
                    unsafe { self.flush(job, j, op, side) }?;
                }
                let prev = self.seen[k][s];
                if done > prev {
                    self.seen[k][s] = done;
                    if side == Side::Recv {
                        for e in &entries[prev as usize..done as usize] {
                            env.record(Event::RecvEntry { bytes: e.bytes });
                        }
                        if let Some((fop, fidx, byte)) = self.fault_target {
                            if j == 0 && !self.flipped && fop == op && fidx < done {
                                self.flipped = true;
                                let e = entries[fidx as usize];
                                let addr = a.of(e.loc) + byte;
                                // SAFETY: the entry is complete (the transport is done with
                                // it) and lies in this rank's buffers; only this thread uses
                                // it now.
                                unsafe { *(addr as usize as *mut u8) ^= 0xFF };
                                env.record(Event::FaultInjected);
                            }
                        }
                    } else if p.nec.early_send {
                        // SAFETY: the caller's contract.
                        unsafe { self.scribble(job, j, op, prev, done) };
                    } else {
                        // SAFETY: the caller's contract and `watch_peer_recv`'s.
                        unsafe { self.check_peer_recv(job, j, op, done) }?;
                    }
                }
                if done < upto {
                    return Ok(Some(WaitingFor::Complete {
                        op,
                        side,
                        addr: w(op, OpWord::complete(side)),
                        upto,
                        target: base.wrapping_add(upto),
                        seen: v,
                    }));
                }
            }
            Instr::Reduce {
                dst,
                a: x,
                b: y,
                elems,
            } => {
                if !self.scribbles.is_empty() {
                    let bytes = elems * p.dtype.size() as u64;
                    for l in [dst, x, y] {
                        // SAFETY: the caller's contract.
                        unsafe { self.restore(a.of(l), bytes) };
                    }
                }
                // SAFETY: the planner's hazard tracking guarantees no transfer touches
                // these ranges now; they lie in the rank's buffers (launch's contract).
                unsafe {
                    reduce_raw(
                        p.dtype,
                        p.op,
                        a.of(dst) as usize as *mut u8,
                        a.of(x) as usize as *const u8,
                        a.of(y) as usize as *const u8,
                        elems as usize,
                    )
                };
            }
            Instr::Copy { dst, src, bytes } => {
                debug_assert!(bytes % p.dtype.size() as u64 == 0);
                if !self.scribbles.is_empty() {
                    for l in [dst, src] {
                        // SAFETY: the caller's contract.
                        unsafe { self.restore(a.of(l), bytes) };
                    }
                }
                // SAFETY: as for Reduce; the planner never copies between overlapping
                // ranges.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        a.of(src) as usize as *const u8,
                        a.of(dst) as usize as *mut u8,
                        bytes as usize,
                    )
                };
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests;
