//! The memory-registration cache: registrations keyed by address range, made lazily from the
//! posted buffers' addresses (FIFO entries are reused every execution, so each range registers
//! once), released at close, on [`MrCache::invalidate`] or on an explicit deregister.
//!
//! Ranges are widened to whole pages so that neighbouring entries of one buffer share a
//! registration; a range no region covers gets its own registration (regions may overlap, and
//! are never merged: a merge would re-register ever larger unions, which costs a pinning
//! provider such as efa time proportional to the square of the buffer). Each registration asks for its own key (unique per domain: two registrations
//! with the same requested key fail with `-FI_ENOKEY` on tcp and shm, libfabric #10882); with
//! `FI_MR_PROV_KEY` the provider's key is read back with `fi_mr_key`.
//!
//! The cache does not watch the address space: a caller that unmaps or frees a registered
//! buffer must call [`MrCache::invalidate`] (the transport's `invalidate`) first, or a later
//! buffer at the same address would use the stale registration.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ptr;

use libfabric_sys as fi;
use proxy_core::progress::net::{MrHandle, NetError};

use super::fi_error_text;

/// Registrations are widened to this granularity (the smallest page size of the targets we run
/// on; a larger page only means less sharing).
const PAGE: u64 = 4096;

/// How the domain wants memory registered.
#[derive(Clone, Copy, Debug)]
pub(super) struct MrConfig {
    /// `mr_mode` of the chosen entry.
    pub mr_mode: i32,
    /// Access flags every registration asks for.
    pub access: u64,
}

/// A region's key in the cache: `(start, end)`, page-aligned, `end` exclusive. Two regions may
/// share a start (a later, longer one), never both bounds.
pub(super) type RegionKey = (u64, u64);

/// One registration.
struct Region {
    /// The libfabric registration (closed when the region leaves the cache).
    mr: *mut fi::fid_mr,
    /// `fi_mr_desc`: the `desc` argument of posts from this region.
    desc: *mut c_void,
    /// `fi_mr_key`: the remote key (for RMA; logged).
    key: u64,
    /// Posted requests using the region that have not completed.
    in_flight: u32,
    /// Explicit [`MrCache::register`] calls not yet matched by a deregister.
    explicit: u32,
    /// The handle [`MrCache::register`] returns for this region.
    handle: MrHandle,
}

/// The cache (one per domain).
pub(super) struct MrCache {
    /// Regions by `(start, end)`; lookups take any region that covers the range.
    regions: BTreeMap<RegionKey, Region>,
    /// Length of the longest region: a region covering `addr` starts at most this far below it
    /// (bounds the lookup's scan).
    longest: u64,
    /// Next requested key (unique per domain).
    next_key: u64,
    /// Next explicit handle (0 is never used: it is the trait's "no registration").
    next_handle: MrHandle,
}

impl Default for MrCache {
    fn default() -> Self {
        Self {
            regions: BTreeMap::new(),
            longest: 0,
            next_key: 1,
            next_handle: 1,
        }
    }
}

/// The widened range `[start, end)` of `addr..addr+len` (`len > 0`).
fn page_range(addr: u64, len: u64) -> Option<(u64, u64)> {
    let end = addr.checked_add(len)?.checked_add(PAGE - 1)? & !(PAGE - 1);
    Some((addr & !(PAGE - 1), end))
}

impl MrCache {
    /// Key of a region covering `addr..addr+len`, if any.
    fn find(&self, addr: u64, len: u64) -> Option<RegionKey> {
        let end = addr + len;
        // Only regions starting in `end - longest ..= addr` can cover the range; the nearest one
        // below `addr` does in the common case.
        let lowest = end.saturating_sub(self.longest);
        if lowest > addr {
            return None; // Longer than every region.
        }
        self.regions
            .range((lowest, 0)..=(addr, u64::MAX))
            .rev()
            .find(|((_, e), _)| *e >= end)
            .map(|(k, _)| *k)
    }

