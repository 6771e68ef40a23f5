//! The hierarchical all-reduce through the simulation of [`super`]: host maps even and
//! uneven (hosts of one rank among them), bit-exact against the reference, both layouts, both
//! send-completion models, every leaders' algorithm; split over streams and blocks; the host
//! map's checks; and the tuner choosing it where the link between hosts is slow.

use super::{check, params};
use crate::planner::tuner::{self, CostModel, DEFAULT_COST_MODEL};
use crate::planner::{
    plan, plan_blocks, tags_per_part, Algorithm, Collective, DataType, HostMap, PlanError,
    PlanParams, RedOp,
};

fn layouts() -> &'static [&'static [u32]] {
    if cfg!(miri) {
        &[&[2, 1]]
    } else {
        &[
            &[2, 2],
            &[3, 1],
            &[1, 3],
            &[1, 1, 1],
            &[2, 3, 1],
            &[4, 4],
            &[3, 3, 3, 2],
            &[1, 2, 1, 4],
            &[5],
            &[2, 2, 2, 2, 2, 2, 2, 2, 2],
        ]
    }
}

fn hier(sizes: &[u32], count: u64, d: DataType) -> PlanParams {
    let n = sizes.iter().sum();
    let mut p = params(Collective::AllReduce, n, count, d, Algorithm::Hierarchical);
    p.hosts = HostMap::new(sizes).unwrap();
    p
}

#[test]
fn every_host_layout_bit_exact() {
    let counts: &[u64] = if cfg!(miri) { &[5] } else { &[1, 7, 53] };
    let mut seed = 700;
    for &sizes in layouts() {
        for &count in counts {
            for in_place in [false, true] {
                let mut p = hier(sizes, count, DataType::I32);
                p.chunk_bytes = 16; // 4 elements: several chunks, windows of 2
                p.pipeline_depth = 2;
                p.in_place = in_place;
                seed += 1;
                check(p, seed);
            }
        }
    }
}

/// The leaders run each flat algorithm the tuner may give them (dear steps: direct; cheap
/// steps and dear bytes: Rabenseifner or ring).
#[test]
fn every_leaders_algorithm() {
    if cfg!(miri) {
        return; // the phases are the algorithms Miri runs elsewhere
    }
    let models = [
        DEFAULT_COST_MODEL,
        CostModel {
            step_ns: 1_000_000,
            ..DEFAULT_COST_MODEL
        },
        CostModel {
            step_ns: 1,
            entry_ns: 1,
            byte_ps: 100_000,
            reduce_ps: 1,
        },
    ];
    let mut seen = alloc::vec::Vec::new();
    for m in models {
        for sizes in [&[2u32, 1, 2, 2, 1][..], &[3, 3, 2, 3]] {
            for count in [3u64, 301] {
                for in_place in [false, true] {
                    let mut p = hier(sizes, count, DataType::F32);
                    p.chunk_bytes = 64;
                    p.in_place = in_place;
                    p.inter_host_model = m;
                    seen.push(crate::planner::algos_leaders(&p, sizes.len() as u32));
                    check(p, count + 3);
                }
            }
        }
    }
    for a in [Algorithm::Direct, Algorithm::RecursiveDoubling] {
        assert!(seen.contains(&a), "{seen:?}");
    }
    assert!(
        seen.contains(&Algorithm::Rabenseifner) || seen.contains(&Algorithm::Ring),
        "{seen:?}"
    );
}

#[test]
fn every_type_and_op_and_split() {
    if cfg!(miri) {
        return;
    }
    for d in DataType::ALL {
        for op in RedOp::ALL {
            let mut p = hier(&[2, 3], 37, d);
            p.op = op;
            p.chunk_bytes = 32;
            check(p, 5);
        }
    }
    // Split over streams and blocks (plan_blocks asserts every part's tags inside its range),
    // run through the simulation.
    for (streams, blocks) in [(2, 1), (2, 2), (1, 3)] {
        let mut p = hier(&[3, 1, 2], 200, DataType::I32);
        p.chunk_bytes = 32;
        p.streams = streams;
        p.blocks = blocks;
        let parts = plan_blocks(&p).unwrap();
        assert_eq!(parts.params.algorithm, Algorithm::Hierarchical);
        assert_eq!(parts.blocks.len(), (streams * blocks) as usize);
        check(p, 77);
    }
}

