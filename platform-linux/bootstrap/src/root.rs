//! Rank 0, the root: listens, admits every other rank, welcomes them, and afterwards serves
//! the all-gathers and barriers.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::TcpListener;

use proxy_core::base::state::{self, Machine};
use proxy_core::progress::net::MAX_COMM_ID;
use proxy_core::NrtStatus;

use crate::conn::{BoundedWait, Conn};
use crate::wire::{Frame, Preface, MAGIC, VERSION as PROTOCOL_VERSION};
use crate::*;

/// How long a failing root waits for the leaves it told why (`Abort`, `Reject`) to read it
/// and close (a lingering close, [`Conn::linger`]).
const LINGER: std::time::Duration = std::time::Duration::from_millis(500);

/// A random comm id below 2^15 (std's randomly seeded hasher, the process id and the time).
fn random_comm_id() -> u32 {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    (h.finish() % u64::from(MAX_COMM_ID)) as u32
}

/// A leaf as the root sees it.
#[derive(Debug)]
pub(crate) struct Peer {
    pub(crate) conn: Conn,
    pub(crate) pid: u32,
    /// The peer said `Bye`.
    pub(crate) left: bool,
    /// The last barrier generation it arrived at.
    pub(crate) arrived: u32,
    /// Its contribution to the all-gather in progress.
    pub(crate) gather: Option<Vec<u8>>,
}

/// What the root made of a connection that has not joined yet.
pub(crate) enum Joiner {
    Wait,
    Drop,
    Joined { rank: u32, pid: u32, host: Vec<u8> },
}

/// The state of the root's bootstrap (`init_root`), rank 0.
///
/// ```text
///           (1) listen               (2) admit                (3) welcome
///   Start ─────────────► Admitting ─────────────► Welcoming ─────────────► Ready
///     │ │                    │                        ▲  │
///     │ └────────────────────┼────────────────────────┘  │
///     │   (4) listen: one rank, nothing to listen for    │
///     │ (5) listen           │ (6) admit                 │ (7) welcome
///     └──────────────────────┴───────────────────────────┴──────────────► Failed
/// ```
///
/// 1. `listen`: bound the root address (non-blocking listener).
/// 2. `admit`: every other rank said a valid `Hello` (`gather_joiners`); the listener is
///    dropped, so later connections are refused.
/// 3. `welcome`: the `Welcome` (comm id, every host) reached every rank.
/// 4. `listen`: a job of one rank has no one to wait for.
/// 5. `listen`: the address cannot be listened on.
/// 6. `admit`: a misconfigured, lost, aborting or missing rank; every joined leaf is told
///    with `Abort`.
/// 7. `welcome`: the welcome could not be delivered (the bootstrap's sticky failure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RootState {
    /// Nothing done yet.
    Start,
    /// Listening; admitting the other ranks.
    Admitting,
    /// Every rank joined; sending the welcome.
    Welcoming,
    /// Welcomed every rank: the bootstrap is done.
    Ready,
    /// Failed (terminal).
    Failed,
}

impl Machine for RootState {
    const NAME: &'static str = "bootstrap root";

    /// The numbered edges of the diagram above.
    fn edge(from: Self, to: Self) -> Option<u8> {
        use RootState as S;
        match (from, to) {
            (S::Start, S::Admitting) => Some(1),
            (S::Admitting, S::Welcoming) => Some(2),
            (S::Welcoming, S::Ready) => Some(3),
            (S::Start, S::Welcoming) => Some(4),
            (S::Start, S::Failed) => Some(5),
            (S::Admitting, S::Failed) => Some(6),
            (S::Welcoming, S::Failed) => Some(7),
            _ => None,
        }
    }
}

/// What happened to the root's bootstrap (the input of [`Root::on_event`]).
enum RootEvent {
    /// The root address is listened on.
    Listening(TcpListener),
    /// One rank only: no listener.
    Alone,
    /// Every other rank joined.
    AllJoined,
    /// The welcome reached every rank.
    Welcomed(Box<Bootstrap>),
    /// A step failed.
    Failed(BootstrapError),
}

/// The root's bootstrap in progress.
struct Root<'c> {
    cfg: &'c BootstrapConfig,
    state: RootState,
    listener: Option<TcpListener>,
    peers: Vec<Option<Peer>>,
    hosts: Vec<Vec<u8>>,
    comm_id: u32,
}

impl<'c> Root<'c> {
    fn new(cfg: &'c BootstrapConfig) -> Self {
        let n = cfg.nranks as usize;
        let mut hosts = vec![Vec::new(); n];
        hosts[0] = host_identity();
        Self {
            cfg,
            state: RootState::Start,
            listener: None,
            peers: (0..n).map(|_| None).collect(),
            hosts,
            comm_id: cfg.comm_id.unwrap_or_else(random_comm_id),
        }
    }

    /// The one place the state changes ([`state::step`]: traces `state=A=>B`, refuses an
    /// edge the diagram does not have).
    fn set_state(&mut self, next: RootState) {
        let who = format_args!("rank 0/{}", self.cfg.nranks);
        let _ = state::step(&mut self.state, next, &who);
    }

