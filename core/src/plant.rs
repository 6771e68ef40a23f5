//! Planted bugs: one deliberate bug per cross-thread handoff (and a few protocol bugs),
//! compiled into the shipping code next to the line each one breaks, off until selected.
//!
//! A model that cannot fail proves nothing, so every loom model in `loom-tests/` is also run
//! with the bug it is there to find planted, and must fail (`loom_tests::assert_loom_catches`).
//! Four protocol plants are shown caught by the crate's own task and send/recv tests (the tests
//! of this module: the trigger gate, the index wrap, receives posted beyond the ending credits,
//! early send completion without the flag); the protocol plants that stall the device (`NetworkSkipsTriggerGate`,
//! `SendRecvSkipsHandshake`, `SendRecvSkipsCompletion`) by `proxy-emulator`'s plant tests,
//! with a real device emulator as the proxy's peer. Planting in the real code, not in a copy,
//! means a model that catches a plant has checked the code as it ships.
//!
//! This module exists only under `--cfg loom` or the `plants` feature. At each planted line the
//! code reads `plant!(Name, buggy, correct)` (an expression) or `plant!(Name => { buggy })` (a
//! block run instead of the rest of the function); without `--cfg loom` and the feature the
//! macro expands to the correct code alone, so a normal build holds no plant code at all. Every
//! planted line carries a `// PLANT:` comment.
//!
//! The selector is process-wide: [`set`] one plant (or none) for the whole process before the
//! code under test runs, and never while other threads run planted code. Tests in one binary run
//! in parallel threads, so a planted run happens in a child process (`loom-tests` re-runs its
//! test binary with `LOOM_TESTS_PLANT=<name>`; this crate's own tests read [`PLANT_ENV`]). The
//! storage is a plain atomic, not loom's ([`crate::base::sync`]'s non-loom re-export): loom atomics
//! cannot be statics, and a read of the selector must add no branch point to a model. 8 bits:
//! `thumbv7em` has no 64-bit atomics.

#[cfg(all(test, not(loom)))]
extern crate std;

use alloc::string::String;
use alloc::vec::Vec;

use crate::base::sync::{NonLoomPlantAtomicU8 as AtomicU8, NonLoomPlantOrdering as Ordering};

