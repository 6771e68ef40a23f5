//! What a plan is asked for: the collective ([`Collective`]: buffer shapes, the bus-bandwidth
//! factor, in-place offsets) and the algorithm's name ([`Algorithm`]: which collectives each
//! serves; `Auto` asks the [`crate::planner::tuner`]).

/// A collective operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Every rank ends with the element-wise reduction of every rank's `count` elements.
    AllReduce,
    /// Every rank ends with every rank's `count` elements, in rank order (`n × count`).
    AllGather,
    /// Rank `r` ends with the reduction of block `r` (`count` elements) of every rank's
    /// `n × count` input.
    ReduceScatter,
    /// Every rank ends with the root's `count` elements.
    Broadcast,
    /// Rank `r` sends `count` elements to `r+1` and receives `count` from `r−1` (mod n).
    SendRecv,
    /// Rank `r` sends block `p` (`count` elements) of its input to rank `p` and receives
    /// block `r` of every rank's input into block `p` of its output.
    AllToAll,
}

impl Collective {
    /// Every collective, in the order the tools list them.
    pub const ALL: [Collective; 6] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast,
        Collective::SendRecv,
        Collective::AllToAll,
    ];

    /// The command-line name (`all-reduce`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all-reduce",
            Collective::AllGather => "all-gather",
            Collective::ReduceScatter => "reduce-scatter",
            Collective::Broadcast => "broadcast",
            Collective::SendRecv => "send-recv",
            Collective::AllToAll => "all-to-all",
        }
    }

    /// Parses a command-line name (also accepts the names without the dash).
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s || c.name().chars().filter(|&ch| ch != '-').eq(s.chars()))
    }

    /// `true` for the collectives that apply a reduction op.
    pub const fn reduces(self) -> bool {
        matches!(self, Collective::AllReduce | Collective::ReduceScatter)
    }

    /// `true` for the collectives that use the root.
    pub const fn rooted(self) -> bool {
        matches!(self, Collective::Broadcast)
    }

    /// nccl-tests' bus-bandwidth factor: busbw = algbw × factor. All-reduce `2(n−1)/n`;
    /// all-gather, reduce-scatter, all-to-all `(n−1)/n`; broadcast and send-recv 1.
    pub fn busbw_factor(self, nranks: u32) -> f64 {
        let n = f64::from(nranks.max(1));
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
                (n - 1.0) / n
            }
            Collective::Broadcast | Collective::SendRecv => 1.0,
        }
    }

    /// `(input, output)` sizes in elements of one rank for `count` (the per-collective meaning
    /// of `count` is in the variant docs).
    pub const fn buffer_elems(self, count: u64, nranks: u32) -> (u64, u64) {
        let n = nranks as u64;
        match self {
            Collective::AllReduce | Collective::Broadcast | Collective::SendRecv => (count, count),
            Collective::AllGather => (count, count * n),
            Collective::ReduceScatter => (count * n, count),
            Collective::AllToAll => (count * n, count * n),
        }
    }

    /// In place (nccl-tests' convention): `(input offset, output offset)` in elements inside
    /// the one buffer of `max(input, output)` elements. All-gather's input is block `rank` of
    /// its output; reduce-scatter's output is block `rank` of its input; the others share the
    /// buffer from offset 0.
    pub const fn in_place_offsets(self, count: u64, rank: u32) -> (u64, u64) {
        match self {
            Collective::AllGather => (count * rank as u64, 0),
            Collective::ReduceScatter => (0, count * rank as u64),
            _ => (0, 0),
        }
    }
}

