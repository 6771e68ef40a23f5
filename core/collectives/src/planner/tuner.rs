//! The tuner behind [`Algorithm::Auto`]: a latency/bandwidth cost model per algorithm, given
//! (collective, bytes, ranks, chunk), and the cheapest algorithm by it.
//!
//! # The model
//! The time of a collective on one rank is its critical path:
//!
//! ```text
//! T = steps · α + entries · o + sent · β + reduced · γ
//! ```
//!
//! * `steps`: dependent network steps (a step waits for the one before it);
//! * `entries`: FIFO entries the rank sends and receives (each a proxy op slot, a transport
//!   request and a completion; a message of `b` bytes is `⌈b / chunk⌉` entries);
//! * `sent`: bytes the rank sends (the longest chain of sends, for trees);
//! * `reduced`: bytes the rank reduces, where the reductions are not overlapped with the
//!   transfers (the ring's chunk pipeline overlaps them: 0 there).
//!
//! This is Hockney's α–β model with LogP's per-message overhead `o` and a reduction term `γ`,
//! as Thakur, Rabenseifner and Gropp ("Optimization of Collective Communication Operations in
//! MPICH", IJHPCA 2005, §2) cost the MPICH algorithms. The step, message and byte counts of
//! each algorithm are the paper's (with the fold of the ranks above a power of two adding two
//! steps, §4), and the ring's are NCCL's.
//!
//! # Crowded hosts
//! The critical path assumes every rank progresses on a CPU of its own. When a host's ranks
//! share fewer CPUs ([`PlanParams::progress_cpus`]: the host's CPUs or the threads that drive
//! its ranks, whichever is fewer; the in-process runs of proxy-perf, rank processes
//! oversubscribing a host), the ranks that share a CPU take turns on it, and a rank that waits
//! for a step does not leave its CPU idle: it polls its transport and yields, CPU time its
//! neighbours lose. Its steps are work then, as its messages are, and the host cannot finish
//! before its total work is done on those CPUs. For an all-reduce the time is then
//!
//! ```text
//! T = max(critical path, s · (steps · α + entries · o + sent · β + reduced · γ) / cpus)
//! ```
//!
//! with the terms of one rank's critical path and `s` the largest host's ranks (its total
//! work, an over-count where ranks sit out a fold): for the flat algorithms the critical path
//! times `s / cpus`, with the reductions the ring overlaps with its transfers counted too
//! ([`work_terms`]: overlap needs a free CPU). For the hierarchy the bound is the host's
//! gather and broadcast (each rank waits one step in them) and its leader's part of the
//! leaders' phase. Recursive doubling
//! moves `n log2 n` messages in `log2 n` steps on every rank where a reduce to one leader and
//! a broadcast move `2 (n − 1)` with one wait per rank, so on a crowded host
//! [`Algorithm::Hierarchical`] becomes a candidate on any host map, one host included (gather
//! into the leader, binomial broadcast; [`crowded_work`]); where the host's ranks' CPUs are
//! known ([`PlanParams::cpu_groups`]) it gathers and broadcasts inside each CPU's ranks and
//! only the groups' leaders cross between CPUs ([`PlanParams::groups`]). Measured on 2 CPUs,
//! 8 B (BENCHMARKS.md, 2026-12-05): in process, 8 ranks 17–19 → 13–14 µs, 16 ranks 44 → 27–28,
//! 32 ranks 98 → 55; 4 rank processes over tcp, recursive doubling 35 µs, the ring's 6 steps
//! 103 (nearly twice the work of its messages alone), the hierarchy 32. The other collectives
//! keep the critical path alone.
//!
//! # Between hosts
//! When an all-reduce's ranks span hosts, the flat algorithms' terms are costed under the
//! constants of the link between hosts ([`PlanParams::inter_host_model`]), and the bytes their
//! crossing steps send take as long as the host's ranks that cross at once make them: a
//! host's `s` ranks share its link ([`shared_link_bytes`]; NCCL likewise costs a node's
//! bandwidth, not a rank's). In the hierarchy only the leaders cross.

use alloc::format;
use alloc::string::String;

use super::{Algorithm, Collective, HostMap, PlanParams};

mod link;
pub use link::{
    LinkKind, BETWEEN_HOSTS_COST_MODEL, MEMORY_COST_MODEL, NETWORK_COST_MODEL,
    SHARED_MEMORY_COST_MODEL,
};

