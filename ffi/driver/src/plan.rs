//! The planner through C (`nrt_proxy_plan_*`, ABI 1.1): the FIFOs and device programs of the
//! standard collectives for one rank, from `proxy-collectives`' planner ([`plan_blocks`]), so a
//! C runtime need not build them by hand.
//!
//! A plan is made once from `nrt_proxy_plan_params_t` and kept behind a generation-checked
//! handle (kind 4, `proxy_abi::handles`); it holds no address. The caller asks its layout (the
//! buffer, scratch and host-word sizes), its (stream, block) parts and their block schedule,
//! places the buffers and host words, and has each part's three FIFOs written into its own
//! arrays with those addresses, as an `nrt_proxy_block_t` ready for `nrt_proxy_submit_network`.
//! A C device that runs the collective itself reads each part's device program
//! (`nrt_proxy_plan_program`): the handshakes, host-index posts, semaphore waits, reductions
//! and copies of one execution of the block, the program `proxy-collectives`' interpreter runs.
//!
//! Arrays follow the size-in / size-out rule: the caller passes each array with its capacity
//! and gets the count written; an array too small answers `NRT_INVALID` and nothing is written.
//!
//! Seed: the producer's FIFO build (`enc_channel`, `build_fifo_block_ids`, nrt:0x124f20) and
//! the device side of `nec.h` (§3, §5).

use std::sync::Arc;

use proxy_abi::NRT_STATUS;
use proxy_collectives::planner::{
    plan_blocks, BlockPlans, Buf, Collective, CollectiveLabel, DataType, HostMap, Instr, Loc,
    NecOptions, PlanParams, RedOp, Side, DEFAULT_CHUNK_BYTES, DEFAULT_PIPELINE_DEPTH, MAX_HOSTS,
    WORDS_PER_OP,
};
use proxy_core::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr, MAX_ENTRIES_PER_OP};
use proxy_core::base::status::NrtStatus;

use proxy_abi::boundary::{bad, c_handle_out, c_in, c_out, c_slice, insert_live};
use proxy_abi::entry;

use crate::enums::{pick, ALGORITHMS};
use crate::types::*;

use crate::{instance_id, remove_live_retrying, with_live_retrying};
use proxy_abi::handles::HandleTable;

/// Handle kind of plans (bits 48..52 of a handle).
const KIND_PLAN: u8 = 4;

static PLANS: HandleTable<Arc<Planned>> = HandleTable::with_instance(KIND_PLAN, instance_id);

/// A plan behind a handle: its parts ([`BlockPlans`], which it dereferences to) and the label
/// that tasks submitted with it (`nrt_proxy_submit_plan`) name in state dumps.
pub(crate) struct Planned {
    /// The (stream, block) parts.
    pub(crate) plans: BlockPlans,
    /// The collective, the algorithm it resolved to and why.
    pub(crate) label: CollectiveLabel,
}

impl std::ops::Deref for Planned {
    type Target = BlockPlans;

    fn deref(&self) -> &BlockPlans {
        &self.plans
    }
}

const _: () = assert!(WORDS_PER_OP == NRT_PROXY_PLAN_WORDS_PER_OP);

/// Number of live plans (tests and diagnostics).
pub fn live_plans() -> usize {
    PLANS.live()
}

pub(crate) fn plan_of(what: &str, plan: *mut NrtProxyPlan) -> Result<Arc<Planned>, NrtStatus> {
    let h = plan.addr();
    with_live_retrying(what, "plan", &PLANS, h, |p| Ok(p.clone()))
}

fn flag(what: &str, name: &str, v: u32) -> Result<bool, NrtStatus> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => bad(what, format_args!("{name} is {v}, not 0 or 1")),
    }
}

