//! The link between hosts (`--tune` when the ranks span hosts): timed exchanges over it and
//! the fit of its `α`, `β` and, with three ranks or more, its per-message `o`
//! ([`fit_link`]); see the parent module's "Between hosts".

use proxy_collectives::planner::tuner::{self, CostModel, Terms};
use proxy_collectives::planner::{Algorithm, Collective, HostMap};

use clap::ValueEnum;

use crate::args::{AlgoArg, Args, CollArg};
use crate::run::World;

/// The largest per-rank size at which the all-to-all exchange is timed: it is there for the
/// per-message cost, which small messages show; larger ones would only repeat what the
/// shift's bytes tell.
pub const ALL_TO_ALL_MAX_BYTES: u64 = 64 << 10;

/// Which exchange a [`LinkSample`] timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exchange {
    /// The send-recv shift: one message each way per link (its `α` and `β`).
    Shift,
    /// The direct all-to-all over every rank: each rank's `n − 1` messages at once, the
    /// other hosts' ranks' across the link together, as a flat direct all-reduce sends them
    /// (the link's cost per message under concurrent messages, `o`).
    AllToAll,
}

impl Exchange {
    /// The name the report prints.
    pub fn name(self) -> &'static str {
        match self {
            Exchange::Shift => "send-recv",
            Exchange::AllToAll => "all-to-all",
        }
    }
}

/// One timed exchange over the link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkSample {
    /// The exchange timed.
    pub exchange: Exchange,
    /// Bytes in each rank's buffer (the shift's message; the all-to-all's `n` blocks).
    pub bytes: u64,
    /// The model's terms of the exchange ([`tuner::terms`] of the send-recv shift or the
    /// all-to-all, direct: one step).
    pub terms: Terms,
    /// The slowest rank's time, ns.
    pub time_ns: f64,
}

/// The model's terms of one `exchange` of `bytes` per rank on `nranks` ranks laid out as
/// `hosts` with FIFO entries of at most `chunk` bytes (`split`: over streams or blocks). The
/// all-to-all's bytes include those its host's ranks send across at once
/// ([`tuner::shared_crossing_bytes`]), as the tuner charges a flat all-reduce's: fitted
/// without them, the link's `o` would take in the sharing and the tuner count it twice. The
/// shift sends one message each way per link: nothing shared.
pub fn exchange_terms(
    exchange: Exchange,
    bytes: u64,
    nranks: u32,
    hosts: &HostMap,
    chunk: u64,
    split: bool,
) -> Option<Terms> {
    let collective = match exchange {
        Exchange::Shift => Collective::SendRecv,
        Exchange::AllToAll => Collective::AllToAll,
    };
    let nranks = nranks.max(2);
    let mut t = tuner::terms(collective, Algorithm::Direct, bytes, nranks, chunk, split)?;
    t.sent += tuner::shared_crossing_bytes(collective, Algorithm::Direct, bytes, nranks, hosts);
    Some(t)
}

/// The link's constants. With all-to-all samples among `samples` (three ranks or more): `α` (ns
/// per step), `o` (ns per FIFO entry) and `β` (ps per byte) that minimise
/// `Σ ((α · steps + o · entries + β · sent − t) / t)²` with none below zero; the shift's one
/// message each way and the all-to-all's `n − 1` tell `α` from `o`. With shift samples alone
/// `o` is `host.entry_ns` (a FIFO entry costs the proxy and the device the same whatever the
/// link) and only `α` and `β` are fitted. `γ` is `host`'s (a reduction never crosses the
/// link). `None` without two shift samples of different sizes.
pub fn fit_link(samples: &[LinkSample], host: &CostModel) -> Option<CostModel> {
    let shift_sizes = || {
        samples
            .iter()
            .filter(|s| s.exchange == Exchange::Shift)
            .map(|s| s.bytes)
    };
    if shift_sizes().min() == shift_sizes().max() {
        return None;
    }
    let t: Vec<f64> = samples.iter().map(|s| s.time_ns).collect();
    let per_message = samples.iter().any(|s| s.exchange == Exchange::AllToAll);
    let rows: Vec<[f64; 3]> = samples
        .iter()
        .map(|s| {
            [
                s.terms.steps as f64,
                s.terms.entries as f64,
                s.terms.sent as f64,
            ]
        })
        .collect();
    // o free with the all-to-all's samples; else (or without a solution) the host's o.
    let free = per_message
        .then(|| super::nnls_relative(&rows, &t, &t))
        .flatten()
        .map(|[alpha, o, beta]| (alpha, o.max(0.0).round() as u64, beta));
    let (alpha, entry_ns, beta) = match free {
        Some(f) => f,
        None => {
            let rows: Vec<[f64; 2]> = rows.iter().map(|r| [r[0], r[2]]).collect();
            let y: Vec<f64> = samples
                .iter()
                .map(|s| s.time_ns - s.terms.entries as f64 * host.entry_ns as f64)
                .collect();
            let [alpha, beta] = super::nnls_relative(&rows, &y, &t)?;
            (alpha, host.entry_ns, beta)
        }
    };
    Some(CostModel {
        step_ns: alpha.max(0.0).round() as u64,
        entry_ns,
        byte_ps: (beta * 1000.0).max(0.0).round() as u64,
        reduce_ps: host.reduce_ps,
    })
}

