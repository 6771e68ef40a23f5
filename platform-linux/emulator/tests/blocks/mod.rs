//! The whole protocol end to end over the in-memory transport: a collective planned over
//! streams and basic blocks ([`plan_blocks`]) with the `nec.h` options, every (stream, block)
//! filed by one network task per rank (one trigger word per stream, the block schedule `1..=B`
//! repeated), the device emulator (polled, on the ticking thread) running every block program,
//! and every output byte checked.
//!
//! Every wait is bounded: the devices by their timeout, the whole run by [`RUN_LIMIT`].

#![allow(dead_code)] // each test binary uses part of the harness

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proxy_collectives::interpreter::JobBlock;
use proxy_collectives::planner::data::{count_wrong, fill_input, POISON};
use proxy_collectives::planner::{plan_blocks, Addresses, BlockPlans, OpWord, PlanParams, Side};
use proxy_core::base::host_word::HostWord;
use proxy_core::base::status::NrtStatus;
use proxy_core::base::time::MonotonicClock;
use proxy_core::driver::queue::{ProxyQueue, QueueConfig, SlotHandle, TaskBox};
use proxy_core::driver::record::TaskRecord;
use proxy_core::driver::task::{
    BarrierTask, BarrierTaskSpec, BlockFifos, CommHandle, NetworkTask, NetworkTaskSpec,
    SharedMemBarrier,
};
use proxy_core::driver::trigger::{TriggerWords, TRIGGER_ARMED};
use proxy_core::driver::wake::{ThreadPark, Waiter};
use proxy_core::progress::comm::{Comm, CommConfig};
use proxy_core::progress::device::DirectHostWords;
use proxy_core::progress::mem_transport::MemFabric;
use proxy_core::progress::stats::{OpPeak, ProtocolStats};
use proxy_core::seam::SeamTable;
use proxy_emulator::{DeviceError, DeviceThread, Job, PolledDevice, WaitPolicy};

/// The proxy tasks' no-progress limit (a bound, behind the device's).
const TASK_TIMEOUT_NS: u64 = 20_000_000_000;
/// Bound on one whole run.
pub const RUN_LIMIT: Duration = Duration::from_secs(60);

/// How the devices are driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A [`PolledDevice`] per rank, polled by the thread that ticks the proxy queue.
    Polled,
    /// A `device-<rank>` thread per rank ([`DeviceThread`]).
    Threaded,
}

/// A rank's device in either mode.
enum Dev {
    Polled(Box<PolledDevice>),
    Threaded(DeviceThread),
}

impl Dev {
    /// `Some(result)` once the launch ended.
    fn poll(&mut self) -> Option<Result<(), DeviceError>> {
        match self {
            Dev::Polled(d) => d.poll_once(),
            Dev::Threaded(d) => d.finished().then(|| d.wait()),
        }
    }

    fn failed(&self) -> bool {
        match self {
            Dev::Polled(d) => d.failed(),
            Dev::Threaded(d) => d.failed(),
        }
    }

    /// # Safety
    /// As [`PolledDevice::launch`] / [`DeviceThread::launch`].
    unsafe fn launch(&mut self, job: Job) {
        match self {
            // SAFETY: the caller's contract.
            Dev::Polled(d) => unsafe { d.launch(job) },
            // SAFETY: the caller's contract.
            Dev::Threaded(d) => unsafe { d.launch(job) },
        }
    }

    fn take_job(&mut self) {
        let _ = match self {
            Dev::Polled(d) => d.take_job(),
            Dev::Threaded(d) => d.take_job(),
        };
    }

    fn executions(&self) -> u64 {
        match self {
            Dev::Polled(d) => d.stats().executions.load(Ordering::Relaxed),
            Dev::Threaded(d) => d.stats().executions.load(Ordering::Relaxed),
        }
    }
}

/// One host word alone on its line.
#[repr(C, align(64))]
struct Line(AtomicU32);

/// Word lines of a rank: four net triggers (one per stream), the barrier trigger,
/// barrier-done, then the plans' words.
const NET: usize = 0;
const BAR: usize = 4;
const DONE: usize = 5;
const FIXED: usize = 6;

