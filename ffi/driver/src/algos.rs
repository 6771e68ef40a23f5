//! The process-wide algorithm of each collective (`nrt_proxy_algorithm_set` /
//! `nrt_proxy_algorithm_get`, ABI 1.4): what `nrt_proxy_plan_create` uses in place of the
//! tuner's choice when a plan asks for `NRT_PROXY_ALGO_AUTO`.
//!
//! The table starts from the environment at its first use (the first plan, set or get):
//! `NEURON_RT_PROXY_ALGO_<COLL>` (`NEURON_RT_PROXY_ALGO_ALL_REDUCE=rabenseifner`), parsed by the
//! planner's own parser (`proxy_collectives::planner::tuner::parse_algo`, which proxy-perf uses
//! too). A set replaces the collective's entry (`NRT_PROXY_ALGO_AUTO` clears it: the tuner
//! chooses again), as an MPI_T control variable's write replaces the value its environment
//! gave. Process-wide, not per comm: a plan is made without a comm (`nrt_proxy_plan_create`),
//! and NCCL's `NCCL_ALGO` and Open MPI's `coll_tuned_<coll>_algorithm` are process-wide too; a
//! single call that wants another algorithm names it in its `nrt_proxy_plan_params_t`.
//!
//! The tuner's constants come from the calibration file `NEURON_RT_PROXY_TUNE_FILE` names
//! (`proxy_runtime::tune_file`, written by `proxy-perf --tune`), read at the same first use;
//! without it the planner's defaults for the kind of link the process's collectives take
//! (`nrt_proxy_tuner_link_set`, ABI 1.6, or `NEURON_RT_PROXY_TUNER_LINK=memory|shared-memory|
//! network`; memory when neither says: the constants of ABI 1.5). Plans with
//! `NRT_PROXY_ALGO_AUTO` and no override are chosen with them (`why=tuner-calibrated` in the
//! dump with a file, `why=tuner` with the defaults).
//!
//! On a crowded host (more ranks than the CPUs they progress on) the tuner bounds an
//! all-reduce's time by the host's work over those CPUs and may pick the hierarchical
//! all-reduce on a plan's host map, one host included (`proxy_collectives::planner::tuner`,
//! "Crowded hosts"): `nrt_proxy_tuner_progress_cpus_set`, ABI 1.7, or
//! `NEURON_RT_PROXY_TUNER_PROGRESS_CPUS` says how many CPUs; 0 (the default) leaves the bound
//! off, as before.
//!
//! A bad variable or file makes every plan, set and get answer `NRT_INVALID` with a log line
//! naming it (a job with a typo in its tuning fails at its first plan, not later with another
//! algorithm).

use std::sync::{Mutex, PoisonError};

use proxy_abi::boundary::{bad, c_out};
use proxy_abi::entry;
use proxy_abi::NRT_STATUS;
use proxy_collectives::planner::tuner::{algos_from_env, LinkKind};
use proxy_collectives::planner::{Algorithm, Collective, CollectiveLabel, HostMap, PlanParams};
use proxy_core::base::status::NrtStatus;
use proxy_runtime::tune_file::Tuning;

use crate::enums::{pick, ALGORITHMS};

