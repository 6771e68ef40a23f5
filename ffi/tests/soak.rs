//! Soak through the C ABI (issue 13, item 9): 200 create / run / destroy cycles of the exports
//! leave nothing behind.
//!
//! Each cycle: `nccom_mem_group_create(2)`, two comms (`NCCOM_COMM_CHECK_ADDRESSES`, their
//! memory registered), a send of 3 entries (1 B, 4097 B, 64 KiB) from rank 0 to rank 1 through
//! `neuronStartNetworkProxy` / `neuronNetworkProxyProgress` with the device played by hand
//! through the host words. In even cycles the exchange completes (bytes and semaphores
//! checked) and both streams are stopped; in odd cycles the comms are destroyed mid-run (the
//! handshake seen, the entries posted, not progressed to the end: the C ABI has no abort entry,
//! destroy is its way out), rank 1 first. Then the group is destroyed.
//!
//! After 4 warm-up cycles the process is sampled; after the cycles its threads
//! (`/proc/self/task`), fds (`/proc/self/fd`) and live heap bytes (this binary's counting
//! global allocator: the library is linked in as a Rust crate, so its allocations are counted)
//! must be exactly as they were, and its RSS (`/proc/self/statm`, after `malloc_trim`) within
//! 8 MiB. `PROXY_SOAK_CYCLES` sets the cycle count (default 200). One test in this binary: the
//! counts are process-wide.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

use nccom_proxy::types::*;
use nccom_proxy::*;
use proxy_alloc_count::CountingAlloc;

/// Live heap bytes (allocated minus freed, every thread): [`CountingAlloc::live_bytes`].
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

const SIZES: [usize; 3] = [1, 4097, 64 * 1024];
/// Host words: [send idx, send hs, send cpl, recv idx, recv hs, recv cpl], one per line.
const WORDS: usize = 6;
/// Bound of the progress ticks of one exchange.
const MAX_TICKS: u32 = 1_000_000;

#[repr(C, align(64))]
struct Line(AtomicU32);

unsafe extern "C" fn inc(addr: *mut NccomHostWord, val: u32) {
    // SAFETY: the comms pass only host words this test registered: live, aligned AtomicU32s.
    unsafe { AtomicU32::from_ptr(addr) }.fetch_add(val, Ordering::Release);
}

const CALLBACKS: NccomDeviceCallbacks = NccomDeviceCallbacks {
    nec_inc_semaphore: Some(inc),
    nec_load_host_index: None,
    nec_store_host_index: None,
};

fn ok(what: &str, s: NRT_STATUS) {
    assert_eq!(s, NRT_SUCCESS, "{what}");
}