struct Rank {
    comm: Box<Comm>,
    words: Box<[Line]>,
    _mem: Vec<Vec<u64>>,
    plans: BlockPlans,
    addrs: Addresses,
    out_ptr: u64,
}

fn alloc_bytes(bytes: u64) -> Vec<u64> {
    vec![u64::from_ne_bytes([POISON; 8]); (bytes as usize).div_ceil(8) + 1]
}

impl Rank {
    fn new(p: &PlanParams, r: u32, fabric: &Arc<MemFabric>) -> Self {
        let plans = plan_blocks(&p.for_rank(r)).expect("a valid plan");
        let words: Box<[Line]> = (0..FIXED + plans.host_words() as usize)
            .map(|_| Line(AtomicU32::new(0)))
            .collect();
        let l = plans.layout;
        let mut mem = Vec::new();
        let (input, output);
        if l.in_place {
            let mut shared = alloc_bytes(l.shared_bytes());
            let b = shared.as_mut_ptr() as u64;
            (input, output) = (b + l.input_offset, b + l.output_offset);
            mem.push(shared);
        } else {
            let (mut i, mut o) = (alloc_bytes(l.input_bytes), alloc_bytes(l.output_bytes));
            (input, output) = (i.as_mut_ptr() as u64, o.as_mut_ptr() as u64);
            mem.push(i);
            mem.push(o);
        }
        let mut s = alloc_bytes(l.scratch_bytes);
        let scratch = s.as_mut_ptr() as u64;
        mem.push(s);
        let addrs = Addresses {
            input,
            output,
            scratch,
            words: &words[FIXED] as *const Line as u64,
            word_stride: std::mem::size_of::<Line>() as u64,
        };
        // SAFETY: every word address the comm is given is a `Line` of this rank, alive until
        // after the comm is dropped, accessed only atomically.
        let device = Arc::new(unsafe { DirectHostWords::new() });
        let mut comm = Box::new(
            Comm::new(
                CommConfig::new(r, p.nranks, 1),
                Box::new(fabric.endpoint(r).expect("an endpoint")),
                device,
                Arc::new(MonotonicClock),
            )
            .expect("a comm"),
        );
        // SAFETY: every buffer and word given to `start` lives in this `Rank`, which outlives
        // the tasks.
        unsafe { comm.trust_all_addresses() };
        Self {
            comm,
            words,
            _mem: mem,
            plans,
            addrs,
            out_ptr: output,
        }
    }

    /// Poisons the rank's output (so that a result of the execution before cannot hide a
    /// wrong one) and writes its input (again: an in-place collective overwrote it).
    fn fill(&self, rank: u32) {
        let l = self.plans.layout;
        if !l.in_place {
            // SAFETY: the output range lies in this rank's live buffer; nothing runs now.
            unsafe {
                std::ptr::write_bytes(
                    self.out_ptr as usize as *mut u8,
                    POISON,
                    l.output_bytes as usize,
                )
            };
        }
        // SAFETY: the input range lies in this rank's live buffer; nothing runs now.
        let inb = unsafe {
            std::slice::from_raw_parts_mut(
                self.addrs.input as usize as *mut u8,
                l.input_bytes as usize,
            )
        };
        fill_input(&self.plans.params, rank, inb);
    }

    fn word_addr(&self, line: usize) -> u64 {
        &self.words[line] as *const Line as u64
    }

    fn host_word(&self, line: usize) -> HostWord {
        // SAFETY: a word of this rank, alive while the tasks and devices use it.
        unsafe { HostWord::from_addr(self.word_addr(line)) }.expect("an aligned word")
    }

    fn net_lines(&self) -> Vec<usize> {
        let s = self.plans.streams();
        if s.is_empty() {
            vec![NET]
        } else {
            s.iter().map(|&s| NET + s as usize).collect()
        }
    }