/// Tags stay below [`tags_per_part`]; a member has one op in the gather and one in the broadcast;
/// the host map must hold `nranks` ranks.
#[test]
fn tags_ops_and_the_host_maps_checks() {
    for &sizes in layouts() {
        let n: u32 = sizes.iter().sum();
        for r in 0..n {
            let p = hier(sizes, 9, DataType::F32).for_rank(r);
            let pl = plan(&p).unwrap();
            let t = tags_per_part(n);
            assert!(
                pl.ops.iter().all(|o| o.tag < t),
                "{sizes:?} rank {r}: {:?}",
                pl.ops
            );
        }
    }
    // [2, 2]: a member has the gather's send to its leader and the broadcast's receive from
    // it (tag 2 = s_max + 0); a leader the gather's receive, the leaders' phase, the broadcast.
    let p = hier(&[2, 2], 9, DataType::F32);
    let member = plan(&p.for_rank(3)).unwrap();
    let peers: alloc::vec::Vec<(i32, i32, u32)> = member
        .ops
        .iter()
        .map(|o| (o.send_peer, o.recv_peer, o.tag))
        .collect();
    let none = proxy_core::base::desc::NO_PEER;
    assert_eq!(peers, [(2, none, 1), (none, 2, 2)]);
    let leader = plan(&p.for_rank(2)).unwrap();
    assert_eq!(leader.ops[0].recv_peer, 3);
    assert!(leader
        .ops
        .iter()
        .any(|o| o.send_peer == 0 || o.recv_peer == 0));
    assert_eq!(leader.ops.last().unwrap().send_peer, 3);
    let mut p = hier(&[2, 2], 9, DataType::F32);
    p.hosts = HostMap::new(&[2, 3]).unwrap();
    assert_eq!(plan(&p).err(), Some(PlanError::BadHosts));
    assert!(HostMap::new(&[]).is_none());
    assert!(HostMap::new(&[2, 0]).is_none());
    let m = HostMap::new(&[3, 1, 2]).unwrap();
    assert_eq!(m.host_of(0), Some((0, 0, 3)));
    assert_eq!(m.host_of(3), Some((1, 3, 1)));
    assert_eq!(m.host_of(5), Some((2, 4, 2)));
    assert_eq!(m.host_of(6), None);
    assert!(m.spans_hosts());
    assert!(!HostMap::new(&[1, 1, 1]).unwrap().spans_hosts());
    assert!(!HostMap::new(&[4]).unwrap().spans_hosts());
}

/// With a slow link between hosts the tuner picks the hierarchical all-reduce; with hosts as
/// fast as the host it keeps a flat algorithm for small messages, and without a map never
/// picks it.
#[test]
fn the_tuner_picks_it_when_the_link_between_hosts_is_slow() {
    let slow = CostModel {
        step_ns: 25_000,
        entry_ns: 2_000,
        byte_ps: 800,
        reduce_ps: 35,
    };
    for (sizes, count) in [
        (&[4u32, 4][..], 2u64),
        (&[4, 4, 4, 4], 2),
        (&[8, 8], 1 << 18),
        (&[3, 5, 2], 1000),
    ] {
        let mut p = hier(sizes, count, DataType::F32);
        p.algorithm = Algorithm::Auto;
        p.inter_host_model = slow;
        assert_eq!(
            tuner::pick(&p),
            Algorithm::Hierarchical,
            "{sizes:?} {count}"
        );
        p.inter_host_model = DEFAULT_COST_MODEL;
        if count == 2 {
            assert_ne!(tuner::pick(&p), Algorithm::Hierarchical, "{sizes:?}");
        }
        p.hosts = HostMap::NONE;
        p.inter_host_model = slow;
        assert_ne!(tuner::pick(&p), Algorithm::Hierarchical);
        let l = p.label();
        assert_ne!(l.algorithm, "hierarchical");
    }
    // Without host information its cost is the best flat algorithm's.
    let flat = tuner::candidates(Collective::AllReduce)
        .iter()
        .filter_map(|&a| {
            tuner::cost(
                Collective::AllReduce,
                a,
                4096,
                8,
                512,
                false,
                &DEFAULT_COST_MODEL,
            )
        })
        .min();
    assert_eq!(
        tuner::cost(
            Collective::AllReduce,
            Algorithm::Hierarchical,
            4096,
            8,
            512,
            false,
            &DEFAULT_COST_MODEL
        ),
        flat
    );
}

