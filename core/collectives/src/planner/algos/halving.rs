//! Recursive halving: the reduce-scatter of that name and Rabenseifner's all-reduce (a
//! reduce-scatter by recursive halving, then an all-gather by recursive doubling).
//!
//! The participants of the fold ([`Fold`]) own one segment each: the reduce-scatter's new
//! rank `i` owns the blocks of its group (`first(i)..first(i + 1)`), the all-reduce's
//! vector is split into `p` near-equal segments. In step `s` (mask `p / 2^(s+1)`) a
//! participant keeps the half of its remaining new-rank range that holds it, sends the other
//! half to new rank `nr xor mask`, receives that one's contribution to the kept half and
//! reduces it in (the lower group's first). Every receive lands in a scratch area of its own
//! and is posted at the start, so sends never run ahead of the peer's receives and no send is
//! waited for mid-way; the price is scratch of up to about twice the input (the fold's area
//! and, for reduce-scatter, the partial blocks). Entries never cross a rank block of a
//! strided buffer. Sources: MPICH `MPIR_Reduce_scatter_intra_recursive_halving` and
//! `MPIR_Allreduce_intra_reduce_scatter_allgather`; Open MPI `coll_tuned`'s
//! `ompi_coll_base_allreduce_intra_redscat_allgather`; Thakur, Rabenseifner and Gropp 2005,
//! §4.1 and §4.5.

use alloc::vec::Vec;

use super::recursive::Fold;
use super::Gen;
use crate::planner::{Buf, Loc};

/// The geometry of one halving plan.
struct Halving {
    /// Rabenseifner's all-reduce (else the reduce-scatter).
    all_reduce: bool,
    f: Fold,
    /// This rank.
    r: u64,
    /// Elements: the all-reduce's vector, the reduce-scatter's block.
    m: u64,
    /// Entries and local work never cross a multiple of this many elements.
    blk: u64,
    elt: u64,
    ce: u64,
    /// Reduce-scatter: byte offset of the partial blocks in scratch (block `b` at
    /// `acc_base + b·m·elt`; the rank's own block is its output).
    acc_base: u64,
}

impl Halving {
    /// First element of new rank `j`'s segment, `j ≤ p`.
    fn bound(&self, j: u64) -> u64 {
        if self.all_reduce {
            let (base, rem) = (self.m / self.f.p, self.m % self.f.p);
            j * base + j.min(rem)
        } else {
            self.f.first(j) * self.m
        }
    }

    /// Elements of new ranks `a..b`.
    fn span(&self, a: u64, b: u64) -> (u64, u64) {
        (self.bound(a), self.bound(b))
    }

    /// `[x0, x1)` as pieces `(first element, elements)` of at most a chunk that never cross a
    /// multiple of `blk`; an empty range is one empty piece (both partners agree on it).
    fn pieces(&self, (x0, x1): (u64, u64)) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        let mut x = x0;
        while x < x1 {
            let end = x1.min((x / self.blk + 1) * self.blk).min(x + self.ce);
            v.push((x, end - x));
            x = end;
        }
        if v.is_empty() {
            v.push((x0, 0));
        }
        v
    }

    fn input(&self, x: u64) -> Loc {
        Loc::new(Buf::Input, x * self.elt)
    }

    /// Where the partial result of element `x` lives.
    fn acc(&self, x: u64) -> Loc {
        if self.all_reduce {
            Loc::new(Buf::Output, x * self.elt)
        } else if x / self.m == self.r {
            Loc::new(Buf::Output, (x - self.r * self.m) * self.elt)
        } else {
            Loc::new(Buf::Scratch, self.acc_base + x * self.elt)
        }
    }
}

