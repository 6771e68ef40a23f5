//! The init half's calls that need no comm: the ABI version, status names, the process-wide
//! device callbacks, and the in-memory groups (their handle table and life).

use std::ffi::c_char;
use std::sync::Arc;

use proxy_abi::*;
use proxy_core::base::status::NrtStatus;
use proxy_core::progress::mem_transport::MemFabric;

use proxy_abi::boundary::{c_handle, c_handle_out, c_in, insert_live, remove_live};
use proxy_abi::entry;
use proxy_abi::handles::HandleTable;

use crate::device;

/// Every live group created through [`nccom_mem_group_create`].
pub(crate) static GROUPS: HandleTable<Arc<MemFabric>> = HandleTable::new(0x6A0B);

/// Number of live in-memory groups (diagnostics and tests).
pub fn live_mem_groups() -> usize {
    GROUPS.live()
}

/// The ABI version of this library: `NCCOM_PROXY_ABI_VERSION`, `(major << 16) | minor`. A
/// caller built against a header with another major must not use the library.
#[no_mangle]
pub extern "C" fn nccom_abi_version() -> u32 {
    NCCOM_PROXY_ABI_VERSION
}

/// The name of a status value (`"NRT_SUCCESS"`, ...), or `"NRT_UNKNOWN_STATUS"` for a value
/// `nrt_status.h` does not define. The string is static; never free it.
///
/// Seed: `nrt_get_status_as_str`.
#[no_mangle]
pub extern "C" fn nrt_get_status_as_str(status: NRT_STATUS) -> *const c_char {
    // The one table both C libraries answer from.
    proxy_abi::status_name(status).as_ptr()
}

/// Sets the process-wide device callbacks that comms created later with `config.callbacks ==
/// NULL` use (the table is copied; comms keep the table they were created with). NULL clears
/// the registration.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a table without `nec_inc_semaphore` or a misaligned
/// pointer.
///
/// # Safety
/// `callbacks` must be NULL or point to a readable `nccom_device_callbacks_t` whose non-NULL
/// members are functions with exactly their declared signatures.
///
/// Seed: the runtime handing its `nec_*` thunks to libnccom, §1.
#[no_mangle]
pub unsafe extern "C" fn nccom_register_device_callbacks(
    callbacks: *const NccomDeviceCallbacks,
) -> NRT_STATUS {
    entry!(WHAT = "nccom_register_device_callbacks", {
        if callbacks.is_null() {
            device::register(None);
            return Ok(());
        }
        // SAFETY: `callbacks`: the C caller's pointer, valid or NULL by this function's contract.
        let t = unsafe { c_in(WHAT, "callbacks", callbacks) }?;
        let Some(dev) = device::CDevice::from_table(t) else {
            log::error!("{WHAT}: nec_inc_semaphore is NULL");
            return Err(NrtStatus::Invalid);
        };
        device::register(Some(dev));
        Ok(())
    })
}

/// Creates a group of `nranks` in-memory ranks (`1 ..= 256`) in this process and stores its
/// handle in `*out` (NULL on failure). Comms created over the group with
/// `NCCOM_TRANSPORT_MEM` exchange bytes through it; each rank can be taken by one comm. The
/// group may be destroyed while its comms live (they keep what they use).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a NULL `out` or `nranks` out of range;
/// `NRT_RESOURCE` when too many groups are live.
///
/// # Safety
/// `out` must be NULL or point to a writable `nccom_mem_group_t *`.
#[no_mangle]
pub unsafe extern "C" fn nccom_mem_group_create(
    nranks: u32,
    out: *mut *mut NccomMemGroup,
) -> NRT_STATUS {
    entry!(WHAT = "nccom_mem_group_create", {
        // SAFETY: `out`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_handle_out(WHAT, out) }?;
        let fabric = MemFabric::new(nranks).map_err(|e| {
            log::error!("{WHAT}: {e}");
            NrtStatus::Invalid
        })?;
        *out = insert_live(WHAT, "group", &GROUPS, fabric)?;
        Ok(())
    })
}

/// Destroys a group handle. Comms created over it keep working.
///
/// Returns `NRT_SUCCESS`, or `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown group.
///
/// # Safety
/// None beyond the C contract (the handle is checked, never dereferenced).
#[no_mangle]
pub unsafe extern "C" fn nccom_mem_group_destroy(group: *mut NccomMemGroup) -> NRT_STATUS {
    entry!(WHAT = "nccom_mem_group_destroy", {
        let h = c_handle(WHAT, "group", group)?;
        let fabric = remove_live(WHAT, "group", &GROUPS, h)?;
        drop(fabric);
        Ok(())
    })
}
