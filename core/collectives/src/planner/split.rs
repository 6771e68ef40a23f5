//! Streams as channels, basic blocks as pipeline stages (docs/design.md §3, §9): one rank's
//! collective split into (stream, block) parts, each planned on its own with the same
//! algorithm.
//!
//! # How the split works
//! The per-rank `count` (the meaning of [`super::Collective`]'s `count`) is cut into whole
//! chunks ([`PlanParams::chunk_elems`]; the last chunk may be short). The chunks are dealt into
//! `S` contiguous stream slices as evenly as whole chunks allow (the first slices get the extra
//! chunk), and each slice again into `B` contiguous block parts. Part (s, b) covers elements
//! `lo..hi` of every rank block: for all-reduce, broadcast and send-recv that is `lo..hi` of
//! the buffers; for all-gather (output), reduce-scatter (input) and all-to-all (both) the
//! buffer of `n` rank blocks is strided: rank block `q` of the part is `q·count + lo ..
//! q·count + hi`. A part with no chunk (a slice too small to split) is empty and is not
//! returned.
//!
//! Each part is planned by [`super::plan`] as a collective of `hi − lo` elements; its
//! locations are then moved into the whole buffers (strided where the buffer is; a copy or a
//! reduction that crosses rank blocks is cut at each block boundary), its scratch placed after
//! the scratch of the streams before it (the blocks of one stream run one after the other and
//! share one area, the largest of theirs), its op tags moved to a range of its own (`tag +
//! (s·B + b − 1)·T`, `T` = [`tags_per_part`], the most tags any algorithm uses, the same on
//! every rank) and its host words after those of
//! the parts before it ([`BlockPlan::word_base`]).
//!
//! Seed: the producer's split of a collective over channels (`enc_channel`) and its
//! `build_fifo_block_ids` (nrt:0x124f20), §3.

use alloc::vec::Vec;

use super::{
    plan, Addresses, Buf, Collective, Fifos, Instr, Layout, Loc, PlanError, PlanParams,
    PlannedEntry, RankPlan,
};
use proxy_core::base::desc::MAX_OP_TAG;

/// One (stream, block) part of a rank's collective.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockPlan {
    /// The stream, `0..streams`.
    pub stream: u32,
    /// The basic block id, `1..=blocks`.
    pub block: u32,
    /// Elements `lo..hi` of every rank block this part covers.
    pub elems: (u64, u64),
    /// The part's plan: locations in the whole buffers ([`BlockPlans::layout`], also its
    /// `layout`), its own op tags; `params.count` is the part's `hi − lo` (`streams` and
    /// `blocks` are the whole's).
    pub plan: RankPlan,
    /// Its first host word in the rank's host-word array: op `k` of this part uses words
    /// `word_base + 6k .. word_base + 6k + 6`.
    pub word_base: u32,
    /// Byte offset of its scratch inside the rank's scratch area (already applied to the
    /// plan's scratch locations; for information).
    pub scratch_base: u64,
}

impl BlockPlan {
    /// `addrs` of the whole rank with the host words moved to this part's
    /// ([`BlockPlan::word_base`]): the addresses its FIFOs and its device program use.
    pub const fn addresses(&self, addrs: &Addresses) -> Addresses {
        Addresses {
            words: addrs.words + addrs.word_stride * self.word_base as u64,
            ..*addrs
        }
    }

    /// The `repr(C)` FIFOs of this part for `start(stream, block, ..)`, with the rank's
    /// buffers and host words at `addrs` (the whole rank's; the part's word base is applied)
    /// and the plan's `nec.h` options in every op info ([`RankPlan::fifos`]).
    pub fn fifos(&self, addrs: &Addresses) -> Fifos {
        self.plan.fifos(&self.addresses(addrs))
    }
}

/// Every non-empty (stream, block) part of one rank's collective ([`plan_blocks`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockPlans {
    /// The parameters of the whole collective, algorithm resolved.
    pub params: PlanParams,
    /// The rank's buffers: the whole input and output, the scratch of every part.
    pub layout: Layout,
    /// The parts, stream-major then by block id; empty parts left out.
    pub blocks: Vec<BlockPlan>,
}

impl BlockPlans {
    /// Host words all parts need together (each part's words follow the previous part's).
    pub fn host_words(&self) -> u32 {
        self.blocks.iter().map(|b| b.plan.host_words()).sum()
    }

    /// The block schedule of `loops` passes: `1..=B` repeated `loops` times (every stream
    /// follows it; a block with no part on a stream is done at once there).
    pub fn schedule(&self, loops: u32) -> Vec<u32> {
        let b = self.params.blocks;
        (0..loops).flat_map(|_| 1..=b).collect()
    }

    /// The streams that have at least one part, ascending.
    pub fn streams(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.blocks.iter().map(|b| b.stream).collect();
        v.dedup();
        v
    }
}

