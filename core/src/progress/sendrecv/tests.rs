//! Send/recv proxy ops through the full `nec.h` protocol: two comms over the in-memory
//! transport in one process, each op driven by a small in-test device that writes `-1`, posts
//! entries by raising the host index and reads the semaphores (docs/design.md §5).

extern crate std;

use crate::base::sync::PlainArc;
use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use crate::base::desc::{
    NetDestAddr, NetOpInfo, NetSrcAddr, EXEC_COMPLETE, NET_OP_COMPLETE, NET_TRANSFER,
};
use crate::base::status::NrtStatus;
use crate::base::sync::{AtomicU32, Ordering};
use crate::base::time::NoClock;
use crate::progress::comm::{Comm, CommConfig};
use crate::progress::device::DirectHostWords;
use crate::progress::mem_transport::MemFabric;
use crate::progress::stats::{OpPeak, ProtocolStats, PROTOCOL_STATS_SIZE};

const POISON: u8 = 0xFF;

fn pattern(op: usize, entry: usize, exec: u32, i: usize) -> u8 {
    ((op * 31 + entry * 7 + exec as usize * 13 + i) % 251) as u8
}

/// One op pair: rank 0 sends `sizes` to rank 1 on `stream`.
#[derive(Clone, Debug)]
struct Spec {
    stream: u32,
    sizes: Vec<u64>,
    loop_size: u32,
    send_credits: u32,
    early_send: bool,
    early_recv: bool,
    recv_credits: u32,
    /// Entries the sending / receiving device posts per step at most.
    send_rate: u32,
    recv_rate: u32,
    /// Bytes the receive entries are shorter than the sends (0 = exact; > 0 = truncation).
    recv_shrink: u64,
}

