//! The algorithms: each emits posts and local work in a pipelined order through the
//! [`Builder`], which places the waits.
//!
//! Ring collectives use one op per ring step (tag = step): the device posts a step's sends as
//! their data becomes ready, independently of the other steps' host indices, and processes
//! received chunks in wavefront order (diagonal `t = step + chunk`), so a chunk's partial result
//! travels on while the next chunk is reduced (NCCL's pipelining, with FIFO entries as slices).

mod bruck;
mod halving;
mod hier;

pub(super) use hier::{hier_pieces, leaders_algorithm};
mod recursive;
mod tree;

use super::builder::{Builder, Group};
use super::{Algorithm, Buf, Collective, Layout, Loc, PlanError, PlanParams, RankPlan};

/// Receive posting policy of a ring step's op.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Policy {
    /// Every receive posted at the start (they land where nothing else touches).
    Start,
    /// A sliding window of `w` receives into scratch slots.
    Window,
    /// Receive `(s, c)` posted right after the send of `(s, c)` is (after processing
    /// `(s − 1, c)`): its destination is read by an earlier send of this rank.
    AfterPrev,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RingKind {
    AllReduce,
    ReduceScatter,
    AllGather,
}

/// One ring collective's geometry.
struct Ring {
    kind: RingKind,
    n: u64,
    r: u64,
    /// Elements: all-reduce `count`; reduce-scatter / all-gather the per-rank block.
    count: u64,
    ce: u64,
    elt: u64,
    /// Chunks per segment.
    chunks: u64,
    steps: u64,
    w: u64,
    w2: u64,
    slot: u64,
}

enum Action {
    Reduce {
        dst: Loc,
        a: Loc,
        b: Loc,
        elems: u64,
    },
}

impl Ring {
    /// Segment `x` as (first element, elements).
    fn seg(&self, x: u64) -> (u64, u64) {
        match self.kind {
            RingKind::AllReduce => {
                let (base, rem) = (self.count / self.n, self.count % self.n);
                (x * base + x.min(rem), base + u64::from(x < rem))
            }
            _ => (x * self.count, self.count),
        }
    }

    /// Chunk `c` of segment `x` as (byte offset, elements); may be empty.
    fn piece(&self, x: u64, c: u64) -> (u64, u64) {
        let (start, len) = self.seg(x);
        let from = (c * self.ce).min(len);
        let e = (len - from).min(self.ce);
        ((start + from) * self.elt, e)
    }

    fn send_seg(&self, s: u64) -> u64 {
        let n = self.n;
        match self.kind {
            RingKind::AllReduce | RingKind::AllGather => (self.r + 2 * n - s) % n,
            RingKind::ReduceScatter => (self.r + 2 * n - s - 1) % n,
        }
    }

    fn recv_seg(&self, s: u64) -> u64 {
        let n = self.n;
        match self.kind {
            RingKind::AllReduce | RingKind::AllGather => (self.r + 2 * n - s - 1) % n,
            RingKind::ReduceScatter => (self.r + 2 * n - s - 2) % n,
        }
    }

    fn rs_steps(&self) -> u64 {
        match self.kind {
            RingKind::AllReduce => self.n - 1,
            RingKind::ReduceScatter => self.steps,
            RingKind::AllGather => 0,
        }
    }

    fn rslot(&self, s: u64, c: u64) -> Loc {
        Loc::new(Buf::Scratch, (s * self.w + c % self.w) * self.slot)
    }

    fn stage(&self, s: u64, c: u64) -> Loc {
        let base = self.rs_steps() * self.w;
        Loc::new(Buf::Scratch, (base + s * self.w2 + c % self.w2) * self.slot)
    }

    fn scratch_bytes(&self) -> u64 {
        match self.kind {
            RingKind::AllReduce => self.rs_steps() * self.w * self.slot,
            RingKind::ReduceScatter => {
                (self.steps * self.w + (self.steps - 1) * self.w2) * self.slot
            }
            RingKind::AllGather => 0,
        }
    }

