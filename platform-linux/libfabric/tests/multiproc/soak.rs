//! The killed-peer soak's survivor (scenario `soak`): one long-lived process that creates,
//! runs and destroys `MULTIPROC_SOAK_CYCLES` comms (default 200) with a fresh peer process each,
//! every fourth peer killed mid-collective (1 MiB sends in flight: rendezvous on tcp, as 16 MiB), and reports what it held
//! after each cycle: open fds, threads, the process's libfabric quarantine
//! (`proxy_libfabric::quarantine_stats`) and its endpoint lease pool (`pool_stats`).
//!
//! The parent test checks that after the first 10 cycles nothing grows but memory: the same fds,
//! threads and libfabric objects (held by the quarantine or the lease pool) after every later
//! cycle, killed or not (docs/design.md §5, "Teardown with requests the provider never
//! finished").

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use proxy_bootstrap::launch::free_loopback_root;
use proxy_bootstrap::BootstrapConfig;
use proxy_libfabric::{pool_stats, quarantine_stats};

use super::child::{finish, sendrecv_run, setup_with};
use super::{child_command, PROVIDER_ENV, VICTIM_ENV};

/// Number of cycles (`MULTIPROC_SOAK_CYCLES`, default 200).
pub const CYCLES_ENV: &str = "MULTIPROC_SOAK_CYCLES";
/// libfabric objects of one pooled set: fabric, domain, CQ, AV, endpoint.
const OBJECTS_PER_SET: u64 = 5;
/// Every `KILL_EVERY`-th cycle's peer is killed mid-collective.
pub const KILL_EVERY: u32 = 4;

fn count_dir(path: &str) -> usize {
    std::fs::read_dir(path).map_or(0, |d| d.count())
}

/// Resident set size in KiB (`VmRSS` of /proc/self/status; 0 when unreadable).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Bytes the C allocator has handed out and not taken back, in KiB (glibc's `mallinfo2`:
/// `uordblks + hblkhd`): unlike the RSS, it falls again when memory is freed, so a steady
/// growth is a leak (libfabric's allocations included), not the allocator keeping pages.
fn heap_kib() -> u64 {
    // SAFETY: mallinfo2 has no preconditions; it only reads the allocator's counters.
    let m = unsafe { libc::mallinfo2() };
    ((m.uordblks + m.hblkhd) / 1024) as u64
}

/// The thread count, given at most 500 ms to come down to `baseline`: a thread of a torn-down
/// comm that is still exiting (seen once in about 100 cycles) is not a leaked thread; one that
/// stays is, and the count then shows it.
fn settled_threads(baseline: usize) -> usize {
    let mut n = count_dir("/proc/self/task");
    for _ in 0..100 {
        if n <= baseline {
            break;
        }
        thread::sleep(Duration::from_millis(5));
        n = count_dir("/proc/self/task");
    }
    n
}

/// Waits at most `limit` for `child`, killing it then; never blocks longer.
fn reap(child: &mut Child, limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The survivor's loop; prints one `RESULT` line and exits.
pub fn soak() -> ! {
    let provider = std::env::var(PROVIDER_ENV).expect("provider");
    let cycles: u32 = std::env::var(CYCLES_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    // Per cycle: killed?, fds, threads, quarantined teardowns, RSS and heap in use (KiB), and
    // libfabric objects held open past their comm (quarantined, or 5 per pooled set) after it.
    let mut rows: Vec<(bool, usize, usize, u64, u64, u64, u64)> = Vec::new();
    let fds_start = count_dir("/proc/self/fd");
    let threads_start = count_dir("/proc/self/task");
    let start = Instant::now();
    for i in 0..cycles {
        let kill = i % KILL_EVERY == KILL_EVERY - 1;
        let root = free_loopback_root().expect("a free port on 127.0.0.1");
        let mut peer = child_command(if kill { "kill" } else { "sendrecv" }, &provider)
            .env(VICTIM_ENV, "1")
            .env("PROXY_RANK", "1")
            .env("PROXY_NRANKS", "2")
            .env("NEURON_RT_ROOT_COMM_ID", root.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the peer");
        // The peer's stdout: a killed cycle's peer is killed 100 ms after it announces that it
        // is mid-transfer (as the killed-peer tests do); everything else is read and dropped.
        let out = peer.stdout.take().expect("piped stdout");
        let pid = peer.id() as libc::pid_t;
        let watcher = thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if kill && line == "KILL_ME" {
                    thread::sleep(Duration::from_millis(100));
                    // SAFETY: kill(2) with the pid of our own child, not yet reaped (the main
                    // thread reaps it only after this thread has ended).
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        });
        let mut cfg = BootstrapConfig::new(0, 2, root);
        cfg.timeout = Duration::from_secs(60);
        let fields = sendrecv_run(setup_with(cfg, kill.then_some(1), false));
        let status = fields
            .iter()
            .find(|(k, _)| *k == "status")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let _ = watcher.join();
        reap(&mut peer, Duration::from_secs(30));
        // A killed peer cannot unlink its shm region: the harness does (as the killed-peer
        // tests do), so a later process with the same pid finds the name free.
        super::remove_shm_regions(&[pid as u32]);
        let expected = if kill {
            status == "NRT_NETWORK_PROXY_FAILURE" || status == "NRT_TIMEOUT"
        } else {
            status == "ok"
        };
        if !expected {
            finish(&[
                ("status", "unexpected".into()),
                ("cycle", i.to_string()),
                ("killed", kill.to_string()),
                ("cycle_status", status),
            ]);
        }
        rows.push((
            kill,
            count_dir("/proc/self/fd"),
            settled_threads(threads_start),
            quarantine_stats().transports,
            rss_kib(),
            heap_kib(),
            quarantine_stats().objects + OBJECTS_PER_SET * pool_stats().sets,
        ));
    }
    let q = quarantine_stats();
    let fmt = |v: Vec<String>| v.join(",");
    finish(&[
        ("status", "ok".into()),
        ("cycles", cycles.to_string()),
        ("killed", rows.iter().filter(|r| r.0).count().to_string()),
        ("seconds", format!("{:.1}", start.elapsed().as_secs_f64())),
        ("fds_start", fds_start.to_string()),
        ("fds", fmt(rows.iter().map(|r| r.1.to_string()).collect())),
        (
            "threads",
            fmt(rows.iter().map(|r| r.2.to_string()).collect()),
        ),
        (
            "quarantined",
            fmt(rows.iter().map(|r| r.3.to_string()).collect()),
        ),
        ("kills", fmt(rows.iter().map(|r| r.0.to_string()).collect())),
        (
            "rss_kib",
            fmt(rows.iter().map(|r| r.4.to_string()).collect()),
        ),
        (
            "heap_kib",
            fmt(rows.iter().map(|r| r.5.to_string()).collect()),
        ),
        (
            "objects",
            fmt(rows.iter().map(|r| r.6.to_string()).collect()),
        ),
        ("pool", pool_stats().to_string().replace(' ', ",")),
        ("q_objects", q.objects.to_string()),
        ("q_registrations", q.registrations.to_string()),
        ("q_requests", q.requests.to_string()),
    ])
}
