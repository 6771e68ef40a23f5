//! The memory-registration cache: a bounded, least-recently-used cache of registrations keyed by
//! address range, made lazily from the posted buffers' addresses (FIFO entries are reused every
//! execution, so each range registers once), with an in-flight count per region so that no
//! region a posted request uses is ever closed under it.
//!
//! Ranges are widened to whole pages so that neighbouring entries of one buffer share a
//! registration; a range no region covers gets its own registration (regions may overlap, and
//! are never merged: a merge would re-register ever larger unions, which costs a pinning
//! provider such as efa time proportional to the square of the buffer). Each registration asks
//! for its own key (unique per domain: two registrations with the same requested key fail with
//! `-FI_ENOKEY` on tcp and shm, libfabric #10882); with `FI_MR_PROV_KEY` the provider's key is
//! read back with `fi_mr_key`.
//!
//! **Bounds.** The cache holds at most [`MrCacheLimits::max_entries`] cached regions and, when
//! [`MrCacheLimits::max_bytes`] is not 0, at most that many registered bytes. A new region makes
//! room by closing the least recently used regions that are not *pinned* (a region is pinned
//! while a posted request uses it or an explicit [`MrCache::register`] holds it). When every
//! cached region is pinned the new region is registered **uncached**: it is used by the one post
//! that asked for it and closed when that post completes (the cache stays within its bound; a
//! log line says so once per cache).
//!
//! **Invalidation.** The cache does not watch the address space: a caller that frees or unmaps a
//! buffer that was posted must first call [`MrCache::invalidate`] (the transport's
//! `invalidate`, the comm's `invalidate_range`, the C ABI's `nccom_comm_invalidate_range`), or a
//! later buffer at the same address would be posted with the stale registration (silent
//! corruption on efa, whose NIC reads the old pages; invisible on tcp and shm, which do not use
//! the key). An invalidated region is never handed out again; one that a posted request still
//! uses is *detached* and closed when its last request completes.
//!
//! A region's life (one enum, [`RegionState`]; [`MrCache::transition`] traces every change):
//! ```text
//!   (1) new, room in the cache ───────────────► CACHED ──(3) evicted (LRU, not pinned) ──┐
//!   (2) new, every cached region pinned ──┐        │     invalidated while not used      │
//!                                         │        │     transport close                  ▼
//!                                         ▼   (4) invalidated while requests use it    CLOSED
//!                                      DETACHED ◄──┘                                      ▲
//!                                         └──(5) its last request completes; close ───────┘
//!
//!   (6) CACHED or DETACHED ──(transport quarantined: requests the provider never finished)──►
//!       QUARANTINED
//! ```
//! CLOSED is the region's removal from the cache, after exactly one `fi_close`. QUARANTINED is
//! its removal without any: the transport could not drain its requests, so the provider may
//! still use the registration, and it moves into the process's quarantine
//! (`quarantine.rs`), never closed.
//!
//! Registration goes through the small [`Registrar`] trait ([`FiRegistrar`] over libfabric),
//! so the cache's rules are unit-tested against a fake that records keys and ranges.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ptr;

use libfabric_sys as fi;
use proxy_core::progress::net::{MrHandle, NetError};

use super::fi_error_text;

/// Registrations are widened to this granularity (the smallest page size of the targets we run
/// on; a larger page only means less sharing).
const PAGE: u64 = 4096;

/// Default [`MrCacheLimits::max_entries`].
pub const DEFAULT_MR_CACHE_ENTRIES: usize = 1024;
/// Default [`MrCacheLimits::max_bytes`] (0: no byte bound).
pub const DEFAULT_MR_CACHE_BYTES: u64 = 0;
/// Environment variable read for [`MrCacheLimits::max_entries`] when the options give none.
pub const MR_CACHE_ENTRIES_VAR: &str = "NEURON_RT_MR_CACHE_ENTRIES";
/// Environment variable read for [`MrCacheLimits::max_bytes`] when the options give none.
pub const MR_CACHE_BYTES_VAR: &str = "NEURON_RT_MR_CACHE_BYTES";

