//! The allocation-free steady state (docs/design.md §3, §4): once warmed up, an execution of a
//! network task (trigger gate, `start` of every block, progress rounds over the in-memory
//! transport, `stop` per stream, re-arm) allocates nothing.
//!
//! Two comms (ranks 0 and 1) over one `MemFabric`, each with one network task of one block on
//! stream 0: one op info per rank with a send to the peer and a receive from it (the exchange
//! step of a two-rank all-reduce), two entries per side, one eager (256 B, copied at post) and
//! one large (8 KiB, lent until the receiver copies it; 4100 B under Miri). The tasks are
//! stepped directly (`ProxyTask::step`, no queue) and the device side is played by hand through
//! the host words (trigger, host indices, semaphores), as the device emulator does. After a
//! warm-up, a counting global allocator (on the one thread that runs the engine here) is armed and the same two tasks are
//! re-armed and run for `EXECUTIONS` executions (1,000; 3 under Miri); every one must complete
//! with the right bytes, and the counter must stay at zero.
//!
//! This file is its own test binary, so its global allocator counts only this test. Not built
//! under `--cfg loom` (the engine's atomics are loom's there, and this is no model).

#![cfg(not(loom))]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use proxy_alloc_count::CountingAlloc;
use proxy_core::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr, EXEC_COMPLETE, NET_TRANSFER};
use proxy_core::base::host_word::HostWord;
use proxy_core::base::status::NrtStatus;
use proxy_core::base::sync::PlainArc;
use proxy_core::base::time::NoClock;
use proxy_core::driver::task::{
    BlockFifos, CommHandle, NetworkTask, NetworkTaskSpec, ProxyTask, Step, StepEnv,
};
use proxy_core::driver::trigger::TriggerWords;
use proxy_core::progress::comm::{Comm, CommConfig};
use proxy_core::progress::device::DirectHostWords;
use proxy_core::progress::mem_transport::MemFabric;
use proxy_core::seam::SeamTable;

/// Counts allocation calls on the test's thread while it is armed
/// ([`CountingAlloc::arm_this_thread`]): the engine runs on that thread alone here (tasks
/// stepped directly, no worker, no queue), and the test harness's own threads (its "running for
/// over 60 seconds" notice under a loaded machine or Miri) must not count.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// Executions run while the counter is armed (fewer under Miri, which interprets every byte).
const EXECUTIONS: u32 = if cfg!(miri) { 3 } else { 1_000 };
/// Executions run before it is armed (sizes every reused vector and pool).
const WARM_UP: u32 = 3;
/// Entry sizes of each side: one eager (≤ 4096 B), one large (just above it under Miri).
const SIZES: [usize; 2] = [256, if cfg!(miri) { 4100 } else { 8192 }];
/// Upper bound on task steps per execution (a bounded wait: a stuck execution fails).
const MAX_STEPS: u32 = 10_000;

/// Host words of one rank, one per 128-byte line as on the device.
#[repr(C, align(128))]
struct Line(AtomicU32);

/// Word indices of a rank's words.
const TRIGGER: usize = 0;
const SEND_IDX: usize = 1;
const SEND_HS: usize = 2;
const SEND_CPL: usize = 3;
const RECV_IDX: usize = 4;
const RECV_HS: usize = 5;
const RECV_CPL: usize = 6;
const WORDS: usize = 7;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Trigger written; waiting for the proxy to consume it (0).
    Triggered,
    /// Host indices at `0xFFFF_FFFF`; waiting for both handshakes.
    Handshake,
    /// Entries posted; waiting for both complete semaphores.
    Posted,
    /// Both sides complete.
    Finished,
}

/// One rank: its comm (behind the task's handle), task, words, buffers and device state.
struct Rank {
    rank: usize,
    task: NetworkTask,
    /// From `Box::into_raw`; freed by `Drop` (the task only holds its handle, and nothing else
    /// touches it while the task runs).
    comm: *mut Comm,
    /// An `Arc`, not a `Box`: moving a `Box` re-asserts unique ownership (Stacked Borrows) and
    /// would invalidate the addresses the comm holds.
    words: Arc<[Line]>,
    src: Vec<Vec<u8>>,
    dst: Vec<Vec<u8>>,
    phase: Phase,
}

