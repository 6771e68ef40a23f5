//! The quiet path of a pending device (module docs of the interpreter): it answers the last
//! walk's `Pending` while every watched word reads the same, and walks again the moment one
//! of them changes. `Exec::walks` counts the polls that walked.

use super::*;

/// The device's polls that walked the stages so far.
fn walks(d: &Device) -> u64 {
    d.exec.walks
}

/// Polls `d` once through a forced walk (the quiet answer forgotten first): what the slow path
/// answers from here.
pub(super) fn walked(d: &mut Device, env: &Counts) -> Result<DevicePoll, DeviceError> {
    d.exec.quiet = None;
    let before = walks(d);
    let r = d.poll(env);
    assert_eq!(walks(d), before + 1, "a forced poll walks");
    r
}

#[test]
fn an_unchanged_word_answers_the_same_pending_without_a_walk() {
    let s = setup(1);
    let mut d = Device::new(0, None);
    let env = Counts::default();
    // SAFETY: every address of the job points into `s`, alive for the test.
    unsafe { d.launch(s.job.clone()) };
    let first = d.poll(&env).unwrap();
    assert!(matches!(
        first,
        DevicePoll::Pending {
            waiting_for: WaitingFor::NetTrigger { seen: 1, .. }
        }
    ));
    assert_eq!(walks(&d), 1);
    // The trigger is not consumed: three quiet answers, equal to the walk's.
    for _ in 0..3 {
        assert_eq!(d.poll(&env), Ok(first));
    }
    assert_eq!(
        walks(&d),
        1,
        "the unchanged trigger was answered without a walk"
    );
    assert_eq!(
        walked(&mut d, &env),
        Ok(first),
        "the slow path answers the same"
    );
    assert_eq!(env.host_writes.get(), 1, "only the first poll wrote");
    assert_eq!(d.stage(), Stage::NetWait);
    // The proxy consumes it: the next poll walks into the handshake wait.
    s.words[NET].store(0, Ordering::Release);
    let w = walks(&d);
    let next = d.poll(&env).unwrap();
    assert_eq!(walks(&d), w + 1);
    assert!(
        matches!(
            next,
            DevicePoll::Pending {
                waiting_for: WaitingFor::Handshake { .. }
            }
        ),
        "{next:?}"
    );
    assert_eq!(d.stage(), Stage::Program { rep: 0 });
}

/// A whole launch with idle polls between the proxy's answers ends as one without them: the
/// same executions, entries and words, with most idle polls answered quietly.
#[test]
fn a_launch_with_idle_polls_between_answers_ends_as_without_them() {
    let outcome = |idle: u32| {
        let s = setup(3);
        let mut d = Device::new(0, Some(Fault { entry: None }));
        let env = Counts::default();
        let mut proxy = FakeProxy::default();
        // SAFETY: as above.
        unsafe { d.launch(s.job.clone()) };
        let mut polls = 0u64;
        loop {
            polls += 1;
            assert!(polls < 10_000, "not done");
            match d.poll(&env).unwrap() {
                DevicePoll::Done => break,
                DevicePoll::Pending { waiting_for } => {
                    for _ in 0..idle {
                        polls += 1;
                        assert_eq!(d.poll(&env), Ok(DevicePoll::Pending { waiting_for }));
                    }
                    proxy.answer(&s);
                }
                DevicePoll::Idle => panic!("idle while launched"),
            }
        }
        let words: Vec<u32> = s.words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        let seen = (
            env.executions.get(),
            env.recv_entries.get(),
            env.faults.get(),
            env.host_writes.get(),
            words,
            s.buf.clone(),
        );
        (seen, walks(&d), polls)
    };
    let (busy, busy_walks, busy_polls) = outcome(0);
    let (idle, idle_walks, idle_polls) = outcome(3);
    assert_eq!(idle, busy);
    assert_eq!(busy.0, 3);
    assert_eq!(busy.2, 3, "a fault per execution");
    assert_eq!(
        busy_walks, busy_polls,
        "every poll moved or was the first of its wait"
    );
    assert_eq!(
        idle_walks, busy_walks,
        "every idle poll was quiet ({idle_polls} polls)"
    );
}

/// [`two_streams`] launched on device 0 and polled once: the set-up, the device, its counters
/// and the first answer's wait (stream 0's, both streams began waiting in that walk).
pub(super) fn launched_two_streams() -> (Setup, Device, Counts, WaitingFor) {
    let s = two_streams();
    let mut d = Device::new(0, None);
    let env = Counts::default();
    // SAFETY: every address of the job points into `s`, which the caller keeps with the device.
    unsafe { d.launch(s.job.clone()) };
    let first = d.poll(&env).unwrap();
    let DevicePoll::Pending { waiting_for } = first else {
        panic!("{first:?}");
    };
    (s, d, env, waiting_for)
}

