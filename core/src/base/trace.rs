//! Event recording: small binary records of what the engine did and when, in a fixed-size
//! lock-free ring, for a timeline (issue 28; the platform drains them, e.g. into a Chrome /
//! Perfetto trace).
//!
//! What is recorded ([`Kind`]): every state transition of every machine that goes through
//! [`crate::base::state::check`] (ops and tasks with their ids), the drive token taken and
//! released, a driving thread going to sleep and waking up, and every transport post and
//! completion of a send/recv op. Each [`Record`] has a timestamp from the clock the platform
//! handed in at [`install`] (the core reads no clock of its own), the recording thread's id (a
//! function the platform handed in), the rank, comm, stream, op, block and FIFO entry where the
//! recording site knows them, the peer and the bytes.
//!
//! **One clock read per tick** ([`TickStamp`], in `stamp.rs`): the records a driving thread
//! makes in one tick share the clock read of the first of them, except a record that follows a
//! transport call ([`emit_fresh`]), which reads the clock afresh; the tick drops the stamp
//! before every call out of its own bookkeeping (the progress half, a barrier channel, a device
//! poller). The clock read is a large part of a record's cost (issue 28).
//!
//! **Off is free.** Recording sites call [`emit`] with the event's class ([`mask`]): one load
//! of a process-wide word (the installed tracer's mask while it is on, else 0) and a branch when
//! nothing records that class (no tracer installed, switched off with [`Tracer::set_on`], or
//! the class not in [`Tracer::set_mask`]'s mask); no allocation, no lock, no clock read. The
//! record is built by a closure that runs only when recording.
//!
//! **Classes** ([`mask`], as NCCL's profiler plugin's activation mask): [`mask::OPS`] where an
//! op and a collective's task begin and end, [`mask::STEPS`] their state changes in between
//! (an op's handshake → transfer and its re-arm by the op walk; a task's waiting, running,
//! idle), [`mask::TRANSPORT`] every transport post and completion of a FIFO entry,
//! [`mask::TRANSITIONS`] every other machine's transitions, [`mask::DRIVE`] the drive token
//! taken and released, [`mask::SLEEP`] a driving thread's sleep and wake-up. Marks are always
//! recorded.
//!
//! **The ring** ([`TraceRing`], in `ring.rs`) is multi-writer and claim-once: a slot is
//! written once, then published (Release; a drain reads it with Acquire), so a drain may run at
//! any time. It is cut into chunks that it hands to *lanes*: the platform gives each recording
//! thread its own lane ([`Tracer::with_lanes`]), and a record costs a compare-and-swap on the
//! lane's word (in the thread's own cache) and a write to the lane's own chunk; the ring-wide
//! chunk counter is touched once per chunk. (One claim word shared by every thread, as before,
//! moved a cache line between the rank threads at every event: issue 28.) When the ring is
//! full, new records are dropped and counted ([`TraceRing::dropped`]): the ring keeps the
//! *first* events (a truncated trace, never an overwritten one); a platform that wants a window
//! switches recording on only around it. Loom model 16 (`loom-tests/tests/trace.rs`) checks
//! the handoff from writers to a concurrent drain (plant `TraceReadyRelaxed`) and two writers
//! sharing a lane (plant `TraceLaneClaimByLoadStore`).
//!
//! Seed: none (the seed has a state dump and counters only).

use crate::base::sync::{SwitchAtomicBool, SwitchAtomicPtr, SwitchAtomicU32, SwitchOrdering};

pub mod mask;
mod ring;
mod stamp;
use crate::base::sync::CachePadded;
use crate::base::time::Clock;
use alloc::boxed::Box;
use alloc::vec::Vec;
pub use ring::{Drained, TraceRing, MAX_CHUNK};
pub use stamp::{LaneStamp, OpenTick, TickStamp};

/// "Not known at the recording site" for a record's id fields.
pub const NONE: u32 = u32::MAX;

