//! The bootstrap of a comm between processes (`NCCOM_TRANSPORT_LIBFABRIC` and
//! `NCCOM_TRANSPORT_SHM`): rank 0 listens on the root address of the config (else
//! `NEURON_RT_ROOT_COMM_ID`), every rank connects, each call blocks until every rank is there
//! (at most the bootstrap timeout). The comm's transport keeps the connections open for the
//! comm's life and watches them for a lost peer (docs/design.md §9, "Liveness").

use std::time::Duration;

use proxy_abi::boundary::c_string;
use proxy_abi::NccomCommConfig;
use proxy_bootstrap::{Bootstrap, BootstrapConfig, SharedBootstrap};
use proxy_core::base::status::NrtStatus;

/// Checks the bootstrap strings of a config (`transport.libfabric.root_addr`, and the
/// provider, which only libfabric reads) before anything is created.
///
/// # Safety
/// `cfg.transport.libfabric`'s strings must be NULL or NUL-terminated (the C contract of
/// `nccom_comm_config_t`).
pub unsafe fn validate(what: &str, cfg: &NccomCommConfig) -> Result<(), NrtStatus> {
    let lf = &cfg.transport.libfabric;
    // SAFETY: the caller's contract.
    unsafe {
        c_string(what, "transport.libfabric.provider", lf.provider)?;
        c_string(what, "transport.libfabric.root_addr", lf.root_addr)?;
    }
    Ok(())
}

/// Bootstraps this rank (`cfg.rank` of `cfg.nranks`, comm id `cfg.comm_id`, which every rank
/// must give alike: a rank whose id differs from the root's fails).
///
/// # Errors
/// The bootstrap's status (`Invalid` for a malformed root address or a comm id that differs
/// from the root's, `Timeout` when a rank does not arrive in time), with a log line naming the
/// cause.
///
/// # Safety
/// As [`validate`].
pub unsafe fn join(what: &str, cfg: &NccomCommConfig) -> Result<SharedBootstrap, NrtStatus> {
    let lf = &cfg.transport.libfabric;
    // SAFETY: the caller's contract.
    let root = unsafe { c_string(what, "transport.libfabric.root_addr", lf.root_addr)? };
    let mut bc = BootstrapConfig::from_env(Some(cfg.rank), Some(cfg.nranks), root.as_deref())
        .map_err(|e| fail(what, cfg, &e, e.status()))?;
    if lf.bootstrap_timeout_ms != 0 {
        bc.timeout = Duration::from_millis(lf.bootstrap_timeout_ms);
    }
    bc.comm_id = Some(cfg.comm_id);
    let boot = Bootstrap::init(&bc).map_err(|e| fail(what, cfg, &e, e.status()))?;
    if boot.comm_id() != cfg.comm_id {
        let e = format!(
            "comm id {} differs from the root's {} (every rank must give the same comm_id)",
            cfg.comm_id,
            boot.comm_id()
        );
        return Err(fail(what, cfg, &e, NrtStatus::Invalid));
    }
    // The comm's transport keeps the only other handle: the connections live as long as the
    // comm, and close (with `Bye`) when it is destroyed.
    Ok(SharedBootstrap::new(boot))
}

/// Logs a set-up failure naming the rank; returns its status.
pub fn fail(
    what: &str,
    cfg: &NccomCommConfig,
    e: &dyn std::fmt::Display,
    s: NrtStatus,
) -> NrtStatus {
    log::error!("{what}: rank {} of {}: {e}", cfg.rank, cfg.nranks);
    s
}
