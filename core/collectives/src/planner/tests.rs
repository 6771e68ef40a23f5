//! The planner's schedule checked by a pure in-memory simulation (no threads): every rank's
//! device program runs against a model of the proxy (handshake, in-order posting with at most
//! 128 outstanding requests per op side, in-order completion counting) and of the transport
//! (entry `i` of a send meets entry `i` of the partner receive, exact sizes, the copy at match
//! time). In [`SendCompletion::InPostOrder`] mode a send is reported complete only once it and
//! every send its rank posted before it (to any peer, on any op) have met their receives: the
//! shm provider's behaviour (its response queue is read in order and stops at the first busy
//! entry), under which a device program that waits on a send completion while earlier sends
//! of its rank still wait for receives that the peers post later deadlocks. An independent
//! race detector checks every device access and every post against the
//! transfers in flight, by real addresses (so in-place aliasing is seen as it is), and the
//! outputs are compared bit-exactly with the expected results.

extern crate std;

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use super::data::{count_wrong, fill_input, POISON};
use super::kernels::reduce_raw;
use super::{
    plan, plan_blocks, Addresses, Algorithm, Collective, DataType, Instr, PlanParams, RankPlan,
    RedOp, Side,
};

const MAX_OUTSTANDING: u32 = 128;

#[derive(Clone, Debug, Default)]
struct SideSim {
    armed: bool,
    handshaken: bool,
    /// Entries the program handed out (`Post`).
    authorized: u32,
    /// The most entries a `Wait` needs posted (the early receive credits hold back the rest).
    need: u32,
    /// Entries posted to the proxy (the host index).
    dev_posted: u32,
    xport_posted: u32,
    done: Vec<bool>,
    prefix: u32,
    observed: u32,
}

struct RankSim {
    /// The rank this lane (one stream of a rank, or the whole rank) belongs to.
    rank: u32,
    /// The block running.
    plan: RankPlan,
    /// The blocks after it, in schedule order.
    rest: VecDeque<RankPlan>,
    /// Backing stores (u64 for alignment): [shared] or [input, output], then scratch.
    _mem: Vec<Vec<u64>>,
    addrs: Addresses,
    out_ptr: *mut u8,
    pc: usize,
    sides: Vec<[SideSim; 2]>,
    /// A host index rose since the world last looked (progress without an instruction).
    raised: bool,
}

fn alloc_bytes(bytes: u64) -> Vec<u64> {
    vec![u64::from_ne_bytes([POISON; 8]); (bytes as usize).div_ceil(8) + 1]
}

impl RankSim {
    fn new(params: &PlanParams) -> Self {
        let plan = plan(params).unwrap_or_else(|e| panic!("plan {params:?}: {e}"));
        let l = plan.layout;
        let mut mem = Vec::new();
        let (input, output);
        if l.in_place {
            let mut shared = alloc_bytes(l.shared_bytes());
            let base = shared.as_mut_ptr() as u64;
            input = base + l.input_offset;
            output = base + l.output_offset;
            mem.push(shared);
        } else {
            let mut i = alloc_bytes(l.input_bytes);
            let mut o = alloc_bytes(l.output_bytes);
            input = i.as_mut_ptr() as u64;
            output = o.as_mut_ptr() as u64;
            mem.push(i);
            mem.push(o);
        }
        let mut s = alloc_bytes(l.scratch_bytes);
        let scratch = s.as_mut_ptr() as u64;
        mem.push(s);
        // Host words are not needed by the simulation (the protocol is modelled directly).
        let addrs = Addresses {
            input,
            output,
            scratch,
            words: 0x1000,
            word_stride: 4,
        };
        // SAFETY: `input` points at `input_bytes` bytes of a live allocation in `mem`.
        let inb = unsafe {
            core::slice::from_raw_parts_mut(input as usize as *mut u8, l.input_bytes as usize)
        };
        fill_input(&plan.params, plan.params.rank, inb);
        let sides = plan
            .ops
            .iter()
            .map(|o| {
                [Side::Send, Side::Recv].map(|s| SideSim {
                    done: vec![false; o.entries(s) as usize],
                    ..SideSim::default()
                })
            })
            .collect();
        Self {
            rank: plan.params.rank,
            plan,
            rest: VecDeque::new(),
            _mem: mem,
            addrs,
            out_ptr: output as usize as *mut u8,
            pc: 0,
            sides,
            raised: false,
        }
    }