/// What a record says happened.
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kind {
    /// A state machine took an edge: `machine`, `from`, `to`, `edge`.
    #[default]
    Transition = 0,
    /// The recording thread took a queue's drive token (`op` is the queue's id).
    TokenTake = 1,
    /// The recording thread released a queue's drive token (`op` is the queue's id).
    TokenRelease = 2,
    /// A driving thread is going to sleep (parks; `op` is the queue's id).
    Sleep = 3,
    /// A driving thread woke up from [`Kind::Sleep`] (`op` is the queue's id).
    Wake = 4,
    /// An op posted FIFO entry `entry` to the transport (`bytes`, `peer`, `side`).
    Post = 5,
    /// The transport finished FIFO entry `entry` of an op (`bytes`, `peer`, `side`).
    Complete = 6,
    /// A mark the platform set ([`Tracer::mark`]), e.g. where a recording window begins
    /// (`op` is the platform's number for it).
    Mark = 7,
}

impl Kind {
    /// The kind's event class ([`mask`]); a transition's is its machine's
    /// ([`crate::base::state::Machine::trace_class`]: [`mask::TRANSITIONS`] here).
    pub const fn class(self) -> u32 {
        match self {
            Self::Transition => mask::TRANSITIONS,
            Self::TokenTake | Self::TokenRelease => mask::DRIVE,
            Self::Sleep | Self::Wake => mask::SLEEP,
            Self::Post | Self::Complete => mask::TRANSPORT,
            Self::Mark => mask::ALL,
        }
    }

    /// The kind's name in traces (`transition`, `token-take`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Transition => "transition",
            Self::TokenTake => "token-take",
            Self::TokenRelease => "token-release",
            Self::Sleep => "sleep",
            Self::Wake => "wake",
            Self::Post => "post",
            Self::Complete => "complete",
            Self::Mark => "mark",
        }
    }
}

/// [`Record::side`] of a send op.
pub const SEND: u8 = 1;
/// [`Record::side`] of a receive op.
pub const RECV: u8 = 0;

/// One event (72 bytes on 64-bit targets). Id fields the recording site does not know are
/// [`NONE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// When, in ns of the clock handed to [`install`].
    pub ts_ns: u64,
    /// Bytes of a post or completion (0 otherwise).
    pub bytes: u64,
    /// The machine of a transition ([`crate::base::state::Machine::NAME`]: `"op"`, `"task"`,
    /// ...); `""` for the other kinds.
    pub machine: &'static str,
    /// The recording thread (the platform's id, handed to [`install`]).
    pub thread: u32,
    /// The comm's rank.
    pub rank: u32,
    /// The comm id.
    pub comm: u32,
    /// The op's index within its `start` call (`net_op_idx`), a task's id, or a queue's id.
    pub op: u32,
    /// The basic block (ops) or the slot (tasks).
    pub block: u32,
    /// The FIFO entry of a post or completion; of an op transition the entries completed so
    /// far; of a task transition the task's kind (0 network, 1 barrier).
    pub entry: u32,
    /// The peer rank of an op.
    pub peer: u32,
    /// The stream (0..=3), or `u8::MAX`.
    pub stream: u8,
    /// What happened.
    pub kind: Kind,
    /// A transition's state before ([`crate::base::state::Machine::code`]).
    pub from: u8,
    /// A transition's state after.
    pub to: u8,
    /// The op's side: [`SEND`], [`RECV`], or `u8::MAX` (not an op, or another kind of op).
    pub side: u8,
    /// A transition's edge number in its machine's diagram.
    pub edge: u8,
}

impl Record {
    /// A record of `kind` with every id [`NONE`], time 0, no bytes.
    pub const fn new(kind: Kind) -> Self {
        Self {
            ts_ns: 0,
            bytes: 0,
            machine: "",
            thread: NONE,
            rank: NONE,
            comm: NONE,
            op: NONE,
            block: NONE,
            entry: NONE,
            peer: NONE,
            stream: u8::MAX,
            kind,
            from: 0,
            to: 0,
            side: u8::MAX,
            edge: 0,
        }
    }
}

impl Default for Record {
    fn default() -> Self {
        Self::new(Kind::Transition)
    }
}

/// A process-wide recorder: the ring, the clock, the thread-id and lane functions the platform
/// handed in, the exclusive lanes' tick stamps ([`TickStamp`]), and the on/off switch.
pub struct Tracer {
    ring: TraceRing,
    /// One per lane: the tick stamp of the thread that owns the lane.
    stamps: Box<[CachePadded<LaneStamp>]>,
    clock: &'static dyn Clock,
    thread: fn() -> u32,
    lane: fn() -> usize,
    on: SwitchAtomicBool,
    /// The classes recorded while on ([`mask`]).
    mask: SwitchAtomicU32,
}