/// The constants of the cost model ([`cost`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CostModel {
    /// `α`: nanoseconds per dependent network step.
    pub step_ns: u64,
    /// `o`: nanoseconds per FIFO entry sent or received (proxy, transport and device work).
    pub entry_ns: u64,
    /// `β`: picoseconds per byte sent.
    pub byte_ps: u64,
    /// `γ`: picoseconds per byte reduced.
    pub reduce_ps: u64,
}

/// The default constants of [`LinkKind::Memory`] ([`link::MEMORY_COST_MODEL`]): what
/// [`PlanParams::new`] starts with. A producer whose messages take another kind of link sets
/// [`LinkKind::default_cost_model`] (proxy-perf and the C library do, by their transport).
pub const DEFAULT_COST_MODEL: CostModel = link::MEMORY_COST_MODEL;

/// The algorithms [`pick`] chooses among for `c`, in order of preference on a tie.
pub const fn candidates(c: Collective) -> &'static [Algorithm] {
    match c {
        Collective::AllReduce => &[
            Algorithm::Direct,
            Algorithm::RecursiveDoubling,
            Algorithm::Rabenseifner,
            Algorithm::Ring,
        ],
        Collective::AllGather => &[
            Algorithm::Direct,
            Algorithm::Bruck,
            Algorithm::RecursiveDoubling,
            Algorithm::Ring,
        ],
        Collective::ReduceScatter => &[
            Algorithm::Direct,
            Algorithm::RecursiveHalving,
            Algorithm::Ring,
        ],
        Collective::Broadcast => &[
            Algorithm::Direct,
            Algorithm::Binomial,
            Algorithm::ScatterAllgather,
            Algorithm::Ring,
        ],
        Collective::SendRecv => &[Algorithm::Direct],
        Collective::AllToAll => &[Algorithm::Direct, Algorithm::Bruck],
    }
}

/// `⌊log2 n⌋` and whether `n` is not a power of two (the fold's two extra steps), for `n ≥ 1`.
const fn log2_fold(n: u64) -> (u64, bool) {
    let l = 63 - n.leading_zeros() as u64;
    (l, !n.is_power_of_two())
}

/// `⌈log2 n⌉` for `n ≥ 1`.
const fn ceil_log2(n: u64) -> u64 {
    64 - (n - 1).leading_zeros() as u64
}

