//! [`ShmTransport`]: one rank's endpoint of the shared-memory transport ([`Transport`]).
//!
//! * **Small messages** (at most [`INLINE_MAX`] bytes) are copied into the receiver's mailbox
//!   at `isend`, which answers `payload_copied` and completes the send at once (the buffer is
//!   free; libfabric's inject has the same meaning). Such a send cannot be withdrawn: its
//!   `cancel` does nothing and its `test` reports `Done`, as the trait allows.
//! * **Large messages** stay in the sender's buffer. The mailbox carries its address and a
//!   state word in the sender's segment (handoff.rs); the receiver, once a receive matches,
//!   claims the word, reads the bytes with one `process_vm_readv` (cross-memory attach: one
//!   copy, by the kernel, which checks the addresses) and marks it done. The send completes
//!   when its `test` sees that.
//! * The receiver does all matching: `poll` drains every incoming mailbox. A message that
//!   finds a posted receive with its `(peer, tag)` fills it; one that finds none waits in the
//!   unexpected list (an inline one copied out of its slot, so the sender's ring moves on).
//!   The *k*-th send from A to B with tag *t* meets the *k*-th receive on B from A with tag
//!   *t* (withdrawn sends do not count), whatever order the two sides post in.
//! * Back-pressure: a full mailbox, or every send word in use, answers "cannot start now"
//!   (`Ok(None)`).
//! * Failures: a size mismatch fails the receive (and, for a large message, the send); a
//!   peer lost is seen by the bootstrap's [`PeerWatch`] from `poll`; a mailbox or word that
//!   breaks the protocol fails the comm naming the peer. Nothing a peer writes into the
//!   shared memory can make this endpoint touch memory outside its own buffers.
//!
//! Seed: one comm's `ncclNet` instance (`isend` / `irecv` / `test`, §1 and §4) over shared
//! memory, in the place of libfabric's shm provider.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use proxy_bootstrap::PeerWatch;
use proxy_core::base::slab::Slab;
use proxy_core::progress::net::{NetError, Posted, RequestId, TestOutcome, Transport};

use crate::handoff::{self, Edge, SendState};
use crate::mailbox::{Body, Corrupt, Header, Inbox, Outbox};
use crate::segment::{Segment, INLINE_MAX, MAILBOX_SLOTS, SEND_WORDS};

mod lent;
pub(crate) use lent::cma_read;

/// Largest message in bytes ([`Transport::max_msg_size`]): 4 GiB − 1.
pub const MAX_MSG_SIZE: u64 = u32::MAX as u64;
/// Requests one endpoint keeps in flight at most.
pub const MAX_REQUESTS: usize = 1 << 20;
/// Empty per-tag queues a peer's lists keep for reuse before they are pruned.
const KEEP_EMPTY_TAGS: usize = 1024;
/// Inline copies of unexpected messages kept for reuse.
const SPARE_BUFFERS: usize = 256;
/// Messages that may wait for their receives at once; past it the comm fails, naming the
/// sender (a peer that floods us must not exhaust our memory).
pub const MAX_UNEXPECTED: usize = 1 << 20;
/// `poll` sweeps the lists every this many calls: empty per-tag queues beyond
/// [`KEEP_EMPTY_TAGS`], and large messages whose sender has withdrawn them.
const SWEEP_INTERVAL: u32 = 256;
/// How long dropping an endpoint waits at most for a peer's read of one of its buffers.
pub const DROP_READ_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A message that arrived before its receive.
enum Arrived {
    /// An inline message, copied out of its slot.
    Inline(Vec<u8>),
    /// A large message still in the sender's buffer.
    Lent {
        size: u64,
        addr: u64,
        word: u32,
        generation: u32,
    },
}

/// Where a receive stands.
enum RecvState {
    Posted,
    Done(u64),
    Failed(NetError),
    Cancelled,
}