/// The algorithm a plan uses. One name, one meaning: each algorithm is defined for the
/// collectives [`Algorithm::supports`] lists; [`Algorithm::Ring`] and [`Algorithm::Direct`]
/// also accept send-recv and all-to-all, which they plan as the direct pairwise exchange.
///
/// The `log n` algorithms work for any rank count: the ranks above the largest power of two
/// `p ≤ n` are folded in first (the even rank of each of the first `2(n − p)` pairs hands its
/// data to the odd one, which takes part; at the end the odd one hands the result back), as
/// MPICH's `MPIR_Allreduce_intra_recursive_doubling` and Open MPI's `coll_tuned` do (Thakur,
/// Rabenseifner and Gropp, "Optimization of Collective Communication Operations in MPICH",
/// IJHPCA 2005, §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Choose by the cost model ([`tuner`](crate::planner::tuner)) among the algorithms that support the collective.
    Auto,
    /// Ring (bandwidth-optimal, `n−1` or `2(n−1)` steps, chunk-pipelined); broadcast: a chain.
    Ring,
    /// Direct exchange (one network step, every peer at once; `n − 1` messages per rank).
    Direct,
    /// Recursive doubling (all-reduce: whole vectors exchanged with partner `r xor 2^k`,
    /// `log2 p` steps; all-gather: the blocks gathered so far exchanged the same way).
    RecursiveDoubling,
    /// Rabenseifner's all-reduce: a reduce-scatter by recursive halving, then an all-gather by
    /// recursive doubling (`2 log2 p` steps, `2(p − 1)/p` of the vector sent per rank).
    Rabenseifner,
    /// Reduce-scatter by recursive halving: half of the remaining blocks exchanged with
    /// partner `r xor p/2^(k+1)` each step, `log2 p` steps.
    RecursiveHalving,
    /// Bruck (all-gather: `⌈log2 n⌉` steps, to `r − 2^k` from `r + 2^k`; all-to-all: the
    /// blocks whose relative index has bit `k` set move `2^k` ranks on in step `k`).
    Bruck,
    /// Broadcast down a binomial tree rooted at the root (`⌈log2 n⌉` steps).
    Binomial,
    /// Broadcast as a scatter of `n` segments down the binomial tree, then an all-gather of
    /// them around the ring (van de Geijn; `⌈log2 n⌉ + n − 1` steps, `2(n − 1)/n` of the
    /// vector sent per rank instead of the whole).
    ScatterAllgather,
    /// All-reduce over hosts ([`crate::planner::HostMap`]): each host's ranks reduce to its
    /// first rank (the leader; one step, every member sends its vector), the leaders all-reduce
    /// among themselves with the flat algorithm the tuner picks for them under the inter-host
    /// constants, and each leader broadcasts the result down a binomial tree inside its host
    /// (NCCL's tree / MPICH's SMP-aware all-reduce, `MPIR_Allreduce_intra_smp`). Without a
    /// host map every rank is its own host: the flat algorithm alone.
    Hierarchical,
}

impl Algorithm {
    /// Every algorithm, [`Algorithm::Auto`] first (the order of the C API's
    /// `NRT_PROXY_ALGO_*`).
    pub const ALL: [Algorithm; 10] = [
        Algorithm::Auto,
        Algorithm::Ring,
        Algorithm::Direct,
        Algorithm::RecursiveDoubling,
        Algorithm::Rabenseifner,
        Algorithm::RecursiveHalving,
        Algorithm::Bruck,
        Algorithm::Binomial,
        Algorithm::ScatterAllgather,
        Algorithm::Hierarchical,
    ];

    /// The command-line name (`auto`, `ring`, `direct`, `recursive-doubling`,
    /// `rabenseifner`, `recursive-halving`, `bruck`, `binomial`, `scatter-allgather`,
    /// `hierarchical`).
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Auto => "auto",
            Algorithm::Ring => "ring",
            Algorithm::Direct => "direct",
            Algorithm::RecursiveDoubling => "recursive-doubling",
            Algorithm::Rabenseifner => "rabenseifner",
            Algorithm::RecursiveHalving => "recursive-halving",
            Algorithm::Bruck => "bruck",
            Algorithm::Binomial => "binomial",
            Algorithm::ScatterAllgather => "scatter-allgather",
            Algorithm::Hierarchical => "hierarchical",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == s)
    }

    /// `true` if a plan of `c` can use this algorithm ([`Algorithm::Auto`] supports
    /// everything). Ring and direct support every collective (send-recv and all-to-all are
    /// then the direct exchange).
    pub const fn supports(self, c: Collective) -> bool {
        match self {
            Algorithm::Auto | Algorithm::Ring | Algorithm::Direct => true,
            Algorithm::RecursiveDoubling => {
                matches!(c, Collective::AllReduce | Collective::AllGather)
            }
            Algorithm::Rabenseifner | Algorithm::Hierarchical => matches!(c, Collective::AllReduce),
            Algorithm::RecursiveHalving => matches!(c, Collective::ReduceScatter),
            Algorithm::Bruck => matches!(c, Collective::AllGather | Collective::AllToAll),
            Algorithm::Binomial | Algorithm::ScatterAllgather => {
                matches!(c, Collective::Broadcast)
            }
        }
    }
}
