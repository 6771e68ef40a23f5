//! The device-program interpreter: plays the Neuron device's side of a planned collective
//! through the host-memory words only (docs/design.md §5), so the proxy has a real peer to
//! interlock with.
//!
//! A [`Job`] is one *launch*: [`Device::launch`] stores it, and every [`Device::poll`] advances
//! it as far as the host-memory words allow and returns without blocking: [`DevicePoll::Pending`]
//! names the one word (and the value) the device waits for ([`WaitingFor`]; with several
//! streams waiting, the wait of the stream that has waited longest), [`DevicePoll::Done`]
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
//! 3. **barrier**: wait until the barrier task's barrier-done semaphore rose (the barrier
//!    leader increments it), then report the launch complete. The barrier task's trigger words
//!    are written (1) with the net triggers at the launch ([`BarrierAt::Launch`], the
//!    default), or here, after the program ([`BarrierAt::End`]); barrier-done is snapshot just
//!    before they are written.
//!
//! The stage is one enum, [`Stage`], changed only by one transition function (which logs
//! `device R state=A=>B` at trace level). Its diagram, the reference the code cites by edge
//! number:
//!
//! ```text
//! Idle ──(1) launch──► Launched ──(2) write the net triggers──► NetWait
//!                         │        (BarrierAt::Launch, default:  │
//!                         │        first snapshot barrier-done,  │
//!                         │        write the barrier triggers;   │
//!                         │        so (4))                       │
//!                         │ (4) no net triggers                    │ (3) every net trigger reads 0
//!                         ▼                                        │
//!                     Program{0} ◄─────────────────────────────────┘
//!                         │  ▲
//!                         │  └─(5) every stream ran schedule entry rep, rep + 1 < reps:
//!                         │        Program{rep+1} (each stream snapshots a block's
//!                         │        semaphores when it begins it)
//!                         ├─(6) the last execution ran; barrier triggers and a barrier-done
//!                         │     word: snapshot it, write the triggers (BarrierAt::End;
//!                         │     done at launch with Launch) ──────────► BarrierWait ──┐
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
//! **The quiet path.** A poll that walks the stages and ends `Pending` records every word the
//! launch's progress now depends on, with the value it read: the wait of *every* stream (the
//! answer names only one), and each complete count that holds a host index back at the
//! wrap. The next poll first re-reads those words; while all read the same it answers the
//! same `Pending` without walking (a walk from there would re-read the same waits, hand out
//! nothing and record nothing). Any changed word makes it walk. It is no edge either: it
//! answers only `Pending`, and every transition, error and test knob forgets it (so a new
//! launch or [`Device::abandon`] walks). It is off under [`Device::set_recv_lag`], whose
//! progress depends on the poll count, not on a word; [`Device::watch_peer_recv`]'s check
//! and [`Fault`] injection act only when a watched count rose, so they are exact through it.
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
//! **Progress.** [`Device::progress`] is a count that rises whenever the launch moves on in
//! any stream (a transition, an instruction run, a block ended, a completion seen, a host
//! word written) and stays while nothing moves, quiet path included (it costs a field read).
//! A caller's no-progress timeout restarts when it changed: the answered [`WaitingFor`] names
//! one stream's wait only, which can stay the same while another stream moves. Each stream
//! notes the count when it last moved; the answer names the pending stream that moved least
//! recently (ties: the first), so a timeout names the wait that has lasted longest.
//!
//! The interpreter never blocks, names a thread or reads a clock: timeouts belong to the caller
//! (on Linux `proxy-emulator`'s device thread with its spin / yield / nap policy, or its polled
//! device driven between proxy ticks), which counts them from the last change of
//! [`Device::progress`] and names the word from [`WaitingFor`]. The counters a
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
    /// During this poll the device wrote host words the proxy reads (a trigger, a host index):
    /// a platform whose proxy may be asleep rings it (`proxy_core::base::bell`). At most once
    /// per [`Device::poll`].
    HostWrite,
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
    /// When the device writes the barrier triggers (it waits for barrier-done after the
    /// program either way).
    pub barrier_at: BarrierAt,
}

