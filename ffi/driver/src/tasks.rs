//! Task submission on a comm's proxy queue: network tasks (their blocks, schedule and trigger
//! words copied and checked), barrier tasks, and the resubmit of a kept task.

use proxy_abi::*;
use proxy_core::base::host_word::HostWord;
use proxy_core::base::status::NrtStatus;
use proxy_core::driver::record::RunState;
use proxy_core::driver::task::{
    BarrierTask, BarrierTaskSpec, BlockFifos, CollectiveLabel, CommHandle, NetworkTask,
    NetworkTaskSpec,
};
use proxy_core::driver::trigger::{TriggerWords, MAX_TRIGGER_WORDS};

use proxy_abi::boundary::{bad, c_in, c_slice};
use proxy_abi::entry;

use crate::handles::with_comm;
use crate::objects::{ms_to_ns, Instance, SharedChannel};
use crate::types::*;

/// Host words from a C array of pointers: each non-null and 4-byte aligned.
///
/// # Safety
/// As [`c_slice`]; each word must follow the memory contract (crate docs).
unsafe fn host_words(
    what: &str,
    name: &str,
    ptr: *const *mut NccomHostWord,
    len: usize,
) -> Result<Vec<HostWord>, NrtStatus> {
    // SAFETY: the caller's contract.
    let ps = unsafe { c_slice(what, name, ptr, len) }?;
    ps.iter()
        .enumerate()
        .map(|(i, p)| {
            // SAFETY: the C contract: a host word the caller keeps live and accesses atomically.
            unsafe { HostWord::from_addr(*p as usize as u64) }.ok_or_else(|| {
                log::error!("{what}: {name}[{i}] = {p:p} is NULL or not 4-byte aligned");
                NrtStatus::Invalid
            })
        })
        .collect()
}

fn trigger_words(what: &str, words: &[HostWord]) -> Result<TriggerWords, NrtStatus> {
    if words.len() > MAX_TRIGGER_WORDS {
        return bad(
            what,
            format_args!(
                "{} trigger words (at most {MAX_TRIGGER_WORDS})",
                words.len()
            ),
        );
    }
    TriggerWords::new(words)
}

/// A task's no-progress limit from its `timeout_ms`.
fn task_timeout(inst: &Instance, timeout_ms: u64) -> Option<u64> {
    match timeout_ms {
        NRT_PROXY_TIMEOUT_DEFAULT => inst.cfg.timeout_ns(),
        NRT_PROXY_TIMEOUT_NONE => None,
        ms => Some(ms_to_ns(ms)),
    }
}

/// The task descriptor `task` of the call `what`, checked: readable (as [`c_in`]), its
/// `struct_size` this library's size of `T` and its `reserved` 0 (`size_reserved` reads the two).
///
/// # Errors
/// `NrtStatus::Invalid` (a refusal) for a NULL or misaligned `task` or another size or reserved.
///
/// # Safety
/// As [`c_in`].
unsafe fn task_desc<'a, T>(
    what: &str,
    task: *const T,
    size_reserved: impl FnOnce(&T) -> (u32, u32),
) -> Result<&'a T, NrtStatus> {
    // SAFETY: the caller's contract.
    let t = unsafe { c_in(what, "task", task) }?;
    let (size, reserved) = size_reserved(t);
    if size as usize != size_of::<T>() || reserved != 0 {
        return bad(
            what,
            format_args!("task struct_size {size} or reserved {reserved}"),
        );
    }
    Ok(t)
}

/// Copies and checks the blocks of a network task.
///
/// # Safety
/// As `nrt_proxy_submit_network`.
unsafe fn copy_blocks(what: &str, blocks: &[NrtProxyBlock]) -> Result<Vec<BlockFifos>, NrtStatus> {
    if blocks.is_empty() {
        return bad(what, format_args!("no blocks"));
    }
    let mut out = Vec::with_capacity(blocks.len());
    for (i, b) in blocks.iter().enumerate() {
        if b.stream >= NCCOM_NUM_STREAMS {
            return bad(
                what,
                format_args!(
                    "block {i}: stream {} (must be < {NCCOM_NUM_STREAMS})",
                    b.stream
                ),
            );
        }
        if b.bb == NCCOM_BB_NONE {
            return bad(what, format_args!("block {i}: block id NCCOM_BB_NONE"));
        }
        if b.n_ops == 0 {
            return bad(what, format_args!("block {i}: empty op FIFO"));
        }
        // SAFETY: the C contract: each non-NULL array is readable for its length.
        let (ops, src, dst) = unsafe {
            (
                c_slice(what, "ops", b.ops, b.n_ops)?,
                c_slice(what, "src", b.src, b.n_src)?,
                c_slice(what, "dst", b.dst, b.n_dst)?,
            )
        };
        let tx: u64 = ops.iter().map(|o| u64::from(o.tx_entry_cnt)).sum();
        let rx: u64 = ops.iter().map(|o| u64::from(o.rx_entry_cnt)).sum();
        if tx != b.n_src as u64 || rx != b.n_dst as u64 {
            return bad(
                what,
                format_args!(
                    "block {i}: {} source / {} destination entries, the ops count {tx} / {rx}",
                    b.n_src, b.n_dst
                ),
            );
        }
        if tx == 0 && rx == 0 {
            return bad(
                what,
                format_args!("block {i}: zero-length FIFOs (no entries)"),
            );
        }
        out.push(BlockFifos {
            stream: b.stream,
            bb: b.bb,
            ops: ops.to_vec(),
            src: src.to_vec(),
            dst: dst.to_vec(),
        });
    }
    Ok(out)
}

