//! Refused calls (feature `std`): every refusal is counted, remembered for the calling thread
//! (so a comm's `last_error` can carry its cause), and logged at ERROR under a rate limit: the
//! first `FULL_LINES` refusals of one kind (call and reason) in full, the next one with a note
//! that more are counted, then at most one line per [`SUMMARY_INTERVAL`] with the count of those
//! not logged and the latest one's text; [`flush`] logs what is still counted (a library's fini
//! calls it). Two threads
//! hammering one comm, or a loop that repeats one bad call, can no longer flood the log (NCCL
//! users know the 100k-line logs of a retry loop).
//!
//! Seed: none (libnrt logs every refusal); docs/design.md §6, "Bad input".

extern crate std;

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::string::{String, ToString};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Refusals of one kind logged in full before the limiter summarises.
pub(crate) const FULL_LINES: u32 = 10;
/// At most one summary line per kind per this interval.
pub const SUMMARY_INTERVAL: Duration = Duration::from_secs(1);
/// Kinds tracked at once; past it, refusals of new kinds are logged in full (bounded memory).
const MAX_KINDS: usize = 256;

/// What the limiter decides for one refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Log it in full.
    Full,
    /// Log it in full with the note that more of this kind are only counted from now on.
    Notice,
    /// Do not log it (counted).
    Suppressed,
    /// Log a summary: this many refusals (this one included) were not logged in full since
    /// the last line of this kind.
    Summary(u64),
}

/// The limiter of one kind: pure, time passed in (unit-tested without a clock).
#[derive(Clone, Copy, Debug)]
pub struct Limiter {
    shown: u32,
    pending: u64,
    last_line: Option<Instant>,
}

impl Limiter {
    /// A limiter that has logged nothing yet.
    pub const fn new() -> Self {
        Self {
            shown: 0,
            pending: 0,
            last_line: None,
        }
    }

    /// The decision for a refusal at `now`.
    pub fn admit(&mut self, now: Instant) -> Decision {
        if self.shown <= FULL_LINES {
            self.shown += 1;
            self.last_line = Some(now);
            return if self.shown > FULL_LINES {
                Decision::Notice
            } else {
                Decision::Full
            };
        }
        self.pending += 1;
        match self.last_line {
            Some(t) if now.saturating_duration_since(t) < SUMMARY_INTERVAL => Decision::Suppressed,
            _ => {
                self.last_line = Some(now);
                Decision::Summary(core::mem::take(&mut self.pending))
            }
        }
    }
}

impl Default for Limiter {
    fn default() -> Self {
        Self::new()
    }
}

static REFUSED: AtomicU64 = AtomicU64::new(0);
static KINDS: Mutex<BTreeMap<(String, &'static str), Limiter>> = Mutex::new(BTreeMap::new());

std::thread_local! {
    /// The calling thread's latest refusal, `what: message`.
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Refusals since the process started (every call that answered a refusal through
/// [`refuse`], logged or not).
pub fn refused_calls() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// Takes the calling thread's latest refusal (`what: message`), if any since the last take.
pub fn take_last() -> Option<String> {
    LAST.with(|l| l.borrow_mut().take())
}

/// Forgets the calling thread's latest refusal (before a call whose refusals are wanted).
pub fn clear_last() {
    LAST.with(|l| *l.borrow_mut() = None);
}

/// Records a refusal of the call `what` for `reason` (a fixed tag naming the kind, e.g. `"bad
/// input"`, `"busy"`): counts it, remembers `what: msg` for the calling thread, and logs it at
/// ERROR under the limiter of `(what, reason)`.
pub fn refuse(what: &str, reason: &'static str, msg: fmt::Arguments<'_>) {
    let total = REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
    let text = std::format!("{what}: {msg}");
    let decision = {
        let mut kinds = KINDS.lock().unwrap_or_else(|p| p.into_inner());
        let key = (what.to_string(), reason);
        if kinds.len() >= MAX_KINDS && !kinds.contains_key(&key) {
            Decision::Full
        } else {
            kinds.entry(key).or_default().admit(Instant::now())
        }
    };
    match decision {
        Decision::Full => log::error!("{text}"),
        Decision::Notice => log::error!(
            "{text} (more refusals of this kind ({reason}) are counted and summarised at most \
             once a second)"
        ),
        Decision::Suppressed => {}
        Decision::Summary(n) => log::error!(
            "{what}: {n} more refusals ({reason}) not logged since the last line of this kind \
             (at most one line a second after the first {FULL_LINES}); the latest: {msg} \
             ({total} refused calls in this process)"
        ),
    }
    LAST.with(|l| *l.borrow_mut() = Some(text));
}

/// Logs, for every kind with refusals not yet reported, one summary line, and forgets them.
pub fn flush() {
    let mut kinds = KINDS.lock().unwrap_or_else(|p| p.into_inner());
    for ((what, reason), l) in kinds.iter_mut() {
        if l.pending > 0 {
            log::error!(
                "{what}: {} more refusals ({reason}) not logged since the last line of this kind \
                 ({} refused calls in this process)",
                l.pending,
                refused_calls()
            );
            l.pending = 0;
        }
    }
}

#[cfg(test)]
mod tests;
