//! Fuzz target `start` (issue 13, item 10): `neuronStartNetworkProxy` through the C ABI of
//! `libnccom_proxy` (the `proxy-ffi` crate) with arbitrary descriptors, then
//! `neuronNetworkProxyProgress` rounds and `neuronStopNetworkProxy`, on a comm of rank 0 of 2
//! over an in-memory group, created with `NCCOM_COMM_CHECK_ADDRESSES` and one registered arena
//! that this target owns, between two unregistered guard zones.
//!
//! Most inputs are shaped (counts, marks, sizes, flags in range; FIFOs built from the ops), so
//! that the addresses decide. Addresses are inside the arena, just before or past it (in a guard zone), NULL or wild. The
//! properties (a panic is a crash to libFuzzer):
//! * a call that names memory outside the arena (a host word of a side with entries, a buffer
//!   of non-zero size) returns an error, and a rejected call files nothing (progress on the
//!   stream reports idle and done);
//! * after an accepted call, progress (the device played between rounds: host indices ready,
//!   then every entry posted once the handshake is seen, so bytes move) never crashes and stop
//!   succeeds; the stream is then idle and done;
//! * the guard zones keep their pattern (nothing outside the arena is written); a wild address
//!   that is touched crashes the target (SIGSEGV, or AddressSanitizer under `cargo fuzz`).
//!
//! The proptest twin that Miri also runs: `core/tests/start_fuzz.rs` (through `Comm::start`).
//! Run: `cargo +nightly fuzz run start -- -max_total_time=60` (ci.sh step `fuzz`).

#![no_main]

use std::ffi::c_int;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use nccom_proxy::types::*;
use nccom_proxy::*;

/// Registered bytes.
const ARENA: usize = 16 * 1024;
/// Unregistered bytes on each side.
const GUARD: usize = 256;
const CANARY: u64 = 0xA5A5_A5A5_A5A5_A5A5;

#[derive(Arbitrary, Clone, Copy, Debug)]
enum Addr {
    In(u32),
    PastEnd(u16),
    Before(u8),
    Null,
    Wild(u64),
}

#[derive(Arbitrary, Clone, Debug)]
struct OpIn {
    send_peer: i8,
    recv_peer: i8,
    tag: u32,
    tx: u8,
    rx: u8,
    loop_size: u8,
    credits: (u8, u8),
    flags: (u8, u8),
    reserved: [u8; 2],
    data_type_sz: u8,
    words: [Addr; 6],
}

#[derive(Arbitrary, Clone, Debug)]
struct EntryIn {
    op: u8,
    mark: u8,
    addr: Addr,
    size: u32,
    huge: bool,
    peer: i8,
    reserved: u8,
}

#[derive(Arbitrary, Debug)]
struct Input {
    stream: u8,
    bb: u8,
    ops: Vec<OpIn>,
    src: Vec<EntryIn>,
    dst: Vec<EntryIn>,
    rounds: u8,
    /// Shape the call: fields that validation checks one by one are brought into range and
    /// the FIFOs are built from the ops' entry counts with the right marks, so that the
    /// addresses (still as drawn) decide; else every field stays as drawn.
    shape: bool,
}

/// Brings `inp`'s fields into range and rebuilds its FIFOs from the ops' entry counts (marks
/// right, entries taken in turn from the drawn ones); the addresses stay as drawn.
fn shape(inp: &Input) -> (Vec<OpIn>, Vec<EntryIn>, Vec<EntryIn>) {
    let mut ops: Vec<OpIn> = inp.ops.iter().take(8).cloned().collect();
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for (k, o) in ops.iter_mut().enumerate() {
        o.data_type_sz = [1, 2, 4, 8][usize::from(o.data_type_sz % 4)];
        o.tag %= 1 << 14;
        o.reserved = [0; 2];
        o.flags = (o.flags.0 % 2, o.flags.1 % 2);
        o.credits.0 %= 129;
        o.send_peer = o.send_peer.rem_euclid(2);
        o.recv_peer = o.recv_peer.rem_euclid(2);
        o.tx %= 5;
        o.rx %= 5;
        for (side, count, pool) in [(&mut src, o.tx, &inp.src), (&mut dst, o.rx, &inp.dst)] {
            for j in 0..count {
                let mut e = pool
                    .get((k + usize::from(j)) % pool.len().max(1))
                    .cloned()
                    .unwrap_or(EntryIn {
                        op: 0,
                        mark: 0,
                        addr: Addr::In(0),
                        size: 0,
                        huge: false,
                        peer: -1,
                        reserved: 0,
                    });
                e.op = k as u8;
                e.mark = if j + 1 == count { 2 } else { 0 };
                e.reserved = 0;
                e.peer = e.peer.clamp(-1, 1);
                e.huge = false;
                if let Addr::In(off) = e.addr {
                    let room = ARENA as u32 - off % ARENA as u32;
                    e.size %= room + 1;
                }
                e.size = e.size / u32::from(o.data_type_sz) * u32::from(o.data_type_sz);
                side.push(e);
            }
        }
    }
    (ops, src, dst)
}

