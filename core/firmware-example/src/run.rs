//! One planned collective on several comms (ranks) of this firmware, through the whole engine:
//! per rank a [`Comm`] over the in-memory [`MemFabric`], a network task and a barrier task
//! (over a [`SharedMemBarrier`]) submitted to one caller-mode [`ProxyQueue`] (no worker
//! thread: this firmware's one thread drives it), host words and buffers on the heap reached
//! through [`DirectHostWords`], and the device side played by a [`FirmwareDevice`] per rank,
//! polled between ticks. The shape of `proxy-emulator`'s polled test harness, without std.
//!
//! Two ways to drive ([`Drive`]): the main loop holds the drive token ([`ProxyQueue::try_drive`])
//! and alternates [`Driver::tick`] with device polls; or each slot's owner waits for its task
//! records with [`SlotHandle::drive_until`], which takes the token and runs the devices from
//! its hook. Every loop is bounded in time ([`RUN_LIMIT_NS`] on the SysTick clock) and count.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::ffi::c_void;
use core::sync::atomic::{AtomicU32, Ordering};

use proxy_collectives::interpreter::{DeviceError, Job};
use proxy_collectives::planner::data::{count_wrong, expected_value, fill_input, POISON};
use proxy_collectives::planner::{plan, Addresses, Collective, DataType, PlanParams, RankPlan};
use proxy_core::base::host_word::HostWord;
use proxy_core::base::status::NrtStatus;
use proxy_core::base::time::Clock;
use proxy_core::driver::queue::{Driver, ProxyQueue, QueueConfig, SlotHandle, TaskBox, Tick};
use proxy_core::driver::record::TaskRecord;
use proxy_core::driver::task::{
    BarrierTask, BarrierTaskSpec, BlockFifos, CommHandle, NetworkTask, NetworkTaskSpec,
    SharedMemBarrier,
};
use proxy_core::driver::trigger::{TriggerWords, TRIGGER_ARMED};
use proxy_core::driver::wake::{Park, Unpark, Waiter};
use proxy_core::progress::comm::{Comm, CommConfig};
use proxy_core::progress::device::DirectHostWords;
use proxy_core::progress::mem_transport::MemFabric;
use proxy_core::seam::SeamTable;

use crate::clock::SysTickClock;
use crate::device::FirmwareDevice;

/// Block id of the one block of each plan.
const BLOCK: u32 = 1;
/// Comm id of every comm (one comm per run).
const COMM_ID: u32 = 1;
/// The proxy tasks' no-progress limit (ns).
const TASK_TIMEOUT_NS: u64 = 10_000_000_000;
/// The devices' no-progress limit (ns): the device gives up before its tasks do.
const DEVICE_TIMEOUT_NS: u64 = 5_000_000_000;
/// Bound on one whole run (ns on the SysTick clock).
pub const RUN_LIMIT_NS: u64 = 30_000_000_000;
/// Bound on the rounds of one run's main loop (a clock that stood still cannot hang it).
const MAX_ROUNDS: u32 = 50_000_000;

/// Host words of a rank: the network trigger, the barrier trigger, barrier-done, then the
/// plan's words. One `u32` each, 4 bytes apart (no cache lines to keep apart on a Cortex-M4).
const NET: usize = 0;
const BAR: usize = 1;
const DONE: usize = 2;
const FIXED: usize = 3;

/// How a run drives the proxy queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drive {
    /// The main loop holds the drive token and alternates ticks with device polls.
    MainLoop,
    /// Each slot's owner waits for its records with `SlotHandle::drive_until`, the devices
    /// polled from the drive hook.
    DriveUntil,
}

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// Name in the summary.
    pub name: &'static str,
    /// The collective (sum where it reduces).
    pub collective: Collective,
    /// Element type.
    pub dtype: DataType,
    /// Elements per rank (the planner's `count`).
    pub count: u64,
    /// Ranks (comms) in the run, ≥ 2.
    pub nranks: u32,
    /// Bytes per chunk (one send/recv entry).
    pub chunk_bytes: u64,
    /// Program executions per launch (the network task's schedule repeats the block).
    pub reps: u32,
    /// Who drives.
    pub drive: Drive,
}

