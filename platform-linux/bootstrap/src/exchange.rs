//! Moving frames ([`Bootstrap::pump`]), bounded waits over them, and the all-gather.

use crate::conn::BoundedWait;
use crate::wire::Frame;
use crate::*;

impl Bootstrap {
    /// Moves bytes both ways on every connection and handles what arrived; on the root, releases
    /// barrier generations every rank has reached. Never blocks.
    pub(crate) fn pump(&mut self) -> Result<(), BootstrapError> {
        self.check("bootstrap call")?;
        let r = match &mut self.role {
            Role::Root { .. } => self.pump_root(),
            Role::Leaf { .. } => self.pump_leaf(),
        };
        r.map_err(|e| self.fail(e))
    }

    /// Blocks (bounded) until `done` answers true, pumping in between.
    pub(crate) fn wait_for(
        &mut self,
        what: &dyn Fn(&Self) -> String,
        mut done: impl FnMut(&mut Self) -> Result<bool, BootstrapError>,
    ) -> Result<(), BootstrapError> {
        let mut waiter = BoundedWait::new(self.timeout, self.warn_interval);
        loop {
            if done(self)? {
                return Ok(());
            }
            let (rank, n) = (self.rank, self.nranks);
            if let Err(waited) = waiter.tick(rank, n, || what(self)) {
                let e = BootstrapError::Timeout {
                    rank,
                    what: what(self),
                    waited,
                };
                return Err(self.fail(e));
            }
        }
    }

    /// Writes every queued byte (bounded by the timeout).
    pub(crate) fn flush_all(&mut self, what: &str) -> Result<(), BootstrapError> {
        let what = what.to_owned();
        self.wait_for(&|_| what.clone(), |b| {
            b.pump()?;
            Ok(match &b.role {
                Role::Root { peers } => peers
                    .iter()
                    .flatten()
                    .all(|p| p.left || p.conn.unsent() == 0),
                Role::Leaf { conn, .. } => conn.unsent() == 0,
            })
        })
    }

    /// Which ranks have not contributed to the all-gather in progress (root), for messages.
    pub(crate) fn missing_gather(&self) -> String {
        match &self.role {
            Role::Root { peers } => {
                let m: Vec<usize> = peers
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.as_ref().is_some_and(|p| p.gather.is_none()))
                    .map(|(r, _)| r)
                    .collect();
                format!("ranks {m:?} to contribute")
            }
            Role::Leaf { .. } => "the root to send the result".to_owned(),
        }
    }

    /// All-gather: every rank contributes `blob` (any length up to 16 MiB / nranks in all) and
    /// gets every rank's contribution, by rank. Every rank must call it, in the same order as
    /// the other collective calls. Blocks at most the timeout.
    ///
    /// # Errors
    /// The sticky failure; [`BootstrapError::Timeout`] (the root names the ranks that have not
    /// contributed); a lost peer; an abort; a blob too large for one frame
    /// ([`BootstrapError::Config`]).
    pub fn all_gather(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        self.check("all-gather")?;
        let total = blob
            .len()
            .saturating_add(8)
            .saturating_mul(self.nranks as usize);
        if total > MAX_FRAME as usize - 64 {
            return Err(BootstrapError::Config(format!(
                "all-gather of {} bytes per rank × {} ranks exceeds the {MAX_FRAME}-byte frame \
                 limit",
                blob.len(),
                self.nranks
            )));
        }
        let seq = self.gather_seq.wrapping_add(1);
        let result = match &mut self.role {
            Role::Leaf { conn, .. } => {
                conn.queue(&Frame::Gather {
                    seq,
                    blob: blob.to_vec(),
                });
                let what = move |b: &Self| format!("all-gather {seq}: {}", b.missing_gather());
                self.wait_for(&what, |b| {
                    b.pump()?;
                    if let Role::Leaf {
                        gathered: Some(_), ..
                    } = &b.role
                    {
                        return Ok(true);
                    }
                    if b.root_left() {
                        return Err(b.fail(BootstrapError::Closed {
                            rank: b.rank,
                            what: format!("all-gather {seq}: the root left"),
                        }));
                    }
                    Ok(false)
                })?;
                let Role::Leaf { gathered, .. } = &mut self.role else {
                    unreachable!()
                };
                gathered.take().map(|(_, blobs)| blobs).unwrap_or_default()
            }
            Role::Root { .. } => {
                let what = move |b: &Self| format!("all-gather {seq}: {}", b.missing_gather());
                self.wait_for(&what, |b| {
                    b.pump()?;
                    let Role::Root { peers } = &b.role else {
                        unreachable!()
                    };
                    if let Some((r, _)) = peers
                        .iter()
                        .enumerate()
                        .find(|(_, p)| p.as_ref().is_some_and(|p| p.left && p.gather.is_none()))
                    {
                        return Err(b.fail(BootstrapError::Closed {
                            rank: b.rank,
                            what: format!("all-gather {seq}: rank {r} closed its bootstrap"),
                        }));
                    }
                    Ok(peers.iter().flatten().all(|p| p.gather.is_some()))
                })?;
                let Role::Root { peers } = &mut self.role else {
                    unreachable!()
                };
                let mut blobs = Vec::with_capacity(peers.len());
                blobs.push(blob.to_vec());
                for p in peers.iter_mut().flatten() {
                    blobs.push(p.gather.take().unwrap_or_default());
                }
                let f = Frame::Gathered {
                    seq,
                    blobs: blobs.clone(),
                };
                for p in peers.iter_mut().flatten() {
                    p.conn.queue(&f);
                }
                self.gather_seq = seq;
                self.flush_all("the all-gather result to reach every rank")?;
                return Ok(blobs);
            }
        };
        self.gather_seq = seq;
        Ok(result)
    }

    /// All-gather of a set-up step's outcome: every rank contributes its result (a payload or
    /// its error message) and learns whether every other rank succeeded, so that a step that
    /// fails on one rank fails on every rank at once, naming it, instead of leaving the others
    /// to time out at the next step. Every rank must call it, as [`Bootstrap::all_gather`].
    ///
    /// Returns every rank's payload (this rank's too, or empty when `mine` is an error), or
    /// the lowest other rank that failed and its message ([`StepFailed`]).
    ///
    /// # Errors
    /// As [`Bootstrap::all_gather`].
    pub fn all_gather_outcome(
        &mut self,
        mine: Result<&[u8], &str>,
    ) -> Result<Result<Vec<Vec<u8>>, StepFailed>, BootstrapError> {
        const OK: u8 = 1;
        const FAILED: u8 = 0;
        let blob = match mine {
            Ok(p) => [&[OK][..], p].concat(),
            Err(m) => [&[FAILED][..], m.as_bytes()].concat(),
        };
        let blobs = self.all_gather(&blob)?;
        for (r, b) in blobs.iter().enumerate() {
            if b.first() != Some(&OK) && r as u32 != self.rank {
                return Ok(Err(StepFailed {
                    rank: r as u32,
                    message: String::from_utf8_lossy(b.get(1..).unwrap_or_default()).into_owned(),
                }));
            }
        }
        Ok(Ok(blobs
            .into_iter()
            .map(|mut b| if b.is_empty() { b } else { b.split_off(1) })
            .collect()))
    }
}

/// Another rank's failed set-up step ([`Bootstrap::all_gather_outcome`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepFailed {
    /// The failed rank (the lowest, when several failed).
    pub rank: u32,
    /// Its error message.
    pub message: String,
}
