//! One rank's endpoint of the in-memory fabric ([`MemTransport`]): its inherent operations
//! (post, match, complete, the slab of requests) and the progress half's [`Transport`] on top.

use super::*;

impl MemTransport {
    pub(super) fn new(rank: u32, nranks: u32, parts: Parts) -> Self {
        let n = nranks as usize;
        Self {
            rank,
            nranks,
            tx: parts.tx,
            rx: parts.rx,
            posted: (0..n).map(|_| BTreeMap::new()).collect(),
            unexpected: (0..n).map(|_| BTreeMap::new()).collect(),
            unexpected_len: 0,
            slab: Slab::default(),
            spare: Vec::new(),
            polls_since_sweep: 0,
            closed: false,
            relax: spin_loop,
            bells: parts.bells,
            arrivals: parts.arrivals,
        }
    }

    /// This endpoint's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks in the fabric.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// Requests posted and not yet released by `test` (sends and receives).
    pub fn outstanding(&self) -> usize {
        self.slab.live()
    }

    /// Messages waiting in the unexpected list (arrived before their receive was posted).
    pub fn unexpected_len(&self) -> usize {
        self.unexpected_len
    }

    /// Checks a post's arguments; returns the size as `usize`.
    pub(super) fn check_post(&self, peer: u32, null: bool, size: u64) -> Result<usize, NetError> {
        if self.closed {
            return Err(NetError::failure(
                Some(peer),
                format!("mem: rank {} is closed", self.rank),
            ));
        }
        if peer >= self.nranks {
            return Err(NetError::invalid(
                Some(peer),
                format!("mem: peer {peer} out of range (nranks {})", self.nranks),
            ));
        }
        if size > MAX_MSG_SIZE {
            return Err(NetError::invalid(
                Some(peer),
                format!("mem: size {size} over the maximum {MAX_MSG_SIZE}"),
            ));
        }
        if null && size > 0 {
            return Err(NetError::invalid(
                Some(peer),
                format!("mem: null buffer for {size} bytes"),
            ));
        }
        // Fits: MAX_MSG_SIZE <= isize::MAX.
        Ok(size as usize)
    }

    /// A `PENDING` send descriptor for `len` bytes at `buf`: a finished one from the spare
    /// list that no peer holds any more, re-initialised in place, else a new one.
    ///
    /// # Safety
    /// `buf` as [`Transport::isend`] requires; `len > 0` implies `buf` is not null.
    pub(super) unsafe fn descriptor(
        &mut self,
        tag: u64,
        buf: *const u8,
        len: usize,
        eager: bool,
    ) -> Msg {
        #[cfg(not(loom))]
        {
            // The newest spare first; one a receiver still holds (it drops its reference right
            // after its copy, which may not have happened yet on its thread) is skipped.
            // One `get_mut` per candidate (each is a compare-and-swap on the descriptor's
            // counts, a line the receiver's thread wrote last): the first unique one is
            // re-initialised where it lies, then taken out.
            let reused = (0..self.spare.len()).rev().find(|&i| {
                Arc::get_mut(&mut self.spare[i])
                    // SAFETY: this function's contract.
                    .map(|m| unsafe { m.reuse(tag, buf, len, eager) })
                    .is_some()
            });
            if let Some(i) = reused {
                return self.spare.swap_remove(i);
            }
        }
        let payload = if !eager {
            Payload::Lent(LentBuf { ptr: buf, len })
        } else if len == 0 {
            Payload::Copied(Vec::new())
        } else {
            // SAFETY: this function's contract: `buf..buf+len` is readable for this call;
            // `len > 0` so `buf` is not null, and `u8` needs no alignment.
            Payload::Copied(Vec::from(unsafe { core::slice::from_raw_parts(buf, len) }))
        };
        Arc::new(SendShared::new(tag, payload))
    }

    /// Keeps the descriptor of a finished send for reuse (at most [`SPARE_DESCRIPTORS`]).
    pub(super) fn recycle(&mut self, msg: Msg) {
        if cfg!(not(loom)) && self.spare.len() < SPARE_DESCRIPTORS {
            self.spare.push(msg);
        }
    }

    /// Moves what `peer` has sent us so far (at most one mailbox-full, so the call is bounded
    /// even while the peer keeps sending) into matching receives or the unexpected list.
    /// `true` when it stopped at the mailbox-full (more may be waiting).
    pub(super) fn drain(&mut self, peer: usize) -> bool {
        for _ in 0..self.rx[peer].capacity() {
            let Some(msg) = self.rx[peer].pop() else {
                return false;
            };
            self.deliver(peer, msg);
        }
        true
    }

