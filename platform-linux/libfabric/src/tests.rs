//! Loopback tests of the libfabric transport: two endpoints (rank 0 and 1) in this process, on
//! `tcp;ofi_rxm` (`FI_TCP_IFACE=lo`, so every address is 127.0.0.1) and on shm.
//!
//! Every wait is bounded by a round count and by wall time.

use std::process::Command;
use std::sync::Once;
use std::time::{Duration, Instant};

use proxy_core::progress::net::{make_tag, NetError, RequestId, TestOutcome, Transport};
use proxy_core::NrtStatus;

use super::{LibfabricTransport, Options, IDLE_READ_EVERY};

pub(crate) const TCP: &str = "tcp;ofi_rxm";
const SHM: &str = "shm";
/// Wall-time bound of every wait.
const TIME_LIMIT: Duration = Duration::from_secs(60);
/// Round bound of every wait.
const MAX_ROUNDS: u64 = 20_000_000;
/// The sizes of the exchange tests: 0, 1 B, 4 KiB + 1, 1 MiB, 16 MiB.
const SIZES: [usize; 5] = [0, 1, 4097, 1 << 20, 16 << 20];

pub(crate) type Pair = [LibfabricTransport; 2];

/// Sets the process environment once, before this process's first libfabric call (libfabric
/// reads it at initialisation): tcp on the loopback interface only.
pub(crate) fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::env::set_var("FI_TCP_IFACE", "lo");
    });
}

/// Two connected endpoints, rank 0 and rank 1, names exchanged in-process.
pub(crate) fn pair(provider: &str, mut opts: Options) -> Pair {
    init();
    opts.provider = Some(provider.to_owned());
    let a = LibfabricTransport::open_with(0, 2, &opts).expect("open rank 0");
    let b = LibfabricTransport::open_with(1, 2, &opts).expect("open rank 1");
    let names = vec![a.local_name(), b.local_name()];
    if a.attrs().addr_format == libfabric_sys::FI_SOCKADDR_IN {
        for n in &names {
            // struct sockaddr_in: family (2), port (2), address (4).
            assert_eq!(
                &n[4..8],
                &[127, 0, 0, 1],
                "tcp must bind to loopback only: {n:?}"
            );
        }
    }
    let mut ts = [a, b];
    for t in &mut ts {
        t.connect(&names).expect("connect");
    }
    ts
}

/// Runs `step` (after polling both endpoints) until it answers true, bounded by rounds and time.
pub(crate) fn drive(what: &str, ts: &mut Pair, mut step: impl FnMut(&mut Pair) -> bool) {
    let start = Instant::now();
    for round in 0..MAX_ROUNDS {
        for t in ts.iter_mut() {
            t.poll()
                .unwrap_or_else(|e| panic!("{what}: poll failed: {e}"));
        }
        if step(ts) {
            return;
        }
        assert!(
            start.elapsed() < TIME_LIMIT,
            "{what}: not done after {TIME_LIMIT:?} ({round} rounds)"
        );
        if round % 256 == 255 {
            std::thread::yield_now();
        }
    }
    panic!("{what}: not done after {MAX_ROUNDS} rounds");
}

/// Posts a send, retrying on back-pressure; checks that exactly the sends up to the inject size
/// report their payload copied.
pub(crate) fn send(ts: &mut Pair, from: usize, to: u32, buf: &[u8], tag: u64) -> RequestId {
    let mut id = None;
    let inject = ts[from].inject_size();
    let copied = inject > 0 && buf.len() <= inject;
    drive("post send", ts, |ts| {
        // SAFETY: `buf` outlives the request: every test waits for it (or closes) before
        // dropping the buffer.
        match unsafe { ts[from].isend(to, buf.as_ptr(), buf.len() as u64, tag) } {
            Ok(Some(p)) => {
                assert_eq!(
                    p.payload_copied,
                    copied,
                    "{} B send, inject size {inject}",
                    buf.len()
                );
                id = Some(p.request);
                true
            }
            Ok(None) => false,
            Err(e) => panic!("isend: {e}"),
        }
    });
    id.expect("posted")
}

/// Posts a receive, retrying on back-pressure.
pub(crate) fn recv(
    ts: &mut Pair,
    at: usize,
    from: u32,
    buf: *mut u8,
    len: usize,
    tag: u64,
) -> RequestId {
    let mut id = None;
    drive("post recv", ts, |ts| {
        // SAFETY: `buf..buf+len` is a live buffer that the test does not touch until the
        // request finished.
        match unsafe { ts[at].irecv(from, buf, len as u64, tag) } {
            Ok(Some(p)) => {
                id = Some(p.request);
                true
            }
            Ok(None) => false,
            Err(e) => panic!("irecv: {e}"),
        }
    });
    id.expect("posted")
}

/// Tests `id` at `at` until it finishes.
pub(crate) fn wait(ts: &mut Pair, at: usize, id: RequestId) -> Result<TestOutcome, NetError> {
    let mut out = None;
    drive("wait", ts, |ts| match ts[at].test(id) {
        Ok(TestOutcome::Pending) => false,
        r => {
            out = Some(r);
            true
        }
    });
    out.expect("finished")
}

/// Deterministic bytes (xorshift), different per `seed`.
pub(crate) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub(crate) fn close(ts: &mut Pair) {
    for t in ts.iter_mut() {
        t.close().unwrap_or_else(|e| panic!("close: {e}"));
    }
}

