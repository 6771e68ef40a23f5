//! The poll state machine against a fake proxy played by the test itself, on one thread
//! (Miri-friendly: no threads, no clock): the test writes the proxy's words between polls.

use alloc::string::ToString;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::cell::Cell;
use core::sync::atomic::{AtomicU32, Ordering};

use super::*;
use crate::planner::{plan, Collective, DataType, PlanParams};

/// Counts what the interpreter records.
#[derive(Default)]
struct Counts {
    executions: Cell<u64>,
    recv_entries: Cell<u64>,
    faults: Cell<u64>,
    host_writes: Cell<u64>,
}

impl DeviceEnv for Counts {
    fn record(&self, event: Event) {
        let c = match event {
            Event::Execution => &self.executions,
            Event::RecvEntry { .. } => &self.recv_entries,
            Event::FaultInjected => &self.faults,
            Event::HostWrite => &self.host_writes,
        };
        c.set(c.get() + 1);
    }
}

/// A rank's buffers and words: word 0 the net trigger, 1 the barrier trigger, 2 barrier-done,
/// then the plan's words (stride 4).
struct Setup {
    buf: Vec<u64>,
    /// A `Vec`, not a `Box`: moving a `Box` retags it as unique under Stacked Borrows, which
    /// would invalidate the word addresses the job holds (Miri).
    words: Vec<AtomicU32>,
    job: Job,
}

const NET: usize = 0;
const BAR: usize = 1;
const DONE: usize = 2;

fn setup(reps: u32) -> Setup {
    let p = plan(&PlanParams::new(
        Collective::AllReduce,
        16,
        DataType::F32,
        0,
        2,
    ))
    .unwrap();
    let mut buf = vec![0u64; 64];
    let base = buf.as_mut_ptr() as u64;
    let words: Vec<AtomicU32> = (0..3 + p.host_words()).map(|_| AtomicU32::new(0)).collect();
    // Addresses from the base pointer of the whole array (it exposes every word to Miri; a
    // reference to one word would expose that word only).
    let words_base = words.as_ptr() as u64;
    let w = |i: usize| words_base + 4 * i as u64;
    let addrs = Addresses {
        input: base,
        output: base + 128,
        scratch: base + 256,
        words: w(3),
        word_stride: 4,
    };
    let mut job = Job::single(
        Arc::new(p),
        addrs,
        reps,
        vec![w(NET)],
        vec![w(BAR)],
        Some(w(DONE)),
    );
    // These tests follow the barrier stage after the program (the trigger at the end); the
    // default, at the launch, has its own test.
    job.barrier_at = BarrierAt::End;
    Setup { buf, words, job }
}

impl Setup {
    fn addr(&self, i: usize) -> u64 {
        self.words.as_ptr() as u64 + 4 * i as u64
    }

    /// The plan's word `hw` of op `op`.
    fn op_word(&self, op: u32, hw: OpWord) -> &AtomicU32 {
        self.block_word(0, op, hw)
    }

    /// Job block `j`'s word `hw` of op `op` (every block's words lie in `words`).
    fn block_word(&self, j: usize, op: u32, hw: OpWord) -> &AtomicU32 {
        let addr = self.job.blocks[j].addrs.word(hw.index(op));
        &self.words[((addr - self.addr(0)) / 4) as usize]
    }
}

/// The proxy side, played between polls: consumes triggers, answers handshakes, credits every
/// posted entry as complete (of every job block), passes the barrier.
#[derive(Default)]
struct FakeProxy {
    /// Per job block, per op, per side: entries credited.
    credited: Vec<Vec<[u32; 2]>>,
    /// Leave the barrier trigger unanswered (the other ranks have not arrived).
    hold_barrier: bool,
}