/// Uncalibrated over a network (libfabric tcp between hosts): the default constants between
/// hosts ([`tuner::LinkKind::default_inter_host_model`]) make the hierarchy the choice from 8 B
/// to 128 KiB and at 8 MiB on two hosts of two ranks, as it measured fastest between two
/// namespaces (BENCHMARKS.md, "Two hosts"); at 512 KiB and 2 MiB the ring, which crosses the
/// link once per host and step (Rabenseifner at 512 KiB before the model charged a host's ranks
/// for sharing its link, [`tuner::shared_link_bytes`]; it measured 2.8× the hierarchy there,
/// the ring 1.5×: the defaults' 10 Gbit/s is faster than the namespaces' link). With the
/// host's own constants between hosts, the old default, the tuner stayed flat at every size.
/// The label says `tuner` (no file) either way.
#[test]
fn uncalibrated_over_a_network_the_hierarchy_wins_between_hosts() {
    use tuner::LinkKind;
    let net = LinkKind::Network;
    assert_eq!(
        net.default_inter_host_model(),
        tuner::BETWEEN_HOSTS_COST_MODEL
    );
    for k in [LinkKind::Memory, LinkKind::SharedMemory] {
        assert_eq!(k.default_inter_host_model(), k.default_cost_model());
    }
    assert!(LinkKind::is_default(&tuner::BETWEEN_HOSTS_COST_MODEL));
    let mut picks = alloc::vec::Vec::new();
    for shift in (0..=20).step_by(2) {
        // 8 B .. 8 MiB of f32.
        let count = (8u64 << shift) / 4;
        let mut p = hier(&[2, 2], count, DataType::F32);
        p.algorithm = Algorithm::Auto;
        p.cost_model = net.default_cost_model();
        p.inter_host_model = net.default_inter_host_model();
        picks.push(tuner::pick(&p));
        assert_eq!(p.label().why, "tuner");
        p.inter_host_model = net.default_cost_model();
        assert_ne!(
            tuner::pick(&p),
            Algorithm::Hierarchical,
            "{count} f32, old default"
        );
    }
    use Algorithm::{Hierarchical as H, Ring};
    assert_eq!(picks, [H, H, H, H, H, H, H, H, Ring, Ring, H]);
}

