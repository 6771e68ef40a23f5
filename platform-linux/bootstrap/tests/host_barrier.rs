//! Multi-process tests of the hierarchical [`HostBarrier`] on loopback: this test binary
//! re-executes itself, one process per rank, through the bootstrap's local launcher (the
//! style of `proxy-libfabric`'s `tests/multiproc.rs`). A child runs the ignored test
//! `child_entry` with `HB_SCENARIO` set and prints one `RESULT key=value ...` line.
//!
//! Every child records its arrival generation in a shared counters file (`write_at` before
//! `arrive`) and, once generation `g` has passed, reads every rank's counter: each must be `g`
//! or `g + 1` (a rank that passed `g` may already have arrived at `g + 1`, never further). A
//! rank that passed `g` before everyone arrived would see a counter below `g`.
//!
//! * 3 processes on one host × 200 generations;
//! * two comms (two barriers) interleaved in each of 3 processes, 200 and 133 generations;
//! * two simulated hosts (host keys given to [`HostBarrierConfig`]), 2 + 2 processes × 100
//!   generations: the leaders meet over the bootstrap (group barrier), followers through the
//!   region, while another thread of each process keeps taking the bootstrap's lock;
//! * a process that exits without closing its bootstrap (after generation 5) fails generation 6
//!   of the others (`NRT_NETWORK_PROXY_FAILURE`), on the leader and on the follower;
//! * `/dev/shm` has no region of the run left once the first generation has passed (every
//!   leader unlinked its file before it returned from set-up) and after the processes exit.
//!
//! Every wait is bounded: each poll loop by a 30 s deadline, each process group by 120 s.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use proxy_bootstrap::launch::{free_loopback_root, LocalLaunch, OutStream};
use proxy_bootstrap::{
    Bootstrap, BootstrapConfig, HostBarrier, HostBarrierConfig, SharedBootstrap,
    HOST_BARRIER_PREFIX,
};
use proxy_core::driver::task::{BarrierChannel, BarrierTicket};
use proxy_core::NrtStatus;

const SCENARIO_ENV: &str = "HB_SCENARIO";
const COUNTERS_ENV: &str = "HB_COUNTERS";
const POLL_DEADLINE: Duration = Duration::from_secs(30);
const GROUP_LIMIT: Duration = Duration::from_secs(120);

/// The entry point of every child process (does nothing in a normal test run).
#[test]
#[ignore = "entry point of the child processes of the host barrier tests"]
fn child_entry() {
    if let Ok(s) = std::env::var(SCENARIO_ENV) {
        child(&s);
    }
}

/// One process group at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// This run's regions in /dev/shm (their names start with the prefix and the root port).
fn leftovers(port: u16) -> Vec<String> {
    let want = format!("{HOST_BARRIER_PREFIX}{port}-");
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&want))
                .collect()
        })
        .unwrap_or_default()
}

/// One rank's counters of one comm: `slot` selects the comm's block of `nranks` words.
struct Counters {
    file: File,
    nranks: u32,
}

impl Counters {
    fn open(path: &Path, nranks: u32) -> Self {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        Self { file, nranks }
    }
    fn off(&self, slot: u32, rank: u32) -> u64 {
        4 * u64::from(slot * self.nranks + rank)
    }
    fn write(&self, slot: u32, rank: u32, g: u32) {
        self.file
            .write_all_at(&g.to_le_bytes(), self.off(slot, rank))
            .unwrap();
    }
    fn read(&self, slot: u32, rank: u32) -> u32 {
        let mut b = [0u8; 4];
        self.file
            .read_exact_at(&mut b, self.off(slot, rank))
            .unwrap();
        u32::from_le_bytes(b)
    }
    /// Ranks whose counter is outside `[g, g + 1]` once `g` has passed.
    fn violations(&self, slot: u32, g: u32) -> u32 {
        (0..self.nranks)
            .filter(|&r| {
                let c = self.read(slot, r);
                c < g || c > g + 1
            })
            .count() as u32
    }
}

