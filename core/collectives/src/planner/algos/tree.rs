//! Trees: the binomial-tree broadcast (`⌈log2 n⌉` steps; MPICH `MPIR_Bcast_intra_binomial`,
//! Open MPI `ompi_coll_base_bcast_intra_binomial`, Thakur, Rabenseifner and Gropp 2005, §4.2).
//! Every receive is posted at the start; a rank forwards each chunk to its children as it
//! arrives, so the tree is pipelined in chunks.

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
