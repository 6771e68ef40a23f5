//! The `log n` algorithms (recursive doubling, Rabenseifner, recursive halving, Bruck,
//! binomial) through the simulation of [`super`]: every algorithm × collective, bit-exact
//! against [`crate::planner::data`], for 1–17 and 32 ranks (powers of two and not, so the
//! fold of the extra ranks runs), counts of zero, one, below the rank count and odd, both
//! layouts, both send-completion models; every type and op; streams, blocks and the `nec.h`
//! options; and the tuner's choices.

use super::{check, params, SendCompletion, World};
use crate::planner::tuner::{self, cost, DEFAULT_COST_MODEL};
use crate::planner::{plan, Algorithm, Collective, DataType, PlanError, RedOp};

/// Every (collective, algorithm) pair of the `log n` algorithms.
const PAIRS: [(Collective, Algorithm); 9] = [
    (Collective::AllReduce, Algorithm::RecursiveDoubling),
    (Collective::AllReduce, Algorithm::Rabenseifner),
    (Collective::AllGather, Algorithm::RecursiveDoubling),
    (Collective::AllGather, Algorithm::Bruck),
    (Collective::ReduceScatter, Algorithm::RecursiveHalving),
    (Collective::Broadcast, Algorithm::Binomial),
    (Collective::Broadcast, Algorithm::ScatterAllgather),
    (Collective::AllToAll, Algorithm::Bruck),
    (Collective::AllReduce, Algorithm::Auto),
];

fn ranks() -> &'static [u32] {
    if cfg!(miri) {
        &[3]
    } else {
        &[
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 32,
        ]
    }
}

#[test]
fn every_log_algorithm_every_rank_count_integers_bit_exact() {
    let mut seed = 5;
    for (c, algo) in PAIRS {
        for &n in ranks() {
            let nn = u64::from(n);
            // Zero, one, fewer than the ranks, and an odd count over several chunks.
            let counts: &[u64] = if cfg!(miri) {
                &[5]
            } else if n >= 32 {
                &[0, 1, nn - 1]
            } else if n > 8 {
                &[0, 1, nn - 1, 29]
            } else {
                &[0, 1, nn.saturating_sub(1).max(1), 7, 53]
            };
            for &count in counts {
                for in_place in [false, true] {
                    let mut p = params(c, n, count, DataType::I32, algo);
                    p.chunk_bytes = 16; // 4 elements
                    p.pipeline_depth = 2;
                    p.in_place = in_place;
                    p.root = (n - 1).min(2);
                    seed += 1;
                    check(p, seed);
                }
            }
        }
    }
}

#[test]
fn log_algorithms_every_type_and_op() {
    let (types, ns): (&[DataType], &[u32]) = if cfg!(miri) {
        (&[DataType::F16], &[3])
    } else {
        (&DataType::ALL, &[3, 5, 8])
    };
    for &d in types {
        for op in RedOp::ALL {
            for &n in ns {
                for (c, algo) in [
                    (Collective::AllReduce, Algorithm::RecursiveDoubling),
                    (Collective::AllReduce, Algorithm::Rabenseifner),
                    (Collective::ReduceScatter, Algorithm::RecursiveHalving),
                ] {
                    let count = if cfg!(miri) { 5 } else { 101 };
                    let mut p = params(c, n, count, d, algo);
                    p.op = op;
                    p.chunk_bytes = 40;
                    check(p, 13);
                }
            }
        }
    }
}

#[test]
fn log_algorithms_copy_every_type() {
    if cfg!(miri) {
        return; // the copies are the same code for every type; Miri runs the others
    }
    let types = DataType::ALL;
    for d in types {
        for (c, algo) in PAIRS {
            if c.reduces() {
                continue;
            }
            let mut p = params(c, 6, 33, d, algo);
            p.chunk_bytes = 64;
            p.root = 4;
            check(p, 9);
        }
    }
}