/// One comm's barrier in a child, with its checks.
struct Checked {
    hb: HostBarrier,
    slot: u32,
    gen: u32,
    ticket: Option<BarrierTicket>,
    violations: u32,
}

impl Checked {
    fn arrive(&mut self, c: &Counters, rank: u32) {
        self.gen += 1;
        c.write(self.slot, rank, self.gen);
        let t = self.hb.arrive().unwrap();
        assert_eq!(t.0, self.gen);
        self.ticket = Some(t);
    }
    /// Polls once; `true` when the pending generation has passed (then checks the counters).
    fn poll(&mut self, c: &Counters) -> bool {
        let Some(t) = self.ticket else { return true };
        if !self.hb.poll(t).unwrap() {
            return false;
        }
        self.violations += c.violations(self.slot, self.gen);
        // A passed ticket stays passed.
        assert!(self.hb.poll(t).unwrap());
        self.ticket = None;
        true
    }
}

fn wait_all(bs: &mut [&mut Checked], c: &Counters, what: &str) {
    let start = Instant::now();
    loop {
        let mut done = true;
        for b in bs.iter_mut() {
            done &= b.poll(c);
        }
        if done {
            return;
        }
        assert!(
            start.elapsed() < POLL_DEADLINE,
            "{what}: barrier did not pass within {POLL_DEADLINE:?}"
        );
        std::thread::yield_now();
    }
}

/// Ranks 0 and 1 wait at generation 6 for rank 2, which exits after generation 5 without
/// closing its bootstrap: both must fail (the root sees the closed connection, aborts rank 1).
fn child_lost(boot: &SharedBootstrap, rank: u32, c: &Counters) {
    let mut a = Checked {
        hb: HostBarrier::setup(boot, &HostBarrierConfig::new(9)).unwrap(),
        slot: 0,
        gen: 0,
        ticket: None,
        violations: 0,
    };
    for _ in 0..5 {
        a.arrive(c, rank);
        wait_all(&mut [&mut a], c, "before the loss");
    }
    if rank == 2 {
        // A crash: no Bye, the connection just closes.
        std::process::exit(3);
    }
    // The loss may already be known when this rank arrives (the leader marks the region
    // failed): then the arrival itself fails; else the poll does.
    let start = Instant::now();
    let err = match a.hb.arrive() {
        Err(e) => e,
        Ok(t) => loop {
            match a.hb.poll(t) {
                Ok(false) => {}
                Ok(true) => panic!("rank {rank}: generation 6 passed without rank 2"),
                Err(e) => break e,
            }
            assert!(
                start.elapsed() < POLL_DEADLINE,
                "rank {rank}: the loss of rank 2 not noticed within {POLL_DEADLINE:?}"
            );
            std::thread::yield_now();
        },
    };
    assert!(
        !a.hb.waiting().load(std::sync::atomic::Ordering::Relaxed),
        "a failed barrier is not waited for"
    );
    // Later calls fail too (the region says so).
    assert!(a.hb.arrive().is_err());
    println!(
        "RESULT gens={} violations={} error={}",
        a.gen,
        a.violations,
        err.code()
    );
}

