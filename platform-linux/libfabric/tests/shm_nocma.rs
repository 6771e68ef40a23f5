//! shm without CMA (docs/design.md §5, "shm without CMA"): the detection, and the post order
//! that deadlocks under shm's SAR protocol.
//!
//! One test, in a test binary of its own: `FI_SHM_DISABLE_CMA=1` must be set before the
//! process's first libfabric call (libfabric reads its parameters when it initializes).
//!
//! Every wait is bounded by wall time.

use std::time::{Duration, Instant};

use proxy_core::progress::net::{make_tag, RequestId, TestOutcome, Transport};
use proxy_libfabric::shm_cma::{self, SAR_THRESHOLD};
use proxy_libfabric::{LibfabricTransport, Options};

/// Bound of every wait.
const LIMIT: Duration = Duration::from_secs(20);
/// Size of the test's messages: far above shm's inject size (4096 B), so SAR or mmap or CMA.
const SIZE: usize = 1 << 20;

/// Polls both endpoints and runs `step` until it answers true; panics after [`LIMIT`].
fn drive(
    what: &str,
    ts: &mut [LibfabricTransport; 2],
    mut step: impl FnMut(&mut [LibfabricTransport; 2]) -> bool,
) {
    let start = Instant::now();
    loop {
        for t in ts.iter_mut() {
            t.poll().unwrap_or_else(|e| panic!("{what}: poll: {e}"));
        }
        if step(ts) {
            return;
        }
        assert!(start.elapsed() < LIMIT, "{what}: not done within {LIMIT:?}");
        std::thread::yield_now();
    }
}

/// Posts a send from rank 0 to rank 1, retrying on back-pressure (bounded).
fn send(ts: &mut [LibfabricTransport; 2], buf: &[u8], tag: u64) -> RequestId {
    let mut id = None;
    drive("post send", ts, |ts| {
        // SAFETY: `buf` outlives the request (the test waits for every request).
        match unsafe { ts[0].isend(1, buf.as_ptr(), buf.len() as u64, tag) } {
            Ok(Some(p)) => {
                id = Some(p.request);
                true
            }
            Ok(None) => false,
            Err(e) => panic!("isend: {e}"),
        }
    });
    id.expect("posted")
}

/// Posts a receive at rank 1 from rank 0 (bounded).
fn recv(ts: &mut [LibfabricTransport; 2], buf: &mut [u8], tag: u64) -> RequestId {
    let mut id = None;
    drive("post recv", ts, |ts| {
        // SAFETY: `buf` outlives the request and is not touched until it finished.
        match unsafe { ts[1].irecv(0, buf.as_mut_ptr(), buf.len() as u64, tag) } {
            Ok(Some(p)) => {
                id = Some(p.request);
                true
            }
            Ok(None) => false,
            Err(e) => panic!("irecv: {e}"),
        }
    });
    id.expect("posted")
}

/// Waits until `id` at `at` is done; returns its size.
fn wait(ts: &mut [LibfabricTransport; 2], at: usize, id: RequestId) -> u64 {
    let mut size = None;
    drive("wait", ts, |ts| match ts[at].test(id) {
        Ok(TestOutcome::Pending) => false,
        Ok(TestOutcome::Done { size: s }) => {
            size = Some(s);
            true
        }
        other => panic!("request {id:?} at rank {at}: {other:?}"),
    });
    size.expect("done")
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

#[test]
fn no_cma_is_detected_and_a_later_send_is_not_held_behind_an_unmatched_one() {
    // Without the variable: the probe decides. This machine's answer depends on its kernel;
    // what must hold is that the variable is not named, and that "available" means the
    // process_vm_readv probe passed.
    std::env::remove_var("FI_SHM_DISABLE_CMA");
    std::env::remove_var("FI_SHM_SAR_THRESHOLD");
    let (cma, why) = shm_cma::detect_cma();
    assert!(!why.contains("FI_SHM_DISABLE_CMA"), "{why}");
    if cma {
        assert_eq!(shm_cma::probe_process_vm_readv(), Ok(()));
        assert!(why.starts_with("process_vm_readv works"), "{why}");
    }
    // "0" is libfabric's false: CMA stays as probed.
    std::env::set_var("FI_SHM_DISABLE_CMA", "0");
    assert_eq!(shm_cma::detect_cma().0, cma);

    // Forced off, as libfabric reads it (any of its true spellings).
    std::env::set_var("FI_SHM_DISABLE_CMA", "yes");
    assert_eq!(
        shm_cma::detect_cma(),
        (false, "FI_SHM_DISABLE_CMA=yes".to_owned())
    );
    std::env::set_var("FI_SHM_DISABLE_CMA", "1");
    let d = shm_cma::detect();
    assert!(!d.cma);
    assert_eq!(d.cma_reason, "FI_SHM_DISABLE_CMA=1");
    assert_eq!(d.sar_threshold, None, "nothing has set it yet");
    assert_eq!(d.path(), "sar", "what libfabric alone would do");

    // The first open prepares the provider: mmap instead of SAR.
    let opts = Options {
        provider: Some("shm".to_owned()),
        ..Options::default()
    };
    let a = LibfabricTransport::open_with(0, 2, &opts).expect("open rank 0");
    let b = LibfabricTransport::open_with(1, 2, &opts).expect("open rank 1");
    assert_eq!(
        std::env::var("FI_SHM_SAR_THRESHOLD").as_deref(),
        Ok(SAR_THRESHOLD.to_string().as_str())
    );
    let prepared = shm_cma::shm_large_messages().expect("prepared at open");
    assert_eq!(prepared.path(), "mmap");
    for t in [&a, &b] {
        assert_eq!(
            t.attrs().shm_large_messages.as_deref(),
            Some("mmap (CMA unavailable: FI_SHM_DISABLE_CMA=1)")
        );
        let name = t.local_name();
        let name = String::from_utf8_lossy(name.split(|&c| c == 0).next().unwrap_or(&[]));
        assert!(name.starts_with("pxyshm_") && !name.contains('/'), "{name}");
    }
    let names = vec![a.local_name(), b.local_name()];
    let mut ts = [a, b];
    for t in &mut ts {
        t.connect(&names).expect("connect");
    }

    // The order that deadlocks under SAR: rank 0 sends A then B; rank 1 receives B first, and
    // A only after B arrived. SAR answers -FI_EAGAIN to B while A is unanswered, and A is
    // answered only once rank 1 posts its receive: B would never be posted.
    let tag_a = make_tag(7, 0, 0, 1, 0);
    let tag_b = make_tag(7, 0, 0, 2, 0);
    let (data_a, data_b) = (pattern(1, SIZE), pattern(2, SIZE));
    let (mut got_a, mut got_b) = (vec![0u8; SIZE], vec![0u8; SIZE]);
    let send_a = send(&mut ts, &data_a, tag_a);
    let send_b = send(&mut ts, &data_b, tag_b);
    let recv_b = recv(&mut ts, &mut got_b, tag_b);
    assert_eq!(wait(&mut ts, 1, recv_b), SIZE as u64);
    assert!(got_b == data_b, "B's bytes differ");
    let recv_a = recv(&mut ts, &mut got_a, tag_a);
    assert_eq!(wait(&mut ts, 1, recv_a), SIZE as u64);
    assert!(got_a == data_a, "A's bytes differ");
    assert_eq!(wait(&mut ts, 0, send_a), SIZE as u64);
    assert_eq!(wait(&mut ts, 0, send_b), SIZE as u64);
    for t in &mut ts {
        t.close().expect("close");
    }
}