unsafe extern "C" fn inc(addr: *mut NccomHostWord, val: u32) {
    // SAFETY: the comm passes only host-word addresses it accepted at start: 4-aligned words in
    // the registered arena, which lives until the comm is destroyed.
    unsafe { AtomicU32::from_ptr(addr) }.fetch_add(val, Ordering::Release);
}

const CALLBACKS: NccomDeviceCallbacks = NccomDeviceCallbacks {
    nec_inc_semaphore: Some(inc),
    nec_load_host_index: None,
    nec_store_host_index: None,
};

fn create(rank: u32, group: *mut NccomMemGroup) -> *mut NccomComm {
    let cfg = NccomCommConfig {
        rank,
        nranks: 2,
        comm_id: 3,
        flags: NCCOM_COMM_CHECK_ADDRESSES,
        transport: NccomTransportDesc {
            kind: NCCOM_TRANSPORT_MEM,
            reserved: 0,
            mem_group: group,
            libfabric: NccomLibfabricDesc {
                provider: ptr::null(),
                root_addr: ptr::null(),
                bootstrap_timeout_ms: 0,
            },
        },
        callbacks: &CALLBACKS,
        drain_limit_ns: 0,
    };
    let mut c = ptr::null_mut();
    // SAFETY: `cfg` and `c` are live locals; the callbacks table is a static.
    assert_eq!(unsafe { nccom_comm_create(&cfg, &mut c) }, NRT_SUCCESS);
    c
}

/// (idle, done) of one progress call seeded with 1, or the call's failure status.
fn progress(c: *mut NccomComm, stream: u32, bb: u32) -> Result<(bool, bool), NRT_STATUS> {
    let (mut idle, mut done): (c_int, c_int) = (1, 1);
    // SAFETY: `c` is a live handle; `idle` / `done` are live locals.
    let s = unsafe { neuronNetworkProxyProgress(c, stream, bb, &mut idle, &mut done) };
    if s == NRT_SUCCESS {
        Ok((idle != 0, done != 0))
    } else {
        Err(s)
    }
}

/// One device step for every op of an accepted call: a side's host index reads `0xFFFF_FFFF`
/// (ready) until its handshake semaphore is raised, then its entry count (all posted), so that
/// accepted calls move bytes (words may alias each other and the buffers: all in the arena).
fn play_device(ops: &[NetOpInfo]) {
    let word = |a: u64| {
        // SAFETY: only called for accepted calls, whose host words of the sides with entries
        // lie 4-aligned in the registered arena, alive for the whole run; accessed atomically.
        unsafe { AtomicU32::from_ptr(a as usize as *mut u32) }
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
                    NCCOM_HOST_WORD_READY
                };
                word(idx).store(v, Ordering::Release);
            }
        }
    }
}