    /// The region covering `addr..addr+len` (`len > 0`), registering it if needed; returns its
    /// key and its descriptor.
    ///
    /// # Errors
    /// [`NetError::invalid`] naming the range when the provider refuses it.
    pub(super) fn lookup_or_register(
        &mut self,
        domain: *mut fi::fid_domain,
        ep: *mut fi::fid_ep,
        cfg: MrConfig,
        provider: &str,
        addr: u64,
        len: u64,
    ) -> Result<(RegionKey, *mut c_void), NetError> {
        let range_error = |why: String| {
            NetError::invalid(
                None,
                format!(
                    "cannot register {addr:#x}..{:#x} ({len} B) with libfabric provider \
                     {provider}: {why}",
                    addr.wrapping_add(len)
                ),
            )
        };
        if addr.checked_add(len).is_none() {
            return Err(range_error("the range wraps the address space".to_owned()));
        }
        if let Some(k) = self.find(addr, len) {
            return Ok((k, self.regions[&k].desc));
        }
        let (start, end) =
            page_range(addr, len).ok_or_else(|| range_error("range overflows".to_owned()))?;
        let key = self.next_key;
        let mut mr: *mut fi::fid_mr = ptr::null_mut();
        // SAFETY: `domain` is open; the range covers the caller's buffer (which the post's
        // contract keeps valid) widened to whole pages of the same mappings; `mr` receives a new
        // registration that the cache owns.
        let ret = unsafe {
            fi::fi_mr_reg(
                domain,
                start as *const c_void,
                (end - start) as usize,
                cfg.access,
                0,
                key,
                0,
                &mut mr,
                ptr::null_mut(),
            )
        };
        if ret != 0 {
            return Err(range_error(format!(
                "fi_mr_reg of {start:#x}..{end:#x}: {} ({ret})",
                fi_error_text(ret as isize)
            )));
        }
        self.next_key += 1;
        if cfg.mr_mode & fi::FI_MR_ENDPOINT != 0 {
            // SAFETY: `mr` was just registered and `ep` is open; FI_MR_ENDPOINT asks for exactly
            // this bind + enable before use.
            let ret = unsafe {
                let r = fi::fi_mr_bind(mr, &mut (*ep).fid, 0);
                if r != 0 {
                    r
                } else {
                    fi::fi_mr_enable(mr)
                }
            };
            if ret != 0 {
                // SAFETY: `mr` is ours and unused.
                unsafe { fi::fi_close(&mut (*mr).fid) };
                return Err(range_error(format!(
                    "fi_mr_bind/fi_mr_enable (FI_MR_ENDPOINT): {} ({ret})",
                    fi_error_text(ret as isize)
                )));
            }
        }
        // SAFETY: `mr` is a live registration.
        let (desc, key) = unsafe { (fi::fi_mr_desc(mr), fi::fi_mr_key(mr)) };
        log::debug!(
            "libfabric/{provider}: registered {start:#x}..{end:#x} ({} B) key {key:#x}",
            end - start
        );
        let handle = self.next_handle;
        self.next_handle += 1;
        self.longest = self.longest.max(end - start);
        let old = self.regions.insert(
            (start, end),
            Region {
                mr,
                desc,
                key,
                in_flight: 0,
                explicit: 0,
                handle,
            },
        );
        debug_assert!(
            old.is_none(),
            "a covering region exists: find would have returned it"
        );
        Ok(((start, end), desc))
    }

    /// A post from region `k` went in flight.
    pub(super) fn acquire(&mut self, k: RegionKey) {
        if let Some(r) = self.regions.get_mut(&k) {
            r.in_flight += 1;
        }
    }

    /// A post from region `k` completed.
    pub(super) fn release(&mut self, k: RegionKey) {
        if let Some(r) = self.regions.get_mut(&k) {
            r.in_flight = r.in_flight.saturating_sub(1);
        }
    }

