//! The device-trigger gate.
//!
//! [`TriggerWords`] are the up to four per-task trigger words of
//! seed §5: the producer arms them with [`TRIGGER_ARMED`] before it submits the task, the device
//! writes another value when it reaches the net stage, and the task consumes them by writing 0.
//!
//! Seed: `enc_proxy_task::start_proxy_task_host_mem_addrs[]`, `can_start_proxy_task`
//! (nrt:0x1ce7d0), `clear_start_proxy_task_flag` (nrt:0x1ce810), §5; docs/design.md §4.

use core::fmt;

use crate::base::host_word::HostWord;
use crate::base::status::NrtStatus;

/// Value of a trigger word while the device has not reached the net stage (`-1`).
pub const TRIGGER_ARMED: u32 = 0xFFFF_FFFF;

/// Most trigger words a task has: one per stream.
pub const MAX_TRIGGER_WORDS: usize = 4;

/// The trigger words of one task: up to [`MAX_TRIGGER_WORDS`], one per stream (a barrier task
/// uses the same gate).
///
/// Protocol (docs/design.md §4): the producer calls [`TriggerWords::arm`] before it submits the task;
/// the device writes a value other than [`TRIGGER_ARMED`] (1) to each word when it reaches the
/// net stage and then waits to read 0; the task checks [`TriggerWords::can_start`] on each step
/// and, when it answers `true`, calls [`TriggerWords::consume`].
///
/// Seed: `start_proxy_task_host_mem_addrs[4]` + `streams_n` (enc_proxy_task +0x30 / +0x50), §5.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TriggerWords {
    words: [Option<HostWord>; MAX_TRIGGER_WORDS],
    len: usize,
}

impl TriggerWords {
    /// No trigger words: [`TriggerWords::can_start`] is always `true`.
    pub const fn none() -> Self {
        Self {
            words: [None; MAX_TRIGGER_WORDS],
            len: 0,
        }
    }

    /// The given words, in stream order.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when more than [`MAX_TRIGGER_WORDS`] are given.
    pub fn new(words: &[HostWord]) -> Result<Self, NrtStatus> {
        if words.len() > MAX_TRIGGER_WORDS {
            return Err(NrtStatus::Invalid);
        }
        let mut t = Self::none();
        for (dst, w) in t.words.iter_mut().zip(words) {
            *dst = Some(*w);
        }
        t.len = words.len();
        Ok(t)
    }

    /// Number of words (`0..=4`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when the task has no trigger words.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The words, in stream order.
    pub fn iter(&self) -> impl Iterator<Item = HostWord> + '_ {
        self.words[..self.len].iter().flatten().copied()
    }

    /// Producer side: sets every word to [`TRIGGER_ARMED`] (release), before the task is
    /// submitted.
    pub fn arm(&self) {
        for w in self.iter() {
            w.store(TRIGGER_ARMED);
        }
    }

    /// `true` when every word differs from [`TRIGGER_ARMED`] (acquire loads: what the device
    /// wrote before its trigger is visible afterwards).
    ///
    /// Seed: `can_start_proxy_task` (nrt:0x1ce7d0), §5.
    pub fn can_start(&self) -> bool {
        // PLANT: TriggerCanStartRelaxed loads Relaxed: the device's writes before its trigger
        // are not visible to the task that starts on it.
        self.iter().all(|w| {
            let v = plant!(
                TriggerCanStartRelaxed,
                w.word().load(crate::base::sync::Ordering::Relaxed),
                w.load()
            );
            v != TRIGGER_ARMED
        })
    }

    /// Consumes the trigger: writes 0 to every word (release).
    ///
    /// Seed: `clear_start_proxy_task_flag` (nrt:0x1ce810), §5.
    pub fn consume(&self) {
        for w in self.iter() {
            // PLANT: TriggerConsumeRelaxed stores Relaxed: what the proxy did before consuming
            // (filing its blocks) is not visible to the device that reads the 0.
            plant!(
                TriggerConsumeRelaxed,
                w.word().store(0, crate::base::sync::Ordering::Relaxed),
                w.store(0)
            );
        }
    }
}

impl TriggerWords {
    /// The words with the values they hold now, for a log line:
    /// `[0x7f00=0xffffffff, 0x7f04=0x1]` (address `=` value; `[]` when there are none).
    /// Each value is read when the line is formatted (acquire).
    pub fn describe(&self) -> TriggerWordsNow<'_> {
        TriggerWordsNow(self)
    }
}

/// [`TriggerWords::describe`]: the words and their current values, as `Display`.
#[derive(Clone, Copy, Debug)]
pub struct TriggerWordsNow<'a>(&'a TriggerWords);

impl fmt::Display for TriggerWordsNow<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, w) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{:#x}={:#x}", w.addr(), w.load())?;
        }
        f.write_str("]")
    }
}

impl Default for TriggerWords {
    fn default() -> Self {
        Self::none()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