/// The first element of a rank's output that is not the expected one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrongElement {
    /// The rank.
    pub rank: u32,
    /// Element index in its output.
    pub index: u64,
    /// The bytes found.
    pub got: Vec<u8>,
    /// The bytes expected.
    pub want: Vec<u8>,
}

/// The end of one run that got through the protocol.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Output bytes per rank.
    pub output_bytes: u64,
    /// Network entries per rank and execution (send + receive, over every op).
    pub entries: u32,
    /// Wrong elements summed over the ranks (the planner's `count_wrong`).
    pub wrong: u64,
    /// The first wrong element, if any.
    pub first_wrong: Option<WrongElement>,
    /// FNV-1a (32-bit) over every rank's output bytes, rank by rank.
    pub checksum: u32,
    /// Program executions the devices counted, summed over the ranks.
    pub executions: u32,
    /// Receive bytes the devices saw complete, summed over the ranks.
    pub recv_bytes: u64,
    /// Time from the first submission to the last record (ns).
    pub elapsed_ns: u64,
    /// Rounds of the driving loop (main loop) or hook calls (drive-until).
    pub rounds: u32,
}

/// Why a run failed.
#[derive(Debug)]
pub enum RunError {
    /// Setting up failed (plan, comm, queue, task): what, and the error.
    Setup(String),
    /// A device ended with an error.
    Device(DeviceError),
    /// A task ended with a status other than success.
    Task {
        /// The rank.
        rank: u32,
        /// Its final record.
        record: TaskRecord,
    },
    /// The run did not end within [`RUN_LIMIT_NS`] or [`MAX_ROUNDS`]: what it waited for.
    Stuck(String),
}

impl core::fmt::Display for RunError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RunError::Setup(s) => write!(f, "setup failed: {s}"),
            RunError::Device(e) => write!(f, "{e}"),
            RunError::Task { rank, record } => write!(
                f,
                "rank {rank}: task {} ended {} ({record:?})",
                record.task_id,
                record.status()
            ),
            RunError::Stuck(s) => write!(f, "run did not end: {s}"),
        }
    }
}

fn setup<E: core::fmt::Debug>(what: &str) -> impl FnOnce(E) -> RunError + '_ {
    move |e| RunError::Setup(format!("{what}: {e:?}"))
}

/// The firmware's [`Park`]: one thread, nothing to block for. In caller mode a slot's wait that
/// finds the drive token free drives the queue itself, so parking is only ever asked while
/// another thread drives, which never happens here: `park` returns at once (allowed: callers
/// re-check), and `yield_now` is a spin hint.
pub struct SpinPark;

/// The waker of [`SpinPark`]: nobody sleeps, so nothing to do.
struct NoUnpark;

impl Unpark for NoUnpark {
    fn unpark(&self) {}

    fn clone_box(&self) -> Box<dyn Unpark> {
        Box::new(NoUnpark)
    }

    fn is_current(&self) -> bool {
        true
    }
}

impl Park for SpinPark {
    fn park(&self) {
        core::hint::spin_loop();
    }

    fn unparker(&self) -> Box<dyn Unpark> {
        Box::new(NoUnpark)
    }

    fn park_timeout(&self, _timeout_ns: u64) {
        core::hint::spin_loop();
    }
}

/// One rank: its comm, words, buffers and plan.
struct Rank {
    /// Boxed: the network task carries its address.
    comm: Box<Comm>,
    words: Box<[AtomicU32]>,
    /// The buffers, `u64`s so that every element type is aligned in them. Input and scratch
    /// are only kept alive here: the devices and the comm reach them by address.
    _input: Vec<u64>,
    output: Vec<u64>,
    _scratch: Vec<u64>,
    plan: Arc<RankPlan>,
    addrs: Addresses,
}

