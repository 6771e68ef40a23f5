//! A [`Comm`] over the shared-memory transport for one process of a host, built from a
//! [`Bootstrap`](proxy_bootstrap::Bootstrap):
//!
//! ```text
//!  create own segment ─► all-gather {pid, address | error}
//!    ─► map every peer's segment, check its header, read its magic across processes (CMA)
//!    ─► all-gather {mapped | error} ─► unlink own file ─► set_peer_watch ─► Comm::new
//! ```
//!
//! Each step's outcome is all-gathered ([`proxy_bootstrap::Bootstrap::all_gather_outcome`]),
//! so a rank that cannot create or map a segment, or cannot read a peer's memory, fails every
//! rank at once, naming it. The files are unlinked as soon as every rank has mapped them (and
//! by their owner's drop on a failed set-up): a crash afterwards leaves nothing in `/dev/shm`.

use std::path::PathBuf;
use std::sync::Arc;

use proxy_bootstrap::{BootstrapError, PeerWatch, SharedBootstrap, StepFailed};
use proxy_core::base::time::Clock;
use proxy_core::progress::comm::{Comm, CommConfig};
use proxy_core::progress::device::DeviceCallbacks;
use proxy_core::NrtStatus;

use crate::segment::{Layout, Owner, Segment, MAX_RANKS};
use crate::transport::ShmTransport;

/// Why the comm could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShmSetupError {
    /// The bootstrap failed (its own error says on which rank and why).
    Bootstrap(BootstrapError),
    /// The ranks are not all on this host, or more than [`MAX_RANKS`].
    Unsupported(String),
    /// This rank could not create or map a segment, or read a peer.
    Local(String),
    /// Another rank failed; its message.
    Peer {
        /// The failed rank (the lowest, when several failed).
        rank: u32,
        /// Its error.
        message: String,
    },
    /// `Comm::new` rejected the configuration.
    Comm(NrtStatus),
}

impl ShmSetupError {
    /// The status the failure maps to.
    pub fn status(&self) -> NrtStatus {
        match self {
            Self::Bootstrap(e) => e.status(),
            Self::Unsupported(_) => NrtStatus::Invalid,
            Self::Local(_) | Self::Peer { .. } => NrtStatus::NetworkProxyFailure,
            Self::Comm(s) => *s,
        }
    }
}

impl std::fmt::Display for ShmSetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bootstrap(e) => write!(f, "{e}"),
            Self::Unsupported(m) | Self::Local(m) => write!(f, "shm comm setup: {m}"),
            Self::Peer { rank, message } => {
                write!(f, "shm comm setup: rank {rank} failed: {message}")
            }
            Self::Comm(s) => write!(f, "shm comm setup: comm rejected: {s}"),
        }
    }
}

impl std::error::Error for ShmSetupError {}

impl From<BootstrapError> for ShmSetupError {
    fn from(e: BootstrapError) -> Self {
        Self::Bootstrap(e)
    }
}

/// How to build the comm.
#[derive(Clone, Debug, Default)]
pub struct ShmCommConfig {
    /// `stop`'s drain limit instead of the default (1 s).
    pub drain_limit: Option<std::time::Duration>,
}

impl From<StepFailed> for ShmSetupError {
    fn from(f: StepFailed) -> Self {
        Self::Peer {
            rank: f.rank,
            message: f.message,
        }
    }
}