/// One collective's override and where it came from (`env` or `api`, the label's `why`).
type Entry = Option<(Algorithm, &'static str)>;

/// The process's choices: every collective's entry, in [`Collective::ALL`]'s order
/// (`NRT_PROXY_COLL_*`), and the tuner's constants.
#[derive(Debug)]
struct Table {
    algos: [Entry; Collective::ALL.len()],
    /// `NEURON_RT_PROXY_TUNE_FILE`'s constants, else the defaults of `link`.
    tuning: Tuning,
    /// The kind of link the process's collectives take (`NEURON_RT_PROXY_TUNER_LINK`,
    /// `nrt_proxy_tuner_link_set`; memory when neither says).
    link: LinkKind,
    /// The CPUs one host's ranks progress on (`PlanParams::progress_cpus`:
    /// `NEURON_RT_PROXY_TUNER_PROGRESS_CPUS`, `nrt_proxy_tuner_progress_cpus_set`; 0: unknown).
    progress_cpus: u32,
    /// The host's ranks are driven by threads pinned in consecutive blocks over its progress
    /// CPUs (`PlanParams::cpu_groups`, `HostMap::cpu_blocks`: `NEURON_RT_PROXY_TUNER_CPU_BLOCKS`,
    /// `nrt_proxy_tuner_cpu_blocks_set`; off by default).
    cpu_blocks: bool,
}

/// The variable that says the host's ranks are driven by threads pinned in consecutive
/// blocks over its progress CPUs (`1`) or not (`0`, unset: unknown).
pub const TUNER_CPU_BLOCKS_ENV: &str = "NEURON_RT_PROXY_TUNER_CPU_BLOCKS";

/// The variable that gives the CPUs one host's ranks progress on (a count; 0 or unset:
/// unknown).
pub const TUNER_PROGRESS_CPUS_ENV: &str = "NEURON_RT_PROXY_TUNER_PROGRESS_CPUS";

/// The most CPUs `nrt_proxy_tuner_progress_cpus_set` takes.
pub const NRT_PROXY_MAX_PROGRESS_CPUS: u32 = 1 << 20;

/// The variable that names the kind of link (`memory`, `shared-memory`, `network`).
pub const TUNER_LINK_ENV: &str = "NEURON_RT_PROXY_TUNER_LINK";

/// The kinds of link in the order of `NRT_PROXY_LINK_*`.
pub(crate) const LINKS: [LinkKind; 3] = LinkKind::ALL;

/// The table, `None` until its first use; `Err` holds a bad variable's or file's message.
static TABLE: Mutex<Option<Result<Table, String>>> = Mutex::new(None);

/// The table the environment gives through `lookup` (a variable's value or `None`), logged at
/// info level (the constants and where they come from).
///
/// # Errors
/// The first bad variable's message, or the calibration file's.
fn load(lookup: impl Fn(&str) -> Option<String>) -> Result<Table, String> {
    let algos = algos_from_env(&lookup)?.map(|o| o.map(|a| (a, "env")));
    let tuning = Tuning::from_lookup(&lookup)?;
    let link = match lookup(TUNER_LINK_ENV).filter(|v| !v.trim().is_empty()) {
        None => LinkKind::Memory,
        Some(v) => LinkKind::from_name(&v).ok_or_else(|| {
            format!("{TUNER_LINK_ENV}={v}: not a kind of link (memory, shared-memory, network)")
        })?,
    };
    let progress_cpus = match lookup(TUNER_PROGRESS_CPUS_ENV).filter(|v| !v.trim().is_empty()) {
        None => 0,
        Some(v) => v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|&c| c <= NRT_PROXY_MAX_PROGRESS_CPUS)
            .ok_or_else(|| {
                format!(
                    "{TUNER_PROGRESS_CPUS_ENV}={v}: not a count of CPUs (0..={NRT_PROXY_MAX_PROGRESS_CPUS}; \
                     0: unknown)"
                )
            })?,
    };
    let cpu_blocks = match lookup(TUNER_CPU_BLOCKS_ENV).as_deref().map(str::trim) {
        None | Some("" | "0") => false,
        Some("1") => true,
        Some(v) => {
            return Err(format!(
                "{TUNER_CPU_BLOCKS_ENV}={v}: not 0 or 1 (1: the ranks' threads are pinned in \
                 consecutive blocks over the progress CPUs)"
            ))
        }
    };
    log::info!(
        "planner: {}; progress CPUs per host {}{}",
        tuning.describe(link),
        if progress_cpus == 0 {
            "unknown".to_string()
        } else {
            progress_cpus.to_string()
        },
        if cpu_blocks {
            ", ranks pinned in consecutive blocks over them"
        } else {
            ""
        }
    );
    Ok(Table {
        algos,
        tuning,
        link,
        progress_cpus,
        cpu_blocks,
    })
}