/// Streams, blocks, pipeline depth and the `nec.h` options (early receives, index wrap,
/// credits) with the `log n` algorithms, under both send-completion models.
#[test]
fn log_algorithms_with_streams_blocks_and_options() {
    if cfg!(miri) {
        return;
    }
    let mut cell = 0u32;
    for (c, algo) in PAIRS {
        for n in [2u32, 3, 5, 8] {
            for in_place in [false, true] {
                let mut p = params(c, n, 4 * 5 * 8 - 3, DataType::I32, algo);
                p.chunk_bytes = 16;
                p.pipeline_depth = 1 + cell % 3;
                p.in_place = in_place;
                p.root = n - 1;
                p.streams = [1, 2, 4][cell as usize % 3];
                p.blocks = [1, 3][(cell / 3) as usize % 2];
                p.nec.early_recv = [0, 4, 1][(cell / 2) as usize % 3];
                p.nec.idx_wrap = [0, 4, 2][(cell / 5) as usize % 3];
                p.nec.credits = [1, 128, 2][(cell / 7) as usize % 3];
                // In place, a second pass would reduce the results again.
                let loops = if in_place { 1 } else { 2 };
                for mode in [SendCompletion::OnMatch, SendCompletion::InPostOrder] {
                    let mut w = World::new_blocks(p, mode, loops);
                    w.run(u64::from(cell) * 17 + 3);
                    let wrong = w.wrong();
                    assert_eq!(wrong, 0, "{wrong} wrong elements for {p:?} ({mode:?})");
                }
                cell += 1;
            }
        }
    }
}

/// Recursive doubling all-reduce needs `log2 p` ops (plus the fold's two) and one entry per
/// chunk per side; direct needs `n − 1`.
#[test]
fn recursive_doubling_has_log_steps() {
    for (n, ops) in [(2u32, 1usize), (4, 2), (8, 3), (16, 4), (32, 5)] {
        let p = plan(&params(
            Collective::AllReduce,
            n,
            2,
            DataType::F32,
            Algorithm::RecursiveDoubling,
        ))
        .unwrap();
        assert_eq!(p.ops.len(), ops);
    }
    // 6 ranks: ranks 0 and 2 are extras (one send op, one receive op), 1 and 3 fold.
    let p = |r: u32| {
        let mut q = params(
            Collective::AllReduce,
            6,
            2,
            DataType::F32,
            Algorithm::RecursiveDoubling,
        );
        q.rank = r;
        plan(&q).unwrap().ops.len()
    };
    assert_eq!([p(0), p(1), p(4)], [2, 4, 2]);
}

/// Unsplit, the `log n` all-gathers move each step's blocks as one run of entries (and Bruck's
/// all-to-all packs them into one): small blocks take one entry per step; split over streams,
/// every block is entries of its own.
#[test]
fn all_gathers_coalesce_blocks_only_unsplit() {
    for algo in [Algorithm::Bruck, Algorithm::RecursiveDoubling] {
        // Rank 0: none of its runs wraps round (a wrapping run is two).
        let mut p = params(Collective::AllGather, 32, 2, DataType::F32, algo);
        let pl = plan(&p).unwrap();
        assert_eq!(pl.ops.len(), 5, "{algo:?}");
        assert!(pl
            .ops
            .iter()
            .all(|o| o.tx_entry_cnt == 1 && o.rx_entry_cnt == 1));
        p.streams = 2;
        p.chunk_bytes = 4;
        let bp = crate::planner::plan_blocks(&p).unwrap();
        let entries: u32 = bp.blocks[0].plan.ops.iter().map(|o| o.rx_entry_cnt).sum();
        assert_eq!(entries, 31, "{algo:?}");
    }
    // Bruck's all-to-all: one packed run per step, any rank.
    let mut p = params(Collective::AllToAll, 32, 2, DataType::F32, Algorithm::Bruck);
    p.rank = 7;
    let pl = plan(&p).unwrap();
    assert_eq!(pl.ops.len(), 5);
    assert!(pl
        .ops
        .iter()
        .all(|o| o.tx_entry_cnt == 1 && o.rx_entry_cnt == 1));
}

#[test]
fn names_round_trip_and_unsupported_pairs_are_refused() {
    for a in Algorithm::ALL {
        assert_eq!(Algorithm::from_name(a.name()), Some(a));
    }
    assert_eq!(Algorithm::from_name("tree"), None);
    for c in Collective::ALL {
        for a in Algorithm::ALL {
            let mut p = params(c, 4, 8, DataType::F32, a);
            p.root = 1;
            let r = plan(&p);
            if a.supports(c) {
                assert!(r.is_ok(), "{c:?} {a:?}: {r:?}");
                assert!(r.unwrap().params.algorithm.supports(c));
            } else {
                assert_eq!(r.err(), Some(PlanError::Unsupported), "{c:?} {a:?}");
            }
        }
    }
}

