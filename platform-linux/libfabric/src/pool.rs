//! The process's endpoint lease pool: opened sets of libfabric objects (fabric, domain,
//! endpoint, CQ, AV) that a teardown could not close because requests the provider never
//! finished may still touch them, handed to the next transport that asks for the same
//! provider, domain and queue sizes instead of being held idle forever.
//!
//! **What goes in.** A transport whose close finds sends the provider never finished (rxm
//! cannot cancel sends; a peer killed or a link down never answers) keeps the stuck requests'
//! contexts and registrations in the quarantine (`quarantine.rs`), closes nothing, and *returns
//! its objects here* marked tainted ([`crate::Options::pool_endpoints`], on by default; not
//! shm). A later lease progresses the set again, so the provider may yet *read* a stuck send's
//! buffer (a link that comes back: rxm's deferred segments, a peer's rendezvous read); the
//! memory a stuck send was posted with should stay mapped, or the read faults (rxm copies a
//! deferred segment with `memcpy`; a tcp read response fails its `sendmsg` with `EFAULT`). A
//! stuck *receive* (one rxm had matched) could be *written* into memory its comm has freed: a
//! teardown that leaves one quarantines its set instead, never to be progressed again (and a
//! tainted set so quarantined leaves the pool). A tainted set is never closed again (the stuck
//! requests stay posted on it), even after a later lease of it closes cleanly: it always comes
//! back here. A set that never had a stuck request is closed at teardown as before: the pool
//! holds only what could not be closed, so a process that never loses a peer keeps no extra
//! descriptor. shm is never pooled: libfabric 1.17's shm finishes a send above its inject size
//! when the receiver answers in the sender's own response queue, which the sender reads in
//! order, so a send stuck on a dead peer would block every later such send of the set
//! (docs/design.md §5, "Why shm is not pooled").
//!
//! **What comes out.** [`LibfabricTransport::open_with`](crate::LibfabricTransport::open_with)
//! takes an idle set of the same [`PoolKey`] before opening a new one: a set is leased by one
//! transport at a time, so ranks in one process still get distinct endpoints, and the pool holds
//! at most as many sets as comms were alive at once when teardowns left requests.
//!
//! **Keeping leases apart.** Each lease gets a fresh 16-bit *generation*, appended to the
//! endpoint's name for the all-gather; a transport puts the destination's generation into the
//! tag's top 16 bits of every send and its own into every receive (`LibfabricTransport::
//! wire_tag`), so a late or unexpected message of an earlier lease never matches a later
//! lease's receive. A completion whose context belongs to an earlier lease's stuck request is
//! recognised by its owner (`requests.rs`) and dropped. The AV keeps every address inserted on
//! the set (looked up by name before inserting: each peer address is inserted once); nothing is
//! ever removed from it (`fi_av_remove` under a stuck rxm request is what the rule forbids).
//!
//! Seed: none (aws-ofi-nccl and Open MPI's mtl/ofi share one endpoint per process with the
//! communicator in the tag); docs/design.md §5, "Teardown with requests the provider never
//! finished".

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use libfabric_sys as fi;

use crate::objects::Objects;

/// What makes two opened sets interchangeable: the provider and domain chosen and everything the
/// transport asked of them (capabilities, registration mode, queue sizes, tag width).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PoolKey {
    pub provider: String,
    pub domain: String,
    pub caps: u64,
    pub mr_mode: i32,
    pub tx_size: usize,
    pub rx_size: usize,
    pub tag_bits: u32,
    /// [`Options::cq_wait_fd`](crate::Options::cq_wait_fd): sets with and without a CQ wait
    /// descriptor are not interchangeable.
    pub cq_wait_fd: bool,
}

/// One opened set and what the transport keeps about it across leases.
pub(crate) struct Lease {
    /// The set's key.
    pub key: PoolKey,
    /// The objects (all open).
    pub obj: Objects,
    /// `fi_getname` of the endpoint.
    pub ep_name: Vec<u8>,
    /// Every address inserted into the AV on this set, by name.
    pub addrs: HashMap<Vec<u8>, fi::fi_addr_t>,
    /// A teardown left requests on the set: it is never closed, always pooled.
    pub tainted: bool,
    /// Times the set was leased (1 for a fresh set).
    pub leases: u64,
}

// SAFETY: the objects are opened with FI_THREAD_DOMAIN; an idle set in the pool is touched by
// no one, and a set leaves the pool (under its lock) for exactly one transport, which then uses
// it from one thread at a time as it does a freshly opened set.
unsafe impl Send for Lease {}

/// The pool's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Tainted sets the pool holds in all (idle or leased): they stay open for the life of the
    /// process, 5 libfabric objects each.
    pub sets: u64,
    /// Of them, idle in the pool now.
    pub idle: u64,
    /// Leases of a pooled set instead of opening a new one, since the process started.
    pub reuses: u64,
}

impl fmt::Display for PoolStats {
    /// `pool_sets=1 pool_idle=1 pool_reuses=49`, the form of the state dump.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pool_sets={} pool_idle={} pool_reuses={}",
            self.sets, self.idle, self.reuses
        )
    }
}

struct Pool {
    idle: Vec<Lease>,
    stats: PoolStats,
    next_generation: u16,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    idle: Vec::new(),
    stats: PoolStats {
        sets: 0,
        idle: 0,
        reuses: 0,
    },
    next_generation: 0,
});

fn lock() -> std::sync::MutexGuard<'static, Pool> {
    // A panic while holding the lock leaves counters and a vector: still consistent.
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fresh lease generation (process-wide, wraps after 2^16 leases). The first is taken from
/// the pid and the clock, so that a process reusing a dead process's port does not start where
/// it did.
pub(crate) fn next_generation() -> u16 {
    let mut p = lock();
    if p.stats.sets == 0 && p.stats.reuses == 0 && p.next_generation == 0 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        p.next_generation = (std::process::id() ^ t ^ (t >> 16)) as u16 | 1;
    }
    let g = p.next_generation;
    p.next_generation = g.wrapping_add(1);
    g
}

/// Takes an idle set of `key` out of the pool, if there is one.
pub(crate) fn take(key: &PoolKey) -> Option<Lease> {
    let mut p = lock();
    let i = p.idle.iter().position(|l| &l.key == key)?;
    let mut lease = p.idle.swap_remove(i);
    lease.leases += 1;
    p.stats.idle -= 1;
    p.stats.reuses += 1;
    Some(lease)
}

/// Puts a tainted set (back) into the pool; `first` when it just became tainted.
pub(crate) fn give_back(lease: Lease, first: bool) -> PoolStats {
    debug_assert!(lease.tainted);
    let mut p = lock();
    if first {
        p.stats.sets += 1;
    }
    p.stats.idle += 1;
    p.idle.push(lease);
    p.stats
}

/// A tainted set leased out of the pool is quarantined instead of coming back (its new lease
/// left a receive the provider never finished).
pub(crate) fn leave() {
    let mut p = lock();
    p.stats.sets = p.stats.sets.saturating_sub(1);
}

/// The pool's counters.
///
/// Seed: none; docs/design.md §5, "Teardown with requests the provider never finished".
pub fn pool_stats() -> PoolStats {
    lock().stats
}

#[cfg(test)]
mod tests;
