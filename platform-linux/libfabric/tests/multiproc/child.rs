//! The child side of the multi-process tests: one rank per process.
//!
//! The device thread follows the protocol of `nec.h` as `core/src/progress/sendrecv/tests.rs`'s in-test
//! device does: per op side, write `-1` to the host index, wait for the handshake semaphore
//! (and the `0` the proxy wrote), post entries by raising the host index (filling the source
//! payload just before), wait on the complete semaphore, then check the received data.

use std::process;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use std::ffi::c_void;

use proxy_bootstrap::{Bootstrap, BootstrapConfig, SharedBootstrap};
use proxy_core::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr, EXEC_COMPLETE, NET_TRANSFER};
use proxy_core::base::host_word::HostWord;
use proxy_core::base::time::MonotonicClock;
use proxy_core::driver::queue::TaskBox;
use proxy_core::driver::record::TaskRecord;
use proxy_core::driver::task::{
    BarrierTask, BarrierTaskSpec, BlockFifos, CommHandle, NetworkTask, NetworkTaskSpec,
};
use proxy_core::driver::trigger::TriggerWords;
use proxy_core::progress::comm::Comm;
use proxy_core::progress::device::DirectHostWords;
use proxy_core::seam::SeamTable;
use proxy_core::NrtStatus;
use proxy_libfabric::net_setup::{open_libfabric_comm, LibfabricCommConfig};
use proxy_libfabric::Options;
use proxy_runtime::worker::waiter;
use proxy_runtime::{registry, Config};

use super::{DRAIN_ENV, PHASE_ENV, PROVIDER_ENV, TASK_TIMEOUT_ENV, VICTIM_ENV};

/// When a killed-peer scenario's fault comes (`MULTIPROC_PHASE`): `mid` (default: the victim is
/// killed once both sides are mid-transfer, 16 MiB sends in flight), `small` (the survivor's
/// device posts only its 1 B and 4 KiB + 1 entries: only small requests in flight), `connect`
/// (the victim exits after the bootstrap, before its transport connects), `teardown` (the
/// survivor stops its comm mid-transfer and prints `IN_TEARDOWN`; the victim is killed during
/// the stop's drain), `abort` (the survivor aborts its comm mid-transfer and prints `ABORTED`;
/// the victim is killed before the survivor destroys the comm).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultPhase {
    Mid,
    Small,
    Connect,
    Teardown,
    Abort,
}

/// The phase of this run (`MULTIPROC_PHASE`; default `mid`).
pub fn fault_phase() -> FaultPhase {
    match std::env::var(PHASE_ENV).as_deref() {
        Ok("small") => FaultPhase::Small,
        Ok("connect") => FaultPhase::Connect,
        Ok("teardown") => FaultPhase::Teardown,
        Ok("abort") => FaultPhase::Abort,
        _ => FaultPhase::Mid,
    }
}

/// The largest entry in bytes (`MULTIPROC_LARGEST`; default 16 MiB).
pub const LARGEST_ENV: &str = "MULTIPROC_LARGEST";

/// Entry sizes of every op side: 1 B, 4 KiB + 1, 1 MiB, and the largest: 16 MiB unless
/// `MULTIPROC_LARGEST` says otherwise (the killed-peer soak's 1 MiB, which is still far above
/// rxm's 128 KiB rendezvous threshold, so its sends to a killed peer are stuck all the same).
pub fn sizes() -> [usize; 4] {
    static SIZES: std::sync::OnceLock<[usize; 4]> = std::sync::OnceLock::new();
    *SIZES.get_or_init(|| {
        let largest = std::env::var(LARGEST_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16 << 20);
        [1, 4097, 1 << 20, largest]
    })
}
/// Streams used: stream 0 sends to rank + 1, stream 1 to rank − 1 (mod nranks).
const STREAMS: usize = 2;
/// Executions of the block (the second one runs the recycled ops).
const EXECUTIONS: u32 = 2;
/// The basic block everything is filed under.
const BB: u32 = 7;
const POISON: u8 = 0xA5;
/// Host words per stream: send idx / handshake / complete, recv idx / handshake / complete.
const WORDS_PER_STREAM: usize = 6;
/// Driver scenario: per execution one trigger word per stream (network task) and one for the
/// barrier task, then the barrier-done semaphore.
const GATE_BASE: usize = STREAMS * WORDS_PER_STREAM;
const GATES_PER_EXEC: usize = STREAMS + 1;
const BARRIER_DONE: usize = GATE_BASE + EXECUTIONS as usize * GATES_PER_EXEC;
const WORDS: usize = BARRIER_DONE + 1;

/// The trigger word of `stream`'s network task in execution `exec`.
fn net_trigger(exec: u32, stream: usize) -> usize {
    GATE_BASE + exec as usize * GATES_PER_EXEC + stream
}