    fn policy(&self, s: u64) -> Policy {
        match self.kind {
            RingKind::AllGather => Policy::Start,
            RingKind::ReduceScatter => Policy::Window,
            RingKind::AllReduce if s < self.n - 1 => Policy::Window,
            RingKind::AllReduce => Policy::AfterPrev,
        }
    }

    /// Source of send `(s, c)` as (location, bytes).
    fn src(&self, s: u64, c: u64) -> (Loc, u64) {
        match self.kind {
            RingKind::AllReduce | RingKind::AllGather => {
                let x = self.send_seg(s);
                let (off, e) = self.piece(x, c);
                if s == 0 {
                    let own = if self.kind == RingKind::AllGather {
                        off - x * self.count * self.elt
                    } else {
                        off
                    };
                    (Loc::new(Buf::Input, own), e * self.elt)
                } else {
                    (Loc::new(Buf::Output, off), e * self.elt)
                }
            }
            RingKind::ReduceScatter => {
                let (off, e) = self.piece(self.send_seg(s), c);
                if s == 0 {
                    (Loc::new(Buf::Input, off), e * self.elt)
                } else {
                    (self.stage(s - 1, c), e * self.elt)
                }
            }
        }
    }

    /// Destination of receive `(s, c)` as (location, bytes).
    fn dst(&self, s: u64, c: u64) -> (Loc, u64) {
        let (off, e) = self.piece(self.recv_seg(s), c);
        let loc = match self.policy(s) {
            Policy::Window => self.rslot(s, c),
            Policy::Start | Policy::AfterPrev => Loc::new(Buf::Output, off),
        };
        (loc, e * self.elt)
    }

    /// What the device does once receive `(s, c)` is complete.
    fn action(&self, s: u64, c: u64) -> Option<Action> {
        let x = self.recv_seg(s);
        let (off, e) = self.piece(x, c);
        match self.kind {
            RingKind::AllReduce if s < self.n - 1 => Some(Action::Reduce {
                dst: Loc::new(Buf::Output, off),
                a: Loc::new(Buf::Input, off),
                b: self.rslot(s, c),
                elems: e,
            }),
            RingKind::ReduceScatter => {
                let dst = if s + 1 < self.steps {
                    self.stage(s, c)
                } else {
                    // x == r on the last step: the rank's own block.
                    Loc::new(Buf::Output, off - x * self.count * self.elt)
                };
                Some(Action::Reduce {
                    dst,
                    a: Loc::new(Buf::Input, off),
                    b: self.rslot(s, c),
                    elems: e,
                })
            }
            _ => None,
        }
    }