    /// Runs the machine until it is [`RootState::Ready`] or [`RootState::Failed`].
    fn run(mut self) -> Result<Bootstrap, BootstrapError> {
        loop {
            let ev = match self.state {
                RootState::Start => self.listen(),
                RootState::Admitting => self.admit(),
                RootState::Welcoming => self.welcome(),
                RootState::Ready | RootState::Failed => unreachable!("terminal states return"),
            };
            if let Some(b) = self.on_event(ev)? {
                return Ok(b);
            }
        }
    }

    /// [`RootState::Start`]: binds the root address (edges 1, 4, 5).
    fn listen(&mut self) -> RootEvent {
        let (cfg, n) = (self.cfg, self.cfg.nranks);
        if n == 1 {
            return RootEvent::Alone;
        }
        let inherited = inherited_listener(cfg.root);
        let listener = match inherited.map_or_else(|| TcpListener::bind(cfg.root), Ok) {
            Ok(l) => l,
            Err(e) => {
                return RootEvent::Failed(BootstrapError::io(
                    0,
                    format!(
                        "cannot listen on the root address {} ({ROOT_COMM_ID_ENV})",
                        cfg.root
                    ),
                    &e,
                ))
            }
        };
        if let Err(e) = listener.set_nonblocking(true) {
            return RootEvent::Failed(BootstrapError::io(
                0,
                "cannot make the root listener non-blocking",
                &e,
            ));
        }
        log::debug!(
            "bootstrap rank 0/{n}: listening on {} for {} ranks",
            cfg.root,
            n - 1
        );
        RootEvent::Listening(listener)
    }

    /// [`RootState::Admitting`]: waits (bounded) for every other rank's `Hello` (edges 2, 6).
    fn admit(&mut self) -> RootEvent {
        let listener = self.listener.as_ref().expect("admitting has a listener");
        match Bootstrap::gather_joiners(self.cfg, listener, &mut self.peers, &mut self.hosts) {
            Ok(()) => RootEvent::AllJoined,
            Err(e) => RootEvent::Failed(e),
        }
    }

    /// [`RootState::Welcoming`]: sends the welcome to every rank (edges 3, 7).
    fn welcome(&mut self) -> RootEvent {
        let peers = std::mem::take(&mut self.peers);
        let hosts = std::mem::take(&mut self.hosts);
        let mut b = Bootstrap::with_role(self.cfg, Role::Root { peers }, self.comm_id, hosts);
        let welcome = Frame::Welcome {
            comm_id: self.comm_id,
            hosts: b.hosts.clone(),
        };
        if let Role::Root { peers } = &mut b.role {
            for p in peers.iter_mut().flatten() {
                p.conn.queue(&welcome);
            }
        }
        match b.flush_all("the welcome to reach every rank") {
            Ok(()) => RootEvent::Welcomed(Box::new(b)),
            Err(e) => RootEvent::Failed(e),
        }
    }

    /// The step logic: one arm per legal (state, event) pair. `Some` when ready.
    fn on_event(&mut self, ev: RootEvent) -> Result<Option<Bootstrap>, BootstrapError> {
        use RootEvent as E;
        use RootState as S;
        match (self.state, ev) {
            // (1)
            (S::Start, E::Listening(l)) => {
                self.listener = Some(l);
                self.set_state(S::Admitting);
                Ok(None)
            }
            // (4)
            (S::Start, E::Alone) => {
                self.set_state(S::Welcoming);
                Ok(None)
            }
            // (5)
            (S::Start, E::Failed(e)) => {
                self.set_state(S::Failed);
                Err(e)
            }
            // (2)
            (S::Admitting, E::AllJoined) => {
                // Later connections are refused.
                self.listener = None;
                self.set_state(S::Welcoming);
                Ok(None)
            }
            // (6)
            (S::Admitting, E::Failed(e)) => {
                // Tell every joined leaf why, then fail.
                let (status, reason) = (e.status(), e.to_string());
                for p in self.peers.iter_mut().flatten() {
                    p.conn.send_last(&Frame::Abort {
                        origin: 0,
                        status: status.code(),
                        reason: reason.clone(),
                    });
                }
                Conn::linger(self.peers.iter_mut().flatten().map(|p| &mut p.conn), LINGER);
                log::error!("{e}");
                self.set_state(S::Failed);
                Err(e)
            }
            // (3)
            (S::Welcoming, E::Welcomed(b)) => {
                self.set_state(S::Ready);
                Ok(Some(*b))
            }
            // (7)
            (S::Welcoming, E::Failed(e)) => {
                self.set_state(S::Failed);
                Err(e)
            }
            (state, _) => unreachable!("root: no edge out of {state:?} for this event"),
        }
    }
}

impl Bootstrap {
    /// The root's bootstrap: runs the [`RootState`] machine to `Ready`.
    pub(crate) fn init_root(cfg: &BootstrapConfig) -> Result<Self, BootstrapError> {
        Root::new(cfg).run()
    }

