//! The `nec.h` options against a broken proxy: with a planted bug of the proxy selected
//! (`proxy_core::plant`), a collective planned with the option the bug breaks does not
//! complete with the right bytes against the device program; without the plant the same run
//! does. Built with the feature `plants` only. The plant selector is process-wide: each test
//! takes [`LOCK`] and selects its plant under it.

mod blocks;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use blocks::{assert_completed, run, Outcome};
use proxy_collectives::planner::{Collective, DataType, PlanParams};
use proxy_core::plant::{self, Plant};
use proxy_core::status::NrtStatus;

static LOCK: Mutex<()> = Mutex::new(());

/// Selects `plant` for the life of the guard (none again after it).
struct Planted(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Planted {
    fn select(p: Option<Plant>) -> Self {
        let g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        plant::set(p);
        Self(g)
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        plant::set(None);
    }
}

fn send_recv_with_wrap() -> PlanParams {
    let mut p = PlanParams::new(Collective::SendRecv, 4096, DataType::F32, 0, 2);
    p.chunk_bytes = 1024; // 16 entries per op side against a wrap of 4
    p.streams = 2;
    p.nec.idx_wrap = 4;
    p
}

/// `true` when a run did not complete: a device failed or a task ended without success, or
/// an output byte is wrong.
fn failed(out: &Outcome) -> bool {
    out.device.iter().flatten().any(Result::is_err)
        || out
            .status
            .iter()
            .flatten()
            .any(|v| v.len() != 2 || v.iter().any(|s| *s != NrtStatus::Success))
        || out.wrong.iter().any(|&w| w > 0)
}

#[test]
fn without_a_plant_the_options_complete() {
    let _g = Planted::select(None);
    let p = send_recv_with_wrap();
    assert_completed(&p, &run(&p, 1, 2, Duration::from_secs(20)), 1, 2);
}

/// A proxy that reads the host index as if it never wrapped sees a huge delta once the
/// device's index wraps: the op fails (`NRT_HW_ERROR`), and the device never sees its entries
/// complete.
#[test]
fn a_proxy_that_ignores_the_index_wrap_fails_against_the_device() {
    let _g = Planted::select(Some(Plant::SendRecvIgnoresIndexWrap));
    let p = send_recv_with_wrap();
    let out = run(&p, 1, 2, Duration::from_millis(500));
    assert!(failed(&out), "the planted run completed: {out:?}");
    assert!(out.device.iter().flatten().any(Result::is_err), "{out:?}");
}
