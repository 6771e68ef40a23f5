//! Group barriers over the bootstrap connections: a non-blocking barrier among a registered
//! subset of the ranks (the host leaders of a [`crate::HostBarrier`]), relayed by the root.
//!
//! ```text
//!   member leaf ── GroupArrive{group, gen} ──► root    counts, per group, each member's gen
//!   member leaf ◄── GroupRelease{group, gen} ── root    once every member reached gen
//! ```
//!
//! Groups are numbered in registration order ([`Bootstrap::register_group`]): every rank
//! registers the same groups in the same order (members or not), so the ids agree without a
//! message. The root relays for every group, whether or not it is a member.
//!
//! Seed: none (the seed's processes meet in one barrier, §3 "Considerations"); docs/design.md §4.

use crate::barrier::reached;
use crate::wire::Frame;
use crate::*;

/// A registered group barrier (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupId(pub u32);

/// One group's state on one rank.
#[derive(Debug)]
pub(crate) struct GroupState {
    /// The member ranks, ascending, distinct.
    pub(crate) members: Vec<u32>,
    /// Root: the last generation each member arrived at (by member index). A leaf keeps only
    /// its own entry up to date.
    pub(crate) arrived: Vec<u32>,
    /// The highest generation released.
    pub(crate) released: u32,
}

impl GroupState {
    fn index(&self, rank: u32) -> Option<usize> {
        self.members.binary_search(&rank).ok()
    }
}

impl Bootstrap {
    /// Registers a group barrier among `members` (ranks, ascending and distinct) and returns
    /// its id. Purely local (no message): every rank must register the same groups in the same
    /// order, members or not, and before any member starts a generation of it (a collective
    /// call such as an all-gather after the registration orders that).
    ///
    /// # Errors
    /// [`BootstrapError::Config`] for an empty, unsorted or out-of-range member list; the
    /// sticky failure.
    pub fn register_group(&mut self, members: &[u32]) -> Result<GroupId, BootstrapError> {
        self.check("register_group")?;
        if members.is_empty()
            || members.windows(2).any(|w| w[0] >= w[1])
            || members.iter().any(|&m| m >= self.nranks)
        {
            return Err(BootstrapError::Config(format!(
                "group members {members:?}: need distinct ascending ranks < {}",
                self.nranks
            )));
        }
        let id = GroupId(self.groups.len() as u32);
        self.groups.push(GroupState {
            members: members.to_vec(),
            arrived: vec![0; members.len()],
            released: 0,
        });
        Ok(id)
    }

    /// Starts this rank's next generation of group barrier `group` (non-blocking); poll the
    /// ticket with [`Bootstrap::group_barrier_poll`] until it answers `true` before starting
    /// another one.
    ///
    /// # Errors
    /// The sticky failure; [`BootstrapError::Config`] for an unknown group, a rank that is not
    /// a member, or a previous generation that has not passed.
    pub fn group_barrier_start(&mut self, group: GroupId) -> Result<BarrierTicket, BootstrapError> {
        self.check("group barrier")?;
        let rank = self.rank;
        let g = self.group_mut(group)?;
        let Some(i) = g.index(rank) else {
            return Err(BootstrapError::Config(format!(
                "rank {rank} is not a member of group barrier {} ({:?})",
                group.0, g.members
            )));
        };
        if g.arrived[i] != g.released {
            return Err(BootstrapError::Config(format!(
                "rank {rank}: group barrier {} started while generation {} has not passed",
                group.0, g.arrived[i]
            )));
        }
        let gen = g.arrived[i].wrapping_add(1);
        g.arrived[i] = gen;
        if let Role::Leaf { conn, .. } = &mut self.role {
            conn.queue(&Frame::GroupArrive {
                group: group.0,
                gen,
            });
        }
        // A failure is sticky and reported by the poll.
        let _ = self.pump();
        Ok(BarrierTicket(gen))
    }

    /// `Ok(true)` once every member of `group` has arrived at `ticket`'s generation
    /// (non-blocking: moves the connections' bytes once). A released generation stays passed.
    ///
    /// # Errors
    /// The sticky failure; an unknown group; a lost peer or an abort; the root left.
    pub fn group_barrier_poll(
        &mut self,
        group: GroupId,
        ticket: BarrierTicket,
    ) -> Result<bool, BootstrapError> {
        if reached(self.group_mut(group)?.released, ticket.0) {
            return Ok(true);
        }
        let r = self.pump();
        if reached(self.group_mut(group)?.released, ticket.0) {
            return Ok(true);
        }
        r?;
        if self.root_left() {
            let e = BootstrapError::Closed {
                rank: self.rank,
                what: format!(
                    "group barrier {} generation {}: the root left",
                    group.0, ticket.0
                ),
            };
            return Err(self.fail(e));
        }
        Ok(false)
    }

