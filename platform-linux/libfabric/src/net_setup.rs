//! A libfabric-backed [`Comm`] for one process, built from a
//! [`Bootstrap`](proxy_bootstrap::Bootstrap): open the endpoint, all-gather the endpoint names,
//! connect, create the comm with the bootstrap's comm id.
//!
//! ```text
//!  open_with(rank, nranks) ─► all-gather {ok, provider, name | error} ─► connect(names)
//!        ─► all-gather {connected | error} ─► set_peer_watch ─► Comm::new(rank, nranks, comm id)
//! ```
//!
//! The comm's transport keeps the bootstrap open for the comm's life and watches it for a lost
//! peer ([`PeerWatch`], docs/design.md §9 "Liveness"): a rank that dies fails the comm on every
//! other rank with `NRT_NETWORK_PROXY_FAILURE`, naming it, in a few milliseconds (a killed
//! process) or about [`proxy_bootstrap::PEER_TIMEOUT`] (a host that stops answering).
//!
//! Each step's outcome is all-gathered, so a rank that cannot open its endpoint (a provider
//! that is not offered, say) makes every rank fail at once with a message naming it, instead of
//! leaving the others to time out. Every rank must pick the same provider; a mismatch is an
//! error naming both.

use std::sync::Arc;
use std::time::Duration;

use proxy_core::base::time::Clock;
use proxy_core::progress::comm::{Comm, CommConfig};
use proxy_core::progress::device::DeviceCallbacks;
use proxy_core::progress::net::NetError;
use proxy_core::NrtStatus;

use proxy_bootstrap::{BootstrapError, PeerWatch, SharedBootstrap, StepFailed};

use crate::{CqIdleWait, LibfabricTransport, Options};

/// How to build the comm.
#[derive(Clone, Debug, Default)]
pub struct LibfabricCommConfig {
    /// Transport options. `all_ranks_local` is also set when the bootstrap found every rank on
    /// this host (so the automatic choice may take shm).
    pub transport: Options,
    /// Use this comm id instead of the bootstrap's (`< 2^15`).
    pub comm_id: Option<u32>,
    /// `stop`'s drain limit instead of the default (1 s).
    pub drain_limit: Option<Duration>,
}

/// Why the comm could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetupError {
    /// The bootstrap failed (its own error says on which rank and why).
    Bootstrap(BootstrapError),
    /// This rank's transport failed to open or connect.
    Transport(NetError),
    /// Another rank failed; its message.
    Peer {
        /// The failed rank (the lowest one, when several failed).
        rank: u32,
        /// Its error.
        message: String,
    },
    /// The ranks chose different providers.
    ProviderMismatch {
        /// This rank's provider.
        mine: String,
        /// The first rank with another one.
        rank: u32,
        /// Its provider.
        theirs: String,
    },
    /// `Comm::new` rejected the configuration.
    Comm(NrtStatus),
}

impl SetupError {
    /// The status the failure maps to.
    pub fn status(&self) -> NrtStatus {
        match self {
            Self::Bootstrap(e) => e.status(),
            Self::Transport(e) => e.status,
            Self::Peer { .. } => NrtStatus::NetworkProxyFailure,
            Self::ProviderMismatch { .. } => NrtStatus::Invalid,
            Self::Comm(s) => *s,
        }
    }
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bootstrap(e) => write!(f, "{e}"),
            Self::Transport(e) => write!(f, "libfabric comm setup: {e}"),
            Self::Peer { rank, message } => {
                write!(f, "libfabric comm setup: rank {rank} failed: {message}")
            }
            Self::ProviderMismatch { mine, rank, theirs } => write!(
                f,
                "libfabric comm setup: this rank uses provider {mine:?}, rank {rank} uses \
                 {theirs:?} (set FI_PROVIDER or --provider the same on every rank)"
            ),
            Self::Comm(s) => write!(f, "libfabric comm setup: comm rejected: {s}"),
        }
    }
}

impl std::error::Error for SetupError {}

impl From<BootstrapError> for SetupError {
    fn from(e: BootstrapError) -> Self {
        Self::Bootstrap(e)
    }
}

/// Another rank's failed step as this rank's set-up error.
fn peer_failed(r: Result<Vec<Vec<u8>>, StepFailed>) -> Result<Vec<Vec<u8>>, SetupError> {
    r.map_err(|f| SetupError::Peer {
        rank: f.rank,
        message: f.message,
    })
}

/// Opens a libfabric endpoint for this process's rank, exchanges endpoint names through `boot`,
/// connects, and creates the comm (rank, nranks and comm id from the bootstrap). Every rank of
/// the bootstrap must call it at the same point. Holds `boot`'s lock until it returns.
///
/// The comm's transport keeps a handle on `boot` and checks its connections for a lost peer
/// from its polls ([`PeerWatch`], every [`proxy_bootstrap::WATCH_INTERVAL`] at most, with
/// `try_lock`): the bootstrap stays open until the comm is dropped (and the caller's handles).
///
/// # Errors
/// * [`SetupError::Transport`]: this rank's endpoint could not be opened or connected;
/// * [`SetupError::Peer`]: another rank's could not (every rank reports it);
/// * [`SetupError::ProviderMismatch`]: the ranks picked different providers;
/// * [`SetupError::Bootstrap`]: the all-gathers failed (a rank missing, lost, or timed out);
/// * [`SetupError::Comm`]: the comm id or size is out of range.
///
/// # Examples
/// ```no_run
/// use std::sync::Arc;
/// use proxy_bootstrap::{Bootstrap, BootstrapConfig, SharedBootstrap};
/// use proxy_libfabric::net_setup::{open_libfabric_comm, LibfabricCommConfig};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let boot = SharedBootstrap::new(Bootstrap::init(&BootstrapConfig::from_env(None, None, None)?)?);
/// // SAFETY: every host-word address later given to the comm is a live, aligned AtomicU32.
/// let device = Arc::new(unsafe { proxy_core::progress::device::DirectHostWords::new() });
/// let clock = Arc::new(proxy_core::base::time::NoClock);
/// let comm = open_libfabric_comm(&boot, &LibfabricCommConfig::default(), device, clock)?;
/// # Ok(()) }
/// ```
pub fn open_libfabric_comm(
    shared: &SharedBootstrap,
    cfg: &LibfabricCommConfig,
    device: Arc<dyn DeviceCallbacks>,
    clock: Arc<dyn Clock>,
) -> Result<Comm, SetupError> {
    // SAFETY: no idle wait is asked for.
    unsafe { open(shared, cfg, device, clock, false) }.map(|(comm, _)| comm)
}

