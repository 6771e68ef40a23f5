//! The tuner's default constants per kind of link a collective's messages take ([`LinkKind`]),
//! as NCCL's tuning model keeps a latency per hardware path (`hwLat[NCCL_HW_NVLINK / PCI /
//! NET]` in `graph/tuning.cc`): a message between threads of one process, between processes
//! through shared memory, and over a network socket cost different amounts, and the cheapest
//! algorithm differs with them (4 ranks, 8 B: direct's one step of 3 messages is the cheapest
//! in memory, recursive doubling's 2 steps of 1 message over tcp, where every message is a
//! system call on each side).
//!
//! Every constant here was fitted by `proxy-perf --tune` (least squares on the relative
//! errors of direct, recursive doubling, Rabenseifner and ring all-reduce, 8 B – 1 MiB) on this
//! project's 2-CPU VM; BENCHMARKS.md has the runs. They are defaults that pick sensibly where
//! no calibration was made, not a prediction for other machines: a calibration file
//! (`NEURON_RT_PROXY_TUNE_FILE`) replaces them.

use super::CostModel;

/// The kind of link a collective's messages take, which selects the tuner's default constants
/// ([`LinkKind::default_cost_model`]) when no calibration file gives them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// Threads of one process (the in-memory transport): a message is a ring push and a poll.
    #[default]
    Memory,
    /// Processes of one host through shared memory (libfabric `shm`): a message is a copy
    /// through a shared region, or a cross-memory attach for large ones.
    SharedMemory,
    /// A network socket or NIC (libfabric `tcp`, and any provider that is not `shm`): a
    /// message is a system call on each side and a trip through the kernel's stack.
    Network,
}

/// [`LinkKind::Memory`]'s constants, fitted by hand to the in-process measurements (proxy-perf,
/// caller + polled): `α + 2o` ≈ the 2-rank 8 B all-reduce (3.2–4 µs, one step, one entry each
/// way); `α + 6o` ≈ the 4-rank 8 B direct all-reduce (9 µs); `β = γ` from the 2-rank 1 MiB ring
/// all-reduce (57 µs for 1 MiB sent and 0.5 MiB reduced: 35 ps/B, memcpy at about 28 GB/s).
pub const MEMORY_COST_MODEL: CostModel = CostModel {
    step_ns: 2_000,
    entry_ns: 1_000,
    byte_ps: 35,
    reduce_ps: 35,
};

/// [`LinkKind::SharedMemory`]'s constants: `proxy-perf --tune` over libfabric `shm` (CMA for
/// large messages), 4 rank processes pinned two to a CPU on 2 CPUs, 8 B – 1 MiB, each time
/// modelled with the crowding it ran under (the critical path times 2; fit α 1028 ns, o 559
/// ns, β 126 ps/B, γ 31 ps/B, rms error 14 %, 2026-12-05). γ is [`MEMORY_COST_MODEL`]'s: the
/// reduction runs on the same CPUs as in memory.
pub const SHARED_MEMORY_COST_MODEL: CostModel = CostModel {
    step_ns: 1_000,
    entry_ns: 560,
    byte_ps: 130,
    reduce_ps: 35,
};

/// [`LinkKind::Network`]'s constants: `proxy-perf --tune` over libfabric `tcp;ofi_rxm` on
/// loopback, 4 rank processes pinned two to a CPU on 2 CPUs, 8 B – 1 MiB, each time modelled
/// with the crowding it ran under (the critical path times 2; fit α 4.35 µs, o 2.39 µs, β 307
/// ps/B, γ 49 ps/B, rms error 14 %, 2026-12-05). A message costs about half a step here: each
/// is a `sendmsg` and a `recvmsg` plus the polls that find it. γ as in
/// [`SHARED_MEMORY_COST_MODEL`]. A real NIC has a smaller `o` and (at 100 Gb/s) a `β` of 80
/// ps/B: calibrate there.
pub const NETWORK_COST_MODEL: CostModel = CostModel {
    step_ns: 4_300,
    entry_ns: 2_400,
    byte_ps: 310,
    reduce_ps: 35,
};

/// The network between hosts when no calibration file gives its constants: what the flat
/// all-reduces pay when ranks span hosts, and the leaders of the hierarchical one
/// ([`LinkKind::default_inter_host_model`]). α and o are the ones `proxy-perf --tune` fitted
/// between two hosts in network namespaces over libfabric `tcp;ofi_rxm` (a veth pair; α 15.4 µs,
/// o 4.7 µs against 4.1 and 1.9 inside a host, 2026-12-05): the messages leave the loopback
/// path for a device and its queues, which cost more. β is a 10 Gbit/s link's (800 ps/B), the
/// common Ethernet between the hosts of a socket provider (the namespaces' link was shaped to
/// 1 Gbit/s and fitted 7578 ps/B); a faster fabric has a smaller β and o: calibrate there. γ as
/// in [`NETWORK_COST_MODEL`] (the reduction runs on the host's CPUs).
pub const BETWEEN_HOSTS_COST_MODEL: CostModel = CostModel {
    step_ns: 15_000,
    entry_ns: 4_700,
    byte_ps: 800,
    reduce_ps: 35,
};

impl LinkKind {
    /// Every kind, in declaration order.
    pub const ALL: [LinkKind; 3] = [LinkKind::Memory, LinkKind::SharedMemory, LinkKind::Network];

    /// The tuner's constants for this kind when no calibration file gives them.
    pub const fn default_cost_model(self) -> CostModel {
        match self {
            LinkKind::Memory => MEMORY_COST_MODEL,
            LinkKind::SharedMemory => SHARED_MEMORY_COST_MODEL,
            LinkKind::Network => NETWORK_COST_MODEL,
        }
    }

    /// The name headers and logs print: `memory`, `shared-memory`, `network`.
    pub const fn name(self) -> &'static str {
        match self {
            LinkKind::Memory => "memory",
            LinkKind::SharedMemory => "shared-memory",
            LinkKind::Network => "network",
        }
    }

    /// The kind [`LinkKind::name`] names (surrounding white space ignored), or `None`.
    pub fn from_name(name: &str) -> Option<LinkKind> {
        LinkKind::ALL.into_iter().find(|k| k.name() == name.trim())
    }

    /// The kind of a libfabric provider's links by its name (`shm` → shared memory, anything
    /// else → network); the in-memory transport is [`LinkKind::Memory`].
    pub fn of_provider(provider: &str) -> LinkKind {
        if provider.split(';').next().unwrap_or("").trim() == "shm" {
            LinkKind::SharedMemory
        } else {
            LinkKind::Network
        }
    }

    /// The tuner's constants for the link between hosts when ranks span hosts over this kind
    /// and no calibration file gives them: [`BETWEEN_HOSTS_COST_MODEL`] for a network (without
    /// it the uncalibrated tuner took the link between hosts as cheap as the host's own path and
    /// never chose the hierarchy, which was the fastest at every size between two namespaces,
    /// BENCHMARKS.md "Two hosts"); the kind's own constants otherwise (memory and shared
    /// memory do not cross hosts: a host map over them is a test's or the CPU groups').
    pub const fn default_inter_host_model(self) -> CostModel {
        match self {
            LinkKind::Network => BETWEEN_HOSTS_COST_MODEL,
            k => k.default_cost_model(),
        }
    }

    /// `true` when `m` is one of the kinds' defaults, within or between hosts (the tuner then
    /// runs uncalibrated, [`super::why`]).
    pub fn is_default(m: &CostModel) -> bool {
        LinkKind::ALL
            .iter()
            .any(|k| k.default_cost_model() == *m || k.default_inter_host_model() == *m)
    }
}