    fn job(&self, loops: u32) -> Job {
        Job {
            blocks: JobBlock::of_plans(&self.plans, &self.addrs),
            schedule: self.plans.schedule(loops),
            net_triggers: self
                .net_lines()
                .iter()
                .map(|&l| self.word_addr(l))
                .collect(),
            barrier_triggers: vec![self.word_addr(BAR)],
            barrier_done: Some(self.word_addr(DONE)),
            barrier_at: Default::default(),
        }
    }

    fn wrong(&self, rank: u32) -> u64 {
        let l = self.plans.layout;
        // SAFETY: the output buffer's own bytes; nothing runs any more.
        let out = unsafe {
            std::slice::from_raw_parts(self.out_ptr as usize as *const u8, l.output_bytes as usize)
        };
        count_wrong(&self.plans.params, rank, out)
    }

    fn tasks(
        &self,
        id: u32,
        rank: u32,
        loops: u32,
        barrier: &SharedMemBarrier,
        done: &[HostWord],
    ) -> [TaskBox; 2] {
        let comm_ptr = &*self.comm as *const Comm as *mut c_void;
        // SAFETY: the boxed comm outlives the task; only the worker calls the seam on it.
        let comm = unsafe { CommHandle::new(comm_ptr) }.expect("a comm pointer");
        let blocks = self
            .plans
            .blocks
            .iter()
            .filter(|b| !b.plan.ops.is_empty())
            .map(|b| {
                let f = b.fifos(&self.addrs);
                BlockFifos {
                    stream: b.stream,
                    bb: b.block,
                    ops: f.ops,
                    src: f.src,
                    dst: f.dst,
                }
            })
            .collect();
        let triggers: Vec<HostWord> = self
            .net_lines()
            .iter()
            .map(|&l| self.host_word(l))
            .collect();
        let net = NetworkTask::new(NetworkTaskSpec {
            task_id: 4 * id + 2 * rank,
            comm,
            comm_id: 1,
            seam: SeamTable::in_process(),
            blocks,
            schedule: Some(self.plans.schedule(loops)),
            triggers: TriggerWords::new(&triggers).expect("trigger words"),
            wait_for_device: true,
            skip: false,
            timeout_ns: Some(TASK_TIMEOUT_NS),
        })
        .expect("a network task");
        let bar = BarrierTask::new(BarrierTaskSpec {
            task_id: 4 * id + 2 * rank + 1,
            comm_id: 1,
            channel: Box::new(barrier.endpoint(rank).expect("an endpoint")),
            triggers: TriggerWords::new(&[self.host_word(BAR)]).expect("one trigger word"),
            leader: rank == 0,
            done_semaphores: if rank == 0 { done.to_vec() } else { Vec::new() },
            skip: false,
            timeout_ns: Some(TASK_TIMEOUT_NS),
        });
        [Box::new(net), Box::new(bar)]
    }
}

/// The end of a run, per rank.
#[derive(Debug)]
pub struct Outcome {
    /// Per execution, per rank: the device's result.
    pub device: Vec<Vec<Result<(), DeviceError>>>,
    /// Per execution, per rank: the task records' statuses.
    pub status: Vec<Vec<Vec<NrtStatus>>>,
    /// Per rank: wrong output elements after the last execution.
    pub wrong: Vec<u64>,
    /// `start` calls over the whole run (all ranks; the comms' counters).
    pub starts: u64,
    /// (stream, block) parts with ops, summed over ranks.
    pub filed: u64,
    /// Per execution, per rank: the op capacity of every stream's pool after it.
    pub pool: Vec<Vec<[u32; 4]>>,
    /// Per rank: the device's executions counted.
    pub executions: Vec<u64>,
    /// Per rank: the comm's protocol counters after the run.
    pub stats: Vec<ProtocolStats>,
    /// Per rank: the per-op counters of the blocks filed.
    pub peaks: Vec<Vec<OpPeak>>,
}

