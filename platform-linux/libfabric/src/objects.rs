//! The libfabric objects of one transport (fabric, domain, completion queue, address vector,
//! endpoint): opened in order, closed in reverse order, and never a parent closed under a
//! child that failed to close (what is left open goes to the quarantine, `quarantine.rs`).

use std::ptr;

use libfabric_sys as fi;
use proxy_core::progress::net::NetError;

use crate::*;

/// The libfabric objects, closed in reverse order of opening. A null pointer is an object not
/// open (never opened, closed, or handed to the quarantine).
pub(crate) struct Objects {
    pub(crate) fabric: *mut fi::fid_fabric,
    pub(crate) domain: *mut fi::fid_domain,
    pub(crate) cq: *mut fi::fid_cq,
    pub(crate) av: *mut fi::fid_av,
    pub(crate) ep: *mut fi::fid_ep,
    /// The CQ's wait descriptor (`FI_WAIT_FD`, `fi_control(FI_GETWAIT)`; `idle.rs`), or -1.
    /// Owned by the CQ: closing the CQ closes it.
    pub(crate) cq_fd: i32,
}

/// Closes `*obj` unless it is null; nulls it when the close succeeded and keeps it (still open)
/// when the provider refused. Returns the libfabric status.
///
/// # Safety
/// `*obj` is null or an open object owned by the caller whose children are all closed.
unsafe fn close_one<T>(obj: &mut *mut T, fid: impl FnOnce(*mut T) -> *mut fi::fid) -> i32 {
    if obj.is_null() {
        return 0;
    }
    // SAFETY: the caller's contract: `*obj` is open and owned, its children are closed.
    let ret = unsafe { fi::fi_close(fid(*obj)) };
    if ret == 0 {
        *obj = ptr::null_mut();
    }
    ret
}

impl Objects {
    pub(crate) const fn none() -> Self {
        Self {
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            cq: ptr::null_mut(),
            av: ptr::null_mut(),
            ep: ptr::null_mut(),
            cq_fd: -1,
        }
    }

    /// Closes the endpoint (only). Returns the libfabric status; on a refusal the endpoint
    /// stays open (for the quarantine).
    pub(crate) fn close_ep(&mut self) -> i32 {
        // SAFETY: `ep` is null or open and owned by this struct; nothing is opened under it.
        unsafe { close_one(&mut self.ep, |p| &mut (*p).fid) }
    }

    /// Closes the AV, the CQ, the domain and the fabric, each after what depends on it (the
    /// caller has closed the endpoint and the registrations). Returns the first refusal as
    /// `(object, status)`: the refused object and every parent of it stay open (closing a
    /// fabric under a domain that refused, `-FI_EBUSY` on tcp after a peer vanished mid-send,
    /// frees what the provider still uses and crashed a survivor here), for the quarantine.
    pub(crate) fn close_all(&mut self) -> Option<(&'static str, i32)> {
        if !self.ep.is_null() {
            return Some(("endpoint", -(fi::FI_EBUSY as i32)));
        }
        let mut first = None;
        let mut note = |what, ret: i32| {
            if ret != 0 && first.is_none() {
                first = Some((what, ret));
            }
        };
        // SAFETY: (each call) the object is null or open and owned by this struct; the endpoint
        // bound to the AV and the CQ is closed, the domain is closed only once the AV and the CQ
        // are, the fabric only once the domain is.
        unsafe {
            note("address vector", close_one(&mut self.av, |p| &mut (*p).fid));
            note(
                "completion queue",
                close_one(&mut self.cq, |p| &mut (*p).fid),
            );
            if self.av.is_null() && self.cq.is_null() {
                note("domain", close_one(&mut self.domain, |p| &mut (*p).fid));
            }
            if self.domain.is_null() {
                note("fabric", close_one(&mut self.fabric, |p| &mut (*p).fid));
            }
        }
        first
    }

    /// Takes every object still open, children first, without closing any (for the
    /// quarantine); the struct is empty afterwards.
    pub(crate) fn take_open(&mut self) -> Vec<*mut fi::fid> {
        let mut open = Vec::new();
        // SAFETY: (each) a non-null pointer is an open object of this struct: taking the address
        // of its `fid` field reads nothing.
        unsafe {
            if !self.ep.is_null() {
                open.push(&raw mut (*self.ep).fid);
            }
            if !self.av.is_null() {
                open.push(&raw mut (*self.av).fid);
            }
            if !self.cq.is_null() {
                open.push(&raw mut (*self.cq).fid);
            }
            if !self.domain.is_null() {
                open.push(&raw mut (*self.domain).fid);
            }
            if !self.fabric.is_null() {
                open.push(&raw mut (*self.fabric).fid);
            }
        }
        *self = Self::none();
        open
    }
}