/// The terms of the model for `algorithm` on `c` (the arguments as [`cost`]'s): what the
/// constants multiply. `None` when the algorithm does not support `c` or is
/// [`Algorithm::Auto`]; all zero for one rank. A calibration fits the constants to measured
/// times by these (the model is linear in them).
pub fn terms(
    c: Collective,
    algorithm: Algorithm,
    bytes: u64,
    nranks: u32,
    chunk: u64,
    split: bool,
) -> Option<Terms> {
    if algorithm == Algorithm::Auto || !algorithm.supports(c) {
        return None;
    }
    let n = u128::from(nranks.max(1));
    if n == 1 {
        return Some(Terms::default());
    }
    let chunk = u128::from(chunk.max(1));
    // Entries of one message of `b` bytes (an empty message is still one entry).
    let ent = |b: u128| b.div_ceil(chunk).max(1);
    // Entries of `k` rank blocks of `blk` bytes moved together: one run, or split, each
    // block on its own.
    let run = |k: u128, blk: u128| if split { k * ent(blk) } else { ent(k * blk) };
    let (l, fold) = log2_fold(u64::from(nranks.max(1)));
    let l = u128::from(l);
    let f = u128::from(fold);
    let p = 1u128 << l;
    let b = u128::from(bytes);
    // (steps, entries sent + received, bytes sent, bytes reduced)
    let (steps, entries, sent, reduced): (u128, u128, u128, u128) = match (c, algorithm) {
        (Collective::SendRecv | Collective::AllToAll, Algorithm::Direct | Algorithm::Ring) => {
            let per = if c == Collective::AllToAll { b / n } else { b };
            let k = if c == Collective::AllToAll { n - 1 } else { 1 };
            (1, 2 * k * ent(per), k * per, 0)
        }
        (Collective::AllReduce, Algorithm::Direct) => {
            (1, 2 * (n - 1) * ent(b), (n - 1) * b, (n - 1) * b)
        }
        (Collective::AllReduce, Algorithm::Ring) => {
            // The chunk pipeline overlaps the reductions with the transfers.
            let seg = b.div_ceil(n);
            (2 * (n - 1), 4 * (n - 1) * ent(seg), 2 * (n - 1) * seg, 0)
        }
        (Collective::AllReduce, Algorithm::RecursiveDoubling) => {
            let s = l + 2 * f;
            (s, 2 * s * ent(b), s * b, (l + f) * b)
        }
        (Collective::AllReduce, Algorithm::Rabenseifner) => {
            // Halving and doubling move (p − 1)/p of the vector each; the fold and unfold
            // move it whole.
            let part = b * (p - 1) / p;
            let half_entries: u128 = (1..=l).map(|k| 2 * ent(b >> k)).sum();
            (
                2 * l + 2 * f,
                2 * half_entries + 2 * f * ent(b),
                2 * part + 2 * f * b,
                part + f * b,
            )
        }
        (Collective::AllGather | Collective::ReduceScatter, Algorithm::Direct) => {
            let blk = b / n;
            let red = if c == Collective::ReduceScatter {
                (n - 1) * blk
            } else {
                0
            };
            (1, 2 * (n - 1) * ent(blk), (n - 1) * blk, red)
        }
        (Collective::AllGather | Collective::ReduceScatter, Algorithm::Ring) => {
            // The chunk pipeline overlaps the reductions with the transfers.
            let blk = b / n;
            (n - 1, 2 * (n - 1) * ent(blk), (n - 1) * blk, 0)
        }
        (Collective::AllGather, Algorithm::RecursiveDoubling) => {
            let blk = b / n;
            // Step k moves 2^k blocks; the fold one block in, the unfold n − 1 out.
            let e: u128 = (0..l).map(|k| 2 * run(1 << k, blk)).sum();
            (
                l + 2 * f,
                e + f * (ent(blk) + run(n - 1, blk)),
                (p - 1) * blk + f * n * blk,
                0,
            )
        }
        (Collective::AllGather, Algorithm::Bruck) => {
            let blk = b / n;
            let s = u128::from(ceil_log2(u64::from(nranks)));
            // Step k moves min(2^k, n − 2^k) blocks.
            let e: u128 = (0..s)
                .map(|k| 2 * run((1u128 << k).min(n - (1u128 << k)), blk))
                .sum();
            (s, e, (n - 1) * blk, 0)
        }
        (Collective::ReduceScatter, Algorithm::RecursiveHalving) => {
            let part = b * (p - 1) / p;
            let e: u128 = (1..=l).map(|k| 2 * (n >> k).max(1) * ent(b / n)).sum();
            (
                l + 2 * f,
                e + 2 * f * n * ent(b / n),
                part + f * b,
                part + f * b,
            )
        }
        (Collective::Broadcast, Algorithm::Direct) => (1, (n - 1) * ent(b), (n - 1) * b, 0),
        (Collective::Broadcast, Algorithm::Ring) => {
            // A chain, pipelined in chunks: n − 1 hops of one chunk, then the rest streams.
            let chunks = ent(b);
            (n - 1 + chunks - 1, 2 * chunks, b, 0)
        }
        (Collective::Broadcast, Algorithm::Binomial) => {
            let s = u128::from(ceil_log2(u64::from(nranks)));
            (s, (s + 1) * ent(b), s * b, 0)
        }
        (Collective::Broadcast, Algorithm::ScatterAllgather) => {
            // The scatter: about half the vector out of the root in ⌈log2 n⌉ steps; the ring:
            // n − 1 segments each way.
            let s = u128::from(ceil_log2(u64::from(nranks)));
            let seg = b.div_ceil(n);
            (
                s + n - 1,
                s * ent(b / 2) + 2 * (n - 1) * ent(seg),
                b * (n - 1) / n + (n - 1) * seg,
                0,
            )
        }
        (Collective::AllToAll, Algorithm::Bruck) => {
            let s = u128::from(ceil_log2(u64::from(nranks)));
            let blk = b / n;
            // Step k moves the blocks whose index has bit k set, about n/2 of them; unsplit
            // they are packed into one run, and the packing and unpacking copies are local
            // work, counted at γ.
            let half = (n / 2).max(1);
            let copies = if split { 0 } else { 2 * s * half * blk };
            (s, 2 * s * run(half, blk), s * half * blk, copies)
        }
        _ => return None,
    };
    Some(Terms {
        steps,
        entries,
        sent,
        reduced,
    })
}