/// Runs `execs` executions (each one network task per rank whose schedule repeats the blocks
/// `loops` times; in place, where a repeat is not idempotent, use 1) of `p` on every rank,
/// the inputs written before each, with polled devices whose no-progress timeout is
/// `device_timeout`.
pub fn run(p: &PlanParams, execs: u32, loops: u32, device_timeout: Duration) -> Outcome {
    run_mode(p, execs, loops, device_timeout, Mode::Polled)
}

/// [`run`] with the devices driven in `mode`.
pub fn run_mode(
    p: &PlanParams,
    execs: u32,
    loops: u32,
    device_timeout: Duration,
    mode: Mode,
) -> Outcome {
    run_devices(p, execs, loops, device_timeout, mode, 0, false)
}

/// [`run`] with devices that raise no recv host index for `recv_lag` polls after each block
/// begins ([`PolledDevice::set_recv_lag`]).
pub fn run_lagged(
    p: &PlanParams,
    execs: u32,
    loops: u32,
    device_timeout: Duration,
    recv_lag: u32,
) -> Outcome {
    run_with(p, execs, loops, device_timeout, recv_lag, false)
}

/// [`run_lagged`], and with `watch_sends` every device checks each send completion against
/// the peer's receive host index ([`PolledDevice::watch_peer_recv`]; use `loops == 1`).
pub fn run_with(
    p: &PlanParams,
    execs: u32,
    loops: u32,
    device_timeout: Duration,
    recv_lag: u32,
    watch_sends: bool,
) -> Outcome {
    run_devices(
        p,
        execs,
        loops,
        device_timeout,
        Mode::Polled,
        recv_lag,
        watch_sends,
    )
}