/// `units` split into `parts` contiguous runs as evenly as possible: run `i` as `(first,
/// end)`.
const fn share(units: u64, parts: u64, i: u64) -> (u64, u64) {
    let (base, rem) = (units / parts, units % parts);
    let first = i * base + if i < rem { i } else { rem };
    (first, first + base + (i < rem) as u64)
}

/// How a part's buffer offsets map into the whole buffer.
#[derive(Clone, Copy)]
struct Map {
    /// Bytes of one rank block in the part (`(hi − lo) × elt`); 0 = not strided.
    part_block: u64,
    /// Bytes of one rank block in the whole buffer.
    whole_block: u64,
    /// The part's first byte inside a rank block (`lo × elt`).
    lo: u64,
}

impl Map {
    /// Bytes from `off` to the next rank-block boundary of the part (`u64::MAX` unstrided).
    fn run(&self, off: u64) -> u64 {
        if self.part_block == 0 {
            u64::MAX
        } else {
            self.part_block - off % self.part_block
        }
    }

    fn whole(&self, off: u64) -> u64 {
        match off.checked_div(self.part_block) {
            None => self.lo + off,
            Some(q) => q * self.whole_block + self.lo + off % self.part_block,
        }
    }
}

/// Moves one part's locations into the whole buffers.
struct Mover {
    input: Map,
    output: Map,
    scratch: u64,
}

impl Mover {
    fn map(&self, buf: Buf) -> Option<&Map> {
        match buf {
            Buf::Input => Some(&self.input),
            Buf::Output => Some(&self.output),
            Buf::Scratch => None,
        }
    }

    fn run(&self, loc: Loc) -> u64 {
        self.map(loc.buf).map_or(u64::MAX, |m| m.run(loc.offset))
    }

    fn loc(&self, loc: Loc) -> Loc {
        let offset = match self.map(loc.buf) {
            Some(m) => m.whole(loc.offset),
            None => self.scratch + loc.offset,
        };
        Loc::new(loc.buf, offset)
    }

    /// Pieces of `bytes` at the locations `locs` that stay inside one rank block of every
    /// strided buffer: calls `f(piece offset, piece bytes)`.
    fn pieces(&self, locs: &[Loc], bytes: u64, elt: u64, mut f: impl FnMut(u64, u64)) {
        let mut at = 0;
        while at < bytes {
            let step = locs
                .iter()
                .map(|l| self.run(l.add(at)))
                .fold(bytes - at, u64::min);
            // Rank blocks are whole elements: every piece is too.
            debug_assert!(step % elt == 0);
            f(at, step);
            at += step;
        }
    }

    fn entry(&self, e: &PlannedEntry) -> Result<PlannedEntry, PlanError> {
        if e.bytes > self.run(e.loc) {
            // Split, every algorithm's entries are pieces of one rank block.
            return Err(PlanError::TooLarge);
        }
        Ok(PlannedEntry {
            loc: self.loc(e.loc),
            ..*e
        })
    }

    fn program(&self, program: &[Instr], elt: u64) -> Vec<Instr> {
        let mut out = Vec::with_capacity(program.len());
        for ins in program {
            match *ins {
                Instr::Reduce { dst, a, b, elems } => {
                    self.pieces(&[dst, a, b], elems * elt, elt, |at, n| {
                        out.push(Instr::Reduce {
                            dst: self.loc(dst.add(at)),
                            a: self.loc(a.add(at)),
                            b: self.loc(b.add(at)),
                            elems: n / elt,
                        });
                    });
                }
                Instr::Copy { dst, src, bytes } => {
                    self.pieces(&[dst, src], bytes, elt, |at, n| {
                        out.push(Instr::Copy {
                            dst: self.loc(dst.add(at)),
                            src: self.loc(src.add(at)),
                            bytes: n,
                        });
                    });
                }
                other => out.push(other),
            }
        }
        out
    }
}

/// The tags one (stream, block) part of a plan on `nranks` ranks may use, `0..T`: the most any
/// algorithm uses, ring all-reduce's `2(n − 1)` steps, direct's distances `1..n`, or the
/// hierarchical all-reduce's broadcast on one host of all `n` ranks (tags `n..n + ⌈log2 n⌉`,
/// above `2(n − 1)` for 2 and 3 ranks). At least 1; saturates at `u32::MAX` (a rank count
/// that large is refused by the planner anyway).
pub fn tags_per_part(nranks: u32) -> u32 {
    let n = u64::from(nranks.max(1));
    let log = u64::from(u64::BITS - (n - 1).leading_zeros());
    u32::try_from((2 * (n - 1)).max(n + log)).unwrap_or(u32::MAX)
}

