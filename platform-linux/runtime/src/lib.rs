//! `proxy-runtime`: the Linux runtime of the proxy engine, what every embedder of the driver half
//! needs and nothing more: worker threads `proxy-<tid>` ([`ThreadSpawner`], [`WorkerConfig`]),
//! CPU affinity, parking and the clock (core's `ThreadPark` and `MonotonicClock`, feature
//! `std`, shared with the C library, the tests and the models), memfd host memory ([`hostmem`]), the configuration from the
//! environment ([`Config`]), the `dlopen` loader of a progress half ([`loader`]) and the
//! process registry ([`registry`], [`global_registry`], [`LinuxRegistry`]) and its state dump
//! on demand or on a signal ([`dump`]), and the tuner's calibration file ([`tune_file`]).
//!
//! Dependencies: `proxy-core`, `proxy-abi` (the loader's ABI types), `log`, `libc`,
//! `core_affinity`, `libloading`, `signal-hook` (the dump signal's self-pipe),
//! `proxy-collectives` (the tuner's constants), `serde` / `serde_json` (the calibration file). Not the device emulator, not `proxy-perf`, no command-line or
//! report libraries; the transports and the bootstrap are crates of their own
//! (`proxy-libfabric`, `proxy-bootstrap`).

pub mod affinity;
pub mod config;
pub mod dump;
pub mod hostmem;
pub mod loader;
pub mod modes;
pub mod tune_file;
pub mod wake_cost;
pub mod worker;

use std::sync::OnceLock;

use proxy_core::driver::registry::Registry;

pub use config::{Config, ConfigError};
pub use worker::{ThreadSpawner, WorkerConfig};

/// The registry type of this platform.
pub type LinuxRegistry = Registry<ThreadSpawner>;

/// A registry built from `cfg` (tests and embedders that want their own instance).
///
/// # Errors
/// `NrtStatus::Invalid` for invalid sizes (a `Config` from [`Config::from_env`] is valid).
pub fn registry(cfg: &Config) -> Result<LinuxRegistry, proxy_core::NrtStatus> {
    Registry::new(ThreadSpawner::new(cfg.worker()), cfg.registry())
}

static GLOBAL: OnceLock<LinuxRegistry> = OnceLock::new();

/// The process-wide registry (for `proxy-perf` and runtimes that embed the engine), built from
/// the environment ([`Config::from_env`]) on first use.
///
/// # Errors
/// The first bad environment value (then nothing is built; a later call tries again).
pub fn global_registry() -> Result<&'static LinuxRegistry, ConfigError> {
    if let Some(r) = GLOBAL.get() {
        return Ok(r);
    }
    let cfg = Config::from_env()?;
    let r = registry(&cfg).map_err(|e| ConfigError {
        var: "NEURON_RT_RANKS_PER_NETWORK_PROXY",
        value: cfg.ranks_per_network_proxy.to_string(),
        reason: format!("registry rejected the configuration: {e}"),
    })?;
    Ok(GLOBAL.get_or_init(|| r))
}
