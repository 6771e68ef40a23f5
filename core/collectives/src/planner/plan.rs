//! The planning entry point ([`plan`]): one rank's ops and FIFOs for one collective call by the
//! chosen algorithm, then the `nec.h` receive credits (`set_ending_recv_credits`) and the
//! receive buffers free from a block's start (`recv_free`).

use super::*;

/// Plans one rank's part of one collective call.
///
/// # Errors
/// [`PlanError`] for out-of-range ranks, a zero pipeline depth, sizes that overflow, a
/// chunk so small that an op side would need more than 2^16 entries, or a host map whose
/// ranks are not `nranks`.
pub fn plan(params: &PlanParams) -> Result<RankPlan, PlanError> {
    let p = *params;
    if p.nranks == 0
        || p.nranks > proxy_core::base::desc::MAX_OP_TAG
        || p.rank >= p.nranks
        || p.root >= p.nranks
    {
        return Err(PlanError::BadRank);
    }
    if p.pipeline_depth == 0 {
        return Err(PlanError::BadDepth);
    }
    if !(1..=4).contains(&p.streams) || p.blocks == 0 {
        return Err(PlanError::BadSplit);
    }
    if p.nec.credits > 128 || p.nec.idx_wrap == 1 {
        return Err(PlanError::BadNec);
    }
    if !p.hosts.is_none() && p.hosts.ranks() != u64::from(p.nranks) {
        return Err(PlanError::BadHosts);
    }
    let elt = p.dtype.size() as u64;
    let (i, o) = p.collective.buffer_elems(p.count, p.nranks);
    let (ib, ob) = (
        i.checked_mul(elt).ok_or(PlanError::TooLarge)?,
        o.checked_mul(elt).ok_or(PlanError::TooLarge)?,
    );
    let scratch_bound = p
        .chunk_bytes
        .checked_mul(u64::from(p.pipeline_depth) * 4 * u64::from(p.nranks))
        .ok_or(PlanError::TooLarge)?;
    ib.checked_add(ob)
        .and_then(|s| s.checked_add(scratch_bound))
        .ok_or(PlanError::TooLarge)?;
    // The `log n` algorithms' scratch: at most 16 × the larger buffer (Bruck's all-to-all
    // stages up to `⌈log2 n⌉ ≤ 14` copies of it; recursive halving about 3).
    ib.max(ob).checked_mul(16).ok_or(PlanError::TooLarge)?;
    let mut plan = algos::build(p, ib, ob)?;
    for op in &plan.ops {
        if op.tx_entry_cnt > MAX_ENTRIES_PER_OP || op.rx_entry_cnt > MAX_ENTRIES_PER_OP {
            return Err(PlanError::TooManyEntries);
        }
    }
    set_ending_recv_credits(&mut plan);
    Ok(plan)
}

/// Sets each op's [`PlannedOp::ending_recv_credits`]: [`NecOptions::early_recv`], lowered
/// under three rules.
///
/// 1. *Reachable*: the device raises a recv host index only while the buffers of the next
///    `credits` entries are free (the entries the program has posted), so at each
///    `Wait { upto }` of a recv side with `a` entries posted (fewer than all), `credits <=
///    a − upto`.
/// 2. *Handed out in the prologue*: right after the handshake the proxy posts `credits`
///    receives at host index 0, before the program ran, so `credits` is at most the entries
///    the program posts before its first local work or wait.
/// 3. *Free at the handshake*: each of those first `credits` entries must be free from the
///    start of the program: no instruction before the `Post` that hands entry `i` out may
///    touch its destination (a send or another receive over it, a reduce or copy reading or
///    writing it), by real overlap (in place, input and output share one buffer). So
///    `credits` is at most the length of the longest prefix of such entries. (Later windows
///    lie inside the entries handed out, which the builder's hazard rules keep free.)
pub(super) fn set_ending_recv_credits(plan: &mut RankPlan) {
    let want = plan.params.nec.early_recv;
    let mut authorized: Vec<u32> = plan.ops.iter().map(|_| 0).collect();
    let mut credits: Vec<u32> = plan
        .ops
        .iter()
        .map(|o| if o.rx_entry_cnt > 0 { want } else { 0 })
        .collect();
    if want > 0 {
        let mut prologue = true;
        for ins in &plan.program {
            if matches!(
                ins,
                Instr::Wait { .. } | Instr::Reduce { .. } | Instr::Copy { .. }
            ) && prologue
            {
                prologue = false;
                for (c, &a) in credits.iter_mut().zip(&authorized) {
                    *c = (*c).min(a);
                }
            }
            match *ins {
                Instr::Post {
                    op,
                    side: Side::Recv,
                    upto,
                } => authorized[op as usize] = upto,
                Instr::Wait {
                    op,
                    side: Side::Recv,
                    upto,
                } => {
                    let a = authorized[op as usize];
                    if a < plan.ops[op as usize].rx_entry_cnt {
                        let c = &mut credits[op as usize];
                        *c = (*c).min(a.saturating_sub(upto));
                    }
                }
                _ => {}
            }
        }
        plan.recv_free = recv_free(plan);
        for (k, c) in credits.iter_mut().enumerate() {
            let o = plan.ops[k];
            let flags = &plan.recv_free[o.dst_base as usize..][..o.rx_entry_cnt as usize];
            let prefix = flags.iter().take_while(|&&f| f).count() as u32;
            *c = (*c).min(prefix);
        }
    }
    for (o, c) in plan.ops.iter_mut().zip(credits) {
        o.ending_recv_credits = c;
    }
}