impl FakeProxy {
    fn answer(&mut self, s: &Setup) {
        let ld = |a: &AtomicU32| a.load(Ordering::Acquire);
        if ld(&s.words[NET]) == 1 {
            s.words[NET].store(0, Ordering::Release);
        }
        self.credited.resize(s.job.blocks.len(), Vec::new());
        for (j, b) in s.job.blocks.iter().enumerate() {
            let ops = &b.plan.ops;
            self.credited[j].resize(ops.len(), [0; 2]);
            for (k, o) in ops.iter().enumerate() {
                for side in [Side::Send, Side::Recv] {
                    if o.entries(side) == 0 {
                        continue;
                    }
                    let k32 = k as u32;
                    let post = s.block_word(j, k32, OpWord::post(side));
                    let c = &mut self.credited[j][k][side as usize];
                    match ld(post) {
                        HOST_INDEX_READY => {
                            post.store(0, Ordering::Release);
                            *c = 0;
                            s.block_word(j, k32, OpWord::handshake(side))
                                .fetch_add(1, Ordering::Release);
                        }
                        p if p > *c => {
                            s.block_word(j, k32, OpWord::complete(side))
                                .fetch_add(p - *c, Ordering::Release);
                            *c = p;
                        }
                        _ => {}
                    }
                }
            }
        }
        if ld(&s.words[BAR]) == 1 && !self.hold_barrier {
            s.words[BAR].store(0, Ordering::Release);
            s.words[DONE].fetch_add(1, Ordering::Release);
        }
    }
}

/// Polls `d` with `proxy` answering between polls until the launch ends (at most 1000 polls).
fn run(d: &mut Device, s: &Setup, proxy: &mut FakeProxy, env: &Counts) -> Result<u32, DeviceError> {
    for polls in 1..=1000 {
        match d.poll(env)? {
            DevicePoll::Done => return Ok(polls),
            DevicePoll::Pending { .. } => proxy.answer(s),
            DevicePoll::Idle => panic!("idle while launched"),
        }
    }
    panic!("launch not done after 1000 polls: {:?}", d.stage());
}

/// The first instruction of the plan's program that waits for a handshake.
fn first_handshake(p: &RankPlan) -> (u32, Side) {
    p.program
        .iter()
        .find_map(|i| match *i {
            Instr::WaitHandshake { op, side } => Some((op, side)),
            _ => None,
        })
        .expect("the plan waits for a handshake")
}

#[test]
fn nothing_launched_is_idle_and_launch_touches_no_word() {
    let s = setup(1);
    let mut d = Device::new(0, None);
    assert_eq!(d.poll(&()), Ok(DevicePoll::Idle));
    // SAFETY: every address of the job points into `s`, alive for the test.
    unsafe { d.launch(s.job.clone()) };
    assert_eq!(d.stage(), Stage::Launched);
    assert_eq!(s.words[NET].load(Ordering::Relaxed), 0);
}

#[test]
fn the_net_stage_pends_on_the_trigger_until_the_proxy_consumes_it() {
    let s = setup(1);
    let mut d = Device::new(0, None);
    // SAFETY: as above.
    unsafe { d.launch(s.job.clone()) };
    let want = DevicePoll::Pending {
        waiting_for: WaitingFor::NetTrigger {
            addr: s.addr(NET),
            seen: 1,
        },
    };
    assert_eq!(d.poll(&()), Ok(want));
    assert_eq!(
        s.words[NET].load(Ordering::Relaxed),
        1,
        "the trigger written"
    );
    // Nothing moved: the same answer, the same stage.
    assert_eq!(d.poll(&()), Ok(want));
    assert_eq!(d.stage(), Stage::NetWait);
    // The proxy consumes it: the device runs into its first handshake wait.
    s.words[NET].store(0, Ordering::Release);
    let (op, side) = first_handshake(&s.job.blocks[0].plan);
    let hs = s.job.blocks[0]
        .addrs
        .word(OpWord::handshake(side).index(op));
    assert_eq!(
        d.poll(&()),
        Ok(DevicePoll::Pending {
            waiting_for: WaitingFor::Handshake {
                op,
                side,
                addr: hs,
                target: 1,
                seen: 0
            }
        })
    );
    assert_eq!(d.stage(), Stage::Program { rep: 0 });
    assert_eq!(
        s.op_word(op, OpWord::post(side)).load(Ordering::Relaxed),
        HOST_INDEX_READY,
        "the side armed before its wait"
    );
}

