//! `start` with arbitrary descriptors (issue 13, item 10; the proptest twin of the `cargo fuzz`
//! target `fuzz/fuzz_targets/start.rs`, which drives the same calls through the C ABI).
//!
//! A comm of rank 0 of 2 over the in-memory transport checks addresses against registered
//! memory ([`Comm::register_memory`]): one arena the test owns is registered, between two guard
//! zones that are not. Each case files one arbitrary `start` (stream, block id, op infos with
//! their six host-word addresses, source and destination entries: counts, marks, peers, sizes,
//! data type sizes, flags and reserved fields all drawn, addresses inside the arena, just past
//! it in the guard zone, NULL, or wild), then a few `progress` rounds and a `stop` of the
//! stream. The property:
//!
//! * a call that names a range outside the registered arena (a host word of an op with entries
//!   on that side, or a buffer of non-zero size) is rejected, and a rejected call files
//!   nothing (the stream then reports idle and done, and the op count does not move);
//! * whatever was accepted, `progress` (with the device played between rounds: host indices
//!   ready, then every entry posted once the handshake is seen, so bytes move) never panics,
//!   `stop` succeeds and leaves the stream idle and done;
//! * nothing outside the arena is written (the guard zones keep their pattern), and under Miri
//!   nothing outside the test's allocations is touched at all.
//!
//! Cases: `PROPTEST_CASES` (default 2048 natively, about 12% of them accepted calls; the Miri
//! step sets 8).

#![cfg(not(loom))]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use proxy_core::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr, EXEC_COMPLETE, NET_TRANSFER};
use proxy_core::base::sync::PlainArc;
use proxy_core::base::time::NoClock;
use proxy_core::progress::comm::{Comm, CommConfig};
use proxy_core::progress::device::DirectHostWords;
use proxy_core::progress::mem_transport::MemFabric;

/// Registered bytes (a multiple of 8; under Miri just enough for the regression test's lent
/// entries above the 4096-byte eager limit).
const ARENA: usize = if cfg!(miri) {
    8 * 1024 + 512
} else {
    16 * 1024
};
/// Unregistered bytes on each side of the arena.
const GUARD: usize = 256;
/// The guard zones' pattern.
const CANARY: u8 = 0xA5;

/// Where an address points.
#[derive(Clone, Copy, Debug)]
enum Addr {
    /// The arena's start plus this offset (wrapped into the arena).
    In(u32),
    /// This many bytes past the arena's end (in the trailing guard zone).
    PastEnd(u16),
    /// This many bytes before the arena's start (in the leading guard zone).
    Before(u8),
    /// NULL.
    Null,
    /// An address the test does not own (never mapped by it; must never be touched).
    Wild(u64),
}

fn addr() -> impl Strategy<Value = Addr> {
    prop_oneof![
        40 => any::<u32>().prop_map(Addr::In),
        1 => any::<u16>().prop_map(Addr::PastEnd),
        1 => (1u8..=255).prop_map(Addr::Before),
        1 => Just(Addr::Null),
        1 => prop_oneof![Just(0x1000u64), Just(u64::MAX - 3), any::<u64>()].prop_map(Addr::Wild),
    ]
}

#[derive(Clone, Debug)]
struct OpIn {
    peers: (i32, i32),
    tag: u32,
    counts: (u32, u32),
    loop_size: u32,
    credits: (u32, u32),
    flags: (u8, u8),
    reserved: [u8; 2],
    data_type_sz: u32,
    words: [Addr; 6],
}

