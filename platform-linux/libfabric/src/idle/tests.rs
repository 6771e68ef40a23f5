use std::sync::Arc;
use std::time::{Duration, Instant};

use proxy_core::driver::idle::{Armed, IdleWait};
use proxy_core::progress::net::{NetError, Posted, RequestId, TestOutcome, Transport};

use crate::tests::{pair, recv, send, wait, Pair};
use crate::*;

fn with_fd() -> Options {
    Options {
        cq_wait_fd: true,
        ..Options::default()
    }
}

/// Polls `t` alone and tests `id` until it finishes (bounded: 10 s).
fn finish(t: &mut LibfabricTransport, id: RequestId) -> TestOutcome {
    let start = Instant::now();
    loop {
        t.poll().expect("poll");
        match t.test(id) {
            Ok(TestOutcome::Pending) => {
                assert!(start.elapsed() < Duration::from_secs(10), "request stuck");
                std::thread::yield_now();
            }
            Ok(o) => return o,
            Err(e) => panic!("test: {e}"),
        }
    }
}

/// Posts on `t` alone with `post` until it is taken (a post's back-pressure reads the CQ
/// itself; bounded: 10 s).
fn post_alone(
    t: &mut LibfabricTransport,
    what: &str,
    mut post: impl FnMut(&mut LibfabricTransport) -> Result<Option<Posted>, NetError>,
) -> RequestId {
    let start = Instant::now();
    loop {
        match post(t) {
            Ok(Some(p)) => return p.request,
            Ok(None) => assert!(start.elapsed() < Duration::from_secs(10), "{what} stuck"),
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// `true` once `fd` polls readable, within `limit` (`poll(2)` in 10 ms slices; it consumes
/// nothing).
fn readable_within(fd: i32, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 10) } > 0 && pfd.revents & libc::POLLIN != 0 {
            return true;
        }
    }
    false
}

/// Rank 0 (`a`) sends the 8 bytes `msg` with `tag` to rank 1 and finishes the send; returns
/// once they are in rank 1's socket: `b`'s CQ descriptor (the provider's wait set over the
/// sockets) polls readable within 5 s.
fn send_until_readable(a: &mut LibfabricTransport, b: &LibfabricTransport, msg: [u8; 8], tag: u64) {
    // SAFETY: `msg` outlives the request (it is finished before the return).
    let id = post_alone(a, "isend", |t| unsafe { t.isend(1, msg.as_ptr(), 8, tag) });
    assert!(matches!(finish(a, id), TestOutcome::Done { .. }));
    assert!(
        readable_within(b.obj.cq_fd, Duration::from_secs(5)),
        "the message never reached rank 1's socket"
    );
}

/// A tcp pair with CQ descriptors, its connection set up by a first exchange (tcp answers
/// -FI_EAGAIN until then), and rank 1's idle wait.
fn connected_tcp_pair() -> (Pair, Arc<CqIdleWait>) {
    let mut ts = pair("tcp", with_fd());
    assert!(ts[0].has_cq_wait_fd() && ts[1].has_cq_wait_fd());
    // SAFETY: only the test's thread uses ts[1] and its waiter, one call at a time.
    let idle = unsafe { ts[1].idle_wait() }.expect("tcp has a CQ descriptor");
    let mut first = [0u8; 8];
    let r = recv(&mut ts, 1, 0, first.as_mut_ptr(), 8, 1);
    let s = send(&mut ts, 0, 1, b"connect!", 1);
    assert!(matches!(wait(&mut ts, 0, s), Ok(TestOutcome::Done { .. })));
    assert!(matches!(wait(&mut ts, 1, r), Ok(TestOutcome::Done { .. })));
    (ts, idle)
}

/// tcp: the CQ has a descriptor; a receiver with nothing queued arms it (`fi_trywait` answers
/// 0) and sleeps until the peer's message makes it readable (a signalled wake, not a nap that
/// ran out), then reads the message; after close the waiter is unavailable.
#[test]
fn tcp_idle_wait_sleeps_until_a_message_arrives() {
    let (mut ts, idle) = connected_tcp_pair();
    let mut buf = [0u8; 8];
    let r = recv(&mut ts, 1, 0, buf.as_mut_ptr(), 8, 2);
    let [mut a, mut b] = ts;
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        let msg = *b"arrived!";
        // SAFETY: `msg` outlives the request (it is finished below).
        let id = post_alone(&mut a, "isend", |t| unsafe {
            t.isend(1, msg.as_ptr(), 8, 2)
        });
        assert!(matches!(finish(&mut a, id), TestOutcome::Done { .. }));
        a
    });
    let (mut signalled, mut naps, mut ready) = (false, 0u32, 0u32);
    let mut done_early = false;
    let start = Instant::now();
    while !signalled && start.elapsed() < Duration::from_secs(10) {
        match idle.arm() {
            Armed::Armed => {
                if idle.sleep(u64::MAX) {
                    signalled = true;
                } else {
                    naps += 1;
                }
            }
            Armed::Ready => {
                ready += 1;
                b.poll().expect("poll");
                // The message may have come between a nap's end and this arm: then it is
                // read here, and done.
                if let Ok(TestOutcome::Done { .. }) = b.test(r) {
                    done_early = true;
                    break;
                }
            }
            Armed::Unavailable => panic!("unavailable while open"),
        }
    }
    assert!(
        signalled || done_early,
        "the descriptor never woke the sleeper ({naps} naps ran out, {ready} ready)"
    );
    if !done_early {
        assert!(matches!(finish(&mut b, r), TestOutcome::Done { .. }));
    }
    assert_eq!(&buf, b"arrived!");
    let mut a = sender.join().unwrap();
    a.close().unwrap();
    b.close().unwrap();
    assert!(!idle.is_open());
    assert_eq!(
        idle.arm(),
        Armed::Unavailable,
        "closed: never touches the objects"
    );
    assert!(!idle.sleep(1_000_000));
}