/// A poisoned buffer of at least `bytes` bytes (one spare word).
fn alloc_bytes(bytes: u64) -> Vec<u64> {
    vec![u64::from_ne_bytes([POISON; 8]); (bytes as usize).div_ceil(8) + 1]
}

fn addr_of<T>(v: &[T]) -> u64 {
    v.as_ptr() as usize as u64
}

impl Rank {
    fn new(spec: &Spec, r: u32, fabric: &MemFabric) -> Result<Self, RunError> {
        let mut params = PlanParams::new(spec.collective, spec.count, spec.dtype, r, spec.nranks);
        params.chunk_bytes = spec.chunk_bytes;
        let plan = plan(&params).map_err(setup("plan"))?;
        let words: Box<[AtomicU32]> = (0..FIXED + plan.host_words() as usize)
            .map(|_| AtomicU32::new(0))
            .collect();
        let l = plan.layout;
        let mut input = alloc_bytes(l.input_bytes);
        let output = alloc_bytes(l.output_bytes);
        let scratch = alloc_bytes(l.scratch_bytes);
        let addrs = Addresses {
            input: addr_of(&input),
            output: addr_of(&output),
            scratch: addr_of(&scratch),
            words: addr_of(&words[FIXED..]),
            word_stride: 4,
        };
        // SAFETY: the bytes are the input buffer's own, borrowed only for the fill.
        let bytes = unsafe {
            core::slice::from_raw_parts_mut(input.as_mut_ptr().cast::<u8>(), input.len() * 8)
        };
        fill_input(&plan.params, r, bytes);
        // SAFETY: every word address the comm is given is one of `words` (checked against the
        // registered ranges below), alive until after the comm is dropped (`run` drops the
        // ranks last), accessed only atomically.
        let device = Arc::new(unsafe { DirectHostWords::new() });
        let endpoint = fabric.endpoint(r).map_err(setup("endpoint"))?;
        let mut comm = Box::new(
            Comm::new(
                CommConfig::new(r, spec.nranks, COMM_ID),
                Box::new(endpoint),
                device,
                Arc::new(SysTickClock),
            )
            .map_err(setup("comm"))?,
        );
        // The firmware knows its memory: register exactly the buffers and the words, so
        // `start` rejects any other address.
        for (base, len) in [
            (addr_of(&input), input.len() * 8),
            (addr_of(&output), output.len() * 8),
            (addr_of(&scratch), scratch.len() * 8),
            (addr_of(&words), words.len() * 4),
        ] {
            // SAFETY: each range is a heap buffer (or the words) of this `Rank`, which
            // outlives the comm's use of it (the tasks end before the ranks are dropped);
            // the words are only accessed atomically.
            unsafe { comm.register_memory(base, len as u64) }.map_err(setup("register"))?;
        }
        Ok(Self {
            comm,
            words,
            _input: input,
            output,
            _scratch: scratch,
            plan: Arc::new(plan),
            addrs,
        })
    }

    fn word_addr(&self, line: usize) -> u64 {
        addr_of(&self.words[line..])
    }

    fn host_word(&self, line: usize) -> Result<HostWord, RunError> {
        // SAFETY: a word of this rank, alive while the tasks and devices use it.
        unsafe { HostWord::from_addr(self.word_addr(line)) }
            .ok_or_else(|| RunError::Setup(format!("host word {line} misaligned")))
    }

    fn job(&self, reps: u32) -> Job {
        Job::single(
            self.plan.clone(),
            self.addrs,
            reps,
            vec![self.word_addr(NET)],
            vec![self.word_addr(BAR)],
            Some(self.word_addr(DONE)),
        )
    }

    /// The output buffer's bytes the collective writes.
    fn output_bytes(&self) -> &[u8] {
        let n = self.plan.layout.output_bytes as usize;
        // SAFETY: `n` bytes of the output buffer (allocated with at least that many), read
        // after every task and device ended.
        unsafe { core::slice::from_raw_parts(self.output.as_ptr().cast::<u8>(), n) }
    }

