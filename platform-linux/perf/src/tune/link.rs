//! The link between hosts (`--tune` when the ranks span hosts): timed exchanges over it and
//! the fit of its `α` and `β` ([`fit_link`]); see the parent module's "Between hosts".

use proxy_collectives::planner::tuner::{self, CostModel, Terms};
use proxy_collectives::planner::{Algorithm, Collective, HostMap};

use clap::ValueEnum;

use crate::args::{AlgoArg, Args, CollArg};
use crate::run::World;

/// One timed exchange over the link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkSample {
    /// Bytes each rank sent.
    pub bytes: u64,
    /// The model's terms of the exchange (one step, one message each way: the send-recv
    /// shift's, [`tuner::terms`]).
    pub terms: Terms,
    /// The slowest rank's time, ns.
    pub time_ns: f64,
}

/// The model's terms of one exchange of `bytes` with FIFO entries of at most `chunk` bytes
/// (`split`: over streams or blocks).
pub fn exchange_terms(bytes: u64, nranks: u32, chunk: u64, split: bool) -> Option<Terms> {
    tuner::terms(
        Collective::SendRecv,
        Algorithm::Direct,
        bytes,
        nranks.max(2),
        chunk,
        split,
    )
}

/// The link's constants: `α` (ns per step) and `β` (ps per byte) that minimise
/// `Σ ((α · steps + o · entries + β · sent − t) / t)²` over `samples` with neither below zero,
/// where `o` is `host.entry_ns` (a FIFO entry costs the proxy and the device the same whatever
/// the link); `o` and `γ` are `host`'s. `None` without two samples of different sizes.
pub fn fit_link(samples: &[LinkSample], host: &CostModel) -> Option<CostModel> {
    let sizes = || samples.iter().map(|s| s.bytes);
    let distinct = sizes().min() != sizes().max();
    if !distinct {
        return None;
    }
    let rows: Vec<[f64; 2]> = samples
        .iter()
        .map(|s| [s.terms.steps as f64, s.terms.sent as f64])
        .collect();
    let y: Vec<f64> = samples
        .iter()
        .map(|s| s.time_ns - s.terms.entries as f64 * host.entry_ns as f64)
        .collect();
    let t: Vec<f64> = samples.iter().map(|s| s.time_ns).collect();
    let [alpha, beta] = super::nnls_relative(&rows, &y, &t)?;
    Some(CostModel {
        step_ns: alpha.max(0.0).round() as u64,
        entry_ns: host.entry_ns,
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

/// Times the exchange at every size of `args`' sweep, the least of `passes` sweeps, on
/// `world` (set up with [`exchange_args`]; every process of the run calls it, the rows are
/// collective).
///
/// # Errors
/// A message when a run fails or a value arrived wrong.
pub fn measure(world: &mut World, args: &Args, passes: usize) -> Result<Vec<LinkSample>, String> {
    let sizes = args.sizes();
    let mut best: Vec<Option<(u64, f64)>> = vec![None; sizes.len()];
    for _ in 0..passes {
        for (b, &size) in best.iter_mut().zip(&sizes) {
            let row = world.row(size)?;
            if crate::report::total_wrong(std::slice::from_ref(&row)) != 0 {
                return Err(format!("send-recv {size} B between hosts: wrong values"));
            }
            let t = row.oop.time_us.min(row.ip.time_us);
            if b.is_none_or(|(_, old)| t < old) {
                *b = Some((row.size, t));
            }
        }
    }
    let split = args.streams.saturating_mul(args.blocks) > 1;
    Ok(best
        .into_iter()
        .flatten()
        .filter_map(|(bytes, time_us)| {
            Some(LinkSample {
                bytes,
                terms: exchange_terms(bytes, args.ranks, args.chunk, split)?,
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