/// The one runner behind [`run`], [`run_mode`], [`run_lagged`] and [`run_with`]; the two
/// test knobs (`recv_lag`, `watch_sends`) exist on polled devices only.
fn run_devices(
    p: &PlanParams,
    execs: u32,
    loops: u32,
    device_timeout: Duration,
    mode: Mode,
    recv_lag: u32,
    watch_sends: bool,
) -> Outcome {
    let n = p.nranks;
    let fabric = MemFabric::new(n).expect("a fabric");
    let ranks: Vec<Rank> = (0..n).map(|r| Rank::new(p, r, &fabric)).collect();
    let (queue, mut worker) =
        ProxyQueue::new(QueueConfig::default(), Box::new(MonotonicClock)).expect("a queue");
    let done_words: Vec<HostWord> = ranks.iter().map(|r| r.host_word(DONE)).collect();
    let mut slots: Vec<SlotHandle> = (0..n)
        .map(|_| ProxyQueue::join(&queue).expect("a slot"))
        .collect();
    let mut devices: Vec<Dev> = (0..n)
        .map(|r| match mode {
            Mode::Polled => {
                let mut d = PolledDevice::new(r, None, device_timeout);
                d.set_recv_lag(recv_lag);
                Dev::Polled(Box::new(d))
            }
            Mode::Threaded => {
                assert!(
                    recv_lag == 0 && !watch_sends,
                    "the lag and send-watch knobs are polled-device knobs"
                );
                let policy = WaitPolicy {
                    spins: 0,
                    yields: 50,
                    nap: Duration::from_micros(200),
                    timeout: device_timeout,
                };
                Dev::Threaded(DeviceThread::spawn(r, None, policy, None).expect("a device"))
            }
        })
        .collect();
    if watch_sends {
        for (r, (d, rank)) in devices.iter_mut().zip(&ranks).enumerate() {
            let Dev::Polled(d) = d else {
                unreachable!("checked above: polled devices only")
            };
            for (j, b) in rank.plans.blocks.iter().enumerate() {
                for (k, o) in b.plan.ops.iter().enumerate() {
                    if o.tx_entry_cnt == 0 {
                        continue;
                    }
                    let peer = &ranks[o.send_peer as usize];
                    let pb = peer
                        .plans
                        .blocks
                        .iter()
                        .find(|x| x.stream == b.stream && x.block == b.block)
                        .expect("the peer's part");
                    let (kk, po) = pb
                        .plan
                        .ops
                        .iter()
                        .enumerate()
                        .find(|(_, x)| {
                            x.tag == o.tag && x.recv_peer == r as i32 && x.rx_entry_cnt > 0
                        })
                        .expect("the partner recv op");
                    let addr = pb
                        .addresses(&peer.addrs)
                        .word(OpWord::post(Side::Recv).index(kk as u32));
                    // SAFETY: a host word of a rank that outlives every poll of this run.
                    unsafe { d.watch_peer_recv(j, k as u32, addr, po.ending_recv_credits) };
                }
            }
        }
    }
    let mut out = Outcome {
        device: Vec::new(),
        status: Vec::new(),
        wrong: Vec::new(),
        starts: 0,
        filed: ranks
            .iter()
            .map(|r| {
                r.plans
                    .blocks
                    .iter()
                    .filter(|b| !b.plan.ops.is_empty())
                    .count() as u64
            })
            .sum(),
        pool: Vec::new(),
        executions: Vec::new(),
        stats: Vec::new(),
        peaks: Vec::new(),
    };
    let start = Instant::now();
    for e in 0..execs {
        // A barrier per execution: an endpoint counts its own generations, and each task
        // takes its endpoint.
        let barrier = SharedMemBarrier::new(n).expect("a barrier");
        for (i, r) in ranks.iter().enumerate() {
            r.fill(i as u32);
            for l in r.net_lines().into_iter().chain([BAR]) {
                r.words[l].0.store(TRIGGER_ARMED, Ordering::Release);
            }
            for t in r.tasks(e, i as u32, loops, &barrier, &done_words) {
                slots[i].submit(t).expect("submitted");
            }
        }
        for (d, r) in devices.iter_mut().zip(&ranks) {
            // SAFETY: the rank's memory outlives every poll below.
            unsafe { d.launch(r.job(loops)) };
        }
        let mut records: Vec<Vec<TaskRecord>> = vec![Vec::new(); n as usize];
        let mut results: Vec<Option<Result<(), DeviceError>>> = vec![None; n as usize];
        loop {
            worker.tick();
            for (d, r) in devices.iter_mut().zip(results.iter_mut()) {
                if r.is_none() {
                    *r = d.poll();
                }
            }
            for (s, v) in slots.iter_mut().zip(records.iter_mut()) {
                while let Some(rec) = s.try_pop_record() {
                    v.push(rec);
                }
            }
            let ended = results.iter().all(Option::is_some);
            let failed = devices.iter().any(Dev::failed);
            if ended && (records.iter().all(|v| v.len() == 2) || failed) {
                break;
            }
            assert!(
                start.elapsed() < RUN_LIMIT,
                "run {p:?} did not end within {RUN_LIMIT:?}"
            );
        }
        out.device
            .push(results.into_iter().map(|r| r.expect("ended")).collect());
        out.status.push(
            records
                .iter()
                .map(|v| v.iter().map(TaskRecord::status).collect())
                .collect(),
        );
        out.pool.push(
            ranks
                .iter()
                .map(|r| std::array::from_fn(|s| r.comm.stream(s).capacity()))
                .collect(),
        );
        if devices.iter().any(Dev::failed) {
            break;
        }
        for d in &mut devices {
            d.take_job();
        }
    }
    out.executions = devices.iter().map(Dev::executions).collect();
    drop(devices);
    drop(worker);
    let waiter = Waiter {
        park: &ThreadPark,
        clock: &MonotonicClock,
        spin_ns: 0,
    };
    for s in slots {
        let _ = s.leave(&waiter);
    }
    out.stats = ranks.iter().map(|r| r.comm.protocol_stats()).collect();
    out.starts = out.stats.iter().map(|s| s.starts).sum();
    out.peaks = ranks.iter().map(|r| r.comm.op_peaks().to_vec()).collect();
    out.wrong = ranks
        .iter()
        .enumerate()
        .map(|(r, rk)| rk.wrong(r as u32))
        .collect();
    out
}

