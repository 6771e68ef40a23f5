//! The tick stamp ([`TickStamp`]): the records a driving thread makes in one tick share one
//! clock read (issue 28: the `rdtsc` read is a large part of a record's cost, and an 8 B
//! all-reduce records 8 `ops` events per rank thread per execution in 3 to 4 ticks).
//!
//! Each exclusive lane of a [`super::Tracer`] (a lane below its lane count, which the platform
//! gives one thread alone) has a [`LaneStamp`]. A tick opens its thread's lane stamp
//! ([`TickStamp::open`]) and closes it when it ends; while it is open, a record
//!
//! * *shared* ([`super::emit`], the default) takes the lane's stamp when it has one, else reads
//!   the clock and leaves the read as the lane's stamp;
//! * *fresh* ([`super::emit_fresh`]: the records that follow a transport call, an op's
//!   transitions by the op walk, posts and completions) always reads the clock and leaves it as
//!   the lane's stamp.
//!
//! The tick drops the stamp ([`TickStamp::clear`]) before every call out of its own
//! bookkeeping: before each call into the progress half (a seam call may run in another copy of
//! the core, whose records carry their own stamps) and before each device poller. So records
//! that share a stamp are separated only by the engine's bookkeeping (and transport tests that
//! found nothing); they keep their order (one lane, claim order, equal times sort stably).
//! Outside a tick (closed), every record reads the clock.
//!
//! Only the lane's own thread touches its stamp, so every access is Relaxed; the time is kept as
//! two 32-bit words (no 64-bit atomics on some firmware targets). A platform that hands one lane
//! to two threads breaks the contract of [`super::Tracer::with_lanes`]: their records may then
//! carry each other's stamps (wrong times, never undefined behaviour).

use crate::base::sync::{SwitchAtomicU32, SwitchOrdering};
use crate::base::time::Clock;

/// Closed: no tick is open on the lane.
const CLOSED: u32 = 0;
/// A tick is open, no stamp yet.
const OPEN: u32 = 1;
/// A tick is open and `hi`:`lo` is its stamp.
const STAMPED: u32 = 2;

/// One exclusive lane's tick stamp (module docs).
#[derive(Debug)]
pub struct LaneStamp {
    state: SwitchAtomicU32,
    hi: SwitchAtomicU32,
    lo: SwitchAtomicU32,
}

impl LaneStamp {
    /// A closed lane stamp.
    pub(super) fn new() -> Self {
        Self {
            state: SwitchAtomicU32::new(CLOSED),
            hi: SwitchAtomicU32::new(0),
            lo: SwitchAtomicU32::new(0),
        }
    }

    /// The time for a record of this lane's thread: the tick's stamp for a shared record while
    /// there is one, else `clock` read now (kept as the stamp while a tick is open).
    #[inline]
    pub(super) fn take(&self, fresh: bool, clock: &dyn Clock) -> u64 {
        let state = self.state.load(SwitchOrdering::Relaxed);
        if state == STAMPED && !fresh {
            let hi = u64::from(self.hi.load(SwitchOrdering::Relaxed));
            return hi << 32 | u64::from(self.lo.load(SwitchOrdering::Relaxed));
        }
        let now = clock.now_ns();
        if state != CLOSED {
            // Truncation intended: the two halves of `now`.
            self.hi.store((now >> 32) as u32, SwitchOrdering::Relaxed);
            self.lo.store(now as u32, SwitchOrdering::Relaxed);
            self.state.store(STAMPED, SwitchOrdering::Relaxed);
        }
        now
    }

    /// Closes the lane (e.g. its thread ended: a platform that hands the lane to another thread
    /// calls it through [`super::Tracer::close_lane`]).
    pub(super) fn close(&self) {
        self.state.store(CLOSED, SwitchOrdering::Relaxed);
    }
}

/// A driving thread's handle on its lane's stamp, taken once per drive session
/// ([`TickStamp::here`]); [`TickStamp::NONE`] when nothing is recorded, or the thread's lane is
/// shared (every record then reads the clock). Use it on the thread that took it.
#[derive(Clone, Copy, Debug, Default)]
pub struct TickStamp(Option<&'static LaneStamp>);

impl TickStamp {
    /// No tick stamp: every record reads the clock.
    pub const NONE: Self = Self(None);

    /// The calling thread's lane stamp while recording is on and the thread's lane is its own
    /// ([`super::Tracer::with_lanes`]), else [`TickStamp::NONE`]. Off: one load and a branch.
    #[inline]
    pub fn here() -> Self {
        if super::active() == 0 {
            return Self::NONE;
        }
        super::installed().map_or(Self::NONE, super::Tracer::tick_stamp)
    }

    /// The handle of `stamp` (none: [`TickStamp::NONE`]).
    pub(super) fn of(stamp: Option<&'static LaneStamp>) -> Self {
        Self(stamp)
    }

    /// Opens a tick: the records of this thread share one stamp until [`TickStamp::close`]
    /// (module docs); the guard closes it when dropped (also when the tick unwinds).
    #[inline]
    pub fn open(self) -> OpenTick {
        if let Some(s) = self.0 {
            s.state.store(OPEN, SwitchOrdering::Relaxed);
        }
        OpenTick(self)
    }

    /// Drops the tick's stamp: the next record reads the clock (before a call out of the
    /// tick's bookkeeping: the progress half, a device poller).
    #[inline]
    pub fn clear(self) {
        if let Some(s) = self.0 {
            if s.state.load(SwitchOrdering::Relaxed) == STAMPED {
                s.state.store(OPEN, SwitchOrdering::Relaxed);
            }
        }
    }

    /// Ends the tick: records read the clock again.
    #[inline]
    pub fn close(self) {
        if let Some(s) = self.0 {
            s.close();
        }
    }

    /// `true` when this handle shares stamps (a lane stamp of the thread's own lane).
    pub fn is_some(self) -> bool {
        self.0.is_some()
    }
}

/// Two handles are equal when they name the same lane stamp (or both none).
impl PartialEq for TickStamp {
    fn eq(&self, other: &Self) -> bool {
        match (self.0, other.0) {
            (Some(a), Some(b)) => core::ptr::eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Eq for TickStamp {}

/// An open tick ([`TickStamp::open`]); closes it when dropped.
#[derive(Debug)]
pub struct OpenTick(TickStamp);

impl OpenTick {
    /// The tick's stamp handle (to [`TickStamp::clear`] it).
    pub fn stamp(&self) -> TickStamp {
        self.0
    }
}

impl Drop for OpenTick {
    fn drop(&mut self) {
        self.0.close();
    }
}
