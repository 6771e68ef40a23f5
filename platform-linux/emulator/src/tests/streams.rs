//! The no-progress timeout of a launch with two streams: stream 0 stalls on its first
//! handshake (its proxy never answers) while stream 1's proxy answers one step at a time, each
//! well inside the timeout, for several timeouts in all. The device must not time out while
//! stream 1 moves (the wait it answers, stream 0's, stays the same all along); once stream 1
//! ran all its executions and nothing moves, it times out naming stream 0's handshake.

use super::*;
use proxy_collectives::interpreter::JobBlock;
use std::sync::atomic::AtomicBool;

/// The device's no-progress timeout in these tests.
const TIMEOUT: Duration = Duration::from_millis(150);
/// Time between two answers of stream 1's proxy (a tenth of the timeout).
const STEP: Duration = Duration::from_millis(15);
/// Executions of the launch: stream 1 runs them all (4 answers each), about 5 timeouts long.
const REPS: u32 = 12;
/// Bound on one test.
const LIMIT: Duration = Duration::from_secs(30);

/// Two streams, each with block 1 on its own words and buffers, run `REPS` times; no net
/// stage, no barrier.
struct TwoStreams {
    _buf: Vec<u64>,
    _words: Box<[AtomicU32]>,
    job: Job,
}

fn two_streams() -> TwoStreams {
    let p = Arc::new(
        plan(&PlanParams::new(
            Collective::AllReduce,
            16,
            DataType::F32,
            0,
            2,
        ))
        .unwrap(),
    );
    let n = p.host_words() as u64;
    let mut buf = vec![0u64; 128];
    let base = buf.as_mut_ptr() as u64;
    let words: Box<[AtomicU32]> = (0..2 * n).map(|_| AtomicU32::new(0)).collect();
    let w0 = words.as_ptr() as u64;
    let block = |stream: u32, at: u64, w: u64| JobBlock {
        stream,
        block: 1,
        plan: Arc::clone(&p),
        addrs: Addresses {
            input: at,
            output: at + 128,
            scratch: at + 256,
            words: w,
            word_stride: 4,
        },
    };
    let job = Job {
        blocks: vec![block(0, base, w0), block(1, base + 512, w0 + 4 * n)],
        schedule: vec![1; REPS as usize],
        net_triggers: Vec::new(),
        barrier_triggers: Vec::new(),
        barrier_done: None,
        barrier_at: Default::default(),
    };
    TwoStreams {
        _buf: buf,
        _words: words,
        job,
    }
}

/// The proxy of one job block (stream 1's), one answer at a time, in the order its program
/// waits (handshakes send first, completions receive first).
struct StepProxy {
    block: JobBlock,
    /// Per op, per side: entries credited.
    credited: Vec<[u32; 2]>,
    /// Answers given.
    answers: u32,
}

impl StepProxy {
    fn new(block: JobBlock) -> Self {
        let ops = block.plan.ops.len();
        Self {
            block,
            credited: vec![[0; 2]; ops],
            answers: 0,
        }
    }

    /// One answer: a handshake, or one posted entry credited as complete. `false` = nothing
    /// to answer.
    fn answer(&mut self) -> bool {
        let a = self.block.addrs;
        for (k, o) in self.block.plan.ops.iter().enumerate() {
            let w = |hw: OpWord| word(a.word(hw.index(k as u32)));
            for side in [Side::Send, Side::Recv] {
                if o.entries(side) > 0 && w(OpWord::post(side)).load() == HOST_INDEX_READY {
                    w(OpWord::post(side)).store(0);
                    self.credited[k][side as usize] = 0;
                    w(OpWord::handshake(side)).fetch_add(1);
                    self.answers += 1;
                    return true;
                }
            }
            for side in [Side::Recv, Side::Send] {
                let posted = w(OpWord::post(side)).load();
                let c = &mut self.credited[k][side as usize];
                if o.entries(side) > 0 && posted != HOST_INDEX_READY && posted > *c {
                    w(OpWord::complete(side)).fetch_add(1);
                    *c += 1;
                    self.answers += 1;
                    return true;
                }
            }
        }
        false
    }

