//! `proxy-libfabric`: the libfabric transport of the proxy engine, and [`net_setup`], the glue
//! that opens a libfabric comm from a `proxy-bootstrap` [`Bootstrap`](proxy_bootstrap::Bootstrap).
//!
//! Dependencies: `proxy-core`, `proxy-bootstrap`, `libfabric-sys` (the system libfabric, so this
//! crate is not a default workspace member), `log`, `libc`.
//!
//! The transport: [`proxy_core::progress::net::Transport`] over an `FI_EP_RDM` endpoint with
//! tagged messages (EFA on AWS; shm and `tcp;ofi_rxm` on this machine).
//!
//! Life cycle (the address exchange is explicit, so that a bootstrap can all-gather the names):
//!
//! ```text
//!   open(provider, rank, nranks) --> local_name() --(all-gather)--> connect(&names) --> posts
//!        fi_getinfo, fabric, domain,       fi_getname                   fi_av_insert
//!        CQ, AV, endpoint, enable
//! ```
//!
//! * **Provider** (see `info.rs`): the explicit argument, else `FI_PROVIDER`, else efa if
//!   offered, else shm when every rank is on this host ([`Options::all_ranks_local`]), else
//!   `tcp;ofi_rxm`. One entry is picked deliberately (exact name, then without
//!   `FI_COLLECTIVE`); every capability is read from it, nothing is assumed per provider
//!   except shm's `-FI_ENOMEM` back-pressure.
//! * **Tags** are the caller's 64-bit tags (`proxy_core::progress::net::make_tag`); receives match the
//!   exact tag (`ignore = 0`) from `FI_ADDR_UNSPEC`: the source rank is inside the tag, since
//!   `tcp;ofi_rxm` lacks `FI_DIRECTED_RECV`. `FI_ORDER_SAS` keeps equal tags in post order.
//! * **Progress** is manual: the hints ask for `FI_PROGRESS_MANUAL` data and control progress,
//!   the granted models are read back into [`ProviderAttrs`] and logged at open (a provider
//!   that grants automatic data progress is logged at WARN); [`Transport::poll`] reads the CQ
//!   (the progress half calls it once per round) while a request is in flight, and only every
//!   [`IDLE_READ_EVERY`]-th call when none is (the rounds in which the comm waits for its
//!   device's handshakes and entries: on tcp each read is a `poll(2)` of the sockets);
//!   [`Transport::test`] reports what the last
//!   read found and reads nothing itself. A post answered `-FI_EAGAIN` (or shm's `-FI_ENOMEM`) reads
//!   the CQ once and returns `Ok(None)`: back-pressure, the caller retries. Send posts to a peer
//!   that keeps answering `-FI_EAGAIN` for 50 ms are spaced (up to 10 ms apart) by the transport
//!   itself (`backoff.rs`: on `tcp;ofi_rxm` each post to a vanished peer starts a refused
//!   connection).
//! * **Errors**: an error completion is read with `fi_cq_readerr` into a zeroed entry (retried
//!   on `-FI_EAGAIN`), `abs(err)` is taken (shm writes it negative), and the request fails with
//!   the provider's `fi_cq_strerror` text. Truncation (a receive smaller than the message) is
//!   such a failure, never a short receive; on tcp it also kills the connection.
//! * **Inject**: a send of at most the entry's `tx_attr.inject_size` bytes (lowered by
//!   [`Options::max_inject_size`]) goes out with `fi_tinject`: the provider has copied the
//!   payload when the call returns and generates no completion, so the post reports
//!   `payload_copied` and the request is already done (its first `test` answers `Done`); no
//!   registration is made for it. `-FI_EAGAIN` is back-pressure as for any post. Larger sends
//!   use `fi_tsend` and complete through the CQ.
//! * **Memory registration** whenever the entry's `mr_mode` asks for it (`FI_MR_LOCAL`,
//!   `FI_MR_VIRT_ADDR`, `FI_MR_ALLOCATED`, `FI_MR_PROV_KEY`; efa asks for all), lazily from the
//!   posted buffers through a bounded LRU cache keyed by address range ([`MrCacheLimits`],
//!   `mr.rs`) that never closes a region a posted request uses. Memory that was posted must be
//!   invalidated ([`Transport::invalidate`]) before it is freed or unmapped.
//! * **Requests** live in a slab whose contexts start with `struct fi_context2` (`FI_CONTEXT` /
//!   `FI_CONTEXT2` mode; `requests.rs`).
//! * **Close** cancels every request in flight and drains the CQ (bounded) before `fi_close`
//!   (tcp answers `-FI_EBUSY` otherwise). Requests the provider has not finished by then (rxm
//!   cannot cancel sends; a link that went down never answers) are **quarantined**: nothing a
//!   posted request can touch is closed, ever (`quarantine.rs`, [`quarantine_stats`]). When only
//!   sends are left (not shm), the endpoint's objects go to the process's **lease pool** and a
//!   later comm reuses them, a lease generation in the tag's top 16 bits keeping the earlier
//!   comm's messages and completions apart (`pool.rs`, [`pool_stats`]).
//!
//! Seed: `ncclNet->{isend,irecv,test}` over aws-ofi-nccl's libfabric plugin, §1 and §4;
//! docs/design.md §5 (tags, `FI_ORDER_SAS`) and §8 (poll once per tick per comm).

