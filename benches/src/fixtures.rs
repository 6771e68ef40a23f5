//! Fixtures over the real engine types: a stream of idle send ops on a real `Comm`, and idle
//! barrier tasks for a real `ProxyQueue`.

use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use proxy_core::base::desc::{NetOpInfo, NetSrcAddr, MAX_OP_TAG, NET_OP_COMPLETE, NO_PEER};
use proxy_core::base::status::NrtStatus;
use proxy_core::base::time::NoClock;
use proxy_core::driver::task::{
    BarrierChannel, BarrierTask, BarrierTaskSpec, BarrierTicket, ProxyTask,
};
use proxy_core::driver::trigger::TriggerWords;
use proxy_core::progress::comm::{Comm, CommConfig};
use proxy_core::progress::device::{DeviceCallbacks, DirectHostWords};
use proxy_core::testing::{NullTransport, RecordingDevice};

/// Most ops one `start` call of [`IdleStream::new`] files (the stream gets several calls for
/// the same block above it).
pub const OPS_PER_START: usize = 1024;

/// A real comm (rank 0 of 2, [`NullTransport`], device callbacks on real host words) with `K`
/// send ops filed under block 1 of stream 0, each with its own host index, which nothing ever
/// posts: every progress call walks all `K` ops and each finds nothing to do (the op stays in
/// its handshake state, idle). The state a tick meets most: ops waiting for the device.
///
/// Seed: the active list walked by `ncclProxyProgressOps`, §4.
pub struct IdleStream {
    // Field order is drop order: the comm (which may read the words) goes first.
    comm: Comm,
    /// Host memory: `K` host indices, then the handshake and complete semaphores and a
    /// 4-byte payload.
    _words: Box<[AtomicU32]>,
    ops: usize,
}

impl IdleStream {
    /// Files `ops` idle send ops (in `start` calls of at most `per_start` ops) and runs the
    /// first progress call, which loads the block into the active list.
    ///
    /// # Panics
    /// If the comm rejects the setup (a bug in this fixture) or `ops` / `per_start` is 0.
    pub fn with_starts(ops: usize, per_start: usize) -> Self {
        Self::build(ops, per_start, true)
    }

    /// [`IdleStream::new`] with [`RecordingDevice`] as the device callbacks: host indices read
    /// as a constant 0 without touching memory (separates the host-word reads from the walk).
    pub fn with_recording_device(ops: usize) -> Self {
        Self::build(ops, OPS_PER_START, false)
    }

    fn build(ops: usize, per_start: usize, direct: bool) -> Self {
        assert!(ops > 0 && per_start > 0);
        let words: Box<[AtomicU32]> = (0..ops + 3).map(|_| AtomicU32::new(0)).collect();
        let base = words.as_ptr() as u64;
        let addr = |i: usize| base + 4 * i as u64;
        let device: Arc<dyn DeviceCallbacks> = if direct {
            // SAFETY: every address the comm is given lies in `words`, 4-byte-aligned u32s
            // only accessed atomically, and the words outlive the comm (drop order above).
            Arc::new(unsafe { DirectHostWords::new() })
        } else {
            Arc::new(RecordingDevice::default())
        };
        let mut comm = Comm::new(
            CommConfig::new(0, 2, 1),
            Box::new(NullTransport::default()),
            device,
            Arc::new(NoClock),
        )
        .expect("comm");
        // SAFETY: as above: the range is `words`, alive until after the comm is dropped.
        unsafe { comm.register_memory(base, 4 * words.len() as u64) }.expect("register");
        let mut first = 0;
        while first < ops {
            let n = per_start.min(ops - first);
            let infos: Vec<NetOpInfo> = (0..n)
                .map(|j| NetOpInfo {
                    send_peer: 1,
                    recv_peer: NO_PEER,
                    tag: ((first + j) as u32) % MAX_OP_TAG,
                    tx_entry_cnt: 1,
                    data_type_sz: 4,
                    post_send_idx_addr: addr(first + j),
                    send_handshake_sem_addr: addr(ops),
                    send_complete_sem_addr: addr(ops + 1),
                    ..Default::default()
                })
                .collect();
            let src: Vec<NetSrcAddr> = (0..n)
                .map(|j| NetSrcAddr {
                    net_op_idx: j as u32,
                    mark: NET_OP_COMPLETE,
                    addr: addr(ops + 2),
                    size: 4,
                    dest_rank: NO_PEER,
                    reserved: 0,
                })
                .collect();
            comm.start(0, 1, &infos, &src, &[]).expect("start");
            first += n;
        }
        let mut s = Self {
            comm,
            _words: words,
            ops,
        };
        let (idle, done) = s.tick();
        assert!(idle && !done, "idle ops: idle and not done after the load");
        assert_eq!(s.comm.stream(0).active().len() as usize, ops);
        s
    }

    /// [`IdleStream::with_starts`] with [`OPS_PER_START`].
    pub fn new(ops: usize) -> Self {
        Self::with_starts(ops, OPS_PER_START)
    }

    /// One progress call on stream 0 for block 1; `(idle, done)`.
    ///
    /// # Panics
    /// If the comm fails (a bug: nothing here can fail).
    #[inline]
    pub fn tick(&mut self) -> (bool, bool) {
        let (mut idle, mut done) = (true, true);
        self.comm
            .progress(0, 1)
            .map(|t| t.and_into(&mut idle, &mut done))
            .expect("progress");
        (idle, done)
    }

    /// Number of ops.
    pub fn ops(&self) -> usize {
        self.ops
    }

    /// The comm.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }
}

/// A barrier channel on which the other ranks never arrive: `arrive` answers a ticket, `poll`
/// answers `false` forever. Zero-sized (its box allocates nothing).
#[derive(Clone, Copy, Debug, Default)]
pub struct NeverChannel;

impl BarrierChannel for NeverChannel {
    fn arrive(&mut self) -> Result<BarrierTicket, NrtStatus> {
        Ok(BarrierTicket(1))
    }

    fn poll(&mut self, _ticket: BarrierTicket) -> Result<bool, NrtStatus> {
        Ok(false)
    }

    fn passed(&mut self) {}
}

/// A real barrier task over a [`NeverChannel`]: after its first step (INIT → PROGRESSING, it
/// arrives) every step polls the channel and answers `Step::Idle`. A task in flight that the
/// worker steps every tick without any progress.
pub fn idle_barrier_task(task_id: u32) -> Box<dyn ProxyTask> {
    Box::new(BarrierTask::new(BarrierTaskSpec {
        task_id,
        comm_id: 1,
        channel: Box::new(NeverChannel),
        triggers: TriggerWords::none(),
        leader: false,
        done_semaphores: Vec::new(),
        skip: false,
        timeout_ns: None,
    }))
}

/// A real barrier task that skips: its first step takes INIT → DONE and publishes the DONE
/// status record (what the wake bench's producer waits to see).
pub fn skip_barrier_task(task_id: u32) -> Box<dyn ProxyTask> {
    Box::new(BarrierTask::new(BarrierTaskSpec {
        task_id,
        comm_id: 1,
        channel: Box::new(NeverChannel),
        triggers: TriggerWords::none(),
        leader: false,
        done_semaphores: Vec::new(),
        skip: true,
        timeout_ns: None,
    }))
}

#[cfg(test)]
mod tests;