/// A host's ranks share its link where they all cross at once: two hosts of two ranks, `b`
/// bytes: recursive doubling crosses in its second step (distance 2) with both ranks, `b` more
/// bytes on the link; Rabenseifner's halving and doubling cross at distance 2 with half the
/// vector each way, `b` more; direct sends 2 of its 3 messages across, `2b` more; the ring
/// crosses once per host and step, nothing more. Two hosts of four: recursive doubling's one
/// crossing step with 4 ranks, `3b`; four hosts of two, `2b` and `1.5b`. One host, one rank
/// per host, other collectives (the direct all-to-all aside: `n − s` blocks across): 0; and
/// where the map is not even powers of two (two hosts of three, whose fold leaves no step with
/// two ranks of a host crossing; hosts of 6 and 2), nothing is charged.
#[test]
fn ranks_of_a_host_share_its_link_in_the_flat_all_reduces() {
    use Algorithm::{Direct, Rabenseifner as Rab, RecursiveDoubling as Rd, Ring};
    let count = 1u64 << 16; // 256 KiB of f32
    let b = u128::from(count * 4);
    let p = hier(&[2, 2], count, DataType::F32);
    let shared = |p: &PlanParams, a| tuner::shared_link_bytes(p, a);
    assert_eq!(
        [Rd, Rab, Direct, Ring].map(|a| shared(&p, a)),
        [b, b, 2 * b, 0]
    );
    let p8 = hier(&[4, 4], count, DataType::F32);
    assert_eq!(shared(&p8, Rd), 3 * b);
    // Halving: distances 4 (b/2) cross, 2 and 1 stay: 3 ranks more for b/2 each way.
    assert_eq!(shared(&p8, Rab), 3 * b);
    let p42 = hier(&[2, 2, 2, 2], count, DataType::F32);
    assert_eq!([Rd, Rab].map(|a| shared(&p42, a)), [2 * b, 3 * b / 2]);
    for flat in [
        hier(&[4], count, DataType::F32),
        hier(&[1, 1, 1, 1], count, DataType::F32),
        hier(&[3, 3], count, DataType::F32),
        hier(&[6, 2], count, DataType::F32),
    ] {
        assert_eq!([Rd, Rab, Direct].map(|a| shared(&flat, a)), [0, 0, 0]);
    }
    let mut ag = hier(&[2, 2], count, DataType::F32);
    ag.collective = Collective::AllGather;
    assert_eq!(shared(&ag, Rd), 0);
    // The direct all-to-all (the exchange `--tune` times for the link's o): blocks of `count`
    // (b each), two of each rank's three across, with the other rank of its host; Bruck not
    // charged.
    let mut a2a = hier(&[2, 2], count, DataType::F32);
    a2a.collective = Collective::AllToAll;
    assert_eq!(
        [Direct, Algorithm::Bruck].map(|a| shared(&a2a, a)),
        [2 * b, 0]
    );
    let mut a2a8 = hier(&[4, 4], count, DataType::F32);
    a2a8.collective = Collective::AllToAll;
    assert_eq!(shared(&a2a8, Direct), 3 * 4 * b);
    // And it is in the time the tuner compares: β × the shared bytes on top of the terms.
    let t = |p: &PlanParams, a| tuner::modelled_ns(p, a).unwrap();
    let flat_ns = tuner::cost(
        Collective::AllReduce,
        Rd,
        p.bytes(),
        4,
        p.chunk_bytes,
        false,
        &p.inter_host_model,
    )
    .unwrap();
    let extra = u64::try_from(b * u128::from(p.inter_host_model.byte_ps) / 1000).unwrap();
    assert_eq!(t(&p, Rd), flat_ns + extra);
}

/// The model's phases: the members' vectors cross the host's link in the gather as in the
/// broadcast (one 2-rank host: `b` bytes each, so raising the in-host β by `x` raises the cost
/// by `2·b·x`), and split into blocks the parts pipeline through the phases: with the link
/// between hosts the slowest phase, 4 blocks cost the leaders' all-reduce of the whole vector
/// plus the in-host phases of one part, well below the phases' sum.
#[test]
fn the_model_counts_the_gather_bytes_and_pipelines_blocks() {
    let inter = CostModel {
        step_ns: 120_000,
        entry_ns: 0,
        byte_ps: 11_484,
        reduce_ps: 0,
    };
    let host = |byte_ps| CostModel {
        step_ns: 0,
        entry_ns: 0,
        byte_ps,
        reduce_ps: 0,
    };
    let count = 1u64 << 21; // 8 MiB of f32
    let b = count * 4;
    let mut p = hier(&[2, 2], count, DataType::F32);
    // One chunk: the algorithm does not cut the vector into pieces of its own.
    p.chunk_bytes = b;
    p.inter_host_model = inter;
    p.cost_model = host(0);
    let free = tuner::hierarchical_cost(&p);
    p.cost_model = host(1609);
    let sequential = tuner::hierarchical_cost(&p);
    let raised = sequential - free;
    let want = 2 * b * 1609 / 1000;
    assert!(
        raised.abs_diff(want) <= 2,
        "raised {raised} ns, want {want}"
    );
    // The leaders' phase alone: two leaders, the whole vector over the link.
    let leaders = sequential - raised;
    assert!(leaders > b * 11_484 / 1000, "{leaders}");
    p.blocks = 4;
    let pipelined = tuner::hierarchical_cost(&p);
    // One part's in-host phases (a quarter each) on top of the 4 parts' leaders' phases.
    let part_host = want / 4;
    assert!(
        pipelined.abs_diff(leaders + part_host) <= leaders / 100,
        "pipelined {pipelined}, leaders {leaders}, one part in host {part_host}"
    );
    assert!(
        pipelined < sequential - raised / 2,
        "{pipelined} {sequential}"
    );
}

