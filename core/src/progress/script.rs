//! The data of a scripted test op (test scaffolding, feature `testing`): what it does
//! ([`Script`]) and where its comm keeps it ([`ScriptTable`]). The op kind that follows a script
//! is `progress::scripted`; this file holds only the data, so that `progress::op` (whose
//! `OpCtx` carries the table) does not import the op kind.

use alloc::collections::BTreeMap;

/// Scripts of the scripted ops of a comm, keyed by the op's address (see the module doc).
pub type ScriptTable = BTreeMap<usize, Script>;

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