mod backoff;
mod cq;
mod exits;
mod idle;
mod info;
mod mr;
pub mod net_setup;
mod objects;
mod pool;
mod quarantine;
mod requests;
pub mod shm_cma;
#[cfg(test)]
mod tests;

use std::ffi::CStr;
use std::ptr;
use std::time::{Duration, Instant};

use libfabric_sys as fi;
use proxy_bootstrap::PeerWatch;
use proxy_core::progress::net::{MrHandle, NetError, Posted, RequestId, TestOutcome, Transport};

use self::backoff::{PostEvent, PostPressure};
pub use self::idle::{CqIdleWait, CQ_IDLE_MAX_NAP, CQ_READY_RUN_MAX};
use self::info::{HintSizes, InfoList, Request};
use self::mr::{FiRegistrar, MrCache, MrConfig, RegionId};
pub use self::mr::{
    Invalidated, MrCacheLimits, MrCacheStats, DEFAULT_MR_CACHE_BYTES, DEFAULT_MR_CACHE_ENTRIES,
    MR_CACHE_BYTES_VAR, MR_CACHE_ENTRIES_VAR,
};
use self::objects::Objects;
use self::pool::PoolKey;
pub use self::pool::{pool_stats, PoolStats};
pub use self::quarantine::{quarantine_stats, QuarantineStats};
use self::requests::{Kind, Requests, State};

/// With no request in flight, [`Transport::poll`] reads the CQ at every this-many-th call in a
/// row (16). The comm polls every round while a stream has a block, also while its ops wait for
/// the device's handshakes and entries (most rounds of a small collective), and on tcp each
/// read is a `poll(2)` of the sockets (4 tcp processes, 8 B all-reduce: 25.6–26.4 → 22.2–24.7
/// µs, BENCHMARKS.md). A message that arrives meanwhile waits in the provider until its receive
/// is posted, which reads at every poll again; what the provider does for a peer without a
/// request of ours (tcp accepting a connection, a full socket taking the rest of an inject
/// send) waits at most this many polls.
pub const IDLE_READ_EVERY: u32 = 16;

/// Completions read per `fi_cq_read` call.
const CQ_BATCH: usize = 16;
/// Upper bound of `fi_cq_read` calls per progress call (bounds the time one tick spends).
const CQ_MAX_BATCHES: usize = 64;
/// `fi_cq_readerr` answers `-FI_EAGAIN` at most this often in a row before the error entry is
/// left for the next progress call.
const READERR_RETRIES: usize = 1000;
/// The lease generation's place in the wire tag (`pool.rs`): bits 63..48.
const GENERATION_SHIFT: u32 = 48;
/// The caller's tag bits kept on the wire (47..0: source rank, stream, op tag, index).
const GENERATION_KEEP: u64 = (1 << GENERATION_SHIFT) - 1;
/// Bytes of the generation appended to the endpoint's name (little-endian).
const GENERATION_BYTES: usize = 2;
/// Bytes of the process id appended after the generation (little-endian; `exits.rs`).
const PID_BYTES: usize = 4;
/// Bytes this crate appends to the provider's address in an endpoint's name.
const NAME_TRAILER_BYTES: usize = GENERATION_BYTES + PID_BYTES;
/// Default bound of the drain that [`Transport::close`] runs.
pub const DEFAULT_CLOSE_DRAIN: Duration = Duration::from_secs(1);

