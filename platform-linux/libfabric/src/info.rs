//! Provider selection: the `fi_getinfo` hints, the provider preference and the one `fi_info`
//! entry the transport opens.
//!
//! Hints (LIBFABRIC-NOTES.md: these work on efa, shm and `tcp;ofi_rxm`): `FI_EP_RDM`, caps
//! `FI_MSG | FI_TAGGED` plus `FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE`
//! where offered, mode `FI_CONTEXT | FI_CONTEXT2`, mr_mode
//! `LOCAL | VIRT_ADDR | ALLOCATED | PROV_KEY | ENDPOINT`, `FI_THREAD_DOMAIN`, tx/rx `msg_order`
//! `FI_ORDER_SAS`, `data_progress` and `control_progress` `FI_PROGRESS_MANUAL` (the transport
//! moves the provider only from its own calls: `poll`, `test`, a post's back-pressure; a provider
//! whose model is automatic satisfies a manual request, libfabric ranks AUTO above MANUAL, and on
//! `tcp;ofi_rxm` a data model other than AUTO keeps rxm from starting its connection-manager
//! thread), API version 1.17. No `FI_LOCAL_COMM` / `FI_REMOTE_COMM` (shm then offers
//! nothing) and no `FI_DIRECTED_RECV` (`tcp;ofi_rxm` lacks it; the source rank is in the tag).

use std::ffi::{c_char, CStr};
use std::ptr;

use libfabric_sys as fi;
use proxy_core::progress::net::NetError;

use super::fi_error_text;

/// The libfabric API version the transport asks for: 1.17, the oldest it supports, so that a
/// newer library keeps the 1.17 semantics.
pub(super) const API_VERSION: u32 = fi::fi_version_num(1, 17);

/// Capabilities every entry must have.
const CAPS_REQUIRED: u64 = fi::FI_MSG | fi::FI_TAGGED;
/// Capabilities asked for in the first query; entries come from the second query (required caps
/// only) for a provider that offers nothing with them.
const CAPS_RMA: u64 =
    fi::FI_RMA | fi::FI_READ | fi::FI_WRITE | fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE;
/// The memory-registration modes the transport can work with (it registers whenever a
/// provider asks for any of them, and binds registrations with `FI_MR_ENDPOINT`).
const MR_MODES: i32 = fi::FI_MR_LOCAL
    | fi::FI_MR_VIRT_ADDR
    | fi::FI_MR_ALLOCATED
    | fi::FI_MR_PROV_KEY
    | fi::FI_MR_ENDPOINT;

/// Attribute overrides for the hints.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct HintSizes {
    /// `tx_attr.size`, or the provider's default.
    pub tx_size: Option<usize>,
    /// `rx_attr.size`, or the provider's default.
    pub rx_size: Option<usize>,
}

/// An owned `fi_info` list from `fi_getinfo` (freed on drop).
pub(super) struct InfoList {
    /// Head of the list; never null.
    head: *mut fi::fi_info,
}

impl InfoList {
    /// Calls `fi_getinfo` with the transport's hints (`with_rma`: also ask for the RMA caps).
    ///
    /// Returns `Ok(None)` when no provider matches (`-FI_ENODATA`).
    pub(super) fn query(with_rma: bool, sizes: HintSizes) -> Result<Option<Self>, NetError> {
        let hints = Hints::new()?;
        // SAFETY: `hints.0` is a non-null `fi_info` from `fi_dupinfo(NULL)` (fi_allocinfo), whose
        // attribute pointers are all allocated; we only write plain fields.
        unsafe {
            let h = &mut *hints.0;
            h.caps = CAPS_REQUIRED | if with_rma { CAPS_RMA } else { 0 };
            h.mode = fi::FI_CONTEXT | fi::FI_CONTEXT2;
            (*h.ep_attr).type_ = fi::FI_EP_RDM;
            (*h.domain_attr).mr_mode = MR_MODES;
            (*h.domain_attr).threading = fi::FI_THREAD_DOMAIN;
            (*h.domain_attr).data_progress = fi::FI_PROGRESS_MANUAL;
            (*h.domain_attr).control_progress = fi::FI_PROGRESS_MANUAL;
            (*h.tx_attr).msg_order = fi::FI_ORDER_SAS;
            (*h.rx_attr).msg_order = fi::FI_ORDER_SAS;
            if let Some(n) = sizes.tx_size {
                (*h.tx_attr).size = n;
            }
            if let Some(n) = sizes.rx_size {
                (*h.rx_attr).size = n;
            }
        }
        let mut head: *mut fi::fi_info = ptr::null_mut();
        // SAFETY: node and service may be null; `hints` is a valid fi_info; `head` receives a
        // list that we own and free with fi_freeinfo.
        let ret =
            unsafe { fi::fi_getinfo(API_VERSION, ptr::null(), ptr::null(), 0, hints.0, &mut head) };
        if ret == -(fi::FI_ENODATA as i32) || (ret == 0 && head.is_null()) {
            return Ok(None);
        }
        if ret != 0 {
            return Err(NetError::failure(
                None,
                format!("fi_getinfo failed: {} ({ret})", fi_error_text(ret as isize)),
            ));
        }
        Ok(Some(Self { head }))
    }

