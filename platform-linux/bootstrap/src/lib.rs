//! `proxy-bootstrap`: the bootstrap between processes over TCP.
//!
//! Dependencies: `proxy-core` (the barrier-channel trait, statuses), `log` and `libc` (the
//! host barrier's `mmap`); no thread runtime, no transport (`proxy-libfabric` builds a comm on top of it).
//!
//! Rank 0 listens on the root address, the other ranks
//! connect to it; together they agree on a comm id, all-gather byte blobs (libfabric endpoint
//! names), and keep the connections for a cross-process barrier (docs/design.md §4: the barrier task
//! between processes runs over the bootstrap connections).
//!
//! ```text
//!   rank 1 ─┐                         leaf → root: preface, Hello{rank, nranks, pid, host}
//!   rank 2 ─┼──TCP──► rank 0 (root)   root → leaf: preface, Welcome{comm id, hosts}  (all joined)
//!   rank 3 ─┘   star  listens on      all-gather:  Gather{seq, blob} ↑   Gathered{seq, blobs} ↓
//!                     NEURON_RT_      barrier:     Arrive{gen}       ↑   Release{gen}         ↓
//!                     ROOT_COMM_ID    group:       GroupArrive{g,gen} ↑  GroupRelease{g,gen}  ↓
//!                                     failure:     Abort{origin, status, reason} both ways
//!                                     lost leaf:   Lost{rank, reason}                   ↓
//!                                     close:       Bye, then shutdown and wait for the peer's EOF
//! ```
//!
//! * **Configuration** ([`BootstrapConfig`]): rank and size from arguments, else from launcher
//!   variables (our own [`LAUNCHER_VARS`] first, then Open MPI, PMI, Slurm); the root address from
//!   an argument, else `NEURON_RT_ROOT_COMM_ID=ip:port`; the timeout from
//!   `NEURON_RT_BOOTSTRAP_TIMEOUT` (seconds).
//! * **Bounded waits**: every blocking call ([`Bootstrap::init`], [`Bootstrap::all_gather`],
//!   [`Bootstrap::barrier`]) logs a warning every [`BootstrapConfig::warn_interval`] (10 s)
//!   with the cumulative wait and fails after [`BootstrapConfig::timeout`]. A rank that fails
//!   sends `Abort` to the ranks it is connected to (the root forwards it), so every rank that is
//!   present reports the error: its own timeout, or the abort, whichever comes first.
//! * **Strangers**: a connection to the root whose first bytes are not the magic is dropped with
//!   a warning; bootstrap goes on. A silent connection never delays it. A peer with the magic but
//!   another protocol version, the wrong size, or a rank already taken is a misconfigured job:
//!   it is rejected and the whole bootstrap fails with a message naming both sides.
//! * **Non-blocking barrier** for a task's `step()`: [`Bootstrap::barrier_start`], then
//!   [`Bootstrap::barrier_poll`] until it answers `true`; successive barriers are generations.
//!   [`SharedBootstrap::barrier_channel`] gives the same behind a mutex, for the worker thread.
//! * **Group barriers** ([`Bootstrap::register_group`], `group_barrier_start` / `_poll`): the
//!   same non-blocking barrier among a subset of the ranks, relayed by the root.
//! * **Hierarchical barrier** ([`HostBarrier`], one per comm): the processes of a host meet in a
//!   shared-memory region (`/dev/shm`, unlinked once every local rank mapped it), the host
//!   leaders in a group barrier; the leader takes the shared bootstrap only with `try_lock`, so
//!   the worker that steps a barrier task never blocks on it.
//! * **Failure is sticky**: after an error every call returns it. A peer that closes its
//!   connection without `Bye` (a killed process) fails the bootstrap of every rank that still
//!   uses it.
//! * **Dead peers** ([`PeerWatch`], docs/design.md §9 "Liveness"): every connection has TCP
//!   keepalive and `TCP_USER_TIMEOUT` ([`PEER_TIMEOUT`]); a comm keeps the bootstrap open for
//!   its life and checks it without blocking from its progress rounds. The root, on losing a
//!   leaf, sends `Lost{rank}` to every other leaf, so every rank reports
//!   [`BootstrapError::PeerLost`] naming the dead rank.
//!
//! Seed: the bootstrap of the nccom communicator (NCCL's `bootstrap.cc` shape: root listener,
//! all-gather of handles), §1; docs/design.md §4 (barrier task between processes).
pub mod launch;
#[cfg(test)]
mod tests;
mod wire;