/// How to open a [`LibfabricTransport`]; `Default` is "choose the provider automatically, no
/// overrides".
#[derive(Clone, Debug)]
pub struct Options {
    /// The provider (`"efa"`, `"shm"`, `"tcp;ofi_rxm"`, or a core name such as `"tcp"`); `None`
    /// reads `FI_PROVIDER`, then chooses automatically.
    pub provider: Option<String>,
    /// Every rank of the comm runs on this host: the automatic choice may take shm.
    pub all_ranks_local: bool,
    /// The ranks are known to run on more than one host (the bootstrap saw several): an entry
    /// on a loopback address (`lo`, what libfabric's tcp offers while the other interfaces are
    /// down) is never chosen, since the other hosts could not reach it; open fails saying so.
    pub spans_hosts: bool,
    /// Lower the message-size limit below the provider's `max_msg_size`.
    pub max_msg_size: Option<u64>,
    /// Force memory registration on (`Some(true)`) or off (`Some(false)`); `None` registers
    /// exactly when the provider's `mr_mode` asks for it. Off with a provider that requires it
    /// is rejected at open.
    pub register_memory: Option<bool>,
    /// Ask for this transmit queue size (`tx_attr.size`) instead of the provider's default.
    pub tx_size: Option<usize>,
    /// Ask for this receive queue size (`rx_attr.size`) instead of the provider's default.
    pub rx_size: Option<usize>,
    /// How long [`Transport::close`] polls for cancelled requests; requests the provider has
    /// not finished by then quarantine the transport's objects instead of closing them
    /// ([`quarantine_stats`]).
    pub close_drain: Duration,
    /// Lower the inject threshold (bytes) below the provider's `tx_attr.inject_size`;
    /// `Some(0)` sends everything with `fi_tsend`.
    pub max_inject_size: Option<usize>,
    /// Bounds of the registration cache; `None` reads [`MrCacheLimits::from_env`]
    /// (`NEURON_RT_MR_CACHE_ENTRIES`, `NEURON_RT_MR_CACHE_BYTES`, else the defaults).
    pub mr_cache: Option<MrCacheLimits>,
    /// A teardown that leaves only sends the provider never finished returns the endpoint's
    /// objects to the process's lease pool for a later comm instead of holding them idle for
    /// the life of the process (`pool.rs`, [`pool_stats`]; not shm). `false`: such a teardown
    /// quarantines the whole set, which is then never progressed again.
    pub pool_endpoints: bool,
    /// Open the completion queue with a file-descriptor wait object (`FI_WAIT_FD`) where the
    /// provider offers one (tcp; not shm), so that the thread that drives the comm can block
    /// on it when it has nothing to do ([`LibfabricTransport::idle_wait`], `idle.rs`).
    pub cq_wait_fd: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            provider: None,
            all_ranks_local: false,
            spans_hosts: false,
            max_msg_size: None,
            register_memory: None,
            tx_size: None,
            rx_size: None,
            close_drain: DEFAULT_CLOSE_DRAIN,
            max_inject_size: None,
            mr_cache: None,
            pool_endpoints: true,
            cq_wait_fd: false,
        }
    }
}

/// What the transport read from the chosen `fi_info` entry.
#[derive(Clone, Debug)]
pub struct ProviderAttrs {
    /// Provider name (`"tcp;ofi_rxm"`).
    pub provider: String,
    /// Domain name (`"lo"`, `"shm"`, the EFA device).
    pub domain: String,
    /// The entry's capabilities (`FI_*` bits).
    pub caps: u64,
    /// The entry's `mr_mode` (`FI_MR_*` bits).
    pub mr_mode: i32,
    /// `ep_attr.max_msg_size`.
    pub max_msg_size: u64,
    /// `tx_attr.size` / `rx_attr.size`.
    pub tx_size: usize,
    /// `rx_attr.size`.
    pub rx_size: usize,
    /// `tx_attr.inject_size`.
    pub inject_size: usize,
    /// Usable tag bits, from `ep_attr.mem_tag_format` (64 when the provider gives none).
    pub tag_bits: u32,
    /// The endpoint address format (`FI_ADDR_STR`, `FI_SOCKADDR_IN`, ...).
    pub addr_format: u32,
    /// `domain_attr.data_progress` granted (`FI_PROGRESS_MANUAL` asked for).
    pub data_progress: u32,
    /// `domain_attr.control_progress` granted (`FI_PROGRESS_MANUAL` asked for).
    pub control_progress: u32,
    /// `domain_attr.threading` granted (`FI_THREAD_DOMAIN` asked for).
    pub threading: u32,
    /// shm only: how sends over the inject size move, from the CMA detection at the process's
    /// first open (`shm_cma.rs`): `cma (...)`, `mmap (CMA unavailable: ...)` or `sar (...)`.
    pub shm_large_messages: Option<String>,
}