    /// The entries, in libfabric's order (its preference).
    pub(super) fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur.is_null() {
                return None;
            }
            // SAFETY: `cur` is an element of the list we own; it lives as long as `self`.
            let info = unsafe { &*cur };
            cur = info.next;
            Some(Entry { info })
        })
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        // SAFETY: `head` came from fi_getinfo and is freed exactly once, here.
        unsafe { fi::fi_freeinfo(self.head) };
    }
}

/// An `fi_info` used as hints (freed on drop).
struct Hints(*mut fi::fi_info);

impl Hints {
    fn new() -> Result<Self, NetError> {
        // SAFETY: fi_dupinfo(NULL) is fi_allocinfo: a zeroed fi_info with allocated attributes.
        let p = unsafe { fi::fi_dupinfo(ptr::null()) };
        if p.is_null() {
            return Err(NetError::failure(
                None,
                "fi_allocinfo failed (out of memory)",
            ));
        }
        Ok(Self(p))
    }
}

impl Drop for Hints {
    fn drop(&mut self) {
        // SAFETY: allocated by fi_dupinfo, freed once; we set no string fields of our own.
        unsafe { fi::fi_freeinfo(self.0) };
    }
}

/// One `fi_info` entry of an [`InfoList`].
#[derive(Clone, Copy)]
pub(super) struct Entry<'a> {
    /// The entry (valid while its list lives).
    pub info: &'a fi::fi_info,
}

impl Entry<'_> {
    /// The provider name (`"tcp;ofi_rxm"`, `"shm"`, `"efa"`), or `""` if absent.
    pub(super) fn prov_name(&self) -> String {
        // SAFETY: fabric_attr of a returned entry is valid; prov_name is null or a C string.
        unsafe { cstr_or_empty((*self.info.fabric_attr).prov_name) }
    }

    /// The domain name (for logs).
    pub(super) fn domain_name(&self) -> String {
        // SAFETY: as for prov_name.
        unsafe { cstr_or_empty((*self.info.domain_attr).name) }
    }

    /// `true` when the entry's source address is a loopback address (IPv4 127.0.0.0/8, IPv6
    /// `::1`), or its domain is named `lo` when the address is in another format: such an
    /// endpoint cannot be reached from another host.
    pub(super) fn loopback(&self) -> bool {
        let i = self.info;
        let a = i.src_addr.cast::<u8>();
        let by_addr = if a.is_null() {
            None
        } else {
            match i.addr_format {
                f if f == fi::FI_SOCKADDR_IN && i.src_addrlen >= 8 => {
                    // struct sockaddr_in: family (2), port (2), address (4, network order).
                    // SAFETY: src_addr holds src_addrlen >= 8 bytes (fi_getinfo's contract).
                    Some(unsafe { *a.add(4) } == 127)
                }
                f if f == fi::FI_SOCKADDR_IN6 && i.src_addrlen >= 24 => {
                    // struct sockaddr_in6: family, port, flowinfo (4), address (16).
                    // SAFETY: src_addr holds src_addrlen >= 24 bytes (fi_getinfo's contract).
                    let addr = unsafe { core::slice::from_raw_parts(a.add(8), 16) };
                    Some(addr[..15].iter().all(|&b| b == 0) && addr[15] == 1)
                }
                _ => None,
            }
        };
        by_addr.unwrap_or_else(|| self.domain_name() == "lo")
    }

    /// Does the entry offer what the transport needs: RDM, tagged messages, send-after-send
    /// order on both sides.
    fn usable(&self) -> bool {
        // SAFETY: the attribute pointers of a returned entry are valid.
        let (ep_type, tx_order, rx_order) = unsafe {
            (
                (*self.info.ep_attr).type_,
                (*self.info.tx_attr).msg_order,
                (*self.info.rx_attr).msg_order,
            )
        };
        ep_type == fi::FI_EP_RDM
            && self.info.caps & CAPS_REQUIRED == CAPS_REQUIRED
            && tx_order & fi::FI_ORDER_SAS != 0
            && rx_order & fi::FI_ORDER_SAS != 0
    }
}

/// # Safety
/// `p` is null or a valid NUL-terminated string.
unsafe fn cstr_or_empty(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: the caller's contract.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Does provider name `offered` (`"tcp;ofi_rxm"`) answer the request `wanted`? Exactly
/// (ignoring case), or, for a request without `;`, by its core (first) component, so `"tcp"`
/// selects `"tcp;ofi_rxm"`.
pub(super) fn name_matches(wanted: &str, offered: &str) -> bool {
    offered.eq_ignore_ascii_case(wanted)
        || (!wanted.contains(';')
            && offered
                .split(';')
                .next()
                .is_some_and(|core| core.eq_ignore_ascii_case(wanted)))
}

/// How the provider was chosen (for the log line and error messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Request {
    /// An explicit argument.
    Explicit(String),
    /// The `FI_PROVIDER` environment variable (a single name).
    Env(String),
    /// The default order: efa, shm (all ranks local), `tcp;ofi_rxm`.
    Auto {
        /// Every rank runs on this host.
        all_ranks_local: bool,
    },
}

