//! The C enums' values (`NRT_PROXY_COLL_*`, `NRT_PROXY_ALGO_*`, `NRT_PROXY_DTYPE_*`,
//! `NRT_PROXY_REDOP_*`) as indices of the planner's lists, shared by the plan calls (`plan.rs`)
//! and the per-collective algorithm override (`algos.rs`).

use proxy_abi::boundary::bad;
use proxy_collectives::planner::Algorithm;
use proxy_core::base::status::NrtStatus;

/// `ALL[v]`: the C constants of each enum (`NRT_PROXY_COLL_*`, `NRT_PROXY_ALGO_*`,
/// `NRT_PROXY_DTYPE_*`, `NRT_PROXY_REDOP_*`) are the indices of the planner's lists (checked by
/// `plan.rs`'s unit tests), or `Invalid` naming the field.
pub(crate) fn pick<T: Copy>(what: &str, name: &str, all: &[T], v: u32) -> Result<T, NrtStatus> {
    match all.get(v as usize) {
        Some(&t) => Ok(t),
        None => bad(
            what,
            format_args!("{name} is {v}, not below {} (see nrt_proxy.h)", all.len()),
        ),
    }
}

/// The algorithms in the order of `NRT_PROXY_ALGO_*`.
pub(crate) const ALGORITHMS: [Algorithm; 10] = Algorithm::ALL;