    /// One stream of `rank`: its blocks in order, over buffers at `addrs` (owned elsewhere).
    fn lane(rank: u32, mut plans: VecDeque<RankPlan>, addrs: Addresses) -> Self {
        let plan = plans.pop_front().expect("a block");
        let mut l = Self {
            rank,
            plan,
            rest: plans,
            _mem: Vec::new(),
            addrs,
            out_ptr: addrs.output as usize as *mut u8,
            pc: 0,
            sides: Vec::new(),
            raised: false,
        };
        l.reset_sides();
        l
    }

    fn reset_sides(&mut self) {
        self.sides = self
            .plan
            .ops
            .iter()
            .map(|o| {
                [Side::Send, Side::Recv].map(|s| SideSim {
                    done: vec![false; o.entries(s) as usize],
                    ..SideSim::default()
                })
            })
            .collect();
    }

    fn finished(&self) -> bool {
        self.pc == self.plan.program.len() && self.rest.is_empty()
    }

    /// Completions the device sees: counted in order, only for entries it posted.
    fn visible(&self, op: u32, side: Side) -> u32 {
        let s = &self.sides[op as usize][side as usize];
        s.prefix.min(s.dev_posted)
    }

    /// Raises the host index as the device does (interpreter: `Exec::flush`): to what the
    /// program handed out, held back by the early receive credits and the wrap.
    fn flush(&mut self, op: u32, side: Side) {
        let nec = self.plan.params.nec;
        let credits = self.plan.ops[op as usize].ending_recv_credits;
        let vis = self.visible(op, side);
        let s = &mut self.sides[op as usize][side as usize];
        let a = s.authorized;
        let mut target = a;
        if side == Side::Recv && credits > 0 {
            target = a.saturating_sub(credits).max(s.need).min(a);
        }
        if nec.idx_wrap > 0 {
            target = target.min(vis + nec.idx_wrap - 1);
        }
        if target > s.dev_posted {
            s.dev_posted = target;
            self.raised = true;
        }
    }

    fn flush_all(&mut self) {
        for k in 0..self.sides.len() as u32 {
            for side in [Side::Send, Side::Recv] {
                self.flush(k, side);
            }
        }
    }

    /// Transfers in flight: (side, start, end) of entries posted by the device and not yet
    /// waited for.
    fn in_flight(&self) -> Vec<(Side, u64, u64)> {
        let mut v = Vec::new();
        for (k, s) in self.sides.iter().enumerate() {
            for side in [Side::Send, Side::Recv] {
                let st = &s[side as usize];
                let entries = self.plan.entries(k as u32, side);
                for e in &entries[st.observed as usize..st.authorized as usize] {
                    if e.bytes > 0 {
                        let a = self.addrs.of(e.loc);
                        v.push((side, a, a + e.bytes));
                    }
                }
            }
        }
        v
    }

    fn check_access(&self, what: &str, start: u64, len: u64, write: bool) {
        if len == 0 {
            return;
        }
        for (side, a, b) in self.in_flight() {
            let conflict = a < start + len && start < b && (write || side == Side::Recv);
            assert!(
                !conflict,
                "rank {} pc {}: race: {what} {:#x}+{len} ({}) overlaps an in-flight {side:?} \
                 {a:#x}..{b:#x}\n{}",
                self.plan.params.rank,
                self.pc,
                start,
                if write { "write" } else { "read" },
                self.describe()
            );
        }
    }

    fn describe(&self) -> String {
        format!(
            "params {:?}\nprogram[{}..]: {:?}",
            self.plan.params,
            self.pc,
            &self.plan.program[self.pc..self.plan.program.len().min(self.pc + 4)]
        )
    }

