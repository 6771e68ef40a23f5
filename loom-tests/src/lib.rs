//! Loom models of every cross-thread handoff in `proxy-core`, each run on the real code and
//! again with the bug it is there to find planted in that code, which the same model must catch
//! (a model that cannot fail proves nothing).
//!
//! Run them with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p loom-tests --release`;
//! see `loom-tests/README.md` ("Loom models") for running one model and debugging a failure.
//!
//! Layout: `tests/*.rs` hold the models (compiled only under `--cfg loom`); [`harness`] holds the
//! model bodies, over proxy-core's real types. The plants are in proxy-core itself
//! (`proxy_core::plant`, compiled in under `--cfg loom`): a plant's test runs the very body of
//! the real run, in a child process with that plant selected (`assert_loom_catches`). Under
//! plain `cargo test` the crate runs the bodies once on real threads as a smoke test.
//!
//! | model | file | handoff | plants (`proxy_core::plant::Plant`) |
//! |---|---|---|---|
//! | 1 | `tests/ring.rs` | SPSC ring | `RingRelaxedTail` |
//! | 2 | `tests/records.rs` | submit → tick → step → status record → consumer | `RecordRelaxedRunState`, `WakeNotifySkipsEmpty` |
//! | 3 | `tests/park_wake.rs` | worker park vs submission / join / stop; wake word, two notifiers | `WakeNotifySkipsEmpty`, `WakeParkByPlainStore` (each in all 4 scenarios) |
//! | 4 | `tests/slots.rs` | slot release and reuse while the worker ticks; claim race | `SlotLeaveWithoutHandshake`, `SlotClaimByLoadStore` |
//! | 5 | `tests/trigger.rs` | device trigger word vs the network task's gate | `TriggerCanStartRelaxed`, `TriggerConsumeRelaxed`, `NetworkSkipsTriggerGate` |
//! | 6 | `tests/semaphore.rs` | semaphore reverse edge | `SemaphoreRelaxedIncrement` |
//! | 7 | `tests/mem_transport.rs` | in-memory transport mailbox and send handoff | `HandoffWithdrawByLoadStore` |
//! | 8 | `tests/registry.rs` | registry join/leave vs worker start/stop | `RegistrySplitDecrement`, `RegistryStopOutsideLock` |
//! | 9 | `tests/drive.rs` | caller-mode drive token: a waiting owner vs the token's release | `DriveReleaseChecksWaitersFirst` |
//! | 10 | `tests/abort.rs` | a comm's abort word: two racing requests vs the driving thread stepping its task | `AbortFirstByLoadStore` |
//! | 11 | `tests/leave_timeout.rs` | a timed-out bounded leave whose handle is dropped vs the worker closing the slot; the slot's reuse | `SlotDropLeavingFreesClosing`, `WorkerClosedAssumed` |
//! | 12 | `tests/dump.rs` | a queue's dump request word vs the driving thread serving it; a parked worker woken for a dump | `DumpServedReadAfterDump` |
//! | 19 | `tests/shm.rs` | `proxy-shm` between processes: the mailbox ring's indices; a large send's word, withdrawal vs claim | `ShmTailRelaxed`, `ShmClaimByLoadStore` |
//!
//! The two protocol plants (`NetworkSkipsTriggerGate`, `SendRecvIgnoresIndexWrap`) are caught by
//! proxy-core's own tests (`cargo test -p proxy-core --features plants`); model 5 catches the
//! first one too.

pub mod harness;

#[cfg(loom)]
use proxy_core::plant::{planted_failure, Plant};

/// A loom model builder configured from the environment (`LOOM_*`, see the README) with the
/// preemption bound capped at `max_preemptions` (`LOOM_MAX_PREEMPTIONS` may lower it, never
/// raise it; without the variable the cap applies, so no model runs unbounded by accident).
#[cfg(loom)]
pub fn builder(max_preemptions: usize) -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(
        b.preemption_bound
            .map_or(max_preemptions, |p| p.min(max_preemptions)),
    );
    b
}