/// The trigger word of the barrier task of execution `exec`.
fn barrier_trigger(exec: u32) -> usize {
    GATE_BASE + exec as usize * GATES_PER_EXEC + STREAMS
}

/// Bytes each rank checks in the send/recv scenario.
pub fn expected_checked_bytes() -> u64 {
    sizes().iter().sum::<usize>() as u64 * STREAMS as u64 * u64::from(EXECUTIONS)
}

fn pattern_seed(src: u32, stream: u32, entry: u32, exec: u32) -> u32 {
    src.wrapping_mul(0x9E37_79B9)
        ^ stream.wrapping_mul(0x85EB_CA6B)
        ^ entry.wrapping_mul(0xC2B2_AE35)
        ^ exec.wrapping_mul(0x27D4_EB2F)
}

fn pattern_byte(seed: u32, i: usize) -> u8 {
    ((i as u32).wrapping_add(seed).wrapping_mul(0x9E37_79B1) >> 24) as u8
}

/// A tiny stderr logger; level from `NEURON_RT_LOG_LEVEL` (default WARN).
struct StderrLog {
    rank: String,
}

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!("[{} rank {}] {}", r.level(), self.rank, r.args());
        }
    }
    fn flush(&self) {}
}

fn init_log() {
    let level = match std::env::var("NEURON_RT_LOG_LEVEL")
        .unwrap_or_default()
        .to_ascii_uppercase()
        .as_str()
    {
        "ERROR" => log::LevelFilter::Error,
        "INFO" => log::LevelFilter::Info,
        "DEBUG" => log::LevelFilter::Debug,
        "TRACE" => log::LevelFilter::Trace,
        _ => log::LevelFilter::Warn,
    };
    let rank = std::env::var("PROXY_RANK").unwrap_or_else(|_| "?".into());
    if log::set_logger(Box::leak(Box::new(StderrLog { rank }))).is_ok() {
        log::set_max_level(level);
    }
}

/// Prints the result line and exits (the harness's own output never follows).
pub(super) fn finish(fields: &[(&str, String)]) -> ! {
    let mut line = String::from("RESULT");
    for (k, v) in fields {
        line.push_str(&format!(" {k}={v}"));
    }
    println!("{line}");
    let _ = std::io::Write::flush(&mut std::io::stdout());
    process::exit(0);
}

/// Runs `scenario` and exits.
pub fn main(scenario: &str) -> ! {
    init_log();
    match scenario {
        "bootstrap" => bootstrap_only(),
        "sendrecv" => sendrecv(None),
        "driver" => driver(None),
        "kill" | "driver_kill" => {
            let victim = std::env::var(VICTIM_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            if scenario == "kill" {
                sendrecv(Some(victim))
            } else {
                driver(Some(victim))
            }
        }
        "soak" => super::soak::soak(),
        s => panic!("unknown scenario {s}"),
    }
}

/// Bootstrap, one all-gather, one barrier.
fn bootstrap_only() -> ! {
    let start = Instant::now();
    let cfg = BootstrapConfig::from_env(None, None, None).expect("bootstrap config");
    let r = Bootstrap::init(&cfg).and_then(|mut b| {
        let all = b.all_gather(&b.rank().to_le_bytes())?;
        assert_eq!(all.len(), b.nranks() as usize);
        for (r, blob) in all.iter().enumerate() {
            assert_eq!(blob, &(r as u32).to_le_bytes());
        }
        b.barrier()?;
        b.close();
        Ok(b.comm_id())
    });
    let elapsed_ms = format!("{:.0}", start.elapsed().as_secs_f64() * 1000.0);
    match r {
        Ok(id) => finish(&[
            ("status", "ok".into()),
            ("comm_id", id.to_string()),
            ("elapsed_ms", elapsed_ms),
        ]),
        Err(e) => finish(&[
            ("status", e.status().as_str().into()),
            ("elapsed_ms", elapsed_ms),
        ]),
    }
}

/// A buffer's address and length, handed to the device thread.
#[derive(Clone, Copy)]
struct Buf {
    addr: usize,
    len: usize,
}

/// The device's view of one op side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    WaitHandshake,
    Post,
    Finished,
}

struct Side {
    send: bool,
    stream: usize,
    peer: u32,
    /// Index of the side's host index word; handshake and complete follow it.
    word: usize,
    posted: u32,
    phase: Phase,
}

struct Device {
    rank: u32,
    words: Arc<[AtomicU32]>,
    src: Vec<Vec<Buf>>,
    dst: Vec<Vec<Buf>>,
    sides: Vec<Side>,
    /// Victim mode: post only the first entry of each side, announce, and wait to be killed.
    victim: bool,
    /// Post only the first two entries of each side (1 B, 4 KiB + 1): phase `small`.
    small_only: bool,
    /// Driver mode: gate each execution on the network task's trigger words, and after it
    /// raise the barrier task's trigger and wait for barrier-done.
    gated: bool,
    stop: Arc<AtomicBool>,
}

