//! Issue 14: the whole protocol end to end. A pairwise combinatorial matrix, generated here,
//! over streams {1, 2, 4} × blocks {1, 3} × early receive {off, on} × early send {off, on} ×
//! index wrap {0, 4} × credits {1, 128} × every collective × ranks {2, 3, 4} × {mem, libfabric
//! tcp, libfabric shm} × {execution, `--loop`} × {caller + polled, worker + device thread}:
//! every pair of values of any two factors meets in at least one cell (21 cells, not the
//! product's 20,736). Each cell runs the `proxy-perf` binary once (out of place and in place,
//! every byte checked) and asserts 0 wrong; every (stream, block) part filed, `start` once per
//! part and execution (once for a whole `--loop` run), the device's schedule `1..=B` per
//! iteration, the op pools flat across executions; and every rank's protocol counters: block
//! switches, early send completions (> 0 when on, 0 when off), receives posted ahead (> 0 where
//! the planner granted credits, at most `--early-recv`), index wraps (> 0 with a wrap below the
//! entries per op), send requests outstanding (at most the credits, equal to them when an op has
//! more entries).
//!
//! Sizes: every (stream, block) gets about 6 FIFO entries per op; the chunk is the transport's
//! copy limit (mem and shm 4096 B, tcp the inject size, 64 B). Early send completions are
//! counted on mem only: libfabric's injected sends are done at the transport when posted. Every
//! run is bounded (a per-run kill after 90 s, the tasks' 20 s no-progress limit). About 20 s in
//! all on this 2-CPU machine (debug build).

mod common;
use common::progress_library;
use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proxy_collectives::planner::Collective;

const BIN: &str = env!("CARGO_BIN_EXE_proxy-perf");

/// The factors and their values (index = level).
const STREAMS: [u32; 3] = [1, 2, 4];
const BLOCKS: [u32; 2] = [1, 3];
/// `--early-recv` when on: the receives posted ahead (`ending_recv_credits`).
const EARLY_RECV_ON: u32 = 2;
const EARLY_RECV: [u32; 2] = [0, EARLY_RECV_ON];
const EARLY_SEND: [bool; 2] = [false, true];
const IDX_WRAP: [u32; 2] = [0, 4];
const CREDITS: [u32; 2] = [1, 128];
const COLLECTIVES: [&str; 6] = [
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "broadcast",
    "send-recv",
    "all-to-all",
];
const RANKS: [u32; 3] = [2, 3, 4];
/// The transports: `mem`, libfabric `tcp`, libfabric `shm`.
const TRANSPORTS: [&str; 3] = ["mem", "tcp", "shm"];
const LOOP: [bool; 2] = [false, true];
const MODES: [[&str; 4]; 2] = [
    ["--driver", "caller", "--device", "polled"],
    ["--driver", "thread", "--device", "thread"],
];

/// The number of levels of each factor, in the order of [`Cell::from_levels`].
const LEVELS: [usize; 11] = [
    STREAMS.len(),
    BLOCKS.len(),
    EARLY_RECV.len(),
    EARLY_SEND.len(),
    IDX_WRAP.len(),
    CREDITS.len(),
    COLLECTIVES.len(),
    RANKS.len(),
    TRANSPORTS.len(),
    LOOP.len(),
    MODES.len(),
];