    /// Matches an arriving message against the oldest posted receive with its tag, else files
    /// it as unexpected.
    pub(super) fn deliver(&mut self, peer: usize, msg: Msg) {
        let tag = msg.tag;
        if let Some(queue) = self.posted[peer].get_mut(&tag) {
            // An empty queue (kept for reuse) means no receive is posted: unexpected below.
            if let Some(&index) = queue.front() {
                if let Some(Request::Recv { buf, state, .. }) = self.slab.get_mut(index) {
                    // SAFETY: `buf` comes from a pending `irecv`, whose caller keeps it writable
                    // and otherwise unaccessed until the request finishes (it is still
                    // `Posted`); we popped `msg` from our own mailbox, so we are its one
                    // receiver.
                    match unsafe { msg.claim_and_copy(buf.ptr, buf.len) } {
                        Claim::Copied(n) => *state = RecvState::Done(n),
                        Claim::Rejected => {
                            *state =
                                RecvState::Failed(mismatch(peer as u32, tag, msg.len(), buf.len))
                        }
                        // The sender withdrew it: drop it; the receive stays posted.
                        Claim::Withdrawn => return,
                    }
                    queue.pop_front();
                    if msg.is_lent() {
                        self.bells[peer].ring(); // the sender's send has finished
                    }
                    return;
                }
            }
        }
        self.unexpected[peer].entry(tag).or_default().push_back(msg);
        self.unexpected_len += 1;
    }

    /// Looks for the oldest unexpected message from `peer` with `tag` and takes it into `buf`.
    /// `None`: nothing (live) is waiting; the receive must be posted.
    ///
    /// # Safety
    /// `buf` as in [`Transport::irecv`].
    pub(super) unsafe fn take_unexpected(
        &mut self,
        peer: u32,
        tag: u64,
        buf: RecvBuf,
    ) -> Option<RecvState> {
        let map = &mut self.unexpected[peer as usize];
        // The tag's (empty) queue is made at its first receive, kept, and found by every later
        // arrival: whether a message comes before or after its receive is a race between the
        // two threads, and neither order may allocate once the tag has been seen.
        let queue = map
            .entry(tag)
            .or_insert_with(|| VecDeque::with_capacity(TAG_QUEUE_CAPACITY));
        let mut result = None;
        // Bounded by the queue's length.
        while let Some(msg) = queue.pop_front() {
            self.unexpected_len -= 1;
            // SAFETY: `buf` per this function's contract; the message came from our own
            // mailbox, so we are its one receiver.
            match unsafe { msg.claim_and_copy(buf.ptr, buf.len) } {
                Claim::Copied(n) => result = Some(RecvState::Done(n)),
                Claim::Rejected => {
                    result = Some(RecvState::Failed(mismatch(peer, tag, msg.len(), buf.len)))
                }
                Claim::Withdrawn => continue,
            }
            if msg.is_lent() {
                self.bells[peer as usize].ring(); // the sender's send has finished
            }
            break;
        }
        result
    }

    /// Drops unexpected messages whose senders withdrew them.
    pub(super) fn sweep(&mut self) {
        self.polls_since_sweep = 0;
        let mut len = 0;
        for map in &mut self.unexpected {
            let prune = map.len() > KEEP_EMPTY_TAGS;
            map.retain(|_, queue| {
                queue.retain(|m| !m.is_withdrawn());
                len += queue.len();
                !(prune && queue.is_empty())
            });
        }
        for map in &mut self.posted {
            if map.len() > KEEP_EMPTY_TAGS {
                map.retain(|_, queue| !queue.is_empty());
            }
        }
        self.unexpected_len = len;
    }

