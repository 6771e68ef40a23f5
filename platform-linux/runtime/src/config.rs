//! The engine's configuration: a plain struct handed to constructors, and [`Config::from_env`]
//! for the edges (`proxy-perf`, the C ABI's init) that read it from the environment.
//!
//! Seed: `nrt_config` (`one_thread_per_core` +0x9c, `dbg_proxy_early_completion`), the
//! `NEURON_RT_*` variables, §2 and §3; docs/design.md §4.

use std::fmt;
use std::time::Duration;

use proxy_core::driver::queue::{DriveMode, QueueConfig};
use proxy_core::driver::registry::RegistryConfig;

use crate::affinity::{parse_cpu_list, CpuListError};

use crate::worker::{WorkerConfig, DEFAULT_SPIN_US};

/// Default no-progress limit of a task, in seconds (our choice; 0 disables it).
pub const DEFAULT_EXEC_TIMEOUT_S: u64 = 30;

/// Configuration of the driver half.
///
/// | variable | field | default | values |
/// | --- | --- | --- | --- |
/// | `NEURON_RT_RANKS_PER_NETWORK_PROXY` | [`ranks_per_network_proxy`](Self::ranks_per_network_proxy) | 1 | integer ≥ 1: ranks that share one proxy queue and worker (group id = rank / this) |
/// | `NEURON_RT_ONE_THREAD_PER_CORE` | [`one_thread_per_core`](Self::one_thread_per_core) | 0 | `0`/`1`: an idle worker keeps spinning instead of yielding (it owns a core) |
/// | `NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY` | [`cpu_affinity`](Self::cpu_affinity) | unset (no pinning) | CPU list like `0,2-3`: each new group's worker is pinned to the next CPU of the list (round robin) |
/// | `NEURON_RT_PROXY_SPIN_US` | [`spin`](Self::spin) | 50 | µs an idle worker spins before it yields, and a waiting consumer before it parks |
/// | `NEURON_RT_EXEC_TIMEOUT` | [`exec_timeout`](Self::exec_timeout) | 30 | seconds without progress before a task ends `NRT_TIMEOUT`; `0` = no limit |
/// | `NEURON_RT_DBG_PROXY_EARLY_COMPLETION` | [`early_completion`](Self::early_completion) | 0 | `0`/`1`: debug; network tasks skip the network stage (DONE at INIT) |
/// | `NEURON_RT_PROXY_DRIVE_MODE` | [`drive_mode`](Self::drive_mode) | `thread` | `thread`: a worker thread per proxy queue; `caller`: no thread, the comms' threads drive (docs/design.md §9) (this project's variable; the seed always has a worker) |
/// | `NEURON_RT_LOG_LEVEL` | [`log_level`](Self::log_level) | unset | `ERROR`, `WARN`/`WARNING`, `INFO`, `DEBUG`, `TRACE`, `OFF` (any case) |
/// | `NEURON_RT_PROXY_DUMP_SIGNAL` | [`dump_signal`](Self::dump_signal) | unset (no handler) | `USR1` or `USR2` (`SIG` prefix and any case accepted): the signal that dumps every proxy queue of the process ([`crate::dump::DumpSignal`]) (this project's variable) |
///
/// Booleans accept `0`, `1`, `true`, `false` (any case). An empty or malformed value is an
/// error naming the variable and the value ([`ConfigError`]), never a silent default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Ranks per shared proxy queue (≥ 1).
    pub ranks_per_network_proxy: u32,
    /// Keep spinning when idle (the worker owns a core).
    pub one_thread_per_core: bool,
    /// CPUs for the workers, in order; empty = no pinning.
    pub cpu_affinity: Vec<usize>,
    /// Spin budget before yielding (worker) or parking (consumer).
    pub spin: Duration,
    /// No-progress limit per task (`None`: no limit).
    pub exec_timeout: Option<Duration>,
    /// Skip the network stage (debug).
    pub early_completion: bool,
    /// Log level, when set.
    pub log_level: Option<log::LevelFilter>,
    /// Queue sizes (not read from the environment).
    pub queue: QueueConfig,
    /// Who drives each proxy queue.
    pub drive_mode: DriveMode,
    /// The signal that dumps every proxy queue (`None`: no handler is installed).
    pub dump_signal: Option<libc::c_int>,
    /// An idle worker past its spin budget naps up to this long on its queue's bell instead
    /// of yielding ([`WorkerConfig::nap`]). Set it only when every event a worker waits for
    /// rings the bell (not read from the environment: the embedder knows its wiring).
    pub worker_nap: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            ranks_per_network_proxy: 1,
            one_thread_per_core: false,
            cpu_affinity: Vec::new(),
            spin: Duration::from_micros(DEFAULT_SPIN_US),
            exec_timeout: Some(Duration::from_secs(DEFAULT_EXEC_TIMEOUT_S)),
            early_completion: false,
            log_level: None,
            queue: QueueConfig::default(),
            drive_mode: DriveMode::Thread,
            dump_signal: None,
            worker_nap: None,
        }
    }
}

/// A bad environment value: names the variable and the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The variable.
    pub var: &'static str,
    /// Its value as found.
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={:?}: {}", self.var, self.value, self.reason)
    }
}

impl std::error::Error for ConfigError {}