/// The planner's parameters from the C struct, every field checked (the planner checks the
/// ranges: ranks, depth, split, nec).
fn params(what: &str, c: &NrtProxyPlanParams) -> Result<PlanParams, NrtStatus> {
    if c.struct_size as usize != size_of::<NrtProxyPlanParams>() {
        return bad(
            what,
            format_args!(
                "params.struct_size is {}, this library's nrt_proxy_plan_params_t is {} bytes",
                c.struct_size,
                size_of::<NrtProxyPlanParams>()
            ),
        );
    }
    let mut p = PlanParams::new(
        pick(what, "collective", &Collective::ALL, c.collective)?,
        c.count,
        pick(what, "dtype", &DataType::ALL, c.dtype)?,
        c.rank,
        c.nranks,
    );
    p.algorithm = pick(what, "algorithm", &ALGORITHMS, c.algorithm)?;
    p.op = pick(what, "op", &RedOp::ALL, c.op)?;
    p.root = c.root;
    p.in_place = flag(what, "in_place", c.in_place)?;
    p.pipeline_depth = c.pipeline_depth;
    p.streams = c.streams;
    p.blocks = c.blocks;
    p.chunk_bytes = c.chunk_bytes;
    if c.direct_threshold_bytes != 0 {
        p.direct_threshold_bytes = c.direct_threshold_bytes;
    }
    p.nec = NecOptions {
        early_recv: c.nec_early_recv,
        early_send: flag(what, "nec_early_send", c.nec_early_send)?,
        idx_wrap: c.nec_idx_wrap,
        credits: c.nec_credits,
    };
    if p.chunk_bytes == 0 {
        return bad(what, format_args!("chunk_bytes is 0"));
    }
    Ok(p)
}

/// Refuses, before planning, a count no plan can carry within the FIFO limit: the planner
/// builds every entry before it checks the limit, so a tiny chunk with a huge count would cost
/// memory and time only to be refused.
///
/// The bound: with `n >= 2` ranks every rank sends, or receives, at least `count` elements in
/// total (all-reduce and reduce-scatter, all-gather, all-to-all, broadcast and send-recv alike),
/// over at most `max(2(n − 1), n) <= 2n` ops, so some op side carries at least `count / 2n`
/// elements in entries of at most `chunk_elems`: past `2^16` entries (`MAX_ENTRIES_PER_OP`)
/// once `count > 2^17 · n · chunk_elems`. One rank has no ops at all.
fn too_many_entries(what: &str, p: &PlanParams) -> Result<(), NrtStatus> {
    let bound =
        2 * u128::from(MAX_ENTRIES_PER_OP) * u128::from(p.nranks) * u128::from(p.chunk_elems());
    if p.nranks >= 2 && u128::from(p.count) > bound {
        return bad(
            what,
            format_args!(
                "count {} in chunks of {} elements needs more than {MAX_ENTRIES_PER_OP} entries \
                 on an op side with {} ranks: use a larger chunk",
                p.count,
                p.chunk_elems(),
                p.nranks
            ),
        );
    }
    Ok(())
}

/// Fills `*params` with the defaults: `struct_size`, all-reduce, `NRT_PROXY_ALGO_AUTO`, f32,
/// sum, rank 0 of 1, root 0, out of place, chunk 512 KiB, pipeline depth 4, one stream, one
/// block, the `nec` options off, count 0, the default direct threshold. The caller sets at
/// least the collective, count, dtype, rank and nranks.
///
/// Returns `NRT_SUCCESS`, or `NRT_INVALID` for a NULL or misaligned `params`.
///
/// # Safety
/// `params` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_plan_params_init(params: *mut NrtProxyPlanParams) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_plan_params_init", {
        // SAFETY: `params`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "params", params) }?;
        *out = NrtProxyPlanParams {
            struct_size: size_of::<NrtProxyPlanParams>() as u32,
            collective: NRT_PROXY_COLL_ALL_REDUCE,
            algorithm: NRT_PROXY_ALGO_AUTO,
            dtype: NRT_PROXY_DTYPE_F32,
            op: NRT_PROXY_REDOP_SUM,
            rank: 0,
            nranks: 1,
            root: 0,
            in_place: 0,
            pipeline_depth: DEFAULT_PIPELINE_DEPTH,
            streams: 1,
            blocks: 1,
            nec_early_recv: 0,
            nec_early_send: 0,
            nec_idx_wrap: 0,
            nec_credits: 0,
            count: 0,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            direct_threshold_bytes: 0,
        };
        Ok(())
    })
}

