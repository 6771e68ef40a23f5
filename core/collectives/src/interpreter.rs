//! The device-program interpreter: plays the Neuron device's side of a planned collective
//! through the host-memory words only (docs/design.md §5), so the proxy has a real peer to
//! interlock with.
//!
//! A [`Job`] is one *execution*, run by [`Device::execute`]:
//! 1. **net stage**: write 1 to every trigger word of the network task, wait until the proxy
//!    consumed each (reads 0) — a proxy that skips the trigger gate stalls here;
//! 2. `reps` times the block's device program ([`Instr`]): arm each op side's host index with
//!    [`HOST_INDEX_READY`], wait for the handshake semaphore, raise the host indices as send data
//!    is ready and receive buffers are free, wait on the complete semaphores, reduce received
//!    chunks into the output (the planner's kernels: tight loops the compiler vectorises),
//!    copy; a proxy that skips a handshake or a semaphore makes the device wait (and time out);
//! 3. **barrier**: write 1 to the barrier task's trigger words, wait until its barrier-done
//!    semaphore rose (the barrier leader increments it), then report the execution complete.
//!
//! Semaphores are cumulative; the device snapshots each one before it arms (between executions
//! nobody touches them), so counts in the program are per execution. A semaphore that runs
//! ahead of what the device posted is a proxy bug and fails the job ([`DeviceError`]).
//!
//! The interpreter never blocks, names a thread or reads a clock itself: every wait goes through
//! the platform's [`DeviceEnv::wait`] (on Linux `proxy-emulator`'s spin / yield / nap policy with
//! a timeout and an abort flag), and the counters a tool reads are reported through
//! [`DeviceEnv::record`].
//!
//! Fault injection ([`Fault`]): flips one byte of one received chunk in every execution, after
//! the device has seen the chunk complete and before it uses it; a correct checker must then
//! report wrong elements.
//!
//! Seed: the on-device collective program that the proxy interlocks with: trigger words
//! (`start_proxy_task_host_mem_addrs`, §5), the `-1` host-index handshake and `nec_inc_semaphore`
//! completions (§5), the barrier-done semaphore (`inc_leader_sps_barrier_done_semas`, §3).

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use proxy_core::driver::trigger::HostWord;
use proxy_core::progress::sendrecv::HOST_INDEX_READY;

use crate::planner::kernels::reduce_raw;
use crate::planner::{Addresses, Instr, OpWord, RankPlan, Side};

/// Why a wait of [`DeviceEnv::wait`] ended without its condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitEnd {
    /// The platform's time limit passed.
    TimedOut,
    /// The platform gave up on the execution (e.g. its launcher's abort flag).
    Aborted,
}

/// Something the interpreter counts (reported through [`DeviceEnv::record`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// One program execution completed.
    Execution,
    /// One receive entry was seen complete, `bytes` long.
    RecvEntry {
        /// Bytes of the entry.
        bytes: u64,
    },
    /// Fault injection flipped one byte.
    FaultInjected,
}

/// The platform under the interpreter: how to wait for a host word, and where the counters go.
pub trait DeviceEnv {
    /// Waits until `cond` answers `true` (re-checking it as the platform sees fit: spinning,
    /// yielding, napping).
    ///
    /// # Errors
    /// [`WaitEnd`] when the platform stopped waiting first.
    fn wait(&self, cond: &mut dyn FnMut() -> bool) -> Result<(), WaitEnd>;

    /// Counts `event` (the default ignores it).
    fn record(&self, event: Event) {
        let _ = event;
    }
}

