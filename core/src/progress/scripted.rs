//! The scripted op kind: a proxy op that moves no bytes and follows a script (complete after N
//! ticks, idle on chosen ticks, fail on a chosen tick). It exercises the op-FIFO, the driver and
//! the seam without a transport; the real ops are in [`crate::progress::sendrecv`].

use crate::progress::op::{OpCtx, OpKind, ProxyOp, Slot8, OP_STATE_DONE};
use crate::status::NrtStatus;

/// What a scripted op does in each execution of its block (ticks count from 1 and restart when
/// the op is recycled).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Script {
    /// The op reaches state 0 on this tick (values below 1 count as 1).
    pub complete_after: u32,
    /// Bit `t - 1` set: report idle on tick `t` (ticks above 64 are never idle).
    pub idle_mask: u64,
    /// Fail with `NetworkProxyFailure` on this tick (0 = never).
    pub fail_tick: u32,
}

/// The scripted op kind.
pub static SCRIPTED_OP: OpKind = OpKind {
    name: "scripted",
    progress: scripted_progress,
};

/// Builds a scripted op from `script` (called by `Comm::start_scripted`).
pub(crate) fn init(op: &mut ProxyOp, script: &Script, index: u32) {
    op.progress = Slot8(Some(SCRIPTED_OP.progress));
    op.transport_comm = Slot8(Some(&SCRIPTED_OP));
    op.net_op_idx = index;
    op.peer = -1;
    op.script_complete_after = script.complete_after.max(1);
    op.script_idle_mask = script.idle_mask;
    op.script_fail_tick = script.fail_tick;
}

fn scripted_progress(op: &mut ProxyOp, _ctx: &mut OpCtx<'_>) -> Result<(), NrtStatus> {
    op.ticks += 1;
    let t = op.ticks;
    if op.script_fail_tick != 0 && t == op.script_fail_tick {
        log::error!(
            "scripted op {} failed on tick {t} as scripted",
            op.net_op_idx
        );
        return Err(NrtStatus::NetworkProxyFailure);
    }
    op.idle = i32::from(t <= 64 && op.script_idle_mask & (1u64 << (t - 1)) != 0);
    if t >= op.script_complete_after {
        op.state = OP_STATE_DONE;
    }
    Ok(())
}
