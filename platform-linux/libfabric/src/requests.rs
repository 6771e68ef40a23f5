//! The request slab: one slot per posted send or receive, with the provider context the post
//! passes as `context` (`FI_CONTEXT` / `FI_CONTEXT2` mode: the provider owns that memory until
//! the completion arrives).
//!
//! Request ids are `generation << 32 | index`: a stale id (its slot released and reused) is
//! rejected, never confused with the slot's new request.

use std::ffi::c_void;

use proxy_core::progress::net::{NetError, RequestId};

use super::mr::RegionId;

/// The memory the provider may use for a posted operation: `struct fi_context2` (8 pointers),
/// which also covers `struct fi_context` (4). It is the first field of [`ReqCtx`], so the
/// `op_context` of a completion is the address of the whole [`ReqCtx`].
#[repr(C)]
struct FiContext2 {
    internal: [*mut c_void; 8],
}

/// What the transport hands to libfabric as `context`.
///
/// Lives in its own heap allocation (never moves), reached only through a raw pointer: while the
/// operation is in flight the provider writes `fi`, so Rust never forms a reference to it;
/// `index` is written once, before the first post, and the provider never touches it.
#[repr(C)]
struct ReqCtx {
    /// Provider scratch space (must be first).
    fi: FiContext2,
    /// Index of the owning slot in [`Requests::slots`].
    index: u32,
    /// [`Requests::owner`] of the slab that made the context: a completion of an earlier
    /// lease's stuck request, read from a pooled set's CQ (`pool.rs`), names another owner.
    owner: u64,
}

/// The next slab's [`Requests::owner`] (process-wide, never reused).
static NEXT_OWNER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Send or receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// `fi_tsend`.
    Send,
    /// `fi_trecv`.
    Recv,
}

impl Kind {
    /// `"send"` / `"receive"` for messages.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Recv => "receive",
        }
    }
}

/// Where a request stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Not in use (on the free list).
    Free,
    /// Reserved for a post that has not returned yet.
    Reserved,
    /// Posted; the provider owns the context and the buffer.
    InFlight,
    /// Posted and `fi_cancel` asked for; still owned by the provider.
    Cancelling,
    /// Completed; `size` bytes transferred (for an inject, straight from `Reserved`).
    Done(u64),
    /// Completed with `FI_ECANCELED`.
    Cancelled,
    /// Completed with an error.
    Failed(NetError),
}

impl State {
    /// The provider still owns the context and buffer.
    pub(super) fn in_flight(&self) -> bool {
        matches!(self, Self::InFlight | Self::Cancelling)
    }
}

/// One slot.
pub(super) struct Slot {
    /// The context passed to libfabric: from `Box::into_raw`, freed by [`Requests`]'s drop
    /// (stable address, never behind a reference).
    ctx: *mut ReqCtx,
    /// Bumped on every release; part of the request id.
    generation: u32,
    /// The request's state.
    pub state: State,
    /// Send or receive.
    pub kind: Kind,
    /// The peer rank.
    pub peer: u32,
    /// The posted size in bytes.
    pub size: u64,
    /// The posted tag.
    pub tag: u64,
    /// The registration the post used (its region in the MR cache), if any.
    pub mr: Option<RegionId>,
}

/// The slab.
pub(super) struct Requests {
    /// This slab's identity in its contexts ([`ReqCtx::owner`]), unique in the process.
    owner: u64,
    /// Every slot ever made; index = slot number. Slots are never removed.
    slots: Vec<Slot>,
    /// Free slot numbers (LIFO, so a hot slot is reused).
    free: Vec<u32>,
    /// Number of slots in state `InFlight` or `Cancelling`.
    in_flight: usize,
    /// Set when the endpoint could not be closed: the provider may still write the contexts,
    /// so drop leaks them instead of freeing them.
    leak_contexts: bool,
}

impl Default for Requests {
    fn default() -> Self {
        Self {
            owner: NEXT_OWNER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            leak_contexts: false,
        }
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        if self.leak_contexts {
            return;
        }
        for slot in &self.slots {
            // SAFETY: `ctx` came from Box::into_raw in `reserve` and is freed once, here; the
            // transport drops the slab only after its endpoint is closed (or sets
            // `leak_contexts`), so the provider no longer holds the pointer.
            drop(unsafe { Box::from_raw(slot.ctx) });
        }
    }
}

