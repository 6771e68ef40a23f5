//! `--tune FILE`: calibrates the planner's cost model on this machine. All-reduce is timed with
//! direct, recursive doubling, Rabenseifner and ring at every size of the sweep (in process, on
//! the in-memory transport; the least of [`PASSES`] sweeps), and the four constants of the model
//!
//! ```text
//! T = steps · α + entries · o + sent · β + reduced · γ
//! ```
//!
//! (`proxy_collectives::planner::tuner`) are fitted to the times by least squares on the
//! relative errors (each measurement weighs as much as any other, whatever its size), with no
//! constant below zero (a negative one is set to zero and the others fitted again: the active
//! set method of Lawson and Hanson's NNLS, which with four unknowns ends in at most four
//! rounds). The terms are the model's own ([`tuner::terms`]), so the fit is of the model the
//! planner uses. The four algorithms give the fit what it needs to tell the constants apart:
//! direct has one step and many entries, recursive doubling `log2 n` steps, the ring `2(n−1)`
//! steps and no reduction outside its transfers, Rabenseifner sends twice what it reduces.
//! Below the chunk size each step of these is one entry each way, so on 2 ranks (a host of two
//! processes) steps and entries move together and the fit could not tell α from o (it gave o
//! 0 and left direct's many messages at more ranks unpriced); an entries pass therefore times
//! direct and the ring again at 64..512 KiB with 4 KiB chunks (`measure_entries`), where one
//! step is many entries: the sweep's sizes in that range, or 16 and 64 chunks when it has none.
//! The result goes to FILE ([`TuneFile`], written whole or not at all) and is printed with each
//! measurement against the fitted model and the tuner's choices with the old and the new
//! constants.
//!
//! # On a crowded host
//! With more ranks than CPUs to progress them on (`World::progress_cpus`), the tuner costs an
//! all-reduce at its critical path times the ranks over the CPUs (`tuner::crowded_work`: the
//! ranks sharing a CPU take turns, and their waiting polls are work), so each sample's terms
//! are multiplied by the same (`Sample::crowd`) and the fit stays linear. Without this the fit
//! folded the sharing into α and o, and the tuner's bound counted it a second time: 4
//! processes over tcp on 2 CPUs fitted α 12.9 µs, o 16.7 µs, now α 4.3 µs, o 2.4 µs (2
//! processes, uncrowded: α 3.6 µs, o 2.0 µs).
//!
//! # Ranks as processes, and between hosts
//! With `--transport libfabric` or `shm` (a launch's processes; without launcher variables one
//! process per rank is launched here) the in-host fit runs over the processes' own comm, the path a
//! host's ranks take in such a run, switching algorithms on one comm
//! ([`World::set_collective`]). When the ranks span hosts (the bootstrap sees two hosts or more
//! with each host's ranks contiguous, or `--hosts`) the link between them is measured first
//! ([`link`]): every process times the send-recv shift (rank `r` sends to `r + 1`; with each
//! host's ranks contiguous exactly one message leaves every host and one enters it, so each
//! link carries one message each way, between the last rank of one host and the leader of the
//! next) at every size of the sweep, the least of [`PASSES`] sweeps, the slowest rank's time
//! (the crossing message). The model's time of one such exchange is
//! `α + 2⌈b / chunk⌉ o + b β`. On three ranks or more the direct all-to-all over every rank is
//! timed too, at the sizes up to [`link::ALL_TO_ALL_MAX_BYTES`]: every rank sends its `n − 1`
//! messages at once, the other hosts' ranks' across the link together, as a flat direct
//! all-reduce sends its messages (the all-to-all's time is
//! `α + 2(n − 1)⌈b / (n chunk)⌉ o + (n − 1) b / n β`, its bytes with those the host's other
//! ranks send across at once, [`tuner::shared_crossing_bytes`], as the tuner charges a flat
//! all-reduce's), which tells the link's
//! cost per message from its cost per step (one message each way tells nothing of how the
//! link takes several at once). `α`, `o` and `β` of the link are then fitted by the same
//! non-negative least squares on the relative errors ([`link::fit_link`]); with two ranks `o`
//! is the in-host fit's and only `α` and `β` are fitted. `γ` is the host's (a reduction never
//! crosses the link), and the four go to FILE's `inter_host_cost_model`. Then host 0's processes alone make a bootstrap and a
//! comm of their own (root on a loopback port rank 0 chose and told the others over the big
//! bootstrap) and run the in-host fit on it; the other hosts' processes end (their CPUs are
//! not host 0's on real hosts, but they would share them in a namespace test). Host 0 with
//! one rank: the in-host fit runs in process on 2 ranks. With `--transport mem` and `--hosts`
//! the pretend hosts' exchanges run in process. With one host the file holds no inter-host
//! constants and the run says that the link was not measured.