/// A device failure: the proxy did not answer in time, or broke the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// A wait timed out; `what` names the word and the value waited for.
    Timeout {
        /// Rank of the device.
        rank: u32,
        /// What it waited for.
        what: String,
    },
    /// A semaphore rose beyond what the protocol allows (e.g. more completions than posted
    /// entries, or two handshakes in one execution), or the job names an invalid host word.
    Protocol {
        /// Rank of the device.
        rank: u32,
        /// What was seen.
        what: String,
    },
    /// The launcher gave up on the execution while the device waited ([`WaitEnd::Aborted`]).
    Aborted {
        /// Rank of the device.
        rank: u32,
    },
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Timeout { rank, what } => {
                write!(f, "device {rank}: timed out waiting for {what}")
            }
            DeviceError::Protocol { rank, what } => {
                write!(f, "device {rank}: protocol violation: {what}")
            }
            DeviceError::Aborted { rank } => write!(f, "device {rank}: execution aborted"),
        }
    }
}

impl core::error::Error for DeviceError {}

/// One launch: an execution of a block `reps` times between the net-stage trigger and the
/// barrier (`reps > 1` is a device program looping over the block).
#[derive(Clone, Debug)]
pub struct Job {
    /// The rank's plan (program, entries).
    pub plan: Arc<RankPlan>,
    /// Where its buffers and host words are.
    pub addrs: Addresses,
    /// Executions of the program in this launch (at least 1 to do anything).
    pub reps: u32,
    /// The network task's trigger words (one per stream); empty = no net-stage gate.
    pub net_triggers: Vec<u64>,
    /// The barrier task's trigger words; empty = no barrier stage.
    pub barrier_triggers: Vec<u64>,
    /// The barrier-done semaphore the device waits on after the barrier trigger (if any).
    pub barrier_done: Option<u64>,
}

/// Fault injection: flip one byte of one received chunk in every execution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fault {
    /// Index in the plan's destination FIFO of the chunk to corrupt; `None` = the first
    /// non-empty one.
    pub entry: Option<usize>,
}

/// The device of one rank: executes jobs on the calling thread, waiting through a
/// [`DeviceEnv`].
#[derive(Debug)]
pub struct Device {
    rank: u32,
    fault: Option<Fault>,
}

impl Device {
    /// A device for `rank`, injecting `fault` if given.
    pub fn new(rank: u32, fault: Option<Fault>) -> Self {
        Self { rank, fault }
    }