/// What the constants of a [`CostModel`] multiply for one algorithm ([`terms`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Terms {
    /// Dependent network steps (`× α`).
    pub steps: u128,
    /// FIFO entries sent and received (`× o`).
    pub entries: u128,
    /// Bytes sent (`× β`).
    pub sent: u128,
    /// Bytes reduced outside the transfers (`× γ`).
    pub reduced: u128,
}

impl Terms {
    /// The modelled time in nanoseconds under `m` (saturates at `u64::MAX`).
    pub fn time_ns(&self, m: &CostModel) -> u64 {
        let ps = self
            .steps
            .saturating_mul(u128::from(m.step_ns) * 1000)
            .saturating_add(self.entries.saturating_mul(u128::from(m.entry_ns) * 1000))
            .saturating_add(self.sent.saturating_mul(u128::from(m.byte_ps)))
            .saturating_add(self.reduced.saturating_mul(u128::from(m.reduce_ps)));
        u64::try_from(ps / 1000).unwrap_or(u64::MAX)
    }
}

/// The modelled time in nanoseconds of `algorithm` for `c` on `nranks` ranks with `bytes`
/// bytes in the larger buffer ([`PlanParams::bytes`]) and FIFO entries of at most `chunk`
/// bytes, under `m`; `split`: the plan is split over streams or blocks
/// ([`crate::planner::plan_blocks`]), where the `log n` all-gathers and Bruck's all-to-all
/// move every rank block as entries of its own instead of one run per step. `None` when the
/// algorithm does not support `c` or is [`Algorithm::Auto`]. One rank costs 0. Saturates
/// instead of overflowing.
pub fn cost(
    c: Collective,
    algorithm: Algorithm,
    bytes: u64,
    nranks: u32,
    chunk: u64,
    split: bool,
    m: &CostModel,
) -> Option<u64> {
    if algorithm == Algorithm::Hierarchical && algorithm.supports(c) {
        // Without a host map every rank is its own host: the best flat algorithm.
        return candidates(c)
            .iter()
            .filter_map(|&a| cost(c, a, bytes, nranks, chunk, split, m))
            .min();
    }
    terms(c, algorithm, bytes, nranks, chunk, split).map(|t| t.time_ns(m))
}

/// The modelled time in nanoseconds of [`Algorithm::Hierarchical`] for `p` (an all-reduce
/// whose [`PlanParams::hosts`] spans hosts, or one crowded host), from three phases on its
/// groups ([`PlanParams::groups`]: the hosts, or the CPU groups of one host): the largest
/// group's gather to its leader (one step; its members' vectors cross the host's link into
/// the leader and are reduced there) and binomial broadcast under [`PlanParams::cost_model`],
/// and the leaders' all-reduce under [`PlanParams::leaders_model`] (the cheapest flat
/// algorithm for one rank per group). The vector runs through the phases in `k` pieces: the
/// plan's parts (streams × blocks, [`crate::planner::plan_blocks`]) times the pieces the
/// hierarchical all-reduce cuts each part into ([`crate::planner::hier_pieces`]). They
/// pipeline (a piece's gather runs while the one before it crosses the link): the phases of
/// one piece, plus `k − 1` times the slowest of them.
pub fn hierarchical_cost(p: &PlanParams) -> u64 {
    let parts = u64::from(p.streams.saturating_mul(p.blocks).max(1));
    let h = hosts_of(p);
    let mut piece = *p;
    piece.count = p.count.div_ceil(parts);
    let pieces = crate::planner::hier_pieces(piece.count, p.chunk_elems(), h);
    piece.count = piece.count.div_ceil(pieces);
    let k = parts * pieces;
    let phases = hierarchical_phases(&piece, parts > 1);
    let slowest = phases.iter().copied().max().unwrap_or(0);
    phases
        .iter()
        .fold(0u64, |t, &x| t.saturating_add(x))
        .saturating_add(slowest.saturating_mul(k - 1))
}