fn create(rank: u32, group: *mut NccomMemGroup) -> *mut NccomComm {
    let cfg = NccomCommConfig {
        rank,
        nranks: 2,
        comm_id: 4,
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
    // SAFETY: live locals; the callbacks table is a constant promoted to a static.
    ok("nccom_comm_create", unsafe {
        nccom_comm_create(&cfg, &mut c)
    });
    c
}

fn register(c: *mut NccomComm, p: *const u8, len: usize) {
    // SAFETY: the range is this cycle's memory, alive until the comm is destroyed.
    ok("nccom_comm_register_memory", unsafe {
        nccom_comm_register_memory(c, p.cast::<c_void>(), len)
    });
}

fn pattern(cycle: u32, e: usize, i: usize) -> u8 {
    ((cycle as usize * 7 + e * 31 + i) % 251) as u8
}

fn cycle(i: u32) {
    let complete = i.is_multiple_of(2);
    let words: Vec<Line> = (0..WORDS).map(|_| Line(AtomicU32::new(0))).collect();
    let src: Vec<Vec<u8>> = SIZES
        .iter()
        .enumerate()
        .map(|(e, &n)| (0..n).map(|k| pattern(i, e, k)).collect())
        .collect();
    let mut dst: Vec<Vec<u8>> = SIZES.iter().map(|&n| vec![0xEE; n]).collect();
    let w = |k: usize| words[k].0.as_ptr() as usize as u64;
    let mut group = ptr::null_mut();
    // SAFETY: a live local.
    ok("nccom_mem_group_create", unsafe {
        nccom_mem_group_create(2, &mut group)
    });
    let comms = [create(0, group), create(1, group)];
    for &c in &comms {
        register(
            c,
            words.as_ptr().cast::<u8>(),
            WORDS * std::mem::size_of::<Line>(),
        );
        for b in src.iter().chain(dst.iter()) {
            register(c, b.as_ptr(), b.len());
        }
    }
    let n = SIZES.len() as u32;
    let mark = |e: usize| {
        if e + 1 == SIZES.len() {
            proxy_core::base::desc::EXEC_COMPLETE
        } else {
            proxy_core::base::desc::NET_TRANSFER
        }
    };
    let send = NetOpInfo {
        send_peer: 1,
        recv_peer: NCCOM_NO_PEER,
        tag: 1,
        tx_entry_cnt: n,
        data_type_sz: 1,
        post_send_idx_addr: w(0),
        send_handshake_sem_addr: w(1),
        send_complete_sem_addr: w(2),
        ..NetOpInfo::default()
    };
    let recv = NetOpInfo {
        send_peer: NCCOM_NO_PEER,
        recv_peer: 0,
        tag: 1,
        rx_entry_cnt: n,
        data_type_sz: 1,
        post_recv_idx_addr: w(3),
        recv_handshake_sem_addr: w(4),
        recv_complete_sem_addr: w(5),
        ..NetOpInfo::default()
    };
    let sfifo: Vec<NetSrcAddr> = src
        .iter()
        .enumerate()
        .map(|(e, b)| NetSrcAddr {
            net_op_idx: 0,
            mark: mark(e),
            addr: b.as_ptr() as usize as u64,
            size: b.len() as u64,
            dest_rank: NCCOM_NO_PEER,
            reserved: 0,
        })
        .collect();
    let dfifo: Vec<NetDestAddr> = dst
        .iter_mut()
        .enumerate()
        .map(|(e, b)| NetDestAddr {
            net_op_idx: 0,
            mark: mark(e),
            addr: b.as_mut_ptr() as usize as u64,
            size: b.len() as u64,
            src_rank: NCCOM_NO_PEER,
            reserved: 0,
        })
        .collect();
    let (stream, bb) = (i % 4, 2);
    // SAFETY: live comms; each FIFO pointer is valid for its length; every address is
    // registered memory of this cycle, alive until the comms are destroyed below.
    unsafe {
        ok(
            "start send",
            neuronStartNetworkProxy(
                comms[0],
                stream,
                bb,
                &send,
                1,
                sfifo.as_ptr(),
                n as usize,
                ptr::null(),
                0,
            ),
        );
        ok(
            "start recv",
            neuronStartNetworkProxy(
                comms[1],
                stream,
                bb,
                &recv,
                1,
                ptr::null(),
                0,
                dfifo.as_ptr(),
                n as usize,
            ),
        );
    }
    // The device: -1 on both host indices; post every entry once the handshake is seen.
    words[0].0.store(NCCOM_HOST_WORD_READY, Ordering::Release);
    words[3].0.store(NCCOM_HOST_WORD_READY, Ordering::Release);
    let mut posted = [false; 2];
    let mut done = [false; 2];
    for tick in 0.. {
        assert!(
            tick < MAX_TICKS,
            "cycle {i}: no completion after {MAX_TICKS} ticks"
        );
        for (side, (idx, hs)) in [(0, 1), (3, 4)].into_iter().enumerate() {
            if !posted[side] && words[hs].0.load(Ordering::Acquire) == 1 {
                words[idx].0.store(n, Ordering::Release);
                posted[side] = true;
            }
        }
        // Destroy mid-run: both sides posted, the transfer under way.
        if !complete && posted == [true; 2] && tick > 2 {
            break;
        }
        for (r, &c) in comms.iter().enumerate() {
            if done[r] {
                continue;
            }
            let (mut idle, mut d): (c_int, c_int) = (1, 1);
            // SAFETY: a live comm; live locals.
            ok("progress", unsafe {
                neuronNetworkProxyProgress(c, stream, bb, &mut idle, &mut d)
            });
            done[r] = d != 0;
        }
        if done == [true; 2] {
            break;
        }
    }
    if complete {
        assert_eq!(dst, src, "cycle {i}: bytes");
        for (hs, cpl) in [(1, 2), (4, 5)] {
            assert_eq!(
                words[hs].0.load(Ordering::Acquire),
                1,
                "cycle {i}: handshake"
            );
            assert_eq!(
                words[cpl].0.load(Ordering::Acquire),
                n,
                "cycle {i}: completions"
            );
        }
        for &c in &comms {
            // SAFETY: a live comm.
            ok("stop", unsafe { neuronStopNetworkProxy(c, stream) });
        }
    }
    // Mid-run: the receiver goes first (its requests are cancelled and drained), then the
    // sender, whose lent buffer may still be queued at the receiver's endpoint.
    for &c in comms.iter().rev() {
        // SAFETY: a live comm, destroyed once.
        ok("nccom_comm_destroy", unsafe { nccom_comm_destroy(c) });
    }
    // SAFETY: a live group, destroyed once.
    ok("nccom_mem_group_destroy", unsafe {
        nccom_mem_group_destroy(group)
    });
}

fn count_dir(path: &str) -> usize {
    std::fs::read_dir(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .count()
}

/// Resident bytes after the C allocator returned its free pages (see the perf soak test).
fn rss() -> u64 {
    // SAFETY: malloc_trim has no preconditions; it only releases free memory.
    unsafe { libc::malloc_trim(0) };
    let s = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm's resident field");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page.max(4096) as u64
}

#[test]
fn c_abi_create_run_destroy_cycles_leave_nothing_behind() {
    let cycles: u32 = std::env::var("PROXY_SOAK_CYCLES")
        .map(|v| {
            v.trim()
                .parse()
                .expect("PROXY_SOAK_CYCLES is a cycle count")
        })
        .unwrap_or(200);
    for i in 0..4 {
        cycle(i);
    }
    let sample = || {
        (
            count_dir("/proc/self/task"),
            count_dir("/proc/self/fd"),
            ALLOC.live_bytes(),
        )
    };
    let (before, rss0) = (sample(), rss());
    for i in 4..4 + cycles {
        cycle(i);
    }
    let (after, rss1) = (sample(), rss());
    assert_eq!(
        after, before,
        "(threads, fds, live heap bytes) after {cycles} cycles through the C ABI"
    );
    assert!(
        rss1 < rss0 + (8 << 20),
        "resident memory grew from {rss0} to {rss1} bytes over {cycles} cycles"
    );
}
