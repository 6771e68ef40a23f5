//! Test support of the crate's own tests: host words, a waiter; the scripted seam is
//! `progress::testing::Script` (shared with other crates' tests through feature `testing`).

use alloc::boxed::Box;

pub use crate::testing::{block, seam, Call, Script};

use crate::base::sync::AtomicU32;
use crate::base::time::MonotonicClock;
use crate::driver::wake::ThreadPark;

/// Words for tests: owns the atomics, hands out `HostWord`s that must not outlive it.
pub struct Words(Box<[AtomicU32]>);

impl Words {
    pub fn new(init: &[u32]) -> Self {
        Self(init.iter().map(|&v| AtomicU32::new(v)).collect())
    }

    pub fn get(&self, i: usize) -> crate::base::host_word::HostWord {
        // SAFETY: every test keeps its `Words` alive (declared first) until its handles and the
        // tasks that carry them are gone.
        unsafe { crate::base::host_word::HostWord::from_ref(&self.0[i]) }
    }
}

/// A waiter with a 20 µs spin budget.
pub fn waiter(clock: &MonotonicClock) -> crate::driver::wake::Waiter<'_> {
    crate::driver::wake::Waiter {
        park: &ThreadPark,
        clock,
        spin_ns: 20_000,
    }
}

/// The dump lines logged so far by every test of this binary (target
/// `crate::base::dump_lines::DUMP_TARGET`), captured by a logger installed at the first call: pick
/// a test's own lines by its queue id (`queue=<id> `).
pub fn dump_lines_of(queue_id: u32) -> alloc::vec::Vec<alloc::string::String> {
    extern crate std;
    use std::sync::Mutex;
    static LINES: Mutex<alloc::vec::Vec<alloc::string::String>> =
        Mutex::new(alloc::vec::Vec::new());
    struct Capture;
    impl log::Log for Capture {
        fn enabled(&self, m: &log::Metadata<'_>) -> bool {
            m.target() == crate::base::dump_lines::DUMP_TARGET
        }
        fn log(&self, r: &log::Record<'_>) {
            if self.enabled(r.metadata()) {
                use alloc::string::ToString;
                LINES.lock().unwrap().push(r.args().to_string());
            }
        }
        fn flush(&self) {}
    }
    static CAPTURE: Capture = Capture;
    if log::set_logger(&CAPTURE).is_ok() {
        log::set_max_level(log::LevelFilter::Error);
    }
    let key = alloc::format!("queue={queue_id} ");
    LINES
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(&key))
        .cloned()
        .collect()
}

/// A poller (`driver::poller`) that needs `left` polls after a launch (store the count), waiting
/// at each but the last; counts its polls.
#[derive(Default)]
pub struct Countdown {
    pub left: crate::base::sync::DiagAtomicU32,
    pub polls: crate::base::sync::DiagAtomicU32,
}

impl crate::driver::poller::Poller for Countdown {
    fn poll(&self) -> crate::driver::poller::Polled {
        use crate::base::sync::DiagOrdering::Relaxed;
        use crate::driver::poller::Polled;
        self.polls.fetch_add(1, Relaxed);
        match self.left.load(Relaxed) {
            0 => Polled::Idle,
            1 => {
                self.left.store(0, Relaxed);
                Polled::Moved
            }
            n => {
                self.left.store(n - 1, Relaxed);
                Polled::Waiting
            }
        }
    }
    fn busy(&self) -> bool {
        self.left.load(crate::base::sync::DiagOrdering::Relaxed) > 0
    }
}
