//! The `nec.h` options against a broken proxy: with a planted bug of the proxy selected
//! (`proxy_core::plant`), a collective planned with the option the bug breaks does not
//! complete with the right bytes against the device program; without the plant the same run
//! does. Built with the feature `plants` only. The plant selector is process-wide: each test
//! takes [`LOCK`] and selects its plant under it.

mod blocks;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use blocks::{assert_completed, run, run_lagged, run_with, Outcome};
use proxy_collectives::planner::{Collective, DataType, PlanParams};
use proxy_core::base::status::NrtStatus;
use proxy_core::plant::{self, Plant};

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

/// Send-recv with early receive posting (2 credits) over 16 entries: every rank's sends are
/// posted at once (1 KiB each, copied into the peer's mailbox at post), and the devices lag
/// (no recv host index raised for a while after each block begins), so a receive the proxy
/// posts beyond the credits lands at once in a buffer the device has not promised.
fn send_recv_early_recv() -> PlanParams {
    let mut p = PlanParams::new(Collective::SendRecv, 4096, DataType::F32, 0, 2);
    p.chunk_bytes = 1024;
    p.nec.early_recv = 2;
    p
}

/// Polls of device lag after each block begins: the proxy handshakes and posts its early
/// receives meanwhile (each harness round ticks the proxy once and polls each device once).
const LAG: u32 = 200;

#[test]
fn without_a_plant_early_receives_keep_the_canaries() {
    let _g = Planted::select(None);
    let p = send_recv_early_recv();
    assert_completed(
        &p,
        &run_lagged(&p, 1, 2, Duration::from_secs(20), LAG),
        1,
        2,
    );
}

/// A proxy that posts one receive more than `ending_recv_credits` ahead of the host index:
/// the peer's data lands in a buffer the device has not promised; the device finds its canary
/// overwritten when it is about to promise the entry and fails the launch, naming the entry.
#[test]
fn a_proxy_that_posts_beyond_the_credits_fails_against_the_device() {
    let _g = Planted::select(Some(Plant::SendRecvPostsBeyondEndingCredits));
    let p = send_recv_early_recv();
    let out = run_lagged(&p, 1, 2, Duration::from_millis(500), LAG);
    assert!(failed(&out), "the planted run completed: {out:?}");
    let msg = format!("{:?}", out.device);
    assert!(
        msg.contains("recv entry 2: its buffer was written"),
        "{msg}"
    );
}

/// Send-recv without early send completion, 16 entries of 1 KiB (each copied into the peer's
/// mailbox at post), the devices lagging on their receives and checking each send completion
/// against the peer's receive host index.
fn send_recv_without_early_send() -> PlanParams {
    let mut p = PlanParams::new(Collective::SendRecv, 4096, DataType::F32, 0, 2);
    p.chunk_bytes = 1024;
    p
}

#[test]
fn without_a_plant_sends_complete_after_the_peer_receives() {
    let _g = Planted::select(None);
    let p = send_recv_without_early_send();
    let out = run_with(&p, 2, 1, Duration::from_secs(20), LAG, true);
    assert_completed(&p, &out, 2, 1);
}

/// A proxy that counts copied send entries complete early without `early_send_completion`:
/// its device sees a send complete while the lagging peer has not posted the receive, which
/// the transport needs to finish the send.
#[test]
fn a_proxy_that_completes_sends_early_without_the_flag_fails_against_the_device() {
    let _g = Planted::select(Some(Plant::SendRecvEarlyCompletionWithoutFlag));
    let p = send_recv_without_early_send();
    let out = run_with(&p, 1, 1, Duration::from_millis(500), LAG, true);
    assert!(failed(&out), "the planted run completed: {out:?}");
    let msg = format!("{:?}", out.device);
    assert!(
        msg.contains("counted complete while the peer had posted 0 receives"),
        "{msg}"
    );
}
