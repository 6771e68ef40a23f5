//! A Cortex-M4 firmware that runs collectives on `proxy-core` (QEMU `mps2-an386`): several
//! comms in one image over the in-memory transport, one caller-mode proxy queue driven from
//! the main loop, the device side played by `proxy-collectives`' interpreter through the host
//! words. It checks every output byte, prints a summary with a checksum of the outputs over
//! semihosting, and exits 0 only when everything is right (docs/firmware.md).
//!
//! Feature `break-check`: one byte of rank 1's output is corrupted before the check of the
//! first run; the firmware must then report the wrong element and exit non-zero.
#![no_std]
#![no_main]

extern crate alloc;

mod clock;
mod device;
mod heap;
mod run;
mod stack;

use core::fmt::Write;

use cortex_m_rt::{entry, exception, ExceptionFrame};
use cortex_m_semihosting::{debug, hio, hprintln};
use proxy_collectives::planner::{Collective, DataType};
use proxy_core::base::time::Clock;

use crate::clock::{SysTickClock, CORE_HZ};
use crate::heap::{CountingHeap, HEAP_BYTES};
use crate::run::{Drive, Outcome, Spec, FNV_BASIS};

#[global_allocator]
static HEAP: CountingHeap = CountingHeap::empty();

/// The runs, in order. Both use several chunks per op side and two program executions per
/// launch (the network task's schedule repeats the block).
const RUNS: [Spec; 2] = [
    // 4 KiB of f32 per rank in 512-byte chunks, the main loop driving.
    Spec {
        name: "all-reduce",
        collective: Collective::AllReduce,
        dtype: DataType::F32,
        count: 1024,
        nranks: 2,
        chunk_bytes: 512,
        reps: 2,
        drive: Drive::MainLoop,
    },
    // 3 ranks × 1 KiB of i32 in 256-byte chunks, each comm's owner driving with drive_until.
    Spec {
        name: "all-gather",
        collective: Collective::AllGather,
        dtype: DataType::I32,
        count: 256,
        nranks: 3,
        chunk_bytes: 256,
        reps: 2,
        drive: Drive::DriveUntil,
    },
];

/// `break-check`: (run, rank, element) whose output byte 1 is flipped before the check.
const BREAK: (usize, u32, usize) = (0, 1, 37);

/// A small `log` sink: warnings and errors of the engine go to semihosting's stderr.
struct SemihostingLog;

impl log::Log for SemihostingLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            if let Ok(mut err) = hio::hstderr() {
                let _ = writeln!(err, "[{}] {}", record.level(), record.args());
            }
        }
    }

    fn flush(&self) {}
}

static LOG: SemihostingLog = SemihostingLog;

#[entry]
fn main() -> ! {
    let painted = stack::paint();
    HEAP.init();
    let _ = log::set_logger(&LOG).map(|()| log::set_max_level(log::LevelFilter::Warn));
    // `take` answers `Some` once; this is the first and only call.
    let Some(cp) = cortex_m::Peripherals::take() else {
        fail(format_args!("core peripherals already taken"));
    };
    clock::start(cp.SYST);
    hprintln!(
        "proxy-core firmware example: Cortex-M4 @ {} MHz (QEMU mps2-an386), heap {} KiB",
        CORE_HZ / 1_000_000,
        HEAP_BYTES / 1024
    );
    // The clock across one real SysTick wrap (0.67 s at 25 MHz) before the engine relies on it.
    let clock_ok = match clock::self_test(1, 100_000_000) {
        Ok(reads) => {
            hprintln!(
                "clock: SysTick wrap counted, {} reads, never backwards ({} read(s) saw the reload before the pend), now {} us",
                reads,
                clock::late_pends(),
                SysTickClock.now_ns() / 1000
            );
            true
        }
        Err(e) => {
            hprintln!("clock: FAILED: {}", e);
            false
        }
    };
    let (runs_ok, heap_peak) = run_all();
    // Everything a run allocates is freed when it ends: bytes still in use are a leak.
    let leaked = HEAP.used();
    hprintln!(
        "heap: {} bytes, high-water {} bytes (largest run), in use at exit {} bytes{}",
        HEAP_BYTES,
        heap_peak,
        leaked,
        if leaked == 0 { "" } else { ": LEAK" }
    );
    let ok = runs_ok && clock_ok && leaked == 0;
    hprintln!(
        "clock: {} SysTick wraps counted, {} read(s) corrected a late pend",
        clock::wraps(),
        clock::late_pends()
    );
    match stack::high_water() {
        Some(b) => hprintln!("stack: high-water {} bytes", b),
        None if painted => hprintln!("stack: deeper than the {} bytes painted", stack::WINDOW),
        None => hprintln!("stack: not measured (no room to paint)"),
    }
    if ok {
        hprintln!("firmware-example: PASS");
        exit(true)
    } else {
        hprintln!("firmware-example: FAIL");
        exit(false)
    }
}

