//! The hierarchical barrier between processes: the processes of one host meet in a
//! shared-memory region; one leader per host meets the other hosts' leaders in a group barrier
//! over the bootstrap connections. The driver's [`BarrierChannel`], non-blocking throughout.
//!
//! ```text
//!   host A: rank 0 (leader)  rank 1        host B: rank 2 (leader)  rank 3
//!            │ arrived[0]=g   │ arrived[1]=g          │ arrived[0]=g   │ arrived[1]=g
//!            ▼                ▼                        ▼                ▼
//!        /dev/shm region (A): every arrived ≥ g   region (B): every arrived ≥ g
//!            │ leader: group barrier g ◄──── bootstrap (root relays) ────► leader
//!            ▼                                          ▼
//!        released = g  ─► every local rank of A     released = g ─► every local rank of B
//! ```
//!
//! Region layout (64-byte lines, one `u32` at the start of each): line 0 the magic, line 1
//! `released` (written by the leader of a multi-host comm; on one host by the last local rank
//! to arrive), line 2 `failed` (an `NrtStatus` code, 0 = none, written by any rank whose
//! bootstrap failed), line 3 `lost` (the rank that failure names + 1, 0 = none; written just
//! before `failed`, for the other ranks' log lines), line 4 `count` (one host only: arrivals
//! so far, every local rank adds one per generation), lines `5..5 + nlocal` every local rank's
//! `arrived` generation (each written by its own rank only). Generations count from 1 and
//! compare wrapping, as [`SharedMemBarrier`](proxy_core::driver::task::SharedMemBarrier): a
//! generation stays passed.
//!
//! Release on one host: the central barrier's (`proxy_core::driver::task::barrier::central`,
//! loom model 18): the rank whose add to `count` completes the generation releases it in the
//! same call, so no rank waits for the leader to be scheduled and notice (on a host with more
//! rank processes than CPUs that wait was 7–20 µs per execution on average for the ranks
//! other than the leader, BENCHMARKS.md). With several hosts the leader releases after the
//! group barrier between hosts, as before.
//!
//! Liveness: every [`LIVENESS_EVERY`] "not yet" answers, any rank moves the bootstrap's bytes
//! once (`try_lock`, [`Bootstrap::check_alive`]), so a lost process (its connection closed
//! without `Bye`) fails the barrier everywhere: the root sees the closed connection and aborts
//! every rank, and a rank whose bootstrap failed writes the status into its host's region.
//!
//! Set-up ([`HostBarrier::setup`], collective and blocking, once per comm): all-gather of the
//! host keys (hostname and boot id, [`host_identity`]); the host leader (its lowest rank)
//! creates `/dev/shm/proxy-barrier-<root port>-<bootstrap comm id>-<comm>-<pid>-<seq>` (mode
//! 0600, `O_EXCL`; the temporary directory when there is no `/dev/shm`); all-gather of the paths; every local rank maps it; all-gather of the
//! outcome; the leader unlinks the file. So nothing is left in `/dev/shm` once set-up has
//! returned, whatever happens to the processes later (a crash during set-up itself can leave
//! the file).
//!
//! Seed: `enc_barrier` between processes, §3 ("Considerations"); docs/design.md §4.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::TryLockError;

use proxy_core::driver::task::{BarrierChannel, BarrierTicket};
use proxy_core::NrtStatus;

use proxy_core::driver::task::barrier::central;

use crate::barrier::reached;
use crate::shm::ShmRegion;
use crate::*;

/// Where the regions are created (when it is not a directory, the system's temporary
/// directory is used instead; the leader sends the whole path).
pub const HOST_BARRIER_DIR: &str = "/dev/shm";
/// The first part of every region's file name (the rest: `<root port>-<bootstrap comm
/// id>-<comm>-<pid>-<seq>`).
pub const HOST_BARRIER_PREFIX: &str = "proxy-barrier-";

