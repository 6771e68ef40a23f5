//! The scripted op kind: a proxy op that moves no bytes and follows a script (complete after N
//! ticks, idle on chosen ticks, fail on a chosen tick). It exercises the op-FIFO, the driver and
//! the seam without a transport; the real ops are in [`crate::progress::sendrecv`].
//!
//! Test scaffolding, compiled only under `cfg(test)` or the `testing` feature. A scripted op's
//! script is kept beside the op, in its comm's [`ScriptTable`] (keyed by the op's address,
//! which is stable: ops live in pool blocks), so the ABI proxy op carries no test fields.

use crate::base::status::NrtStatus;
use crate::progress::op::{OpCtx, OpKind, OpSide, OpState, ProxyOp, Slot8};
pub use crate::progress::script::{Script, ScriptTable};

/// The key of `op` in a [`ScriptTable`].
pub(crate) fn key(op: &ProxyOp) -> usize {
    op as *const ProxyOp as usize
}

/// The scripted op kind.
pub static SCRIPTED_OP: OpKind = OpKind {
    name: "scripted",
    side: OpSide::Neither,
    progress: scripted_progress,
};

/// Builds a scripted op (called by `Comm::start_scripted`, which files its script in the
/// comm's [`ScriptTable`] under [`key`]).
pub(crate) fn init(op: &mut ProxyOp, index: u32) {
    op.progress = Slot8(Some(SCRIPTED_OP.progress));
    op.transport_comm = Slot8(Some(&SCRIPTED_OP));
    op.net_op_idx = index;
    op.peer = -1;
}

fn scripted_progress(op: &mut ProxyOp, ctx: &mut OpCtx<'_>) -> Result<(), NrtStatus> {
    let Some(script) = ctx.scripts.get(&key(op)).copied() else {
        log::error!("scripted op {} has no script in its comm", op.net_op_idx);
        return Err(NrtStatus::NetworkProxyFailure);
    };
    op.ticks += 1;
    let t = op.ticks;
    if script.fail_tick != 0 && t == script.fail_tick {
        log::error!(
            "scripted op {} failed on tick {t} as scripted",
            op.net_op_idx
        );
        return Err(NrtStatus::NetworkProxyFailure);
    }
    op.idle = i32::from(t <= 64 && script.idle_mask & (1u64 << (t - 1)) != 0);
    if t >= script.complete_after.max(1) {
        op.set_state(OpState::DONE)?;
    }
    Ok(())
}
