//! The one idiom of every state machine in the project.
//!
//! A machine is an enum (or a newtype with named constants) of states that implements
//! [`Machine`]: its legal edges live in one place, [`Machine::edge`], a `match` that answers
//! the number of the edge in the machine's diagram (every machine's doc comment draws the
//! diagram with numbered edges, and the code that takes an edge cites its number). Every
//! change of state goes through one transition function, [`step`] (or [`check`] for a machine
//! whose state lives in an atomic and changes by compare-and-swap): it traces `state=A=>B` and
//! refuses an edge the diagram does not have: an error log and an [`IllegalEdge`] in a release
//! build, a panic in a debug build (a bug in the caller, found by the tests).
//!
//! ```text
//!   step(&mut state, to, who)
//!     ├─ Machine::edge(state, to) = Some(n) ──► trace "<name> <who>: state=A=>B (edge n)", state = to, Ok(n)
//!     └─ None ──► error "<name> <who>: illegal edge A=>B", debug: panic; release: Err(IllegalEdge), state kept
//! ```
//!
//! With event recording on, every legal edge taken through [`check`] is also a
//! [`Kind::Transition`] record (`crate::base::trace`; [`check_traced`] adds the caller's ids).
//!
//! Machines built on it: the op state (`progress::op::OpState`), the task run state
//! (`driver::record::RunState`), the device model's stage (`proxy-collectives`), the bootstrap
//! root and leaf (`proxy-bootstrap`). The machines whose state lives in an atomic shared
//! between threads (the slot and invalidation cells, `driver::queue` and `driver::inval`, and
//! the in-memory transport's send handoff) are the same idiom in its lock-free form: an enum of
//! numbered edges is their table (`SlotEdge::states`, ...), one transition function takes an
//! edge by compare-and-swap of its `from` state to its `to` state, traces `state=A=>B`, and
//! refuses (changes nothing) when the CAS finds another state.
//!
//! Seed: none (the seed's state machines are ad hoc integer fields); docs/design.md §4.

use core::fmt;

use crate::base::trace::{self, Kind, Record};

/// A state machine's states and its table of legal edges.
pub trait Machine: Copy + PartialEq + fmt::Debug {
    /// The machine's name in traces and errors (`"op"`, `"task"`, `"slot"`, ...).
    const NAME: &'static str;

    /// The event class of the transition `from => to` in traces ([`trace::mask`]): for the op
    /// and task machines [`trace::mask::OPS`] where one begins or ends and
    /// [`trace::mask::STEPS`] in between; every other machine's [`trace::mask::TRANSITIONS`].
    /// Evaluated only while something is recorded.
    fn trace_class(from: Self, to: Self) -> u32 {
        let _ = (from, to);
        trace::mask::TRANSITIONS
    }

    /// The number of the edge `from => to` in the machine's diagram, `None` when the diagram
    /// has no such edge. Where several numbered edges join the same two states, the lowest.
    fn edge(from: Self, to: Self) -> Option<u8>;

    /// The state's number in event records ([`crate::base::trace::Record::from`] / `to`):
    /// the machine's own numbering where it has one (the ABI values of a task's run state, an
    /// op's seed numbers); `u8::MAX` for a machine that does not say.
    fn code(self) -> u8 {
        u8::MAX
    }
}

/// An edge that [`Machine::edge`] does not have: the transition was refused and the state kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IllegalEdge<S> {
    /// The state the machine was (and stays) in.
    pub from: S,
    /// The state asked for.
    pub to: S,
}

impl<S: Machine> fmt::Display for IllegalEdge<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "illegal {} state edge {:?}=>{:?}",
            S::NAME,
            self.from,
            self.to
        )
    }
}

/// Checks the edge `from => to` of `S` for the object `who` (e.g. `"slot=3"`): traces
/// `<name> <who>: state=A=>B (edge n)` and answers the edge's number, or logs the illegal edge
/// at error level and answers [`IllegalEdge`] (a panic in a debug build).
///
/// # Errors
/// [`IllegalEdge`] when the diagram has no edge `from => to`.
pub fn check<S: Machine>(from: S, to: S, who: &dyn fmt::Display) -> Result<u8, IllegalEdge<S>> {
    check_traced(from, to, who, |_| {})
}

/// [`check`], and with event recording on ([`crate::base::trace`]) a [`Kind::Transition`]
/// record of the legal edge, whose ids `ids` fills in (the rank, comm, op, ... the caller
/// knows). With recording off `ids` does not run.
///
/// # Errors
/// [`IllegalEdge`] when the diagram has no edge `from => to`.
pub fn check_traced<S: Machine>(
    from: S,
    to: S,
    who: &dyn fmt::Display,
    ids: impl FnOnce(&mut Record),
) -> Result<u8, IllegalEdge<S>> {
    check_traced_as(from, to, who, false, || S::trace_class(from, to), ids)
}

/// [`check_traced`] with the record's event class from `class()` instead of
/// [`Machine::trace_class`] (a site that knows more than the two states: an op's re-arm by the
/// walk's recycle, which its previous end implies). `class` runs only while recording. A
/// `fresh` record reads the clock also in an open tick (`trace::emit_fresh`: a transition that
/// follows a transport call), else it shares the tick's stamp (`trace::TickStamp`).
///
/// # Errors
/// [`IllegalEdge`] when the diagram has no edge `from => to`.
pub fn check_traced_as<S: Machine>(
    from: S,
    to: S,
    who: &dyn fmt::Display,
    fresh: bool,
    class: impl FnOnce() -> u32,
    ids: impl FnOnce(&mut Record),
) -> Result<u8, IllegalEdge<S>> {
    match S::edge(from, to) {
        Some(n) => {
            log::trace!("{} {who}: state={from:?}=>{to:?} (edge {n})", S::NAME);
            trace::emit_with_as(fresh, class, || {
                let mut r = Record {
                    machine: S::NAME,
                    from: from.code(),
                    to: to.code(),
                    edge: n,
                    ..Record::new(Kind::Transition)
                };
                ids(&mut r);
                r
            });
            Ok(n)
        }
        None => {
            let e = IllegalEdge { from, to };
            log::error!("{} {who}: {e}", S::NAME);
            debug_assert!(false, "{} {who}: {e}", S::NAME);
            Err(e)
        }
    }
}

/// The one transition function of a machine whose state its owner holds: [`check`], then
/// `*state = to` when the edge is legal (the state is kept when it is not).
///
/// # Errors
/// [`IllegalEdge`] when the diagram has no edge from `*state` to `to`.
pub fn step<S: Machine>(
    state: &mut S,
    to: S,
    who: &dyn fmt::Display,
) -> Result<u8, IllegalEdge<S>> {
    let n = check(*state, to, who)?;
    *state = to;
    Ok(n)
}

#[cfg(all(test, not(loom)))]
mod tests;
