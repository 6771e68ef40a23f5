//! The event trace of this library's copy of the core (ABI 1.3; docs/tracing.md): start, stop,
//! and `nccom_trace_collect`, through which the driver library (`libnrt_proxy.so`) merges
//! these records into its timeline. `NEURON_RT_PROXY_TRACE` set starts recording at the first
//! `nccom_comm_create` (classes from `NEURON_RT_PROXY_TRACE_MASK`); this library writes no
//! file itself: the driver library, or a caller of `nccom_trace_collect`, does.

use std::sync::Once;

use proxy_abi::*;
use proxy_core::base::status::NrtStatus;
use proxy_core::base::trace;

use proxy_abi::entry;

/// Starts recording when `NEURON_RT_PROXY_TRACE` is set (once per process; a bad mask is
/// logged and recording stays off).
pub(crate) fn start_from_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| match proxy_trace::from_env() {
        Ok(Some((_, mask))) => {
            if let Err(e) = proxy_trace::start(mask, 0) {
                log::error!("{}: {e}", proxy_trace::TRACE_ENV);
            }
        }
        Ok(None) => {}
        Err(e) => log::error!("{e}"),
    });
}

/// Starts recording this library's events: installs its tracer at the first call (a ring of
/// `capacity` records, 0: 262144; 80 bytes each, allocated then; later calls keep the first
/// size) and records the classes of `mask` (`NCCOM_TRACE_*` ORed; 0: `NCCOM_TRACE_OPS`). A
/// second start changes the classes. Recording costs one load and a branch per event site
/// while off.
///
/// Returns `NRT_SUCCESS`; `NRT_FAILURE` when no tracer could be installed.
///
/// Seed: none (ABI 1.3).
#[no_mangle]
pub extern "C" fn nccom_trace_start(mask: u32, capacity: usize) -> NRT_STATUS {
    entry!(WHAT = "nccom_trace_start", {
        proxy_trace::start(mask, capacity).map_err(|e| {
            log::error!("{WHAT}: {e}");
            NrtStatus::Failure
        })?;
        Ok(())
    })
}

/// Stops recording (the records stay for `nccom_trace_collect`); a no-op when never started.
///
/// Returns `NRT_SUCCESS`.
///
/// Seed: none (ABI 1.3).
#[no_mangle]
pub extern "C" fn nccom_trace_stop() -> NRT_STATUS {
    entry!(WHAT = "nccom_trace_stop", {
        let _ = WHAT;
        proxy_trace::stop();
        Ok(())
    })
}

/// Copies the recorded events, in the order they were claimed (timestamps may be slightly out
/// of order between threads), into `out[0 .. cap]` and the counts into `*counts`: `records` in
/// the ring, `written` copied (at most `cap`), `pending` (claimed, not yet published: recording
/// was under way), `dropped` (lost because the ring was full: the trace is truncated). Call it
/// with `cap` 0 (`out` may then be NULL) to learn `records`, then with an array that large. May
/// run while recording; does not empty the ring. Without a start: all counts 0.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a NULL or misaligned `counts`, or a NULL or
/// misaligned `out` with `cap` above 0 (nothing written).
///
/// # Safety
/// `counts` writable; `out` NULL or `cap` writable `nccom_trace_record_t`s.
///
/// Seed: none (ABI 1.3).
#[no_mangle]
pub unsafe extern "C" fn nccom_trace_collect(
    out: *mut NccomTraceRecord,
    cap: usize,
    counts: *mut NccomTraceCounts,
) -> NRT_STATUS {
    entry!(WHAT = "nccom_trace_collect", {
        if counts.is_null() || !counts.is_aligned() {
            log::error!("{WHAT}: NULL or misaligned counts ({counts:p})");
            return Err(NrtStatus::Invalid);
        }
        if cap > 0 && (out.is_null() || !out.is_aligned()) {
            log::error!("{WHAT}: NULL or misaligned out ({out:p}) with cap {cap}");
            return Err(NrtStatus::Invalid);
        }
        let mut c = NccomTraceCounts::default();
        if let Some(t) = trace::installed() {
            // Times re-fitted to CLOCK_MONOTONIC now, as the driver library's own.
            let (records, d) = proxy_trace::drain(t);
            let written = records.len().min(cap);
            for (i, r) in records.iter().take(written).enumerate() {
                // SAFETY: `out` has `cap` writable records (the caller's contract), `i < cap`.
                unsafe { out.add(i).write(proxy_trace::c_record::to_c(r)) };
            }
            c = NccomTraceCounts {
                records: d.records as u64,
                written: written as u64,
                pending: d.pending as u64,
                dropped: d.dropped as u64,
            };
        }
        // SAFETY: non-null and aligned, writable by the caller's contract.
        unsafe { counts.write(c) };
        Ok(())
    })
}