impl Tracer {
    /// A tracer of `capacity` records with one lane shared by every thread (no tick stamps:
    /// every record reads the clock), off, recording every class ([`mask::ALL`]) once on,
    /// stamping records with `clock` and `thread()`.
    pub fn new(capacity: usize, clock: &'static dyn Clock, thread: fn() -> u32) -> Self {
        Self::with_lanes(capacity, 1, clock, thread, || usize::MAX)
    }

    /// A tracer of `capacity` records in `lanes` lanes ([`TraceRing::with_lanes`], chunks of
    /// [`TraceRing::chunk_for`]): a thread records on lane `lane()`. A `lane()` below `lanes`
    /// must be the calling thread's alone while it lives (e.g. a per-thread index): its records
    /// then touch no cache line another thread writes, and its ticks share a clock read
    /// ([`TickStamp`]); from `lanes` on a lane is shared (taken modulo `lanes`; correct, only
    /// slower: one clock read per record). Off, recording every class once on, stamping records
    /// with `clock` and `thread()`.
    pub fn with_lanes(
        capacity: usize,
        lanes: usize,
        clock: &'static dyn Clock,
        thread: fn() -> u32,
        lane: fn() -> usize,
    ) -> Self {
        Self {
            ring: TraceRing::with_lanes(capacity, lanes, TraceRing::chunk_for(capacity, lanes)),
            stamps: (0..lanes.max(1))
                .map(|_| CachePadded::new(LaneStamp::new()))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
            clock,
            thread,
            lane,
            on: SwitchAtomicBool::new(false),
            mask: SwitchAtomicU32::new(mask::ALL),
        }
    }

    /// Switches recording on or off (recording sites see it at their next event).
    pub fn set_on(&self, on: bool) {
        self.on.store(on, SwitchOrdering::Relaxed);
        self.publish();
    }

    /// Sets the classes recorded while on ([`mask`]; recording sites see it at their next
    /// event).
    pub fn set_mask(&self, classes: u32) {
        self.mask
            .store(classes & mask::ALL, SwitchOrdering::Relaxed);
        self.publish();
    }

    /// The classes recorded while on.
    pub fn mask(&self) -> u32 {
        self.mask.load(SwitchOrdering::Relaxed)
    }

    /// Publishes this tracer's effective mask (its mask while on, else 0) to [`emit`] when it
    /// is the installed one.
    fn publish(&self) {
        if installed().is_some_and(|t| core::ptr::eq(t, self)) {
            let m = if self.is_on() { self.mask() } else { 0 };
            ACTIVE.store(m, SwitchOrdering::Relaxed);
        }
    }

    /// `true` while recording.
    pub fn is_on(&self) -> bool {
        self.on.load(SwitchOrdering::Relaxed)
    }

    /// The ring (to drain it).
    pub fn ring(&self) -> &TraceRing {
        &self.ring
    }

    /// Records a [`Kind::Mark`] numbered `n` now (even when off): e.g. the start of a
    /// recording window, so that a drain can tell waits that began before it.
    pub fn mark(&self, n: u32) -> bool {
        self.record(Record {
            op: n,
            ..Record::new(Kind::Mark)
        })
    }

    /// Stamps `rec` with the time and thread and appends it on the thread's lane (even when
    /// off). A full ring counts the record dropped without reading the clock. The time is read
    /// once the slot is claimed ([`TraceRing::push_on`]); in an open tick it is the tick's
    /// stamp when there is one ([`TickStamp`]: a shared record).
    pub fn record(&self, rec: Record) -> bool {
        self.record_as(rec, false)
    }

    /// [`Tracer::record`] with a time read now, also in an open tick (a record that follows a
    /// transport call: [`emit_fresh`]); the read becomes the tick's stamp.
    pub fn record_fresh(&self, rec: Record) -> bool {
        self.record_as(rec, true)
    }