/// A vector of many chunks is cut into pieces that run the phases one after the other over
/// the same ops: every rank has the ops (peers and tags) of a one-piece vector of a piece's
/// size, and as many times its entries as there are pieces (checked bit-exact by `every_host_layout_bit_exact`, whose 53 elements in
/// chunks of 4 make 3 pieces on two hosts).
#[test]
fn pieces_continue_the_same_ops() {
    // Under Miri one layout, a leader and a member (each plan is many instructions there).
    let layouts: &[&[u32]] = if cfg!(miri) {
        &[&[2, 2]]
    } else {
        &[&[2, 2], &[3, 1], &[1, 2, 1]]
    };
    for &sizes in layouts {
        let n: u32 = if cfg!(miri) { 2 } else { sizes.iter().sum() };
        for rank in 0..n {
            let at = |count| {
                let mut p = hier(sizes, count, DataType::I32);
                p.chunk_bytes = 16;
                p.rank = rank;
                let pl = plan(&p).unwrap();
                let ops: alloc::vec::Vec<_> = pl
                    .ops
                    .iter()
                    .map(|o| (o.send_peer, o.recv_peer, o.tag))
                    .collect();
                let entries: u32 = pl.ops.iter().map(|o| o.tx_entry_cnt + o.rx_entry_cnt).sum();
                (ops, entries)
            };
            // 7 chunks (one piece for 2 or 3 hosts) against 56 (8 pieces of 7 chunks).
            let (one, few) = at(28);
            let (many, lots) = at(224);
            assert_eq!(one, many, "{sizes:?} rank {rank}");
            assert_eq!(
                lots,
                8 * few,
                "{sizes:?} rank {rank}: {lots} entries, {few} in one piece"
            );
        }
    }
}

/// One host of every rank (what a crowded host's tuner picks, `tuner::crowding`): small
/// hosts too, whose broadcast tags (`n..n + ⌈log2 n⌉`) lie above `2(n − 1)` for 2 and 3
/// ranks; whole and split over streams and blocks, every part's tags in its own range, and
/// bit-exact through the simulation.
#[test]
fn one_host_of_every_rank_small_counts_whole_and_split() {
    // Under Miri (slow interpreter) 3 ranks only: the broadcast's tags above 2(n − 1).
    let ns = if cfg!(miri) { 3..=3 } else { 1..=9 };
    let mut seed = 900;
    for n in ns {
        let t = tags_per_part(n);
        for (streams, blocks) in [(1, 1), (2, 2)] {
            let mut p = hier(&[n], 6, DataType::I32);
            p.chunk_bytes = 8; // 2 elements: 3 chunks, a part on every stream
            p.streams = streams;
            p.blocks = blocks;
            for r in 0..n {
                let b = plan_blocks(&p.for_rank(r)).unwrap_or_else(|e| panic!("{n} ranks: {e:?}"));
                assert_eq!(b.streams().len(), streams as usize, "{n} ranks");
                for (i, part) in b.blocks.iter().enumerate() {
                    let k = (part.stream * blocks + part.block - 1) * t;
                    assert!(
                        part.plan.ops.iter().all(|o| (k..k + t).contains(&o.tag)),
                        "{n} ranks, rank {r}, part {i}: tags outside {k}..{}",
                        k + t
                    );
                }
            }
            seed += 1;
            check(p, seed);
        }
    }
}