use std::io::Write as _;

use clap::ValueEnum;

use proxy_collectives::planner::tuner::{self, CostModel, Terms};
use proxy_collectives::planner::{Algorithm, Collective, HostMap, PlanParams};
use proxy_runtime::tune_file::{TuneFile, Tuning};

use crate::args::{AlgoArg, Args, CollArg, TransportArg};
use crate::run::World;

/// The algorithms timed, all-reduce's four.
pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::Direct,
    Algorithm::RecursiveDoubling,
    Algorithm::Rabenseifner,
    Algorithm::Ring,
];

/// Sweeps per algorithm; each size's time is the least of them.
pub const PASSES: usize = 3;

/// One measurement: the model's terms and the time measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Bytes of the all-reduce.
    pub bytes: u64,
    /// The largest FIFO entry of its plan, bytes.
    pub chunk: u64,
    /// The model's terms for it.
    pub terms: Terms,
    /// The time measured, ns.
    pub time_ns: f64,
    /// The crowding of the host it ran on: its ranks over the CPUs they progressed on, when
    /// they are more (the tuner's crowding bound, `tuner::crowding`: the time is the critical
    /// path times this); 0 when they are not.
    pub crowd: f64,
}

impl Sample {
    /// What α, o, β and γ multiply: the terms of the critical path, times the crowding on a
    /// crowded host.
    fn row(&self) -> [f64; 4] {
        let t = &self.terms;
        let c = self.crowd.max(1.0);
        // The unknowns in ns: α, o per step / entry; β, γ per byte.
        [
            t.steps as f64 * c,
            t.entries as f64 * c,
            t.sent as f64 * c,
            t.reduced as f64 * c,
        ]
    }

    /// The modelled time under `m` in ns, as the tuner has it (`tuner::modelled_ns`): the
    /// critical path, times the crowding on a crowded host.
    pub fn model_ns(&self, m: &CostModel) -> f64 {
        self.terms.time_ns(m) as f64 * self.crowd.max(1.0)
    }
}

/// Solves the `k × k` system `a x = b` (Gaussian elimination with partial pivoting); `None`
/// when it is singular.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let k = b.len();
    for col in 0..k {
        let p = (col..k).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[p][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, p);
        b.swap(col, p);
        let (upper, lower) = a.split_at_mut(col + 1);
        let prow = &upper[col];
        let bcol = b[col];
        for (row, br) in lower.iter_mut().zip(b[col + 1..].iter_mut()) {
            let f = row[col] / prow[col];
            for (x, &p) in row[col..].iter_mut().zip(&prow[col..]) {
                *x -= f * p;
            }
            *br -= f * bcol;
        }
    }
    let mut x = vec![0.0; k];
    for r in (0..k).rev() {
        let s: f64 = (r + 1..k).map(|c| a[r][c] * x[c]).sum();
        x[r] = (b[r] - s) / a[r][r];
    }
    Some(x)
}