const MAGIC: u32 = u32::from_le_bytes(*b"PXHB");
const L_MAGIC: usize = 0;
const L_RELEASED: usize = 1;
const L_FAILED: usize = 2;
const L_LOST: usize = 3;
const L_COUNT: usize = 4;
const L_ARRIVED: usize = 5;

/// How to set up a [`HostBarrier`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostBarrierConfig {
    /// The comm the barrier belongs to (in the region's name and the logs).
    pub comm: u32,
    /// Tests only: this rank's host key instead of [`host_identity`] (ranks with equal keys
    /// share a region; different keys simulate hosts on one machine).
    pub host_key: Option<Vec<u8>>,
    /// Where the host leader creates the region (read on leaders only): `None` is
    /// [`HOST_BARRIER_DIR`], or the temporary directory when that is not a directory.
    pub dir: Option<PathBuf>,
}

impl HostBarrierConfig {
    /// The barrier of `comm`, with the real host key.
    pub fn new(comm: u32) -> Self {
        Self {
            comm,
            host_key: None,
            dir: None,
        }
    }
}

/// Polls answered "not yet" between two liveness checks of the bootstrap
/// ([`Bootstrap::check_alive`], with `try_lock`).
pub const LIVENESS_EVERY: u32 = 64;

/// A liveness check failed.
struct LivenessError(BootstrapError);

/// The leader's part between hosts.
#[derive(Debug)]
struct Cross {
    group: GroupId,
    /// The group generation started and not yet seen passed.
    ticket: Option<BarrierTicket>,
}

/// One process's endpoint of a comm's hierarchical barrier (see the module docs): the driver's
/// [`BarrierChannel`]. `arrive` writes this rank's word in the host's region; `poll` reads the
/// `released` word and, on the host leader, moves the barrier on (every local rank arrived:
/// release, or first the group barrier with the other hosts' leaders, taking the bootstrap
/// only with `try_lock`). Neither ever blocks.
///
/// One endpoint per (comm, process); two comms have two endpoints with their own regions and
/// generations.
#[derive(Debug)]
pub struct HostBarrier {
    region: ShmRegion,
    /// The group barrier (leader) and the liveness checks (everyone).
    boot: SharedBootstrap,
    /// "Not yet" answers since the last liveness check.
    idle_polls: u32,
    comm: u32,
    rank: u32,
    /// This rank's index among its host's ranks, and how many there are.
    index: usize,
    nlocal: usize,
    hosts: usize,
    leader: bool,
    /// Leader of a multi-host comm only.
    cross: Option<Cross>,
    /// The generation this rank last arrived at.
    gen: u32,
    /// Generations passed through the group barrier (leader), for tests and logs.
    cross_passed: u64,
    logged: bool,
    /// Set from an arrival until this rank saw the barrier pass (or fail): [`HostBarrier::waiting`].
    waiting: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// Unlinks the region file when dropped (the leader's set-up, whichever way it ends).
struct Unlink(Option<PathBuf>);

impl Drop for Unlink {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            if let Err(e) = std::fs::remove_file(&p) {
                log::warn!("host barrier: cannot unlink {}: {e}", p.display());
            }
        }
    }
}

impl HostBarrier {
    /// Sets up `cfg.comm`'s barrier (collective: every rank of the bootstrap calls it, in the
    /// same order as the other collective calls; blocking, bounded by the bootstrap timeout;
    /// holds the bootstrap's lock throughout).
    ///
    /// # Errors
    /// The bootstrap's failures (all-gathers); [`BootstrapError::Config`] on every rank when
    /// some rank could not create or map its host's region (the message names the ranks and
    /// causes).
    pub fn setup(boot: &SharedBootstrap, cfg: &HostBarrierConfig) -> Result<Self, BootstrapError> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let mut b = boot.lock();
        let (rank, nranks) = (b.rank(), b.nranks());
        let key = cfg.host_key.clone().unwrap_or_else(host_identity);
        let keys = b.all_gather(&key)?;
        let local: Vec<u32> = (0..nranks).filter(|&r| keys[r as usize] == key).collect();
        let leaders: Vec<u32> = (0..nranks)
            .filter(|&r| !keys[..r as usize].contains(&keys[r as usize]))
            .collect();
        let leader = local[0] == rank;
        let index = local.iter().position(|&r| r == rank).unwrap_or(0);
        let lines = L_ARRIVED + local.len();

