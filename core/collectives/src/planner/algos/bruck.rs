//! Bruck's algorithms: all-gather and all-to-all in `⌈log2 n⌉` steps for any rank count
//! (J. Bruck et al., "Efficient Algorithms for All-to-All Communications in Multiport
//! Message-Passing Systems", IEEE TPDS 1997; MPICH `MPIR_Allgather_intra_brucks` and
//! `MPIR_Alltoall_intra_brucks`; Open MPI `coll_tuned`'s `ompi_coll_base_allgather_intra_bruck`
//! and `ompi_coll_base_alltoall_intra_bruck`).
//!
//! Both address blocks where they are instead of rotating a temporary buffer: every receive
//! lands in its final place or in a staging area of its own, and is posted at the start; a
//! send waits only for the receive of the block it forwards. Step `k` uses tag `k`. The
//! all-gather's blocks of a step are one run of entries when the plan is not split
//! ([`Gen::run_entries`]); the all-to-all's are packed into one run per step by local copies
//! then (and go block by block when split).

use alloc::vec::Vec;

use super::{ceil_div, Gen};
use crate::planner::{Buf, Loc};

impl Gen {
    /// Bruck all-gather: in step `k` (distance `d = 2^k`) rank `r` sends the blocks
    /// `r .. r + min(d, n − d)` (mod n) it holds to `r − d` and receives blocks
    /// `r + d ..` from `r + d`, straight into their places in the output.
    pub(super) fn bruck_all_gather(&mut self) {
        let (n, r) = (self.n, self.r);
        let mut steps = Vec::new();
        let mut d = 1;
        while d < n {
            let op = self.b.op(
                Some(((r + n - d) % n) as u32),
                Some(((r + d) % n) as u32),
                steps.len() as u32,
            );
            steps.push((op, d, d.min(n - d)));
            d *= 2;
        }
        for &(op, d, cnt) in &steps {
            self.run_entries(op, r + d, cnt, false);
        }
        self.own_block_copy();
        for &(op, _, cnt) in &steps {
            self.run_entries(op, r, cnt, true);
        }
    }

    /// Bruck all-to-all: the block for rank `r + j` has relative index `j`; in step `k` every
    /// block whose index has bit `k` set moves `2^k` ranks on (to `r + 2^k`, from `r − 2^k`).
    /// A block that still has higher bits to go lands in a staging slot in scratch (one per
    /// step and index); at its last bit it lands in the output, block `r − j`. In place the
    /// input is copied to scratch first (the receives overwrite it).
    pub(super) fn bruck_all_to_all(&mut self) {
        if self.coalesce() {
            return self.bruck_all_to_all_packed();
        }
        let (n, r, m, elt) = (self.n, self.r, self.p.count, self.elt);
        let blk = m * elt;
        let mut src = Buf::Input;
        let mut base = 0;
        if self.p.in_place {
            self.b
                .copy(Loc::new(Buf::Scratch, 0), Loc::new(Buf::Input, 0), n * blk);
            src = Buf::Scratch;
            base = n * blk;
        }
        // Where relative block j is now.
        let mut cur: Vec<Loc> = (0..n).map(|j| Loc::new(src, ((r + j) % n) * blk)).collect();
        let mut steps = Vec::new();
        let mut k = 0;
        while (1 << k) < n {
            let d = 1u64 << k;
            let op = self.b.op(
                Some(((r + d) % n) as u32),
                Some(((r + n - d) % n) as u32),
                k as u32,
            );
            let moves: Vec<(u64, Loc)> = (1..n)
                .filter(|j| j & d != 0)
                .map(|j| {
                    let to = if j >> (k + 1) == 0 {
                        Loc::new(Buf::Output, ((r + n - j) % n) * blk)
                    } else {
                        let at = Loc::new(Buf::Scratch, base);
                        base += blk;
                        at
                    };
                    (j, to)
                })
                .collect();
            steps.push((op, moves));
            k += 1;
        }
        self.scratch = base;
        let chunks = ceil_div(m, self.ce);
        let piece = |g: &Self, at: Loc, c: u64| {
            let (off, bytes) = g.chunk(0, m, c);
            (at.add(off), bytes)
        };
        for (op, moves) in &steps {
            for &(_, to) in moves {
                for c in 0..chunks {
                    let (l, b) = piece(self, to, c);
                    self.b.recv(*op, l, b);
                }
            }
        }
        self.b.copy(
            Loc::new(Buf::Output, r * blk),
            Loc::new(Buf::Input, r * blk),
            blk,
        );
        for (op, moves) in &steps {
            for &(j, to) in moves {
                for c in 0..chunks {
                    let (l, b) = piece(self, cur[j as usize], c);
                    self.b.send(*op, l, b);
                }
                cur[j as usize] = to;
            }
        }
    }

