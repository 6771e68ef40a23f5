//! Library instances: `nrt_proxy_init` (the progress half located, loaded once per name and its
//! ABI major checked; the registry of proxy queues built), `nrt_proxy_fini`, and the progress
//! half's process-wide device callbacks.

use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError};

use proxy_abi::*;
use proxy_core::base::status::NrtStatus;
use proxy_runtime::dump::{dump_all, DumpSignal, SIGNAL_DUMP_WAIT};
use proxy_runtime::loader::ProgressLib;
use proxy_runtime::Config;

use proxy_abi::boundary::{c_handle_out, c_in, c_string, insert_live};
use proxy_abi::entry;

use crate::config::{default_config, resolve_config};
use crate::handles::{instance_id, instance_of, remove_live_retrying, INSTANCES};
use crate::libs::{DEFAULT_LIB, LIBS};
use crate::locate;
use crate::objects::Instance;
use crate::types::*;

/// The environment variable naming the progress half to load when the config does not.
pub const PROGRESS_LIB_ENV: &str = "NEURON_RT_PROXY_PROGRESS_LIB";
/// The progress half loaded when neither the config nor the environment names one: its SONAME.
pub const PROGRESS_LIB_SONAME: &str = "libnccom_proxy.so.1";

/// The variables `nrt_proxy_init` reads from the process environment itself: the process-wide
/// settings the C configuration has no field for (libnrt reads them at init).
const INIT_ENV: [&str; 2] = [
    "NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY",
    "NEURON_RT_PROXY_DUMP_SIGNAL",
];

/// Loads (once per name) the first of `names` that opens as a progress half of this ABI major
/// (`locate.rs` gives the order); logs at INFO which one it took.
///
/// # Errors
/// `NrtStatus::Invalid` when none does; the log names every one tried and why it failed.
fn load_first_progress_lib(
    what: &str,
    names: Vec<PathBuf>,
) -> Result<&'static ProgressLib, NrtStatus> {
    let mut libs = LIBS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut failures = Vec::new();
    for name in names {
        if let Some((_, lib)) = libs.iter().find(|(n, _)| *n == name) {
            return Ok(lib);
        }
        match ProgressLib::open(&name) {
            Ok(lib) => {
                let lib = lib.leak();
                log::info!("{what}: progress half {}", name.display());
                libs.push((name, lib));
                let _ = DEFAULT_LIB.set(lib);
                return Ok(lib);
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    log::error!(
        "{what}: cannot load the progress half (set config.progress_lib or {PROGRESS_LIB_ENV}, \
         or install {PROGRESS_LIB_SONAME} beside libnrt_proxy.so): {}",
        failures.join("; ")
    );
    Err(NrtStatus::Invalid)
}

/// Creates a library instance from `*config` (NULL: the defaults): loads the progress half
/// (`config->progress_lib`, else `$NEURON_RT_PROXY_PROGRESS_LIB`, else `libnccom_proxy.so.1`
/// beside this library, else `libnccom_proxy.so.1` by the dynamic linker's search: `locate.rs`;
/// each name is loaded once per process and never unloaded), checks that its
/// `nccom_abi_version()` major is `NCCOM_PROXY_ABI_VERSION_MAJOR`, builds the registry of proxy
/// queues, logs the versions and the resolved configuration (`INFO`), and stores the handle in
/// `*out` (NULL on failure). Several instances may live at once; the first progress half loaded
/// is the one the exported trampolines call.
///
/// Two process-wide settings come from the environment, as libnrt reads them at init, whatever
/// the config: `NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY` (a CPU list like `0,2-3`: each new
/// proxy queue's worker thread is pinned to the next CPU of the list, round robin) and
/// `NEURON_RT_PROXY_DUMP_SIGNAL` (`USR1` or `USR2`: the signal dumps every proxy queue of this
/// instance to the log, from a watcher thread; `nrt_proxy_fini` removes the handler once
/// nothing holds the instance). `NEURON_RT_PROXY_IDLE` (`yield`, the default, or `block`): with
/// `block`, the driving thread of a proxy queue that serves one libfabric comm whose provider
/// has a completion-queue descriptor (tcp; not shm) blocks on it when it has nothing to do
/// instead of yielding (at most 1 ms per sleep; not while the comm's barrier between processes
/// waits; needs a progress half of ABI 1.4). With `NEURON_RT_PROXY_TRACE=FILE` set at the first init, the
/// events of both libraries are recorded from then on (classes from
/// `NEURON_RT_PROXY_TRACE_MASK`, default `ops`) and written to FILE (`%r`: one per rank) when
/// the last instance is finished (`nrt_proxy_trace_start`, `nrt_proxy_trace_write`).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a NULL `out`, a config of another size or version,
/// a bad field or a malformed variable above or `NEURON_RT_PROXY_TRACE_MASK` (the log names it), a progress half that cannot
/// be loaded, lacks an entry point or has another ABI major; `NRT_RESOURCE` when too many
/// instances are live or the signal handler cannot be installed.
///
/// # Safety
/// `config` NULL or a readable `nrt_proxy_config_t` (its `progress_lib` NULL or
/// NUL-terminated); `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_init(
    config: *const NrtProxyConfig,
    out: *mut *mut NrtProxy,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_init", {
        // SAFETY: `out`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_handle_out(WHAT, out) }?;
        let c = if config.is_null() {
            default_config()
        } else {
            // SAFETY: `config`: the C caller's pointer, valid or NULL by this function's contract.
            *unsafe { c_in(WHAT, "config", config) }?
        };
        let mut cfg = resolve_config(WHAT, &c)?;
        let env = Config::from_lookup(|k| {
            INIT_ENV
                .contains(&k)
                .then(|| std::env::var(k).ok())
                .flatten()
        })
        .map_err(|e| {
            log::error!("{WHAT}: {e}");
            NrtStatus::Invalid
        })?;
        cfg.cpu_affinity = env.cpu_affinity;
        cfg.dump_signal = env.dump_signal;
        let idle_block = crate::idle::idle_blocks_from_env().map_err(|e| {
            log::error!("{WHAT}: {e}");
            NrtStatus::Invalid
        })?;
        // SAFETY: the C contract (NULL or NUL-terminated).
        let path = unsafe { c_string(WHAT, "config.progress_lib", c.progress_lib) }?;
        let explicit = path.or_else(|| {
            std::env::var(PROGRESS_LIB_ENV)
                .ok()
                .filter(|s| !s.is_empty())
        });
        crate::trace::start_from_env(WHAT)?;
        let own_dir = locate::dir_of(nrt_proxy_init as *const c_void);
        let lib = load_first_progress_lib(WHAT, locate::candidates(explicit, own_dir))?;
        crate::trace::on_load(WHAT, lib);
        let registry = proxy_runtime::registry(&cfg).map_err(|e| {
            log::error!("{WHAT}: registry: {e}");
            NrtStatus::Invalid
        })?;
        let registry = Arc::new(registry);
        let dump_signal = match cfg.dump_signal {
            Some(sig) => {
                let weak = Arc::downgrade(&registry);
                let handler = DumpSignal::install(sig, move || {
                    if let Some(r) = weak.upgrade() {
                        dump_all(&r, SIGNAL_DUMP_WAIT);
                    }
                });
                Some(handler.map_err(|e| {
                    log::error!("{WHAT}: NEURON_RT_PROXY_DUMP_SIGNAL: {e}");
                    NrtStatus::Resource
                })?)
            }
            None => None,
        };
        let inst = Arc::new(Instance {
            lib,
            cfg,
            _dump_signal: dump_signal,
            registry,
            idle_block,
        });
        let handle = insert_live(WHAT, "instance", &INSTANCES, inst.clone())?;
        log::info!(
            "libnrt_proxy {NRT_PROXY_ABI_VERSION_MAJOR}.{NRT_PROXY_ABI_VERSION_MINOR}.0 (C ABI \
             {NRT_PROXY_ABI_VERSION:#x}, crate {}, instance id {:#x}): progress half {} (C ABI \
             {:#x}); configuration {:?}; idle: {}",
            env!("CARGO_PKG_VERSION"),
            instance_id().id,
            lib.path().display(),
            lib.abi_version(),
            inst.cfg,
            if idle_block { "block" } else { "yield" }
        );
        *out = handle;
        Ok(())
    })
}