/// Plans one rank's part of one collective: every non-empty (stream, block) part with its own
/// op tags (the same on every rank), host words and scratch (`plan_blocks` of
/// `proxy-collectives`). Every rank of the collective makes its own plan with the same
/// parameters but `rank`. With `NRT_PROXY_ALGO_AUTO` the algorithm is the process-wide one of
/// the collective (`nrt_proxy_algorithm_set`, `NEURON_RT_PROXY_ALGO_<COLL>`) if any, else the
/// tuner's choice; `nrt_proxy_plan_layout` says which it is.
///
/// Returns `NRT_SUCCESS` with `*out` the plan; `NRT_INVALID` for a NULL `params` or `out`, a
/// wrong `struct_size`, a value out of range (the log says which: rank / root / nranks,
/// pipeline depth 0, streams outside 1..=4, blocks 0, `nec_credits` above 128, `nec_idx_wrap`
/// 1, a chunk so small an op would need more than 65536 entries, sizes that overflow, too many
/// tags), a bad `NEURON_RT_PROXY_ALGO_*` variable; `NRT_RESOURCE` when too many plans are live
/// (4096). `*out` is NULL on failure.
///
/// # Safety
/// `params` NULL or readable; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_plan_create(
    params: *const NrtProxyPlanParams,
    out: *mut *mut NrtProxyPlan,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_plan_create", {
        // SAFETY: `out`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_handle_out(WHAT, out) }?;
        // SAFETY: `params`: the C caller's pointer, valid or NULL by this function's contract.
        let p = self::params(WHAT, unsafe { c_in(WHAT, "params", params) }?)?;
        create(WHAT, p, out)
    })
}

/// The body of the two creates: overrides, planning, the handle.
fn create(what: &str, mut p: PlanParams, out: &mut *mut NrtProxyPlan) -> Result<(), NrtStatus> {
    too_many_entries(what, &p)?;
    let label = crate::algos::choose(what, &mut p)?;
    let plans = plan_blocks(&p).or_else(|e| bad(what, format_args!("{e}")))?;
    *out = insert_live(what, "plan", &PLANS, Arc::new(Planned { plans, label }))?;
    Ok(())
}

/// As `nrt_proxy_plan_create`, with the ranks' host map: host `h` holds the
/// `ranks_per_host[h]` ranks after those of hosts `0..h` (ranks numbered host by host; the
/// counts may differ and add up to `nranks`; at most 64 hosts). The hierarchical all-reduce
/// (`NRT_PROXY_ALGO_HIERARCHICAL`) runs over it, and with `NRT_PROXY_ALGO_AUTO` the tuner costs
/// the flat algorithms at the calibration file's inter-host constants
/// (`NEURON_RT_PROXY_TUNE_FILE`, `inter_host_cost_model`) and picks the hierarchical one where
/// the link between hosts is the slow one. `n_hosts` 0 (and `ranks_per_host` NULL): no map,
/// as `nrt_proxy_plan_create`. Every rank passes the same map.
///
/// Returns as `nrt_proxy_plan_create`, and `NRT_INVALID` for a NULL `ranks_per_host` with
/// `n_hosts` above 0, more than 64 hosts, a host of 0 ranks, or counts that do not add up to
/// `nranks`.
///
/// # Safety
/// As `nrt_proxy_plan_create`; `ranks_per_host` NULL or readable for `n_hosts` elements.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_plan_create_hosts(
    params: *const NrtProxyPlanParams,
    ranks_per_host: *const u32,
    n_hosts: usize,
    out: *mut *mut NrtProxyPlan,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_plan_create_hosts", {
        // SAFETY: `out`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_handle_out(WHAT, out) }?;
        // SAFETY: `params`: the C caller's pointer, valid or NULL by this function's contract.
        let mut p = self::params(WHAT, unsafe { c_in(WHAT, "params", params) }?)?;
        if n_hosts > 0 {
            // SAFETY: the caller's contract (readable for `n_hosts` elements).
            let sizes = unsafe { c_slice(WHAT, "ranks_per_host", ranks_per_host, n_hosts) }?;
            p.hosts = HostMap::new(sizes).map_or_else(
                || {
                    bad(
                        WHAT,
                        format_args!(
                            "ranks_per_host: {n_hosts} hosts (1..={MAX_HOSTS}), each of 1 rank or more"
                        ),
                    )
                },
                Ok,
            )?;
        }
        create(WHAT, p, out)
    })
}

