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
//!   that grants automatic data progress is logged at WARN); [`Transport::poll`] and
//!   [`Transport::test`] read the CQ. A post answered `-FI_EAGAIN` (or shm's `-FI_ENOMEM`) reads
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
//!   cannot cancel sends; a link that went down never answers) **quarantine** the transport:
//!   nothing a posted request can touch is closed, ever (`quarantine.rs`, [`quarantine_stats`]).
//!
//! Seed: `ncclNet->{isend,irecv,test}` over aws-ofi-nccl's libfabric plugin, §1 and §4;
//! docs/design.md §5 (tags, `FI_ORDER_SAS`) and §8 (poll once per tick per comm).

mod backoff;
mod cq;
mod info;
mod mr;
pub mod net_setup;
mod objects;
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
use self::info::{HintSizes, InfoList, Request};
use self::mr::{FiRegistrar, MrCache, MrConfig, RegionId};
pub use self::mr::{
    Invalidated, MrCacheLimits, MrCacheStats, DEFAULT_MR_CACHE_BYTES, DEFAULT_MR_CACHE_ENTRIES,
    MR_CACHE_BYTES_VAR, MR_CACHE_ENTRIES_VAR,
};
use self::objects::Objects;
pub use self::quarantine::{quarantine_stats, QuarantineStats};
use self::requests::{Kind, Requests, State};

/// Completions read per `fi_cq_read` call.
const CQ_BATCH: usize = 16;
/// Upper bound of `fi_cq_read` calls per progress call (bounds the time one tick spends).
const CQ_MAX_BATCHES: usize = 64;
/// `fi_cq_readerr` answers `-FI_EAGAIN` at most this often in a row before the error entry is
/// left for the next progress call.
const READERR_RETRIES: usize = 1000;
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
}