/// The name of a `fi_progress` value.
pub fn progress_name(p: u32) -> &'static str {
    match p {
        fi::FI_PROGRESS_MANUAL => "manual",
        fi::FI_PROGRESS_AUTO => "auto",
        fi::FI_PROGRESS_UNSPEC => "unspec",
        _ => "unknown",
    }
}

/// A libfabric endpoint of one rank, implementing [`Transport`].
///
/// Used by one thread at a time (`&mut self`); `Send`, not `Sync` (the domain is opened with
/// `FI_THREAD_DOMAIN`).
///
/// # Examples
/// ```no_run
/// use proxy_libfabric::LibfabricTransport;
/// # fn main() -> Result<(), proxy_core::progress::net::NetError> {
/// let mut a = LibfabricTransport::open(Some("tcp;ofi_rxm"), 0, 2)?;
/// let mut b = LibfabricTransport::open(Some("tcp;ofi_rxm"), 1, 2)?;
/// let names = vec![a.local_name(), b.local_name()]; // a bootstrap all-gathers these
/// a.connect(&names)?;
/// b.connect(&names)?;
/// # Ok(()) }
/// ```
pub struct LibfabricTransport {
    /// `"libfabric/<provider>"`.
    name: String,
    /// This endpoint's rank.
    rank: u32,
    /// Ranks of the comm.
    nranks: u32,
    /// The entry's attributes.
    attrs: ProviderAttrs,
    /// Largest message accepted (provider limit, possibly lowered by [`Options`]).
    max_msg: u64,
    /// Sends of at most this many bytes use `fi_tinject` (0: none).
    inject_max: usize,
    /// Sends that went out with `fi_tinject`.
    injected: u64,
    /// Progress calls that read the CQ ([`LibfabricTransport::cq_reads`]).
    cq_reads: u64,
    /// [`Transport::poll`] calls in a row with nothing in flight ([`IDLE_READ_EVERY`]).
    idle_polls: u32,
    /// Tags must fit in these bits.
    tag_mask: u64,
    /// Register memory for posts.
    register: bool,
    /// How registrations are made.
    mr_cfg: MrConfig,
    /// Treat `-FI_ENOMEM` on post as back-pressure (shm).
    enomem_is_backpressure: bool,
    /// Bound of the close drain.
    close_drain: Duration,
    /// The libfabric objects (null after close).
    obj: Objects,
    /// `fi_getname` of the endpoint (without the generation that
    /// [`LibfabricTransport::local_name`] appends).
    local_name: Vec<u8>,
    /// `fi_addr_t` of every rank, after [`LibfabricTransport::connect`].
    peers: Vec<fi::fi_addr_t>,
    /// This lease's generation (`pool.rs`): the top 16 bits of the tag of every receive.
    generation: u16,
    /// Every rank's lease generation, from its name (the top 16 bits of the tag of every send
    /// to it), after [`LibfabricTransport::connect`].
    peer_generations: Vec<u16>,
    /// Over shm, after [`LibfabricTransport::connect`]: every other rank's process, checked
    /// before each send to it, and the calls that may spin on a peer's lock, seen by the
    /// process's watchdog (`exits.rs`). `None` for other providers.
    stuck: Option<std::sync::Arc<exits::Stuck>>,
    /// Generations go into the tag (the provider offers 64 tag bits).
    generation_tags: bool,
    /// The set may go to the lease pool instead of the quarantine (`pool.rs`; not shm, whose
    /// stuck send would block every later send of the set, and only with
    /// [`Self::generation_tags`]).
    pool_key: Option<PoolKey>,
    /// Every address inserted into the AV of this set (earlier leases' included), by name.
    av_names: std::collections::HashMap<Vec<u8>, fi::fi_addr_t>,
    /// An earlier teardown left requests on this set: it is never closed (`pool.rs`).
    tainted: bool,
    /// Times this set has been leased (1: opened for this transport).
    leases: u64,
    /// Completions of an earlier lease's requests read from this set's CQ and dropped.
    stale_completions: u64,
    /// [`Options::pool_endpoints`].
    pool_endpoints: bool,
    /// Request slab.
    reqs: Requests,
    /// Per peer: whether its send posts keep answering `-FI_EAGAIN` (`backoff.rs`).
    pressure: Vec<PostPressure>,
    /// Send posts answered "not now" without asking the provider (spacing, `backoff.rs`).
    spaced: u64,
    /// Registration cache.
    mrs: MrCache,
    /// [`Transport::close`] has run.
    closed: bool,
    /// The dead-peer check of the comm's bootstrap, run after each poll
    /// ([`LibfabricTransport::set_peer_watch`]).
    watch: Option<PeerWatch>,
    /// The watch's failure, as reported (sticky; the drain's polls get a clone).
    watch_failed: Option<NetError>,
    /// [`Options::cq_wait_fd`]: asked for a CQ with a wait descriptor.
    cq_wait_fd: bool,
    /// The idle wait handed out ([`LibfabricTransport::idle_wait`]), detached at close.
    idle: Option<std::sync::Arc<CqIdleWait>>,
}