/// As [`open_libfabric_comm`], and the comm's idle wait (`proxy_core::driver::idle`) when
/// `cfg.transport` asked for a CQ descriptor ([`Options::cq_wait_fd`]) and the provider has
/// one (tcp; `None` for shm).
///
/// # Errors
/// As [`open_libfabric_comm`].
///
/// # Safety
/// As [`LibfabricTransport::idle_wait`]: the waiter is used only by the thread that drives the
/// comm, between its calls (wire it into the comm's proxy queue, `ProxyQueue::idle_wait`).
pub unsafe fn open_libfabric_comm_with_idle(
    shared: &SharedBootstrap,
    cfg: &LibfabricCommConfig,
    device: Arc<dyn DeviceCallbacks>,
    clock: Arc<dyn Clock>,
) -> Result<(Comm, Option<Arc<CqIdleWait>>), SetupError> {
    // SAFETY: the caller's contract.
    unsafe { open(shared, cfg, device, clock, cfg.transport.cq_wait_fd) }
}

/// Both opens.
///
/// # Safety
/// With `idle`: as [`open_libfabric_comm_with_idle`].
unsafe fn open(
    shared: &SharedBootstrap,
    cfg: &LibfabricCommConfig,
    device: Arc<dyn DeviceCallbacks>,
    clock: Arc<dyn Clock>,
    idle: bool,
) -> Result<(Comm, Option<Arc<CqIdleWait>>), SetupError> {
    let mut boot = shared.lock();
    let (rank, nranks) = (boot.rank(), boot.nranks());
    let mut opts = cfg.transport.clone();
    opts.all_ranks_local |= boot.all_local();
    opts.spans_hosts |= !boot.all_local();

    // 1. Open, and all-gather {provider, name} or the error.
    let opened = LibfabricTransport::open_with(rank, nranks, &opts);
    let record = opened
        .as_ref()
        .map(|t| {
            let prov = t.provider().as_bytes();
            let mut p = Vec::with_capacity(2 + prov.len() + t.local_name().len());
            p.extend_from_slice(&(prov.len() as u16).to_le_bytes());
            p.extend_from_slice(prov);
            p.extend_from_slice(&t.local_name());
            p
        })
        .map_err(ToString::to_string);
    let all = peer_failed(boot.all_gather_outcome(record.as_deref().map_err(String::as_str))?);
    let mut transport = opened.map_err(SetupError::Transport)?;
    let all = all?;
    let mut names = Vec::with_capacity(all.len());
    for (r, p) in all.iter().enumerate() {
        let split = |p: &[u8]| -> Option<(String, Vec<u8>)> {
            let n = u16::from_le_bytes([*p.first()?, *p.get(1)?]) as usize;
            let prov = p.get(2..2 + n)?;
            Some((
                String::from_utf8_lossy(prov).into_owned(),
                p.get(2 + n..)?.to_vec(),
            ))
        };
        let Some((prov, name)) = split(p) else {
            return Err(SetupError::Peer {
                rank: r as u32,
                message: "malformed endpoint record".into(),
            });
        };
        if prov != transport.provider() {
            return Err(SetupError::ProviderMismatch {
                mine: transport.provider().to_owned(),
                rank: r as u32,
                theirs: prov,
            });
        }
        names.push(name);
    }

    // 2. Connect, and all-gather the outcome.
    let connected = transport.connect(&names);
    let message = connected.as_ref().map_err(ToString::to_string);
    let all = peer_failed(
        boot.all_gather_outcome(message.as_ref().map(|()| &[][..]).map_err(String::as_str))?,
    );
    connected.map_err(SetupError::Transport)?;
    all?;
    transport.set_peer_watch(PeerWatch::new(shared));

    // 3. The comm.
    let mut config = CommConfig::new(rank, nranks, cfg.comm_id.unwrap_or(boot.comm_id()));
    if let Some(d) = cfg.drain_limit {
        config.drain_limit_ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    }
    log::info!(
        "rank {rank}/{nranks}: libfabric comm {} on {} connected to {nranks} ranks",
        config.comm_id,
        transport.provider()
    );
    let waiter = if idle {
        // SAFETY: the caller's contract.
        unsafe { transport.idle_wait() }
    } else {
        None
    };
    let mut comm =
        Comm::new(config, Box::new(transport), device, clock).map_err(SetupError::Comm)?;
    // A drain waiting on the provider gives the CPU away instead of spinning on it.
    comm.set_drain_relax(std::thread::yield_now);
    comm.set_drain_park(|ns| std::thread::sleep(std::time::Duration::from_nanos(ns)));
    Ok((comm, waiter))
}
