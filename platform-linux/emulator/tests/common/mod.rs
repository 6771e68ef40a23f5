//! A planned collective on two ranks through the real engine, with the device emulator as the
//! proxy's peer: per rank a `Comm` over the in-process `MemFabric`, a network task and a barrier
//! task on one proxy queue whose worker this thread ticks (caller-driven), host words and
//! buffers, and a device, either threaded ([`DeviceThread`]) or polled ([`PolledDevice`],
//! polled by this same thread between ticks).
//!
//! Every wait is bounded: the devices by their timeout, the whole run by [`RUN_LIMIT`].

#![allow(dead_code)] // each test binary uses part of the harness

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proxy_collectives::planner::data::{count_wrong, fill_input, POISON};
use proxy_collectives::planner::{
    plan, Addresses, Collective, DataType, Instr, OpWord, PlanParams, RankPlan, Side,
};
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
use proxy_core::seam::SeamTable;
use proxy_emulator::{DeviceError, DeviceThread, Job, PolledDevice, WaitPolicy, WaitingFor};

/// Ranks of the collective.
pub const N: u32 = 2;
/// Program executions per launch (the network task's schedule repeats the block as often).
pub const REPS: u32 = 2;
/// Block id of the one block.
const BLOCK: u32 = 1;
/// The device's no-progress timeout in the stall tests.
pub const DEVICE_TIMEOUT: Duration = Duration::from_millis(300);
/// The proxy tasks' no-progress limit: a bound, far behind the device's timeout.
const TASK_TIMEOUT_NS: u64 = 20_000_000_000;
/// Bound on one whole run.
pub const RUN_LIMIT: Duration = Duration::from_secs(60);

/// How the device is driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A `device-<rank>` thread per rank, looping over poll with its wait policy.
    Threaded,
    /// A [`PolledDevice`] per rank, polled by the thread that ticks the proxy queue.
    Polled,
}

/// One host word alone on its line (stride 64 bytes).
#[repr(C, align(64))]
struct Line(AtomicU32);

/// Word lines of a rank: the network trigger, the barrier trigger, barrier-done, then the
/// plan's words.
const NET: usize = 0;
const BAR: usize = 1;
const DONE: usize = 2;
const FIXED: usize = 3;

/// One rank: its comm, words, buffers and plan.
struct Rank {
    /// Boxed: the network task carries its address.
    comm: Box<Comm>,
    words: Box<[Line]>,
    input: Vec<u64>,
    output: Vec<u64>,
    scratch: Vec<u64>,
    plan: Arc<RankPlan>,
    addrs: Addresses,
}

fn alloc_bytes(bytes: u64) -> Vec<u64> {
    vec![u64::from_ne_bytes([POISON; 8]); (bytes as usize).div_ceil(8) + 1]
}

