//! `NCCOM_TRANSPORT_LIBFABRIC` (and `NCCOM_TRANSPORT_SHM`) through the C ABI (feature
//! `libfabric`): two processes, each
//! `dlopen`s the `libnccom_proxy.so` cargo built for this test (with the feature), creates its
//! comm with `nccom_comm_create` over `tcp;ofi_rxm` on the loopback interface (bootstrap root
//! on 127.0.0.1), plays the device itself and exchanges entries of 1 B, 4 KiB + 1, 1 MiB and
//! 0 B with the other process through the seam, both directions at once; bytes and semaphore
//! totals are checked. Also: a malformed root address is refused at once; and a peer whose
//! process dies after creation fails the survivor's comm with `NRT_NETWORK_PROXY_FAILURE`
//! naming it (the library keeps the bootstrap connections open for the comm's life and watches
//! them; the shm provider used there never notices a dead peer by itself).
//!
//! The test binary re-executes itself (the ignored test `child_entry`) through the bootstrap's
//! local launcher; every wait is bounded by time.

#![cfg(feature = "libfabric")]

mod common;

use std::ffi::CString;
use std::process::Command;
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proxy_abi::{
    NccomCommConfig, NccomDeviceCallbacks, NccomHostWord, NccomLibfabricDesc, NccomTransportDesc,
    NCCOM_HOST_WORD_READY, NCCOM_TRANSPORT_LIBFABRIC, NCCOM_TRANSPORT_SHM, NRT_INVALID,
};
use proxy_bootstrap::launch::{free_loopback_root, LocalLaunch, OutStream};
use proxy_runtime::loader::{
    ncclNetworkProxyProgress, ncclStartNetworkProxy, ncclStopNetworkProxy, ProgressLib,
};

const CHILD_ENV: &str = "FFI_LIBFABRIC_CHILD";
/// `lost`: the dead-peer scenario ([`child_lost`]); `own-shm`: the exchange over
/// `NCCOM_TRANSPORT_SHM`; anything else: the exchange over libfabric tcp.
const SCENARIO_ENV: &str = "FFI_LIBFABRIC_SCENARIO";
const SIZES: [usize; 4] = [1, 4097, 1 << 20, 0];

fn pattern(rank: u32, e: usize, i: usize) -> u8 {
    ((rank as usize * 97 + e * 31 + i) % 251) as u8
}

static INC_TOTAL: AtomicU64 = AtomicU64::new(0);

/// `nec_inc_semaphore` of the device this test plays.
///
/// # Safety
/// `addr` is one of this test's live `AtomicU32` words (the only addresses it gives the comm).
unsafe extern "C" fn inc(addr: *mut NccomHostWord, val: u32) {
    INC_TOTAL.fetch_add(u64::from(val), Ordering::Relaxed);
    // SAFETY: the function's contract.
    unsafe { AtomicU32::from_ptr(addr) }.fetch_add(val, Ordering::Release);
}

const CALLBACKS: NccomDeviceCallbacks = NccomDeviceCallbacks {
    nec_inc_semaphore: Some(inc),
    nec_load_host_index: None,
    nec_store_host_index: None,
};

fn libfabric_config(
    rank: u32,
    nranks: u32,
    provider: &CString,
    root: &CString,
    timeout_ms: u64,
) -> NccomCommConfig {
    NccomCommConfig {
        rank,
        nranks,
        comm_id: 77,
        flags: 0,
        transport: NccomTransportDesc {
            kind: NCCOM_TRANSPORT_LIBFABRIC,
            reserved: 0,
            mem_group: ptr::null_mut(),
            libfabric: NccomLibfabricDesc {
                provider: provider.as_ptr(),
                root_addr: root.as_ptr(),
                bootstrap_timeout_ms: timeout_ms,
            },
        },
        callbacks: &CALLBACKS,
        drain_limit_ns: 0,
    }
}

