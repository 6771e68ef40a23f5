//! Unit tests of the split over streams and blocks ([`crate::planner::plan_blocks`]).

use alloc::vec;
use alloc::vec::Vec;

use crate::planner::{
    plan, plan_blocks, Algorithm, Buf, Collective, DataType, Instr, PlanError, PlanParams,
};

fn params(c: Collective, n: u32, count: u64, s: u32, b: u32) -> PlanParams {
    let mut p = PlanParams::new(c, count, DataType::F32, 0, n);
    p.chunk_bytes = 8; // 2 elements
    p.pipeline_depth = 2;
    p.streams = s;
    p.blocks = b;
    p
}

/// The parts' element ranges cover `0..count` exactly once, in order, each starting on a
/// chunk boundary; empty parts are left out; streams and block ids are in range.
#[test]
fn parts_cover_the_count_once_on_chunk_boundaries() {
    if cfg!(miri) {
        return; // no unsafe code here; Miri runs the interpreter and the simulation
    }
    for c in Collective::ALL {
        for n in 1..=4u32 {
            for s in 1..=4u32 {
                for b in [1u32, 3] {
                    for count in [0u64, 1, 3, 7, 50] {
                        let p = params(c, n, count, s, b);
                        let bp = plan_blocks(&p).unwrap();
                        let units = count.div_ceil(2);
                        let want_parts = if units >= u64::from(s * b) {
                            u64::from(s * b)
                        } else {
                            units
                        };
                        assert_eq!(
                            bp.blocks.len() as u64,
                            want_parts,
                            "{c:?} n{n} s{s} b{b} count {count}"
                        );
                        let mut at = 0;
                        let mut last = (0, 0);
                        for part in &bp.blocks {
                            assert!(part.stream < s && (1..=b).contains(&part.block));
                            assert!((part.stream, part.block) > last || last == (0, 0));
                            last = (part.stream, part.block);
                            let (lo, hi) = part.elems;
                            assert_eq!(lo, at, "contiguous");
                            assert!(hi > lo, "no empty part");
                            assert_eq!(lo % 2, 0, "chunk aligned");
                            assert_eq!(part.plan.params.count, hi - lo);
                            at = hi;
                        }
                        assert_eq!(at, count);
                        // Host words and tags distinct per (stream, block, op).
                        let mut base = 0;
                        let mut tags = Vec::new();
                        for part in &bp.blocks {
                            assert_eq!(part.word_base, base);
                            base += part.plan.host_words();
                            tags.extend(part.plan.ops.iter().map(|o| o.tag));
                        }
                        assert_eq!(base, bp.host_words());
                        let k = tags.len();
                        tags.sort_unstable();
                        tags.dedup();
                        assert_eq!(tags.len(), k, "tags distinct");
                        assert!(tags.iter().all(|&t| t < 1 << 14));
                    }
                }
            }
        }
    }
}

/// With one stream and one block the one part is `plan`'s plan.
#[test]
fn one_stream_one_block_is_the_plan() {
    for c in Collective::ALL {
        let p = params(c, 3, 21, 1, 1);
        let bp = plan_blocks(&p).unwrap();
        assert_eq!(bp.blocks.len(), 1);
        assert_eq!(bp.blocks[0].plan, plan(&p).unwrap());
        assert_eq!((bp.blocks[0].stream, bp.blocks[0].block), (0, 1));
        assert_eq!(bp.schedule(2), vec![1, 1]);
    }
    let mut p = params(Collective::AllReduce, 2, 100, 2, 3);
    p.algorithm = Algorithm::Ring;
    assert_eq!(plan_blocks(&p).unwrap().schedule(2), vec![1, 2, 3, 1, 2, 3]);
}

