//! Recursive doubling (all-reduce, all-gather) and the fold of rank counts that are not a
//! power of two, which every `log n` exchange algorithm here shares.
//!
//! # The fold
//! With `p` the largest power of two `≤ n` and `rem = n − p`, each of the first `rem` pairs
//! `(2i, 2i + 1)` is folded into its odd rank: the even rank (an *extra*) hands its data to
//! the odd one before the exchange (tag 0) and gets the result back from it after (the tag
//! after the exchange's). The `p` remaining ranks take part with *new ranks* `0..p` (the odd
//! rank `2i + 1` is new rank `i`, rank `r ≥ 2 rem` is `r − rem`); the new-rank order is the
//! rank order, so "the lower group first" means the same in both. Source: MPICH
//! `MPIR_Allreduce_intra_recursive_doubling`, Open MPI `coll_tuned`'s
//! `ompi_coll_base_allreduce_intra_recursivedoubling`; Thakur, Rabenseifner and Gropp 2005, §4.
//!
//! # Bit-identical results
//! Every reduction takes the lower group's value as its first operand, so the two partners of
//! a step compute the same bits and every rank ends with the same tree of reductions (floats
//! included), as the direct and ring algorithms do.

use alloc::vec::Vec;

use super::{ceil_div, Gen};
use crate::planner::{Buf, Loc};

/// The fold of `n` ranks onto the largest power of two below it (module docs).
#[derive(Clone, Copy, Debug)]
pub(super) struct Fold {
    /// The largest power of two `≤ n`.
    pub p: u64,
    /// `n − p`: the pairs folded.
    pub rem: u64,
    /// `log2 p`: the exchange steps.
    pub steps: u64,
}

impl Fold {
    /// The fold of `n ≥ 1` ranks.
    pub fn new(n: u64) -> Self {
        let steps = 63 - u64::from(n.leading_zeros());
        let p = 1 << steps;
        Self {
            p,
            rem: n - p,
            steps,
        }
    }

    /// The new rank of rank `r`, or `None` for an extra (an even rank below `2 rem`).
    pub fn newrank(&self, r: u64) -> Option<u64> {
        if r < 2 * self.rem {
            (r % 2 == 1).then_some(r / 2)
        } else {
            Some(r - self.rem)
        }
    }

    /// `true` for a rank that takes an extra's data in (an odd rank below `2 rem`).
    pub fn folds(&self, r: u64) -> bool {
        r < 2 * self.rem && r % 2 == 1
    }

    /// The rank of new rank `nr`.
    pub fn real(&self, nr: u64) -> u64 {
        if nr < self.rem {
            2 * nr + 1
        } else {
            nr + self.rem
        }
    }

    /// The first rank of new rank `nr`'s group (the extra folded into it, if any), for
    /// `nr ≤ p` (`first(p) = n`): new ranks `a..b` stand for ranks `first(a)..first(b)`.
    pub fn first(&self, nr: u64) -> u64 {
        if nr < self.rem {
            2 * nr
        } else {
            nr + self.rem
        }
    }
}