impl Request {
    /// From the explicit argument, else `FI_PROVIDER` when it names one provider (a list or an
    /// `^exclusion` is left to libfabric's own filter), else the default order.
    pub(super) fn from(explicit: Option<&str>, all_ranks_local: bool) -> Self {
        if let Some(p) = explicit.map(str::trim).filter(|p| !p.is_empty()) {
            return Self::Explicit(p.to_owned());
        }
        match std::env::var("FI_PROVIDER") {
            Ok(v) if !v.trim().is_empty() && !v.contains(',') && !v.starts_with('^') => {
                Self::Env(v.trim().to_owned())
            }
            _ => Self::Auto { all_ranks_local },
        }
    }

    /// Names in order of preference.
    fn preference(&self) -> Vec<&str> {
        match self {
            Self::Explicit(p) | Self::Env(p) => vec![p.as_str()],
            Self::Auto {
                all_ranks_local: true,
            } => vec!["efa", "shm", "tcp;ofi_rxm"],
            Self::Auto {
                all_ranks_local: false,
            } => vec!["efa", "tcp;ofi_rxm"],
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Explicit(p) => format!("libfabric provider \"{p}\" (requested explicitly)"),
            Self::Env(p) => format!("libfabric provider \"{p}\" (from FI_PROVIDER)"),
            Self::Auto { all_ranks_local } => {
                format!(
                    "a libfabric provider among {} (automatic choice)",
                    self.preference().join(", ")
                ) + if *all_ranks_local {
                    ""
                } else {
                    "; not every rank is on this host"
                }
            }
        }
    }
}

/// Picks the entry to open: the first provider name of `request`'s preference that some usable
/// entry offers; among that provider's entries an exact name match first, then an entry without
/// `FI_COLLECTIVE` (libfabric lists near-duplicates that add it; the transport does not use it),
/// then libfabric's own order. `rma` is searched first, `plain` (no RMA caps) second. When the
/// ranks span hosts (`loopback_ok` false) an entry on a loopback address is never chosen: it
/// could not be reached from the other hosts (libfabric's tcp offers only `lo` while the other
/// interfaces are down).
///
/// # Errors
/// [`NetError::invalid`] naming the requested provider and listing what was offered; when the
/// provider was offered only on a loopback address and the ranks span hosts, saying so.
pub(super) fn choose<'a>(
    request: &Request,
    rma: Option<&'a InfoList>,
    plain: Option<&'a InfoList>,
    loopback_ok: bool,
) -> Result<Entry<'a>, NetError> {
    let lists = [rma, plain];
    let mut loopback_only = None;
    for wanted in request.preference() {
        for list in lists.iter().flatten() {
            let mut best: Option<(u8, Entry<'a>)> = None;
            for e in list.entries().filter(Entry::usable) {
                let name = e.prov_name();
                if !name_matches(wanted, &name) {
                    continue;
                }
                if !loopback_ok && e.loopback() {
                    loopback_only.get_or_insert((name, e.domain_name()));
                    continue;
                }
                // Lower rank is better: exact name, then no FI_COLLECTIVE.
                let rank = u8::from(!name.eq_ignore_ascii_case(wanted)) * 2
                    + u8::from(e.info.caps & fi::FI_COLLECTIVE != 0);
                if best.as_ref().is_none_or(|(r, _)| rank < *r) {
                    best = Some((rank, e));
                }
            }
            if let Some((_, e)) = best {
                return Ok(e);
            }
        }
    }
    if let Some((prov, domain)) = loopback_only {
        return Err(NetError::invalid(
            None,
            format!(
                "{} is offered only on a loopback address ({prov}, domain {domain}), but the \
                 ranks span more than one host: the interface to the other hosts is down or not \
                 offered (FI_TCP_IFACE={})",
                request.describe(),
                std::env::var("FI_TCP_IFACE").unwrap_or_else(|_| "unset".into())
            ),
        ));
    }
    let mut offered: Vec<String> = lists
        .iter()
        .flatten()
        .flat_map(|l| l.entries().filter(Entry::usable).map(|e| e.prov_name()))
        .collect();
    offered.sort();
    offered.dedup();
    let env = match (request, std::env::var("FI_PROVIDER")) {
        (_, Err(_)) => String::new(),
        (Request::Env(_), _) => {
            "; libfabric itself loads only the providers FI_PROVIDER names".into()
        }
        (_, Ok(v)) => format!("; FI_PROVIDER={v} also restricts what libfabric offers"),
    };
    Err(NetError::invalid(
        None,
        format!(
            "{} is not offered for FI_EP_RDM with FI_TAGGED and FI_ORDER_SAS (offered: {}){env}",
            request.describe(),
            if offered.is_empty() {
                "none".to_owned()
            } else {
                offered.join(", ")
            },
        ),
    ))
}

#[cfg(test)]
mod tests;