/// A pairwise covering array over factors with `levels[f]` values each: rows of levels such that
/// for any two factors every pair of their values appears in some row. Greedy and
/// deterministic: each row starts from the smallest uncovered pair and fills the other factors
/// (largest first) with the value that covers most uncovered pairs with the values already set
/// (ties: the value used least so far, then the smallest).
///
/// `allowed` rejects partial rows (unset factors `None`) that must not be run; the seed pairs
/// it rejects are not required.
pub fn pairwise(levels: &[usize], allowed: &dyn Fn(&[Option<usize>]) -> bool) -> Vec<Vec<usize>> {
    let k = levels.len();
    let mut uncovered: BTreeSet<(usize, usize, usize, usize)> = BTreeSet::new();
    for i in 0..k {
        for j in i + 1..k {
            for a in 0..levels[i] {
                for b in 0..levels[j] {
                    uncovered.insert((i, a, j, b));
                }
            }
        }
    }
    uncovered.retain(|&(i, a, j, b)| {
        let mut row = vec![None; k];
        row[i] = Some(a);
        row[j] = Some(b);
        allowed(&row)
    });
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by_key(|&f| std::cmp::Reverse(levels[f]));
    let mut used: Vec<Vec<usize>> = levels.iter().map(|&l| vec![0; l]).collect();
    let mut rows = Vec::new();
    // Bounded: every row covers at least its seed pair.
    let bound = uncovered.len();
    while let Some(&(i, a, j, b)) = uncovered.iter().next() {
        assert!(rows.len() < bound, "the generator did not converge");
        let mut row: Vec<Option<usize>> = vec![None; k];
        row[i] = Some(a);
        row[j] = Some(b);
        for &f in &order {
            if row[f].is_some() {
                continue;
            }
            let gain = |v: usize| {
                (0..k)
                    .filter_map(|g| row[g].map(|w| (g, w)))
                    .filter(|&(g, w)| {
                        let key = if g < f { (g, w, f, v) } else { (f, v, g, w) };
                        uncovered.contains(&key)
                    })
                    .count()
            };
            let v = (0..levels[f])
                .filter(|&v| {
                    let mut r = row.clone();
                    r[f] = Some(v);
                    allowed(&r)
                })
                .max_by_key(|&v| (gain(v), std::cmp::Reverse(used[f][v]), std::cmp::Reverse(v)))
                .expect("the constraint leaves a value for every factor");
            row[f] = Some(v);
        }
        let row: Vec<usize> = row.into_iter().map(|v| v.expect("set")).collect();
        for (f, &v) in row.iter().enumerate() {
            used[f][v] += 1;
            for (g, &w) in row.iter().enumerate().skip(f + 1) {
                uncovered.remove(&(f, v, g, w));
            }
        }
        rows.push(row);
    }
    rows
}

/// One cell of the matrix.
#[derive(Clone, Copy, Debug)]
struct Cell {
    streams: u32,
    blocks: u32,
    early_recv: u32,
    early_send: bool,
    idx_wrap: u32,
    credits: u32,
    collective: &'static str,
    ranks: u32,
    transport: &'static str,
    looped: bool,
    mode: [&'static str; 4],
}

impl Cell {
    fn from_levels(l: &[usize]) -> Self {
        Self {
            streams: STREAMS[l[0]],
            blocks: BLOCKS[l[1]],
            early_recv: EARLY_RECV[l[2]],
            early_send: EARLY_SEND[l[3]],
            idx_wrap: IDX_WRAP[l[4]],
            credits: CREDITS[l[5]],
            collective: COLLECTIVES[l[6]],
            ranks: RANKS[l[7]],
            transport: TRANSPORTS[l[8]],
            looped: LOOP[l[9]],
            mode: MODES[l[10]],
        }
    }

    /// The transport's copy limit: the chunk of the cell.
    fn chunk(&self) -> u64 {
        if self.transport == "tcp" {
            64
        } else {
            4096
        }
    }

    /// About 6 FIFO entries per op in every (stream, block).
    fn size(&self) -> u64 {
        u64::from(self.ranks * self.streams * self.blocks) * 6 * self.chunk()
    }

    /// Timed iterations.
    fn iters(&self) -> u32 {
        3
    }