/// Destroys a plan. FIFOs already written from it (and tasks submitted with them) are not
/// affected.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown plan.
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_plan_destroy(plan: *mut NrtProxyPlan) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_plan_destroy", {
        remove_live_retrying(WHAT, "plan", &PLANS, plan.addr()).map(drop)
    })
}

/// Writes the plan's layout: the buffers it needs, its host words, its parts and streams, the
/// algorithm it resolved to. The caller sets `layout->struct_size` first.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad plan; `NRT_INVALID` for a NULL
/// `layout` or a wrong `struct_size` (nothing written then).
///
/// # Safety
/// `layout` NULL or readable and writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_plan_layout(
    plan: *mut NrtProxyPlan,
    layout: *mut NrtProxyPlanLayout,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_plan_layout", {
        let p = plan_of(WHAT, plan)?;
        // SAFETY: `layout`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "layout", layout) }?;
        if out.struct_size as usize != size_of::<NrtProxyPlanLayout>() {
            return bad(
                WHAT,
                format_args!(
                    "layout->struct_size is {}, this library's nrt_proxy_plan_layout_t is {} bytes",
                    out.struct_size,
                    size_of::<NrtProxyPlanLayout>()
                ),
            );
        }
        let l = p.layout;
        *out = NrtProxyPlanLayout {
            struct_size: size_of::<NrtProxyPlanLayout>() as u32,
            algorithm: ALGORITHMS
                .iter()
                .position(|&a| a == p.params.algorithm)
                .map_or(NRT_PROXY_ALGO_DIRECT, |i| i as u32),
            n_blocks: p.blocks.len() as u32,
            host_words: p.host_words(),
            streams: p.streams().iter().fold(0, |m, s| m | 1 << s),
            in_place: u32::from(l.in_place),
            input_bytes: l.input_bytes,
            output_bytes: l.output_bytes,
            scratch_bytes: l.scratch_bytes,
            input_offset: l.input_offset,
            output_offset: l.output_offset,
        };
        Ok(())
    })
}

/// A C output array of `cap` elements, checked for `need` of them: NULL with a non-zero
/// `need`, misalignment and `cap < need` are `Invalid`.
///
/// # Safety
/// A non-null, aligned `ptr` must be valid for `cap` writes of `T` for the returned lifetime.
unsafe fn out_array<'a, T>(
    what: &str,
    name: &str,
    ptr: *mut T,
    cap: usize,
    need: usize,
) -> Result<&'a mut [T], NrtStatus> {
    if cap < need {
        return bad(
            what,
            format_args!("{name}: capacity {cap}, {need} needed (nothing written)"),
        );
    }
    if need == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() || !ptr.is_aligned() {
        return bad(what, format_args!("{name} is NULL or misaligned"));
    }
    if need > isize::MAX as usize / size_of::<T>().max(1) {
        return bad(what, format_args!("{name}: {need} elements are too many"));
    }
    // SAFETY: non-null, aligned; the caller's contract gives `cap >= need` writable elements.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, need) })
}