/// The bounds of a transport's registration cache.
///
/// Seed: none (aws-ofi-nccl leaves the cache to libfabric's own `FI_MR_CACHE_MAX_COUNT`, default
/// 1024); docs/design.md §5.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrCacheLimits {
    /// Most regions the cache keeps (at least 1; default [`DEFAULT_MR_CACHE_ENTRIES`], the
    /// count efa's device limit and libfabric's own cache default to the same order).
    pub max_entries: usize,
    /// Most registered bytes (page-widened) the cache keeps; 0 = no byte bound (the default:
    /// what is registered is memory the caller posts, bounded by its own allocations).
    pub max_bytes: u64,
}

impl Default for MrCacheLimits {
    fn default() -> Self {
        Self {
            max_entries: DEFAULT_MR_CACHE_ENTRIES,
            max_bytes: DEFAULT_MR_CACHE_BYTES,
        }
    }
}

impl MrCacheLimits {
    /// The defaults, overridden by `NEURON_RT_MR_CACHE_ENTRIES` (an integer ≥ 1) and
    /// `NEURON_RT_MR_CACHE_BYTES` (an integer, 0 = no byte bound) when set.
    ///
    /// # Errors
    /// [`NetError::invalid`] naming the variable and its value when one does not parse or the
    /// entry count is 0.
    pub fn from_env() -> Result<Self, NetError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`MrCacheLimits::from_env`] over any variable lookup (tests).
    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, NetError> {
        let mut l = Self::default();
        let bad = |var: &str, v: &str, need: &str| {
            NetError::invalid(None, format!("{var}={v:?}: expected {need}"))
        };
        if let Some(v) = get(MR_CACHE_ENTRIES_VAR) {
            l.max_entries = v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| bad(MR_CACHE_ENTRIES_VAR, &v, "an integer >= 1"))?;
        }
        if let Some(v) = get(MR_CACHE_BYTES_VAR) {
            l.max_bytes = v
                .trim()
                .parse::<u64>()
                .map_err(|_| bad(MR_CACHE_BYTES_VAR, &v, "a byte count (0 = no bound)"))?;
        }
        Ok(l)
    }
}

/// How the domain wants memory registered.
#[derive(Clone, Copy, Debug)]
pub(super) struct MrConfig {
    /// `mr_mode` of the chosen entry.
    pub mr_mode: i32,
    /// Access flags every registration asks for.
    pub access: u64,
}

/// A region's identity in the cache, unique for the cache's life (never reused, unlike a
/// range: a range invalidated and registered again is a new region). Requests keep it.
pub(super) type RegionId = u64;

/// What a [`Registrar`] made.
#[derive(Clone, Copy, Debug)]
pub(super) struct Registration {
    /// The registration's object (libfabric: the `fid_mr`), passed back to
    /// [`Registrar::close`].
    pub mr: *mut c_void,
    /// The `desc` argument of posts from this region (`fi_mr_desc`).
    pub desc: *mut c_void,
    /// The remote key (`fi_mr_key`; for RMA, logged).
    pub key: u64,
}

/// What the cache registers through: libfabric ([`FiRegistrar`]) or a test's fake.
pub(super) trait Registrar {
    /// Provider name for messages.
    fn provider(&self) -> &str;
    /// Registers `start..start+len` (page-aligned) asking for `key` (unique per cache).
    ///
    /// # Errors
    /// The provider's refusal, as text naming the call.
    fn register(&mut self, start: u64, len: u64, key: u64) -> Result<Registration, String>;
    /// Closes a registration [`Registrar::register`] made (called exactly once per success).
    ///
    /// # Errors
    /// The provider's refusal, as text naming the call.
    fn close(&mut self, r: &Registration) -> Result<(), String>;
}

/// The libfabric [`Registrar`]: `fi_mr_reg` (+ `fi_mr_bind` / `fi_mr_enable` with
/// `FI_MR_ENDPOINT`) and `fi_close`.
pub(super) struct FiRegistrar<'a> {
    /// The open domain.
    pub domain: *mut fi::fid_domain,
    /// The open endpoint (bound to with `FI_MR_ENDPOINT`).
    pub ep: *mut fi::fid_ep,
    /// How to register.
    pub cfg: MrConfig,
    /// Provider name.
    pub provider: &'a str,
}