    /// [`Gen::bruck_all_to_all`] when the plan is not split ([`Gen::coalesce`]), as Bruck
    /// wrote it: step `k`'s blocks are packed (local copies) into one send area and go as one
    /// run of entries into one receive area of the partner's; there a block with bits still
    /// to go stays where it landed, a block at its last bit is copied to its place in the
    /// output. `⌈log2 n⌉` runs instead of about `n log2 n / 2` blocks; every area is scratch
    /// of its own (about `n ⌈log2 n⌉` blocks in all), every receive posted at the start.
    fn bruck_all_to_all_packed(&mut self) {
        let (n, r, m, elt) = (self.n, self.r, self.p.count, self.elt);
        let blk = m * elt;
        let mut src = Buf::Input;
        let mut base = 0;
        if self.p.in_place {
            self.b
                .copy(Loc::new(Buf::Scratch, 0), Loc::new(Buf::Input, 0), n * blk);
            src = Buf::Scratch;
            base = n * blk;
        }
        let mut cur: Vec<Loc> = (0..n).map(|j| Loc::new(src, ((r + j) % n) * blk)).collect();
        // Per step: (op, k, the relative blocks it moves, send area, receive area).
        let mut steps = Vec::new();
        let mut k = 0u64;
        while (1 << k) < n {
            let d = 1u64 << k;
            let op = self.b.op(
                Some(((r + d) % n) as u32),
                Some(((r + n - d) % n) as u32),
                k as u32,
            );
            let js: Vec<u64> = (1..n).filter(|j| j & d != 0).collect();
            let len = js.len() as u64 * blk;
            steps.push((op, k, js, base, base + len));
            base += 2 * len;
            k += 1;
        }
        self.scratch = base;
        // A run of `blocks` blocks at `at` as entries of at most a chunk.
        let run = |g: &Self, at: u64, blocks: u64| -> Vec<(Loc, u64)> {
            let len = blocks * m;
            (0..ceil_div(len, g.ce))
                .map(|c| {
                    let (off, bytes) = g.chunk(0, len, c);
                    (Loc::new(Buf::Scratch, at + off), bytes)
                })
                .collect()
        };
        for (op, _, js, _, recv_at) in &steps {
            for (l, b) in run(self, *recv_at, js.len() as u64) {
                self.b.recv(*op, l, b);
            }
        }
        self.b.copy(
            Loc::new(Buf::Output, r * blk),
            Loc::new(Buf::Input, r * blk),
            blk,
        );
        for (op, k, js, send_at, recv_at) in &steps {
            for (i, &j) in (0u64..).zip(js) {
                self.b.copy(
                    Loc::new(Buf::Scratch, send_at + i * blk),
                    cur[j as usize],
                    blk,
                );
            }
            for (l, b) in run(self, *send_at, js.len() as u64) {
                self.b.send(*op, l, b);
            }
            for (i, &j) in (0u64..).zip(js) {
                let at = Loc::new(Buf::Scratch, recv_at + i * blk);
                if j >> (k + 1) == 0 {
                    self.b
                        .copy(Loc::new(Buf::Output, ((r + n - j) % n) * blk), at, blk);
                } else {
                    cur[j as usize] = at;
                }
            }
        }
    }
}