/// The tuner: direct with few ranks and small messages, recursive doubling for small
/// messages with many ranks, ring for large ones; every pick supports its collective; the
/// costs are defined exactly for the supported pairs.
#[test]
fn tuner_picks_by_cost() {
    let pick = |c: Collective, n: u32, count: u64| {
        plan(&params(c, n, count, DataType::F32, Algorithm::Auto))
            .unwrap()
            .params
            .algorithm
    };
    assert_eq!(pick(Collective::AllReduce, 4, 2), Algorithm::Direct);
    assert_eq!(
        pick(Collective::AllReduce, 8, 2),
        Algorithm::RecursiveDoubling
    );
    assert_eq!(
        pick(Collective::AllReduce, 32, 2),
        Algorithm::RecursiveDoubling
    );
    assert_eq!(pick(Collective::AllReduce, 4, 4 << 20), Algorithm::Ring);
    assert_eq!(pick(Collective::AllReduce, 32, 4 << 20), Algorithm::Ring);
    assert_eq!(pick(Collective::Broadcast, 32, 2), Algorithm::Binomial);
    // Unsplit, Bruck's all-gather moves each step's blocks as one run: log n entries.
    assert_eq!(pick(Collective::AllGather, 32, 2), Algorithm::Bruck);
    // Unsplit, Bruck's all-to-all packs each step's blocks into one run.
    assert_eq!(pick(Collective::AllToAll, 32, 2), Algorithm::Bruck);
    assert_eq!(pick(Collective::AllToAll, 4, 1 << 20), Algorithm::Direct);
    // Split over streams, Bruck's runs become a block each: direct again for all-to-all.
    let mut p = params(Collective::AllToAll, 32, 2, DataType::F32, Algorithm::Auto);
    p.streams = 2;
    assert_eq!(tuner::pick(&p), Algorithm::Direct);
    assert_eq!(pick(Collective::SendRecv, 32, 2), Algorithm::Direct);
    for c in Collective::ALL {
        for n in [1u32, 2, 3, 7, 16, 100] {
            for count in [0u64, 1, 1000, 1 << 22] {
                let p = params(c, n, count, DataType::F32, Algorithm::Auto);
                assert!(tuner::pick(&p).supports(c));
            }
        }
        for a in Algorithm::ALL {
            let t = cost(c, a, 1024, 5, 512, false, &DEFAULT_COST_MODEL);
            assert_eq!(
                t.is_some(),
                a != Algorithm::Auto && a.supports(c),
                "{c:?} {a:?}"
            );
        }
        assert!(!tuner::candidates(c).is_empty());
    }
    // No overflow at the extremes.
    assert!(cost(
        Collective::AllToAll,
        Algorithm::Bruck,
        u64::MAX,
        16384,
        1,
        true,
        &DEFAULT_COST_MODEL
    )
    .is_some());
}

/// All-reduce with floats that are not integers (so the reduction order shows in the bits):
/// every rank ends with the same bits, with every algorithm, fold or not, in place or not.
#[test]
fn all_reduce_float_results_are_identical_on_every_rank() {
    if cfg!(miri) {
        return; // a schedule property, not undefined behaviour
    }
    let ns = [2u32, 3, 5, 6, 8, 13];
    for n in ns {
        for algo in [
            Algorithm::RecursiveDoubling,
            Algorithm::Rabenseifner,
            Algorithm::Ring,
            Algorithm::Direct,
        ] {
            for in_place in [false, true] {
                let mut p = params(Collective::AllReduce, n, 37, DataType::F32, algo);
                p.chunk_bytes = 16;
                p.in_place = in_place;
                let mut w = World::new(p, SendCompletion::OnMatch);
                for rk in &w.ranks {
                    let bytes = rk.plan.layout.input_bytes as usize;
                    // SAFETY: the rank's input buffer, live in the world; nothing runs yet.
                    let inb = unsafe {
                        core::slice::from_raw_parts_mut(rk.addrs.input as usize as *mut u8, bytes)
                    };
                    for (i, e) in inb.chunks_exact_mut(4).enumerate() {
                        let v = 0.1f32 * (i as f32 + 1.0) + 1.0 / (rk.rank as f32 + 3.0);
                        e.copy_from_slice(&v.to_ne_bytes());
                    }
                }
                w.run(7);
                let out = |r: usize| {
                    let (_, ptr, len) = w.outputs[r];
                    // SAFETY: the rank's output, live in the world; the run is over.
                    unsafe { core::slice::from_raw_parts(ptr, len) }.to_vec()
                };
                let first = out(0);
                assert!(first.iter().any(|&b| b != crate::planner::data::POISON));
                for r in 1..n as usize {
                    assert!(
                        out(r) == first,
                        "{algo:?} n={n} in_place={in_place}: rank {r} differs"
                    );
                }
            }
        }
    }
}
