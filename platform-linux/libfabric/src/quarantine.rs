//! The process's quarantine: libfabric objects that a transport's teardown could not close
//! safely, held open (and reachable) for the life of the process.
//!
//! **The rule.** A transport never closes an endpoint, completion queue, address vector, memory
//! registration, domain or fabric that a posted request can still touch. Teardown cancels every
//! request in flight and drains the completion queue for a bounded time
//! ([`crate::Options::close_drain`]); if the provider has then answered every request, everything
//! is closed (registrations, endpoint, AV, CQ, domain, fabric, each after what depends on it). If
//! it has not, the transport is *quarantined*: none of its objects is closed, its request
//! contexts are never freed, and its registrations stay registered. The same holds for whatever
//! is left when the provider refuses a close (`-FI_EBUSY`): the object and every parent of it.
//!
//! Why not close anyway: libfabric 1.17's `tcp;ofi_rxm` frees its transmit buffers in
//! `fi_close(endpoint)` while its tcp connections still hold queued work that points into them.
//! With a link down mid-transfer (16 MiB all-reduces between two network namespaces) that
//! crashed the survivor with SIGSEGV inside libfabric about one run in four; rxm cannot cancel
//! sends (only receives), so after a link failure the drain never finishes. shm keeps a peer's
//! view of the region until the endpoint's close; efa's NIC may still write a posted receive
//! buffer through its registration.
//!
//! **The lease pool.** When only sends are left (rxm cannot cancel them) on a poolable provider
//! (not shm), the requests' contexts and the registrations are held here but the objects go to
//! the process's lease pool (`pool.rs`) and a later comm reuses them: the quarantine then holds
//! no object ([`LibfabricTransport::quarantine_requests_and_pool`]).
//!
//! **The bound.** Per comm whose teardown found requests the provider never finished: its
//! request slab and registrations (at most the cache's bound plus the uncached ones in flight),
//! and, when its set was not pooled (a receive left, shm, the pool off, a refused close), its
//! fabric, domain, CQ, AV and endpoint (5 objects, with the provider's sockets and queues behind
//! them). Nothing else is held. The totals are
//! [`quarantine_stats`]; each quarantine is logged once at WARN, and the comm's state dump shows
//! the totals (`quarantined_transports=`, ...). Memory a quarantined request was posted with
//! must stay mapped on providers that write through registrations (efa): the registration pins
//! the pages, and the NIC may still write them.
//!
//! Seed: none (the seed's teardown is `neuronStopNetworkProxy` draining a block); the rule is
//! docs/design.md §5, "Teardown with requests the provider never finished".

use std::ffi::c_void;
use std::fmt;
use std::sync::Mutex;

use libfabric_sys as fi;
use proxy_core::progress::net::NetError;

use crate::mr::FiRegistrar;
use crate::LibfabricTransport;

/// What the process's quarantine holds: totals since the process started (they only grow).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuarantineStats {
    /// Teardowns that quarantined: left requests the provider never finished (or had a close
    /// refused).
    pub transports: u64,
    /// libfabric objects held unclosed outside the lease pool (endpoints, CQs, AVs, domains,
    /// fabrics); a pooled provider's stuck teardown adds none (`pool.rs`,
    /// [`crate::pool_stats`]).
    pub objects: u64,
    /// Memory registrations held unclosed.
    pub registrations: u64,
    /// Requests the provider never finished (their contexts are held).
    pub requests: u64,
}

impl fmt::Display for QuarantineStats {
    /// `quarantined_transports=1 quarantined_objects=5 quarantined_registrations=2
    /// quarantined_requests=16`, the form of the state dump.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "quarantined_transports={} quarantined_objects={} quarantined_registrations={} \
             quarantined_requests={}",
            self.transports, self.objects, self.registrations, self.requests
        )
    }
}

/// One quarantined transport's objects.
pub(crate) struct Held {
    /// The libfabric objects, children before parents (never closed).
    pub objects: Vec<*mut fi::fid>,
    /// The registrations (`fid_mr`, never closed).
    pub registrations: Vec<*mut c_void>,
    /// Every request context of the transport's slab (never freed; held, never read).
    #[expect(dead_code, reason = "held only to keep the contexts reachable")]
    pub contexts: Vec<*mut c_void>,
    /// Requests the provider had not finished.
    pub requests: u64,
}

// SAFETY: the pointers are never dereferenced, closed or freed through a `Held`: the quarantine
// only keeps them reachable (so leak checkers report them as held, not lost) until the process
// ends, so moving them between threads cannot race with anything.
unsafe impl Send for Held {}

/// The quarantine: every transport ever quarantined, and the totals.
struct Quarantine {
    held: Vec<Held>,
    stats: QuarantineStats,
}

static QUARANTINE: Mutex<Quarantine> = Mutex::new(Quarantine {
    held: Vec::new(),
    stats: QuarantineStats {
        transports: 0,
        objects: 0,
        registrations: 0,
        requests: 0,
    },
});

fn lock() -> std::sync::MutexGuard<'static, Quarantine> {
    // A panic while holding the lock leaves plain counters and a vector: still consistent.
    QUARANTINE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes `held` into the quarantine for the life of the process; returns the new totals.
/// An empty `held` (nothing left open) changes nothing.
pub(crate) fn admit(held: Held) -> QuarantineStats {
    let mut q = lock();
    if held.objects.is_empty() && held.registrations.is_empty() && held.requests == 0 {
        return q.stats;
    }
    q.stats.transports += 1;
    q.stats.objects += held.objects.len() as u64;
    q.stats.registrations += held.registrations.len() as u64;
    q.stats.requests += held.requests;
    q.held.push(held);
    q.stats
}