/// Every size, both directions at once, receives posted before or after the sends.
fn exchange(provider: &str, opts: Options, sizes: &[usize]) {
    let mut ts = pair(provider, opts);
    let registers = ts[0].registers_memory();
    let mut idx = 0u32;
    for &size in sizes {
        for recv_first in [true, false] {
            idx += 1;
            let src = [
                pattern(2 * u64::from(idx), size),
                pattern(2 * u64::from(idx) + 1, size),
            ];
            let mut dst = [vec![0xEEu8; size], vec![0xEEu8; size]];
            let dptr = [dst[0].as_mut_ptr(), dst[1].as_mut_ptr()];
            // Tag of a message from rank r: the source rank is inside the tag.
            let tag = |r: u32| make_tag(3, r, 1, 7, idx);
            let (mut s, mut r) = ([0; 2], [0; 2]);
            if recv_first {
                r[1] = recv(&mut ts, 1, 0, dptr[1], size, tag(0));
                r[0] = recv(&mut ts, 0, 1, dptr[0], size, tag(1));
            }
            s[0] = send(&mut ts, 0, 1, &src[0], tag(0));
            s[1] = send(&mut ts, 1, 0, &src[1], tag(1));
            if !recv_first {
                r[1] = recv(&mut ts, 1, 0, dptr[1], size, tag(0));
                r[0] = recv(&mut ts, 0, 1, dptr[0], size, tag(1));
            }
            for at in 0..2 {
                let want = TestOutcome::Done { size: size as u64 };
                let case = format!("{provider} {size} B recv_first={recv_first} at rank {at}");
                assert_eq!(wait(&mut ts, at, s[at]).expect(&case), want, "send {case}");
                assert_eq!(wait(&mut ts, at, r[at]).expect(&case), want, "recv {case}");
            }
            assert!(
                dst[1] == src[0],
                "{provider} {size} B rank 0 -> 1 recv_first={recv_first}: data differ"
            );
            assert!(
                dst[0] == src[1],
                "{provider} {size} B rank 1 -> 0 recv_first={recv_first}: data differ"
            );
        }
    }
    assert_eq!(ts[0].in_flight() + ts[1].in_flight(), 0);
    if registers {
        assert!(
            ts[0].registrations() > 0,
            "{provider}: posts registered nothing"
        );
    } else {
        assert_eq!(ts[0].registrations(), 0);
    }

    // Tags match exactly whatever the order: receives posted in reverse order of the sends.
    const K: usize = 8;
    let src: Vec<Vec<u8>> = (0..K).map(|i| pattern(1000 + i as u64, 100 + i)).collect();
    let mut dst: Vec<Vec<u8>> = (0..K).map(|i| vec![0u8; 100 + i]).collect();
    let mut rids = [0; K];
    for i in (0..K).rev() {
        let p = dst[i].as_mut_ptr();
        rids[i] = recv(&mut ts, 1, 0, p, 100 + i, make_tag(3, 0, 2, 1, i as u32));
    }
    let sids: Vec<_> = (0..K)
        .map(|i| send(&mut ts, 0, 1, &src[i], make_tag(3, 0, 2, 1, i as u32)))
        .collect();
    for i in 0..K {
        assert!(matches!(
            wait(&mut ts, 0, sids[i]),
            Ok(TestOutcome::Done { .. })
        ));
        assert_eq!(
            wait(&mut ts, 1, rids[i]),
            Ok(TestOutcome::Done {
                size: 100 + i as u64
            })
        );
    }
    assert!(
        dst == src,
        "{provider}: crossed tags delivered into the wrong buffers"
    );
    close(&mut ts);
}

#[test]
fn tcp_exchange_all_sizes_both_orders() {
    exchange(TCP, Options::default(), &SIZES);
}

#[test]
fn shm_exchange_all_sizes_both_orders() {
    exchange(SHM, Options::default(), &SIZES);
}

#[test]
fn tcp_exchange_with_forced_registration() {
    // tcp asks for no registration; forcing it runs the registration cache (and its unique
    // keys: duplicates fail with -FI_ENOKEY) on this machine, as efa would.
    exchange(
        TCP,
        Options {
            register_memory: Some(true),
            ..Options::default()
        },
        &SIZES[..4],
    );
}