    /// Runs instructions until blocked or `budget` executed; returns how many ran.
    fn run(&mut self, budget: usize) -> usize {
        let mut ran = 0;
        let elt = self.plan.params.dtype.size() as u64;
        while ran < budget && !self.finished() {
            if self.pc == self.plan.program.len() {
                // The block ran: the stream's next block.
                self.plan = self.rest.pop_front().expect("a next block");
                self.pc = 0;
                self.reset_sides();
            }
            let ins = self.plan.program[self.pc];
            match ins {
                Instr::Arm { op, side } => {
                    let s = &mut self.sides[op as usize][side as usize];
                    assert!(!s.armed, "armed twice");
                    s.armed = true;
                }
                Instr::WaitHandshake { op, side } => {
                    if !self.sides[op as usize][side as usize].handshaken {
                        self.flush_all();
                        return ran;
                    }
                }
                Instr::Post { op, side, upto } => {
                    let from = self.sides[op as usize][side as usize].authorized;
                    assert!(upto > from, "post does not advance");
                    assert!(
                        self.sides[op as usize][side as usize].handshaken,
                        "post before handshake"
                    );
                    let entries = self.plan.entries(op, side);
                    for e in &entries[from as usize..upto as usize] {
                        self.check_access(
                            &format!("post {side:?} op {op}"),
                            self.addrs.of(e.loc),
                            e.bytes,
                            side == Side::Recv,
                        );
                    }
                    self.sides[op as usize][side as usize].authorized = upto;
                    self.flush(op, side);
                }
                Instr::Wait { op, side, upto } => {
                    let vis = self.visible(op, side);
                    let s = &mut self.sides[op as usize][side as usize];
                    assert!(upto <= s.authorized, "wait for entries never posted");
                    if vis < upto {
                        s.need = s.need.max(upto.min(vis + 1));
                        self.flush_all();
                        return ran;
                    }
                    s.observed = s.observed.max(upto);
                }
                Instr::Reduce { dst, a, b, elems } => {
                    let bytes = elems * elt;
                    let (d, x, y) = (self.addrs.of(dst), self.addrs.of(a), self.addrs.of(b));
                    self.check_access("reduce read a", x, bytes, false);
                    self.check_access("reduce read b", y, bytes, false);
                    self.check_access("reduce write", d, bytes, true);
                    let p = self.plan.params;
                    // SAFETY: the addresses lie in this rank's live buffers (the planner's
                    // layout), no transfer touches them (checked above), single thread.
                    unsafe {
                        reduce_raw(
                            p.dtype,
                            p.op,
                            d as usize as *mut u8,
                            x as usize as *const u8,
                            y as usize as *const u8,
                            elems as usize,
                        )
                    };
                }
                Instr::Copy { dst, src, bytes } => {
                    let (d, s) = (self.addrs.of(dst), self.addrs.of(src));
                    self.check_access("copy read", s, bytes, false);
                    self.check_access("copy write", d, bytes, true);
                    // SAFETY: as for Reduce; the planner never copies between overlapping,
                    // unequal ranges.
                    unsafe {
                        core::ptr::copy(
                            s as usize as *const u8,
                            d as usize as *mut u8,
                            bytes as usize,
                        )
                    };
                }
            }
            self.pc += 1;
            ran += 1;
        }
        ran
    }
}

/// (src rank, dst rank, op tag, entry index) → the side that arrived first: (lane, op,
/// is_send).
type Pending = BTreeMap<(u32, u32, u32, u32), (u32, u32, bool)>;

/// When the simulated transport reports a send complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendCompletion {
    /// As soon as it meets its receive (any order: tcp;ofi_rxm, the in-memory transport).
    OnMatch,
    /// Only after every send the rank posted before it has met its receive (shm).
    InPostOrder,
}

struct World {
    ranks: Vec<RankSim>,
    pending: Pending,
    mode: SendCompletion,
    /// Per rank, in post order: the sends not yet reported complete, as (lane, op, entry).
    send_order: Vec<VecDeque<(u32, u32, u32)>>,
    /// Sends that met their receive but wait for an earlier send (`InPostOrder`): (lane, op, entry).
    matched: BTreeSet<(u32, u32, u32)>,
    /// Per rank: the whole collective's parameters, the output and its length.
    outputs: Vec<(PlanParams, *const u8, usize)>,
    /// Buffers of the ranks whose lanes do not own them.
    _mems: Vec<Vec<Vec<u64>>>,
}

impl World {
    fn new(p: PlanParams, mode: SendCompletion) -> Self {
        let ranks: Vec<RankSim> = (0..p.nranks)
            .map(|r| RankSim::new(&p.for_rank(r)))
            .collect();
        let outputs = ranks
            .iter()
            .map(|rk| {
                let len = rk.plan.layout.output_bytes as usize;
                (rk.plan.params, rk.out_ptr as *const u8, len)
            })
            .collect();
        Self {
            ranks,
            pending: BTreeMap::new(),
            mode,
            send_order: (0..p.nranks).map(|_| VecDeque::new()).collect(),
            matched: BTreeSet::new(),
            outputs,
            _mems: Vec::new(),
        }
    }