/// The hierarchical all-reduce's groups for `p` ([`PlanParams::groups`]), or every rank its
/// own group without a map.
fn hosts_of(p: &PlanParams) -> u32 {
    let g = p.groups();
    if g.is_none() {
        p.nranks
    } else {
        g.sizes().len() as u32
    }
}

/// The three phases of [`hierarchical_cost`] for `p`'s vector in nanoseconds: gather, leaders'
/// all-reduce, broadcast.
fn hierarchical_phases(p: &PlanParams, split: bool) -> [u64; 3] {
    let b = p.bytes();
    let s = p.groups().sizes().iter().copied().max().unwrap_or(1);
    let chunk = u128::from(p.chunk_bytes.max(1));
    let ent = u128::from(b).div_ceil(chunk).max(1);
    let m = u128::from(s.saturating_sub(1));
    let gather = Terms {
        steps: u128::from(s > 1),
        entries: m * ent,
        sent: m * u128::from(b),
        reduced: m * u128::from(b),
    }
    .time_ns(&p.cost_model);
    let inter = leaders_terms(p, split, false).map_or(0, |t| t.time_ns(&p.leaders_model()));
    let bcast = cost(
        Collective::Broadcast,
        Algorithm::Binomial,
        b,
        s,
        p.chunk_bytes,
        split,
        &p.cost_model,
    )
    .unwrap_or(0);
    [gather, inter, bcast]
}

/// The CPUs the largest host's ranks progress on, when they are fewer than its ranks and
/// known ([`PlanParams::progress_cpus`] > 0): `Some(cpus)` turns the crowding bound on
/// ("Crowded hosts" above). `None` otherwise, and without a host map (every rank its own
/// host, [`crate::planner::HostMap::NONE`]).
pub fn crowding(p: &PlanParams) -> Option<u32> {
    (p.progress_cpus > 0 && largest_host(p) > p.progress_cpus).then_some(p.progress_cpus)
}

/// The ranks of `p`'s largest host (1 without a map: every rank its own host).
fn largest_host(p: &PlanParams) -> u32 {
    p.hosts.sizes().iter().copied().max().unwrap_or(1)
}

/// The terms of one rank's work for `algorithm` on `c` (the arguments as [`terms`]'s): its
/// critical path, plus the reductions the critical path counts as overlapped with the
/// transfers (the ring's chunk pipeline reduces a segment while the next one moves). Overlap
/// needs a CPU that is free while the transfers run; on a crowded host there is none, and
/// the reductions are work like the rest. Measured on 2 CPUs, in process (BENCHMARKS.md,
/// "The ring's reductions are work on a crowded host"): 8 ranks, 16 MiB, the ring 23.2 ms
/// against the hierarchy's 15.2, which the critical path alone ranked the other way.
/// `None` where [`terms`] has none.
pub fn work_terms(
    c: Collective,
    algorithm: Algorithm,
    bytes: u64,
    nranks: u32,
    chunk: u64,
    split: bool,
) -> Option<Terms> {
    let mut t = terms(c, algorithm, bytes, nranks, chunk, split)?;
    let n = u128::from(nranks.max(1));
    let b = u128::from(bytes);
    t.reduced += match (c, algorithm) {
        (Collective::AllReduce, Algorithm::Ring) => (n - 1) * b.div_ceil(n),
        (Collective::ReduceScatter, Algorithm::Ring) => (n - 1) * (b / n),
        _ => 0,
    };
    Some(t)
}

