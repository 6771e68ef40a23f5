//! Peers' process exits, checked before a send over shm.
//!
//! libfabric's shm provider (1.17) guards each endpoint's shared region with a plain spin lock
//! in the region itself: a sender takes the *receiver's* lock to queue its command
//! (`smr_generic_sendmsg`: `pthread_spin_lock(&peer_smr->lock)`), and the receiver takes its own
//! in every progress call. A process killed while it held its lock (a spinning receiver holds
//! it much of the time) leaves it held for good, and the next send to it spins inside
//! `fi_tsend` / `fi_tinject` forever, where no timeout of ours can reach. Measured here: 3
//! ranks over shm, one killed mid-run, a survivor hung in `pthread_spin_lock` under
//! `post_now` in 2 to 3 runs of 60 (`platform-linux/perf/tests/liveness.rs`, BENCHMARKS.md).
//!
//! So over shm every peer's process is watched through a pidfd (`pidfd_open(2)`, Linux 5.3;
//! the pid travels in the endpoint's name, [`crate::LibfabricTransport::local_name`]), and a
//! send to a peer whose process has exited fails at once with an error naming it instead of
//! being posted: per send post, one look at the peer's live mark ([`mark`]: a robust mutex its
//! process holds, one atomic load of its lock word) or, where that does not answer "runs", one
//! `poll(2)` of the peer's pidfd; and a watchdog (which asks the pidfds alone) bounds the
//! case the check cannot see ([`Stuck`]). The pids are taken in this
//! process's pid namespace, as shm's own cross-memory attach takes them (processes of one host
//! that do not share a pid namespace are not told apart by pid). What this leaves open: a
//! peer that dies while holding its lock *after* the check, while our post is already
//! spinning on it (1 run in about 36 of a 2-rank 1 MiB all-reduce with one rank killed). No
//! code of ours runs in that spin and the provider cannot be told to give up, so it is bounded
//! from outside: a send post (and a CQ read, whose completions may take a peer's lock too) is
//! registered with its start time ([`Stuck::enter`] / [`Stuck::leave`], two atomic stores and a
//! coarse clock read), and a watchdog thread (one per process, started with the first shm
//! transport; it sleeps [`WATCHDOG_PERIOD`] between looks) that finds one running longer than
//! [`STUCK_LIMIT`] while its peer's process (any peer's, for a CQ read) has exited writes an
//! error naming the peer and ends the process with status [`STUCK_EXIT_STATUS`]: the one way
//! out of the provider's spin (a fixed provider, with a robust lock, would need none). It never
//! fires while the peers live. Before it ends the process it reports the peer lost on the
//! comm's bootstrap ([`LAST_WORDS_LIMIT`]): the thread that would have seen the loss is the one
//! spinning, and a root that ended without a word would be named lost by the other ranks
//! instead of the dead peer.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

/// How long a send post or CQ read may run while its peer's process has exited before the
/// watchdog ends the process.
pub const STUCK_LIMIT: Duration = Duration::from_secs(2);
/// How often the watchdog looks.
pub const WATCHDOG_PERIOD: Duration = Duration::from_millis(200);
/// The exit status of a process the watchdog ends (the status proxy-perf uses for an error).
pub const STUCK_EXIT_STATUS: i32 = 2;
/// [`Stuck`]'s peer for a CQ read: any peer.
const ANY_PEER: u32 = u32::MAX;

pub(crate) mod mark;

/// A peer process's pidfd: readable once the process has exited (`pidfd_open(2)`); and its
/// live mark where it has one ([`mark`]), which answers "still runs" without a system call.
#[derive(Debug)]
pub(crate) struct PeerExit {
    pid: u32,
    fd: OwnedFd,
    mark: Option<mark::Mark>,
}

impl PeerExit {
    /// The pidfd of process `pid`, or `None` when the kernel cannot give one (before 5.3, a
    /// pid of another namespace, a process already reaped): the peer is then not watched.
    pub(crate) fn open(pid: u32) -> Option<Self> {
        let p = libc::pid_t::try_from(pid).ok().filter(|&p| p > 0)?;
        // SAFETY: pidfd_open takes a pid and flags 0 and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p, 0) };
        let fd = i32::try_from(fd).ok().filter(|&fd| fd >= 0)?;
        // SAFETY: `fd` is a descriptor the call above just opened for us alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Some(Self {
            pid,
            fd,
            mark: mark::Mark::of_peer(pid),
        })
    }

    /// The watched process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// `true` once the process has exited (a zombie counts: it holds no lock any more, and
    /// never will release one). While the peer's live mark is held, `false` from that alone
    /// (one atomic load); else one non-blocking `poll(2)` of the pidfd.
    pub(crate) fn exited(&self) -> bool {
        if self.mark.as_ref().is_some_and(mark::Mark::held) {
            return false;
        }
        self.exited_by_pidfd()
    }

    /// `true` once the process has exited, by its pidfd alone (one non-blocking `poll(2)`):
    /// the watchdog's answer, which no mark can hold back.
    pub(crate) fn exited_by_pidfd(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, timeout 0 (never blocks).
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n > 0 && p.revents & libc::POLLIN != 0
    }
}

/// The watch's coarse clock (`proxy_bootstrap::coarse_ns`: a vDSO read, a few ms of
/// resolution suffice for a limit of seconds), 1 at least, so that 0 can mean "not in a call".
fn coarse_ns() -> u64 {
    proxy_bootstrap::coarse_ns().max(1)
}