impl Registrar for FiRegistrar<'_> {
    fn provider(&self) -> &str {
        self.provider
    }

    fn register(&mut self, start: u64, len: u64, key: u64) -> Result<Registration, String> {
        let mut mr: *mut fi::fid_mr = ptr::null_mut();
        // SAFETY: `domain` is open; the range covers the caller's buffer (which the post's
        // contract keeps valid) widened to whole pages of the same mappings; `mr` receives a new
        // registration that the cache owns.
        let ret = unsafe {
            fi::fi_mr_reg(
                self.domain,
                start as *const c_void,
                len as usize,
                self.cfg.access,
                0,
                key,
                0,
                &mut mr,
                ptr::null_mut(),
            )
        };
        if ret != 0 {
            return Err(format!(
                "fi_mr_reg of {start:#x}..{:#x}: {} ({ret})",
                start + len,
                fi_error_text(ret as isize)
            ));
        }
        if self.cfg.mr_mode & fi::FI_MR_ENDPOINT != 0 {
            // SAFETY: `mr` was just registered and `ep` is open; FI_MR_ENDPOINT asks for exactly
            // this bind + enable before use.
            let ret = unsafe {
                let r = fi::fi_mr_bind(mr, &mut (*self.ep).fid, 0);
                if r != 0 {
                    r
                } else {
                    fi::fi_mr_enable(mr)
                }
            };
            if ret != 0 {
                // SAFETY: `mr` is ours and unused.
                unsafe { fi::fi_close(&mut (*mr).fid) };
                return Err(format!(
                    "fi_mr_bind/fi_mr_enable (FI_MR_ENDPOINT): {} ({ret})",
                    fi_error_text(ret as isize)
                ));
            }
        }
        // SAFETY: `mr` is a live registration.
        let (desc, key) = unsafe { (fi::fi_mr_desc(mr), fi::fi_mr_key(mr)) };
        Ok(Registration {
            mr: mr.cast(),
            desc,
            key,
        })
    }

    fn close(&mut self, r: &Registration) -> Result<(), String> {
        let mr: *mut fi::fid_mr = r.mr.cast();
        // SAFETY: `mr` is a live registration made by `register` above; the cache closes each
        // registration exactly once (it leaves the cache's map before this call).
        let ret = unsafe { fi::fi_close(&mut (*mr).fid) };
        if ret != 0 {
            return Err(format!("fi_close: {} ({ret})", fi_error_text(ret as isize)));
        }
        Ok(())
    }
}

/// Where a region is in its life (module diagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RegionState {
    /// In the lookup index: handed out to posts covering its range.
    Cached,
    /// Out of the index (invalidated while in use, or registered uncached): never handed out
    /// again; closed when its last request completes.
    Detached,
    /// Closed and removed (the target of the last transition only; no region is stored in it).
    Closed,
    /// Removed without a close, its registration handed to the quarantine (edge 6; no region
    /// is stored in it).
    Quarantined,
}

/// One registration.
struct Region {
    /// What the registrar made.
    reg: Registration,
    /// Page-aligned start.
    start: u64,
    /// Page-aligned end (exclusive).
    end: u64,
    /// Where it is in its life.
    state: RegionState,
    /// Posted requests using the region that have not completed.
    in_flight: u32,
    /// Explicit [`MrCache::register`] calls not yet matched by a deregister.
    explicit: u32,
    /// The handle [`MrCache::register`] returns for this region.
    handle: MrHandle,
    /// The LRU tick of its last use (key in [`MrCache::lru`] while cached).
    last_use: u64,
}

impl Region {
    fn pinned(&self) -> bool {
        self.in_flight > 0 || self.explicit > 0
    }
    fn bytes(&self) -> u64 {
        self.end - self.start
    }
}

