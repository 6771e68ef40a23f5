//! The program builder: algorithms post entries and do local work in a pipelined order; the
//! builder records the FIFO entries, coalesces host-index raises, and places the minimum waits
//! (a hazard tracker over byte ranges, aware of in-place aliasing).
//!
//! Rules (a transfer is *in flight* from its post until the device has waited for its
//! completion; completions of one op side are counted in order):
//! * posting a send (a read of its range) waits for in-flight receives into the range;
//! * posting a receive (a write) waits for in-flight sends from and receives into the range;
//! * a local reduce or copy waits for in-flight receives into what it reads, and for in-flight
//!   sends and receives on what it writes.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use super::{Buf, Instr, Loc, PlannedEntry, PlannedOp, Side};
use proxy_core::base::desc::{EXEC_COMPLETE, NET_OP_COMPLETE, NET_TRANSFER, NO_PEER};

/// A canonical byte range: in-place input and output map into one buffer.
#[derive(Clone, Copy, Debug)]
struct Range {
    buf: u8,
    start: u64,
    end: u64,
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    op: u32,
    side: Side,
    idx: u32,
    start: u64,
    end: u64,
}

struct OpB {
    send_peer: i32,
    recv_peer: i32,
    tag: u32,
    /// Entries per side, in posting order.
    entries: [Vec<(Loc, u64)>; 2],
    /// Entries per side the program has waited for.
    waited: [u32; 2],
}

pub(super) struct Builder {
    in_place: bool,
    in_off: u64,
    out_off: u64,
    bucket: u64,
    ops: Vec<OpB>,
    program: Vec<Instr>,
    /// (canonical buffer, bucket) → transfers that may be in flight there.
    index: BTreeMap<(u8, u64), Vec<InFlight>>,
    /// Locations in the input are taken as the same offsets in the output (an algorithm run
    /// on data already in the output: the phases of a composed algorithm).
    input_is_output: bool,
    /// Bytes added to every input and output location (a piece of the vector planned on its
    /// own, [`Builder::set_base`]).
    base: u64,
    /// The group the ops being added belong to ([`Builder::set_group`]).
    group: Group,
}

/// How [`Builder::op`] places an op planned on a group of ranks numbered `0..m` inside it:
/// `peers[i]` is rank `i`'s number in the whole collective, `tag_offset` is added to the tag;
/// with `reuse`, an op whose peers and tag equal an existing one's is that op (its entries
/// continue the existing op's, in posting order: a phase planned again on the next piece of
/// the vector talks over the same ops).
#[derive(Default)]
pub(super) struct Group {
    pub peers: Option<Vec<u32>>,
    pub tag_offset: u32,
    pub reuse: bool,
}

/// What the builder hands back.
pub(super) struct Built {
    pub ops: Vec<PlannedOp>,
    pub src: Vec<PlannedEntry>,
    pub dst: Vec<PlannedEntry>,
    pub program: Vec<Instr>,
}

impl Builder {
    /// A builder; `bucket` is the hazard index granularity in bytes (the chunk size),
    /// `in_place` with the input's and output's offsets in the shared buffer.
    pub fn new(bucket: u64, in_place: bool, in_off: u64, out_off: u64) -> Self {
        Self {
            in_place,
            in_off,
            out_off,
            bucket: bucket.max(64),
            ops: Vec::new(),
            program: Vec::new(),
            index: BTreeMap::new(),
            input_is_output: false,
            base: 0,
            group: Group::default(),
        }
    }

    /// From now on, input and output locations are `base` bytes further into their buffers
    /// (scratch locations are not moved).
    pub fn set_base(&mut self, base: u64) {
        self.base = base;
    }

    /// From now on, ops are added in `group` ([`Group`]); `Group::default()` is the whole
    /// collective, every op new.
    pub fn set_group(&mut self, group: Group) {
        self.group = group;
    }

    /// From now on, locations in the input mean the same offsets in the output (`true`), or
    /// the input again (`false`).
    pub fn set_input_is_output(&mut self, on: bool) {
        self.input_is_output = on;
    }