/// The work in nanoseconds, summed over the ranks of `p`'s largest host, of `algorithm` for
/// `p`'s all-reduce under `model` (what the crowding bound divides by the CPUs; a rank's
/// steps count, its waiting polls): each rank's [`work_terms`] for the flat algorithms; for
/// [`Algorithm::Hierarchical`] the gathers into the host's leaders and their broadcasts (`2
/// (s − g)` messages each way on `s` ranks in `g` groups, one step's wait per rank) under
/// [`PlanParams::cost_model`], and its `g` leaders' parts of the leaders' all-reduce under
/// [`PlanParams::leaders_model`]. `None` where [`terms`] has none. Saturates.
pub fn crowded_work(p: &PlanParams, algorithm: Algorithm, model: &CostModel) -> Option<u64> {
    let b = p.bytes();
    let split = p.streams.saturating_mul(p.blocks) > 1;
    let s = u64::from(largest_host(p));
    if algorithm != Algorithm::Hierarchical {
        let t = work_terms(p.collective, algorithm, b, p.nranks, p.chunk_bytes, split)?;
        return Some(t.time_ns(model).saturating_mul(s));
    }
    let ent = u128::from(b)
        .div_ceil(u128::from(p.chunk_bytes.max(1)))
        .max(1);
    // The host's groups: one per host, or its ranks' CPU groups ([`PlanParams::groups`]).
    let g = p.groups();
    let groups = if g == p.hosts {
        1
    } else {
        g.sizes().len() as u64
    };
    let m = u128::from(s.saturating_sub(groups));
    let local = Terms {
        steps: if m > 0 { u128::from(s) } else { 0 },
        entries: 4 * m * ent,
        sent: 2 * m * u128::from(b),
        reduced: m * u128::from(b),
    }
    .time_ns(&p.cost_model);
    // The leaders' part is work too: with their ring's reductions (`work_terms`).
    let inter = leaders_terms(p, split, true).map_or(0, |t| t.time_ns(&p.leaders_model()));
    Some(local.saturating_add(inter.saturating_mul(groups)))
}

/// The modelled time in nanoseconds that [`pick`] compares for `algorithm` on `p`: [`cost`]
/// under [`PlanParams::inter_host_model`] when an all-reduce spans hosts (plus the bytes of
/// [`shared_link_bytes`] at its β), else under
/// [`PlanParams::cost_model`]; [`hierarchical_cost`] for [`Algorithm::Hierarchical`] where it
/// is a candidate (ranks spanning hosts, or a crowded host with a host map); on a crowded host
/// ([`crowding`]) an all-reduce's time at least the host's work over its CPUs
/// ([`crowded_work`]). `None` for [`Algorithm::Auto`], an algorithm `p`'s collective does not
/// have, and the hierarchical all-reduce where it is not a candidate.
pub fn modelled_ns(p: &PlanParams, algorithm: Algorithm) -> Option<u64> {
    let all_reduce = p.collective == Collective::AllReduce;
    let spans = all_reduce && p.hosts.spans_hosts();
    let crowd = crowding(p).filter(|_| all_reduce);
    let model = if spans {
        &p.inter_host_model
    } else {
        &p.cost_model
    };
    let t = if algorithm == Algorithm::Hierarchical {
        if !(all_reduce && (spans || (crowd.is_some() && !p.hosts.is_none()))) {
            return None;
        }
        hierarchical_cost(p)
    } else {
        let t = cost(
            p.collective,
            algorithm,
            p.bytes(),
            p.nranks,
            p.chunk_bytes,
            p.streams.saturating_mul(p.blocks) > 1,
            model,
        )?;
        if spans {
            let shared = Terms {
                sent: shared_link_bytes(p, algorithm),
                ..Terms::default()
            };
            t.saturating_add(shared.time_ns(model))
        } else {
            t
        }
    };
    Some(match crowd {
        Some(cpus) => crowded_work(p, algorithm, model).map_or(t, |w| t.max(w / u64::from(cpus))),
        None => t,
    })
}

/// The bytes a host's link carries for `p`'s all-reduce under the flat `algorithm` beyond what
/// one rank's critical path counts ([`terms`] costs each rank's sends as if the rank had the
/// link to itself): [`shared_crossing_bytes`] of `p`'s collective, vector, ranks and host map.
/// Measured between two namespaces of two ranks each (BENCHMARKS.md, "Two hosts"): both ranks
/// of a host crossing at once take twice the time of one, which the model without this term
/// missed at 512 KiB and 2 MiB.
pub fn shared_link_bytes(p: &PlanParams, algorithm: Algorithm) -> u128 {
    shared_crossing_bytes(p.collective, algorithm, p.bytes(), p.nranks, &p.hosts)
}