impl Device {
    fn load(&self, i: usize) -> u32 {
        self.words[i].load(Ordering::Acquire)
    }

    fn arm(&mut self) {
        for s in &mut self.sides {
            if !s.send {
                for b in &self.dst[s.stream] {
                    // SAFETY: the proxy posts no receive into this buffer before the device
                    // posts its entry (no early receive posting), and the previous execution's
                    // receives completed (complete semaphore), so nothing else touches it now.
                    unsafe { std::ptr::write_bytes(b.addr as *mut u8, POISON, b.len) };
                }
            }
            s.posted = 0;
            s.phase = Phase::WaitHandshake;
            // Release: the poisoned buffers are written before the proxy sees the device ready.
            self.words[s.word].store(0xFFFF_FFFF, Ordering::Release);
        }
    }

    /// One execution; `Err` on a protocol violation, a stop request, or the deadline.
    fn run_exec(&mut self, exec: u32, deadline: Instant) -> Result<(), String> {
        let n = sizes().len() as u32;
        self.arm();
        let mut announced = false;
        let mut spins = 0u32;
        loop {
            if self.stop.load(Ordering::Acquire) {
                return Err("stopped".into());
            }
            if Instant::now() > deadline {
                return Err(format!("execution {exec} not done before the deadline"));
            }
            let mut moved = false;
            for k in 0..self.sides.len() {
                let (word, phase, send, stream, posted) = {
                    let s = &self.sides[k];
                    (s.word, s.phase, s.send, s.stream, s.posted)
                };
                match phase {
                    Phase::WaitHandshake => {
                        let hs = self.load(word + 1);
                        if hs > exec + 1 {
                            return Err(format!("handshake semaphore {hs} above {}", exec + 1));
                        }
                        if hs == exec + 1 {
                            let idx = self.load(word);
                            if idx != 0 {
                                return Err(format!("handshake without the 0 write (idx {idx})"));
                            }
                            self.sides[k].phase = Phase::Post;
                            moved = true;
                        }
                    }
                    Phase::Post => {
                        let done = self.load(word + 2).wrapping_sub(exec * n);
                        if done > posted {
                            return Err(format!(
                                "complete semaphore {done} above posted {posted} (stream \
                                 {stream} send {send})"
                            ));
                        }
                        if done == n {
                            self.sides[k].phase = Phase::Finished;
                            moved = true;
                            continue;
                        }
                        let limit = if self.victim {
                            1
                        } else if self.small_only {
                            2
                        } else {
                            n
                        };
                        if posted < limit {
                            let e = posted as usize;
                            if send {
                                let b = self.src[stream][e];
                                let seed = pattern_seed(self.rank, stream as u32, e as u32, exec);
                                // SAFETY: the entry is not posted yet and the previous
                                // execution's sends completed: the transport does not read it.
                                let buf = unsafe {
                                    std::slice::from_raw_parts_mut(b.addr as *mut u8, b.len)
                                };
                                for (i, x) in buf.iter_mut().enumerate() {
                                    *x = pattern_byte(seed, i);
                                }
                            }
                            self.sides[k].posted = posted + 1;
                            // Release: the payload is written before the proxy sees the entry.
                            self.words[word].store(posted + 1, Ordering::Release);
                            moved = true;
                        }
                    }
                    Phase::Finished => {}
                }
            }
            if self.victim
                && !announced
                && self
                    .sides
                    .iter()
                    .all(|s| self.load(s.word + 2).wrapping_sub(exec * n) >= 1)
            {
                announced = true;
                println!("KILL_ME");
                let _ = std::io::Write::flush(&mut std::io::stdout());
            }
            if self.sides.iter().all(|s| s.phase == Phase::Finished) {
                return Ok(());
            }
            if moved {
                spins = 0;
            } else {
                spins += 1;
                if spins < 64 {
                    thread::yield_now();
                } else {
                    thread::sleep(Duration::from_micros(50));
                }
            }
        }
    }