mod barrier;
mod config;
mod conn;
mod error;
mod exchange;
mod group;
mod host_barrier;
mod leaf;
mod root;
mod shm;
mod watch;

use std::net::{Shutdown, SocketAddr};
use std::time::{Duration, Instant};

/// A ticket for one barrier generation: what [`Bootstrap::barrier_start`] returns and
/// [`Bootstrap::barrier_poll`] checks (the driver's ticket type).
pub use proxy_core::driver::task::BarrierTicket;
use proxy_core::progress::net::MAX_COMM_ID;

use self::barrier::reached;
pub use self::barrier::{BootstrapBarrier, SharedBootstrap};
pub use self::config::{host_identity, parse_root, BootstrapConfig};
use self::conn::{poll_backoff, Conn};
pub use self::conn::{KEEPALIVE_IDLE, PEER_TIMEOUT};
pub use self::error::BootstrapError;
pub use self::exchange::StepFailed;
pub use self::group::GroupId;
use self::group::GroupState;
pub use self::host_barrier::{
    HostBarrier, HostBarrierConfig, HOST_BARRIER_DIR, HOST_BARRIER_PREFIX, LIVENESS_EVERY,
};
use self::root::Peer;
pub use self::watch::{coarse_ns, PeerWatch, ABORT_GRACE, WATCH_INTERVAL};
use self::wire::Frame;
pub use self::wire::{MAGIC, MAX_FRAME, VERSION as PROTOCOL_VERSION};
use proxy_core::base::backoff::StdPause;

/// The root address variable: `ip:port` (a host name is resolved) on which rank 0 listens.
pub const ROOT_COMM_ID_ENV: &str = "NEURON_RT_ROOT_COMM_ID";

/// The environment variable in which a launcher hands rank 0 the root's listening socket it
/// reserved ([`launch::LocalLaunch::reserving`]): a file-descriptor number, inherited. Rank 0
/// uses it once, and only when the socket listens on exactly the root address; otherwise it
/// binds the root address itself.
pub const ROOT_FD_ENV: &str = "PROXY_BOOTSTRAP_ROOT_FD";
/// The bootstrap timeout variable, in seconds (fractions allowed).
pub const TIMEOUT_ENV: &str = "NEURON_RT_BOOTSTRAP_TIMEOUT";
/// Default bound of every blocking bootstrap call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Default interval of the "still waiting" warnings.
pub const DEFAULT_WARN_INTERVAL: Duration = Duration::from_secs(10);
/// Default bound of [`Bootstrap::close`]'s wait for the peers to close their side.
pub const DEFAULT_CLOSE_LINGER: Duration = Duration::from_secs(2);
/// Connections that have not said who they are, kept at once by the root; the oldest is dropped
/// beyond it.
const MAX_PENDING: usize = 64;

