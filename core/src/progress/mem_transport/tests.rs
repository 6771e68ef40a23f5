//! Tests of the in-memory transport: one thread driving two endpoints, and two threads.
//!
//! Buffer discipline (what the `isend` / `irecv` contracts ask): every buffer handed to a post
//! lives in a `Vec` that the test keeps alive and does not write until the request has been
//! tested finished (or, for eager sends, until the post returned). Pointers come from
//! `Vec::as_ptr` / `Vec::as_mut_ptr`, which create no intermediate references, so Miri's
//! aliasing model sees exactly the transport's accesses.

extern crate std;

use std::sync::mpsc;
use std::thread;
use std::vec;
use std::vec::Vec;

use super::*;
use crate::base::status::NrtStatus;
use crate::progress::net::make_tag;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The sizes the issue asks for (smaller large sizes under Miri, which interprets every byte).
#[cfg(not(miri))]
const SIZES: &[usize] = &[0, 1, 4095, 4096, 4097, (1 << 20) + 3, 4 << 20];
#[cfg(miri)]
const SIZES: &[usize] = &[0, 1, 4095, 4096, 4097, (8 << 10) + 3];

/// Bound for single-thread drive loops (each iteration makes progress or the test is wrong).
const DRIVE_LIMIT: usize = 1_000;
/// Bound for cross-thread wait loops (each iteration yields).
const SPIN_LIMIT: usize = if cfg!(miri) { 200_000 } else { 50_000_000 };

/// Deterministic bytes, different for every `seed` (xorshift64).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn pair() -> (MemTransport, MemTransport) {
    let f = MemFabric::new(2).unwrap();
    (f.endpoint(0).unwrap(), f.endpoint(1).unwrap())
}

/// Posts a send of all of `buf`; `None` is back-pressure.
fn try_send(t: &mut MemTransport, peer: u32, buf: &[u8], tag: u64) -> Option<Posted> {
    // SAFETY: test discipline (module doc): `buf` stays alive and unwritten until the request
    // is tested finished.
    unsafe { t.isend(peer, buf.as_ptr(), buf.len() as u64, tag) }.expect("isend")
}

/// Posts a receive into all of `buf`; `None` is back-pressure.
fn try_recv(t: &mut MemTransport, peer: u32, buf: &mut Vec<u8>, tag: u64) -> Option<Posted> {
    // SAFETY: test discipline (module doc): `buf` stays alive and untouched until the request
    // is tested finished.
    unsafe { t.irecv(peer, buf.as_mut_ptr(), buf.len() as u64, tag) }.expect("irecv")
}

fn send(t: &mut MemTransport, peer: u32, buf: &[u8], tag: u64) -> Posted {
    try_send(t, peer, buf, tag).expect("mailbox unexpectedly full")
}

fn recv(t: &mut MemTransport, peer: u32, buf: &mut Vec<u8>, tag: u64) -> Posted {
    try_recv(t, peer, buf, tag).expect("irecv unexpectedly refused")
}

/// Tests `req` until it is no longer pending (single thread: the receiver's own `test` drains
/// its mailbox, so a receive finishes without help; test receives before their sends).
fn wait(t: &mut MemTransport, req: RequestId) -> Result<TestOutcome, NetError> {
    for _ in 0..DRIVE_LIMIT {
        match t.test(req) {
            Ok(TestOutcome::Pending) => continue,
            other => return other,
        }
    }
    panic!("request {req:#x} still pending after {DRIVE_LIMIT} tests");
}

/// As [`wait`], yielding between tests (another thread must act).
fn wait_threaded(t: &mut MemTransport, req: RequestId) -> Result<TestOutcome, NetError> {
    for _ in 0..SPIN_LIMIT {
        match t.test(req) {
            Ok(TestOutcome::Pending) => thread::yield_now(),
            other => return other,
        }
    }
    panic!("request {req:#x} still pending after {SPIN_LIMIT} tests");
}

fn done(size: usize) -> Result<TestOutcome, NetError> {
    Ok(TestOutcome::Done { size: size as u64 })
}

/// A distinct docs/design.md §5 tag per message index.
fn tag(i: usize) -> u64 {
    make_tag(3, 0, (i % 4) as u32, (i / 4) as u32, i as u32)
}

#[derive(Clone, Copy, Debug)]
enum Order {
    SendFirst,
    RecvFirst,
}

// ---------------------------------------------------------------------------------------------
// One thread, two endpoints
// ---------------------------------------------------------------------------------------------