    /// `test`'s progress for request `index`: drains the request's peer mailbox, and settles
    /// the request if the peer's endpoint is gone (dropped or closed), so that it fails instead
    /// of staying pending forever.
    pub(super) fn progress_request(&mut self, index: u32) {
        let Some(req) = self.slab.get_mut(index) else {
            return;
        };
        let peer = req.peer() as usize;
        // The peer's end of the mailbox we depend on: it receives our sends, it sends to us.
        let gone = match req {
            Request::Send { .. } => self.tx[peer].is_abandoned(),
            Request::Recv { .. } => self.rx[peer].is_abandoned(),
        };
        if gone {
            // Acquire fence: `is_abandoned` read the ring's reference count (a relaxed load),
            // which the peer's handle dropped with a release decrement after its last push.
            // The fence makes that push's tail store visible to the drain below, so "still
            // posted after the drain" really means "never sent".
            fence(Ordering::Acquire);
        }
        self.drain(peer);
        if !gone {
            return;
        }
        match self.slab.get_mut(index) {
            Some(Request::Send { msg, peer_gone, .. }) => {
                // No receiver will ever claim it; withdraw it so the verdict rests on the
                // state word (an RMW reads the latest value: a copy that did happen shows as
                // `DONE`, acquired).
                *peer_gone = msg.try_withdraw().is_ok();
            }
            Some(Request::Recv {
                tag, buf, state, ..
            }) if matches!(state, RecvState::Posted) => {
                let (tag, len) = (*tag, buf.len);
                *state = RecvState::Failed(NetError::failure(
                    Some(peer as u32),
                    format!(
                        "mem: peer {peer} closed its endpoint without sending tag {tag:#x} \
                         ({len}-byte receive)"
                    ),
                ));
                remove_posted(&mut self.posted[peer], tag, index);
            }
            _ => {}
        }
    }

    /// Withdraws every send still `PENDING`, without waiting: a send the receiver is copying
    /// right now finishes (its `test` answers `Pending`, then `Done`). Returns the number of
    /// sends still being copied.
    pub(super) fn withdraw_pending_sends(&mut self) -> usize {
        let mut copying = 0;
        for (_, req) in self.slab.iter_mut() {
            if let Request::Send { msg, .. } = req {
                copying += usize::from(!msg.withdraw());
            }
        }
        copying
    }

    /// The endpoint's drop: withdraws every send, and waits for the copies under way out of a
    /// *lent* buffer (an eager send's bytes live in its descriptor, which the receiver keeps
    /// alive), so that no peer reads the caller's buffers once the endpoint is gone. The wait
    /// backs off: [`WITHDRAW_SPIN_POLLS`] polls with a spin hint, then the relax hook
    /// ([`MemTransport::set_relax`]) between polls; past [`WITHDRAW_WARN_POLLS`] it logs a
    /// warning naming the send, once.
    ///
    /// This is the one wait with no limit, and at the bound it warns and keeps waiting: it
    /// waits for a `memcpy` another thread is already running inside its own transport call
    /// (`COPYING` never waits for anything itself), never for a peer's progress or the
    /// network; returning earlier would let the caller free a buffer that is being read. It
    /// runs only at destroy, off the driving path: the comm's teardown has already drained
    /// (bounded) every request it knew.
    pub(super) fn withdraw_all_sends_for_drop(&mut self) {
        let relax = self.relax;
        for (_, req) in self.slab.iter_mut() {
            let Request::Send { peer, msg, .. } = req else {
                continue;
            };
            let mut polls: u64 = 0;
            while !msg.withdraw() {
                if !msg.is_lent() {
                    break; // our bytes are in the descriptor the receiver holds
                }
                polls += 1;
                if polls == WITHDRAW_WARN_POLLS {
                    log::warn!(
                        "mem: rank {}: drop waits for peer {peer} to finish copying the {}-byte \
                         message with tag {:#x} out of the lent buffer",
                        self.rank,
                        msg.len(),
                        msg.tag
                    );
                }
                if polls < WITHDRAW_SPIN_POLLS {
                    spin_loop();
                } else {
                    relax();
                }
            }
        }
    }

    /// Sets the hook the endpoint's drop calls between polls while it waits for a peer's copy
    /// out of a lent buffer, once [`WITHDRAW_SPIN_POLLS`] have spun (default: a spin hint; a
    /// std platform passes `std::thread::yield_now`).
    pub fn set_relax(&mut self, relax: fn()) {
        self.relax = relax;
    }
}

/// Takes posted receive `index` out of its peer's posted list (keeping the list free of empty
/// queues).
pub(super) fn remove_posted(map: &mut BTreeMap<u64, VecDeque<u32>>, tag: u64, index: u32) {
    if let Some(queue) = map.get_mut(&tag) {
        queue.retain(|&i| i != index);
    }
}

/// The error both sides of a size mismatch report.
pub(super) fn mismatch(peer: u32, tag: u64, msg_len: usize, recv_len: usize) -> NetError {
    let what = if recv_len < msg_len {
        "truncation"
    } else {
        "receive larger than the message"
    };
    NetError::failure(
        Some(peer),
        format!(
            "mem: {what}: tag {tag:#x}: message of {msg_len} bytes, receive of {recv_len} bytes \
             (sizes must match exactly)"
        ),
    )
}