    fn emit(&self, b: &mut Builder, own_copy: Option<(Loc, Loc, u64)>) {
        let (steps, chunks) = (self.steps, self.chunks);
        let ops: alloc::vec::Vec<u32> = (0..steps)
            .map(|s| {
                b.op(
                    Some(((self.r + 1) % self.n) as u32),
                    Some(((self.r + self.n - 1) % self.n) as u32),
                    s as u32,
                )
            })
            .collect();
        // Step 0's sends need no data from anyone, so nothing orders them but this: a send
        // goes out no earlier than the program point where the peer posts its receive (the
        // peer runs the same program). With a window, the first `w` sends go now and send
        // `(0, c + w)` right after the receive `(0, c + w)` below; with every receive posted
        // at the start, every send goes now. Posting all of them at once would leave sends
        // unmatched for most of the execution, and a provider that completes sends in posting
        // order (shm) would then hold back the completion of every later send behind them:
        // the device waits on such a completion (a buffer it reuses) before it posts what the
        // peer needs to post those receives — a cycle (docs/design.md §5, "Sends never run
        // ahead of the peer's receives").
        let first_sends = match self.policy(0) {
            Policy::Window => self.w.min(chunks),
            Policy::Start | Policy::AfterPrev => chunks,
        };
        for c in 0..first_sends {
            let (l, n) = self.src(0, c);
            b.send(ops[0], l, n);
        }
        for s in 0..steps {
            let first = match self.policy(s) {
                Policy::Start => chunks,
                Policy::Window => self.w.min(chunks),
                Policy::AfterPrev if s == 0 => chunks,
                Policy::AfterPrev => 0,
            };
            for c in 0..first {
                let (l, n) = self.dst(s, c);
                b.recv(ops[s as usize], l, n);
            }
        }
        if let Some((dst, src, bytes)) = own_copy {
            b.copy(dst, src, bytes);
        }
        for t in 0..chunks + steps - 1 {
            for s in 0..steps.min(t + 1) {
                let c = t - s;
                if c >= chunks {
                    continue;
                }
                if let Some(Action::Reduce {
                    dst,
                    a,
                    b: bb,
                    elems,
                }) = self.action(s, c)
                {
                    b.reduce(dst, a, bb, elems, self.elt);
                }
                if s + 1 < steps {
                    let (l, n) = self.src(s + 1, c);
                    b.send(ops[s as usize + 1], l, n);
                    if self.policy(s + 1) == Policy::AfterPrev {
                        let (l, n) = self.dst(s + 1, c);
                        b.recv(ops[s as usize + 1], l, n);
                    }
                }
                if self.policy(s) == Policy::Window && c + self.w < chunks {
                    let (l, n) = self.dst(s, c + self.w);
                    b.recv(ops[s as usize], l, n);
                    if s == 0 {
                        // Paced with the peer's receive window (see the first sends above).
                        let (l, n) = self.src(0, c + self.w);
                        b.send(ops[0], l, n);
                    }
                }
            }
        }
    }
}

/// Shared state of one plan's generation.
struct Gen {
    p: PlanParams,
    n: u64,
    r: u64,
    elt: u64,
    ce: u64,
    w: u64,
    scratch: u64,
    b: Builder,
}