/// One rank: comm over libfabric through the loaded library, one send op to the peer and one
/// recv op from it on stream 0, block 1; prints `RESULT status=ok bytes=N`.
fn child(rank: u32) {
    let peer = 1 - rank;
    let lib = ProgressLib::open(common::library()).expect("load libnccom_proxy.so");
    let seam = lib.seam();
    let provider = CString::new("tcp;ofi_rxm").unwrap();
    let root = CString::new(std::env::var("NEURON_RT_ROOT_COMM_ID").expect("root")).unwrap();
    let mut config = libfabric_config(rank, 2, &provider, &root, 30_000);
    if std::env::var(SCENARIO_ENV).as_deref() == Ok("own-shm") {
        // The engine's own shared memory: the same bootstrap fields, no provider.
        config.transport.kind = NCCOM_TRANSPORT_SHM;
        config.transport.libfabric.provider = ptr::null();
    }
    // Host words: [send idx, send hs, send cpl, recv idx, recv hs, recv cpl].
    let words: Vec<AtomicU32> = (0..6).map(|_| AtomicU32::new(0)).collect();
    let src: Vec<Vec<u8>> = SIZES
        .iter()
        .enumerate()
        .map(|(e, &n)| (0..n).map(|i| pattern(rank, e, i)).collect())
        .collect();
    let mut dst: Vec<Vec<u8>> = SIZES.iter().map(|&n| vec![0xEE; n]).collect();
    let t0 = Instant::now();
    // SAFETY: every buffer and word lives until the comm is destroyed (below, before they are
    // dropped); the words are accessed only atomically.
    let comm = unsafe { lib.create_comm(&config) }.expect("nccom_comm_create between processes");
    eprintln!("rank {rank}: comm created in {:?}", t0.elapsed());
    let n = SIZES.len() as u32;
    let pair = common::send_recv_pair(peer as i32, peer as i32, 3, &words, &src, &mut dst, 1);
    let (send, recv, sfifo, dfifo) = (pair.send, pair.recv, pair.src, pair.dst);
    let c = comm.as_ptr();
    // SAFETY: a live comm of the library `seam` came from, used by this thread only.
    unsafe { ncclStartNetworkProxy(&seam, c, 0, 1, &[send, recv], &sfifo, &dfifo) }.expect("start");
    // The device: ready on both host indices, then post everything once each handshake is seen.
    words[0].store(NCCOM_HOST_WORD_READY, Ordering::Release);
    words[3].store(NCCOM_HOST_WORD_READY, Ordering::Release);
    let mut posted = [false; 2];
    let deadline = Instant::now() + Duration::from_secs(30);
    for tick in 0u64.. {
        assert!(
            tick < 50_000_000 && Instant::now() < deadline,
            "rank {rank}: no completion (posted {posted:?})"
        );
        for (side, (idx, hs)) in [(0, 1), (3, 4)].into_iter().enumerate() {
            if !posted[side] && words[hs].load(Ordering::Acquire) == 1 {
                assert_eq!(words[idx].load(Ordering::Acquire), 0);
                words[idx].store(n, Ordering::Release);
                posted[side] = true;
            }
        }
        let (mut idle, mut done) = (true, true);
        // SAFETY: as above.
        unsafe { ncclNetworkProxyProgress(&seam, c, 0, 1, &mut idle, &mut done) }
            .expect("progress");
        if done {
            break;
        }
        if idle {
            std::thread::yield_now();
        }
    }
    for (e, d) in dst.iter().enumerate() {
        assert!(
            d.iter().enumerate().all(|(i, &b)| b == pattern(peer, e, i)),
            "rank {rank}: entry {e} ({} bytes) differs from rank {peer}'s",
            d.len()
        );
    }
    for (hs, cpl) in [(1, 2), (4, 5)] {
        assert_eq!(words[hs].load(Ordering::Acquire), 1, "one handshake");
        assert_eq!(
            words[cpl].load(Ordering::Acquire),
            n,
            "every entry completed"
        );
    }
    assert_eq!(INC_TOTAL.load(Ordering::Relaxed), 2 * (1 + u64::from(n)));
    // SAFETY: as above.
    unsafe { ncclStopNetworkProxy(&seam, c, 0) }.expect("stop");
    comm.destroy().expect("nccom_comm_destroy");
    let bytes: usize = dst.iter().map(Vec::len).sum();
    drop((src, dst, words));
    println!("RESULT status=ok bytes={bytes}");
}

/// The entry point of the child processes (does nothing in a normal test run).
#[test]
#[ignore = "entry point of the child processes of the libfabric C-ABI test"]
fn child_entry() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let rank: u32 = std::env::var("PROXY_RANK")
            .expect("PROXY_RANK")
            .parse()
            .expect("rank");
        if std::env::var(SCENARIO_ENV).as_deref() == Ok("lost") {
            child_lost(rank);
        } else {
            child(rank);
        }
    }
}

/// The dead-peer scenario: both ranks create the comm over shm; rank 1 then exits without
/// destroying it (its bootstrap connection closes without `Bye`, as a killed process's does);
/// rank 0 files a send and a recv with rank 1 and progresses until the comm fails (at most
/// 20 s), then prints `RESULT status=<status>`.
fn child_lost(rank: u32) {
    let lib = ProgressLib::open(common::library()).expect("load libnccom_proxy.so");
    let seam = lib.seam();
    let provider = CString::new("shm").unwrap();
    let root = CString::new(std::env::var("NEURON_RT_ROOT_COMM_ID").expect("root")).unwrap();
    let words: Vec<AtomicU32> = (0..6).map(|_| AtomicU32::new(0)).collect();
    let src: Vec<Vec<u8>> = vec![vec![1u8; 4096]];
    let mut dst: Vec<Vec<u8>> = vec![vec![0u8; 4096]];
    // SAFETY: every buffer and word lives until the comm is destroyed (rank 0) or the process
    // exits (rank 1); the words are accessed only atomically.
    let comm = unsafe { lib.create_comm(&libfabric_config(rank, 2, &provider, &root, 30_000)) }
        .expect("nccom_comm_create over libfabric");
    if rank == 1 {
        println!("RESULT status=exiting");
        std::process::exit(0);
    }
    let pair = common::send_recv_pair(1, 1, 3, &words, &src, &mut dst, 1);
    let (send, recv, sfifo, dfifo) = (pair.send, pair.recv, pair.src, pair.dst);
    let c = comm.as_ptr();
    // SAFETY: a live comm of the library `seam` came from, used by this thread only.
    unsafe { ncclStartNetworkProxy(&seam, c, 0, 1, &[send, recv], &sfifo, &dfifo) }.expect("start");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        assert!(Instant::now() < deadline, "the comm never failed");
        let (mut idle, mut done) = (true, true);
        // SAFETY: as above.
        match unsafe { ncclNetworkProxyProgress(&seam, c, 0, 1, &mut idle, &mut done) } {
            Ok(()) => std::thread::sleep(Duration::from_millis(1)),
            Err(s) => break s,
        }
    };
    // SAFETY: as above.
    let _ = unsafe { ncclStopNetworkProxy(&seam, c, 0) };
    let _ = comm.destroy();
    drop((src, dst, words));
    println!("RESULT status={}", status.as_str());
}