impl Rank {
    fn new(r: u32, fabric: &Arc<MemFabric>) -> Self {
        let mut params = PlanParams::new(Collective::AllReduce, 1024, DataType::F32, r, N);
        // Several entries per op side: 4 KiB in 512-byte chunks.
        params.chunk_bytes = 512;
        let plan = plan(&params).expect("a valid plan");
        let words: Box<[Line]> = (0..FIXED + plan.host_words() as usize)
            .map(|_| Line(AtomicU32::new(0)))
            .collect();
        let l = plan.layout;
        let (mut input, mut output, mut scratch) = (
            alloc_bytes(l.input_bytes),
            alloc_bytes(l.output_bytes),
            alloc_bytes(l.scratch_bytes),
        );
        let addr = |v: &mut Vec<u64>| v.as_mut_ptr() as u64;
        let addrs = Addresses {
            input: addr(&mut input),
            output: addr(&mut output),
            scratch: addr(&mut scratch),
            words: &words[FIXED] as *const Line as u64,
            word_stride: std::mem::size_of::<Line>() as u64,
        };
        // SAFETY: the bytes are the input buffer's own.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(input.as_mut_ptr().cast::<u8>(), input.len() * 8)
        };
        fill_input(&plan.params, r, bytes);
        // The device callbacks reach the words directly (this process's memory).
        // SAFETY: every word address the comm is given is a `Line` of this rank, alive until
        // after the comm is dropped (`run` drops the comms first), accessed only atomically.
        let device = Arc::new(unsafe { DirectHostWords::new() });
        let mut comm = Box::new(
            Comm::new(
                CommConfig::new(r, N, 1),
                Box::new(fabric.endpoint(r).expect("an endpoint")),
                device,
                Arc::new(MonotonicClock),
            )
            .expect("a comm"),
        );
        // SAFETY: every buffer and word given to `start` lives in this `Rank`, which outlives
        // the tasks (the worker is dropped, closing them, before the ranks).
        unsafe { comm.trust_all_addresses() };
        Self {
            comm,
            words,
            input,
            output,
            scratch,
            plan: Arc::new(plan),
            addrs,
        }
    }

    fn word_addr(&self, line: usize) -> u64 {
        &self.words[line] as *const Line as u64
    }

    fn host_word(&self, line: usize) -> HostWord {
        // SAFETY: a word of this rank, alive while the tasks and devices use it.
        unsafe { HostWord::from_addr(self.word_addr(line)) }.expect("an aligned word")
    }

    fn job(&self) -> Job {
        Job::single(
            self.plan.clone(),
            self.addrs,
            REPS,
            vec![self.word_addr(NET)],
            vec![self.word_addr(BAR)],
            Some(self.word_addr(DONE)),
        )
    }

    fn wrong(&self) -> u64 {
        // SAFETY: the output buffer's own bytes; nothing runs any more.
        let out = unsafe {
            std::slice::from_raw_parts(self.output.as_ptr().cast::<u8>(), self.output.len() * 8)
        };
        count_wrong(&self.plan.params, self.comm.config().rank, out)
    }
}

/// What a rank's device waited for first at each stage that a plant can stall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expect {
    /// The net trigger word.
    pub net_trigger: u64,
    /// The first handshake the program waits for: (op, side, semaphore address).
    pub first_handshake: (u32, Side, u64),
    /// The first completion the program waits for: (op, side, semaphore address).
    pub first_complete: (u32, Side, u64),
}

/// The end of one run, per rank.
#[derive(Debug)]
pub struct RankOutcome {
    /// The device's result.
    pub device: Result<(), DeviceError>,
    /// Final task records popped while the run went on (the tasks closed at the end are not
    /// in here).
    pub records: Vec<TaskRecord>,
    /// Wrong output elements.
    pub wrong: u64,
    /// Program executions the device counted.
    pub executions: u64,
    /// What its device waits for first at each stage.
    pub expect: Expect,
}

fn expect(r: &Rank) -> Expect {
    let w = |op: u32, hw: OpWord| r.addrs.word(hw.index(op));
    let p = &r.plan.program;
    let first_handshake = p
        .iter()
        .find_map(|i| match *i {
            Instr::WaitHandshake { op, side } => Some((op, side, w(op, OpWord::handshake(side)))),
            _ => None,
        })
        .expect("a handshake wait");
    let first_complete = p
        .iter()
        .find_map(|i| match *i {
            Instr::Wait { op, side, upto } if upto > 0 => {
                Some((op, side, w(op, OpWord::complete(side))))
            }
            _ => None,
        })
        .expect("a completion wait");
    Expect {
        net_trigger: r.word_addr(NET),
        first_handshake,
        first_complete,
    }
}

