//! The emulator is a real peer: without a proxy it must stall (and time out), never pass.

use super::*;
use proxy_collectives::planner::{plan, Addresses, Collective, DataType, OpWord, PlanParams, Side};
use proxy_core::base::host_word::HostWord as Word;
use proxy_core::base::host_word::HOST_INDEX_READY;
use std::sync::atomic::AtomicU32;

/// The checked handle on a word of a test's [`Setup`].
fn word(addr: u64) -> Word {
    // SAFETY: the tests only pass addresses of `Setup::words`, alive while they are used.
    unsafe { Word::from_addr(addr) }.expect("a word of the setup")
}

pub(crate) struct Setup {
    pub(crate) _buf: Vec<u64>,
    pub(crate) words: Box<[AtomicU32]>,
    pub(crate) job: Job,
}

pub(crate) fn setup() -> Setup {
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
    // 3 fixed words, then the plan's.
    let words: Box<[AtomicU32]> = (0..3 + p.host_words()).map(|_| AtomicU32::new(0)).collect();
    let w = |i: usize| &words[i] as *const AtomicU32 as u64;
    let addrs = Addresses {
        input: base,
        output: base + 128,
        scratch: base + 256,
        words: w(3),
        word_stride: 4,
    };
    let job = Job::single(Arc::new(p), addrs, 1, vec![w(0)], vec![w(1)], Some(w(2)));
    Setup {
        _buf: buf,
        words,
        job,
    }
}

/// Launches `job` on a fresh device of rank 0 and drives it to its end on this thread.
fn execute(job: Job, policy: WaitPolicy) -> Result<(), DeviceError> {
    let mut d = Device::new(0, None);
    // SAFETY: every test's job points into its `Setup`, alive for the call.
    unsafe { d.launch(job) };
    drive(
        &mut d,
        &DeviceStats::default(),
        policy,
        &AtomicBool::new(false),
    )
}

fn quick() -> WaitPolicy {
    WaitPolicy {
        spins: 0,
        yields: 10,
        nap: Duration::from_micros(100),
        timeout: Duration::from_millis(50),
    }
}

#[test]
fn without_a_proxy_the_trigger_is_never_consumed() {
    let s = setup();
    let e = execute(s.job.clone(), quick()).unwrap_err();
    let want = s.job.net_triggers[0];
    assert!(
        matches!(&e, DeviceError::Timeout { rank: 0, waiting_for: WaitingFor::NetTrigger { addr, seen: 1 } } if *addr == want),
        "{e}"
    );
    assert_eq!(
        s.words[0].load(Ordering::Relaxed),
        1,
        "the device wrote its trigger"
    );
}

#[test]
fn a_proxy_that_skips_the_handshake_stalls_the_device() {
    let s = setup();
    // The trigger is "consumed" up front, but nobody answers the -1 handshake.
    let mut job = s.job.clone();
    job.net_triggers.clear();
    let e = execute(job, quick()).unwrap_err();
    let want = s.job.blocks[0].addrs.word(OpWord::SendHandshake.index(0));
    assert!(
        matches!(&e, DeviceError::Timeout { waiting_for: WaitingFor::Handshake { op: 0, side: Side::Send, addr, .. }, .. } if *addr == want),
        "{e}"
    );
    // The device armed the host index with -1.
    let post = s.job.blocks[0].addrs.word(OpWord::PostSend.index(0));
    let v = word(post).load();
    assert_eq!(v, HOST_INDEX_READY);
}

#[test]
fn a_semaphore_ahead_of_the_posts_is_a_protocol_error() {
    let s = setup();
    let mut job = s.job.clone();
    job.net_triggers.clear();
    let a = job.blocks[0].addrs;
    let w = move |hw: OpWord| a.word(hw.index(0));
    // A broken proxy: answers both handshakes, then claims 5 receive completions although
    // the device posts one entry.
    let fake = std::thread::spawn(move || {
        // The words live in `s`, which outlives this thread (joined below).
        let t0 = Instant::now();
        for side in [Side::Send, Side::Recv] {
            while word(w(OpWord::post(side))).load() != HOST_INDEX_READY {
                assert!(t0.elapsed() < Duration::from_secs(5), "device never armed");
                thread::yield_now();
            }
            word(w(OpWord::post(side))).store(0);
            word(w(OpWord::handshake(side))).fetch_add(1);
        }
        word(w(OpWord::RecvComplete)).fetch_add(5);
    });
    let e = execute(job, quick()).unwrap_err();
    fake.join().unwrap();
    assert!(
        matches!(&e, DeviceError::Protocol { what, .. } if what.contains("only 1 posted")),
        "{e}"
    );
}

#[test]
fn device_thread_reports_errors_and_stops() {
    let s = setup();
    let mut t = DeviceThread::spawn(0, None, quick(), None).unwrap();
    // SAFETY: `s` outlives the wait below.
    unsafe { t.launch(s.job.clone()) };
    assert!(t.wait().is_err());
    drop(t);
}