/// Counters of a cache's life (monotonic), for tests and logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MrCacheStats {
    /// Registrations made (cached and uncached).
    pub registered: u64,
    /// Registrations closed (each exactly once).
    pub closed: u64,
    /// Cached regions closed to make room (LRU).
    pub evicted: u64,
    /// Registrations made uncached because every cached region was pinned.
    pub uncached: u64,
    /// Regions an invalidate took out of the cache (closed at once or detached).
    pub invalidated: u64,
    /// Of those, the ones detached because posted requests still used them.
    pub deferred: u64,
    /// Registrations whose close the provider refused (logged; the region is gone anyway).
    pub close_errors: u64,
    /// Registrations handed to the process's quarantine unclosed (the transport could not drain
    /// its requests; `quarantine.rs`).
    pub quarantined: u64,
}

/// What an invalidation did
/// ([`LibfabricTransport::invalidate_range`](crate::LibfabricTransport::invalidate_range)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Invalidated {
    /// Regions closed now.
    pub closed: usize,
    /// Regions detached: posted requests still use them; each closes when its last one
    /// completes and is never handed out again.
    pub deferred: usize,
}

/// The cache (one per domain).
pub(super) struct MrCache {
    /// Bounds.
    limits: MrCacheLimits,
    /// Every live region (cached or detached), by id.
    regions: BTreeMap<RegionId, Region>,
    /// Cached regions by `(start, end)`; lookups take any region that covers the range. Two
    /// cached regions may share a start (a later, longer one), never both bounds.
    index: BTreeMap<(u64, u64), RegionId>,
    /// Cached regions by last use, oldest first.
    lru: BTreeMap<u64, RegionId>,
    /// Bytes of the cached regions.
    cached_bytes: u64,
    /// Length of the longest region ever cached: a region covering `addr` starts at most this
    /// far below it (bounds the lookup's scan; never lowered, which only widens the scan).
    longest: u64,
    /// Next LRU tick.
    tick: u64,
    /// Next region id.
    next_id: RegionId,
    /// Next requested key (unique per domain).
    next_key: u64,
    /// Next explicit handle (0 is never used: it is the trait's "no registration").
    next_handle: MrHandle,
    /// Counters.
    stats: MrCacheStats,
    /// The first close the provider refused since the last [`MrCache::close_all`].
    first_close_error: Option<NetError>,
    /// Registrations quarantined by the running [`MrCache::quarantine_all`] (empty otherwise).
    quarantined: Vec<Registration>,
}

/// The widened range `[start, end)` of `addr..addr+len` (`len > 0`).
fn page_range(addr: u64, len: u64) -> Option<(u64, u64)> {
    let end = addr.checked_add(len)?.checked_add(PAGE - 1)? & !(PAGE - 1);
    Some((addr & !(PAGE - 1), end))
}

impl MrCache {
    /// An empty cache with `limits` (`max_entries` 0 is taken as 1).
    pub(super) fn new(limits: MrCacheLimits) -> Self {
        Self {
            limits: MrCacheLimits {
                max_entries: limits.max_entries.max(1),
                ..limits
            },
            regions: BTreeMap::new(),
            index: BTreeMap::new(),
            lru: BTreeMap::new(),
            cached_bytes: 0,
            longest: 0,
            tick: 0,
            next_id: 1,
            next_key: 1,
            next_handle: 1,
            stats: MrCacheStats::default(),
            first_close_error: None,
            quarantined: Vec::new(),
        }
    }