/// Root mean square of the relative errors of `m` over `samples`.
pub fn link_rms(samples: &[LinkSample], m: &CostModel) -> f64 {
    let sq: f64 = samples
        .iter()
        .map(|s| {
            let e = (s.terms.time_ns(m) as f64 - s.time_ns) / s.time_ns.max(1.0);
            e * e
        })
        .sum();
    (sq / samples.len().max(1) as f64).sqrt()
}

/// `args` for the exchanges: the send-recv shift, direct.
///
/// # Errors
/// None in practice (the name is the planner's own).
pub fn exchange_args(args: &Args) -> Result<Args, String> {
    let mut a = args.clone();
    a.collective = CollArg::SendRecv;
    a.algo = AlgoArg::from_str(Algorithm::Direct.name(), false)?;
    Ok(a)
}

/// Times the send-recv shift at every size of `args`' sweep and, on three ranks or more, the
/// direct all-to-all at the sweep's sizes up to [`ALL_TO_ALL_MAX_BYTES`] (at least one
/// element per block), each the least of `passes` sweeps, on `world` (set up with
/// [`exchange_args`]; every process of the run calls it, the rows are collective), whose ranks
/// `hosts` lays out (the all-to-all's shared bytes, [`exchange_terms`]). The world is left on
/// the shift.
///
/// # Errors
/// A message when a run fails or a value arrived wrong.
pub fn measure(
    world: &mut World,
    args: &Args,
    hosts: &HostMap,
    passes: usize,
) -> Result<Vec<LinkSample>, String> {
    let split = args.streams.saturating_mul(args.blocks) > 1;
    let shift = Exchange::Shift;
    let mut samples = timed(world, args, hosts, shift, &args.sizes(), passes, split)?;
    if args.ranks >= 3 {
        let least = u64::from(args.ranks) * args.dtype.size() as u64;
        let sizes: Vec<u64> = args
            .sizes()
            .into_iter()
            .filter(|&b| (least..=ALL_TO_ALL_MAX_BYTES).contains(&b))
            .collect();
        if !sizes.is_empty() {
            world.set_collective(
                CollArg::AllToAll,
                AlgoArg::from_str(Algorithm::Direct.name(), false)?,
            );
            let all = timed(
                world,
                args,
                hosts,
                Exchange::AllToAll,
                &sizes,
                passes,
                split,
            );
            world.set_collective(args.collective, args.algo);
            samples.extend(all?);
        }
    }
    Ok(samples)
}

/// [`measure`]'s sweeps of one exchange: the least time of `passes` sweeps per size.
fn timed(
    world: &mut World,
    args: &Args,
    hosts: &HostMap,
    exchange: Exchange,
    sizes: &[u64],
    passes: usize,
    split: bool,
) -> Result<Vec<LinkSample>, String> {
    let mut best: Vec<Option<(u64, f64)>> = vec![None; sizes.len()];
    for _ in 0..passes {
        for (b, &size) in best.iter_mut().zip(sizes) {
            let row = world.row(size)?;
            if crate::report::total_wrong(std::slice::from_ref(&row)) != 0 {
                return Err(format!(
                    "{} {size} B between hosts: wrong values",
                    exchange.name()
                ));
            }
            let t = row.oop.time_us.min(row.ip.time_us);
            if b.is_none_or(|(_, old)| t < old) {
                *b = Some((row.size, t));
            }
        }
    }
    Ok(best
        .into_iter()
        .flatten()
        .filter_map(|(bytes, time_us)| {
            Some(LinkSample {
                exchange,
                bytes,
                terms: exchange_terms(exchange, bytes, args.ranks, hosts, args.chunk, split)?,
                time_ns: time_us * 1000.0,
            })
        })
        .collect())
}

/// The measured link, for the report and the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    /// The hosts the ranks span.
    pub hosts: HostMap,
    /// The transport the exchanges ran on (the header's name).
    pub transport: String,
    /// The exchanges.
    pub samples: Vec<LinkSample>,
}

/// A host map as `--hosts` spells it (`2,2`).
pub fn hosts_text(h: &HostMap) -> String {
    let s: Vec<String> = h.sizes().iter().map(u32::to_string).collect();
    s.join(",")
}