/// Creates this rank's segment, maps every peer's, and creates the comm (rank, nranks and comm
/// id from the bootstrap). Every rank of the bootstrap must call it at the same point; every
/// rank must be on this host. Holds `shared`'s lock until it returns.
///
/// The comm's transport keeps a handle on the bootstrap and checks it for a lost peer from its
/// polls ([`PeerWatch`]), as the libfabric comm does.
///
/// # Errors
/// * [`ShmSetupError::Unsupported`]: the ranks span hosts, or there are more than
///   [`MAX_RANKS`];
/// * [`ShmSetupError::Local`]: this rank's segment could not be created (a full `/dev/shm`
///   names the bytes it needed), a peer's could not be mapped or did not match, or the kernel
///   refused to read a peer's memory (`process_vm_readv`: ptrace rules, a seccomp filter);
/// * [`ShmSetupError::Peer`]: another rank failed so (every rank reports it);
/// * [`ShmSetupError::Bootstrap`]: the all-gathers failed;
/// * [`ShmSetupError::Comm`]: the comm id or size is out of range.
pub fn open_shm_comm(
    shared: &SharedBootstrap,
    cfg: &ShmCommConfig,
    device: Arc<dyn DeviceCallbacks>,
    clock: Arc<dyn Clock>,
) -> Result<Comm, ShmSetupError> {
    let mut boot = shared.lock();
    let (rank, nranks, comm_id) = (boot.rank(), boot.nranks(), boot.comm_id());
    if !boot.all_local() {
        return Err(ShmSetupError::Unsupported(
            "the ranks span hosts: shared memory joins the processes of one host only".into(),
        ));
    }
    if nranks > MAX_RANKS {
        return Err(ShmSetupError::Unsupported(format!(
            "{nranks} ranks: the shm transport takes at most {MAX_RANKS}"
        )));
    }
    allow_peer_reads();
    let layout = Layout { nranks };
    let pid = std::process::id();

    // 1. Our segment; all-gather {pid, address} or the error (the paths follow from the pids).
    let path = segment_path(pid, comm_id, rank);
    let created = Segment::create(&path, layout, Owner { rank, pid }).map_err(|e| {
        format!(
            "creating {} ({} bytes): {e}",
            path.display(),
            layout.bytes()
        )
    });
    let record = created.as_ref().map(|seg| {
        let mut p = Vec::new();
        p.extend_from_slice(&pid.to_le_bytes());
        p.extend_from_slice(&(seg.base() as u64).to_le_bytes());
        p
    });
    let all = boot.all_gather_outcome(record.as_deref().map_err(|e| e.as_str()))??;
    let own = Arc::new(created.map_err(ShmSetupError::Local)?);

    // 2. Map every peer's segment and read its magic through the kernel.
    let mapped = map_peers(rank, comm_id, layout, &own, &all);
    let message = mapped.as_ref().map(|_| ()).map_err(String::clone);
    boot.all_gather_outcome(message.as_ref().map(|()| &[][..]).map_err(String::as_str))??;
    let (segments, pids) = mapped.map_err(ShmSetupError::Local)?;
    drop(own);

    // 3. Every rank has every segment mapped: the files can go.
    if let Err(e) = segments[rank as usize].unlink() {
        log::warn!("shm comm: cannot remove {}: {e}", path.display());
    }
    let mut transport =
        ShmTransport::new(rank, segments, pids).map_err(|e| ShmSetupError::Local(e.to_string()))?;
    transport.set_peer_watch(PeerWatch::new(shared));
    let mut config = CommConfig::new(rank, nranks, comm_id);
    if let Some(d) = cfg.drain_limit {
        config.drain_limit_ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    }
    log::info!("rank {rank}/{nranks}: shm comm {comm_id} mapped {nranks} segments");
    let mut comm =
        Comm::new(config, Box::new(transport), device, clock).map_err(ShmSetupError::Comm)?;
    comm.set_drain_relax(std::thread::yield_now);
    Ok(comm)
}

/// Every rank's segment (ours from `own`, the others opened from the gathered records) and
/// every rank's pid; each peer's magic read across processes, so a kernel that refuses
/// cross-memory attach is found here, not at the first large message.
#[allow(clippy::type_complexity)]
pub(crate) fn map_peers(
    rank: u32,
    comm_id: u32,
    layout: Layout,
    own: &Arc<Segment>,
    all: &[Vec<u8>],
) -> Result<(Vec<Arc<Segment>>, Vec<u32>), String> {
    let mut segments = Vec::with_capacity(all.len());
    let mut pids: Vec<u32> = Vec::with_capacity(all.len());
    for (r, rec) in all.iter().enumerate() {
        let r = r as u32;
        let (Some(pid), Some(base), 12) = (
            rec.get(..4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes),
            rec.get(4..12)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes),
            rec.len(),
        ) else {
            return Err(format!("rank {r}: a malformed segment record"));
        };
        // One process per rank: a record naming another rank's process (ours, say) would
        // point that rank's large messages at memory it chose.
        if pids.contains(&pid) || (r != rank && pid == std::process::id()) {
            return Err(format!("rank {r} gave pid {pid}, which another rank has"));
        }
        pids.push(pid);
        let path = segment_path(pid, comm_id, r);
        if r == rank {
            segments.push(own.clone());
            continue;
        }
        let seg = Segment::open(&path, layout, Owner { rank: r, pid })
            .map_err(|e| format!("mapping rank {r}'s segment {}: {e}", path.display()))?;
        let mut magic = [0u8; 8];
        crate::transport::cma_read(pid, base, magic.as_mut_ptr(), 8).map_err(|e| {
            format!(
                "reading rank {r}'s memory (pid {pid}, process_vm_readv): {e}; the shm \
                 transport needs cross-memory attach between the processes of a host \
                 (same user; /proc/sys/kernel/yama/ptrace_scope at most 1)"
            )
        })?;
        // SAFETY: 8 bytes at the start of the live mapping `seg`, read as a plain integer.
        let want = unsafe { seg.base().cast::<[u8; 8]>().read_volatile() };
        if magic != want {
            return Err(format!(
                "rank {r}'s memory at {base:#x} is not its segment (pid {pid})"
            ));
        }
        segments.push(Arc::new(seg));
    }
    Ok((segments, pids))
}

/// The file of rank `rank`'s segment in the comm `comm_id`, owned by process `pid`: computed
/// by every rank alike, never taken from a peer.
fn segment_path(pid: u32, comm_id: u32, rank: u32) -> PathBuf {
    PathBuf::from(format!("/dev/shm/proxy-shm.{pid}.{comm_id}.{rank}"))
}

/// Lets any process of this user read ours under Yama's ptrace scope 1 (`PR_SET_PTRACER`), as
/// libfabric's shm provider does (for the life of the process); nothing to do without Yama.
fn allow_peer_reads() {
    // SAFETY: plain prctl with integer arguments; it changes only who may attach to us.
    let rc = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    if rc != 0 {
        log::debug!(
            "shm comm: PR_SET_PTRACER: {} (no Yama: not needed)",
            std::io::Error::last_os_error()
        );
    }
}