#[test]
fn a_launch_completes_against_the_proxy_and_counts_each_execution() {
    let s = setup(3);
    let mut d = Device::new(0, None);
    let env = Counts::default();
    // SAFETY: as above.
    unsafe { d.launch(s.job.clone()) };
    run(&mut d, &s, &mut FakeProxy::default(), &env).unwrap();
    assert_eq!(d.stage(), Stage::Done);
    assert_eq!(env.executions.get(), 3);
    assert_eq!(
        env.recv_entries.get(),
        3 * s.job.blocks[0].plan.dst.len() as u64
    );
    assert_eq!(env.faults.get(), 0);
    // Each execution writes host words the proxy reads (arms, post indices), each poll that
    // did records one HostWrite: at least one per execution.
    assert!(
        env.host_writes.get() >= 3,
        "{} host-write polls in 3 executions",
        env.host_writes.get()
    );
    // A device with nothing launched writes nothing.
    let idle = Counts::default();
    assert_eq!(Device::new(0, None).poll(&idle), Ok(DevicePoll::Idle));
    assert_eq!(idle.host_writes.get(), 0);
    // Every handshake semaphore rose once per execution.
    let (op, side) = first_handshake(&s.job.blocks[0].plan);
    assert_eq!(
        s.op_word(op, OpWord::handshake(side))
            .load(Ordering::Relaxed),
        3
    );
    // The barrier passed once; later polls answer Done again and touch nothing.
    assert_eq!(s.words[DONE].load(Ordering::Relaxed), 1);
    assert_eq!(d.poll(&env), Ok(DevicePoll::Done));
    assert_eq!(env.executions.get(), 3);
}

/// Polls `d`, `proxy` answering, until the device waits for barrier-done (at most 1000
/// polls); what it waits for then.
fn until_barrier_wait(d: &mut Device, s: &Setup, proxy: &mut FakeProxy) -> Option<WaitingFor> {
    for _ in 0..1000 {
        match d.poll(&()).unwrap() {
            DevicePoll::Pending {
                waiting_for: w @ WaitingFor::BarrierDone { .. },
            } => return Some(w),
            DevicePoll::Pending { .. } => proxy.answer(s),
            other => panic!("{other:?} before the barrier"),
        }
    }
    None
}

/// `BarrierAt::Launch`: the barrier trigger is written at the launch, before the net stage
/// and the program (barrier-done snapshot first); a rise of barrier-done while the program runs
/// counts, and the device still ends only once it rose.
#[test]
fn a_barrier_at_launch_is_triggered_before_the_program_and_awaited_after_it() {
    let mut s = setup(1);
    s.job.barrier_at = BarrierAt::Launch;
    s.words[DONE].store(7, Ordering::Relaxed);
    let mut d = Device::new(0, None);
    let mut proxy = FakeProxy {
        hold_barrier: true,
        ..FakeProxy::default()
    };
    // SAFETY: as above.
    unsafe { d.launch(s.job.clone()) };
    // The first poll writes both triggers and waits for the net trigger to be consumed.
    assert!(matches!(
        d.poll(&()),
        Ok(DevicePoll::Pending {
            waiting_for: WaitingFor::NetTrigger { .. }
        })
    ));
    assert_eq!(
        s.words[NET].load(Ordering::Relaxed),
        1,
        "net trigger written"
    );
    assert_eq!(
        s.words[BAR].load(Ordering::Relaxed),
        1,
        "barrier trigger written at the launch"
    );
    // Without the barrier passing, the device runs the program and then waits for it.
    assert_eq!(
        until_barrier_wait(&mut d, &s, &mut proxy),
        Some(WaitingFor::BarrierDone {
            addr: s.addr(DONE),
            target: 8,
            seen: 7
        })
    );
    s.words[DONE].store(8, Ordering::Release);
    assert_eq!(d.poll(&()), Ok(DevicePoll::Done));

    // A second launch whose barrier passes while the program still runs (the proxy answers
    // the trigger at once): the rise counts, and the device never waits for barrier-done.
    proxy.hold_barrier = false;
    // SAFETY: as above.
    unsafe { d.launch(s.job.clone()) };
    let mut end = None;
    for _ in 0..1000 {
        match d.poll(&()).unwrap() {
            DevicePoll::Pending {
                waiting_for: WaitingFor::BarrierDone { .. },
            } => panic!("the barrier passed during the program"),
            DevicePoll::Pending { .. } => proxy.answer(&s),
            other => {
                end = Some(other);
                break;
            }
        }
    }
    assert_eq!(s.words[DONE].load(Ordering::Relaxed), 9);
    assert_eq!(end, Some(DevicePoll::Done));
}