/// One request in flight.
enum Request {
    /// An inline send: complete at post.
    SendInline { size: u64 },
    /// A large send: its word in our segment.
    SendLent {
        peer: u32,
        size: u64,
        word: u32,
        generation: u32,
    },
    Recv {
        peer: u32,
        tag: u64,
        buf: *mut u8,
        len: u64,
        state: RecvState,
    },
}

/// One rank's endpoint of the shared-memory transport; implements [`Transport`].
///
/// Built by [`crate::open_shm_comm`] (or [`ShmTransport::new`] over segments the caller
/// mapped). `Send`, not `Sync`: one thread at a time drives it.
pub struct ShmTransport {
    rank: u32,
    nranks: u32,
    name: String,
    /// Every rank's segment (ours at `rank`).
    segments: Vec<Arc<Segment>>,
    /// Every rank's process id (the target of the cross-memory reads).
    pids: Vec<u32>,
    /// Our end of mailbox (self → r), by `r`.
    outboxes: Vec<Outbox>,
    /// Our end of mailbox (s → self), by `s`.
    inboxes: Vec<Inbox>,
    /// Per peer, per tag: slab indices of posted receives, in posting order.
    posted: Vec<BTreeMap<u64, VecDeque<u32>>>,
    /// Per peer, per tag: messages that arrived first, in arrival order.
    unexpected: Vec<BTreeMap<u64, VecDeque<Arrived>>>,
    slab: Slab<Request>,
    /// Free send words of our segment, and the generation each last carried.
    /// FIFO: a word is armed again only after every other free one, so its generation moves
    /// once per `SEND_WORDS` sends (a stale message about it finds another generation).
    free_words: VecDeque<u32>,
    generations: Vec<u32>,
    spare: Vec<Vec<u8>>,
    /// Messages in `unexpected`.
    unexpected_len: usize,
    watch: Option<PeerWatch>,
    /// `poll` calls since the last sweep of the lists.
    polls_since_sweep: u32,
    /// Sticky: the first failure of the transport as a whole.
    failed: Option<NetError>,
    closed: bool,
}

// SAFETY: the raw receive pointers are addresses lent by the caller for the life of their
// requests; only the one thread driving the endpoint writes through them.
unsafe impl Send for ShmTransport {}

impl ShmTransport {
    /// The endpoint of `rank` over `segments` (every rank's segment, mapped, ours at `rank`,
    /// none of their mailboxes used yet) and `pids` (every rank's process id).
    ///
    /// # Errors
    /// [`NetError::invalid`] when the lengths differ from the segments' rank count or `rank`
    /// is out of range.
    pub fn new(rank: u32, segments: Vec<Arc<Segment>>, pids: Vec<u32>) -> Result<Self, NetError> {
        let nranks = segments.len() as u32;
        if rank >= nranks
            || pids.len() != segments.len()
            || segments.iter().any(|s| s.layout().nranks != nranks)
        {
            return Err(NetError::invalid(
                None,
                format!(
                    "shm transport: rank {rank}, {} segments, {} pids",
                    segments.len(),
                    pids.len()
                ),
            ));
        }
        let own = segments[rank as usize].clone();
        let n = nranks as usize;
        Ok(Self {
            rank,
            nranks,
            name: "proxy-shm".into(),
            outboxes: segments
                .iter()
                .map(|s| Outbox::new(s.clone(), rank))
                .collect(),
            inboxes: (0..nranks).map(|s| Inbox::new(own.clone(), s)).collect(),
            segments,
            pids,
            posted: (0..n).map(|_| BTreeMap::new()).collect(),
            unexpected: (0..n).map(|_| BTreeMap::new()).collect(),
            slab: Slab::default(),
            free_words: (0..SEND_WORDS as u32).collect(),
            generations: vec![0; SEND_WORDS],
            spare: Vec::new(),
            unexpected_len: 0,
            watch: None,
            polls_since_sweep: 0,
            failed: None,
            closed: false,
        })
    }

    /// Watches the bootstrap for a lost peer from every `poll` (docs/design.md §9).
    pub fn set_peer_watch(&mut self, watch: PeerWatch) {
        self.watch = Some(watch);
    }

