//! Dead-peer detection end to end (docs/design.md §9, "Liveness"): `proxy-perf` with ranks as
//! processes over libfabric shm (with the `libfabric` feature) and over the engine's own shared
//! memory (every build) on this machine (bootstrap on 127.0.0.1).
//!
//! * A rank killed (SIGKILL) mid-collective: every surviving rank's task ends
//!   `NRT_NETWORK_PROXY_FAILURE` and its log names the dead rank; the exec timeout is set far
//!   above the test's deadline, so only the bootstrap watch can end the run in time (the shm
//!   provider itself never notices a dead peer).
//! * A rank stopped (SIGSTOP) for longer than the bootstrap's `TCP_USER_TIMEOUT`, then resumed
//!   (SIGCONT): slow but alive, so the run completes with every byte checked.
//!
//! Every wait is bounded by a deadline that fails the test (the process group is killed then).

mod common;
use common::{argv, remove_shm_regions};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_proxy-perf");

/// The exec timeout the runs get: far above every deadline here.
const EXEC_TIMEOUT_S: &str = "30";

/// proxy-perf in a process group of its own: its stdout lines as they come, its stderr at the end.
struct Run {
    child: Child,
    lines: mpsc::Receiver<String>,
    out: Vec<String>,
    err: JoinHandle<String>,
}

impl Run {
    fn start(extra: &[&str]) -> Self {
        let mut child = Command::new(BIN)
            .args(extra)
            .env("NEURON_RT_EXEC_TIMEOUT", EXEC_TIMEOUT_S)
            .env("NEURON_RT_BOOTSTRAP_TIMEOUT", "20")
            .env("FI_TCP_IFACE", "lo")
            .env_remove("FI_PROVIDER")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("run proxy-perf");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut stderr = child.stderr.take().unwrap();
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Self {
            child,
            lines,
            out: Vec::new(),
            err,
        }
    }

