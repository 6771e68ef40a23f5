//! The comm of one process of a multi-process run, over the transport `--transport` names:
//! libfabric (`--provider`; built with the `libfabric` feature), or the engine's own shared
//! memory (`proxy-shm`, every build).

use std::sync::Arc;

use proxy_bootstrap::SharedBootstrap;
use proxy_collectives::planner::tuner::LinkKind;
use proxy_core::driver::idle::IdleWait;
use proxy_core::progress::comm::Comm;
use proxy_runtime::hostmem::{HostMem, HostMemCallbacks};

use crate::args::{Args, TransportArg};

/// An opened comm and what the header and the tuner say of its transport.
pub(super) struct ProcessComm {
    pub comm: Comm,
    /// The comm's idle wait on the completion queue's descriptor (libfabric tcp, when asked).
    pub cq_idle: Option<Arc<dyn IdleWait>>,
    /// For the header: the transport, how its large messages move, how it idles.
    pub transport: String,
    /// The tuner's default constants for it.
    pub link: LinkKind,
}

/// Opens this process's comm over `peers` (every process calls it at the same point), its
/// buffers and words in `mem`; `block`: the comm may block when idle (a CQ descriptor where
/// the provider has one), else it yields.
///
/// # Errors
/// A message when the comm cannot be set up on any rank.
pub(super) fn open(
    args: &Args,
    peers: &SharedBootstrap,
    mem: &Arc<HostMem>,
    block: bool,
    provider: Option<String>,
) -> Result<ProcessComm, String> {
    let device = Arc::new(HostMemCallbacks::new(mem.clone()));
    let clock = Arc::new(proxy_core::base::time::MonotonicClock);
    let (mut comm, cq_idle, transport, link) = if args.transport == TransportArg::Shm {
        let sc = proxy_shm::ShmCommConfig::default();
        let comm =
            proxy_shm::open_shm_comm(peers, &sc, device, clock).map_err(|e| e.to_string())?;
        let transport = "proxy-shm (own shared memory; large messages: CMA)".to_owned();
        (comm, None, transport, LinkKind::SharedMemory)
    } else {
        open_libfabric(peers, device, clock, block, provider)?
    };
    // SAFETY: the tool owns every buffer and word it hands to `start`, and keeps them alive
    // until the executions that use them are complete (buffers of finished rows are retired,
    // not freed, until the comm is gone).
    unsafe { comm.trust_all_addresses() };
    let transport = match (&cq_idle, block) {
        (Some(_), _) => format!("{transport}; idle: blocks on the CQ descriptor"),
        (None, true) => format!("{transport}; idle: yields (no CQ descriptor)"),
        (None, false) => transport,
    };
    Ok(ProcessComm {
        comm,
        cq_idle,
        transport,
        link,
    })
}

/// What [`open`] takes from a libfabric comm: the comm, its idle wait, the header's transport
/// text, the tuner's link kind.
type Opened = (Comm, Option<Arc<dyn IdleWait>>, String, LinkKind);

/// The comm over libfabric (`provider`, or `FI_PROVIDER` / the automatic choice); `block`: an
/// idle wait on the CQ descriptor where the provider has one.
#[cfg(feature = "libfabric")]
fn open_libfabric(
    peers: &SharedBootstrap,
    device: Arc<HostMemCallbacks>,
    clock: Arc<proxy_core::base::time::MonotonicClock>,
    block: bool,
    provider: Option<String>,
) -> Result<Opened, String> {
    use proxy_libfabric::net_setup::{open_libfabric_comm_with_idle, LibfabricCommConfig};
    use proxy_libfabric::Options;
    let lf = LibfabricCommConfig {
        transport: Options {
            provider,
            cq_wait_fd: block,
            ..Options::default()
        },
        ..LibfabricCommConfig::default()
    };
    // SAFETY: the idle wait goes only into the comm's proxy queue (World::join), whose
    // drive token holder alone calls it, between its ticks.
    let (comm, cq_idle) = unsafe { open_libfabric_comm_with_idle(peers, &lf, device, clock) }
        .map_err(|e| e.to_string())?;
    let name = comm.transport().name();
    let prov = name.strip_prefix("libfabric/").unwrap_or(name).to_owned();
    // shm: how its large messages move (CMA, or mmap when CMA is unavailable), as the
    // transport detected it at open.
    let transport = match proxy_libfabric::shm_cma::shm_large_messages() {
        Some(shm) if prov == "shm" => format!(
            "libfabric (provider shm; large messages: {})",
            shm.describe()
        ),
        _ => format!("libfabric (provider {prov})"),
    };
    let cq_idle = cq_idle.map(|c| c as Arc<dyn IdleWait>);
    Ok((comm, cq_idle, transport, LinkKind::of_provider(&prov)))
}

/// Without the `libfabric` feature: refused, with [`crate::NO_LIBFABRIC`] (which
/// `crate::libfabric_built` answers earlier, before any process starts).
#[cfg(not(feature = "libfabric"))]
fn open_libfabric(
    _peers: &SharedBootstrap,
    _device: Arc<HostMemCallbacks>,
    _clock: Arc<proxy_core::base::time::MonotonicClock>,
    _block: bool,
    _provider: Option<String>,
) -> Result<Opened, String> {
    Err(crate::NO_LIBFABRIC.into())
}