fn op_in() -> impl Strategy<Value = OpIn> {
    (
        (-1i32..3, -1i32..3),
        prop_oneof![0u32..8, Just(1 << 14), any::<u32>()],
        (0u32..4, 0u32..4),
        prop_oneof![Just(0u32), 0u32..4],
        (prop_oneof![Just(0u32), 0u32..130], 0u32..4),
        (
            prop_oneof![Just(0u8), 0u8..3],
            prop_oneof![Just(0u8), 0u8..3],
        ),
        prop_oneof![8 => Just([0u8; 2]), 1 => any::<[u8; 2]>()],
        prop_oneof![Just(1u32), Just(2), Just(4), Just(8), 0u32..9],
        proptest::array::uniform6(addr()),
    )
        .prop_map(
            |(peers, tag, counts, loop_size, credits, flags, reserved, data_type_sz, words)| OpIn {
                peers,
                tag,
                counts,
                loop_size,
                credits,
                flags,
                reserved,
                data_type_sz,
                words,
            },
        )
}

#[derive(Clone, Debug)]
struct EntryIn {
    op: u32,
    mark: u32,
    addr: Addr,
    size: u64,
    peer: i32,
    reserved: u32,
}

fn entry_in() -> impl Strategy<Value = EntryIn> {
    (
        0u32..4,
        0u32..5,
        addr(),
        prop_oneof![
            4 => 0u64..=(ARENA as u64),
            1 => Just(0u64),
            1 => any::<u64>()
        ],
        -2i32..3,
        prop_oneof![8 => Just(0u32), 1 => any::<u32>()],
    )
        .prop_map(|(op, mark, addr, size, peer, reserved)| EntryIn {
            op,
            mark,
            addr,
            size,
            peer,
            reserved,
        })
}

#[derive(Clone, Debug)]
struct Input {
    stream: u32,
    bb: u32,
    ops: Vec<OpIn>,
    src: Vec<EntryIn>,
    dst: Vec<EntryIn>,
    rounds: u8,
    /// Shape the call (most cases): fields that validation checks one by one are brought
    /// into range and the FIFOs are built from the ops' entry counts with the right marks, so
    /// that the addresses (still drawn freely) decide; else every field stays as drawn.
    shape: bool,
}

fn input() -> impl Strategy<Value = Input> {
    (
        prop_oneof![8 => 0u32..4, 1 => Just(4u32), 1 => Just(u32::MAX)],
        prop_oneof![8 => 0u32..3, 1 => Just(u32::MAX)],
        proptest::collection::vec(op_in(), 0..4),
        proptest::collection::vec(entry_in(), 0..7),
        proptest::collection::vec(entry_in(), 0..7),
        0u8..12,
        prop_oneof![3 => Just(true), 1 => Just(false)],
    )
        .prop_map(|(stream, bb, ops, src, dst, rounds, shape)| Input {
            stream,
            bb,
            ops,
            src,
            dst,
            rounds,
            shape,
        })
}

/// The test's memory: guard, arena, guard, in one allocation of `u64`s (8-aligned).
struct Memory {
    words: Vec<u64>,
}

impl Memory {
    fn new() -> Self {
        let mut m = Self {
            words: vec![0u64; (2 * GUARD + ARENA) / 8],
        };
        let canary = u64::from_ne_bytes([CANARY; 8]);
        let g = GUARD / 8;
        let n = m.words.len();
        m.words[..g].fill(canary);
        m.words[n - g..].fill(canary);
        m
    }

    fn base(&self) -> u64 {
        self.words.as_ptr() as usize as u64 + GUARD as u64
    }

    fn resolve(&self, a: Addr) -> u64 {
        self.resolve_aligned(a, 1)
    }

    /// As [`Memory::resolve`], an offset into the arena rounded down to a multiple of `align`.
    fn resolve_aligned(&self, a: Addr, align: u64) -> u64 {
        match a {
            Addr::In(off) => self.base() + u64::from(off) % ARENA as u64 / align * align,
            Addr::PastEnd(k) => self.base() + ARENA as u64 + u64::from(k),
            Addr::Before(k) => self.base() - u64::from(k),
            Addr::Null => 0,
            Addr::Wild(w) => w,
        }
    }