    fn map(&self, loc: Loc) -> Loc {
        let buf = if self.input_is_output && loc.buf == Buf::Input {
            Buf::Output
        } else {
            loc.buf
        };
        match buf {
            Buf::Scratch => loc,
            _ => Loc::new(buf, loc.offset + self.base),
        }
    }

    /// Adds an op in the current [`Group`]; `None` peer = that side unused. Returns its index
    /// (an existing op's when the group reuses ops and one has these peers and tag).
    pub fn op(&mut self, send_peer: Option<u32>, recv_peer: Option<u32>, tag: u32) -> u32 {
        let g = &self.group;
        let place = |p: Option<u32>| match (p, &g.peers) {
            (None, _) => NO_PEER,
            (Some(p), None) => p as i32,
            (Some(p), Some(peers)) => peers[p as usize] as i32,
        };
        let (send_peer, recv_peer, tag) = (place(send_peer), place(recv_peer), tag + g.tag_offset);
        if g.reuse {
            if let Some(i) = self
                .ops
                .iter()
                .position(|o| (o.send_peer, o.recv_peer, o.tag) == (send_peer, recv_peer, tag))
            {
                return i as u32;
            }
        }
        self.ops.push(OpB {
            send_peer,
            recv_peer,
            tag,
            entries: [Vec::new(), Vec::new()],
            waited: [0, 0],
        });
        self.ops.len() as u32 - 1
    }

    fn canon(&self, loc: Loc, bytes: u64) -> Range {
        let (buf, start) = match (loc.buf, self.in_place) {
            (Buf::Input, true) => (0, self.in_off + loc.offset),
            (Buf::Output, true) => (0, self.out_off + loc.offset),
            (Buf::Input, false) => (1, loc.offset),
            (Buf::Output, false) => (2, loc.offset),
            (Buf::Scratch, _) => (3, loc.offset),
        };
        Range {
            buf,
            start,
            end: start + bytes,
        }
    }

    /// Waits for every in-flight transfer overlapping `r`: receives always, sends too when
    /// `writes`.
    fn guard(&mut self, r: Range, writes: bool) {
        if r.start == r.end {
            return;
        }
        let mut need: Vec<(u32, Side, u32)> = Vec::new();
        let (b0, b1) = (r.start / self.bucket, (r.end - 1) / self.bucket);
        for b in b0..=b1 {
            let Some(list) = self.index.get_mut(&(r.buf, b)) else {
                continue;
            };
            let ops = &self.ops;
            list.retain(|f| f.idx >= ops[f.op as usize].waited[f.side as usize]);
            for f in list.iter() {
                let overlaps = f.start < r.end && r.start < f.end;
                if overlaps && (writes || f.side == Side::Recv) {
                    need.push((f.op, f.side, f.idx + 1));
                }
            }
        }
        for (op, side, upto) in need {
            self.wait(op, side, upto);
        }
    }

    /// Waits until `upto` entries of `op`'s `side` are complete (no-op if already waited).
    pub fn wait(&mut self, op: u32, side: Side, upto: u32) {
        let w = &mut self.ops[op as usize].waited[side as usize];
        if upto > *w {
            *w = upto;
            self.program.push(Instr::Wait { op, side, upto });
        }
    }

    fn post(&mut self, op: u32, side: Side, loc: Loc, bytes: u64) {
        let loc = self.map(loc);
        let r = self.canon(loc, bytes);
        self.guard(r, side == Side::Recv);
        let entries = &mut self.ops[op as usize].entries[side as usize];
        entries.push((loc, bytes));
        let idx = entries.len() as u32 - 1;
        if bytes > 0 {
            let f = InFlight {
                op,
                side,
                idx,
                start: r.start,
                end: r.end,
            };
            for b in r.start / self.bucket..=(r.end - 1) / self.bucket {
                self.index.entry((r.buf, b)).or_default().push(f);
            }
        }
        if let Some(Instr::Post {
            op: o,
            side: s,
            upto,
        }) = self.program.last_mut()
        {
            if *o == op && *s == side {
                *upto = idx + 1;
                return;
            }
        }
        self.program.push(Instr::Post {
            op,
            side,
            upto: idx + 1,
        });
    }