impl Default for Options {
    fn default() -> Self {
        Self {
            provider: None,
            all_ranks_local: false,
            max_msg_size: None,
            register_memory: None,
            tx_size: None,
            rx_size: None,
            close_drain: DEFAULT_CLOSE_DRAIN,
            max_inject_size: None,
            mr_cache: None,
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
    /// `fi_getname` of the endpoint.
    local_name: Vec<u8>,
    /// `fi_addr_t` of every rank, after [`LibfabricTransport::connect`].
    peers: Vec<fi::fi_addr_t>,
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
    /// Opens an endpoint for `rank` of `nranks` on `provider` (or the automatic choice, see
    /// [`Options::provider`]) with default options. Next: [`LibfabricTransport::local_name`],
    /// then [`LibfabricTransport::connect`].
    ///
    /// # Errors
    /// As [`LibfabricTransport::open_with`].
    pub fn open(provider: Option<&str>, rank: u32, nranks: u32) -> Result<Self, NetError> {
        let opts = Options {
            provider: provider.map(str::to_owned),
            ..Options::default()
        };
        Self::open_with(rank, nranks, &opts)
    }

    /// Opens an endpoint with explicit [`Options`].
    ///
    /// # Errors
    /// [`NetError::invalid`] for `rank >= nranks`, `nranks` over the tag's 16-bit rank field, or
    /// a provider that is not offered (the message names it and lists what is offered);
    /// [`NetError::failure`] when a libfabric call fails (the message names the call).
    pub fn open_with(rank: u32, nranks: u32, opts: &Options) -> Result<Self, NetError> {
        if nranks == 0 || rank >= nranks || nranks > proxy_core::progress::net::MAX_NRANKS {
            return Err(NetError::invalid(
                None,
                format!(
                    "libfabric: rank {rank} of {nranks} ranks (need rank < nranks <= {})",
                    proxy_core::progress::net::MAX_NRANKS
                ),
            ));
        }
        let request = Request::from(
            opts.provider.as_deref(),
            opts.all_ranks_local || nranks == 1,
        );
        let sizes = HintSizes {
            tx_size: opts.tx_size,
            rx_size: opts.rx_size,
        };
        // Before the first fi_getinfo: detect CMA, set shm's SAR threshold (shm_cma.rs).
        let shm_path = shm_cma::prepare_provider_env();
        let with_rma = InfoList::query(true, sizes)?;
        let plain = InfoList::query(false, sizes)?;
        let entry = info::choose(&request, with_rma.as_ref(), plain.as_ref())?;

        // SAFETY: the attribute pointers of a returned entry are valid.
        let attrs = unsafe {
            let i = entry.info;
            let tag_format = (*i.ep_attr).mem_tag_format;
            ProviderAttrs {
                provider: entry.prov_name(),
                domain: entry.domain_name(),
                caps: i.caps,
                mr_mode: (*i.domain_attr).mr_mode,
                max_msg_size: (*i.ep_attr).max_msg_size as u64,
                tx_size: (*i.tx_attr).size,
                rx_size: (*i.rx_attr).size,
                inject_size: (*i.tx_attr).inject_size,
                tag_bits: if tag_format == 0 {
                    64
                } else {
                    64 - tag_format.leading_zeros()
                },
                addr_format: i.addr_format,
                data_progress: (*i.domain_attr).data_progress,
                control_progress: (*i.domain_attr).control_progress,
                threading: (*i.domain_attr).threading,
                shm_large_messages: None,
            }
        };
        let mut attrs = attrs;
        if info::name_matches("shm", &attrs.provider) {
            log::info!(
                "libfabric/shm: rank {rank}/{nranks}: sends over the inject size move by {}; \
                 FI_SHM_SAR_THRESHOLD={}",
                shm_path.describe(),
                shm_path
                    .sar_threshold
                    .map_or_else(|| "unset".to_owned(), |t| t.to_string())
            );
            attrs.shm_large_messages = Some(shm_path.describe());
        }
        if attrs.data_progress != fi::FI_PROGRESS_MANUAL {
            // Polling still moves such a provider; but it also moves on its own threads, which
            // the transport's single-threaded use of the domain does not expect.
            log::warn!(
                "libfabric/{}: asked for manual data progress, granted {} (control {})",
                attrs.provider,
                progress_name(attrs.data_progress),
                progress_name(attrs.control_progress)
            );
        }
        let mr_limits = match opts.mr_cache {
            Some(l) => l,
            None => MrCacheLimits::from_env()?,
        };
        let asks_registration = attrs.mr_mode
            & (fi::FI_MR_LOCAL | fi::FI_MR_VIRT_ADDR | fi::FI_MR_ALLOCATED | fi::FI_MR_PROV_KEY)
            != 0;
        let register = match opts.register_memory {
            None => asks_registration,
            Some(false) if attrs.mr_mode & fi::FI_MR_LOCAL != 0 => {
                return Err(NetError::invalid(
                    None,
                    format!(
                        "libfabric provider {} requires local memory registration \
                         (FI_MR_LOCAL); register_memory = false cannot be honoured",
                        attrs.provider
                    ),
                ))
            }
            Some(r) => r,
        };
        let mut access = fi::FI_SEND | fi::FI_RECV;
        if attrs.caps & fi::FI_RMA != 0 {
            access |= fi::FI_READ | fi::FI_WRITE | fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE;
        }
        let max_msg = opts
            .max_msg_size
            .map_or(attrs.max_msg_size, |m| m.min(attrs.max_msg_size));
        let tag_mask = if attrs.tag_bits >= 64 {
            u64::MAX
        } else {
            (1u64 << attrs.tag_bits) - 1
        };
        let inject_max = opts
            .max_inject_size
            .map_or(attrs.inject_size, |m| m.min(attrs.inject_size));
        let mut t = Self {
            name: format!("libfabric/{}", attrs.provider),
            rank,
            nranks,
            max_msg,
            inject_max,
            injected: 0,
            tag_mask,
            register,
            mr_cfg: MrConfig {
                mr_mode: attrs.mr_mode,
                access,
            },
            enomem_is_backpressure: info::name_matches("shm", &attrs.provider),
            close_drain: opts.close_drain,
            obj: Objects::none(),
            local_name: Vec::new(),
            peers: Vec::new(),
            reqs: Requests::default(),
            pressure: vec![PostPressure::default(); nranks as usize],
            spaced: 0,
            mrs: MrCache::new(mr_limits),
            closed: false,
            watch: None,
            watch_failed: None,
            attrs,
        };
        // On failure `t` is dropped, which closes whatever was opened.
        t.open_objects(entry.info as *const fi::fi_info as *mut fi::fi_info)?;
        drop((with_rma, plain));
        log::info!(
            "{}: rank {rank}/{nranks} opened domain {} ({:?}), mr_mode {:#x} (register: {}), \
             max_msg_size {}, inject up to {} B, tx/rx {}/{}, {} tag bits, progress data {} / \
             control {}, threading {}, libfabric {} (built against {})",
            t.name,
            t.attrs.domain,
            request,
            t.attrs.mr_mode,
            t.register,
            t.max_msg,
            t.inject_max,
            t.attrs.tx_size,
            t.attrs.rx_size,
            t.attrs.tag_bits,
            progress_name(t.attrs.data_progress),
            progress_name(t.attrs.control_progress),
            t.attrs.threading,
            {
                // SAFETY: fi_version takes no arguments.
                let v = unsafe { fi::fi_version() };
                format!("{}.{}", fi::fi_major(v), fi::fi_minor(v))
            },
            fi::PKG_VERSION,
        );
        Ok(t)
    }

    /// Watches the comm's bootstrap connections for a lost peer (docs/design.md §9,
    /// "Liveness"): after each [`Transport::poll`] the transport runs [`PeerWatch::check`]
    /// (rate-limited, never blocking), and a lost peer fails the poll, so the comm fails with
    /// `NRT_NETWORK_PROXY_FAILURE` naming the rank. The watch keeps the bootstrap open as long
    /// as the transport lives.
    pub fn set_peer_watch(&mut self, watch: PeerWatch) {
        self.watch = Some(watch);
    }

    /// The dead-peer check of [`LibfabricTransport::set_peer_watch`], as a transport failure.
    fn check_peers(&mut self) -> Result<(), NetError> {
        if let Some(e) = &self.watch_failed {
            return Err(e.clone());
        }
        let Some(w) = self.watch.as_mut() else {
            return Ok(());
        };
        w.check().map_err(|e| {
            let message = match e.lost_rank() {
                Some(r) => format!("{}: rank {r} lost (bootstrap): {e}", self.name),
                None => format!("{}: the bootstrap failed: {e}", self.name),
            };
            let e = NetError::failure(e.lost_rank(), message);
            self.watch_failed = Some(e.clone());
            e
        })
    }

    /// This endpoint's address (`fi_getname`): what the bootstrap all-gathers.
    pub fn local_name(&self) -> Vec<u8> {
        self.local_name.clone()
    }

    /// Inserts every rank's name (index = rank, this rank's own included) into the address
    /// vector; posts are accepted afterwards. Called once.
    ///
    /// # Errors
    /// [`NetError::invalid`] for a wrong count, a second call, or `peer_names[rank]` that is not
    /// [`LibfabricTransport::local_name`] (a mis-ordered all-gather);
    /// [`NetError::failure`] when `fi_av_insert` rejects a name (the peer is named).
    pub fn connect(&mut self, peer_names: &[Vec<u8>]) -> Result<(), NetError> {
        self.check_open()?;
        if !self.peers.is_empty() {
            return Err(NetError::invalid(
                None,
                format!("{}: connect called twice", self.name),
            ));
        }
        if peer_names.len() != self.nranks as usize {
            return Err(NetError::invalid(
                None,
                format!(
                    "{}: connect got {} names for {} ranks",
                    self.name,
                    peer_names.len(),
                    self.nranks
                ),
            ));
        }
        if peer_names[self.rank as usize] != self.local_name {
            return Err(NetError::invalid(
                Some(self.rank),
                format!(
                    "{}: peer_names[{}] is not this endpoint's own name (names must be in rank \
                     order)",
                    self.name, self.rank
                ),
            ));
        }
        let mut addrs = Vec::with_capacity(peer_names.len());
        for (peer, name) in peer_names.iter().enumerate() {
            let peer = peer as u32;
            if name.is_empty() {
                return Err(NetError::invalid(
                    Some(peer),
                    format!("{}: empty name for rank {peer}", self.name),
                ));
            }
            let mut addr: fi::fi_addr_t = fi::FI_ADDR_NOTAVAIL;
            // SAFETY: the AV is open; `name` holds one address in the provider's format (as
            // fi_getname wrote it on the peer); `addr` receives one fi_addr_t.
            let ret = unsafe {
                fi::fi_av_insert(
                    self.obj.av,
                    name.as_ptr().cast(),
                    1,
                    &mut addr,
                    0,
                    ptr::null_mut(),
                )
            };
            if ret != 1 || addr == fi::FI_ADDR_NOTAVAIL {
                return Err(NetError::failure(
                    Some(peer),
                    format!(
                        "{}: fi_av_insert of rank {peer}'s name ({} B) failed: {} ({ret})",
                        self.name,
                        name.len(),
                        if ret < 0 {
                            fi_error_text(ret as isize)
                        } else {
                            "not inserted".into()
                        }
                    ),
                ));
            }
            addrs.push(addr);
        }
        self.peers = addrs;
        Ok(())
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

    fn check_open(&self) -> Result<(), NetError> {
        if self.closed {
            Err(NetError::failure(
                None,
                format!("{}: transport is closed", self.name),
            ))
        } else {
            Ok(())
        }
    }

    /// Checks a post's arguments; returns the peer's `fi_addr_t`.
    fn check_post(
        &self,
        kind: Kind,
        peer: u32,
        size: u64,
        tag: u64,
    ) -> Result<fi::fi_addr_t, NetError> {
        self.check_open()?;
        if self.peers.is_empty() {
            return Err(NetError::invalid(
                Some(peer),
                format!("{}: {} posted before connect", self.name, kind.as_str()),
            ));
        }
        if peer >= self.nranks {
            return Err(NetError::invalid(
                Some(peer),
                format!(
                    "{}: peer {peer} out of range ({} ranks)",
                    self.name, self.nranks
                ),
            ));
        }
        if size > self.max_msg {
            return Err(NetError::invalid(
                Some(peer),
                format!(
                    "{}: {} of {size} bytes exceeds the message size limit of {} bytes \
                     (max_msg_size)",
                    self.name,
                    kind.as_str(),
                    self.max_msg
                ),
            ));
        }
        if tag & !self.tag_mask != 0 {
            return Err(NetError::invalid(
                Some(peer),
                format!(
                    "{}: tag {tag:#x} exceeds the provider's {} tag bits",
                    self.name, self.attrs.tag_bits
                ),
            ));
        }
        Ok(self.peers[peer as usize])
    }

    /// Posts one send or receive; spaces the send posts to a peer that keeps answering
    /// `-FI_EAGAIN` (`backoff.rs`).
    fn post(
        &mut self,
        kind: Kind,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        let addr = self.check_post(kind, peer, size, tag)?;
        if kind == Kind::Recv {
            return self.post_now(kind, addr, peer, buf, size, tag);
        }
        let p = peer as usize;
        if !self.pressure[p].may_post(Instant::now()) {
            // Back-pressure answered here: read the CQ (manual progress), as the provider's
            // own -FI_EAGAIN path does.
            self.spaced += 1;
            self.progress()?;
            return Ok(None);
        }
        let r = self.post_now(kind, addr, peer, buf, size, tag);
        let event = match &r {
            Ok(Some(_)) => PostEvent::Posted,
            Ok(None) => PostEvent::Again,
            Err(_) => return r,
        };
        if self.pressure[p].on(event, Instant::now(), peer) {
            log::warn!(
                "{}: send posts to rank {peer} answered -FI_EAGAIN for {:?} without one being \
                 accepted (a vanished peer on tcp: each post starts a refused connection): \
                 spacing them up to {:?} apart until one is accepted",
                self.name,
                backoff::STORM_AFTER,
                backoff::MAX_WAIT
            );
        }
        r
    }

    /// Posts one send or receive now.
    fn post_now(
        &mut self,
        kind: Kind,
        addr: fi::fi_addr_t,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        if kind == Kind::Send && self.inject_max > 0 && size <= self.inject_max as u64 {
            return self.post_inject(addr, peer, buf, size, tag);
        }
        let (mr, desc) = if self.register && size > 0 {
            let mut reg = fi_registrar!(self);
            // Counts one request on the region; released when the post fails or completes.
            let (region, desc) =
                self.mrs
                    .acquire(&mut reg, buf as u64, size)
                    .map_err(|mut e| {
                        e.peer = Some(peer);
                        e
                    })?;
            (Some(region), desc)
        } else {
            (None, ptr::null_mut())
        };
        let (index, ctx) = self.reqs.reserve(kind, peer, size, tag, mr);
        // SAFETY: the endpoint is open and connected; the caller's contract keeps `buf..+size`
        // valid (readable for a send, writable for a receive) until the request finishes; `desc`
        // is the registration covering it (or null when none is needed); `ctx` is the slot's
        // stable context, owned by the provider until its completion is read.
        let ret = unsafe {
            match kind {
                Kind::Send => fi::fi_tsend(
                    self.obj.ep,
                    buf.cast_const().cast(),
                    size as usize,
                    desc,
                    addr,
                    tag,
                    ctx,
                ),
                Kind::Recv => fi::fi_trecv(
                    self.obj.ep,
                    buf.cast(),
                    size as usize,
                    desc,
                    fi::FI_ADDR_UNSPEC,
                    tag,
                    0,
                    ctx,
                ),
            }
        };
        if ret == 0 {
            let request = self.reqs.mark_posted(index);
            return Ok(Some(Posted {
                request,
                payload_copied: false,
            }));
        }
        self.reqs.unreserve(index);
        if let Some(region) = mr {
            self.release_region(region);
        }
        if ret == neg(fi::FI_EAGAIN) || (self.enomem_is_backpressure && ret == neg(fi::FI_ENOMEM)) {
            // Back-pressure: the provider moves on only when its CQ is read (manual progress;
            // tcp's connection setup answers -FI_EAGAIN until then).
            self.progress()?;
            return Ok(None);
        }
        Err(NetError::failure(
            Some(peer),
            format!(
                "{}: fi_{} of {size} B tag {tag:#x} to/from rank {peer} failed: {} ({ret})",
                self.name,
                if kind == Kind::Send { "tsend" } else { "trecv" },
                fi_error_text(ret)
            ),
        ))
    }
}

impl LibfabricTransport {
    /// Posts a send of at most the inject size with `fi_tinject`: on success the payload is
    /// copied and no completion will come, so the request is done at once.
    fn post_inject(
        &mut self,
        addr: fi::fi_addr_t,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        // SAFETY: the endpoint is open and connected; the caller's contract keeps `buf..+size`
        // readable for the duration of the call, which is all fi_tinject needs (it copies the
        // payload before returning); `size` is at most the entry's inject_size, so no
        // descriptor and no context are needed.
        let ret = unsafe {
            fi::fi_tinject(
                self.obj.ep,
                buf.cast_const().cast(),
                size as usize,
                addr,
                tag,
            )
        };
        if ret == 0 {
            let (index, _) = self.reqs.reserve(Kind::Send, peer, size, tag, None);
            let request = self.reqs.mark_done_now(index, size);
            self.injected += 1;
            return Ok(Some(Posted {
                request,
                payload_copied: true,
            }));
        }
        if ret == neg(fi::FI_EAGAIN) || (self.enomem_is_backpressure && ret == neg(fi::FI_ENOMEM)) {
            // Back-pressure, as for fi_tsend: only reading the CQ moves the provider on.
            self.progress()?;
            return Ok(None);
        }
        Err(NetError::failure(
            Some(peer),
            format!(
                "{}: fi_tinject of {size} B tag {tag:#x} to rank {peer} failed: {} ({ret})",
                self.name,
                fi_error_text(ret)
            ),
        ))
    }
}

impl Transport for LibfabricTransport {
    fn name(&self) -> &str {
        &self.name
    }

    fn max_msg_size(&self) -> u64 {
        self.max_msg
    }

    fn poll(&mut self) -> Result<(), NetError> {
        self.check_open()?;
        self.progress()?;
        self.check_peers()
    }

    unsafe fn isend(
        &mut self,
        peer: u32,
        buf: *const u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        self.post(Kind::Send, peer, buf.cast_mut(), size, tag)
    }

    unsafe fn irecv(
        &mut self,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        self.post(Kind::Recv, peer, buf, size, tag)
    }

    fn test(&mut self, request: RequestId) -> Result<TestOutcome, NetError> {
        let Some(slot) = self.reqs.get(request) else {
            return Err(NetError::invalid(
                None,
                format!("{}: unknown or finished request id {request:#x}", self.name),
            ));
        };
        if slot.state.in_flight() && !self.closed {
            self.progress()?;
        }
        let slot = self
            .reqs
            .get(request)
            .expect("still live: only release frees it");
        if slot.state.in_flight() {
            return Ok(TestOutcome::Pending);
        }
        match self
            .reqs
            .release(request)
            .expect("finished requests release")
        {
            State::Done(size) => Ok(TestOutcome::Done { size }),
            State::Cancelled => Ok(TestOutcome::Cancelled),
            State::Failed(e) => Err(e),
            s => unreachable!("released request in state {s:?}"),
        }
    }

    fn cancel(&mut self, request: RequestId) -> Result<(), NetError> {
        let Some(ctx) = self.reqs.context_of(request) else {
            return Err(NetError::invalid(
                None,
                format!(
                    "{}: cancel of unknown or finished request id {request:#x}",
                    self.name
                ),
            ));
        };
        let index = (request & 0xFFFF_FFFF) as u32;
        if !self.reqs.slot(index).state.in_flight() || self.obj.ep.is_null() {
            return Ok(()); // Already finished: the next test reports how.
        }
        // SAFETY: the endpoint is open and `ctx` is the context of one of its posted operations.
        let ret = unsafe { fi::fi_cancel(&mut (*self.obj.ep).fid, ctx) };
        if ret != 0 && ret != neg(fi::FI_ENOENT) {
            return Err(NetError::failure(
                Some(self.reqs.slot(index).peer),
                format!(
                    "{}: fi_cancel failed: {} ({ret})",
                    self.name,
                    fi_error_text(ret)
                ),
            ));
        }
        self.reqs.mark_cancelling(index);
        Ok(())
    }

    fn register(&mut self, addr: u64, len: u64) -> Result<MrHandle, NetError> {
        self.check_open()?;
        if !self.register {
            return Ok(0);
        }
        let mut reg = fi_registrar!(self);
        self.mrs.register(&mut reg, addr, len)
    }

    fn deregister(&mut self, mr: MrHandle) -> Result<(), NetError> {
        if mr == 0 || self.closed {
            return Ok(());
        }
        let mut reg = fi_registrar!(self);
        self.mrs.deregister(&mut reg, mr)
    }

    fn invalidate(&mut self, addr: u64, len: u64) -> Result<(), NetError> {
        if self.closed {
            return Ok(()); // Every registration was closed with the transport.
        }
        let done = self.invalidate_range(addr, len)?;
        if done.closed + done.deferred > 0 {
            log::debug!(
                "{}: invalidate {addr:#x}..{:#x}: {} registrations closed, {} detached until \
                 their requests complete",
                self.name,
                addr + len,
                done.closed,
                done.deferred
            );
        }
        Ok(())
    }

    /// ` in_flight=N registrations=N closed=BOOL` and the process's quarantine totals.
    fn dump_state(&self, out: &mut dyn std::fmt::Write) -> std::fmt::Result {
        write!(
            out,
            " in_flight={} registrations={} closed={} {}",
            self.reqs.in_flight(),
            self.mrs.len(),
            self.closed,
            quarantine_stats()
        )
    }

    fn close(&mut self) -> Result<(), NetError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let mut first_err: Option<NetError> = None;
        // Cancel what is in flight, then drain: tcp answers -FI_EBUSY to fi_close otherwise, and
        // no buffer may be released while the provider still owns it.
        if !self.obj.ep.is_null() {
            for (index, ctx) in self.reqs.uncancelled() {
                // SAFETY: the endpoint is open and `ctx` is one of its posted operations.
                let ret = unsafe { fi::fi_cancel(&mut (*self.obj.ep).fid, ctx) };
                if ret == 0 || ret == neg(fi::FI_ENOENT) {
                    self.reqs.mark_cancelling(index);
                }
            }
        }
        let deadline = Instant::now() + self.close_drain;
        let mut rounds = 0u64;
        while self.reqs.in_flight() > 0 && Instant::now() < deadline && rounds < 10_000_000 {
            if let Err(e) = self.progress() {
                first_err.get_or_insert(e);
                break;
            }
            rounds += 1;
            if rounds.is_multiple_of(64) {
                std::thread::yield_now();
            }
        }
        let left = self.reqs.in_flight();
        if left > 0 {
            // The provider may still touch every object, context, registration and buffer of
            // these requests: close nothing (quarantine.rs has the rule and why).
            let e = self.quarantine(format!(
                "{left} requests still in flight after cancelling and draining for {:?}",
                self.close_drain
            ));
            log::warn!("{e}");
            return Err(e);
        }
        // Registrations bound to the endpoint (FI_MR_ENDPOINT) are closed before it (as fabtests
        // do), the others after it.
        let mr_first = self.attrs.mr_mode & fi::FI_MR_ENDPOINT != 0;
        if mr_first {
            let mut reg = fi_registrar!(self);
            if let Err(e) = self.mrs.close_all(&mut reg) {
                first_err.get_or_insert(e);
            }
        }
        let ep_ret = self.obj.close_ep();
        if ep_ret != 0 {
            // The provider refused: it may still own contexts and buffers.
            let e = self.quarantine(format!(
                "fi_close(endpoint) failed: {} ({ep_ret})",
                fi_error_text(ep_ret as isize)
            ));
            log::warn!("{e}");
            return Err(e);
        }
        if !mr_first {
            let mut reg = fi_registrar!(self);
            if let Err(e) = self.mrs.close_all(&mut reg) {
                first_err.get_or_insert(e);
            }
        }
        if let Some((what, ret)) = self.obj.close_all() {
            // The refused object and its parents stay open: quarantined.
            let e = self.quarantine(format!(
                "fi_close({what}) failed: {} ({ret})",
                fi_error_text(ret as isize)
            ));
            first_err.get_or_insert(e);
        }
        match first_err {
            Some(e) => {
                log::warn!("{e}");
                Err(e)
            }
            None => Ok(()),
        }
    }
}

impl Drop for LibfabricTransport {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!("{}: close on drop: {e}", self.name);
        }
    }
}