    /// `[addr, addr + len)` lies in the arena.
    fn inside(&self, addr: u64, len: u64) -> bool {
        let b = self.base();
        addr >= b && addr.checked_add(len).is_some_and(|e| e <= b + ARENA as u64)
    }

    fn guards_intact(&self) -> bool {
        let canary = u64::from_ne_bytes([CANARY; 8]);
        let g = GUARD / 8;
        let n = self.words.len();
        self.words[..g]
            .iter()
            .chain(&self.words[n - g..])
            .all(|&w| w == canary)
    }
}

fn rank_comm(fabric: &Arc<MemFabric>, rank: u32, mem: &Memory) -> Comm {
    // SAFETY: the device callbacks access only host words the comm accepted at `start`, which
    // lie in the registered arena; the arena outlives the comm (`run` drops the comm first).
    let dev = unsafe { DirectHostWords::new() };
    let mut c = Comm::new(
        CommConfig::new(rank, 2, 9),
        Box::new(fabric.endpoint(rank).unwrap()),
        PlainArc::new(dev),
        PlainArc::new(NoClock),
    )
    .unwrap();
    // SAFETY: the arena stays allocated and is touched by nothing else until the comm is gone;
    // nothing reads it non-atomically while the comm runs (the guards are read after).
    unsafe { c.register_memory(mem.base(), ARENA as u64) }.unwrap();
    c
}

/// Brings `inp`'s fields into range and rebuilds its FIFOs from the ops' entry counts (marks
/// right, entries taken in turn from the drawn ones); the addresses stay as drawn. Host words
/// inside the arena are 4-aligned, buffer sizes are multiples of the op's data type size and,
/// for buffers inside the arena, mostly fit.
fn shape(inp: &Input) -> (Vec<OpIn>, Vec<EntryIn>, Vec<EntryIn>) {
    const DTS: [u32; 4] = [1, 2, 4, 8];
    let mut ops = inp.ops.clone();
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for (k, o) in ops.iter_mut().enumerate() {
        o.data_type_sz = DTS[o.data_type_sz as usize % 4];
        o.tag %= 1 << 14;
        o.reserved = [0; 2];
        o.flags = (o.flags.0 % 2, o.flags.1 % 2);
        o.credits.0 %= 129;
        o.peers = (o.peers.0.rem_euclid(2), o.peers.1.rem_euclid(2));
        for (side, count, pool) in [
            (&mut src, o.counts.0, &inp.src),
            (&mut dst, o.counts.1, &inp.dst),
        ] {
            for j in 0..count {
                let mut e = pool
                    .get((k + j as usize) % pool.len().max(1))
                    .cloned()
                    .unwrap_or(EntryIn {
                        op: 0,
                        mark: 0,
                        addr: Addr::In(0),
                        size: 0,
                        peer: -1,
                        reserved: 0,
                    });
                e.op = k as u32;
                e.mark = if j + 1 == count {
                    EXEC_COMPLETE
                } else {
                    NET_TRANSFER
                };
                e.reserved = 0;
                e.peer = e.peer.clamp(-1, 1);
                if let Addr::In(off) = e.addr {
                    let room = ARENA as u64 - u64::from(off) % ARENA as u64;
                    e.size %= room + 1;
                }
                e.size = e.size / u64::from(o.data_type_sz) * u64::from(o.data_type_sz);
                side.push(e);
            }
        }
    }
    (ops, src, dst)
}

/// One step of the device for every op of an accepted call: a side's host index reads
/// `0xFFFF_FFFF` (ready) until its handshake semaphore has been raised, then the side's entry
/// count (every entry posted), so that accepted calls move bytes. Words may alias each other
/// and the buffers (drawn freely): whatever the device writes stays in the arena.
fn play_device(ops: &[NetOpInfo]) {
    let word = |a: u64| {
        // SAFETY: only called for accepted calls, whose host words of the sides with entries
        // lie 4-aligned in the registered arena, alive for the whole case; every access to
        // them is atomic.
        unsafe { &*(a as usize as *const AtomicU32) }
    };
    for o in ops {
        for (count, idx, hs) in [
            (
                o.tx_entry_cnt,
                o.post_send_idx_addr,
                o.send_handshake_sem_addr,
            ),
            (
                o.rx_entry_cnt,
                o.post_recv_idx_addr,
                o.recv_handshake_sem_addr,
            ),
        ] {
            if count > 0 {
                let v = if word(hs).load(Ordering::Acquire) >= 1 {
                    count
                } else {
                    u32::MAX
                };
                word(idx).store(v, Ordering::Release);
            }
        }
    }
}

