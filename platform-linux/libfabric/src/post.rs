//! Posting a send or a receive: the checks every post makes, the provider's `-FI_EAGAIN`
//! handled by progressing and retrying with a bound, registration of the buffer, and the inject
//! path for small sends.

use crate::*;

impl LibfabricTransport {
    pub(crate) fn check_open(&self) -> Result<(), NetError> {
        if self.closed {
            Err(NetError::failure(
                None,
                format!("{}: transport is closed", self.name),
            ))
        } else {
            Ok(())
        }
    }

    /// Checks a post's arguments; returns the peer's `fi_addr_t`.
    pub(crate) fn check_post(
        &self,
        kind: Kind,
        peer: u32,
        size: u64,
        tag: u64,
    ) -> Result<fi::fi_addr_t, NetError> {
        self.check_open()?;
        if self.peers.is_empty() {
            return Err(NetError::invalid(
                Some(peer),
                format!("{}: {} posted before connect", self.name, kind.as_str()),
            ));
        }
        if peer >= self.nranks {
            return Err(NetError::invalid(
                Some(peer),
                format!(
                    "{}: peer {peer} out of range ({} ranks)",
                    self.name, self.nranks
                ),
            ));
        }
        if size > self.max_msg {
            return Err(NetError::invalid(
                Some(peer),
                format!(
                    "{}: {} of {size} bytes exceeds the message size limit of {} bytes \
                     (max_msg_size)",
                    self.name,
                    kind.as_str(),
                    self.max_msg
                ),
            ));
        }
        if tag & !self.tag_mask != 0 {
            return Err(NetError::invalid(
                Some(peer),
                format!(
                    "{}: tag {tag:#x} exceeds the provider's {} tag bits",
                    self.name, self.attrs.tag_bits
                ),
            ));
        }
        Ok(self.peers[peer as usize])
    }

    /// Posts one send or receive; spaces the send posts to a peer that keeps answering
    /// `-FI_EAGAIN` (`backoff.rs`).
    pub(crate) fn post(
        &mut self,
        kind: Kind,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        let addr = self.check_post(kind, peer, size, tag)?;
        if kind == Kind::Recv {
            return self.post_now(kind, addr, peer, buf, size, tag);
        }
        let p = peer as usize;
        if let Some(w) = self.stuck.as_ref().and_then(|s| s.exited(peer)) {
            return Err(NetError::failure(
                Some(peer),
                format!(
                    "{}: rank {peer} (pid {}) has exited: no send posted to it (shm would spin \
                     forever on its region's lock if it died holding it)",
                    self.name,
                    w.pid()
                ),
            ));
        }
        // The clock is read only while the peer's posts are held back (a clear peer, the
        // common case, costs no clock read: two reads per send were 2 % of a crowded 8 B
        // all-reduce's profile).
        let clear = self.pressure[p] == PostPressure::Clear;
        if !clear && !self.pressure[p].may_post(Instant::now()) {
            // Back-pressure answered here: read the CQ (manual progress), as the provider's
            // own -FI_EAGAIN path does.
            self.spaced += 1;
            self.progress()?;
            return Ok(None);
        }
        if let Some(s) = &self.stuck {
            s.enter(Some(peer));
        }
        let r = self.post_now(kind, addr, peer, buf, size, tag);
        if let Some(s) = &self.stuck {
            s.leave();
        }
        let event = match &r {
            Ok(Some(_)) => PostEvent::Posted,
            Ok(None) => PostEvent::Again,
            Err(_) => return r,
        };
        if clear && event == PostEvent::Posted {
            // Accepted while clear: no edge of the module diagram, nothing to record.
            return r;
        }
        if self.pressure[p].on(event, Instant::now(), peer) {
            log::warn!(
                "{}: send posts to rank {peer} answered -FI_EAGAIN for {:?} without one being \
                 accepted (a vanished peer on tcp: each post starts a refused connection): \
                 spacing them up to {:?} apart until one is accepted",
                self.name,
                backoff::STORM_AFTER,
                backoff::MAX_WAIT
            );
        }
        r
    }