/// Thousands of sends posted before the receiver polls: back-pressure (`Ok(None)`) is hit when
/// `expect_pressure`, and nothing is lost or reordered (one tag for all: order alone decides the
/// matching). The 64 B messages are injects unless `opts` turns inject off (then checked: every
/// send, the warm-up's included, went out with `fi_tinject`, retries after `-FI_EAGAIN` too).
fn backpressure(provider: &str, opts: Options, expect_pressure: bool) {
    const N: usize = 5000;
    const LEN: usize = 64;
    let mut ts = pair(provider, opts);
    // Warm-up: connection setup (tcp answers -FI_EAGAIN until it is done).
    let mut warm = [0u8; 1];
    let r = recv(&mut ts, 1, 0, warm.as_mut_ptr(), 1, make_tag(1, 0, 0, 0, 0));
    let s = send(&mut ts, 0, 1, &[7], make_tag(1, 0, 0, 0, 0));
    wait(&mut ts, 0, s).expect("warm-up send");
    wait(&mut ts, 1, r).expect("warm-up recv");

    let tag = make_tag(1, 0, 3, 0x3FFF, 0xFFFF);
    let src: Vec<[u8; LEN]> = (0..N)
        .map(|i| {
            let mut m = [0u8; LEN];
            m[..8].copy_from_slice(&(i as u64).to_le_bytes());
            m[8..].copy_from_slice(&pattern(i as u64, LEN - 8));
            m
        })
        .collect();
    let mut dst = vec![[0u8; LEN]; N];
    let dst_ptr = dst.as_mut_ptr();

    // Phase 1: post sends without anybody polling until the provider pushes back.
    let (mut sids, mut rids) = (Vec::with_capacity(N), Vec::with_capacity(N));
    let mut send_pressure = 0u64;
    while sids.len() < N {
        // SAFETY: `src` outlives every request (all are waited for below).
        match unsafe { ts[0].isend(1, src[sids.len()].as_ptr(), LEN as u64, tag) } {
            Ok(Some(p)) => sids.push(p.request),
            Ok(None) => {
                send_pressure += 1;
                break;
            }
            Err(e) => panic!("{provider}: isend {}: {e}", sids.len()),
        }
    }
    let before_pressure = sids.len();
    if expect_pressure {
        assert!(
            send_pressure > 0,
            "{provider}: {N} sends posted without back-pressure"
        );
    }

    // Phase 2: receives in order, remaining sends in order, both retrying; test in order.
    let (mut recv_pressure, mut sent_done, mut recv_done) = (0u64, 0usize, 0usize);
    drive("backpressure", &mut ts, |ts| {
        while rids.len() < N {
            // SAFETY: element `rids.len()` of `dst` is not touched until its request finished.
            let p = unsafe { dst_ptr.add(rids.len()) }.cast::<u8>();
            // SAFETY: as above; the buffer is LEN bytes.
            match unsafe { ts[1].irecv(0, p, LEN as u64, tag) } {
                Ok(Some(p)) => rids.push(p.request),
                Ok(None) => {
                    recv_pressure += 1;
                    break;
                }
                Err(e) => panic!("{provider}: irecv {}: {e}", rids.len()),
            }
        }
        while sids.len() < N {
            // SAFETY: as in phase 1.
            match unsafe { ts[0].isend(1, src[sids.len()].as_ptr(), LEN as u64, tag) } {
                Ok(Some(p)) => sids.push(p.request),
                Ok(None) => {
                    send_pressure += 1;
                    break;
                }
                Err(e) => panic!("{provider}: isend {}: {e}", sids.len()),
            }
        }
        while sent_done < sids.len() {
            match ts[0].test(sids[sent_done]) {
                Ok(TestOutcome::Pending) => break,
                Ok(TestOutcome::Done { size }) => {
                    assert_eq!(size, LEN as u64);
                    sent_done += 1;
                }
                r => panic!("{provider}: send {sent_done}: {r:?}"),
            }
        }
        while recv_done < rids.len() {
            match ts[1].test(rids[recv_done]) {
                Ok(TestOutcome::Pending) => break,
                Ok(TestOutcome::Done { size }) => {
                    assert_eq!(size, LEN as u64);
                    recv_done += 1;
                }
                r => panic!("{provider}: recv {recv_done}: {r:?}"),
            }
        }
        sent_done == N && recv_done == N
    });
    for (i, (d, s)) in dst.iter().zip(&src).enumerate() {
        assert!(
            d == s,
            "{provider}: message {i} lost or reordered (got #{})",
            u64::from_le_bytes(d[..8].try_into().unwrap())
        );
    }
    let injects = ts[0].inject_size() >= LEN;
    assert_eq!(
        ts[0].injected_sends(),
        if injects { N as u64 + 1 } else { 0 },
        "{provider}: injected sends (inject size {})",
        ts[0].inject_size()
    );
    eprintln!(
        "{provider}: {before_pressure} sends before back-pressure; {send_pressure} send and \
         {recv_pressure} receive retries; inject {injects}"
    );
    close(&mut ts);
}

/// `tcp;ofi_rxm` buffers 64 B injects without pushing back (5000 went out unpolled here), so
/// its back-pressure is checked with inject off, and its injects for order and loss only.
#[test]
fn tcp_backpressure_loses_nothing_and_keeps_order() {
    backpressure(TCP, NO_INJECT, true);
    backpressure(TCP, Options::default(), false);
}

/// shm's injects push back (`-FI_EAGAIN`) like its sends.
#[test]
fn shm_backpressure_loses_nothing_and_keeps_order() {
    backpressure(SHM, Options::default(), true);
    backpressure(SHM, NO_INJECT, true);
}

/// Inject off: every send goes through `fi_tsend` and the CQ.
const NO_INJECT: Options = Options {
    provider: None,
    all_ranks_local: false,
    spans_hosts: false,
    max_msg_size: None,
    register_memory: None,
    tx_size: None,
    rx_size: None,
    close_drain: super::DEFAULT_CLOSE_DRAIN,
    max_inject_size: Some(0),
    mr_cache: None,
    pool_endpoints: true,
    cq_wait_fd: false,
};

/// The retry storm of issue 7: tiny queues (provider attributes) push back every few posts.
#[test]
fn tiny_queues_retry_storm_loses_nothing() {
    for (p, inject, pressure) in [
        (TCP, None, false),
        (TCP, Some(0), true),
        (SHM, None, true),
        (SHM, Some(0), true),
    ] {
        backpressure(
            p,
            Options {
                tx_size: Some(8),
                rx_size: Some(8),
                max_inject_size: inject,
                ..Options::default()
            },
            pressure,
        );
    }
}