/// Submits a network task on the comm's proxy queue. Everything the descriptor points to is
/// copied (the caller may free it when the call returns); the buffers and host words the FIFOs
/// name must stay valid until the task's record is popped. The caller arms the trigger words
/// (writes `0xFFFFFFFF`) before it submits.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` for a NULL or
/// wrong-size descriptor, no blocks, stream ≥ 4, block id `NCCOM_BB_NONE`, an empty op FIFO,
/// NULL arrays with a length, FIFO lengths that differ from the ops' entry counts, a schedule
/// naming a block not in `blocks`, more than 4 trigger words, a NULL or misaligned trigger word,
/// unknown flags; `NRT_CLOSED` for a comm that is not joined; `NRT_QUEUE_FULL` when the comm's
/// ring is full (nothing was submitted: the task stays with the caller; pop records and submit
/// again).
///
/// # Safety
/// `task` NULL or a readable `nrt_proxy_network_task_t` whose arrays are readable for their
/// lengths; the memory contract for what the FIFOs name.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_submit_network(
    comm: *mut NrtProxyComm,
    task: *const NrtProxyNetworkTask,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_submit_network", {
        // SAFETY: this function's contract.
        unsafe { submit_network(WHAT, comm, task, None) }
    })
}

/// As `nrt_proxy_submit_network`, for a task whose blocks are `plan`'s FIFOs
/// (`nrt_proxy_plan_fifos`): the comm's state dump (`nrt_proxy_comm_dump`, the dump signal)
/// then names, on the task's line, the plan's collective, the algorithm it resolved to and why
/// (`collective=all-reduce algo=rabenseifner why=tuner`; why: `asked`, `env`, `api`, `tuner`,
/// `tuner-calibrated`). Only the plan's names are taken; the plan may be destroyed afterwards.
///
/// Returns as `nrt_proxy_submit_network`, and `NRT_INVALID_HANDLE` for a bad plan.
///
/// # Safety
/// As `nrt_proxy_submit_network`.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_submit_plan(
    comm: *mut NrtProxyComm,
    task: *const NrtProxyNetworkTask,
    plan: *mut NrtProxyPlan,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_submit_plan", {
        let label = crate::plan::plan_of(WHAT, plan)?.label;
        // SAFETY: this function's contract.
        unsafe { submit_network(WHAT, comm, task, Some(label)) }
    })
}

/// The body of the two network submits; `label`: what the task names in state dumps.
///
/// # Safety
/// As `nrt_proxy_submit_network`.
unsafe fn submit_network(
    what: &str,
    comm: *mut NrtProxyComm,
    task: *const NrtProxyNetworkTask,
    label: Option<CollectiveLabel>,
) -> Result<(), NrtStatus> {
    with_comm(what, comm, |e| {
        // SAFETY: `task`: the C caller's pointer, valid or NULL by this function's contract.
        let t = unsafe { task_desc(what, task, |t| (t.struct_size, t.reserved)) }?;
        let known = NRT_PROXY_TASK_WAIT_FOR_DEVICE | NRT_PROXY_TASK_SKIP | NRT_PROXY_TASK_KEEP;
        if t.flags & !known != 0 {
            return bad(what, format_args!("unknown flags {:#x}", t.flags));
        }
        e.member(what)?;
        // SAFETY: per this function's contract.
        let (blocks, schedule, words) = unsafe {
            let blocks = copy_blocks(what, c_slice(what, "blocks", t.blocks, t.n_blocks)?)?;
            let schedule = c_slice(what, "schedule", t.schedule, t.n_schedule)?;
            let words = host_words(what, "trigger_words", t.trigger_words, t.n_trigger_words)?;
            (blocks, schedule, words)
        };
        if let Some(b) = schedule
            .iter()
            .find(|s| !blocks.iter().any(|b| b.bb == **s))
        {
            return bad(
                what,
                format_args!("the schedule names block {b}, which no block has"),
            );
        }
        // SAFETY: the comm's handle lives in the entry until after the membership left
        // (destroy leaves first; the entry's field order drops the membership first), which
        // ends every task carrying it; only the queue's driver calls the seam on it.
        let handle = unsafe { CommHandle::new(e.comm.as_ptr()) }.ok_or(NrtStatus::InvalidHandle)?;
        let net = NetworkTask::new(NetworkTaskSpec {
            task_id: t.task_id,
            comm: handle,
            comm_id: e.comm_id,
            seam: e.inst.lib.seam(),
            blocks,
            schedule: (!schedule.is_empty()).then(|| schedule.to_vec()),
            triggers: trigger_words(what, &words)?,
            wait_for_device: t.flags & NRT_PROXY_TASK_WAIT_FOR_DEVICE != 0,
            skip: t.flags & NRT_PROXY_TASK_SKIP != 0 || e.inst.cfg.early_completion,
            timeout_ns: task_timeout(&e.inst, t.timeout_ms),
        })?
        .with_abort(e.abort.clone());
        let net = match label {
            Some(l) => net.with_label(l),
            None => net,
        };
        e.submit(what, Box::new(net), t.flags & NRT_PROXY_TASK_KEEP != 0)
    })
}

