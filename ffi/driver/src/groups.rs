//! Groups of this process's ranks: `nrt_proxy_group_create` (an in-memory transport group of
//! the progress half and an in-process barrier) and `nrt_proxy_group_destroy`.

use proxy_abi::*;
use proxy_core::driver::task::SharedMemBarrier;

use proxy_abi::boundary::{c_handle_out, insert_live};
use proxy_abi::entry;

use crate::handles::{instance_of, remove_live_retrying, GROUPS};
use crate::objects::{Group, SendMemGroup};
use crate::types::*;

/// Creates a group of `nranks` ranks of this process: an in-memory transport group of the
/// progress half (`nccom_mem_group_create`) and an in-process barrier. Each rank's comm is
/// created with `group` set.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad instance; `NRT_INVALID` for a NULL
/// `out` or `nranks` out of range; `NRT_RESOURCE` when too many groups are live.
///
/// # Safety
/// `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_group_create(
    inst: *mut NrtProxy,
    nranks: u32,
    out: *mut *mut NrtProxyGroup,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_group_create", {
        // SAFETY: `out`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_handle_out(WHAT, out) }?;
        let inst = instance_of(WHAT, inst)?;
        let mem = inst.lib.mem_group(nranks).inspect_err(|e| {
            log::error!("{WHAT}: nccom_mem_group_create({nranks}): {e}");
        })?;
        let barrier = SharedMemBarrier::new(nranks)?;
        let g = Box::new(Group {
            inst,
            nranks,
            mem: SendMemGroup(mem),
            barrier,
            bells: Default::default(),
        });
        *out = insert_live(WHAT, "group", &GROUPS, g)?;
        Ok(())
    })
}

/// Destroys a group handle. Comms created over it keep working.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown group.
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_group_destroy(group: *mut NrtProxyGroup) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_group_destroy", {
        remove_live_retrying(WHAT, "group", &GROUPS, group.addr()).map(drop)
    })
}
