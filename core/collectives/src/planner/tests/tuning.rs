//! The tuner's overrides and labels: the environment variables' names and parser (shared by
//! proxy-perf and the C library), and why a plan has its algorithm.

use alloc::string::{String, ToString};

use super::params;
use crate::planner::tuner::{self, algo_env_var, algos_from_env, parse_algo, DEFAULT_COST_MODEL};
use crate::planner::{Algorithm, Collective, DataType};

#[test]
fn env_var_names_follow_the_collective_names() {
    for c in Collective::ALL {
        let want = alloc::format!(
            "NEURON_RT_PROXY_ALGO_{}",
            c.name().to_ascii_uppercase().replace('-', "_")
        );
        assert_eq!(algo_env_var(c), want);
    }
}

#[test]
fn parse_accepts_names_and_refuses_unknown_or_unsupported() {
    let c = Collective::AllReduce;
    assert_eq!(
        parse_algo(c, "V", " rabenseifner\n"),
        Ok(Algorithm::Rabenseifner)
    );
    assert_eq!(parse_algo(c, "V", "auto"), Ok(Algorithm::Auto));
    assert_eq!(
        parse_algo(c, "V", "tree").unwrap_err(),
        "V=tree: not an algorithm (auto, ring, direct, recursive-doubling, rabenseifner, \
         recursive-halving, bruck, binomial, scatter-allgather, hierarchical)"
    );
    assert_eq!(
        parse_algo(c, "V", "bruck").unwrap_err(),
        "V=bruck: bruck does not support all-reduce (it does: auto, ring, direct, \
         recursive-doubling, rabenseifner, hierarchical)"
    );
    for c in Collective::ALL {
        for a in Algorithm::ALL {
            assert_eq!(parse_algo(c, "V", a.name()).is_ok(), a.supports(c));
        }
    }
}

#[test]
fn env_overrides_each_collective_and_names_the_bad_variable() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    assert_eq!(algos_from_env(&|_| None), Ok([None; 6]));
    let got = algos_from_env(&env(&[
        ("NEURON_RT_PROXY_ALGO_ALL_REDUCE", "ring"),
        ("NEURON_RT_PROXY_ALGO_BROADCAST", "auto"),
        ("NEURON_RT_PROXY_ALGO_ALL_TO_ALL", "bruck"),
        ("NEURON_RT_PROXY_ALGO_ALL_GATHER", ""),
    ]))
    .unwrap();
    assert_eq!(
        got,
        [
            Some(Algorithm::Ring),
            None,
            None,
            None,
            None,
            Some(Algorithm::Bruck)
        ]
    );
    let e: String =
        algos_from_env(&env(&[("NEURON_RT_PROXY_ALGO_REDUCE_SCATTER", "binomial")])).unwrap_err();
    assert!(
        e.starts_with("NEURON_RT_PROXY_ALGO_REDUCE_SCATTER=binomial: binomial does not support"),
        "{e}"
    );
}

#[test]
fn labels_name_the_resolved_algorithm_and_why() {
    let mut p = params(Collective::AllReduce, 8, 2, DataType::F32, Algorithm::Auto);
    let l = p.label();
    assert_eq!(
        (l.collective, l.algorithm, l.why),
        ("all-reduce", "recursive-doubling", "tuner")
    );
    p.cost_model.step_ns = DEFAULT_COST_MODEL.step_ns + 1;
    assert_eq!(p.label().why, "tuner-calibrated");
    p.algorithm = Algorithm::Ring;
    let l = p.label();
    assert_eq!((l.algorithm, l.why), ("ring", "asked"));
    assert_eq!(tuner::why(&p), "asked");
}

