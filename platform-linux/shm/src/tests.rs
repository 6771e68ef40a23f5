//! The transport between endpoints of one process (the same code paths as between processes:
//! real segments in `/dev/shm`, cross-memory reads of our own pid).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use proxy_core::progress::net::{TestOutcome, Transport};

use crate::segment::{Layout, Owner, Segment, INLINE_MAX, LINE, MAILBOX_SLOTS};
use crate::ShmTransport;

/// `n` endpoints over fresh segments (their files unlinked at once).
fn endpoints(n: u32) -> Vec<ShmTransport> {
    static RUN: AtomicU32 = AtomicU32::new(0);
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let layout = Layout { nranks: n };
    let segs: Vec<Arc<Segment>> = (0..n)
        .map(|r| {
            let path = std::path::PathBuf::from(format!("/dev/shm/proxy-shm-test.{pid}.{run}.{r}"));
            let s = Segment::create(&path, layout, Owner { rank: r, pid }).unwrap();
            let peer = Segment::open(&path, layout, Owner { rank: r, pid }).unwrap();
            s.unlink().unwrap();
            assert!(!path.exists());
            drop(s);
            Arc::new(peer)
        })
        .collect();
    (0..n)
        .map(|r| ShmTransport::new(r, segs.clone(), vec![pid; n as usize]).unwrap())
        .collect()
}

fn send(t: &mut ShmTransport, peer: u32, data: &[u8], tag: u64) -> Option<u64> {
    // SAFETY: the tests keep `data` alive and unchanged until the request is tested done.
    unsafe { t.isend(peer, data.as_ptr(), data.len() as u64, tag) }
        .unwrap()
        .map(|p| p.request)
}

fn recv(t: &mut ShmTransport, peer: u32, buf: &mut [u8], tag: u64) -> u64 {
    // SAFETY: as in `send`, for the receive buffer.
    unsafe { t.irecv(peer, buf.as_mut_ptr(), buf.len() as u64, tag) }
        .unwrap()
        .unwrap()
        .request
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn inline_messages_arrive_whichever_side_posts_first() {
    let mut t = endpoints(2);
    let (a, b) = t.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    for (len, recv_first) in [
        (0, false),
        (8, true),
        (8, false),
        (INLINE_MAX, true),
        (INLINE_MAX, false),
    ] {
        let data = pattern(len, len as u8);
        let mut got = vec![0xEEu8; len];
        let r = if recv_first {
            Some(recv(b, 0, &mut got, 7))
        } else {
            None
        };
        let s = send(a, 1, &data, 7).unwrap();
        assert_eq!(a.test(s).unwrap(), TestOutcome::Done { size: len as u64 });
        b.poll().unwrap();
        let r = r.unwrap_or_else(|| recv(b, 0, &mut got, 7));
        assert_eq!(b.test(r).unwrap(), TestOutcome::Done { size: len as u64 });
        assert_eq!(got, data, "{len} bytes, receive first: {recv_first}");
    }
}

#[test]
fn large_messages_are_read_from_the_senders_buffer_and_complete_the_send() {
    let mut t = endpoints(2);
    let (a, b) = t.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    for (len, recv_first) in [(INLINE_MAX + 1, true), (64 << 10, false), (16 << 20, true)] {
        let data = pattern(len, 3);
        let mut got = vec![0u8; len];
        let r = if recv_first {
            Some(recv(b, 0, &mut got, 9))
        } else {
            None
        };
        let s = send(a, 1, &data, 9).unwrap();
        assert_eq!(a.test(s).unwrap(), TestOutcome::Pending, "not read yet");
        b.poll().unwrap();
        let r = r.unwrap_or_else(|| recv(b, 0, &mut got, 9));
        assert_eq!(b.test(r).unwrap(), TestOutcome::Done { size: len as u64 });
        assert_eq!(a.test(s).unwrap(), TestOutcome::Done { size: len as u64 });
        assert!(got == data, "{len} bytes differ");
    }
}

#[test]
fn the_kth_send_of_a_tag_meets_the_kth_receive_and_tags_do_not_mix() {
    let mut t = endpoints(3);
    let msgs: Vec<Vec<u8>> = (0..6).map(|i| pattern(16 + i, i as u8)).collect();
    let mut sends = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        sends.push(send(&mut t[2], 1, m, (i % 2) as u64).unwrap());
    }
    t[1].poll().unwrap();
    // Receives of tag 1 first, then tag 0: each gets its own tag's messages in order.
    let mut got: Vec<Vec<u8>> = msgs.iter().map(|m| vec![0; m.len()]).collect();
    let order = [1, 3, 5, 0, 2, 4];
    for &i in &order {
        let r = recv(&mut t[1], 2, &mut got[i], (i % 2) as u64);
        assert_eq!(
            t[1].test(r).unwrap(),
            TestOutcome::Done {
                size: msgs[i].len() as u64
            }
        );
    }
    assert_eq!(got, msgs);
    // Nothing from rank 2 reached rank 0.
    t[0].poll().unwrap();
    assert_eq!(t[0].in_flight(), (0, 0));
}