/// Plans one rank's collective as `streams × blocks` parts (module docs): every non-empty
/// (stream, block) with its own host words, op tags and scratch, locations in the whole
/// buffers. With `streams = blocks = 1` the one part is [`plan`]'s plan (block 1, stream 0).
/// Every part uses the algorithm the whole collective resolves to.
///
/// # Errors
/// As [`plan`]; [`PlanError::BadSplit`] for `streams` outside `1..=4` or `blocks` 0;
/// [`PlanError::TooManyTags`] when the parts' tags do not fit below 2^14.
pub fn plan_blocks(params: &PlanParams) -> Result<BlockPlans, PlanError> {
    // Tags: a range of `t` per (stream, block), the same on every rank (partner ops must
    // agree). Checked before any planning (a refused split costs nothing).
    let t = tags_per_part(params.nranks);
    let parts_n = u64::from(params.streams) * u64::from(params.blocks);
    if (1..=4).contains(&params.streams)
        && params.blocks > 0
        && parts_n > 1
        && parts_n.saturating_mul(u64::from(t)) > u64::from(MAX_OP_TAG)
    {
        return Err(PlanError::TooManyTags);
    }
    // The whole collective: checks every parameter, gives the whole layout, resolves the
    // algorithm (which every part keeps).
    let whole = plan(params)?;
    let p = whole.params;
    let (s_n, b_n) = (u64::from(p.streams), u64::from(p.blocks));
    let elt = p.dtype.size() as u64;
    let ce = p.chunk_elems();
    let units = p.count.div_ceil(ce);
    let n = u64::from(p.nranks);
    let whole_block = p.count * elt;
    let (in_strided, out_strided) = match p.collective {
        Collective::AllGather => (false, true),
        Collective::ReduceScatter => (true, false),
        Collective::AllToAll => (true, true),
        _ => (false, false),
    };
    let mut parts: Vec<(u32, u32, (u64, u64), RankPlan)> = Vec::new();
    for s in 0..s_n {
        let (u0, u1) = share(units, s_n, s);
        for b in 0..b_n {
            let (v0, v1) = share(u1 - u0, b_n, b);
            let (lo, hi) = ((u0 + v0) * ce, ((u0 + v1) * ce).min(p.count));
            if hi <= lo {
                continue;
            }
            let mut sub = p;
            sub.count = hi - lo;
            // `streams` and `blocks` stay the whole's (plan ignores them): an algorithm may put
            // several rank blocks in one entry only when the plan is not split (`1 × 1`).
            let part = if s_n * b_n == 1 {
                whole.clone()
            } else {
                plan(&sub)?
            };
            parts.push((s as u32, b as u32 + 1, (lo, hi), part));
        }
    }
    debug_assert!(parts
        .iter()
        .all(|(_, _, _, pl)| pl.ops.iter().all(|o| o.tag < t)));
    // Scratch: per stream the largest of its blocks, streams one after the other.
    let mut stream_scratch = [0u64; 4];
    for (s, _, _, pl) in &parts {
        let v = &mut stream_scratch[*s as usize];
        *v = (*v).max(pl.layout.scratch_bytes);
    }
    let scratch_base = |s: u32| stream_scratch[..s as usize].iter().sum::<u64>();
    let layout = Layout {
        scratch_bytes: stream_scratch.iter().sum(),
        ..whole.layout
    };
    let mut blocks = Vec::with_capacity(parts.len());
    let mut word_base = 0u32;
    for (s, b, (lo, hi), mut pl) in parts {
        let part_block = (hi - lo) * elt;
        let strided = |yes: bool| Map {
            // Unsplit, the one part is the whole: nothing to move, entries may span blocks.
            part_block: if yes && n > 1 && s_n * b_n > 1 {
                part_block
            } else {
                0
            },
            whole_block,
            lo: lo * elt,
        };
        let base = scratch_base(s);
        let mover = Mover {
            input: strided(in_strided),
            output: strided(out_strided),
            scratch: base,
        };
        let tag_base = (u64::from(s) * b_n + u64::from(b) - 1) as u32 * t;
        for o in &mut pl.ops {
            o.tag += tag_base;
        }
        pl.src = pl
            .src
            .iter()
            .map(|e| mover.entry(e))
            .collect::<Result<_, _>>()?;
        pl.dst = pl
            .dst
            .iter()
            .map(|e| mover.entry(e))
            .collect::<Result<_, _>>()?;
        pl.program = mover.program(&pl.program, elt);
        pl.layout = layout;
        let words = pl.host_words();
        blocks.push(BlockPlan {
            stream: s,
            block: b,
            elems: (lo, hi),
            plan: pl,
            word_base,
            scratch_base: base,
        });
        word_base += words;
    }
    Ok(BlockPlans {
        params: p,
        layout,
        blocks,
    })
}

#[cfg(test)]
mod tests;