fn tasks(r: &Rank, rank: u32, barrier: &SharedMemBarrier, done_words: &[HostWord]) -> [TaskBox; 2] {
    let f = r.plan.fifos(&r.addrs);
    let comm_ptr = &*r.comm as *const Comm as *mut c_void;
    // SAFETY: the boxed comm outlives the task (the worker closes every task before the ranks
    // are dropped); only the worker calls the seam on it.
    let comm = unsafe { CommHandle::new(comm_ptr) }.expect("a comm pointer");
    let net = NetworkTask::new(NetworkTaskSpec {
        task_id: 2 * rank,
        comm,
        comm_id: 1,
        seam: SeamTable::in_process(),
        blocks: vec![BlockFifos {
            stream: 0,
            bb: BLOCK,
            ops: f.ops,
            src: f.src,
            dst: f.dst,
        }],
        schedule: Some(vec![BLOCK; REPS as usize]),
        triggers: TriggerWords::new(&[r.host_word(NET)]).expect("one trigger word"),
        wait_for_device: true,
        skip: false,
        timeout_ns: Some(TASK_TIMEOUT_NS),
    })
    .expect("a network task");
    let bar = BarrierTask::new(BarrierTaskSpec {
        task_id: 2 * rank + 1,
        comm_id: 1,
        channel: Box::new(barrier.endpoint(rank).expect("an endpoint")),
        triggers: TriggerWords::new(&[r.host_word(BAR)]).expect("one trigger word"),
        leader: rank == 0,
        done_semaphores: if rank == 0 {
            done_words.to_vec()
        } else {
            Vec::new()
        },
        skip: false,
        timeout_ns: Some(TASK_TIMEOUT_NS),
    });
    [Box::new(net), Box::new(bar)]
}

/// Runs one all-reduce (two program executions) on two ranks with the device in `mode`
/// (no-progress timeout `device_timeout`), ticking the proxy queue on this thread until the
/// devices ended and either every task record is in or a device failed.
pub fn run(mode: Mode, device_timeout: Duration) -> Vec<RankOutcome> {
    let fabric = MemFabric::new(N).expect("a fabric");
    let ranks: Vec<Rank> = (0..N).map(|r| Rank::new(r, &fabric)).collect();
    let (queue, mut worker) =
        ProxyQueue::new(QueueConfig::default(), Box::new(MonotonicClock)).expect("a queue");
    let barrier = SharedMemBarrier::new(N).expect("a barrier");
    let done_words: Vec<HostWord> = ranks.iter().map(|r| r.host_word(DONE)).collect();
    let mut slots: Vec<SlotHandle> = (0..N)
        .map(|_| ProxyQueue::join(&queue).expect("a slot"))
        .collect();
    for (i, r) in ranks.iter().enumerate() {
        // Arm the triggers before the tasks are submitted (docs/design.md §4).
        for line in [NET, BAR] {
            r.words[line].0.store(TRIGGER_ARMED, Ordering::Release);
        }
        for t in tasks(r, i as u32, &barrier, &done_words) {
            slots[i].submit(t).expect("submitted");
        }
    }
    let mut records: Vec<Vec<TaskRecord>> = vec![Vec::new(); N as usize];
    let pop = |slots: &mut [SlotHandle], records: &mut [Vec<TaskRecord>]| {
        for (s, out) in slots.iter_mut().zip(records.iter_mut()) {
            while let Some(rec) = s.try_pop_record() {
                out.push(rec);
            }
        }
    };
    let all_in = |records: &[Vec<TaskRecord>]| records.iter().all(|v| v.len() == 2);
    let start = Instant::now();
    let check = |what: &str| {
        assert!(
            start.elapsed() < RUN_LIMIT,
            "run ({mode:?}) did not end within {RUN_LIMIT:?}: {what}"
        );
    };
    let (results, executions): (Vec<_>, Vec<_>) = match mode {
        Mode::Threaded => {
            let policy = WaitPolicy {
                spins: 0,
                yields: 50,
                nap: Duration::from_micros(200),
                timeout: device_timeout,
            };
            let mut devices: Vec<DeviceThread> = (0..N)
                .map(|r| DeviceThread::spawn(r, None, policy, None).expect("a device thread"))
                .collect();
            for (d, r) in devices.iter_mut().zip(&ranks) {
                // SAFETY: the rank's memory outlives the wait below (and the threads, dropped
                // before the ranks).
                unsafe { d.launch(r.job()) };
            }
            while !(all_in(&records) || devices.iter().all(DeviceThread::failed)) {
                worker.tick();
                pop(&mut slots, &mut records);
                check("the task records or the devices' failure");
                std::thread::yield_now();
            }
            devices
                .iter_mut()
                .map(|d| {
                    let r = d.wait();
                    (r, d.stats().executions.load(Ordering::Relaxed))
                })
                .unzip()
        }
        Mode::Polled => {
            let mut devices: Vec<PolledDevice> = (0..N)
                .map(|r| PolledDevice::new(r, None, device_timeout))
                .collect();
            for (d, r) in devices.iter_mut().zip(&ranks) {
                // SAFETY: the rank's memory outlives every poll below.
                unsafe { d.launch(r.job()) };
            }
            let mut results: Vec<Option<Result<(), DeviceError>>> = vec![None; N as usize];
            loop {
                worker.tick();
                for (d, r) in devices.iter_mut().zip(results.iter_mut()) {
                    *r = d.poll_once();
                }
                pop(&mut slots, &mut records);
                let ended = results.iter().all(Option::is_some);
                let failed = devices.iter().any(PolledDevice::failed);
                if ended && (all_in(&records) || failed) {
                    break;
                }
                check("the devices and the task records");
            }
            results
                .into_iter()
                .zip(&devices)
                .map(|(r, d)| {
                    (
                        r.expect("ended"),
                        d.stats().executions.load(Ordering::Relaxed),
                    )
                })
                .unzip()
        }
    };
    // The worker goes first: it closes every task still held (NRT_CLOSED, `stop` on each comm),
    // so the slots can leave without it and the comms are no longer referenced.
    drop(worker);
    let waiter = Waiter {
        park: &ThreadPark,
        clock: &MonotonicClock,
        spin_ns: 0,
    };
    for s in slots {
        let _ = s.leave(&waiter);
    }
    ranks
        .iter()
        .zip(results.into_iter().zip(executions))
        .zip(records)
        .map(|((r, (device, executions)), records)| RankOutcome {
            device,
            records,
            wrong: r.wrong(),
            executions,
            expect: expect(r),
        })
        .collect()
}