/// When a launch's device writes its barrier triggers. Either way the device reports the
/// launch complete only once barrier-done rose, so no rank's device starts its next launch
/// before every rank's barrier task arrived.
///
/// Seed: the barrier task gates on its trigger word as the network task does (§3,
/// `can_start_proxy_task`: "a value other than -1 means this stream's collective has reached
/// the net stage"), and runs beside it; docs/design/05-device-model.md, "Where the barrier is
/// triggered".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BarrierAt {
    /// At the launch, with the net triggers (edges 2 and 4), as the seed's barrier task is
    /// gated at the net stage (the default): the barrier task arrives while the collective
    /// runs, so the barrier passes once every rank's device launched, which a collective in
    /// which every rank hears from every other has shown by the time it ends; on a crowded
    /// host the ranks meet once per launch instead of twice.
    #[default]
    Launch,
    /// After the last execution of the program (edge 6): the barrier passes once every rank's
    /// program ran, a guarantee a runtime may want before it reuses buffers, at the price of a
    /// second meeting of the ranks after the collective's own.
    End,
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
            barrier_at: BarrierAt::default(),
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
    /// [`Exec::progress`] when this stream last moved: of the pending streams, the one with
    /// the lowest has waited longest (the one a `Pending` answer names).
    moved_at: u64,
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
    /// A host word the proxy reads was written during the current poll ([`Event::HostWrite`]).
    wrote_host: bool,
    /// The words the walk of the current poll found the launch's progress to depend on, each
    /// with the value read: every pending stream's wait, and every completion count that held
    /// a host index back (the wrap). Cleared at the start of every walk; capacity reused.
    watch: Vec<(HostWord, u32)>,
    /// The answer of the last walk while it ended `Pending` with `watch` complete: the quiet
    /// path ([`Exec::quiet`]) answers it again while every watched word reads as recorded.
    /// Forgotten at every transition ([`Exec::set_stage`]), error and test knob.
    quiet: Option<WaitingFor>,
    /// Rises (wrapping) whenever the launch moves on in any stream ([`Device::progress`]);
    /// never reset, so a new launch changes it too.
    progress: u64,
    /// Polls that walked the stages (not answered by the quiet path).
    #[cfg(test)]
    walks: u64,
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
                wrote_host: false,
                watch: Vec::new(),
                quiet: None,
                progress: 0,
                #[cfg(test)]
                walks: 0,
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
        // The quiet path is off under a lag (`Device::walk`): forgotten so it applies at once.
        self.exec.quiet = None;
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
        // Its check runs only when a send count rose, which the quiet path watches; forgotten
        // anyway, so that a watch added mid-launch starts from a walk.
        self.exec.quiet = None;
    }

    /// Drops every watch of [`Device::watch_peer_recv`].
    pub fn clear_peer_watch(&mut self) {
        self.exec.peer_recv.clear();
        self.exec.quiet = None;
    }

    /// The rank of this device.
    pub fn rank(&self) -> u32 {
        self.exec.rank
    }

    /// Where the launch is.
    pub fn stage(&self) -> Stage {
        self.exec.stage
    }

    /// The device's progress count: a number (no unit; it wraps) that rises whenever the
    /// launch moves on in *any* stream: a stage transition (a launch, its end, an abandon), an
    /// instruction run, a block ended, a completion seen, a host word written (a trigger, a
    /// host index). Unchanged between two polls = no stream moved in between, whatever
    /// [`WaitingFor`] the polls answered. A caller's no-progress timeout restarts when it
    /// changed (the answered `WaitingFor` alone names one stream's wait: with several streams
    /// another stream may move while it stays). A field read: the quiet path leaves it as it
    /// is.
    pub fn progress(&self) -> u64 {
        self.exec.progress
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
        self.exec.polls += 1;
        if let Some(waiting_for) = self.exec.quiet() {
            return Ok(DevicePoll::Pending { waiting_for });
        }
        self.walk(env)
    }

    /// A poll that walks the stages (the quiet path did not answer); kept out of line so the
    /// quiet path's frame stays small.
    #[inline(never)]
    fn walk(&mut self, env: &impl DeviceEnv) -> Result<DevicePoll, DeviceError> {
        let Device { fault, job, exec } = self;
        exec.watch.clear();
        #[cfg(test)]
        {
            exec.walks += 1;
        }
        let r = match job.as_ref() {
            None => Ok(DevicePoll::Idle),
            // SAFETY: `launch`'s contract: the job's addresses stay valid while it can be
            // polled.
            Some(job) => unsafe { exec.advance(job, *fault, env) },
        };
        if core::mem::take(&mut exec.wrote_host) {
            env.record(Event::HostWrite);
        }
        match &r {
            // The recv lag makes progress depend on the poll count, not on a word: no quiet
            // path under it. An empty watch cannot happen for `Pending` (every wait is
            // watched); it would only mean "walk again".
            Ok(DevicePoll::Pending { waiting_for })
                if exec.recv_lag == 0 && !exec.watch.is_empty() =>
            {
                exec.quiet = Some(*waiting_for);
            }
            Ok(_) => {}
            Err(e) => exec.fail(e),
        }
        r
    }
}

mod answers;
mod exec;
mod guard;

pub use answers::{DeviceError, DevicePoll, WaitingFor};

#[cfg(test)]
mod tests;