fuzz_target!(|inp: Input| {
    let mut mem = vec![0u64; (2 * GUARD + ARENA) / 8];
    let g = GUARD / 8;
    let n = mem.len();
    mem[..g].fill(CANARY);
    mem[n - g..].fill(CANARY);
    let base = mem.as_mut_ptr() as usize as u64 + GUARD as u64;
    // Host words inside the arena are 4-aligned in shaped calls.
    let align = if inp.shape { 4 } else { 1 };
    let resolve_aligned = |a: Addr, align: u64| match a {
        Addr::In(off) => base + u64::from(off) % ARENA as u64 / align * align,
        Addr::PastEnd(k) => base + ARENA as u64 + u64::from(k),
        Addr::Before(k) => base - u64::from(k.max(1)),
        Addr::Null => 0,
        Addr::Wild(w) => w,
    };
    let resolve = |a: Addr| resolve_aligned(a, 1);
    let word = |a: Addr| resolve_aligned(a, align);
    let (ops_in, src_in, dst_in) = if inp.shape {
        shape(&inp)
    } else {
        (inp.ops.clone(), inp.src.clone(), inp.dst.clone())
    };
    let inside = |a: u64, len: u64| {
        a >= base && a.checked_add(len).is_some_and(|e| e <= base + ARENA as u64)
    };

    let mut group = ptr::null_mut();
    // SAFETY: `group` is a live local.
    assert_eq!(
        unsafe { nccom_mem_group_create(2, &mut group) },
        NRT_SUCCESS
    );
    let comms = [create(0, group), create(1, group)];
    for &c in &comms {
        // SAFETY: the arena lives until after both comms are destroyed (below); its words are
        // accessed only atomically while the comms run.
        let s = unsafe {
            nccom_comm_register_memory(c, (base as usize) as *const std::ffi::c_void, ARENA)
        };
        assert_eq!(s, NRT_SUCCESS);
    }

    let ops: Vec<NetOpInfo> = ops_in
        .iter()
        .take(8)
        .map(|o| NetOpInfo {
            send_peer: i32::from(o.send_peer),
            recv_peer: i32::from(o.recv_peer),
            tag: o.tag,
            tx_entry_cnt: u32::from(o.tx % 5),
            rx_entry_cnt: u32::from(o.rx % 5),
            net_idx_loop_size: u32::from(o.loop_size % 5),
            initial_send_credits: u32::from(o.credits.0),
            ending_recv_credits: u32::from(o.credits.1 % 5),
            early_send_completion: o.flags.0 % 3,
            early_recv_posting: o.flags.1 % 3,
            reserved: o.reserved,
            data_type_sz: u32::from(o.data_type_sz % 10),
            post_send_idx_addr: word(o.words[0]),
            post_recv_idx_addr: word(o.words[1]),
            send_handshake_sem_addr: word(o.words[2]),
            send_complete_sem_addr: word(o.words[3]),
            recv_handshake_sem_addr: word(o.words[4]),
            recv_complete_sem_addr: word(o.words[5]),
        })
        .collect();
    let size = |e: &EntryIn| {
        if e.huge {
            u64::from(e.size) << 20
        } else {
            u64::from(e.size) % (ARENA as u64 + 1)
        }
    };
    let src: Vec<NetSrcAddr> = src_in
        .iter()
        .take(40)
        .map(|e| NetSrcAddr {
            net_op_idx: u32::from(e.op % 10),
            mark: u32::from(e.mark % 5),
            addr: resolve(e.addr),
            size: size(e),
            dest_rank: i32::from(e.peer),
            reserved: u32::from(e.reserved),
        })
        .collect();
    let dst: Vec<NetDestAddr> = dst_in
        .iter()
        .take(40)
        .map(|e| NetDestAddr {
            net_op_idx: u32::from(e.op % 10),
            mark: u32::from(e.mark % 5),
            addr: resolve(e.addr),
            size: size(e),
            src_rank: i32::from(e.peer),
            reserved: u32::from(e.reserved),
        })
        .collect();
    let word_out = |a: u64| !inside(a, 4);
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
        .any(|(a, n)| n > 0 && !inside(a, n));

    let stream = u32::from(inp.stream % 6);
    let bb = match inp.bb % 4 {
        3 => NCCOM_BB_NONE,
        b => u32::from(b),
    };
    let c = comms[0];
    // SAFETY: `c` is live; each FIFO pointer is valid for its length (a Vec's buffer); every
    // address the comm accepts lies in the registered arena.
    let s = unsafe {
        neuronStartNetworkProxy(
            c,
            stream,
            bb,
            ops.as_ptr(),
            ops.len(),
            src.as_ptr(),
            src.len(),
            dst.as_ptr(),
            dst.len(),
        )
    };
    if outside {
        assert_ne!(
            s, NRT_SUCCESS,
            "a call naming memory outside the arena was accepted"
        );
    }
    let (pstream, pbb) = (stream.min(3), if bb == NCCOM_BB_NONE { 0 } else { bb });
    if s != NRT_SUCCESS {
        assert_eq!(
            progress(c, pstream, pbb),
            Ok((true, true)),
            "a rejected call filed something"
        );
    } else {
        for _ in 0..inp.rounds % 16 {
            play_device(&ops);
            // Any status: a bad combination of valid fields may fail the comm here.
            let _ = progress(c, pstream, bb);
            let _ = progress(comms[1], pstream, bb);
        }
        for &k in &comms {
            // SAFETY: `k` is a live handle.
            assert_eq!(unsafe { neuronStopNetworkProxy(k, pstream) }, NRT_SUCCESS);
        }
        if let Ok(r) = progress(c, pstream, pbb) {
            assert_eq!(r, (true, true), "the stream is not empty after stop");
        }
    }
    for &k in &comms {
        // SAFETY: `k` is a live handle, destroyed once.
        assert_eq!(unsafe { nccom_comm_destroy(k) }, NRT_SUCCESS);
    }
    // SAFETY: `group` is a live handle, destroyed once.
    assert_eq!(unsafe { nccom_mem_group_destroy(group) }, NRT_SUCCESS);
    assert!(
        mem[..g].iter().chain(&mem[n - g..]).all(|&w| w == CANARY),
        "memory outside the arena was written"
    );
});