    /// Answers every block execution needs: both handshakes and every entry.
    fn per_rep(&self) -> u32 {
        let p = &self.block.plan;
        2 + (p.src.len() + p.dst.len()) as u32
    }
}

/// Checks the end of a run: a timeout naming stream 0's first handshake, after stream 1 ran
/// every execution (its proxy answered all along, for more than two timeouts), and at least
/// a timeout after stream 1's last answer.
fn check(job: &Job, r: Result<(), DeviceError>, answers: u32, per_rep: u32, run: Run) {
    let stalled = job.blocks[0]
        .addrs
        .word(OpWord::handshake(Side::Send).index(0));
    assert!(
        matches!(&r, Err(DeviceError::Timeout { rank: 0, waiting_for: WaitingFor::Handshake { op: 0, side: Side::Send, addr, .. } }) if *addr == stalled),
        "{r:?} after {:?} ({answers} answers, the last at {:?})",
        run.ended,
        run.last_answer,
    );
    assert_eq!(
        answers,
        REPS * per_rep,
        "stream 1 ran every execution before the timeout"
    );
    let a1 = job.blocks[1].addrs;
    assert_eq!(
        word(a1.word(OpWord::handshake(Side::Recv).index(0))).load(),
        REPS
    );
    assert!(
        run.last_answer > 2 * TIMEOUT,
        "stream 1 moved for {:?} only",
        run.last_answer
    );
    assert!(
        run.ended >= run.last_answer + TIMEOUT,
        "timed out {:?} after the last answer",
        run.ended - run.last_answer
    );
}

/// When stream 1's last answer came and when the device ended, from the launch.
#[derive(Clone, Copy, Debug)]
struct Run {
    last_answer: Duration,
    ended: Duration,
}

/// The polled device, with the proxy's answers on the same thread between polls.
#[test]
fn a_polled_device_times_out_only_once_no_stream_moves() {
    let s = two_streams();
    let mut proxy = StepProxy::new(s.job.blocks[1].clone());
    let mut d = PolledDevice::new(0, None, TIMEOUT);
    // SAFETY: `s` outlives every poll below.
    unsafe { d.launch(s.job.clone()) };
    let start = Instant::now();
    let mut next = start + STEP;
    let mut last_answer = Duration::ZERO;
    let r = loop {
        if let Some(r) = d.poll_once() {
            break r;
        }
        if Instant::now() >= next {
            if proxy.answer() {
                last_answer = start.elapsed();
            }
            next += STEP;
        }
        assert!(start.elapsed() < LIMIT, "never ended");
        thread::sleep(Duration::from_micros(200));
    };
    let run = Run {
        last_answer,
        ended: start.elapsed(),
    };
    check(&s.job, r, proxy.answers, proxy.per_rep(), run);
    assert_eq!(d.stage(), Stage::Idle, "the launch was abandoned");
}

/// The device thread (its `drive` loop), with stream 1's proxy on a thread of its own.
#[test]
fn a_device_thread_times_out_only_once_no_stream_moves() {
    let s = two_streams();
    let policy = WaitPolicy {
        timeout: TIMEOUT,
        ..quick()
    };
    let mut t = DeviceThread::spawn(0, None, policy, None).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let (block, halt) = (s.job.blocks[1].clone(), stop.clone());
    let answering = thread::spawn(move || {
        let mut proxy = StepProxy::new(block);
        let mut last_answer = Duration::ZERO;
        while !halt.load(Ordering::Acquire) && start.elapsed() < LIMIT {
            thread::sleep(STEP);
            if proxy.answer() {
                last_answer = start.elapsed();
            }
        }
        (proxy.answers, proxy.per_rep(), last_answer)
    });
    // SAFETY: `s` outlives the wait below (and the proxy thread, joined before it drops).
    unsafe { t.launch(s.job.clone()) };
    let r = t.wait();
    let ended = start.elapsed();
    stop.store(true, Ordering::Release);
    let (answers, per_rep, last_answer) = answering.join().unwrap();
    check(&s.job, r, answers, per_rep, Run { last_answer, ended });
}
