//! What a network task is built from ([`NetworkTaskSpec`]): the progress half's comm handle
//! ([`CommHandle`]), the FIFOs of each (stream, block) ([`BlockFifos`]), and the collective and
//! algorithm the producer names for the state dump ([`CollectiveLabel`]).

use alloc::vec::Vec;
use core::ffi::c_void;
use core::ptr::NonNull;

use crate::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr};
use crate::driver::trigger::TriggerWords;
use crate::seam::SeamTable;

/// An opaque comm handle of the progress half (`nccom_comm_t *`), as the seam takes it.
///
/// Used only by the worker thread that steps the task that carries it.
///
/// Seed: `encd_get_global_comm()`'s result, passed to every trampoline, §3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommHandle(NonNull<c_void>);

// SAFETY: the handle is only dereferenced by the progress half, called from the one worker
// thread that steps the task (the constructor's contract forbids concurrent use).
unsafe impl Send for CommHandle {}

impl CommHandle {
    /// Wraps `comm`, or `None` for a null pointer.
    ///
    /// # Safety
    /// `comm` must be a live comm of the library whose [`SeamTable`] the task carries, and must
    /// stay live until every task carrying this handle is DONE (the comm leaves its queue, which
    /// ends its tasks, before it is destroyed). While a task carrying it is submitted, no thread
    /// other than the queue's worker may call the seam on this comm.
    pub unsafe fn new(comm: *mut c_void) -> Option<Self> {
        NonNull::new(comm).map(Self)
    }

    /// The raw pointer.
    pub fn as_ptr(&self) -> *mut c_void {
        self.0.as_ptr()
    }
}

/// The three FIFOs of one basic block on one stream, as `start` takes them.
///
/// Seed: `enc_fifo_set` (`bb_map[bb]`), §3.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockFifos {
    /// Stream, `0..4`.
    pub stream: u32,
    /// Basic-block id (not `u32::MAX`, which means "none").
    pub bb: u32,
    /// Op infos (`net_ops_info_fifo`).
    pub ops: Vec<NetOpInfo>,
    /// Source entries (`src_addr_fifo`).
    pub src: Vec<NetSrcAddr>,
    /// Destination entries (`dest_addr_fifo`).
    pub dst: Vec<NetDestAddr>,
}

/// Everything a network task is built from.
pub struct NetworkTaskSpec {
    /// The producer's id for the task (goes into the record).
    pub task_id: u32,
    /// The progress half's comm.
    pub comm: CommHandle,
    /// The comm id (goes into the record).
    pub comm_id: u32,
    /// The seam the task calls (in-process or from a loaded library).
    pub seam: SeamTable,
    /// Every (stream, block) FIFO set, filed in this order at INIT.
    pub blocks: Vec<BlockFifos>,
    /// Block schedule: `None` runs the distinct blocks of `blocks` in the order of first
    /// appearance, each once; `Some` is an explicit order, repeats allowed (a loop).
    pub schedule: Option<Vec<u32>>,
    /// Trigger words (one per stream; the producer arms them before submitting).
    pub triggers: TriggerWords,
    /// Wait for the trigger words after INIT (seed: ctx `wait_for_device`).
    pub wait_for_device: bool,
    /// Skip the network stage: INIT goes straight to DONE with success (seed: the
    /// early-completion debug path, `NEURON_RT_DBG_PROXY_EARLY_COMPLETION`).
    pub skip: bool,
    /// No-progress limit in nanoseconds once the task has left INIT (`None`: none;
    /// `NEURON_RT_EXEC_TIMEOUT`).
    pub timeout_ns: Option<u64>,
}

/// What a network task runs, named in its state-dump line (`collective=all-reduce
/// algo=rabenseifner why=tuner`): the producer's planner knows it, the task only carries it.
/// Static names, so a task carries them with no allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CollectiveLabel {
    /// The collective's name (`all-reduce`, ...; `proxy-collectives`' `Collective::name`).
    pub collective: &'static str,
    /// The algorithm the plan resolved to (`ring`, `rabenseifner`, ...).
    pub algorithm: &'static str,
    /// Why that algorithm, one word without spaces: `asked` (the caller named it), `env` (a
    /// `NEURON_RT_PROXY_ALGO_<COLL>` variable), `api` (a process-wide override set through
    /// the C API), `tuner` (the cost model with its default constants), `tuner-calibrated`
    /// (with constants from a calibration file).
    pub why: &'static str,
}