impl Spec {
    fn new(stream: u32, sizes: Vec<u64>) -> Self {
        Self {
            stream,
            sizes,
            loop_size: 0,
            send_credits: 0,
            early_send: false,
            early_recv: false,
            recv_credits: 0,
            send_rate: u32::MAX,
            recv_rate: u32::MAX,
            recv_shrink: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Arm,
    WaitHandshake,
    Post,
    Finished,
}

/// The device side of one op: the host index and the two semaphores of one side.
struct DevOp {
    send: bool,
    spec: usize,
    idx: usize,
    hs: usize,
    cpl: usize,
    n: u32,
    loop_size: u32,
    rate: u32,
    posted: u32,
    exec: u32,
    phase: Phase,
    /// Highest semaphore count seen (must never exceed the entries posted).
    max_seen_cpl: u32,
    /// Send side: entries counted complete whose arrival at the peer was checked.
    checked: u32,
}

struct World {
    comms: [Comm; 2],
    /// Host words (host indices and semaphores) of both ranks. An `Arc`, not a `Box`: moving a
    /// `Box` re-asserts unique ownership (Stacked Borrows) and would invalidate the addresses the
    /// comms hold.
    words: PlainArc<[AtomicU32]>,
    /// Per spec: source buffers (rank 0) and destination buffers (rank 1), one per entry.
    src: Vec<Vec<Vec<u8>>>,
    dst: Vec<Vec<Vec<u8>>>,
    devs: Vec<DevOp>,
    specs: Vec<Spec>,
}

impl World {
    fn word_addr(&self, i: usize) -> u64 {
        &self.words[i] as *const AtomicU32 as usize as u64
    }

    fn load(&self, i: usize) -> u32 {
        self.words[i].load(Ordering::Acquire)
    }

    fn store(&self, i: usize, v: u32) {
        self.words[i].store(v, Ordering::Release)
    }

    fn new(specs: Vec<Spec>) -> Self {
        let fabric = MemFabric::new(2).unwrap();
        let mk = |rank: u32| {
            let t = fabric.endpoint(rank).unwrap();
            // SAFETY: every address the ops use is registered below and lives in `World`, which
            // outlives the comms (`comms` is the first field, so it is dropped first).
            let dev = unsafe { DirectHostWords::new() };
            Comm::new(
                CommConfig::new(rank, 2, 3),
                Box::new(t),
                PlainArc::new(dev),
                PlainArc::new(NoClock),
            )
            .unwrap()
        };
        let comms = [mk(0), mk(1)];
        let words: PlainArc<[AtomicU32]> =
            (0..specs.len() * 6).map(|_| AtomicU32::new(0)).collect();
        let mut src = Vec::new();
        let mut dst = Vec::new();
        let mut devs = Vec::new();
        for (k, s) in specs.iter().enumerate() {
            src.push(
                s.sizes
                    .iter()
                    .map(|&n| vec![0u8; n as usize])
                    .collect::<Vec<_>>(),
            );
            dst.push(
                s.sizes
                    .iter()
                    .map(|&n| vec![POISON; (n - s.recv_shrink) as usize])
                    .collect::<Vec<_>>(),
            );
            for send in [true, false] {
                let base = k * 6 + if send { 0 } else { 3 };
                devs.push(DevOp {
                    send,
                    spec: k,
                    idx: base,
                    hs: base + 1,
                    cpl: base + 2,
                    n: s.sizes.len() as u32,
                    loop_size: s.loop_size,
                    rate: if send { s.send_rate } else { s.recv_rate },
                    posted: 0,
                    exec: 0,
                    phase: Phase::Arm,
                    max_seen_cpl: 0,
                    checked: 0,
                });
            }
        }
        let mut w = World {
            comms,
            words,
            src,
            dst,
            devs,
            specs,
        };
        w.register_and_start();
        w
    }

    fn register_and_start(&mut self) {
        let wlen = (self.words.len() * 4) as u64;
        let wbase = self.word_addr(0);
        for rank in 0..2 {
            // SAFETY: the words live as long as the world; the comms are dropped before them.
            unsafe { self.comms[rank].register_memory(wbase, wlen).unwrap() };
        }
        for k in 0..self.specs.len() {
            for (e, b) in self.src[k].iter().enumerate() {
                if !b.is_empty() {
                    // SAFETY: as above; the vectors are never reallocated.
                    unsafe {
                        self.comms[0]
                            .register_memory(b.as_ptr() as usize as u64, b.len() as u64)
                            .unwrap()
                    };
                }
                let d = &self.dst[k][e];
                if !d.is_empty() {
                    // SAFETY: as above.
                    unsafe {
                        self.comms[1]
                            .register_memory(d.as_ptr() as usize as u64, d.len() as u64)
                            .unwrap()
                    };
                }
            }
        }
        // One start call per stream per rank, every spec of the stream one op info.
        for stream in 0..4u32 {
            let ks: Vec<usize> = (0..self.specs.len())
                .filter(|&k| self.specs[k].stream == stream)
                .collect();
            if ks.is_empty() {
                continue;
            }
            let mut send_ops = Vec::new();
            let mut recv_ops = Vec::new();
            let mut src_fifo = Vec::new();
            let mut dst_fifo = Vec::new();
            for (j, &k) in ks.iter().enumerate() {
                let s = &self.specs[k];
                let n = s.sizes.len() as u32;
                let base = NetOpInfo {
                    tag: k as u32,
                    net_idx_loop_size: s.loop_size,
                    data_type_sz: 1,
                    send_peer: -1,
                    recv_peer: -1,
                    ..NetOpInfo::default()
                };
                send_ops.push(NetOpInfo {
                    send_peer: 1,
                    tx_entry_cnt: n,
                    initial_send_credits: s.send_credits,
                    early_send_completion: u8::from(s.early_send),
                    post_send_idx_addr: self.word_addr(k * 6),
                    send_handshake_sem_addr: self.word_addr(k * 6 + 1),
                    send_complete_sem_addr: self.word_addr(k * 6 + 2),
                    ..base
                });
                recv_ops.push(NetOpInfo {
                    recv_peer: 0,
                    rx_entry_cnt: n,
                    early_recv_posting: u8::from(s.early_recv),
                    ending_recv_credits: s.recv_credits,
                    post_recv_idx_addr: self.word_addr(k * 6 + 3),
                    recv_handshake_sem_addr: self.word_addr(k * 6 + 4),
                    recv_complete_sem_addr: self.word_addr(k * 6 + 5),
                    ..base
                });
                let last_op = j + 1 == ks.len();
                for e in 0..n as usize {
                    let mark = match (e + 1 == n as usize, last_op) {
                        (false, _) => NET_TRANSFER,
                        (true, false) => NET_OP_COMPLETE,
                        (true, true) => EXEC_COMPLETE,
                    };
                    let size = s.sizes[e];
                    src_fifo.push(NetSrcAddr {
                        net_op_idx: j as u32,
                        mark,
                        addr: self.src[k][e].as_ptr() as usize as u64,
                        size,
                        dest_rank: -1,
                        reserved: 0,
                    });
                    dst_fifo.push(NetDestAddr {
                        net_op_idx: j as u32,
                        mark,
                        addr: self.dst[k][e].as_mut_ptr() as usize as u64,
                        size: size - s.recv_shrink,
                        src_rank: -1,
                        reserved: 0,
                    });
                }
            }
            // Interleave the FIFOs in reverse op order on one side to show grouping by op.
            self.comms[0]
                .start(stream, 1, &send_ops, &src_fifo, &[])
                .unwrap();
            self.comms[1]
                .start(stream, 1, &recv_ops, &[], &dst_fifo)
                .unwrap();
        }
    }

    /// One device step of op side `d`; the checks that a proxy never runs ahead of the device.
    fn device_step(&mut self, d: usize) {
        self.check_untouched(d);
        let dev = &self.devs[d];
        let (idx, hs, cpl, n, exec) = (dev.idx, dev.hs, dev.cpl, dev.n, dev.exec);
        match dev.phase {
            Phase::Arm => {
                if dev.send {
                    // The data of an entry is written just before the device posts it.
                } else {
                    for b in &mut self.dst[dev.spec] {
                        b.fill(POISON);
                    }
                }
                self.store(idx, 0xFFFF_FFFF);
                self.devs[d].phase = Phase::WaitHandshake;
            }
            Phase::WaitHandshake => {
                let h = self.load(hs);
                assert!(
                    h <= exec + 1,
                    "handshake semaphore {h} above executions {}",
                    exec + 1
                );
                if h == exec + 1 {
                    assert_eq!(
                        self.load(idx),
                        0,
                        "the proxy writes 0 before the handshake increment"
                    );
                    self.devs[d].phase = Phase::Post;
                }
            }
            Phase::Post => {
                let total = self.load(cpl);
                let done = total - exec * n;
                let dev = &mut self.devs[d];
                assert!(
                    done <= dev.posted,
                    "complete semaphore {done} above posted {}",
                    dev.posted
                );
                dev.max_seen_cpl = dev.max_seen_cpl.max(done);
                self.check_send_completions(d);
                let dev = &mut self.devs[d];
                if done == n {
                    dev.phase = Phase::Finished;
                    return;
                }
                // Never L or more entries posted and not completed.
                let window = if dev.loop_size == 0 {
                    u32::MAX
                } else {
                    dev.loop_size - 1
                };
                let (send, spec, rate, loop_size) = (dev.send, dev.spec, dev.rate, dev.loop_size);
                let mut k = 0;
                while self.devs[d].posted < n && self.devs[d].posted - done < window && k < rate {
                    let e = self.devs[d].posted as usize;
                    if send {
                        for (i, b) in self.src[spec][e].iter_mut().enumerate() {
                            *b = pattern(spec, e, exec, i);
                        }
                    }
                    let posted = e as u32 + 1;
                    self.devs[d].posted = posted;
                    k += 1;
                    self.store(
                        idx,
                        if loop_size == 0 {
                            posted
                        } else {
                            posted % loop_size
                        },
                    );
                }
            }
            Phase::Finished => {}
        }
        self.check_untouched(d);
    }

    /// Without early send completion, a send entry counted complete is one the peer has
    /// received (the in-memory transport finishes a send once the receiver has the bytes): its
    /// destination holds this execution's pattern already. Checked for the entries counted
    /// since the last check, by the device step and after each comm's progress calls (before
    /// the peer's calls could fill the destination).
    fn check_send_completions(&mut self, d: usize) {
        let dev = &self.devs[d];
        let (spec, from, exec) = (dev.spec, dev.checked, dev.exec);
        let s = &self.specs[spec];
        if !dev.send || dev.phase != Phase::Post || s.early_send || s.recv_shrink != 0 {
            return;
        }
        let done = (self.load(dev.cpl) - exec * dev.n).min(dev.n);
        for e in from as usize..done as usize {
            let ok = self.dst[spec][e]
                .iter()
                .enumerate()
                .all(|(i, &x)| x == pattern(spec, e, exec, i));
            assert!(
                ok,
                "send entry {e} counted complete before the receiver had it \
                 (no early_send_completion)"
            );
        }
        self.devs[d].checked = done.max(from);
    }

    /// Receive buffers the device has not handed out yet (nor promised free through
    /// `ending_recv_credits`) stay untouched.
    fn check_untouched(&self, d: usize) {
        let dev = &self.devs[d];
        if !dev.send && matches!(dev.phase, Phase::Post | Phase::WaitHandshake) {
            let s = &self.specs[dev.spec];
            let ahead = if s.early_recv { s.recv_credits } else { 0 };
            let first_untouchable = dev.posted.saturating_add(ahead) as usize;
            for (e, b) in self.dst[dev.spec]
                .iter()
                .enumerate()
                .skip(first_untouchable)
            {
                // Under Miri (a slow interpreter, run for undefined behaviour) the first and
                // last byte stand for the buffer: this scan runs twice per device step.
                let untouched = if cfg!(miri) {
                    b.first().into_iter().chain(b.last()).all(|&x| x == POISON)
                } else {
                    b.iter().all(|&x| x == POISON)
                };
                assert!(
                    untouched,
                    "recv entry {e} touched before the device posted it"
                );
            }
        }
    }

    fn check_and_rearm(&mut self, exec: u32) {
        for k in 0..self.specs.len() {
            for (e, b) in self.dst[k].iter().enumerate() {
                for (i, &x) in b.iter().enumerate() {
                    assert_eq!(
                        x,
                        pattern(k, e, exec, i),
                        "spec {k} entry {e} byte {i} execution {exec}"
                    );
                }
            }
        }
        for d in 0..self.devs.len() {
            let dev = &mut self.devs[d];
            assert_eq!(dev.phase, Phase::Finished);
            dev.exec += 1;
            dev.posted = 0;
            dev.checked = 0;
            dev.phase = Phase::Arm;
            let (hs, cpl, n, ex) = (dev.hs, dev.cpl, dev.n, dev.exec);
            assert_eq!(self.load(hs), ex, "one handshake per execution");
            assert_eq!(self.load(cpl), ex * n, "complete = entries");
        }
    }

    /// Runs `executions` executions of every spec; `order` picks which device side moves first.
    fn run(&mut self, executions: u32, recv_side_first: bool) {
        for exec in 0..executions {
            let mut steps = 0u64;
            while self.devs.iter().any(|d| d.phase != Phase::Finished) {
                steps += 1;
                assert!(steps < 2_000_000, "no completion after {steps} steps");
                let n = self.devs.len();
                for j in 0..n {
                    let d = if recv_side_first { n - 1 - j } else { j };
                    self.device_step(d);
                }
                for rank in 0..2 {
                    for stream in 0..4 {
                        let (mut i, mut dn) = (true, true);
                        self.comms[rank]
                            .progress(stream, 1)
                            .map(|t| t.and_into(&mut i, &mut dn))
                            .unwrap();
                    }
                    for d in 0..n {
                        self.check_send_completions(d);
                    }
                }
            }
            self.check_and_rearm(exec);
        }
    }
}

fn run_one(spec: Spec, executions: u32) {
    let mut w = World::new(vec![spec]);
    w.run(executions, false);
}

fn big(n: u64) -> u64 {
    if cfg!(miri) {
        n.min(4097)
    } else {
        n
    }
}

#[test]
fn sizes_through_the_full_protocol() {
    let sizes = vec![0, 1, 4095, 4096, big((1 << 20) + 3), big(4 << 20)];
    let flags: &[(bool, bool)] = if cfg!(miri) {
        &[(false, false), (true, true)]
    } else {
        &[(false, false), (true, true), (true, false), (false, true)]
    };
    for &(early_send, early_recv) in flags {
        let mut s = Spec::new(0, sizes.clone());
        s.early_send = early_send;
        s.early_recv = early_recv;
        s.recv_credits = 2;
        run_one(s, 1);
    }
}

#[test]
fn entry_counts_the_128_cap_and_index_wraparound() {
    let counts: &[u32] = if cfg!(miri) {
        &[1, 129]
    } else {
        &[1, 127, 128, 129, 1000]
    };
    for &n in counts {
        for loop_size in [0u32, 64] {
            let mut s = Spec::new(1, vec![8; n as usize]);
            s.loop_size = loop_size;
            s.send_rate = 7;
            run_one(s, 1);
        }
    }
}

#[test]
fn send_credits_limit_outstanding_requests() {
    let mut s = if cfg!(miri) {
        Spec::new(2, vec![64; 12])
    } else {
        Spec::new(2, vec![5000; 40])
    };
    s.send_credits = 3;
    run_one(s, 1);
}

#[test]
fn recycled_ops_handshake_again_and_move_data_again() {
    let mut w = World::new(vec![
        Spec::new(0, vec![16, 5000, 3]),
        Spec::new(0, vec![100; 4]),
    ]);
    w.run(3, false);
    let st = w.comms[0].stream(0);
    let ops: Vec<_> = st
        .active()
        .iter()
        .chain(st.block(1).unwrap().ops.iter())
        .collect();
    assert_eq!(ops.len(), 2);
    for op in ops {
        // SAFETY: live ops of the comm.
        assert_eq!(unsafe { (*op).executions }, 3);
    }
}

#[test]
fn send_first_and_recv_first() {
    for recv_first in [false, true] {
        let mut s = Spec::new(3, vec![64, 9000, 1]);
        if recv_first {
            s.send_rate = 1;
        } else {
            s.recv_rate = 1;
        }
        let mut w = World::new(vec![s]);
        w.run(1, recv_first);
    }
}

#[test]
fn many_ops_on_four_streams_never_cross() {
    let mut specs = Vec::new();
    let n = if cfg!(miri) { 4 } else { 12u32 };
    for k in 0..n {
        let mut s = Spec::new(
            k % 4,
            vec![(k as u64 + 1) * 37, big(4096 * 4) / 4 + k as u64, 3],
        );
        // Different posting speeds on the two sides so ops post in different orders.
        s.send_rate = 1 + k % 3;
        s.recv_rate = 1 + (k * 5) % 4;
        specs.push(s);
    }
    let mut w = World::new(specs);
    w.run(2, true);
}

#[test]
fn early_recv_posting_stays_within_credits() {
    let mut s = Spec::new(0, vec![32; 20]);
    s.early_recv = true;
    s.recv_credits = 3;
    s.recv_rate = 1;
    run_one(s, 1);
    let mut s = Spec::new(0, vec![32; 20]);
    s.recv_rate = 1;
    run_one(s, 1);
}

#[test]
fn size_above_transport_maximum_is_rejected() {
    let fabric = MemFabric::new(2).unwrap();
    // SAFETY: the comm's ops never run in this test.
    let dev = unsafe { DirectHostWords::new() };
    let mut c = Comm::new(
        CommConfig::new(0, 2, 1),
        Box::new(fabric.endpoint(0).unwrap()),
        PlainArc::new(dev),
        PlainArc::new(NoClock),
    )
    .unwrap();
    // SAFETY: never dereferenced (start is rejected before any op exists).
    unsafe {
        c.trust_all_addresses();
    }
    let max = c.transport().max_msg_size();
    let info = NetOpInfo {
        send_peer: 1,
        recv_peer: -1,
        tx_entry_cnt: 1,
        data_type_sz: 1,
        post_send_idx_addr: 0x100,
        send_handshake_sem_addr: 0x104,
        send_complete_sem_addr: 0x108,
        ..NetOpInfo::default()
    };
    let e = NetSrcAddr {
        net_op_idx: 0,
        mark: NET_OP_COMPLETE,
        addr: 0x1000,
        size: max + 1,
        dest_rank: -1,
        reserved: 0,
    };
    assert_eq!(c.start(0, 1, &[info], &[e], &[]), Err(NrtStatus::Invalid));
    assert!(c.stream(0).no_blocks_filed());
}

#[test]
fn truncation_fails_the_receiving_comm_sticky() {
    let mut s = Spec::new(0, vec![64, 8192]);
    s.recv_shrink = 8;
    let mut w = World::new(vec![s]);
    let mut failed = None;
    for _ in 0..10_000 {
        for d in 0..w.devs.len() {
            w.device_step(d);
        }
        let _ = w.comms[0]
            .progress(0, 1)
            .map(|t| t.and_into(&mut true, &mut true));
        let (mut i, mut dn) = (true, true);
        if let Err(e) = w.comms[1]
            .progress(0, 1)
            .map(|t| t.and_into(&mut i, &mut dn))
        {
            failed = Some(e);
            break;
        }
    }
    assert_eq!(failed, Some(NrtStatus::NetworkProxyFailure));
    assert_eq!(
        w.comms[1].fatal_error(),
        Some(NrtStatus::NetworkProxyFailure)
    );
    assert_eq!(
        w.comms[1]
            .progress(0, 1)
            .map(|t| t.and_into(&mut true, &mut true)),
        Err(NrtStatus::NetworkProxyFailure)
    );
    for rank in 0..2 {
        for stream in 0..4 {
            let _ = w.comms[rank].stop(stream);
        }
    }
}

// ---------------------------------------------------------------- protocol counters

/// The one op record of `rank`'s comm.
fn only_record(w: &World, rank: usize) -> OpPeak {
    let peaks = w.comms[rank].op_peaks();
    assert_eq!(peaks.len(), 1, "one op info filed: {peaks:?}");
    peaks[0]
}

#[test]
#[cfg_attr(
    miri,
    ignore = "counting only: the send/recv paths it drives run under Miri in the tests above"
)]
fn counters_peak_outstanding_is_the_send_credits_when_entries_exceed_them() {
    let n = if cfg!(miri) { 12 } else { 40u32 };
    // 5000 B: above the in-memory transport's eager size, so each send stays outstanding until
    // the receiver takes it; the device posts every entry at once.
    for (credits, applied) in [(3u32, 3u32), (0, 128)] {
        let mut s = Spec::new(2, vec![5000; n as usize]);
        s.send_credits = credits;
        let mut w = World::new(vec![s]);
        w.run(2, false);
        let (tx, rx) = (w.comms[0].protocol_stats(), w.comms[1].protocol_stats());
        assert_eq!(tx.size, PROTOCOL_STATS_SIZE);
        let peak = applied.min(n);
        assert_eq!(tx.peak_outstanding_send, u64::from(peak));
        assert_eq!(tx.peak_outstanding_recv, 0);
        // The receiving device posts all entries at once too: every receive in flight.
        assert_eq!(rx.peak_outstanding_recv, u64::from(n));
        assert_eq!((tx.starts, rx.starts), (1, 1));
        assert_eq!((tx.block_switches, rx.block_switches), (0, 0));
        assert_eq!(tx.early_send_completions, 0);
        assert_eq!((rx.recvs_posted_ahead, rx.max_recv_ahead), (0, 0));
        assert_eq!((tx.index_wraps, rx.index_wraps), (0, 0));
        let r = only_record(&w, 0);
        assert_eq!(r.key(), (2, 1, 0));
        assert_eq!((r.tx_entries, r.rx_entries), (n, 0));
        assert_eq!(
            (r.send_credits, r.peak_send, r.peak_recv),
            (applied, peak, 0)
        );
        let r = only_record(&w, 1);
        assert_eq!((r.tx_entries, r.rx_entries, r.send_credits), (0, n, 0));
        assert_eq!(r.peak_recv, n);
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "counting only: the send/recv paths it drives run under Miri in the tests above"
)]
fn counters_receives_posted_ahead_stay_within_the_ending_credits() {
    for early in [true, false] {
        let mut s = Spec::new(0, vec![32; 20]);
        s.early_recv = early;
        s.recv_credits = 3;
        s.recv_rate = 1;
        let mut w = World::new(vec![s]);
        w.run(2, false);
        let rx = w.comms[1].protocol_stats();
        let r = only_record(&w, 1);
        assert_eq!(r.ending_recv_credits, 3);
        if early {
            // The device posts one entry a step, the proxy is always ahead of it: every
            // receive of both executions is posted ahead, never more than the credits at once.
            assert_eq!(rx.recvs_posted_ahead, 2 * 20, "{rx:?}");
            assert_eq!(rx.max_recv_ahead, 3);
            assert_eq!(r.max_recv_ahead, 3);
            assert_eq!(r.recvs_ahead, rx.recvs_posted_ahead);
        } else {
            assert_eq!((rx.recvs_posted_ahead, rx.max_recv_ahead), (0, 0));
            assert_eq!((r.recvs_ahead, r.max_recv_ahead), (0, 0));
        }
        // Sends are never posted ahead.
        assert_eq!(w.comms[0].protocol_stats().recvs_posted_ahead, 0);
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "counting only: the send/recv paths it drives run under Miri in the tests above"
)]
fn counters_index_wraps_are_entries_over_the_loop_size_per_execution() {
    let counts: &[u32] = if cfg!(miri) {
        &[1, 129]
    } else {
        &[1, 63, 64, 127, 128, 129, 1000]
    };
    for &n in counts {
        for loop_size in [0u32, 64] {
            let mut s = Spec::new(1, vec![8; n as usize]);
            s.loop_size = loop_size;
            s.send_rate = 7;
            let mut w = World::new(vec![s]);
            w.run(2, false);
            let per_exec = n.checked_div(loop_size).unwrap_or(0);
            let want = 2 * u64::from(per_exec);
            for rank in 0..2 {
                assert_eq!(
                    w.comms[rank].protocol_stats().index_wraps,
                    want,
                    "rank {rank}, {n} entries, loop size {loop_size}"
                );
                assert_eq!(only_record(&w, rank).wraps, want);
            }
        }
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "counting only: the send/recv paths it drives run under Miri in the tests above"
)]
fn counters_early_send_completions_count_copied_entries_only_with_the_flag() {
    // Four entries the in-memory transport copies at post (≤ 4096 B), one it does not.
    let sizes = vec![0, 1, 4095, 4096, 5000];
    for early in [true, false] {
        let mut s = Spec::new(0, sizes.clone());
        s.early_send = early;
        let mut w = World::new(vec![s]);
        w.run(3, false);
        let tx = w.comms[0].protocol_stats();
        let r = only_record(&w, 0);
        assert_eq!(r.early_send_completions, tx.early_send_completions);
        if early {
            // The sending comm ticks first, before the receiver took anything: the four
            // copied entries count early in each of the three executions; the 5000-byte one
            // never does.
            assert_eq!(tx.early_send_completions, 3 * 4, "{tx:?}");
        } else {
            assert_eq!(tx.early_send_completions, 0);
        }
        assert_eq!(w.comms[1].protocol_stats().early_send_completions, 0);
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "counting only: the send/recv paths it drives run under Miri in the tests above"
)]
fn counters_starts_count_accepted_calls_and_records_do_not_grow_when_refiled() {
    let mut specs = Vec::new();
    for k in 0..6u32 {
        specs.push(Spec::new(k % 4, vec![64, 16]));
    }
    let mut w = World::new(specs);
    w.run(2, false);
    // One start per stream per rank; six op infos filed on each rank.
    assert_eq!(w.comms[0].protocol_stats().starts, 4);
    assert_eq!(w.comms[0].op_peaks().len(), 6);
    let keys: Vec<_> = w.comms[1].op_peaks().iter().map(OpPeak::key).collect();
    assert_eq!(
        keys,
        vec![
            (0, 1, 0),
            (0, 1, 1),
            (1, 1, 0),
            (1, 1, 1),
            (2, 1, 0),
            (3, 1, 0)
        ]
    );
    assert!(w.comms[0].op_peaks().iter().all(|r| r.peak_send == 2));
    // Stop every stream, file the same blocks again: the records are replaced, not added.
    for rank in 0..2 {
        for stream in 0..4 {
            w.comms[rank].stop(stream).unwrap();
        }
    }
    assert!(w.comms[0].op_peaks().iter().all(|r| r.peak_send == 2));
    w.register_and_start();
    assert_eq!(w.comms[0].protocol_stats().starts, 8);
    assert_eq!(w.comms[0].op_peaks().len(), 6);
    assert!(w.comms[0].op_peaks().iter().all(|r| r.peak_send == 0));
    for d in &mut w.devs {
        d.exec = 0;
        d.posted = 0;
        d.checked = 0;
        d.phase = Phase::Arm;
    }
    // Host words restart at zero with the new ops.
    for i in 0..w.words.len() {
        w.store(i, 0);
    }
    w.run(1, false);
    assert_eq!(w.comms[1].op_peaks().len(), 6);
    assert!(w.comms[1].op_peaks().iter().all(|r| r.peak_recv == 2));
    assert_eq!(w.comms[0].protocol_stats().peak_outstanding_send, 2);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "counting only: the send/recv paths it drives run under Miri in the tests above"
)]
fn counters_a_rejected_start_counts_nothing() {
    let fabric = MemFabric::new(2).unwrap();
    // SAFETY: the comm's ops never run in this test.
    let dev = unsafe { DirectHostWords::new() };
    let mut c = Comm::new(
        CommConfig::new(0, 2, 1),
        Box::new(fabric.endpoint(0).unwrap()),
        PlainArc::new(dev),
        PlainArc::new(NoClock),
    )
    .unwrap();
    assert_eq!(c.start(0, 1, &[], &[], &[]), Err(NrtStatus::Invalid));
    assert_eq!(c.protocol_stats(), ProtocolStats::new());
    assert!(c.op_peaks().is_empty());
}

// The host-index arithmetic of the send/recv ops.
use super::{host_delta, host_wraps};

#[test]
fn host_wraps_counts_passed_multiples_of_the_loop_size() {
    assert_eq!(host_wraps(60, 3, 64), 0);
    assert_eq!(host_wraps(60, 4, 64), 1);
    assert_eq!(host_wraps(63, 10, 64), 1);
    assert_eq!(host_wraps(0, 63, 64), 0);
    assert_eq!(host_wraps(5, 7, 0), 0);
    assert_eq!(host_wraps(u32::MAX - 1, 2, 0), 1);
}

#[test]
fn host_delta_wraps_modulo_loop_size() {
    assert_eq!(host_delta(5, 3, 0), 2);
    assert_eq!(host_delta(1, u32::MAX, 0), 2);
    assert_eq!(host_delta(2, 6, 8), 4);
    assert_eq!(host_delta(0, 0, 8), 0);
    assert_eq!(host_delta(7, 7, 128), 0);
    assert_eq!(host_delta(3, 125, 128), 6);
}