    /// Accepts connections until every rank has said `Hello`, dropping strangers.
    pub(crate) fn gather_joiners(
        cfg: &BootstrapConfig,
        listener: &TcpListener,
        peers: &mut [Option<Peer>],
        hosts: &mut [Vec<u8>],
    ) -> Result<(), BootstrapError> {
        let mut pending: Vec<Conn> = Vec::new();
        let r = Self::admit_joiners(cfg, listener, peers, hosts, &mut pending);
        if let Err(e) = &r {
            Self::tell_unadmitted(listener, &mut pending, e);
        }
        r
    }

    /// A failing root's last word to the connections it has not admitted: they may be ranks
    /// whose `Hello` is still unread, and so may those still in the listen backlog. Closing
    /// them unread would reset them, and they would report a lost root instead of why; so each
    /// gets the `Abort`, then a lingering close ([`Conn::linger`]).
    fn tell_unadmitted(listener: &TcpListener, pending: &mut Vec<Conn>, e: &BootstrapError) {
        while let Ok((s, addr)) = listener.accept() {
            if let Ok(c) = Conn::new(s, addr) {
                pending.push(c);
            }
        }
        let abort = Frame::Abort {
            origin: 0,
            status: e.status().code(),
            reason: e.to_string(),
        };
        for c in pending.iter_mut() {
            c.send_last(&abort);
        }
        Conn::linger(pending.iter_mut(), LINGER);
    }

    /// The admission loop of [`Bootstrap::gather_joiners`]; `pending` holds the connections that
    /// have not said who they are yet.
    fn admit_joiners(
        cfg: &BootstrapConfig,
        listener: &TcpListener,
        peers: &mut [Option<Peer>],
        hosts: &mut [Vec<u8>],
        pending: &mut Vec<Conn>,
    ) -> Result<(), BootstrapError> {
        let n = cfg.nranks;
        let mut waiter = BoundedWait::new(cfg.timeout, cfg.warn_interval);
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
                let joiner = match Self::check_joiner(cfg, &mut pending[i], peers) {
                    Ok(j) => j,
                    Err(e) => {
                        // The rejected one has had its `Reject`.
                        pending.swap_remove(i);
                        return Err(e);
                    }
                };
                match joiner {
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
    pub(crate) fn check_joiner(
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
                    Conn::linger([c], LINGER);
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
            Conn::linger([c], LINGER);
            return Err(BootstrapError::Misconfigured { rank: 0, message });
        }
        Ok(Joiner::Joined { rank, pid, host })
    }

    pub(crate) fn pump_root(&mut self) -> Result<(), BootstrapError> {
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
                    Frame::GroupArrive { group, gen } => {
                        crate::group::root_group_arrive(&mut self.groups, me, r, group, gen)?;
                    }
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
                    } => return Err(BootstrapError::aborted(me, origin, status, reason)),
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
        self.release_barriers()?;
        self.release_groups()
    }

    /// Root: releases every generation that every rank has reached.
    pub(crate) fn release_barriers(&mut self) -> Result<(), BootstrapError> {
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
}

/// The root's listening socket a launcher reserved and handed over ([`ROOT_FD_ENV`]), when
/// it listens on exactly `root`; taken at most once per process. `None` otherwise (rank 0 then
/// binds `root` itself): no variable, not a number, not a socket, another address.
fn inherited_listener(root: SocketAddr) -> Option<TcpListener> {
    inherited_listener_from(std::env::var(ROOT_FD_ENV).ok().as_deref(), root)
}

/// [`inherited_listener`] with the variable's value given.
pub(crate) fn inherited_listener_from(var: Option<&str>, root: SocketAddr) -> Option<TcpListener> {
    use std::os::fd::FromRawFd;
    use std::sync::atomic::{AtomicBool, Ordering};
    static TAKEN: AtomicBool = AtomicBool::new(false);
    let fd: i32 = var?.trim().parse().ok()?;
    if fd < 3 {
        return None;
    }
    // Is it a listening socket? Ask the descriptor without owning it (an fd that is not an
    // open socket makes getsockopt fail).
    let mut listening: libc::c_int = 0;
    let mut olen = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_ACCEPTCONN writes one c_int into `listening`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&raw mut listening).cast(),
            &mut olen,
        )
    };
    if r != 0 {
        log::warn!("{ROOT_FD_ENV}={fd} is not an open socket: binding the root address instead");
        return None;
    }
    if listening == 0 || TAKEN.swap(true, Ordering::AcqRel) {
        return None;
    }
    // SAFETY: `fd` is an open listening socket the launcher handed to this process for the
    // root (ROOT_FD_ENV); TAKEN makes this the only owner in the process.
    let l = unsafe { TcpListener::from_raw_fd(fd) };
    match l.local_addr() {
        Ok(a) if a == root => {
            // Not inherited by this process's own children.
            // SAFETY: fcntl on a descriptor this process now owns.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            Some(l)
        }
        other => {
            log::warn!(
                "{ROOT_FD_ENV}={fd} listens on {other:?}, not the root address {root}: binding it instead"
            );
            // Not ours to close: hand the descriptor back untouched.
            std::mem::forget(l);
            TAKEN.store(false, Ordering::Release);
            None
        }
    }
}
