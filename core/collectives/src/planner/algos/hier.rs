//! The hierarchical all-reduce ([`Algorithm::Hierarchical`]), composed of three phases on the
//! groups of [`PlanParams::groups`] (the host map, or on one crowded host the ranks that share
//! a CPU; "host" below is a group): each host's members send their vectors to the
//! host's first rank (the leader), which folds them into its output in rank order; the leaders
//! all-reduce their outputs in place with the flat algorithm the tuner picks for them under
//! the inter-host constants (ring, direct, recursive doubling or Rabenseifner, planned on the
//! leaders numbered `0..H` and moved onto their ranks); each leader broadcasts the result down
//! a binomial tree inside its host. MPICH's SMP-aware all-reduce (`MPIR_Allreduce_intra_smp`:
//! intra-node reduce, inter-node all-reduce, intra-node broadcast) and NCCL's tree.
//!
//! A vector of many chunks runs through the phases in pieces ([`hier_pieces`]), as NCCL's
//! tree pipelines its chunks: every piece over the same ops (the builder's [`Group`] with
//! `reuse`), piece `i + 1`'s program after piece `i`'s, whose broadcast is then still in
//! flight, so the host's link and the link between hosts overlap.
//!
//! Tags: the gather uses the member's index in its host (`1..s`), the leaders' phase its own
//! algorithm's tags (between leaders only: no pair of ranks meets in two phases but the
//! leader and a member, in the gather and the broadcast), the broadcast the binomial tree's
//! tags plus `s_max` (the largest host). All below `max(2(n − 1), n + ⌈log2 n⌉)`, the range
//! the split gives a plan (`split`; the second term is for one host of 2 or 3 ranks).

use alloc::vec::Vec;

use super::{ceil_div, Gen, Group, RingKind};
use crate::planner::{tuner, Algorithm, Buf, Collective, HostMap, Loc, PlanParams};

impl Gen {
    /// The hierarchical all-reduce (module docs): the vector cut into [`hier_pieces`] pieces,
    /// each run through the three phases in turn over the same ops.
    pub(super) fn hierarchical_all_reduce(&mut self) {
        let hosts = self.p.groups();
        let h_n = if hosts.is_none() {
            self.n as u32
        } else {
            hosts.sizes().len() as u32
        };
        let (count, ce) = (self.p.count, self.ce);
        let pieces = hier_pieces(count, ce, h_n);
        // Whole chunks per piece, the remainder spread over the first pieces.
        let units = ceil_div(count, ce);
        let (per, extra) = (units / pieces, units % pieces);
        // The leaders' algorithm of the first (largest) piece, for every piece.
        self.p.count = ((per + u64::from(extra > 0)) * ce).min(count);
        let algo = leaders_algorithm(&self.p, h_n);
        let mut lo = 0;
        for i in 0..pieces {
            let len = ((per + u64::from(i < extra)) * ce).min(count - lo);
            self.b.set_base(lo * self.elt);
            self.p.count = len;
            self.hierarchical_piece(algo);
            lo += len;
        }
        self.p.count = count;
        self.b.set_base(0);
        self.b.set_group(Group::default());
    }

    /// The three phases on the current piece (`self.p.count` elements from the builder's
    /// base), over the ops of the pieces before it; `algo`: the leaders' all-reduce.
    fn hierarchical_piece(&mut self, algo: Algorithm) {
        let hosts = self.p.groups();
        let r = self.r as u32;
        let (host, first, size) = hosts.host_of(r).unwrap_or((r, r, 1));
        // The leaders (first rank of each host); without a map every rank leads itself.
        let leaders: Vec<u32> = if hosts.is_none() {
            (0..self.n as u32).collect()
        } else {
            hosts
                .sizes()
                .iter()
                .scan(0u32, |acc, &s| {
                    let f = *acc;
                    *acc += s;
                    Some(f)
                })
                .collect()
        };
        let s_max = hosts.sizes().iter().copied().max().unwrap_or(1);
        let local = r - first;
        // Phase 1: the host's vectors folded into the leader's output.
        self.b.set_group(Group {
            peers: None,
            tag_offset: 0,
            reuse: true,
        });
        if size > 1 {
            self.gather_reduce(first, size, local);
        } else {
            self.b.copy(
                Loc::new(Buf::Output, 0),
                Loc::new(Buf::Input, 0),
                self.p.count * self.elt,
            );
        }
        // Phase 2: the leaders' all-reduce, in place on their outputs.
        let h_n = leaders.len() as u32;
        if local == 0 && h_n > 1 {
            let saved = (self.n, self.r, self.p);
            self.n = u64::from(h_n);
            self.r = u64::from(host);
            self.p.nranks = h_n;
            self.p.rank = host;
            self.p.in_place = true;
            self.p.hosts = HostMap::NONE;
            self.p.algorithm = algo;
            self.b.set_input_is_output(true);
            self.b.set_group(Group {
                peers: Some(leaders),
                tag_offset: 0,
                reuse: true,
            });
            let scratch = self.scratch;
            match algo {
                Algorithm::Ring => self.ring(RingKind::AllReduce),
                Algorithm::RecursiveDoubling => self.rd_all_reduce(),
                Algorithm::Rabenseifner => self.halving(true),
                _ => self.direct_reduce(false),
            }
            self.scratch = self.scratch.max(scratch);
            self.b.set_input_is_output(false);
            (self.n, self.r, self.p) = saved;
        }
        // Phase 3: the leader's result down a binomial tree inside the host.
        if size > 1 {
            let saved = (self.n, self.r, self.p);
            self.n = u64::from(size);
            self.r = u64::from(local);
            self.p.nranks = size;
            self.p.rank = local;
            self.p.root = 0;
            self.b.set_input_is_output(true);
            self.b.set_group(Group {
                peers: Some((first..first + size).collect()),
                tag_offset: s_max,
                reuse: true,
            });
            self.binomial_broadcast();
            self.b.set_input_is_output(false);
            (self.n, self.r, self.p) = saved;
        }
    }