/// The `x ≥ 0` that minimises `Σ ((rows[i] · x − y[i]) / t[i])²` (`t[i]`: the measured time
/// that weighs the error of row `i`; at least 1 ns), by the active set method: an unknown the
/// unconstrained solution pulls below zero is set to zero and the rest fitted again. `None`
/// when the rows cannot tell the free unknowns apart.
fn nnls_relative<const K: usize>(rows: &[[f64; K]], y: &[f64], t: &[f64]) -> Option<[f64; K]> {
    let mut free = [true; K];
    for _ in 0..=K {
        let idx: Vec<usize> = (0..K).filter(|&i| free[i]).collect();
        if idx.is_empty() {
            return Some([0.0; K]);
        }
        // Normal equations of the weighted (relative) problem over the free unknowns.
        let mut a = vec![vec![0.0; idx.len()]; idx.len()];
        let mut b = vec![0.0; idx.len()];
        for ((row, &yi), &ti) in rows.iter().zip(y).zip(t) {
            let w = 1.0 / ti.max(1.0);
            for (i, &p) in idx.iter().enumerate() {
                b[i] += row[p] * w * yi * w;
                for (j, &q) in idx.iter().enumerate() {
                    a[i][j] += row[p] * w * row[q] * w;
                }
            }
        }
        let x = solve(a, b)?;
        let mut out = [0.0; K];
        for (i, &p) in idx.iter().enumerate() {
            out[p] = x[i];
        }
        match (0..K)
            .filter(|&i| free[i] && out[i] < 0.0)
            .min_by(|&i, &j| out[i].total_cmp(&out[j]))
        {
            Some(neg) => free[neg] = false,
            None => return Some(out),
        }
    }
    None
}

/// The constants (α, o in ns; β, γ in ns per byte) that minimise `Σ ((model − t) / t)²` over
/// `samples` with none below zero, or `None` when the samples cannot tell them apart. When
/// they cannot tell α from o alone (on 2 ranks below the chunk size every algorithm's entries
/// are twice its steps), o is 0 and α carries the cost of a step's entries.
pub fn fit(samples: &[Sample]) -> Option<[f64; 4]> {
    let rows: Vec<[f64; 4]> = samples.iter().map(Sample::row).collect();
    let t: Vec<f64> = samples.iter().map(|s| s.time_ns).collect();
    nnls_relative(&rows, &t, &t).or_else(|| {
        let rows: Vec<[f64; 3]> = rows.iter().map(|r| [r[0], r[2], r[3]]).collect();
        let [a, b, g] = nnls_relative(&rows, &t, &t)?;
        Some([a, 0.0, b, g])
    })
}

/// The planner's constants from [`fit`]'s (rounded; β and γ to whole ps per byte).
pub fn model_of(x: [f64; 4]) -> CostModel {
    let r = |v: f64| v.max(0.0).round() as u64;
    CostModel {
        step_ns: r(x[0]),
        entry_ns: r(x[1]),
        byte_ps: r(x[2] * 1000.0),
        reduce_ps: r(x[3] * 1000.0),
    }
}

/// Root mean square of the relative errors of `m` over `samples`.
pub fn rms_relative_error(samples: &[Sample], m: &CostModel) -> f64 {
    let sq: f64 = samples
        .iter()
        .map(|s| {
            let e = (s.model_ns(m) - s.time_ns) / s.time_ns.max(1.0);
            e * e
        })
        .sum();
    (sq / samples.len().max(1) as f64).sqrt()
}

/// The model's terms of an all-reduce of `bytes` with `algorithm` under `args`' ranks, chunk
/// and split.
fn terms_of(args: &Args, algorithm: Algorithm, bytes: u64) -> Option<Terms> {
    tuner::terms(
        Collective::AllReduce,
        algorithm,
        bytes,
        args.ranks,
        args.chunk,
        args.streams.saturating_mul(args.blocks) > 1,
    )
}