#[test]
fn reused_descriptors_carry_every_size_and_kind_in_turn() {
    // One endpoint pair for every message: each finished send's descriptor is kept and reused
    // by the next, through eager, lent and empty payloads in turn (the copy buffer a lent send
    // kept is reused by a later eager one). Tags repeat, so the kept empty tag queues are
    // reused as well.
    let (mut a, mut b) = pair();
    let sizes = [100usize, 10_000, 0, 4096, 5000, 1, 4097, 64];
    for round in 0..6u64 {
        for (i, &size) in sizes.iter().enumerate() {
            let seed = round * 100 + i as u64;
            let src = pattern(size, seed);
            let mut dst = vec![0xEE; size];
            let t = tag(i % 3);
            let (s, r) = if (round + i as u64).is_multiple_of(2) {
                let s = send(&mut a, 1, &src, t);
                (s, recv(&mut b, 0, &mut dst, t))
            } else {
                let r = recv(&mut b, 0, &mut dst, t);
                (send(&mut a, 1, &src, t), r)
            };
            assert_eq!(s.payload_copied, size <= EAGER_MAX, "size {size}");
            assert_eq!(
                wait(&mut b, r.request),
                done(size),
                "round {round} size {size}"
            );
            assert_eq!(
                wait(&mut a, s.request),
                done(size),
                "round {round} size {size}"
            );
            assert!(dst == src, "round {round} size {size}: bytes differ");
        }
    }
    assert_eq!((a.outstanding(), b.outstanding()), (0, 0));
    assert_eq!(
        a.spare.len(),
        1,
        "one send at a time: one descriptor, reused throughout"
    );
    assert_eq!(b.unexpected_len(), 0);
}

#[test]
fn one_thread_every_size_both_orders() {
    for (i, &size) in SIZES.iter().enumerate() {
        for order in [Order::SendFirst, Order::RecvFirst] {
            let (mut a, mut b) = pair();
            let src = pattern(size, i as u64);
            let mut dst = vec![0xEE; size];
            let (s, r) = match order {
                Order::SendFirst => {
                    let s = send(&mut a, 1, &src, tag(i));
                    (s, recv(&mut b, 0, &mut dst, tag(i)))
                }
                Order::RecvFirst => {
                    let r = recv(&mut b, 0, &mut dst, tag(i));
                    assert_eq!(b.test(r.request), Ok(TestOutcome::Pending));
                    (send(&mut a, 1, &src, tag(i)), r)
                }
            };
            assert_eq!(s.payload_copied, size <= EAGER_MAX, "size {size}");
            assert!(!r.payload_copied);
            assert_eq!(wait(&mut b, r.request), done(size), "{order:?} size {size}");
            assert_eq!(wait(&mut a, s.request), done(size), "{order:?} size {size}");
            assert!(dst == src, "{order:?} size {size}: bytes differ");
            assert_eq!((a.outstanding(), b.outstanding()), (0, 0));
        }
    }
}

#[test]
fn large_send_stays_pending_until_the_receiver_copies() {
    let (mut a, mut b) = pair();
    let src = pattern(EAGER_MAX + 1, 1);
    let mut dst = vec![0; EAGER_MAX + 1];
    let s = send(&mut a, 1, &src, 7);
    assert!(!s.payload_copied);
    for _ in 0..3 {
        assert_eq!(a.test(s.request), Ok(TestOutcome::Pending));
    }
    b.poll().unwrap(); // into the unexpected list, still not copied
    assert_eq!(b.unexpected_len(), 1);
    assert_eq!(a.test(s.request), Ok(TestOutcome::Pending));
    let r = recv(&mut b, 0, &mut dst, 7); // the match (and the one copy) happens here
    assert_eq!(b.unexpected_len(), 0);
    assert_eq!(a.test(s.request), done(src.len()));
    assert_eq!(b.test(r.request), done(src.len()));
    assert!(dst == src);
}

#[test]
fn eager_send_buffer_is_free_when_isend_returns() {
    let (mut a, mut b) = pair();
    let mut src = pattern(EAGER_MAX, 2);
    let expect = src.clone();
    let s = send(&mut a, 1, &src, 9);
    assert!(s.payload_copied);
    src.iter_mut().for_each(|x| *x = 0); // reuse at once: the mailbox has its own copy
    drop(src);
    let mut dst = vec![0; EAGER_MAX];
    let r = recv(&mut b, 0, &mut dst, 9);
    assert_eq!(wait(&mut b, r.request), done(EAGER_MAX));
    // The request still finishes only when the receiver took it (docs/design.md §5: the op reaches
    // state 0 only when every request completed at the transport).
    assert_eq!(a.test(s.request), done(EAGER_MAX));
    assert!(dst == expect);
}