/// Runs `f` on the process's table, loaded from the environment at its first use.
fn with_table<R>(what: &str, f: impl FnOnce(&mut Table) -> R) -> Result<R, NrtStatus> {
    let mut t = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    match t.get_or_insert_with(|| load(env)) {
        Ok(t) => Ok(f(t)),
        Err(e) => bad(what, format_args!("{e}")),
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The index of `c` in [`Collective::ALL`] (the `NRT_PROXY_COLL_*` value).
fn index(c: Collective) -> usize {
    Collective::ALL
        .iter()
        .position(|&x| x == c)
        .unwrap_or_default()
}

/// Applies the table to `p` (a plan's parameters from C): with `NRT_PROXY_ALGO_AUTO` and an
/// override for the collective, the override; returns the plan's state-dump label (its `why`
/// `env` or `api` then, else the planner's: `asked`, `tuner`, `tuner-calibrated`).
///
/// # Errors
/// `NrtStatus::Invalid` (logged) when the environment's table is bad.
pub(crate) fn choose(what: &str, p: &mut PlanParams) -> Result<CollectiveLabel, NrtStatus> {
    with_table(what, |t| choose_in(t, p))
}

/// [`choose`] with the table `t`.
fn choose_in(t: &Table, p: &mut PlanParams) -> CollectiveLabel {
    p.cost_model = t.tuning.model(t.link);
    p.inter_host_model = t.tuning.inter_host_model(t.link);
    p.progress_cpus = t.progress_cpus;
    // The ranks in CPU blocks (the hierarchy's groups on one crowded host, `groups()`).
    p.cpu_groups = HostMap::cpu_blocks(p.nranks, t.progress_cpus)
        .filter(|_| t.cpu_blocks)
        .unwrap_or(HostMap::NONE);
    match t.algos[index(p.collective)] {
        Some((a, why)) if p.algorithm == Algorithm::Auto => {
            p.algorithm = a;
            CollectiveLabel { why, ..p.label() }
        }
        _ => p.label(),
    }
}

/// Sets the algorithm `NRT_PROXY_ALGO_AUTO` plans of `collective` (`NRT_PROXY_COLL_*`) use in
/// this process from now on (plans made before keep theirs): an `NRT_PROXY_ALGO_*` the
/// collective supports, or `NRT_PROXY_ALGO_AUTO` to let the tuner choose again. Replaces what
/// `NEURON_RT_PROXY_ALGO_<COLL>` gave. A plan that names its algorithm keeps it. Any thread.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a collective or algorithm out of range, an
/// algorithm the collective does not have (e.g. Bruck for all-reduce; the log names the ones
/// it has), or a bad `NEURON_RT_PROXY_ALGO_*` variable (nothing changes then).
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_algorithm_set(collective: u32, algorithm: u32) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_algorithm_set", {
        let c = pick(WHAT, "collective", &Collective::ALL, collective)?;
        let a = pick(WHAT, "algorithm", &ALGORITHMS, algorithm)?;
        if !a.supports(c) {
            return bad(
                WHAT,
                format_args!(
                    "{}",
                    proxy_collectives::planner::tuner::parse_algo(c, "algorithm", a.name())
                        .err()
                        .unwrap_or_default()
                ),
            );
        }
        with_table(WHAT, |t| {
            t.algos[index(c)] = (a != Algorithm::Auto).then_some((a, "api"));
        })
    })
}

/// Writes the algorithm `NRT_PROXY_ALGO_AUTO` plans of `collective` use in this process into
/// `*algorithm`: the one set (`nrt_proxy_algorithm_set`) or given by
/// `NEURON_RT_PROXY_ALGO_<COLL>`, else `NRT_PROXY_ALGO_AUTO` (the tuner chooses). Any thread.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a collective out of range, a NULL or misaligned
/// `algorithm`, or a bad `NEURON_RT_PROXY_ALGO_*` variable.
///
/// # Safety
/// `algorithm` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_algorithm_get(
    collective: u32,
    algorithm: *mut u32,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_algorithm_get", {
        let c = pick(WHAT, "collective", &Collective::ALL, collective)?;
        // SAFETY: `algorithm`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "algorithm", algorithm) }?;
        let a = with_table(WHAT, |t| {
            t.algos[index(c)].map_or(Algorithm::Auto, |(a, _)| a)
        })?;
        *out = ALGORITHMS.iter().position(|&x| x == a).unwrap_or_default() as u32;
        Ok(())
    })
}

/// Sets the kind of link this process's collectives take, `NRT_PROXY_LINK_*` (memory: ranks
/// as threads of one process; shared memory: processes of one host, libfabric `shm`; network:
/// sockets or a NIC, libfabric `tcp`, `efa`): the tuner then costs `NRT_PROXY_ALGO_AUTO` plans
/// made from now on with that kind's default constants (4 ranks, 8 B: direct in memory,
/// recursive doubling over a network, where a message costs more than a step). A calibration
/// file (`NEURON_RT_PROXY_TUNE_FILE`) overrides the defaults of every kind. Replaces what
/// `NEURON_RT_PROXY_TUNER_LINK` gave; plans made before keep their algorithm. Any thread.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a value out of range or a bad
/// `NEURON_RT_PROXY_ALGO_*` / `NEURON_RT_PROXY_TUNER_LINK` / calibration file (nothing changes).
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_tuner_link_set(link: u32) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_tuner_link_set", {
        let k = pick(WHAT, "link", &LINKS, link)?;
        with_table(WHAT, |t| {
            t.link = k;
            log::info!("planner: {}", t.tuning.describe(k));
        })
    })
}

/// Writes the kind of link the tuner costs plans for into `*link` (`NRT_PROXY_LINK_*`: the one
/// set by `nrt_proxy_tuner_link_set` or `NEURON_RT_PROXY_TUNER_LINK`, else
/// `NRT_PROXY_LINK_MEMORY`). Any thread.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a NULL or misaligned `link`, or a bad variable or
/// calibration file.
///
/// # Safety
/// `link` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_tuner_link_get(link: *mut u32) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_tuner_link_get", {
        // SAFETY: `link`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "link", link) }?;
        let k = with_table(WHAT, |t| t.link)?;
        *out = LINKS.iter().position(|&x| x == k).unwrap_or_default() as u32;
        Ok(())
    })
}

