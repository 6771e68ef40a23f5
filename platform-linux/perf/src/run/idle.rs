//! Ranks as processes on a crowded host: the caller-mode driver blocks on its comm's
//! completion-queue descriptor when it has nothing to do (`proxy_core::driver::idle`,
//! `proxy_libfabric::CqIdleWait`), except while its barrier between processes waits (the other
//! processes' arrivals signal no descriptor: it yields then, as before; `idle::Gated` over the
//! rank's `host_barrier_waiting` flag, wired in `setup.rs`).

use super::Modes;
use crate::args::{Args, DeviceArg, DriverArg, WaitArg};

/// Block on the CQ descriptor when idle: with `--wait sleep` only. In caller mode the rank's
/// thread blocks; in worker mode the worker, when it plays the device (a device thread's host
/// writes would kick it too, but the thread itself spins). Not by default, not even when the
/// mode rule finds the host oversubscribed: on this 2-CPU VM a wake-up from the descriptor
/// costs more than the turns that yielding gives away (BENCHMARKS.md, issue 25).
pub(super) fn blocks_when_idle(args: &Args, modes: &Modes) -> bool {
    let driven_here = match modes.driver {
        DriverArg::Caller => true,
        DriverArg::Thread => modes.device == DeviceArg::Polled,
    };
    driven_here && args.wait == Some(WaitArg::Sleep)
}