impl Gen {
    /// Recursive-doubling all-reduce: every participant exchanges its whole partial vector
    /// with new rank `nr xor 2^s` in step `s` and reduces (the lower group's first), chunk by
    /// chunk in wavefront order like the ring; receives go through a window of `w` scratch
    /// slots per step. Tags: the fold 0, step `s` `s + 1`, the unfold `log2 p + 1`.
    pub(super) fn rd_all_reduce(&mut self) {
        let (n, r, count, elt) = (self.n, self.r, self.p.count, self.elt);
        let f = Fold::new(n);
        let chunks = ceil_div(count, self.ce);
        let l = f.steps;
        let unfold_tag = (l + 1) as u32;
        let Some(nr) = f.newrank(r) else {
            // An extra: its vector to r + 1, the result back from it.
            let fold = self.b.op(Some(r as u32 + 1), None, 0);
            let unfold = self.b.op(None, Some(r as u32 + 1), unfold_tag);
            for c in 0..chunks {
                let (off, bytes) = self.chunk(0, count, c);
                self.b.send(fold, Loc::new(Buf::Input, off), bytes);
            }
            for c in 0..chunks {
                let (off, bytes) = self.chunk(0, count, c);
                self.b.recv(unfold, Loc::new(Buf::Output, off), bytes);
            }
            return;
        };
        let folds = f.folds(r);
        let w = self.w.min(chunks);
        let slot = self.ce.min(count) * elt;
        // Window 0: the fold's receives; window 1 + s: step s's.
        self.scratch = (l + 1) * w * slot;
        let rslot = |k: u64, c: u64| Loc::new(Buf::Scratch, (k * w + c % w) * slot);
        let fold_op = folds.then(|| self.b.op(None, Some(r as u32 - 1), 0));
        let peers: Vec<u64> = (0..l).map(|s| f.real(nr ^ (1 << s))).collect();
        let ops: Vec<u32> = peers
            .iter()
            .zip(1u32..)
            .map(|(&q, tag)| self.b.op(Some(q as u32), Some(q as u32), tag))
            .collect();
        let unfold_op = folds.then(|| self.b.op(Some(r as u32 - 1), None, unfold_tag));
        let bytes_of = |g: &Self, c: u64| g.chunk(0, count, c).1;
        // Every participant runs step s at stage `shift + s` (stage 0 is the fold when there
        // is one), so that partners post their matching entries at the same program point.
        let shift = u64::from(f.rem > 0);
        if let Some(op) = fold_op {
            for c in 0..w {
                self.b.recv(op, rslot(0, c), bytes_of(self, c));
            }
        }
        for (s, &op) in ops.iter().enumerate() {
            for c in 0..w {
                self.b.recv(op, rslot(1 + s as u64, c), bytes_of(self, c));
            }
        }
        // Step 0's sends from the input need nothing: the first w now, chunk c + w right
        // after the receive of chunk c + w (paced with the peer's window, as the ring).
        if !folds {
            for c in 0..w {
                let (off, bytes) = self.chunk(0, count, c);
                self.b.send(ops[0], Loc::new(Buf::Input, off), bytes);
            }
        }
        let stages = shift + l;
        for t in 0..chunks + stages - 1 {
            for k in 0..stages.min(t + 1) {
                let c = t - k;
                if c >= chunks {
                    continue;
                }
                let (off, bytes) = self.chunk(0, count, c);
                let elems = bytes / elt;
                let out = Loc::new(Buf::Output, off);
                if k < shift {
                    let Some(op) = fold_op else { continue };
                    // The extra (r − 1) is the lower rank.
                    self.b
                        .reduce(out, rslot(0, c), Loc::new(Buf::Input, off), elems, elt);
                    if c + w < chunks {
                        self.b.recv(op, rslot(0, c + w), bytes_of(self, c + w));
                    }
                    self.b.send(ops[0], out, bytes);
                    continue;
                }
                let s = (k - shift) as usize;
                let mine = if s == 0 && !folds {
                    Loc::new(Buf::Input, off)
                } else {
                    out
                };
                let theirs = rslot(1 + s as u64, c);
                let (a, bb) = if peers[s] < r {
                    (theirs, mine)
                } else {
                    (mine, theirs)
                };
                self.b.reduce(out, a, bb, elems, elt);
                if c + w < chunks {
                    self.b
                        .recv(ops[s], rslot(1 + s as u64, c + w), bytes_of(self, c + w));
                    if s == 0 && !folds {
                        let (o2, b2) = self.chunk(0, count, c + w);
                        self.b.send(ops[0], Loc::new(Buf::Input, o2), b2);
                    }
                }
                if s + 1 < l as usize {
                    self.b.send(ops[s + 1], out, bytes);
                } else if let Some(op) = unfold_op {
                    self.b.send(op, out, bytes);
                }
            }
        }
    }

    /// Block `b` (`m` elements) of an all-gather as entries on `op`: sent from the input when
    /// it is this rank's own block, else from (or received into) its place in the output.
    pub(super) fn block_entries(&mut self, op: u32, b: u64, send: bool) {
        let m = self.p.count;
        for c in 0..ceil_div(m, self.ce) {
            let (off, bytes) = self.chunk(b * m, m, c);
            if send && b == self.r {
                let own = off - b * m * self.elt;
                self.b.send(op, Loc::new(Buf::Input, own), bytes);
            } else if send {
                self.b.send(op, Loc::new(Buf::Output, off), bytes);
            } else {
                self.b.recv(op, Loc::new(Buf::Output, off), bytes);
            }
        }
    }