/// Runs one case against the property; `Ok(true)` when the call was accepted and some entry
/// completed (a complete semaphore was raised).
fn run(inp: &Input) -> Result<bool, TestCaseError> {
    let mem = Memory::new();
    let fabric = MemFabric::new(2).unwrap();
    let mut c = rank_comm(&fabric, 0, &mem);
    let mut peer = rank_comm(&fabric, 1, &mem);
    let (ops_in, src_in, dst_in) = if inp.shape {
        shape(inp)
    } else {
        (inp.ops.clone(), inp.src.clone(), inp.dst.clone())
    };
    let word = |a: Addr| mem.resolve_aligned(a, if inp.shape { 4 } else { 1 });
    let ops: Vec<NetOpInfo> = ops_in
        .iter()
        .map(|o| NetOpInfo {
            send_peer: o.peers.0,
            recv_peer: o.peers.1,
            tag: o.tag,
            tx_entry_cnt: o.counts.0,
            rx_entry_cnt: o.counts.1,
            net_idx_loop_size: o.loop_size,
            initial_send_credits: o.credits.0,
            ending_recv_credits: o.credits.1,
            early_send_completion: o.flags.0,
            early_recv_posting: o.flags.1,
            reserved: o.reserved,
            data_type_sz: o.data_type_sz,
            post_send_idx_addr: word(o.words[0]),
            post_recv_idx_addr: word(o.words[1]),
            send_handshake_sem_addr: word(o.words[2]),
            send_complete_sem_addr: word(o.words[3]),
            recv_handshake_sem_addr: word(o.words[4]),
            recv_complete_sem_addr: word(o.words[5]),
        })
        .collect();
    let src: Vec<NetSrcAddr> = src_in
        .iter()
        .map(|e| NetSrcAddr {
            net_op_idx: e.op,
            mark: e.mark,
            addr: mem.resolve(e.addr),
            size: e.size,
            dest_rank: e.peer,
            reserved: e.reserved,
        })
        .collect();
    let dst: Vec<NetDestAddr> = dst_in
        .iter()
        .map(|e| NetDestAddr {
            net_op_idx: e.op,
            mark: e.mark,
            addr: mem.resolve(e.addr),
            size: e.size,
            src_rank: e.peer,
            reserved: e.reserved,
        })
        .collect();
    // Does the call name memory outside the arena?
    let word_out = |a: u64| !mem.inside(a, 4);
    let outside = ops.iter().any(|o| {
        (o.tx_entry_cnt > 0
            && [
                o.post_send_idx_addr,
                o.send_handshake_sem_addr,
                o.send_complete_sem_addr,
            ]
            .into_iter()
            .any(word_out))
            || (o.rx_entry_cnt > 0
                && [
                    o.post_recv_idx_addr,
                    o.recv_handshake_sem_addr,
                    o.recv_complete_sem_addr,
                ]
                .into_iter()
                .any(word_out))
    }) || src
        .iter()
        .map(|e| (e.addr, e.size))
        .chain(dst.iter().map(|e| (e.addr, e.size)))
        .any(|(a, n)| n > 0 && !mem.inside(a, n));

    let count0 = c.last_op_count();
    let mut completed = false;
    let r = c.start(inp.stream, inp.bb, &ops, &src, &dst);
    if outside {
        prop_assert!(
            r.is_err(),
            "a call naming memory outside the arena was accepted"
        );
    }
    let stream = inp.stream.min(3);
    let bb = if inp.bb == u32::MAX { 0 } else { inp.bb };
    match r {
        Err(_) => {
            prop_assert_eq!(c.last_op_count(), count0, "a rejected call built ops");
            let (mut idle, mut done) = (true, true);
            prop_assert_eq!(
                c.progress(stream, bb)
                    .map(|t| t.and_into(&mut idle, &mut done)),
                Ok(())
            );
            prop_assert!(idle && done, "a rejected call filed something");
        }
        Ok(()) => {
            for _ in 0..inp.rounds {
                play_device(&ops);
                let (mut idle, mut done) = (true, true);
                // Any status: a bad combination of valid fields may fail the comm here.
                let _ = c
                    .progress(stream, inp.bb)
                    .map(|t| t.and_into(&mut idle, &mut done));
                let _ = peer
                    .progress(stream, inp.bb)
                    .map(|t| t.and_into(&mut idle, &mut done));
            }
            let sem = |a: u64| {
                // SAFETY: as in `play_device`: an accepted call's words are in the arena.
                unsafe { &*(a as usize as *const AtomicU32) }.load(Ordering::Acquire)
            };
            completed = ops.iter().any(|o| {
                (o.tx_entry_cnt > 0 && sem(o.send_complete_sem_addr) > 0)
                    || (o.rx_entry_cnt > 0 && sem(o.recv_complete_sem_addr) > 0)
            });
            prop_assert_eq!(c.stop(stream), Ok(()));
            prop_assert_eq!(peer.stop(stream), Ok(()));
            let (mut idle, mut done) = (true, true);
            if c.fatal_error().is_none() {
                prop_assert_eq!(
                    c.progress(stream, bb)
                        .map(|t| t.and_into(&mut idle, &mut done)),
                    Ok(())
                );
                prop_assert!(idle && done, "the stream is not empty after stop");
            }
        }
    }
    drop(c);
    drop(peer);
    prop_assert!(mem.guards_intact(), "memory outside the arena was written");
    Ok(completed)
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok());
    ProptestConfig {
        cases: cases.unwrap_or(if cfg!(miri) { 8 } else { 2048 }),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]
    #[test]
    fn start_with_arbitrary_descriptors_rejects_what_it_must_and_touches_nothing_else(
        inp in input()
    ) {
        let _completed = run(&inp)?;
    }
}