/// Runs the calibration (`--tune FILE`); returns the exit status. In process
/// (`--transport mem`): the in-host fit on `--ranks`, and with `--hosts` the exchanges between
/// the pretend hosts first. `--transport libfabric`: without launcher variables one process
/// per rank is launched on this machine (`crate::launch`); the processes of a launch measure
/// the link when the bootstrap's host map (or `--hosts`) spans hosts, then fit the in-host
/// constants over their own comm (host 0's processes only, when there are hosts), and the
/// process of rank 0 writes FILE.
///
/// # Errors
/// A message when the arguments do not suit a calibration, a run fails, the fit has no
/// solution or FILE cannot be written.
pub fn run(args: &Args, file: &std::path::Path) -> Result<i32, String> {
    if args.progress_lib.is_some() {
        return Err("--tune runs the engine's own progress half (no --progress-lib)".into());
    }
    if args.ranks < 2 {
        return Err("--tune needs --ranks 2 or more".into());
    }
    match args.transport {
        TransportArg::Mem => {
            let link = match args.hosts {
                Some(h) if h.0.sizes().len() >= 2 => {
                    let a = link::exchange_args(args)?;
                    let mut world = World::new(&a)?;
                    let samples = link::measure(&mut world, &a, &h.0, PASSES)?;
                    Some(link::Link {
                        hosts: h.0,
                        transport: world.transport_name().to_owned(),
                        samples,
                    })
                }
                _ => None,
            };
            let mut host_args = args.clone();
            host_args.hosts = None;
            let mut world = World::new(&host_args)?;
            let samples = measure_in_host(&mut world, &host_args)?;
            report(args, &host_args, file, InHost::of(world, samples), link)
        }
        TransportArg::Libfabric | TransportArg::Shm => processes::across_processes(args, file),
    }
}

/// Times all-reduce with each of [`ALGORITHMS`] at every size of `args`' sweep on `world`
/// (the least of [`PASSES`] sweeps; every process of the world calls it), then the entries
/// pass ([`measure_entries`]).
///
/// # Errors
/// A message when a run fails or a value arrived wrong.
pub(crate) fn measure_in_host(world: &mut World, args: &Args) -> Result<Vec<Sample>, String> {
    let sizes = args.sizes();
    let mut samples = Vec::new();
    for algorithm in ALGORITHMS {
        let algo = AlgoArg::from_str(algorithm.name(), false)?;
        world.set_collective(CollArg::AllReduce, algo);
        let a = world.args().clone();
        // The least of PASSES sweeps (each size's two sides): the machine's other work only
        // ever adds time.
        for (bytes, time_us) in least_of_passes(world, &sizes, algorithm.name())? {
            let Some(terms) = terms_of(&a, algorithm, bytes) else {
                continue;
            };
            samples.push(Sample {
                algorithm,
                bytes,
                chunk: a.chunk,
                terms,
                time_ns: time_us * 1000.0,
                crowd: 0.0,
            });
        }
    }
    samples.extend(measure_entries(world)?);
    Ok(samples)
}

/// Each of `sizes` timed on `world`'s current collective, the least of [`PASSES`] sweeps
/// (passes outer: the machine's other work falls on every size alike, and only ever adds
/// time): `(bytes, µs)` per size, the lesser of out of place and in place.
///
/// # Errors
/// A message naming `what` and the size when a run fails or a value arrived wrong.
fn least_of_passes(
    world: &mut World,
    sizes: &[u64],
    what: &str,
) -> Result<Vec<(u64, f64)>, String> {
    let mut best: Vec<Option<(u64, f64)>> = vec![None; sizes.len()];
    for _ in 0..PASSES {
        for (b, &size) in best.iter_mut().zip(sizes) {
            let row = world.row(size)?;
            if crate::report::total_wrong(std::slice::from_ref(&row)) != 0 {
                return Err(format!("{what} {size} B: wrong values"));
            }
            let t = row.oop.time_us.min(row.ip.time_us);
            if b.is_none_or(|(_, old)| t < old) {
                *b = Some((row.size, t));
            }
        }
    }
    Ok(best.into_iter().flatten().collect())
}

/// The chunk of the entries pass, bytes: small, so that a step is many entries.
pub const ENTRY_CHUNK: u64 = 4 << 10;

/// The sizes of 16 to 128 entries of [`ENTRY_CHUNK`] (64..512 KiB), bytes: where an entry's
/// cost is not yet lost in the bytes'.
const ENTRY_PASS_RANGE: core::ops::RangeInclusive<u64> = 16 * ENTRY_CHUNK..=128 * ENTRY_CHUNK;