    /// Flips every bit of output byte `byte` (the `break-check` corruption); a byte past the
    /// buffer is ignored.
    fn corrupt(&mut self, byte: usize) {
        let len = self.output.len() * 8;
        // SAFETY: the output buffer's own `len` bytes; nothing else runs any more.
        let out =
            unsafe { core::slice::from_raw_parts_mut(self.output.as_mut_ptr().cast::<u8>(), len) };
        if let Some(b) = out.get_mut(byte) {
            *b ^= 0xFF;
        }
    }

    fn first_wrong(&self, rank: u32) -> Option<WrongElement> {
        let p = &self.plan.params;
        let elt = p.dtype.size();
        let mut want = [0u8; 8];
        self.output_bytes()
            .chunks_exact(elt)
            .enumerate()
            .find_map(|(i, got)| {
                p.dtype.encode(expected_value(p, rank, i as u64), &mut want);
                (got != &want[..elt]).then(|| WrongElement {
                    rank,
                    index: i as u64,
                    got: got.to_vec(),
                    want: want[..elt].to_vec(),
                })
            })
    }
}

/// Task ids of rank `r`: the network task, then the barrier task.
fn task_ids(r: u32) -> [u32; 2] {
    [2 * r, 2 * r + 1]
}

fn tasks(
    r: &Rank,
    rank: u32,
    reps: u32,
    barrier: &SharedMemBarrier,
    done_words: &[HostWord],
) -> Result<[TaskBox; 2], RunError> {
    let f = r.plan.fifos(&r.addrs);
    let comm_ptr = &*r.comm as *const Comm as *mut c_void;
    // SAFETY: the boxed comm outlives the task (every task ends, and the slots leave, before
    // the ranks are dropped); only the driver calls the seam on it.
    let comm = unsafe { CommHandle::new(comm_ptr) }
        .ok_or_else(|| RunError::Setup(String::from("null comm")))?;
    let [net_id, bar_id] = task_ids(rank);
    let net = NetworkTask::new(NetworkTaskSpec {
        task_id: net_id,
        comm,
        comm_id: COMM_ID,
        seam: SeamTable::in_process(),
        blocks: vec![BlockFifos {
            stream: 0,
            bb: BLOCK,
            ops: f.ops,
            src: f.src,
            dst: f.dst,
        }],
        schedule: Some(vec![BLOCK; reps as usize]),
        triggers: TriggerWords::new(&[r.host_word(NET)?]).map_err(setup("net trigger"))?,
        wait_for_device: true,
        skip: false,
        timeout_ns: Some(TASK_TIMEOUT_NS),
    })
    .map_err(setup("network task"))?;
    let bar = BarrierTask::new(BarrierTaskSpec {
        task_id: bar_id,
        comm_id: COMM_ID,
        channel: Box::new(barrier.endpoint(rank).map_err(setup("barrier endpoint"))?),
        triggers: TriggerWords::new(&[r.host_word(BAR)?]).map_err(setup("barrier trigger"))?,
        leader: rank == 0,
        done_semaphores: if rank == 0 {
            done_words.to_vec()
        } else {
            Vec::new()
        },
        skip: false,
        timeout_ns: Some(TASK_TIMEOUT_NS),
    });
    Ok([Box::new(net), Box::new(bar)])
}