    /// The only place a region's state changes (besides its birth): traces `A=>B`.
    fn transition(&mut self, reg: &mut dyn Registrar, id: RegionId, to: RegionState) {
        let Some(r) = self.regions.get_mut(&id) else {
            return;
        };
        let from = r.state;
        debug_assert!(
            matches!(
                (from, to),
                (RegionState::Cached, RegionState::Detached)
                    | (RegionState::Cached, RegionState::Closed)
                    | (RegionState::Detached, RegionState::Closed)
                    | (RegionState::Cached, RegionState::Quarantined)
                    | (RegionState::Detached, RegionState::Quarantined)
            ),
            "region {id}: {from:?}=>{to:?} is not a transition"
        );
        log::trace!(
            "mr region {id} {:#x}..{:#x} key {:#x}: {from:?}=>{to:?}",
            r.start,
            r.end,
            r.reg.key
        );
        if from == RegionState::Cached {
            // Leaves the index and the LRU.
            let (start, end, last_use, bytes) = (r.start, r.end, r.last_use, r.bytes());
            self.index.remove(&(start, end));
            self.lru.remove(&last_use);
            self.cached_bytes -= bytes;
        }
        match to {
            RegionState::Closed => {
                let r = self.regions.remove(&id).expect("looked up above");
                self.stats.closed += 1;
                if let Err(why) = reg.close(&r.reg) {
                    let e = NetError::failure(
                        None,
                        format!(
                            "libfabric/{}: closing the registration {:#x}..{:#x} (key {:#x}): \
                             {why}",
                            reg.provider(),
                            r.start,
                            r.end,
                            r.reg.key
                        ),
                    );
                    log::error!("{e}");
                    self.stats.close_errors += 1;
                    self.first_close_error.get_or_insert(e);
                }
            }
            RegionState::Quarantined => {
                let r = self.regions.remove(&id).expect("looked up above");
                self.stats.quarantined += 1;
                self.quarantined.push(r.reg);
            }
            s => self.regions.get_mut(&id).expect("looked up above").state = s,
        }
    }

    /// Id of a cached region covering `addr..addr+len`, if any.
    fn find(&self, addr: u64, len: u64) -> Option<RegionId> {
        let end = addr + len;
        // Only regions starting in `end - longest ..= addr` can cover the range; the nearest one
        // below `addr` does in the common case.
        let lowest = end.saturating_sub(self.longest);
        if lowest > addr {
            return None; // Longer than every region.
        }
        self.index
            .range((lowest, 0)..=(addr, u64::MAX))
            .rev()
            .find(|((_, e), _)| *e >= end)
            .map(|(_, id)| *id)
    }

    /// Marks a cached region used now (LRU).
    fn touch(&mut self, id: RegionId) {
        let tick = self.tick;
        let r = self.regions.get_mut(&id).expect("live region");
        debug_assert_eq!(
            r.state,
            RegionState::Cached,
            "only cached regions are found"
        );
        if r.last_use.wrapping_add(1) == tick {
            // Already the most recently used (every touch and registration takes the next
            // tick; the posts of a collective that reuse one buffer): the LRU order stands,
            // no tree update.
            debug_assert_eq!(
                self.lru.get(&r.last_use),
                Some(&id),
                "a cached region is in the LRU"
            );
            return;
        }
        self.tick += 1;
        self.lru.remove(&r.last_use);
        self.lru.insert(tick, id);
        r.last_use = tick;
    }

    /// Closes least recently used unpinned regions until one more region of `bytes` fits.
    /// Returns whether it fits.
    fn make_room(&mut self, reg: &mut dyn Registrar, bytes: u64) -> bool {
        let fits = |c: &Self| {
            c.index.len() < c.limits.max_entries
                && (c.limits.max_bytes == 0
                    || c.cached_bytes.saturating_add(bytes) <= c.limits.max_bytes
                    || c.index.is_empty())
        };
        if fits(self) {
            return true;
        }
        let victims: Vec<RegionId> = self
            .lru
            .values()
            .copied()
            .filter(|id| !self.regions[id].pinned())
            .collect();
        for id in victims {
            if fits(self) {
                break;
            }
            self.stats.evicted += 1;
            self.transition(reg, id, RegionState::Closed);
        }
        fits(self)
    }

