//! Fault injection: a [`Transport`] wrapper that injects failures into any transport, driven
//! by a seed (docs/design.md §6, "Fault injection").
//!
//! [`FaultTransport`] passes every call to the transport it wraps and, with the rates of its
//! [`FaultPlan`] (each in parts per million of the calls it applies to), injects:
//!
//! | fault | on | what the comm sees | expected outcome |
//! | --- | --- | --- | --- |
//! | error completion | `test` of a finished request | `Err(NetError)` (`NRT_NETWORK_PROXY_FAILURE`, "injected error completion") | the comm fails; its task ends `NRT_NETWORK_PROXY_FAILURE` |
//! | try-again storm | `isend` / `irecv` | `Ok(None)` ("cannot start now") for this post and the next `eagain_burst` posts | back-pressure only: the ops retry; the run completes correctly |
//! | delay | `test` of a request | `Pending` for the next `delay_polls` tests of that request, then the real answer | slower, never wrong |
//! | truncation | `test` of a finished receive | `Done` with one byte less (or one more for 0) | the op fails (size mismatch) |
//! | dropped message | `isend` | a request that completes at once, the message never sent | the receiver waits: `NRT_TIMEOUT` |
//!
//! The draws come from one [`SplitMix64`] stream seeded by [`FaultPlan::seed`], one draw per
//! decision in call order, so a run with the same calls injects the same faults. Every injected
//! fault is counted ([`FaultTransport::counts`]) and logged at warn level.
//!
//! Seed: none (test scaffolding for the failure rules of docs/design.md §6).

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::progress::net::{NetError, Posted, RequestId, TestOutcome, Transport};

/// One million: rates are parts per million.
pub const PPM: u32 = 1_000_000;

/// Request ids the wrapper makes for dropped sends carry this bit (a wrapped transport must not
/// use it; [`FaultTransport`] fails a post whose id has it).
pub const DROPPED_BIT: RequestId = 1 << 63;

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny deterministic generator, `no_std`, no state
/// but one `u64`. Good enough for choosing faults; not for anything secret.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub const fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `true` with probability `ppm` / 1,000,000 (0 never draws: the stream moves only for
    /// faults that are switched on).
    pub fn chance(&mut self, ppm: u32) -> bool {
        ppm != 0 && (self.next_u64() % u64::from(PPM)) < u64::from(ppm.min(PPM))
    }
}

/// What a [`FaultTransport`] injects: each rate in parts per million of the calls it applies
/// to (0 = never, [`PPM`] = always).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// Seed of the draws.
    pub seed: u64,
    /// A finished request's `test` answers an error.
    pub error_completion: u32,
    /// A post answers "try again" (`Ok(None)`) and starts a storm of `eagain_burst` more.
    pub eagain: u32,
    /// Posts that answer "try again" after the one that started a storm.
    pub eagain_burst: u32,
    /// A request's `test` is held `Pending` for `delay_polls` calls.
    pub delay: u32,
    /// Calls of `test` a delayed request is held for.
    pub delay_polls: u32,
    /// A finished receive reports a wrong size.
    pub truncate: u32,
    /// A send is dropped (reported complete, never sent).
    pub drop: u32,
    /// Injected faults start only after this many posts (lets a run get going first).
    pub after_posts: u64,
}

/// Faults injected so far, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Error completions.
    pub errors: u64,
    /// Posts answered "try again".
    pub eagains: u64,
    /// Requests delayed.
    pub delays: u64,
    /// Receives truncated.
    pub truncations: u64,
    /// Sends dropped.
    pub drops: u64,
}

/// A transport wrapper that injects the faults of a [`FaultPlan`] (see the module docs).
pub struct FaultTransport {
    inner: Box<dyn Transport>,
    plan: FaultPlan,
    rng: SplitMix64,
    name: String,
    posts: u64,
    /// Posts still to answer "try again" in the current storm.
    storm: u32,
    /// Delayed requests and the tests they are still held for.
    delayed: Vec<(RequestId, u32)>,
    /// Receives (their ids), to know which completions may be truncated.
    recvs: Vec<RequestId>,
    /// Next id of a dropped send.
    next_dropped: RequestId,
    /// Dropped sends not tested yet, with their sizes.
    dropped: Vec<(RequestId, u64)>,
    counts: FaultCounts,
}

impl core::fmt::Debug for FaultTransport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FaultTransport")
            .field("name", &self.name)
            .field("plan", &self.plan)
            .field("counts", &self.counts)
            .finish()
    }
}

impl FaultTransport {
    /// Wraps `inner` with `plan`.
    pub fn new(inner: Box<dyn Transport>, plan: FaultPlan) -> Self {
        let name = format!("fault({})", inner.name());
        Self {
            inner,
            plan,
            rng: SplitMix64::new(plan.seed),
            name,
            posts: 0,
            storm: 0,
            delayed: Vec::new(),
            recvs: Vec::new(),
            next_dropped: DROPPED_BIT,
            dropped: Vec::new(),
            counts: FaultCounts::default(),
        }
    }