// SAFETY: the libfabric objects are opened with FI_THREAD_DOMAIN: any thread may use them as
// long as calls are serialized, which `&mut self` guarantees (the type is not Sync); no object
// is tied to the opening thread. The raw pointers inside (objects, registrations, request
// contexts) are owned by the transport and only touched through such calls.
unsafe impl Send for LibfabricTransport {}

/// `fi_strerror` of a libfabric return value (either sign).
fn fi_error_text(ret: isize) -> String {
    let code = i32::try_from(ret.unsigned_abs()).unwrap_or(i32::MAX);
    // SAFETY: fi_strerror takes any positive number and returns a static string (or null).
    let p = unsafe { fi::fi_strerror(code) };
    if p.is_null() {
        format!("error {code}")
    } else {
        // SAFETY: non-null result of fi_strerror is a static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The [`FiRegistrar`] of a transport, from its fields (so that `self.mrs` stays borrowable).
macro_rules! fi_registrar {
    ($t:expr) => {
        FiRegistrar {
            domain: $t.obj.domain,
            ep: $t.obj.ep,
            cfg: $t.mr_cfg,
            provider: &$t.attrs.provider,
        }
    };
}

/// `-FI_x` as the `ssize_t` that data-path calls return.
const fn neg(errno: u32) -> isize {
    -(errno as isize)
}

impl LibfabricTransport {
    /// Watches the comm's bootstrap connections for a lost peer (docs/design.md §9,
    /// "Liveness"): after each [`Transport::poll`] the transport runs [`PeerWatch::check`]
    /// (rate-limited, never blocking), and a lost peer fails the poll, so the comm fails with
    /// `NRT_NETWORK_PROXY_FAILURE` naming the rank. The watch keeps the bootstrap open as long
    /// as the transport lives. Over shm, the process's watchdog (`exits.rs`) reports on it the
    /// peer whose dead lock ends this process, before it does.
    pub fn set_peer_watch(&mut self, watch: PeerWatch) {
        self.watch = Some(watch);
        self.give_watchdog_last_words();
    }

    /// Over shm, once both the watch and the watchdog's view exist: the watchdog's last words
    /// report the dead peer on the bootstrap ([`proxy_bootstrap::SharedBootstrap::report_lost`]).
    fn give_watchdog_last_words(&self) {
        let (Some(watch), Some(stuck)) = (&self.watch, &self.stuck) else {
            return;
        };
        let reporter = watch.bootstrap().clone();
        stuck.set_last_words(exits::LastWords(Box::new(move |peer, message| {
            if !reporter.report_lost(peer, message, exits::LAST_WORDS_LIMIT) {
                log::error!("rank {peer} lost: the bootstrap stayed busy, the peers not told");
            }
        })));
    }

    /// The dead-peer check of [`LibfabricTransport::set_peer_watch`], as a transport failure.
    fn check_peers(&mut self) -> Result<(), NetError> {
        if let Some(e) = &self.watch_failed {
            return Err(e.clone());
        }
        let Some(w) = self.watch.as_mut() else {
            return Ok(());
        };
        w.check_transport(&self.name)
            .inspect_err(|e| self.watch_failed = Some(e.clone()))
    }

    /// The provider name (`"tcp;ofi_rxm"`).
    pub fn provider(&self) -> &str {
        &self.attrs.provider
    }

    /// The chosen entry's attributes.
    pub fn attrs(&self) -> &ProviderAttrs {
        &self.attrs
    }

    /// This endpoint's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Ranks of the comm.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// Whether posts register their buffers.
    pub fn registers_memory(&self) -> bool {
        self.register
    }

    /// Number of memory registrations held by the cache.
    pub fn registrations(&self) -> usize {
        self.mrs.len()
    }

    /// Sends of at most this many bytes go out with `fi_tinject` (the provider's
    /// `tx_attr.inject_size`, possibly lowered by [`Options::max_inject_size`]; 0: none).
    pub fn inject_size(&self) -> usize {
        self.inject_max
    }

    /// Number of sends that went out with `fi_tinject` (payload copied, done at once).
    pub fn injected_sends(&self) -> u64 {
        self.injected
    }

    /// Number of progress calls that read the CQ (`fi_cq_read`, one or more batches each):
    /// [`Transport::poll`] reads it at every call while a request is in flight and at every
    /// [`IDLE_READ_EVERY`]-th call in a row without one; a post that met back-pressure, close
    /// and drain always read it.
    pub fn cq_reads(&self) -> u64 {
        self.cq_reads
    }

    /// This lease's generation (`pool.rs`): carried in the top 16 bits of the tags on the wire
    /// when the provider offers 64 tag bits.
    pub fn generation(&self) -> u16 {
        self.generation
    }

    /// Times the endpoint's set of objects has been leased: 1 for a set opened for this
    /// transport, more for one taken from the lease pool ([`pool_stats`]).
    pub fn leases(&self) -> u64 {
        self.leases
    }

    /// Completions of an earlier lease's stuck requests that this transport read from the
    /// set's CQ and dropped.
    pub fn stale_completions(&self) -> u64 {
        self.stale_completions
    }

    /// The tag on the wire of caller tag `tag` for a lease of generation `generation`: bits
    /// 63..48 (bit 63 unused and the caller's 15-bit comm id, which a lease, used by one comm,
    /// does not need) replaced by the generation. Unchanged without [`Self::generation_tags`].
    pub(crate) fn wire_tag(&self, tag: u64, generation: u16) -> u64 {
        if self.generation_tags {
            (tag & GENERATION_KEEP) | (u64::from(generation) << GENERATION_SHIFT)
        } else {
            tag
        }
    }

    /// Send posts answered "not now" by the transport itself: posts to a peer that kept
    /// answering `-FI_EAGAIN` for longer than 50 ms are spaced (`backoff.rs`; on `tcp;ofi_rxm`
    /// each such post to a vanished peer starts a refused connection).
    pub fn spaced_posts(&self) -> u64 {
        self.spaced
    }

    /// Number of requests the provider still owns (posted, not yet completed).
    pub fn in_flight(&self) -> usize {
        self.reqs.in_flight()
    }

    /// Takes the cached registrations overlapping `addr..addr+len` out of the cache: call it
    /// before freeing or unmapping memory that was posted (the cache does not watch the address
    /// space), so that a later buffer at the same address gets a fresh registration. Unused
    /// regions are closed now; a region posted requests still use is detached: closed when its
    /// last request completes, never handed out again. Says how many of each.
    ///
    /// # Errors
    /// [`NetError::invalid`] for `len == 0` or a range that wraps (nothing changes).
    pub fn invalidate_range(&mut self, addr: u64, len: u64) -> Result<Invalidated, NetError> {
        let mut reg = fi_registrar!(self);
        self.mrs.invalidate(&mut reg, addr, len)
    }

    /// The registration cache's counters (registrations made and closed, evictions, uncached
    /// registrations, invalidations).
    pub fn registration_stats(&self) -> MrCacheStats {
        self.mrs.stats()
    }

    /// The registration cache's bounds in effect.
    pub fn registration_limits(&self) -> MrCacheLimits {
        self.mrs.limits()
    }

    /// One request on `region` finished (or its post failed).
    pub(crate) fn release_region(&mut self, region: RegionId) {
        let mut reg = fi_registrar!(self);
        self.mrs.release(&mut reg, region);
    }
}

// After `fi_registrar!`: a macro is in scope only below its definition.
mod open;
mod post;
mod transport;