    fn args(&self, json: &str) -> Vec<String> {
        let mut v: Vec<String> = [
            self.collective,
            "--ranks",
            &self.ranks.to_string(),
            "-b",
            &self.size().to_string(),
            "-e",
            &self.size().to_string(),
            "-n",
            &self.iters().to_string(),
            "-w",
            "1",
            "-c",
            "1",
            "--chunk",
            &self.chunk().to_string(),
            "--streams",
            &self.streams.to_string(),
            "--blocks",
            &self.blocks.to_string(),
            "--early-recv",
            &self.early_recv.to_string(),
            &format!(
                "--early-send={}",
                if self.early_send { "on" } else { "off" }
            ),
            "--idx-wrap",
            &self.idx_wrap.to_string(),
            "--credits",
            &self.credits.to_string(),
            "--json",
            json,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend(self.mode.iter().map(|s| s.to_string()));
        // The algorithm `planned` models: on a crowded host (more rank processes than CPUs)
        // the tuner may pick another (the hierarchy), whose credits are other.
        v.extend(["--algo".to_string(), self.algorithm().to_string()]);
        if self.looped {
            v.push("--loop".into());
        }
        if self.transport != "mem" {
            v.extend(["--transport", "libfabric", "--provider", self.transport].map(String::from));
        }
        v
    }
}

fn cells() -> Vec<Cell> {
    pairwise(&LEVELS, &|_| true)
        .iter()
        .map(|l| Cell::from_levels(l))
        .collect()
}

/// The generator covers every pair of every two factors, with far fewer cells than the
/// product.
#[test]
fn pairwise_covers_every_pair() {
    let rows = pairwise(&LEVELS, &|_| true);
    for i in 0..LEVELS.len() {
        for j in i + 1..LEVELS.len() {
            for a in 0..LEVELS[i] {
                for b in 0..LEVELS[j] {
                    assert!(
                        rows.iter().any(|r| r[i] == a && r[j] == b),
                        "factor {i} = {a} never meets factor {j} = {b}"
                    );
                }
            }
        }
    }
    let product: usize = LEVELS.iter().product();
    // At least the two largest factors' product (6 collectives × 3), far below the product.
    assert!(rows.len() >= 18, "{}", rows.len());
    assert!(rows.len() <= 30, "{} rows", rows.len());
    assert!(product > 100 * rows.len());
    // Every transport gets cells of its own.
    for t in TRANSPORTS {
        assert!(cells().iter().any(|c| c.transport == t));
    }
}

/// What a cell's run printed and wrote.
struct Ran {
    code: Option<i32>,
    out: String,
    err: String,
    json: Option<serde_json::Value>,
    took: Duration,
}

/// Runs one cell's `proxy-perf`, killed (its process group) after 90 s.
fn run(cell: &Cell, n: usize) -> Ran {
    run_with(cell, n, &[])
}

/// [`run`] with `extra` arguments.
fn run_with(cell: &Cell, n: usize, extra: &[String]) -> Ran {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    // Unique per run: the matrix tests run in parallel threads of one process, and their cell
    // numbers overlap (one test's remove_file took another's JSON).
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(
        "proxy-perf-matrix-{}-{run}-{n}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let start = Instant::now();
    let mut child = Command::new(BIN)
        .args(cell.args(path.to_str().expect("utf-8 temp dir")))
        .args(extra)
        .envs([
            ("NEURON_RT_BOOTSTRAP_TIMEOUT", "30"),
            ("NEURON_RT_EXEC_TIMEOUT", "20"),
            ("FI_TCP_IFACE", "lo"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("run proxy-perf");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    let pgid = child.id() as i32;
    let code = loop {
        if let Some(st) = child.try_wait().expect("wait for proxy-perf") {
            break st.code();
        }
        if start.elapsed() > Duration::from_secs(90) {
            // SAFETY: kill(2) on the process group this test created (its leader is our
            // child, not yet reaped, so the group id cannot have been reused).
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let json = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let _ = std::fs::remove_file(&path);
    Ran {
        code,
        out: out.join().unwrap_or_default(),
        err: err.join().unwrap_or_default(),
        json,
        took: start.elapsed(),
    }
}

/// Asserts one cell: exit 0, 0 wrong on both sides, the options in the JSON, and the seam's
/// `start` count: once per filed (stream, block) per rank for the whole timed run with
/// `--loop`, once per execution without.
fn check(cell: &Cell, r: &Ran) {
    let what = format!("{cell:?}");
    assert_eq!(r.code, Some(0), "{what}:\n{}\n{}", r.out, r.err);
    let v = r
        .json
        .as_ref()
        .unwrap_or_else(|| panic!("{what}: no JSON\n{}", r.out));
    let o = &v["protocol_options"];
    assert_eq!(o["streams"], cell.streams, "{what}: {o}");
    assert_eq!(o["blocks"], cell.blocks, "{what}: {o}");
    assert_eq!(o["early_recv_credits"], cell.early_recv, "{what}: {o}");
    assert_eq!(o["early_send"], cell.early_send, "{what}: {o}");
    assert_eq!(o["idx_wrap"], cell.idx_wrap, "{what}: {o}");
    assert_eq!(o["credits"], cell.credits, "{what}: {o}");
    let row = &v["rows"][0];
    for side in ["out_of_place", "in_place"] {
        let m = &row[side];
        assert_eq!(m["wrong"].as_u64(), Some(0), "{what} {side}: {m}");
        let execs = m["timed_device_executions"].as_u64().expect("executions");
        // The device runs the schedule 1..=B once per iteration.
        assert_eq!(
            execs,
            u64::from(cell.ranks * cell.iters() * cell.blocks),
            "{what} {side}: {m}"
        );
        let starts = m["timed_seam_starts"].as_u64().expect("starts");
        // Every (stream, block) of every rank has data at these sizes and is filed.
        let filed = m["filed_blocks"].as_u64().expect("filed_blocks");
        assert_eq!(
            filed,
            u64::from(cell.ranks * cell.streams * cell.blocks),
            "{what} {side}: {m}"
        );
        let want = if cell.looped {
            filed
        } else {
            filed * u64::from(cell.iters())
        };
        assert_eq!(starts, want, "{what} {side}: {m}");
        // The op pools stay as they were after the warm-up through the timed and checked
        // executions (recycled ops are filed again under their own block, none taken anew);
        // `null` with a loaded progress half.
        if let (Some(before), Some(after)) =
            (m["pool_ops_before"].as_u64(), m["pool_ops_after"].as_u64())
        {
            assert!(before > 0, "{what} {side}: {m}");
            assert_eq!(before, after, "{what} {side}: {m}");
        }
    }
}

/// What the planner gives `rank` in the cell (out of place and in place): the most
/// `ending_recv_credits` of any op (the planner lowers `--early-recv` per op to what its
/// program can promise), and the most send entries of any op.
impl Cell {
    /// The algorithm every rank runs (`--algo`): the tuner's pick without a host map (what
    /// [`planned`] plans with), so that the counters do not follow the tuner's view of the
    /// host the cell runs on.
    fn algorithm(&self) -> &'static str {
        proxy_collectives::planner::tuner::pick(&params(self, 0, false)).name()
    }
}

/// The plan parameters of `cell` for `rank` (`in_place` or not), without a host map, the
/// algorithm `auto`.
fn params(cell: &Cell, rank: u32, in_place: bool) -> proxy_collectives::planner::PlanParams {
    use proxy_collectives::planner::{DataType, NecOptions, PlanParams};
    let coll = match cell.collective {
        "all-reduce" => Collective::AllReduce,
        "all-gather" => Collective::AllGather,
        "reduce-scatter" => Collective::ReduceScatter,
        "broadcast" => Collective::Broadcast,
        "send-recv" => Collective::SendRecv,
        _ => Collective::AllToAll,
    };
    // As proxy-perf's rows: the count per rank for the strided collectives, float elements.
    let elems = cell.size() / 4;
    let count = match coll {
        Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
            (elems / u64::from(cell.ranks)).max(1)
        }
        _ => elems,
    };
    let mut p = PlanParams::new(coll, count, DataType::F32, rank, cell.ranks);
    p.chunk_bytes = cell.chunk();
    p.in_place = in_place;
    p.streams = cell.streams;
    p.blocks = cell.blocks;
    p.nec = NecOptions {
        early_recv: cell.early_recv,
        early_send: cell.early_send,
        idx_wrap: cell.idx_wrap,
        credits: cell.credits,
    };
    p
}

fn planned(cell: &Cell, rank: u32) -> (u32, u32) {
    use proxy_collectives::planner::plan_blocks;
    [false, true]
        .into_iter()
        .map(|in_place| {
            let plans = plan_blocks(&params(cell, rank, in_place)).expect("plan");
            let ops = || plans.blocks.iter().flat_map(|b| b.plan.ops.iter());
            (
                ops().map(|o| o.ending_recv_credits).max().unwrap_or(0),
                ops().map(|o| o.tx_entry_cnt).max().unwrap_or(0),
            )
        })
        .fold((0, 0), |a, b| (a.0.max(b.0), a.1.max(b.1)))
}

/// Asserts a cell's protocol counters (per rank, cumulative over the run: warm-up, timed and
/// checked executions of both sides): each option did its work, and nothing it forbids.
fn check_counters(cell: &Cell, v: &serde_json::Value) {
    let what = format!("{cell:?}");
    let ranks = v["ranks"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no ranks: {v}"));
    assert_eq!(ranks.len(), cell.ranks as usize, "{what}: {v}");
    // Executions per side: warm-up, timed (one with --loop), checked.
    let (w, c) = (1u64, 1u64);
    let execs = 2 * if cell.looped {
        w + 1 + c
    } else {
        w + u64::from(cell.iters()) + c
    };
    let parts = u64::from(cell.streams * cell.blocks);
    for r in ranks {
        let p = &r["protocol"];
        let get = |k: &str| {
            p[k].as_u64()
                .unwrap_or_else(|| panic!("{what}: rank {}: no {k}: {p}", r["rank"]))
        };
        let at = format!("{what}: rank {}: {p}", r["rank"]);
        assert_eq!(get("starts"), parts * execs, "{at}");
        if cell.blocks == 1 {
            assert_eq!(get("block_switches"), 0, "{at}");
        } else if cell.looped {
            assert!(get("block_switches") > 0, "{at}");
        } else {
            let per = u64::from(cell.streams * (cell.blocks - 1));
            assert_eq!(get("block_switches"), per * execs, "{at}");
        }
        if cell.early_send && cell.transport == "mem" {
            assert!(get("early_send_completions") > 0, "{at}");
        } else if cell.early_send {
            // libfabric tcp and shm: a send within the inject size (the cell's chunk: 64 B on
            // tcp, 4096 B on shm) is done at the transport when it is posted (`fi_tinject`), and
            // a larger one is not copied at post; either way no completion can come before the
            // transport's, and nothing is counted early (the flag is in every op info).
        } else {
            assert_eq!(get("early_send_completions"), 0, "{at}");
        }
        let rank = r["rank"].as_u64().expect("rank") as u32;
        let (granted, most_sends) = planned(cell, rank);
        // Every rank the planner granted credits posts receives ahead (the device hands the
        // held-back entries out only as the ones before complete).
        if cell.early_recv > 0 && granted > 0 {
            assert!(get("recvs_posted_ahead") > 0, "{at}");
            let most = get("max_recv_ahead");
            assert!(most > 0 && most <= u64::from(cell.early_recv), "{at}");
        } else if cell.early_recv > 0 {
            assert!(get("max_recv_ahead") <= u64::from(cell.early_recv), "{at}");
        } else {
            assert_eq!(get("recvs_posted_ahead"), 0, "{at}");
            assert_eq!(get("max_recv_ahead"), 0, "{at}");
        }
        // About 6 entries per op and part: more than a wrap of 4.
        if cell.idx_wrap > 0 {
            assert!(get("index_wraps") > 0, "{at}");
        } else {
            assert_eq!(get("index_wraps"), 0, "{at}");
        }
        let peak = get("peak_outstanding_send");
        assert!(peak <= u64::from(cell.credits), "{at}");
        if most_sends > cell.credits {
            // An op with more entries than credits keeps all of them in use.
            assert_eq!(peak, u64::from(cell.credits), "{at}");
        } else if most_sends > 0 {
            assert!(peak >= 1, "{at}");
        }
        assert!(get("peak_outstanding_recv") <= 128, "{at}");
    }
}

fn run_cells(pick: impl Fn(&Cell) -> bool) {
    let cells: Vec<Cell> = cells().into_iter().filter(|c| pick(c)).collect();
    assert!(!cells.is_empty());
    let t0 = Instant::now();
    for (n, c) in cells.iter().enumerate() {
        let r = run(c, n);
        eprintln!("{c:?}: {:.1} s", r.took.as_secs_f64());
        check(c, &r);
        check_counters(c, r.json.as_ref().expect("checked"));
    }
    eprintln!(
        "{} cells in {:.1} s",
        cells.len(),
        t0.elapsed().as_secs_f64()
    );
}

/// The matrix's in-process cells.
#[test]
fn matrix_mem() {
    run_cells(|c| c.transport == "mem");
}

/// The matrix's libfabric cells (tcp and shm, ranks as processes on loopback).
#[cfg(feature = "libfabric")]
#[test]
fn matrix_libfabric() {
    run_cells(|c| c.transport != "mem");
}

/// A regression found by this matrix: all-reduce over 3 ranks in 3 blocks with both early
/// flags gave about 900 wrong elements per side (the device's early-send overwrite of a send
/// source did not look at the receives the proxy may post up to `ending_recv_credits` beyond
/// the entries handed out; such a receive landed in an overwritten source and the restore wrote
/// the saved bytes over it). In-memory transport, every byte checked, 5 runs.
#[test]
fn all_reduce_both_early_flags_three_ranks() {
    for n in 0..5 {
        let cell = Cell {
            streams: 1,
            blocks: 3,
            early_recv: EARLY_RECV_ON,
            early_send: true,
            idx_wrap: 0,
            credits: 128,
            collective: "all-reduce",
            ranks: 3,
            transport: "mem",
            looped: false,
            mode: MODES[0],
        };
        let r = run(&cell, 1000 + n);
        check(&cell, &r);
    }
}

/// A regression found by this matrix: in-place all-to-all over 3 rank processes on libfabric
/// tcp with early receive posting (worker threads, device threads) gave tens to hundreds of
/// wrong elements in place (a receive posted early overwrote the same peer's block before it
/// was sent). 3 runs.
#[cfg(feature = "libfabric")]
#[test]
fn all_to_all_in_place_early_recv_libfabric() {
    for n in 0..3 {
        let cell = Cell {
            streams: 1,
            blocks: 1,
            early_recv: EARLY_RECV_ON,
            early_send: false,
            idx_wrap: 0,
            credits: 128,
            collective: "all-to-all",
            ranks: 3,
            transport: "tcp",
            looped: false,
            mode: MODES[1],
        };
        let r = run(&cell, 2000 + n);
        check(&cell, &r);
    }
}

/// The progress half loaded from the C library (`--progress-lib`): all-reduce over 2 streams in
/// 3 blocks with every option on, in both modes: 0 wrong, every part filed, the counters
/// through the C ABI's `nccom_comm_protocol_stats`.
#[test]
fn progress_lib_streams_blocks_and_options() {
    let lib = progress_library();
    for (n, mode) in MODES.into_iter().enumerate() {
        let cell = Cell {
            streams: 2,
            blocks: 3,
            early_recv: EARLY_RECV_ON,
            early_send: true,
            idx_wrap: 4,
            credits: 1,
            collective: "all-reduce",
            ranks: 2,
            transport: "mem",
            looped: n == 1,
            mode,
        };
        let r = run_with(
            &cell,
            3000 + n,
            &["--progress-lib".into(), lib.display().to_string()],
        );
        assert!(r.out.contains("progress half: loaded from"), "{}", r.out);
        check(&cell, &r);
        check_counters(&cell, r.json.as_ref().expect("checked"));
    }
}

/// The protocol flags: their defaults and spellings, and a clear refusal of values the planner
/// cannot take (before any rank starts).
#[test]
fn protocol_flags_parse_and_refuse_bad_values() {
    use clap::Parser;
    use proxy_perf::args::Args;
    let parse = |v: &[&str]| {
        let mut all = vec!["proxy-perf", "all-reduce"];
        all.extend_from_slice(v);
        Args::try_parse_from(all)
    };
    let d = parse(&[]).expect("defaults");
    assert_eq!(
        (
            d.streams,
            d.blocks,
            d.early_recv,
            d.early_send,
            d.idx_wrap,
            d.credits
        ),
        (1, 1, 0, false, 0, 0)
    );
    assert_eq!(
        d.protocol_line(),
        "streams 1 blocks 1 early-recv off early-send off idx-wrap none credits default"
    );
    let a = parse(&[
        "--streams",
        "4",
        "--blocks",
        "3",
        "--early-recv",
        "2",
        "--early-send",
        "--idx-wrap",
        "4",
        "--credits",
        "128",
    ])
    .expect("every option");
    assert_eq!(
        (
            a.streams,
            a.blocks,
            a.early_recv,
            a.early_send,
            a.idx_wrap,
            a.credits
        ),
        (4, 3, 2, true, 4, 128)
    );
    assert_eq!(
        a.protocol_json(),
        serde_json::json!({"streams": 4, "blocks": 3, "early_recv_credits": 2,
            "early_send": true, "idx_wrap": 4, "credits": 128})
    );
    assert!(!parse(&["--early-send=off"]).expect("off").early_send);
    assert!(parse(&["--early-send=on"]).expect("on").early_send);
    for (bad, says) in [
        (&["--streams", "0"][..], "0 is not in 1..=4"),
        (&["--streams", "5"][..], "5 is not in 1..=4"),
        (&["--blocks", "0"][..], "0 is not in 1..=16"),
        (&["--idx-wrap", "1"][..], "0 (no wrap) or at least 2"),
        (&["--credits", "129"][..], "129 is not in 0..=128"),
        (&["--early-send=maybe"][..], "'maybe' is not on or off"),
    ] {
        let e = parse(bad).expect_err("refused").to_string();
        assert!(e.contains(says), "{bad:?}: {e}");
    }
}