#[test]
fn a_full_mailbox_pushes_back_and_nothing_is_lost() {
    let mut t = endpoints(2);
    let data: Vec<Vec<u8>> = (0..MAILBOX_SLOTS + 3)
        .map(|i| pattern(32, i as u8))
        .collect();
    let mut sent = 0;
    while sent < data.len() {
        match send(&mut t[0], 1, &data[sent], 5) {
            Some(_) => sent += 1,
            None => break,
        }
    }
    assert_eq!(sent, MAILBOX_SLOTS, "the ring holds exactly its slots");
    t[1].poll().unwrap();
    while sent < data.len() {
        assert!(send(&mut t[0], 1, &data[sent], 5).is_some());
        sent += 1;
    }
    t[1].poll().unwrap();
    for d in &data {
        let mut got = vec![0; 32];
        let r = recv(&mut t[1], 0, &mut got, 5);
        assert_eq!(t[1].test(r).unwrap(), TestOutcome::Done { size: 32 });
        assert_eq!(&got, d);
    }
}

#[test]
fn a_size_mismatch_fails_the_receive_and_a_large_send() {
    let mut t = endpoints(2);
    let (a, b) = t.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let small = pattern(100, 1);
    let mut short = vec![0u8; 50];
    send(a, 1, &small, 1).unwrap();
    b.poll().unwrap();
    let r = recv(b, 0, &mut short, 1);
    let e = b.test(r).unwrap_err();
    assert!(e.message.contains("truncation"), "{e}");
    assert_eq!(e.peer, Some(0));

    let big = pattern(1 << 20, 2);
    let mut other = vec![0u8; 1 << 19];
    let s = send(a, 1, &big, 2).unwrap();
    let r = recv(b, 0, &mut other, 2);
    b.poll().unwrap();
    assert!(b.test(r).unwrap_err().message.contains("truncation"));
    let e = a.test(s).unwrap_err();
    assert!(e.message.contains("another size"), "{e}");
    assert!(
        other.iter().all(|&x| x == 0),
        "a rejected message is never read"
    );
}

#[test]
fn a_withdrawn_large_send_does_not_count_and_the_receive_takes_the_next() {
    let mut t = endpoints(2);
    let (a, b) = t.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let first = pattern(8192, 1);
    let second = pattern(8192, 2);
    let s1 = send(a, 1, &first, 4).unwrap();
    a.cancel(s1).unwrap();
    assert_eq!(a.test(s1).unwrap(), TestOutcome::Cancelled);
    let s2 = send(a, 1, &second, 4).unwrap();
    let mut got = vec![0u8; 8192];
    let r = recv(b, 0, &mut got, 4);
    b.poll().unwrap();
    assert_eq!(b.test(r).unwrap(), TestOutcome::Done { size: 8192 });
    assert_eq!(got, second);
    assert_eq!(a.test(s2).unwrap(), TestOutcome::Done { size: 8192 });
    // A receive cancelled before its message: Cancelled, and the message waits for the next.
    let mut lost = vec![0u8; 8];
    let r = recv(b, 0, &mut lost, 6);
    b.cancel(r).unwrap();
    assert_eq!(b.test(r).unwrap(), TestOutcome::Cancelled);
    send(a, 1, &pattern(8, 9), 6).unwrap();
    b.poll().unwrap();
    let mut got = vec![0u8; 8];
    let r = recv(b, 0, &mut got, 6);
    assert_eq!(b.test(r).unwrap(), TestOutcome::Done { size: 8 });
    assert_eq!(got, pattern(8, 9));
    assert_eq!(lost, vec![0; 8]);
}

/// A peer that writes nonsense into the shared words: an error naming it, never a panic or a
/// wild access.
#[test]
fn a_peer_that_breaks_the_protocol_fails_the_comm_naming_it() {
    // A tail far past our head.
    let mut t = endpoints(2);
    let seg = t[1].segment(1);
    seg.word32(seg.layout().mailbox(0))
        .store(1000, Ordering::Release);
    let e = t[1].poll().unwrap_err();
    assert_eq!(e.peer, Some(0));
    assert!(e.message.contains("broke the protocol"), "{e}");
    assert!(t[1].poll().is_err(), "sticky");

    // A slot of unknown kind, and an inline size above the slot.
    for (kind, size) in [(9u32, 8u64), (1, INLINE_MAX as u64 + 1)] {
        let mut t = endpoints(2);
        send(&mut t[0], 1, &[1, 2, 3], 0).unwrap();
        let seg = t[1].segment(1);
        let slot = seg.layout().mailbox(0) + 2 * LINE;
        seg.word64(slot + 8).store(size, Ordering::Relaxed);
        seg.word32(slot + 32).store(kind, Ordering::Relaxed);
        let e = t[1].poll().unwrap_err();
        assert_eq!(e.peer, Some(0), "{e}");
    }

    // A receiver that writes another generation into our send word.
    let mut t = endpoints(2);
    let data = pattern(8192, 0);
    let s = send(&mut t[0], 1, &data, 0).unwrap();
    let seg = t[0].segment(0);
    seg.send_word(0).store(u64::MAX, Ordering::Release);
    let e = t[0].test(s).unwrap_err();
    assert!(e.message.contains("send word"), "{e}");
}