/// Asserts that every execution completed on every rank with 0 wrong elements, `start` was
/// called once per filed (stream, block) per rank and execution, and the pools stayed flat.
pub fn assert_completed(p: &PlanParams, out: &Outcome, execs: u32, loops: u32) {
    assert_eq!(
        out.device.len(),
        execs as usize,
        "{p:?}: executions (devices: {:?})",
        out.device
    );
    for (e, (dev, st)) in out.device.iter().zip(&out.status).enumerate() {
        for (r, d) in dev.iter().enumerate() {
            assert_eq!(*d, Ok(()), "{p:?}: execution {e} rank {r}: device");
            assert_eq!(
                st[r],
                vec![NrtStatus::Success; 2],
                "{p:?}: execution {e} rank {r}: tasks"
            );
        }
    }
    for (r, &w) in out.wrong.iter().enumerate() {
        assert_eq!(w, 0, "{p:?}: rank {r}: wrong output elements");
    }
    assert_eq!(
        out.starts,
        out.filed * u64::from(execs),
        "{p:?}: start once per filed (stream, block) per rank and execution"
    );
    for w in out.pool.windows(2) {
        assert_eq!(
            w[0], w[1],
            "{p:?}: the op pools stay flat across executions"
        );
    }
    for &x in &out.executions {
        assert_eq!(
            x,
            u64::from(execs * loops * p.blocks),
            "{p:?}: device executions"
        );
    }
}

/// Asserts the protocol counters of a completed run: each option did work (early completions
/// with early send; receives posted ahead, each op at most its credits, with early receive;
/// wraps when an op side has more entries than the wrap; send requests outstanding at most the
/// credits, and exactly the credits where an op has more entries), and none without it.
pub fn assert_counters(p: &PlanParams, out: &Outcome) {
    let sum = |f: fn(&ProtocolStats) -> u64| out.stats.iter().map(f).sum::<u64>();
    let nec = p.nec;
    let filed = out.filed * out.device.len() as u64;
    assert_eq!(sum(|s| s.starts), filed, "{p:?}: starts");
    let peaks = || out.peaks.iter().flatten();
    let has_send = peaks().any(|o| o.tx_entries > 0);
    if nec.early_send && has_send {
        assert!(
            sum(|s| s.early_send_completions) > 0,
            "{p:?}: early send completions"
        );
    } else {
        assert_eq!(
            sum(|s| s.early_send_completions),
            0,
            "{p:?}: early send completions"
        );
    }
    let ahead_possible = peaks().any(|o| o.ending_recv_credits > 0 && o.rx_entries > 0);
    if nec.early_recv > 0 && ahead_possible {
        assert!(sum(|s| s.recvs_posted_ahead) > 0, "{p:?}: receives ahead");
    }
    if nec.early_recv == 0 {
        assert_eq!(sum(|s| s.recvs_posted_ahead), 0, "{p:?}: receives ahead");
    }
    for o in peaks() {
        assert!(
            o.max_recv_ahead <= o.ending_recv_credits,
            "{p:?}: {o:?}: receives ahead beyond the credits"
        );
        if o.tx_entries > 0 {
            let credits = if nec.credits == 0 { 128 } else { nec.credits };
            assert_eq!(o.send_credits, credits, "{p:?}: {o:?}");
            assert!(
                o.peak_send <= credits,
                "{p:?}: {o:?}: outstanding beyond the credits"
            );
            if o.tx_entries > credits {
                assert_eq!(
                    o.peak_send, credits,
                    "{p:?}: {o:?}: the credits not used up"
                );
            }
        }
    }
    if p.blocks > 1 && peaks().any(|o| o.bb > 1) {
        assert!(sum(|s| s.block_switches) > 0, "{p:?}: block switches");
    }
    let beyond_wrap = peaks().any(|o| o.tx_entries.max(o.rx_entries) > nec.idx_wrap);
    if nec.idx_wrap > 0 && beyond_wrap {
        assert!(sum(|s| s.index_wraps) > 0, "{p:?}: index wraps");
    }
    if nec.idx_wrap == 0 {
        assert_eq!(sum(|s| s.index_wraps), 0, "{p:?}: index wraps");
    }
}