/// Asserts that every rank completed: the device, both tasks with success, the right output.
pub fn assert_completed(out: &[RankOutcome]) {
    for (r, o) in out.iter().enumerate() {
        assert_eq!(o.device, Ok(()), "rank {r}: device");
        assert_eq!(o.records.len(), 2, "rank {r}: both task records");
        for rec in &o.records {
            assert_eq!(rec.status(), NrtStatus::Success, "rank {r}: task {rec:?}");
        }
        assert_eq!(o.wrong, 0, "rank {r}: wrong output elements");
        assert_eq!(o.executions, u64::from(REPS), "rank {r}: executions");
    }
}

/// What a stalled device must have waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// The net trigger word, never consumed.
    NetTrigger,
    /// The first handshake semaphore, never incremented.
    Handshake,
    /// The first complete semaphore, never incremented.
    Completion,
}

/// Asserts that every rank's device ended with a timeout naming the word of `stall`.
pub fn assert_stalled(out: &[RankOutcome], stall: Stall) {
    for (r, o) in out.iter().enumerate() {
        let Err(DeviceError::Timeout { rank, waiting_for }) = o.device else {
            panic!(
                "rank {r}: want a device timeout at {stall:?}, got {:?}",
                o.device
            );
        };
        assert_eq!(rank, r as u32);
        let e = o.expect;
        match (stall, waiting_for) {
            (Stall::NetTrigger, WaitingFor::NetTrigger { addr, seen }) => {
                assert_eq!(addr, e.net_trigger, "rank {r}: the net trigger word");
                assert_eq!(seen, 1, "rank {r}: the device's write, never consumed");
            }
            (Stall::Handshake, WaitingFor::Handshake { op, side, addr, .. }) => {
                assert_eq!(
                    (op, side, addr),
                    e.first_handshake,
                    "rank {r}: the handshake"
                );
            }
            (Stall::Completion, WaitingFor::Complete { op, side, addr, .. }) => {
                assert_eq!(
                    (op, side, addr),
                    e.first_complete,
                    "rank {r}: the completion"
                );
            }
            (_, w) => panic!("rank {r}: want a stall at {stall:?}, the device waited for {w}"),
        }
        assert_eq!(o.executions, 0, "rank {r}: no execution completed");
    }
}