impl Drop for Rank {
    fn drop(&mut self) {
        // SAFETY: `comm` came from `Box::into_raw` in `build` and is freed once, here; the task
        // that carries its handle is never stepped again.
        drop(unsafe { Box::from_raw(self.comm) });
    }
}

fn pattern(rank: usize, entry: usize, exec: u32, i: usize) -> u8 {
    ((rank * 101 + entry * 37 + exec as usize * 13 + i) % 251) as u8
}

impl Rank {
    fn word(&self, w: usize) -> &AtomicU32 {
        &self.words[w].0
    }

    fn addr(&self, w: usize) -> u64 {
        self.word(w) as *const AtomicU32 as usize as u64
    }

    /// The device's start of execution `exec`: fills the send data, poisons the receive
    /// buffers, writes the trigger (1).
    fn device_begin(&mut self, exec: u32) {
        for (e, b) in self.src.iter_mut().enumerate() {
            for (i, x) in b.iter_mut().enumerate() {
                *x = pattern(self.rank, e, exec, i);
            }
        }
        for b in &mut self.dst {
            b.fill(0xEE);
        }
        self.word(TRIGGER).store(1, Ordering::Release);
        self.phase = Phase::Triggered;
    }

    /// One device step of execution `exec` (0-based, counted since the comm was made).
    fn device_step(&mut self, exec: u32) {
        let n = SIZES.len() as u32;
        match self.phase {
            Phase::Triggered => {
                if self.word(TRIGGER).load(Ordering::Acquire) == 0 {
                    self.word(SEND_IDX).store(0xFFFF_FFFF, Ordering::Release);
                    self.word(RECV_IDX).store(0xFFFF_FFFF, Ordering::Release);
                    self.phase = Phase::Handshake;
                }
            }
            Phase::Handshake => {
                let hs = (
                    self.word(SEND_HS).load(Ordering::Acquire),
                    self.word(RECV_HS).load(Ordering::Acquire),
                );
                assert!(hs.0 <= exec + 1 && hs.1 <= exec + 1, "handshakes {hs:?}");
                if hs == (exec + 1, exec + 1) {
                    // Post every entry of both sides (raise the host indices).
                    self.word(SEND_IDX).store(n, Ordering::Release);
                    self.word(RECV_IDX).store(n, Ordering::Release);
                    self.phase = Phase::Posted;
                }
            }
            Phase::Posted => {
                let cpl = (
                    self.word(SEND_CPL).load(Ordering::Acquire),
                    self.word(RECV_CPL).load(Ordering::Acquire),
                );
                let want = (exec + 1) * n;
                assert!(cpl.0 <= want && cpl.1 <= want, "completions {cpl:?}");
                if cpl == (want, want) {
                    self.phase = Phase::Finished;
                }
            }
            Phase::Finished => {}
        }
    }
}