/// Every output byte of all-gather and all-to-all (strided output) is written by exactly one
/// receive entry or copy over all parts, and each part writes only its own element range of
/// each rank block.
#[test]
fn strided_output_is_written_once() {
    if cfg!(miri) {
        return; // no unsafe code here; Miri runs the interpreter and the simulation
    }
    for c in [Collective::AllGather, Collective::AllToAll] {
        for n in 2..=4u32 {
            for algo in [Algorithm::Ring, Algorithm::Direct] {
                for in_place in [false, true] {
                    let count = 13u64;
                    let mut p = params(c, n, count, 3, 2);
                    p.algorithm = algo;
                    p.in_place = in_place;
                    p.rank = 1;
                    let bp = plan_blocks(&p).unwrap();
                    let out_bytes = bp.layout.output_bytes as usize;
                    let mut hits = vec![0u32; out_bytes];
                    for part in &bp.blocks {
                        let (lo, hi) = part.elems;
                        let mut mark = |off: u64, bytes: u64| {
                            for x in off..off + bytes {
                                let within = (x / 4) % count;
                                assert!(
                                    (lo..hi).contains(&within),
                                    "{c:?} part {lo}..{hi} writes element {within}"
                                );
                                hits[x as usize] += 1;
                            }
                        };
                        for e in &part.plan.dst {
                            assert_eq!(e.loc.buf, Buf::Output);
                            mark(e.loc.offset, e.bytes);
                        }
                        for ins in &part.plan.program {
                            if let Instr::Copy { dst, bytes, .. } = *ins {
                                if dst.buf == Buf::Output {
                                    mark(dst.offset, bytes);
                                }
                            }
                        }
                    }
                    // In place the own block is already there (all-gather) or copied within.
                    for (x, &h) in hits.iter().enumerate() {
                        let own = (x as u64 / 4) / count == 1;
                        if !(in_place && own) {
                            assert_eq!(h, 1, "{c:?} {algo:?} n{n} in_place {in_place}: byte {x}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn bad_splits_are_refused() {
    let p = params(Collective::AllReduce, 2, 10, 5, 1);
    assert_eq!(plan_blocks(&p), Err(PlanError::BadSplit));
    let p = params(Collective::AllReduce, 2, 10, 0, 1);
    assert_eq!(plan_blocks(&p), Err(PlanError::BadSplit));
    let p = params(Collective::AllReduce, 2, 10, 1, 0);
    assert_eq!(plan_blocks(&p), Err(PlanError::BadSplit));
    let mut p = params(Collective::AllReduce, 2, 10, 1, 1);
    p.nec.credits = 129;
    assert_eq!(plan_blocks(&p), Err(PlanError::BadNec));
    p.nec.credits = 0;
    p.nec.idx_wrap = 1;
    assert_eq!(plan_blocks(&p), Err(PlanError::BadNec));
    let mut p = params(Collective::AllReduce, 4000, 1 << 20, 4, 4);
    p.algorithm = Algorithm::Ring;
    p.chunk_bytes = 1 << 20;
    assert_eq!(plan_blocks(&p), Err(PlanError::TooManyTags));
}

/// The nec options reach every op info; the recv credits are lowered per op to what the
/// program can promise (a window of receives promises fewer than the window).
#[test]
fn fifos_carry_the_nec_options() {
    let mut p = params(Collective::AllReduce, 3, 200, 2, 2);
    p.algorithm = Algorithm::Ring;
    p.nec.early_recv = 8;
    p.nec.early_send = true;
    p.nec.idx_wrap = 4;
    p.nec.credits = 3;
    let bp = plan_blocks(&p).unwrap();
    let addrs = crate::planner::Addresses {
        input: 0x10000,
        output: 0x20000,
        scratch: 0x30000,
        words: 0x1000,
        word_stride: 4,
    };
    let mut words = Vec::new();
    for part in &bp.blocks {
        let f = part.fifos(&addrs);
        for (k, o) in f.ops.iter().enumerate() {
            let planned = part.plan.ops[k];
            assert_eq!(o.net_idx_loop_size, 4);
            assert_eq!(o.initial_send_credits, 3);
            assert_eq!(o.early_send_completion, 1);
            assert_eq!(o.ending_recv_credits, planned.ending_recv_credits);
            assert!(planned.ending_recv_credits <= 8);
            // Reduce-scatter steps (tags 0, 1 of 4 per part) receive into a window of 2
            // slots: at most 1 entry ahead can be promised.
            if planned.tag % 4 < 2 {
                assert!(planned.ending_recv_credits <= 1, "{planned:?}");
            }
            words.push(o.post_send_idx_addr);
            words.push(o.post_recv_idx_addr);
        }
    }
    let k = words.len();
    words.sort_unstable();
    words.dedup();
    assert_eq!(
        words.len(),
        k,
        "host words distinct per (stream, block, op)"
    );
    // All-gather posts every receive at the start: the whole credit stays.
    let mut p = params(Collective::AllGather, 3, 200, 1, 1);
    p.algorithm = Algorithm::Ring;
    p.nec.early_recv = 8;
    let pl = plan(&p).unwrap();
    assert!(pl.ops.iter().all(|o| o.ending_recv_credits == 8));
}

/// The early receive credits promise only buffers that are free from the handshake on: the
/// first `ending_recv_credits` receive entries of every op are touched by no instruction
/// before the `Post` that hands each out (in place by real overlap). In-place all-to-all
/// copies its input (= output, where the receives land) to scratch first: no credits; the
/// ring all-reduce's all-gather receives land in segments reduced and sent before.
#[test]
fn early_credits_promise_only_buffers_free_at_the_handshake() {
    if cfg!(miri) {
        return; // no unsafe code here (planning only); the interpreter's tests run under Miri
    }
    for c in Collective::ALL {
        for algorithm in [Algorithm::Ring, Algorithm::Direct] {
            for in_place in [false, true] {
                for n in [2, 3, 4] {
                    for r in 0..n {
                        let mut p = params(c, n, 48, 1, 1);
                        p.rank = r;
                        p.root = n - 1;
                        p.algorithm = algorithm;
                        p.in_place = in_place;
                        p.nec.early_recv = 8;
                        let pl = plan(&p).unwrap();
                        check_free_at_handshake(&pl);
                        if c == Collective::AllToAll && in_place {
                            assert!(pl.ops.iter().all(|o| o.ending_recv_credits == 0), "{p:?}");
                        }
                    }
                }
            }
        }
    }
    let mut p = params(Collective::AllReduce, 3, 3 * 6 * 1024, 1, 1);
    p.chunk_bytes = 4096;
    p.algorithm = Algorithm::Ring;
    p.nec.early_recv = 2;
    let pl = plan(&p).unwrap();
    // The last all-gather step receives into segments the reduce-scatter reduced and sent.
    assert_eq!(
        pl.ops.last().unwrap().ending_recv_credits,
        0,
        "{:?}",
        pl.ops
    );
    // The first reduce-scatter step receives into untouched scratch.
    assert!(pl.ops[0].ending_recv_credits > 0, "{:?}", pl.ops);
}

fn check_free_at_handshake(pl: &crate::planner::RankPlan) {
    let l = pl.layout;
    let base = |b: Buf| match (b, l.in_place) {
        (Buf::Input, true) => l.input_offset,
        (Buf::Output, true) => l.output_offset,
        (Buf::Input, false) => 1 << 40,
        (Buf::Output, false) => 2 << 40,
        (Buf::Scratch, _) => 3 << 40,
    };
    let rng = |loc: crate::planner::Loc, bytes: u64| {
        (
            base(loc.buf) + loc.offset,
            base(loc.buf) + loc.offset + bytes,
        )
    };
    let elt = pl.params.dtype.size() as u64;
    for (k, o) in pl.ops.iter().enumerate() {
        let k = k as u32;
        for (i, e) in pl.entries(k, crate::planner::Side::Recv)[..o.ending_recv_credits as usize]
            .iter()
            .enumerate()
        {
            let (a, b) = rng(e.loc, e.bytes);
            let hit = |(x, y): (u64, u64)| x < b && a < y && x < y;
            let mut handed = vec![[0u32; 2]; pl.ops.len()];
            'prog: for (pc, ins) in pl.program.iter().enumerate() {
                let touched: Vec<(u64, u64)> = match *ins {
                    Instr::Post { op, side, upto } => {
                        let from = handed[op as usize][side as usize];
                        handed[op as usize][side as usize] = upto;
                        let mut v = Vec::new();
                        for (j, x) in pl.entries(op, side)[from as usize..upto as usize]
                            .iter()
                            .enumerate()
                        {
                            if op == k
                                && side == crate::planner::Side::Recv
                                && from as usize + j == i
                            {
                                assert!(
                                    !v.iter().any(|&t| hit(t)),
                                    "op {k} entry {i} touched in its own post at {pc}"
                                );
                                break 'prog;
                            }
                            v.push(rng(x.loc, x.bytes));
                        }
                        v
                    }
                    Instr::Reduce { dst, a, b, elems } => {
                        [dst, a, b].iter().map(|&x| rng(x, elems * elt)).collect()
                    }
                    Instr::Copy { dst, src, bytes } => vec![rng(dst, bytes), rng(src, bytes)],
                    _ => Vec::new(),
                };
                assert!(
                    !touched.iter().any(|&t| hit(t)),
                    "{:?}: op {k} recv entry {i} (credits {}) touched at pc {pc} ({ins:?}) \
                     before it is handed out",
                    pl.params,
                    o.ending_recv_credits
                );
            }
        }
    }
}