#[test]
fn two_processes_exchange_through_the_c_abi_over_tcp() {
    exchange("tcp");
}

/// The same exchange over `NCCOM_TRANSPORT_SHM` (ABI 1.5): 1 B and 0 B inline, 4 KiB + 1 and
/// 1 MiB read across processes.
#[test]
fn two_processes_exchange_through_the_c_abi_over_own_shm() {
    exchange("own-shm");
}

/// Two child processes run [`child`] with `scenario`; both must print their byte count.
fn exchange(scenario: &str) {
    let start = Instant::now();
    let mut l = LocalLaunch::new(2, free_loopback_root().expect("root"), true);
    for r in 0..2 {
        let mut c = Command::new(std::env::current_exe().expect("test binary"));
        c.args([
            "child_entry",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(CHILD_ENV, "1")
        .env(SCENARIO_ENV, scenario)
        // tcp on the loopback interface only.
        .env("FI_TCP_IFACE", "lo")
        .env_remove("FI_PROVIDER");
        l.spawn(r, c).expect("spawn");
    }
    let exits = l.wait_all(Duration::from_secs(90));
    for e in &exits {
        let err = l.output(e.rank, OutStream::Stderr).join("\n");
        assert!(
            e.success(),
            "rank {} ended {:?} (killed at deadline: {}); stderr:\n{err}",
            e.rank,
            e.status,
            e.killed_at_deadline
        );
        let out = l.output(e.rank, OutStream::Stdout);
        let want = format!("RESULT status=ok bytes={}", SIZES.iter().sum::<usize>());
        assert!(out.contains(&want), "rank {}: {out:?}", e.rank);
    }
    eprintln!(
        "2 processes over the C ABI ({scenario}) in {:?}",
        start.elapsed()
    );
}

#[test]
fn a_dead_peer_fails_the_comm_through_the_c_abi() {
    let mut l = LocalLaunch::new(2, free_loopback_root().expect("root"), true);
    for r in 0..2 {
        let mut c = Command::new(std::env::current_exe().expect("test binary"));
        c.args([
            "child_entry",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(CHILD_ENV, "1")
        .env(SCENARIO_ENV, "lost")
        .env("FI_TCP_IFACE", "lo")
        .env("NEURON_RT_LOG_LEVEL", "ERROR")
        .env_remove("FI_PROVIDER");
        l.spawn(r, c).expect("spawn");
    }
    let pids: Vec<u32> = (0..2).filter_map(|r| l.pid(r)).collect();
    let exits = l.wait_all(Duration::from_secs(60));
    // The shm provider's regions of the process that exited without closing its comm.
    if let Ok(dir) = std::fs::read_dir("/dev/shm") {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if pids.iter().any(|p| {
                name.starts_with(&format!("{p}:")) || name.starts_with(&format!("pxyshm_{p}_"))
            }) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    for e in &exits {
        let err = l.output(e.rank, OutStream::Stderr).join("\n");
        assert!(
            e.success(),
            "rank {} ended {:?} (killed at deadline: {}); stderr:\n{err}",
            e.rank,
            e.status,
            e.killed_at_deadline
        );
    }
    let out = l.output(0, OutStream::Stdout);
    assert!(
        out.iter()
            .any(|s| s == "RESULT status=NRT_NETWORK_PROXY_FAILURE"),
        "rank 0: {out:?}"
    );
    let err = l.output(0, OutStream::Stderr).join("\n");
    assert!(
        err.contains("lost rank 1"),
        "rank 0 must name rank 1:\n{err}"
    );
}

#[test]
fn a_malformed_root_address_is_refused_at_once() {
    let lib = ProgressLib::open(common::library()).expect("load libnccom_proxy.so");
    let provider = CString::new("tcp;ofi_rxm").unwrap();
    let root = CString::new("not an address").unwrap();
    let t0 = Instant::now();
    // SAFETY: a valid config; creation fails before any address is used.
    let r = unsafe { lib.create_comm(&libfabric_config(1, 2, &provider, &root, 5_000)) };
    assert_eq!(r.err().map(|s| s.code()), Some(NRT_INVALID));
    eprintln!("refused after {:?}", t0.elapsed());
}
