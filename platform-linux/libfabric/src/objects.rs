//! The libfabric objects of one transport (fabric, domain, completion queue, address vector,
//! endpoint): opened in order, closed in reverse order, and never a parent closed under a
//! child that failed to close.

use std::ptr;

use libfabric_sys as fi;
use proxy_core::progress::net::NetError;

use crate::*;

/// The libfabric objects, closed in reverse order of opening.
pub(crate) struct Objects {
    pub(crate) fabric: *mut fi::fid_fabric,
    pub(crate) domain: *mut fi::fid_domain,
    pub(crate) cq: *mut fi::fid_cq,
    pub(crate) av: *mut fi::fid_av,
    pub(crate) ep: *mut fi::fid_ep,
    /// An object failed to close (and was leaked): the objects it depends on must not be
    /// closed under it, so they are leaked too.
    pub(crate) leaking: bool,
}

impl Objects {
    pub(crate) const fn none() -> Self {
        Self {
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            cq: ptr::null_mut(),
            av: ptr::null_mut(),
            ep: ptr::null_mut(),
            leaking: false,
        }
    }

    /// Closes `ep` (only). Returns the libfabric status.
    pub(crate) fn close_ep(&mut self) -> i32 {
        let ep = std::mem::replace(&mut self.ep, ptr::null_mut());
        if ep.is_null() {
            return 0;
        }
        // SAFETY: `ep` is an open endpoint owned by this struct, closed once.
        let ret = unsafe { fi::fi_close(&mut (*ep).fid) };
        self.leaking |= ret != 0;
        ret
    }

    /// Closes everything still open, endpoint first; returns the first failure as
    /// `(object, status)`. An object that fails to close is forgotten (leaked), and so is every
    /// object opened before it: closing a fabric under a domain that refused to close
    /// (`-FI_EBUSY` on tcp after a peer vanished mid-send) frees what the provider's threads
    /// still use, and crashed a survivor here.
    pub(crate) fn close_all(&mut self) -> Option<(&'static str, i32)> {
        let ep = self.close_ep();
        let mut first = (ep != 0).then_some(("endpoint", ep));
        if self.leaking {
            let leaked: Vec<&str> = [
                (!self.av.is_null()).then_some("address vector"),
                (!self.cq.is_null()).then_some("completion queue"),
                (!self.domain.is_null()).then_some("domain"),
                (!self.fabric.is_null()).then_some("fabric"),
            ]
            .into_iter()
            .flatten()
            .collect();
            *self = Self {
                leaking: true,
                ..Self::none()
            };
            if !leaked.is_empty() {
                log::warn!("libfabric: the endpoint did not close: {leaked:?} leaked with it");
            }
            // close() has reported the endpoint's failure.
            return first;
        }
        let mut note = |what, ret: i32| {
            if ret != 0 && first.is_none() {
                first = Some((what, ret));
            }
            ret == 0
        };
        // Each pointer below is an open object owned by this struct, nulled before it is closed
        // (so closed at most once), after everything that depends on it.
        let mut children_closed = true;
        let av = std::mem::replace(&mut self.av, ptr::null_mut());
        if !av.is_null() {
            // SAFETY: `av` is open and owned; the endpoint bound to it is closed.
            children_closed &= note("address vector", unsafe { fi::fi_close(&mut (*av).fid) });
        }
        let cq = std::mem::replace(&mut self.cq, ptr::null_mut());
        if !cq.is_null() {
            // SAFETY: `cq` is open and owned; the endpoint bound to it is closed.
            children_closed &= note("completion queue", unsafe { fi::fi_close(&mut (*cq).fid) });
        }
        let domain = std::mem::replace(&mut self.domain, ptr::null_mut());
        if !domain.is_null() {
            if children_closed {
                // SAFETY: `domain` is open and owned; its endpoint, AV and CQ are closed (the
                // registrations were closed by the caller).
                children_closed &= note("domain", unsafe { fi::fi_close(&mut (*domain).fid) });
            } else {
                log::warn!("libfabric: the AV or CQ did not close: the domain is leaked");
            }
        }
        let fabric = std::mem::replace(&mut self.fabric, ptr::null_mut());
        if !fabric.is_null() {
            if children_closed {
                // SAFETY: `fabric` is open and owned; its domain is closed.
                children_closed &= note("fabric", unsafe { fi::fi_close(&mut (*fabric).fid) });
            } else {
                log::warn!("libfabric: an object of the fabric did not close: it is leaked");
            }
        }
        self.leaking |= !children_closed;
        first
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
                wait_obj: fi::FI_WAIT_NONE,
                // Room for every operation that can be outstanding at once.
                size: self.attrs.tx_size.saturating_add(self.attrs.rx_size),
                ..Default::default()
            };
            let ret = fi::fi_cq_open(o.domain, &mut cq_attr, &mut o.cq, ptr::null_mut());
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
            let ret = fi::fi_enable(o.ep);
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
