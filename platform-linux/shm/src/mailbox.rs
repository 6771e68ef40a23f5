//! One (sender, receiver) mailbox: a bounded single-producer single-consumer ring in the
//! receiver's segment, with its two ends in two processes.
//!
//! ```text
//!  tail line   written by the sender only (release, after the slot); read by the receiver
//!  head line   written by the receiver only (release, after it is done with the slot)
//!  slots       slot i % MAILBOX_SLOTS holds message i: a header line, then inline bytes
//! ```
//!
//! The index protocol is ring.rs (loom-checked). Every value read from shared memory is read once
//! (volatile) and checked before use: a count of messages above the ring's size, an unknown
//! kind, an inline size above [`INLINE_MAX`] or a send word out of range is a [`Corrupt`]
//! error naming the peer, never an out-of-bounds access.
//!
//! Seed: none; the shape is the in-memory transport's mailbox (`proxy_core::base::ring`) across
//! processes, as Open MPI's vader fast boxes and NCCL's SHM transport do.

use std::sync::Arc;

use crate::ring;
pub use crate::ring::Corrupt;

use crate::segment::{Segment, INLINE_MAX, LINE, MAILBOX_SLOTS, SEND_WORDS, SLOT_BYTES};

/// Slot header offsets (bytes from the slot's start).
const TAG: usize = 0;
const SIZE: usize = 8;
const ADDR: usize = 16;
const WORD: usize = 24;
const GEN: usize = 28;
const KIND: usize = 32;

/// Kind values in a slot header.
const KIND_INLINE: u32 = 1;
const KIND_LENT: u32 = 2;

/// How a message's bytes travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// In the slot, after its header.
    Inline,
    /// In the sender's buffer at `addr` (in the sender's address space), read by the receiver
    /// with cross-memory attach; `word` / `gen` name the send's state word in the sender's
    /// segment (handoff.rs).
    Lent {
        /// The sender's buffer address.
        addr: u64,
        /// The send word index (`< SEND_WORDS`).
        word: u32,
        /// The generation the word must carry.
        generation: u32,
    },
}

/// One message's header, as pushed and as validated at the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The transport tag.
    pub tag: u64,
    /// Message bytes.
    pub size: u64,
    /// Where the bytes are.
    pub body: Body,
}

/// The sending end: in the sender's process, over the receiver's segment.
#[derive(Debug)]
pub struct Outbox {
    seg: Arc<Segment>,
    /// Offset of the mailbox in `seg`.
    at: usize,
    /// Messages pushed so far (private: never read back from shared memory).
    tail: u32,
}

impl Outbox {
    /// The end of mailbox `sender → seg's owner`, for a ring that no message has used yet.
    pub fn new(seg: Arc<Segment>, sender: u32) -> Self {
        let at = seg.layout().mailbox(sender);
        Self { seg, at, tail: 0 }
    }

    /// Pushes one message: `header`, and for [`Body::Inline`] `payload` (exactly
    /// `header.size` bytes, at most [`INLINE_MAX`]). `Ok(false)`: the ring is full (the
    /// receiver has not drained it); nothing was written.
    ///
    /// # Errors
    /// The receiver's head word is out of range (it claims to have read more than was sent).
    ///
    /// # Panics
    /// If an inline payload's length differs from `header.size` or is above [`INLINE_MAX`]
    /// (the transport's bug: it checks before).
    pub fn push(&mut self, header: &Header, payload: &[u8]) -> Result<bool, Corrupt> {
        if !ring::room(
            self.seg.word32(self.at + LINE),
            self.tail,
            MAILBOX_SLOTS as u32,
        )? {
            return Ok(false);
        }
        let slot = self.slot(self.tail);
        let (kind, addr, word, generation) = match header.body {
            Body::Inline => {
                assert!(payload.len() as u64 == header.size && payload.len() <= INLINE_MAX);
                (KIND_INLINE, 0, 0, 0)
            }
            Body::Lent {
                addr,
                word,
                generation,
            } => (KIND_LENT, addr, word, generation),
        };
        // SAFETY: `slot` is the start of a slot inside the receiver's live mapping (`slot`
        // checks the offset); the header fields are aligned to their sizes and the payload
        // fits after the header line (asserted). The receiver does not read this slot until
        // the tail store below publishes it (the acquire load of the head above ordered its
        // last read of the slot before these writes).
        unsafe {
            slot.add(TAG).cast::<u64>().write_volatile(header.tag);
            slot.add(SIZE).cast::<u64>().write_volatile(header.size);
            slot.add(ADDR).cast::<u64>().write_volatile(addr);
            slot.add(WORD).cast::<u32>().write_volatile(word);
            slot.add(GEN).cast::<u32>().write_volatile(generation);
            slot.add(KIND).cast::<u32>().write_volatile(kind);
            if !payload.is_empty() {
                std::ptr::copy_nonoverlapping(payload.as_ptr(), slot.add(LINE), payload.len());
            }
        }
        self.tail = self.tail.wrapping_add(1);
        ring::publish(self.seg.word32(self.at), self.tail);
        Ok(true)
    }