impl Transport for MemTransport {
    fn name(&self) -> &str {
        "mem"
    }

    fn max_msg_size(&self) -> u64 {
        MAX_MSG_SIZE
    }

    /// Drains every incoming mailbox its sender has flagged since the last poll (at most one
    /// mailbox-full each) into matching receives and the unexpected list
    /// (`mem_transport/arrivals.rs`). Never fails.
    fn poll(&mut self) -> Result<(), NetError> {
        if self.closed {
            return Ok(());
        }
        let me = self.rank as usize;
        for word in 0..self.arrivals.per_rank() {
            let bits = self.arrivals.take(me, word);
            for peer in arrivals::senders(word, bits) {
                if self.drain(peer) {
                    // Stopped at a mailbox-full: look again at the next poll.
                    self.arrivals.reflag(me, peer);
                }
            }
        }
        self.polls_since_sweep += 1;
        if self.polls_since_sweep >= SWEEP_INTERVAL {
            self.sweep();
        }
        Ok(())
    }

    /// Posts a send. Sizes up to [`EAGER_MAX`] are copied now (`payload_copied: true`); larger
    /// ones lend `buf` until `test` reports the request finished. `Ok(None)` when the mailbox to
    /// `peer` is full or [`MAX_REQUESTS`] are in flight.
    unsafe fn isend(
        &mut self,
        peer: u32,
        buf: *const u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        let len = self.check_post(peer, buf.is_null(), size)?;
        // Back-pressure before any copy or allocation. We are the mailbox's only producer, so
        // a free slot seen here is still free at the push below.
        if self.slab.live() >= MAX_REQUESTS || self.tx[peer as usize].free_slots() == 0 {
            return Ok(None);
        }
        let eager = len <= EAGER_MAX;
        // SAFETY: the `isend` contract makes `buf..buf+len` readable for this call (and lent
        // until the request finishes); `len > 0` means `buf` is not null (checked).
        let msg = unsafe { self.descriptor(tag, buf, len, eager) };
        // PLANT: MemArrivalBeforePush flags the receiver before the push: its poll can take
        // the flag and find the mailbox still empty, and the message then waits unflagged.
        plant!(MemArrivalBeforePush => {
            self.arrivals.flag(peer as usize, self.rank as usize);
        });
        if self.tx[peer as usize].push(msg.clone()).is_err() {
            // Not reachable (see above); answered as back-pressure, nothing is lost.
            return Ok(None);
        }
        // After the push (arrivals.rs, steps (1) and (2)).
        plant!(
            MemArrivalBeforePush,
            (),
            self.arrivals.flag(peer as usize, self.rank as usize)
        );
        self.bells[peer as usize].ring();
        let (_, request) = self.slab.insert(Request::Send {
            peer,
            msg,
            peer_gone: false,
        });
        Ok(Some(Posted {
            request,
            payload_copied: eager,
        }))
    }

    /// Posts a receive of exactly `size` bytes. It is matched at once against what `peer` has
    /// already sent (the copy then happens inside this call), else on a later `poll` / `test`.
    /// `Ok(None)` only when [`MAX_REQUESTS`] are in flight.
    unsafe fn irecv(
        &mut self,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        let len = self.check_post(peer, buf.is_null(), size)?;
        if self.slab.live() >= MAX_REQUESTS {
            return Ok(None);
        }
        // Whatever `peer` sent before this receive goes ahead of it (posting order).
        self.drain(peer as usize);
        let buf = RecvBuf { ptr: buf, len };
        // SAFETY: the `irecv` contract is this function's.
        let state = unsafe { self.take_unexpected(peer, tag, buf) }.unwrap_or(RecvState::Posted);
        let posted = matches!(state, RecvState::Posted);
        let (index, request) = self.slab.insert(Request::Recv {
            peer,
            tag,
            buf,
            state,
        });
        // The tag's posted queue exists from its first receive on, matched or not (see
        // `take_unexpected`): no allocation later whichever side of the race wins.
        let queue = self.posted[peer as usize]
            .entry(tag)
            .or_insert_with(|| VecDeque::with_capacity(TAG_QUEUE_CAPACITY));
        if posted {
            queue.push_back(index);
        }
        Ok(Some(Posted {
            request,
            payload_copied: false,
        }))
    }