/// Regression (found by this file's device player): a send to this rank itself whose source
/// overlaps the receive's destination, both in registered memory, is a call `start` accepts;
/// the in-memory transport copied between them with `copy_nonoverlapping` (undefined
/// behaviour: the debug precondition check aborted the process). The entries are above the
/// eager limit, so the receiver copies straight out of the lent source.
#[test]
fn self_send_with_overlapping_buffers_is_sound() {
    let words = [
        Addr::In(8192 + 64),
        Addr::In(8192 + 128),
        Addr::In(8192 + 192),
        Addr::In(8192 + 256),
        Addr::In(8192 + 320),
        Addr::In(8192 + 384),
    ];
    let op = OpIn {
        peers: (0, 0),
        tag: 1,
        counts: (1, 1),
        loop_size: 0,
        credits: (0, 0),
        flags: (0, 0),
        reserved: [0; 2],
        data_type_sz: 1,
        words,
    };
    let n = if cfg!(miri) { 4100 } else { 6000 };
    let e = |off: u32| EntryIn {
        op: 0,
        mark: EXEC_COMPLETE,
        addr: Addr::In(off),
        size: n,
        peer: -1,
        reserved: 0,
    };
    let inp = Input {
        stream: 0,
        bb: 1,
        ops: vec![op],
        src: vec![e(0)],
        dst: vec![e(100)],
        rounds: 11,
        shape: false,
    };
    assert!(run(&inp).unwrap(), "the self-send completed");
}
