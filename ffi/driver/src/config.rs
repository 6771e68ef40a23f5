//! Version, status names and configuration: `nrt_proxy_abi_version`, `nrt_get_status_as_str`,
//! `nrt_proxy_config_init`, `nrt_proxy_config_from_env`, and the check of a C config into the
//! runtime's `Config`.

use std::ffi::c_char;
use std::ptr;
use std::time::Duration;

use proxy_abi::*;
use proxy_core::base::status::NrtStatus;
use proxy_core::driver::queue::{DriveMode, QueueConfig};
use proxy_runtime::Config;

use proxy_abi::boundary::{bad, c_in, c_out};
use proxy_abi::entry;

use crate::types::*;

/// The ABI version of this library: `NRT_PROXY_ABI_VERSION`, `(major << 16) | minor`. A caller
/// built against a header with another major must not use the library.
#[no_mangle]
pub extern "C" fn nrt_proxy_abi_version() -> u32 {
    NRT_PROXY_ABI_VERSION
}

/// The name of a status value (`"NRT_SUCCESS"`, ...), or `"NRT_UNKNOWN_STATUS"`: the same table
/// as `libnccom_proxy.so`'s function of the same name. The string is static; never free it.
///
/// Seed: `nrt_get_status_as_str`.
#[no_mangle]
pub extern "C" fn nrt_get_status_as_str(status: NRT_STATUS) -> *const c_char {
    status_name(status).as_ptr()
}

/// The environment variable of `nrt_proxy_config_t.worker_nap_us`.
pub const WORKER_NAP_ENV: &str = "NEURON_RT_PROXY_WORKER_NAP_US";

pub(crate) fn default_config() -> NrtProxyConfig {
    let d = Config::default();
    NrtProxyConfig {
        struct_size: size_of::<NrtProxyConfig>() as u32,
        version: NRT_PROXY_CONFIG_VERSION,
        progress_lib: ptr::null(),
        ranks_per_network_proxy: d.ranks_per_network_proxy,
        drive_mode: NRT_PROXY_DRIVE_THREAD,
        spin_us: d.spin.as_micros() as u64,
        exec_timeout_ms: d.exec_timeout.map_or(0, |t| t.as_millis() as u64),
        one_thread_per_core: 0,
        early_completion: 0,
        queue_slots: 0,
        submit_capacity: 0,
        status_capacity: 0,
        worker_nap_us: 0,
    }
}

/// Fills `*config` with the defaults (`struct_size`, `version`, no progress-library path, one
/// rank per proxy, thread mode, 50 µs spin, 30 s task limit, default queue sizes).
///
/// Returns `NRT_SUCCESS`, or `NRT_INVALID` for a NULL `config`.
///
/// # Safety
/// `config` must be NULL or point to writable storage for an `nrt_proxy_config_t`.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_config_init(config: *mut NrtProxyConfig) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_config_init", {
        // SAFETY: `config`: the C caller's pointer, valid or NULL by this function's contract.
        *unsafe { c_out(WHAT, "config", config) }? = default_config();
        Ok(())
    })
}