/// Rank / size variable pairs, in the order they are consulted: our own local launcher
/// ([`launch`]), Open MPI, PMI (MPICH, Intel MPI, Slurm's PMI), Slurm.
pub const LAUNCHER_VARS: [(&str, &str); 4] = [
    ("PROXY_RANK", "PROXY_NRANKS"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
];

#[derive(Debug)]
enum Role {
    /// Rank 0: one connection per other rank (index = rank; 0 is `None`).
    Root { peers: Vec<Option<Peer>> },
    /// Any other rank: the connection to the root.
    Leaf {
        conn: Conn,
        /// The root said `Bye`.
        root_left: bool,
        /// A received all-gather result `(seq, blobs)` not taken yet.
        gathered: Option<(u32, Vec<Vec<u8>>)>,
    },
}

/// A finished bootstrap: rank, size, comm id, every rank's host, and the connections (a star
/// around rank 0) for all-gathers and barriers.
///
/// Used by one thread at a time (`&mut self`); share it through [`SharedBootstrap`].
#[derive(Debug)]
pub struct Bootstrap {
    rank: u32,
    nranks: u32,
    comm_id: u32,
    root: SocketAddr,
    timeout: Duration,
    warn_interval: Duration,
    close_linger: Duration,
    hosts: Vec<Vec<u8>>,
    role: Role,
    /// The last barrier generation this rank arrived at (0 = none yet).
    barrier_gen: u32,
    /// The highest barrier generation released (every rank arrived).
    released: u32,
    /// All-gathers completed.
    gather_seq: u32,
    /// Registered group barriers, by [`GroupId`].
    groups: Vec<GroupState>,
    /// The sticky failure.
    failed: Option<BootstrapError>,
    closed: bool,
}

impl Bootstrap {
    /// Runs the bootstrap: rank 0 listens on `cfg.root` and waits for every other rank, which
    /// connect (retrying while the root is not up yet); when all have joined, rank 0 picks the
    /// comm id and sends it with every rank's host to all. Blocks at most `cfg.timeout`.
    ///
    /// # Errors
    /// * [`BootstrapError::Config`] for a bad config;
    /// * [`BootstrapError::Io`] when the root address cannot be listened on;
    /// * [`BootstrapError::Timeout`] when a rank is missing (the root names the missing ranks;
    ///   a leaf says whether it could connect);
    /// * [`BootstrapError::Misconfigured`] for a misconfigured job (size, rank taken, version), on the
    ///   root and on the rejected leaf; [`BootstrapError::Aborted`] on the other leaves;
    /// * [`BootstrapError::PeerLost`] when the root goes away.
    pub fn init(cfg: &BootstrapConfig) -> Result<Self, BootstrapError> {
        if cfg.nranks == 0
            || cfg.rank >= cfg.nranks
            || cfg.nranks > proxy_core::progress::net::MAX_NRANKS
        {
            return Err(BootstrapError::Config(format!(
                "rank {} of {} ranks",
                cfg.rank, cfg.nranks
            )));
        }
        if let Some(id) = cfg.comm_id {
            if id >= MAX_COMM_ID {
                return Err(BootstrapError::Config(format!(
                    "comm id {id} must be < {MAX_COMM_ID}"
                )));
            }
        }
        let b = if cfg.rank == 0 {
            Self::init_root(cfg)?
        } else {
            Self::init_leaf(cfg)?
        };
        log::info!(
            "bootstrap rank {}/{}: comm id {} via root {} ({} host{})",
            b.rank,
            b.nranks,
            b.comm_id,
            b.root,
            b.distinct_hosts(),
            if b.distinct_hosts() == 1 { "" } else { "s" }
        );
        Ok(b)
    }

    fn with_role(cfg: &BootstrapConfig, role: Role, comm_id: u32, hosts: Vec<Vec<u8>>) -> Self {
        Self {
            rank: cfg.rank,
            nranks: cfg.nranks,
            comm_id,
            root: cfg.root,
            timeout: cfg.timeout,
            warn_interval: cfg.warn_interval,
            close_linger: cfg.close_linger,
            hosts,
            role,
            barrier_gen: 0,
            released: 0,
            gather_seq: 0,
            groups: Vec::new(),
            failed: None,
            closed: false,
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of processes.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// The comm id rank 0 picked (`< 2^15`), the same on every rank.
    pub fn comm_id(&self) -> u32 {
        self.comm_id
    }

    /// The root address.
    pub fn root(&self) -> SocketAddr {
        self.root
    }

    /// The bound of blocking calls.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Every rank's host identity ([`host_identity`]), by rank.
    pub fn hosts(&self) -> &[Vec<u8>] {
        &self.hosts
    }

    /// `true` when every rank runs on this rank's host.
    pub fn all_local(&self) -> bool {
        let me = &self.hosts[self.rank as usize];
        self.hosts.iter().all(|h| h == me)
    }

    fn distinct_hosts(&self) -> usize {
        let mut h: Vec<&Vec<u8>> = self.hosts.iter().collect();
        h.sort();
        h.dedup();
        h.len()
    }

    /// The sticky failure, if any.
    pub fn failure(&self) -> Option<&BootstrapError> {
        self.failed.as_ref()
    }

    fn check(&self, what: &str) -> Result<(), BootstrapError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.closed {
            return Err(BootstrapError::Closed {
                rank: self.rank,
                what: what.to_owned(),
            });
        }
        Ok(())
    }

    /// Records the first failure, tells every peer (`Abort`), and returns it.
    fn fail(&mut self, err: BootstrapError) -> BootstrapError {
        if let Some(e) = &self.failed {
            return e.clone();
        }
        log::error!("{err}");
        if let BootstrapError::PeerLost { peer, message, .. } = &err {
            // A lost peer (docs/design.md §9, "Liveness", part 2): the root tells every other
            // leaf which rank it lost (`Lost`); a leaf that lost the root, or was told of a lost
            // rank, has no one left to tell.
            if let Role::Root { peers } = &mut self.role {
                let lost = Frame::Lost {
                    rank: *peer,
                    reason: message.clone(),
                };
                for (r, p) in peers.iter_mut().enumerate() {
                    if let Some(p) = p {
                        if r as u32 != *peer && !p.left && !p.conn.eof {
                            p.conn.send_last(&lost);
                        }
                    }
                }
            }
            self.failed = Some(err.clone());
            return err;
        }
        let (origin, status, reason) = match &err {
            BootstrapError::Aborted {
                origin,
                status,
                reason,
                ..
            } => (*origin, *status, reason.clone()),
            e => (self.rank, e.status(), e.to_string()),
        };
        let abort = Frame::Abort {
            origin,
            status: status.code(),
            reason,
        };
        match &mut self.role {
            Role::Root { peers } => {
                for (r, p) in peers.iter_mut().enumerate() {
                    if let Some(p) = p {
                        if r as u32 != origin && !p.left && !p.conn.eof {
                            p.conn.send_last(&abort);
                        }
                    }
                }
            }
            Role::Leaf { conn, .. } => {
                if origin == self.rank && !conn.eof {
                    conn.send_last(&abort);
                }
            }
        }
        self.failed = Some(err.clone());
        err
    }

    /// Closes cleanly: sends `Bye` (unless failed), stops sending, and waits at most the close
    /// linger for every peer to close its side, so that nothing sent is lost to a reset.
    /// Idempotent; dropping the bootstrap closes it too.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        // One last non-blocking look at the connections before saying `Bye`: a peer lost since
        // the last watch (a leaf killed while this rank's comm failed on the transport's own
        // error and stopped polling its watch) is then reported as lost (the root tells the
        // other leaves, `Lost`) instead of being covered by a clean `Bye`, after which the
        // other leaves would wait for the exec timeout.
        if self.failed.is_none() {
            let _ = self.watch_peers();
        }
        self.closed = true;
        let bye = self.failed.is_none();
        let mut conns: Vec<&mut Conn> = match &mut self.role {
            Role::Root { peers } => peers.iter_mut().flatten().map(|p| &mut p.conn).collect(),
            Role::Leaf { conn, .. } => vec![conn],
        };
        for c in conns.iter_mut() {
            if bye && !c.shut {
                c.queue(&Frame::Bye);
            }
        }
        let deadline = Instant::now() + self.close_linger;
        let mut backoff = poll_backoff();
        loop {
            let mut open = 0;
            for c in conns.iter_mut() {
                if !c.shut {
                    if c.flush().is_err() {
                        c.eof = true;
                        c.shut = true;
                    } else if c.unsent() == 0 {
                        let _ = c.stream.shutdown(Shutdown::Write);
                        c.shut = true;
                    }
                }
                if !c.eof {
                    if c.fill().is_err() {
                        c.eof = true;
                    }
                    c.rbuf.clear();
                }
                if !(c.shut && c.eof) {
                    open += 1;
                }
            }
            if open == 0 {
                break;
            }
            if Instant::now() >= deadline {
                log::debug!(
                    "bootstrap rank {}: {open} connection(s) still open after the close linger",
                    self.rank
                );
                break;
            }
            backoff.pause(&StdPause);
        }
        log::debug!("bootstrap rank {}/{}: closed", self.rank, self.nranks);
    }
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        self.close();
    }
}
