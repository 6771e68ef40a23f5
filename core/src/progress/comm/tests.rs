//! Tests of the op-FIFO contract (docs/design.md §3), one per invariant, and a model-based test
//! against a plain reference model.

extern crate std;

use crate::base::sync::PlainArc;
use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use core::ffi::c_int;

use crate::base::desc::NUM_STREAMS;
use crate::base::desc::{NetOpInfo, NetSrcAddr, NET_OP_COMPLETE, NET_TRANSFER};
use crate::base::status::NrtStatus;
use crate::base::time::NoClock;
use crate::progress::comm::{Comm, CommConfig, BB_NONE};
use crate::progress::op::{OpState, OPS_PER_POOL_BLOCK};
use crate::progress::scripted::Script;
use crate::seam::SeamTable;
use crate::testing::{CountingTransport, NullTransport, RecordingDevice};

fn comm() -> Comm {
    Comm::new(
        CommConfig::new(0, 2, 7),
        Box::new(NullTransport::default()),
        PlainArc::new(RecordingDevice::default()),
        PlainArc::new(NoClock),
    )
    .unwrap()
}

fn after(n: u32) -> Script {
    Script {
        complete_after: n,
        idle_mask: 0,
        fail_tick: 0,
    }
}

/// One progress call with idle/done seeded true; returns (idle, done).
fn tick(c: &mut Comm, stream: u32, bb: u32) -> (bool, bool) {
    let (mut idle, mut done) = (true, true);
    c.progress(stream, bb)
        .map(|t| t.and_into(&mut idle, &mut done))
        .unwrap();
    (idle, done)
}

fn active_counts(c: &Comm, s: usize) -> Vec<u64> {
    // SAFETY: ops on the list are live while the comm is borrowed.
    c.stream(s)
        .active
        .iter()
        .map(|p| unsafe { (*p).op_count })
        .collect()
}

