//! The completion queue: reading completions and error completions (`fi_cq_read`,
//! `fi_cq_readerr`) into the transport's requests, once per progress call.

use core::mem::MaybeUninit;

use libfabric_sys as fi;
use proxy_core::progress::net::NetError;

use crate::*;

impl LibfabricTransport {
    /// Reads the CQ: completions and error completions update their requests.
    ///
    /// # Errors
    /// A failure of the CQ itself, or an error completion without a request.
    pub(crate) fn progress(&mut self) -> Result<(), NetError> {
        if self.obj.cq.is_null() {
            return Ok(());
        }
        // shm: a completion may take a peer's lock (`exits.rs`): the watchdog sees this call.
        if let Some(s) = &self.stuck {
            s.enter(None);
        }
        let r = self.read_cq();
        if let Some(s) = &self.stuck {
            s.leave();
        }
        r
    }

    /// [`LibfabricTransport::progress`]'s reads.
    fn read_cq(&mut self) -> Result<(), NetError> {
        self.cq_reads += 1;
        // Not zeroed: this runs at every progress call, mostly to find nothing, and zeroing
        // the batch (640 bytes) was about 1 % of a crowded 8 B all-reduce's profile.
        let mut entries = [MaybeUninit::<fi::fi_cq_tagged_entry>::uninit(); CQ_BATCH];
        for _ in 0..CQ_MAX_BATCHES {
            // SAFETY: the CQ is open with FI_CQ_FORMAT_TAGGED; `entries` has room for CQ_BATCH
            // entries of that format (fi_cq_read only writes them).
            let n = unsafe { fi::fi_cq_read(self.obj.cq, entries.as_mut_ptr().cast(), CQ_BATCH) };
            if n > 0 {
                if let Some(w) = &self.idle {
                    w.took_completions();
                }
                for e in &entries[..(n as usize).min(CQ_BATCH)] {
                    // SAFETY: fi_cq_read wrote its first `n` (≤ CQ_BATCH) entries.
                    let e = unsafe { e.assume_init_ref() };
                    self.on_completion(e);
                }
                if (n as usize) < CQ_BATCH {
                    return Ok(());
                }
            } else if n == neg(fi::FI_EAGAIN) {
                return Ok(());
            } else if n == neg(fi::FI_EAVAIL) {
                if !self.read_error()? {
                    return Ok(());
                }
            } else {
                return Err(NetError::failure(
                    None,
                    format!(
                        "{}: fi_cq_read failed: {} ({n})",
                        self.name,
                        fi_error_text(n)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// One successful completion.
    fn on_completion(&mut self, e: &fi::fi_cq_tagged_entry) {
        let Some(index) = self.reqs.index_of_context(e.op_context) else {
            if self.reqs.is_foreign(e.op_context) {
                self.drop_stale("completion", e.op_context, e.tag);
                return;
            }
            log::warn!(
                "{}: completion for an unknown context {:p} (flags {:#x}, tag {:#x}) ignored",
                self.name,
                e.op_context,
                e.flags,
                e.tag
            );
            return;
        };
        // Send completions need not fill `len`: report the posted size for them.
        let slot = self.reqs.slot(index);
        let size = if slot.kind == Kind::Recv {
            e.len as u64
        } else {
            slot.size
        };
        let mr = self.reqs.complete(index, State::Done(size)).mr;
        if let Some(region) = mr {
            self.release_region(region);
        }
    }

    /// A completion of an earlier lease's stuck request on this pooled set (`pool.rs`): its
    /// context stays held, its request is gone; counted and dropped.
    fn drop_stale(&mut self, what: &str, ctx: *mut std::ffi::c_void, tag: u64) {
        self.stale_completions += 1;
        log::debug!(
            "{}: {what} of an earlier lease's request (context {ctx:p}, tag {tag:#x}) dropped",
            self.name
        );
    }

    /// Reads one error completion after `-FI_EAVAIL`. Returns `false` if it was not available
    /// yet (`-FI_EAGAIN` past the retry bound; it is read on a later call).
    fn read_error(&mut self) -> Result<bool, NetError> {
        let mut tries = 0;
        let err = loop {
            // A zeroed entry each time: err_data_size 0 asks the provider for its own buffer.
            let mut err = fi::fi_cq_err_entry::default();
            // SAFETY: the CQ is open; `err` is a zeroed fi_cq_err_entry.
            let ret = unsafe { fi::fi_cq_readerr(self.obj.cq, &mut err, 0) };
            if ret > 0 {
                break err;
            }
            if ret == neg(fi::FI_EAGAIN) && tries < READERR_RETRIES {
                tries += 1;
                continue;
            }
            if ret == neg(fi::FI_EAGAIN) {
                return Ok(false);
            }
            return Err(NetError::failure(
                None,
                format!(
                    "{}: fi_cq_readerr failed: {} ({ret})",
                    self.name,
                    fi_error_text(ret)
                ),
            ));
        };
        let code = err.err.unsigned_abs();
        let provider_text = {
            let mut buf = [0 as std::ffi::c_char; 256];
            // SAFETY: the CQ is open; `err_data` is the provider's, valid until the next CQ
            // read; `buf` is writable for its length. The result is null, `buf`, or a provider
            // string, each NUL-terminated.
            unsafe {
                let p = fi::fi_cq_strerror(
                    self.obj.cq,
                    err.prov_errno,
                    err.err_data,
                    buf.as_mut_ptr(),
                    buf.len(),
                );
                if p.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(p).to_string_lossy().into_owned()
                }
            }
        };
        let Some(index) = self.reqs.index_of_context(err.op_context) else {
            if self.reqs.is_foreign(err.op_context) {
                self.drop_stale("error completion", err.op_context, err.tag);
                return Ok(true);
            }
            return Err(NetError::failure(
                None,
                format!(
                    "{}: error completion without a request: {} (err {code}, prov_errno {}: {provider_text})",
                    self.name,
                    fi_error_text(code as isize),
                    err.prov_errno
                ),
            ));
        };
        let state = if code == fi::FI_ECANCELED {
            State::Cancelled
        } else {
            let slot = self.reqs.slot(index);
            let what = if code == fi::FI_ETRUNC {
                let over = if err.olen > 0 {
                    format!(" by {} B", err.olen)
                } else {
                    String::new()
                };
                format!(
                    "truncated: the message is larger than the posted {} B receive{over}; sizes \
                     must match exactly",
                    slot.size
                )
            } else {
                fi_error_text(code as isize)
            };
            State::Failed(NetError::failure(
                Some(slot.peer),
                format!(
                    "{}: {} of {} B tag {:#x} with rank {} failed: {what} (err {code}, prov_errno \
                     {}: {provider_text})",
                    self.name,
                    slot.kind.as_str(),
                    slot.size,
                    slot.tag,
                    slot.peer,
                    err.prov_errno
                ),
            ))
        };
        if let State::Failed(e) = &state {
            log::warn!("{e}");
        }
        let mr = self.reqs.complete(index, state).mr;
        if let Some(region) = mr {
            self.release_region(region);
        }
        Ok(true)
    }
}
