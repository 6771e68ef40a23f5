//! `proxy-bootstrap`: the bootstrap between processes over TCP.
//!
//! Dependencies: `proxy-core` (the barrier-channel trait, statuses) and `log` only; no thread
//! runtime, no transport (`proxy-libfabric` builds a comm on top of it).
//!
//! Rank 0 listens on the root address, the other ranks
//! connect to it; together they agree on a comm id, all-gather byte blobs (libfabric endpoint
//! names), and keep the connections for a cross-process barrier (DESIGN.md §4: the barrier task
//! between processes runs over the bootstrap connections).
//!
//! ```text
//!   rank 1 ─┐                         leaf → root: preface, Hello{rank, nranks, pid, host}
//!   rank 2 ─┼──TCP──► rank 0 (root)   root → leaf: preface, Welcome{comm id, hosts}  (all joined)
//!   rank 3 ─┘   star  listens on      all-gather:  Gather{seq, blob} ↑   Gathered{seq, blobs} ↓
//!                     NEURON_RT_      barrier:     Arrive{gen}       ↑   Release{gen}         ↓
//!                     ROOT_COMM_ID    failure:     Abort{origin, status, reason} both ways
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
//! * **Failure is sticky**: after an error every call returns it. A peer that closes its
//!   connection without `Bye` (a killed process) fails the bootstrap of every rank that still
//!   uses it.
//!
//! Seed: the bootstrap of the nccom communicator (NCCL's `bootstrap.cc` shape: root listener,
//! all-gather of handles), §1; DESIGN.md §4 (barrier task between processes).

pub mod launch;
#[cfg(test)]
mod tests;
mod wire;

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use proxy_core::net::MAX_COMM_ID;
use proxy_core::task::BarrierChannel;
/// A ticket for one barrier generation: what [`Bootstrap::barrier_start`] returns and
/// [`Bootstrap::barrier_poll`] checks (the driver's ticket type).
pub use proxy_core::task::BarrierTicket;
use proxy_core::NrtStatus;

use self::wire::{Frame, Preface};
pub use self::wire::{MAGIC, MAX_FRAME, VERSION as PROTOCOL_VERSION};

/// The root address variable: `ip:port` (a host name is resolved) on which rank 0 listens.
pub const ROOT_COMM_ID_ENV: &str = "NEURON_RT_ROOT_COMM_ID";
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

/// A bootstrap failure. Every variant names the rank that reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootstrapError {
    /// Bad arguments or environment (no rank, unparsable root address, rank ≥ size, ...).
    Config(String),
    /// A socket call failed.
    Io {
        /// Reporting rank.
        rank: u32,
        /// What was being done.
        context: String,
        /// The OS error kind.
        kind: io::ErrorKind,
        /// The OS error text.
        message: String,
    },
    /// A bounded wait ran out.
    Timeout {
        /// Reporting rank.
        rank: u32,
        /// What was awaited (names the missing ranks where known).
        what: String,
        /// How long it waited.
        waited: Duration,
    },
    /// A peer broke the protocol (a malformed or unexpected frame).
    Protocol {
        /// Reporting rank.
        rank: u32,
        /// What happened.
        message: String,
    },
    /// The job is misconfigured: ranks launched with different sizes, a rank taken twice, or
    /// different protocol versions. Reported at once by the root and the offending rank.
    Misconfigured {
        /// Reporting rank.
        rank: u32,
        /// What differs, naming both sides.
        message: String,
    },
    /// A peer went away without closing cleanly (its process exited or was killed).
    PeerLost {
        /// Reporting rank.
        rank: u32,
        /// The rank that went away.
        peer: u32,
        /// What was seen.
        message: String,
    },
    /// Another rank failed first and aborted the bootstrap.
    Aborted {
        /// Reporting rank.
        rank: u32,
        /// The rank that failed first.
        origin: u32,
        /// Its status.
        status: NrtStatus,
        /// Its error message.
        reason: String,
    },
    /// The bootstrap was closed, or the peer needed has closed its side.
    Closed {
        /// Reporting rank.
        rank: u32,
        /// What was attempted.
        what: String,
    },
}

impl BootstrapError {
    /// The status this failure maps to: `Timeout` for a timeout (also one forwarded by an abort),
    /// `Invalid` for configuration and a misconfigured job, `Closed` for use after close, else
    /// `NetworkProxyFailure`.
    pub fn status(&self) -> NrtStatus {
        match self {
            Self::Config(_) | Self::Misconfigured { .. } => NrtStatus::Invalid,
            Self::Timeout { .. } => NrtStatus::Timeout,
            Self::Aborted { status, .. } => *status,
            Self::Closed { .. } => NrtStatus::Closed,
            Self::Io { .. } | Self::Protocol { .. } | Self::PeerLost { .. } => {
                NrtStatus::NetworkProxyFailure
            }
        }
    }