/// A receive smaller than the message fails (never a short receive) with the provider's text.
fn truncation(provider: &str) {
    let mut ts = pair(provider, Options::default());
    let src = pattern(5, 64);
    let mut dst = vec![0u8; 32];
    let tag = make_tag(2, 0, 0, 1, 1);
    let r = recv(&mut ts, 1, 0, dst.as_mut_ptr(), 32, tag);
    let s = send(&mut ts, 0, 1, &src, tag);
    let err = wait(&mut ts, 1, r).expect_err("a 64 B message into a 32 B receive must fail");
    assert_eq!(err.status, NrtStatus::NetworkProxyFailure);
    assert_eq!(err.peer, Some(0));
    assert!(
        err.message.contains("truncated"),
        "{provider}: {}",
        err.message
    );
    eprintln!("{provider}: truncation reported as: {err}");
    // The sender's request finishes one way or the other (tcp's connection is dead after a
    // truncation, libfabric #8274); close must not hang either way.
    let start = Instant::now();
    let mut sent = None;
    while start.elapsed() < Duration::from_secs(5) && sent.is_none() {
        let _ = ts[1].poll();
        let _ = ts[0].poll();
        match ts[0].test(s) {
            Ok(TestOutcome::Pending) => std::thread::yield_now(),
            other => sent = Some(other),
        }
    }
    eprintln!("{provider}: sender after truncation: {sent:?}");
    let t0 = Instant::now();
    for t in &mut ts {
        let r = t.close();
        eprintln!("{provider}: close after truncation: {r:?}");
    }
    // Every close returned (a hang would stop the test at the step budget); how long it took
    // is printed, not asserted (speed lives in benchmarks).
    eprintln!("{provider}: closes took {:?}", t0.elapsed());
    drop(src);
}

#[test]
fn tcp_truncation_is_an_error() {
    truncation(TCP);
}

#[test]
fn shm_truncation_is_an_error() {
    truncation(SHM);
}

/// A posted receive is cancelled; a receive left in flight is cancelled by close.
fn cancel_and_close(provider: &str) {
    let mut ts = pair(provider, Options::default());
    let mut buf = vec![0u8; 128];
    let r = recv(
        &mut ts,
        1,
        0,
        buf.as_mut_ptr(),
        128,
        make_tag(4, 0, 0, 0, 1),
    );
    assert_eq!(ts[1].test(r), Ok(TestOutcome::Pending));
    ts[1].cancel(r).expect("cancel");
    assert_eq!(wait(&mut ts, 1, r), Ok(TestOutcome::Cancelled));
    assert!(ts[1].test(r).is_err(), "a finished request id is released");

    // Still usable after a cancel.
    let mut one = [0u8; 1];
    let r = recv(&mut ts, 1, 0, one.as_mut_ptr(), 1, make_tag(4, 0, 0, 0, 2));
    let s = send(&mut ts, 0, 1, &[42], make_tag(4, 0, 0, 0, 2));
    assert_eq!(wait(&mut ts, 0, s), Ok(TestOutcome::Done { size: 1 }));
    assert_eq!(wait(&mut ts, 1, r), Ok(TestOutcome::Done { size: 1 }));
    assert_eq!(one, [42]);

    // Close with a receive still posted: close cancels and drains it.
    let r = recv(
        &mut ts,
        1,
        0,
        buf.as_mut_ptr(),
        128,
        make_tag(4, 0, 0, 0, 3),
    );
    ts[1].close().expect("close with a posted receive");
    assert_eq!(ts[1].in_flight(), 0);
    assert_eq!(ts[1].test(r), Ok(TestOutcome::Cancelled));
    // SAFETY: (never runs the post) a closed transport refuses posts.
    let e = unsafe { ts[1].irecv(0, buf.as_mut_ptr(), 1, 0) }.expect_err("closed");
    assert!(e.message.contains("closed"), "{e}");
    ts[0].close().expect("close");
}

#[test]
fn tcp_cancel_and_close_with_posted_receive() {
    cancel_and_close(TCP);
}

#[test]
fn shm_cancel_and_close_with_posted_receive() {
    cancel_and_close(SHM);
}

#[test]
fn messages_above_max_msg_size_are_rejected() {
    let mut ts = pair(
        TCP,
        Options {
            max_msg_size: Some(4096),
            ..Options::default()
        },
    );
    assert_eq!(ts[0].max_msg_size(), 4096);
    let big = vec![1u8; 4097];
    // SAFETY: rejected before anything is posted.
    let e = unsafe { ts[0].isend(1, big.as_ptr(), 4097, 0) }.expect_err("over the limit");
    assert_eq!(e.status, NrtStatus::Invalid);
    assert!(
        e.message.contains("4097") && e.message.contains("4096"),
        "{e}"
    );
    let mut big_rx = vec![0u8; 4097];
    // SAFETY: rejected before anything is posted.
    let e = unsafe { ts[1].irecv(0, big_rx.as_mut_ptr(), 4097, 0) }.expect_err("over the limit");
    assert!(
        e.message.contains("4097") && e.message.contains("4096"),
        "{e}"
    );
    // At the limit it goes through.
    let r = recv(&mut ts, 1, 0, big_rx.as_mut_ptr(), 4096, 9);
    let s = send(&mut ts, 0, 1, &big[..4096], 9);
    assert_eq!(wait(&mut ts, 0, s), Ok(TestOutcome::Done { size: 4096 }));
    assert_eq!(wait(&mut ts, 1, r), Ok(TestOutcome::Done { size: 4096 }));
    close(&mut ts);

    // The providers' own limits cover the 16 MiB of the exchange tests.
    for p in [TCP, SHM] {
        let t = LibfabricTransport::open(Some(p), 0, 1).expect("open");
        assert!(
            t.max_msg_size() >= 16 << 20,
            "{p}: max_msg_size {}",
            t.max_msg_size()
        );
    }
}