/// Fills `*config` with the defaults overridden by the environment:
/// `NEURON_RT_RANKS_PER_NETWORK_PROXY`, `NEURON_RT_ONE_THREAD_PER_CORE`,
/// `NEURON_RT_PROXY_SPIN_US`, `NEURON_RT_EXEC_TIMEOUT` (seconds), `NEURON_RT_PROXY_DRIVE_MODE`,
/// `NEURON_RT_DBG_PROXY_EARLY_COMPLETION` (the table of `proxy_runtime::Config`), and
/// `NEURON_RT_PROXY_WORKER_NAP_US` (`worker_nap_us`, this library's: µs, 0 to
/// `NRT_PROXY_MAX_NAP_US`). The progress
/// library stays NULL (`nrt_proxy_init` reads `NEURON_RT_PROXY_PROGRESS_LIB` itself), and so do
/// the two process-wide settings `nrt_proxy_init` reads from the environment whatever the
/// config (`NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY`, `NEURON_RT_PROXY_DUMP_SIGNAL`,
/// `NEURON_RT_PROXY_IDLE`); a malformed value of any is refused here too.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a NULL `config` or a malformed variable (the log
/// names it; `*config` then holds the defaults).
///
/// # Safety
/// As [`nrt_proxy_config_init`].
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_config_from_env(config: *mut NrtProxyConfig) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_config_from_env", {
        // SAFETY: `config`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "config", config) }?;
        *out = default_config();
        let c = Config::from_env().map_err(|e| {
            log::error!("{WHAT}: {e}");
            NrtStatus::Invalid
        })?;
        out.ranks_per_network_proxy = c.ranks_per_network_proxy;
        out.drive_mode = match c.drive_mode {
            DriveMode::Thread => NRT_PROXY_DRIVE_THREAD,
            DriveMode::Caller => NRT_PROXY_DRIVE_CALLER,
        };
        out.spin_us = u64::try_from(c.spin.as_micros()).unwrap_or(u64::MAX);
        out.exec_timeout_ms = c
            .exec_timeout
            .map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        out.one_thread_per_core = u32::from(c.one_thread_per_core);
        out.early_completion = u32::from(c.early_completion);
        if let Err(e) = crate::idle::idle_blocks_from_env() {
            *out = default_config();
            return bad(WHAT, format_args!("{e}"));
        }
        if let Ok(v) = std::env::var(WORKER_NAP_ENV) {
            out.worker_nap_us = match v.trim().parse::<u32>() {
                Ok(n) if n <= NRT_PROXY_MAX_NAP_US => n,
                _ => {
                    *out = default_config();
                    return bad(
                        WHAT,
                        format_args!(
                            "{WORKER_NAP_ENV}={v:?}: microseconds from 0 to {NRT_PROXY_MAX_NAP_US}"
                        ),
                    );
                }
            };
        }
        Ok(())
    })
}

/// Which drive mode fits this host: the host-wide mode rule (`proxy_runtime::modes`) for a
/// process with `ranks_per_process` ranks grouped by `config->ranks_per_network_proxy`, whose
/// runtime keeps `app_threads` threads of its own busy (its submitting threads and its devices'
/// host threads; at least 1 is counted). Worker mode's busy threads per process are the
/// workers (one per group) plus `app_threads`; caller mode's are `app_threads` (they drive).
/// Both are multiplied by the job's processes on this host, read from the launcher's
/// environment (`NEURON_RT_PROXY_LOCAL_RANKS`, `OMPI_COMM_WORLD_LOCAL_SIZE`, `MPI_LOCALNRANKS`,
/// `PMIX_LOCAL_SIZE`, `SLURM_TASKS_PER_NODE` at `SLURM_NODEID`; else 1), and weighed against
/// the CPUs of the affinity mask lowered to the cgroup quota: worker mode when it fits, else
/// caller mode when it fits, else the one with fewer busy threads (`fits` 0). The answer is
/// also logged (info level) in words.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a NULL or malformed `config` or `out`,
/// `ranks_per_process` 0, or a malformed launcher variable (the log names it).
///
/// # Safety
/// `config` must be NULL or point to an initialized `nrt_proxy_config_t`; `out` NULL or
/// writable storage for an `nrt_proxy_mode_advice_t`.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_mode_advice(
    config: *const NrtProxyConfig,
    ranks_per_process: u32,
    app_threads: u32,
    out: *mut NrtProxyModeAdvice,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_mode_advice", {
        use proxy_runtime::modes::{advise, host_cpus, local_processes_from_env, LocalProcesses};
        // SAFETY: the C caller's pointers, valid or NULL by this function's contract.
        let (c, out) = unsafe { (c_in(WHAT, "config", config)?, c_out(WHAT, "out", out)?) };
        let cfg = resolve_config(WHAT, c)?;
        if ranks_per_process == 0 {
            return bad(WHAT, format_args!("ranks_per_process is 0"));
        }
        let processes = local_processes_from_env()
            .map_err(|e| {
                log::error!("{WHAT}: {e}");
                NrtStatus::Invalid
            })?
            .unwrap_or(LocalProcesses::ALONE);
        let groups = ranks_per_process.div_ceil(cfg.ranks_per_network_proxy.max(1)) as usize;
        let app = app_threads.max(1) as usize;
        let a = advise(proxy_runtime::modes::ModeInputs {
            cpus: host_cpus(),
            processes,
            worker_threads: groups + app,
            caller_threads: app,
        });
        log::info!("{WHAT}: {a}");
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        *out = NrtProxyModeAdvice {
            struct_size: size_of::<NrtProxyModeAdvice>() as u32,
            drive_mode: match a.mode {
                DriveMode::Thread => NRT_PROXY_DRIVE_THREAD,
                DriveMode::Caller => NRT_PROXY_DRIVE_CALLER,
            },
            fits: u32::from(a.fits),
            worker_threads: n(a.worker_threads),
            caller_threads: n(a.caller_threads),
            cpus: n(a.inputs.cpus.usable),
            local_processes: a.inputs.processes.count,
            reserved: 0,
        };
        Ok(())
    })
}