/// Writes the plan's (stream, block) parts, stream-major then by block id, into `infos`
/// (capacity `cap`) and their number into `*count` (`layout.n_blocks`).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad plan; `NRT_INVALID` for a NULL
/// `count`, a NULL `infos` with parts to write, or `cap` below the number of parts (nothing
/// written then).
///
/// # Safety
/// `infos` NULL or writable for `cap` elements; `count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_plan_blocks(
    plan: *mut NrtProxyPlan,
    infos: *mut NrtProxyPlanBlockInfo,
    cap: usize,
    count: *mut usize,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_plan_blocks", {
        let p = plan_of(WHAT, plan)?;
        // SAFETY: `count`: the C caller's pointer, valid or NULL by this function's contract.
        let count = unsafe { c_out(WHAT, "count", count) }?;
        // SAFETY: the caller's contract.
        let out = unsafe { out_array(WHAT, "infos", infos, cap, p.blocks.len()) }?;
        for (o, b) in out.iter_mut().zip(&p.blocks) {
            *o = NrtProxyPlanBlockInfo {
                stream: b.stream,
                bb: b.block,
                n_ops: b.plan.ops.len() as u32,
                n_src: b.plan.src.len() as u32,
                n_dst: b.plan.dst.len() as u32,
                n_instrs: b.plan.program.len() as u32,
                word_base: b.word_base,
                host_words: b.plan.host_words(),
                elem_lo: b.elems.0,
                elem_hi: b.elems.1,
            };
        }
        *count = p.blocks.len();
        Ok(())
    })
}

/// Writes the block schedule of `loops` passes (block ids `1..=blocks`, repeated `loops`
/// times; every stream follows it, a block with no part on a stream is done at once there)
/// into `schedule` (capacity `cap`) and its length into `*count` (`loops × blocks`): the
/// `schedule` of `nrt_proxy_network_task_t`.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad plan; `NRT_INVALID` for `loops` 0, a
/// NULL `count` or `schedule`, or `cap` too small (nothing written then).
///
/// # Safety
/// `schedule` NULL or writable for `cap` elements; `count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_plan_schedule(
    plan: *mut NrtProxyPlan,
    loops: u32,
    schedule: *mut u32,
    cap: usize,
    count: *mut usize,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_plan_schedule", {
        let p = plan_of(WHAT, plan)?;
        // SAFETY: `count`: the C caller's pointer, valid or NULL by this function's contract.
        let count = unsafe { c_out(WHAT, "count", count) }?;
        if loops == 0 {
            return bad(WHAT, format_args!("loops is 0"));
        }
        let need = (loops as usize).saturating_mul(p.params.blocks as usize);
        // SAFETY: the caller's contract.
        let out = unsafe { out_array(WHAT, "schedule", schedule, cap, need) }?;
        // As `BlockPlans::schedule`, written in place (no copy of a long schedule).
        let ids = (0..loops).flat_map(|_| 1..=p.params.blocks);
        for (o, b) in out.iter_mut().zip(ids) {
            *o = b;
        }
        *count = need;
        Ok(())
    })
}