impl Gen {
    /// Recursive-halving reduce-scatter (`all_reduce == false`) or Rabenseifner's
    /// all-reduce (`true`). Tags: the fold 0, step `s` `s + 1` (the all-reduce's all-gather
    /// step with the same partner continues that op's entries), the unfold `log2 p + 1`.
    pub(super) fn halving(&mut self, all_reduce: bool) {
        let (n, r, m, elt) = (self.n, self.r, self.p.count, self.elt);
        let f = Fold::new(n);
        let total = if all_reduce { m } else { n * m };
        let mut h = Halving {
            all_reduce,
            f,
            r,
            m,
            blk: if all_reduce { total.max(1) } else { m.max(1) },
            elt,
            ce: self.ce,
            acc_base: 0,
        };
        let l = f.steps;
        let unfold_tag = (l + 1) as u32;
        let Some(nr) = f.newrank(r) else {
            let fold = self.b.op(Some(r as u32 + 1), None, 0);
            let unfold = self.b.op(None, Some(r as u32 + 1), unfold_tag);
            for (x, e) in h.pieces((0, total)) {
                self.b.send(fold, h.input(x), e * elt);
            }
            let mine = if all_reduce {
                (0, m)
            } else {
                (r * m, r * m + m)
            };
            for (x, e) in h.pieces(mine) {
                self.b.recv(unfold, h.acc(x), e * elt);
            }
            return;
        };
        let folds = f.folds(r);
        // Scratch: [the fold's area][reduce-scatter: partial blocks][step s's receives].
        let fold_bytes = if folds { total * elt } else { 0 };
        h.acc_base = fold_bytes;
        let mut next = fold_bytes + if all_reduce { 0 } else { total * elt };
        // Per step: (partner, kept elements, sent elements, receive area offset).
        let mut steps = Vec::new();
        let (mut lo, mut hi) = (0, f.p);
        for s in 0..l {
            let mask = f.p >> (s + 1);
            let (keep, give) = if nr & mask == 0 {
                ((lo, lo + mask), (lo + mask, hi))
            } else {
                ((lo + mask, hi), (lo, lo + mask))
            };
            let kept = h.span(keep.0, keep.1);
            steps.push((f.real(nr ^ mask), kept, h.span(give.0, give.1), next));
            next += (kept.1 - kept.0) * elt;
            (lo, hi) = keep;
        }
        self.scratch = next;
        let fold_op = folds.then(|| self.b.op(None, Some(r as u32 - 1), 0));
        let ops: Vec<u32> = steps
            .iter()
            .zip(1u32..)
            .map(|(st, tag)| self.b.op(Some(st.0 as u32), Some(st.0 as u32), tag))
            .collect();
        let unfold_op = folds.then(|| self.b.op(Some(r as u32 - 1), None, unfold_tag));
        let fold_at = |x: u64| Loc::new(Buf::Scratch, x * elt);
        if let Some(op) = fold_op {
            for (x, e) in h.pieces((0, total)) {
                self.b.recv(op, fold_at(x), e * elt);
            }
        }
        for (&op, &(_, kept, _, base)) in ops.iter().zip(&steps) {
            for (x, e) in h.pieces(kept) {
                self.b.recv(
                    op,
                    Loc::new(Buf::Scratch, base + (x - kept.0) * elt),
                    e * elt,
                );
            }
        }
        if folds {
            // The extra (r − 1) is the lower rank.
            for (x, e) in h.pieces((0, total)) {
                self.b.reduce(h.acc(x), fold_at(x), h.input(x), e, elt);
            }
        }
        for (s, (&op, &(q, kept, give, base))) in ops.iter().zip(&steps).enumerate() {
            let cur = |x: u64| {
                if s == 0 && !folds {
                    h.input(x)
                } else {
                    h.acc(x)
                }
            };
            for (x, e) in h.pieces(give) {
                self.b.send(op, cur(x), e * elt);
            }
            for (x, e) in h.pieces(kept) {
                let theirs = Loc::new(Buf::Scratch, base + (x - kept.0) * elt);
                let (a, b) = if q < r {
                    (theirs, cur(x))
                } else {
                    (cur(x), theirs)
                };
                self.b.reduce(h.acc(x), a, b, e, elt);
            }
        }
        if all_reduce {
            // All-gather by recursive doubling, the halving's steps in reverse: each step
            // sends the segments of this rank's group, receives the partner group's.
            let group = |x: u64, mask: u64| {
                let a = x & !(mask - 1);
                h.span(a, a + mask)
            };
            for (s, &op) in ops.iter().enumerate().rev() {
                let mask = f.p >> (s + 1);
                for (x, e) in h.pieces(group(nr ^ mask, mask)) {
                    self.b.recv(op, h.acc(x), e * elt);
                }
            }
            for (s, &op) in ops.iter().enumerate().rev() {
                let mask = f.p >> (s + 1);
                for (x, e) in h.pieces(group(nr, mask)) {
                    self.b.send(op, h.acc(x), e * elt);
                }
            }
        }
        if let Some(op) = unfold_op {
            let theirs = if all_reduce {
                (0, m)
            } else {
                ((r - 1) * m, r * m)
            };
            for (x, e) in h.pieces(theirs) {
                self.b.send(op, h.acc(x), e * elt);
            }
        }
    }
}