    /// Checks every received entry of execution `exec`; returns the bytes checked.
    fn check(&self, exec: u32) -> Result<u64, String> {
        let mut bytes = 0u64;
        for s in self.sides.iter().filter(|s| !s.send) {
            for (e, b) in self.dst[s.stream].iter().enumerate() {
                // SAFETY: the complete semaphore (read with acquire) says the receive is done;
                // the buffer is not posted again before the next `arm`.
                let buf = unsafe { std::slice::from_raw_parts(b.addr as *const u8, b.len) };
                let seed = pattern_seed(s.peer, s.stream as u32, e as u32, exec);
                if let Some(i) = (0..buf.len()).find(|&i| buf[i] != pattern_byte(seed, i)) {
                    return Err(format!(
                        "execution {exec} stream {} entry {e} ({} B) from rank {}: byte {i} is \
                         {:#04x}, expected {:#04x}",
                        s.stream,
                        buf.len(),
                        s.peer,
                        buf[i],
                        pattern_byte(seed, i)
                    ));
                }
                bytes += buf.len() as u64;
            }
        }
        Ok(bytes)
    }

    /// Waits until `cond` holds (bounded by the stop flag and the deadline).
    fn wait(
        &self,
        what: &str,
        deadline: Instant,
        cond: impl Fn(&Self) -> bool,
    ) -> Result<(), String> {
        let mut spins = 0u32;
        while !cond(self) {
            if self.stop.load(Ordering::Acquire) {
                return Err("stopped".into());
            }
            if Instant::now() > deadline {
                return Err(format!("{what}: not before the deadline"));
            }
            spins += 1;
            if spins < 64 {
                thread::yield_now();
            } else {
                thread::sleep(Duration::from_micros(50));
            }
        }
        Ok(())
    }

    fn run(mut self, deadline: Instant) -> Result<u64, String> {
        let mut checked = 0;
        for exec in 0..EXECUTIONS {
            if self.gated {
                // At the net stage: write 1, wait until the proxy consumed every trigger (0).
                for s in 0..STREAMS {
                    self.words[net_trigger(exec, s)].store(1, Ordering::Release);
                }
                self.wait("network trigger consumed", deadline, |d| {
                    (0..STREAMS).all(|s| d.load(net_trigger(exec, s)) == 0)
                })?;
            }
            self.run_exec(exec, deadline)?;
            checked += self.check(exec)?;
            if self.gated {
                self.words[barrier_trigger(exec)].store(1, Ordering::Release);
                self.wait("barrier done", deadline, |d| d.load(BARRIER_DONE) > exec)?;
            }
        }
        Ok(checked)
    }
}

/// The block of every stream: one op info (send to the stream's next rank, receive from its
/// previous one), each side with the four entries; and the device's view of the op sides.
fn build_blocks(
    rank: u32,
    nranks: u32,
    words: &[AtomicU32],
    src: &[Vec<Vec<u8>>],
    dst: &mut [Vec<Vec<u8>>],
) -> (Vec<BlockFifos>, Vec<Side>) {
    let addr = |i: usize| &words[i] as *const AtomicU32 as usize as u64;
    let mut blocks = Vec::new();
    let mut sides = Vec::new();
    for s in 0..STREAMS {
        let (to, from) = if s == 0 {
            ((rank + 1) % nranks, (rank + nranks - 1) % nranks)
        } else {
            ((rank + nranks - 1) % nranks, (rank + 1) % nranks)
        };
        let w = s * WORDS_PER_STREAM;
        let n = sizes().len() as u32;
        let info = NetOpInfo {
            send_peer: to as i32,
            recv_peer: from as i32,
            tag: 10 + s as u32,
            tx_entry_cnt: n,
            rx_entry_cnt: n,
            data_type_sz: 1,
            post_send_idx_addr: addr(w),
            send_handshake_sem_addr: addr(w + 1),
            send_complete_sem_addr: addr(w + 2),
            post_recv_idx_addr: addr(w + 3),
            recv_handshake_sem_addr: addr(w + 4),
            recv_complete_sem_addr: addr(w + 5),
            ..NetOpInfo::default()
        };
        let mark = |e: usize| {
            if e + 1 == sizes().len() {
                EXEC_COMPLETE
            } else {
                NET_TRANSFER
            }
        };
        let src_fifo: Vec<NetSrcAddr> = src[s]
            .iter()
            .enumerate()
            .map(|(e, b)| NetSrcAddr {
                net_op_idx: 0,
                mark: mark(e),
                addr: b.as_ptr() as usize as u64,
                size: b.len() as u64,
                dest_rank: -1,
                reserved: 0,
            })
            .collect();
        let dst_fifo: Vec<NetDestAddr> = dst[s]
            .iter_mut()
            .enumerate()
            .map(|(e, b)| NetDestAddr {
                net_op_idx: 0,
                mark: mark(e),
                addr: b.as_mut_ptr() as usize as u64,
                size: b.len() as u64,
                src_rank: -1,
                reserved: 0,
            })
            .collect();
        blocks.push(BlockFifos {
            stream: s as u32,
            bb: BB,
            ops: vec![info],
            src: src_fifo,
            dst: dst_fifo,
        });
        sides.push(Side {
            send: true,
            stream: s,
            peer: to,
            word: w,
            posted: 0,
            phase: Phase::Finished,
        });
        sides.push(Side {
            send: false,
            stream: s,
            peer: from,
            word: w + 3,
            posted: 0,
            phase: Phase::Finished,
        });
    }
    (blocks, sides)
}