#[test]
fn bad_arguments_are_rejected() {
    init();
    let mut ts = pair(TCP, Options::default());
    // SAFETY: rejected before anything is posted.
    let e = unsafe { ts[0].isend(2, [0u8].as_ptr(), 1, 0) }.expect_err("peer out of range");
    assert_eq!(e.status, NrtStatus::Invalid);
    assert!(ts[0].test(12345).is_err(), "unknown request id");
    let names = vec![ts[0].local_name(), ts[1].local_name()];
    assert!(ts[0].connect(&names).is_err(), "connect twice");

    let mut t = LibfabricTransport::open(Some(TCP), 0, 2).expect("open");
    let e = t.connect(&names[..1]).expect_err("wrong count");
    assert_eq!(e.status, NrtStatus::Invalid);
    let e = t
        .connect(&[names[1].clone(), names[0].clone()])
        .expect_err("misordered");
    assert!(e.message.contains("own name"), "{e}");
    // SAFETY: rejected before anything is posted.
    let e = unsafe { t.isend(1, [0u8].as_ptr(), 1, 0) }.expect_err("not connected");
    assert!(e.message.contains("before connect"), "{e}");
    assert!(
        LibfabricTransport::open(Some(TCP), 2, 2).is_err(),
        "rank >= nranks"
    );
}

#[test]
fn unknown_explicit_provider_is_a_clear_error() {
    init();
    let e = LibfabricTransport::open(Some("doesnotexist"), 0, 2)
        .err()
        .expect("must fail");
    assert_eq!(e.status, NrtStatus::Invalid);
    assert!(e.message.contains("\"doesnotexist\""), "{e}");
    assert!(
        e.message.contains("tcp;ofi_rxm"),
        "lists what is offered: {e}"
    );
    eprintln!("{e}");
}

/// Child half of [`fi_provider_env_names_the_provider`]: runs only when that test starts this
/// binary with `LIBFABRIC_TEST_CHILD=1` and `FI_PROVIDER=doesnotexist` (libfabric reads
/// `FI_PROVIDER` once per process, so the check needs its own process).
#[test]
fn fi_provider_env_child() {
    if std::env::var_os("LIBFABRIC_TEST_CHILD").is_none() {
        return;
    }
    assert_eq!(std::env::var("FI_PROVIDER").as_deref(), Ok("doesnotexist"));
    let e = LibfabricTransport::open(None, 0, 2)
        .err()
        .expect("must fail");
    assert!(
        e.message.contains("doesnotexist") && e.message.contains("FI_PROVIDER"),
        "{e}"
    );
    println!("child error: {e}");
}

