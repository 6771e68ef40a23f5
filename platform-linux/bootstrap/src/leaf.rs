//! Every rank but 0, a leaf: connects to the root, says hello, waits for the welcome, and
//! afterwards exchanges all-gather and barrier frames with the root.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use proxy_core::base::state::{self, Machine};
use proxy_core::progress::net::MAX_COMM_ID;

use crate::conn::{BoundedWait, Conn};
use crate::wire::{Frame, Preface, VERSION as PROTOCOL_VERSION};
use crate::*;

/// The state of a leaf's bootstrap (`init_leaf`), rank > 0.
///
/// ```text
///              (1) connect_root            (2) on_preface             (3) on_frame
///  Connecting ───────────────► AwaitPreface ─────────────► AwaitWelcome ───────────► Joined
///       │                           │                            │
///       │ (4) connect_root          │ (5) on_preface / on_io     │ (6) on_frame / on_io
///       └───────────────────────────┴────────────────────────────┴────────────────► Failed
/// ```
///
/// 1. `connect_root`: the TCP connection to the root is up; `Hello` is queued.
/// 2. `on_preface`: the root's preface has the magic and this rank's protocol version.
/// 3. `on_frame`: a `Welcome` with one host per rank and a valid comm id.
/// 4. `connect_root`: the root did not accept before the timeout (nothing to tell anyone).
/// 5. `on_preface`: wrong magic or another version; `on_io`: the connection failed or closed,
///    or the timeout passed (the root is told with `Abort` unless it went away).
/// 6. `on_frame`: `Reject`, `Abort`, an unexpected or malformed frame; `on_io`: as in 5.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeafState {
    /// Connecting to the root (retrying while it is not up yet).
    Connecting,
    /// Connected, `Hello` queued; the root's preface has not been read yet.
    AwaitPreface,
    /// The root's preface checked; waiting for `Welcome`.
    AwaitWelcome,
    /// Welcomed: the bootstrap is done.
    Joined,
    /// Failed (terminal).
    Failed,
}

impl Machine for LeafState {
    const NAME: &'static str = "bootstrap leaf";

    /// The numbered edges of the diagram above.
    fn edge(from: Self, to: Self) -> Option<u8> {
        use LeafState as S;
        match (from, to) {
            (S::Connecting, S::AwaitPreface) => Some(1),
            (S::AwaitPreface, S::AwaitWelcome) => Some(2),
            (S::AwaitWelcome, S::Joined) => Some(3),
            (S::Connecting, S::Failed) => Some(4),
            (S::AwaitPreface, S::Failed) => Some(5),
            (S::AwaitWelcome, S::Failed) => Some(6),
            _ => None,
        }
    }
}

/// What happened to a leaf's bootstrap (the input of [`Leaf::on_event`]).
enum LeafEvent {
    /// The connection to the root is up.
    Connected(TcpStream),
    /// A connection attempt failed (it is retried).
    Refused(io::Error),
    /// The root's preface is complete (or shows a wrong magic).
    Preface(Preface),
    /// A whole frame from the root.
    Frame(Frame),
    /// The root sent bytes that are not a frame.
    Malformed(String),
    /// The connection failed or was closed (the message says which).
    Lost(String),
    /// The bootstrap timeout passed after `waited`.
    TimedOut(Duration),
}

/// The welcome a joined leaf got: comm id and every rank's host.
type Welcome = (u32, Vec<Vec<u8>>);

/// A leaf's bootstrap in progress.
struct Leaf<'c> {
    cfg: &'c BootstrapConfig,
    state: LeafState,
    waiter: BoundedWait,
    last_err: Option<io::Error>,
    /// The connection to the root, from [`LeafState::AwaitPreface`] on.
    conn: Option<Conn>,
    addr: SocketAddr,
}

impl<'c> Leaf<'c> {
    fn new(cfg: &'c BootstrapConfig) -> Self {
        Self {
            cfg,
            state: LeafState::Connecting,
            waiter: BoundedWait::new(cfg.timeout, cfg.warn_interval),
            last_err: None,
            conn: None,
            addr: cfg.root,
        }
    }

    /// The one place the state changes ([`state::step`]: traces `state=A=>B`, refuses an
    /// edge the diagram does not have).
    fn set_state(&mut self, next: LeafState) {
        let who = format_args!("rank {}/{}", self.cfg.rank, self.cfg.nranks);
        let _ = state::step(&mut self.state, next, &who);
    }