/// The proxy side: progress every stream until each has finished the block, for every
/// execution. No change of any host word for `task_timeout` is a `Timeout` (the driver's
/// no-progress rule, docs/design.md §4).
fn drive(
    comm: &mut Comm,
    words: &[AtomicU32],
    device_failed: &AtomicBool,
    task_timeout: Duration,
    idle_ms: &mut u128,
    cut: Option<Instant>,
) -> Result<(), NrtStatus> {
    let snapshot = || -> Vec<u32> { words.iter().map(|w| w.load(Ordering::Acquire)).collect() };
    for _exec in 0..EXECUTIONS {
        let mut done = [false; STREAMS];
        let mut last = snapshot();
        let mut last_change = Instant::now();
        let mut spins = 0u32;
        loop {
            if cut.is_some_and(|c| Instant::now() >= c) {
                // The test's own cut (phases `teardown` and `abort`): not a failure of the comm.
                return Err(NrtStatus::Closed);
            }
            let mut changed = false;
            for (s, d) in done.iter_mut().enumerate() {
                if *d {
                    continue;
                }
                let (mut idle, mut dn) = (true, true);
                comm.progress(s as u32, BB)
                    .map(|t| t.and_into(&mut idle, &mut dn))?;
                if dn {
                    *d = true;
                    changed = true;
                }
            }
            if done.iter().all(|&d| d) {
                break;
            }
            if device_failed.load(Ordering::Acquire) {
                return Err(NrtStatus::Failure);
            }
            let now = snapshot();
            if changed || now != last {
                last = now;
                last_change = Instant::now();
                spins = 0;
            } else {
                *idle_ms = last_change.elapsed().as_millis();
                if last_change.elapsed() > task_timeout {
                    log::error!(
                        "rank {}: no progress for {:?}: NRT_TIMEOUT",
                        comm.config().rank,
                        task_timeout
                    );
                    return Err(NrtStatus::Timeout);
                }
                spins += 1;
                if spins < 256 {
                    thread::yield_now();
                } else {
                    thread::sleep(Duration::from_micros(20));
                }
            }
        }
    }
    Ok(())
}

/// What both send/recv scenarios set up: bootstrap, host words, buffers, the libfabric comm
/// with the memory registered, the blocks, and the (not yet started) device.
pub(super) struct Setup {
    /// `None` while the driver scenario shares it with its barrier tasks.
    boot: Option<SharedBootstrap>,
    rank: u32,
    /// The rank to be killed, in the killed-peer scenarios.
    victim: Option<u32>,
    provider: String,
    task_timeout: Duration,
    words: Arc<[AtomicU32]>,
    /// Owned here, freed only after the comm is dropped.
    src: Vec<Vec<Vec<u8>>>,
    dst: Vec<Vec<Vec<u8>>>,
    /// `None` once dropped (before the memory it uses).
    comm: Option<Box<Comm>>,
    blocks: Vec<BlockFifos>,
    device: Option<Device>,
    stop: Arc<AtomicBool>,
}

fn setup(victim: Option<u32>, gated: bool) -> Setup {
    let cfg = BootstrapConfig::from_env(None, None, None).expect("bootstrap config");
    setup_with(cfg, victim, gated)
}