    /// Every rank's collective split over streams and blocks ([`plan_blocks`]): one lane per
    /// (rank, stream) running its blocks in order, `loops` times over.
    fn new_blocks(p: PlanParams, mode: SendCompletion, loops: u32) -> Self {
        let mut ranks = Vec::new();
        let mut outputs = Vec::new();
        let mut mems = Vec::new();
        for r in 0..p.nranks {
            let bp = plan_blocks(&p.for_rank(r)).unwrap_or_else(|e| panic!("plan {p:?}: {e}"));
            let l = bp.layout;
            let mut mem = Vec::new();
            let (input, output);
            if l.in_place {
                let mut shared = alloc_bytes(l.shared_bytes());
                let base = shared.as_mut_ptr() as u64;
                (input, output) = (base + l.input_offset, base + l.output_offset);
                mem.push(shared);
            } else {
                let (mut i, mut o) = (alloc_bytes(l.input_bytes), alloc_bytes(l.output_bytes));
                (input, output) = (i.as_mut_ptr() as u64, o.as_mut_ptr() as u64);
                mem.push(i);
                mem.push(o);
            }
            let mut sc = alloc_bytes(l.scratch_bytes);
            let scratch = sc.as_mut_ptr() as u64;
            mem.push(sc);
            let addrs = Addresses {
                input,
                output,
                scratch,
                words: 0x1000,
                word_stride: 4,
            };
            // SAFETY: `input` points at `input_bytes` bytes of a live allocation in `mem`.
            let inb = unsafe {
                core::slice::from_raw_parts_mut(input as usize as *mut u8, l.input_bytes as usize)
            };
            fill_input(&bp.params, r, inb);
            for s in bp.streams() {
                let mut plans = VecDeque::new();
                for id in bp.schedule(loops) {
                    if let Some(b) = bp.blocks.iter().find(|b| b.stream == s && b.block == id) {
                        plans.push_back(b.plan.clone());
                    }
                }
                ranks.push(RankSim::lane(r, plans, addrs));
            }
            outputs.push((
                bp.params,
                output as usize as *const u8,
                l.output_bytes as usize,
            ));
            mems.push(mem);
        }
        Self {
            ranks,
            pending: BTreeMap::new(),
            mode,
            send_order: (0..p.nranks).map(|_| VecDeque::new()).collect(),
            matched: BTreeSet::new(),
            outputs,
            _mems: mems,
        }
    }

    /// `InPostOrder`: reports every matched send at the head of each rank's post order.
    fn complete_sends_in_order(&mut self) -> bool {
        let mut moved = false;
        for r in 0..self.send_order.len() {
            while let Some(&(l, k, i)) = self.send_order[r].front() {
                if !self.matched.remove(&(l, k, i)) {
                    break;
                }
                self.send_order[r].pop_front();
                self.complete(l, k, Side::Send, i);
                moved = true;
            }
        }
        moved
    }

    fn complete(&mut self, rank: u32, op: u32, side: Side, idx: u32) {
        let s = &mut self.ranks[rank as usize].sides[op as usize][side as usize];
        s.done[idx as usize] = true;
        while (s.prefix as usize) < s.done.len() && s.done[s.prefix as usize] {
            s.prefix += 1;
        }
    }