    /// Registers a new region for `addr..addr+len`: cached when there is (or can be made) room,
    /// else uncached (detached at birth).
    fn make(&mut self, reg: &mut dyn Registrar, addr: u64, len: u64) -> Result<RegionId, NetError> {
        let range_error = |provider: &str, why: String| {
            NetError::invalid(
                None,
                format!(
                    "cannot register {addr:#x}..{:#x} ({len} B) with libfabric provider \
                     {provider}: {why}",
                    addr.wrapping_add(len)
                ),
            )
        };
        let (start, end) = page_range(addr, len).ok_or_else(|| {
            range_error(reg.provider(), "the range wraps the address space".into())
        })?;
        let cached = self.make_room(reg, end - start);
        let key = self.next_key;
        let made = reg
            .register(start, end - start, key)
            .map_err(|why| range_error(reg.provider(), why))?;
        self.next_key += 1;
        self.stats.registered += 1;
        let id = self.next_id;
        self.next_id += 1;
        let handle = self.next_handle;
        self.next_handle += 1;
        let state = if cached {
            RegionState::Cached
        } else {
            if self.stats.uncached == 0 {
                log::warn!(
                    "libfabric/{}: registration cache full ({} regions, {} B, limits {:?}) and \
                     every region is in use: registering {start:#x}..{end:#x} uncached (closed \
                     when its request completes; further ones are logged at debug)",
                    reg.provider(),
                    self.index.len(),
                    self.cached_bytes,
                    self.limits
                );
            } else {
                log::debug!(
                    "libfabric/{}: uncached registration {start:#x}..{end:#x}",
                    reg.provider()
                );
            }
            self.stats.uncached += 1;
            RegionState::Detached
        };
        log::debug!(
            "libfabric/{}: registered {start:#x}..{end:#x} ({} B) key {:#x} ({state:?})",
            reg.provider(),
            end - start,
            made.key
        );
        let last_use = self.tick;
        self.tick += 1;
        self.regions.insert(
            id,
            Region {
                reg: made,
                start,
                end,
                state,
                in_flight: 0,
                explicit: 0,
                handle,
                last_use,
            },
        );
        if cached {
            let old = self.index.insert((start, end), id);
            debug_assert!(old.is_none(), "a covering region exists: find returns it");
            self.lru.insert(last_use, id);
            self.cached_bytes += end - start;
            self.longest = self.longest.max(end - start);
        }
        Ok(id)
    }

    /// The region a post of `addr..addr+len` (`len > 0`) uses, registering it if needed, with
    /// one more request counted on it (the caller calls [`MrCache::release`] when the post
    /// fails or its request completes). Returns its id and descriptor.
    ///
    /// # Errors
    /// [`NetError::invalid`] naming the range when it wraps or the provider refuses it.
    pub(super) fn acquire(
        &mut self,
        reg: &mut dyn Registrar,
        addr: u64,
        len: u64,
    ) -> Result<(RegionId, *mut c_void), NetError> {
        if addr.checked_add(len.max(1)).is_none() {
            return Err(NetError::invalid(
                None,
                format!(
                    "cannot register {addr:#x} + {len} B with libfabric provider {}: the range \
                     wraps the address space",
                    reg.provider()
                ),
            ));
        }
        let id = match self.find(addr, len.max(1)) {
            Some(id) => {
                self.touch(id);
                id
            }
            None => self.make(reg, addr, len.max(1))?,
        };
        let r = self
            .regions
            .get_mut(&id)
            .expect("region just found or made");
        r.in_flight += 1;
        Ok((id, r.reg.desc))
    }

    /// A request on region `id` completed (or its post failed): one request less; a detached
    /// region whose last request this was is closed. An unknown id (closed by the transport's
    /// close) is ignored.
    pub(super) fn release(&mut self, reg: &mut dyn Registrar, id: RegionId) {
        let Some(r) = self.regions.get_mut(&id) else {
            return;
        };
        debug_assert!(r.in_flight > 0, "release without a request on region {id}");
        r.in_flight = r.in_flight.saturating_sub(1);
        if r.state == RegionState::Detached && !r.pinned() {
            self.transition(reg, id, RegionState::Closed);
        }
    }

    /// Explicit registration (the trait's `register`): the region is pinned until the matching
    /// [`MrCache::deregister`] (or an invalidate of its range).
    ///
    /// # Errors
    /// As [`MrCache::acquire`].
    pub(super) fn register(
        &mut self,
        reg: &mut dyn Registrar,
        addr: u64,
        len: u64,
    ) -> Result<MrHandle, NetError> {
        let (id, _) = self.acquire(reg, addr, len.max(1))?;
        let r = self
            .regions
            .get_mut(&id)
            .expect("region just found or made");
        r.in_flight -= 1;
        r.explicit += 1;
        Ok(r.handle)
    }