    /// Explicit registration (the trait's `register`): the region stays until the matching
    /// [`MrCache::deregister`].
    ///
    /// # Errors
    /// As [`MrCache::lookup_or_register`].
    pub(super) fn register(
        &mut self,
        domain: *mut fi::fid_domain,
        ep: *mut fi::fid_ep,
        cfg: MrConfig,
        provider: &str,
        addr: u64,
        len: u64,
    ) -> Result<MrHandle, NetError> {
        let (k, _) = self.lookup_or_register(domain, ep, cfg, provider, addr, len.max(1))?;
        let r = self.regions.get_mut(&k).expect("region just found or made");
        r.explicit += 1;
        Ok(r.handle)
    }

    /// Drops one explicit registration of the region with `handle`; the region is closed when no
    /// explicit registration and no request uses it any more.
    ///
    /// # Errors
    /// [`NetError::invalid`] for an unknown handle.
    pub(super) fn deregister(&mut self, handle: MrHandle) -> Result<(), NetError> {
        let k = self
            .regions
            .iter()
            .find(|(_, r)| r.handle == handle && r.explicit > 0)
            .map(|(k, _)| *k)
            .ok_or_else(|| {
                NetError::invalid(None, format!("unknown memory registration handle {handle}"))
            })?;
        let r = self.regions.get_mut(&k).expect("found above");
        r.explicit -= 1;
        if r.explicit == 0 && r.in_flight == 0 {
            self.close_region(k)?;
        }
        Ok(())
    }

    /// Closes every region overlapping `addr..addr+len` (the caller is about to free or unmap
    /// that memory).
    ///
    /// # Errors
    /// [`NetError::invalid`] when a request still uses one of them (nothing is closed then).
    pub(super) fn invalidate(&mut self, addr: u64, len: u64) -> Result<usize, NetError> {
        let end = addr.saturating_add(len);
        let hit: Vec<RegionKey> = self
            .regions
            .range(..(end, 0))
            .filter(|((_, e), _)| *e > addr)
            .map(|(k, _)| *k)
            .collect();
        let busy: u32 = hit.iter().map(|s| self.regions[s].in_flight).sum();
        if busy > 0 {
            return Err(NetError::invalid(
                None,
                format!(
                    "cannot invalidate {addr:#x}..{end:#x}: {busy} posted requests still use its \
                     registrations"
                ),
            ));
        }
        for k in &hit {
            self.close_region(*k)?;
        }
        Ok(hit.len())
    }

    /// Closes every region (transport close). Returns the first error, after trying all.
    pub(super) fn close_all(&mut self) -> Result<(), NetError> {
        let keys: Vec<RegionKey> = self.regions.keys().copied().collect();
        let mut first = Ok(());
        for k in keys {
            let r = self.close_region(k);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Number of registrations held.
    pub(super) fn len(&self) -> usize {
        self.regions.len()
    }

    fn close_region(&mut self, k: RegionKey) -> Result<(), NetError> {
        let Some(r) = self.regions.remove(&k) else {
            return Ok(());
        };
        // SAFETY: `r.mr` is a live registration owned by the cache, closed once, here.
        let ret = unsafe { fi::fi_close(&mut (*r.mr).fid) };
        if ret != 0 {
            return Err(NetError::failure(
                None,
                format!(
                    "fi_close of the registration {:#x}..{:#x} (key {:#x}): {} ({ret})",
                    k.0,
                    k.1,
                    r.key,
                    fi_error_text(ret as isize)
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_range_widens_to_whole_pages() {
        assert_eq!(page_range(0x1001, 1), Some((0x1000, 0x2000)));
        assert_eq!(page_range(0x1000, 0x1000), Some((0x1000, 0x2000)));
        assert_eq!(page_range(0x1fff, 2), Some((0x1000, 0x3000)));
        assert_eq!(page_range(u64::MAX - 1, 1), None);
    }
}