    /// One proxy + transport tick over every rank; returns whether anything moved.
    fn proxy_tick(&mut self) -> bool {
        let mut moved = false;
        for r in 0..self.ranks.len() {
            for k in 0..self.ranks[r].sides.len() {
                for side in [Side::Send, Side::Recv] {
                    let (op_info, posting) = {
                        let rk = &mut self.ranks[r];
                        let op_info = rk.plan.ops[k];
                        let s = &mut rk.sides[k][side as usize];
                        if s.armed && !s.handshaken {
                            s.handshaken = true;
                            moved = true;
                        }
                        // Early receives run `ending_recv_credits` ahead of the host index;
                        // sends keep at most `initial_send_credits` outstanding.
                        let n = op_info.entries(side);
                        let (ahead, max) = match side {
                            Side::Recv => (op_info.ending_recv_credits, MAX_OUTSTANDING),
                            Side::Send => match rk.plan.params.nec.credits {
                                0 => (0, MAX_OUTSTANDING),
                                c => (0, c),
                            },
                        };
                        let avail = s.dev_posted.saturating_add(ahead).min(n);
                        let mut posting = Vec::new();
                        while s.xport_posted < avail && s.xport_posted - s.prefix < max {
                            posting.push(s.xport_posted);
                            s.xport_posted += 1;
                        }
                        (op_info, posting)
                    };
                    for idx in posting {
                        moved = true;
                        let me = self.ranks[r].rank;
                        let lane = r as u32;
                        let key = match side {
                            Side::Send => (me, op_info.send_peer as u32, op_info.tag, idx),
                            Side::Recv => (op_info.recv_peer as u32, me, op_info.tag, idx),
                        };
                        let send = side == Side::Send;
                        if send && self.mode == SendCompletion::InPostOrder {
                            self.send_order[me as usize].push_back((lane, k as u32, idx));
                        }
                        match self.pending.remove(&key) {
                            None => {
                                self.pending.insert(key, (lane, k as u32, send));
                            }
                            Some((pr, pk, psend)) => {
                                assert_ne!(psend, send, "two {side:?}s met on {key:?}");
                                let (sr, sk, si, rr, rk_, ri) = if send {
                                    (lane, k as u32, idx, pr, pk, idx)
                                } else {
                                    (pr, pk, idx, lane, k as u32, idx)
                                };
                                let se = self.ranks[sr as usize].plan.entries(sk, Side::Send)
                                    [si as usize];
                                let re = self.ranks[rr as usize].plan.entries(rk_, Side::Recv)
                                    [ri as usize];
                                assert_eq!(
                                    se.bytes, re.bytes,
                                    "size mismatch on {key:?}: send {se:?} recv {re:?}"
                                );
                                let from = self.ranks[sr as usize].addrs.of(se.loc);
                                let to = self.ranks[rr as usize].addrs.of(re.loc);
                                // SAFETY: both ranges lie in live rank buffers; the race
                                // detector guarantees the device does not touch them while
                                // the transfer is in flight; different ranks never share
                                // memory.
                                unsafe {
                                    core::ptr::copy(
                                        from as usize as *const u8,
                                        to as usize as *mut u8,
                                        se.bytes as usize,
                                    )
                                };
                                match self.mode {
                                    SendCompletion::OnMatch => {
                                        self.complete(sr, sk, Side::Send, si);
                                    }
                                    SendCompletion::InPostOrder => {
                                        self.matched.insert((sr, sk, si));
                                    }
                                }
                                self.complete(rr, rk_, Side::Recv, ri);
                            }
                        }
                    }
                }
            }
        }
        moved |= self.complete_sends_in_order();
        moved
    }

    /// Runs to completion with a deterministic, seed-varied interleaving.
    fn run(&mut self, seed: u64) {
        let mut x = seed | 1;
        let n = self.ranks.len();
        for round in 0..10_000_000u64 {
            let mut moved = self.proxy_tick();
            for j in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let budget = if x.is_multiple_of(3) {
                    usize::MAX
                } else {
                    1 + (x % 5) as usize
                };
                let r = (j + round as usize) % n;
                moved |= self.ranks[r].run(budget) > 0;
                moved |= core::mem::take(&mut self.ranks[r].raised);
            }
            if self.ranks.iter().all(RankSim::finished) {
                assert!(
                    self.pending.is_empty(),
                    "unmatched transfers: {:?}",
                    self.pending
                );
                return;
            }
            if !moved {
                let states: Vec<String> = self.ranks.iter().map(RankSim::describe).collect();
                panic!(
                    "deadlock after {round} rounds ({:?}):\n{}",
                    self.mode,
                    states.join("\n")
                );
            }
        }
        panic!("no completion within the round limit");
    }

    fn wrong(&self) -> u64 {
        for rk in &self.ranks {
            for (k, s) in rk.sides.iter().enumerate() {
                for side in [Side::Send, Side::Recv] {
                    let n = rk.plan.ops[k].entries(side);
                    assert_eq!(s[side as usize].observed, n, "not every entry waited for");
                }
            }
        }
        self.outputs
            .iter()
            .enumerate()
            .map(|(r, &(p, ptr, len))| {
                // SAFETY: the output range lies in the rank's live buffer; no thread touches it.
                let out = unsafe { core::slice::from_raw_parts(ptr, len) };
                count_wrong(&p, r as u32, out)
            })
            .sum()
    }
}