/// Runs the model `f` on the real code (no plant) under loom with
/// [`builder`]`(max_preemptions)`, printing loom's trace when `LOOM_LOG` is set (as
/// `loom::model` does). Panics on the first failing interleaving.
///
/// # Panics
/// Also when a plant is selected: only [`assert_loom_catches`]'s child selects one.
#[cfg(loom)]
pub fn check<F>(max_preemptions: usize, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    assert_eq!(
        proxy_core::plant::selected(),
        None,
        "a real run with a plant selected"
    );
    with_loom_log(|| builder(max_preemptions).check(f));
}

/// Runs `run` with the `tracing` subscriber `loom::model` installs: `LOOM_LOG` is its filter.
#[cfg(loom)]
fn with_loom_log<R>(run: impl FnOnce() -> R) -> R {
    let subscriber = tracing_subscriber::fmt::Subscriber::builder()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("LOOM_LOG"))
        .with_test_writer()
        .without_time()
        .finish();
    tracing::subscriber::with_default(subscriber, run)
}

/// The panic message loom 0.7 gives when a model runs past its branch budget (an unbounded spin
/// or a model that is too big). Such a failure says nothing about the handoff under test.
pub const BRANCH_LIMIT: &str = "exceeded maximum number of branches";

/// The preemption bound of a model that takes `LOOM_MAX_PREEMPTIONS` as is (no cap of its own):
/// `builder` caps the variable at this, i.e. not at all.
pub const ENV_BOUND: usize = usize::MAX;

/// Environment variable that marks the child process `assert_loom_catches` runs a planted
/// model in, and names its plant (`proxy_core::plant::Plant::name`).
pub const PLANT_ENV: &str = "LOOM_TESTS_PLANT";

/// Asserts that loom, run with [`builder`]`(max_preemptions)`, reports a failure of the model
/// `f` with `plant` planted in proxy-core, and that its first panic message contains one of
/// `expected` (e.g. `"deadlock"`, `"Causality violation"`, or a model assertion's text), so the
/// plant is shown to be caught by the check meant for its bug — not by running out of branches
/// ([`BRANCH_LIMIT`]) or by something unrelated. `f` is the very body the real run checks.
///
/// The model runs in a child process: this test binary re-run with only the calling test
/// (`<test> --exact`) and [`PLANT_ENV`] set to the plant's name. The child selects the plant
/// (`proxy_core::plant::set`, process-wide: never in the parent, whose tests run in parallel
/// threads) and runs `f` under loom directly. A child also because a failing model can abort its
/// process: when loom reports a deadlock it has no active thread left, and the loom objects the
/// parked thread drops while it unwinds (an `Arc`, a slot handle) panic again, which aborts.
/// The parent reads the child's first panic message from its stderr.
///
/// Must be called from the `#[test]` function itself (its thread carries the test's name).
///
/// # Panics
/// When every interleaving passes, or the first failure matches none of `expected`; in the
/// child, when [`PLANT_ENV`] names another plant than `plant`.
#[cfg(loom)]
pub fn assert_loom_catches<F>(plant: Plant, max_preemptions: usize, expected: &[&str], f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    if let Some(name) = std::env::var_os(PLANT_ENV) {
        // The child: a failure panics (or aborts) this process, which the parent expects.
        assert_eq!(
            name.to_str().and_then(Plant::from_name),
            Some(plant),
            "{PLANT_ENV}={name:?} is not this test's plant"
        );
        proxy_core::plant::set(Some(plant));
        with_loom_log(|| builder(max_preemptions).check(f));
        return;
    }
    let test = std::thread::current()
        .name()
        .expect("assert_loom_catches runs on a test's thread")
        .to_string();
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args([test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(PLANT_ENV, plant.name())
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run the model's child process");
    let msg = planted_failure(
        plant,
        &test,
        out.status.success(),
        &String::from_utf8_lossy(&out.stdout),
        &String::from_utf8_lossy(&out.stderr),
    );
    println!("{plant:?}: loom reported: {msg}");
    assert!(
        !msg.contains(BRANCH_LIMIT) && expected.iter().any(|e| msg.contains(e)),
        "{plant:?}: loom reported a failure, but not the expected one ({expected:?}): {msg}"
    );
}