/// Sets the CPUs one host's ranks make progress on at once (`PlanParams::progress_cpus`: the
/// host's usable CPUs, or the threads that drive its ranks' queues, whichever is fewer;
/// `nrt_proxy_mode_advice` gives both), for `NRT_PROXY_ALGO_AUTO` all-reduce plans made from
/// now on. With fewer than a host's ranks the tuner bounds each algorithm's time by the host's
/// work over these CPUs and may pick `NRT_PROXY_ALGO_HIERARCHICAL` for a plan with a host map
/// (`nrt_proxy_plan_create_hosts`; a map of one host is enough): a reduce to one leader and a
/// broadcast move `2 (n − 1)` messages where recursive doubling moves `n log2 n` (8 ranks in
/// one process on 2 CPUs, 8 B: 17–19 → 13–14 µs; 32 ranks: 98 → 55). 0 turns the bound off (the
/// default). Replaces what `NEURON_RT_PROXY_TUNER_PROGRESS_CPUS` gave; plans made before keep
/// their algorithm. Any thread. Give every process of a job the same value (agree on it, e.g.
/// the fewest any host has), as every rank must plan with the same parameters: two values can
/// resolve `NRT_PROXY_ALGO_AUTO` to two algorithms, whose ops never match.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for more than 2^20 CPUs, or a bad variable or
/// calibration file (nothing changes).
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_tuner_progress_cpus_set(cpus: u32) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_tuner_progress_cpus_set", {
        if cpus > NRT_PROXY_MAX_PROGRESS_CPUS {
            return bad(
                WHAT,
                format_args!("cpus is {cpus}, above {NRT_PROXY_MAX_PROGRESS_CPUS}"),
            );
        }
        with_table(WHAT, |t| t.progress_cpus = cpus)
    })
}

/// Writes the CPUs the tuner assumes one host's ranks progress on into `*cpus` (set by
/// `nrt_proxy_tuner_progress_cpus_set` or `NEURON_RT_PROXY_TUNER_PROGRESS_CPUS`; 0: unknown,
/// the bound off). Any thread.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a NULL or misaligned `cpus`, or a bad variable or
/// calibration file.
///
/// # Safety
/// `cpus` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_tuner_progress_cpus_get(cpus: *mut u32) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_tuner_progress_cpus_get", {
        // SAFETY: `cpus`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "cpus", cpus) }?;
        *out = with_table(WHAT, |t| t.progress_cpus)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests;

/// Says whether the threads that drive one host's ranks are pinned in consecutive blocks over
/// its progress CPUs (`on` 1) or not known to be (`on` 0, the default): with 1, rank `t` of a
/// host's `T` ranks on CPU `⌊t · C / T⌋` (`C` the CPUs of `nrt_proxy_tuner_progress_cpus_set`;
/// 4 ranks on 2 CPUs: 0, 0, 1, 1). `NRT_PROXY_ALGO_HIERARCHICAL` plans of one crowded host
/// (`nrt_proxy_plan_create_hosts` with one host, more ranks than progress CPUs) then gather
/// and broadcast inside each CPU's ranks and all-reduce among the CPUs' leaders only, and the
/// tuner costs them so (measured on 2 CPUs, 4 tcp processes, 8 B: 28–31 µs against 32–34 with
/// one leader). Replaces what `NEURON_RT_PROXY_TUNER_CPU_BLOCKS` gave; plans made before keep
/// theirs. Any thread. Give every process of a job the same value, as every rank must plan with
/// the same parameters.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for `on` other than 0 or 1, or a bad variable or
/// calibration file (nothing changes).
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_tuner_cpu_blocks_set(on: u32) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_tuner_cpu_blocks_set", {
        if on > 1 {
            return bad(WHAT, format_args!("on is {on}, not 0 or 1"));
        }
        with_table(WHAT, |t| t.cpu_blocks = on == 1)
    })
}

/// Writes 1 into `*on` when the tuner takes one host's ranks to be pinned in consecutive
/// blocks over its progress CPUs (`nrt_proxy_tuner_cpu_blocks_set`,
/// `NEURON_RT_PROXY_TUNER_CPU_BLOCKS`), else 0. Any thread.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a NULL or misaligned `on`, or a bad variable or
/// calibration file.
///
/// # Safety
/// `on` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_tuner_cpu_blocks_get(on: *mut u32) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_tuner_cpu_blocks_get", {
        // SAFETY: `on`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "on", on) }?;
        *out = u32::from(with_table(WHAT, |t| t.cpu_blocks)?);
        Ok(())
    })
}