/// The entries per step of the entries pass's own sizes, when the sweep has none in
/// `ENTRY_PASS_RANGE` (a sweep of small sizes only, say `-e 32K` for a tuner of small
/// messages): at 4 KiB chunks 64 and 256 KiB.
pub const ENTRY_PASS_OWN_ENTRIES: [u64; 2] = [16, 64];

/// Which sizes the entries pass times at chunks of `chunk` bytes (the world's) for elements of
/// `elem` bytes. Above [`ENTRY_CHUNK`]: the sweep's sizes in `ENTRY_PASS_RANGE`, else
/// [`ENTRY_PASS_OWN_ENTRIES`] entries of [`ENTRY_CHUNK`]. At or below it: none when the sweep
/// has sizes in that range (its own steps are many entries already), else
/// [`ENTRY_PASS_OWN_ENTRIES`] entries of the chunk (at least one element each; bounded, where
/// 256 KiB in 2-byte chunks would be more entries than an op may have). Without the pass a
/// 2-rank fit has no way to tell o from α, and gave o 0.
pub fn entry_pass_sizes(sweep: &[u64], chunk: u64, elem: u64) -> Vec<u64> {
    let own: Vec<u64> = sweep
        .iter()
        .copied()
        .filter(|b| ENTRY_PASS_RANGE.contains(b))
        .collect();
    match (chunk > ENTRY_CHUNK, own.is_empty()) {
        (true, false) => own,
        (true, true) => ENTRY_PASS_OWN_ENTRIES.map(|k| k * ENTRY_CHUNK).to_vec(),
        (false, false) => Vec::new(),
        (false, true) => ENTRY_PASS_OWN_ENTRIES.map(|k| k * chunk.max(elem)).to_vec(),
    }
}

/// The entries pass of the calibration: direct and the ring at [`entry_pass_sizes`] with
/// chunks of [`ENTRY_CHUNK`] or the world's chunk when smaller (the least of [`PASSES`]
/// sweeps). At the sweep's own chunk every step of a small all-reduce is one entry each way,
/// so on 2 ranks steps and entries move together and the fit cannot tell α from o; here one
/// step is many entries. Samples with their chunk; the world's chunk is restored after.
///
/// # Errors
/// A message when a run fails or a value arrived wrong.
pub(crate) fn measure_entries(world: &mut World) -> Result<Vec<Sample>, String> {
    let chunk = world.args().chunk;
    let elem = world.args().dtype.size() as u64;
    let sizes = entry_pass_sizes(&world.args().sizes(), chunk, elem);
    let mut samples = Vec::new();
    if sizes.is_empty() {
        return Ok(samples);
    }
    let pass_chunk = chunk.min(ENTRY_CHUNK);
    world.set_chunk(pass_chunk);
    let result = (|| {
        for algorithm in [Algorithm::Direct, Algorithm::Ring] {
            world.set_collective(
                CollArg::AllReduce,
                AlgoArg::from_str(algorithm.name(), false)?,
            );
            let a = world.args().clone();
            let what = format!("{}, chunk {pass_chunk} B,", algorithm.name());
            for (bytes, time_us) in least_of_passes(world, &sizes, &what)? {
                if let Some(terms) = terms_of(&a, algorithm, bytes) {
                    samples.push(Sample {
                        algorithm,
                        bytes,
                        chunk: pass_chunk,
                        terms,
                        time_ns: time_us * 1000.0,
                        crowd: 0.0,
                    });
                }
            }
        }
        Ok(())
    })();
    world.set_chunk(chunk);
    result.map(|()| samples)
}

/// The in-host measurement [`report`] fits: its samples, and what it ran on.
pub(crate) struct InHost {
    samples: Vec<Sample>,
    /// The transport, for the header.
    transport: String,
    /// The CPUs the world's ranks progressed on ([`World::progress_cpus`]).
    progress_cpus: u32,
    /// Which of its ranks shared a CPU ([`World::cpu_groups`]).
    cpu_groups: HostMap,
}

impl InHost {
    /// `samples` measured on `world`, which ends here (its comms closed before the report).
    pub(crate) fn of(world: World, samples: Vec<Sample>) -> Self {
        Self {
            samples,
            transport: world.transport_name().to_owned(),
            progress_cpus: world.progress_cpus(),
            cpu_groups: world.cpu_groups(),
        }
    }
}

