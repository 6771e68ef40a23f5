//! Multi-process tests over libfabric on loopback (127.0.0.1, `FI_TCP_IFACE=lo`): this test
//! binary re-executes itself, one process per rank, through the bootstrap's local launcher.
//! A child runs the ignored test `child_entry` with `MULTIPROC_SCENARIO` set and reports one
//! `RESULT key=value ...` line on stdout.
//!
//! * send/recv through the full proxy protocol (a `Comm` per process, `start` / `progress`
//!   on host-memory words, a device thread that writes `-1`, raises host indices and waits on
//!   the semaphores), 2 and 4 processes, `tcp;ofi_rxm` and shm, 1 B, 4 KiB + 1, 1 MiB, 16 MiB,
//!   two executions, data checked;
//! * a peer killed mid-transfer: the survivor's progress fails (`NRT_NETWORK_PROXY_FAILURE`) or
//!   its no-progress timeout reports `NRT_TIMEOUT`, within the configured timeout, and its comm
//!   is dropped without hanging;
//! * bootstrap with one rank missing (a leaf, or the root): every present rank reports the error
//!   within the timeout;
//! * connections that do not speak the bootstrap protocol are ignored.
//!
//! Every wait is bounded by time (and the device/proxy loops by the no-progress timeout); the
//! process groups run one at a time (the machine has few cores).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use proxy_bootstrap::launch::{LocalLaunch, OutStream};

#[path = "multiproc/child.rs"]
mod child;
#[path = "multiproc/soak.rs"]
mod soak;

const SCENARIO_ENV: &str = "MULTIPROC_SCENARIO";
const PROVIDER_ENV: &str = "MULTIPROC_PROVIDER";
const VICTIM_ENV: &str = "MULTIPROC_VICTIM";
/// When the killed-peer scenarios' fault comes (`child::FaultPhase`).
const PHASE_ENV: &str = "MULTIPROC_PHASE";
const TASK_TIMEOUT_ENV: &str = "MULTIPROC_TASK_TIMEOUT_MS";
/// The children's teardown drains in ms (default 1000); passed through from the test's own
/// environment.
const DRAIN_ENV: &str = "MULTIPROC_DRAIN_MS";

const TCP: &str = "tcp;ofi_rxm";
const SHM: &str = "shm";

/// The entry point of every child process (does nothing in a normal test run).
#[test]
#[ignore = "entry point of the child processes of the multi-process tests"]
fn child_entry() {
    if let Ok(s) = std::env::var(SCENARIO_ENV) {
        child::main(&s);
    }
}

/// One process group at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs every child under this command when set (split at spaces), e.g.
/// `MULTIPROC_CHILD_WRAPPER="valgrind -q --error-exitcode=9"`: how the tcp killed-peer crash was
/// investigated (docs/design.md §5, "tcp and a killed peer").
const WRAPPER_ENV: &str = "MULTIPROC_CHILD_WRAPPER";