#[test]
fn a_segment_of_another_layout_or_owner_is_refused() {
    let pid = std::process::id();
    let path = std::path::PathBuf::from(format!("/dev/shm/proxy-shm-test.{pid}.layout"));
    let _s = Segment::create(&path, Layout { nranks: 2 }, Owner { rank: 0, pid }).unwrap();
    let e = Segment::open(&path, Layout { nranks: 3 }, Owner { rank: 0, pid }).unwrap_err();
    assert!(e.to_string().contains("bytes"), "{e}");
    let e = Segment::open(&path, Layout { nranks: 2 }, Owner { rank: 1, pid }).unwrap_err();
    assert!(e.to_string().contains("rank 0, expected 1"), "{e}");
    assert!(Segment::create(&path, Layout { nranks: 2 }, Owner { rank: 0, pid }).is_err());
    drop(_s);
    assert!(
        !path.exists(),
        "the creator's drop removes a file it did not unlink"
    );
}

/// A large message whose sender withdrew it after it arrived unexpected leaves the receiver's
/// list at the next sweep (no receive could take it, and its word will be armed again).
#[test]
fn a_withdrawn_unexpected_large_message_is_swept() {
    let mut t = endpoints(2);
    let data = pattern(8192, 1);
    let s = send(&mut t[0], 1, &data, 3).unwrap();
    t[1].poll().unwrap();
    assert_eq!(t[1].in_flight(), (0, 1));
    t[0].cancel(s).unwrap();
    assert_eq!(t[0].test(s).unwrap(), TestOutcome::Cancelled);
    for _ in 0..256 {
        t[1].poll().unwrap();
    }
    assert_eq!(t[1].in_flight(), (0, 0), "swept");
    // A live one stays.
    let s = send(&mut t[0], 1, &data, 4).unwrap();
    for _ in 0..256 {
        t[1].poll().unwrap();
    }
    assert_eq!(t[1].in_flight(), (0, 1));
    let mut got = vec![0u8; 8192];
    let r = recv(&mut t[1], 0, &mut got, 4);
    assert_eq!(t[1].test(r).unwrap(), TestOutcome::Done { size: 8192 });
    assert_eq!(t[0].test(s).unwrap(), TestOutcome::Done { size: 8192 });
    assert_eq!(got, data);
}

/// Dropping an endpoint while a receiver reads one of its buffers waits for the read to end
/// (the caller frees its buffers after the drop).
#[test]
fn dropping_an_endpoint_waits_for_a_read_in_progress() {
    let mut t = endpoints(2);
    let data = pattern(8192, 2);
    send(&mut t[0], 1, &data, 0).unwrap();
    let seg = t[0].segment(0);
    let word = seg.send_word(0);
    let generation = word.load(Ordering::Acquire) >> 32;
    // A receiver mid-read: COPYING (2) of this generation.
    word.store((generation << 32) | 2, Ordering::Release);
    let a = t.remove(0);
    let dropper = std::thread::spawn(move || drop(a));
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(!dropper.is_finished(), "the drop must wait for the read");
    word.store((generation << 32) | 3, Ordering::Release);
    dropper.join().unwrap();
}

/// A set-up record that names a process another rank has (ours) is refused.
#[test]
fn a_record_naming_another_ranks_process_is_refused() {
    let pid = std::process::id();
    let layout = Layout { nranks: 2 };
    let path = std::path::PathBuf::from(format!("/dev/shm/proxy-shm-test.{pid}.records"));
    let own = Arc::new(Segment::create(&path, layout, Owner { rank: 0, pid }).unwrap());
    let rec = |p: u32| {
        let mut v = p.to_le_bytes().to_vec();
        v.extend_from_slice(&(own.base() as u64).to_le_bytes());
        v
    };
    let e = crate::setup::map_peers(0, 1, layout, &own, &[rec(pid), rec(pid)]).unwrap_err();
    assert!(e.contains("another rank has"), "{e}");
    let e = crate::setup::map_peers(0, 1, layout, &own, &[rec(pid), rec(pid)[..5].to_vec()])
        .unwrap_err();
    assert!(e.contains("malformed"), "{e}");
}