    /// This endpoint's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Requests in flight and messages waiting for their receive.
    pub fn in_flight(&self) -> (usize, usize) {
        let unexpected = self
            .unexpected
            .iter()
            .flat_map(|m| m.values())
            .map(VecDeque::len)
            .sum();
        (self.slab.live(), unexpected)
    }

    /// Rank `r`'s segment, as this endpoint maps it (tests write into it as a broken peer
    /// would).
    #[cfg(test)]
    pub(crate) fn segment(&self, r: u32) -> Arc<Segment> {
        self.segments[r as usize].clone()
    }

    fn own(&self) -> &Segment {
        &self.segments[self.rank as usize]
    }

    /// The sticky failure, or a corrupt peer made sticky.
    fn fail(&mut self, peer: u32, what: &str) -> NetError {
        let e = NetError::failure(
            Some(peer),
            format!("{}: rank {peer} broke the protocol: {what}", self.name),
        );
        log::error!("{e}");
        self.failed.get_or_insert(e).clone()
    }

    fn check_args(&self, peer: u32, buf: *const u8, size: u64) -> Result<(), NetError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.closed {
            return Err(NetError::invalid(Some(peer), "shm transport: closed"));
        }
        if peer >= self.nranks {
            return Err(NetError::invalid(
                Some(peer),
                format!(
                    "shm transport: peer {peer} out of range ({} ranks)",
                    self.nranks
                ),
            ));
        }
        if size > MAX_MSG_SIZE {
            return Err(NetError::invalid(
                Some(peer),
                format!("shm transport: {size} bytes over the maximum {MAX_MSG_SIZE}"),
            ));
        }
        if buf.is_null() && size > 0 {
            return Err(NetError::invalid(Some(peer), "shm transport: null buffer"));
        }
        Ok(())
    }

    /// Drains mailbox `peer → self`, at most one ring's worth of messages (a peer that keeps
    /// publishing cannot keep `poll` here): every message meets its posted receive or waits.
    fn drain(&mut self, peer: u32) -> Result<(), NetError> {
        for _ in 0..MAILBOX_SLOTS {
            let header = match self.inboxes[peer as usize].peek() {
                Ok(Some(h)) => h,
                Ok(None) => return Ok(()),
                Err(Corrupt(what)) => return Err(self.fail(peer, &format!("mailbox: {what}"))),
            };
            self.arrive(peer, header)?;
            self.inboxes[peer as usize].pop();
        }
        Ok(())
    }

    /// One message from `peer`, still in its slot.
    fn arrive(&mut self, peer: u32, h: Header) -> Result<(), NetError> {
        let p = peer as usize;
        while let Some(index) = self.posted[p].get_mut(&h.tag).and_then(VecDeque::pop_front) {
            // Still posted (a cancelled receive leaves the list at its cancel).
            let (buf, len) = match self.slab.get_mut(index) {
                Some(Request::Recv {
                    buf,
                    len,
                    state: RecvState::Posted,
                    ..
                }) => (*buf, *len),
                _ => continue,
            };
            let outcome = match h.body {
                Body::Inline if h.size == len => {
                    // SAFETY: `buf..buf+len` is the receive's buffer, lent until its request
                    // finishes; len ≤ INLINE_MAX (the header was checked).
                    unsafe { self.inboxes[p].copy_inline_raw(buf, len as usize) };
                    RecvState::Done(len)
                }
                Body::Inline => RecvState::Failed(mismatch(peer, h.size, len)),
                Body::Lent {
                    addr,
                    word,
                    generation,
                } => match self.read_lent(peer, addr, h.size, word, generation, buf, len)? {
                    Some(s) => s,
                    None => {
                        // Withdrawn by its sender: it does not count, the receive waits on.
                        self.posted[p].entry(h.tag).or_default().push_front(index);
                        return Ok(());
                    }
                },
            };
            if let Some(Request::Recv { state, .. }) = self.slab.get_mut(index) {
                *state = outcome;
            }
            return Ok(());
        }
        let arrived = match h.body {
            Body::Inline => {
                let mut v = self.spare.pop().unwrap_or_default();
                v.resize(h.size as usize, 0);
                self.inboxes[p].copy_inline(&mut v);
                Arrived::Inline(v)
            }
            Body::Lent {
                addr,
                word,
                generation,
            } => Arrived::Lent {
                size: h.size,
                addr,
                word,
                generation,
            },
        };
        if self.unexpected_len >= MAX_UNEXPECTED {
            return Err(self.fail(
                peer,
                &format!("{MAX_UNEXPECTED} messages wait for receives nobody posted"),
            ));
        }
        self.unexpected_len += 1;
        self.unexpected[p]
            .entry(h.tag)
            .or_default()
            .push_back(arrived);
        Ok(())
    }

    /// Reads a lent message of `size` bytes at `addr` in `peer`'s process into `buf` (`len`
    /// bytes): claims its word, reads, and marks it. `Ok(None)`: the sender withdrew it.
    ///
    /// # Errors
    /// The word holds something the protocol never writes (the comm fails).
    #[allow(clippy::too_many_arguments)]
    fn read_lent(
        &mut self,
        peer: u32,
        addr: u64,
        size: u64,
        word: u32,
        generation: u32,
        buf: *mut u8,
        len: u64,
    ) -> Result<Option<RecvState>, NetError> {
        let seg = self.segments[peer as usize].clone();
        let w = seg.send_word(word);
        let edge = if size == len {
            Edge::Claim
        } else {
            Edge::Reject
        };
        match handoff::transition(w, generation, edge) {
            Ok(()) => {}
            // Withdrawn, and perhaps its word already armed again for a later send.
            Err(found)
                if found.state == Some(SendState::Cancelled) || found.generation != generation =>
            {
                return Ok(None)
            }
            Err(found) => {
                return Err(self.fail(peer, &format!("its send word {word} holds {found}")))
            }
        }
        if size != len {
            return Ok(Some(RecvState::Failed(mismatch(peer, size, len))));
        }
        let read = cma_read(self.pids[peer as usize], addr, buf, len);
        let (edge, state) = match read {
            Ok(()) => (Edge::Finish, RecvState::Done(len)),
            Err(e) => (
                Edge::Fail,
                RecvState::Failed(NetError::failure(
                    Some(peer),
                    format!(
                        "shm transport: reading {len} bytes of rank {peer} (pid {}) failed: {e}",
                        self.pids[peer as usize]
                    ),
                )),
            ),
        };
        // (2) and (5) are stores: they cannot be refused.
        let _ = handoff::transition(w, generation, edge);
        Ok(Some(state))
    }

    /// Drops the empty per-tag queues of a peer's lists once there are more than
    /// [`KEEP_EMPTY_TAGS`], and the unexpected large messages their senders have withdrawn
    /// (their word left PENDING of their generation: no receive may take them any more).
    fn sweep(&mut self) {
        for (p, lists) in self.unexpected.iter_mut().enumerate() {
            let seg = &self.segments[p];
            let before: usize = lists.values().map(VecDeque::len).sum();
            for q in lists.values_mut() {
                q.retain(|a| match *a {
                    Arrived::Inline(_) => true,
                    Arrived::Lent {
                        word, generation, ..
                    } => handoff::read(seg.send_word(word), generation) == Ok(SendState::Pending),
                });
            }
            let after: usize = lists.values().map(VecDeque::len).sum();
            self.unexpected_len -= before - after;
            if lists.len() > KEEP_EMPTY_TAGS {
                lists.retain(|_, q| !q.is_empty());
            }
        }
        for lists in &mut self.posted {
            if lists.len() > KEEP_EMPTY_TAGS {
                lists.retain(|_, q| !q.is_empty());
            }
        }
    }

    /// Allocates a send word: (index, generation), or `None` when all are in use.
    fn take_word(&mut self) -> Option<(u32, u32)> {
        let w = self.free_words.pop_front()?;
        let g = &mut self.generations[w as usize];
        *g = g.wrapping_add(1).max(1);
        Some((w, *g))
    }
}