    #[inline]
    fn record_as(&self, rec: Record, fresh: bool) -> bool {
        let lane = (self.lane)();
        self.ring.push_on(lane, rec, |r| {
            r.ts_ns = match self.stamps.get(lane) {
                Some(s) => s.take(fresh, self.clock),
                None => self.clock.now_ns(),
            };
            r.thread = (self.thread)();
        })
    }

    /// The calling thread's lane stamp when its lane is its own ([`Tracer::with_lanes`]).
    pub fn lane_stamp(&self) -> Option<&LaneStamp> {
        self.stamps.get((self.lane)()).map(|s| &**s)
    }

    /// The calling thread's tick stamp handle on this tracer ([`TickStamp::here`] takes the
    /// installed one's while recording): [`TickStamp::NONE`] when its lane is shared.
    pub fn tick_stamp(&'static self) -> TickStamp {
        TickStamp::of(self.lane_stamp())
    }

    /// Closes lane `lane`'s tick stamp (a platform that hands a lane to a new thread after its
    /// owner ended: a tick the owner left open, e.g. by unwinding, is not shared with the new
    /// owner's first records).
    pub fn close_lane(&self, lane: usize) {
        if let Some(s) = self.stamps.get(lane) {
            s.close();
        }
    }
}

/// The installed tracer (null: none).
static TRACER: SwitchAtomicPtr<Tracer> = SwitchAtomicPtr::new(core::ptr::null_mut());

/// The classes [`emit`] records: the installed tracer's mask while it is on, else 0.
static ACTIVE: SwitchAtomicU32 = SwitchAtomicU32::new(0);

/// Installs `tracer` as the process's recorder; `false` (nothing changes) when one is installed
/// already. Install before the threads that should record start: a thread that started before
/// may not see it at once (it then records nothing until it does).
pub fn install(tracer: &'static Tracer) -> bool {
    let p = tracer as *const Tracer as *mut Tracer;
    // Release: a thread that loads the pointer (Acquire) sees the initialised tracer.
    let ok = TRACER
        .compare_exchange(
            core::ptr::null_mut(),
            p,
            SwitchOrdering::Release,
            SwitchOrdering::Relaxed,
        )
        .is_ok();
    if ok {
        tracer.publish();
    }
    ok
}

/// The installed tracer, if any.
#[inline]
pub fn installed() -> Option<&'static Tracer> {
    let p = TRACER.load(SwitchOrdering::Acquire);
    // SAFETY: a non-null pointer came from `install`'s `&'static Tracer` and is never freed.
    unsafe { p.cast_const().as_ref() }
}

/// The classes recorded now ([`mask`]): the installed tracer's mask while it is on, else 0.
#[inline]
pub fn active() -> u32 {
    ACTIVE.load(SwitchOrdering::Relaxed)
}

/// [`emit`] for a site whose class takes a computation (a transition's, from its states):
/// `class()` runs only while something is recorded; off, one load and one branch.
#[inline]
pub fn emit_with(class: impl FnOnce() -> u32, make: impl FnOnce() -> Record) {
    emit_with_as(false, class, make);
}

/// Records the event `make()` builds when a tracer is installed, on, and records `class`
/// ([`mask`]); otherwise one load and one branch, nothing else (`make` does not run). In an
/// open tick the record shares the tick's stamp ([`TickStamp`]).
#[inline]
pub fn emit(class: u32, make: impl FnOnce() -> Record) {
    emit_as(false, class, make);
}

/// [`emit`] for a record that follows a transport call (a post, a completion, an op's
/// transition by the op walk): its time is read now, also in an open tick ([`TickStamp`]).
#[inline]
pub fn emit_fresh(class: u32, make: impl FnOnce() -> Record) {
    emit_as(true, class, make);
}

/// [`emit`], fresh when `fresh` ([`emit_fresh`]).
#[inline]
fn emit_as(fresh: bool, class: u32, make: impl FnOnce() -> Record) {
    if active() & class != 0 {
        if let Some(t) = installed() {
            t.record_as(make(), fresh);
        }
    }
}

/// [`emit_with`], fresh when `fresh` ([`emit_fresh`]).
#[inline]
pub fn emit_with_as(fresh: bool, class: impl FnOnce() -> u32, make: impl FnOnce() -> Record) {
    let active = active();
    if active != 0 && active & class() != 0 {
        if let Some(t) = installed() {
            t.record_as(make(), fresh);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