    /// The rank of this device.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    fn protocol(&self, what: String) -> DeviceError {
        DeviceError::Protocol {
            rank: self.rank,
            what,
        }
    }

    /// The checked handle on the host word at `addr`.
    ///
    /// # Safety
    /// As [`Device::execute`]: `addr` is a live host word of the job, accessed only atomically,
    /// until `execute` returns.
    unsafe fn word(&self, addr: u64) -> Result<HostWord, DeviceError> {
        // SAFETY: the caller's contract.
        unsafe { HostWord::from_addr(addr) }
            .ok_or_else(|| self.protocol(format!("host word address {addr:#x} is not valid")))
    }

    /// Waits until the word at `addr` satisfies `cond`; returns the value seen.
    ///
    /// # Safety
    /// As [`Device::word`].
    unsafe fn wait_word(
        &self,
        env: &impl DeviceEnv,
        addr: u64,
        what: impl FnOnce() -> String,
        cond: impl Fn(u32) -> bool,
    ) -> Result<u32, DeviceError> {
        // SAFETY: the caller's contract.
        let w = unsafe { self.word(addr) }?;
        let mut seen = 0;
        match env.wait(&mut || {
            seen = w.load();
            cond(seen)
        }) {
            Ok(()) => Ok(seen),
            Err(WaitEnd::Aborted) => Err(DeviceError::Aborted { rank: self.rank }),
            Err(WaitEnd::TimedOut) => Err(DeviceError::Timeout {
                rank: self.rank,
                what: format!("{} (last value {seen:#x})", what()),
            }),
        }
    }

    /// Runs one job: net-stage trigger, `reps` executions of the program, barrier.
    ///
    /// # Errors
    /// [`DeviceError`] when a wait ends without its condition or the proxy breaks the
    /// protocol.
    ///
    /// # Safety
    /// Every address of `job` (buffers per the plan's layout, host words, trigger and barrier
    /// words) must be live and valid for the accesses the program makes until this returns;
    /// host words are only ever accessed atomically; no other thread touches the buffers except
    /// the transport as the protocol allows (between a post and its completion).
    pub unsafe fn execute(&mut self, job: &Job, env: &impl DeviceEnv) -> Result<(), DeviceError> {
        for &t in &job.net_triggers {
            // SAFETY: per this function's contract.
            unsafe { self.word(t) }?.store(1);
        }
        for &t in &job.net_triggers {
            // SAFETY: per this function's contract.
            unsafe {
                self.wait_word(
                    env,
                    t,
                    || format!("net trigger word {t:#x} to be consumed"),
                    |v| v == 0,
                )
            }?;
        }
        for _ in 0..job.reps {
            // SAFETY: per this function's contract.
            unsafe { self.run_program(job, env) }?;
            env.record(Event::Execution);
        }
        if job.barrier_triggers.is_empty() {
            return Ok(());
        }
        // Snapshot the barrier-done semaphore before the trigger: the barrier cannot pass
        // (and the leader cannot increment it) before every device triggered.
        let done_base = match job.barrier_done {
            // SAFETY: per this function's contract.
            Some(a) => Some(unsafe { self.word(a) }?.load()),
            None => None,
        };
        for &t in &job.barrier_triggers {
            // SAFETY: per this function's contract.
            unsafe { self.word(t) }?.store(1);
        }
        if let (Some(a), Some(base)) = (job.barrier_done, done_base) {
            // SAFETY: per this function's contract.
            let v = unsafe {
                self.wait_word(
                    env,
                    a,
                    || format!("barrier-done semaphore {a:#x}"),
                    |v| v.wrapping_sub(base) >= 1,
                )
            }?;
            if v.wrapping_sub(base) > 1 {
                return Err(self.protocol(format!(
                    "barrier-done semaphore rose by {} in one execution",
                    v.wrapping_sub(base)
                )));
            }
        }
        Ok(())
    }

    /// The fault target as (op, index within the op's recv side, byte offset), if any.
    fn fault_target(&self, plan: &RankPlan) -> Option<(u32, u32, u64)> {
        let f = self.fault?;
        let e = match f.entry {
            Some(i) => i,
            None => plan.dst.iter().position(|e| e.bytes > 0)?,
        };
        let entry = plan.dst.get(e)?;
        let op = plan.ops[entry.op as usize];
        // The most significant byte of the first element: a change no op can hide for sums.
        let byte = (plan.params.dtype.size() as u64 - 1).min(entry.bytes.saturating_sub(1));
        Some((entry.op, e as u32 - op.dst_base, byte))
    }

    /// One execution of the job's program.
    ///
    /// # Safety
    /// As [`Device::execute`].
    unsafe fn run_program(&mut self, job: &Job, env: &impl DeviceEnv) -> Result<(), DeviceError> {
        let plan = &*job.plan;
        let a = &job.addrs;
        let n = plan.ops.len();
        let w = |op: u32, hw: OpWord| a.word(hw.index(op));
        // SAFETY: the job's host words are live (execute's contract).
        let word = |addr: u64| unsafe { self.word(addr) };
        let mut hs_base = vec![[0u32; 2]; n];
        let mut cpl_base = vec![[0u32; 2]; n];
        let mut posted = vec![[0u32; 2]; n];
        let mut seen = vec![[0u32; 2]; n];
        for (k, o) in plan.ops.iter().enumerate() {
            for side in [Side::Send, Side::Recv] {
                if o.entries(side) > 0 {
                    hs_base[k][side as usize] = word(w(k as u32, OpWord::handshake(side)))?.load();
                    cpl_base[k][side as usize] = word(w(k as u32, OpWord::complete(side)))?.load();
                }
            }
        }
        let fault = self.fault_target(plan);
        let mut flipped = false;
        let p = plan.params;
        let elt = p.dtype.size() as u64;
        for ins in &plan.program {
            match *ins {
                Instr::Arm { op, side } => {
                    word(w(op, OpWord::post(side)))?.store(HOST_INDEX_READY);
                }
                Instr::WaitHandshake { op, side } => {
                    let base = hs_base[op as usize][side as usize];
                    // SAFETY: as above.
                    let v = unsafe {
                        self.wait_word(
                            env,
                            w(op, OpWord::handshake(side)),
                            || {
                                format!(
                                    "op {op} {side:?} handshake semaphore to reach {}",
                                    base + 1
                                )
                            },
                            |v| v.wrapping_sub(base) >= 1,
                        )
                    }?;
                    if v.wrapping_sub(base) != 1 {
                        return Err(self.protocol(format!(
                            "op {op} {side:?}: handshake semaphore rose by {} in one execution",
                            v.wrapping_sub(base)
                        )));
                    }
                    // The proxy writes 0 to the host index before it increments the handshake.
                    let idx = word(w(op, OpWord::post(side)))?.load();
                    if idx != 0 {
                        return Err(self.protocol(format!(
                            "op {op} {side:?}: host index {idx:#x} after the handshake (want 0)"
                        )));
                    }
                }
                Instr::Post { op, side, upto } => {
                    posted[op as usize][side as usize] = upto;
                    // Release (HostWord::store): the data of the posted send entries (written
                    // by this thread) is visible to the proxy that reads the index with acquire.
                    word(w(op, OpWord::post(side)))?.store(upto);
                }
                Instr::Wait { op, side, upto } => {
                    let base = cpl_base[op as usize][side as usize];
                    // SAFETY: as above.
                    let v = unsafe {
                        self.wait_word(
                            env,
                            w(op, OpWord::complete(side)),
                            || {
                                format!(
                                    "op {op} {side:?} complete semaphore to reach {} (+{upto})",
                                    base.wrapping_add(upto)
                                )
                            },
                            |v| v.wrapping_sub(base) >= upto,
                        )
                    }?;
                    let done = v.wrapping_sub(base);
                    let max = posted[op as usize][side as usize];
                    if done > max {
                        return Err(self.protocol(format!(
                            "op {op} {side:?}: {done} entries complete, only {max} posted"
                        )));
                    }
                    let prev = seen[op as usize][side as usize];
                    if side == Side::Recv && done > prev {
                        for e in &plan.entries(op, side)[prev as usize..done as usize] {
                            env.record(Event::RecvEntry { bytes: e.bytes });
                        }
                        if let Some((fop, fidx, byte)) = fault {
                            if !flipped && fop == op && fidx < done {
                                flipped = true;
                                let e = plan.entries(op, side)[fidx as usize];
                                let addr = a.of(e.loc) + byte;
                                // SAFETY: the entry is complete (the transport is done with
                                // it) and lies in this rank's buffers; only this thread uses
                                // it now.
                                unsafe { *(addr as usize as *mut u8) ^= 0xFF };
                                env.record(Event::FaultInjected);
                            }
                        }
                    }
                    seen[op as usize][side as usize] = done.max(prev);
                }
                Instr::Reduce {
                    dst,
                    a: x,
                    b: y,
                    elems,
                } => {
                    // SAFETY: the planner's hazard tracking guarantees no transfer touches
                    // these ranges now; they lie in the rank's buffers (execute's contract).
                    unsafe {
                        reduce_raw(
                            p.dtype,
                            p.op,
                            a.of(dst) as usize as *mut u8,
                            a.of(x) as usize as *const u8,
                            a.of(y) as usize as *const u8,
                            elems as usize,
                        )
                    };
                }
                Instr::Copy { dst, src, bytes } => {
                    debug_assert!(bytes % elt == 0);
                    // SAFETY: as for Reduce; the planner never copies between overlapping
                    // ranges.
                    unsafe {
                        core::ptr::copy_nonoverlapping(
                            a.of(src) as usize as *const u8,
                            a.of(dst) as usize as *mut u8,
                            bytes as usize,
                        )
                    };
                }
            }
        }
        Ok(())
    }
}
