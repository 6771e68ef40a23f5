//! Model 17: the idle wait (`driver::idle::block_idle`): a driver that found nothing to do
//! arms its completion queue's wait object (libfabric's `fi_trywait`) and sleeps on it, against
//! a peer's message arriving on the wire.
//!
//! [`idle_wait_vs_arrival`]: the model source ([`ModelCq`]) has what the provider has: a
//! *wire* flag (the descriptor is readable while it is set) and a *queue* of completions that
//! progress moved off the wire (after which the descriptor is quiet). The peer puts one message
//! on the wire and unparks the driver. The driver reads its queue, then posts (a post runs
//! progress, as rxm's does: it may move the message off the wire unseen), then blocks idle:
//! arm answers ready while the queue holds a completion, and the sleep waits, untimed, for the
//! wire. Checked: the driver reads the one message. Sleeping unarmed (the plant
//! `IdleSleepsUnarmed`) sleeps on a quiet descriptor with the message already queued: a
//! deadlock.
//!
//! [`idle_kick_vs_sleep`]: the kick protocol of a queue's idle wait (`IdleSlot::block` /
//! `IdleSlot::kick`, what every notification of the queue's driver calls): a producer makes a
//! submission and kicks while the driver, which found nothing, blocks on a source that never
//! signals by itself (its sleep ends only by a kick). Checked: the driver sees the submission.
//! A kicker that decides "awake" on a plain load and records nothing (the plant
//! `IdleKickSkipsAwake`) lets a driver between its arm and its sleep sleep past the
//! submission: a deadlock.

use proxy_core::base::sync::{Arc, Mutex};
use proxy_core::base::sync::{AtomicBool, Ordering, PlainArc};
use proxy_core::driver::idle::{block_idle, Armed, IdleSlot, IdleWait};
use proxy_core::driver::wake::WaitCell;

use super::{thread, ModelPark};

/// What the provider holds: a message on the wire (the descriptor is readable while one is
/// there) and completions that progress moved off the wire (the descriptor is quiet for them).
#[derive(Default)]
struct Held {
    wire: u32,
    queue: u32,
}

/// The model's completion queue and the wire behind its descriptor.
pub struct ModelCq {
    held: Mutex<Held>,
    /// Where the driver sleeps (the descriptor's wake-up: a real `WaitCell`, whose own
    /// protocol model 3 checks).
    sleeper: WaitCell,
}

/// Runs `f` on the held state (loom's `Mutex` answers a `Result`, the spin one does not).
fn with<R>(m: &Mutex<Held>, f: impl FnOnce(&mut Held) -> R) -> R {
    #[cfg(loom)]
    let mut g = m.lock().unwrap();
    #[cfg(not(loom))]
    let mut g = m.lock();
    f(&mut g)
}

impl ModelCq {
    fn new() -> Self {
        Self {
            held: Mutex::new(Held::default()),
            sleeper: WaitCell::new(),
        }
    }

    /// The peer: one message onto the wire, then the descriptor's wake-up.
    fn deliver(&self) {
        with(&self.held, |h| h.wire += 1);
        self.sleeper.notify();
    }

    /// Progress (in a read or a post): whatever is on the wire moves into the queue.
    fn progress(&self) {
        with(&self.held, |h| {
            h.queue += h.wire;
            h.wire = 0;
        });
    }

    /// `fi_cq_read`: progress, then take every queued completion.
    fn read(&self) -> u32 {
        self.progress();
        with(&self.held, |h| core::mem::take(&mut h.queue))
    }

    /// The descriptor is readable.
    fn readable(&self) -> bool {
        with(&self.held, |h| h.wire > 0)
    }
}

impl IdleWait for ModelCq {
    /// `fi_trywait`: not armed while completions are queued.
    fn arm(&self) -> Armed {
        if with(&self.held, |h| h.queue > 0) {
            Armed::Ready
        } else {
            Armed::Armed
        }
    }

    /// `poll` on the descriptor, untimed (a lost wake-up is a deadlock, not a late wake).
    fn sleep(&self, _timeout_ns: u64) -> bool {
        while !self.readable() {
            self.sleeper.park(&ModelPark::default(), || self.readable());
        }
        true
    }
}

/// The model body (see the module docs).
pub fn idle_wait_vs_arrival() {
    let cq = Arc::new(ModelCq::new());
    let peer = {
        let cq = cq.clone();
        thread::spawn(move || cq.deliver())
    };
    let mut got = 0;
    // Bounded: arrival, progress and the read take at most three rounds.
    for _ in 0..4 {
        got += cq.read();
        if got > 0 {
            break;
        }
        cq.progress(); // a post's own progress
        block_idle(&*cq, u64::MAX, || true);
    }
    assert_eq!(got, 1, "the driver reads the message");
    peer.join().unwrap();
}

#[cfg(all(test, not(loom)))]
mod tests;

/// A source that never signals by itself: its sleep ends only by a kick (the kick flag under
/// the mutex, as the eventfd's count is the kernel's).
struct KickOnly {
    kicked: Mutex<bool>,
    cell: WaitCell,
}

impl KickOnly {
    fn take(&self) -> bool {
        #[cfg(loom)]
        let mut g = self.kicked.lock().unwrap();
        #[cfg(not(loom))]
        let mut g = self.kicked.lock();
        core::mem::take(&mut *g)
    }

    fn peek(&self) -> bool {
        #[cfg(loom)]
        let g = self.kicked.lock().unwrap();
        #[cfg(not(loom))]
        let g = self.kicked.lock();
        *g
    }
}

impl IdleWait for KickOnly {
    fn arm(&self) -> Armed {
        Armed::Armed
    }

    fn sleep(&self, _timeout_ns: u64) -> bool {
        while !self.take() {
            self.cell.park(&ModelPark::default(), || self.peek());
        }
        true
    }

    fn kick(&self) {
        {
            #[cfg(loom)]
            let mut g = self.kicked.lock().unwrap();
            #[cfg(not(loom))]
            let mut g = self.kicked.lock();
            *g = true;
        }
        self.cell.notify();
    }
}

/// The second model body (see the module docs).
pub fn idle_kick_vs_sleep() {
    let slot = Arc::new(IdleSlot::new());
    let src = PlainArc::new(KickOnly {
        kicked: Mutex::new(false),
        cell: WaitCell::new(),
    });
    slot.wire(Some(src));
    let submitted = Arc::new(AtomicBool::new(false));
    let producer = {
        let (slot, submitted) = (slot.clone(), submitted.clone());
        thread::spawn(move || {
            submitted.store(true, Ordering::Release);
            slot.kick();
        })
    };
    // The driver: look, then block idle; bounded (the kick takes at most two rounds).
    let mut seen = false;
    for _ in 0..3 {
        if submitted.load(Ordering::Acquire) {
            seen = true;
            break;
        }
        slot.block(u64::MAX);
    }
    assert!(
        seen || submitted.load(Ordering::Acquire),
        "the driver sees the submission"
    );
    producer.join().unwrap();
}