/// Runs `p` on every rank under both send-completion models; asserts no deadlock, no race and
/// bit-exact outputs. Under Miri (an interpreter, looking for undefined behaviour, not for the
/// schedule) only the stricter in-order model runs.
fn check(p: PlanParams, seed: u64) {
    let modes: &[SendCompletion] = if cfg!(miri) {
        &[SendCompletion::InPostOrder]
    } else {
        &[SendCompletion::OnMatch, SendCompletion::InPostOrder]
    };
    for &mode in modes {
        let mut w = World::new(p, mode);
        w.run(seed);
        let wrong = w.wrong();
        assert_eq!(wrong, 0, "{wrong} wrong elements for {p:?} ({mode:?})");
    }
}

fn params(c: Collective, n: u32, count: u64, d: DataType, algo: Algorithm) -> PlanParams {
    let mut p = PlanParams::new(c, count, d, 0, n);
    p.algorithm = algo;
    p
}

const ALGOS: [Algorithm; 3] = [Algorithm::Ring, Algorithm::Direct, Algorithm::Auto];

#[test]
fn every_collective_small_counts_both_layouts() {
    // 1 element; counts that divide by neither nranks nor the chunk; a small chunk so that
    // segments have several chunks (and uneven, empty ones).
    // Under Miri (slow interpreter): one shape per collective and algorithm.
    let (counts, ranks, types, algos): (&[u64], &[u32], &[DataType], &[Algorithm]) = if cfg!(miri) {
        (&[7], &[3], &[DataType::F32], &ALGOS[..2])
    } else {
        (
            &[1, 2, 7, 1001],
            &[1, 2, 3, 4],
            &[DataType::F32, DataType::I32],
            &ALGOS,
        )
    };
    let mut seed = 1;
    for c in Collective::ALL {
        for &n in ranks {
            for &count in counts {
                for &d in types {
                    for &algo in algos {
                        for in_place in [false, true] {
                            let mut p = params(c, n, count, d, algo);
                            p.chunk_bytes = 24; // 6 elements
                            p.pipeline_depth = 2;
                            p.in_place = in_place;
                            p.root = (n - 1).min(1);
                            seed += 1;
                            check(p, seed);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn every_collective_one_mib() {
    if cfg!(miri) {
        return;
    }
    for c in Collective::ALL {
        for n in 1..=4u32 {
            for (d, algo, in_place) in [
                (DataType::F32, Algorithm::Ring, false),
                (DataType::I32, Algorithm::Ring, true),
                (DataType::F32, Algorithm::Direct, true),
            ] {
                let count = (1 << 20) / 4;
                // All-gather / reduce-scatter / all-to-all: count is per rank.
                let count = match c {
                    Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
                        count / u64::from(n)
                    }
                    _ => count,
                };
                let mut p = params(c, n, count, d, algo);
                p.chunk_bytes = 64 << 10;
                p.in_place = in_place;
                check(p, u64::from(n) * 7 + 3);
            }
        }
    }
}

/// Issue 13: `proxy-perf all-reduce --provider shm --ranks 3 -b 32M` hung. Its shape, scaled
/// down: 22 chunks per segment (32 MiB / 3 ranks / 512 KiB chunks) against a window of 4, on
/// a transport that completes sends in post order (shm). Before step 0's sends were paced
/// with the peer's receive window, all 22 went out at the start, and the device's wait on a
/// later send (all-reduce: before receiving into a range it sent in the reduce-scatter phase;
/// reduce-scatter: before reusing a staging slot) queued behind them: every rank deadlocked.
#[test]
fn ring_with_sends_completed_in_post_order_does_not_deadlock() {
    let chunk_elems = 16u64;
    // Under Miri (an interpreter, in CI's budget) one shape with 8 chunks against the window of
    // 4: still more chunks than the window, the case that deadlocked.
    let miri = cfg!(miri);
    let shapes: &[(Collective, u32)] = if miri {
        &[(Collective::AllReduce, 3)]
    } else {
        &[
            (Collective::AllReduce, 3),
            (Collective::AllReduce, 4),
            (Collective::ReduceScatter, 3),
            (Collective::ReduceScatter, 4),
        ]
    };
    let chunks: u64 = if miri { 8 } else { 22 };
    let in_places: &[bool] = if miri { &[false] } else { &[false, true] };
    let seeds: &[u64] = if miri { &[3] } else { &[3, 17, 101] };
    for &(c, n) in shapes {
        // All-reduce: count over all segments; reduce-scatter: count per rank block.
        let count = match c {
            Collective::AllReduce => u64::from(n) * chunks * chunk_elems - 5,
            _ => chunks * chunk_elems - 5,
        };
        for &in_place in in_places {
            let mut p = params(c, n, count, DataType::F32, Algorithm::Ring);
            p.chunk_bytes = chunk_elems * 4;
            p.in_place = in_place;
            for &seed in seeds {
                let mut w = World::new(p, SendCompletion::InPostOrder);
                w.run(seed);
                let wrong = w.wrong();
                assert_eq!(wrong, 0, "{wrong} wrong elements for {p:?}");
            }
        }
    }
}

#[test]
fn every_type_and_op_with_three_ranks() {
    let count = if cfg!(miri) { 5 } else { 777 };
    let (types, colls): (&[DataType], &[Collective]) = if cfg!(miri) {
        (&[DataType::F16], &[Collective::AllReduce])
    } else {
        (
            &DataType::ALL,
            &[Collective::AllReduce, Collective::ReduceScatter],
        )
    };
    for &d in types {
        for op in RedOp::ALL {
            for &c in colls {
                for algo in [Algorithm::Ring, Algorithm::Direct] {
                    let mut p = params(c, 3, count, d, algo);
                    p.op = op;
                    p.chunk_bytes = 40;
                    check(p, 11);
                }
            }
        }
    }
}

#[test]
fn non_reducing_collectives_every_type() {
    let count = if cfg!(miri) { 3 } else { 301 };
    let types: &[DataType] = if cfg!(miri) {
        &[DataType::Bf16]
    } else {
        &DataType::ALL
    };
    for &d in types {
        for c in [
            Collective::AllGather,
            Collective::Broadcast,
            Collective::SendRecv,
            Collective::AllToAll,
        ] {
            let mut p = params(c, 3, count, d, Algorithm::Auto);
            p.chunk_bytes = 64;
            p.root = 2;
            check(p, 5);
        }
    }
}

#[test]
fn auto_picks_direct_for_small_and_ring_for_large() {
    let small = plan(&params(
        Collective::AllReduce,
        4,
        2,
        DataType::F32,
        Algorithm::Auto,
    ))
    .unwrap();
    assert_eq!(small.params.algorithm, Algorithm::Direct);
    let large = plan(&params(
        Collective::AllReduce,
        4,
        1 << 20,
        DataType::F32,
        Algorithm::Auto,
    ))
    .unwrap();
    assert_eq!(large.params.algorithm, Algorithm::Ring);
    // Direct: one network step, every peer at once: n − 1 ops, one entry per side.
    assert_eq!(small.ops.len(), 3);
    assert!(small
        .ops
        .iter()
        .all(|o| o.tx_entry_cnt == 1 && o.rx_entry_cnt == 1));
    // Ring all-reduce: one op per step, 2(n − 1) steps.
    assert_eq!(large.ops.len(), 6);
}

#[test]
fn one_rank_is_a_local_copy_and_zero_count_is_empty() {
    let p = plan(&params(
        Collective::AllReduce,
        1,
        10,
        DataType::F32,
        Algorithm::Ring,
    ))
    .unwrap();
    assert!(p.ops.is_empty());
    assert_eq!(p.program.len(), 1);
    let p = plan(&params(
        Collective::AllGather,
        3,
        0,
        DataType::F32,
        Algorithm::Ring,
    ))
    .unwrap();
    assert!(p.ops.is_empty() && p.program.is_empty());
}

#[test]
fn bad_parameters_are_refused() {
    use super::PlanError;
    let mut p = params(Collective::AllReduce, 2, 10, DataType::F32, Algorithm::Ring);
    p.rank = 2;
    assert_eq!(plan(&p), Err(PlanError::BadRank));
    let mut p = params(Collective::Broadcast, 2, 10, DataType::F32, Algorithm::Ring);
    p.root = 5;
    assert_eq!(plan(&p), Err(PlanError::BadRank));
    let mut p = params(Collective::AllReduce, 2, 10, DataType::F32, Algorithm::Ring);
    p.pipeline_depth = 0;
    assert_eq!(plan(&p), Err(PlanError::BadDepth));
    let mut p = params(
        Collective::AllReduce,
        2,
        1 << 20,
        DataType::U8,
        Algorithm::Direct,
    );
    p.chunk_bytes = 1;
    assert_eq!(plan(&p), Err(PlanError::TooManyEntries));
}

/// The FIFOs a plan produces pass the progress half's own validation (`Comm::start`).
#[test]
fn fifos_pass_comm_start_validation() {
    use alloc::boxed::Box;
    use alloc::sync::Arc;
    use proxy_core::base::time::NoClock;
    use proxy_core::progress::comm::{Comm, CommConfig};
    use proxy_core::progress::device::DirectHostWords;
    use proxy_core::progress::mem_transport::MemFabric;

    let algos: &[Algorithm] = if cfg!(miri) {
        &[Algorithm::Ring]
    } else {
        &[Algorithm::Ring, Algorithm::Direct]
    };
    for c in Collective::ALL {
        for &algo in algos {
            let n = 3;
            let fabric = MemFabric::new(n).unwrap();
            for r in 0..n {
                let mut p = params(c, n, 100, DataType::F32, algo);
                p.chunk_bytes = 64;
                p.rank = r;
                let sim = RankSim::new(&p);
                let words = vec![0u32; sim.plan.host_words() as usize + 1];
                let addrs = Addresses {
                    words: words.as_ptr() as u64,
                    ..sim.addrs
                };
                let f = sim.plan.fifos(&addrs);
                // SAFETY: the comm never runs an op (no progress call); start only validates
                // and files.
                let dev = unsafe { DirectHostWords::new() };
                let mut comm = Comm::new(
                    CommConfig::new(r, n, 1),
                    Box::new(fabric.endpoint(r).unwrap()),
                    Arc::new(dev),
                    Arc::new(NoClock),
                )
                .unwrap();
                // SAFETY: never dereferenced: no progress call is made.
                unsafe { comm.trust_all_addresses() };
                comm.start(0, 7, &f.ops, &f.src, &f.dst)
                    .unwrap_or_else(|e| panic!("{c:?} {algo:?} rank {r}: {e}"));
            }
        }
    }
}

/// Streams, blocks and the `nec.h` options over every collective, rank count, algorithm and
/// layout, under both send-completion models: the device holding entries back for the wrap and
/// the early receive credits, the proxy posting receives ahead and sends within its credits,
/// never deadlocks, races or gets a byte wrong. The options cycle through their combinations
/// from cell to cell. (Early send completion needs a transport that copies: the engine's tests
/// in `proxy-emulator` run it.)
#[test]
fn streams_blocks_and_options_never_deadlock() {
    if cfg!(miri) {
        return;
    }
    let mut cell = 0u32;
    for c in Collective::ALL {
        for n in 2..=4u32 {
            for algo in [Algorithm::Ring, Algorithm::Direct] {
                for in_place in [false, true] {
                    let mut p = params(c, n, 0, DataType::F32, algo);
                    p.chunk_bytes = 16; // 4 elements
                    p.pipeline_depth = 2 + cell % 3;
                    // 2 parts of 7 chunks each at the finest split: more entries than the wrap.
                    p.count = 4 * 7 * 12 - 3;
                    p.in_place = in_place;
                    p.root = n - 1;
                    p.streams = [1, 2, 4][cell as usize % 3];
                    p.blocks = [1, 3][(cell / 3) as usize % 2];
                    p.nec.early_recv = [0, 4, 1][(cell / 2) as usize % 3];
                    p.nec.idx_wrap = [0, 4, 2][(cell / 5) as usize % 3];
                    p.nec.credits = [1, 128, 2][(cell / 7) as usize % 3];
                    let loops = if in_place { 1 } else { 2 };
                    for mode in [SendCompletion::OnMatch, SendCompletion::InPostOrder] {
                        let mut w = World::new_blocks(p, mode, loops);
                        w.run(u64::from(cell) * 31 + 7);
                        let wrong = w.wrong();
                        assert_eq!(wrong, 0, "{wrong} wrong elements for {p:?} ({mode:?})");
                    }
                    cell += 1;
                }
            }
        }
    }
}

mod hier;
mod log_algos;
mod tuning;