/// Two streams, each with block 1 on its own words and buffers; no net stage.
pub(super) fn two_streams() -> Setup {
    let mut s = setup(1);
    let p = Arc::clone(&s.job.blocks[0].plan);
    let n = p.host_words() as usize;
    s.buf = vec![0u64; 128];
    s.words = (0..3 + 2 * n).map(|_| AtomicU32::new(0)).collect();
    let base = s.buf.as_mut_ptr() as u64;
    let words = s.words.as_ptr() as u64;
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
    s.job.blocks = vec![
        block(0, base, words + 12),
        block(1, base + 512, words + 12 + 4 * n as u64),
    ];
    s.job.net_triggers.clear();
    s.job.barrier_triggers = vec![words + 4 * BAR as u64];
    s.job.barrier_done = Some(words + 4 * DONE as u64);
    s
}

/// Answers the handshake stream `j`'s block waits for (the proxy of that stream only).
fn answer_handshake(s: &Setup, j: usize, w: WaitingFor) {
    let WaitingFor::Handshake { op, side, .. } = w else {
        panic!("{w:?} is no handshake wait");
    };
    s.block_word(j, op, OpWord::post(side))
        .store(0, Ordering::Release);
    s.block_word(j, op, OpWord::handshake(side))
        .fetch_add(1, Ordering::Release);
}

/// The answer names stream 0's wait; stream 1 waits on its own word. A change of stream 1's
/// word alone must make the next poll walk and move stream 1 on (a quiet path that watched
/// only the answered wait would answer quietly here and stall stream 1 for good).
#[test]
fn a_second_streams_word_moves_the_device_though_the_answer_stays() {
    let (s, mut d, env, w0) = launched_two_streams();
    let first = DevicePoll::Pending { waiting_for: w0 };
    let hs = |j: usize| {
        let (op, side) = first_handshake(&s.job.blocks[j].plan);
        s.job.blocks[j]
            .addrs
            .word(OpWord::handshake(side).index(op))
    };
    assert_eq!(w0.addr(), hs(0), "the answer names stream 0's handshake");
    assert_eq!(d.poll(&env), Ok(first));
    assert_eq!(walks(&d), 1, "nothing changed: quiet");

    // Stream 1's proxy answers its handshake; stream 0's word stays.
    let cursors = [d.exec.streams[0].cursor, d.exec.streams[1].cursor];
    let (op1, side1) = first_handshake(&s.job.blocks[1].plan);
    answer_handshake(
        &s,
        1,
        WaitingFor::Handshake {
            op: op1,
            side: side1,
            addr: hs(1),
            target: 1,
            seen: 0,
        },
    );
    assert_eq!(d.poll(&env), Ok(first), "the answer still names stream 0");
    assert_eq!(walks(&d), 2, "stream 1's word changed: walked");
    assert!(
        d.exec.streams[1].cursor > cursors[1],
        "stream 1 moved past its handshake"
    );
    assert_eq!(d.exec.streams[0].cursor, cursors[0], "stream 0 still waits");
    // Quiet again until something changes; then the whole launch runs to its end.
    assert_eq!(d.poll(&env), Ok(first));
    assert_eq!(walks(&d), 2);
    let mut proxy = FakeProxy::default();
    proxy.answer(&s);
    run(&mut d, &s, &mut proxy, &env).unwrap();
    assert_eq!(env.executions.get(), 1);
    assert_eq!(
        env.recv_entries.get(),
        2 * s.job.blocks[0].plan.dst.len() as u64,
        "both streams received every entry"
    );
}