/// Submits a barrier task: once its trigger words are written, the comm's ranks meet (the
/// group's in-process barrier, or the barrier between processes); then the leader increments
/// every barrier-done semaphore by 1.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` for a NULL or
/// wrong-size descriptor, more than 4 trigger words, a NULL or misaligned word, unknown flags,
/// a comm without a barrier channel; `NRT_CLOSED` for a comm that is not joined;
/// `NRT_QUEUE_FULL` (the task stays with the caller).
///
/// # Safety
/// `task` NULL or a readable `nrt_proxy_barrier_task_t` whose arrays are readable for their
/// lengths; the words stay valid until the task's record is popped.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_submit_barrier(
    comm: *mut NrtProxyComm,
    task: *const NrtProxyBarrierTask,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_submit_barrier", {
        with_comm(WHAT, comm, |e| {
            // SAFETY: `task`: the C caller's pointer, valid or NULL by this function's contract.
            let t = unsafe { task_desc(WHAT, task, |t| (t.struct_size, t.reserved)) }?;
            if t.flags & !(NRT_PROXY_TASK_SKIP | NRT_PROXY_TASK_KEEP) != 0 {
                return bad(WHAT, format_args!("unknown flags {:#x}", t.flags));
            }
            e.member(WHAT)?;
            let Some(channel) = e.barrier.clone() else {
                return bad(
                    WHAT,
                    format_args!(
                        "comm {} has no barrier channel (no group, no barrier_root_addr)",
                        e.comm_id
                    ),
                );
            };
            // SAFETY: per this function's contract.
            let (words, done) = unsafe {
                (
                    host_words(WHAT, "trigger_words", t.trigger_words, t.n_trigger_words)?,
                    host_words(
                        WHAT,
                        "done_semaphores",
                        t.done_semaphores,
                        t.n_done_semaphores,
                    )?,
                )
            };
            let task = BarrierTask::new(BarrierTaskSpec {
                task_id: t.task_id,
                comm_id: e.comm_id,
                channel: Box::new(SharedChannel(channel)),
                triggers: trigger_words(WHAT, &words)?,
                leader: e.leader,
                done_semaphores: done,
                skip: t.flags & NRT_PROXY_TASK_SKIP != 0 || e.inst.cfg.early_completion,
                timeout_ns: task_timeout(&e.inst, t.timeout_ms),
            })
            .with_abort(e.abort.clone());
            e.submit(WHAT, Box::new(task), t.flags & NRT_PROXY_TASK_KEEP != 0)
        })
    })
}

/// Resubmits a finished task that was submitted with `NRT_PROXY_TASK_KEEP`, as task
/// `new_task_id`: same FIFOs, schedule, trigger words (armed again by the caller first),
/// barrier-done semaphores and flags; nothing is copied or allocated. Its record must have been
/// popped. After `NRT_QUEUE_FULL`, call again with the same two ids.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` when no kept,
/// finished task has id `task_id`; `NRT_CLOSED` for a comm that is not joined;
/// `NRT_QUEUE_FULL` (the task stays kept).
///
/// # Safety
/// None beyond the C contract; the memory contract of the original submit still holds.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_resubmit(
    comm: *mut NrtProxyComm,
    task_id: u32,
    new_task_id: u32,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_resubmit", {
        with_comm(WHAT, comm, |e| {
            e.member(WHAT)?;
            e.collect_returned();
            let i = e
                .kept
                .iter()
                .position(|t| {
                    t.record().task_id == task_id && t.record().state() == Some(RunState::Done)
                })
                .or_else(|| {
                    e.kept.iter().position(|t| {
                        t.record().task_id == new_task_id
                            && t.record().state() == Some(RunState::Init)
                    })
                });
            let Some(i) = i else {
                return bad(WHAT, format_args!("no kept, finished task {task_id} (submitted with NRT_PROXY_TASK_KEEP, its record popped)"));
            };
            let mut t = e.kept.swap_remove(i);
            if t.record().state() == Some(RunState::Done) {
                if let Err(s) = t.rearm(new_task_id) {
                    e.kept.push(t);
                    return Err(s);
                }
            }
            let m = e.member(WHAT)?;
            if let Err(rej) = m.slot.submit_returning(t) {
                e.kept.push(rej.task);
                return Err(rej.status);
            }
            Ok(())
        })
    })
}