/// [`RankPlan::recv_free`]: per destination entry, whether no instruction before the `Post`
/// that hands it out touches its buffer (a send or another receive over it, a reduce or copy
/// reading or writing it), by real overlap (in place, input and output are one buffer).
pub(super) fn recv_free(plan: &RankPlan) -> Vec<bool> {
    let l = plan.layout;
    // Canonical addresses: in place, input and output are one buffer; else three buffers far
    // apart (offsets stay far below 2^50).
    let addrs = Addresses {
        input: if l.in_place { l.input_offset } else { 1 << 50 },
        output: if l.in_place { l.output_offset } else { 2 << 50 },
        scratch: 3 << 50,
        words: 0,
        word_stride: 4,
    };
    let range = |loc: Loc, bytes: u64| (addrs.of(loc), addrs.of(loc) + bytes);
    let elt = plan.params.dtype.size() as u64;
    let mut handed: Vec<[u32; 2]> = alloc::vec![[0; 2]; plan.ops.len()];
    // The union of the ranges touched so far: start → end, disjoint, not adjacent-merged.
    let mut touched: BTreeMap<u64, u64> = BTreeMap::new();
    let hit = |t: &BTreeMap<u64, u64>, (a, b): (u64, u64)| {
        a < b && t.range(..b).next_back().is_some_and(|(_, &e)| e > a)
    };
    let touch = |t: &mut BTreeMap<u64, u64>, (mut a, mut b): (u64, u64)| {
        if a >= b {
            return;
        }
        // Merge every interval overlapping or adjacent to a..b.
        while let Some((&x, &y)) = t.range(..=b).next_back() {
            if y < a {
                break;
            }
            t.remove(&x);
            a = a.min(x);
            b = b.max(y);
        }
        t.insert(a, b);
    };
    let mut free = alloc::vec![false; plan.dst.len()];
    for ins in &plan.program {
        match *ins {
            Instr::Post { op, side, upto } => {
                let from = handed[op as usize][side as usize];
                let base = plan.ops[op as usize].dst_base as usize;
                for (i, e) in plan.entries(op, side)[from as usize..upto as usize]
                    .iter()
                    .enumerate()
                {
                    let r = range(e.loc, e.bytes);
                    if side == Side::Recv {
                        free[base + from as usize + i] = !hit(&touched, r);
                    }
                    touch(&mut touched, r);
                }
                handed[op as usize][side as usize] = upto;
            }
            Instr::Reduce { dst, a, b, elems } => {
                for loc in [dst, a, b] {
                    touch(&mut touched, range(loc, elems * elt));
                }
            }
            Instr::Copy { dst, src, bytes } => {
                touch(&mut touched, range(dst, bytes));
                touch(&mut touched, range(src, bytes));
            }
            _ => {}
        }
    }
    free
}
