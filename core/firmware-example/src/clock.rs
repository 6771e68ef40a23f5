//! The firmware's [`Clock`]: 64-bit nanoseconds from SysTick, with no 64-bit atomic.
//!
//! **Scheme.** SysTick is a 24-bit down-counter clocked by the core (25 MHz on QEMU's
//! `mps2-an386`, [`CORE_HZ`]). It reloads with [`RELOAD`] (the full 24 bits), so it wraps every
//! 2^24 cycles (0.67 s) and raises the SysTick exception, whose handler ([`on_wrap`]) adds one
//! to [`WRAPS`], a plain `u64` behind a `critical_section::Mutex` (interrupts off on this one
//! core): the target has no 64-bit atomics, and none is needed. [`SysTickClock::now_ns`] reads,
//! inside one critical section (so the handler cannot run in between), the wrap count, the
//! counter, and the SysTick pending bit: a set bit means the counter has wrapped but the
//! handler has not counted it yet (it runs when the section ends), so the read counts one wrap
//! more and takes the counter again (now after the wrap). Ticks = wraps · 2^24 + (RELOAD −
//! counter); ns = ticks · 10^9 / CORE_HZ, split so nothing overflows. A u64 of wraps lasts
//! 2^64 · 0.67 s: it never wraps. The critical section is a few instructions long, far below
//! one wrap period, so at most one wrap can be pending while it runs.

use core::cell::Cell;

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::{SCB, SYST};
use critical_section::Mutex;
use proxy_core::time::Clock;

/// The core clock of QEMU's `mps2-an386` (AN386: 25 MHz), which SysTick counts with
/// `CLKSOURCE = core`.
pub const CORE_HZ: u64 = 25_000_000;

/// SysTick's reload value: the whole 24-bit range (a wrap every 2^24 cycles).
pub const RELOAD: u32 = 0x00FF_FFFF;

/// SysTick wraps counted by the exception handler (written only in critical sections).
static WRAPS: Mutex<Cell<u64>> = Mutex::new(Cell::new(0));

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
    /// Core-clock ticks since [`start`].
    pub fn ticks(&self) -> u64 {
        critical_section::with(|cs| {
            let wraps = WRAPS.borrow(cs).get();
            let current = SYST::get_current();
            if SCB::is_pendst_pending() {
                // Wrapped, not counted yet: count it, and read the counter after the wrap.
                (wraps + 1) * (u64::from(RELOAD) + 1) + u64::from(RELOAD - SYST::get_current())
            } else {
                wraps * (u64::from(RELOAD) + 1) + u64::from(RELOAD - current)
            }
        })
    }
}

impl Clock for SysTickClock {
    fn now_ns(&self) -> u64 {
        let t = self.ticks();
        (t / CORE_HZ) * 1_000_000_000 + (t % CORE_HZ) * 1_000_000_000 / CORE_HZ
    }
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