/// One shm transport's calls into the provider that may spin on a peer's lock, as the
/// watchdog sees them (module docs).
#[derive(Debug)]
pub(crate) struct Stuck {
    /// The transport's name and rank, for the message.
    who: String,
    /// Every rank's process (`None`: self, or no pidfd).
    exits: Vec<Option<PeerExit>>,
    /// When the call in progress began ([`coarse_ns`]), 0 when none.
    since_ns: AtomicU64,
    /// The peer of the call in progress ([`ANY_PEER`] for a CQ read).
    peer: AtomicU32,
    /// Told the exited peer and the message before the watchdog ends the process
    /// ([`Stuck::set_last_words`]).
    last_words: OnceLock<LastWords>,
}

/// What a transport says before the watchdog ends its process: `(peer, message)`.
pub(crate) struct LastWords(pub(crate) Box<LastWordsFn>);

/// The function of [`LastWords`]: `(peer, message)`.
pub(crate) type LastWordsFn = dyn Fn(u32, &str) + Send + Sync;

impl std::fmt::Debug for LastWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LastWords")
    }
}

/// How long the watchdog's last words may wait for the bootstrap (held by a thread in a
/// bootstrap collective) before the process ends without them.
pub const LAST_WORDS_LIMIT: Duration = Duration::from_millis(200);

impl Stuck {
    /// Watches `exits` (indexed by rank) for the transport `who`, and starts the process's
    /// watchdog if it is not running yet.
    pub(crate) fn new(who: String, exits: Vec<Option<PeerExit>>) -> Arc<Self> {
        let s = Arc::new(Self {
            who,
            exits,
            since_ns: AtomicU64::new(0),
            peer: AtomicU32::new(ANY_PEER),
            last_words: OnceLock::new(),
        });
        watchdog()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(&s));
        s
    }

    /// What the watchdog runs, with the exited peer and its message, before it ends the
    /// process: the transport reports the peer lost on the bootstrap, so the other ranks name
    /// it rather than this process (docs/design.md §9, "Liveness"). Set once; a second call
    /// is ignored.
    pub(crate) fn set_last_words(&self, words: LastWords) {
        let _ = self.last_words.set(words);
    }

    /// `peer`'s watch when its process has exited (`None` while it runs, and for self and
    /// unwatched peers).
    pub(crate) fn exited(&self, peer: u32) -> Option<&PeerExit> {
        self.exits
            .get(peer as usize)
            .and_then(Option::as_ref)
            .filter(|w| w.exited())
    }

    /// A call that may spin on `peer`'s lock begins (`None`: a CQ read, any peer).
    #[inline]
    pub(crate) fn enter(&self, peer: Option<u32>) {
        self.peer.store(peer.unwrap_or(ANY_PEER), Ordering::Relaxed);
        // Release: the watchdog that sees the time sees the peer.
        self.since_ns.store(coarse_ns(), Ordering::Release);
    }

    /// The call returned.
    #[inline]
    pub(crate) fn leave(&self) {
        self.since_ns.store(0, Ordering::Relaxed);
    }

    /// `peer`'s watch when its pidfd says its process has exited (the watchdog's check).
    fn exited_by_pidfd(&self, peer: u32) -> Option<&PeerExit> {
        self.exits
            .get(peer as usize)
            .and_then(Option::as_ref)
            .filter(|w| w.exited_by_pidfd())
    }

    /// The watchdog's look: the exited peer a call has waited on for longer than
    /// [`STUCK_LIMIT`], if any (by the pidfds alone).
    fn stuck(&self, now_ns: u64) -> Option<(u32, u32, Duration)> {
        let since = self.since_ns.load(Ordering::Acquire);
        if since == 0 || now_ns.saturating_sub(since) < STUCK_LIMIT.as_nanos() as u64 {
            return None;
        }
        let took = Duration::from_nanos(now_ns.saturating_sub(since));
        let peer = self.peer.load(Ordering::Relaxed);
        if peer != ANY_PEER {
            return self.exited_by_pidfd(peer).map(|w| (peer, w.pid(), took));
        }
        (0..self.exits.len() as u32)
            .find_map(|r| self.exited_by_pidfd(r).map(|w| (r, w.pid(), took)))
    }
}

/// The process's watched transports; the watchdog thread starts with the first.
fn watchdog() -> &'static Mutex<Vec<Weak<Stuck>>> {
    static WATCHED: OnceLock<Mutex<Vec<Weak<Stuck>>>> = OnceLock::new();
    WATCHED.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("shm-watchdog".into())
            .spawn(|| loop {
                std::thread::sleep(WATCHDOG_PERIOD);
                let now = coarse_ns();
                let mut w = watchdog().lock().unwrap_or_else(PoisonError::into_inner);
                w.retain(|s| s.strong_count() > 0);
                for s in w.iter().filter_map(Weak::upgrade) {
                    if let Some((peer, pid, took)) = s.stuck(now) {
                        let msg = format!(
                            "{}: a call into libfabric shm has spun for {took:?} on the lock of \
                             rank {peer} (pid {pid}), whose process has exited holding it: the \
                             provider never returns from it; ending this process (status \
                             {STUCK_EXIT_STATUS})",
                            s.who
                        );
                        log::error!("{msg}");
                        eprintln!("error: {msg}");
                        if let Some(words) = s.last_words.get() {
                            (words.0)(peer, &msg);
                        }
                        // SAFETY: ends the process at once, without exit handlers (one of which
                        // could take the same lock): nothing of this process runs afterwards.
                        unsafe { libc::_exit(STUCK_EXIT_STATUS) };
                    }
                }
            });
        if let Err(e) = spawned {
            log::warn!("shm watchdog: cannot start its thread ({e}): a send spinning on a dead peer's lock is not bounded");
        }
        Mutex::new(Vec::new())
    })
}

#[cfg(test)]
mod tests;