/// Runs every spec of [`RUNS`], prints one line each and the checksum. Returns `true` when all
/// ran and every output element is right, and the largest heap high-water mark of a run.
fn run_all() -> (bool, usize) {
    let mut ok = true;
    let mut checksum = FNV_BASIS;
    let mut heap_peak = 0;
    for (i, spec) in RUNS.iter().enumerate() {
        let corrupt = (cfg!(feature = "break-check") && i == BREAK.0)
            .then(|| (BREAK.1, BREAK.2 * spec.dtype.size() + 1));
        HEAP.reset_peak();
        match run::run(spec, corrupt) {
            Ok(o) => {
                summary(spec, &o);
                hprintln!("  heap high-water of the run: {} bytes", HEAP.peak());
                heap_peak = heap_peak.max(HEAP.peak());
                checksum = run::fnv1a(checksum, &o.checksum.to_le_bytes());
                if o.wrong > 0 {
                    ok = false;
                    if let Some(w) = &o.first_wrong {
                        hprintln!(
                            "  WRONG: {} element(s); first: rank {} element {}: got {:02x?}, want {:02x?}",
                            o.wrong,
                            w.rank,
                            w.index,
                            w.got,
                            w.want
                        );
                    }
                }
            }
            Err(e) => {
                ok = false;
                hprintln!("{}: FAILED: {}", spec.name, e);
            }
        }
    }
    hprintln!("checksum: {:#010x}", checksum);
    (ok, heap_peak)
}

fn summary(spec: &Spec, o: &Outcome) {
    hprintln!(
        "{}: {} ranks, {:?}, {} B out per rank, {} B chunks, {} entries per execution, {} executions, {:?}: {} us, {} rounds, {} B received, {} wrong, checksum {:#010x}",
        spec.name,
        spec.nranks,
        spec.dtype,
        o.output_bytes,
        spec.chunk_bytes,
        o.entries,
        o.executions,
        spec.drive,
        o.elapsed_ns / 1000,
        o.rounds,
        o.recv_bytes,
        o.wrong,
        o.checksum
    );
}

/// Ends the firmware: QEMU exits 0 for success, 1 otherwise (semihosting `SYS_EXIT`).
fn exit(success: bool) -> ! {
    debug::exit(if success {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    });
    // Not reached under QEMU; on a board without a debugger, stop here.
    loop {
        cortex_m::asm::bkpt();
    }
}

/// Reports `what` on semihosting's stderr and exits non-zero.
fn fail(what: core::fmt::Arguments<'_>) -> ! {
    // A fresh handle, not the one `hprintln!` keeps: the failure may have come from inside it.
    if let Ok(mut err) = hio::hstderr() {
        let _ = writeln!(err, "firmware-example: FAIL: {what}");
    }
    exit(false)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    cortex_m::interrupt::disable();
    fail(format_args!("panic: {info}"))
}

#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    fail(format_args!("hard fault at pc {:#010x}", frame.pc()))
}

#[exception]
fn SysTick() {
    clock::on_wrap();
}
