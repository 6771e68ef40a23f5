//! `NCCOM_TRANSPORT_LIBFABRIC` (feature `libfabric`): a comm over libfabric, built by the
//! bootstrap of `proxy-bootstrap` (`bootstrap.rs`: rank 0 listens on the root address, every
//! rank connects; endpoint names are all-gathered) and `open_libfabric_comm`.
//!
//! Creation is collective: every rank of the comm calls `nccom_comm_create` with the same
//! `nranks`, `comm_id`, provider and root address, and each call blocks until every rank is
//! connected, at most the bootstrap timeout. The bootstrap connections stay open for the comm's
//! life: its transport watches them for a lost peer (docs/design.md §9, "Liveness"), so a rank
//! that dies fails the comm on every other rank with `NRT_NETWORK_PROXY_FAILURE` naming it,
//! instead of leaving them to the exec timeout. Destroying the comm closes them (`Bye`). The
//! C ABI has no barrier over them; a runtime synchronises its processes itself.

use std::sync::Arc;
use std::time::Duration;

use proxy_abi::boundary::c_string;
use proxy_abi::{NccomCommConfig, NCCOM_COMM_IDLE_WAIT};
use proxy_core::base::status::NrtStatus;
use proxy_core::base::time::Clock;
use proxy_core::progress::comm::Comm;
use proxy_core::progress::device::DeviceCallbacks;
use proxy_libfabric::net_setup::{open_libfabric_comm_with_idle, LibfabricCommConfig};
use proxy_libfabric::{CqIdleWait, Options};

use crate::bootstrap;

/// Opens this rank's libfabric comm over its bootstrap (`bootstrap::join`: rank `cfg.rank` of
/// `cfg.nranks` at the root address of the config, comm id `cfg.comm_id`); with
/// `NCCOM_COMM_IDLE_WAIT` in `cfg.flags`, its CQ with a wait descriptor, and its idle wait
/// (`None` when the provider has no descriptor: shm).
///
/// # Errors
/// The bootstrap's or the set-up's status (`Invalid` for a malformed root address, `Timeout`
/// when a rank does not arrive in time, `NetworkProxyFailure` when a rank's endpoint fails),
/// with a log line naming the cause.
///
/// # Safety
/// As `bootstrap::validate`.
pub unsafe fn create(
    what: &str,
    cfg: &NccomCommConfig,
    device: Arc<dyn DeviceCallbacks>,
    clock: Arc<dyn Clock>,
) -> Result<(Comm, Option<Arc<CqIdleWait>>), NrtStatus> {
    let lf = &cfg.transport.libfabric;
    // SAFETY: the caller's contract.
    let provider = unsafe { c_string(what, "transport.libfabric.provider", lf.provider)? };
    // SAFETY: the caller's contract.
    let boot = unsafe { bootstrap::join(what, cfg) }?;
    let lc = LibfabricCommConfig {
        transport: Options {
            provider,
            cq_wait_fd: cfg.flags & NCCOM_COMM_IDLE_WAIT != 0,
            ..Options::default()
        },
        comm_id: Some(cfg.comm_id),
        drain_limit: (cfg.drain_limit_ns != 0).then(|| Duration::from_nanos(cfg.drain_limit_ns)),
    };
    // SAFETY: the idle wait is armed and slept on only through `with_comm` (`idle.rs`): the
    // comm's handle slot is held busy meanwhile, so no other call drives the transport.
    unsafe { open_libfabric_comm_with_idle(&boot, &lc, device, clock) }
        .map_err(|e| bootstrap::fail(what, cfg, &e, e.status()))
}