/// Declares [`Plant`] with its discriminants (0 is "none"), [`Plant::ALL`] and [`Plant::name`].
macro_rules! plants {
    ($($(#[doc = $doc:literal])* $name:ident = $n:literal,)*) => {
        /// One planted bug. Each variant says which line it breaks (`file: function`) and what
        /// must catch it.
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Plant {
            $($(#[doc = $doc])* $name = $n,)*
        }

        impl Plant {
            /// Every plant, in declaration order.
            pub const ALL: &'static [Plant] = &[$(Plant::$name),*];

            /// The variant's name (what [`Plant::from_name`] parses).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Plant::$name => stringify!($name),)*
                }
            }
        }
    };
}

plants! {
    /// `ring.rs: Producer::push` stores `tail` with `Relaxed` instead of `Release`, so the
    /// consumer may read a slot before its write is visible. Loom model 1 (`tests/ring.rs`):
    /// a causality violation on the slot.
    RingRelaxedTail = 1,
    /// `record.rs: StatusRecord::publish` stores `run_state` with `Relaxed` instead of
    /// `Release`: a consumer that acquires `DONE` may read stale fields. Loom model 2
    /// (`tests/records.rs`): "another field was not final".
    RecordRelaxedRunState = 2,
    /// `wake.rs: WaitCell::notify` returns when a plain load reads the word EMPTY ("nobody is
    /// parked"), the lost-wakeup trap. Loom models 2 and 3 (`tests/records.rs`,
    /// `tests/park_wake.rs`): a deadlock.
    WakeNotifySkipsEmpty = 3,
    /// `wake.rs: WaitCell::park` marks itself PARKED with a load and a plain store instead of a
    /// CAS: a NOTIFIED stored in between is overwritten and lost. Loom model 3
    /// (`tests/park_wake.rs`): a deadlock.
    WakeParkByPlainStore = 4,
    /// `queue.rs: SlotHandle::leave` frees the slot at once (ACTIVE → FREE) without the closing
    /// handshake (ACTIVE → CLOSING, the worker closes the tasks and confirms CLOSED). Loom model
    /// 4 (`tests/slots.rs`): the worker touches a task after its comm left, or a record is
    /// reported twice or not at all.
    SlotLeaveWithoutHandshake = 5,
    /// `queue.rs: ProxyQueue::join` claims a slot with a load and a store instead of a CAS:
    /// two comms can both win. Loom model 4 (`tests/slots.rs`): "exactly one comm claims".
    SlotClaimByLoadStore = 6,
    /// `trigger.rs: TriggerWords::can_start` loads the words `Relaxed` instead of `Acquire`:
    /// what the device wrote before its trigger is not visible to the started task. Loom model
    /// 5 (`tests/trigger.rs`): a causality violation.
    TriggerCanStartRelaxed = 7,
    /// `trigger.rs: TriggerWords::consume` stores 0 `Relaxed` instead of `Release`: what the
    /// proxy filed before consuming is not visible to the device that sees the 0. Loom model 5
    /// (`tests/trigger.rs`): a causality violation.
    TriggerConsumeRelaxed = 8,
    /// `device.rs: DirectHostWords::inc_semaphore` increments `Relaxed` instead of `Release`:
    /// the payload counted is not published to the device. Loom model 6
    /// (`tests/semaphore.rs`): a causality violation.
    SemaphoreRelaxedIncrement = 9,
    /// `mem_transport/handoff.rs: SendShared::transition` takes the withdraw edge (4) as a load,
    /// a check and a plain store instead of one CAS, so a receiver's claim can slip in between
    /// and both sides win. Loom model 7 (`tests/mem_transport.rs`): a causality violation.
    HandoffWithdrawByLoadStore = 10,
    /// `registry.rs: Registry::drop_ref` (the end of `leave` / `leave_until`) reads the refcount in one critical section and writes the
    /// decrement (and decides "last") in a second: two comms leaving at once can both write
    /// `refs - 1`. Loom model 8 (`tests/registry.rs`): the group or its worker outlives the last
    /// leave.
    RegistrySplitDecrement = 11,
    /// `registry.rs: Registry::drop_ref` (the end of `leave` / `leave_until`) removes the group under the lock but stops and joins its
    /// last worker after releasing it: a join in between starts a second worker while the old
    /// one runs. Loom model 8 (`tests/registry.rs`): "a second worker started".
    RegistryStopOutsideLock = 12,
    /// `task/network.rs: NetworkTask::step_init` goes from INIT straight to PROGRESSING, as if
    /// the task had no device trigger to wait for: it runs before the device's trigger and never
    /// consumes it. Caught by this crate's task tests (`task::tests`, see this module's tests),
    /// by loom model 5 (`tests/trigger.rs`): "the task started before the device's write", and
    /// by `proxy-emulator`'s plant tests (`tests/plants.rs`): the device times out waiting for
    /// its net trigger word to be consumed.
    NetworkSkipsTriggerGate = 13,
    /// `sendrecv.rs: transfer` reads the host index as if `net_idx_loop_size` were 0 (no wrap):
    /// once the device's index wraps, the op sees a huge delta. Caught by the send/recv protocol
    /// test with a loop size below the entry count (`sendrecv::tests`, see this module's tests):
    /// the op fails with `NRT_HW_ERROR` and the comm with it.
    SendRecvIgnoresIndexWrap = 14,
    /// `queue.rs: ProxyQueue::release_token` reads the drive word's waiter count with a load
    /// before the release RMW: a slot owner that registers as a token waiter in between is not
    /// woken, and its re-check before blocking still saw the token held (the lost-wakeup trap).
    /// Loom model 9 (`tests/drive.rs`): a deadlock.
    DriveReleaseChecksWaitersFirst = 15,
    /// `sendrecv.rs: step` (HANDSHAKE) answers the device's `0xFFFF_FFFF` by writing 0 to the
    /// host index but never increments the handshake semaphore: the device, which posts only
    /// after it sees the semaphore, stalls. Caught by `proxy-emulator`'s plant tests
    /// (`tests/plants.rs`, a planned collective with the threaded and the polled device): the
    /// device times out waiting for the handshake semaphore.
    SendRecvSkipsHandshake = 16,
    /// `sendrecv.rs: transfer` counts completed entries as credited but never increments the
    /// complete semaphore: the device waits for completions that are never told. Caught by
    /// `proxy-emulator`'s plant tests (`tests/plants.rs`): the device times out waiting for a
    /// complete semaphore.
    SendRecvSkipsCompletion = 17,
    /// `base/abort.rs: AbortHandle::abort_with` decides "this request is the first" on a
    /// load and then stores its status, instead of one CAS from 0: two racing requests (a user
    /// abort and a failure detector) can both be told they aborted the comm, and the later store
    /// replaces the status the driving thread may already have applied. Loom model 10
    /// (`tests/abort.rs`): "exactly one abort request wins".
    AbortFirstByLoadStore = 18,
    /// `queue.rs: SlotHandle::drop_leaving` (the drop of a handle whose bounded leave timed
    /// out) frees a CLOSING slot at once (edge 7, as if the worker were gone) instead of handing
    /// it to the worker (edge 8, CLOSING → ABANDONED): the worker may still step or close the
    /// old comm's tasks, and push their records, while a new comm owns the slot. Loom model 11
    /// (`tests/leave_timeout.rs`): "the new owner's leave reports only its own task".
    SlotDropLeavingFreesClosing = 19,
    /// `driver/dump.rs: DumpRequests::serve` (the driving thread serving a queue's dump
    /// requests) reads the request count after writing the dump instead of before: a request
    /// made while the dump is written is marked answered by a dump that began before it (and
    /// does not show what the requester did first). Loom model 12 (`tests/dump.rs`): "a dump that
    /// answers a request shows what was done before the request".
    DumpServedReadAfterDump = 20,
    /// `sendrecv.rs: transfer` lets a recv op with `early_recv_posting` post one receive more
    /// than `ending_recv_credits` ahead of its host index: into a buffer the device never
    /// promised is free. Caught by the send/recv protocol tests (`sendrecv::tests`, see this
    /// module's tests): the in-test device finds a receive buffer written before it handed the
    /// entry out, and the counter test finds `max_recv_ahead` above the credits.
    SendRecvPostsBeyondEndingCredits = 21,
    /// `sendrecv.rs: transfer` counts a send entry whose payload the transport copied as
    /// complete before the transport finished it, without `early_send_completion`: the device
    /// would reuse a source the flag did not allow it to. Caught by the send/recv protocol tests
    /// (`sendrecv::tests`, see this module's tests): the in-test device sees a send counted
    /// complete while the peer's receive does not hold the entry yet.
    SendRecvEarlyCompletionWithoutFlag = 22,
    /// `proxy-abi: handles.rs: HandleTable::insert` claims a FREE slot with a plain store
    /// instead of a CAS (edge 1): two threads creating objects at once can both take one slot.
    /// Loom model 13 (`tests/handles.rs`): "two inserts got one slot" or a data race on the
    /// slot's value.
    HandleReserveByLoadStore = 23,
    /// `proxy-abi: handles.rs: HandleTable::with` takes a LIVE slot BUSY with a `Relaxed`
    /// CAS instead of `Acquire` (edge 3): the object the inserter or the previous call wrote may
    /// not be visible to the call. Loom model 13 (`tests/handles.rs`): a causality violation on
    /// the slot's value.
    HandleLookupRelaxed = 24,
    /// `proxy-abi: handles.rs: HandleTable::remove` stores FREE before it takes the value
    /// out (edge 6 before the take): an insert that reuses the slot writes its object while the
    /// remove still reads it. Loom model 13 (`tests/handles.rs`): a causality violation on the
    /// slot's value, or the remove returns the new object.
    HandleRemoveFreesFirst = 25,
    /// `driver/inval.rs: InvalCell::serve` (the driving thread applying a slot owner's
    /// invalidation) answers APPLIED with success before it calls the progress half: the owner
    /// returns, and may free the range, while the transport has not dropped its registrations
    /// yet. Loom model 14 (`tests/invalidate.rs`): "the invalidation reached the transport
    /// before the call returned" (or a data race on the model comm).
    InvalidateAnsweredBeforeApplied = 26,
    /// `driver/inval.rs: InvalCell::transition` withdraws a timed-out request (edge 5, POSTED
    /// → IDLE) by a load and a store instead of a CAS: the driver can take and apply it in
    /// between while the owner answers `NRT_TIMEOUT` ("not applied"). Loom model 14
    /// (`tests/invalidate.rs`): "a withdrawn invalidation is never applied".
    InvalidateWithdrawByLoadStore = 27,
    /// `driver/oneshot.rs: OneShot::set` notifies the waiter before the value is ready: a
    /// waiter that looks, finds nothing and parks again sleeps past the set. Loom model 15
    /// (`tests/oneshot.rs`): a deadlock.
    OneShotNotifyBeforeReady = 28,
    /// `driver/oneshot.rs: OneShot::set` publishes `ready` with `Relaxed` instead of `Release`:
    /// a waiter that sees it may read the value before its write. Loom model 15
    /// (`tests/oneshot.rs`): a causality violation.
    OneShotReadyRelaxed = 29,
    /// `base/trace/ring.rs: TraceRing::push_on` publishes the slot (`state` READY) with `Relaxed` instead of
    /// `Release`: a drain that sees it may read the record before its write is visible. Loom
    /// model 16 (`tests/trace.rs`): a causality violation on the slot.
    TraceReadyRelaxed = 30,
    /// `driver/queue/drive.rs: DriverState::tick` counts a slot's waiting poller (an emulated
    /// device the worker plays) as idle, and the park does not re-check a busy poller: the
    /// worker parks while the device still needs polls, and nothing wakes it. Loom model 3f
    /// (`tests/park_wake.rs`): a deadlock.
    PollerWaitingIgnored = 31,
    /// `base/trace/ring.rs: TraceRing::claim` claims a lane's next slot by a load and a plain
    /// store instead of a compare-and-swap: two writers sharing a lane can claim the same slot
    /// and write its record at once. Loom model 16 (`tests/trace.rs`, two writers on one lane):
    /// a causality violation on the slot.
    TraceLaneClaimByLoadStore = 32,
    /// `driver/idle.rs: block_idle` sleeps on the idle source without arming it first
    /// (libfabric's `fi_trywait`): completions a post's own progress already queued never
    /// signal the descriptor, and the driver sleeps past them. Loom model 17
    /// (`tests/idle.rs`): a deadlock.
    IdleSleepsUnarmed = 33,
    /// `driver/idle.rs: IdleSlot::kick` decides "the driver is awake" on a plain load and
    /// records nothing: a driver between its arm and its sleep misses the kick (a submission,
    /// a device's write) and sleeps past it. Loom model 17 (`tests/idle.rs`, the kick
    /// scenario): a deadlock.
    IdleKickSkipsAwake = 34,
    /// `progress/mem_transport/endpoint.rs: isend` sets the receiver's arrival flag before it
    /// pushes the message: the receiver's `poll` can take the flag, find the mailbox still
    /// empty, and the message then waits unflagged. Loom model 7 (`tests/mem_transport.rs`,
    /// delivery by `poll` alone): "a pushed message is drained by poll alone" fails.
    MemArrivalBeforePush = 35,
    /// `driver/task/barrier/central.rs: arrive` adds the arrival with `Relaxed`: the last
    /// member's release then carries only its own work, not the earlier members'. Loom model 18
    /// (`tests/central_barrier.rs`): a causality violation on an earlier member's payload.
    CentralCountRelaxed = 36,
    /// `driver/queue/drive.rs: close_slot` asserts that its CLOSING → CLOSED edge succeeds, as
    /// the code before 85da72f did (`debug_assert!`): the owner's timed-out leave may be
    /// dropped between the worker's load of CLOSING and that edge (CLOSING → ABANDONED), and
    /// the worker must then free the slot as ABANDONED. Loom model 11
    /// (`tests/leave_timeout.rs`) reaches that interleaving: "the worker's CLOSING => CLOSED
    /// edge failed".
    WorkerClosedAssumed = 37,
    /// `proxy-shm ring.rs: publish` (the sender's end of a shared-memory mailbox) stores the
    /// tail `Relaxed` instead of `Release`: the receiving process may read the slot before the
    /// sender's writes to it. Loom model 19 (`tests/shm.rs`): "Causality violation".
    ShmTailRelaxed = 38,
    /// `proxy-shm handoff.rs: transition` takes a claim or a withdrawal of a large send by a
    /// load and a store instead of one compare-and-swap: the receiver can claim a send its
    /// sender has just withdrawn and read a buffer the sender already took back. Loom model 19
    /// (`tests/shm.rs`): "read a withdrawn send".
    ShmClaimByLoadStore = 39,
}

/// "No plant" in the selector's storage.
const NONE: u8 = 0;
/// The selector's storage before this crate's own test binary read [`PLANT_ENV`].
#[cfg(all(test, not(loom)))]
const UNREAD: u8 = u8::MAX;

#[cfg(not(all(test, not(loom))))]
static SELECTED: AtomicU8 = AtomicU8::new(NONE);
#[cfg(all(test, not(loom)))]
static SELECTED: AtomicU8 = AtomicU8::new(UNREAD);

/// The environment variable that plants a bug in this crate's own test binary (`cargo test -p
/// proxy-core --features plants`): read once, at the first query of the selector, so a child
/// run of an existing test (`<test> --exact`) runs with that plant. Not read anywhere else.
pub const PLANT_ENV: &str = "PROXY_CORE_PLANT";

impl Plant {
    /// The plant named `name` (a variant name, as [`Plant::name`] gives it).
    pub fn from_name(name: &str) -> Option<Plant> {
        Plant::ALL.iter().copied().find(|p| p.name() == name)
    }

    fn from_u8(v: u8) -> Option<Plant> {
        Plant::ALL.iter().copied().find(|&p| p as u8 == v)
    }
}

/// Selects `plant` (or none) for the whole process. Call it before the code under test runs,
/// with no other thread running planted code.
pub fn set(plant: Option<Plant>) {
    SELECTED.store(plant.map_or(NONE, |p| p as u8), Ordering::Relaxed);
}

/// The plant selected for this process, if any.
pub fn selected() -> Option<Plant> {
    #[cfg(all(test, not(loom)))]
    if SELECTED.load(Ordering::Relaxed) == UNREAD {
        let from_env = std::env::var(PLANT_ENV).ok().map(|name| {
            Plant::from_name(&name).unwrap_or_else(|| panic!("{PLANT_ENV}={name}: no such plant"))
        });
        let _ = SELECTED.compare_exchange(
            UNREAD,
            from_env.map_or(NONE, |p| p as u8),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
    Plant::from_u8(SELECTED.load(Ordering::Relaxed))
}

/// `true` when `plant` is the one selected (what a planted line asks).
#[inline]
pub fn active(plant: Plant) -> bool {
    #[cfg(all(test, not(loom)))]
    {
        selected() == Some(plant)
    }
    #[cfg(not(all(test, not(loom))))]
    {
        SELECTED.load(Ordering::Relaxed) == plant as u8
    }
}

/// The first panic message of a planted run's child process: a test binary re-run on one test
/// (`<test> --exact`) with `plant` selected, which must have failed (`success` is its exit
/// status); `stdout` and `stderr` are its output.
///
/// # Panics
/// When the child ran no test named `test`, passed (nothing caught `plant`), or failed without
/// a panic message.
pub fn planted_failure(
    plant: Plant,
    test: &str,
    success: bool,
    stdout: &str,
    stderr: &str,
) -> String {
    assert!(
        stdout.contains("running 1 test"),
        "{plant:?}: the child ran no test named {test}:\n{stdout}"
    );
    assert!(
        !success,
        "{test} missed {plant:?}: it passed with the plant"
    );
    first_panic_message(stderr)
        .unwrap_or_else(|| panic!("{plant:?}: {test} failed without a panic message:\n{stderr}"))
}

/// The message of the first panic in a test process's stderr (the default panic hook's
/// `thread '…' panicked at FILE:LINE:COL:` line, then the message, up to the next `note:`,
/// backtrace or thread line).
fn first_panic_message(stderr: &str) -> Option<String> {
    let mut lines = stderr.lines();
    lines.by_ref().find(|l| l.contains("panicked at"))?;
    let msg: Vec<&str> = lines
        .take_while(|l| {
            !l.starts_with("note:")
                && !l.starts_with("stack backtrace:")
                && !l.starts_with("thread '")
        })
        .collect();
    Some(msg.join("\n").trim().into())
}

#[cfg(all(test, not(loom)))]
mod tests;