#[test]
fn each_link_kind_has_its_defaults_and_they_move_the_choice() {
    use tuner::LinkKind;
    // 4 ranks, 8 B: in memory direct's one step of 3 messages ties recursive doubling's 2 steps
    // of 1 message (8 µs each, direct first on the tie); over a network or shared memory a
    // message costs more against a step (o/α 0.56 against 0.5) and recursive doubling wins.
    let pick = |k: LinkKind, n: u32, count: u64| {
        let mut p = params(
            Collective::AllReduce,
            n,
            count,
            DataType::F32,
            Algorithm::Auto,
        );
        p.cost_model = k.default_cost_model();
        p.inter_host_model = k.default_cost_model();
        (p.resolved_algorithm(), p.label().why)
    };
    assert_eq!(pick(LinkKind::Memory, 4, 2), (Algorithm::Direct, "tuner"));
    assert_eq!(
        pick(LinkKind::SharedMemory, 4, 2),
        (Algorithm::RecursiveDoubling, "tuner")
    );
    assert_eq!(
        pick(LinkKind::Network, 4, 2),
        (Algorithm::RecursiveDoubling, "tuner")
    );
    // Large vectors still go round the ring on every kind (bandwidth).
    for k in LinkKind::ALL {
        assert_eq!(pick(k, 8, 16 << 20).0, Algorithm::Ring, "{k:?}");
    }
    assert_eq!(LinkKind::default(), LinkKind::Memory);
    assert_eq!(LinkKind::Memory.default_cost_model(), DEFAULT_COST_MODEL);
    let names: alloc::vec::Vec<_> = LinkKind::ALL.iter().map(|k| k.name()).collect();
    assert_eq!(names, ["memory", "shared-memory", "network"]);
    for k in LinkKind::ALL {
        assert_eq!(
            LinkKind::from_name(&alloc::format!(" {}\n", k.name())),
            Some(k)
        );
    }
    assert_eq!(LinkKind::from_name("tcp"), None);
    assert_eq!(LinkKind::of_provider("shm"), LinkKind::SharedMemory);
    assert_eq!(LinkKind::of_provider(" shm ;x"), LinkKind::SharedMemory);
    assert_eq!(LinkKind::of_provider("tcp;ofi_rxm"), LinkKind::Network);
    assert_eq!(LinkKind::of_provider("shmem"), LinkKind::Network);
    let mut m = tuner::NETWORK_COST_MODEL;
    assert!(tuner::LinkKind::is_default(&m));
    m.byte_ps += 1;
    assert!(!tuner::LinkKind::is_default(&m));
}

/// A crowded host ("Crowded hosts" in the tuner's docs): the host's total work (its ranks'
/// waiting steps included) over its CPUs bounds every all-reduce below, exactly as the docs' formula says, and the reduce to one
/// leader and broadcast (hierarchical on one host: `2 (n − 1)` messages in all where recursive
/// doubling moves `n log2 n`) wins the small sizes; ring keeps the large ones; nothing changes
/// with the CPUs unknown or enough, or without a host map to build the hierarchy on.
#[test]
fn a_crowded_host_bounds_the_time_by_its_work_and_picks_the_hierarchy() {
    use crate::planner::tuner::{crowded_work, crowding, MEMORY_COST_MODEL};
    use crate::planner::HostMap;
    let m = MEMORY_COST_MODEL;
    // 8 ranks, 8 B (2 floats), one host, 2 CPUs.
    let mut p = params(Collective::AllReduce, 8, 2, DataType::F32, Algorithm::Auto);
    p.cost_model = m;
    p.inter_host_model = m;
    p.hosts = HostMap::new(&[8]).unwrap();
    p.progress_cpus = 2;
    assert_eq!(crowding(&p), Some(2));
    // Recursive doubling, per rank: 3 steps, 6 entries, 24 B sent, 24 B reduced; its work
    // (its steps' waiting polls included) is 3 · 2000 ns + 6 · 1000 ns + 48 B · 35 ps =
    // 12001 ns, on each of the 8 ranks.
    assert_eq!(
        crowded_work(&p, Algorithm::RecursiveDoubling, &m),
        Some(8 * 12001)
    );
    // The hierarchy on one host of 8: one step's wait per rank, 4 · 7 entries, 2 · 7 · 8 B
    // sent, 7 · 8 B reduced.
    assert_eq!(
        crowded_work(&p, Algorithm::Hierarchical, &m),
        Some((16_000_000 + 28_000_000 + 112 * 35 + 56 * 35) / 1000)
    );
    assert_eq!(tuner::pick(&p), Algorithm::Hierarchical);
    // Large: Rabenseifner. Its work is the ring's bytes (1.75 b sent, 0.875 b reduced per
    // rank: the ring's reductions count on a crowded host) in fewer steps and entries
    // (measured in process, 8 ranks, 16 MiB: 22.2 ms against the ring's 23.2).
    let mut big = p;
    big.count = 16 << 20;
    assert_eq!(tuner::pick(&big), Algorithm::Rabenseifner);
    // Enough CPUs, unknown CPUs, or no host map: the critical path alone (recursive doubling).
    for (cpus, hosts) in [(8, p.hosts), (0, p.hosts), (2, HostMap::NONE)] {
        let mut q = p;
        q.progress_cpus = cpus;
        q.hosts = hosts;
        assert_eq!(
            tuner::pick(&q),
            Algorithm::RecursiveDoubling,
            "{cpus} {hosts:?}"
        );
    }
    assert_eq!(
        crowding(&{
            let mut q = p;
            q.progress_cpus = 8;
            q
        }),
        None
    );
    // Another collective keeps the critical path: an all-gather does not take the bound.
    let mut ag = params(Collective::AllGather, 8, 16, DataType::F32, Algorithm::Auto);
    ag.progress_cpus = 2;
    ag.hosts = p.hosts;
    let mut ag0 = ag;
    ag0.progress_cpus = 0;
    assert_eq!(tuner::pick(&ag), tuner::pick(&ag0));
}

