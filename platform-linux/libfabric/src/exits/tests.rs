//! A child process watched through its pidfd: alive, then exited (a zombie until reaped).

use super::*;

#[test]
fn a_child_reads_alive_then_exited_and_bad_pids_are_not_watched() {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep");
    let w = PeerExit::open(child.id()).expect("pidfd of a live child");
    assert_eq!(w.pid(), child.id());
    assert!(!w.exited(), "a running child");
    child.kill().expect("kill the child");
    // Not reaped yet: a zombie reads exited too. Bounded: 2 s in 1 ms steps.
    let mut polls = 0;
    while !w.exited() {
        polls += 1;
        assert!(polls < 2000, "the killed child never read as exited");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    child.wait().expect("reap the child");
    assert!(w.exited(), "a reaped child stays exited");
    assert!(PeerExit::open(0).is_none(), "pid 0");
    assert!(PeerExit::open(u32::MAX).is_none(), "a pid out of range");
}

/// The watchdog's look, on a `Stuck` built by hand (not registered: the real watchdog would
/// end this process): no call, a short call, a long call to a live peer, a long call to an
/// exited one, and a CQ read (any peer).
#[test]
fn a_call_counts_as_stuck_only_when_long_and_its_peer_has_exited() {
    let mut alive = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn");
    let mut dead = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn");
    let s = Stuck {
        who: "test".into(),
        exits: vec![None, PeerExit::open(alive.id()), PeerExit::open(dead.id())],
        since_ns: AtomicU64::new(0),
        peer: AtomicU32::new(ANY_PEER),
        last_words: OnceLock::new(),
    };
    dead.kill().expect("kill");
    dead.wait().expect("reap");
    let limit = STUCK_LIMIT.as_nanos() as u64;
    let now = coarse_ns() + 10 * limit;
    assert_eq!(s.stuck(now), None, "no call in progress");
    s.enter(Some(2));
    assert_eq!(s.stuck(coarse_ns()), None, "a call that just began");
    let since = s.since_ns.load(Ordering::Relaxed);
    let (peer, pid, took) = s
        .stuck(since + limit)
        .expect("a long call to an exited peer");
    assert_eq!((peer, pid), (2, dead.id()));
    assert_eq!(took, STUCK_LIMIT);
    s.leave();
    assert_eq!(s.stuck(now), None, "the call returned");
    s.enter(Some(1));
    assert_eq!(
        s.stuck(since + 10 * limit),
        None,
        "a long call to a live peer"
    );
    s.enter(Some(0));
    assert_eq!(s.stuck(since + 10 * limit), None, "self: not watched");
    s.enter(None);
    assert_eq!(
        s.stuck(since + 10 * limit).map(|(p, _, _)| p),
        Some(2),
        "a CQ read: any exited peer"
    );
    s.leave();
    alive.kill().expect("kill");
    alive.wait().expect("reap");
}

/// The environment variable that makes [`watchdog_child`] act (it returns at once without).
const WATCHDOG_CHILD_ENV: &str = "PROXY_LIBFABRIC_WATCHDOG_CHILD";

/// The watchdog itself, end to end: a process whose registered call waits on a peer that has
/// exited is ended by the watchdog thread after [`STUCK_LIMIT`], with [`STUCK_EXIT_STATUS`]
/// and the error line naming the peer, after the transport's last words (the child:
/// [`watchdog_child`], this test binary run again).
#[test]
fn the_watchdog_ends_a_process_stuck_on_an_exited_peer() {
    let exe = std::env::current_exe().expect("this test binary");
    let t0 = std::time::Instant::now();
    let mut child = std::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "exits::tests::watchdog_child",
            "--nocapture",
        ])
        .env(WATCHDOG_CHILD_ENV, "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the child");
    // Bounded: 15 s in 10 ms steps, then killed.
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if t0.elapsed() > std::time::Duration::from_secs(15) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let mut err = String::new();
    use std::io::Read as _;
    let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
    let took = t0.elapsed();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(STUCK_EXIT_STATUS),
        "the child was not ended by the watchdog ({took:?}); stderr: {err}"
    );
    assert!(
        err.contains("a call into libfabric shm has spun for")
            && err.contains("on the lock of rank 1")
            && err.contains("whose process has exited holding it"),
        "{err}"
    );
    // Before it ended the process, the watchdog ran the transport's last words.
    assert!(err.contains("last words: rank 1 lost: "), "{err}");
    assert!(
        took >= STUCK_LIMIT,
        "ended after {took:?}, before the limit"
    );
}

/// The child of [`the_watchdog_ends_a_process_stuck_on_an_exited_peer`]: rank 1 is a process
/// that has exited (reaped); a call to it is registered and never returns (it sleeps in 10 ms
/// steps for at most 20 s, then this process ends with status 0, which the parent reads as a
/// failure).
#[test]
#[ignore = "entry point of the watchdog test's child process"]
fn watchdog_child() {
    if std::env::var_os(WATCHDOG_CHILD_ENV).is_none() {
        return;
    }
    let mut peer = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn");
    let exit = PeerExit::open(peer.id()).expect("pidfd");
    peer.kill().expect("kill");
    peer.wait().expect("reap");
    let s = Stuck::new("watchdog test".into(), vec![None, Some(exit)]);
    // What a transport with a bootstrap says: here, a line the parent reads.
    s.set_last_words(LastWords(Box::new(|peer, msg| {
        eprintln!("last words: rank {peer} lost: {}", msg.len());
    })));
    s.enter(Some(1));
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::process::exit(0);
}