/// The in-host fit of `in_host` (measured on `args`' ranks), then the link's (when `link`
/// holds its exchanges); prints both and the tuner's choices, and writes FILE. `args_all`: the
/// run's arguments (all ranks).
pub(crate) fn report(
    args_all: &Args,
    args: &Args,
    file: &std::path::Path,
    in_host: InHost,
    link: Option<link::Link>,
) -> Result<i32, String> {
    let InHost {
        mut samples,
        transport,
        progress_cpus,
        cpu_groups,
    } = in_host;
    let mut out = std::io::stdout().lock();
    let sizes = args.sizes();
    let _ = writeln!(
        out,
        "# proxy-perf --tune {}: all-reduce, {} ranks, {transport}, sizes {}..{} B; {}; {}",
        file.display(),
        args.ranks,
        args.min_bytes,
        args.max_bytes,
        args.tuner_line(),
        args.protocol_line()
    );
    if progress_cpus > 0 && args.ranks > progress_cpus {
        let crowd = f64::from(args.ranks) / f64::from(progress_cpus);
        let split = args.streams.saturating_mul(args.blocks) > 1;
        for s in &mut samples {
            s.crowd = crowd;
            // The work, as the tuner's crowding bound costs it (`tuner::work_terms`: the
            // ring's overlapped reductions count).
            if let Some(t) = tuner::work_terms(
                Collective::AllReduce,
                s.algorithm,
                s.bytes,
                args.ranks,
                s.chunk,
                split,
            ) {
                s.terms = t;
            }
        }
        let _ = writeln!(
            out,
            "# note: {} ranks progress on {progress_cpus} CPUs here: each time is modelled as \
             the tuner costs it on this host, the work of one rank times {crowd:.2} (the ranks \
             sharing a CPU take turns, their waiting polls included)",
            args.ranks
        );
    }
    let x = fit(&samples).ok_or("the measurements cannot tell the constants apart")?;
    let m = model_of(x);
    let rms = rms_relative_error(&samples, &m);
    let _ = writeln!(
        out,
        "#\n# {:>18} {:>10} {:>12} {:>12} {:>7}",
        "algorithm", "bytes", "measured us", "model us", "error"
    );
    for s in &samples {
        let model = s.model_ns(&m);
        let name = if s.chunk == args.chunk {
            s.algorithm.name().to_owned()
        } else {
            format!("{} (chunk {})", s.algorithm.name(), s.chunk)
        };
        let _ = writeln!(
            out,
            "  {:>18} {:>10} {:>12.2} {:>12.2} {:>6.0}%",
            name,
            s.bytes,
            s.time_ns / 1000.0,
            model / 1000.0,
            (model - s.time_ns) / s.time_ns.max(1.0) * 100.0
        );
    }
    let old = args.tuning.model(args.link);
    let _ = writeln!(
        out,
        "#\n# fitted: α {} ns/step, o {} ns/entry, β {} ps/B sent, γ {} ps/B reduced; {} samples, \
         rms relative error {:.0} % (the old constants: {:.0} %)",
        m.step_ns,
        m.entry_ns,
        m.byte_ps,
        m.reduce_ps,
        samples.len(),
        rms * 100.0,
        rms_relative_error(&samples, &old) * 100.0
    );
    let choice = |model: &CostModel, inter: &CostModel, hosts: Option<HostMap>, size: u64| {
        let n = hosts.map_or(args.ranks, |h| h.ranks() as u32);
        let mut p = PlanParams::new(
            Collective::AllReduce,
            (size / args.dtype.size() as u64).max(1),
            args.dtype,
            0,
            n,
        );
        p.chunk_bytes = args.chunk;
        p.cost_model = *model;
        p.inter_host_model = *inter;
        // As the runs see it: the host map, else one host of the ranks, and the CPUs the
        // host's ranks progress on (the crowding bound).
        p.hosts = hosts
            .or_else(|| HostMap::new(&[n]))
            .unwrap_or(HostMap::NONE);
        p.progress_cpus = progress_cpus;
        p.cpu_groups = cpu_groups;
        tuner::pick(&p).name()
    };
    for &size in &sizes {
        let _ = writeln!(
            out,
            "#  tuner's all-reduce choice at {:>10} B: {:>18} (old constants) {:>18} (fitted)",
            size,
            choice(&old, &old, None, size),
            choice(&m, &m, None, size)
        );
    }
    let measured_on = format!(
        "proxy-perf --tune: all-reduce, transport {transport}, {} ranks, {}..{} B, {} CPUs \
         available",
        args.ranks,
        args.min_bytes,
        args.max_bytes,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut tune = TuneFile::new(m, measured_on, samples.len() as u32, rms);
    match &link {
        None => {
            let _ = writeln!(
                out,
                "#\n# between hosts: not measured (one host, or hosts whose ranks are not \
                 contiguous: no host map); the file holds no inter-host constants"
            );
        }
        Some(l) => {
            let lm = link::fit_link(&l.samples, &m)
                .ok_or("the exchanges between hosts cannot tell α and β apart")?;
            let lrms = link::link_rms(&l.samples, &lm);
            let per_message = l
                .samples
                .iter()
                .any(|s| s.exchange == link::Exchange::AllToAll);
            let _ = writeln!(
                out,
                "#\n# between hosts {} (ranks per host), {}: send-recv shift (one message each \
                 way per link){}, {} ranks\n# {:>18} {:>10} {:>12} {:>12} {:>7}",
                link::hosts_text(&l.hosts),
                l.transport,
                if per_message {
                    " and direct all-to-all (every rank's messages at once)"
                } else {
                    ""
                },
                args_all.ranks,
                "exchange",
                "bytes",
                "measured us",
                "model us",
                "error"
            );
            for s in &l.samples {
                let model = s.terms.time_ns(&lm) as f64;
                let _ = writeln!(
                    out,
                    "  {:>18} {:>10} {:>12.2} {:>12.2} {:>6.0}%",
                    s.exchange.name(),
                    s.bytes,
                    s.time_ns / 1000.0,
                    model / 1000.0,
                    (model - s.time_ns) / s.time_ns.max(1.0) * 100.0
                );
            }
            let old_inter = args_all.tuning.inter_host_model(args_all.link);
            let _ = writeln!(
                out,
                "#\n# fitted between hosts: α {} ns/step, β {} ps/B sent, o {} ns/entry ({}), γ \
                 {} ps/B (the host's); {} exchanges, rms relative error {:.0} % (the old \
                 constants: {:.0} %)",
                lm.step_ns,
                lm.byte_ps,
                lm.entry_ns,
                if per_message { "fitted" } else { "the host's" },
                lm.reduce_ps,
                l.samples.len(),
                lrms * 100.0,
                link::link_rms(&l.samples, &old_inter) * 100.0
            );
            for &size in &sizes {
                let _ = writeln!(
                    out,
                    "#  tuner's all-reduce choice across hosts {} at {:>10} B: {:>18} (old \
                     constants) {:>18} (fitted)",
                    link::hosts_text(&l.hosts),
                    size,
                    choice(&old, &old_inter, Some(l.hosts), size),
                    choice(&m, &lm, Some(l.hosts), size)
                );
            }
            tune.measured_on.push_str(&format!(
                "; between hosts {} over {}: send-recv{}, {} ranks, {}..{} B",
                link::hosts_text(&l.hosts),
                l.transport,
                if per_message { " and all-to-all" } else { "" },
                args_all.ranks,
                args.min_bytes,
                args.max_bytes
            ));
            tune = tune.with_inter_host(lm, l.samples.len() as u32, lrms);
        }
    }
    tune.write(file)?;
    let _ = writeln!(
        out,
        "# wrote {} (use it: NEURON_RT_PROXY_TUNE_FILE={}); it reads back as: {}",
        file.display(),
        file.display(),
        Tuning::File(file.to_owned(), TuneFile::read(file)?).describe(args.link)
    );
    Ok(0)
}

pub mod link;
mod processes;

#[cfg(test)]
mod tests;