/// On a crowded host the ring's reductions, which its chunk pipeline overlaps with the
/// transfers on free CPUs, are work ([`tuner::work_terms`]): 8 ranks in two CPU groups of 4
/// on 2 CPUs, 16 MiB, take the hierarchy (measured 15.2 ms against the ring's 23.2), which
/// the critical path alone ranked below the ring.
#[test]
fn a_crowded_hosts_ring_reductions_are_work() {
    use crate::planner::tuner::{crowded_work, terms, work_terms, MEMORY_COST_MODEL};
    use crate::planner::HostMap;
    let m = MEMORY_COST_MODEL;
    let (n, b, chunk) = (8u32, 16u64 << 20, 1u64 << 20);
    let cp = terms(Collective::AllReduce, Algorithm::Ring, b, n, chunk, false).unwrap();
    let w = work_terms(Collective::AllReduce, Algorithm::Ring, b, n, chunk, false).unwrap();
    assert_eq!(cp.reduced, 0);
    assert_eq!(w.reduced, 7 * (2 << 20));
    assert_eq!(
        (w.steps, w.entries, w.sent),
        (cp.steps, cp.entries, cp.sent)
    );
    // Only the ring overlaps: recursive doubling's terms are its critical path's.
    let rd = Algorithm::RecursiveDoubling;
    assert_eq!(
        work_terms(Collective::AllReduce, rd, b, n, chunk, false),
        terms(Collective::AllReduce, rd, b, n, chunk, false)
    );
    let mut p = params(
        Collective::AllReduce,
        8,
        4 << 20,
        DataType::F32,
        Algorithm::Auto,
    );
    p.cost_model = m;
    p.inter_host_model = m;
    p.hosts = HostMap::new(&[8]).unwrap();
    p.cpu_groups = HostMap::new(&[4, 4]).unwrap();
    p.progress_cpus = 2;
    let ring = crowded_work(&p, Algorithm::Ring, &m).unwrap();
    let t = terms(
        Collective::AllReduce,
        Algorithm::Ring,
        p.bytes(),
        8,
        p.chunk_bytes,
        false,
    );
    let critical = t.unwrap().time_ns(&m);
    assert!(ring > 8 * critical, "{ring} {critical}");
    assert_eq!(tuner::pick(&p), Algorithm::Hierarchical);
    // The hierarchy's bound: its members' gathers and broadcasts (6 members: 4 · 6 entries,
    // 2 · 6 vectors sent, 6 reduced, one step's wait per rank) and both leaders' work in
    // their all-reduce, their ring's reductions included.
    let mut lp = p;
    lp.nranks = 2;
    lp.cost_model = p.leaders_model();
    let leaders = crate::planner::algos_leaders(&lp, 2);
    let c = p.chunk_bytes;
    let lw = work_terms(Collective::AllReduce, leaders, b, 2, c, false).unwrap();
    let lt = terms(Collective::AllReduce, leaders, b, 2, c, false).unwrap();
    if leaders == Algorithm::Ring {
        assert_eq!(lw.reduced, lt.reduced + (1 << 23));
    }
    let ent = u128::from(b.div_ceil(c));
    let local = tuner::Terms {
        steps: 8,
        entries: 4 * 6 * ent,
        sent: 2 * 6 * u128::from(b),
        reduced: 6 * u128::from(b),
    };
    assert_eq!(
        crowded_work(&p, Algorithm::Hierarchical, &m),
        Some(local.time_ns(&m) + 2 * lw.time_ns(&m))
    );
    // Not crowded (a CPU per rank): the ring's critical path, and the ring.
    p.progress_cpus = 8;
    assert_eq!(tuner::pick(&p), Algorithm::Ring);
}
