//! Linux platform of the proxy engine: worker threads, host memory, transports, the device emulator and `proxy-perf`.

pub mod affinity;
pub mod bootstrap;
pub mod config;
pub mod emulator;
pub mod hostmem;
#[cfg(feature = "libfabric")]
pub mod libfabric;
pub mod loader;
#[cfg(feature = "libfabric")]
pub mod net_setup;
pub mod perf;
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