fn ceil_div(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

impl Gen {
    /// Chunk `c` of a run of `len` elements starting at element `start`: (byte offset, bytes).
    fn chunk(&self, start: u64, len: u64, c: u64) -> (u64, u64) {
        let from = (c * self.ce).min(len);
        (
            (start + from) * self.elt,
            (len - from).min(self.ce) * self.elt,
        )
    }

    fn ring(&mut self, kind: RingKind) {
        let (n, count) = (self.n, self.p.count);
        let max_seg = match kind {
            RingKind::AllReduce => ceil_div(count, n),
            _ => count,
        };
        let chunks = ceil_div(max_seg, self.ce).max(1);
        let steps = match kind {
            RingKind::AllReduce => 2 * (n - 1),
            _ => n - 1,
        };
        let w = self.w.min(chunks);
        let ring = Ring {
            kind,
            n,
            r: self.r,
            count,
            ce: self.ce,
            elt: self.elt,
            chunks,
            steps,
            w,
            w2: (w + 2).min(chunks),
            slot: self.ce.min(max_seg).max(1) * self.elt,
        };
        self.scratch = ring.scratch_bytes();
        let own_copy = (kind == RingKind::AllGather && !self.p.in_place).then(|| {
            (
                Loc::new(Buf::Output, self.r * count * self.elt),
                Loc::new(Buf::Input, 0),
                count * self.elt,
            )
        });
        ring.emit(&mut self.b, own_copy);
    }

    fn broadcast_chain(&mut self) {
        let (n, r, root) = (self.n, self.r, u64::from(self.p.root));
        let count = self.p.count;
        let chunks = ceil_div(count, self.ce);
        let pos = (r + n - root) % n;
        let (next, prev) = (((r + 1) % n) as u32, ((r + n - 1) % n) as u32);
        if pos == 0 {
            let op = self.b.op(Some(next), None, 0);
            for c in 0..chunks {
                let (off, bytes) = self.chunk(0, count, c);
                self.b.send(op, Loc::new(Buf::Input, off), bytes);
            }
            self.b.copy(
                Loc::new(Buf::Output, 0),
                Loc::new(Buf::Input, 0),
                count * self.elt,
            );
        } else if pos == n - 1 {
            let op = self.b.op(None, Some(prev), 0);
            for c in 0..chunks {
                let (off, bytes) = self.chunk(0, count, c);
                self.b.recv(op, Loc::new(Buf::Output, off), bytes);
            }
        } else {
            let op = self.b.op(Some(next), Some(prev), 0);
            for c in 0..chunks {
                let (off, bytes) = self.chunk(0, count, c);
                self.b.recv(op, Loc::new(Buf::Output, off), bytes);
            }
            for c in 0..chunks {
                let (off, bytes) = self.chunk(0, count, c);
                self.b.send(op, Loc::new(Buf::Output, off), bytes);
            }
        }
    }

    /// One op per peer distance `k = 1..n`: sends to `r + k`, receives from `r − k`, tag `k`.
    fn peer_ops(&mut self) -> alloc::vec::Vec<u32> {
        let (n, r) = (self.n, self.r);
        (1..n)
            .map(|k| {
                self.b.op(
                    Some(((r + k) % n) as u32),
                    Some(((r + n - k) % n) as u32),
                    k as u32,
                )
            })
            .collect()
    }

    /// Direct all-reduce (`block == None`: every rank's whole vector) or reduce-scatter
    /// (`block == Some(m)`: block `p` of the input goes to rank `p`): every peer's data into
    /// scratch slots, folded in rank order.
    fn direct_reduce(&mut self, scatter: bool) {
        let (n, r, count, elt) = (self.n, self.r, self.p.count, self.elt);
        let ops = self.peer_ops();
        let chunks = ceil_div(count, self.ce);
        let w = self.w.min(chunks);
        let slot = self.ce.min(count) * elt;
        let stage_own = self.p.in_place && r >= 2;
        self.scratch = (n - 1 + u64::from(stage_own)) * w * slot;
        let rslot = |k: u64, c: u64| Loc::new(Buf::Scratch, ((k - 1) * w + c % w) * slot);
        let selfslot = |c: u64| Loc::new(Buf::Scratch, ((n - 1) * w + c % w) * slot);
        // Input block sent to rank `dest` (all-reduce: the whole vector).
        let in_block = |dest: u64| if scatter { dest * count } else { 0 };
        // Sends are paced with the peers' receive windows, as in the ring: the first `w`
        // chunks now, chunk `c + w` right after the receives of chunk `c + w` below
        // (docs/design.md §5, "Sends never run ahead of the peer's receives").
        let send_chunk = |g: &mut Self, c: u64| {
            for (k, &op) in (1..n).zip(&ops) {
                let (off, bytes) = g.chunk(in_block((r + k) % n), count, c);
                g.b.send(op, Loc::new(Buf::Input, off), bytes);
            }
        };
        for c in 0..w {
            send_chunk(self, c);
        }
        for c in 0..w {
            for (k, &op) in (1..n).zip(&ops) {
                let (_, bytes) = self.chunk(0, count, c);
                self.b.recv(op, rslot(k, c), bytes);
            }
        }
        for c in 0..chunks {
            let (off, bytes) = self.chunk(0, count, c);
            let elems = bytes / elt;
            let mut own = Loc::new(Buf::Input, in_block(r) * elt + off);
            if stage_own {
                self.b.copy(selfslot(c), own, bytes);
                own = selfslot(c);
            }
            let v = |p: u64| {
                if p == r {
                    own
                } else {
                    rslot((r + n - p) % n, c)
                }
            };
            let out = Loc::new(Buf::Output, off);
            self.b.reduce(out, v(0), v(1), elems, elt);
            for p in 2..n {
                self.b.reduce(out, out, v(p), elems, elt);
            }
            if c + w < chunks {
                for (k, &op) in (1..n).zip(&ops) {
                    let (_, bytes) = self.chunk(0, count, c + w);
                    self.b.recv(op, rslot(k, c + w), bytes);
                }
                send_chunk(self, c + w);
            }
        }
    }

    fn direct_all_gather(&mut self) {
        let (n, r, m, elt) = (self.n, self.r, self.p.count, self.elt);
        let ops = self.peer_ops();
        let chunks = ceil_div(m, self.ce);
        for c in 0..chunks {
            let (off, bytes) = self.chunk(0, m, c);
            for &op in &ops {
                self.b.send(op, Loc::new(Buf::Input, off), bytes);
            }
        }
        for (k, &op) in (1..n).zip(&ops) {
            let from = (r + n - k) % n;
            for c in 0..chunks {
                let (off, bytes) = self.chunk(from * m, m, c);
                self.b.recv(op, Loc::new(Buf::Output, off), bytes);
            }
        }
        self.b.copy(
            Loc::new(Buf::Output, r * m * elt),
            Loc::new(Buf::Input, 0),
            m * elt,
        );
    }

    fn direct_broadcast(&mut self) {
        let (n, r, root, count) = (self.n, self.r, u64::from(self.p.root), self.p.count);
        let chunks = ceil_div(count, self.ce);
        if r == root {
            let ops: alloc::vec::Vec<u32> = (1..n)
                .map(|k| self.b.op(Some(((root + k) % n) as u32), None, k as u32))
                .collect();
            for c in 0..chunks {
                let (off, bytes) = self.chunk(0, count, c);
                for &op in &ops {
                    self.b.send(op, Loc::new(Buf::Input, off), bytes);
                }
            }
            self.b.copy(
                Loc::new(Buf::Output, 0),
                Loc::new(Buf::Input, 0),
                count * self.elt,
            );
        } else {
            let op = self
                .b
                .op(None, Some(root as u32), ((r + n - root) % n) as u32);
            for c in 0..chunks {
                let (off, bytes) = self.chunk(0, count, c);
                self.b.recv(op, Loc::new(Buf::Output, off), bytes);
            }
        }
    }

    fn send_recv(&mut self) {
        let (n, r, count, elt) = (self.n, self.r, self.p.count, self.elt);
        let chunks = ceil_div(count, self.ce);
        let op = self.b.op(
            Some(((r + 1) % n) as u32),
            Some(((r + n - 1) % n) as u32),
            0,
        );
        let mut src = Buf::Input;
        if self.p.in_place {
            // The receive lands where the send reads: stage the send through scratch.
            self.scratch = count * elt;
            self.b.copy(
                Loc::new(Buf::Scratch, 0),
                Loc::new(Buf::Input, 0),
                count * elt,
            );
            src = Buf::Scratch;
        }
        for c in 0..chunks {
            let (off, bytes) = self.chunk(0, count, c);
            self.b.send(op, Loc::new(src, off), bytes);
        }
        for c in 0..chunks {
            let (off, bytes) = self.chunk(0, count, c);
            self.b.recv(op, Loc::new(Buf::Output, off), bytes);
        }
    }

    fn all_to_all(&mut self) {
        let (n, r, m, elt) = (self.n, self.r, self.p.count, self.elt);
        let chunks = ceil_div(m, self.ce);
        let ops = self.peer_ops();
        let mut src = Buf::Input;
        if self.p.in_place {
            self.scratch = n * m * elt;
            self.b.copy(
                Loc::new(Buf::Scratch, 0),
                Loc::new(Buf::Input, 0),
                n * m * elt,
            );
            src = Buf::Scratch;
        }
        for (k, &op) in (1..n).zip(&ops) {
            let to = (r + k) % n;
            for c in 0..chunks {
                let (off, bytes) = self.chunk(to * m, m, c);
                self.b.send(op, Loc::new(src, off), bytes);
            }
        }
        for (k, &op) in (1..n).zip(&ops) {
            let from = (r + n - k) % n;
            for c in 0..chunks {
                let (off, bytes) = self.chunk(from * m, m, c);
                self.b.recv(op, Loc::new(Buf::Output, off), bytes);
            }
        }
        self.b.copy(
            Loc::new(Buf::Output, r * m * elt),
            Loc::new(Buf::Input, r * m * elt),
            m * elt,
        );
    }
}

/// Builds the plan (parameters already range-checked by [`super::plan`]); `ib` / `ob` are
/// the input and output sizes in bytes.
pub(super) fn build(p: PlanParams, ib: u64, ob: u64) -> Result<RankPlan, PlanError> {
    let algorithm = p.resolved_algorithm();
    if !algorithm.supports(p.collective) {
        return Err(PlanError::Unsupported);
    }
    let params = PlanParams { algorithm, ..p };
    let elt = p.dtype.size() as u64;
    let ce = p.chunk_elems();
    // Every op side has at most ceil(count / ce) entries: refuse early rather than build a
    // giant plan that the entry limit would reject anyway.
    if ceil_div(p.count, ce) > u64::from(proxy_core::base::desc::MAX_ENTRIES_PER_OP) {
        return Err(PlanError::TooManyEntries);
    }
    let (in_off, out_off) = if p.in_place {
        let (i, o) = p.collective.in_place_offsets(p.count, p.rank);
        (i * elt, o * elt)
    } else {
        (0, 0)
    };
    let mut g = Gen {
        p: params,
        n: u64::from(p.nranks),
        r: u64::from(p.rank),
        elt,
        ce,
        w: u64::from(p.pipeline_depth),
        scratch: 0,
        b: Builder::new(ce * elt, p.in_place, in_off, out_off),
    };
    if p.count > 0 {
        if g.n == 1 {
            g.b.copy(Loc::new(Buf::Output, 0), Loc::new(Buf::Input, 0), ob);
        } else {
            match (p.collective, algorithm) {
                (Collective::AllReduce, Algorithm::Ring) => g.ring(RingKind::AllReduce),
                (Collective::AllReduce, Algorithm::RecursiveDoubling) => g.rd_all_reduce(),
                (Collective::AllReduce, Algorithm::Rabenseifner) => g.halving(true),
                (Collective::AllReduce, Algorithm::Hierarchical) => g.hierarchical_all_reduce(),
                (Collective::ReduceScatter, Algorithm::RecursiveHalving) => g.halving(false),
                (Collective::AllGather, Algorithm::RecursiveDoubling) => g.rd_all_gather(),
                (Collective::AllGather, Algorithm::Bruck) => g.bruck_all_gather(),
                (Collective::AllToAll, Algorithm::Bruck) => g.bruck_all_to_all(),
                (Collective::Broadcast, Algorithm::Binomial) => g.binomial_broadcast(),
                (Collective::Broadcast, Algorithm::ScatterAllgather) => {
                    g.scatter_allgather_broadcast()
                }
                (Collective::ReduceScatter, Algorithm::Ring) => g.ring(RingKind::ReduceScatter),
                (Collective::AllGather, Algorithm::Ring) => g.ring(RingKind::AllGather),
                (Collective::Broadcast, Algorithm::Ring) => g.broadcast_chain(),
                (Collective::AllReduce, _) => g.direct_reduce(false),
                (Collective::ReduceScatter, _) => g.direct_reduce(true),
                (Collective::AllGather, _) => g.direct_all_gather(),
                (Collective::Broadcast, _) => g.direct_broadcast(),
                (Collective::SendRecv, _) => g.send_recv(),
                (Collective::AllToAll, _) => g.all_to_all(),
            }
        }
    }
    let built = g.b.finish();
    Ok(RankPlan {
        params,
        layout: Layout {
            input_bytes: ib,
            output_bytes: ob,
            scratch_bytes: g.scratch,
            in_place: p.in_place,
            input_offset: in_off,
            output_offset: out_off,
        },
        ops: built.ops,
        src: built.src,
        dst: built.dst,
        program: built.program,
        recv_free: alloc::vec::Vec::new(),
    })
}
