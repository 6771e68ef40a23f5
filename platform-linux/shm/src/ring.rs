//! The index protocol of one shared-memory mailbox (mailbox.rs), apart from the memory it
//! runs on, so that loom checks it as it ships (loom-tests model 19, `tests/shm.rs`).
//!
//! Two words, two writers: the sender alone writes `tail` (messages published), the receiver
//! alone writes `head` (messages it is done with). Each end keeps its own index privately and
//! only *reads* the other's word, so a peer process that writes nonsense there cannot move our
//! index: at worst its own ring looks full or corrupt ([`Corrupt`]).
//!
//! ```text
//!  sender:   room(head) ─► write slot tail % slots ─► publish(tail + 1)     (release)
//!  receiver: available(tail) ─► read slot head % slots ─► release(head + 1) (release)
//! ```
//!
//! The sender's acquire load of `head` orders the receiver's reads of a slot before the
//! sender's next writes to it; the receiver's acquire load of `tail` orders the sender's writes
//! before its reads.
//!
//! Seed: none; the SPSC ring of `proxy_core::base::ring`, with both ends in two processes.

use core::fmt;

#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, Ordering};

/// A ring whose shared words make no sense: the peer that writes them is broken (or not this
/// library); the transport fails the comm naming it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Corrupt(pub String);

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Sender: whether slot `tail % slots` is free (the receiver is done with it), reading the
/// receiver's `head` word.
///
/// # Errors
/// The head word claims more messages done than `tail` published.
pub fn room(head: &AtomicU32, tail: u32, slots: u32) -> Result<bool, Corrupt> {
    let h = head.load(Ordering::Acquire);
    let used = tail.wrapping_sub(h);
    if used > slots {
        return Err(Corrupt(format!("its head {h} is past our tail {tail}")));
    }
    Ok(used < slots)
}

/// Sender: publishes every message before `tail` (the slot writes happen before).
pub fn publish(tail_word: &AtomicU32, tail: u32) {
    // PLANT: ShmTailRelaxed stores Relaxed, so the slot writes are not published.
    let order = crate::plant!(ShmTailRelaxed, Ordering::Relaxed, Ordering::Release);
    tail_word.store(tail, order);
}

/// Receiver: messages published and not yet released, reading the sender's `tail` word.
///
/// # Errors
/// The tail word claims more messages than the ring holds.
pub fn available(tail_word: &AtomicU32, head: u32, slots: u32) -> Result<u32, Corrupt> {
    let t = tail_word.load(Ordering::Acquire);
    let avail = t.wrapping_sub(head);
    if avail > slots {
        return Err(Corrupt(format!(
            "its tail {t} is {avail} messages past our head {head}"
        )));
    }
    Ok(avail)
}

/// Receiver: hands back every slot before `head` (its reads of them happen before).
pub fn release(head_word: &AtomicU32, head: u32) {
    head_word.store(head, Ordering::Release);
}