/// The receive's error for a message of another size.
fn mismatch(peer: u32, size: u64, len: u64) -> NetError {
    let what = if size > len { "truncation: " } else { "" };
    NetError::failure(
        Some(peer),
        format!(
            "shm transport: {what}a message of {size} bytes from rank {peer} met a receive \
             of {len}"
        ),
    )
}

impl Transport for ShmTransport {
    fn name(&self) -> &str {
        &self.name
    }

    fn max_msg_size(&self) -> u64 {
        MAX_MSG_SIZE
    }

    fn poll(&mut self) -> Result<(), NetError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.closed {
            return Ok(());
        }
        for peer in 0..self.nranks {
            self.drain(peer)?;
        }
        self.polls_since_sweep += 1;
        if self.polls_since_sweep >= SWEEP_INTERVAL {
            self.polls_since_sweep = 0;
            self.sweep();
        }
        if let Some(w) = self.watch.as_mut() {
            if let Err(e) = w.check_transport(&self.name) {
                return Err(self.failed.get_or_insert(e).clone());
            }
        }
        Ok(())
    }

    unsafe fn isend(
        &mut self,
        peer: u32,
        buf: *const u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        self.check_args(peer, buf, size)?;
        if self.slab.live() >= MAX_REQUESTS {
            return Ok(None);
        }
        if size <= INLINE_MAX as u64 {
            let payload: &[u8] = if size == 0 {
                &[]
            } else {
                // SAFETY: the caller lends `buf..buf+size` readable for this call at least.
                unsafe { std::slice::from_raw_parts(buf, size as usize) }
            };
            let header = Header {
                tag,
                size,
                body: Body::Inline,
            };
            return match self.outboxes[peer as usize].push(&header, payload) {
                Ok(true) => Ok(Some(Posted {
                    request: self.slab.insert(Request::SendInline { size }).1,
                    payload_copied: true,
                })),
                Ok(false) => Ok(None),
                Err(Corrupt(what)) => Err(self.fail(peer, &format!("mailbox: {what}"))),
            };
        }
        let Some((word, generation)) = self.take_word() else {
            return Ok(None);
        };
        handoff::arm(self.own().send_word(word), generation);
        let header = Header {
            tag,
            size,
            body: Body::Lent {
                addr: buf as u64,
                word,
                generation,
            },
        };
        match self.outboxes[peer as usize].push(&header, &[]) {
            Ok(true) => Ok(Some(Posted {
                request: self
                    .slab
                    .insert(Request::SendLent {
                        peer,
                        size,
                        word,
                        generation,
                    })
                    .1,
                payload_copied: false,
            })),
            Ok(false) => {
                self.free_words.push_back(word);
                Ok(None)
            }
            Err(Corrupt(what)) => {
                self.free_words.push_back(word);
                Err(self.fail(peer, &format!("mailbox: {what}")))
            }
        }
    }

    unsafe fn irecv(
        &mut self,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        self.check_args(peer, buf, size)?;
        if self.slab.live() >= MAX_REQUESTS {
            return Ok(None);
        }
        let p = peer as usize;
        // An unexpected message with this tag first (withdrawn large ones are skipped).
        while let Some(arrived) = self.unexpected[p]
            .get_mut(&tag)
            .and_then(VecDeque::pop_front)
        {
            self.unexpected_len -= 1;
            let state = match arrived {
                Arrived::Inline(v) => {
                    let state = if v.len() as u64 == size {
                        if size > 0 {
                            // SAFETY: `buf..buf+size` is lent to us (the caller's contract).
                            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), buf, v.len()) };
                        }
                        RecvState::Done(size)
                    } else {
                        RecvState::Failed(mismatch(peer, v.len() as u64, size))
                    };
                    if self.spare.len() < SPARE_BUFFERS {
                        self.spare.push(v);
                    }
                    state
                }
                Arrived::Lent {
                    size: msg,
                    addr,
                    word,
                    generation,
                } => match self.read_lent(peer, addr, msg, word, generation, buf, size)? {
                    Some(s) => s,
                    None => continue,
                },
            };
            let (_, request) = self.slab.insert(Request::Recv {
                peer,
                tag,
                buf,
                len: size,
                state,
            });
            return Ok(Some(Posted {
                request,
                payload_copied: false,
            }));
        }
        let (index, request) = self.slab.insert(Request::Recv {
            peer,
            tag,
            buf,
            len: size,
            state: RecvState::Posted,
        });
        self.posted[p].entry(tag).or_default().push_back(index);
        Ok(Some(Posted {
            request,
            payload_copied: false,
        }))
    }

    fn test(&mut self, request: RequestId) -> Result<TestOutcome, NetError> {
        let Some(index) = self.slab.lookup(request) else {
            return Err(NetError::invalid(
                None,
                format!("shm transport: unknown request {request:#x}"),
            ));
        };
        let outcome = match self.slab.get_mut(index) {
            Some(Request::SendInline { size }) => Ok(TestOutcome::Done { size: *size }),
            Some(&mut Request::SendLent {
                peer,
                size,
                word,
                generation,
            }) => match handoff::read(self.own().send_word(word), generation) {
                Ok(SendState::Pending | SendState::Copying) => return Ok(TestOutcome::Pending),
                Ok(SendState::Done) => Ok(TestOutcome::Done { size }),
                Ok(SendState::Cancelled) => Ok(TestOutcome::Cancelled),
                Ok(SendState::Rejected) => Err(NetError::failure(
                    Some(peer),
                    format!(
                        "shm transport: rank {peer} has a receive of another size than this \
                         send of {size} bytes"
                    ),
                )),
                Ok(SendState::Failed) => Err(NetError::failure(
                    Some(peer),
                    format!("shm transport: rank {peer} could not read this send of {size} bytes"),
                )),
                Err(found) => {
                    let e = self.fail(peer, &format!("our send word {word} holds {found}"));
                    // The word is lost: never hand it out again.
                    self.slab.remove(index);
                    return Err(e);
                }
            },
            Some(Request::Recv { state, .. }) => match state {
                // The comm failed: a receive still posted will never be matched.
                RecvState::Posted => match &self.failed {
                    Some(e) => Err(e.clone()),
                    None => return Ok(TestOutcome::Pending),
                },
                RecvState::Done(n) => Ok(TestOutcome::Done { size: *n }),
                RecvState::Failed(e) => Err(e.clone()),
                RecvState::Cancelled => Ok(TestOutcome::Cancelled),
            },
            None => unreachable!("looked up"),
        };
        if let Some(Request::SendLent { word, .. }) = self.slab.remove(index) {
            self.free_words.push_back(word);
        }
        outcome
    }

    fn cancel(&mut self, request: RequestId) -> Result<(), NetError> {
        let Some(index) = self.slab.lookup(request) else {
            return Err(NetError::invalid(
                None,
                format!("shm transport: unknown request {request:#x}"),
            ));
        };
        match self.slab.get_mut(index) {
            Some(&mut Request::SendLent {
                word, generation, ..
            }) => {
                // Refused: the receiver claimed it first; the send finishes as it does.
                let _ = handoff::transition(self.own().send_word(word), generation, Edge::Withdraw);
            }
            Some(Request::Recv {
                state, peer, tag, ..
            }) => {
                if matches!(state, RecvState::Posted) {
                    *state = RecvState::Cancelled;
                    let (peer, tag) = (*peer as usize, *tag);
                    if let Some(q) = self.posted[peer].get_mut(&tag) {
                        q.retain(|&i| i != index);
                    }
                }
            }
            // Inline sends are complete already.
            Some(Request::SendInline { .. }) | None => {}
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), NetError> {
        self.closed = true;
        Ok(())
    }

    fn dump_state(&self, out: &mut dyn core::fmt::Write) -> core::fmt::Result {
        let (requests, unexpected) = self.in_flight();
        write!(
            out,
            " requests={requests} unexpected={unexpected} send_words_free={}",
            self.free_words.len()
        )
    }
}