/// FNV-1a, 32-bit, continued from `h`.
pub fn fnv1a(mut h: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The FNV-1a offset basis (the hash of nothing).
pub const FNV_BASIS: u32 = 0x811C_9DC5;

/// Runs `spec` once; before the check, flips output byte `corrupt.1` of rank `corrupt.0` (the
/// `break-check` feature's planted fault; `None` in a normal run).
///
/// # Errors
/// [`RunError`]: a setup step failed, a device or task failed, or the run did not end in time.
/// Wrong output is not an error here: it is counted in the [`Outcome`].
pub fn run(spec: &Spec, corrupt: Option<(u32, usize)>) -> Result<Outcome, RunError> {
    let clock = SysTickClock;
    let n = spec.nranks;
    let fabric = MemFabric::new(n).map_err(setup("fabric"))?;
    let mut ranks = (0..n)
        .map(|r| Rank::new(spec, r, &fabric))
        .collect::<Result<Vec<Rank>, RunError>>()?;
    drop(fabric);
    // Small rings: two tasks per slot at a time.
    let cfg = QueueConfig {
        slots: n as usize,
        submit_capacity: 4,
        status_capacity: 4,
    };
    let queue = ProxyQueue::new_caller(cfg, Box::new(SysTickClock)).map_err(setup("queue"))?;
    let barrier = SharedMemBarrier::new(n).map_err(setup("barrier"))?;
    let done_words = ranks
        .iter()
        .map(|r| r.host_word(DONE))
        .collect::<Result<Vec<HostWord>, RunError>>()?;
    let mut slots = (0..n)
        .map(|_| ProxyQueue::join(&queue).map_err(setup("join")))
        .collect::<Result<Vec<SlotHandle>, RunError>>()?;
    let start = clock.now_ns();
    let deadline = start + RUN_LIMIT_NS;
    for (i, r) in ranks.iter().enumerate() {
        // Arm the triggers before the tasks are submitted (docs/design.md §4).
        for w in [NET, BAR] {
            r.words[w].store(TRIGGER_ARMED, Ordering::Release);
        }
        for t in tasks(r, i as u32, spec.reps, &barrier, &done_words)? {
            slots[i]
                .submit(t)
                .map_err(|e| RunError::Setup(format!("submit: {}", e.status)))?;
        }
    }
    let mut devices: Vec<FirmwareDevice> = (0..n)
        .map(|r| FirmwareDevice::new(r, DEVICE_TIMEOUT_NS))
        .collect();
    for (d, r) in devices.iter_mut().zip(&ranks) {
        // SAFETY: the rank's memory outlives every poll below (the devices are dropped
        // before the ranks).
        unsafe { d.launch(r.job(spec.reps)) };
    }
    let mut records: Vec<Vec<TaskRecord>> = vec![Vec::new(); n as usize];
    let waiter = Waiter {
        park: &SpinPark,
        clock: &clock,
        spin_ns: 0,
    };
    let rounds = match spec.drive {
        Drive::MainLoop => main_loop(&queue, &mut slots, &mut devices, &mut records, deadline)?,
        Drive::DriveUntil => {
            drive_until(&mut slots, &mut devices, &mut records, &waiter, deadline)?
        }
    };
    let elapsed_ns = clock.now_ns() - start;
    for s in slots {
        if let Err((status, _handle)) = s.leave_until(&waiter, Some(deadline)) {
            return Err(RunError::Stuck(format!("leave: {status}")));
        }
    }
    drop(queue);
    for d in &devices {
        if let Some(Err(e)) = d.clone_result() {
            return Err(RunError::Device(e));
        }
    }
    for (rank, recs) in records.iter().enumerate() {
        for rec in recs {
            if rec.status() != NrtStatus::Success {
                return Err(RunError::Task {
                    rank: rank as u32,
                    record: *rec,
                });
            }
        }
    }
    if let Some((rank, byte)) = corrupt {
        if let Some(r) = ranks.get_mut(rank as usize) {
            r.corrupt(byte);
        }
    }
    let executions = devices.iter().map(|d| d.counters().executions.get()).sum();
    let recv_bytes = devices.iter().map(|d| d.counters().recv_bytes.get()).sum();
    drop(devices);
    let mut wrong = 0;
    let mut first_wrong = None;
    let mut checksum = FNV_BASIS;
    for (i, r) in ranks.iter().enumerate() {
        let rank = i as u32;
        let w = count_wrong(&r.plan.params, rank, r.output_bytes());
        if w > 0 && first_wrong.is_none() {
            first_wrong = r.first_wrong(rank);
        }
        wrong += w;
        checksum = fnv1a(checksum, r.output_bytes());
    }
    let p = &ranks[0].plan;
    let entries = (p.src.len() + p.dst.len()) as u32;
    let output_bytes = p.layout.output_bytes;
    // The comms go last: nothing references them any more.
    drop(ranks);
    Ok(Outcome {
        output_bytes,
        entries,
        wrong,
        first_wrong,
        checksum,
        executions,
        recv_bytes,
        elapsed_ns,
        rounds,
    })
}

/// Pops every ready record of every slot.
fn pop(slots: &mut [SlotHandle], records: &mut [Vec<TaskRecord>]) {
    for (s, out) in slots.iter_mut().zip(records.iter_mut()) {
        while let Some(rec) = s.try_pop_record() {
            out.push(rec);
        }
    }
}

/// The main loop: hold the drive token, tick, poll every device, collect records; until the
/// devices ended and every record is in (or a device failed). Returns the rounds.
fn main_loop(
    queue: &ProxyQueue,
    slots: &mut [SlotHandle],
    devices: &mut [FirmwareDevice],
    records: &mut [Vec<TaskRecord>],
    deadline: u64,
) -> Result<u32, RunError> {
    // Caller mode: nobody else holds the token, so this succeeds; it is released when the
    // driver drops (on every return).
    let mut driver: Driver<'_> = queue
        .try_drive()
        .ok_or_else(|| RunError::Setup(String::from("drive token taken")))?;
    let mut ended = vec![false; devices.len()];
    for round in 1..=MAX_ROUNDS {
        let tick = driver.tick();
        let mut moved = tick == Tick::Continue;
        for (d, e) in devices.iter_mut().zip(ended.iter_mut()) {
            *e = d.poll_once().is_some();
            moved |= d.moved();
        }
        pop(slots, records);
        let all_in = records.iter().all(|v| v.len() == 2);
        let failed = devices.iter().any(FirmwareDevice::failed);
        if ended.iter().all(|&e| e) && (all_in || failed) {
            return Ok(round);
        }
        // The clock every 64 rounds: a read takes a critical section.
        if round.is_multiple_of(64) && SysTickClock.now_ns() >= deadline {
            return Err(stuck("the main loop", devices, records));
        }
        if !moved {
            core::hint::spin_loop();
        }
    }
    Err(stuck("the main loop (round limit)", devices, records))
}

/// Drive-until: each slot's owner in turn waits for its network and then its barrier record
/// with `SlotHandle::drive_until`, which takes the drive token and polls the devices from its
/// hook; then the devices are polled to their end. Returns the hook calls.
fn drive_until(
    slots: &mut [SlotHandle],
    devices: &mut [FirmwareDevice],
    records: &mut [Vec<TaskRecord>],
    waiter: &Waiter<'_>,
    deadline: u64,
) -> Result<u32, RunError> {
    let mut calls = 0u32;
    let mut hook = || {
        calls = calls.wrapping_add(1);
        let mut moved = false;
        for d in devices.iter_mut() {
            d.poll_once();
            moved |= d.moved();
        }
        moved
    };
    for (rank, slot) in slots.iter_mut().enumerate() {
        for id in task_ids(rank as u32) {
            match slot.drive_until(id, Some(deadline), waiter, Some(&mut hook)) {
                Ok(rec) => records[rank].push(rec),
                Err(status) => {
                    return Err(RunError::Stuck(format!(
                        "drive_until rank {rank} task {id}: {status}"
                    )))
                }
            }
        }
    }
    // Every record is in; a device may still have to see its barrier-done word rise.
    for _ in 0..1000 {
        if devices.iter_mut().all(|d| d.poll_once().is_some()) {
            return Ok(calls);
        }
    }
    Err(stuck("the devices after the last record", devices, records))
}

fn stuck(what: &str, devices: &[FirmwareDevice], records: &[Vec<TaskRecord>]) -> RunError {
    let stages: Vec<String> = devices.iter().map(|d| format!("{:?}", d.stage())).collect();
    let recs: Vec<usize> = records.iter().map(Vec::len).collect();
    RunError::Stuck(format!(
        "{what}: device stages {stages:?}, records per rank {recs:?}"
    ))
}