    /// `true` when the plan is not split over streams or blocks ([`crate::planner::plan_blocks`]
    /// keeps the whole's `streams` and `blocks` in every part's parameters): only then may an
    /// entry span rank blocks of a strided buffer.
    pub(super) fn coalesce(&self) -> bool {
        self.p.streams == 1 && self.p.blocks == 1
    }

    /// The all-gather blocks `first .. first + cnt` (mod n) as entries on `op`: unsplit
    /// ([`Gen::coalesce`]) as chunks of the contiguous runs of the output (the own block must
    /// be in the output already: [`Gen::own_block_copy`] before any send), else block by
    /// block ([`Gen::block_entries`]). Both partners cut a run the same way.
    pub(super) fn run_entries(&mut self, op: u32, first: u64, cnt: u64, send: bool) {
        let (n, m) = (self.n, self.p.count);
        if !self.coalesce() {
            for i in 0..cnt {
                self.block_entries(op, (first + i) % n, send);
            }
            return;
        }
        let first = first % n;
        let runs = if first + cnt <= n {
            [(first, first + cnt), (0, 0)]
        } else {
            [(first, n), (0, first + cnt - n)]
        };
        for (b0, b1) in runs {
            let len = (b1 - b0) * m;
            for c in 0..ceil_div(len, self.ce) {
                let (off, bytes) = self.chunk(b0 * m, len, c);
                let at = Loc::new(Buf::Output, off);
                if send {
                    self.b.send(op, at, bytes);
                } else {
                    self.b.recv(op, at, bytes);
                }
            }
        }
    }

    /// The copy of the rank's own block into the output (nothing in place).
    pub(super) fn own_block_copy(&mut self) {
        let (r, m, elt) = (self.r, self.p.count, self.elt);
        self.b.copy(
            Loc::new(Buf::Output, r * m * elt),
            Loc::new(Buf::Input, 0),
            m * elt,
        );
    }

    /// Recursive-doubling all-gather: in step `s` a participant sends the blocks of its
    /// group of `2^s` new ranks to new rank `nr xor 2^s` and receives that one's, straight
    /// into their places in the output (every receive posted at the start; a send waits only
    /// for the receives of the blocks it forwards). Tags as [`Gen::rd_all_reduce`].
    pub(super) fn rd_all_gather(&mut self) {
        let (n, r) = (self.n, self.r);
        let f = Fold::new(n);
        let l = f.steps;
        let unfold_tag = (l + 1) as u32;
        let Some(nr) = f.newrank(r) else {
            let fold = self.b.op(Some(r as u32 + 1), None, 0);
            let unfold = self.b.op(None, Some(r as u32 + 1), unfold_tag);
            // Every block but this rank's: the run after it, wrapping round.
            self.run_entries(unfold, r + 1, n - 1, false);
            self.own_block_copy();
            self.run_entries(fold, r, 1, true);
            return;
        };
        let folds = f.folds(r);
        let fold_op = folds.then(|| self.b.op(None, Some(r as u32 - 1), 0));
        let ops: Vec<u32> = (0..l)
            .map(|s| {
                let q = f.real(nr ^ (1 << s)) as u32;
                self.b.op(Some(q), Some(q), s as u32 + 1)
            })
            .collect();
        let unfold_op = folds.then(|| self.b.op(Some(r as u32 - 1), None, unfold_tag));
        // The ranks of the group of 2^s new ranks holding new rank `x`.
        let group = |x: u64, s: u64| {
            let lo = x & !((1 << s) - 1);
            f.first(lo)..f.first(lo + (1 << s))
        };
        if let Some(op) = fold_op {
            self.run_entries(op, r - 1, 1, false);
        }
        for (s, &op) in ops.iter().enumerate() {
            let g = group(nr ^ (1 << s), s as u64);
            self.run_entries(op, g.start, g.end - g.start, false);
        }
        self.own_block_copy();
        for (s, &op) in ops.iter().enumerate() {
            let g = group(nr, s as u64);
            self.run_entries(op, g.start, g.end - g.start, true);
        }
        if let Some(op) = unfold_op {
            // Every block but the extra's (r − 1): the run from r, wrapping round.
            self.run_entries(op, r, n - 1, true);
        }
    }
}
