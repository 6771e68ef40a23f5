//! In-process bootstrap tests: one thread per rank on 127.0.0.1. Every wait is bounded by the
//! bootstrap's own timeout (a few seconds here), and each test checks the time it took.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use proxy_core::driver::task::BarrierChannel;
use proxy_core::NrtStatus;

use super::launch::free_loopback_root;
use super::*;

fn cfg(rank: u32, nranks: u32, root: SocketAddr, timeout: Duration) -> BootstrapConfig {
    BootstrapConfig {
        timeout,
        warn_interval: Duration::from_millis(500),
        close_linger: Duration::from_secs(1),
        ..BootstrapConfig::new(rank, nranks, root)
    }
}

/// Runs `f(rank)` on one thread per rank in `ranks`; returns the results by position.
fn run_ranks<T: Send + 'static>(
    nranks: u32,
    ranks: &[u32],
    timeout: Duration,
    f: impl Fn(BootstrapConfig) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let root = free_loopback_root().unwrap();
    let hs: Vec<_> = ranks
        .iter()
        .map(|&r| {
            let f = f.clone();
            let c = cfg(r, nranks, root, timeout);
            thread::spawn(move || f(c))
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn four_ranks_agree_gather_and_barrier() {
    let out = run_ranks(4, &[0, 1, 2, 3], Duration::from_secs(20), |c| {
        let mut b = Bootstrap::init(&c).unwrap();
        assert_eq!((b.rank(), b.nranks()), (c.rank, 4));
        assert!(b.comm_id() < MAX_COMM_ID);
        assert!(b.all_local());
        // Blobs of different lengths, the empty one included; twice, to check sequencing.
        for round in 0..3u8 {
            let mine: Vec<u8> = vec![round ^ c.rank as u8; (c.rank as usize * 1000) % 2500];
            let all = b.all_gather(&mine).unwrap();
            assert_eq!(all.len(), 4);
            for (r, blob) in all.iter().enumerate() {
                assert_eq!(blob, &vec![round ^ r as u8; (r * 1000) % 2500]);
            }
            b.barrier().unwrap();
        }
        // Non-blocking barriers, polled from a "step" loop.
        for _ in 0..20 {
            let t = b.barrier_start().unwrap();
            let start = Instant::now();
            while !b.barrier_poll(t).unwrap() {
                assert!(start.elapsed() < Duration::from_secs(10));
                thread::yield_now();
            }
            // A passed ticket stays passed.
            assert!(b.barrier_poll(t).unwrap());
        }
        let id = b.comm_id();
        b.close();
        assert!(matches!(
            b.barrier_start(),
            Err(BootstrapError::Closed { .. })
        ));
        id
    });
    assert!(
        out.windows(2).all(|w| w[0] == w[1]),
        "comm ids differ: {out:?}"
    );
}

#[test]
fn single_rank_needs_no_network() {
    let c = BootstrapConfig::from_lookup(None, None, None, |_| None).unwrap();
    assert_eq!((c.rank, c.nranks), (0, 1));
    let mut b = Bootstrap::init(&c).unwrap();
    assert_eq!(b.all_gather(b"x").unwrap(), vec![b"x".to_vec()]);
    b.barrier().unwrap();
}

#[test]
fn explicit_comm_id_is_used() {
    let ids = run_ranks(2, &[0, 1], Duration::from_secs(10), |mut c| {
        c.comm_id = Some(1234);
        Bootstrap::init(&c).unwrap().comm_id()
    });
    assert_eq!(ids, vec![1234, 1234]);
}

#[test]
fn strangers_are_dropped_and_bootstrap_goes_on() {
    let root = free_loopback_root().unwrap();
    let timeout = Duration::from_secs(10);
    let r0 = thread::spawn(move || Bootstrap::init(&cfg(0, 3, root, timeout)).map(|b| b.comm_id()));
    // Wait for the listener, then: an HTTP request, a connection that closes at once, one that
    // sends half a magic and goes silent, one that sends nothing, and a right magic with garbage.
    let start = Instant::now();
    let mut http = loop {
        match TcpStream::connect(root) {
            Ok(s) => break s,
            Err(_) if start.elapsed() < timeout => thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("root never listened: {e}"),
        }
    };
    http.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    drop(TcpStream::connect(root).unwrap());
    let mut half = TcpStream::connect(root).unwrap();
    half.write_all(b"PX").unwrap();
    let _silent = TcpStream::connect(root).unwrap();
    let mut garbage = TcpStream::connect(root).unwrap();
    garbage.write_all(&wire::preface()).unwrap();
    garbage.write_all(&[5, 0, 0, 0, 99, 1, 2, 3, 4]).unwrap();
    let leaves: Vec<_> = [1, 2]
        .into_iter()
        .map(|r| {
            thread::spawn(move || Bootstrap::init(&cfg(r, 3, root, timeout)).map(|b| b.comm_id()))
        })
        .collect();
    let id0 = r0.join().unwrap().expect("root");
    for l in leaves {
        assert_eq!(l.join().unwrap().expect("leaf"), id0);
    }
    eprintln!("bootstrap of 3 took {:?}", start.elapsed());
}

#[test]
fn a_missing_leaf_fails_every_present_rank_within_the_timeout() {
    let timeout = Duration::from_millis(1500);
    let out = run_ranks(4, &[0, 1, 3], timeout, |c| {
        let start = Instant::now();
        let r = Bootstrap::init(&c);
        (c.rank, r.map(|b| b.comm_id()), start.elapsed())
    });
    for (rank, r, took) in out {
        let e = r.expect_err("bootstrap must fail");
        assert!(
            took < timeout + Duration::from_millis(700),
            "rank {rank} took {took:?}"
        );
        if rank == 0 {
            assert!(matches!(e, BootstrapError::Timeout { .. }), "{e}");
            assert!(
                e.to_string().contains("ranks [2]"),
                "root must name the missing rank: {e}"
            );
        } else {
            // Its own timeout, or the root's abort, whichever came first.
            assert_eq!(e.status(), NrtStatus::Timeout, "rank {rank}: {e}");
        }
    }
}

#[test]
fn a_missing_root_fails_every_leaf_within_the_timeout() {
    let timeout = Duration::from_millis(1200);
    let out = run_ranks(3, &[1, 2], timeout, |c| {
        let start = Instant::now();
        (Bootstrap::init(&c).map(|_| ()), start.elapsed())
    });
    for (r, took) in out {
        let e = r.expect_err("no root");
        assert!(matches!(e, BootstrapError::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("to accept a connection"), "{e}");
        assert!(took < timeout + Duration::from_millis(700), "{took:?}");
    }
}

/// Starts `ranks` (rank, nranks) on threads; returns (result, time taken) by position.
fn init_all(
    ranks: &[(u32, u32)],
    timeout: Duration,
) -> Vec<(Result<(), BootstrapError>, Duration)> {
    let root = free_loopback_root().unwrap();
    let hs: Vec<_> = ranks
        .iter()
        .map(|&(r, n)| {
            thread::spawn(move || {
                let start = Instant::now();
                let res = Bootstrap::init(&cfg(r, n, root, timeout)).map(|_| ());
                (res, start.elapsed())
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// A misconfigured job: the root and the offending rank fail at once (not by timeout); a rank
/// that had joined is aborted at once, one that comes later finds no root and times out.
fn check_misconfigured(
    res: &[(Result<(), BootstrapError>, Duration)],
    timeout: Duration,
    bad: usize,
    what: &str,
) {
    let fast = Duration::from_secs(2);
    let (root, took) = (&res[0].0, res[0].1);
    let root = root.as_ref().unwrap_err();
    assert!(root.to_string().contains(what), "root: {root}");
    assert_eq!(root.status(), NrtStatus::Invalid, "{root}");
    assert!(took < fast, "root took {took:?}");
    for (i, (r, took)) in res.iter().enumerate().skip(1) {
        let e = r.as_ref().unwrap_err();
        assert!(
            *took < timeout + Duration::from_millis(700),
            "rank {i}: {took:?}"
        );
        if i == bad || e.status() != NrtStatus::Timeout {
            assert!(*took < fast, "rank {i} took {took:?}: {e}");
            assert!(e.to_string().contains(what), "rank {i}: {e}");
        }
    }
}

#[test]
fn a_size_mismatch_fails_every_rank() {
    let timeout = Duration::from_secs(3);
    let res = init_all(&[(0, 3), (1, 3), (2, 4)], timeout);
    check_misconfigured(&res, timeout, 2, "launched with 4 ranks");
}

#[test]
fn a_rank_taken_twice_fails_every_rank() {
    let timeout = Duration::from_secs(3);
    let res = init_all(&[(0, 3), (1, 3), (1, 3)], timeout);
    // Either claimant may be the second one.
    let bad = if res[1].0.as_ref().unwrap_err().status() == NrtStatus::Timeout {
        2
    } else {
        1
    };
    check_misconfigured(&res, timeout, bad, "rank 1 joined twice");
}

#[test]
fn a_lost_peer_fails_the_barrier_of_every_rank() {
    let out = run_ranks(3, &[0, 1, 2], Duration::from_secs(5), |c| {
        let mut b = Bootstrap::init(&c).unwrap();
        b.barrier().unwrap();
        if c.rank == 2 {
            // A crash: the connection goes away without Bye.
            if let Role::Leaf { conn, .. } = &b.role {
                conn.stream.shutdown(Shutdown::Both).unwrap();
            }
            b.closed = true;
            return None;
        }
        let start = Instant::now();
        let e = b.barrier().unwrap_err();
        Some((c.rank, e, start.elapsed()))
    });
    for (rank, e, took) in out.into_iter().flatten() {
        assert!(took < Duration::from_secs(3), "rank {rank} took {took:?}");
        match rank {
            0 => assert!(
                matches!(e, BootstrapError::PeerLost { peer: 2, .. }),
                "root: {e}"
            ),
            // The root told the other leaf which rank it lost (`Lost`).
            _ => assert!(matches!(e, BootstrapError::PeerLost { peer: 2, .. }), "{e}"),
        }
        assert_eq!(e.lost_rank(), Some(2), "{e}");
        assert_eq!(e.status(), NrtStatus::NetworkProxyFailure);
    }
}

/// A crash of `rank` in a test: its connections go away without `Bye`. A connection the peer
/// has already closed (`ENOTCONN`) is gone already.
fn crash(b: &mut Bootstrap) {
    match &b.role {
        Role::Leaf { conn, .. } => {
            let _ = conn.stream.shutdown(Shutdown::Both);
        }
        Role::Root { peers } => {
            for p in peers.iter().flatten() {
                let _ = p.conn.stream.shutdown(Shutdown::Both);
            }
        }
    }
    b.closed = true;
}

#[test]
fn every_connection_has_keepalive_and_a_user_timeout() {
    let out = run_ranks(2, &[0, 1], Duration::from_secs(10), |c| {
        let b = Bootstrap::init(&c).unwrap();
        let streams: Vec<&std::net::TcpStream> = match &b.role {
            Role::Leaf { conn, .. } => vec![&conn.stream],
            Role::Root { peers } => peers.iter().flatten().map(|p| &p.conn.stream).collect(),
        };
        assert_eq!(streams.len(), 1, "rank {}", c.rank);
        let s = streams[0];
        let opt = |level, name| conn::int_opt(s, level, name).unwrap();
        (
            opt(libc::SOL_SOCKET, libc::SO_KEEPALIVE),
            opt(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE),
            opt(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL),
            opt(libc::IPPROTO_TCP, libc::TCP_KEEPCNT),
            opt(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT),
        )
    });
    for (rank, got) in out.into_iter().enumerate() {
        assert_eq!(
            got,
            (
                1,
                KEEPALIVE_IDLE.as_secs() as i32,
                KEEPALIVE_IDLE.as_secs() as i32,
                2,
                PEER_TIMEOUT.as_millis() as i32
            ),
            "rank {rank}: (keepalive, idle s, interval s, count, user timeout ms)"
        );
    }
}

/// Polls `w` until it fails, at most `limit` (a bound that fails the test, not a speed check).
fn watch_until_failed(w: &mut PeerWatch, limit: Duration) -> BootstrapError {
    let deadline = Instant::now() + limit;
    loop {
        if let Err(e) = w.check() {
            return e;
        }
        assert!(Instant::now() < deadline, "no failure within {limit:?}");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_watch_names_a_lost_leaf_on_every_rank() {
    let out = run_ranks(4, &[0, 1, 2, 3], Duration::from_secs(10), |c| {
        let mut b = Bootstrap::init(&c).unwrap();
        b.barrier().unwrap();
        if c.rank == 2 {
            crash(&mut b);
            return None;
        }
        let shared = SharedBootstrap::new(b);
        let mut w = PeerWatch::new(&shared);
        let e = watch_until_failed(&mut w, Duration::from_secs(8));
        // Sticky: the next check answers the same without touching the bootstrap.
        assert_eq!(w.check().unwrap_err(), e);
        assert!(w.counts().0 >= 1);
        Some((c.rank, e))
    });
    let out: Vec<_> = out.into_iter().flatten().collect();
    assert_eq!(out.len(), 3);
    for (rank, e) in out {
        assert_eq!(e.lost_rank(), Some(2), "rank {rank}: {e}");
        assert_eq!(e.status(), NrtStatus::NetworkProxyFailure);
        let text = e.to_string();
        assert!(text.contains("lost rank 2"), "rank {rank}: {text}");
        if rank != 0 {
            assert!(text.contains("the root (rank 0) reports"), "{text}");
        }
    }
}

#[test]
fn a_watch_names_a_lost_root_on_every_leaf() {
    let out = run_ranks(3, &[0, 1, 2], Duration::from_secs(10), |c| {
        let mut b = Bootstrap::init(&c).unwrap();
        b.barrier().unwrap();
        if c.rank == 0 {
            crash(&mut b);
            return None;
        }
        let mut w = PeerWatch::new(&SharedBootstrap::new(b));
        Some(watch_until_failed(&mut w, Duration::from_secs(8)))
    });
    for e in out.into_iter().flatten() {
        assert_eq!(e.lost_rank(), Some(0), "{e}");
        assert_eq!(e.status(), NrtStatus::NetworkProxyFailure);
    }
}

/// The flaky case of the killed-leaf test, made deterministic: the root's own comm failed (a
/// transport error) just as leaf 2 died; its abort names the lost leaf to the other leaf
/// instead of covering it with a clean `Bye`.
#[test]
fn an_abort_after_a_peer_died_names_the_lost_peer_to_every_survivor() {
    let out = run_ranks(3, &[0, 1, 2], Duration::from_secs(10), |c| {
        let mut b = Bootstrap::init(&c).unwrap();
        b.barrier().unwrap();
        match c.rank {
            2 => {
                crash(&mut b);
                None
            }
            0 => {
                let e = b.abort(NrtStatus::Failure, "task 7 ended NRT_NETWORK_PROXY_FAILURE");
                // Sticky, and no Bye after it.
                assert_eq!(b.failure(), Some(&e));
                b.close();
                Some((0, e))
            }
            _ => {
                let mut w = PeerWatch::new(&SharedBootstrap::new(b));
                Some((c.rank, watch_until_failed(&mut w, Duration::from_secs(8))))
            }
        }
    });
    let out: Vec<_> = out.into_iter().flatten().collect();
    assert_eq!(out.len(), 2);
    for (rank, e) in out {
        assert_eq!(e.lost_rank(), Some(2), "rank {rank}: {e}");
        assert!(e.to_string().contains("lost rank 2"), "rank {rank}: {e}");
    }
}

/// A root whose process ends at once after a loss its connections did not show (the shm
/// watchdog's case: its driving thread spins on the dead peer's lock and never watches again)
/// first reports it from another thread: the other leaf names the dead rank, not the root.
#[test]
fn a_loss_reported_before_an_abrupt_end_names_the_lost_rank_not_the_root() {
    let out = run_ranks(3, &[0, 1, 2], Duration::from_secs(10), |c| {
        let mut b = Bootstrap::init(&c).unwrap();
        b.barrier().unwrap();
        let shared = SharedBootstrap::new(b);
        let mut w = PeerWatch::new(&shared).with_interval(Duration::ZERO);
        match c.rank {
            0 => {
                let reporter = shared.clone();
                let told = thread::spawn(move || {
                    reporter.report_lost(2, "rank 2's process exited", Duration::from_secs(1))
                })
                .join()
                .unwrap();
                assert!(told, "the bootstrap was free");
                // Sticky: the watch sees the loss, naming rank 2.
                assert_eq!(w.check().unwrap_err().lost_rank(), Some(2));
                // The process ends without closing (`_exit`).
                crash(&mut shared.lock());
                None
            }
            // Rank 1 is told of rank 2; rank 2, reported lost, sees its root go away.
            _ => Some((c.rank, watch_until_failed(&mut w, Duration::from_secs(8)))),
        }
    });
    let out: Vec<_> = out.into_iter().flatten().collect();
    assert_eq!(out.len(), 2);
    for (rank, e) in out {
        let lost = if rank == 2 { 0 } else { 2 };
        assert_eq!(e.lost_rank(), Some(lost), "rank {rank}: {e}");
        assert!(
            e.to_string().contains("rank 2's process exited") || rank == 2,
            "{e}"
        );
    }
}

/// A rank whose run failed with every peer alive: each peer learns who aborted, with what
/// status and why, and no one waits for a timeout.
#[test]
fn an_abort_with_every_peer_alive_tells_every_peer_its_origin_and_reason() {
    let out = run_ranks(3, &[0, 1, 2], Duration::from_secs(10), |c| {
        let mut b = Bootstrap::init(&c).unwrap();
        b.barrier().unwrap();
        if c.rank == 1 {
            let e = b.abort(NrtStatus::Timeout, "rank 1's device stalled");
            b.close();
            return (1, e);
        }
        let mut w = PeerWatch::new(&SharedBootstrap::new(b));
        (c.rank, watch_until_failed(&mut w, Duration::from_secs(8)))
    });
    for (rank, e) in out {
        match &e {
            BootstrapError::Aborted {
                origin,
                status,
                reason,
                ..
            } => {
                assert_eq!(
                    (*origin, *status),
                    (1, NrtStatus::Timeout),
                    "rank {rank}: {e}"
                );
                assert_eq!(reason, "rank 1's device stalled", "rank {rank}");
            }
            other => panic!("rank {rank}: expected Aborted, got {other}"),
        }
    }
}

#[test]
fn a_clean_close_is_not_a_lost_peer_and_a_busy_bootstrap_is_skipped() {
    let out = run_ranks(2, &[0, 1], Duration::from_secs(10), |c| {
        let b = Bootstrap::init(&c).unwrap();
        let shared = SharedBootstrap::new(b);
        let mut w = PeerWatch::new(&shared).with_interval(Duration::ZERO);
        // Held by another user (an all-gather): the check is skipped, not waited for.
        {
            let _held = shared.lock();
            w.check().unwrap();
            assert_eq!(w.counts(), (0, 1));
        }
        shared.lock().barrier().unwrap();
        if c.rank == 0 {
            // The root closes cleanly (Bye) while the leaf still watches.
            shared.lock().close();
            return (0, Ok(()));
        }
        // The leaf: watching for a while after the root's Bye finds nothing wrong.
        let until = Instant::now() + Duration::from_millis(300);
        let mut r = Ok(());
        while Instant::now() < until && r.is_ok() {
            r = w.check();
            thread::sleep(Duration::from_millis(1));
        }
        assert!(shared.lock().root_left(), "the root's Bye was read");
        (1, r)
    });
    for (rank, r) in out {
        assert_eq!(r, Ok(()), "rank {rank}");
    }
}

#[test]
fn shared_barrier_channel_from_another_thread() {
    let out = run_ranks(2, &[0, 1], Duration::from_secs(10), |c| {
        let shared = SharedBootstrap::new(Bootstrap::init(&c).unwrap());
        let mut ch = shared.barrier_channel();
        let worker = thread::spawn(move || {
            for _ in 0..10 {
                let t = ch.arrive().unwrap();
                let start = Instant::now();
                while !ch.poll(t).unwrap() {
                    assert!(start.elapsed() < Duration::from_secs(5));
                    thread::yield_now();
                }
            }
        });
        worker.join().unwrap();
        let all = shared.lock().all_gather(&[c.rank as u8]).unwrap();
        all.concat()
    });
    assert_eq!(out, vec![vec![0, 1], vec![0, 1]]);
}

#[test]
fn group_barrier_among_some_ranks_is_relayed_by_a_root_outside_it() {
    let out = run_ranks(3, &[0, 1, 2], Duration::from_secs(10), |c| {
        let mut b = Bootstrap::init(&c).unwrap();
        assert!(matches!(
            b.register_group(&[2, 1]),
            Err(BootstrapError::Config(_))
        ));
        assert!(matches!(
            b.register_group(&[1, 3]),
            Err(BootstrapError::Config(_))
        ));
        let g = b.register_group(&[1, 2]).unwrap();
        assert_eq!(g, GroupId(0));
        // Every rank has registered before any member starts.
        b.barrier().unwrap();
        let mut passed = 0u32;
        if c.rank == 0 {
            assert!(matches!(
                b.group_barrier_start(g),
                Err(BootstrapError::Config(_))
            ));
        } else {
            for want in 1..=20u32 {
                let t = b.group_barrier_start(g).unwrap();
                assert_eq!(t.0, want);
                // The previous generation has not passed: a second start is refused.
                if want == 1 && c.rank == 1 {
                    assert!(matches!(
                        b.group_barrier_start(g),
                        Err(BootstrapError::Config(_))
                    ));
                }
                let deadline = Instant::now() + Duration::from_secs(5);
                // The root relays while it waits in the all-gather below.
                while !b.group_barrier_poll(g, t).unwrap() {
                    assert!(Instant::now() < deadline, "group generation {want}");
                    thread::yield_now();
                }
                passed += 1;
            }
        }
        let all = b.all_gather(&passed.to_le_bytes()).unwrap();
        all.concat()
    });
    let want: Vec<u8> = [0u32, 20, 20]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(out, vec![want.clone(), want.clone(), want]);
}

#[test]
fn host_barrier_set_up_failure_is_reported_everywhere_and_loses_nothing() {
    let out = run_ranks(3, &[0, 1, 2], Duration::from_secs(10), |c| {
        let shared = SharedBootstrap::new(Bootstrap::init(&c).unwrap());
        let bad = HostBarrierConfig {
            dir: Some("/nonexistent-proxy-host-barrier-test".into()),
            ..HostBarrierConfig::new(5)
        };
        let e = HostBarrier::setup(&shared, &bad).unwrap_err();
        let msg = match &e {
            BootstrapError::Config(m) => m.clone(),
            e => panic!("rank {}: {e}", c.rank),
        };
        assert!(
            msg.contains("cannot create") && msg.contains("nonexistent-proxy-host-barrier-test"),
            "{msg}"
        );
        // The bootstrap is intact: the next set-up works and its barriers pass.
        let mut hb = HostBarrier::setup(&shared, &HostBarrierConfig::new(6)).unwrap();
        assert_eq!((hb.local_ranks(), hb.local_index()), (3, c.rank as usize));
        for _ in 0..10 {
            let t = hb.arrive().unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            while !hb.poll(t).unwrap() {
                assert!(Instant::now() < deadline, "generation {}", t.0);
                thread::yield_now();
            }
        }
        let last = shared.lock().all_gather(&[c.rank as u8]).unwrap();
        last.concat()
    });
    assert_eq!(out, vec![vec![0, 1, 2]; 3]);
}

#[test]
fn host_barrier_of_one_process_passes_at_once() {
    let c = BootstrapConfig::from_lookup(None, None, None, |_| None).unwrap();
    let shared = SharedBootstrap::new(Bootstrap::init(&c).unwrap());
    let mut hb = HostBarrier::setup(&shared, &HostBarrierConfig::new(3)).unwrap();
    assert_eq!((hb.hosts(), hb.local_ranks(), hb.local_index()), (1, 1, 0));
    assert!(hb.is_host_leader());
    assert!(matches!(hb.arrived_of(1), Err(NrtStatus::Invalid)));
    let waiting = hb.waiting();
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    assert!(!waiting.load(relaxed), "not waiting before an arrival");
    for g in 1..=5 {
        let t = hb.arrive().unwrap();
        assert!(waiting.load(relaxed), "waiting from the arrival");
        assert_eq!(t.0, g);
        assert_eq!(hb.arrived_of(0).unwrap(), g);
        assert!(hb.poll(t).unwrap());
        assert!(!waiting.load(relaxed), "not waiting once passed");
    }
    assert_eq!(hb.cross_host_generations(), 0);
}

#[test]
fn barrier_start_twice_is_refused() {
    run_ranks(2, &[0, 1], Duration::from_secs(10), |c| {
        let mut b = Bootstrap::init(&c).unwrap();
        let t = b.barrier_start().unwrap();
        if c.rank == 1 {
            assert!(matches!(b.barrier_start(), Err(BootstrapError::Config(_))));
        }
        let start = Instant::now();
        while !b.barrier_poll(t).unwrap() {
            assert!(start.elapsed() < Duration::from_secs(5));
            thread::yield_now();
        }
    });
}

#[test]
fn config_from_arguments_and_launcher_variables() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let c = BootstrapConfig::from_lookup(
        None,
        None,
        None,
        env(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "9"),
            ("NEURON_RT_ROOT_COMM_ID", "127.0.0.1:4567"),
            ("NEURON_RT_BOOTSTRAP_TIMEOUT", "2.5"),
        ]),
    )
    .unwrap();
    assert_eq!((c.rank, c.nranks), (2, 4));
    assert_eq!(c.root, "127.0.0.1:4567".parse().unwrap());
    assert_eq!(c.timeout, Duration::from_millis(2500));
    for (r, s, vars) in [
        ("PMI_RANK", "PMI_SIZE", ["PMI_RANK", "PMI_SIZE"]),
        (
            "SLURM_PROCID",
            "SLURM_NTASKS",
            ["SLURM_PROCID", "SLURM_NTASKS"],
        ),
        ("PROXY_RANK", "PROXY_NRANKS", ["PROXY_RANK", "PROXY_NRANKS"]),
    ] {
        let _ = vars;
        let look = move |k: &str| {
            if k == r {
                Some("1".to_owned())
            } else if k == s {
                Some("3".to_owned())
            } else if k == ROOT_COMM_ID_ENV {
                Some("localhost:99".to_owned())
            } else {
                None
            }
        };
        let c = BootstrapConfig::from_lookup(None, None, None, look).unwrap();
        assert_eq!((c.rank, c.nranks), (1, 3), "{r}");
        assert_eq!(c.root.port(), 99);
    }
    // Arguments win over the environment; the root argument over NEURON_RT_ROOT_COMM_ID.
    let c = BootstrapConfig::from_lookup(
        Some(0),
        None,
        Some("127.0.0.1:1"),
        env(&[
            ("PMI_RANK", "5"),
            ("PMI_SIZE", "8"),
            ("NEURON_RT_ROOT_COMM_ID", "x"),
        ]),
    )
    .unwrap();
    assert_eq!((c.rank, c.nranks, c.root.port()), (0, 8, 1));
    // Errors name what is wrong.
    let err = |r: Result<BootstrapConfig, BootstrapError>| r.unwrap_err().to_string();
    assert!(err(BootstrapConfig::from_lookup(
        None,
        None,
        None,
        env(&[("PMI_RANK", "1")])
    ))
    .contains("PMI_SIZE"));
    assert!(err(BootstrapConfig::from_lookup(
        Some(1),
        Some(2),
        None,
        env(&[])
    ))
    .contains(ROOT_COMM_ID_ENV));
    assert!(err(BootstrapConfig::from_lookup(
        Some(2),
        Some(2),
        Some("127.0.0.1:1"),
        env(&[])
    ))
    .contains("rank 2 of 2"));
    assert!(err(BootstrapConfig::from_lookup(
        Some(0),
        Some(2),
        Some("not an address"),
        env(&[])
    ))
    .contains("not an address"));
    assert!(err(BootstrapConfig::from_lookup(
        Some(0),
        Some(2),
        Some("127.0.0.1:1"),
        env(&[("NEURON_RT_BOOTSTRAP_TIMEOUT", "-1")])
    ))
    .contains("positive"));
    assert!(err(BootstrapConfig::from_lookup(Some(0), None, None, env(&[]))).contains("give both"));
}

#[test]
fn the_root_address_in_use_is_a_clear_error() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let root = l.local_addr().unwrap();
    let e = Bootstrap::init(&cfg(0, 2, root, Duration::from_secs(1))).unwrap_err();
    assert!(
        e.to_string().contains("cannot listen on the root address"),
        "{e}"
    );
}

/// Every log line of this test binary (the lib's tests install no other logger).
fn captured_logs() -> &'static Mutex<Vec<String>> {
    struct Capture;
    static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());
    impl log::Log for Capture {
        fn enabled(&self, m: &log::Metadata) -> bool {
            m.level() <= log::Level::Warn
        }
        fn log(&self, r: &log::Record) {
            if self.enabled(r.metadata()) {
                LINES
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(r.args().to_string());
            }
        }
        fn flush(&self) {}
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if log::set_logger(&Capture).is_ok() {
            log::set_max_level(log::LevelFilter::Warn);
        }
    });
    &LINES
}

#[test]
fn waits_warn_every_interval_with_the_cumulative_wait() {
    let logs = captured_logs();
    let root = free_loopback_root().unwrap();
    let c = BootstrapConfig {
        warn_interval: Duration::from_millis(400),
        ..cfg(0, 2, root, Duration::from_millis(1300))
    };
    let e = Bootstrap::init(&c).unwrap_err();
    assert_eq!(e.status(), NrtStatus::Timeout);
    let port = format!(":{}", root.port());
    let mine: Vec<String> = logs
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(&port) && l.contains("still waiting for ranks [1]"))
        .cloned()
        .collect();
    assert_eq!(mine.len(), 3, "{mine:#?}");
    for (k, l) in mine.iter().enumerate() {
        // "... after X s (timeout 1.3 s)": the cumulative wait, at each multiple of the interval.
        let after: f64 = l
            .split("after ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let want = 0.4 * (k + 1) as f64;
        assert!(after >= want - 0.05 && after < want + 0.35, "{l}");
        assert!(l.contains("timeout 1.3 s"), "{l}");
    }
}

#[test]
fn a_reserved_root_listener_is_taken_only_on_its_own_address() {
    use std::os::fd::AsRawFd;
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let fd = l.as_raw_fd().to_string();
    let other: SocketAddr = "127.0.0.1:1".parse().unwrap();
    // Another address, garbage, stdin: refused, and the descriptor is left open.
    assert!(root::inherited_listener_from(Some(&fd), other).is_none());
    assert!(root::inherited_listener_from(Some("x"), addr).is_none());
    assert!(root::inherited_listener_from(Some("0"), addr).is_none());
    assert!(root::inherited_listener_from(None, addr).is_none());
    assert_eq!(
        l.local_addr().unwrap(),
        addr,
        "still open after the refusals"
    );
    // Its own address: taken (the same socket: a connection to it is pending there).
    let taken = root::inherited_listener_from(Some(&fd), addr).expect("taken");
    assert_eq!(taken.local_addr().unwrap(), addr);
    // Once per process.
    assert!(root::inherited_listener_from(Some(&fd), addr).is_none());
    // Both values own the same descriptor now: let only one close it.
    std::mem::forget(l);
    drop(taken);
}