    fn io(rank: u32, context: impl Into<String>, e: &io::Error) -> Self {
        Self::Io {
            rank,
            context: context.into(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(m) => write!(f, "bootstrap configuration: {m}"),
            Self::Io {
                rank,
                context,
                message,
                ..
            } => write!(f, "bootstrap rank {rank}: {context}: {message}"),
            Self::Timeout { rank, what, waited } => write!(
                f,
                "bootstrap rank {rank}: timed out after {:.1} s waiting for {what}",
                waited.as_secs_f64()
            ),
            Self::Protocol { rank, message } | Self::Misconfigured { rank, message } => {
                write!(f, "bootstrap rank {rank}: {message}")
            }
            Self::PeerLost {
                rank,
                peer,
                message,
            } => write!(f, "bootstrap rank {rank}: lost rank {peer}: {message}"),
            Self::Aborted {
                rank,
                origin,
                status,
                reason,
            } => write!(
                f,
                "bootstrap rank {rank}: aborted by rank {origin} ({}): {reason}",
                status.as_str()
            ),
            Self::Closed { rank, what } => write!(f, "bootstrap rank {rank}: {what}: closed"),
        }
    }
}

impl std::error::Error for BootstrapError {}

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
        if nranks == 0 || rank >= nranks || nranks > proxy_core::net::MAX_NRANKS {
            return Err(BootstrapError::Config(format!(
                "rank {rank} of {nranks} ranks (need rank < nranks <= {})",
                proxy_core::net::MAX_NRANKS
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

/// `true` when generation `a` is at `g` or later (wrapping compare).
const fn reached(a: u32, g: u32) -> bool {
    (a.wrapping_sub(g) as i32) >= 0
}

/// A random comm id below 2^15 (std's randomly seeded hasher, the process id and the time).
fn random_comm_id() -> u32 {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    (h.finish() % u64::from(MAX_COMM_ID)) as u32
}

/// Backs off between polls: yields first, then sleeps 50 µs doubling to 2 ms.
#[derive(Debug, Default)]
struct Backoff(u32);

impl Backoff {
    fn snooze(&mut self) {
        if self.0 < 32 {
            std::thread::yield_now();
        } else {
            let us = 50u64 << (self.0 - 32).min(5);
            std::thread::sleep(Duration::from_micros(us.min(2000)));
        }
        self.0 = self.0.saturating_add(1);
    }
}

/// One bounded wait: warnings every `warn_interval`, an error after `timeout`.
struct Waiter {
    start: Instant,
    timeout: Duration,
    warn_interval: Duration,
    warned: u32,
    backoff: Backoff,
}

impl Waiter {
    fn new(timeout: Duration, warn_interval: Duration) -> Self {
        Self {
            start: Instant::now(),
            timeout,
            warn_interval,
            warned: 0,
            backoff: Backoff::default(),
        }
    }

    /// Called when the condition is not met yet: `Err(waited)` once the timeout has passed,
    /// else warns when due, backs off and returns `Ok`.
    fn tick(
        &mut self,
        rank: u32,
        nranks: u32,
        what: impl FnOnce() -> String,
    ) -> Result<(), Duration> {
        let waited = self.start.elapsed();
        if waited >= self.timeout {
            return Err(waited);
        }
        if !self.warn_interval.is_zero()
            && waited >= self.warn_interval.saturating_mul(self.warned + 1)
        {
            self.warned += 1;
            log::warn!(
                "bootstrap rank {rank}/{nranks}: still waiting for {} after {:.1} s (timeout {:.1} s)",
                what(),
                waited.as_secs_f64(),
                self.timeout.as_secs_f64()
            );
        }
        self.backoff.snooze();
        Ok(())
    }

    fn deadline(&self) -> Instant {
        self.start + self.timeout
    }
}

/// One TCP connection of the bootstrap: non-blocking, with its own read and write buffers.
#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    addr: SocketAddr,
    /// Received bytes not parsed yet.
    rbuf: Vec<u8>,
    /// Bytes to send; `wbuf[wpos..]` is still unsent.
    wbuf: Vec<u8>,
    wpos: usize,
    /// Our preface has been queued (it goes before our first frame).
    preface_sent: bool,
    /// The peer's preface has been read and checked.
    preface_seen: bool,
    /// The peer closed its side (read returned 0).
    eof: bool,
    /// We shut down our sending side.
    shut: bool,
}

impl Conn {
    fn new(stream: TcpStream, addr: SocketAddr) -> io::Result<Self> {
        stream.set_nonblocking(true)?;
        // Small frames: latency matters more than packet count.
        let _ = stream.set_nodelay(true);
        Ok(Self {
            stream,
            addr,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            wpos: 0,
            preface_sent: false,
            preface_seen: false,
            eof: false,
            shut: false,
        })
    }

    fn queue(&mut self, f: &Frame) {
        if !self.preface_sent {
            self.preface_sent = true;
            self.wbuf.extend_from_slice(&wire::preface());
        }
        f.encode(&mut self.wbuf);
    }

    fn unsent(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    /// Writes what the socket takes now.
    fn flush(&mut self) -> io::Result<()> {
        while self.wpos < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
        }
        Ok(())
    }

    /// Reads what the socket holds now (up to a little more than one maximal frame buffered).
    fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 16 << 10];
        while !self.eof && self.rbuf.len() <= MAX_FRAME as usize + 8 {
            match self.stream.read(&mut chunk) {
                Ok(0) => self.eof = true,
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Checks the peer's preface once it is complete (consuming it).
    fn take_preface(&mut self) -> Preface {
        let p = wire::read_preface(&self.rbuf);
        if let Preface::Version(_) = p {
            self.rbuf.drain(..wire::PREFACE_LEN);
            self.preface_seen = true;
        }
        p
    }

    /// The next whole frame (the preface must have been taken).
    fn next_frame(&mut self) -> Result<Option<Frame>, wire::WireError> {
        match Frame::decode(&self.rbuf)? {
            Some((f, used)) => {
                self.rbuf.drain(..used);
                Ok(Some(f))
            }
            None => Ok(None),
        }
    }

    /// Best effort: queue `f`, write what goes now, then stop sending.
    fn send_last(&mut self, f: &Frame) {
        self.queue(f);
        let _ = self.flush();
        if self.unsent() == 0 {
            let _ = self.stream.shutdown(Shutdown::Write);
            self.shut = true;
        }
    }
}

/// A leaf as the root sees it.
#[derive(Debug)]
struct Peer {
    conn: Conn,
    pid: u32,
    /// The peer said `Bye`.
    left: bool,
    /// The last barrier generation it arrived at.
    arrived: u32,
    /// Its contribution to the all-gather in progress.
    gather: Option<Vec<u8>>,
}

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
    /// * [`BootstrapError::Protocol`] for a misconfigured job (size, rank taken, version), on the
    ///   root and on the rejected leaf; [`BootstrapError::Aborted`] on the other leaves;
    /// * [`BootstrapError::PeerLost`] when the root goes away.
    pub fn init(cfg: &BootstrapConfig) -> Result<Self, BootstrapError> {
        if cfg.nranks == 0 || cfg.rank >= cfg.nranks || cfg.nranks > proxy_core::net::MAX_NRANKS {
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
            failed: None,
            closed: false,
        }
    }

    fn init_root(cfg: &BootstrapConfig) -> Result<Self, BootstrapError> {
        let n = cfg.nranks as usize;
        let mut hosts = vec![Vec::new(); n];
        hosts[0] = host_identity();
        let comm_id = cfg.comm_id.unwrap_or_else(random_comm_id);
        let mut peers: Vec<Option<Peer>> = (0..n).map(|_| None).collect();
        if n > 1 {
            let listener = TcpListener::bind(cfg.root).map_err(|e| {
                BootstrapError::io(
                    0,
                    format!(
                        "cannot listen on the root address {} ({ROOT_COMM_ID_ENV})",
                        cfg.root
                    ),
                    &e,
                )
            })?;
            listener.set_nonblocking(true).map_err(|e| {
                BootstrapError::io(0, "cannot make the root listener non-blocking", &e)
            })?;
            log::debug!(
                "bootstrap rank 0/{n}: listening on {} for {} ranks",
                cfg.root,
                n - 1
            );
            if let Err(e) = Self::gather_joiners(cfg, &listener, &mut peers, &mut hosts) {
                // Tell every joined leaf why, then fail.
                let (status, reason) = (e.status(), e.to_string());
                for p in peers.iter_mut().flatten() {
                    p.conn.send_last(&Frame::Abort {
                        origin: 0,
                        status: status.code(),
                        reason: reason.clone(),
                    });
                }
                log::error!("{e}");
                return Err(e);
            }
            // `listener` is dropped here: later connections are refused.
        }
        let mut b = Self::with_role(cfg, Role::Root { peers }, comm_id, hosts);
        let welcome = Frame::Welcome {
            comm_id,
            hosts: b.hosts.clone(),
        };
        if let Role::Root { peers } = &mut b.role {
            for p in peers.iter_mut().flatten() {
                p.conn.queue(&welcome);
            }
        }
        b.flush_all("the welcome to reach every rank")?;
        Ok(b)
    }

    /// Accepts connections until every rank has said `Hello`, dropping strangers.
    fn gather_joiners(
        cfg: &BootstrapConfig,
        listener: &TcpListener,
        peers: &mut [Option<Peer>],
        hosts: &mut [Vec<u8>],
    ) -> Result<(), BootstrapError> {
        let n = cfg.nranks;
        let mut pending: Vec<Conn> = Vec::new();
        let mut waiter = Waiter::new(cfg.timeout, cfg.warn_interval);
        let missing = |peers: &[Option<Peer>]| -> Vec<u32> {
            (1..n).filter(|&r| peers[r as usize].is_none()).collect()
        };
        loop {
            loop {
                match listener.accept() {
                    Ok((s, addr)) => match Conn::new(s, addr) {
                        Ok(c) => {
                            log::debug!("bootstrap rank 0/{n}: connection from {addr}");
                            pending.push(c);
                            if pending.len() > MAX_PENDING {
                                let old = pending.remove(0);
                                log::warn!(
                                    "bootstrap rank 0/{n}: more than {MAX_PENDING} connections \
                                     that have not said who they are; dropped the oldest, from {}",
                                    old.addr
                                );
                            }
                        }
                        Err(e) => log::warn!("bootstrap rank 0/{n}: connection from {addr}: {e}"),
                    },
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        // Transient accept failures (ECONNABORTED, EMFILE) must not end the
                        // bootstrap: log and retry on the next round.
                        log::warn!("bootstrap rank 0/{n}: accept on {}: {e}", cfg.root);
                        break;
                    }
                }
            }
            let mut i = 0;
            while i < pending.len() {
                match Self::check_joiner(cfg, &mut pending[i], peers)? {
                    Joiner::Wait => i += 1,
                    Joiner::Drop => {
                        pending.swap_remove(i);
                    }
                    Joiner::Joined { rank, pid, host } => {
                        let conn = pending.swap_remove(i);
                        log::debug!(
                            "bootstrap rank 0/{n}: rank {rank} joined from {} (pid {pid})",
                            conn.addr
                        );
                        hosts[rank as usize] = host;
                        peers[rank as usize] = Some(Peer {
                            conn,
                            pid,
                            left: false,
                            arrived: 0,
                            gather: None,
                        });
                    }
                }
            }
            // A joined leaf that disconnects or aborts before the welcome fails the bootstrap.
            for (r, slot) in peers.iter_mut().enumerate() {
                let Some(p) = slot else { continue };
                let _ = p.conn.fill();
                if let Ok(Some(Frame::Abort {
                    origin,
                    status,
                    reason,
                })) = p.conn.next_frame()
                {
                    let status = NrtStatus::from_code(status).unwrap_or(NrtStatus::Failure);
                    if status == NrtStatus::Timeout {
                        // A leaf that gave up first: the root knows who is missing.
                        return Err(BootstrapError::Timeout {
                            rank: 0,
                            what: format!(
                                "ranks {:?} to connect to the root {} (rank {origin} gave up \
                                 waiting first)",
                                missing(peers),
                                cfg.root
                            ),
                            waited: waiter.start.elapsed(),
                        });
                    }
                    return Err(BootstrapError::Aborted {
                        rank: 0,
                        origin,
                        status,
                        reason,
                    });
                }
                if p.conn.eof {
                    return Err(BootstrapError::PeerLost {
                        rank: 0,
                        peer: r as u32,
                        message: format!(
                            "rank {r} (pid {}) closed its connection before every rank had joined",
                            p.pid
                        ),
                    });
                }
            }
            let miss = missing(peers);
            if miss.is_empty() {
                return Ok(());
            }
            if let Err(waited) = waiter.tick(0, n, || {
                format!("ranks {miss:?} to connect to the root {}", cfg.root)
            }) {
                return Err(BootstrapError::Timeout {
                    rank: 0,
                    what: format!(
                        "ranks {:?} to connect to the root {} ({} of {n} ranks joined)",
                        miss,
                        cfg.root,
                        n as usize - miss.len()
                    ),
                    waited,
                });
            }
        }
    }

    /// Reads what a not-yet-joined connection has sent.
    fn check_joiner(
        cfg: &BootstrapConfig,
        c: &mut Conn,
        peers: &[Option<Peer>],
    ) -> Result<Joiner, BootstrapError> {
        let n = cfg.nranks;
        if let Err(e) = c.fill() {
            log::debug!(
                "bootstrap rank 0/{n}: dropped connection from {}: {e}",
                c.addr
            );
            return Ok(Joiner::Drop);
        }
        if !c.preface_seen {
            match c.take_preface() {
                Preface::WrongMagic => {
                    let head = &c.rbuf[..c.rbuf.len().min(8)];
                    log::warn!(
                        "bootstrap rank 0/{n}: dropped a connection from {} that does not speak \
                         the bootstrap protocol (first bytes {head:02x?}, expected magic {:?})",
                        c.addr,
                        String::from_utf8_lossy(&MAGIC)
                    );
                    return Ok(Joiner::Drop);
                }
                Preface::Incomplete => {
                    return Ok(if c.eof { Joiner::Drop } else { Joiner::Wait });
                }
                Preface::Version(v) if v != PROTOCOL_VERSION => {
                    let message = format!(
                        "a process at {} speaks bootstrap protocol version {v}, the root speaks \
                         version {PROTOCOL_VERSION} (mixed builds?)",
                        c.addr
                    );
                    // The leaf cannot parse our frames: close, and fail ourselves.
                    c.send_last(&Frame::Reject {
                        status: NrtStatus::Invalid.code(),
                        reason: message.clone(),
                    });
                    return Err(BootstrapError::Misconfigured { rank: 0, message });
                }
                Preface::Version(_) => {}
            }
        }
        let frame = match c.next_frame() {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(if c.eof { Joiner::Drop } else { Joiner::Wait }),
            Err(e) => {
                log::warn!(
                    "bootstrap rank 0/{n}: dropped a connection from {} that sent a malformed \
                     frame: {e}",
                    c.addr
                );
                return Ok(Joiner::Drop);
            }
        };
        let Frame::Hello {
            rank,
            nranks,
            pid,
            host,
        } = frame
        else {
            log::warn!(
                "bootstrap rank 0/{n}: dropped a connection from {} that sent {} before Hello",
                c.addr,
                frame.name()
            );
            return Ok(Joiner::Drop);
        };
        let problem = if nranks != n {
            Some(format!(
                "rank {rank} (pid {pid} at {}) was launched with {nranks} ranks, the root with {n}",
                c.addr
            ))
        } else if rank == 0 || rank >= n {
            Some(format!(
                "a process at {} (pid {pid}) claims rank {rank}; the root is rank 0 of {n}",
                c.addr
            ))
        } else if let Some(p) = &peers[rank as usize] {
            Some(format!(
                "rank {rank} joined twice: pid {} at {} and pid {pid} at {}",
                p.pid, p.conn.addr, c.addr
            ))
        } else {
            None
        };
        if let Some(message) = problem {
            c.send_last(&Frame::Reject {
                status: NrtStatus::Invalid.code(),
                reason: message.clone(),
            });
            return Err(BootstrapError::Misconfigured { rank: 0, message });
        }
        Ok(Joiner::Joined { rank, pid, host })
    }

    fn init_leaf(cfg: &BootstrapConfig) -> Result<Self, BootstrapError> {
        let (rank, n) = (cfg.rank, cfg.nranks);
        let mut waiter = Waiter::new(cfg.timeout, cfg.warn_interval);
        let mut last_err: Option<io::Error> = None;
        let stream = loop {
            let left = waiter.deadline().saturating_duration_since(Instant::now());
            if !left.is_zero() {
                match TcpStream::connect_timeout(&cfg.root, left.min(Duration::from_secs(1))) {
                    Ok(s) => break s,
                    Err(e) => last_err = Some(e),
                }
            }
            let err_text = || {
                last_err
                    .as_ref()
                    .map_or_else(|| "none".to_owned(), ToString::to_string)
            };
            if let Err(waited) = waiter.tick(rank, n, || {
                format!(
                    "the root (rank 0) to accept at {} (last error: {})",
                    cfg.root,
                    err_text()
                )
            }) {
                let e = BootstrapError::Timeout {
                    rank,
                    what: format!(
                        "the root (rank 0) at {} ({ROOT_COMM_ID_ENV}) to accept a connection; \
                         last error: {}",
                        cfg.root,
                        err_text()
                    ),
                    waited,
                };
                log::error!("{e}");
                return Err(e);
            }
            // Connection refused comes back at once: do not hammer the root address.
            std::thread::sleep(Duration::from_millis(20));
        };
        let addr = stream.peer_addr().unwrap_or(cfg.root);
        let mut conn = Conn::new(stream, addr).map_err(|e| {
            BootstrapError::io(rank, format!("configuring the connection to {addr}"), &e)
        })?;
        conn.queue(&Frame::Hello {
            rank,
            nranks: n,
            pid: std::process::id(),
            host: host_identity(),
        });
        let fail = |conn: &mut Conn, e: BootstrapError| {
            if !matches!(
                e,
                BootstrapError::Aborted { .. } | BootstrapError::PeerLost { .. }
            ) {
                conn.send_last(&Frame::Abort {
                    origin: rank,
                    status: e.status().code(),
                    reason: e.to_string(),
                });
            }
            log::error!("{e}");
            e
        };
        let lost = |what: String| BootstrapError::PeerLost {
            rank,
            peer: 0,
            message: what,
        };
        loop {
            let io_res = conn.flush().and_then(|()| conn.fill());
            if let Err(e) = io_res {
                return Err(fail(
                    &mut conn,
                    lost(format!("connection to the root at {addr}: {e}")),
                ));
            }
            if !conn.preface_seen {
                match conn.take_preface() {
                    Preface::WrongMagic => {
                        return Err(fail(
                            &mut conn,
                            BootstrapError::Protocol {
                                rank,
                                message: format!(
                                    "the root address {addr} does not speak the bootstrap \
                                     protocol (wrong magic)"
                                ),
                            },
                        ))
                    }
                    Preface::Version(v) if v != PROTOCOL_VERSION => {
                        return Err(fail(
                            &mut conn,
                            BootstrapError::Misconfigured {
                                rank,
                                message: format!(
                                    "the root at {addr} speaks bootstrap protocol version {v}, \
                                     this rank speaks {PROTOCOL_VERSION}"
                                ),
                            },
                        ))
                    }
                    _ => {}
                }
            }
            if conn.preface_seen {
                match conn.next_frame() {
                    Ok(Some(Frame::Welcome { comm_id, hosts })) => {
                        if hosts.len() != n as usize || comm_id >= MAX_COMM_ID {
                            return Err(fail(
                                &mut conn,
                                BootstrapError::Protocol {
                                    rank,
                                    message: format!(
                                        "bad welcome from the root: {} hosts for {n} ranks, comm \
                                         id {comm_id}",
                                        hosts.len()
                                    ),
                                },
                            ));
                        }
                        let role = Role::Leaf {
                            conn,
                            root_left: false,
                            gathered: None,
                        };
                        return Ok(Self::with_role(cfg, role, comm_id, hosts));
                    }
                    Ok(Some(Frame::Reject { reason, .. })) => {
                        return Err(fail(
                            &mut conn,
                            BootstrapError::Misconfigured {
                                rank,
                                message: format!("rejected by the root: {reason}"),
                            },
                        ));
                    }
                    Ok(Some(Frame::Abort {
                        origin,
                        status,
                        reason,
                    })) => {
                        return Err(fail(
                            &mut conn,
                            BootstrapError::Aborted {
                                rank,
                                origin,
                                status: NrtStatus::from_code(status).unwrap_or(NrtStatus::Failure),
                                reason,
                            },
                        ))
                    }
                    Ok(Some(f)) => {
                        return Err(fail(
                            &mut conn,
                            BootstrapError::Protocol {
                                rank,
                                message: format!(
                                    "unexpected {} from the root before Welcome",
                                    f.name()
                                ),
                            },
                        ))
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return Err(fail(
                            &mut conn,
                            BootstrapError::Protocol {
                                rank,
                                message: format!("malformed frame from the root: {e}"),
                            },
                        ))
                    }
                }
            }
            if conn.eof {
                return Err(fail(
                    &mut conn,
                    lost(format!(
                        "the root at {addr} closed the connection before every rank had joined"
                    )),
                ));
            }
            if let Err(waited) = waiter.tick(rank, n, || {
                format!("the root at {addr} to report that every rank has joined")
            }) {
                let e = BootstrapError::Timeout {
                    rank,
                    what: format!(
                        "the root at {addr} to report that every rank has joined (connected, \
                         no welcome yet)"
                    ),
                    waited,
                };
                return Err(fail(&mut conn, e));
            }
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

    /// Moves bytes both ways on every connection and handles what arrived; on the root, releases
    /// barrier generations every rank has reached. Never blocks.
    fn pump(&mut self) -> Result<(), BootstrapError> {
        self.check("bootstrap call")?;
        let r = match &mut self.role {
            Role::Root { .. } => self.pump_root(),
            Role::Leaf { .. } => self.pump_leaf(),
        };
        r.map_err(|e| self.fail(e))
    }

    fn pump_root(&mut self) -> Result<(), BootstrapError> {
        let me = self.rank;
        let next_gather = self.gather_seq.wrapping_add(1);
        let Role::Root { peers } = &mut self.role else {
            unreachable!()
        };
        for (r, slot) in peers.iter_mut().enumerate() {
            let Some(p) = slot else { continue };
            let r = r as u32;
            let lost = |what: String| BootstrapError::PeerLost {
                rank: me,
                peer: r,
                message: what,
            };
            if let Err(e) = p.conn.flush() {
                if !p.left {
                    return Err(lost(format!("cannot write to rank {r}: {e}")));
                }
            }
            if p.left {
                continue;
            }
            if let Err(e) = p.conn.fill() {
                return Err(lost(format!("connection to rank {r}: {e}")));
            }
            loop {
                let f = match p.conn.next_frame() {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => {
                        return Err(BootstrapError::Protocol {
                            rank: me,
                            message: format!("malformed frame from rank {r}: {e}"),
                        })
                    }
                };
                match f {
                    Frame::Arrive { gen } if gen == p.arrived.wrapping_add(1) => p.arrived = gen,
                    Frame::Gather { seq, blob } if seq == next_gather && p.gather.is_none() => {
                        p.gather = Some(blob);
                    }
                    Frame::Bye => {
                        p.left = true;
                        log::debug!("bootstrap rank {me}: rank {r} closed its side");
                        break;
                    }
                    Frame::Abort {
                        origin,
                        status,
                        reason,
                    } => {
                        return Err(BootstrapError::Aborted {
                            rank: me,
                            origin,
                            status: NrtStatus::from_code(status).unwrap_or(NrtStatus::Failure),
                            reason,
                        })
                    }
                    f => {
                        return Err(BootstrapError::Protocol {
                            rank: me,
                            message: format!(
                                "unexpected {f:?} from rank {r} (barrier generation {}, \
                                 all-gather {next_gather}): the ranks call bootstrap \
                                 operations in different orders",
                                p.arrived
                            ),
                        })
                    }
                }
            }
            if p.conn.eof && !p.left {
                return Err(lost(format!(
                    "rank {r} (pid {}) closed its bootstrap connection without Bye (process \
                     exited or was killed?)",
                    p.pid
                )));
            }
        }
        self.release_barriers()
    }

    /// Root: releases every generation that every rank has reached.
    fn release_barriers(&mut self) -> Result<(), BootstrapError> {
        let me = self.rank;
        let Role::Root { peers } = &mut self.role else {
            return Ok(());
        };
        loop {
            let g = self.released.wrapping_add(1);
            let everyone = reached(self.barrier_gen, g)
                && peers.iter().flatten().all(|p| reached(p.arrived, g));
            if !everyone {
                let waiting = reached(self.barrier_gen, g)
                    || peers.iter().flatten().any(|p| reached(p.arrived, g));
                if waiting {
                    if let Some((r, _)) = peers
                        .iter()
                        .enumerate()
                        .find(|(_, p)| p.as_ref().is_some_and(|p| p.left && !reached(p.arrived, g)))
                    {
                        return Err(BootstrapError::Closed {
                            rank: me,
                            what: format!(
                                "barrier {g}: rank {r} closed its bootstrap before arriving"
                            ),
                        });
                    }
                }
                return Ok(());
            }
            self.released = g;
            for p in peers.iter_mut().flatten() {
                if !p.left {
                    p.conn.queue(&Frame::Release { gen: g });
                    // Errors surface on the next pump.
                    let _ = p.conn.flush();
                }
            }
        }
    }

    fn pump_leaf(&mut self) -> Result<(), BootstrapError> {
        let me = self.rank;
        let n = self.nranks as usize;
        let next_gather = self.gather_seq.wrapping_add(1);
        let next_release = self.released.wrapping_add(1);
        let Role::Leaf {
            conn,
            root_left,
            gathered,
        } = &mut self.role
        else {
            unreachable!()
        };
        let lost = |what: String| BootstrapError::PeerLost {
            rank: me,
            peer: 0,
            message: what,
        };
        if *root_left {
            return Ok(());
        }
        let io_res = conn.flush().and_then(|()| conn.fill());
        if let Err(e) = io_res {
            return Err(lost(format!("connection to the root: {e}")));
        }
        loop {
            let f = match conn.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    return Err(BootstrapError::Protocol {
                        rank: me,
                        message: format!("malformed frame from the root: {e}"),
                    })
                }
            };
            match f {
                Frame::Release { gen }
                    if gen == next_release && self.released != self.barrier_gen =>
                {
                    self.released = gen;
                }
                Frame::Gathered { seq, blobs }
                    if seq == next_gather && blobs.len() == n && gathered.is_none() =>
                {
                    *gathered = Some((seq, blobs));
                }
                Frame::Bye => {
                    *root_left = true;
                    log::debug!("bootstrap rank {me}: the root closed its side");
                    return Ok(());
                }
                Frame::Abort {
                    origin,
                    status,
                    reason,
                } => {
                    return Err(BootstrapError::Aborted {
                        rank: me,
                        origin,
                        status: NrtStatus::from_code(status).unwrap_or(NrtStatus::Failure),
                        reason,
                    })
                }
                f => {
                    return Err(BootstrapError::Protocol {
                        rank: me,
                        message: format!("unexpected {f:?} from the root"),
                    })
                }
            }
        }
        if conn.eof {
            return Err(lost(
                "the root (rank 0) closed its bootstrap connection without Bye (process exited \
                 or was killed?)"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    fn root_left(&self) -> bool {
        matches!(
            self.role,
            Role::Leaf {
                root_left: true,
                ..
            }
        )
    }

    /// Blocks (bounded) until `done` answers true, pumping in between.
    fn wait_for(
        &mut self,
        what: &dyn Fn(&Self) -> String,
        mut done: impl FnMut(&mut Self) -> Result<bool, BootstrapError>,
    ) -> Result<(), BootstrapError> {
        let mut waiter = Waiter::new(self.timeout, self.warn_interval);
        loop {
            if done(self)? {
                return Ok(());
            }
            let (rank, n) = (self.rank, self.nranks);
            if let Err(waited) = waiter.tick(rank, n, || what(self)) {
                let e = BootstrapError::Timeout {
                    rank,
                    what: what(self),
                    waited,
                };
                return Err(self.fail(e));
            }
        }
    }

    /// Writes every queued byte (bounded by the timeout).
    fn flush_all(&mut self, what: &str) -> Result<(), BootstrapError> {
        let what = what.to_owned();
        self.wait_for(&|_| what.clone(), |b| {
            b.pump()?;
            Ok(match &b.role {
                Role::Root { peers } => peers
                    .iter()
                    .flatten()
                    .all(|p| p.left || p.conn.unsent() == 0),
                Role::Leaf { conn, .. } => conn.unsent() == 0,
            })
        })
    }

    /// Which ranks have not contributed to the all-gather in progress (root), for messages.
    fn missing_gather(&self) -> String {
        match &self.role {
            Role::Root { peers } => {
                let m: Vec<usize> = peers
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.as_ref().is_some_and(|p| p.gather.is_none()))
                    .map(|(r, _)| r)
                    .collect();
                format!("ranks {m:?} to contribute")
            }
            Role::Leaf { .. } => "the root to send the result".to_owned(),
        }
    }

    /// All-gather: every rank contributes `blob` (any length up to 16 MiB / nranks in all) and
    /// gets every rank's contribution, by rank. Every rank must call it, in the same order as
    /// the other collective calls. Blocks at most the timeout.
    ///
    /// # Errors
    /// The sticky failure; [`BootstrapError::Timeout`] (the root names the ranks that have not
    /// contributed); a lost peer; an abort; a blob too large for one frame
    /// ([`BootstrapError::Config`]).
    pub fn all_gather(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        self.check("all-gather")?;
        let total = blob
            .len()
            .saturating_add(8)
            .saturating_mul(self.nranks as usize);
        if total > MAX_FRAME as usize - 64 {
            return Err(BootstrapError::Config(format!(
                "all-gather of {} bytes per rank × {} ranks exceeds the {MAX_FRAME}-byte frame \
                 limit",
                blob.len(),
                self.nranks
            )));
        }
        let seq = self.gather_seq.wrapping_add(1);
        let result = match &mut self.role {
            Role::Leaf { conn, .. } => {
                conn.queue(&Frame::Gather {
                    seq,
                    blob: blob.to_vec(),
                });
                let what = move |b: &Self| format!("all-gather {seq}: {}", b.missing_gather());
                self.wait_for(&what, |b| {
                    b.pump()?;
                    if let Role::Leaf {
                        gathered: Some(_), ..
                    } = &b.role
                    {
                        return Ok(true);
                    }
                    if b.root_left() {
                        return Err(b.fail(BootstrapError::Closed {
                            rank: b.rank,
                            what: format!("all-gather {seq}: the root left"),
                        }));
                    }
                    Ok(false)
                })?;
                let Role::Leaf { gathered, .. } = &mut self.role else {
                    unreachable!()
                };
                gathered.take().map(|(_, blobs)| blobs).unwrap_or_default()
            }
            Role::Root { .. } => {
                let what = move |b: &Self| format!("all-gather {seq}: {}", b.missing_gather());
                self.wait_for(&what, |b| {
                    b.pump()?;
                    let Role::Root { peers } = &b.role else {
                        unreachable!()
                    };
                    if let Some((r, _)) = peers
                        .iter()
                        .enumerate()
                        .find(|(_, p)| p.as_ref().is_some_and(|p| p.left && p.gather.is_none()))
                    {
                        return Err(b.fail(BootstrapError::Closed {
                            rank: b.rank,
                            what: format!("all-gather {seq}: rank {r} closed its bootstrap"),
                        }));
                    }
                    Ok(peers.iter().flatten().all(|p| p.gather.is_some()))
                })?;
                let Role::Root { peers } = &mut self.role else {
                    unreachable!()
                };
                let mut blobs = Vec::with_capacity(peers.len());
                blobs.push(blob.to_vec());
                for p in peers.iter_mut().flatten() {
                    blobs.push(p.gather.take().unwrap_or_default());
                }
                let f = Frame::Gathered {
                    seq,
                    blobs: blobs.clone(),
                };
                for p in peers.iter_mut().flatten() {
                    p.conn.queue(&f);
                }
                self.gather_seq = seq;
                self.flush_all("the all-gather result to reach every rank")?;
                return Ok(blobs);
            }
        };
        self.gather_seq = seq;
        Ok(result)
    }

    /// Starts the next barrier generation (non-blocking): this rank has arrived. Poll the ticket
    /// with [`Bootstrap::barrier_poll`] until it answers `true` before starting another one.
    ///
    /// # Errors
    /// The sticky failure; [`BootstrapError::Config`] when this rank's previous barrier has not
    /// passed yet.
    pub fn barrier_start(&mut self) -> Result<BarrierTicket, BootstrapError> {
        self.check("barrier")?;
        if self.barrier_gen != self.released {
            return Err(BootstrapError::Config(format!(
                "rank {}: barrier_start while barrier {} has not passed",
                self.rank, self.barrier_gen
            )));
        }
        let gen = self.barrier_gen.wrapping_add(1);
        self.barrier_gen = gen;
        if let Role::Leaf { conn, .. } = &mut self.role {
            conn.queue(&Frame::Arrive { gen });
        }
        // A failure here is sticky and reported by `barrier_poll`, unless the generation was
        // released before it (then the barrier has passed).
        let _ = self.pump();
        Ok(BarrierTicket(gen))
    }

    /// `Ok(true)` once every rank has arrived at `ticket`'s generation (non-blocking: moves the
    /// connections' bytes once). A generation that was released stays passed, even after a
    /// later failure.
    ///
    /// # Errors
    /// The sticky failure; a lost peer or an abort; the needed peer closed its side.
    pub fn barrier_poll(&mut self, ticket: BarrierTicket) -> Result<bool, BootstrapError> {
        if reached(self.released, ticket.0) {
            return Ok(true);
        }
        let r = self.pump();
        // A generation released before a failure arrived has passed (the failure is sticky and
        // shows at the next call).
        if reached(self.released, ticket.0) {
            return Ok(true);
        }
        r?;
        if self.root_left() {
            let e = BootstrapError::Closed {
                rank: self.rank,
                what: format!("barrier {}: the root left", ticket.0),
            };
            return Err(self.fail(e));
        }
        Ok(false)
    }

    /// A whole barrier (blocking, bounded by the timeout).
    ///
    /// # Errors
    /// As [`Bootstrap::barrier_poll`], and [`BootstrapError::Timeout`] (the root names the ranks
    /// that have not arrived).
    pub fn barrier(&mut self) -> Result<(), BootstrapError> {
        let t = self.barrier_start()?;
        let what = move |b: &Self| match &b.role {
            Role::Root { peers } => {
                let m: Vec<usize> = peers
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.as_ref().is_some_and(|p| !reached(p.arrived, t.0)))
                    .map(|(r, _)| r)
                    .collect();
                format!("barrier {}: ranks {m:?} to arrive", t.0)
            }
            Role::Leaf { .. } => format!("barrier {}: the root to release it", t.0),
        };
        self.wait_for(&what, |b| b.barrier_poll(t))
    }

    /// Closes cleanly: sends `Bye` (unless failed), stops sending, and waits at most the close
    /// linger for every peer to close its side, so that nothing sent is lost to a reset.
    /// Idempotent; dropping the bootstrap closes it too.
    pub fn close(&mut self) {
        if self.closed {
            return;
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
        let mut backoff = Backoff::default();
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
            backoff.snooze();
        }
        log::debug!("bootstrap rank {}/{}: closed", self.rank, self.nranks);
    }
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        self.close();
    }
}

/// What the root made of a connection that has not joined yet.
enum Joiner {
    Wait,
    Drop,
    Joined { rank: u32, pid: u32, host: Vec<u8> },
}

/// A [`Bootstrap`] shared between threads (the main thread's all-gathers, the worker's barrier
/// task).
///
/// A blocking call made through [`SharedBootstrap::lock`] holds the bootstrap for up to its
/// timeout: a barrier channel's `poll` then answers "not yet" (it only tries the lock), but its
/// `arrive` waits for the lock, stalling the worker that steps it. Do not run blocking
/// all-gathers or barriers while barrier tasks are in flight.
#[derive(Clone, Debug)]
pub struct SharedBootstrap {
    inner: Arc<Mutex<Bootstrap>>,
}

impl SharedBootstrap {
    /// Shares `b`.
    pub fn new(b: Bootstrap) -> Self {
        Self {
            inner: Arc::new(Mutex::new(b)),
        }
    }

    /// Locks the bootstrap (a poisoned lock is taken over: the bootstrap's own state is sticky).
    pub fn lock(&self) -> MutexGuard<'_, Bootstrap> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The bootstrap back, when this is the last handle (every barrier channel dropped);
    /// otherwise `self` again.
    ///
    /// # Errors
    /// `Err(self)` while another handle or a barrier channel exists.
    pub fn try_unwrap(self) -> Result<Bootstrap, Self> {
        match Arc::try_unwrap(self.inner) {
            Ok(m) => Ok(m.into_inner().unwrap_or_else(|p| p.into_inner())),
            Err(inner) => Err(Self { inner }),
        }
    }

    /// A barrier endpoint over the bootstrap connections. Successive barriers of the process
    /// are generations of one sequence: make one endpoint per process and reuse it (two
    /// endpoints used at once would share generations).
    pub fn barrier_channel(&self) -> BootstrapBarrier {
        BootstrapBarrier {
            inner: self.inner.clone(),
            logged: false,
        }
    }
}

/// A non-blocking barrier between the processes of a bootstrap: the driver's
/// [`BarrierChannel`] over the bootstrap connections (`arrive` once, then `poll` each step);
/// failures map to [`NrtStatus`] (and are logged once).
///
/// Seed: `enc_barrier` between processes, §3 ("Considerations"); DESIGN.md §4.
#[derive(Debug)]
pub struct BootstrapBarrier {
    inner: Arc<Mutex<Bootstrap>>,
    logged: bool,
}

impl BootstrapBarrier {
    fn status(&mut self, e: &BootstrapError) -> NrtStatus {
        if !self.logged {
            self.logged = true;
            log::error!("barrier over the bootstrap failed: {e}");
        }
        e.status()
    }
}

impl BarrierChannel for BootstrapBarrier {
    /// Announces this process's arrival at its next barrier generation.
    fn arrive(&mut self) -> Result<BarrierTicket, NrtStatus> {
        let r = self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .barrier_start();
        r.map_err(|e| self.status(&e))
    }

    /// `Ok(true)` once every process has arrived at `ticket`'s generation. Answers `Ok(false)`
    /// without waiting when another thread holds the bootstrap.
    fn poll(&mut self, ticket: BarrierTicket) -> Result<bool, NrtStatus> {
        let r = match self.inner.try_lock() {
            Ok(mut b) => b.barrier_poll(ticket),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().barrier_poll(ticket),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(false),
        };
        r.map_err(|e| self.status(&e))
    }
}
