//! The firmware's [`Clock`]: 64-bit nanoseconds from SysTick, with no 64-bit atomic.
//!
//! **Scheme.** SysTick is a 24-bit down-counter clocked by the core (25 MHz on QEMU's
//! `mps2-an386`, [`CORE_HZ`]). It reloads with [`RELOAD`] (the full 24 bits), so it wraps every
//! 2^24 cycles (0.67 s) and raises the SysTick exception, whose handler ([`on_wrap`]) adds one
//! to `WRAPS`, a plain `u64` behind a `critical_section::Mutex` (interrupts off on this one
//! core): the target has no 64-bit atomics, and none is needed. A read
//! ([`SysTickClock::ticks`]) runs in one critical section, so the handler cannot run in the
//! middle of it:
//! 1. ticks = `WRAPS` · 2^24 + (RELOAD − counter);
//! 2. if the SysTick exception is pending, the counter has wrapped but the handler has not
//!    counted it yet (it runs when the section ends): count one wrap more and take the counter
//!    again (now after the wrap);
//! 3. if the result is still below the last one returned (`LAST`), the counter has reloaded
//!    but no pend shows it: add one wrap. Seen under QEMU on a loaded host (the firmware
//!    prints how many reads took this step): the counter reloaded and the pend came only at
//!    the next wrap, so `WRAPS` stayed one behind from then on and every later read took this
//!    step. QEMU computes the counter from the host clock but pends from a timer callback on
//!    its main thread, which can come late. On silicon the reload and the pend are the same
//!    clock edge. A result still below `LAST` (only possible when no read happened for a
//!    whole period while the count was behind) is raised to `LAST`: the clock never goes
//!    back, by construction;
//! 4. store the result in `LAST`; ns = ticks · 10^9 / CORE_HZ, split so nothing overflows.
//!
//! Step 3 needs a read at least once per wrap period (0.67 s) to see an uncounted wrap; the
//! engine's loops read the clock far more often. A read that misses one is low by a period
//! until a later read corrects it, so an interval measured across it can look up to 0.67 s
//! longer (a timeout ends that much early). A u64 of wraps never wraps (2^64 · 0.67 s). The
//! critical section is a few instructions long, far below one wrap period, so at most one
//! wrap can be pending while it runs.

use core::cell::Cell;

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::{SCB, SYST};
use critical_section::Mutex;
use proxy_core::base::time::Clock;

/// The core clock of QEMU's `mps2-an386` (AN386: 25 MHz), which SysTick counts with
/// `CLKSOURCE = core`.
pub const CORE_HZ: u64 = 25_000_000;

/// SysTick's reload value: the whole 24-bit range (a wrap every 2^24 cycles).
pub const RELOAD: u32 = 0x00FF_FFFF;

/// SysTick wraps counted by the exception handler (used only in critical sections).
static WRAPS: Mutex<Cell<u64>> = Mutex::new(Cell::new(0));

/// The ticks the last read returned (used only in critical sections).
static LAST: Mutex<Cell<u64>> = Mutex::new(Cell::new(0));

/// Reads that took step 3 (module docs), for the self-test's report.
static LATE_PENDS: Mutex<Cell<u32>> = Mutex::new(Cell::new(0));

/// Ticks of one wrap period.
const PERIOD: u64 = RELOAD as u64 + 1;

/// Starts SysTick as the time base: core clock, full reload, exception on every wrap.
pub fn start(mut syst: SYST) {
    syst.set_clock_source(SystClkSource::Core);
    syst.set_reload(RELOAD);
    syst.clear_current();
    syst.enable_interrupt();
    syst.enable_counter();
}

/// Counts one wrap: called by the SysTick exception handler only.
pub fn on_wrap() {
    critical_section::with(|cs| {
        let w = WRAPS.borrow(cs);
        w.set(w.get() + 1);
    });
}

/// Nanoseconds since [`start`] on the SysTick time base (see the module docs for the scheme).
/// A zero-sized handle: every instance reads the same counter.
#[derive(Clone, Copy, Debug, Default)]
pub struct SysTickClock;

impl SysTickClock {
    /// Core-clock ticks since [`start`]; never smaller than the last read (module docs).
    pub fn ticks(&self) -> u64 {
        critical_section::with(|cs| {
            let wraps = WRAPS.borrow(cs).get();
            let current = SYST::get_current();
            let mut t = if SCB::is_pendst_pending() {
                // Step 2: wrapped, not counted yet.
                (wraps + 1) * PERIOD + u64::from(RELOAD - SYST::get_current())
            } else {
                wraps * PERIOD + u64::from(RELOAD - current)
            };
            let last = LAST.borrow(cs);
            if t < last.get() {
                // Step 3: reloaded before the pending bit showed it.
                t += PERIOD;
                let late = LATE_PENDS.borrow(cs);
                late.set(late.get().wrapping_add(1));
            }
            let t = t.max(last.get());
            last.set(t);
            t
        })
    }
}

impl Clock for SysTickClock {
    fn now_ns(&self) -> u64 {
        let t = self.ticks();
        (t / CORE_HZ) * 1_000_000_000 + (t % CORE_HZ) * 1_000_000_000 / CORE_HZ
    }
}

/// Reads so far that found the counter reloaded before the pending bit showed the wrap
/// (step 3 of the module docs).
pub fn late_pends() -> u32 {
    critical_section::with(|cs| LATE_PENDS.borrow(cs).get())
}

/// SysTick wraps counted so far.
pub fn wraps() -> u64 {
    critical_section::with(|cs| WRAPS.borrow(cs).get())
}

/// Checks the scheme across a real wrap: reads the clock until the handler has counted
/// `wraps_wanted` more wraps (each 2^24 cycles, 0.67 s at 25 MHz), and fails if a read ever
/// went backwards. Returns the reads made.
///
/// # Errors
/// The first backwards step (`earlier ns`, `later ns`), or the wrap never came within
/// `max_reads` reads.
pub fn self_test(wraps_wanted: u64, max_reads: u32) -> Result<u32, alloc::string::String> {
    let clock = SysTickClock;
    let target = wraps() + wraps_wanted;
    let mut last = clock.now_ns();
    for reads in 1..=max_reads {
        let now = clock.now_ns();
        if now < last {
            return Err(alloc::format!("clock went back from {last} ns to {now} ns"));
        }
        last = now;
        if wraps() >= target {
            return Ok(reads);
        }
    }
    Err(alloc::format!(
        "no SysTick wrap counted within {max_reads} reads (at {last} ns)"
    ))
}