/// With the index wrap, a host index held back waits on its own complete count, which is not
/// the word the answer names: a rise of that count alone must make the poll walk and raise
/// the index.
#[test]
fn a_count_that_holds_an_index_back_is_watched_too() {
    let wrap = 3;
    let s = nec_setup(crate::planner::NecOptions {
        idx_wrap: wrap,
        ..Default::default()
    });
    let w = |side: Side, hw: fn(Side) -> OpWord| &s.words[hw(side).index(0) as usize];
    let mut d = Device::new(0, None);
    let env = Counts::default();
    // SAFETY: every address of the job points into `s`, alive for the test.
    unsafe { d.launch(s.job.clone()) };
    // Answer both handshakes; the device then posts a window on each side and waits.
    let mut answer = None;
    for _ in 0..4 {
        answer = Some(d.poll(&env).unwrap());
        for side in [Side::Send, Side::Recv] {
            if w(side, OpWord::post).load(Ordering::Acquire) == HOST_INDEX_READY {
                w(side, OpWord::post).store(0, Ordering::Release);
                w(side, OpWord::handshake).fetch_add(1, Ordering::Release);
            }
        }
    }
    let Some(DevicePoll::Pending { waiting_for }) = answer else {
        panic!("{answer:?}");
    };
    let waited = match waiting_for {
        WaitingFor::Complete { side, .. } => side,
        other => panic!("{other:?}"),
    };
    let other = match waited {
        Side::Send => Side::Recv,
        Side::Recv => Side::Send,
    };
    assert_eq!(w(other, OpWord::post).load(Ordering::Acquire), wrap - 1);
    let quiet = walks(&d);
    assert_eq!(d.poll(&env), Ok(DevicePoll::Pending { waiting_for }));
    assert_eq!(walks(&d), quiet, "nothing changed: quiet");
    // One entry of the side not waited on completes: its window moves by one.
    w(other, OpWord::complete).fetch_add(1, Ordering::Release);
    assert_eq!(d.poll(&env), Ok(DevicePoll::Pending { waiting_for }));
    assert_eq!(
        walks(&d),
        quiet + 1,
        "the held-back side's count changed: walked"
    );
    assert_eq!(
        w(other, OpWord::post).load(Ordering::Acquire),
        wrap % wrap,
        "its index rose to {wrap} (written modulo {wrap})"
    );
}

/// The recv lag makes progress depend on the poll count: no quiet path under it, and the
/// device raises its receive index after the lag with no word changed.
#[test]
fn the_recv_lag_turns_the_quiet_path_off() {
    let s = nec_setup(crate::planner::NecOptions::default());
    let w = |side: Side, hw: fn(Side) -> OpWord| &s.words[hw(side).index(0) as usize];
    let mut d = Device::new(0, None);
    let lag = 5;
    d.set_recv_lag(lag);
    let env = Counts::default();
    // SAFETY: every address of the job points into `s`, alive for the test.
    unsafe { d.launch(s.job.clone()) };
    for _ in 0..3 {
        let _ = d.poll(&env).unwrap();
        for side in [Side::Send, Side::Recv] {
            if w(side, OpWord::post).load(Ordering::Acquire) == HOST_INDEX_READY {
                w(side, OpWord::post).store(0, Ordering::Release);
                w(side, OpWord::handshake).fetch_add(1, Ordering::Release);
            }
        }
    }
    // From here no word changes; the receive index rises once the lag passed.
    let before = walks(&d);
    let mut rose_after = None;
    for i in 1..=2 * lag {
        let _ = d.poll(&env).unwrap();
        if rose_after.is_none() && w(Side::Recv, OpWord::post).load(Ordering::Acquire) > 0 {
            rose_after = Some(i);
        }
    }
    assert!(
        rose_after.is_some_and(|i| i > 1),
        "the receive index rose after the lag: {rose_after:?}"
    );
    assert_eq!(walks(&d), before + 2 * u64::from(lag), "every poll walked");
}

/// A new launch and `abandon` forget the quiet answer: the launch's first poll walks (and
/// writes its trigger again), and an abandoned device answers `Idle`.
#[test]
fn launch_and_abandon_forget_the_quiet_answer() {
    let s = setup(1);
    let mut d = Device::new(0, None);
    let env = Counts::default();
    // SAFETY: as above.
    unsafe { d.launch(s.job.clone()) };
    let first = d.poll(&env).unwrap();
    assert_eq!(d.poll(&env), Ok(first));
    assert_eq!(walks(&d), 1);
    // The proxy consumes the trigger, the device relaunches before it looks: the new launch
    // writes the trigger again.
    s.words[NET].store(0, Ordering::Release);
    // SAFETY: as above.
    unsafe { d.launch(s.job.clone()) };
    assert_eq!(d.poll(&env), Ok(first));
    assert_eq!(walks(&d), 2, "the new launch walked");
    assert_eq!(env.host_writes.get(), 2, "and wrote its trigger");
    // The word is the same as at the quiet answer, yet abandon ends it.
    assert!(d.abandon().is_some());
    assert_eq!(d.poll(&env), Ok(DevicePoll::Idle));
    assert_eq!(walks(&d), 3);
}