/// The bytes beyond one rank's critical path that a host's link carries for `collective` of
/// `bytes` per rank (the all-reduce's vector, the all-to-all's whole buffer of `nranks`
/// blocks) under `algorithm` on `nranks` ranks laid out as `hosts`: in the steps where a rank's
/// partner is on another host, every rank of the host crosses at once, so the largest host's
/// `s` ranks share its link and the step's bytes take `s` times as long. With hosts of `s`
/// consecutive ranks, the all-reduce's steps of recursive doubling and Rabenseifner's halving
/// and doubling at distances `≥ s` cross (the first `⌊log2 s⌋` distances stay inside a host);
/// its direct sends `n − s` of its `n − 1` messages across, the direct all-to-all `n − s` of
/// its `n − 1` blocks (what `proxy-perf --tune` times to fit the link's cost per message). The
/// ring crosses once per host and step: nothing shared. 0 on one host, and for the other
/// collectives and algorithms.
///
/// Exact, and charged, only where every host has the same power-of-two number of ranks and
/// their count is a power of two too. Elsewhere the fold of the ranks above a power of two
/// renumbers the partners, and which steps cross, and with how many ranks of a host, follows
/// from the map (two hosts of three: none crosses with two ranks at once); 0 there, the model
/// as it was.
pub fn shared_crossing_bytes(
    collective: Collective,
    algorithm: Algorithm,
    bytes: u64,
    nranks: u32,
    hosts: &HostMap,
) -> u128 {
    let sizes = hosts.sizes();
    let host = sizes.iter().copied().max().unwrap_or(1);
    let even = sizes.iter().all(|&x| x == host)
        && host.is_power_of_two()
        && nranks.is_power_of_two()
        && u64::from(nranks) == hosts.ranks();
    if !hosts.spans_hosts() || host < 2 || !even {
        return 0;
    }
    let (s, n) = (u128::from(host), u128::from(nranks.max(1)));
    let b = u128::from(bytes);
    let (l, _) = log2_fold(u64::from(nranks.max(1)));
    let (in_host, _) = log2_fold(u64::from(host));
    // Steps at distance ≥ s: the crossing ones.
    let cross_steps = u128::from(l.saturating_sub(in_host));
    let crossing = match (collective, algorithm) {
        (Collective::AllReduce, Algorithm::RecursiveDoubling) => cross_steps * b,
        // Halving from distance p/2 down moves b/2, b/4, ...: the crossing steps come first;
        // the doubling crosses the same distances back.
        (Collective::AllReduce, Algorithm::Rabenseifner) => 2 * (b - (b >> cross_steps.min(127))),
        (Collective::AllReduce, Algorithm::Direct) => n.saturating_sub(s) * b,
        // Blocks of b / n, as `terms` counts them.
        (Collective::AllToAll, Algorithm::Direct) => n.saturating_sub(s) * (b / n),
        _ => 0,
    };
    (s - 1) * crossing
}

/// The terms of the hierarchy's middle phase on `p`'s vector: the leaders' all-reduce, one
/// rank per group, with the flat algorithm the tuner gives them under
/// [`PlanParams::leaders_model`] (all zero for one group); `work`: a leader's work
/// ([`work_terms`], for the crowding bound), else its critical path.
fn leaders_terms(p: &PlanParams, split: bool, work: bool) -> Option<Terms> {
    let h = hosts_of(p);
    let mut leaders = *p;
    leaders.nranks = h;
    leaders.cost_model = p.leaders_model();
    let of = if work { work_terms } else { terms };
    of(
        Collective::AllReduce,
        crate::planner::algos_leaders(&leaders, h),
        p.bytes(),
        h,
        p.chunk_bytes,
        split,
    )
}

/// The algorithm [`Algorithm::Auto`] resolves to for `p`: the cheapest of [`candidates`] by
/// [`modelled_ns`], direct only at or below [`PlanParams::direct_threshold_bytes`] where a
/// ring exists (the measured crossover where direct loses to ring), the first on a tie.
/// Send-recv is always direct. When an all-reduce's ranks span hosts
/// ([`crate::planner::HostMap::spans_hosts`]) the flat algorithms are costed under
/// [`PlanParams::inter_host_model`] (their steps cross hosts) and [`Algorithm::Hierarchical`]
/// is a candidate too ([`hierarchical_cost`]): it wins where the link between hosts is the
/// slow one. On a crowded host ([`crowding`]) an all-reduce's times are bounded below by the
/// host's work over its CPUs ([`crowded_work`]), and [`Algorithm::Hierarchical`] is a
/// candidate on any host map, one host included.
pub fn pick(p: &PlanParams) -> Algorithm {
    let bytes = p.bytes();
    let mut best = (u64::MAX, Algorithm::Ring);
    for &a in candidates(p.collective) {
        if a == Algorithm::Direct
            && bytes > p.direct_threshold_bytes
            && candidates(p.collective).contains(&Algorithm::Ring)
        {
            continue;
        }
        if let Some(t) = modelled_ns(p, a) {
            if t < best.0 {
                best = (t, a);
            }
        }
    }
    match modelled_ns(p, Algorithm::Hierarchical) {
        Some(t) if t < best.0 => Algorithm::Hierarchical,
        _ => best.1,
    }
}