impl Requests {
    /// Reserves a slot for a post and returns its number and context pointer.
    pub(super) fn reserve(
        &mut self,
        kind: Kind,
        peer: u32,
        size: u64,
        tag: u64,
        mr: Option<RegionId>,
    ) -> (u32, *mut c_void) {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = u32::try_from(self.slots.len()).expect("fewer than 2^32 requests");
                let ctx = ReqCtx {
                    fi: FiContext2 {
                        internal: [std::ptr::null_mut(); 8],
                    },
                    index: i,
                    owner: self.owner,
                };
                self.slots.push(Slot {
                    ctx: Box::into_raw(Box::new(ctx)),
                    generation: 1,
                    state: State::Free,
                    kind,
                    peer,
                    size,
                    tag,
                    mr: None,
                });
                i
            }
        };
        let slot = &mut self.slots[index as usize];
        debug_assert_eq!(slot.state, State::Free);
        slot.state = State::Reserved;
        slot.kind = kind;
        slot.peer = peer;
        slot.size = size;
        slot.tag = tag;
        slot.mr = mr;
        (index, slot.ctx.cast())
    }

    /// The post succeeded: the provider owns the slot's context now. Returns the request id.
    pub(super) fn mark_posted(&mut self, index: u32) -> RequestId {
        let slot = &mut self.slots[index as usize];
        debug_assert_eq!(slot.state, State::Reserved);
        slot.state = State::InFlight;
        self.in_flight += 1;
        (u64::from(slot.generation) << 32) | u64::from(index)
    }

    /// An inject went out: the request is done without the provider ever owning the context
    /// (`Reserved` => `Done(size)`; no completion will come). Returns the request id.
    pub(super) fn mark_done_now(&mut self, index: u32, size: u64) -> RequestId {
        let slot = &mut self.slots[index as usize];
        debug_assert_eq!(slot.state, State::Reserved);
        slot.state = State::Done(size);
        (u64::from(slot.generation) << 32) | u64::from(index)
    }

    /// The post did not happen: the slot goes back to the free list.
    pub(super) fn unreserve(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        debug_assert_eq!(slot.state, State::Reserved);
        slot.state = State::Free;
        self.free.push(index);
    }

    /// The slot number of a completion's `op_context`, if it is one of ours and in flight.
    pub(super) fn index_of_context(&self, op_context: *mut c_void) -> Option<u32> {
        if op_context.is_null() {
            return None;
        }
        let ctx = op_context.cast::<ReqCtx>();
        // SAFETY: libfabric returns exactly the context pointer we posted, which points to a
        // live `ReqCtx` (slots are never freed while the transport lives). `index` is outside
        // the provider's scratch space and was written before the post; read through a raw
        // pointer, without a reference to the provider-owned `fi` field.
        let index = unsafe { std::ptr::addr_of!((*ctx).index).read() };
        let slot = self.slots.get(index as usize)?;
        (slot.ctx == ctx && slot.state.in_flight()).then_some(index)
    }

    /// Whether `op_context` (from a completion, not null) is the context of another slab: an
    /// earlier lease's stuck request on a pooled set (`pool.rs`), whose context is held for the
    /// life of the process.
    pub(super) fn is_foreign(&self, op_context: *mut c_void) -> bool {
        if op_context.is_null() {
            return false;
        }
        // SAFETY: libfabric returns exactly a context pointer posted on this set: one of this
        // slab's, or a held (never freed) one of an earlier lease's; `owner` is outside the
        // provider's scratch space, written before the post, read through a raw pointer.
        let owner = unsafe { std::ptr::addr_of!((*op_context.cast::<ReqCtx>()).owner).read() };
        owner != self.owner
    }

    /// Slot number `index` (which exists).
    pub(super) fn slot(&self, index: u32) -> &Slot {
        &self.slots[index as usize]
    }

    /// Records the completion of slot `index` (in flight) with its final state.
    pub(super) fn complete(&mut self, index: u32, state: State) -> &Slot {
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.state.in_flight() && !state.in_flight());
        slot.state = state;
        self.in_flight -= 1;
        slot
    }

    /// The slot of request `id`, if the id is live (posted and not yet released).
    pub(super) fn get(&self, id: RequestId) -> Option<&Slot> {
        let index = (id & 0xFFFF_FFFF) as usize;
        let generation = (id >> 32) as u32;
        self.slots.get(index).filter(|s| {
            s.generation == generation && !matches!(s.state, State::Free | State::Reserved)
        })
    }

    /// Mutable [`Requests::get`].
    pub(super) fn get_mut(&mut self, id: RequestId) -> Option<&mut Slot> {
        let index = (id & 0xFFFF_FFFF) as usize;
        let generation = (id >> 32) as u32;
        self.slots.get_mut(index).filter(|s| {
            s.generation == generation && !matches!(s.state, State::Free | State::Reserved)
        })
    }

    /// The context pointer of a live request (for `fi_cancel`).
    pub(super) fn context_of(&self, id: RequestId) -> Option<*mut c_void> {
        self.get(id).map(|s| s.ctx.cast())
    }

    /// Releases a finished request (`Done`, `Cancelled` or `Failed`) and returns its final
    /// state; the id is dead afterwards.
    pub(super) fn release(&mut self, id: RequestId) -> Option<State> {
        let index = (id & 0xFFFF_FFFF) as u32;
        let slot = self.get_mut(id)?;
        if slot.state.in_flight() {
            return None;
        }
        let state = std::mem::replace(&mut slot.state, State::Free);
        slot.generation = slot.generation.wrapping_add(1).max(1);
        slot.mr = None;
        self.free.push(index);
        Some(state)
    }

    /// Number of requests the provider still owns.
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Ids and context pointers of every in-flight request that has not been cancelled yet.
    pub(super) fn uncancelled(&self) -> Vec<(u32, *mut c_void)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state == State::InFlight)
            .map(|(i, s)| (i as u32, s.ctx.cast()))
            .collect()
    }

    /// Marks slot `index` (in flight) as being cancelled.
    pub(super) fn mark_cancelling(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        if slot.state == State::InFlight {
            slot.state = State::Cancelling;
        }
    }

    /// The requests in flight: `(sends, receives, peers)` (peers sorted, once each).
    pub(super) fn in_flight_summary(&self) -> (usize, usize, Vec<u32>) {
        let (mut sends, mut recvs, mut peers) = (0, 0, Vec::new());
        for s in self.slots.iter().filter(|s| s.state.in_flight()) {
            match s.kind {
                Kind::Send => sends += 1,
                Kind::Recv => recvs += 1,
            }
            peers.push(s.peer);
        }
        peers.sort_unstable();
        peers.dedup();
        (sends, recvs, peers)
    }

    /// Hands every context to the caller and never frees one (the endpoint was not closed, so
    /// the provider may still hold any of them): the caller keeps them in the process's
    /// quarantine. Returns the context pointers.
    pub(super) fn quarantine_contexts(&mut self) -> Vec<*mut c_void> {
        self.leak_contexts = true;
        self.slots.iter().map(|s| s.ctx.cast()).collect()
    }
}

#[cfg(test)]
mod tests;
