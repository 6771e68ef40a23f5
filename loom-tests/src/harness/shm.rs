//! Model 19 — the shared-memory transport's two protocols between processes (`proxy-shm`),
//! over loom's atomics in place of the shared mapping: the mailbox ring's indices
//! (`proxy_shm::ring`) and a large send's state word (`proxy_shm::handoff`).

#[cfg(loom)]
use loom::sync::atomic::AtomicU64;
use proxy_core::base::sync::{Arc, AtomicU32, UnsafeCell};
#[cfg(not(loom))]
use std::sync::atomic::AtomicU64;

use proxy_shm::handoff::{self, Edge, SendState};
use proxy_shm::ring;

use super::thread;

/// Slots of the modelled ring (the real one has `MAILBOX_SLOTS`; 2 reaches the full edge).
const SLOTS: u32 = 2;

struct Mailbox {
    tail: AtomicU32,
    head: AtomicU32,
    slots: [UnsafeCell<u32>; SLOTS as usize],
}

// SAFETY: the slots are handed between the two threads by the ring protocol under test (what
// the model checks: loom's cells report any access the protocol does not order).
unsafe impl Sync for Mailbox {}

/// The sender pushes 3 messages through a 2-slot mailbox while the receiver drains it: FIFO,
/// nothing lost or duplicated, every slot read after its write and written again only after
/// its read.
pub fn shm_ring() {
    let m = Arc::new(Mailbox {
        tail: AtomicU32::new(0),
        head: AtomicU32::new(0),
        slots: [UnsafeCell::new(u32::MAX), UnsafeCell::new(u32::MAX)],
    });
    let sender = {
        let m = m.clone();
        thread::spawn(move || {
            let mut tail = 0u32;
            for v in 0..3u32 {
                while !ring::room(&m.head, tail, SLOTS).unwrap() {
                    thread::yield_now();
                }
                // SAFETY: `room` said the receiver is done with this slot.
                m.slots[(tail % SLOTS) as usize].with_mut(|p| unsafe { *p = v });
                tail = tail.wrapping_add(1);
                ring::publish(&m.tail, tail);
            }
        })
    };
    let mut head = 0u32;
    let mut got = Vec::new();
    while got.len() < 3 {
        if ring::available(&m.tail, head, SLOTS).unwrap() == 0 {
            thread::yield_now();
            continue;
        }
        // SAFETY: `available` said the sender published this slot.
        got.push(m.slots[(head % SLOTS) as usize].with(|p| unsafe { *p }));
        head = head.wrapping_add(1);
        ring::release(&m.head, head);
    }
    sender.join().unwrap();
    assert_eq!(got, [0, 1, 2], "FIFO, nothing lost or duplicated");
    assert_eq!(ring::available(&m.tail, head, SLOTS).unwrap(), 0);
}

struct LentSend {
    word: AtomicU64,
    /// The sender's buffer.
    buf: UnsafeCell<u32>,
}

// SAFETY: the buffer is handed between the threads by the handoff under test.
unsafe impl Sync for LentSend {}

/// A large send's word: the receiver claims it and reads the sender's buffer while the sender
/// withdraws it (a cancel) and, when the withdrawal wins, takes the buffer back (writes it). One
/// of the two wins; the buffer is never read after the sender took it back; a claimed send ends
/// `Done` and the sender sees it before reusing the buffer.
pub fn shm_withdraw_vs_claim() {
    let s = Arc::new(LentSend {
        word: AtomicU64::new(0),
        buf: UnsafeCell::new(7),
    });
    handoff::arm(&s.word, 1);
    let receiver = {
        let s = s.clone();
        thread::spawn(move || {
            if handoff::transition(&s.word, 1, Edge::Claim).is_err() {
                return None;
            }
            // SAFETY: the claim owns the buffer until Finish.
            let v = s.buf.with(|p| unsafe { *p });
            handoff::transition(&s.word, 1, Edge::Finish).unwrap();
            Some(v)
        })
    };
    let withdrawn = handoff::transition(&s.word, 1, Edge::Withdraw).is_ok();
    if !withdrawn {
        // The receiver owns it: wait for Done before the buffer is ours again.
        while handoff::read(&s.word, 1).unwrap() != SendState::Done {
            thread::yield_now();
        }
    }
    // The buffer is the sender's again.
    // SAFETY: withdrawn (never claimed) or Done (the read is over).
    s.buf.with_mut(|p| unsafe { *p = 9 });
    let read = receiver.join().unwrap();
    assert!(
        !(withdrawn && read.is_some()),
        "the receiver read a withdrawn send"
    );
    assert!(withdrawn || read == Some(7), "a claimed send is read whole");
    let end = handoff::read(&s.word, 1).unwrap();
    assert_eq!(
        end,
        if withdrawn {
            SendState::Cancelled
        } else {
            SendState::Done
        }
    );
}
