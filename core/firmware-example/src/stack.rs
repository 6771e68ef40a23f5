//! Stack high-water mark by painting: early in `main`, the words of a window below the stack
//! pointer are filled with [`PAINT`]; at the end, the lowest word that changed tells how deep
//! the stack went. The window lies between the end of `.bss` (cortex-m-rt's `_stack_end`) and
//! the stack pointer: memory that no static, heap block or live frame occupies.

use core::ptr;
use core::sync::atomic::{AtomicUsize, Ordering};

/// The paint pattern.
const PAINT: u32 = 0x5AFE_C0DE;

/// Bytes painted below the stack pointer.
pub const WINDOW: usize = 128 * 1024;

/// Room left unpainted just below the stack pointer (the painting function's own frame).
const GAP: usize = 512;

extern "C" {
    /// Top of the stack (cortex-m-rt's linker script: the end of RAM).
    static _stack_start: u32;
    /// Lowest address the stack may reach: the end of `.bss` / `.uninit`.
    static _stack_end: u32;
}

/// The painted window's low end (0: not painted).
static LOW: AtomicUsize = AtomicUsize::new(0);

/// Paints [`WINDOW`] bytes below the current stack pointer; call once, early in `main`.
/// Returns `false` (and paints nothing) when the window does not fit above `_stack_end`.
pub fn paint() -> bool {
    let sp = cortex_m::register::msp::read() as usize;
    let high = (sp - GAP) & !3;
    let floor = ptr::addr_of!(_stack_end) as usize;
    let Some(low) = high.checked_sub(WINDOW).filter(|&l| l >= floor) else {
        return false;
    };
    let mut a = low;
    while a < high {
        // SAFETY: `[low, high)` lies between the end of `.bss` and the stack pointer (less a
        // gap for this frame): RAM that nothing else occupies, 4-byte aligned.
        unsafe { ptr::write_volatile(a as *mut u32, PAINT) };
        a += 4;
    }
    LOW.store(low, Ordering::Relaxed);
    true
}

/// Bytes of stack used at most (from the top of RAM) since [`paint`]; `None` when nothing was
/// painted or the stack went below the window (then it used more than [`WINDOW`]).
pub fn high_water() -> Option<usize> {
    let low = LOW.load(Ordering::Relaxed);
    if low == 0 {
        return None;
    }
    let top = ptr::addr_of!(_stack_start) as usize;
    let mut a = low;
    // SAFETY: every address read lies in `[low, top)`: the painted window and the stack
    // above it, 4-byte aligned RAM.
    while a < top && unsafe { ptr::read_volatile(a as *const u32) } == PAINT {
        a += 4;
    }
    (a > low).then_some(top - a)
}