/// Destroys an instance handle. Groups and comms created from it keep working until they are
/// destroyed (they hold the instance's registry); the progress half stays loaded. With
/// `NEURON_RT_PROXY_TRACE` set, the last instance's fini writes the trace (`nrt_proxy_trace_write`
/// of that file; logged).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown instance.
///
/// # Safety
/// None beyond the C contract (the handle is checked, never dereferenced).
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_fini(inst: *mut NrtProxy) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_fini", {
        let h = inst.addr();
        remove_live_retrying(WHAT, "instance", &INSTANCES, h)?;
        // Refusals still only counted are reported now, not lost with the instance.
        proxy_abi::refusal::flush();
        if INSTANCES.live() == 0 {
            // NEURON_RT_PROXY_TRACE: the timeline is written when the last instance goes.
            crate::trace::write_env_file(WHAT);
        }
        Ok(())
    })
}

/// Sets (or, with NULL, clears) the loaded progress half's process-wide device callbacks
/// (`nccom_register_device_callbacks`), used by comms created later without their own table.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad instance; the progress half's status
/// (`NRT_INVALID` for a table without `nec_inc_semaphore`).
///
/// # Safety
/// `callbacks` NULL or a table that stays readable for the life of the process (its members
/// with their declared signatures).
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_register_device_callbacks(
    inst: *mut NrtProxy,
    callbacks: *const NccomDeviceCallbacks,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_register_device_callbacks", {
        let inst = instance_of(WHAT, inst)?;
        let cb = if callbacks.is_null() {
            None
        } else {
            // SAFETY: `callbacks`: the C caller's pointer, valid or NULL by this function's contract.
            Some(unsafe { c_in(WHAT, "callbacks", callbacks) }?)
        };
        inst.lib.register_device_callbacks(cb)
    })
}