#[test]
fn zero_bytes_with_null_buffers() {
    let (mut a, mut b) = pair();
    // SAFETY: zero bytes: nothing is read or written through the null pointers.
    let s = unsafe { a.isend(1, core::ptr::null(), 0, 5) }
        .unwrap()
        .unwrap();
    // SAFETY: as above.
    let r = unsafe { b.irecv(0, core::ptr::null_mut(), 0, 5) }
        .unwrap()
        .unwrap();
    assert!(s.payload_copied);
    assert_eq!(b.test(r.request), done(0));
    assert_eq!(a.test(s.request), done(0));
}

#[test]
fn send_to_self() {
    let f = MemFabric::new(3).unwrap();
    let mut c = f.endpoint(2).unwrap();
    for (i, size) in [3usize, EAGER_MAX + 100].into_iter().enumerate() {
        let src = pattern(size, 40 + i as u64);
        let mut dst = vec![0; size];
        let r = recv(&mut c, 2, &mut dst, tag(i));
        let s = send(&mut c, 2, &src, tag(i));
        assert_eq!(wait(&mut c, r.request), done(size));
        assert_eq!(c.test(s.request), done(size));
        assert!(dst == src);
    }
}

#[test]
fn distinct_tags_posted_in_different_orders_never_cross() {
    const N: usize = if cfg!(miri) { 12 } else { 96 };
    let size_of = |i: usize| {
        if i.is_multiple_of(3) {
            EAGER_MAX + 1 + i
        } else {
            1 + i
        }
    };
    let (mut a, mut b) = pair();
    let srcs: Vec<Vec<u8>> = (0..N)
        .map(|i| pattern(size_of(i), 100 + i as u64))
        .collect();
    let mut dsts: Vec<Vec<u8>> = (0..N).map(|i| vec![0xEE; size_of(i)]).collect();
    // Receives in a permuted order (7 is coprime with N), half of them before any send.
    let perm: Vec<usize> = (0..N).map(|k| (k * 7 + 3) % N).collect();
    let mut rreq = vec![0; N];
    for &i in &perm[..N / 2] {
        rreq[i] = recv(&mut b, 0, &mut dsts[i], tag(i)).request;
    }
    // Sends in reverse order, polling the receiver now and then.
    let mut sreq = vec![0; N];
    for i in (0..N).rev() {
        sreq[i] = send(&mut a, 1, &srcs[i], tag(i)).request;
        if i % 10 == 0 {
            b.poll().unwrap();
        }
    }
    for &i in &perm[N / 2..] {
        rreq[i] = recv(&mut b, 0, &mut dsts[i], tag(i)).request;
    }
    for (i, &r) in rreq.iter().enumerate() {
        assert_eq!(wait(&mut b, r), done(size_of(i)), "message {i}");
    }
    for (i, &s) in sreq.iter().enumerate() {
        assert_eq!(a.test(s), done(size_of(i)), "message {i}");
        assert!(dsts[i] == srcs[i], "message {i} crossed");
    }
    assert_eq!(
        (a.outstanding(), b.outstanding(), b.unexpected_len()),
        (0, 0, 0)
    );
}