/// Writes the three FIFOs of part `index` (`0..layout.n_blocks`, the order of
/// `nrt_proxy_plan_blocks`) with the buffers and host words at `*addrs` into the caller's
/// arrays (capacities `ops_cap`, `src_cap`, `dst_cap`), and `*block` the
/// `nrt_proxy_block_t` over them (stream, block id, the three arrays and their counts), ready
/// for `nrt_proxy_submit_network`. The plan's `nec_*` options are in every op info.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad plan; `NRT_INVALID` for an `index`
/// out of range, a NULL `addrs` or `block`, a NULL array with entries to write, a capacity
/// below the part's count (`nrt_proxy_plan_blocks`), a `word_stride` that is 0 or not a
/// multiple of 4, a `words` address that is 0 or not 4-byte aligned, a buffer address that is
/// 0 where the layout needs the buffer, or addresses whose ranges overflow (nothing written
/// then).
///
/// # Safety
/// `addrs` NULL or readable; the three arrays NULL or writable for their capacities; `block`
/// NULL or writable; the arrays and `block` do not overlap. The addresses are only written into the FIFOs, never dereferenced here.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn nrt_proxy_plan_fifos(
    plan: *mut NrtProxyPlan,
    index: u32,
    addrs: *const NrtProxyPlanAddresses,
    ops: *mut NetOpInfo,
    ops_cap: usize,
    src: *mut NetSrcAddr,
    src_cap: usize,
    dst: *mut NetDestAddr,
    dst_cap: usize,
    block: *mut NrtProxyBlock,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_plan_fifos", {
        let p = plan_of(WHAT, plan)?;
        let Some(b) = p.blocks.get(index as usize) else {
            return bad(
                WHAT,
                format_args!("index {index}: the plan has {} parts", p.blocks.len()),
            );
        };
        // SAFETY: `addrs`: the C caller's pointer, valid or NULL by this function's contract.
        let a = unsafe { c_in(WHAT, "addrs", addrs) }?;
        // SAFETY: `block`: the C caller's pointer, valid or NULL by this function's contract.
        let block = unsafe { c_out(WHAT, "block", block) }?;
        check_addresses(WHAT, &p, a)?;
        // SAFETY: the caller's contract (each array writable for its capacity).
        let ops_out = unsafe { out_array(WHAT, "ops", ops, ops_cap, b.plan.ops.len()) }?;
        // SAFETY: as above.
        let src_out = unsafe { out_array(WHAT, "src", src, src_cap, b.plan.src.len()) }?;
        // SAFETY: as above.
        let dst_out = unsafe { out_array(WHAT, "dst", dst, dst_cap, b.plan.dst.len()) }?;
        let f = b.fifos(&proxy_collectives::planner::Addresses {
            input: a.input,
            output: a.output,
            scratch: a.scratch,
            words: a.words,
            word_stride: a.word_stride,
        });
        ops_out.copy_from_slice(&f.ops);
        src_out.copy_from_slice(&f.src);
        dst_out.copy_from_slice(&f.dst);
        // The caller's own pointers (NULL stays NULL where a FIFO is empty).
        *block = NrtProxyBlock {
            stream: b.stream,
            bb: b.block,
            ops,
            n_ops: f.ops.len(),
            src,
            n_src: f.src.len(),
            dst,
            n_dst: f.dst.len(),
        };
        Ok(())
    })
}

/// The addresses are usable for the plan: host words placed, every needed buffer placed, no
/// range past the end of the address space.
pub(crate) fn check_addresses(
    what: &str,
    p: &BlockPlans,
    a: &NrtProxyPlanAddresses,
) -> Result<(), NrtStatus> {
    let s = a.word_stride;
    if s == 0 || !s.is_multiple_of(4) {
        return bad(
            what,
            format_args!("word_stride {s} is 0 or not a multiple of 4"),
        );
    }
    let words = u64::from(p.host_words());
    if words > 0 && (a.words == 0 || !a.words.is_multiple_of(4)) {
        return bad(
            what,
            format_args!("words {:#x} is 0 or not 4-byte aligned", a.words),
        );
    }
    let l = p.layout;
    let fits = |base: u64, len: u64| base.checked_add(len).is_some();
    if !s.checked_mul(words).is_some_and(|n| fits(a.words, n)) {
        return bad(
            what,
            format_args!("the host words overflow the address space"),
        );
    }
    for (name, base, len) in [
        ("input", a.input, l.input_bytes),
        ("output", a.output, l.output_bytes),
        ("scratch", a.scratch, l.scratch_bytes),
    ] {
        if len > 0 && (base == 0 || !fits(base, len)) {
            return bad(
                what,
                format_args!("{name} {base:#x} is 0 or its {len} bytes overflow"),
            );
        }
    }
    Ok(())
}