#[test]
fn the_barrier_stage_pends_on_barrier_done() {
    let s = setup(1);
    let mut d = Device::new(0, None);
    let mut proxy = FakeProxy::default();
    // SAFETY: as above.
    unsafe { d.launch(s.job.clone()) };
    // Answer everything but the barrier: the device ends up waiting for barrier-done.
    s.words[DONE].store(7, Ordering::Relaxed);
    assert_eq!(
        until_barrier_wait(&mut d, &s, &mut proxy),
        Some(WaitingFor::BarrierDone {
            addr: s.addr(DONE),
            target: 8,
            seen: 7
        })
    );
    assert_eq!(d.stage(), Stage::BarrierWait);
    assert_eq!(
        s.words[BAR].load(Ordering::Relaxed),
        1,
        "barrier trigger written"
    );
    s.words[DONE].store(8, Ordering::Release);
    assert_eq!(d.poll(&()), Ok(DevicePoll::Done));
}

#[test]
fn relaunching_resets_the_baselines_in_place() {
    let s = setup(2);
    let mut d = Device::new(0, None);
    let mut proxy = FakeProxy::default();
    let env = Counts::default();
    // SAFETY: as above.
    unsafe { d.launch(s.job.clone()) };
    run(&mut d, &s, &mut proxy, &env).unwrap();
    let ptrs = |d: &Device| {
        [
            d.exec.hs_base.as_ptr(),
            d.exec.cpl_base.as_ptr(),
            d.exec.posted.as_ptr(),
            d.exec.seen.as_ptr(),
        ]
    };
    let before = ptrs(&d);
    // The semaphores are cumulative now (2 executions in): the second launch counts from there.
    s.words[NET].store(0xFFFF_FFFF, Ordering::Relaxed);
    // SAFETY: as above.
    unsafe { d.launch(s.job.clone()) };
    run(&mut d, &s, &mut proxy, &env).unwrap();
    assert_eq!(env.executions.get(), 4);
    assert_eq!(ptrs(&d), before, "the baseline vectors were reallocated");
    assert_eq!(s.words[DONE].load(Ordering::Relaxed), 2);
}