#[test]
fn same_tag_matches_in_posting_order() {
    let (mut a, mut b) = pair();
    for size in [16, EAGER_MAX + 16] {
        let srcs: Vec<Vec<u8>> = (0..6).map(|i| pattern(size, i)).collect();
        let mut dsts: Vec<Vec<u8>> = (0..6).map(|_| vec![0; size]).collect();
        let (mut sreqs, mut rreqs) = (Vec::new(), Vec::new());
        // Interleave: two sends, three receives, four sends, three receives; the third
        // receive is posted before its message, the others after.
        let mut sends = srcs.iter();
        let mut recvs = dsts.iter_mut();
        for (n_send, n_recv) in [(2, 3), (4, 3)] {
            for s in sends.by_ref().take(n_send) {
                sreqs.push(send(&mut a, 1, s, 77).request);
            }
            for d in recvs.by_ref().take(n_recv) {
                rreqs.push(recv(&mut b, 0, d, 77).request);
            }
        }
        for r in rreqs {
            assert_eq!(wait(&mut b, r), done(size));
        }
        for r in sreqs {
            assert_eq!(a.test(r), done(size));
        }
        for (d, s) in dsts.iter().zip(&srcs) {
            assert!(d == s, "size {size}: same-tag messages overtook each other");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Back-pressure
// ---------------------------------------------------------------------------------------------

#[test]
fn full_mailbox_answers_cannot_start_now_then_succeeds() {
    let f = MemFabric::with_mailbox_capacity(2, 4).unwrap();
    let (mut a, mut b) = (f.endpoint(0).unwrap(), f.endpoint(1).unwrap());
    let size_of = |i: usize| {
        if i.is_multiple_of(2) {
            10 + i
        } else {
            EAGER_MAX + i
        }
    };
    let srcs: Vec<Vec<u8>> = (0..6).map(|i| pattern(size_of(i), i as u64)).collect();
    let mut sreq = Vec::new();
    for s in &srcs[..4] {
        sreq.push(send(&mut a, 1, s, 1).request);
    }
    for s in &srcs[4..] {
        assert_eq!(try_send(&mut a, 1, s, 1), None, "mailbox of 4 took a 5th");
    }
    assert_eq!(
        a.outstanding(),
        4,
        "a refused post must leave nothing behind"
    );
    b.poll().unwrap(); // drain into the unexpected list
    assert_eq!(b.unexpected_len(), 4);
    for s in &srcs[4..] {
        sreq.push(send(&mut a, 1, s, 1).request);
    }
    let mut dsts: Vec<Vec<u8>> = (0..6).map(|i| vec![0; size_of(i)]).collect();
    for (i, d) in dsts.iter_mut().enumerate() {
        let r = recv(&mut b, 0, d, 1);
        assert_eq!(wait(&mut b, r.request), done(size_of(i)));
    }
    for (i, r) in sreq.into_iter().enumerate() {
        assert_eq!(a.test(r), done(size_of(i)));
    }
    assert!(dsts == srcs, "nothing lost, nothing reordered");
}

/// `poll` finds messages through the arrival flags of every flag word (40 ranks: two words per
/// receiver), only from the senders that sent, and a flag left by a message that `irecv`
/// already drained costs nothing but an empty look.
#[test]
fn poll_drains_flagged_senders_across_flag_words() {
    let f = MemFabric::new(40).unwrap();
    let mut eps: Vec<MemTransport> = (0..40).map(|r| f.endpoint(r).unwrap()).collect();
    let bytes = pattern(8, 7);
    for sender in [3usize, 31, 32, 39] {
        send(&mut eps[sender], 0, &bytes, sender as u64);
    }
    assert_eq!(eps[0].unexpected_len(), 0, "nothing filed before a poll");
    eps[0].poll().unwrap();
    assert_eq!(
        eps[0].unexpected_len(),
        4,
        "one message from each of the four senders"
    );
    // A fifth message, taken by the receive (which drains its own peer) before any poll.
    send(&mut eps[5], 0, &bytes, 5);
    let mut dst = vec![0u8; 8];
    let r = recv(&mut eps[0], 5, &mut dst, 5);
    assert_eq!(eps[0].test(r.request), done(8));
    eps[0].poll().unwrap(); // rank 5's flag is still set: an empty drain
    assert_eq!(eps[0].unexpected_len(), 4);
    assert_eq!(dst, bytes);
    // The flags were taken: a poll with nothing new files nothing and changes nothing.
    eps[0].poll().unwrap();
    assert_eq!(eps[0].unexpected_len(), 4);
    for (sender, ep) in eps.iter().enumerate().skip(1) {
        let flagged = [3usize, 5, 31, 32, 39].contains(&sender);
        assert_eq!(
            ep.outstanding(),
            usize::from(flagged),
            "rank {sender}'s sends"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Size mismatch
// ---------------------------------------------------------------------------------------------

#[test]
fn size_mismatch_fails_both_sides_and_writes_nothing() {
    let cases = [
        (100, 50),
        (50, 100),
        (EAGER_MAX + 10, EAGER_MAX + 9),
        (EAGER_MAX + 9, EAGER_MAX + 10),
        (1, 0),
    ];
    for (msg, rcv) in cases {
        for order in [Order::SendFirst, Order::RecvFirst] {
            let (mut a, mut b) = pair();
            let src = pattern(msg, 3);
            let mut dst = vec![0xEE; rcv];
            let (s, r) = match order {
                Order::SendFirst => {
                    let s = send(&mut a, 1, &src, 4);
                    (s, recv(&mut b, 0, &mut dst, 4))
                }
                Order::RecvFirst => {
                    let r = recv(&mut b, 0, &mut dst, 4);
                    (send(&mut a, 1, &src, 4), r)
                }
            };
            let err = wait(&mut b, r.request).unwrap_err();
            assert_eq!(err.status, NrtStatus::NetworkProxyFailure);
            assert_eq!(err.peer, Some(0));
            assert_eq!(
                err.message.contains("truncation"),
                rcv < msg,
                "{order:?} {msg}->{rcv}: {}",
                err.message
            );
            let err = a.test(s.request).unwrap_err();
            assert_eq!(err.status, NrtStatus::NetworkProxyFailure);
            assert_eq!(err.peer, Some(1));
            assert!(
                dst.iter().all(|&x| x == 0xEE),
                "a rejected receive was written"
            );
            // Both ids were released by the failing test.
            assert_eq!(b.test(r.request).unwrap_err().status, NrtStatus::Invalid);
            assert_eq!(a.test(s.request).unwrap_err().status, NrtStatus::Invalid);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cancel, close, drop
// ---------------------------------------------------------------------------------------------

#[test]
fn cancelled_unmatched_large_send_is_never_touched() {
    for drained in [false, true] {
        let (mut a, mut b) = pair();
        let size = EAGER_MAX + 1;
        let src = pattern(size, 5);
        let s = send(&mut a, 1, &src, 11);
        if drained {
            b.poll().unwrap(); // in the unexpected list rather than the mailbox
        }
        a.cancel(s.request).unwrap();
        assert_eq!(a.test(s.request), Ok(TestOutcome::Cancelled));
        // The buffer is the sender's again: free it. Any later read by the receiver would be
        // a use-after-free (Miri reports it).
        drop(src);
        let mut dst = vec![0xEE; size];
        let r = recv(&mut b, 0, &mut dst, 11);
        for _ in 0..3 {
            b.poll().unwrap();
            assert_eq!(b.test(r.request), Ok(TestOutcome::Pending));
        }
        // A withdrawn send does not count in the matching order: the next one meets the
        // receive.
        let src2 = pattern(size, 6);
        let s2 = send(&mut a, 1, &src2, 11);
        assert_eq!(wait(&mut b, r.request), done(size));
        assert_eq!(a.test(s2.request), done(size));
        assert!(dst == src2);
        assert_eq!(b.unexpected_len(), 0);
    }
}

#[test]
fn cancel_after_the_copy_reports_done() {
    let (mut a, mut b) = pair();
    let src = pattern(EAGER_MAX + 1, 8);
    let mut dst = vec![0; EAGER_MAX + 1];
    let r = recv(&mut b, 0, &mut dst, 2);
    let s = send(&mut a, 1, &src, 2);
    assert_eq!(wait(&mut b, r.request), done(src.len()));
    a.cancel(s.request).unwrap();
    assert_eq!(a.test(s.request), done(src.len()));
    assert!(dst == src);
}

#[test]
fn cancelled_posted_receive_is_never_written() {
    let (mut a, mut b) = pair();
    let mut dst = vec![0xEE; 64];
    let r = recv(&mut b, 0, &mut dst, 3);
    b.cancel(r.request).unwrap();
    b.cancel(r.request).unwrap(); // idempotent until tested
    assert_eq!(b.test(r.request), Ok(TestOutcome::Cancelled));
    let src = pattern(64, 9);
    let s = send(&mut a, 1, &src, 3);
    b.poll().unwrap();
    assert_eq!(
        b.unexpected_len(),
        1,
        "the message must not go to the cancelled receive"
    );
    assert!(dst.iter().all(|&x| x == 0xEE));
    let mut dst2 = vec![0; 64];
    let r2 = recv(&mut b, 0, &mut dst2, 3);
    assert_eq!(wait(&mut b, r2.request), done(64));
    assert_eq!(a.test(s.request), done(64));
    assert!(dst2 == src);
}

#[test]
fn withdrawn_unexpected_messages_are_pruned_by_poll() {
    let (mut a, mut b) = pair();
    let src = pattern(EAGER_MAX + 1, 10);
    let s = send(&mut a, 1, &src, 12);
    b.poll().unwrap();
    assert_eq!(b.unexpected_len(), 1);
    a.cancel(s.request).unwrap();
    assert_eq!(a.test(s.request), Ok(TestOutcome::Cancelled));
    for _ in 0..SWEEP_INTERVAL {
        b.poll().unwrap();
    }
    assert_eq!(b.unexpected_len(), 0);
}

#[test]
fn close_withdraws_everything_and_refuses_posts() {
    let (mut a, mut b) = pair();
    let src = pattern(EAGER_MAX + 1, 11);
    let mut dst = vec![0xEE; 8];
    let s = send(&mut a, 1, &src, 13);
    let r = recv(&mut a, 1, &mut dst, 14);
    a.close().unwrap();
    assert_eq!(a.test(s.request), Ok(TestOutcome::Cancelled));
    assert_eq!(a.test(r.request), Ok(TestOutcome::Cancelled));
    let err = try_send_err(&mut a, &src);
    assert_eq!(err.status, NrtStatus::NetworkProxyFailure);
    drop(src);
    // The peer finds nothing to match.
    let mut dst_b = vec![0xEE; EAGER_MAX + 1];
    let rb = recv(&mut b, 0, &mut dst_b, 13);
    let err = b.test(rb.request).unwrap_err();
    assert!(
        err.message.contains("closed its endpoint"),
        "{}",
        err.message
    );
    a.poll().unwrap(); // a no-op once closed
    assert!(dst.iter().all(|&x| x == 0xEE) && dst_b.iter().all(|&x| x == 0xEE));
}

fn try_send_err(t: &mut MemTransport, buf: &[u8]) -> NetError {
    // SAFETY: the post is refused before the buffer is looked at.
    unsafe { t.isend(1, buf.as_ptr(), buf.len() as u64, 0) }.unwrap_err()
}

#[test]
fn dropping_the_sender_withdraws_its_sends_and_fails_its_peers_receives() {
    let (mut a, mut b) = pair();
    let early = pattern(10, 13);
    let mut early_dst = vec![0; 10];
    let early_r = recv(&mut b, 0, &mut early_dst, 16);
    let early_s = send(&mut a, 1, &early, 16);
    assert_eq!(wait(&mut b, early_r.request), done(10));
    assert_eq!(a.test(early_s.request), done(10));
    let src = pattern(EAGER_MAX + 1, 12);
    let _s = send(&mut a, 1, &src, 15);
    drop(a);
    drop(src); // would be a use-after-free if the receiver still read it
    let mut dst = vec![0xEE; EAGER_MAX + 1];
    let r = recv(&mut b, 0, &mut dst, 15);
    let err = b.test(r.request).unwrap_err();
    assert_eq!(err.status, NrtStatus::NetworkProxyFailure);
    assert!(
        err.message.contains("closed its endpoint"),
        "{}",
        err.message
    );
    assert!(dst.iter().all(|&x| x == 0xEE));
    assert!(early_dst == early);
    assert_eq!(b.outstanding(), 0);
}

#[test]
fn a_gone_receiver_fails_pending_sends_and_frees_the_buffer() {
    for close in [false, true] {
        let (mut a, mut b) = pair();
        let src = pattern(EAGER_MAX + 1, 14);
        let s = send(&mut a, 1, &src, 17);
        b.poll().unwrap(); // in b's unexpected list
        if close {
            b.close().unwrap();
        } else {
            drop(b);
        }
        let err = a.test(s.request).unwrap_err();
        assert_eq!(err.status, NrtStatus::NetworkProxyFailure, "close={close}");
        assert_eq!(err.peer, Some(1));
        drop(src); // withdrawn: the buffer is ours again
        assert_eq!(a.outstanding(), 0);
    }
}

#[test]
fn what_a_dropped_sender_delivered_before_is_still_received() {
    let (mut a, mut b) = pair();
    let mut dst = vec![0; 8];
    let r = recv(&mut b, 0, &mut dst, 18);
    let src = pattern(8, 15);
    let s = send(&mut a, 1, &src, 18);
    b.poll().unwrap(); // matched and copied here
    assert_eq!(a.test(s.request), done(8));
    drop(a);
    assert_eq!(b.test(r.request), done(8));
    assert!(dst == src);
}

// ---------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_arguments_are_invalid_not_panics() {
    assert_eq!(MemFabric::new(0).unwrap_err().status, NrtStatus::Invalid);
    assert_eq!(
        MemFabric::new(MAX_FABRIC_RANKS + 1).unwrap_err().status,
        NrtStatus::Invalid
    );
    assert_eq!(
        MemFabric::with_mailbox_capacity(2, 3).unwrap_err().status,
        NrtStatus::Invalid
    );
    let f = MemFabric::new(2).unwrap();
    let mut a = f.endpoint(0).unwrap();
    assert_eq!(f.endpoint(0).unwrap_err().status, NrtStatus::Invalid);
    assert_eq!(f.endpoint(2).unwrap_err().status, NrtStatus::Invalid);
    assert_eq!(a.max_msg_size(), MAX_MSG_SIZE);
    assert_eq!(a.name(), "mem");
    let buf = [0u8; 4];
    // SAFETY: every post below is refused before the buffer is used.
    unsafe {
        let e = a.isend(2, buf.as_ptr(), 4, 0).unwrap_err();
        assert_eq!((e.status, e.peer), (NrtStatus::Invalid, Some(2)));
        let e = a.irecv(2, buf.as_ptr().cast_mut(), 4, 0).unwrap_err();
        assert_eq!(e.status, NrtStatus::Invalid);
        let e = a.isend(1, buf.as_ptr(), MAX_MSG_SIZE + 1, 0).unwrap_err();
        assert_eq!(e.status, NrtStatus::Invalid);
        let e = a.isend(1, core::ptr::null(), 4, 0).unwrap_err();
        assert_eq!(e.status, NrtStatus::Invalid);
        let e = a.irecv(1, core::ptr::null_mut(), 4, 0).unwrap_err();
        assert_eq!(e.status, NrtStatus::Invalid);
    }
    assert_eq!(a.outstanding(), 0);
    assert_eq!(a.test(12345).unwrap_err().status, NrtStatus::Invalid);
    assert_eq!(a.cancel(12345).unwrap_err().status, NrtStatus::Invalid);
    // A released id stays invalid even when its slot is reused.
    let mut b = f.endpoint(1).unwrap();
    let src = pattern(4, 1);
    let mut dst = vec![0; 4];
    let s = send(&mut a, 1, &src, 1);
    let r = recv(&mut b, 0, &mut dst, 1);
    assert_eq!(b.test(r.request), done(4));
    assert_eq!(a.test(s.request), done(4));
    let s2 = send(&mut a, 1, &src, 2);
    assert_ne!(s2.request, s.request);
    assert_eq!(a.test(s.request).unwrap_err().status, NrtStatus::Invalid);
    assert_eq!(a.cancel(s.request).unwrap_err().status, NrtStatus::Invalid);
}

#[test]
fn fabric_can_go_before_its_endpoints() {
    let f = MemFabric::new(2).unwrap();
    let (mut a, mut b) = (f.endpoint(0).unwrap(), f.endpoint(1).unwrap());
    drop(f);
    let src = pattern(10, 1);
    let mut dst = vec![0; 10];
    let s = send(&mut a, 1, &src, 0);
    let r = recv(&mut b, 0, &mut dst, 0);
    assert_eq!(b.test(r.request), done(10));
    assert_eq!(a.test(s.request), done(10));
    assert!(dst == src);
}

// ---------------------------------------------------------------------------------------------
// Two threads
// ---------------------------------------------------------------------------------------------

#[test]
fn two_threads_every_size_both_orders() {
    let (mut a, mut b) = pair();
    // Each side tells the other when it has posted, to force the posting order per message.
    let (to_b, from_a) = mpsc::channel::<()>();
    let (to_a, from_b) = mpsc::channel::<()>();
    let sender = thread::spawn(move || {
        for (i, &size) in SIZES.iter().enumerate() {
            for order in [Order::SendFirst, Order::RecvFirst] {
                let src = pattern(size, i as u64);
                if let Order::RecvFirst = order {
                    from_b.recv().unwrap();
                }
                let s = send(&mut a, 1, &src, tag(i));
                assert_eq!(s.payload_copied, size <= EAGER_MAX);
                if let Order::SendFirst = order {
                    to_b.send(()).unwrap();
                }
                assert_eq!(wait_threaded(&mut a, s.request), done(size));
                // `src` is dropped here, after Done: the receiver no longer reads it.
            }
        }
    });
    for (i, &size) in SIZES.iter().enumerate() {
        for order in [Order::SendFirst, Order::RecvFirst] {
            let mut dst = vec![0xEE; size];
            if let Order::SendFirst = order {
                from_a.recv().unwrap();
            }
            let r = recv(&mut b, 0, &mut dst, tag(i));
            if let Order::RecvFirst = order {
                to_a.send(()).unwrap();
            }
            assert_eq!(wait_threaded(&mut b, r.request), done(size));
            assert!(dst == pattern(size, i as u64), "{order:?} size {size}");
        }
    }
    sender.join().unwrap();
}

/// Both threads post everything as fast as back-pressure allows, in different orders, through a
/// tiny mailbox, polling while they wait.
#[test]
fn two_threads_many_tags_small_mailbox() {
    const N: usize = if cfg!(miri) { 16 } else { 200 };
    let size_of = |i: usize| {
        if i.is_multiple_of(4) {
            EAGER_MAX + 1 + i
        } else {
            i
        }
    };
    let f = MemFabric::with_mailbox_capacity(2, 4).unwrap();
    let (mut a, mut b) = (f.endpoint(0).unwrap(), f.endpoint(1).unwrap());
    let sender = thread::spawn(move || {
        let srcs: Vec<Vec<u8>> = (0..N).map(|i| pattern(size_of(i), i as u64)).collect();
        let mut reqs = Vec::new();
        let mut refused = 0usize;
        for (i, src) in srcs.iter().enumerate() {
            let mut posted = None;
            for _ in 0..SPIN_LIMIT {
                posted = try_send(&mut a, 1, src, tag(i));
                if posted.is_some() {
                    break;
                }
                refused += 1;
                a.poll().unwrap();
                thread::yield_now();
            }
            reqs.push(posted.expect("mailbox never drained").request);
        }
        for (i, r) in reqs.into_iter().enumerate() {
            assert_eq!(wait_threaded(&mut a, r), done(size_of(i)));
        }
        refused
    });
    let mut dsts: Vec<Vec<u8>> = (0..N).map(|i| vec![0xEE; size_of(i)]).collect();
    let order: Vec<usize> = (0..N).map(|k| (k * 7 + 5) % N).collect();
    let mut reqs = vec![0; N];
    for &i in &order {
        reqs[i] = recv(&mut b, 0, &mut dsts[i], tag(i)).request;
        b.poll().unwrap();
    }
    for (i, &r) in reqs.iter().enumerate() {
        assert_eq!(wait_threaded(&mut b, r), done(size_of(i)), "message {i}");
    }
    let _refused = sender.join().unwrap();
    for (i, d) in dsts.iter().enumerate() {
        assert!(*d == pattern(size_of(i), i as u64), "message {i} crossed");
    }
}

/// The sender cancels while the receiver is busy matching: whichever wins, the outcome is
/// consistent and the buffer handoff is clean (the sender overwrites its buffer as soon as it
/// is told it may; Miri's race detector checks that no read overlaps).
#[test]
fn two_threads_cancel_races_the_copy() {
    const ROUNDS: usize = if cfg!(miri) { 4 } else { 300 };
    const SIZE: usize = if cfg!(miri) {
        EAGER_MAX + 1
    } else {
        EAGER_MAX * 4
    };
    let (mut a, mut b) = pair();
    let (outcome_tx, outcome_rx) = mpsc::channel::<TestOutcome>();
    let (posted_tx, posted_rx) = mpsc::channel::<()>();
    let sender = thread::spawn(move || {
        let mut cancelled = 0;
        for round in 0..ROUNDS {
            let mut src = pattern(SIZE, round as u64);
            posted_rx.recv().unwrap(); // the receive is posted and being tested
            let s = send(&mut a, 1, &src, round as u64);
            for _ in 0..(round % 5) {
                thread::yield_now();
            }
            a.cancel(s.request).unwrap();
            let outcome = wait_threaded(&mut a, s.request).unwrap();
            src.iter_mut().for_each(|x| *x = 0); // ours again: reuse it
            cancelled += usize::from(outcome == TestOutcome::Cancelled);
            outcome_tx.send(outcome).unwrap();
        }
        // Hand the endpoint back rather than drop it here: a dropped endpoint is "gone", and
        // the receiver's last check must still see an ordinary pending receive.
        (a, cancelled)
    });
    for round in 0..ROUNDS {
        let mut dst = vec![0xEE; SIZE];
        let r = recv(&mut b, 0, &mut dst, round as u64);
        posted_tx.send(()).unwrap();
        let mut mine = None;
        let mut theirs = None;
        for _ in 0..SPIN_LIMIT {
            if mine.is_none() {
                match b.test(r.request).unwrap() {
                    TestOutcome::Pending => {}
                    o => mine = Some(o),
                }
            }
            if theirs.is_none() {
                theirs = outcome_rx.try_recv().ok();
            }
            if theirs == Some(TestOutcome::Cancelled) || (mine.is_some() && theirs.is_some()) {
                break;
            }
            thread::yield_now();
        }
        match theirs.expect("sender never finished") {
            TestOutcome::Done { size } => {
                assert_eq!(size, SIZE as u64);
                assert_eq!(mine, Some(TestOutcome::Done { size }));
                assert!(dst == pattern(SIZE, round as u64), "round {round}");
            }
            TestOutcome::Cancelled => {
                assert!(mine.is_none(), "round {round}: cancelled send was received");
                b.poll().unwrap();
                assert_eq!(b.test(r.request), Ok(TestOutcome::Pending));
                assert!(dst.iter().all(|&x| x == 0xEE), "round {round}: written");
                b.cancel(r.request).unwrap();
                assert_eq!(b.test(r.request), Ok(TestOutcome::Cancelled));
            }
            TestOutcome::Pending => unreachable!(),
        }
    }
    let (_a, _cancelled) = sender.join().unwrap();
    assert_eq!(b.outstanding(), 0);
}