    /// Waits for a stdout line matching `f`, at most until `deadline`.
    fn wait_line(&mut self, deadline: Instant, f: impl Fn(&str) -> bool) -> bool {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(l) => {
                    let hit = f(&l);
                    self.out.push(l);
                    if hit {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
    }

    /// The launcher's pid (also the process group's id).
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Waits for the launcher's exit at most until `deadline` (then kills the group): the exit
    /// code (`None` when killed at the deadline), all stdout, all stderr.
    fn finish(mut self, deadline: Instant) -> (Option<i32>, String, String) {
        let code = loop {
            if let Some(st) = self.child.try_wait().expect("wait for proxy-perf") {
                break st.code();
            }
            if Instant::now() > deadline {
                kill_group(self.pid());
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.out.extend(self.lines.try_iter());
        let err = self.err.join().unwrap_or_default();
        (code, self.out.join("\n"), err)
    }
}

fn kill_group(pgid: i32) {
    // SAFETY: kill(2) on the process group this test created (its leader is our child, not
    // yet reaped, so the group id cannot have been reused).
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

/// The rank processes of `launcher` (its children), as (pid, rank), once all `n` are up
/// (at most until `deadline`).
fn rank_processes(launcher: i32, n: usize, deadline: Instant) -> Vec<(i32, u32)> {
    loop {
        let children =
            std::fs::read_to_string(format!("/proc/{launcher}/task/{launcher}/children"))
                .unwrap_or_default();
        let ranks: Vec<(i32, u32)> = children
            .split_whitespace()
            .filter_map(|p| {
                let pid: i32 = p.parse().ok()?;
                let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
                let rank = env
                    .split(|&b| b == 0)
                    .find_map(|kv| kv.strip_prefix(b"PROXY_RANK="))
                    .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())?;
                Some((pid, rank))
            })
            .collect();
        if ranks.len() == n || Instant::now() > deadline {
            return ranks;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The state letter of `/proc/<pid>/stat` (`T` = stopped).
#[cfg(feature = "libfabric")]
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name's closing parenthesis.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[cfg(feature = "libfabric")]
fn data_row(l: &str) -> bool {
    !l.starts_with('#') && l.split_whitespace().count() >= 13
}

/// Kills rank `victim` of 3 mid-run; every survivor must end its task
/// `NRT_NETWORK_PROXY_FAILURE` naming the victim, well before the exec timeout.
fn killed_rank(transport: &str, victim: u32) {
    let start = Instant::now();
    let mut v = argv("all-reduce --ranks 3 -b 256K -e 256K -n 1000000 -w 0 -c 0");
    v.extend(argv(transport));
    let mut run = Run::start(&v);
    let ranks = rank_processes(run.pid(), 3, start + Duration::from_secs(60));
    // The table's header is printed once every rank is set up (before the first collective).
    let header = run.wait_line(start + Duration::from_secs(60), |l| {
        l.contains("(elements)")
    });
    let pids: Vec<i32> = ranks.iter().map(|(p, _)| *p).collect();
    if ranks.len() != 3 || !header {
        let (_, out, err) = run.finish(Instant::now());
        remove_shm_regions(&pids);
        panic!("the ranks never got going: {ranks:?}\n{out}\n{err}");
    }
    // Some executions in flight, then the kill.
    std::thread::sleep(Duration::from_millis(300));
    let (pid, _) = *ranks.iter().find(|(_, r)| *r == victim).unwrap();
    // SAFETY: kill(2) on a rank process, a child of the launcher this test started (not reaped
    // yet: still running or a zombie, so the pid is not reused).
    unsafe { libc::kill(pid, libc::SIGKILL) };
    // Far below the exec timeout (30 s): only the bootstrap watch can end the run by then.
    let (code, out, err) = run.finish(Instant::now() + Duration::from_secs(15));
    remove_shm_regions(&pids);
    assert_eq!(
        code,
        Some(2),
        "the run must end on its own, with an error\n{out}\n{err}"
    );
    assert!(
        err.contains(&format!("rank {victim} ended with signal: 9")),
        "{err}"
    );
    for (_, r) in ranks.iter().filter(|(_, r)| *r != victim) {
        let tag = format!("[rank {r}] ");
        let mine: Vec<&str> = err.lines().filter_map(|l| l.strip_prefix(&tag)).collect();
        // A survivor already spinning in libfabric shm on the lock the victim died holding is
        // ended by the shm watchdog (libfabric `exits.rs`), which names the victim instead. A
        // root ended so first reports the victim lost on the bootstrap: the other survivor
        // still names the victim, not the root (a CI run failed on that before).
        if mine.iter().any(|l| {
            l.contains("a call into libfabric shm has spun")
                && l.contains(&format!("on the lock of rank {victim} "))
        }) {
            continue;
        }
        assert!(
            mine.iter().any(|l| l.contains("proxy-perf: error:")
                && l.contains("ended NRT_NETWORK_PROXY_FAILURE")),
            "rank {r}: its task must end NRT_NETWORK_PROXY_FAILURE:\n{}",
            mine.join("\n")
        );
        assert!(
            mine.iter()
                .any(|l| l.contains(&format!("lost rank {victim}"))),
            "rank {r}: the failure must name rank {victim}:\n{}",
            mine.join("\n")
        );
        assert!(
            // (A teardown may still time out draining a send to the dead peer: not a task.)
            !mine
                .iter()
                .any(|l| l.contains("ended NRT_TIMEOUT") || l.contains("within the timeout")),
            "rank {r}: found by the watch, not the exec timeout:\n{}",
            mine.join("\n")
        );
    }
}

#[cfg(feature = "libfabric")]
const LIBFABRIC_SHM: &str = "--transport libfabric --provider shm";
/// The engine's own shared memory (`proxy-shm`): no lock a dead peer could hold, so only the
/// bootstrap watch is at work.
const OWN_SHM: &str = "--transport shm";

#[cfg(feature = "libfabric")]
#[test]
fn a_killed_leaf_fails_every_survivor_naming_it() {
    // A leaf: the root sees it lost and tells the other leaf (`Lost`).
    killed_rank(LIBFABRIC_SHM, 2);
}

#[cfg(feature = "libfabric")]
#[test]
fn a_killed_root_fails_every_survivor_naming_it() {
    killed_rank(LIBFABRIC_SHM, 0);
}

#[test]
fn over_own_shm_a_killed_leaf_or_root_fails_every_survivor_naming_it() {
    killed_rank(OWN_SHM, 2);
    killed_rank(OWN_SHM, 0);
}

/// A rank stopped for longer than the bootstrap's TCP_USER_TIMEOUT (its kernel still answers)
/// and resumed: the run completes, every byte checked.
#[cfg(feature = "libfabric")]
#[test]
fn a_stopped_and_resumed_rank_does_not_fail() {
    let stop_for = proxy_bootstrap::PEER_TIMEOUT + Duration::from_millis(500);
    let start = Instant::now();
    let mut run = Run::start(&argv(
        "all-reduce --transport libfabric --provider shm --ranks 3 -b 8 -e 512K -f 4 -n 3 -w 1
         -c 1",
    ));
    let ranks = rank_processes(run.pid(), 3, start + Duration::from_secs(60));
    let first_row = run.wait_line(start + Duration::from_secs(60), data_row);
    let pids: Vec<i32> = ranks.iter().map(|(p, _)| *p).collect();
    let Some(&(pid, _)) = ranks.iter().find(|(_, r)| *r == 1) else {
        let (_, out, err) = run.finish(Instant::now());
        panic!("no rank 1 among {ranks:?}\n{out}\n{err}");
    };
    assert!(first_row, "no data row");
    // SAFETY: kill(2) on rank 1's process, a child of the launcher this test started (not
    // reaped: the pid is not reused).
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // The stop is delivered asynchronously: wait (bounded) until the process shows it.
    let stopped_by = Instant::now() + Duration::from_secs(2);
    let mut stopped = proc_state(pid);
    while stopped != Some('T') && Instant::now() < stopped_by {
        std::thread::sleep(Duration::from_millis(1));
        stopped = proc_state(pid);
    }
    let running = run.child.try_wait().expect("wait").is_none();
    std::thread::sleep(stop_for);
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let (code, out, err) = run.finish(Instant::now() + Duration::from_secs(60));
    remove_shm_regions(&pids);
    assert_eq!(
        (stopped, running),
        (Some('T'), true),
        "rank 1 must have been stopped (state {stopped:?}) while the run was unfinished \
         (launcher running: {running})\n{out}\n{err}"
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(!err.contains("lost rank"), "{err}");
    let rows: Vec<&str> = out.lines().filter(|l| data_row(l)).collect();
    assert_eq!(rows.len(), 9, "8 B .. 512 KiB by 4: {out}");
    for r in rows {
        let cols: Vec<&str> = r.split_whitespace().collect();
        assert_eq!(
            (cols[8], cols[12]),
            ("0", "0"),
            "#wrong out of place, in place: {r}"
        );
    }
}