/// shm offers no CQ descriptor (-FI_ENOSYS): the transport opens without one, says so, and
/// still exchanges; there is no idle wait.
#[test]
fn shm_has_no_cq_descriptor_and_still_works() {
    let mut ts = pair("shm", with_fd());
    assert!(!ts[1].has_cq_wait_fd());
    // SAFETY: not used.
    assert!(unsafe { ts[1].idle_wait() }.is_none());
    let mut buf = [0u8; 4];
    let r = recv(&mut ts, 1, 0, buf.as_mut_ptr(), 4, 3);
    let s = send(&mut ts, 0, 1, b"shm!", 3);
    assert!(matches!(wait(&mut ts, 0, s), Ok(TestOutcome::Done { .. })));
    assert!(matches!(wait(&mut ts, 1, r), Ok(TestOutcome::Done { .. })));
    assert_eq!(&buf, b"shm!");
}

/// A kick (the eventfd) ends the sleep it comes before, once: the next sleep runs to its bound.
#[test]
fn tcp_idle_wait_kick_ends_one_sleep() {
    let mut ts = pair("tcp", with_fd());
    // SAFETY: only this thread uses ts[1] and its waiter.
    let idle = unsafe { ts[1].idle_wait() }.expect("tcp has a CQ descriptor");
    let kicker = {
        let idle = idle.clone();
        std::thread::spawn(move || idle.kick())
    };
    kicker.join().unwrap();
    assert_eq!(idle.arm(), Armed::Armed);
    assert!(idle.sleep(u64::MAX), "the kick's eventfd wakes the sleep");
    assert_eq!(idle.arm(), Armed::Armed);
    assert!(
        !idle.sleep(100_000),
        "drained: the next sleep runs out (100 µs)"
    );
    for t in &mut ts {
        t.close().unwrap();
    }
}

/// tcp: a peer's message that no posted receive wants yet (the next collective's, from a peer
/// that is ahead) leaves the provider work that only a CQ read moves. `arm` runs that progress
/// itself and arms, instead of answering `Ready` at every call while the driver has nothing to
/// read (it did: the driver then ticked in a busy loop until its own work began). The message
/// is not lost: the receive posted afterwards gets it.
#[test]
fn tcp_idle_wait_arms_with_an_unexpected_message_queued() {
    let (ts, idle) = connected_tcp_pair();
    assert_eq!(idle.arm(), Armed::Armed, "nothing queued yet");

    // Rank 0 sends tag 2; rank 1 posts nothing and reads no CQ.
    let [mut a, mut b] = ts;
    // Only once the bytes are in rank 1's socket do the arms below test the bug.
    send_until_readable(&mut a, &b, *b"early!!!", 2);
    let answers: Vec<Armed> = (0..3).map(|_| idle.arm()).collect();
    assert!(
        answers.contains(&Armed::Armed),
        "arm never armed with an unexpected message queued: {answers:?}"
    );

    let mut buf = [0u8; 8];
    let dst = buf.as_mut_ptr();
    // SAFETY: `buf` outlives the request (it is finished below) and is not touched before.
    let r = post_alone(&mut b, "irecv", |t| unsafe { t.irecv(0, dst, 8, 2) });
    assert!(matches!(finish(&mut b, r), TestOutcome::Done { .. }));
    assert_eq!(&buf, b"early!!!");
    a.close().unwrap();
    b.close().unwrap();
}

/// tcp: a completion that stays in the CQ while nobody reads it (the comm reads its CQ only
/// while it has ops) makes `arm` answer `Ready` at most [`CQ_READY_RUN_MAX`] times in a row,
/// then `Unavailable` (the driver yields instead of ticking in a busy loop) until an arm arms
/// again; the completion is not lost: the next poll finds it.
#[test]
fn tcp_idle_wait_stops_answering_ready_for_a_completion_nobody_reads() {
    let (ts, idle) = connected_tcp_pair();
    let [mut a, mut b] = ts;
    let mut buf = [0u8; 8];
    let dst = buf.as_mut_ptr();
    // SAFETY: `buf` outlives the request (it is finished below) and is not touched before.
    let r = post_alone(&mut b, "irecv", |t| unsafe { t.irecv(0, dst, 8, 3) });
    send_until_readable(&mut a, &b, *b"orphan!!", 3);
    // Rank 1 never polls: its arms' own progress lands the receive's completion in the CQ.
    let answers: Vec<Armed> = (0..CQ_READY_RUN_MAX + 8).map(|_| idle.arm()).collect();
    let ready = answers.iter().filter(|&&a| a == Armed::Ready).count() as u32;
    assert!(
        (1..=CQ_READY_RUN_MAX).contains(&ready),
        "Ready at most {CQ_READY_RUN_MAX} times in a row: {answers:?}"
    );
    assert_eq!(
        answers.last(),
        Some(&Armed::Unavailable),
        "then Unavailable: {answers:?}"
    );
    assert!(matches!(finish(&mut b, r), TestOutcome::Done { .. }));
    assert_eq!(&buf, b"orphan!!");
    assert_eq!(idle.arm(), Armed::Armed, "read: the next arm arms");
    a.close().unwrap();
    b.close().unwrap();
}