/// [`setup`] with the bootstrap's configuration given.
pub(super) fn setup_with(cfg: BootstrapConfig, victim: Option<u32>, gated: bool) -> Setup {
    let provider = std::env::var(PROVIDER_ENV).expect("provider");
    let task_timeout = Duration::from_millis(
        std::env::var(TASK_TIMEOUT_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60_000),
    );
    let boot = SharedBootstrap::new(Bootstrap::init(&cfg).expect("bootstrap"));
    let (rank, nranks) = {
        let b = boot.lock();
        (b.rank(), b.nranks())
    };
    if victim == Some(rank) && fault_phase() == FaultPhase::Connect {
        // Gone after the bootstrap, before the transport's all-gather and connect.
        process::exit(3);
    }

    let words: Arc<[AtomicU32]> = (0..WORDS).map(|_| AtomicU32::new(0)).collect();
    let mut src: Vec<Vec<Vec<u8>>> = (0..STREAMS)
        .map(|_| sizes().iter().map(|&n| vec![0u8; n]).collect())
        .collect();
    let mut dst: Vec<Vec<Vec<u8>>> = (0..STREAMS)
        .map(|_| sizes().iter().map(|&n| vec![POISON; n]).collect())
        .collect();

    // SAFETY: every host-word address given to the comm is a word of `words`, which outlives
    // the comm (the scenarios drop the comm before `words`).
    let device_cb = Arc::new(unsafe { DirectHostWords::new() });
    // The teardown's drains (stop's drain limit and the transport's close drain): 1 s, or
    // MULTIPROC_DRAIN_MS (ci.sh's killed_peer loop shortens them: on tcp the sends to a killed
    // peer cannot be cancelled, so both drains run to their limit).
    let drain = Duration::from_millis(
        std::env::var(DRAIN_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000),
    );
    let lf = LibfabricCommConfig {
        transport: Options {
            provider: Some(provider.clone()),
            close_drain: drain,
            ..Options::default()
        },
        drain_limit: Some(drain),
        ..LibfabricCommConfig::default()
    };
    let clock = Arc::new(MonotonicClock);
    let t_open = Instant::now();
    let mut comm = match open_libfabric_comm(&boot, &lf, device_cb, clock) {
        Ok(c) => Box::new(c),
        // A peer lost while connecting: the status and how long the open took to say so.
        Err(e) if victim.is_some() => {
            eprintln!("open_libfabric_comm: {e}");
            finish(&[
                ("status", e.status().as_str().into()),
                ("phase", "connect".into()),
                ("open_ms", t_open.elapsed().as_millis().to_string()),
                ("provider", provider.replace(';', ",")),
                ("boot", "lost".into()),
            ]);
        }
        Err(e) => panic!("libfabric comm: {e}"),
    };
    // SAFETY: the words and buffers stay allocated and unmoved until the comm is dropped (the
    // scenarios drop it first); the words are only accessed atomically.
    unsafe {
        comm.register_memory(words.as_ptr() as usize as u64, (words.len() * 4) as u64)
            .unwrap();
        for b in src.iter().chain(dst.iter()).flatten() {
            comm.register_memory(b.as_ptr() as usize as u64, b.len() as u64)
                .unwrap();
        }
    }
    let (blocks, sides) = build_blocks(rank, nranks, &words, &src, &mut dst);
    let bufs = |v: &mut Vec<Vec<Vec<u8>>>| -> Vec<Vec<Buf>> {
        v.iter_mut()
            .map(|s| {
                s.iter_mut()
                    .map(|b| Buf {
                        addr: b.as_mut_ptr() as usize,
                        len: b.len(),
                    })
                    .collect()
            })
            .collect()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let device = Device {
        rank,
        words: words.clone(),
        src: bufs(&mut src),
        dst: bufs(&mut dst),
        sides,
        victim: victim == Some(rank),
        small_only: victim.is_some() && fault_phase() == FaultPhase::Small,
        gated,
        stop: stop.clone(),
    };
    Setup {
        boot: Some(boot),
        rank,
        victim,
        provider,
        task_timeout,
        words,
        src,
        dst,
        comm: Some(comm),
        blocks,
        device: Some(device),
        stop,
    }
}

/// Starts the device thread; the flag is raised when it ends with an error.
fn spawn_device(st: &mut Setup) -> (thread::JoinHandle<Result<u64, String>>, Arc<AtomicBool>) {
    let device = st.device.take().expect("device");
    let failed = Arc::new(AtomicBool::new(false));
    let flag = failed.clone();
    let deadline = Instant::now() + Duration::from_secs(200);
    let h = thread::Builder::new()
        .name(format!("device-{}", st.rank))
        .spawn(move || {
            let r = device.run(deadline);
            if r.is_err() {
                flag.store(true, Ordering::Release);
            }
            r
        })
        .expect("device thread");
    (h, failed)
}

/// The final part of both scenarios: a bootstrap barrier (passes when everyone is fine, fails
/// when a peer was lost), close, free the memory, print the result.
fn conclude(
    st: Setup,
    status: String,
    device_result: &Result<u64, String>,
    fields: Vec<(&str, String)>,
) -> ! {
    finish(&conclude_fields(st, status, device_result, fields))
}

/// [`conclude`] without the exit: returns the result's fields.
fn conclude_fields<'a>(
    mut st: Setup,
    status: String,
    device_result: &Result<u64, String>,
    mut fields: Vec<(&'a str, String)>,
) -> Vec<(&'a str, String)> {
    let shared = st.boot.take().expect("bootstrap");
    let mut boot = shared.lock();
    let boot_result = match boot.barrier() {
        Ok(()) => "ok".to_owned(),
        Err(e) => {
            eprintln!("bootstrap after the run: {e}");
            e.status().as_str().to_owned()
        }
    };
    boot.close();
    assert!(st.comm.is_none(), "the comm is dropped before its memory");
    drop((st.src, st.dst, st.words));
    fields.insert(0, ("status", status));
    fields.push(("provider", st.provider.replace(';', ",")));
    fields.push((
        "checked_bytes",
        device_result.as_ref().map_or(0, |b| *b).to_string(),
    ));
    fields.push(("boot", boot_result));
    fields
}

/// Send/recv with the comm driven directly (start / progress / stop from this thread); with
/// `victim`, that rank stalls after its first entries (to be killed) and the other one
/// reports how its comm failed.
fn sendrecv(victim: Option<u32>) -> ! {
    finish(&sendrecv_run(setup(victim, false)))
}

/// One send/recv run on `st`, to the result's fields (see [`sendrecv`]).
pub(super) fn sendrecv_run(mut st: Setup) -> Vec<(&'static str, String)> {
    let mut comm = st.comm.take().expect("comm");
    for b in &st.blocks {
        comm.start(b.stream, b.bb, &b.ops, &b.src, &b.dst)
            .expect("start");
    }
    let (dev, device_failed) = spawn_device(&mut st);
    let start = Instant::now();
    let mut idle_ms = 0u128;
    // Phases `teardown` and `abort`: the survivor cuts its run short mid-transfer (the victim
    // stalls after its first entries, so the survivor's 16 MiB sends are in flight by then).
    let phase = fault_phase();
    let survivor = st.victim.is_some_and(|v| v != st.rank);
    let cut = (survivor && matches!(phase, FaultPhase::Teardown | FaultPhase::Abort))
        .then(|| start + Duration::from_millis(500));
    let outcome = drive(
        &mut comm,
        &st.words,
        &device_failed,
        st.task_timeout,
        &mut idle_ms,
        cut,
    );
    let progress_ms = start.elapsed().as_millis();
    if outcome.is_err() {
        st.stop.store(true, Ordering::Release);
    }
    if cut.is_some() && outcome == Err(NrtStatus::Closed) {
        if phase == FaultPhase::Abort {
            comm.abort_handle().abort();
            println!("ABORTED");
            let _ = std::io::Write::flush(&mut std::io::stdout());
            // The parent kills the victim now; destroy comes after the kill.
            thread::sleep(Duration::from_millis(300));
        } else {
            // The parent kills the victim now, while the stops below drain.
            println!("IN_TEARDOWN");
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
    }
    // Stop every stream (bounded by the drain limit), then drop the comm (the transport's close
    // drain is bounded too).
    let t_stop = Instant::now();
    let stops: Vec<String> = (0..STREAMS as u32)
        .map(|s| match comm.stop(s) {
            Ok(()) => "ok".to_owned(),
            Err(e) => e.as_str().to_owned(),
        })
        .collect();
    let stop_ms = t_stop.elapsed().as_millis();
    let t_drop = Instant::now();
    drop(comm);
    let drop_ms = t_drop.elapsed().as_millis();
    // On success the device finishes by itself (it may still be checking the last execution's
    // data); on failure it was told to stop above.
    let device_result = dev.join().expect("device thread panicked");
    let status = match (&outcome, &device_result) {
        (Ok(()), Ok(_)) => "ok".to_owned(),
        (Err(s), Err(e)) if *s == NrtStatus::Failure => {
            eprintln!("device: {e}");
            "DEVICE_ERROR".to_owned()
        }
        (Err(s), _) => s.as_str().to_owned(),
        (Ok(()), Err(e)) => {
            eprintln!("device: {e}");
            "DEVICE_ERROR".to_owned()
        }
    };
    conclude_fields(
        st,
        status,
        &device_result,
        vec![
            ("progress_ms", progress_ms.to_string()),
            ("idle_ms", idle_ms.to_string()),
            ("stop", stops.join(",")),
            ("stop_ms", stop_ms.to_string()),
            ("drop_ms", drop_ms.to_string()),
        ],
    )
}

/// Send/recv through the driver: per execution a network task (in-process seam onto the
/// libfabric comm, gated on the device's trigger words) and a barrier task over the bootstrap
/// connections (gated on its trigger; the leader raises barrier-done), all submitted up front
/// through the rank's slot of a proxy queue and stepped by its worker thread. With `victim`, that
/// rank stalls after its first entries; the survivor reports its network task's final status.
fn driver(victim: Option<u32>) -> ! {
    let mut st = setup(victim, true);
    // Arm every trigger word before anything is submitted or the device runs.
    for e in 0..EXECUTIONS {
        for s in 0..STREAMS {
            st.words[net_trigger(e, s)].store(0xFFFF_FFFF, Ordering::Release);
        }
        st.words[barrier_trigger(e)].store(0xFFFF_FFFF, Ordering::Release);
    }
    let word = |i: usize| {
        // SAFETY: `st.words` outlives every task (the slot is left, which ends every task,
        // before the words are freed in `conclude`).
        unsafe { HostWord::from_ref(&st.words[i]) }
    };
    let mut comm = st.comm.take().expect("comm");
    let comm_id = comm.config().comm_id;
    // SAFETY: the comm stays alive and is used by no other thread until the slot is left
    // (every task carrying the handle is DONE then); it is dropped after that.
    let handle = unsafe { CommHandle::new(&mut *comm as *mut Comm as *mut c_void) }.unwrap();
    let config = Config {
        exec_timeout: Some(st.task_timeout),
        ..Config::default()
    };
    let reg = registry(&config).expect("registry");
    let mut m = reg.join(st.rank).expect("join");
    let shared_boot = st.boot.take().expect("bootstrap");
    let timeout_ns = Some(u64::try_from(st.task_timeout.as_nanos()).unwrap());
    let mut tasks: Vec<TaskBox> = Vec::new();
    for e in 0..EXECUTIONS {
        let triggers: Vec<HostWord> = (0..STREAMS).map(|s| word(net_trigger(e, s))).collect();
        tasks.push(Box::new(
            NetworkTask::new(NetworkTaskSpec {
                task_id: 2 * e,
                comm: handle,
                comm_id,
                seam: SeamTable::in_process(),
                blocks: st.blocks.clone(),
                schedule: None,
                triggers: TriggerWords::new(&triggers).unwrap(),
                wait_for_device: true,
                skip: false,
                timeout_ns,
            })
            .expect("network task"),
        ));
        tasks.push(Box::new(BarrierTask::new(BarrierTaskSpec {
            task_id: 2 * e + 1,
            comm_id,
            channel: Box::new(shared_boot.barrier_channel()),
            triggers: TriggerWords::new(&[word(barrier_trigger(e))]).unwrap(),
            leader: true,
            done_semaphores: vec![word(BARRIER_DONE)],
            skip: false,
            timeout_ns,
        })));
    }
    for t in tasks {
        if let Err(r) = m.slot.submit(t) {
            panic!("submit: {}", r.status);
        }
    }
    let (dev, device_failed) = spawn_device(&mut st);
    let start = Instant::now();
    // Every record, or the first failure. Each wait is bounded by the tasks' own no-progress
    // timeout (a barrier task still in INIT behind a failed execution is ended by the leave).
    let mut records: Vec<TaskRecord> = Vec::new();
    let mut failure = None;
    while records.len() < tasks_len() && failure.is_none() {
        let Some(rec) = m.slot.wait_record(&waiter(Duration::from_micros(50))) else {
            break;
        };
        if rec.progress_status != 0 {
            failure = Some(rec);
        }
        records.push(rec);
        if device_failed.load(Ordering::Acquire) {
            break;
        }
    }
    let run_ms = start.elapsed().as_millis();
    if failure.is_some() || records.len() < tasks_len() {
        st.stop.store(true, Ordering::Release);
    }
    let t_leave = Instant::now();
    let left = reg.leave(m, &waiter(Duration::from_micros(50)));
    drop(reg);
    let leave_ms = t_leave.elapsed().as_millis();
    let t_drop = Instant::now();
    drop(comm);
    let drop_ms = t_drop.elapsed().as_millis();
    let device_result = dev.join().expect("device thread panicked");
    let status_of = |r: &TaskRecord| {
        NrtStatus::from_code(r.progress_status)
            .map_or_else(|| r.progress_status.to_string(), |s| s.as_str().to_owned())
    };
    let summary: Vec<String> = records
        .iter()
        .chain(left.iter())
        .map(|r| format!("{}:{}", r.task_id, status_of(r)))
        .collect();
    let status = match (&failure, &device_result) {
        (None, Ok(_)) if records.len() == tasks_len() => "ok".to_owned(),
        (Some(r), _) => status_of(r),
        (None, Err(e)) => {
            eprintln!("device: {e}");
            "DEVICE_ERROR".to_owned()
        }
        (None, Ok(_)) => "MISSING_RECORDS".to_owned(),
    };
    // The comm (and its peer watch) is gone: no other handle may remain.
    st.boot = Some(SharedBootstrap::new(
        shared_boot
            .try_unwrap()
            .unwrap_or_else(|_| panic!("a barrier channel or peer watch outlived its user")),
    ));
    conclude(
        st,
        status,
        &device_result,
        vec![
            ("tasks", summary.join(",")),
            ("run_ms", run_ms.to_string()),
            ("leave_ms", leave_ms.to_string()),
            ("drop_ms", drop_ms.to_string()),
        ],
    )
}

fn tasks_len() -> usize {
    driver_tasks()
}

/// Tasks the driver scenario submits per rank (a network and a barrier task per execution).
pub fn driver_tasks() -> usize {
    2 * EXECUTIONS as usize
}