    /// Moves the connections' bytes once and reports whether the bootstrap is still whole
    /// (non-blocking): for a thread that waits on something else (a [`crate::HostBarrier`]'s
    /// shared memory) and must notice a lost peer.
    ///
    /// # Errors
    /// The sticky failure; a lost peer or an abort; the root left.
    pub fn check_alive(&mut self) -> Result<(), BootstrapError> {
        self.pump()?;
        if self.root_left() {
            let e = BootstrapError::Closed {
                rank: self.rank,
                what: "the root closed its bootstrap".to_owned(),
            };
            return Err(self.fail(e));
        }
        Ok(())
    }

    fn group_mut(&mut self, group: GroupId) -> Result<&mut GroupState, BootstrapError> {
        let n = self.groups.len();
        self.groups.get_mut(group.0 as usize).ok_or_else(|| {
            BootstrapError::Config(format!(
                "group barrier {} not registered ({n} are)",
                group.0
            ))
        })
    }
}

/// Root: `GroupArrive{group, gen}` from rank `from`.
pub(crate) fn root_group_arrive(
    groups: &mut [GroupState],
    me: u32,
    from: u32,
    group: u32,
    gen: u32,
) -> Result<(), BootstrapError> {
    let bad = |why: String| BootstrapError::Protocol {
        rank: me,
        message: format!("GroupArrive{{group {group}, gen {gen}}} from rank {from}: {why}"),
    };
    let n = groups.len();
    let g = groups
        .get_mut(group as usize)
        .ok_or_else(|| bad(format!("only {n} groups registered on the root")))?;
    let i = g
        .index(from)
        .ok_or_else(|| bad(format!("not a member of {:?}", g.members)))?;
    if gen != g.arrived[i].wrapping_add(1) {
        return Err(bad(format!(
            "expected generation {}",
            g.arrived[i].wrapping_add(1)
        )));
    }
    g.arrived[i] = gen;
    Ok(())
}

/// Leaf: `GroupRelease{group, gen}` from the root.
pub(crate) fn leaf_group_release(
    groups: &mut [GroupState],
    me: u32,
    group: u32,
    gen: u32,
) -> Result<(), BootstrapError> {
    let bad = |why: &str| BootstrapError::Protocol {
        rank: me,
        message: format!("GroupRelease{{group {group}, gen {gen}}} from the root: {why}"),
    };
    let g = groups
        .get_mut(group as usize)
        .ok_or_else(|| bad("group not registered here"))?;
    let Some(i) = g.index(me) else {
        return Err(bad("this rank is not a member"));
    };
    if gen != g.released.wrapping_add(1) || !reached(g.arrived[i], gen) {
        return Err(bad("not the next generation this rank arrived at"));
    }
    g.released = gen;
    Ok(())
}

impl Bootstrap {
    /// Root: releases every group generation every member has reached, telling the member
    /// leaves; fails when a member left before arriving at a generation others wait on.
    pub(crate) fn release_groups(&mut self) -> Result<(), BootstrapError> {
        let me = self.rank;
        let Role::Root { peers } = &mut self.role else {
            return Ok(());
        };
        for (id, g) in self.groups.iter_mut().enumerate() {
            loop {
                let next = g.released.wrapping_add(1);
                if !g.arrived.iter().all(|&a| reached(a, next)) {
                    if g.arrived.iter().any(|&a| reached(a, next)) {
                        for (i, &m) in g.members.iter().enumerate() {
                            let left = peers
                                .get(m as usize)
                                .and_then(Option::as_ref)
                                .is_some_and(|p| p.left);
                            if left && !reached(g.arrived[i], next) {
                                return Err(BootstrapError::Closed {
                                    rank: me,
                                    what: format!(
                                        "group barrier {id} generation {next}: rank {m} closed \
                                         its bootstrap before arriving"
                                    ),
                                });
                            }
                        }
                    }
                    break;
                }
                g.released = next;
                for &m in &g.members {
                    if let Some(Some(p)) = peers.get_mut(m as usize) {
                        if !p.left {
                            p.conn.queue(&Frame::GroupRelease {
                                group: id as u32,
                                gen: next,
                            });
                            // Errors surface on the next pump.
                            let _ = p.conn.flush();
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