        // The leader creates the region; its name (or why not) goes to every rank.
        let mut unlink = Unlink(None);
        let mut created = None;
        let blob = if leader {
            let seq = SEQ.fetch_add(1, Ordering::Relaxed);
            let name = format!(
                "{HOST_BARRIER_PREFIX}{}-{}-{}-{}-{seq}",
                b.root().port(),
                b.comm_id(),
                cfg.comm,
                std::process::id()
            );
            let dir = match &cfg.dir {
                Some(d) => d.clone(),
                None if std::path::Path::new(HOST_BARRIER_DIR).is_dir() => {
                    PathBuf::from(HOST_BARRIER_DIR)
                }
                None => std::env::temp_dir(),
            };
            let path = dir.join(&name);
            match ShmRegion::create(&path, lines) {
                Ok(r) => {
                    r.word(L_MAGIC).store(MAGIC, Ordering::Release);
                    created = Some(r);
                    let mut blob = b"ok:".to_vec();
                    blob.extend_from_slice(path.as_os_str().as_bytes());
                    unlink.0 = Some(path);
                    blob
                }
                Err(e) => format!("err:cannot create {}: {e}", path.display()).into_bytes(),
            }
        } else {
            Vec::new()
        };
        let names = b.all_gather(&blob)?;
        let region = match created {
            Some(r) => Ok(r),
            None => {
                let theirs = &names[local[0] as usize];
                match theirs.strip_prefix(b"ok:") {
                    Some(path) => {
                        let path = PathBuf::from(OsStr::from_bytes(path));
                        ShmRegion::open(&path, lines)
                            .map_err(|e| format!("cannot map {}: {e}", path.display()))
                            .and_then(|r| {
                                if r.word(L_MAGIC).load(Ordering::Acquire) == MAGIC {
                                    Ok(r)
                                } else {
                                    Err(format!("{} is not a host barrier region", path.display()))
                                }
                            })
                    }
                    None => Err(format!(
                        "host leader rank {}: {}",
                        local[0],
                        String::from_utf8_lossy(theirs.strip_prefix(b"err:").unwrap_or(theirs))
                    )),
                }
            }
        };
        let group = if leaders.len() > 1 {
            Some(b.register_group(&leaders)?)
        } else {
            None
        };
        let outcome = match &region {
            Ok(_) => Vec::new(),
            Err(e) => e.clone().into_bytes(),
        };
        let outcomes = b.all_gather(&outcome);
        drop(unlink);
        let outcomes = outcomes?;
        let bad: Vec<String> = outcomes
            .iter()
            .enumerate()
            .filter(|(_, o)| !o.is_empty())
            .map(|(r, o)| format!("rank {r}: {}", String::from_utf8_lossy(o)))
            .collect();
        if !bad.is_empty() {
            return Err(BootstrapError::Config(format!(
                "host barrier of comm {}: set-up failed: {}",
                cfg.comm,
                bad.join("; ")
            )));
        }
        let region = region.map_err(BootstrapError::Config)?;
        drop(b);
        log::debug!(
            "host barrier comm {} rank {rank}: local index {index} of {}, {} host(s), {}",
            cfg.comm,
            local.len(),
            leaders.len(),
            if leader { "host leader" } else { "follower" }
        );
        Ok(Self {
            region,
            boot: boot.clone(),
            idle_polls: 0,
            comm: cfg.comm,
            rank,
            index,
            nlocal: local.len(),
            hosts: leaders.len(),
            leader,
            cross: match (leader, group) {
                (true, Some(group)) => Some(Cross {
                    group,
                    ticket: None,
                }),
                _ => None,
            },
            gen: 0,
            cross_passed: 0,
            logged: false,
            waiting: Default::default(),
        })
    }

    /// This rank's index among its host's ranks (0 = the host leader).
    pub fn local_index(&self) -> usize {
        self.index
    }

    /// Number of ranks on this rank's host.
    pub fn local_ranks(&self) -> usize {
        self.nlocal
    }

    /// Number of hosts.
    pub fn hosts(&self) -> usize {
        self.hosts
    }

    /// A flag set from this rank's arrival until it saw the barrier pass (or fail). The other
    /// ranks' arrivals signal no descriptor: a driver that would block on its network's
    /// descriptor when idle (`proxy_core::driver::idle`) yields instead while it is set.
    pub fn waiting(&self) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        self.waiting.clone()
    }

    /// `true` on the host leader (the lowest rank of the host).
    pub fn is_host_leader(&self) -> bool {
        self.leader
    }

    /// Generations this endpoint passed through the group barrier with the other hosts'
    /// leaders (0 on a follower, and on a single host).
    pub fn cross_host_generations(&self) -> u64 {
        self.cross_passed
    }

    /// The generation local rank `index` last arrived at, as the region says (diagnostics).
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when `index >= local_ranks()`.
    pub fn arrived_of(&self, index: usize) -> Result<u32, NrtStatus> {
        if index >= self.nlocal {
            return Err(NrtStatus::Invalid);
        }
        Ok(self.arrived(index).load(Ordering::Acquire))
    }

    fn arrived(&self, index: usize) -> &AtomicU32 {
        self.region.word(L_ARRIVED + index)
    }

    /// Every [`LIVENESS_EVERY`] "not yet": checks the bootstrap for a lost peer (only if it is
    /// free). A follower whose host leader died, or a leader whose follower died, learns it
    /// here (the root sees the lost connection and aborts every rank).
    fn liveness(&mut self) -> Result<(), LivenessError> {
        self.idle_polls += 1;
        if self.idle_polls < LIVENESS_EVERY {
            return Ok(());
        }
        self.idle_polls = 0;
        let r = match self.boot.inner.try_lock() {
            Ok(mut b) => b.check_alive(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().check_alive(),
            Err(TryLockError::WouldBlock) => Ok(()),
        };
        r.map_err(LivenessError)
    }

    /// A bootstrap failure (group barrier or liveness check): written into the region (the
    /// host's other ranks fail at their next poll), logged once, mapped to its status.
    fn fail(&mut self, e: &BootstrapError) -> NrtStatus {
        let s = e.status();
        // Which rank was lost, if any, for the other ranks' log lines (first writer wins;
        // written before `failed`, whose AcqRel CAS publishes it).
        if let Some(r) = e.lost_rank() {
            let _ = self.region.word(L_LOST).compare_exchange(
                0,
                r.saturating_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        // Tell the host's other ranks (they fail at their next poll).
        let _ = self.region.word(L_FAILED).compare_exchange(
            0,
            s.code().max(1),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if !self.logged {
            self.logged = true;
            log::error!(
                "host barrier comm {} rank {}: over the bootstrap: {e}",
                self.comm,
                self.rank
            );
        }
        s
    }

    fn failed(&mut self) -> Option<NrtStatus> {
        let code = self.region.word(L_FAILED).load(Ordering::Acquire);
        if code == 0 {
            return None;
        }
        let s = NrtStatus::from_code(code).unwrap_or(NrtStatus::Failure);
        if !self.logged {
            self.logged = true;
            // After the acquire load of `failed`: the `lost` written before it is visible.
            match self.region.word(L_LOST).load(Ordering::Relaxed) {
                0 => log::error!(
                    "host barrier comm {} rank {}: another rank of this host failed over the \
                     bootstrap: {s}",
                    self.comm,
                    self.rank
                ),
                r => log::error!(
                    "host barrier comm {} rank {}: lost rank {} (seen by another rank of this \
                     host): {s}",
                    self.comm,
                    self.rank,
                    r - 1
                ),
            }
        }
        Some(s)
    }

    /// `ticket`'s generation has been released on this host.
    fn released(&self, ticket: BarrierTicket) -> bool {
        // Acquire: pairs with the leader's release store.
        reached(
            self.region.word(L_RELEASED).load(Ordering::Acquire),
            ticket.0,
        )
    }

    /// Leader: every local rank is at `g` or later.
    fn host_arrived(&self, g: u32) -> bool {
        (0..self.nlocal).all(|i| reached(self.arrived(i).load(Ordering::Acquire), g))
    }

    /// Leader: the group barrier between hosts for generation `g` (non-blocking).
    fn cross_poll(&mut self, g: u32) -> Result<bool, NrtStatus> {
        let Some(c) = self.cross.as_mut() else {
            return Ok(true);
        };
        let mut guard = match self.boot.inner.try_lock() {
            Ok(b) => b,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            // The main thread holds the bootstrap (an all-gather): not yet.
            Err(TryLockError::WouldBlock) => return Ok(false),
        };
        let r = (|| {
            let t = match c.ticket {
                Some(t) => t,
                None => {
                    let t = guard.group_barrier_start(c.group)?;
                    c.ticket = Some(t);
                    t
                }
            };
            guard.group_barrier_poll(c.group, t)
        })();
        drop(guard);
        match r {
            Ok(true) => {
                c.ticket = None;
                self.cross_passed += 1;
                log::trace!(
                    "host barrier comm {} rank {}: generation {g} passed between hosts",
                    self.comm,
                    self.rank
                );
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => Err(self.fail(&e)),
        }
    }
}

impl BarrierChannel for HostBarrier {
    /// Writes this rank's next generation into its word of the host's region.
    fn arrive(&mut self) -> Result<BarrierTicket, NrtStatus> {
        if let Some(s) = self.failed() {
            return Err(s);
        }
        self.gen = self.gen.wrapping_add(1);
        self.waiting.store(true, Ordering::Relaxed);
        // Release: everything this rank did before the barrier happens-before the leader's
        // acquire load that sees it arrived (and, through the leader's release of `released`,
        // before every rank that passes).
        self.arrived(self.index).store(self.gen, Ordering::Release);
        if self.hosts == 1 {
            // One host: the last local arrival releases the generation (module docs).
            central::arrive(
                self.region.word(L_COUNT),
                self.region.word(L_RELEASED),
                self.gen,
                self.nlocal as u32,
            );
        }
        Ok(BarrierTicket(self.gen))
    }

    /// `Ok(true)` once every rank of the comm (all hosts) has arrived at `ticket`'s generation.
    fn poll(&mut self, ticket: BarrierTicket) -> Result<bool, NrtStatus> {
        let r = self.poll_inner(ticket);
        if !matches!(r, Ok(false)) {
            self.waiting.store(false, Ordering::Relaxed);
        }
        r
    }

    /// Nothing to ring yet: a process's devices nap-poll their done semaphores (no bells are
    /// wired across processes).
    fn passed(&mut self) {}
}

impl HostBarrier {
    /// [`BarrierChannel::poll`] without the [`HostBarrier::waiting`] flag.
    fn poll_inner(&mut self, ticket: BarrierTicket) -> Result<bool, NrtStatus> {
        if self.released(ticket) {
            return Ok(true);
        }
        if let Some(s) = self.failed() {
            return Err(s);
        }
        // One host: the last arrival released it (`arrive`). Several: the leader, once every
        // local rank arrived and the hosts met.
        let passed = self.hosts > 1
            && self.leader
            && self.host_arrived(ticket.0)
            && self.cross_poll(ticket.0)?;
        if passed {
            // Release: pairs with every local rank's acquire load in `released`.
            self.region
                .word(L_RELEASED)
                .store(ticket.0, Ordering::Release);
            return Ok(true);
        }
        if let Err(LivenessError(e)) = self.liveness() {
            // A generation released meanwhile has passed, whatever the bootstrap says.
            if self.released(ticket) {
                return Ok(true);
            }
            return Err(self.fail(&e));
        }
        Ok(false)
    }
}