    /// Runs the machine until it is [`LeafState::Joined`] (returning the welcome and the
    /// connection) or [`LeafState::Failed`].
    fn run(mut self) -> Result<(Welcome, Conn), BootstrapError> {
        loop {
            let events = match self.state {
                LeafState::Connecting => self.connect_root(),
                LeafState::AwaitPreface | LeafState::AwaitWelcome => self.on_io(),
                LeafState::Joined | LeafState::Failed => unreachable!("terminal states return"),
            };
            for ev in events {
                if let Some(w) = self.on_event(ev)? {
                    let conn = self.conn.take().expect("a joined leaf has its connection");
                    return Ok((w, conn));
                }
            }
            if self.state == LeafState::Connecting {
                // Connection refused comes back at once: do not hammer the root address.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    fn err_text(&self) -> String {
        self.last_err
            .as_ref()
            .map_or_else(|| "none".to_owned(), ToString::to_string)
    }

    /// [`LeafState::Connecting`]: one connection attempt, then the timeout check (edges 1, 4).
    fn connect_root(&mut self) -> Vec<LeafEvent> {
        let (rank, n, root) = (self.cfg.rank, self.cfg.nranks, self.cfg.root);
        let mut events = Vec::new();
        let left = self
            .waiter
            .deadline()
            .saturating_duration_since(Instant::now());
        if !left.is_zero() {
            match TcpStream::connect_timeout(&root, left.min(Duration::from_secs(1))) {
                Ok(s) => return vec![LeafEvent::Connected(s)],
                Err(e) => events.push(LeafEvent::Refused(e)),
            }
        }
        let last = match &events[..] {
            [LeafEvent::Refused(e)] => e.to_string(),
            _ => self.err_text(),
        };
        if let Err(waited) = self.waiter.tick(rank, n, || {
            format!("the root (rank 0) to accept at {root} (last error: {last})")
        }) {
            events.push(LeafEvent::TimedOut(waited));
        }
        events
    }

    /// [`LeafState::AwaitPreface`] / [`LeafState::AwaitWelcome`]: moves bytes and turns what
    /// arrived into events, in order: I/O failure, preface, frame, end of stream, timeout.
    fn on_io(&mut self) -> Vec<LeafEvent> {
        let (rank, n, addr) = (self.cfg.rank, self.cfg.nranks, self.addr);
        let mut events = Vec::new();
        let conn = self
            .conn
            .as_mut()
            .expect("connected states have the connection");
        if let Err(e) = conn.flush().and_then(|()| conn.fill()) {
            return vec![LeafEvent::Lost(format!(
                "connection to the root at {addr}: {e}"
            ))];
        }
        let mut preface_ok = conn.preface_seen;
        if !conn.preface_seen {
            match conn.take_preface() {
                Preface::Incomplete => {}
                Preface::Version(v) if v == PROTOCOL_VERSION => {
                    preface_ok = true;
                    events.push(LeafEvent::Preface(Preface::Version(v)));
                }
                p => return vec![LeafEvent::Preface(p)],
            }
        }
        if preface_ok {
            match conn.next_frame() {
                Ok(Some(f)) => {
                    events.push(LeafEvent::Frame(f));
                    return events;
                }
                Ok(None) => {}
                Err(e) => {
                    events.push(LeafEvent::Malformed(e.to_string()));
                    return events;
                }
            }
        }
        if conn.eof {
            events.push(LeafEvent::Lost(format!(
                "the root at {addr} closed the connection before every rank had joined"
            )));
            return events;
        }
        if let Err(waited) = self.waiter.tick(rank, n, || {
            format!("the root at {addr} to report that every rank has joined")
        }) {
            events.push(LeafEvent::TimedOut(waited));
        }
        events
    }

    /// Edges 5 and 6: tells the root why (unless it aborted or went away), logs, fails.
    fn fail(&mut self, e: BootstrapError) -> BootstrapError {
        if let Some(conn) = self.conn.as_mut() {
            if !matches!(
                e,
                BootstrapError::Aborted { .. } | BootstrapError::PeerLost { .. }
            ) {
                conn.send_last(&Frame::Abort {
                    origin: self.cfg.rank,
                    status: e.status().code(),
                    reason: e.to_string(),
                });
            }
        }
        log::error!("{e}");
        self.set_state(LeafState::Failed);
        e
    }

    /// The step logic: one arm per legal (state, event) pair. `Some(welcome)` when joined.
    fn on_event(&mut self, ev: LeafEvent) -> Result<Option<Welcome>, BootstrapError> {
        use LeafEvent as E;
        use LeafState as S;
        let (rank, n, addr) = (self.cfg.rank, self.cfg.nranks, self.addr);
        let lost = |message: String| BootstrapError::PeerLost {
            rank,
            peer: 0,
            message,
        };
        match (self.state, ev) {
            // (1)
            (S::Connecting, E::Connected(stream)) => {
                self.addr = stream.peer_addr().unwrap_or(self.cfg.root);
                let addr = self.addr;
                let mut conn = Conn::new(stream, addr).map_err(|e| {
                    BootstrapError::io(rank, format!("configuring the connection to {addr}"), &e)
                })?;
                conn.queue(&Frame::Hello {
                    rank,
                    nranks: n,
                    pid: std::process::id(),
                    host: host_identity(),
                });
                self.conn = Some(conn);
                self.set_state(S::AwaitPreface);
                Ok(None)
            }
            (S::Connecting, E::Refused(e)) => {
                self.last_err = Some(e);
                Ok(None)
            }
            // (4)
            (S::Connecting, E::TimedOut(waited)) => {
                let e = BootstrapError::Timeout {
                    rank,
                    what: format!(
                        "the root (rank 0) at {} ({ROOT_COMM_ID_ENV}) to accept a connection; \
                         last error: {}",
                        self.cfg.root,
                        self.err_text()
                    ),
                    waited,
                };
                log::error!("{e}");
                self.set_state(S::Failed);
                Err(e)
            }
            // (2)
            (S::AwaitPreface, E::Preface(Preface::Version(v))) if v == PROTOCOL_VERSION => {
                self.set_state(S::AwaitWelcome);
                Ok(None)
            }
            // (5)
            (S::AwaitPreface, E::Preface(Preface::Version(v))) => {
                Err(self.fail(BootstrapError::Misconfigured {
                    rank,
                    message: format!(
                        "the root at {addr} speaks bootstrap protocol version {v}, this rank \
                         speaks {PROTOCOL_VERSION}"
                    ),
                }))
            }
            (S::AwaitPreface, E::Preface(_)) => Err(self.fail(BootstrapError::Protocol {
                rank,
                message: format!(
                    "the root address {addr} does not speak the bootstrap protocol (wrong magic)"
                ),
            })),
            // (3), or (6) for a bad welcome
            (S::AwaitWelcome, E::Frame(Frame::Welcome { comm_id, hosts })) => {
                if hosts.len() != n as usize || comm_id >= MAX_COMM_ID {
                    return Err(self.fail(BootstrapError::Protocol {
                        rank,
                        message: format!(
                            "bad welcome from the root: {} hosts for {n} ranks, comm id \
                             {comm_id}",
                            hosts.len()
                        ),
                    }));
                }
                self.set_state(S::Joined);
                Ok(Some((comm_id, hosts)))
            }
            // (6)
            (S::AwaitWelcome, E::Frame(Frame::Reject { reason, .. })) => {
                Err(self.fail(BootstrapError::Misconfigured {
                    rank,
                    message: format!("rejected by the root: {reason}"),
                }))
            }
            (
                S::AwaitWelcome,
                E::Frame(Frame::Abort {
                    origin,
                    status,
                    reason,
                }),
            ) => Err(self.fail(BootstrapError::aborted(rank, origin, status, reason))),
            (S::AwaitWelcome, E::Frame(f)) => Err(self.fail(BootstrapError::Protocol {
                rank,
                message: format!("unexpected {} from the root before Welcome", f.name()),
            })),
            (S::AwaitWelcome, E::Malformed(e)) => Err(self.fail(BootstrapError::Protocol {
                rank,
                message: format!("malformed frame from the root: {e}"),
            })),
            // (5) / (6)
            (S::AwaitPreface | S::AwaitWelcome, E::Lost(message)) => Err(self.fail(lost(message))),
            (S::AwaitPreface | S::AwaitWelcome, E::TimedOut(waited)) => {
                Err(self.fail(BootstrapError::Timeout {
                    rank,
                    what: format!(
                        "the root at {addr} to report that every rank has joined (connected, \
                         no welcome yet)"
                    ),
                    waited,
                }))
            }
            (state, _) => unreachable!("leaf: no edge out of {state:?} for this event"),
        }
    }
}

impl Bootstrap {
    /// A leaf's bootstrap: runs the [`LeafState`] machine to `Joined`.
    pub(crate) fn init_leaf(cfg: &BootstrapConfig) -> Result<Self, BootstrapError> {
        let ((comm_id, hosts), conn) = Leaf::new(cfg).run()?;
        let role = Role::Leaf {
            conn,
            root_left: false,
            gathered: None,
        };
        Ok(Self::with_role(cfg, role, comm_id, hosts))
    }

    pub(crate) fn pump_leaf(&mut self) -> Result<(), BootstrapError> {
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
                Frame::GroupRelease { group, gen } => {
                    crate::group::leaf_group_release(&mut self.groups, me, group, gen)?;
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
                } => return Err(BootstrapError::aborted(me, origin, status, reason)),
                Frame::Lost { rank, reason } => {
                    return Err(BootstrapError::PeerLost {
                        rank: me,
                        peer: rank,
                        message: format!("the root (rank 0) reports: {reason}"),
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

    pub(crate) fn root_left(&self) -> bool {
        matches!(
            self.role,
            Role::Leaf {
                root_left: true,
                ..
            }
        )
    }
}