fn child(scenario: &str) {
    let mut cfg = BootstrapConfig::from_env(None, None, None).unwrap();
    cfg.timeout = Duration::from_secs(60);
    let port = cfg.root.port();
    let boot = SharedBootstrap::new(Bootstrap::init(&cfg).unwrap());
    let (rank, nranks) = (cfg.rank, cfg.nranks);
    let counters = Counters::open(&PathBuf::from(std::env::var(COUNTERS_ENV).unwrap()), nranks);
    if scenario == "lost_follower" {
        child_lost(&boot, rank, &counters);
        return;
    }
    let host_key = (scenario == "two_hosts").then(|| format!("simhost-{}", rank / 2).into_bytes());
    let make = |comm: u32, slot: u32| Checked {
        hb: HostBarrier::setup(
            &boot,
            &HostBarrierConfig {
                comm,
                host_key: host_key.clone(),
                ..HostBarrierConfig::default()
            },
        )
        .unwrap(),
        slot,
        gen: 0,
        ticket: None,
        violations: 0,
    };
    let mut a = make(7, 0);
    let mut b = (scenario == "two_comms").then(|| make(8, 1));
    // Two hosts: another thread keeps taking the bootstrap (as the main thread's all-gathers
    // would), so the leaders' try_lock often finds it busy and must answer "not yet".
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hog = (scenario == "two_hosts").then(|| {
        let (boot, stop) = (boot.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let g = boot.lock();
                std::thread::sleep(Duration::from_micros(200));
                drop(g);
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    });
    // After the first generation every leader has returned from set-up (it unlinked its file
    // before arriving).
    a.arrive(&counters, rank);
    wait_all(&mut [&mut a], &counters, "first generation");
    let left_after_setup = leftovers(port).len();
    let gens = if scenario == "two_hosts" { 100 } else { 200 };
    for i in 1..gens {
        a.arrive(&counters, rank);
        match b.as_mut() {
            // Interleaved: arrive at both, then poll both in turn.
            Some(b) if i % 3 != 0 => {
                b.arrive(&counters, rank);
                wait_all(&mut [&mut a, b], &counters, "two comms");
            }
            _ => wait_all(&mut [&mut a], &counters, "one comm"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(h) = hog {
        h.join().unwrap();
    }
    let (bgen, bviol) = b.as_ref().map_or((0, 0), |b| (b.gen, b.violations));
    println!(
        "RESULT gens={} violations={} b_gens={bgen} b_violations={bviol} hosts={} local={} \
         leader={} cross={} left_after_setup={left_after_setup}",
        a.gen,
        a.violations,
        a.hb.hosts(),
        a.hb.local_ranks(),
        a.hb.is_host_leader() as u8,
        a.hb.cross_host_generations(),
    );
    drop(a);
    drop(b);
    // Everyone done before anyone closes its bootstrap.
    boot.lock().barrier().unwrap();
}

fn result(l: &LocalLaunch, rank: u32) -> HashMap<String, String> {
    let lines = l.output(rank, OutStream::Stdout);
    let line = lines
        .iter()
        .rev()
        .find(|s| s.starts_with("RESULT "))
        .unwrap_or_else(|| {
            panic!(
                "rank {rank} printed no RESULT line; stdout: {lines:#?}; stderr: {:#?}",
                l.output(rank, OutStream::Stderr)
            )
        });
    line["RESULT ".len()..]
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Runs `scenario` on `nranks` processes; returns every rank's RESULT and the root port.
fn run(scenario: &str, nranks: u32) -> (Vec<HashMap<String, String>>, u16) {
    run_expecting(scenario, nranks, &[])
}

/// As [`run`], with `(rank, exit code)` for the ranks that exit otherwise than with 0 (and
/// print no RESULT).
fn run_expecting(
    scenario: &str,
    nranks: u32,
    other_exits: &[(u32, i32)],
) -> (Vec<HashMap<String, String>>, u16) {
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("hb-test-{}-{scenario}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let counters = dir.join("counters");
    std::fs::write(&counters, vec![0u8; 4 * 2 * nranks as usize]).unwrap();
    let root = free_loopback_root().unwrap();
    let mut l = LocalLaunch::new(nranks, root, true);
    for r in 0..nranks {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args([
            "child_entry",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(SCENARIO_ENV, scenario)
        .env(COUNTERS_ENV, &counters);
        l.spawn(r, c).unwrap();
    }
    let exits = l.wait_all(GROUP_LIMIT);
    for e in &exits {
        if let Some(&(_, code)) = other_exits.iter().find(|(r, _)| *r == e.rank) {
            assert_eq!(
                e.status.and_then(|s| s.code()),
                Some(code),
                "rank {} of {scenario}: {e:?}",
                e.rank
            );
            continue;
        }
        assert!(
            e.success(),
            "rank {} of {scenario}: {e:?}; stderr: {:#?}",
            e.rank,
            l.output(e.rank, OutStream::Stderr)
        );
    }
    let res = (0..nranks)
        .filter(|r| !other_exits.iter().any(|(o, _)| o == r))
        .map(|r| result(&l, r))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    (res, root.port())
}

fn num(m: &HashMap<String, String>, k: &str) -> u64 {
    m.get(k)
        .unwrap_or_else(|| panic!("no {k} in {m:?}"))
        .parse()
        .unwrap()
}

#[test]
fn three_processes_one_host_200_generations() {
    let (res, port) = run("one_host", 3);
    for (r, m) in res.iter().enumerate() {
        assert_eq!(num(m, "gens"), 200, "rank {r}");
        assert_eq!(
            num(m, "violations"),
            0,
            "rank {r}: passed before all arrived"
        );
        assert_eq!(num(m, "hosts"), 1);
        assert_eq!(num(m, "local"), 3);
        assert_eq!(num(m, "leader"), u64::from(r == 0));
        assert_eq!(num(m, "cross"), 0, "one host: no group barrier");
        assert_eq!(
            num(m, "left_after_setup"),
            0,
            "rank {r}: a region left in /dev/shm"
        );
    }
    assert_eq!(leftovers(port), Vec::<String>::new(), "after exit");
}

#[test]
fn two_comms_interleaved_keep_their_own_generations() {
    let (res, port) = run("two_comms", 3);
    for (r, m) in res.iter().enumerate() {
        assert_eq!(num(m, "gens"), 200, "rank {r}");
        // i in 1..200 with i % 3 != 0: 133 generations.
        assert_eq!(num(m, "b_gens"), 133, "rank {r}");
        assert_eq!(num(m, "violations"), 0, "rank {r} comm a");
        assert_eq!(num(m, "b_violations"), 0, "rank {r} comm b");
        assert_eq!(num(m, "left_after_setup"), 0, "rank {r}");
    }
    assert_eq!(leftovers(port), Vec::<String>::new(), "after exit");
}

#[test]
fn two_simulated_hosts_meet_through_their_leaders() {
    let (res, port) = run("two_hosts", 4);
    for (r, m) in res.iter().enumerate() {
        assert_eq!(num(m, "gens"), 100, "rank {r}");
        assert_eq!(
            num(m, "violations"),
            0,
            "rank {r}: passed before all arrived"
        );
        assert_eq!(num(m, "hosts"), 2);
        assert_eq!(num(m, "local"), 2);
        let leader = r % 2 == 0;
        assert_eq!(num(m, "leader"), u64::from(leader), "rank {r}");
        // Every generation of a leader went through the group barrier; none of a follower's.
        assert_eq!(num(m, "cross"), if leader { 100 } else { 0 }, "rank {r}");
        assert_eq!(num(m, "left_after_setup"), 0, "rank {r}");
    }
    assert_eq!(leftovers(port), Vec::<String>::new(), "after exit");
}

#[test]
fn a_lost_process_fails_the_barrier_of_the_others() {
    let (res, port) = run_expecting("lost_follower", 3, &[(2, 3)]);
    assert_eq!(res.len(), 2);
    for (r, m) in res.iter().enumerate() {
        assert_eq!(
            num(m, "gens"),
            5,
            "rank {r}: generations passed before the loss"
        );
        assert_eq!(num(m, "violations"), 0, "rank {r}");
        assert_eq!(
            num(m, "error"),
            u64::from(NrtStatus::NetworkProxyFailure.code()),
            "rank {r}"
        );
    }
    assert_eq!(leftovers(port), Vec::<String>::new(), "after exit");
}
