//! How to bootstrap one process: [`BootstrapConfig`] from arguments and the launcher's
//! environment, the root address, this host's identity.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::*;

/// How to bootstrap one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapConfig {
    /// This process's rank, `< nranks`; rank 0 is the root.
    pub rank: u32,
    /// Number of processes, `1..=65536`.
    pub nranks: u32,
    /// The root address: rank 0 listens on it, the others connect to it.
    pub root: SocketAddr,
    /// Bound of every blocking call.
    pub timeout: Duration,
    /// Interval of the "still waiting" warnings.
    pub warn_interval: Duration,
    /// Bound of [`Bootstrap::close`]'s wait for the peers' side of the connections to close.
    pub close_linger: Duration,
    /// Rank 0 only: use this comm id (`< 2^15`) instead of a random one.
    pub comm_id: Option<u32>,
}

impl BootstrapConfig {
    /// A config with the default timeouts.
    pub fn new(rank: u32, nranks: u32, root: SocketAddr) -> Self {
        Self {
            rank,
            nranks,
            root,
            timeout: DEFAULT_TIMEOUT,
            warn_interval: DEFAULT_WARN_INTERVAL,
            close_linger: DEFAULT_CLOSE_LINGER,
            comm_id: None,
        }
    }

    /// Resolves the config from explicit arguments (each `None` when not given) and the process
    /// environment; see [`BootstrapConfig::from_lookup`].
    ///
    /// # Errors
    /// As [`BootstrapConfig::from_lookup`].
    pub fn from_env(
        rank: Option<u32>,
        nranks: Option<u32>,
        root: Option<&str>,
    ) -> Result<Self, BootstrapError> {
        Self::from_lookup(rank, nranks, root, |k| std::env::var(k).ok())
    }

    /// Resolves the config from explicit arguments and variables read through `var`:
    /// * rank and size: the arguments; what they leave open comes from the first pair of
    ///   [`LAUNCHER_VARS`] whose rank variable is set (its size variable must be set too);
    ///   without both, a single process (rank 0 of 1) when neither is given anywhere;
    /// * root: the argument, else [`ROOT_COMM_ID_ENV`]; needed when `nranks > 1`;
    /// * timeout: [`TIMEOUT_ENV`] in seconds, else [`DEFAULT_TIMEOUT`].
    ///
    /// # Errors
    /// [`BootstrapError::Config`] naming the variable or argument at fault.
    pub fn from_lookup(
        rank: Option<u32>,
        nranks: Option<u32>,
        root: Option<&str>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, BootstrapError> {
        let parse = |name: &str, v: &str| {
            v.trim().parse::<u32>().map_err(|_| {
                BootstrapError::Config(format!("{name}={v:?} is not a non-negative integer"))
            })
        };
        let mut launcher = None;
        for (rv, sv) in LAUNCHER_VARS {
            if let Some(r) = var(rv) {
                let Some(s) = var(sv) else {
                    return Err(BootstrapError::Config(format!(
                        "{rv} is set but {sv} is not"
                    )));
                };
                launcher = Some((parse(rv, &r)?, parse(sv, &s)?, rv, sv));
                break;
            }
        }
        let (rank, nranks) = match (rank, nranks, launcher) {
            (Some(r), Some(n), _) => (r, n),
            (r, n, Some((lr, ln, rv, sv))) => {
                log::debug!("bootstrap: rank/size from {rv}/{sv}: {lr}/{ln}");
                (r.unwrap_or(lr), n.unwrap_or(ln))
            }
            (None, None, None) => (0, 1),
            (r, n, None) => {
                return Err(BootstrapError::Config(format!(
                    "rank {r:?} and size {n:?}: give both (arguments or one of the launcher \
                     variable pairs {LAUNCHER_VARS:?})"
                )))
            }
        };
        if nranks == 0 || rank >= nranks || nranks > proxy_core::progress::net::MAX_NRANKS {
            return Err(BootstrapError::Config(format!(
                "rank {rank} of {nranks} ranks (need rank < nranks <= {})",
                proxy_core::progress::net::MAX_NRANKS
            )));
        }
        let root_text = root.map(str::to_owned).or_else(|| var(ROOT_COMM_ID_ENV));
        let root = match root_text {
            Some(t) => parse_root(&t)?,
            None if nranks == 1 => SocketAddr::from(([127, 0, 0, 1], 0)),
            None => {
                return Err(BootstrapError::Config(format!(
                    "{nranks} ranks need a root address: set {ROOT_COMM_ID_ENV}=ip:port or \
                     pass it on the command line"
                )))
            }
        };
        let mut cfg = Self::new(rank, nranks, root);
        if let Some(t) = var(TIMEOUT_ENV) {
            let secs: f64 = t.trim().parse().map_err(|_| {
                BootstrapError::Config(format!("{TIMEOUT_ENV}={t:?} is not a number of seconds"))
            })?;
            if !(secs > 0.0 && secs.is_finite()) {
                return Err(BootstrapError::Config(format!(
                    "{TIMEOUT_ENV}={t:?} must be a positive number of seconds"
                )));
            }
            cfg.timeout = Duration::from_secs_f64(secs);
        }
        Ok(cfg)
    }
}

/// Parses a root address `ip:port` (or `host:port`, resolved; the first address is used).
///
/// # Errors
/// [`BootstrapError::Config`] when it does not parse or resolve.
pub fn parse_root(text: &str) -> Result<SocketAddr, BootstrapError> {
    let t = text.trim();
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok(a);
    }
    match t.to_socket_addrs() {
        Ok(mut it) => it.next().ok_or_else(|| {
            BootstrapError::Config(format!("root address {t:?} resolves to no address"))
        }),
        Err(e) => Err(BootstrapError::Config(format!(
            "root address {t:?} ({ROOT_COMM_ID_ENV}) is not ip:port: {e}"
        ))),
    }
}

/// This host's identity: host name and boot id (two containers with one host name on different
/// machines differ in the boot id).
pub fn host_identity() -> Vec<u8> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    let mut id = read("/proc/sys/kernel/hostname");
    if id.is_empty() {
        id = std::env::var("HOSTNAME").unwrap_or_else(|_| "unknown-host".into());
    }
    let boot = read("/proc/sys/kernel/random/boot_id");
    if !boot.is_empty() {
        id.push('/');
        id.push_str(&boot);
    }
    id.into_bytes()
}
