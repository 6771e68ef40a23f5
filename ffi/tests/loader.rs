//! `proxy-runtime`'s loader against the real `libnccom_proxy.so` (this crate's library, built by
//! cargo for its tests), and against a library that is not a progress half. The tests live here,
//! not in `proxy-runtime`, so that no crate has a dev-dependency cycle through `proxy-ffi`.

mod common;

use proxy_abi::{
    NccomCommConfig, NccomDeviceCallbacks, NccomHostWord, NccomLibfabricDesc, NccomTransportDesc,
    NCCOM_HOST_WORD_READY, NCCOM_PROXY_ABI_VERSION_MAJOR, NCCOM_TRANSPORT_MEM,
};
use proxy_core::base::status::NrtStatus;
use proxy_core::progress::stats::ProtocolStats;
use proxy_runtime::loader::{
    ncclNetworkProxyProgress, ncclStartNetworkProxy, ncclStopNetworkProxy, LoadError, ProgressLib,
};
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

#[test]
fn a_library_without_the_seam_is_refused_naming_symbol_and_path() {
    let err = ProgressLib::open("libc.so.6").unwrap_err();
    match &err {
        LoadError::MissingSymbol { path, symbol, .. } => {
            assert_eq!(path, Path::new("libc.so.6"));
            assert_eq!(*symbol, "neuronStartNetworkProxy");
        }
        e => panic!("expected MissingSymbol, got {e:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("neuronStartNetworkProxy") && text.contains("libc.so.6"),
        "{text}"
    );
}

#[test]
fn a_missing_file_is_refused_naming_the_path() {
    let err = ProgressLib::open("/nonexistent/libnccom_proxy.so").unwrap_err();
    assert!(matches!(err, LoadError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains("/nonexistent/libnccom_proxy.so"));
}

#[test]
fn the_real_library_loads_with_its_seam_and_init_half() {
    let lib = ProgressLib::open(common::library()).unwrap();
    assert_eq!(lib.abi_version() >> 16, NCCOM_PROXY_ABI_VERSION_MAJOR);
    assert_eq!(lib.status_str(0), "NRT_SUCCESS");
    assert_eq!(lib.status_str(1206), "NRT_NETWORK_PROXY_FAILURE");
    assert_eq!(lib.status_str(77), "NRT_UNKNOWN_STATUS");
    let seam = lib.seam();
    let (mut idle, mut done) = (true, true);
    // SAFETY: the library checks the handle; NULL is never dereferenced.
    let r = unsafe { ncclNetworkProxyProgress(&seam, ptr::null_mut(), 0, 1, &mut idle, &mut done) };
    assert_eq!(r, Err(NrtStatus::InvalidHandle));
    // ABI 1.1's stepped stop is found, so loaded comms' network tasks tear down off the tick.
    assert!(
        seam.stop_step.is_some(),
        "neuronStopNetworkProxyStep resolved"
    );
    // SAFETY: as above.
    let r = unsafe { seam.stop_step(ptr::null_mut(), 0) };
    assert_eq!(r, Err(NrtStatus::InvalidHandle));
    assert!(format!("{lib:?}").contains("libnccom_proxy.so"));
}

// ---- send/recv through the loaded seam, with a device played by this test ----

static INC_CALLS: AtomicU32 = AtomicU32::new(0);
static INC_TOTAL: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn inc(addr: *mut NccomHostWord, val: u32) {
    INC_CALLS.fetch_add(1, Ordering::Relaxed);
    INC_TOTAL.fetch_add(u64::from(val), Ordering::Relaxed);
    // SAFETY: the proxy passes the semaphore addresses this test gave it: live AtomicU32s.
    unsafe { AtomicU32::from_ptr(addr) }.fetch_add(val, Ordering::Release);
}

const SIZES: [usize; 4] = [1, 4097, 256 * 1024, 0];

fn pattern(e: usize, i: usize) -> u8 {
    ((e * 31 + i) % 251) as u8
}

#[test]
fn send_recv_through_the_loaded_seam() {
    let lib = ProgressLib::open(common::library()).unwrap();
    let seam = lib.seam();
    let group = lib.mem_group(2).unwrap();
    let callbacks = NccomDeviceCallbacks {
        nec_inc_semaphore: Some(inc),
        nec_load_host_index: None,
        nec_store_host_index: None,
    };
    let config = |rank: u32| NccomCommConfig {
        rank,
        nranks: 2,
        comm_id: 9,
        flags: 0,
        transport: NccomTransportDesc {
            kind: NCCOM_TRANSPORT_MEM,
            reserved: 0,
            mem_group: group.as_ptr(),
            libfabric: NccomLibfabricDesc {
                provider: ptr::null(),
                root_addr: ptr::null(),
                bootstrap_timeout_ms: 0,
            },
        },
        callbacks: &callbacks,
        drain_limit_ns: 0,
    };
    // Host words: [send idx, send hs, send cpl, recv idx, recv hs, recv cpl].
    let words: Vec<AtomicU32> = (0..6).map(|_| AtomicU32::new(0)).collect();
    let src: Vec<Vec<u8>> = SIZES
        .iter()
        .enumerate()
        .map(|(e, &n)| (0..n).map(|i| pattern(e, i)).collect())
        .collect();
    let mut dst: Vec<Vec<u8>> = SIZES.iter().map(|&n| vec![0xEE; n]).collect();
    // SAFETY: every buffer and word lives until the comms are destroyed (they are dropped at the
    // end of this function, before `words`, `src` and `dst`, which were declared earlier).
    let comms = unsafe {
        [
            lib.create_comm(&config(0)).unwrap(),
            lib.create_comm(&config(1)).unwrap(),
        ]
    };
    let n = SIZES.len() as u32;
    let pair = common::send_recv_pair(1, 0, 2, &words, &src, &mut dst, 0);
    let (send, recv, sfifo, dfifo) = (pair.send, pair.recv, pair.src, pair.dst);
    let (c0, c1) = (comms[0].as_ptr(), comms[1].as_ptr());
    // SAFETY: live comms of the library `seam` came from, used by this thread only.
    unsafe {
        ncclStartNetworkProxy(&seam, c0, 3, 5, &[send], &sfifo, &[]).unwrap();
        ncclStartNetworkProxy(&seam, c1, 3, 5, &[recv], &[], &dfifo).unwrap();
        assert_eq!(
            ncclStartNetworkProxy(&seam, c0, 4, 5, &[send], &sfifo, &[]),
            Err(NrtStatus::Invalid),
            "stream 4"
        );
    }
    // The device: -1 on both host indices, then post everything once the handshake is seen.
    words[0].store(NCCOM_HOST_WORD_READY, Ordering::Release);
    words[3].store(NCCOM_HOST_WORD_READY, Ordering::Release);
    let mut posted = [false; 2];
    let mut comm_done = [false; 2];
    for tick in 0.. {
        assert!(tick < 1_000_000, "no completion");
        for (side, (idx, hs)) in [(0, 1), (3, 4)].into_iter().enumerate() {
            if !posted[side] && words[hs].load(Ordering::Acquire) == 1 {
                assert_eq!(words[idx].load(Ordering::Acquire), 0);
                words[idx].store(n, Ordering::Release);
                posted[side] = true;
            }
        }
        for (r, c) in [c0, c1].into_iter().enumerate() {
            if comm_done[r] {
                continue;
            }
            let (mut idle, mut done) = (true, true);
            // SAFETY: as above.
            unsafe { ncclNetworkProxyProgress(&seam, c, 3, 5, &mut idle, &mut done) }.unwrap();
            comm_done[r] = done;
        }
        if comm_done == [true; 2] {
            break;
        }
    }
    assert_eq!(dst, src, "bytes");
    for (hs, cpl) in [(1, 2), (4, 5)] {
        assert_eq!(words[hs].load(Ordering::Acquire), 1, "one handshake");
        assert_eq!(
            words[cpl].load(Ordering::Acquire),
            n,
            "every entry completed"
        );
    }
    assert_eq!(INC_TOTAL.load(Ordering::Relaxed), 2 * (1 + u64::from(n)));
    assert!(INC_CALLS.load(Ordering::Relaxed) >= 4);
    for c in [c0, c1] {
        let (mut idle, mut done) = (true, true);
        // SAFETY: as above.
        unsafe {
            ncclStopNetworkProxy(&seam, c, 3).unwrap();
            ncclNetworkProxyProgress(&seam, c, 3, 5, &mut idle, &mut done).unwrap();
        }
        assert!(idle && done, "progress after stop is idle and done");
    }
    // The ABI 1.1 entries through the loader: invalidate checks its range, abort is applied
    // at the comm's next progress.
    assert_eq!(
        comms[0].invalidate_range(dst[0].as_ptr(), dst[0].len()),
        Ok(())
    );
    assert_eq!(
        comms[0].invalidate_range(ptr::null(), 8),
        Err(NrtStatus::Invalid)
    );
    // ABI 1.2: the protocol counters through the loader. One start per comm; the device
    // posted every entry at once, so the sending op had at most all of them in flight.
    let (tx, rx) = (
        comms[0].protocol_stats().unwrap(),
        comms[1].protocol_stats().unwrap(),
    );
    assert_eq!(tx.size as usize, std::mem::size_of::<ProtocolStats>());
    assert_eq!(
        (tx.starts, rx.starts),
        (1, 1),
        "the rejected start does not count"
    );
    assert!(
        (1..=u64::from(n)).contains(&tx.peak_outstanding_send),
        "{tx:?}"
    );
    assert!(
        (1..=u64::from(n)).contains(&rx.peak_outstanding_recv),
        "{rx:?}"
    );
    assert_eq!((tx.peak_outstanding_recv, rx.peak_outstanding_send), (0, 0));
    assert_eq!(tx.early_send_completions, 0, "no early_send_completion");
    assert_eq!((rx.recvs_posted_ahead, rx.index_wraps), (0, 0));
    assert_eq!(comms[1].abort(), Ok(()));
    let (mut idle, mut done) = (true, true);
    // SAFETY: as above.
    let r = unsafe { ncclNetworkProxyProgress(&seam, c1, 3, 5, &mut idle, &mut done) };
    assert_eq!(r, Err(NrtStatus::Closed), "the abort, applied");
    let [a, b] = comms;
    a.destroy().unwrap();
    drop(b);
    drop(group);
    // SAFETY: the handle was destroyed: the library answers without dereferencing it.
    let r = unsafe { ncclStopNetworkProxy(&seam, c0, 0) };
    assert_eq!(r, Err(NrtStatus::InvalidHandle));
}