/// The environment variable that names the algorithm of `c` in place of the tuner's choice:
/// `NEURON_RT_PROXY_ALGO_` and the collective's name in capitals with `_` for `-`
/// (`NEURON_RT_PROXY_ALGO_ALL_REDUCE`). Read by proxy-perf and the C library
/// (`libnrt_proxy`); its value is parsed by [`parse_algo`].
pub const fn algo_env_var(c: Collective) -> &'static str {
    match c {
        Collective::AllReduce => "NEURON_RT_PROXY_ALGO_ALL_REDUCE",
        Collective::AllGather => "NEURON_RT_PROXY_ALGO_ALL_GATHER",
        Collective::ReduceScatter => "NEURON_RT_PROXY_ALGO_REDUCE_SCATTER",
        Collective::Broadcast => "NEURON_RT_PROXY_ALGO_BROADCAST",
        Collective::SendRecv => "NEURON_RT_PROXY_ALGO_SEND_RECV",
        Collective::AllToAll => "NEURON_RT_PROXY_ALGO_ALL_TO_ALL",
    }
}

/// Parses `value` (surrounding white space ignored) as the algorithm of `c` named by `source`
/// (a variable or option name, for the message): an [`Algorithm::name`]; `auto` is
/// [`Algorithm::Auto`] (no override).
///
/// # Errors
/// `"SOURCE=VALUE: not an algorithm (auto, ring, ...)"` for an unknown name;
/// `"SOURCE=VALUE: NAME does not support COLLECTIVE (it does: ...)"` for an algorithm the
/// collective does not have ([`Algorithm::supports`]).
pub fn parse_algo(c: Collective, source: &str, value: &str) -> Result<Algorithm, String> {
    let names = |pred: &dyn Fn(Algorithm) -> bool| {
        Algorithm::ALL
            .into_iter()
            .filter(|&a| pred(a))
            .map(Algorithm::name)
            .collect::<alloc::vec::Vec<_>>()
            .join(", ")
    };
    let Some(a) = Algorithm::from_name(value.trim()) else {
        return Err(format!(
            "{source}={value}: not an algorithm ({})",
            names(&|_| true)
        ));
    };
    if !a.supports(c) {
        return Err(format!(
            "{source}={value}: {} does not support {} (it does: {})",
            a.name(),
            c.name(),
            names(&|x| x.supports(c))
        ));
    }
    Ok(a)
}

/// Every collective's algorithm from the environment through `lookup` (a variable's value, or
/// `None` when unset), in [`Collective::ALL`]'s order: `None` where the variable
/// ([`algo_env_var`]) is unset, empty or `auto`.
///
/// # Errors
/// The first bad value's message ([`parse_algo`]).
pub fn algos_from_env(
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<[Option<Algorithm>; Collective::ALL.len()], String> {
    let mut out = [None; Collective::ALL.len()];
    for (o, c) in out.iter_mut().zip(Collective::ALL) {
        let var = algo_env_var(c);
        if let Some(v) = lookup(var).filter(|v| !v.trim().is_empty()) {
            *o = Some(parse_algo(c, var, &v)?).filter(|&a| a != Algorithm::Auto);
        }
    }
    Ok(out)
}

/// Why [`PlanParams::resolved_algorithm`] is what it is, as [`PlanParams::label`] names it:
/// `asked` for an algorithm other than [`Algorithm::Auto`]; `tuner` for the cost model with a
/// [`LinkKind`]'s default constants (within and between hosts); `tuner-calibrated` with other
/// constants (a calibration file).
pub fn why(p: &PlanParams) -> &'static str {
    if p.algorithm != Algorithm::Auto {
        "asked"
    } else if LinkKind::is_default(&p.cost_model) && LinkKind::is_default(&p.inter_host_model) {
        "tuner"
    } else {
        "tuner-calibrated"
    }
}