fn build(fabric: &MemFabric, rank: usize) -> Rank {
    let t = fabric.endpoint(rank as u32).unwrap();
    // SAFETY: every address the ops use is registered below and lives as long as the rank:
    // the words and buffers are never reallocated and are dropped after the comm (`Rank`'s
    // `Drop` frees the comm first).
    let dev = unsafe { DirectHostWords::new() };
    let comm = Comm::new(
        CommConfig::new(rank as u32, 2, 5),
        Box::new(t),
        PlainArc::new(dev),
        PlainArc::new(NoClock),
    )
    .unwrap();
    let comm: *mut Comm = Box::into_raw(Box::new(comm));
    let words: Arc<[Line]> = (0..WORDS).map(|_| Line(AtomicU32::new(0))).collect();
    let src: Vec<Vec<u8>> = SIZES.iter().map(|&n| vec![0u8; n]).collect();
    let dst: Vec<Vec<u8>> = SIZES.iter().map(|&n| vec![0u8; n]).collect();
    let mut r = Rank {
        rank,
        // Replaced below, once the FIFOs exist.
        task: placeholder_task(),
        comm,
        words,
        src,
        dst,
        phase: Phase::Finished,
    };
    let wbase = r.addr(0);
    // SAFETY: the words and buffers outlive the comm (see above); `comm` is live and used by
    // this thread only.
    unsafe {
        let comm = &mut *comm;
        comm.register_memory(wbase, (WORDS * 128) as u64).unwrap();
        for b in r.src.iter().chain(r.dst.iter()) {
            comm.register_memory(b.as_ptr() as usize as u64, b.len() as u64)
                .unwrap();
        }
    }
    let peer = 1 - rank as i32;
    let op = NetOpInfo {
        send_peer: peer,
        recv_peer: peer,
        tag: 3,
        tx_entry_cnt: SIZES.len() as u32,
        rx_entry_cnt: SIZES.len() as u32,
        data_type_sz: 4,
        post_send_idx_addr: r.addr(SEND_IDX),
        send_handshake_sem_addr: r.addr(SEND_HS),
        send_complete_sem_addr: r.addr(SEND_CPL),
        post_recv_idx_addr: r.addr(RECV_IDX),
        recv_handshake_sem_addr: r.addr(RECV_HS),
        recv_complete_sem_addr: r.addr(RECV_CPL),
        ..NetOpInfo::default()
    };
    let mark = |e: usize| {
        if e + 1 == SIZES.len() {
            EXEC_COMPLETE
        } else {
            NET_TRANSFER
        }
    };
    let src_fifo: Vec<NetSrcAddr> = (0..SIZES.len())
        .map(|e| NetSrcAddr {
            net_op_idx: 0,
            mark: mark(e),
            addr: r.src[e].as_ptr() as usize as u64,
            size: SIZES[e] as u64,
            dest_rank: -1,
            reserved: 0,
        })
        .collect();
    let dst_fifo: Vec<NetDestAddr> = (0..SIZES.len())
        .map(|e| NetDestAddr {
            net_op_idx: 0,
            mark: mark(e),
            addr: r.dst[e].as_mut_ptr() as usize as u64,
            size: SIZES[e] as u64,
            src_rank: -1,
            reserved: 0,
        })
        .collect();
    // SAFETY: the trigger word lives as long as the rank, which owns the task that carries the
    // handle, and is accessed only atomically.
    let trigger = unsafe { HostWord::from_ref(&r.words[TRIGGER].0) };
    r.task = NetworkTask::new(NetworkTaskSpec {
        task_id: 0,
        // SAFETY: the comm outlives the task's use of it (`Rank`'s `Drop`) and only this
        // test's one thread calls the seam on it, through the task.
        comm: unsafe { CommHandle::new(comm as *mut core::ffi::c_void) }.unwrap(),
        comm_id: 5,
        seam: SeamTable::in_process(),
        blocks: vec![BlockFifos {
            stream: 0,
            bb: 1,
            ops: vec![op],
            src: src_fifo,
            dst: dst_fifo,
        }],
        schedule: None,
        triggers: TriggerWords::new(&[trigger]).unwrap(),
        wait_for_device: true,
        skip: false,
        timeout_ns: None,
    })
    .unwrap();
    r
}

/// A task that is never stepped (it only holds the place until the real one is built).
fn placeholder_task() -> NetworkTask {
    static NOT_A_COMM: u8 = 0;
    NetworkTask::new(NetworkTaskSpec {
        task_id: u32::MAX,
        // SAFETY: never stepped, so the handle is never dereferenced.
        comm: unsafe { CommHandle::new(&NOT_A_COMM as *const u8 as *mut core::ffi::c_void) }
            .unwrap(),
        comm_id: 0,
        seam: SeamTable::in_process(),
        blocks: Vec::new(),
        schedule: None,
        triggers: TriggerWords::none(),
        wait_for_device: false,
        skip: true,
        timeout_ns: None,
    })
    .unwrap()
}

