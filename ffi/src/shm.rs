//! `NCCOM_TRANSPORT_SHM` (ABI 1.5): a comm over the engine's own shared memory between the
//! processes of one host (`proxy-shm`), bootstrapped as a libfabric comm is (`bootstrap.rs`;
//! the root address and timeout of `transport.libfabric`, whose `provider` must be NULL).
//!
//! Creation is collective: every rank of the comm calls `nccom_comm_create` with the same
//! `nranks`, `comm_id` and root address, every rank on this host; each call blocks until every
//! rank has mapped every segment, at most the bootstrap timeout. A rank that dies fails the
//! comm on every other rank with `NRT_NETWORK_PROXY_FAILURE` naming it. The comm has no idle
//! wait (`NCCOM_COMM_IDLE_WAIT` is ignored, as for libfabric shm).

use std::sync::Arc;
use std::time::Duration;

use proxy_abi::NccomCommConfig;
use proxy_core::base::status::NrtStatus;
use proxy_core::base::time::Clock;
use proxy_core::progress::comm::Comm;
use proxy_core::progress::device::DeviceCallbacks;
use proxy_shm::{open_shm_comm, ShmCommConfig};

use crate::bootstrap;

/// Bootstraps this rank and opens its shared-memory comm (comm id `cfg.comm_id`).
///
/// # Errors
/// The bootstrap's status (see `bootstrap::join`); `Invalid` when the ranks span hosts;
/// `NetworkProxyFailure` when a rank cannot create or map a segment, or read a peer's memory
/// (every rank reports it); each with a log line naming the cause.
///
/// # Safety
/// As `bootstrap::validate`.
pub unsafe fn create(
    what: &str,
    cfg: &NccomCommConfig,
    device: Arc<dyn DeviceCallbacks>,
    clock: Arc<dyn Clock>,
) -> Result<Comm, NrtStatus> {
    // SAFETY: the caller's contract.
    let boot = unsafe { bootstrap::join(what, cfg) }?;
    let sc = ShmCommConfig {
        drain_limit: (cfg.drain_limit_ns != 0).then(|| Duration::from_nanos(cfg.drain_limit_ns)),
    };
    open_shm_comm(&boot, &sc, device, clock).map_err(|e| bootstrap::fail(what, cfg, &e, e.status()))
}