/// The process's quarantine totals (all zero while no teardown has had to quarantine).
///
/// Seed: none; docs/design.md §5, "Teardown with requests the provider never finished".
pub fn quarantine_stats() -> QuarantineStats {
    lock().stats
}

impl LibfabricTransport {
    /// Hands every object, registration and request context still open to the quarantine,
    /// closing none, because `why` (the provider may still touch them). Returns the failure
    /// that the close reports (logged once, by the caller).
    pub(crate) fn quarantine(&mut self, why: String) -> NetError {
        let (held, (sends, recvs, peers)) = self.hold_in_flight(true);
        let requests = held.requests;
        let (objects, regs) = (held.objects.len(), held.registrations.len());
        self.unlink_shm_region();
        let totals = admit(held);
        NetError::failure(
            None,
            format!(
                "{}: {why}: quarantined for the life of the process, never closed under the \
                 provider: {objects} objects, {regs} registrations, {requests} requests \
                 ({sends} sends, {recvs} receives; peers {peers:?}) (process totals: {totals})",
                self.name
            ),
        )
    }
}

impl LibfabricTransport {
    /// The pooled form of [`LibfabricTransport::quarantine`] (`pool.rs`): the requests the
    /// provider never finished keep their contexts and the registrations (held here for the
    /// life of the process, as a quarantine's), and the objects, closed never, go back to the
    /// lease pool marked tainted for the next comm of the same provider and domain. Returns the
    /// failure that the close reports (logged once, by the caller).
    pub(crate) fn quarantine_requests_and_pool(&mut self, why: String) -> NetError {
        let (held, (sends, recvs, peers)) = self.hold_in_flight(false);
        let requests = held.requests;
        let regs = held.registrations.len();
        let totals = admit(held);
        let pool = self.return_to_pool();
        NetError::failure(
            None,
            format!(
                "{}: {why}: their contexts and {regs} registrations held for the life of the \
                 process, never closed under the provider; {requests} requests ({sends} sends, \
                 {recvs} receives; peers {peers:?}); the endpoint, CQ, AV, domain and fabric go \
                 back to the lease pool, never closed, for the next comm (process totals: \
                 {totals} {pool})",
                self.name
            ),
        )
    }

    /// What a teardown with requests in flight holds for the life of the process: every
    /// registration, the requests' contexts and, with `objects`, every open object (children
    /// before parents); with the in-flight summary for the log line (sends, receives, peers).
    fn hold_in_flight(&mut self, objects: bool) -> (Held, (usize, usize, Vec<u32>)) {
        let registrations = {
            let mut reg = FiRegistrar {
                domain: self.obj.domain,
                ep: self.obj.ep,
                cfg: self.mr_cfg,
                provider: &self.attrs.provider,
            };
            self.mrs.quarantine_all(&mut reg)
        };
        let requests = self.reqs.in_flight() as u64;
        let summary = self.reqs.in_flight_summary();
        let held = Held {
            objects: if objects {
                self.obj.take_open()
            } else {
                Vec::new()
            },
            registrations: registrations.iter().map(|r| r.mr).collect(),
            contexts: self.reqs.quarantine_contexts(),
            requests,
        };
        (held, summary)
    }

    /// Hands this transport's objects (all open) to the lease pool as a tainted set; the
    /// transport holds none afterwards. Returns the pool's totals.
    pub(crate) fn return_to_pool(&mut self) -> crate::PoolStats {
        let key = self
            .pool_key
            .clone()
            .expect("only a poolable set is returned to the pool");
        let first = !self.tainted;
        self.tainted = true;
        let lease = crate::pool::Lease {
            key,
            obj: std::mem::replace(&mut self.obj, crate::objects::Objects::none()),
            ep_name: self.local_name.clone(),
            addrs: std::mem::take(&mut self.av_names),
            tainted: true,
            leases: self.leases,
        };
        crate::pool::give_back(lease, first)
    }

    /// shm only: removes the name of this endpoint's region from `/dev/shm` (the mapping stays,
    /// for the provider and the peers that mapped it). A quarantined endpoint is never closed,
    /// so shm would never unlink it, and the file would outlive the process; a later process
    /// that gets the same pid would then find its region name taken.
    fn unlink_shm_region(&self) {
        if self.attrs.provider != "shm" {
            return;
        }
        // The endpoint's name is `fi_shm://<region>` or, as the transport names it
        // (`shm_cma::endpoint_name`), `<region>` (NUL-terminated); the region file is `<region>`
        // under /dev/shm (libfabric's `smr_no_prefix`, `shm_open`).
        let name = self.local_name.split(|&b| b == 0).next().unwrap_or(&[]);
        let Some(region) = std::str::from_utf8(name)
            .ok()
            .map(|n| n.split_once("://").map_or(n, |(_, r)| r))
            .filter(|r| !r.is_empty() && !r.contains('/'))
        else {
            return;
        };
        let Ok(c) = std::ffi::CString::new(std::format!("/{region}")) else {
            return;
        };
        // SAFETY: `c` is a NUL-terminated name; shm_unlink only removes the name.
        let ret = unsafe { libc::shm_unlink(c.as_ptr()) };
        if ret != 0 {
            log::debug!(
                "quarantine: shm_unlink(/{region}): {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

#[cfg(test)]
mod tests;