    /// Phase 1: members (`local ≥ 1`) send their input to the leader `first` (tag `local`);
    /// the leader receives each member's chunks into a window of `w` scratch slots per member
    /// and folds them into its output chunk by chunk, in rank order (own input first).
    fn gather_reduce(&mut self, first: u32, size: u32, local: u32) {
        let (count, elt) = (self.p.count, self.elt);
        let chunks = ceil_div(count, self.ce);
        if local > 0 {
            let op = self.b.op(Some(first), None, local);
            for c in 0..chunks {
                let (off, bytes) = self.chunk(0, count, c);
                self.b.send(op, Loc::new(Buf::Input, off), bytes);
            }
            return;
        }
        let m = u64::from(size - 1);
        let ops: Vec<u32> = (1..size)
            .map(|k| self.b.op(None, Some(first + k), k))
            .collect();
        let w = self.w.min(chunks).max(1);
        let slot = self.ce.min(count) * elt;
        self.scratch = self.scratch.max(m * w * slot);
        let rslot = |k: u64, c: u64| Loc::new(Buf::Scratch, ((k - 1) * w + c % w) * slot);
        for c in 0..w.min(chunks) {
            let (_, bytes) = self.chunk(0, count, c);
            for (k, &op) in (1..).zip(&ops) {
                self.b.recv(op, rslot(k, c), bytes);
            }
        }
        for c in 0..chunks {
            let (off, bytes) = self.chunk(0, count, c);
            let elems = bytes / elt;
            let out = Loc::new(Buf::Output, off);
            self.b
                .reduce(out, Loc::new(Buf::Input, off), rslot(1, c), elems, elt);
            for k in 2..=m {
                self.b.reduce(out, out, rslot(k, c), elems, elt);
            }
            if c + w < chunks {
                let (_, bytes) = self.chunk(0, count, c + w);
                for (k, &op) in (1..).zip(&ops) {
                    self.b.recv(op, rslot(k, c + w), bytes);
                }
            }
        }
    }
}

/// The flat all-reduce the leaders run: the tuner's pick for `h_n` ranks under the leaders'
/// constants ([`PlanParams::leaders_model`]: between hosts, or the host's for the groups of
/// one host; the same on every leader: it depends on the parameters only).
pub(in crate::planner) fn leaders_algorithm(p: &PlanParams, h_n: u32) -> Algorithm {
    let mut q = *p;
    q.collective = Collective::AllReduce;
    q.algorithm = Algorithm::Auto;
    q.nranks = h_n;
    q.rank = 0;
    q.hosts = HostMap::NONE;
    q.cost_model = p.leaders_model();
    // One leader per host or CPU: the leaders do not share a CPU.
    q.progress_cpus = 0;
    tuner::pick(&q)
}

/// Pieces the hierarchical all-reduce cuts a vector of `count` elements into (chunks of `ce`)
/// for `h_n` leaders: one piece per `2 · h_n` chunks (each leader's share of a piece is at
/// least two chunks), at most [`HIER_MAX_PIECES`], at least one. Piece `i + 1`'s gather runs
/// while piece `i`'s broadcast is in flight, and its leaders' phase while the members are
/// still receiving piece `i`, so the host's link and the link between hosts overlap.
pub(in crate::planner) fn hier_pieces(count: u64, ce: u64, h_n: u32) -> u64 {
    let units = count.div_ceil(ce.max(1));
    (units / (2 * u64::from(h_n.max(1)))).clamp(1, HIER_MAX_PIECES)
}

/// The most pieces [`hier_pieces`] cuts a vector into: 8 (the link between hosts pays its
/// step latency once per piece and leader step).
pub(in crate::planner) const HIER_MAX_PIECES: u64 = 8;