#[test]
fn a_semaphore_ahead_of_the_posts_fails_the_launch_for_good() {
    let s = setup(1);
    let mut job = s.job.clone();
    job.net_triggers.clear();
    let mut d = Device::new(0, None);
    // SAFETY: as above.
    unsafe { d.launch(job) };
    // Answer both handshakes of op 0, then claim 5 receive completions.
    for _ in 0..4 {
        let _ = d.poll(&()).unwrap();
        for side in [Side::Send, Side::Recv] {
            let post = s.op_word(0, OpWord::post(side));
            if post.load(Ordering::Relaxed) == HOST_INDEX_READY {
                post.store(0, Ordering::Relaxed);
                s.op_word(0, OpWord::handshake(side))
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    s.op_word(0, OpWord::RecvComplete)
        .fetch_add(5, Ordering::Relaxed);
    let e = loop {
        match d.poll(&()) {
            Ok(DevicePoll::Pending { .. }) => {
                // Keep the sends flowing so the device reaches the recv wait.
                let post = s.op_word(0, OpWord::PostSend).load(Ordering::Relaxed);
                let cpl = s.op_word(0, OpWord::SendComplete);
                if post != HOST_INDEX_READY && cpl.load(Ordering::Relaxed) < post {
                    cpl.store(post, Ordering::Relaxed);
                }
            }
            Ok(other) => panic!("{other:?}"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(&e, DeviceError::Protocol { what, .. } if what.contains("only 1 posted")),
        "{e}"
    );
    assert_eq!(d.stage(), Stage::Failed);
    assert_eq!(d.poll(&()), Err(e), "the error is sticky");
}

#[test]
fn two_handshakes_in_one_execution_are_a_protocol_error() {
    let s = setup(1);
    let mut job = s.job.clone();
    job.net_triggers.clear();
    let (op, side) = first_handshake(&job.blocks[0].plan);
    let mut d = Device::new(0, None);
    // SAFETY: as above.
    unsafe { d.launch(job) };
    assert!(matches!(
        d.poll(&()),
        Ok(DevicePoll::Pending {
            waiting_for: WaitingFor::Handshake { .. }
        })
    ));
    s.op_word(op, OpWord::post(side))
        .store(0, Ordering::Relaxed);
    s.op_word(op, OpWord::handshake(side))
        .fetch_add(2, Ordering::Relaxed);
    let e = d.poll(&()).unwrap_err();
    assert!(
        matches!(&e, DeviceError::Protocol { what, .. } if what.contains("rose by 2")),
        "{e}"
    );
}

#[test]
fn abandon_hands_the_job_back_and_goes_idle() {
    let s = setup(1);
    let mut d = Device::new(0, None);
    // SAFETY: as above.
    unsafe { d.launch(s.job.clone()) };
    assert!(matches!(d.poll(&()), Ok(DevicePoll::Pending { .. })));
    let job = d.abandon().expect("the launched job");
    assert_eq!(job.reps(), 1);
    assert_eq!(d.stage(), Stage::Idle);
    assert_eq!(d.poll(&()), Ok(DevicePoll::Idle));
    assert!(d.job().is_none());
}

#[test]
fn fault_injection_flips_one_received_byte_per_execution() {
    let s = setup(2);
    let mut d = Device::new(0, Some(Fault { entry: None }));
    let env = Counts::default();
    // SAFETY: as above.
    unsafe { d.launch(s.job.clone()) };
    run(&mut d, &s, &mut FakeProxy::default(), &env).unwrap();
    assert_eq!(env.faults.get(), 2);
    // The fake proxy moves no data: the buffers stay all zero but for the flipped byte (and
    // what the program derived from it), whose top byte was flipped twice (back to zero) — so
    // look at one execution, with and without the fault.
    let one = |fault: Option<Fault>| {
        let s1 = setup(1);
        let mut d1 = Device::new(0, fault);
        // SAFETY: as above, for `s1`.
        unsafe { d1.launch(s1.job.clone()) };
        run(&mut d1, &s1, &mut FakeProxy::default(), &Counts::default()).unwrap();
        let p = &s1.job.blocks[0].plan;
        let e = p.dst.iter().find(|e| e.bytes > 0).unwrap();
        let at = s1.job.blocks[0].addrs.of(e.loc) + p.params.dtype.size() as u64 - 1;
        let bytes: Vec<u8> = s1.buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        (bytes[(at - s1.buf.as_ptr() as u64) as usize], bytes)
    };
    let (flipped, _) = one(Some(Fault { entry: None }));
    assert_eq!(flipped, 0xFF);
    let (clean, all) = one(None);
    assert_eq!(clean, 0);
    assert!(all.iter().all(|&b| b == 0));
}

#[test]
fn a_program_naming_a_missing_op_is_a_protocol_error() {
    let s = setup(1);
    let mut p = (*s.job.blocks[0].plan).clone();
    p.program.push(Instr::Arm {
        op: 99,
        side: Side::Send,
    });
    let mut job = s.job.clone();
    job.blocks[0].plan = Arc::new(p);
    let mut d = Device::new(3, None);
    // SAFETY: as above.
    unsafe { d.launch(job) };
    let e = d.poll(&()).unwrap_err();
    assert!(
        matches!(&e, DeviceError::Protocol { rank: 3, what } if what.contains("op 99")),
        "{e}"
    );
    assert_eq!(s.words[NET].load(Ordering::Relaxed), 0, "nothing written");
}

#[test]
fn zero_reps_run_only_the_net_stage_and_the_barrier() {
    let s = setup(0);
    let mut d = Device::new(0, None);
    let env = Counts::default();
    // SAFETY: as above.
    unsafe { d.launch(s.job.clone()) };
    run(&mut d, &s, &mut FakeProxy::default(), &env).unwrap();
    assert_eq!(env.executions.get(), 0);
    assert_eq!(s.words[DONE].load(Ordering::Relaxed), 1);
}

#[test]
fn waiting_for_names_the_word_and_the_value() {
    let w = WaitingFor::Complete {
        op: 1,
        side: Side::Recv,
        addr: 0x1000,
        upto: 2,
        target: 5,
        seen: 4,
    };
    assert_eq!(w.addr(), 0x1000);
    assert_eq!(w.seen(), 4);
    let e = DeviceError::Timeout {
        rank: 2,
        waiting_for: w,
    };
    assert_eq!(
        e.to_string(),
        "device 2: timed out waiting for op 1 Recv complete semaphore 0x1000 to reach 5 (+2; \
         last value 4)"
    );
    use proxy_core::base::state::Machine;
    assert_eq!(Stage::edge(Stage::Launched, Stage::NetWait), Some(2));
    assert_eq!(
        Stage::edge(Stage::Program { rep: 0 }, Stage::Program { rep: 1 }),
        Some(5)
    );
    assert_eq!(
        Stage::edge(Stage::Program { rep: 0 }, Stage::Program { rep: 2 }),
        None
    );
    assert_eq!(Stage::edge(Stage::Done, Stage::BarrierWait), None);
    assert_eq!(Stage::edge(Stage::Idle, Stage::Failed), None);
    assert_eq!(Stage::edge(Stage::Done, Stage::Idle), Some(10));
}

/// The early-send overwrite never covers a range a receive posted early may land in: op 0
/// sends from output bytes 0..8, op 1 receives into them with one early credit (so the proxy
/// may post that receive at the handshake, before the program hands it out). The device sees
/// the send complete while the early receive is still pending; the receive lands; the
/// program then hands the receive out. Overwriting the source then (and restoring it when the
/// receive is handed out) would put the sent bytes back over the received ones.
#[test]
fn the_early_send_overwrite_spares_a_range_an_early_receive_may_land_in() {
    use crate::planner::{Buf, Layout, Loc, PlannedEntry, PlannedOp};
    let mut params = PlanParams::new(Collective::SendRecv, 2, DataType::F32, 0, 2);
    params.nec.early_send = true;
    params.nec.early_recv = 1;
    let op = |tx, rx, credits, base| PlannedOp {
        send_peer: if tx > 0 { 1 } else { -1 },
        recv_peer: if rx > 0 { 1 } else { -1 },
        tag: base,
        tx_entry_cnt: tx,
        rx_entry_cnt: rx,
        src_base: 0,
        dst_base: base.saturating_sub(1),
        ending_recv_credits: credits,
    };
    let entry = |op, offset| PlannedEntry {
        op,
        loc: Loc::new(Buf::Output, offset),
        bytes: 8,
        mark: 0,
    };
    let plan = RankPlan {
        params,
        layout: Layout {
            input_bytes: 8,
            output_bytes: 16,
            scratch_bytes: 0,
            in_place: false,
            input_offset: 0,
            output_offset: 0,
        },
        // Op 0 sends, op 1 receives into the send's source, op 2 receives elsewhere (its
        // wait holds the program between the send's completion and op 1's post).
        ops: vec![op(1, 0, 0, 0), op(0, 1, 1, 1), op(0, 1, 0, 2)],
        src: vec![entry(0, 0)],
        dst: vec![entry(1, 0), entry(2, 8)],
        program: vec![
            Instr::Arm {
                op: 0,
                side: Side::Send,
            },
            Instr::Arm {
                op: 1,
                side: Side::Recv,
            },
            Instr::Arm {
                op: 2,
                side: Side::Recv,
            },
            Instr::WaitHandshake {
                op: 0,
                side: Side::Send,
            },
            Instr::WaitHandshake {
                op: 1,
                side: Side::Recv,
            },
            Instr::WaitHandshake {
                op: 2,
                side: Side::Recv,
            },
            Instr::Post {
                op: 0,
                side: Side::Send,
                upto: 1,
            },
            Instr::Post {
                op: 2,
                side: Side::Recv,
                upto: 1,
            },
            Instr::Wait {
                op: 0,
                side: Side::Send,
                upto: 1,
            },
            Instr::Wait {
                op: 2,
                side: Side::Recv,
                upto: 1,
            },
            Instr::Post {
                op: 1,
                side: Side::Recv,
                upto: 1,
            },
            Instr::Wait {
                op: 1,
                side: Side::Recv,
                upto: 1,
            },
        ],
        recv_free: Vec::new(),
    };
    let mut buf = vec![0u64; 4];
    let base = buf.as_mut_ptr() as u64;
    let words: Vec<AtomicU32> = (0..plan.host_words()).map(|_| AtomicU32::new(0)).collect();
    let addrs = Addresses {
        input: base + 24,
        output: base,
        scratch: base + 24,
        words: words.as_ptr() as u64,
        word_stride: 4,
    };
    let job = Job::single(Arc::new(plan), addrs, 1, vec![], vec![], None);
    let word = |op: u32, hw: OpWord| &words[hw.index(op) as usize];
    let mut d = Device::new(0, None);
    // SAFETY: `buf` and `words` outlive every poll of this launch.
    unsafe { d.launch(job) };
    let env = Counts::default();
    // The handshakes: index 0, semaphore +1 (the proxy posts op 1's receive early now).
    let pending = |d: &mut Device| matches!(d.poll(&env), Ok(DevicePoll::Pending { .. }));
    assert!(pending(&mut d));
    for (k, side) in [(0, Side::Send), (1, Side::Recv), (2, Side::Recv)] {
        word(k, OpWord::post(side)).store(0, Ordering::Release);
        word(k, OpWord::handshake(side)).fetch_add(1, Ordering::Release);
    }
    assert!(pending(&mut d));
    assert_eq!(word(0, OpWord::post(Side::Send)).load(Ordering::Acquire), 1);
    // The send is done (early: copied); the device sees it and waits for op 2.
    // SAFETY: as below: the device does not run between polls; `buf` is live.
    unsafe { core::ptr::write_volatile(base as usize as *mut u64, 0x1111) };
    word(0, OpWord::complete(Side::Send)).fetch_add(1, Ordering::Release);
    assert!(pending(&mut d));
    // Op 1's early receive lands in the send's source; then op 2's receive completes.
    // SAFETY: the device does not run between polls; `buf` is live.
    unsafe { core::ptr::write_volatile(base as usize as *mut u64, 0x2222) };
    word(2, OpWord::complete(Side::Recv)).fetch_add(1, Ordering::Release);
    assert!(pending(&mut d));
    word(1, OpWord::complete(Side::Recv)).fetch_add(1, Ordering::Release);
    assert_eq!(d.poll(&env), Ok(DevicePoll::Done));
    // SAFETY: as above.
    let got = unsafe { core::ptr::read_volatile(base as usize as *const u64) };
    drop(buf);
    assert_eq!(got, 0x2222, "the received bytes survive");
}

/// One send-recv rank (rank 0 of 2) with `nec` options, its words and buffers, no triggers.
struct NecSetup {
    buf: Vec<u64>,
    words: Vec<AtomicU32>,
    job: Job,
}

fn nec_setup(nec: crate::planner::NecOptions) -> NecSetup {
    let mut p = PlanParams::new(Collective::SendRecv, 16, DataType::F32, 0, 2);
    p.chunk_bytes = 8; // 8 entries per side
    p.nec = nec;
    let p = plan(&p).unwrap();
    let mut buf = vec![0u64; 64];
    for (i, x) in buf.iter_mut().enumerate() {
        *x = i as u64 + 1;
    }
    let base = buf.as_mut_ptr() as u64;
    let words: Vec<AtomicU32> = (0..p.host_words()).map(|_| AtomicU32::new(0)).collect();
    let addrs = Addresses {
        input: base,
        output: base + 256,
        scratch: base + 384,
        words: words.as_ptr() as u64,
        word_stride: 4,
    };
    let job = Job::single(Arc::new(p), addrs, 1, vec![], vec![], None);
    NecSetup { buf, words, job }
}

/// With a wrap of 3 the device never has 3 or more entries posted and not complete on a side,
/// writes the host index modulo 3, and reaches the limit while the proxy credits slowly (one
/// entry per side per round).
#[test]
fn the_index_wrap_bounds_what_the_device_posts() {
    let wrap = 3;
    let s = nec_setup(crate::planner::NecOptions {
        idx_wrap: wrap,
        ..Default::default()
    });
    let w = |hw: OpWord| &s.words[hw.index(0) as usize];
    let mut d = Device::new(0, None);
    // SAFETY: every address of the job points into `s`, alive for the test.
    unsafe { d.launch(s.job.clone()) };
    // Per side: (last raw index, entries posted unwrapped, entries credited).
    let mut st = [(0u32, 0u32, 0u32); 2];
    let mut most = 0;
    let mut done = false;
    for _ in 0..1000 {
        if d.poll(&()).unwrap() == DevicePoll::Done {
            done = true;
            break;
        }
        for side in [Side::Send, Side::Recv] {
            let (last, posted, credited) = &mut st[side as usize];
            let raw = w(OpWord::post(side)).load(Ordering::Acquire);
            if raw == HOST_INDEX_READY {
                w(OpWord::post(side)).store(0, Ordering::Release);
                w(OpWord::handshake(side)).fetch_add(1, Ordering::Release);
                continue;
            }
            assert!(raw < wrap, "host index {raw} not modulo {wrap}");
            *posted += (raw + wrap - *last) % wrap;
            *last = raw;
            assert!(
                *posted - *credited < wrap,
                "{} outstanding",
                *posted - *credited
            );
            most = most.max(*posted - *credited);
            if *credited < *posted {
                *credited += 1;
                w(OpWord::complete(side)).fetch_add(1, Ordering::Release);
            }
        }
    }
    assert!(done, "the launch ended");
    assert_eq!(most, wrap - 1, "the device used the whole window");
    assert_eq!(st[0].1, 8);
    assert_eq!(st[1].1, 8);
}

/// With early send completion, a send source the device saw complete is overwritten while the
/// block runs (so a completion counted before the transport had its copy sends garbage), and
/// put back when the block ends.
#[test]
fn early_send_completion_overwrites_the_source_until_the_block_ends() {
    let s = nec_setup(crate::planner::NecOptions {
        early_send: true,
        ..Default::default()
    });
    let original = s.buf.clone();
    let w = |hw: OpWord| &s.words[hw.index(0) as usize];
    let input = s.buf.as_ptr() as *const u8;
    let mut d = Device::new(0, None);
    // SAFETY: every address of the job points into `s`, alive for the test.
    unsafe { d.launch(s.job.clone()) };
    let mut credited = [0u32; 2];
    let mut saw_scribble = false;
    // Sends first: the receives are credited from the round after the last send.
    let mut done = false;
    for _ in 0..1000 {
        if d.poll(&()).unwrap() == DevicePoll::Done {
            done = true;
            break;
        }
        let sends_were_done = credited[0] == 8;
        for side in [Side::Send, Side::Recv] {
            let post = w(OpWord::post(side)).load(Ordering::Acquire);
            if post == HOST_INDEX_READY {
                w(OpWord::post(side)).store(0, Ordering::Release);
                w(OpWord::handshake(side)).fetch_add(1, Ordering::Release);
                continue;
            }
            if side == Side::Recv {
                if !sends_were_done {
                    // The receives complete only after the device has seen every send
                    // complete (a round later).
                    continue;
                }
                if credited[1] < post {
                    // Every send was counted complete and the device has looked: its sources
                    // (the 64 input bytes) are overwritten while the receives are outstanding.
                    // SAFETY: the input bytes of `s`, which only this thread touches now.
                    let bytes = unsafe { core::slice::from_raw_parts(input, 64) };
                    saw_scribble |= bytes.iter().all(|&b| b == SCRIBBLE);
                }
            }
            let c = &mut credited[side as usize];
            if post > *c {
                w(OpWord::complete(side)).fetch_add(post - *c, Ordering::Release);
                *c = post;
            }
        }
    }
    assert!(done, "the launch ended");
    assert!(
        saw_scribble,
        "the sources were overwritten after their early completion"
    );
    assert_eq!(
        s.buf[..8],
        original[..8],
        "the sources are back after the block"
    );
}

mod progress;
mod quiet;