fn child_command(scenario: &str, provider: &str) -> Command {
    let exe = std::env::current_exe().expect("test binary path");
    let wrapper = std::env::var(WRAPPER_ENV).unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    let mut c = match words.next() {
        Some(w) => {
            let mut c = Command::new(w);
            c.args(words).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    c.args([
        "child_entry",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env(SCENARIO_ENV, scenario)
    .env(PROVIDER_ENV, provider)
    // tcp on the loopback interface only; never another address.
    .env("FI_TCP_IFACE", "lo")
    .env_remove("FI_PROVIDER")
    .env("NEURON_RT_BOOTSTRAP_TIMEOUT", "60")
    .env(
        "NEURON_RT_LOG_LEVEL",
        std::env::var("NEURON_RT_LOG_LEVEL").unwrap_or_else(|_| "WARN".into()),
    );
    c
}

/// The `RESULT` line of `rank`, as key → value.
fn result(l: &LocalLaunch, rank: u32) -> HashMap<String, String> {
    let lines = l.output(rank, OutStream::Stdout);
    let line = lines
        .iter()
        .rev()
        .find(|s| s.starts_with("RESULT "))
        .unwrap_or_else(|| panic!("rank {rank} printed no RESULT line; stdout: {lines:#?}"));
    line["RESULT ".len()..]
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn stderr_of(l: &LocalLaunch, rank: u32) -> String {
    l.output(rank, OutStream::Stderr).join("\n")
}

/// Launches `ranks` of `nranks` with `scenario`, waits at most `limit`.
fn launch(
    nranks: u32,
    ranks: &[u32],
    scenario: &str,
    provider: &str,
    env: &[(&str, &str)],
    limit: Duration,
) -> (LocalLaunch, Vec<proxy_bootstrap::launch::RankExit>) {
    let mut l = LocalLaunch::reserving(nranks, true).unwrap();
    for &r in ranks {
        let mut c = child_command(scenario, provider);
        for (k, v) in env {
            c.env(k, v);
        }
        l.spawn(r, c).expect("spawn");
    }
    let exits = l.wait_all(limit);
    (l, exits)
}

// ---------------------------------------------------------------------------------------------
// send/recv through the full proxy protocol

fn sendrecv(nranks: u32, provider: &str) {
    exchange("sendrecv", nranks, provider);
}

/// Runs `scenario` ("sendrecv": the comm driven directly; "driver": through proxy queues,
/// network and barrier tasks) on `nranks` processes; every rank must check every byte.
fn exchange(scenario: &str, nranks: u32, provider: &str) {
    let _g = serial();
    let ranks: Vec<u32> = (0..nranks).collect();
    let start = Instant::now();
    let (l, exits) = launch(
        nranks,
        &ranks,
        scenario,
        provider,
        &[],
        Duration::from_secs(240),
    );
    for e in &exits {
        assert!(
            e.success(),
            "{provider} x{nranks}: rank {} ended {:?} (killed at deadline: {}); stderr:\n{}",
            e.rank,
            e.status,
            e.killed_at_deadline,
            stderr_of(&l, e.rank)
        );
        let r = result(&l, e.rank);
        assert_eq!(r["status"], "ok", "rank {}: {r:?}", e.rank);
        assert_eq!(
            r["checked_bytes"],
            child::expected_checked_bytes().to_string()
        );
    }
    eprintln!(
        "{provider} x{nranks}: {} processes passed in {:.1} s",
        nranks,
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn sendrecv_2_processes_tcp() {
    sendrecv(2, TCP);
}

#[test]
fn sendrecv_4_processes_tcp() {
    sendrecv(4, TCP);
}

#[test]
fn sendrecv_2_processes_shm() {
    sendrecv(2, SHM);
}

#[test]
fn sendrecv_4_processes_shm() {
    sendrecv(4, SHM);
}

// ---------------------------------------------------------------------------------------------
// send/recv through the driver: proxy queue worker, network tasks, barrier tasks across processes

#[test]
fn driver_2_processes_tcp() {
    exchange("driver", 2, TCP);
}

#[test]
fn driver_4_processes_tcp() {
    exchange("driver", 4, TCP);
}

#[test]
fn driver_2_processes_shm() {
    exchange("driver", 2, SHM);
}

// ---------------------------------------------------------------------------------------------
// a peer killed mid-transfer

/// Removes what our killed children left in `/dev/shm` (the library's clean-up).
fn remove_shm_regions(pids: &[u32]) {
    proxy_libfabric::shm_cma::remove_shm_names_of(pids);
}

/// Kills `victim` once it is mid-transfer; the survivor's comm must fail (or time out) within
/// the task timeout and be dropped without hanging. `scenario` "kill" drives the comm directly,
/// "driver_kill" through a proxy queue (the network task ends DONE with the failure).
fn killed_peer(provider: &str, victim: u32) {
    kill_scenario("kill", provider, victim);
}

fn kill_scenario(scenario: &str, provider: &str, victim: u32) {
    kill_in_phase(scenario, provider, victim, "mid");
}

/// [`kill_scenario`] with the fault in `phase` (`child::FaultPhase`): the victim is killed when
/// the line that phase waits for appears (the victim's `KILL_ME` mid-transfer, the survivor's
/// `IN_TEARDOWN` or `ABORTED`), or exits by itself (`connect`). The survivor must end cleanly
/// (no signal, no crash report), with a status that names the failure, within the task timeout
/// plus the teardown's bounded drains.
fn kill_in_phase(scenario: &str, provider: &str, victim: u32, phase: &str) {
    let _g = serial();
    // Slower children (MULTIPROC_CHILD_WRAPPER=valgrind ...) need a longer no-progress timeout.
    let task_timeout_ms: u64 = std::env::var("MULTIPROC_KILL_TASK_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let mut l = LocalLaunch::reserving(2, true).unwrap();
    let tt = task_timeout_ms.to_string();
    let v = victim.to_string();
    for r in 0..2 {
        let mut c = child_command(scenario, provider);
        c.env(TASK_TIMEOUT_ENV, &tt)
            .env(VICTIM_ENV, &v)
            .env(PHASE_ENV, phase);
        l.spawn(r, c).expect("spawn");
    }
    let pids: Vec<u32> = (0..2).filter_map(|r| l.pid(r)).collect();
    let survivor = 1 - victim;
    let (waiter, line) = match phase {
        "teardown" => (survivor, "IN_TEARDOWN"),
        "abort" => (survivor, "ABORTED"),
        _ => (victim, "KILL_ME"),
    };
    let killed_at = if phase == "connect" {
        Instant::now() // The victim exits by itself after the bootstrap.
    } else {
        let ready = l.wait_line(waiter, Duration::from_secs(120), |s| s == line);
        assert!(
            ready.is_some(),
            "{provider} ({phase}): rank {waiter} never printed {line}; stderr:\n{}",
            stderr_of(&l, waiter)
        );
        if phase == "mid" || phase == "small" {
            // Let the survivor's sends get going, then kill.
            std::thread::sleep(Duration::from_millis(200));
        }
        let at = Instant::now();
        l.kill(victim).expect("kill");
        at
    };
    // Failure detection (at most the task timeout), stop (drain limit 1 s per stream), and the
    // comm's drop (close drain 1 s) are all bounded.
    let slack_s: u64 = std::env::var("MULTIPROC_KILL_SLACK_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let bound = Duration::from_millis(task_timeout_ms) + Duration::from_secs(slack_s);
    let exits = l.wait_all(bound + Duration::from_secs(5));
    remove_shm_regions(&pids);
    let e = exits.iter().find(|e| e.rank == survivor).unwrap();
    let took = killed_at.elapsed();
    assert!(
        e.success(),
        "{provider}: survivor ended {:?} (killed at deadline: {}); stderr:\n{}",
        e.status,
        e.killed_at_deadline,
        stderr_of(&l, survivor)
    );
    let r = result(&l, survivor);
    eprintln!(
        "{provider}: survivor rank {survivor} reported {r:?}, exited {took:?} after the kill"
    );
    let named = match phase {
        // The test cut the run itself; the failure shows in the stops and the bootstrap.
        "teardown" | "abort" => r["status"] == "NRT_CLOSED",
        _ => r["status"] == "NRT_NETWORK_PROXY_FAILURE" || r["status"] == "NRT_TIMEOUT",
    };
    assert!(named, "{provider} ({phase}): survivor: {r:?}");
    // A crash handler's report in the working directory is a crash, whatever the exit code.
    let reports: Vec<_> = std::fs::read_dir(".")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".btr"))
        .map(|e| e.file_name())
        .collect();
    assert!(
        reports.is_empty(),
        "{provider} ({phase}): crash reports {reports:?}"
    );
    if let Some(idle) = r.get("idle_ms") {
        let detect_ms: u64 = idle.parse().unwrap();
        assert!(
            detect_ms <= task_timeout_ms + 1000,
            "{provider}: detected after {detect_ms} ms without progress (timeout \
             {task_timeout_ms} ms)"
        );
    }
    assert!(
        took < bound,
        "{provider}: survivor needed {took:?} after the kill"
    );
    // The survivor's bootstrap noticed the lost peer too.
    assert_ne!(r["boot"], "ok", "{r:?}");
}

#[test]
fn peer_lost_while_connecting_tcp() {
    kill_in_phase("kill", TCP, 1, "connect");
}

#[test]
fn peer_lost_while_connecting_shm() {
    kill_in_phase("kill", SHM, 1, "connect");
}

#[test]
fn killed_peer_with_small_requests_tcp() {
    kill_in_phase("kill", TCP, 1, "small");
}

#[test]
fn killed_peer_with_small_requests_shm() {
    kill_in_phase("kill", SHM, 1, "small");
}

#[test]
fn killed_peer_during_teardown_tcp() {
    kill_in_phase("kill", TCP, 1, "teardown");
}

#[test]
fn killed_peer_during_teardown_shm() {
    kill_in_phase("kill", SHM, 1, "teardown");
}

#[test]
fn killed_peer_after_abort_tcp() {
    kill_in_phase("kill", TCP, 1, "abort");
}

#[test]
fn killed_peer_after_abort_shm() {
    kill_in_phase("kill", SHM, 1, "abort");
}

/// Also run 20 times in a row by ci.sh's `killed_peer` step (docs/design.md §5, "tcp and a
/// killed peer").
#[test]
fn killed_peer_tcp() {
    killed_peer(TCP, 1);
}

#[test]
fn killed_peer_shm() {
    // The root (rank 0) is the victim here: the leaf's bootstrap loses its root.
    killed_peer(SHM, 0);
}

#[test]
fn killed_peer_driver_tcp() {
    kill_scenario("driver_kill", TCP, 0);
}

#[test]
fn killed_peer_driver_shm() {
    kill_scenario("driver_kill", SHM, 1);
}

// ---------------------------------------------------------------------------------------------
// the killed-peer soak

/// One survivor process creates, runs and destroys `MULTIPROC_SOAK_CYCLES` comms (default 12
/// here; ci.sh's soak step runs 200 over tcp and 60 over shm), each with a fresh peer process, every fourth peer killed
/// with 1 MiB sends in flight (rendezvous on tcp, like 16 MiB; the killed-peer tests move 16 MiB)
/// (`multiproc/soak.rs`). After the first 10 cycles, every cycle, killed or not, must leave
/// exactly the fds, threads and libfabric objects (quarantined or in the lease pool) that
/// cycle 10 left (docs/design.md §5).
fn killed_peer_soak(provider: &str) {
    let _g = serial();
    let cycles: usize = std::env::var(soak::CYCLES_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    assert!(cycles > 10, "{}: more than 10 cycles", soak::CYCLES_ENV);
    let mut c = child_command("soak", provider);
    // A killed peer is found by the bootstrap's watch within milliseconds; the no-progress
    // timeout is only a backstop (a loaded machine moves 16 MiB slowly in a debug build).
    c.env(soak::CYCLES_ENV, cycles.to_string())
        .env(child::LARGEST_ENV, (1 << 20).to_string())
        .env(TASK_TIMEOUT_ENV, "10000")
        .env(DRAIN_ENV, "200")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("spawn the survivor");
    let survivor_pid = child.id();
    // Both pipes are read while the survivor runs (a full pipe would block its logging).
    let readers: Vec<_> = [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ]
    .into_iter()
    .map(|mut p| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = p.read_to_string(&mut text);
            text
        })
    })
    .collect();
    // Bounded: 10 s a cycle at the most, then the survivor is killed and the test fails.
    let limit = Duration::from_secs(10 * cycles as u64 + 30);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut texts = readers.into_iter().map(|h| h.join().unwrap_or_default());
    let (out, err) = (texts.next().unwrap(), texts.next().unwrap());
    let tail: String = err.lines().rev().take(40).collect::<Vec<_>>().join("\n");
    assert!(
        status.is_some_and(|s| s.success()),
        "{provider}: soak survivor ended {status:?} after {:?}; stderr (last lines, newest \
         first):\n{tail}",
        start.elapsed()
    );
    let r: HashMap<String, String> = out
        .lines()
        .rev()
        .find(|l| l.starts_with("RESULT "))
        .unwrap_or_else(|| panic!("{provider}: no RESULT line; stdout: {out}"))["RESULT ".len()..]
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert_eq!(r["status"], "ok", "{provider}: {r:?}\n{tail}");
    // Nothing of the survivor outlives it in /dev/shm: a quarantined shm endpoint's region name
    // is unlinked at its teardown (the mapping stays), a closed one's by the provider (its
    // killed peers' names are removed by the survivor, as a harness would).
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("pxyshm_{survivor_pid}_")))
                .collect()
        })
        .unwrap_or_default();
    remove_shm_regions(&[survivor_pid]);
    assert!(
        left.is_empty(),
        "{provider}: the survivor (pid {survivor_pid}) left {left:?} in /dev/shm"
    );
    let list = |k: &str| -> Vec<u64> {
        r.get(k)
            .unwrap_or_else(|| panic!("{provider}: no {k} in the result {r:?}"))
            .split(',')
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let (fds, threads, quarantined, objects) = (
        list("fds"),
        list("threads"),
        list("quarantined"),
        list("objects"),
    );
    assert_eq!(fds.len(), cycles);
    // After the first 10 cycles (two of them killed: the lease pool holds a set by then over
    // tcp), no cycle, killed or not, may leave an fd, a thread or a libfabric object behind:
    // a killed cycle's stuck requests are held, its objects go back to the pool and the next
    // comm reuses them. shm is not pooled: each of its quarantines holds its 5 objects (and no
    // fd: its region is mapped memory).
    // fds are compared with the last of the first 10 cycles of the same kind: over tcp an idle
    // pooled endpoint keeps the connection of its last comm to a peer that exited after the
    // teardown (1 fd, closed by the next lease's first progress), which a killed peer's
    // connection does not (it failed during the cycle).
    let objects_per_quarantine = if provider == SHM { 5 } else { 0 };
    let kills = r["kills"]
        .split(',')
        .map(|k| k == "true")
        .collect::<Vec<_>>();
    let reference = |killed: bool| (0..10).rev().find(|&j| kills[j] == killed).unwrap_or(9);
    for i in 10..cycles {
        let dq = quarantined[i] - quarantined[i - 1];
        assert!(dq <= 1, "{provider}: cycle {i} quarantined {dq} teardowns");
        let j = reference(kills[i]);
        // A kill that lands after the cycle's last transfer fails nothing in flight: the cycle
        // quarantines nothing and ends as an unkilled one (over tcp the pooled endpoint keeps
        // its connection to the peer, one fd more, closed by the next lease). Seen once in 50
        // kills (cycle 39 of 200): compared then with the unkilled reference.
        let clean_kill = kills[i] && dq == 0 && fds[i] == fds[reference(false)];
        assert!(
            fds[i] == fds[j] || clean_kill,
            "{provider}: fds after cycle {i} (killed: {}): {}, after cycle {j}: {}; {r:?}",
            kills[i],
            fds[i],
            fds[j]
        );
        assert_eq!(
            objects[i],
            objects[9] + objects_per_quarantine * (quarantined[i] - quarantined[9]),
            "{provider}: libfabric objects held after cycle {i}: {r:?}"
        );
        assert_eq!(
            threads[i], threads[9],
            "{provider}: threads after cycle {i}: {r:?}"
        );
    }
    let q = quarantined[cycles - 1] - quarantined[9];
    // Memory is reported, not asserted (the allocator keeps freed memory): the mean RSS change
    // of the cycles after cycle 10 that quarantined, and of those that did not.
    let mean_delta = |v: &[u64], quarantining: bool| {
        let d: Vec<f64> = (10..cycles)
            .filter(|&i| (quarantined[i] > quarantined[i - 1]) == quarantining)
            .map(|i| v[i] as f64 - v[i - 1] as f64)
            .collect();
        d.iter().sum::<f64>() / d.len().max(1) as f64
    };
    for (what, v) in [("RSS", list("rss_kib")), ("heap in use", list("heap_kib"))] {
        eprintln!(
            "{provider}: {what} {} KiB after cycle 10, {} KiB at the end; mean change \
             {:.1} KiB per quarantining cycle, {:.1} KiB per other cycle",
            v[9],
            v[cycles - 1],
            mean_delta(&v, true),
            mean_delta(&v, false)
        );
    }
    eprintln!(
        "{provider}: {cycles} cycles ({} killed) in {} s: fds {} at start, {} after cycle 10, {} at \
         the end; libfabric objects held past their comm {} after cycle 10, {} at the end; {} \
         teardowns quarantined requests in all ({q} after cycle 10; {} objects outside the pool, \
         {} registrations, {} requests); lease pool: {}",
        r["killed"],
        r["seconds"],
        r["fds_start"],
        fds[9],
        fds[cycles - 1],
        objects[9],
        objects[cycles - 1],
        quarantined[cycles - 1],
        r["q_objects"],
        r["q_registrations"],
        r["q_requests"],
        r["pool"]
    );
}

#[test]
fn killed_peer_soak_tcp() {
    killed_peer_soak(TCP);
}

#[test]
fn killed_peer_soak_shm() {
    killed_peer_soak(SHM);
}

// ---------------------------------------------------------------------------------------------
// bootstrap

/// Launches `present` of 4 ranks with bootstrap timeout `timeout_s`: every present rank must
/// report `NRT_TIMEOUT` within the timeout, the root naming the missing rank, and (with a timeout
/// above 10 s) every rank must have warned at 10 s with its cumulative wait.
fn missing_rank(present: &[u32], missing: u32, timeout_s: u32) {
    let _g = serial();
    let t = timeout_s.to_string();
    let (l, exits) = launch(
        4,
        present,
        "bootstrap",
        TCP,
        &[("NEURON_RT_BOOTSTRAP_TIMEOUT", &t)],
        Duration::from_secs(u64::from(timeout_s) + 30),
    );
    assert_eq!(exits.len(), present.len());
    for e in &exits {
        assert!(
            e.success(),
            "rank {} ended {:?}; stderr:\n{}",
            e.rank,
            e.status,
            stderr_of(&l, e.rank)
        );
        let r = result(&l, e.rank);
        assert_eq!(r["status"], "NRT_TIMEOUT", "rank {}: {r:?}", e.rank);
        let ms: f64 = r["elapsed_ms"].parse().unwrap();
        assert!(
            ms <= f64::from(timeout_s) * 1000.0 + 700.0,
            "rank {} reported after {ms} ms (timeout {timeout_s} s)",
            e.rank
        );
        let err = stderr_of(&l, e.rank);
        assert!(err.contains("timed out"), "rank {}: {err}", e.rank);
        if e.rank == 0 {
            assert!(
                err.contains(&format!("ranks [{missing}]")),
                "root must name the missing rank: {err}"
            );
        }
        if timeout_s > 10 {
            assert!(
                err.contains("still waiting for") && err.contains("after 10.0 s"),
                "rank {} must warn at 10 s: {err}",
                e.rank
            );
        }
    }
}

#[test]
fn bootstrap_missing_leaf_fails_every_present_rank() {
    missing_rank(&[0, 1, 3], 2, 11);
}

#[test]
fn bootstrap_missing_root_fails_every_present_rank() {
    missing_rank(&[1, 2, 3], 0, 3);
}

#[test]
fn bootstrap_ignores_connections_without_the_magic() {
    let _g = serial();
    let mut l = LocalLaunch::reserving(3, true).unwrap();
    l.spawn(0, child_command("bootstrap", TCP)).unwrap();
    // Strangers reach the root before the real ranks: an HTTP request, one that goes silent.
    let start = Instant::now();
    let mut http = loop {
        match TcpStream::connect(l.root()) {
            Ok(s) => break s,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "root never listened: {e}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let _silent = TcpStream::connect(l.root()).unwrap();
    for r in 1..3 {
        l.spawn(r, child_command("bootstrap", TCP)).unwrap();
    }
    let exits = l.wait_all(Duration::from_secs(60));
    for e in &exits {
        assert!(
            e.success(),
            "rank {}: {:?}\n{}",
            e.rank,
            e.status,
            stderr_of(&l, e.rank)
        );
        let r = result(&l, e.rank);
        assert_eq!(r["status"], "ok", "rank {}: {r:?}", e.rank);
    }
    let comm_ids: Vec<String> = (0..3).map(|r| result(&l, r)["comm_id"].clone()).collect();
    assert!(comm_ids.windows(2).all(|w| w[0] == w[1]), "{comm_ids:?}");
    assert!(
        stderr_of(&l, 0).contains("does not speak the bootstrap protocol"),
        "the root must log the dropped stranger:\n{}",
        stderr_of(&l, 0)
    );
}