/// A launcher that gives up (its proxy side failed) gets the device back at once, not after
/// the device's timeout; the abort is sticky.
#[test]
fn abort_ends_a_waiting_execution_at_once() {
    let s = setup();
    let slow = WaitPolicy {
        timeout: Duration::from_secs(60),
        ..quick()
    };
    let mut t = DeviceThread::spawn(0, None, slow, None).unwrap();
    // SAFETY: `s` outlives the waits below (and the thread, dropped first).
    unsafe { t.launch(s.job.clone()) };
    // The device stalls at the net-stage trigger (no proxy consumes it).
    let start = Instant::now();
    while s.words[0].load(Ordering::Acquire) != 1 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "trigger never written"
        );
        thread::yield_now();
    }
    assert!(!t.failed());
    t.abort();
    assert_eq!(t.wait(), Err(DeviceError::Aborted { rank: 0 }));
    assert!(t.failed());
    // SAFETY: as above.
    unsafe { t.launch(s.job.clone()) };
    assert_eq!(t.wait(), Err(DeviceError::Aborted { rank: 0 }));
    drop(t);
}

/// The polled device never blocks: `None` while it waits, then (past its timeout) the
/// timeout naming the trigger word, answered again at every later call.
#[test]
fn polled_device_without_a_proxy_times_out_on_the_trigger() {
    let s = setup();
    let mut d = PolledDevice::new(0, None, Duration::from_millis(50));
    assert_eq!(d.poll_once(), Some(Ok(())), "nothing launched");
    // SAFETY: `s` outlives every poll below.
    unsafe { d.launch(s.job.clone()) };
    assert_eq!(d.poll_once(), None);
    assert_eq!(s.words[0].load(Ordering::Acquire), 1, "trigger written");
    assert!(!d.failed());
    let start = Instant::now();
    let r = loop {
        if let Some(r) = d.poll_once() {
            break r;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "never timed out");
        thread::sleep(Duration::from_millis(1));
    };
    let want = s.job.net_triggers[0];
    assert!(
        matches!(&r, Err(DeviceError::Timeout { rank: 0, waiting_for: WaitingFor::NetTrigger { addr, .. } }) if *addr == want),
        "{r:?}"
    );
    assert!(d.failed());
    assert_eq!(d.poll_once(), Some(r));
    assert_eq!(d.stage(), Stage::Idle, "the launch was abandoned");
}

/// A polled device whose proxy answers in time completes, counting into its stats.
#[test]
fn polled_device_completes_when_the_words_move() {
    let s = setup();
    let mut job = s.job.clone();
    job.net_triggers.clear();
    job.barrier_triggers.clear();
    let a = job.blocks[0].addrs;
    let plan = job.blocks[0].plan.clone();
    let mut d = PolledDevice::new(0, None, Duration::from_secs(30));
    // SAFETY: `s` outlives every poll below.
    unsafe { d.launch(job) };
    let mut credited = vec![[0u32; 2]; plan.ops.len()];
    let r = 'run: {
        for _ in 0..100_000 {
            if let Some(r) = d.poll_once() {
                break 'run r;
            }
            // The proxy: answer handshakes and credit what the device posted.
            for (k, o) in plan.ops.iter().enumerate() {
                for side in [Side::Send, Side::Recv] {
                    if o.entries(side) == 0 {
                        continue;
                    }
                    let w = |hw: OpWord| word(a.word(hw.index(k as u32)));
                    let post = w(OpWord::post(side)).load();
                    let c = &mut credited[k][side as usize];
                    if post == HOST_INDEX_READY {
                        w(OpWord::post(side)).store(0);
                        *c = 0;
                        w(OpWord::handshake(side)).fetch_add(1);
                    } else if post > *c {
                        w(OpWord::complete(side)).fetch_add(post - *c);
                        *c = post;
                    }
                }
            }
        }
        panic!("not done after 100000 polls: {:?}", d.stage());
    };
    assert_eq!(r, Ok(()));
    assert_eq!(d.stats().executions.load(Ordering::Relaxed), 1);
    assert_eq!(
        d.stats().recv_entries.load(Ordering::Relaxed),
        plan.dst.len() as u64
    );
}

#[test]
fn wait_policy_times_out_and_succeeds() {
    let p = quick();
    assert!(p.wait(|| false).is_err());
    let mut n = 0;
    assert!(p
        .wait(|| {
            n += 1;
            n > 3
        })
        .is_ok());
}

/// A wait whose time is up ends at its first nap instead of sleeping it: a zero timeout (a
/// waiter that yields a few times and then parks on something that wakes it) never naps, and
/// a nap never outlasts the timeout.
#[test]
fn a_wait_never_naps_past_its_timeout() {
    let mut b = TimedBackoff::new(WaitPolicy {
        spins: 2,
        yields: 3,
        nap: Duration::from_secs(5),
        timeout: Duration::ZERO,
    });
    let start = Instant::now();
    let mut pauses = 0;
    while b.pause().is_ok() {
        pauses += 1;
        assert!(pauses < 100, "never ended");
    }
    assert!(pauses <= 5, "{pauses} pauses before the end");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "napped: {:?}",
        start.elapsed()
    );
    let mut b = TimedBackoff::new(WaitPolicy {
        spins: 0,
        yields: 0,
        nap: Duration::from_secs(5),
        timeout: Duration::from_millis(30),
    });
    let start = Instant::now();
    while b.pause().is_ok() {
        assert!(start.elapsed() < Duration::from_secs(2), "never ended");
    }
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(30), "{took:?}");
    assert!(
        took < Duration::from_secs(2),
        "the nap outlasted the timeout: {took:?}"
    );
}

mod streams;