fn filed_counts(c: &Comm, s: usize, bb: u32) -> Vec<u64> {
    c.stream(s)
        .blocks
        .get(&bb)
        // SAFETY: as above.
        .map(|f| f.ops.iter().map(|p| unsafe { (*p).op_count }).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------- recycling

#[test]
fn recycle_keeps_pool_count_and_refiles_under_block_with_fresh_requests() {
    let mut c = comm();
    c.start_scripted(0, 5, &[after(1), after(2)]).unwrap();
    let free_before = c.stream(0).pool.len();
    assert_eq!(free_before, OPS_PER_POOL_BLOCK as u32 - 2);
    let first = c.stream(0).blocks[&5].ops.head();
    // SAFETY: live op of the comm's pool.
    let has_tracker = unsafe { (*first).tracker().is_some() };
    assert!(has_tracker);

    assert_eq!(tick(&mut c, 0, 5), (false, false));
    // Op 0 completed on tick 1: recycled under block 5, op 1 still active.
    assert_eq!(active_counts(&c, 0), vec![1]);
    assert_eq!(filed_counts(&c, 0, 5), vec![0]);
    assert_eq!(
        c.stream(0).pool.len(),
        free_before,
        "a recycle does not touch the pool"
    );
    // SAFETY: as above.
    unsafe {
        assert_eq!((*first).state(), OpState::HANDSHAKE);
        assert_eq!((*first).posted, 0);
        assert_eq!((*first).pre_post_fifo_idx, 0);
        assert_eq!((*first).ticks, 0);
        assert_eq!((*first).executions, 1);
        let t = (*first).tracker().expect("fresh tracker");
        assert!(t.is_empty());
    }
    assert_eq!(tick(&mut c, 0, 5), (false, true));
    assert_eq!(filed_counts(&c, 0, 5), vec![0, 1]);
    assert_eq!(c.stream(0).current_bb, 5);
    assert_eq!(c.stream(0).pool.len(), free_before);
}

#[test]
fn a_block_runs_again_when_reloaded() {
    let mut c = comm();
    c.start_scripted(1, 3, &[after(2)]).unwrap();
    for execution in 1..=3u32 {
        assert_eq!(
            tick(&mut c, 1, 3),
            (false, false),
            "execution {execution} tick 1"
        );
        assert_eq!(
            tick(&mut c, 1, 3),
            (false, true),
            "execution {execution} tick 2"
        );
        let op = c.stream(1).blocks[&3].ops.head();
        // SAFETY: live op.
        assert_eq!(unsafe { (*op).executions }, execution);
    }
    // Reloading the block that just drained is a loop, not a block switch; scripted ops are
    // not filed by `start`.
    assert_eq!(c.protocol_stats().block_switches, 0);
    assert_eq!(c.protocol_stats().starts, 0);
}

/// Runs block `bb` of stream `s` until it reports done (at most 10 ticks).
fn run_block(c: &mut Comm, s: u32, bb: u32) {
    for _ in 0..10 {
        if tick(c, s, bb).1 {
            return;
        }
    }
    panic!("block {bb} of stream {s} not done in 10 ticks");
}

#[test]
fn block_switches_count_loads_of_another_block_until_stop() {
    let mut c = comm();
    for bb in 1..=3 {
        c.start_scripted(0, bb, &[after(1)]).unwrap();
        c.start_scripted(2, bb, &[after(2)]).unwrap();
    }
    // Schedule 1 2 3 1 2 3 on stream 0, 1 1 2 on stream 2: 5 + 1 switches.
    for bb in [1, 2, 3, 1, 2, 3] {
        run_block(&mut c, 0, bb);
    }
    for bb in [1, 1, 2] {
        run_block(&mut c, 2, bb);
    }
    assert_eq!(c.protocol_stats().block_switches, 6);
    // A stop forgets the last block: the first load after it is no switch.
    c.stop(0).unwrap();
    c.start_scripted(0, 2, &[after(1)]).unwrap();
    run_block(&mut c, 0, 2);
    assert_eq!(c.protocol_stats().block_switches, 6);
    // Stream 2 still remembers block 2.
    run_block(&mut c, 2, 3);
    assert_eq!(c.protocol_stats().block_switches, 7);
}

// ---------------------------------------------------------------- rounds and reuse

fn counting_comm() -> (Comm, PlainArc<crate::base::sync::AtomicU32>) {
    let (t, polls) = CountingTransport::new();
    let c = Comm::new(
        CommConfig::new(0, 2, 7),
        Box::new(t),
        PlainArc::new(RecordingDevice::default()),
        PlainArc::new(NoClock),
    )
    .unwrap();
    (c, polls)
}

fn polls_of(p: &crate::base::sync::AtomicU32) -> u32 {
    p.load(crate::base::sync::Ordering::Relaxed)
}

#[test]
fn the_transport_is_polled_once_per_round_of_streams() {
    let (mut c, polls) = counting_comm();
    for s in 0..NUM_STREAMS as u32 {
        c.start_scripted(s, 1, &[after(1000)]).unwrap();
    }
    for round in 1..=5u32 {
        for s in 0..NUM_STREAMS as u32 {
            assert_eq!(tick(&mut c, s, 1), (false, false));
        }
        assert_eq!(
            polls_of(&polls),
            round,
            "{NUM_STREAMS} streams progressed in round {round}: one poll per round"
        );
    }
    // A round that skips streams (0 and 2 only) still polls once.
    tick(&mut c, 0, 1);
    tick(&mut c, 2, 1);
    assert_eq!(polls_of(&polls), 6);
    // A stream at or below the last one starts a new round, even out of order.
    tick(&mut c, 3, 1);
    assert_eq!(polls_of(&polls), 6, "3 > 2: same round");
    tick(&mut c, 1, 1);
    assert_eq!(polls_of(&polls), 7, "1 <= 3: new round");
}

#[test]
fn a_start_or_stop_begins_a_new_round() {
    let (mut c, polls) = counting_comm();
    c.start_scripted(1, 1, &[after(1000)]).unwrap();
    tick(&mut c, 1, 1);
    assert_eq!(polls_of(&polls), 1);
    // A new execution on a higher stream: without the reset, 2 > 1 would join the old round.
    c.start_scripted(2, 1, &[after(1000)]).unwrap();
    tick(&mut c, 2, 1);
    assert_eq!(polls_of(&polls), 2, "the first call after a start polls");
    tick(&mut c, 3, 1); // nothing filed on 3: no walk, no poll
    c.stop(1).unwrap();
    let after_stop = polls_of(&polls);
    tick(&mut c, 2, 1);
    assert_eq!(
        polls_of(&polls),
        after_stop + 1,
        "the first call after a stop polls"
    );
}

#[test]
fn a_single_stream_comm_polls_on_every_call() {
    let (mut c, polls) = counting_comm();
    c.start_scripted(2, 1, &[after(1000)]).unwrap();
    for n in 1..=10u32 {
        tick(&mut c, 2, 1);
        assert_eq!(polls_of(&polls), n, "call {n} on the one stream");
    }
}

#[test]
fn a_round_whose_first_stream_has_nothing_to_run_polls_on_the_next() {
    let (mut c, polls) = counting_comm();
    c.start_scripted(1, 1, &[after(1000)]).unwrap();
    for round in 1..=3u32 {
        // Stream 0 has no block: no walk, no poll; stream 1 walks and polls.
        assert_eq!(tick(&mut c, 0, 1), (true, true));
        assert_eq!(tick(&mut c, 1, 1), (false, false));
        assert_eq!(polls_of(&polls), round);
    }
}

#[test]
fn stop_keeps_the_trackers_of_freed_ops_empty_for_their_next_use() {
    let mut c = comm();
    c.start_scripted(0, 1, &[after(1), after(1)]).unwrap();
    c.start_scripted(0, 2, &[after(1)]).unwrap();
    let with_tracker = |c: &Comm| -> (usize, usize) {
        let pool = c.stream(0).pool();
        // SAFETY: live ops of the comm's pool.
        let kept: Vec<usize> = pool
            .iter()
            .filter_map(|p| unsafe { (*p).tracker().map(|t| t.len()) })
            .collect();
        (kept.len(), kept.iter().sum())
    };
    assert_eq!(
        with_tracker(&c),
        (0, 0),
        "fresh pool ops have no tracker yet"
    );
    assert_eq!(tick(&mut c, 0, 1), (false, true));
    c.stop(0).unwrap();
    assert!(c.stream(0).blocks.is_empty());
    assert_eq!(
        with_tracker(&c),
        (3, 0),
        "the three freed ops keep their (empty) trackers"
    );
    // The map's storage is kept too: filing again works as on a fresh stream.
    c.start_scripted(0, 2, &[after(1)]).unwrap();
    c.start_scripted(0, 1, &[after(2)]).unwrap();
    assert_eq!(
        c.stream(0)
            .blocks
            .iter()
            .map(|(b, _)| *b)
            .collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(tick(&mut c, 0, 1), (false, false));
    assert_eq!(tick(&mut c, 0, 1), (false, true));
    assert_eq!(c.stream(0).filed(1), 1);
}

// ---------------------------------------------------------------- blocks and pending

#[test]
fn pending_block_suppresses_done_then_loads_next_tick() {
    let mut c = comm();
    c.start_scripted(0, 1, &[after(2)]).unwrap();
    c.start_scripted(0, 2, &[after(1), after(1)]).unwrap();
    assert_eq!(tick(&mut c, 0, 1), (false, false));
    assert_eq!(c.stream(0).current_bb, 1);
    // Block 1 still active: asking for 2 makes it pending; block 1 drains on this tick.
    assert_eq!(
        tick(&mut c, 0, 2),
        (false, false),
        "done suppressed while 2 is pending"
    );
    assert_eq!(c.stream(0).pending_bb, 2);
    assert!(c.stream(0).active.is_empty());
    // Next tick loads the pending block whatever bb the caller passes.
    assert_eq!(tick(&mut c, 0, 1), (false, true));
    assert_eq!(c.stream(0).current_bb, 2);
    assert_eq!(c.stream(0).pending_bb, BB_NONE);
    assert_eq!(filed_counts(&c, 0, 2), vec![1, 2]);
    // The pending block taken over is one block switch.
    assert_eq!(c.protocol_stats().block_switches, 1);
}

#[test]
fn idle_is_the_and_over_ops() {
    let mut c = comm();
    // Op 0 idle on ticks 1 and 2, op 1 idle on tick 2 only.
    c.start_scripted(
        2,
        9,
        &[
            Script {
                complete_after: 4,
                idle_mask: 0b011,
                fail_tick: 0,
            },
            Script {
                complete_after: 4,
                idle_mask: 0b010,
                fail_tick: 0,
            },
        ],
    )
    .unwrap();
    assert_eq!(tick(&mut c, 2, 9), (false, false));
    assert_eq!(tick(&mut c, 2, 9), (true, false));
    assert_eq!(tick(&mut c, 2, 9), (false, false));
}

#[test]
fn wrapper_ands_into_caller_seeded_values_across_four_streams() {
    let mut c = comm();
    c.start_scripted(0, 1, &[after(1)]).unwrap();
    c.start_scripted(
        1,
        1,
        &[Script {
            complete_after: 3,
            idle_mask: !0,
            fail_tick: 0,
        }],
    )
    .unwrap();
    c.start_scripted(
        2,
        1,
        &[Script {
            complete_after: 1,
            idle_mask: !0,
            fail_tick: 0,
        }],
    )
    .unwrap();
    // Stream 3 has nothing filed: idle and done.
    let seam = SeamTable::in_process();
    let h = &mut c as *mut Comm as *mut core::ffi::c_void;
    let round = |h| {
        let (mut idle, mut done): (c_int, c_int) = (1, 1);
        for s in 0..NUM_STREAMS as u32 {
            // SAFETY: `h` is a live comm used only here.
            let r = unsafe { (seam.progress)(h, s, 1, &mut idle, &mut done) };
            assert_eq!(r, 0);
        }
        (idle, done)
    };
    // Stream 0 works (not idle) and finishes; stream 1 idle, not done; stream 2 done.
    assert_eq!(round(h), (0, 0));
    // Stream 0 reloads block 1 (a loop) and finishes again; stream 1 still idle.
    assert_eq!(round(h), (0, 0));
    let (mut idle, mut done): (c_int, c_int) = (1, 1);
    for s in [1u32, 3] {
        // SAFETY: as above.
        assert_eq!(unsafe { (seam.progress)(h, s, 1, &mut idle, &mut done) }, 0);
    }
    assert_eq!(
        (idle, done),
        (1, 1),
        "stream 1 finished on its idle tick 3, stream 3 empty"
    );
    // A caller seeding 0 gets 0 back whatever the streams say.
    let (mut idle, mut done): (c_int, c_int) = (0, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { (seam.progress)(h, 3, 1, &mut idle, &mut done) }, 0);
    assert_eq!((idle, done), (0, 0));
    // NULL out-parameters are rejected.
    // SAFETY: as above.
    let r = unsafe { (seam.progress)(h, 3, 1, core::ptr::null_mut(), &mut done) };
    assert_eq!(r, NrtStatus::Invalid.code());
}

// ---------------------------------------------------------------- stop

#[test]
fn stop_returns_every_op_to_the_pool_and_clears_blocks() {
    let mut c = comm();
    let scripts: Vec<Script> = (0..100).map(|_| after(3)).collect();
    c.start_scripted(0, 1, &scripts).unwrap();
    c.start_scripted(0, 2, &scripts).unwrap();
    assert_eq!(
        c.stream(0).pool_block_count(),
        2,
        "200 ops need two 128-op blocks"
    );
    tick(&mut c, 0, 1);
    tick(&mut c, 0, 2);
    assert_eq!(c.stream(0).active.len(), 100);
    assert_eq!(c.stream(0).pending_bb, 2);
    c.stop(0).unwrap();
    let st = c.stream(0);
    assert_eq!(st.pool.len(), st.capacity());
    assert_eq!(st.capacity(), 256);
    assert!(st.active.is_empty() && st.next_ops.is_empty() && st.blocks.is_empty());
    assert_eq!((st.current_bb, st.pending_bb), (BB_NONE, BB_NONE));
    // The stream is reusable; progress on it is idle and done.
    assert_eq!(tick(&mut c, 0, 1), (true, true));
    c.start_scripted(0, 1, &[after(1)]).unwrap();
    assert_eq!(tick(&mut c, 0, 1), (false, true));
    assert_eq!(
        c.stream(0).pool_block_count(),
        2,
        "pool blocks are kept until destroy"
    );
}

// ---------------------------------------------------------------- failure

#[test]
fn an_error_is_sticky_and_maps_to_1206() {
    let mut c = comm();
    c.start_scripted(
        0,
        1,
        &[Script {
            complete_after: 5,
            idle_mask: 0,
            fail_tick: 2,
        }],
    )
    .unwrap();
    c.start_scripted(1, 1, &[after(5)]).unwrap();
    assert_eq!(tick(&mut c, 0, 1), (false, false));
    let (mut i, mut d) = (true, true);
    assert_eq!(
        c.progress(0, 1).map(|t| t.and_into(&mut i, &mut d)),
        Err(NrtStatus::NetworkProxyFailure)
    );
    assert_eq!(c.fatal_error(), Some(NrtStatus::NetworkProxyFailure));
    // Every later progress, on any stream, fails at once; start is rejected with the error.
    assert_eq!(
        c.progress(1, 1).map(|t| t.and_into(&mut i, &mut d)),
        Err(NrtStatus::NetworkProxyFailure)
    );
    assert_eq!(
        c.start_scripted(2, 1, &[after(1)]),
        Err(NrtStatus::NetworkProxyFailure)
    );
    let info = one_op_info();
    assert_eq!(
        c.start(2, 1, &[info], &[src_entry(NET_OP_COMPLETE)], &[]),
        Err(NrtStatus::NetworkProxyFailure)
    );
    // Through the C-shaped seam the code is 1206.
    let seam = SeamTable::in_process();
    let h = &mut c as *mut Comm as *mut core::ffi::c_void;
    let (mut ci, mut cd): (c_int, c_int) = (1, 1);
    // SAFETY: live comm.
    assert_eq!(unsafe { (seam.progress)(h, 1, 1, &mut ci, &mut cd) }, 1206);
    // stop always works on a failed comm.
    for s in 0..4 {
        c.stop(s).unwrap();
    }
    assert_eq!(c.stream(0).pool.len(), c.stream(0).capacity());
}

#[test]
fn op_count_assert_fails_cleanly_naming_the_op() {
    let mut c = comm();
    c.start_scripted(0, 1, &[after(3)]).unwrap();
    let op = c.stream(0).blocks[&1].ops.head();
    // SAFETY: live op; no reference to it is held.
    unsafe { (*op).op_count = c.last_op_count() + 10 };
    let (mut i, mut d) = (true, true);
    assert_eq!(
        c.progress(0, 1).map(|t| t.and_into(&mut i, &mut d)),
        Err(NrtStatus::NetworkProxyFailure)
    );
    assert_eq!(c.fatal_error(), Some(NrtStatus::NetworkProxyFailure));
    c.stop(0).unwrap();
}

#[test]
fn block_assert_fails_cleanly_naming_the_op() {
    let mut c = comm();
    c.start_scripted(0, 1, &[after(3), after(3)]).unwrap();
    tick(&mut c, 0, 1);
    let second = c.stream(0).active.iter().nth(1).unwrap();
    // SAFETY: live op; no reference to it is held.
    unsafe { (*second).basic_block_id = 42 };
    let (mut i, mut d) = (true, true);
    assert_eq!(
        c.progress(0, 1).map(|t| t.and_into(&mut i, &mut d)),
        Err(NrtStatus::NetworkProxyFailure)
    );
    c.stop(0).unwrap();
    assert_eq!(c.stream(0).pool.len(), c.stream(0).capacity());
}

// ---------------------------------------------------------------- validation

fn one_op_info() -> NetOpInfo {
    NetOpInfo {
        send_peer: 1,
        recv_peer: -1,
        tx_entry_cnt: 1,
        data_type_sz: 4,
        post_send_idx_addr: 0x1000,
        send_handshake_sem_addr: 0x1080,
        send_complete_sem_addr: 0x1100,
        ..NetOpInfo::default()
    }
}

fn src_entry(mark: u32) -> NetSrcAddr {
    NetSrcAddr {
        net_op_idx: 0,
        mark,
        addr: 0x2000,
        size: 64,
        dest_rank: -1,
        reserved: 0,
    }
}

#[test]
fn start_validation_rejects_and_files_nothing() {
    let mut c = comm();
    let info = one_op_info();
    let ok_src = [src_entry(NET_OP_COMPLETE)];
    // Addresses are checked against registered memory: nothing registered yet.
    assert_eq!(
        c.start(0, 1, &[info], &ok_src, &[]),
        Err(NrtStatus::Invalid)
    );
    // SAFETY: these tests never run the ops, so the fake addresses are never dereferenced.
    unsafe { c.register_memory(0x1000, 0x2000).unwrap() };
    type Case = (&'static str, u32, u32, Vec<NetOpInfo>, Vec<NetSrcAddr>);
    let bad: [Case; 9] = [
        ("stream 4", 4, 1, vec![info], ok_src.to_vec()),
        ("bb none", 0, BB_NONE, vec![info], ok_src.to_vec()),
        ("empty ops", 0, 1, vec![], vec![]),
        (
            "length mismatch",
            0,
            1,
            vec![info],
            vec![src_entry(NET_TRANSFER), src_entry(NET_OP_COMPLETE)],
        ),
        (
            "last not marked",
            0,
            1,
            vec![info],
            vec![src_entry(NET_TRANSFER)],
        ),
        ("unknown mark", 0, 1, vec![info], vec![src_entry(9)]),
        (
            "op idx",
            0,
            1,
            vec![info],
            vec![NetSrcAddr {
                net_op_idx: 1,
                ..src_entry(NET_OP_COMPLETE)
            }],
        ),
        (
            "peer",
            0,
            1,
            vec![NetOpInfo {
                send_peer: 2,
                ..info
            }],
            ok_src.to_vec(),
        ),
        (
            "size multiple",
            0,
            1,
            vec![info],
            vec![NetSrcAddr {
                size: 6,
                ..src_entry(NET_OP_COMPLETE)
            }],
        ),
    ];
    for (what, stream, bb, ops, src) in bad {
        assert_eq!(
            c.start(stream, bb, &ops, &src, &[]),
            Err(NrtStatus::Invalid),
            "{what}"
        );
    }
    let unregistered = NetSrcAddr {
        addr: 0x2F00,
        size: 0x200,
        ..src_entry(NET_OP_COMPLETE)
    };
    assert_eq!(
        c.start(0, 1, &[info], &[unregistered], &[]),
        Err(NrtStatus::Invalid)
    );
    let missing_word = NetOpInfo {
        send_complete_sem_addr: 0,
        ..info
    };
    assert_eq!(
        c.start(0, 1, &[missing_word], &ok_src, &[]),
        Err(NrtStatus::Invalid)
    );
    for s in 0..4 {
        assert!(
            c.stream(s).blocks.is_empty(),
            "a rejected start files nothing"
        );
        assert_eq!(c.stream(s).pool.len(), c.stream(s).capacity());
    }
    assert_eq!(c.last_op_count(), 0);
    // And the valid call files one send op.
    c.start(0, 1, &[info], &ok_src, &[]).unwrap();
    assert_eq!(c.stream(0).filed(1), 1);
    assert_eq!(c.last_op_count(), 1);
}

#[test]
fn progress_on_empty_or_bad_stream() {
    let mut c = comm();
    assert_eq!(tick(&mut c, 3, 0), (true, true));
    let (mut i, mut d) = (true, true);
    assert_eq!(
        c.progress(4, 0).map(|t| t.and_into(&mut i, &mut d)),
        Err(NrtStatus::Invalid)
    );
    assert_eq!(c.stop(4), Err(NrtStatus::Invalid));
    assert_eq!(
        c.fatal_error(),
        None,
        "validation errors do not fail the comm"
    );
}

#[test]
fn comm_creation_is_validated() {
    let mk = |rank, nranks, id| {
        Comm::new(
            CommConfig::new(rank, nranks, id),
            Box::new(NullTransport::default()),
            PlainArc::new(RecordingDevice::default()),
            PlainArc::new(NoClock),
        )
        .map(|_| ())
    };
    assert_eq!(mk(0, 0, 0), Err(NrtStatus::Invalid));
    assert_eq!(mk(2, 2, 0), Err(NrtStatus::Invalid));
    assert_eq!(mk(0, 2, 1 << 15), Err(NrtStatus::Invalid));
    assert_eq!(mk(1, 2, (1 << 15) - 1), Ok(()));
}

// ---------------------------------------------------------------- model-based test

mod model {
    use super::*;
    use alloc::collections::BTreeMap;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    struct MOp {
        count: u64,
        bb: u32,
        script: Script,
        ticks: u32,
    }

    #[derive(Clone, Debug, Default)]
    struct MStream {
        active: Vec<MOp>,
        blocks: BTreeMap<u32, Vec<MOp>>,
        current: Option<u32>,
        pending: Option<u32>,
        capacity: u32,
        free: u32,
    }

    #[derive(Debug, Default)]
    struct Model {
        streams: [MStream; 4],
        next_count: u64,
        failed: bool,
    }

    #[derive(Clone, Debug)]
    enum Cmd {
        Start {
            stream: u32,
            bb: u32,
            scripts: Vec<Script>,
        },
        Progress {
            stream: u32,
            bb: u32,
        },
        Stop {
            stream: u32,
        },
    }

    impl Model {
        fn start(&mut self, stream: u32, bb: u32, scripts: &[Script]) -> Result<(), NrtStatus> {
            if self.failed {
                return Err(NrtStatus::NetworkProxyFailure);
            }
            let st = &mut self.streams[stream as usize];
            while st.free < scripts.len() as u32 {
                st.capacity += OPS_PER_POOL_BLOCK as u32;
                st.free += OPS_PER_POOL_BLOCK as u32;
            }
            st.free -= scripts.len() as u32;
            for s in scripts {
                st.blocks.entry(bb).or_default().push(MOp {
                    count: self.next_count,
                    bb,
                    script: *s,
                    ticks: 0,
                });
                self.next_count += 1;
            }
            Ok(())
        }

        fn progress(&mut self, stream: u32, bb: u32) -> Result<(bool, bool), NrtStatus> {
            if self.failed {
                return Err(NrtStatus::NetworkProxyFailure);
            }
            let st = &mut self.streams[stream as usize];
            if st.active.is_empty() {
                let load = st.pending.take().unwrap_or(bb);
                st.current = None;
                if let Some(ops) = st.blocks.get_mut(&load) {
                    if !ops.is_empty() {
                        st.active = core::mem::take(ops);
                        st.current = Some(load);
                    }
                }
            } else if Some(bb) != st.current {
                st.pending = Some(bb);
            }
            if st.current.is_none() {
                return Ok((true, true));
            }
            let mut all_idle = true;
            let mut keep = Vec::new();
            let active = core::mem::take(&mut st.active);
            let mut iter = active.into_iter();
            while let Some(mut op) = iter.next() {
                op.ticks += 1;
                let t = op.ticks;
                if op.script.fail_tick != 0 && t == op.script.fail_tick {
                    self.failed = true;
                    keep.push(op);
                    keep.extend(iter);
                    st.active = keep;
                    return Err(NrtStatus::NetworkProxyFailure);
                }
                all_idle &= t <= 64 && op.script.idle_mask & (1 << (t - 1)) != 0;
                if t >= op.script.complete_after.max(1) {
                    op.ticks = 0;
                    st.blocks.entry(op.bb).or_default().push(op);
                } else {
                    keep.push(op);
                }
            }
            st.active = keep;
            let done = st.active.is_empty();
            if done && st.pending.is_some() {
                Ok((false, false))
            } else {
                Ok((all_idle, done))
            }
        }

        fn stop(&mut self, stream: u32) {
            let st = &mut self.streams[stream as usize];
            st.active.clear();
            st.blocks.clear();
            st.current = None;
            st.pending = None;
            st.free = st.capacity;
        }
    }

    fn check(c: &Comm, m: &Model) {
        for s in 0..4 {
            let st = c.stream(s);
            let ms = &m.streams[s];
            let ma: Vec<u64> = ms.active.iter().map(|o| o.count).collect();
            assert_eq!(active_counts(c, s), ma, "active of stream {s}");
            for (bb, ops) in &ms.blocks {
                let mb: Vec<u64> = ops.iter().map(|o| o.count).collect();
                assert_eq!(
                    filed_counts(c, s, *bb),
                    mb,
                    "filed of stream {s} block {bb}"
                );
            }
            let real_nonempty = st.blocks.iter().filter(|(_, f)| !f.ops.is_empty()).count();
            let model_nonempty = ms.blocks.values().filter(|v| !v.is_empty()).count();
            assert_eq!(
                real_nonempty, model_nonempty,
                "non-empty blocks of stream {s}"
            );
            assert_eq!(
                st.current_bb,
                ms.current.unwrap_or(BB_NONE),
                "current of stream {s}"
            );
            assert_eq!(
                st.pending_bb,
                ms.pending.unwrap_or(BB_NONE),
                "pending of stream {s}"
            );
            assert_eq!(st.pool.len(), ms.free, "free ops of stream {s}");
            assert_eq!(st.capacity(), ms.capacity, "capacity of stream {s}");
        }
        assert_eq!(c.last_op_count(), m.next_count);
    }

    fn script() -> impl Strategy<Value = Script> {
        (
            1u32..5,
            any::<u8>(),
            prop_oneof![9 => Just(0u32), 1 => 1u32..5],
        )
            .prop_map(|(complete_after, mask, fail_tick)| Script {
                complete_after,
                idle_mask: u64::from(mask),
                fail_tick,
            })
    }

    fn cmd() -> impl Strategy<Value = Cmd> {
        prop_oneof![
            3 => (0u32..4, 0u32..3, proptest::collection::vec(script(), 1..6))
                .prop_map(|(stream, bb, scripts)| Cmd::Start { stream, bb, scripts }),
            6 => (0u32..4, 0u32..3).prop_map(|(stream, bb)| Cmd::Progress { stream, bb }),
            1 => (0u32..4).prop_map(|stream| Cmd::Stop { stream }),
        ]
    }

    fn config() -> ProptestConfig {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok());
        ProptestConfig {
            cases: cases.unwrap_or(if cfg!(miri) { 4 } else { 256 }),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(config())]
        #[test]
        fn op_fifo_matches_reference_model(cmds in proptest::collection::vec(cmd(), 1..60)) {
            let mut c = comm();
            let mut m = Model::default();
            for cmd in cmds {
                match cmd {
                    Cmd::Start { stream, bb, scripts } => {
                        prop_assert_eq!(c.start_scripted(stream, bb, &scripts), m.start(stream, bb, &scripts));
                    }
                    Cmd::Progress { stream, bb } => {
                        let (mut i, mut d) = (true, true);
                        let r = c.progress(stream, bb).map(|t| t.and_into(&mut i, &mut d)).map(|()| (i, d));
                        prop_assert_eq!(r, m.progress(stream, bb));
                    }
                    Cmd::Stop { stream } => {
                        prop_assert_eq!(c.stop(stream), Ok(()));
                        m.stop(stream);
                    }
                }
                check(&c, &m);
            }
        }
    }
}

#[test]
fn dump_names_streams_blocks_and_ops() {
    let mut c = comm();
    c.start_scripted(2, 4, &[after(2), after(2)]).unwrap();
    tick(&mut c, 2, 4);
    let mut out = alloc::string::String::new();
    c.dump(&mut out).unwrap();
    assert!(
        out.starts_with(
            "comm=7 rank=0 nranks=2 transport=null last_op_count=2 fatal=none fatal_peer=none \
             aborted=none orphans=0 starts=0 block_switches=0 early_send_completions=0 \
             recvs_posted_ahead=0 max_recv_ahead=0 index_wraps=0 peak_outstanding_send=0 \
             peak_outstanding_recv=0\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "comm=7 stream=2 current=0x4 pending=0xffffffff active=2 free=126/128 blocks=1 \
             closing=false closing_requests=0 closing_ops=0\n"
        ),
        "{out}"
    );
    assert_eq!(
        out.matches("comm=7 stream=2 op=").count(),
        2,
        "one line per op: {out}"
    );
    assert_eq!(out.matches("list=active kind=scripted").count(), 2, "{out}");
    assert!(!out.contains("  "), "no double spaces: {out}");
}

// ---------------------------------------------------------------- bounded teardown, abort

/// A transport whose requests never confirm (`stuck`) or confirm as cancelled at once; counts
/// `poll` and `close` calls in shared words, so the test reads them after the comm is gone.
#[derive(Debug, Default)]
struct DrainTransport {
    inner: NullTransport,
    stuck: bool,
    polls: PlainArc<crate::base::sync::AtomicU32>,
    closes: PlainArc<crate::base::sync::AtomicU32>,
    /// Every `poll` fails with this (a lost peer, say).
    poll_error: Option<crate::progress::net::NetError>,
}

impl crate::progress::net::Transport for DrainTransport {
    fn name(&self) -> &str {
        "drain-test"
    }
    fn max_msg_size(&self) -> u64 {
        1 << 20
    }
    fn poll(&mut self) -> Result<(), crate::progress::net::NetError> {
        self.polls
            .fetch_add(1, crate::base::sync::Ordering::Relaxed);
        match &self.poll_error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
    unsafe fn isend(
        &mut self,
        peer: u32,
        buf: *const u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<crate::progress::net::Posted>, crate::progress::net::NetError> {
        // SAFETY: the trait's contract, passed on.
        unsafe { self.inner.isend(peer, buf, size, tag) }
    }
    unsafe fn irecv(
        &mut self,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<crate::progress::net::Posted>, crate::progress::net::NetError> {
        // SAFETY: as above.
        unsafe { self.inner.irecv(peer, buf, size, tag) }
    }
    fn test(
        &mut self,
        _request: crate::progress::net::RequestId,
    ) -> Result<crate::progress::net::TestOutcome, crate::progress::net::NetError> {
        Ok(if self.stuck {
            crate::progress::net::TestOutcome::Pending
        } else {
            crate::progress::net::TestOutcome::Cancelled
        })
    }
    fn cancel(
        &mut self,
        request: crate::progress::net::RequestId,
    ) -> Result<(), crate::progress::net::NetError> {
        self.inner.cancel(request)
    }
    fn close(&mut self) -> Result<(), crate::progress::net::NetError> {
        self.closes
            .fetch_add(1, crate::base::sync::Ordering::Relaxed);
        Ok(())
    }
}

type Counter = PlainArc<crate::base::sync::AtomicU32>;

fn drain_comm(stuck: bool, max_polls: u64) -> (Comm, Counter, Counter) {
    let t = DrainTransport {
        stuck,
        ..DrainTransport::default()
    };
    let (polls, closes) = (t.polls.clone(), t.closes.clone());
    let mut cfg = CommConfig::new(0, 2, 7);
    cfg.drain_max_polls = max_polls;
    let c = Comm::new(
        cfg,
        Box::new(t),
        PlainArc::new(RecordingDevice::default()),
        PlainArc::new(NoClock),
    )
    .unwrap();
    (c, polls, closes)
}

#[test]
fn a_poll_failure_naming_a_peer_fails_the_comm_and_keeps_the_peer() {
    use crate::progress::net::NetError;
    let t = DrainTransport {
        poll_error: Some(NetError::failure(Some(3), "rank 3 lost (bootstrap)")),
        ..DrainTransport::default()
    };
    let mut c = Comm::new(
        CommConfig::new(0, 4, 7),
        Box::new(t),
        PlainArc::new(RecordingDevice::default()),
        PlainArc::new(NoClock),
    )
    .unwrap();
    c.start_scripted(1, 2, &[after(5)]).unwrap();
    assert_eq!(c.fatal_peer(), None);
    let (mut idle, mut done) = (true, true);
    assert_eq!(
        c.progress(1, 2).map(|t| t.and_into(&mut idle, &mut done)),
        Err(NrtStatus::NetworkProxyFailure)
    );
    assert_eq!(c.fatal_error(), Some(NrtStatus::NetworkProxyFailure));
    assert_eq!(c.fatal_peer(), Some(3));
    // Sticky, and in the dump.
    assert_eq!(
        c.progress(1, 2).map(|t| t.and_into(&mut idle, &mut done)),
        Err(NrtStatus::NetworkProxyFailure)
    );
    let mut out = alloc::string::String::new();
    c.dump(&mut out).unwrap();
    assert!(out.contains("fatal_peer=3"), "{out}");
    c.stop(1).unwrap();
}

static RELAXES: crate::base::sync::AtomicU32 = crate::base::sync::AtomicU32::new(0);

fn count_relax() {
    RELAXES.fetch_add(1, crate::base::sync::Ordering::Relaxed);
}

#[test]
fn one_teardown_of_four_streams_waits_for_at_most_one_drain_budget() {
    use crate::progress::comm::DRAIN_SPIN_POLLS;
    let (mut c, polls, closes) = drain_comm(true, 100);
    c.set_drain_relax(count_relax);
    let n = |p: &Counter| p.load(crate::base::sync::Ordering::Relaxed);
    // Four streams' drains in a row (a task ending), each with a request that never confirms.
    let mut results = Vec::new();
    for s in 0..4u32 {
        let mut pending = vec![100 + u64::from(s)];
        results.push(c.drain(&mut pending, "test: stream", Some(s), None));
        assert!(
            pending.is_empty(),
            "the undrained request moved to the orphans"
        );
    }
    assert_eq!(results, vec![Err(NrtStatus::Timeout); 4]);
    assert_eq!(
        n(&polls),
        100 + 3,
        "the budget, then one pass per later drain"
    );
    assert_eq!(
        RELAXES.load(crate::base::sync::Ordering::Relaxed),
        100 - DRAIN_SPIN_POLLS as u32,
        "spins first, then the relax hook between polls"
    );
    assert_eq!(c.fatal_error(), Some(NrtStatus::Timeout));
    assert_eq!(c.orphans.len(), 4);
    // A progress call ends the teardown: the next one has a budget of its own.
    let (mut idle, mut done) = (true, true);
    assert_eq!(
        c.progress(0, 1).map(|t| t.and_into(&mut idle, &mut done)),
        Err(NrtStatus::NetworkProxyFailure),
        "the comm failed"
    );
    let mut pending = vec![200];
    assert_eq!(
        c.drain(&mut pending, "test", None, None),
        Err(NrtStatus::Timeout)
    );
    assert_eq!(n(&polls), 203);
    // Destroy: its own budget for the five orphans, then close, once.
    drop(c);
    assert_eq!(n(&polls), 303, "destroy drains once, within one budget");
    assert_eq!(n(&closes), 1);
}

#[test]
fn abort_from_another_thread_is_applied_at_the_next_progress_and_destroy_is_clean() {
    let (mut c, polls, closes) = drain_comm(false, 1_000);
    c.start_scripted(0, 1, &[after(100), after(100)]).unwrap();
    c.start_scripted(2, 1, &[after(100)]).unwrap();
    c.start_scripted(2, 2, &[after(100)]).unwrap();
    assert_eq!(tick(&mut c, 0, 1), (false, false));
    let h = c.abort_handle();
    let requester = std::thread::spawn(move || h.abort());
    assert!(requester.join().unwrap(), "the first request wins");
    assert_eq!(
        c.fatal_error(),
        None,
        "not applied before the driving thread's next call"
    );
    let (mut idle, mut done) = (true, true);
    assert_eq!(
        c.progress(2, 1).map(|t| t.and_into(&mut idle, &mut done)),
        Err(NrtStatus::Closed)
    );
    assert_eq!(c.fatal_error(), Some(NrtStatus::Closed));
    for s in 0..NUM_STREAMS {
        let st = c.stream(s);
        assert!(
            st.active.is_empty() && st.blocks.is_empty(),
            "stream {s} stopped"
        );
        assert_eq!(
            st.pool.len(),
            st.capacity(),
            "stream {s}: every op back in the pool"
        );
        assert_eq!((st.current_bb, st.pending_bb), (BB_NONE, BB_NONE));
    }
    // Later calls answer the abort's status; stop still works (nothing left to stop).
    assert_eq!(
        c.progress(0, 1).map(|t| t.and_into(&mut idle, &mut done)),
        Err(NrtStatus::Closed)
    );
    assert_eq!(
        c.start_scripted(1, 3, &[after(1)]),
        Err(NrtStatus::Closed),
        "nothing is filed on an aborted comm"
    );
    assert_eq!(c.stop(0), Ok(()));
    assert!(
        !c.abort_handle().abort(),
        "a second request changes nothing"
    );
    let polls_before = polls.load(crate::base::sync::Ordering::Relaxed);
    drop(c);
    assert_eq!(
        polls.load(crate::base::sync::Ordering::Relaxed),
        polls_before,
        "destroy after abort has nothing to drain"
    );
    assert_eq!(
        closes.load(crate::base::sync::Ordering::Relaxed),
        1,
        "closed once"
    );
}

// ---------------------------------------------------------------- stepped teardown

/// A comm over a [`SlowCancelTransport`] confirming after `confirm` polls, with `max_polls`
/// as its drain budget, and its poll counter.
fn slow_comm(confirm: u64, max_polls: u64) -> (Comm, PlainArc<crate::base::sync::AtomicU32>) {
    use crate::testing::SlowCancelTransport;
    let t = SlowCancelTransport {
        confirm_after_polls: confirm,
        ..SlowCancelTransport::default()
    };
    let polls = t.polls.clone();
    let mut cfg = CommConfig::new(0, 2, 7);
    cfg.drain_max_polls = max_polls;
    let c = Comm::new(
        cfg,
        Box::new(t),
        PlainArc::new(RecordingDevice::default()),
        PlainArc::new(NoClock),
    )
    .unwrap();
    (c, polls)
}

/// Two scripted ops active on stream 0 (block 1), the first with two outstanding requests.
fn two_active_ops_with_requests(c: &mut Comm) {
    c.start_scripted(0, 1, &[after(100), after(100)]).unwrap();
    assert_eq!(tick(c, 0, 1), (false, false));
    c.track_test_requests(0, 1, &[11, 12]).unwrap();
}

fn step(c: &mut Comm, stream: u32) -> (Result<(), NrtStatus>, bool) {
    let mut done = false;
    let r = c.stop_step(stream, &mut done);
    (r, done)
}

#[test]
fn a_stepped_stop_holds_the_ops_until_the_cancels_are_confirmed() {
    use crate::progress::comm::STOP_STEP_POLLS;
    let (mut c, polls) = slow_comm(14, 1_000);
    two_active_ops_with_requests(&mut c);
    let cap = c.stream(0).capacity();
    let before = u64::from(polls.load(crate::base::sync::Ordering::Relaxed));
    // Step 1: cancels, holds the op with requests, frees the other, polls at most 4 times.
    assert_eq!(step(&mut c, 0), (Ok(()), false));
    let st = c.stream(0);
    assert!(st.closing());
    assert_eq!(st.closing_requests(), 2);
    assert_eq!(st.closing_ops(), 1, "the op with requests is held");
    assert_eq!(st.pool().len(), cap - 1, "the op without requests is free");
    assert!(st.active().is_empty() && st.no_blocks_filed());
    assert_eq!(
        u64::from(polls.load(crate::base::sync::Ordering::Relaxed)) - before,
        STOP_STEP_POLLS
    );
    // Meanwhile the stream takes no new block and no progress; other streams do.
    assert_eq!(c.start_scripted(0, 2, &[after(1)]), Err(NrtStatus::Invalid));
    let (mut idle, mut done) = (true, true);
    assert_eq!(
        c.progress(0, 1).map(|t| t.and_into(&mut idle, &mut done)),
        Err(NrtStatus::Invalid)
    );
    assert_eq!(
        c.fatal_error(),
        None,
        "a refused call does not fail the comm"
    );
    c.start_scripted(1, 1, &[after(1)]).unwrap();
    assert_eq!(tick(&mut c, 1, 1), (false, true));
    // Polls so far: 1 (the first progress), 4 (step 1), 1 (stream 1's round). Step 2 (polls
    // 7..10) finds them pending, step 3 sees them confirmed at the 14th poll overall.
    assert_eq!(polls.load(crate::base::sync::Ordering::Relaxed), 6);
    let mut steps = 1;
    loop {
        steps += 1;
        if step(&mut c, 0).1 {
            break;
        }
        assert!(steps < 10, "bounded");
    }
    assert_eq!(steps, 3);
    assert_eq!(polls.load(crate::base::sync::Ordering::Relaxed), 14);
    let st = c.stream(0);
    assert!(!st.closing());
    assert_eq!(st.closing_ops(), 0);
    assert_eq!(
        st.pool().len(),
        cap,
        "every op back in the pool once confirmed"
    );
    assert_eq!(c.orphan_count(), 0);
    assert_eq!(c.fatal_error(), None);
    // The stream is reusable; a step on an empty stream is done at once, polling nothing.
    assert_eq!(step(&mut c, 0), (Ok(()), true));
    assert_eq!(polls.load(crate::base::sync::Ordering::Relaxed), 14);
    c.start_scripted(0, 2, &[after(1)]).unwrap();
}

#[test]
fn a_stepped_stop_at_the_drain_limit_orphans_and_fails_with_timeout() {
    let (mut c, polls) = slow_comm(u64::MAX, 10);
    two_active_ops_with_requests(&mut c);
    let cap = c.stream(0).capacity();
    let base = polls.load(crate::base::sync::Ordering::Relaxed);
    assert_eq!(step(&mut c, 0), (Ok(()), false));
    assert_eq!(step(&mut c, 0), (Ok(()), false));
    // The budget of 10 polls runs out in the third step.
    assert_eq!(step(&mut c, 0), (Err(NrtStatus::Timeout), true));
    assert_eq!(polls.load(crate::base::sync::Ordering::Relaxed) - base, 10);
    assert_eq!(c.fatal_error(), Some(NrtStatus::Timeout));
    assert_eq!(c.orphan_count(), 2);
    let st = c.stream(0);
    assert!(!st.closing());
    assert_eq!(st.pool().len(), cap);
}

#[test]
fn the_synchronous_stop_finishes_a_stepped_teardown_and_destroy_drains_one() {
    let (mut c, polls) = slow_comm(30, 1_000);
    two_active_ops_with_requests(&mut c);
    c.start_scripted(2, 1, &[after(100)]).unwrap();
    assert_eq!(tick(&mut c, 2, 1), (false, false));
    c.track_test_requests(2, 1, &[21]).unwrap();
    assert_eq!(step(&mut c, 0), (Ok(()), false));
    assert_eq!(step(&mut c, 2), (Ok(()), false));
    // stop drains before it returns (the C ABI's contract).
    assert_eq!(c.stop(0), Ok(()));
    assert!(polls.load(crate::base::sync::Ordering::Relaxed) >= 30);
    assert!(!c.stream(0).closing());
    assert_eq!(c.stream(0).pool().len(), c.stream(0).capacity());
    // Stream 2 is still closing (its requests were confirmed by the polls of stream 0's
    // drain, but no step has tested them yet); destroy finishes it.
    assert!(c.stream(2).closing());
    drop(c);
}

static PARKS: crate::base::sync::AtomicU32 = crate::base::sync::AtomicU32::new(0);
static PARKED_NS: crate::base::sync::AtomicU32 = crate::base::sync::AtomicU32::new(0);

fn count_park(ns: u64) {
    PARKS.fetch_add(1, crate::base::sync::Ordering::Relaxed);
    PARKED_NS.fetch_max(ns as u32, crate::base::sync::Ordering::Relaxed);
}

#[test]
fn a_synchronous_drain_spins_then_relaxes_then_parks_with_backoff() {
    use crate::progress::comm::{
        DRAIN_PARK_FIRST_NS, DRAIN_PARK_MAX_NS, DRAIN_RELAX_POLLS, DRAIN_SPIN_POLLS,
    };
    let budget = DRAIN_SPIN_POLLS + DRAIN_RELAX_POLLS + 20;
    let (mut c, _polls, _closes) = drain_comm(true, budget);
    c.set_drain_park(count_park);
    let mut pending = vec![7];
    assert_eq!(
        c.drain(&mut pending, "test", None, None),
        Err(NrtStatus::Timeout)
    );
    // Polls 1..=64 spin, 65..=1088 relax; from poll 1088 on each poll but the budget's last
    // (1108) is followed by a park: 20 parks.
    assert_eq!(PARKS.load(crate::base::sync::Ordering::Relaxed), 20);
    // 10 us doubling: 10, 20, 40, ... capped at 1 ms.
    assert_eq!(DRAIN_PARK_FIRST_NS << 6, 640_000);
    assert_eq!(
        u64::from(PARKED_NS.load(crate::base::sync::Ordering::Relaxed)),
        DRAIN_PARK_MAX_NS
    );
    // The stepped teardown never parks.
    let (mut c, _polls) = slow_comm(u64::MAX, 1_000);
    c.set_drain_park(count_park);
    two_active_ops_with_requests(&mut c);
    for _ in 0..100 {
        let mut done = false;
        let _ = c.stop_step(0, &mut done);
    }
    assert_eq!(PARKS.load(crate::base::sync::Ordering::Relaxed), 20);
}

// ---------------------------------------------------------------- invalidate_range

/// Records the ranges it is asked to invalidate; refuses the ones starting at `refuse`.
#[derive(Default)]
struct InvalidateTransport {
    inner: NullTransport,
    ranges: PlainArc<spin::Mutex<Vec<(u64, u64)>>>,
    refuse: u64,
}

impl crate::progress::net::Transport for InvalidateTransport {
    fn name(&self) -> &str {
        "invalidate"
    }
    fn max_msg_size(&self) -> u64 {
        self.inner.max_msg_size()
    }
    fn poll(&mut self) -> Result<(), crate::progress::net::NetError> {
        Ok(())
    }
    unsafe fn isend(
        &mut self,
        peer: u32,
        buf: *const u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<crate::progress::net::Posted>, crate::progress::net::NetError> {
        // SAFETY: the trait's contract, passed on.
        unsafe { self.inner.isend(peer, buf, size, tag) }
    }
    unsafe fn irecv(
        &mut self,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<crate::progress::net::Posted>, crate::progress::net::NetError> {
        // SAFETY: as above.
        unsafe { self.inner.irecv(peer, buf, size, tag) }
    }
    fn test(
        &mut self,
        request: crate::progress::net::RequestId,
    ) -> Result<crate::progress::net::TestOutcome, crate::progress::net::NetError> {
        self.inner.test(request)
    }
    fn cancel(
        &mut self,
        request: crate::progress::net::RequestId,
    ) -> Result<(), crate::progress::net::NetError> {
        self.inner.cancel(request)
    }
    fn invalidate(&mut self, addr: u64, len: u64) -> Result<(), crate::progress::net::NetError> {
        if addr == self.refuse {
            return Err(crate::progress::net::NetError::failure(
                None,
                "fi_close refused",
            ));
        }
        self.ranges.lock().push((addr, len));
        Ok(())
    }
}

#[test]
fn invalidate_range_checks_the_range_and_reaches_the_transport() {
    let t = InvalidateTransport {
        refuse: 0x9000,
        ..InvalidateTransport::default()
    };
    let ranges = t.ranges.clone();
    let mut c = Comm::new(
        CommConfig::new(0, 2, 7),
        Box::new(t),
        PlainArc::new(RecordingDevice::default()),
        PlainArc::new(NoClock),
    )
    .unwrap();
    assert_eq!(c.invalidate_range(0x1000, 0), Err(NrtStatus::Invalid));
    assert_eq!(c.invalidate_range(u64::MAX - 4, 8), Err(NrtStatus::Invalid));
    assert!(
        ranges.lock().is_empty(),
        "rejected ranges never reach the transport"
    );
    assert_eq!(c.invalidate_range(0x1000, 0x2000), Ok(()));
    assert_eq!(
        c.invalidate_range(0x9000, 8),
        Err(NrtStatus::NetworkProxyFailure),
        "the transport's status"
    );
    assert_eq!(
        c.fatal_error(),
        None,
        "a refused invalidate does not fail the comm"
    );
    // Also on an aborted comm.
    c.abort_handle().abort();
    let (mut idle, mut done) = (true, true);
    assert_eq!(
        c.progress(0, 1).map(|t| t.and_into(&mut idle, &mut done)),
        Err(NrtStatus::Closed)
    );
    assert_eq!(c.invalidate_range(0x4000, 1), Ok(()));
    assert_eq!(*ranges.lock(), vec![(0x1000, 0x2000), (0x4000, 1)]);
}
