//! The event trace through C (ABI 1.4; docs/tracing.md, "The C libraries"): start and stop
//! recording in this library and in every progress half it loaded, and write one timeline of
//! both (the progress half's records come over the nccom ABI's `nccom_trace_collect`, ABI 1.3)
//! as Chrome Trace JSON through `proxy-trace`, the writer `proxy-perf --trace` uses.
//! `NEURON_RT_PROXY_TRACE=FILE` (`%r`: one file per rank) starts recording at the first
//! `nrt_proxy_init` and writes FILE when the last instance is finished (`nrt_proxy_fini`);
//! `NEURON_RT_PROXY_TRACE_MASK` picks the classes.

use std::ffi::c_char;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use proxy_abi::*;
use proxy_core::base::status::NrtStatus;
use proxy_core::base::trace::{Drained, Record};
use proxy_runtime::loader::ProgressLib;
use proxy_trace::Trace;

use proxy_abi::boundary::c_string;
use proxy_abi::entry;

use crate::libs::loaded_libs;
use crate::types::NrtProxyTraceSummary;

/// What started recording: the classes and ring size (for a progress half loaded later).
#[derive(Clone, Copy, Debug, Default)]
struct Started {
    mask: u32,
    capacity: usize,
}

static STARTED: Mutex<Option<Started>> = Mutex::new(None);
/// `NEURON_RT_PROXY_TRACE`'s file pattern, written at the last `nrt_proxy_fini` (also after an
/// `nrt_proxy_trace_stop`).
static ENV_FILE: Mutex<Option<PathBuf>> = Mutex::new(None);
/// `NEURON_RT_PROXY_TRACE` is read once per process.
static ENV_READ: Mutex<bool> = Mutex::new(false);

/// Starts the progress half `lib` when recording is on (a half loaded after the start).
pub(crate) fn on_load(what: &str, lib: &ProgressLib) {
    let started = *STARTED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(s) = started {
        if let Err(e) = lib.trace_start(s.mask, s.capacity) {
            log::warn!("{what}: the progress half's events are not recorded: {e}");
        }
    }
}

/// At `nrt_proxy_init`: reads `NEURON_RT_PROXY_TRACE` / `_MASK` (once per process) and starts
/// recording when set.
///
/// # Errors
/// `NrtStatus::Invalid` for a bad mask (logged).
pub(crate) fn start_from_env(what: &str) -> Result<(), NrtStatus> {
    let mut read = ENV_READ.lock().unwrap_or_else(PoisonError::into_inner);
    if *read {
        return Ok(());
    }
    let env = proxy_trace::from_env().map_err(|e| {
        log::error!("{what}: {e}");
        NrtStatus::Invalid
    })?;
    *read = true;
    if let Some((file, mask)) = env {
        start(what, mask, 0)?;
        *ENV_FILE.lock().unwrap_or_else(PoisonError::into_inner) = Some(file.clone());
        log::info!(
            "{what}: recording events (mask {mask:#x}) into {}",
            file.display()
        );
    }
    Ok(())
}

/// At the last `nrt_proxy_fini`: writes the environment's file, if any (logged).
pub(crate) fn write_env_file(what: &str) {
    let file = ENV_FILE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if let Some(file) = file {
        match write(&file) {
            Ok(s) => log_written(what, &file, &s),
            Err(e) => log::error!("{what}: {}: {e}", proxy_trace::TRACE_ENV),
        }
    }
}

fn log_written(what: &str, file: &std::path::Path, s: &NrtProxyTraceSummary) {
    if s.dropped > 0 {
        log::warn!(
            "{what}: trace {}: {} events, {} dropped (the ring was full: truncated)",
            file.display(),
            s.records,
            s.dropped
        );
    } else {
        log::info!("{what}: trace {}: {} events", file.display(), s.records);
    }
}

fn start(what: &str, mask: u32, capacity: usize) -> Result<(), NrtStatus> {
    proxy_trace::start(mask, capacity).map_err(|e| {
        log::error!("{what}: {e}");
        NrtStatus::Failure
    })?;
    *STARTED.lock().unwrap_or_else(PoisonError::into_inner) = Some(Started { mask, capacity });
    for lib in loaded_libs() {
        on_load(what, lib);
    }
    Ok(())
}