    /// Posts a send entry of `bytes` at `loc` on `op`.
    pub fn send(&mut self, op: u32, loc: Loc, bytes: u64) {
        self.post(op, Side::Send, loc, bytes);
    }

    /// Posts a receive entry of `bytes` into `loc` on `op`.
    pub fn recv(&mut self, op: u32, loc: Loc, bytes: u64) {
        self.post(op, Side::Recv, loc, bytes);
    }

    /// `dst = a op b` over `elems` elements of `elt` bytes.
    pub fn reduce(&mut self, dst: Loc, a: Loc, b: Loc, elems: u64, elt: u64) {
        if elems == 0 {
            return;
        }
        let (dst, a, b) = (self.map(dst), self.map(a), self.map(b));
        let bytes = elems * elt;
        let (ra, rb, rd) = (
            self.canon(a, bytes),
            self.canon(b, bytes),
            self.canon(dst, bytes),
        );
        self.guard(ra, false);
        self.guard(rb, false);
        self.guard(rd, true);
        self.program.push(Instr::Reduce { dst, a, b, elems });
    }

    /// `dst = src` over `bytes` bytes (nothing when both are the same range).
    pub fn copy(&mut self, dst: Loc, src: Loc, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let (dst, src) = (self.map(dst), self.map(src));
        let (rs, rd) = (self.canon(src, bytes), self.canon(dst, bytes));
        if rs.buf == rd.buf && rs.start == rd.start {
            return;
        }
        self.guard(rs, false);
        self.guard(rd, true);
        self.program.push(Instr::Copy { dst, src, bytes });
    }

    /// Waits for everything, prepends the handshakes, and lays out the FIFOs with their
    /// marks (the last entry of each op side `NET_OP_COMPLETE`; of the last op with entries
    /// on that side, `EXEC_COMPLETE`).
    pub fn finish(mut self) -> Built {
        for k in 0..self.ops.len() as u32 {
            for side in [Side::Send, Side::Recv] {
                let n = self.ops[k as usize].entries[side as usize].len() as u32;
                self.wait(k, side, n);
            }
        }
        let mut program = Vec::new();
        for (k, o) in self.ops.iter().enumerate() {
            for side in [Side::Send, Side::Recv] {
                if !o.entries[side as usize].is_empty() {
                    program.push(Instr::Arm { op: k as u32, side });
                }
            }
        }
        for (k, o) in self.ops.iter().enumerate() {
            for side in [Side::Send, Side::Recv] {
                if !o.entries[side as usize].is_empty() {
                    program.push(Instr::WaitHandshake { op: k as u32, side });
                }
            }
        }
        program.append(&mut self.program);

        let mut ops = Vec::new();
        let (mut src, mut dst): (Vec<PlannedEntry>, Vec<PlannedEntry>) = (Vec::new(), Vec::new());
        let last_with = |side: Side| {
            self.ops
                .iter()
                .rposition(|o| !o.entries[side as usize].is_empty())
        };
        let (last_tx, last_rx) = (last_with(Side::Send), last_with(Side::Recv));
        for (k, o) in self.ops.iter().enumerate() {
            let (tx, rx) = (&o.entries[0], &o.entries[1]);
            ops.push(PlannedOp {
                send_peer: if tx.is_empty() { NO_PEER } else { o.send_peer },
                recv_peer: if rx.is_empty() { NO_PEER } else { o.recv_peer },
                tag: o.tag,
                tx_entry_cnt: tx.len() as u32,
                rx_entry_cnt: rx.len() as u32,
                src_base: src.len() as u32,
                dst_base: dst.len() as u32,
                ending_recv_credits: 0,
            });
            for (fifo, list, last) in [(&mut src, tx, last_tx), (&mut dst, rx, last_rx)] {
                for (i, &(loc, bytes)) in list.iter().enumerate() {
                    let mark = if i + 1 < list.len() {
                        NET_TRANSFER
                    } else if last == Some(k) {
                        EXEC_COMPLETE
                    } else {
                        NET_OP_COMPLETE
                    };
                    fifo.push(PlannedEntry {
                        op: k as u32,
                        loc,
                        bytes,
                        mark,
                    });
                }
            }
        }
        Built {
            ops,
            src,
            dst,
            program,
        }
    }
}