    /// Drains the request's peer mailbox, then reports. A send is `Done` once the receiver has
    /// the bytes; a receive once its buffer is filled. A size mismatch fails both sides.
    fn test(&mut self, request: RequestId) -> Result<TestOutcome, NetError> {
        let Some(index) = self.slab.lookup(request) else {
            return Err(NetError::invalid(
                None,
                format!("mem: unknown request {request:#x}"),
            ));
        };
        if !self.closed {
            self.progress_request(index);
        }
        let outcome = match self.slab.get_mut(index) {
            Some(Request::Send {
                peer,
                msg,
                peer_gone,
            }) => match msg.state() {
                SendState::Pending | SendState::Copying => return Ok(TestOutcome::Pending),
                SendState::Done => Ok(TestOutcome::Done {
                    size: msg.len() as u64,
                }),
                SendState::Cancelled if *peer_gone => Err(NetError::failure(
                    Some(*peer),
                    format!(
                        "mem: peer {peer} closed its endpoint before receiving the {}-byte \
                         message with tag {:#x}",
                        msg.len(),
                        msg.tag
                    ),
                )),
                SendState::Cancelled => Ok(TestOutcome::Cancelled),
                SendState::Rejected => Err(NetError::failure(
                    Some(*peer),
                    format!(
                        "mem: peer {peer} rejected the {}-byte message with tag {:#x}: its \
                         receive has another size (sizes must match exactly)",
                        msg.len(),
                        msg.tag
                    ),
                )),
            },
            Some(Request::Recv { state, .. }) => match state {
                RecvState::Posted => return Ok(TestOutcome::Pending),
                RecvState::Done(n) => Ok(TestOutcome::Done { size: *n as u64 }),
                RecvState::Cancelled => Ok(TestOutcome::Cancelled),
                RecvState::Failed(e) => Err(e.clone()),
            },
            None => return Ok(TestOutcome::Pending), // unreachable: `lookup` found it live
        };
        if let Some(Request::Send { msg, .. }) = self.slab.remove(index) {
            self.recycle(msg);
        }
        outcome
    }

    /// A send still unmatched is withdrawn (its next `test` says `Cancelled`); one the receiver
    /// is copying finishes (`test` says `Pending`, then `Done`). A posted receive is withdrawn.
    /// Finished requests are left as they are.
    fn cancel(&mut self, request: RequestId) -> Result<(), NetError> {
        let Some(index) = self.slab.lookup(request) else {
            return Err(NetError::invalid(
                None,
                format!("mem: unknown request {request:#x}"),
            ));
        };
        match self.slab.get_mut(index) {
            Some(Request::Send { msg, .. }) => {
                let _ = msg.withdraw();
            }
            Some(Request::Recv {
                peer, tag, state, ..
            }) if matches!(state, RecvState::Posted) => {
                remove_posted(&mut self.posted[*peer as usize], *tag, index);
                *state = RecvState::Cancelled;
            }
            _ => {}
        }
        Ok(())
    }

    /// Withdraws every send still unmatched and every posted receive, drops the unexpected
    /// list and the mailboxes; later posts fail. Never waits: a send the receiver is copying
    /// right now finishes on the receiver's side (its `test` answers `Pending`, then `Done`).
    /// Requests stay testable: each reports `Done` or `Cancelled`. Peers' requests with this
    /// rank then fail at their next `test` ("closed its endpoint"), as after a drop.
    fn close(&mut self) -> Result<(), NetError> {
        self.closed = true;
        let copying = self.withdraw_pending_sends();
        if copying > 0 {
            log::debug!(
                "mem: rank {}: close with {copying} sends being copied by their receivers",
                self.rank
            );
        }
        for (_, req) in self.slab.iter_mut() {
            if let Request::Recv { state, .. } = req {
                if matches!(state, RecvState::Posted) {
                    *state = RecvState::Cancelled;
                }
            }
        }
        for map in &mut self.posted {
            map.clear();
        }
        for map in &mut self.unexpected {
            map.clear();
        }
        self.unexpected_len = 0;
        // Our sends are withdrawn or being copied by a receiver that already popped them, so
        // dropping the ring handles is safe (a descriptor lives as long as its last `Arc`);
        // peers then see this endpoint as gone and fail their requests with it instead of
        // waiting forever.
        self.tx.clear();
        self.rx.clear();
        Ok(())
    }
}

impl Drop for MemTransport {
    fn drop(&mut self) {
        self.withdraw_all_sends_for_drop();
    }
}

impl fmt::Debug for MemTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemTransport")
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .field("outstanding", &self.slab.live())
            .field("unexpected", &self.unexpected_len)
            .field("closed", &self.closed)
            .finish()
    }
}