fn bad(var: &'static str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        var,
        value: value.to_owned(),
        reason: reason.into(),
    }
}

fn parse_u64(var: &'static str, value: &str) -> Result<u64, ConfigError> {
    value
        .trim()
        .parse::<u64>()
        .map_err(|e| bad(var, value, format!("not a non-negative integer ({e})")))
}

fn parse_bool(var: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "0" | "false" => Ok(false),
        "1" | "true" => Ok(true),
        _ => Err(bad(var, value, "expected 0 or 1")),
    }
}

fn parse_level(var: &'static str, value: &str) -> Result<log::LevelFilter, ConfigError> {
    Ok(match value.trim().to_ascii_uppercase().as_str() {
        "OFF" => log::LevelFilter::Off,
        "ERROR" | "FATAL" => log::LevelFilter::Error,
        "WARN" | "WARNING" => log::LevelFilter::Warn,
        "INFO" => log::LevelFilter::Info,
        "DEBUG" => log::LevelFilter::Debug,
        "TRACE" => log::LevelFilter::Trace,
        _ => {
            return Err(bad(
                var,
                value,
                "expected ERROR, WARN, INFO, DEBUG, TRACE or OFF",
            ))
        }
    })
}

impl Config {
    /// Reads every variable of the table above from the process environment; unset variables
    /// keep their defaults.
    ///
    /// # Errors
    /// The first bad value ([`ConfigError`] names the variable and the value).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// As [`Config::from_env`], with `lookup` standing in for the environment (tests).
    ///
    /// # Errors
    /// The first bad value.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut c = Self::default();
        const RPNP: &str = "NEURON_RT_RANKS_PER_NETWORK_PROXY";
        if let Some(v) = lookup(RPNP) {
            let n = parse_u64(RPNP, &v)?;
            if n == 0 || n > u64::from(u32::MAX) {
                return Err(bad(RPNP, &v, "must be between 1 and 2^32-1"));
            }
            c.ranks_per_network_proxy = n as u32;
        }
        const OTPC: &str = "NEURON_RT_ONE_THREAD_PER_CORE";
        if let Some(v) = lookup(OTPC) {
            c.one_thread_per_core = parse_bool(OTPC, &v)?;
        }
        const AFF: &str = "NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY";
        if let Some(v) = lookup(AFF) {
            c.cpu_affinity =
                parse_cpu_list(&v).map_err(|e: CpuListError| bad(AFF, &v, e.to_string()))?;
        }
        const SPIN: &str = "NEURON_RT_PROXY_SPIN_US";
        if let Some(v) = lookup(SPIN) {
            c.spin = Duration::from_micros(parse_u64(SPIN, &v)?);
        }
        const TIMEOUT: &str = "NEURON_RT_EXEC_TIMEOUT";
        if let Some(v) = lookup(TIMEOUT) {
            let s = parse_u64(TIMEOUT, &v)?;
            c.exec_timeout = (s != 0).then(|| Duration::from_secs(s));
        }
        const EARLY: &str = "NEURON_RT_DBG_PROXY_EARLY_COMPLETION";
        if let Some(v) = lookup(EARLY) {
            c.early_completion = parse_bool(EARLY, &v)?;
        }
        const DRIVE: &str = "NEURON_RT_PROXY_DRIVE_MODE";
        if let Some(v) = lookup(DRIVE) {
            c.drive_mode = match v.trim().to_ascii_lowercase().as_str() {
                "thread" => DriveMode::Thread,
                "caller" => DriveMode::Caller,
                _ => return Err(bad(DRIVE, &v, "must be `thread` or `caller`")),
            };
        }
        const DUMP: &str = "NEURON_RT_PROXY_DUMP_SIGNAL";
        if let Some(v) = lookup(DUMP) {
            let name = v.trim().to_ascii_uppercase();
            c.dump_signal = Some(match name.strip_prefix("SIG").unwrap_or(&name) {
                "USR1" => libc::SIGUSR1,
                "USR2" => libc::SIGUSR2,
                _ => return Err(bad(DUMP, &v, "must be `USR1` or `USR2`")),
            });
        }
        const LOG: &str = "NEURON_RT_LOG_LEVEL";
        if let Some(v) = lookup(LOG) {
            c.log_level = Some(parse_level(LOG, &v)?);
        }
        Ok(c)
    }

    /// The registry part.
    pub fn registry(&self) -> RegistryConfig {
        RegistryConfig {
            ranks_per_network_proxy: self.ranks_per_network_proxy,
            queue: self.queue,
            mode: self.drive_mode,
        }
    }

    /// The worker-thread part.
    pub fn worker(&self) -> WorkerConfig {
        WorkerConfig {
            spin: self.spin,
            one_thread_per_core: self.one_thread_per_core,
            cpus: self.cpu_affinity.clone(),
            nap: self.worker_nap,
        }
    }

    /// Applies [`Config::log_level`] (when set) as the `log` facade's maximum level. The logger
    /// itself is the embedder's choice (`env_logger` in `proxy-perf`, with `RUST_LOG` for finer
    /// filters).
    pub fn apply_log_level(&self) {
        if let Some(l) = self.log_level {
            log::set_max_level(l);
        }
    }

    /// The task timeout in nanoseconds, as task specs take it.
    pub fn timeout_ns(&self) -> Option<u64> {
        self.exec_timeout
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests;