/// The runtime configuration of a checked C config.
pub(crate) fn resolve_config(what: &str, c: &NrtProxyConfig) -> Result<Config, NrtStatus> {
    if c.struct_size as usize != size_of::<NrtProxyConfig>()
        || c.version != NRT_PROXY_CONFIG_VERSION
    {
        return bad(
            what,
            format_args!(
                "config struct_size {} / version {} (this library: {} / {}; fill it with \
                 nrt_proxy_config_init)",
                c.struct_size,
                c.version,
                size_of::<NrtProxyConfig>(),
                NRT_PROXY_CONFIG_VERSION
            ),
        );
    }
    if c.worker_nap_us > NRT_PROXY_MAX_NAP_US {
        return bad(
            what,
            format_args!(
                "config.worker_nap_us is {} (at most {NRT_PROXY_MAX_NAP_US})",
                c.worker_nap_us
            ),
        );
    }
    if c.ranks_per_network_proxy == 0 {
        return bad(what, format_args!("ranks_per_network_proxy is 0"));
    }
    let drive_mode = match c.drive_mode {
        NRT_PROXY_DRIVE_THREAD => DriveMode::Thread,
        NRT_PROXY_DRIVE_CALLER => DriveMode::Caller,
        m => return bad(what, format_args!("unknown drive_mode {m}")),
    };
    let flag = |name: &str, v: u32| match v {
        0 => Ok(false),
        1 => Ok(true),
        v => bad(what, format_args!("{name} is {v} (0 or 1)")),
    };
    let d = QueueConfig::default();
    let size = |v: u32, dflt: usize| if v == 0 { dflt } else { v as usize };
    let queue = QueueConfig {
        slots: size(c.queue_slots, d.slots),
        submit_capacity: size(c.submit_capacity, d.submit_capacity),
        status_capacity: size(c.status_capacity, d.status_capacity),
    };
    if queue.validate().is_err() {
        return bad(
            what,
            format_args!("queue sizes {queue:?}: capacities must be powers of two"),
        );
    }
    Ok(Config {
        ranks_per_network_proxy: c.ranks_per_network_proxy,
        one_thread_per_core: flag("one_thread_per_core", c.one_thread_per_core)?,
        cpu_affinity: Vec::new(),
        spin: Duration::from_micros(c.spin_us),
        exec_timeout: (c.exec_timeout_ms != 0).then(|| Duration::from_millis(c.exec_timeout_ms)),
        early_completion: flag("early_completion", c.early_completion)?,
        log_level: None,
        queue,
        drive_mode,
        dump_signal: None,
        // Only the runtime knows whether its devices ring (`bells.rs`): an idle worker naps
        // only when it says so.
        worker_nap: (c.worker_nap_us != 0)
            .then(|| Duration::from_micros(u64::from(c.worker_nap_us))),
    })
}