    /// Posts one send or receive now.
    pub(crate) fn post_now(
        &mut self,
        kind: Kind,
        addr: fi::fi_addr_t,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        if kind == Kind::Send && self.inject_max > 0 && size <= self.inject_max as u64 {
            return self.post_inject(addr, peer, buf, size, tag);
        }
        let (mr, desc) = if self.register && size > 0 {
            let mut reg = fi_registrar!(self);
            // Counts one request on the region; released when the post fails or completes.
            let (region, desc) =
                self.mrs
                    .acquire(&mut reg, buf as u64, size)
                    .map_err(|mut e| {
                        e.peer = Some(peer);
                        e
                    })?;
            (Some(region), desc)
        } else {
            (None, ptr::null_mut())
        };
        let (index, ctx) = self.reqs.reserve(kind, peer, size, tag, mr);
        // A send carries the receiver's lease generation, a receive matches this lease's.
        let wire = match kind {
            Kind::Send => self.wire_tag(tag, self.peer_generations[peer as usize]),
            Kind::Recv => self.wire_tag(tag, self.generation),
        };
        // SAFETY: the endpoint is open and connected; the caller's contract keeps `buf..+size`
        // valid (readable for a send, writable for a receive) until the request finishes; `desc`
        // is the registration covering it (or null when none is needed); `ctx` is the slot's
        // stable context, owned by the provider until its completion is read.
        let ret = unsafe {
            match kind {
                Kind::Send => fi::fi_tsend(
                    self.obj.ep,
                    buf.cast_const().cast(),
                    size as usize,
                    desc,
                    addr,
                    wire,
                    ctx,
                ),
                Kind::Recv => fi::fi_trecv(
                    self.obj.ep,
                    buf.cast(),
                    size as usize,
                    desc,
                    fi::FI_ADDR_UNSPEC,
                    wire,
                    0,
                    ctx,
                ),
            }
        };
        if ret == 0 {
            let request = self.reqs.mark_posted(index);
            return Ok(Some(Posted {
                request,
                payload_copied: false,
            }));
        }
        self.reqs.unreserve(index);
        if let Some(region) = mr {
            self.release_region(region);
        }
        if ret == neg(fi::FI_EAGAIN) || (self.enomem_is_backpressure && ret == neg(fi::FI_ENOMEM)) {
            // Back-pressure: the provider moves on only when its CQ is read (manual progress;
            // tcp's connection setup answers -FI_EAGAIN until then).
            self.progress()?;
            return Ok(None);
        }
        Err(NetError::failure(
            Some(peer),
            format!(
                "{}: fi_{} of {size} B tag {tag:#x} to/from rank {peer} failed: {} ({ret})",
                self.name,
                if kind == Kind::Send { "tsend" } else { "trecv" },
                fi_error_text(ret)
            ),
        ))
    }

    /// Posts a send of at most the inject size with `fi_tinject`: on success the payload is
    /// copied and no completion will come, so the request is done at once.
    pub(crate) fn post_inject(
        &mut self,
        addr: fi::fi_addr_t,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        let wire = self.wire_tag(tag, self.peer_generations[peer as usize]);
        // SAFETY: the endpoint is open and connected; the caller's contract keeps `buf..+size`
        // readable for the duration of the call, which is all fi_tinject needs (it copies the
        // payload before returning); `size` is at most the entry's inject_size, so no
        // descriptor and no context are needed.
        let ret = unsafe {
            fi::fi_tinject(
                self.obj.ep,
                buf.cast_const().cast(),
                size as usize,
                addr,
                wire,
            )
        };
        if ret == 0 {
            let (index, _) = self.reqs.reserve(Kind::Send, peer, size, tag, None);
            let request = self.reqs.mark_done_now(index, size);
            self.injected += 1;
            return Ok(Some(Posted {
                request,
                payload_copied: true,
            }));
        }
        if ret == neg(fi::FI_EAGAIN) || (self.enomem_is_backpressure && ret == neg(fi::FI_ENOMEM)) {
            // Back-pressure, as for fi_tsend: only reading the CQ moves the provider on.
            self.progress()?;
            return Ok(None);
        }
        Err(NetError::failure(
            Some(peer),
            format!(
                "{}: fi_tinject of {size} B tag {tag:#x} to rank {peer} failed: {} ({ret})",
                self.name,
                fi_error_text(ret)
            ),
        ))
    }
}