/// Every record of this library and of every progress half loaded, as one [`Trace`].
fn merged() -> Trace {
    let mut records: Vec<Record> = Vec::new();
    let mut drained = Drained::default();
    if let Some(t) = proxy_core::base::trace::installed() {
        let (r, d) = proxy_trace::drain(t);
        records.extend(r);
        drained = d;
    }
    for lib in loaded_libs() {
        match lib.trace_collect() {
            Ok((recs, c)) => {
                records.extend(recs.iter().filter_map(proxy_trace::c_record::from_c));
                drained = proxy_trace::add_counts(
                    drained,
                    Drained {
                        records: c.written as usize,
                        pending: c.pending as usize,
                        dropped: c.dropped as usize,
                    },
                );
            }
            Err(e) => log::warn!("the progress half's events are left out: {e}"),
        }
    }
    let mut threads = proxy_trace::thread_names();
    for r in &records {
        threads.entry(r.thread).or_insert_with(|| {
            proxy_trace::os_thread_name(r.thread).unwrap_or_else(|| format!("thread {}", r.thread))
        });
    }
    Trace::new(records, threads, drained)
}

/// Writes the merged timeline to `pattern`.
fn write(pattern: &std::path::Path) -> Result<NrtProxyTraceSummary, String> {
    let t = merged();
    let files = proxy_trace::write(pattern, &t, &t.ranks(), "libnrt_proxy.so")?;
    Ok(NrtProxyTraceSummary {
        records: t.drained.records as u64,
        pending: t.drained.pending as u64,
        dropped: t.drained.dropped as u64,
        files: files.len() as u64,
    })
}

/// Starts recording events in this library and in the progress half (now, and in a progress
/// half loaded later): the classes of `mask` (`NCCOM_TRACE_*` ORed; 0: `NCCOM_TRACE_OPS`, where
/// each op and collective begins and ends, a few events each; `NCCOM_TRACE_ALL`: everything,
/// with the handshake / transfer steps, every post and completion) into a ring of
/// `capacity` records per library (0: 262144; 80 bytes each, allocated at the first start;
/// later starts keep the size). A full ring drops new events and counts them. Another start
/// changes the classes. While off, an event site costs one load and a branch.
///
/// Returns `NRT_SUCCESS`; `NRT_FAILURE` when no tracer could be installed. A progress half that
/// predates `nccom_trace_start` (nccom ABI 1.3) is logged and left out.
///
/// Seed: none (ABI 1.4).
#[no_mangle]
pub extern "C" fn nrt_proxy_trace_start(mask: u32, capacity: usize) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_trace_start", {
        start(WHAT, mask, capacity)
    })
}

/// Stops recording in this library and in every progress half loaded; the events stay for
/// `nrt_proxy_trace_write`.
///
/// Returns `NRT_SUCCESS`.
///
/// Seed: none (ABI 1.4).
#[no_mangle]
pub extern "C" fn nrt_proxy_trace_stop() -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_trace_stop", {
        proxy_trace::stop();
        for lib in loaded_libs() {
            if let Err(e) = lib.trace_stop() {
                log::warn!("{WHAT}: {e}");
            }
        }
        *STARTED.lock().unwrap_or_else(PoisonError::into_inner) = None;
        Ok(())
    })
}

/// Writes the events recorded so far by this library and the progress half as one Chrome
/// Trace Event JSON timeline (open it in Perfetto, `chrome://tracing`): one process per rank,
/// one track per thread, op and task spans (docs/tracing.md). `path` with `%r` writes one file
/// per rank (`%r` replaced by the rank). Call it after `nrt_proxy_trace_stop` for a complete
/// timeline (while recording, events under way are counted `pending`). Does not empty the
/// rings: a second write writes them again. `*summary` (may be NULL) gets the counts; its
/// `dropped` (also `otherData.dropped` in the file) is not 0 when a ring was full and the
/// timeline is truncated.
///
/// A file, not a buffer: a timeline of a long run is many megabytes of JSON that a runtime
/// hands to a viewer, not parses, and its size changes while recording runs.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a NULL or empty `path`; `NRT_FAILURE` when a file
/// cannot be written (the log names it).
///
/// # Safety
/// `path` NUL-terminated; `summary` NULL or writable.
///
/// Seed: none (ABI 1.4).
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_trace_write(
    path: *const c_char,
    summary: *mut NrtProxyTraceSummary,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_trace_write", {
        // SAFETY: the C contract (NULL or NUL-terminated).
        let Some(path) = unsafe { c_string(WHAT, "path", path) }?.filter(|p| !p.is_empty()) else {
            log::error!("{WHAT}: NULL or empty path");
            return Err(NrtStatus::Invalid);
        };
        if !summary.is_null() && !summary.is_aligned() {
            log::error!("{WHAT}: misaligned summary ({summary:p})");
            return Err(NrtStatus::Invalid);
        }
        let path = PathBuf::from(path);
        let s = write(&path).map_err(|e| {
            log::error!("{WHAT}: {e}");
            NrtStatus::Failure
        })?;
        log_written(WHAT, &path, &s);
        if !summary.is_null() {
            // SAFETY: non-null, aligned, writable by the caller's contract.
            unsafe { summary.write(s) };
        }
        Ok(())
    })
}