impl LibfabricTransport {
    /// fabric, domain, CQ, AV, endpoint, bind, enable, getname.
    pub(crate) fn open_objects(&mut self, info: *mut fi::fi_info) -> Result<(), NetError> {
        let prov = self.attrs.provider.clone();
        let fail = |call: &str, ret: isize| {
            NetError::failure(
                None,
                format!(
                    "libfabric provider {prov}: {call} failed: {} ({ret})",
                    fi_error_text(ret)
                ),
            )
        };
        let o = &mut self.obj;
        // SAFETY: (whole block) `info` is a valid entry of a live fi_getinfo list; every out
        // pointer is a field of `self.obj`, which owns what it receives and closes it on drop;
        // the attribute structs are zero-initialised (all fields "unspecified") before use.
        unsafe {
            let ret = fi::fi_fabric((*info).fabric_attr, &mut o.fabric, ptr::null_mut());
            if ret != 0 {
                return Err(fail("fi_fabric", ret as isize));
            }
            let ret = fi::fi_domain(o.fabric, info, &mut o.domain, ptr::null_mut());
            if ret != 0 {
                return Err(fail("fi_domain", ret as isize));
            }
            let mut cq_attr = fi::fi_cq_attr {
                format: fi::FI_CQ_FORMAT_TAGGED,
                wait_obj: if self.cq_wait_fd {
                    fi::FI_WAIT_FD
                } else {
                    fi::FI_WAIT_NONE
                },
                // Room for every operation that can be outstanding at once.
                size: self.attrs.tx_size.saturating_add(self.attrs.rx_size),
                ..Default::default()
            };
            let mut ret = fi::fi_cq_open(o.domain, &mut cq_attr, &mut o.cq, ptr::null_mut());
            if ret != 0 && self.cq_wait_fd {
                // shm has no descriptor to offer (-FI_ENOSYS): its drivers keep yielding.
                log::info!(
                    "libfabric provider {prov}: no CQ wait descriptor ({}): waits yield",
                    fi_error_text(ret as isize)
                );
                cq_attr.wait_obj = fi::FI_WAIT_NONE;
                ret = fi::fi_cq_open(o.domain, &mut cq_attr, &mut o.cq, ptr::null_mut());
            } else if ret == 0 && self.cq_wait_fd {
                let mut fd: i32 = -1;
                let r = fi::fi_cq_getwait_fd(o.cq, &mut fd);
                if r == 0 && fd >= 0 {
                    o.cq_fd = fd;
                } else {
                    log::info!(
                        "libfabric provider {prov}: fi_control(FI_GETWAIT) answered {}: waits \
                         yield",
                        fi_error_text(r as isize)
                    );
                }
            }
            if ret != 0 {
                return Err(fail("fi_cq_open", ret as isize));
            }
            let av_type = match (*(*info).domain_attr).av_type {
                fi::FI_AV_UNSPEC => fi::FI_AV_TABLE,
                t => t,
            };
            let mut av_attr = fi::fi_av_attr {
                type_: av_type,
                count: self.nranks as usize,
                ..Default::default()
            };
            let ret = fi::fi_av_open(o.domain, &mut av_attr, &mut o.av, ptr::null_mut());
            if ret != 0 {
                return Err(fail("fi_av_open", ret as isize));
            }
            let ret = fi::fi_endpoint(o.domain, info, &mut o.ep, ptr::null_mut());
            if ret != 0 {
                return Err(fail("fi_endpoint", ret as isize));
            }
            let ret = fi::fi_ep_bind(o.ep, &mut (*o.av).fid, 0);
            if ret != 0 {
                return Err(fail("fi_ep_bind(av)", ret as isize));
            }
            let ret = fi::fi_ep_bind(o.ep, &mut (*o.cq).fid, fi::FI_TRANSMIT | fi::FI_RECV);
            if ret != 0 {
                return Err(fail("fi_ep_bind(cq)", ret as isize));
            }
            if prov == "shm" {
                // Our own name, without `/`: shm's mmap protocol (its large messages when CMA
                // is unavailable, shm_cma.rs) names a file per message `<endpoint name>_<id>`,
                // which shm_open refuses for the default `fi_shm://...` (EINVAL).
                let name = super::shm_cma::endpoint_name();
                let mut c = Vec::with_capacity(name.len() + 1);
                c.extend_from_slice(name.as_bytes());
                c.push(0);
                let ret = fi::fi_setname(&mut (*o.ep).fid, c.as_mut_ptr().cast(), c.len());
                if ret != 0 {
                    return Err(fail("fi_setname", ret as isize));
                }
            }
            let mut ret = fi::fi_enable(o.ep);
            if ret == -(fi::FI_EBUSY as i32) && prov == "shm" {
                // libfabric 1.17's shm found a region file of the same name left by a dead
                // process whose pid this process now has (a killed process never unlinks its
                // region); it unlinked the file and answered -FI_EBUSY (`smr_retry_map`).
                // Once more, now that the name is free.
                log::warn!(
                    "libfabric provider shm: fi_enable: a stale shm region of a dead process \
                     with this pid was in the way (removed by the provider); enabling again"
                );
                ret = fi::fi_enable(o.ep);
            }
            if ret != 0 {
                return Err(fail("fi_enable", ret as isize));
            }
            let mut len = 0usize;
            let ret = fi::fi_getname(&mut (*o.ep).fid, ptr::null_mut(), &mut len);
            if ret != 0 && ret != -(fi::FI_ETOOSMALL as i32) {
                return Err(fail("fi_getname", ret as isize));
            }
            let mut name = vec![0u8; len.max(1)];
            len = name.len();
            let ret = fi::fi_getname(&mut (*o.ep).fid, name.as_mut_ptr().cast(), &mut len);
            if ret != 0 {
                return Err(fail("fi_getname", ret as isize));
            }
            name.truncate(len);
            self.local_name = name;
        }
        Ok(())
    }
}