const fn buf(b: Buf) -> u32 {
    match b {
        Buf::Input => NRT_PROXY_BUF_INPUT,
        Buf::Output => NRT_PROXY_BUF_OUTPUT,
        Buf::Scratch => NRT_PROXY_BUF_SCRATCH,
    }
}

const fn side(s: Side) -> u32 {
    match s {
        Side::Send => NRT_PROXY_SIDE_SEND,
        Side::Recv => NRT_PROXY_SIDE_RECV,
    }
}

fn instr(i: &Instr) -> NrtProxyPlanInstr {
    let none = Loc::new(Buf::Input, 0);
    let (kind, op, s, upto, dst, a, b, count) = match *i {
        Instr::Arm { op, side: sd } => (NRT_PROXY_INSTR_ARM, op, sd, 0, none, none, none, 0),
        Instr::WaitHandshake { op, side: sd } => (
            NRT_PROXY_INSTR_WAIT_HANDSHAKE,
            op,
            sd,
            0,
            none,
            none,
            none,
            0,
        ),
        Instr::Post { op, side: sd, upto } => {
            (NRT_PROXY_INSTR_POST, op, sd, upto, none, none, none, 0)
        }
        Instr::Wait { op, side: sd, upto } => {
            (NRT_PROXY_INSTR_WAIT, op, sd, upto, none, none, none, 0)
        }
        Instr::Reduce { dst, a, b, elems } => {
            (NRT_PROXY_INSTR_REDUCE, 0, Side::Send, 0, dst, a, b, elems)
        }
        Instr::Copy { dst, src, bytes } => (
            NRT_PROXY_INSTR_COPY,
            0,
            Side::Send,
            0,
            dst,
            src,
            none,
            bytes,
        ),
    };
    NrtProxyPlanInstr {
        kind,
        op,
        side: side(s),
        upto,
        dst_buf: buf(dst.buf),
        a_buf: buf(a.buf),
        b_buf: buf(b.buf),
        reserved: 0,
        dst_offset: dst.offset,
        a_offset: a.offset,
        b_offset: b.offset,
        count,
    }
}

/// Writes the device program of part `index` (one execution of the block, see
/// `nrt_proxy_plan_instr_t`) into `instrs` (capacity `cap`) and its length into `*count`
/// (`n_instrs` of `nrt_proxy_plan_blocks`). Host words of an instruction's op `k` are the
/// part's words `word_base + 6k + NRT_PROXY_PLAN_WORD_*`.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad plan; `NRT_INVALID` for an `index`
/// out of range, a NULL `count`, a NULL `instrs` with instructions to write, or `cap` too
/// small (nothing written then).
///
/// # Safety
/// `instrs` NULL or writable for `cap` elements; `count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_plan_program(
    plan: *mut NrtProxyPlan,
    index: u32,
    instrs: *mut NrtProxyPlanInstr,
    cap: usize,
    count: *mut usize,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_plan_program", {
        let p = plan_of(WHAT, plan)?;
        let Some(b) = p.blocks.get(index as usize) else {
            return bad(
                WHAT,
                format_args!("index {index}: the plan has {} parts", p.blocks.len()),
            );
        };
        // SAFETY: `count`: the C caller's pointer, valid or NULL by this function's contract.
        let count = unsafe { c_out(WHAT, "count", count) }?;
        let prog = &b.plan.program;
        // SAFETY: the caller's contract.
        let out = unsafe { out_array(WHAT, "instrs", instrs, cap, prog.len()) }?;
        for (o, i) in out.iter_mut().zip(prog) {
            *o = instr(i);
        }
        *count = prog.len();
        Ok(())
    })
}

#[cfg(test)]
mod tests;