    /// Faults injected so far.
    pub fn counts(&self) -> FaultCounts {
        self.counts
    }

    fn armed(&self) -> bool {
        self.posts > self.plan.after_posts
    }

    /// A "try again" for this post? Starts or continues a storm.
    fn eagain(&mut self) -> bool {
        if !self.armed() {
            return false;
        }
        if self.storm > 0 {
            self.storm -= 1;
            self.counts.eagains += 1;
            return true;
        }
        if self.rng.chance(self.plan.eagain) {
            self.storm = self.plan.eagain_burst;
            self.counts.eagains += 1;
            log::warn!(
                "{}: injected try-again storm ({} posts)",
                self.name,
                self.storm + 1
            );
            return true;
        }
        false
    }

    fn checked(&self, p: Option<Posted>) -> Result<Option<Posted>, NetError> {
        match p {
            Some(p) if p.request & DROPPED_BIT != 0 => Err(NetError::invalid(
                None,
                format!(
                    "{}: the wrapped transport used request id bit 63",
                    self.name
                ),
            )),
            p => Ok(p),
        }
    }
}

impl crate::progress::forward::TransportWrapper for FaultTransport {
    fn inner(&self) -> &dyn Transport {
        &*self.inner
    }

    fn inner_mut(&mut self) -> &mut dyn Transport {
        &mut *self.inner
    }

    fn name(&self) -> &str {
        &self.name
    }

    unsafe fn isend(
        &mut self,
        peer: u32,
        buf: *const u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        self.posts += 1;
        if self.eagain() {
            return Ok(None);
        }
        if self.armed() && self.rng.chance(self.plan.drop) {
            self.counts.drops += 1;
            let request = self.next_dropped;
            self.next_dropped += 1;
            self.dropped.push((request, size));
            log::warn!(
                "{}: injected drop of a {size}-byte send to peer {peer} (tag {tag:#x})",
                self.name
            );
            return Ok(Some(Posted {
                request,
                payload_copied: true,
            }));
        }
        // SAFETY: forwarded under this function's contract.
        let p = unsafe { self.inner.isend(peer, buf, size, tag) }?;
        self.checked(p)
    }

    unsafe fn irecv(
        &mut self,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        self.posts += 1;
        if self.eagain() {
            return Ok(None);
        }
        // SAFETY: forwarded under this function's contract.
        let p = unsafe { self.inner.irecv(peer, buf, size, tag) }?;
        let p = self.checked(p)?;
        if let Some(p) = p {
            if self.plan.truncate != 0 {
                self.recvs.push(p.request);
            }
        }
        Ok(p)
    }

    fn test(&mut self, request: RequestId) -> Result<TestOutcome, NetError> {
        if request & DROPPED_BIT != 0 {
            // A dropped send: "sent" as far as the sender knows.
            return match self.dropped.iter().position(|d| d.0 == request) {
                Some(i) => Ok(TestOutcome::Done {
                    size: self.dropped.swap_remove(i).1,
                }),
                None => Err(NetError::invalid(None, "unknown request")),
            };
        }
        if let Some(i) = self.delayed.iter().position(|d| d.0 == request) {
            if self.delayed[i].1 > 0 {
                self.delayed[i].1 -= 1;
                return Ok(TestOutcome::Pending);
            }
            self.delayed.swap_remove(i);
        } else if self.armed() && self.rng.chance(self.plan.delay) && self.plan.delay_polls > 0 {
            self.counts.delays += 1;
            self.delayed.push((request, self.plan.delay_polls - 1));
            return Ok(TestOutcome::Pending);
        }
        let out = self.inner.test(request);
        let was_recv = match self.recvs.iter().position(|&r| r == request) {
            Some(i) if !matches!(out, Ok(TestOutcome::Pending)) => {
                self.recvs.swap_remove(i);
                true
            }
            Some(_) => false,
            None => false,
        };
        match out {
            Ok(TestOutcome::Done { size }) => {
                if self.armed() && self.rng.chance(self.plan.error_completion) {
                    self.counts.errors += 1;
                    log::warn!(
                        "{}: injected error completion of request {request:#x}",
                        self.name
                    );
                    return Err(NetError::failure(None, "injected error completion"));
                }
                if was_recv && self.armed() && self.rng.chance(self.plan.truncate) {
                    self.counts.truncations += 1;
                    let wrong = if size > 0 { size - 1 } else { 1 };
                    log::warn!(
                        "{}: injected truncation of receive {request:#x} ({size} => {wrong} bytes)",
                        self.name
                    );
                    return Ok(TestOutcome::Done { size: wrong });
                }
                Ok(TestOutcome::Done { size })
            }
            other => other,
        }
    }

    fn cancel(&mut self, request: RequestId) -> Result<(), NetError> {
        if request & DROPPED_BIT != 0 {
            // Finished already: its test answers Done.
            return Ok(());
        }
        self.delayed.retain(|d| d.0 != request);
        self.inner.cancel(request)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