#[test]
fn fi_provider_env_names_the_provider() {
    if std::env::var_os("LIBFABRIC_TEST_CHILD").is_some() {
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args([
            "tests::fi_provider_env_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LIBFABRIC_TEST_CHILD", "1")
        .env("FI_PROVIDER", "doesnotexist")
        .env("FI_TCP_IFACE", "lo")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the test binary");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("FI_PROVIDER=doesnotexist: the process did not exit within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.success() && stdout.contains("child error:") && stdout.contains("1 passed"),
        "child failed: {status}\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn automatic_choice_prefers_shm_locally_and_tcp_otherwise() {
    init();
    if std::env::var_os("FI_PROVIDER").is_some() {
        eprintln!("FI_PROVIDER is set: the automatic choice is not exercised");
        return;
    }
    let local = Options {
        all_ranks_local: true,
        ..Options::default()
    };
    let t = LibfabricTransport::open_with(0, 2, &local).expect("open");
    assert!(matches!(t.provider(), "efa" | "shm"), "{}", t.provider());
    let t = LibfabricTransport::open_with(0, 2, &Options::default()).expect("open");
    assert!(matches!(t.provider(), "efa" | TCP), "{}", t.provider());
}

/// Buffers whose page ranges share a start but not an end get two registrations, and close
/// releases both (shm reports a leaked one as -FI_EBUSY from fi_close(domain)).
#[test]
fn registrations_sharing_a_start_are_all_released() {
    // The sends are what is counted: inject off (an injected send registers nothing).
    let mut ts = pair(
        SHM,
        Options {
            max_inject_size: Some(0),
            ..Options::default()
        },
    );
    assert!(ts[0].registers_memory(), "shm asks for FI_MR_VIRT_ADDR");
    let buf = vec![0u8; 3 * 4096];
    let page = (buf.as_ptr() as usize).next_multiple_of(4096) - buf.as_ptr() as usize;
    let mut dst = [0u8; 64];
    // One message inside the page, then one straddling into the next page.
    for (i, off) in [page + 100, page + 4096 - 32].into_iter().enumerate() {
        let r = recv(&mut ts, 1, 0, dst.as_mut_ptr(), 64, i as u64);
        let s = send(&mut ts, 0, 1, &buf[off..off + 64], i as u64);
        assert!(matches!(wait(&mut ts, 0, s), Ok(TestOutcome::Done { .. })));
        assert!(matches!(wait(&mut ts, 1, r), Ok(TestOutcome::Done { .. })));
    }
    assert_eq!(ts[0].registrations(), 2);
    // A buffer inside either region reuses it.
    let s = send(&mut ts, 0, 1, &buf[page + 8..page + 72], 5);
    let r = recv(&mut ts, 1, 0, dst.as_mut_ptr(), 64, 5);
    assert!(matches!(wait(&mut ts, 0, s), Ok(TestOutcome::Done { .. })));
    assert!(matches!(wait(&mut ts, 1, r), Ok(TestOutcome::Done { .. })));
    assert_eq!(ts[0].registrations(), 2);
    // invalidate drops what covers the buffer, before it is freed.
    let base = buf.as_ptr() as u64;
    assert_eq!(
        ts[0].invalidate_range(base, buf.len() as u64),
        Ok(super::Invalidated {
            closed: 2,
            deferred: 0
        })
    );
    assert_eq!(ts[0].registrations(), 0);
    close(&mut ts);
}

#[test]
fn attributes_come_from_the_chosen_entry() {
    let tcp = pair(TCP, Options::default());
    let a = tcp[0].attrs();
    eprintln!("{a:?} name {:?}", tcp[0].local_name());
    assert_eq!(a.provider, TCP);
    assert_eq!(
        a.addr_format,
        libfabric_sys::FI_SOCKADDR_IN,
        "tcp on lo: IPv4 addresses"
    );
    assert!(
        !tcp[0].registers_memory(),
        "tcp;ofi_rxm asks for no registration here"
    );
    assert!(a.tx_size > 0 && a.rx_size > 0);
    assert_eq!(
        (a.data_progress, a.control_progress),
        (
            libfabric_sys::FI_PROGRESS_MANUAL,
            libfabric_sys::FI_PROGRESS_MANUAL
        ),
        "tcp: manual progress asked for and granted"
    );
    let shm = pair(SHM, Options::default());
    let a = shm[0].attrs();
    eprintln!(
        "{a:?} name {:?}",
        String::from_utf8_lossy(&shm[0].local_name())
    );
    assert_eq!(a.provider, SHM);
    assert_eq!(a.addr_format, libfabric_sys::FI_ADDR_STR);
    assert_ne!(a.mr_mode & libfabric_sys::FI_MR_VIRT_ADDR, 0);
    assert_eq!(
        a.data_progress,
        libfabric_sys::FI_PROGRESS_MANUAL,
        "shm: manual data progress"
    );
    assert!(shm[0].registers_memory());
    assert_eq!(tcp[0].name(), "libfabric/tcp;ofi_rxm");
}

/// A message shorter than its receive completes with the message's size (the caller, which
/// knows the expected size, decides; `Done.size` is what arrived).
#[test]
fn shorter_message_reports_its_size() {
    for p in [TCP, SHM] {
        let mut ts = pair(p, Options::default());
        let mut dst = vec![0u8; 64];
        let src = pattern(9, 32);
        let r = recv(&mut ts, 1, 0, dst.as_mut_ptr(), 64, 77);
        let s = send(&mut ts, 0, 1, &src, 77);
        assert_eq!(
            wait(&mut ts, 0, s),
            Ok(TestOutcome::Done { size: 32 }),
            "{p}"
        );
        assert_eq!(
            wait(&mut ts, 1, r),
            Ok(TestOutcome::Done { size: 32 }),
            "{p}"
        );
        assert_eq!(&dst[..32], &src[..], "{p}");
        close(&mut ts);
    }
}

/// Sends up to the inject size go out with `fi_tinject`: the post reports the payload copied,
/// the buffer may be overwritten as soon as it returns, the provider owns nothing (no CQ entry
/// will come) and the first test answers `Done`. One byte more takes `fi_tsend`.
fn inject(provider: &str) {
    let mut ts = pair(provider, Options::default());
    let inject = ts[0].inject_size();
    assert!(
        inject > 0 && inject == ts[0].attrs().inject_size,
        "{provider}: inject size {inject}, entry {}",
        ts[0].attrs().inject_size
    );
    eprintln!("{provider}: inject size {inject} B");
    let mut idx = 0;
    for (size, injected) in [(8, true), (inject, true), (inject + 1, false)] {
        idx += 1;
        let tag = make_tag(4, 0, 0, 1, idx);
        let want = pattern(u64::from(idx) + 77, size);
        let mut src = want.clone();
        let mut dst = vec![0u8; size];
        let r = recv(&mut ts, 1, 0, dst.as_mut_ptr(), size, tag);
        let before = ts[0].injected_sends();
        let mut posted = None;
        drive("post send", &mut ts, |ts| {
            // SAFETY: `src` lives until the request finished (waited for below), and is
            // written only after a post that reported the payload copied.
            match unsafe { ts[0].isend(1, src.as_ptr(), size as u64, tag) } {
                Ok(Some(p)) => {
                    posted = Some(p);
                    true
                }
                Ok(None) => false,
                Err(e) => panic!("{provider}: isend {size} B: {e}"),
            }
        });
        let p = posted.expect("posted");
        let case = format!("{provider} {size} B (inject size {inject})");
        assert_eq!(p.payload_copied, injected, "{case}: payload_copied");
        assert_eq!(
            ts[0].injected_sends() - before,
            u64::from(injected),
            "{case}: injected sends"
        );
        if injected {
            assert_eq!(ts[0].in_flight(), 0, "{case}: the provider owns nothing");
            assert_eq!(
                ts[0].registrations(),
                0,
                "{case}: an inject registers nothing"
            );
            // The buffer is reusable at return: the receiver still gets what was sent.
            src.fill(0xA5);
            // Done at once, without reading the CQ for it.
            assert_eq!(
                ts[0].test(p.request),
                Ok(TestOutcome::Done { size: size as u64 }),
                "{case}"
            );
        } else {
            assert_eq!(
                ts[0].in_flight(),
                1,
                "{case}: in flight until its completion"
            );
            assert_eq!(
                wait(&mut ts, 0, p.request),
                Ok(TestOutcome::Done { size: size as u64 }),
                "{case}"
            );
        }
        assert_eq!(
            wait(&mut ts, 1, r),
            Ok(TestOutcome::Done { size: size as u64 }),
            "{case}: receive"
        );
        assert!(dst == want, "{case}: data differ");
    }
    assert_eq!(ts[0].injected_sends(), 2);
    close(&mut ts);
}

#[test]
fn tcp_small_sends_inject() {
    inject(TCP);
}

#[test]
fn shm_small_sends_inject() {
    inject(SHM);
}

#[test]
fn max_inject_size_zero_sends_everything_through_the_cq() {
    let mut ts = pair(
        SHM,
        Options {
            max_inject_size: Some(0),
            ..Options::default()
        },
    );
    assert_eq!(ts[0].inject_size(), 0);
    let mut dst = [0u8; 8];
    let tag = make_tag(4, 0, 0, 2, 1);
    let r = recv(&mut ts, 1, 0, dst.as_mut_ptr(), 8, tag);
    // `send` checks payload_copied is false (inject size 0).
    let s = send(&mut ts, 0, 1, b"8 bytes!", tag);
    assert_eq!(wait(&mut ts, 0, s), Ok(TestOutcome::Done { size: 8 }));
    assert_eq!(wait(&mut ts, 1, r), Ok(TestOutcome::Done { size: 8 }));
    assert_eq!(&dst, b"8 bytes!");
    assert_eq!(ts[0].injected_sends(), 0);
    close(&mut ts);
}

/// `poll` reads the CQ at every call while a request is in flight, at every
/// `IDLE_READ_EVERY`-th call without one; a rank that posts its receives after the messages
/// came gets every one of them.
fn cq_is_read_only_while_a_request_is_in_flight(provider: &str) {
    let mut ts = pair(provider, Options::default());
    let idle_polls = |t: &mut LibfabricTransport, n: u32| {
        let before = t.cq_reads();
        for _ in 0..n {
            t.poll().expect("poll");
        }
        t.cq_reads() - before
    };
    // A fresh transport: nothing in flight, one read per IDLE_READ_EVERY polls.
    assert_eq!(
        idle_polls(&mut ts[1], 4 * IDLE_READ_EVERY),
        4,
        "{provider}: idle reads"
    );
    // Rank 0 sends two messages (one injected, one larger than the inject size) before rank 1
    // posts anything.
    let small = pattern(91, 8);
    let large = pattern(92, ts[0].inject_size() + 1);
    let (t1, t2) = (make_tag(4, 0, 0, 3, 1), make_tag(4, 0, 0, 3, 2));
    let s1 = send(&mut ts, 0, 1, &small, t1);
    let s2 = send(&mut ts, 0, 1, &large, t2);
    let mut got_small = vec![0u8; small.len()];
    let mut got_large = vec![0u8; large.len()];
    // Rank 1 still idle while they wait in the provider.
    assert!(
        idle_polls(&mut ts[1], 2 * IDLE_READ_EVERY) <= 2,
        "{provider}: messages waiting, no receive posted: idle reads only"
    );
    let r1 = recv(&mut ts, 1, 0, got_small.as_mut_ptr(), small.len(), t1);
    // Posted: the next poll reads (and finds the message).
    assert_eq!(ts[1].in_flight(), 1, "{provider}: the receive is in flight");
    assert_eq!(idle_polls(&mut ts[1], 1), 1, "{provider}: a receive posted");
    let r2 = recv(&mut ts, 1, 0, got_large.as_mut_ptr(), large.len(), t2);
    let n = |v: &Vec<u8>| TestOutcome::Done {
        size: v.len() as u64,
    };
    assert_eq!(wait(&mut ts, 1, r1), Ok(n(&small)), "{provider}: receive 1");
    assert_eq!(wait(&mut ts, 1, r2), Ok(n(&large)), "{provider}: receive 2");
    assert_eq!(ts[0].test(s1), Ok(n(&small)), "{provider}: send 1");
    assert_eq!(wait(&mut ts, 0, s2), Ok(n(&large)), "{provider}: send 2");
    assert!(
        got_small == small && got_large == large,
        "{provider}: data differ"
    );
    // Done: idle again.
    assert_eq!(
        idle_polls(&mut ts[1], 2 * IDLE_READ_EVERY),
        2,
        "{provider}: idle again"
    );
    close(&mut ts);
}

#[test]
fn tcp_cq_is_read_only_while_a_request_is_in_flight() {
    cq_is_read_only_while_a_request_is_in_flight(TCP);
}

#[test]
fn shm_cq_is_read_only_while_a_request_is_in_flight() {
    cq_is_read_only_while_a_request_is_in_flight(SHM);
}

/// An anonymous private mapping of `len` bytes; `at` maps it at exactly that address
/// (`MAP_FIXED`: replaces the pages there with new, zeroed ones).
fn map_pages(at: Option<*mut u8>, len: usize) -> *mut u8 {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | at.map_or(0, |_| libc::MAP_FIXED);
    // SAFETY: an anonymous mapping; with MAP_FIXED `at` is a mapping of `len` bytes this test
    // made and no longer uses (its requests have finished).
    let p = unsafe {
        libc::mmap(
            at.map_or(std::ptr::null_mut(), |p| p.cast()),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap of {len} B");
    p.cast()
}

/// A buffer invalidated and reused mid-run: sends from a mapping, a receive into it that is in
/// flight while the range is invalidated (its registration is detached, closed when it
/// completes), then the mapping replaced by new pages at the same address (what a free and a
/// new allocation do) and sent from again: a fresh registration, and every byte arrives.
fn invalidate_and_reuse(provider: &str, register_memory: Option<bool>) {
    const LEN: usize = 4 * 4096;
    let mut ts = pair(
        provider,
        Options {
            max_inject_size: Some(0),
            register_memory,
            ..Options::default()
        },
    );
    assert!(
        ts[0].registers_memory(),
        "{provider}: the test needs registration"
    );
    let buf = map_pages(None, LEN);
    let addr = buf as u64;
    let mut dst = vec![0u8; LEN];
    let step = |ts: &mut Pair, dst: &mut Vec<u8>, seed: u64, tag: u64| {
        let p = pattern(seed, LEN);
        // SAFETY: `buf` is a live mapping of LEN bytes no request uses now.
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), buf, LEN) };
        dst.fill(0);
        let r = recv(ts, 1, 0, dst.as_mut_ptr(), LEN, tag);
        // SAFETY: as above; the send finishes before the mapping changes.
        let src = unsafe { std::slice::from_raw_parts(buf, LEN) };
        let s = send(ts, 0, 1, src, tag);
        assert!(matches!(wait(ts, 0, s), Ok(TestOutcome::Done { .. })));
        assert!(matches!(wait(ts, 1, r), Ok(TestOutcome::Done { .. })));
        assert!(*dst == p, "{provider}: bytes of pattern {seed} differ");
    };
    step(&mut ts, &mut dst, 1, 1);
    let s0 = ts[0].registration_stats();
    assert_eq!((s0.registered, s0.closed), (1, 0));

    // A receive into the buffer is in flight while its range is invalidated.
    let r = recv(&mut ts, 0, 1, buf, LEN, 2);
    let before = ts[0].registration_stats();
    assert_eq!(
        ts[0].invalidate_range(addr, LEN as u64),
        Ok(super::Invalidated {
            closed: 0,
            deferred: 1
        })
    );
    assert_eq!(
        ts[0].registration_stats().closed,
        before.closed,
        "not closed under the receive"
    );
    let p2 = pattern(2, LEN);
    let s = send(&mut ts, 1, 0, &p2, 2);
    assert!(matches!(wait(&mut ts, 1, s), Ok(TestOutcome::Done { .. })));
    assert!(matches!(wait(&mut ts, 0, r), Ok(TestOutcome::Done { .. })));
    // SAFETY: the receive finished: the mapping is ours again.
    assert!(unsafe { std::slice::from_raw_parts(buf, LEN) } == &p2[..]);
    let after = ts[0].registration_stats();
    assert_eq!(
        after.closed,
        before.closed + 1,
        "the detached registration closes when its receive completes"
    );
    assert_eq!(ts[0].registrations(), 0);

    // Free and reallocate at the same address: new pages, registered afresh.
    Transport::invalidate(&mut ts[0], addr, LEN as u64).expect("nothing left to invalidate");
    let again = map_pages(Some(buf), LEN);
    assert_eq!(again, buf, "MAP_FIXED maps at the same address");
    step(&mut ts, &mut dst, 3, 3);
    let s3 = ts[0].registration_stats();
    assert_eq!(s3.registered, after.registered + 1, "a fresh registration");
    assert_eq!(s3.invalidated, 1);
    close(&mut ts);
    let end = ts[0].registration_stats();
    assert_eq!(end.registered, end.closed, "every registration closed once");
    // SAFETY: every request on the mapping finished and both endpoints are closed.
    assert_eq!(unsafe { libc::munmap(buf.cast(), LEN) }, 0);
}

#[test]
fn shm_invalidate_and_reuse_mid_run() {
    invalidate_and_reuse(SHM, None);
}

#[test]
fn tcp_invalidate_and_reuse_mid_run_with_forced_registration() {
    invalidate_and_reuse(TCP, Some(true));
}

/// Sends to a peer whose endpoint is gone answer "not now" on `tcp;ofi_rxm` (each post starts a
/// connection that is refused); after 50 ms of that the transport spaces them itself instead of
/// starting thousands of refused connections a second (`backoff.rs`).
#[test]
fn tcp_sends_to_a_vanished_peer_are_spaced() {
    let [mut a, mut b] = pair(TCP, NO_INJECT);
    b.close().expect("close rank 1");
    drop(b);
    // Let rank 0's rxm see the connection go (a post made before it reads the shutdown is
    // queued on the old connection and accepted; seen once on a loaded machine).
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_millis(100) {
        let _ = a.poll();
        std::thread::sleep(Duration::from_millis(1));
    }
    let buf = vec![7u8; 4096];
    let start = Instant::now();
    let (mut refused, mut rounds) = (0u64, 0u64);
    // Bounded by time and count; the assertions are on counts only.
    while start.elapsed() < Duration::from_millis(400) && rounds < 5_000_000 {
        rounds += 1;
        // SAFETY: `buf` outlives the loop; a post that is accepted would be waited for below.
        match unsafe { a.isend(1, buf.as_ptr(), buf.len() as u64, 9) } {
            Ok(None) => refused += 1,
            Ok(Some(p)) => panic!("a send to a closed endpoint was accepted: {p:?}"),
            Err(e) => {
                // Also acceptable: the provider fails the post outright.
                eprintln!("post failed: {e}");
                break;
            }
        }
    }
    eprintln!(
        "{rounds} posts in {:?}: {refused} answered not now, {} of them by the spacing",
        start.elapsed(),
        a.spaced_posts()
    );
    assert!(refused > 0, "no post was answered");
    assert!(
        a.spaced_posts() > 0,
        "after 50 ms of -FI_EAGAIN the posts are spaced by the transport"
    );
    assert!(
        a.spaced_posts() * 2 > refused,
        "most of the answers come from the spacing, not from a new connection attempt: \
         {} of {refused}",
        a.spaced_posts()
    );
    a.close().expect("close rank 0");
}
