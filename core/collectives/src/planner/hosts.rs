//! Which ranks share a host ([`HostMap`]), and the groups the hierarchical all-reduce works
//! in ([`PlanParams::groups`]): the hosts, or on one crowded host the ranks that share a CPU.

use super::{tuner, PlanParams};

/// Most hosts a [`HostMap`] describes.
pub const MAX_HOSTS: usize = 64;

/// Which ranks share a host: host `h` holds the `sizes[h]` ranks after those of hosts
/// `0..h` (contiguous ranks per host, the sizes may differ), as a bootstrap that starts ranks
/// host by host numbers them. Copy, fixed size (the plan parameters are `Copy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostMap {
    hosts: u32,
    sizes: [u32; MAX_HOSTS],
}

impl HostMap {
    /// No host map (every rank its own host).
    pub const NONE: HostMap = HostMap {
        hosts: 0,
        sizes: [0; MAX_HOSTS],
    };

    /// A map of `sizes.len()` hosts, host `h` with `sizes[h]` ranks; `None` when there are no
    /// hosts, more than [`MAX_HOSTS`], or a host without ranks.
    pub fn new(sizes: &[u32]) -> Option<Self> {
        if sizes.is_empty() || sizes.len() > MAX_HOSTS || sizes.contains(&0) {
            return None;
        }
        let mut m = Self::NONE;
        m.hosts = sizes.len() as u32;
        m.sizes[..sizes.len()].copy_from_slice(sizes);
        Some(m)
    }

    /// The ranks of each host (empty for [`HostMap::NONE`]).
    pub fn sizes(&self) -> &[u32] {
        &self.sizes[..self.hosts as usize]
    }

    /// `true` for [`HostMap::NONE`].
    pub fn is_none(&self) -> bool {
        self.hosts == 0
    }

    /// Ranks the map holds.
    pub fn ranks(&self) -> u64 {
        self.sizes().iter().map(|&s| u64::from(s)).sum()
    }

    /// `(host, first rank of the host, ranks of the host)` of `rank`; with no map the rank is
    /// its own host. `None` past the map's ranks.
    pub fn host_of(&self, rank: u32) -> Option<(u32, u32, u32)> {
        if self.is_none() {
            return Some((rank, rank, 1));
        }
        let mut first = 0u32;
        for (h, &s) in self.sizes().iter().enumerate() {
            if rank < first + s {
                return Some((h as u32, first, s));
            }
            first += s;
        }
        None
    }

    /// `true` when ranks span two or more hosts and some host holds two or more: where
    /// [`crate::planner::Algorithm::Hierarchical`] differs from a flat algorithm.
    pub fn spans_hosts(&self) -> bool {
        self.hosts >= 2 && self.sizes().iter().any(|&s| s >= 2)
    }

    /// The groups of `ranks` ranks whose driving threads are pinned in consecutive blocks over
    /// `cpus` CPUs, rank `t` on CPU `⌊t · cpus / ranks⌋` (4 on 2: 2, 2; 5 on 2: 3, 2; 6 on 4:
    /// 2, 1, 2, 1), as [`PlanParams::cpu_groups`] takes them; `None` unless the ranks
    /// outnumber the CPUs and there are 2 CPUs or more (and at most [`MAX_HOSTS`]).
    pub fn cpu_blocks(ranks: u32, cpus: u32) -> Option<HostMap> {
        if cpus < 2 || ranks <= cpus || cpus as usize > MAX_HOSTS {
            return None;
        }
        let mut m = HostMap::NONE;
        m.hosts = cpus;
        for t in 0..u64::from(ranks) {
            m.sizes[(t * u64::from(cpus) / u64::from(ranks)) as usize] += 1;
        }
        Some(m)
    }
}

impl Default for HostMap {
    fn default() -> Self {
        Self::NONE
    }
}

impl PlanParams {
    /// The groups [`crate::planner::Algorithm::Hierarchical`] gathers into a leader,
    /// all-reduces among the leaders of and broadcasts in: the host map when the ranks span
    /// hosts; on one crowded host ([`tuner::crowding`]) whose ranks' CPUs are known
    /// ([`PlanParams::cpu_groups`], two groups or more, covering every rank) those groups, so
    /// that a message between CPUs is one between leaders (measured on 2 CPUs, 4 tcp processes
    /// at 8 B: 28–31 µs in two groups of 2, 32–34 with one leader; BENCHMARKS.md); else the
    /// host map.
    pub fn groups(&self) -> HostMap {
        let g = &self.cpu_groups;
        let one_host = self.hosts.sizes().len() == 1;
        if one_host
            && g.sizes().len() >= 2
            && g.ranks() == u64::from(self.nranks)
            && tuner::crowding(self).is_some()
        {
            *g
        } else {
            self.hosts
        }
    }

    /// The constants the hierarchy's leaders' phase is costed and picked under:
    /// [`PlanParams::inter_host_model`] when the ranks span hosts (the leaders' messages cross
    /// them), else [`PlanParams::cost_model`] (groups of one host share its link).
    pub fn leaders_model(&self) -> tuner::CostModel {
        if self.hosts.spans_hosts() {
            self.inter_host_model
        } else {
            self.cost_model
        }
    }
}
