//! The progress count ([`Device::progress`]) of a launch with two streams: it rises while any
//! stream moves, even when the answered wait stays the same, and stays while nothing moves
//! (quiet polls included); the answer names the stream that has waited longest. What a
//! caller's no-progress timeout is counted from.

use super::quiet::{launched_two_streams, walked};
use super::*;

/// The proxy of job block `j` only, one step at a time, in the order the program of
/// [`two_streams`](super::quiet::two_streams) waits (handshakes send first, completions receive first): answers one
/// handshake, or credits one posted entry as complete. `false` = nothing to do (the block
/// waits for nothing the proxy owes it).
fn one_answer(s: &Setup, j: usize, credited: &mut Vec<[u32; 2]>) -> bool {
    let ops = &s.job.blocks[j].plan.ops;
    credited.resize(ops.len(), [0; 2]);
    for (k, o) in ops.iter().enumerate() {
        let k32 = k as u32;
        for side in [Side::Send, Side::Recv] {
            let post = s.block_word(j, k32, OpWord::post(side));
            if o.entries(side) > 0 && post.load(Ordering::Acquire) == HOST_INDEX_READY {
                post.store(0, Ordering::Release);
                credited[k][side as usize] = 0;
                s.block_word(j, k32, OpWord::handshake(side))
                    .fetch_add(1, Ordering::Release);
                return true;
            }
        }
        for side in [Side::Recv, Side::Send] {
            let posted = s
                .block_word(j, k32, OpWord::post(side))
                .load(Ordering::Acquire);
            let c = &mut credited[k][side as usize];
            if o.entries(side) > 0 && posted != HOST_INDEX_READY && posted > *c {
                s.block_word(j, k32, OpWord::complete(side))
                    .fetch_add(1, Ordering::Release);
                *c += 1;
                return true;
            }
        }
    }
    false
}

/// The address of job block `j`'s first handshake semaphore its program waits on.
fn first_handshake_word(s: &Setup, j: usize) -> u64 {
    let (op, side) = first_handshake(&s.job.blocks[j].plan);
    s.job.blocks[j]
        .addrs
        .word(OpWord::handshake(side).index(op))
}

/// Stream 0 stalls on its first handshake (its proxy never answers); stream 1's proxy answers
/// one step per poll. Every such poll answers the same `Pending` (stream 0's wait, which a
/// caller comparing answers would take for no progress) but changes the progress count; once
/// stream 1 ran its block, nothing moves and the count stays, quiet polls and walks alike.
#[test]
fn progress_rises_while_another_stream_moves_and_stays_when_none_does() {
    let (s, mut d, env, w0) = launched_two_streams();
    let first = DevicePoll::Pending { waiting_for: w0 };
    assert_eq!(
        w0.addr(),
        first_handshake_word(&s, 0),
        "stream 0's handshake"
    );
    let mut p = d.progress();
    assert_eq!(d.poll(&env), Ok(first));
    assert_eq!(d.progress(), p, "nothing changed: the same count");

    let mut credited = Vec::new();
    let mut moves = 0;
    for _ in 0..1000 {
        if !one_answer(&s, 1, &mut credited) {
            break;
        }
        assert_eq!(d.poll(&env), Ok(first), "the answer stays stream 0's wait");
        assert_ne!(d.progress(), p, "stream 1 moved: the count changed");
        p = d.progress();
        moves += 1;
    }
    // Two handshakes and every entry of both sides, one poll each.
    let plan = &s.job.blocks[1].plan;
    assert_eq!(moves, 2 + plan.src.len() + plan.dst.len());
    assert_eq!(d.exec.streams[1].step, 1, "stream 1 ran its block");
    assert_eq!(d.exec.streams[0].step, 0, "stream 0 still waits");
    assert_eq!(
        env.recv_entries.get(),
        plan.dst.len() as u64,
        "stream 1 saw every entry complete"
    );
    for i in 0..3 {
        let r = if i == 1 {
            walked(&mut d, &env)
        } else {
            d.poll(&env)
        };
        assert_eq!(r, Ok(first));
        assert_eq!(d.progress(), p, "nothing moves: the count stays");
    }
    assert_eq!(env.executions.get(), 0, "stream 0 holds the execution");
}

/// The answer names the pending stream that moved least recently: once stream 0 moved past
/// the handshake stream 1 still waits on, stream 1's wait is named, and stays named while
/// stream 0 keeps moving.
#[test]
fn the_answer_names_the_stream_that_has_waited_longest() {
    let (s, mut d, env, waiting_for) = launched_two_streams();
    assert_eq!(
        waiting_for.addr(),
        first_handshake_word(&s, 0),
        "both began waiting in one walk: the first stream"
    );
    let stalled = first_handshake_word(&s, 1);
    let mut credited = Vec::new();
    let mut moves = 0;
    while one_answer(&s, 0, &mut credited) {
        let Ok(DevicePoll::Pending { waiting_for }) = d.poll(&env) else {
            panic!("not pending");
        };
        assert_eq!(
            waiting_for,
            WaitingFor::Handshake {
                op: first_handshake(&s.job.blocks[1].plan).0,
                side: first_handshake(&s.job.blocks[1].plan).1,
                addr: stalled,
                target: 1,
                seen: 0,
            },
            "stream 1 waited longest"
        );
        moves += 1;
        assert!(moves < 1000, "stream 0 never ran out of answers");
    }
    assert_eq!(d.exec.streams[0].step, 1, "stream 0 ran its block");
}