/// Runs execution `exec` on both ranks: arm, device start, steps until both tasks are DONE
/// (bounded), then checks every byte and semaphore.
fn execute(ranks: &mut [Rank; 2], exec: u32) {
    const ENV: StepEnv = StepEnv {
        now_ns: 0,
        may_begin: true,
        stamp: proxy_core::base::trace::TickStamp::NONE,
    };
    for r in ranks.iter_mut() {
        if exec > 0 {
            r.task.rearm(exec).unwrap();
        }
        assert_eq!(r.task.record().task_id, exec);
        // The producer arms the trigger word before it submits the task.
        r.word(TRIGGER).store(0xFFFF_FFFF, Ordering::Release);
    }
    let mut done = [false; 2];
    for r in ranks.iter_mut() {
        r.device_begin(exec);
    }
    let mut steps = 0;
    while !(done[0] && done[1]) {
        steps += 1;
        assert!(
            steps <= MAX_STEPS,
            "execution {exec}: tasks not DONE after {MAX_STEPS} steps (phases {:?} {:?})",
            ranks[0].phase,
            ranks[1].phase
        );
        for (k, r) in ranks.iter_mut().enumerate() {
            if !done[k] {
                done[k] = r.task.step(&ENV) == Step::Done;
            }
            r.device_step(exec);
        }
    }
    for r in ranks.iter() {
        let rec = r.task.record();
        assert_eq!(
            rec.status(),
            NrtStatus::Success,
            "execution {exec} rank {}",
            r.rank
        );
        assert!(rec.is_done());
        assert_eq!(r.phase, Phase::Finished, "execution {exec} rank {}", r.rank);
        let peer = 1 - r.rank;
        for (e, b) in r.dst.iter().enumerate() {
            for (i, &x) in b.iter().enumerate() {
                if x != pattern(peer, e, exec, i) {
                    panic!(
                        "execution {exec} rank {} entry {e} byte {i}: {x} != {}",
                        r.rank,
                        pattern(peer, e, exec, i)
                    );
                }
            }
        }
        let n = SIZES.len() as u32;
        for (w, want) in [
            (SEND_HS, exec + 1),
            (RECV_HS, exec + 1),
            (SEND_CPL, (exec + 1) * n),
            (RECV_CPL, (exec + 1) * n),
        ] {
            assert_eq!(
                r.word(w).load(Ordering::Acquire),
                want,
                "word {w}, execution {exec}"
            );
        }
    }
}

#[test]
fn executions_allocate_nothing_once_warm() {
    let fabric = MemFabric::new(2).unwrap();
    let mut ranks = [build(&fabric, 0), build(&fabric, 1)];
    drop(fabric);
    for exec in 0..WARM_UP {
        execute(&mut ranks, exec);
    }
    // The counter counts: one allocation while armed reads 1.
    CountingAlloc::arm_this_thread(true);
    drop(std::hint::black_box(Vec::<u8>::with_capacity(1)));
    CountingAlloc::arm_this_thread(false);
    assert_eq!(ALLOC.take_armed_calls(), 1, "the counting allocator counts");
    CountingAlloc::arm_this_thread(true);
    for exec in WARM_UP..WARM_UP + EXECUTIONS {
        execute(&mut ranks, exec);
    }
    CountingAlloc::arm_this_thread(false);
    assert_eq!(
        ALLOC.armed_calls(),
        0,
        "allocations during {EXECUTIONS} warm executions"
    );
    // A DONE task is the only one that may be re-armed.
    let fabric2 = MemFabric::new(2).unwrap();
    let mut fresh = build(&fabric2, 0);
    assert_eq!(fresh.task.rearm(7), Err(NrtStatus::Invalid));
    assert_eq!(fresh.task.record().task_id, 0);
    fresh.phase = Phase::Finished;
}
