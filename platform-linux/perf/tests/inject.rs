//! `proxy-perf --inject FAULT[:RANK]` (issue 13, fault injection): each in-process fault run
//! with a 1 s no-progress limit, asserting every rank's final status, that every task's
//! completion is reported exactly once, and that no byte is wrong where the run completes; and
//! that the timeout path writes the state dump. The runs are started together and waited for
//! (bounded by `timeout`), so the test takes about the longest run (a few seconds).

mod common;
use common::argv;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_proxy-perf");

/// A run of `fault` on rank 1 of 2 (one rank per proxy queue, so a stalled driver stops one
/// rank only) in mode `mode`: `thread` (workers and device threads), `caller` (caller-driven
/// queues, polled devices) or `played` (workers that play the devices).
fn start(fault: &str, mode: &str) -> Child {
    start_on(fault, 1, mode)
}

/// As [`start`], with the fault on rank `target` (0 or 1).
fn start_on(fault: &str, target: u32, mode: &str) -> Child {
    let (driver, device) = match mode {
        "caller" => ("caller", "polled"),
        "played" => ("thread", "polled"),
        _ => ("thread", "thread"),
    };
    let line = format!(
        "all-reduce --ranks 2 -b 64 -e 64 -n 3 -w 1 --ranks-per-proxy 1
         --driver {driver} --device {device} --inject {fault}:{target}"
    );
    Command::new("timeout")
        .args(["60", BIN])
        .args(argv(&line))
        .env("NEURON_RT_EXEC_TIMEOUT", "1")
        .env("NEURON_RT_LOG_LEVEL", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start proxy-perf")
}

/// `(exit code, stdout, stderr)` of a finished run.
fn finish(child: Child) -> (i32, String, String) {
    let out = child.wait_with_output().expect("proxy-perf ran");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One rank's `# rank R: final status S at execution E (tasks T, reported U, twice W)` line.
struct Final {
    status: String,
    /// The execution the status belongs to (`None`: nothing reported).
    execution: Option<u32>,
    tasks: u64,
    reported: u64,
    twice: u64,
}

/// The final lines of ranks 0 and 1, by rank.
fn finals(stdout: &str) -> Vec<Final> {
    let mut v = Vec::new();
    for r in 0..2 {
        let head = format!("# rank {r}: final status ");
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix(&head))
            .unwrap_or_else(|| panic!("no final status of rank {r}:\n{stdout}"));
        let (status, rest) = line.split_once(" at execution ").unwrap();
        let (execution, rest) = rest.split_once(' ').unwrap();
        let nums: Vec<u64> = rest
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect();
        v.push(Final {
            status: status.to_string(),
            execution: execution.parse().ok(),
            tasks: nums[0],
            reported: nums[1],
            twice: nums[2],
        });
    }
    v
}

/// The peer's (rank 0's) end is consistent with the target's failure at execution `failed`:
/// the status belongs to an execution the failure explains. A peer whose barrier comes after
/// the collective times out in that very execution (the target never arrives); one whose
/// barrier passed at the launch either completed it (its bytes had arrived: `NRT_SUCCESS`,
/// and the run stopped) or timed out in the next one, which the target never began.
fn peer_explained(peer: &Final, expected: &str, failed: u32) -> bool {
    match (peer.status.as_str(), peer.execution) {
        (s, Some(e)) if s == expected => e == failed || e == failed + 1,
        ("NRT_SUCCESS", Some(e)) => e == failed && expected == "NRT_TIMEOUT",
        _ => false,
    }
}

#[test]
fn every_fault_ends_with_its_status_and_every_completion_reported_once() {
    let t0 = Instant::now();
    // (fault, driver, expected final status of rank 0 (a peer), of rank 1 (the target), exit 0?)
    let cases: [(&str, &str, &str, &str, bool); 10] = [
        (
            "stall-device",
            "thread",
            "NRT_TIMEOUT",
            "NRT_TIMEOUT",
            false,
        ),
        (
            "stall-device",
            "caller",
            "NRT_TIMEOUT",
            "NRT_TIMEOUT",
            false,
        ),
        ("stall-rank", "thread", "NRT_TIMEOUT", "NRT_TIMEOUT", false),
        ("drop-comm", "caller", "NRT_TIMEOUT", "NRT_CLOSED", false),
        (
            "error-completion",
            "thread",
            "NRT_TIMEOUT",
            "NRT_NETWORK_PROXY_FAILURE",
            false,
        ),
        ("eagain-storm", "thread", "NRT_SUCCESS", "NRT_SUCCESS", true),
        ("eagain-storm", "caller", "NRT_SUCCESS", "NRT_SUCCESS", true),
        (
            "stall-device",
            "played",
            "NRT_TIMEOUT",
            "NRT_TIMEOUT",
            false,
        ),
        (
            "error-completion",
            "played",
            "NRT_TIMEOUT",
            "NRT_NETWORK_PROXY_FAILURE",
            false,
        ),
        ("eagain-storm", "played", "NRT_SUCCESS", "NRT_SUCCESS", true),
    ];
    let children: Vec<Child> = cases.iter().map(|c| start(c.0, c.1)).collect();
    for (c, child) in cases.iter().zip(children) {
        let (fault, driver, peer, target, ok) = *c;
        let (code, out, err) = finish(child);
        let what = format!("{fault} ({driver}): exit {code}\n{out}\n{err}");
        let f = finals(&out);
        assert_eq!(f[1].status, target, "the target's final status: {what}");
        if peer == "NRT_SUCCESS" || fault != "error-completion" {
            assert_eq!(f[0].status, peer, "the peer's final status: {what}");
        } else {
            // A peer's end after an error completion at the target: a race between the stop
            // and the peer's next execution, settled by naming the execution.
            let failed = f[1]
                .execution
                .expect("the target's failure names its execution");
            assert!(
                peer_explained(&f[0], peer, failed),
                "the peer's end is explained by the target's failure at execution {failed}: \
                 {what}"
            );
        }
        for (r, fin) in f.iter().enumerate() {
            assert!(fin.tasks > 0, "rank {r} submitted nothing: {what}");
            assert_eq!(
                (fin.reported, fin.twice),
                (fin.tasks, 0),
                "rank {r}: every completion reported exactly once: {what}"
            );
            assert!(
                fin.execution.is_some(),
                "rank {r} names an execution: {what}"
            );
        }
        if ok {
            assert_eq!(code, 0, "{what}");
            let rows: Vec<&str> = out
                .lines()
                .filter(|l| l.trim_start().starts_with("64 "))
                .collect();
            assert_eq!(rows.len(), 1, "{what}");
            let cols: Vec<&str> = rows[0].split_whitespace().collect();
            assert_eq!((cols[8], cols[12]), ("0", "0"), "no byte wrong: {what}");
        } else {
            assert_eq!(code, 2, "a failed rank fails the run: {what}");
            // The exit names the cause: the lowest failed rank whose status is not a timeout
            // (what its peers' timeouts follow from), else the lowest failed rank.
            let failed: Vec<usize> = (0..2).filter(|&r| f[r].status != "NRT_SUCCESS").collect();
            let cause = failed
                .iter()
                .copied()
                .find(|&r| f[r].status != "NRT_TIMEOUT")
                .or(failed.first().copied())
                .expect("a failed rank");
            // A planted stall is named itself: the statuses follow from it.
            let named = if fault == "stall-rank" {
                "rank 1: its driving thread stalled (--inject stall-rank)".to_string()
            } else {
                format!("rank {cause} ended {}", f[cause].status)
            };
            assert!(
                err.contains(&format!("proxy-perf: error: {named}")),
                "the exit names the status: {what}"
            );
        }
        if fault == "stall-device" {
            // The timeout path writes the state dump, before the task ends: the network task
            // still waiting for its device.
            assert!(err.contains("reason=timeout"), "{what}");
            assert!(
                err.contains("kind=network state=WaitingDeviceTrigger"),
                "{what}"
            );
            // Its line names the collective, the algorithm and why (issue 26).
            assert!(
                err.lines()
                    .any(|l| l.contains("kind=network state=WaitingDeviceTrigger")
                        && l.contains(" collective=all-reduce algo=")
                        && l.contains(" why=")),
                "{what}"
            );
            assert!(err.contains(" end lines="), "{what}");
        }
    }
    println!("fault runs took {:?}", t0.elapsed());
    let _ = Duration::ZERO;
}

/// The word of `line` right after `key`, parsed.
fn word_after<T: std::str::FromStr>(line: &str, key: &str) -> Option<T> {
    line.split(key).nth(1)?.split(' ').next()?.parse().ok()
}

/// A worker stuck inside a call ticks no more, so its tasks cannot time out: the producer
/// waiting for rank 0's records (rank 0 is waited for first) reads the queue's heartbeat and
/// ends its wait after the no-progress limit and a second, with the queue's dump written
/// without its driver, long before the stall (three times the limit and a second) ends.
/// Without the heartbeat the wait lasts the whole stall and ends with the task's timeout.
#[test]
fn a_worker_that_stops_ticking_ends_its_producers_wait() {
    let (code, out, err) = finish(start_on("stall-rank", 0, "thread"));
    let what = format!("exit {code}\n{out}\n{err}");
    assert_eq!(code, 2, "{what}");
    let line = err
        .lines()
        .find(|l| l.contains("the run failed: rank 0: the driving thread of proxy queue"))
        .unwrap_or_else(|| panic!("no stuck-driver error: {what}"));
    assert!(
        line.contains("it is stuck inside a call; tasks ["),
        "{what}"
    );
    // "began no tick for S s": at least the limit and a second.
    let quiet: f64 =
        word_after(line, "began no tick for ").unwrap_or_else(|| panic!("no quiet time: {what}"));
    assert!(quiet >= 2.0, "called stuck after {quiet} s only: {what}");
    // The dump came first, written by the requester: the stuck driver answers nothing. Its
    // header carries the heartbeat.
    let dump = err
        .lines()
        .find(|l| l.contains("reason=not-answered"))
        .unwrap_or_else(|| panic!("no dump without the driver: {what}"));
    assert!(dump.contains(" driver=ticking "), "{what}");
    let ticks: u32 = word_after(dump, " ticks=")
        .unwrap_or_else(|| panic!("no ticks= in the dump header: {what}"));
    assert!(ticks > 0, "{what}");
    // Every completion is still reported once (the run releases the stall and settles).
    for (r, fin) in finals(&out).iter().enumerate() {
        assert_eq!(
            (fin.reported, fin.twice),
            (fin.tasks, 0),
            "rank {r}: {what}"
        );
    }
}

/// `exit-rank` kills a process of a multi-process run: with the in-process transport it is
/// refused (it would end the whole run's process), and an unknown fault or rank is a usage
/// error naming it.
#[test]
fn exit_rank_needs_processes_and_bad_faults_are_named() {
    // Each line exits 2 naming why; a 1 s no-progress limit bounds the one that runs.
    let refused = |line: &str, why: &str| {
        let o = Command::new(BIN)
            .args(argv(line))
            .env("NEURON_RT_EXEC_TIMEOUT", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{line}: {err}");
        assert!(err.contains(why), "{line}: {err}");
    };
    let all_reduce = "all-reduce --ranks 2 -b 8 -e 8";
    refused(
        &format!("{all_reduce} --inject exit-rank"),
        "exit-rank needs ranks as processes (--transport libfabric or shm)",
    );
    refused(
        &format!("{all_reduce} --inject stall-device:5"),
        "stall-device:5: not a rank",
    );
    // The transport faults wrap the in-process transport: elsewhere they are refused, not
    // silently left out.
    refused(
        &format!("{all_reduce} --transport libfabric --inject stall-rank"),
        "--inject stall-rank wraps the in-process",
    );
    // A stall that never began (a broadcast's last rank only receives) fails the run: it
    // planted nothing.
    refused(
        "broadcast --ranks 2 -b 64 -e 64 -n 3 -w 1 --inject stall-rank",
        "rank 1 posted fewer than 2 sends",
    );
    refused(
        &format!("{all_reduce} --inject melt"),
        "unknown fault 'melt'",
    );
}

/// `exit-rank`: rank 1's process exits once its first execution is submitted; rank 0 (the
/// other process) must end with a failure and report it, and the launcher names the exit.
///
/// Rank 0 must end `NRT_NETWORK_PROXY_FAILURE` with a log line naming rank 1: the dead-peer
/// check over the bootstrap connections (docs/design.md §9 "Liveness") sees the lost process
/// long before the no-progress limit (5 s here) would end the task with `NRT_TIMEOUT`.
#[cfg(feature = "libfabric")]
#[test]
fn exit_rank_fails_the_surviving_rank() {
    let out = Command::new("timeout")
        .args(["90", BIN])
        .args(argv(
            "all-reduce --transport libfabric --provider tcp --ranks 2 -b 64 -e 64 -n 3 -w 1
             --inject exit-rank:1",
        ))
        .env("NEURON_RT_EXEC_TIMEOUT", "5")
        .env("NEURON_RT_BOOTSTRAP_TIMEOUT", "30")
        .env("NEURON_RT_LOG_LEVEL", "error")
        .output()
        .expect("run proxy-perf");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let what = format!("exit {:?}\n{stdout}\n{stderr}", out.status.code());
    assert_eq!(out.status.code(), Some(2), "{what}");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("# rank 0: final status "))
        .unwrap_or_else(|| panic!("no final status of rank 0: {what}"));
    assert!(line.starts_with("NRT_NETWORK_PROXY_FAILURE "), "{what}");
    assert!(stderr.contains("lost rank 1"), "{what}");
    assert!(line.ends_with("twice 0)"), "{what}");
    assert!(
        stderr.contains("proxy-perf: rank 1 ended with exit status: 3"),
        "{what}"
    );
}