    fn slot(&self, index: u32) -> *mut u8 {
        let off = self.at + 2 * LINE + (index as usize % MAILBOX_SLOTS) * SLOT_BYTES;
        assert!(off + SLOT_BYTES <= self.seg.layout().bytes());
        // SAFETY: in bounds of the mapping (asserted).
        unsafe { self.seg.base().add(off) }
    }
}

/// The receiving end: in the receiver's process, over its own segment.
#[derive(Debug)]
pub struct Inbox {
    seg: Arc<Segment>,
    at: usize,
    /// Messages consumed so far (private).
    head: u32,
}

impl Inbox {
    /// The end of mailbox `sender → seg's owner`, for a ring that no message has used yet.
    pub fn new(seg: Arc<Segment>, sender: u32) -> Self {
        let at = seg.layout().mailbox(sender);
        Self { seg, at, head: 0 }
    }

    /// The oldest message not yet popped, its header checked, or `None` when the ring is
    /// empty. The message stays in its slot until [`Inbox::pop`].
    ///
    /// # Errors
    /// The sender's tail word claims more messages than the ring holds, or the header is
    /// malformed (unknown kind, inline size above [`INLINE_MAX`], send word out of range).
    pub fn peek(&self) -> Result<Option<Header>, Corrupt> {
        let avail = ring::available(self.seg.word32(self.at), self.head, MAILBOX_SLOTS as u32)?;
        if avail == 0 {
            return Ok(None);
        }
        let slot = self.slot();
        // SAFETY: the slot is inside our live mapping (`slot` checks); the acquire load of the
        // tail ordered the sender's header writes before these reads. Each field is read once,
        // as a plain integer (every bit pattern is valid), and checked below before any use.
        let (tag, size, addr, word, generation, kind) = unsafe {
            (
                slot.add(TAG).cast::<u64>().read_volatile(),
                slot.add(SIZE).cast::<u64>().read_volatile(),
                slot.add(ADDR).cast::<u64>().read_volatile(),
                slot.add(WORD).cast::<u32>().read_volatile(),
                slot.add(GEN).cast::<u32>().read_volatile(),
                slot.add(KIND).cast::<u32>().read_volatile(),
            )
        };
        let body = match kind {
            KIND_INLINE if size <= INLINE_MAX as u64 => Body::Inline,
            KIND_INLINE => {
                return Err(Corrupt(format!(
                    "an inline message of {size} bytes (at most {INLINE_MAX})"
                )))
            }
            KIND_LENT if (word as usize) < SEND_WORDS => Body::Lent {
                addr,
                word,
                generation,
            },
            KIND_LENT => return Err(Corrupt(format!("send word {word} out of range"))),
            k => return Err(Corrupt(format!("a message of unknown kind {k}"))),
        };
        Ok(Some(Header { tag, size, body }))
    }

    /// Copies the inline bytes of the message [`Inbox::peek`] returned into `dst`
    /// (`dst.len()` at most [`INLINE_MAX`], the caller passes the checked size).
    ///
    /// # Panics
    /// If `dst` is longer than [`INLINE_MAX`] (the caller's bug).
    pub fn copy_inline(&self, dst: &mut [u8]) {
        assert!(dst.len() <= INLINE_MAX);
        let slot = self.slot();
        // SAFETY: the payload area (INLINE_MAX bytes after the header line) is inside our
        // mapping; the sender wrote it before publishing the slot and does not touch it until
        // we pop. The bytes are plain `u8` (any value is valid): a sender that breaks the
        // protocol can change only the values we receive, not our memory.
        unsafe { std::ptr::copy_nonoverlapping(slot.add(LINE), dst.as_mut_ptr(), dst.len()) }
    }

    /// As [`Inbox::copy_inline`], into a raw receive buffer of `len` bytes.
    ///
    /// # Safety
    /// `dst..dst+len` must be writable and not otherwise accessed during the call; `len` at
    /// most [`INLINE_MAX`] (checked: panics otherwise).
    pub unsafe fn copy_inline_raw(&self, dst: *mut u8, len: usize) {
        assert!(len <= INLINE_MAX);
        if len == 0 {
            return;
        }
        let slot = self.slot();
        // SAFETY: source as in `copy_inline`; destination by the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(slot.add(LINE), dst, len) }
    }

    /// Hands the oldest slot back to the sender. Call only after a `peek` that returned a
    /// message.
    pub fn pop(&mut self) {
        self.head = self.head.wrapping_add(1);
        ring::release(self.seg.word32(self.at + LINE), self.head);
    }

    fn slot(&self) -> *mut u8 {
        let off = self.at + 2 * LINE + (self.head as usize % MAILBOX_SLOTS) * SLOT_BYTES;
        assert!(off + SLOT_BYTES <= self.seg.layout().bytes());
        // SAFETY: in bounds of the mapping (asserted).
        unsafe { self.seg.base().add(off) }
    }
}
