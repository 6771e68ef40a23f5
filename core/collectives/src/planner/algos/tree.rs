//! Trees: the binomial-tree broadcast (`⌈log2 n⌉` steps; MPICH `MPIR_Bcast_intra_binomial`,
//! Open MPI `ompi_coll_base_bcast_intra_binomial`, Thakur, Rabenseifner and Gropp 2005, §4.2),
//! and the scatter + all-gather broadcast that scatters down the same tree. Every receive is
//! posted at the start; a rank forwards each chunk as it arrives, so both are pipelined in
//! chunks.

use alloc::vec::Vec;

use super::{ceil_div, Gen};
use crate::planner::{Buf, Loc};

impl Gen {
    /// Binomial-tree broadcast: relative rank `v = r − root` receives from `v − 2^k` (`2^k`
    /// its lowest set bit; tag `k`) and sends to `v + 2^j` for every `2^j` below that bit
    /// (below `n` at the root), largest subtree first, chunk by chunk as the chunks arrive
    /// (MPICH `MPIR_Bcast_intra_binomial`; Open MPI `ompi_coll_base_bcast_intra_binomial`).
    pub(super) fn binomial_broadcast(&mut self) {
        let (n, r, root, count) = (self.n, self.r, u64::from(self.p.root), self.p.count);
        let chunks = ceil_div(count, self.ce);
        let v = (r + n - root) % n;
        let top = if v == 0 {
            n.next_power_of_two()
        } else {
            1 << v.trailing_zeros()
        };
        if v != 0 {
            let parent = ((v - top + root) % n) as u32;
            let op = self.b.op(None, Some(parent), top.trailing_zeros());
            for c in 0..chunks {
                let (off, bytes) = self.chunk(0, count, c);
                self.b.recv(op, Loc::new(Buf::Output, off), bytes);
            }
        }
        let mut children = Vec::new();
        let mut mask = top >> 1;
        while mask > 0 {
            if v + mask < n {
                let child = ((v + mask + root) % n) as u32;
                children.push(self.b.op(Some(child), None, mask.trailing_zeros()));
            }
            mask >>= 1;
        }
        let src = if v == 0 { Buf::Input } else { Buf::Output };
        for c in 0..chunks {
            let (off, bytes) = self.chunk(0, count, c);
            for &op in &children {
                self.b.send(op, Loc::new(src, off), bytes);
            }
        }
        if v == 0 {
            self.b.copy(
                Loc::new(Buf::Output, 0),
                Loc::new(Buf::Input, 0),
                count * self.elt,
            );
        }
    }
}

impl Gen {
    /// Scatter + all-gather broadcast (van de Geijn; MPICH
    /// `MPIR_Bcast_intra_scatter_ring_allgather`; Thakur, Rabenseifner and Gropp 2005, §4.2):
    /// the vector is cut into `n` segments (relative rank `v` owns segment `v`), scattered down
    /// the binomial tree (`v` receives the segments of its subtree `v .. v + 2^k`, tag `k` as
    /// [`Gen::binomial_broadcast`]), then gathered around the ring in `n − 1` steps (tag
    /// `⌈log2 n⌉ + s`; step `s` moves segment `v − s` from `v` to `v + 1`). A ring transfer of a
    /// segment the receiver already has from the scatter is left out on both sides, so every
    /// segment lands once, every receive is posted at the start and a ring op exists only
    /// where it carries something.
    pub(super) fn scatter_allgather_broadcast(&mut self) {
        let (n, r, root, count, elt) = (
            self.n,
            self.r,
            u64::from(self.p.root),
            self.p.count,
            self.elt,
        );
        let real = |v: u64| ((v + root) % n) as u32;
        let v = (r + n - root) % n;
        let (base, rem) = (count / n, count % n);
        // First element of segment j (j ≤ n).
        let bound = |j: u64| j * base + j.min(rem);
        // The segments relative rank x gets from the scatter: x .. x + its subtree.
        let sub = |x: u64| {
            let size = if x == 0 { n } else { 1 << x.trailing_zeros() };
            (x, (x + size).min(n))
        };
        let seg_chunks = |g: &Self, segs: (u64, u64)| -> Vec<(u64, u64)> {
            // An empty run is one empty entry: no op is left without entries.
            let (lo, hi) = (bound(segs.0), bound(segs.1));
            (0..ceil_div(hi - lo, g.ce).max(1))
                .map(|c| g.chunk(lo, hi - lo, c))
                .collect()
        };
        // The root's data: its input; everyone else's: its output.
        let src = if v == 0 { Buf::Input } else { Buf::Output };
        let top = if v == 0 {
            n.next_power_of_two()
        } else {
            1 << v.trailing_zeros()
        };
        let log_n = u64::from(n.next_power_of_two().trailing_zeros());
        let parent_op =
            (v != 0).then(|| self.b.op(None, Some(real(v - top)), top.trailing_zeros()));
        let mut children = Vec::new();
        let mut mask = top >> 1;
        while mask > 0 {
            if v + mask < n {
                let op = self.b.op(Some(real(v + mask)), None, mask.trailing_zeros());
                children.push((op, sub(v + mask)));
            }
            mask >>= 1;
        }
        // Ring step s: send segment v − s to v + 1 unless v + 1 has it; receive segment
        // v − 1 − s from v − 1 unless this rank has it.
        let mine = sub(v);
        let has = |segs: (u64, u64), x: u64| segs.0 <= x && x < segs.1;
        let next_has = sub((v + 1) % n);
        let mut ring = Vec::new();
        for s in 0..n - 1 {
            let tag = (log_n + s) as u32;
            let out = (v + n - s) % n;
            let inn = (v + 2 * n - 1 - s) % n;
            // One op per step with the side(s) it needs, as the ring's.
            let (send, recv) = (!has(next_has, out), !has(mine, inn));
            if send || recv {
                let op = self.b.op(
                    send.then(|| real(v + 1)),
                    recv.then(|| real(v + n - 1)),
                    tag,
                );
                ring.push((send.then_some((op, out)), recv.then_some((op, inn))));
            }
        }
        if let Some(op) = parent_op {
            for (off, bytes) in seg_chunks(self, mine) {
                self.b.recv(op, Loc::new(Buf::Output, off), bytes);
            }
        }
        for &(_, recv) in &ring {
            if let Some((op, x)) = recv {
                for (off, bytes) in seg_chunks(self, (x, x + 1)) {
                    self.b.recv(op, Loc::new(Buf::Output, off), bytes);
                }
            }
        }
        for &(op, segs) in &children {
            for (off, bytes) in seg_chunks(self, segs) {
                self.b.send(op, Loc::new(src, off), bytes);
            }
        }
        if v == 0 {
            self.b.copy(
                Loc::new(Buf::Output, 0),
                Loc::new(Buf::Input, 0),
                count * elt,
            );
        }
        for &(send, _) in &ring {
            if let Some((op, x)) = send {
                for (off, bytes) in seg_chunks(self, (x, x + 1)) {
                    self.b.send(op, Loc::new(src, off), bytes);
                }
            }
        }
    }
}