    /// Drops one explicit registration of the region with `handle`. A cached region stays
    /// cached (unpinned, so evictable); a detached one closes once nothing uses it.
    ///
    /// # Errors
    /// [`NetError::invalid`] for an unknown handle, or one whose range was invalidated.
    pub(super) fn deregister(
        &mut self,
        reg: &mut dyn Registrar,
        handle: MrHandle,
    ) -> Result<(), NetError> {
        let id = self
            .regions
            .iter()
            .find(|(_, r)| r.handle == handle && r.explicit > 0)
            .map(|(id, _)| *id)
            .ok_or_else(|| {
                NetError::invalid(
                    None,
                    format!(
                        "unknown memory registration handle {handle} (never made, already \
                         released, or its range was invalidated)"
                    ),
                )
            })?;
        let r = self.regions.get_mut(&id).expect("found above");
        r.explicit -= 1;
        if r.state == RegionState::Detached && !r.pinned() {
            self.transition(reg, id, RegionState::Closed);
        }
        Ok(())
    }

    /// Takes every cached region overlapping `addr..addr+len` out of the cache (the caller is
    /// about to free or unmap that memory): unused ones are closed now, ones that posted
    /// requests still use are detached (closed when their last request completes, never handed
    /// out again). Explicit registrations of those regions end (their handles become unknown).
    ///
    /// # Errors
    /// [`NetError::invalid`] for `len == 0` or a range that wraps the address space (nothing is
    /// changed then).
    pub(super) fn invalidate(
        &mut self,
        reg: &mut dyn Registrar,
        addr: u64,
        len: u64,
    ) -> Result<Invalidated, NetError> {
        let end = match addr.checked_add(len) {
            Some(e) if len > 0 => e,
            _ => {
                return Err(NetError::invalid(
                    None,
                    format!(
                        "invalidate of {addr:#x} + {len} B: the range is empty or wraps the \
                         address space"
                    ),
                ))
            }
        };
        let hit: Vec<RegionId> = self
            .index
            .range(..(end, 0))
            .filter(|((_, e), _)| *e > addr)
            .map(|(_, id)| *id)
            .collect();
        let mut done = Invalidated::default();
        for id in hit {
            self.stats.invalidated += 1;
            let r = self.regions.get_mut(&id).expect("indexed regions are live");
            r.explicit = 0;
            if r.in_flight > 0 {
                done.deferred += 1;
                self.stats.deferred += 1;
                self.transition(reg, id, RegionState::Detached);
            } else {
                done.closed += 1;
                self.transition(reg, id, RegionState::Closed);
            }
        }
        Ok(done)
    }

    /// Closes every region (transport close), cached and detached.
    ///
    /// # Errors
    /// The first close the provider refused, after trying all (every region is gone).
    pub(super) fn close_all(&mut self, reg: &mut dyn Registrar) -> Result<(), NetError> {
        self.first_close_error = None;
        let ids: Vec<RegionId> = self.regions.keys().copied().collect();
        for id in ids {
            self.transition(reg, id, RegionState::Closed);
        }
        match self.first_close_error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Takes every region out of the cache without closing it (edge 6): the transport could not
    /// drain its requests, so the provider may still use any of them. Returns the registrations,
    /// which the caller keeps open for the life of the process.
    pub(super) fn quarantine_all(&mut self, reg: &mut dyn Registrar) -> Vec<Registration> {
        let ids: Vec<RegionId> = self.regions.keys().copied().collect();
        for id in ids {
            self.transition(reg, id, RegionState::Quarantined);
        }
        std::mem::take(&mut self.quarantined)
    }

    /// Number of registrations held (cached and detached).
    pub(super) fn len(&self) -> usize {
        self.regions.len()
    }

    /// The counters.
    pub(super) fn stats(&self) -> MrCacheStats {
        self.stats
    }

    /// The limits in effect.
    pub(super) fn limits(&self) -> MrCacheLimits {
        self.limits
    }
}

#[cfg(test)]
mod tests;