/// One crowded host whose ranks' CPUs are known ([`PlanParams::cpu_groups`]): the hierarchy
/// works in the CPU groups (one leader per group, the leaders' all-reduce between them), bit
/// exact; the groups are used only on one crowded host covering every rank; the tuner costs
/// the groups' leaders under the host's constants, not the link between hosts.
#[test]
fn one_crowded_host_works_in_its_cpu_groups() {
    let groups: &[&[u32]] = if cfg!(miri) {
        &[&[2, 2]]
    } else {
        &[&[2, 2], &[3, 2], &[1, 2, 1, 3], &[4, 4]]
    };
    let mut seed = 900;
    for &g in groups {
        let n: u32 = g.iter().sum();
        for count in [1u64, 9] {
            let mut p = hier(&[n], count, DataType::I32);
            p.progress_cpus = g.len() as u32;
            p.cpu_groups = HostMap::new(g).unwrap();
            assert_eq!(p.groups(), p.cpu_groups, "{g:?}");
            p.chunk_bytes = 8;
            seed += 1;
            check(p, seed);
            // Messages cross between groups only between their leaders (the first rank of
            // each group), and some do: the leaders' phase ran between the groups.
            let map = p.cpu_groups;
            let mut crossing = 0;
            for r in 0..n {
                let (group, first, _) = map.host_of(r).unwrap();
                for o in plan(&p.for_rank(r)).unwrap().ops {
                    for peer in [o.send_peer, o.recv_peer] {
                        let Ok(peer) = u32::try_from(peer) else {
                            continue;
                        };
                        let (pg, pfirst, _) = map.host_of(peer).unwrap();
                        if pg != group {
                            assert!(r == first && peer == pfirst, "{g:?}: {r} meets {peer}");
                            crossing += 1;
                        }
                    }
                }
            }
            assert!(crossing > 0, "{g:?}");
        }
    }
    // Split over streams and blocks: every part keeps the groups.
    if !cfg!(miri) {
        let mut p = hier(&[5], 200, DataType::I32);
        p.progress_cpus = 2;
        p.cpu_groups = HostMap::new(&[3, 2]).unwrap();
        p.chunk_bytes = 32;
        p.streams = 2;
        p.blocks = 2;
        assert_eq!(plan_blocks(&p).unwrap().blocks.len(), 4);
        check(p, 78);
    }
    let mut p = hier(&[4], 2, DataType::F32);
    p.cpu_groups = HostMap::new(&[2, 2]).unwrap();
    // Not crowded (CPUs unknown or enough), groups not covering the ranks, or hosts that
    // span: the host map.
    for (cpus, groups, hosts) in [
        (0, &[2u32, 2][..], &[4u32][..]),
        (4, &[2, 2], &[4]),
        (2, &[2, 1], &[4]),
        (2, &[2, 2], &[2, 2]),
    ] {
        let mut q = p;
        q.progress_cpus = cpus;
        q.cpu_groups = HostMap::new(groups).unwrap();
        q.hosts = HostMap::new(hosts).unwrap();
        assert_eq!(q.groups(), q.hosts, "{cpus} {groups:?} {hosts:?}");
    }
    // The leaders' constants: the host's when the groups are one host's.
    p.progress_cpus = 2;
    p.inter_host_model = CostModel {
        step_ns: 1_000_000,
        ..DEFAULT_COST_MODEL
    };
    assert_eq!(p.leaders_model(), p.cost_model);
    let one_leader = {
        let mut q = p;
        q.cpu_groups = HostMap::NONE;
        tuner::hierarchical_cost(&q)
    };
    assert!(tuner::hierarchical_cost(&p) < 1_000_000, "{p:?}");
    assert!(one_leader < 1_000_000);
}

/// Ranks pinned in consecutive blocks over fewer CPUs ([`HostMap::cpu_blocks`]): every CPU
/// holds `⌊T/C⌋` or `⌈T/C⌉` ranks, in order; nothing when the ranks fit or on one CPU.
#[test]
fn cpu_blocks_of_ranks_over_fewer_cpus() {
    let m = |s: &[u32]| HostMap::new(s);
    assert_eq!(HostMap::cpu_blocks(4, 2), m(&[2, 2]));
    assert_eq!(HostMap::cpu_blocks(5, 2), m(&[3, 2]));
    assert_eq!(HostMap::cpu_blocks(6, 4), m(&[2, 1, 2, 1]));
    assert_eq!(HostMap::cpu_blocks(2, 2), None);
    assert_eq!(HostMap::cpu_blocks(8, 1), None);
    assert_eq!(HostMap::cpu_blocks(200, 65), None);
    for ranks in 3..40u32 {
        for cpus in 2..ranks.min(9) {
            let b = HostMap::cpu_blocks(ranks, cpus).unwrap();
            assert_eq!(b.ranks(), u64::from(ranks));
            assert_eq!(b.sizes().len(), cpus as usize);
            let (lo, hi) = (ranks / cpus, ranks.div_ceil(cpus));
            assert!(b.sizes().iter().all(|&k| k == lo || k == hi), "{b:?}");
        }
    }
}
