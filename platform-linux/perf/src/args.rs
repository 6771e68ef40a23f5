//! `proxy-perf`'s command line, with nccl-tests' conventions (`-b -e -f -i -n -w -c -d -o -r`).

use clap::{Parser, ValueEnum};
use proxy_collectives::planner::{
    tuner, Algorithm, Collective, DataType, HostMap, RedOp, DEFAULT_CHUNK_BYTES,
};

/// The collective, as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CollArg {
    /// All-reduce (ring: reduce-scatter then all-gather).
    AllReduce,
    /// All-gather.
    AllGather,
    /// Reduce-scatter.
    ReduceScatter,
    /// Broadcast from `--root`.
    Broadcast,
    /// Rank r sends to r+1 and receives from r−1.
    SendRecv,
    /// All-to-all (pairwise).
    AllToAll,
}

impl From<CollArg> for Collective {
    fn from(c: CollArg) -> Self {
        match c {
            CollArg::AllReduce => Collective::AllReduce,
            CollArg::AllGather => Collective::AllGather,
            CollArg::ReduceScatter => Collective::ReduceScatter,
            CollArg::Broadcast => Collective::Broadcast,
            CollArg::SendRecv => Collective::SendRecv,
            CollArg::AllToAll => Collective::AllToAll,
        }
    }
}

/// The transport between ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    /// In-process transport: every rank is a thread group of this process.
    Mem,
    /// libfabric (EFA on AWS; shm and tcp here): one process per rank (needs a binary built
    /// with the `libfabric` feature).
    Libfabric,
    /// The engine's own shared-memory transport (`proxy-shm`): one process per rank, all on
    /// this host (launched like `libfabric`; every build, no libfabric needed).
    Shm,
}

impl TransportArg {
    /// Whether the ranks are processes (launched, or joined through launcher variables).
    pub fn is_processes(self) -> bool {
        self != Self::Mem
    }
}

/// The libfabric provider, as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProviderArg {
    /// `tcp;ofi_rxm` (sockets; on this machine bound to the loopback interface).
    Tcp,
    /// `shm` (shared memory between the processes of one host).
    Shm,
    /// `efa` (AWS Elastic Fabric Adapter).
    Efa,
}

impl ProviderArg {
    /// The libfabric provider name (`fi_info` spelling) this choice stands for.
    pub fn fi_name(self) -> &'static str {
        match self {
            Self::Tcp => "tcp;ofi_rxm",
            Self::Shm => "shm",
            Self::Efa => "efa",
        }
    }
}

/// The algorithm, as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AlgoArg {
    /// The planner's tuner: the cheapest algorithm by its cost model for the collective,
    /// size and ranks (`proxy_collectives::planner::tuner`).
    Auto,
    /// Ring (bandwidth).
    Ring,
    /// Direct exchange (latency: one network step, `n − 1` messages per rank).
    Direct,
    /// Recursive doubling (all-reduce, all-gather: `log2 n` steps).
    RecursiveDoubling,
    /// Rabenseifner (all-reduce: reduce-scatter by halving, all-gather by doubling).
    Rabenseifner,
    /// Recursive halving (reduce-scatter).
    RecursiveHalving,
    /// Bruck (all-gather, all-to-all: `⌈log2 n⌉` steps).
    Bruck,
    /// Binomial tree (broadcast).
    Binomial,
    /// Scatter down the binomial tree, then all-gather around the ring (broadcast).
    ScatterAllgather,
    /// All-reduce over hosts (`--hosts`): reduce to each host's leader, all-reduce among the
    /// leaders, broadcast inside each host.
    Hierarchical,
}

impl From<AlgoArg> for Algorithm {
    fn from(a: AlgoArg) -> Self {
        match a {
            AlgoArg::Auto => Algorithm::Auto,
            AlgoArg::Ring => Algorithm::Ring,
            AlgoArg::Direct => Algorithm::Direct,
            AlgoArg::RecursiveDoubling => Algorithm::RecursiveDoubling,
            AlgoArg::Rabenseifner => Algorithm::Rabenseifner,
            AlgoArg::RecursiveHalving => Algorithm::RecursiveHalving,
            AlgoArg::Bruck => Algorithm::Bruck,
            AlgoArg::Binomial => Algorithm::Binomial,
            AlgoArg::ScatterAllgather => Algorithm::ScatterAllgather,
            AlgoArg::Hierarchical => Algorithm::Hierarchical,
        }
    }
}

/// `--hosts`: ranks per host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostsArg(pub HostMap);

/// Parses `--hosts` (`4,4`, `3,1,2`).
///
/// # Errors
/// A message for an empty list, a count that is not a positive number, or too many hosts.
pub fn parse_hosts(s: &str) -> Result<HostsArg, String> {
    let sizes = s
        .split(',')
        .map(|x| x.trim().parse::<u32>().map_err(|e| format!("{x:?}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    HostMap::new(&sizes).map(HostsArg).ok_or_else(|| {
        format!(
            "{s}: ranks per host, each at least 1, at most {} hosts",
            proxy_collectives::planner::MAX_HOSTS
        )
    })
}

/// Parses a byte size with an optional K/M/G suffix (powers of 1024; `B` / `iB` accepted).
///
/// # Errors
/// A message for an empty, malformed or overflowing size.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, mul) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (e.g. 8, 64K, 16M, 1G)"))?;
    n.checked_mul(mul)
        .ok_or_else(|| format!("'{s}' is too large"))
}

fn parse_dtype(s: &str) -> Result<DataType, String> {
    DataType::from_name(s).ok_or_else(|| {
        format!("unknown type '{s}' (float, double, half, bfloat16, int32, uint8; or f32, f64, f16, bf16, i32, u8)")
    })
}

fn parse_op(s: &str) -> Result<RedOp, String> {
    RedOp::from_name(s).ok_or_else(|| format!("unknown op '{s}' (sum, prod, min, max)"))
}

/// `--streams` default (chosen by measurement on this machine, BENCHMARKS.md).
pub const DEFAULT_STREAMS: u32 = 1;
/// `--blocks` default (chosen by measurement on this machine, BENCHMARKS.md).
pub const DEFAULT_BLOCKS: u32 = 1;
/// `--early-recv` default (0 = off; chosen by measurement on this machine, BENCHMARKS.md).
pub const DEFAULT_EARLY_RECV: u32 = 0;
/// `--early-send` default (`on` / `off`; chosen by measurement on this machine, BENCHMARKS.md).
pub const DEFAULT_EARLY_SEND: &str = "off";
/// `--idx-wrap` default (0 = no wrap).
pub const DEFAULT_IDX_WRAP: u32 = 0;
/// `--credits` default (0 = the progress half's default).
pub const DEFAULT_CREDITS: u32 = 0;
/// `--min-time` default in ms: the shortest timed loop of a calibrated count (no `-n`). At
/// 8 B (about 2.5 µs per all-reduce at 2 ranks) that is about 20 000 iterations, more than the
/// `-n 10000` of a steady-state reference run.
pub const DEFAULT_MIN_TIME_MS: u32 = 50;
/// The fewest timed iterations of a calibrated count (nccl-tests' default `-n`).
pub const MIN_ITERS: u32 = 20;
/// The most timed iterations of a calibrated count.
pub const MAX_ITERS: u32 = 1_000_000;

/// Parses `--idx-wrap`: 0 (no wrap) or at least 2 (a wrap of 1 leaves no entry to post).
///
/// # Errors
/// A message for 1 or a malformed number.
pub fn parse_idx_wrap(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(1) => Err("1 leaves the device no entry to post: 0 (no wrap) or at least 2".into()),
        Ok(v) => Ok(v),
        Err(_) => Err(format!("'{s}' is not a number")),
    }
}

/// Parses `on` / `off` (also `true` / `false`, `1` / `0`, `yes` / `no`).
///
/// # Errors
/// A message naming the accepted spellings.
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(format!("'{s}' is not on or off")),
    }
}

/// A fault `--inject` can plant (see its help).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultArg {
    /// The rank's device never triggers.
    StallDevice,
    /// The rank's driving thread stops (blocked before its second send post, for three times
    /// the exec timeout and a second, or until the run ends; a rank with fewer sends fails the
    /// run).
    StallRank,
    /// The rank's comm is aborted after its first execution is submitted.
    DropComm,
    /// The rank's process exits after its first execution is submitted (multi-process).
    ExitRank,
    /// The rank's transport reports an error completion.
    ErrorCompletion,
    /// The rank's transport answers "try again" in storms.
    EagainStorm,
}

impl FaultArg {
    /// Every fault with its name.
    pub const ALL: [(&'static str, FaultArg); 6] = [
        ("stall-device", FaultArg::StallDevice),
        ("stall-rank", FaultArg::StallRank),
        ("drop-comm", FaultArg::DropComm),
        ("exit-rank", FaultArg::ExitRank),
        ("error-completion", FaultArg::ErrorCompletion),
        ("eagain-storm", FaultArg::EagainStorm),
    ];

    /// `true` for the faults planted by wrapping the rank's transport (`stall-rank`,
    /// `error-completion`, `eagain-storm`): only the in-process transport of `--transport mem`
    /// without `--progress-lib` is wrapped.
    pub fn wraps_transport(self) -> bool {
        matches!(
            self,
            FaultArg::StallRank | FaultArg::ErrorCompletion | FaultArg::EagainStorm
        )
    }

    /// The fault's name on the command line.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map_or("?", |(n, _)| n)
    }
}

/// `--inject FAULT[:RANK]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inject {
    /// The fault.
    pub fault: FaultArg,
    /// The rank (`None`: the last rank).
    pub rank: Option<u32>,
}

fn parse_inject(s: &str) -> Result<Inject, String> {
    let (name, rank) = match s.split_once(':') {
        Some((n, r)) => (
            n,
            Some(
                r.parse::<u32>()
                    .map_err(|_| format!("'{r}' is not a rank (FAULT[:RANK])"))?,
            ),
        ),
        None => (s, None),
    };
    let fault = FaultArg::ALL
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .ok_or_else(|| {
            let names: Vec<&str> = FaultArg::ALL.iter().map(|(n, _)| *n).collect();
            format!("unknown fault '{name}' ({})", names.join(", "))
        })?;
    Ok(Inject { fault, rank })
}

/// `--driver`: who drives the proxy queues (docs/design.md §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DriverArg {
    /// A worker thread `proxy-<tid>` per proxy queue.
    Thread,
    /// No worker thread: each rank's thread drives its queue while it waits.
    Caller,
}

/// `--device`: how the device emulator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    /// A thread `device-<rank>` per rank.
    Thread,
    /// Polled from the driving thread's hook (one thread per rank in all).
    Polled,
}

/// `--wait`: how a thread of the tool waits for another one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WaitArg {
    /// After a short spin, sleep until rung: every event a waiting thread waits for rings a
    /// bell (`proxy_core::base::bell`: device host writes, in-memory arrivals, barrier
    /// arrivals, the driver's progress). In process only; across processes it means `poll`.
    Sleep,
    /// Spin, yield and nap-poll (no bells): every waiting thread keeps checking (the default).
    Poll,
}

/// `--barrier`: when each rank's device triggers the barrier task of its execution
/// (`proxy_collectives::interpreter::BarrierAt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BarrierArg {
    /// At the launch, with the net triggers (the barrier runs beside the collective).
    Launch,
    /// After the program ran (the ranks meet again after the collective).
    End,
}

impl From<BarrierArg> for proxy_collectives::interpreter::BarrierAt {
    fn from(b: BarrierArg) -> Self {
        match b {
            BarrierArg::End => Self::End,
            BarrierArg::Launch => Self::Launch,
        }
    }
}

/// `proxy-perf`: nccl-tests-style bandwidth and latency of collectives through the whole
/// proxy & progress engine (planner → device emulator → proxy → seam → send/recv ops →
/// transport), every output byte checked.
#[derive(Clone, Debug, Parser)]
#[command(name = "proxy-perf", version, about, long_about = None)]
pub struct Args {
    /// The collective to run.
    #[arg(value_enum)]
    pub collective: CollArg,
    /// Smallest size in bytes (K/M/G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "32M", value_parser = parse_size)]
    pub min_bytes: u64,
    /// Largest size in bytes (K/M/G suffixes).
    #[arg(short = 'e', long = "maxbytes", default_value = "32M", value_parser = parse_size)]
    pub max_bytes: u64,
    /// Multiply the size by this factor between rows (used when `-i` is 0).
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub step_factor: u64,
    /// Add this many bytes between rows (0 = use the factor).
    #[arg(short = 'i', long = "stepbytes", default_value = "0", value_parser = parse_size)]
    pub step_bytes: u64,
    /// Timed iterations per size. Without it the count is calibrated per size (from untimed
    /// batches after the warm-up) so that the timed loop lasts about `--min-time` (at least
    /// 20, at most 1,000,000): small sizes get thousands of iterations, as OSU
    /// and nccl-tests users expect.
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u32>,
    /// With a calibrated count (no `-n`): the shortest timed loop per size and side, in ms.
    #[arg(long = "min-time", value_name = "MS", default_value_t = DEFAULT_MIN_TIME_MS)]
    pub min_time_ms: u32,
    /// Warm-up iterations per size (not timed).
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: u32,
    /// Checked runs per size after the timed ones (0 = no check, `#wrong` prints N/A).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u32,
    /// Data type: float, double, half, bfloat16, int32, uint8 (or f32, f64, f16, bf16, i32, u8).
    #[arg(short = 'd', long = "datatype", default_value = "float", value_parser = parse_dtype)]
    pub dtype: DataType,
    /// Reduction op: sum, prod, min, max.
    #[arg(short = 'o', long = "op", default_value = "sum", value_parser = parse_op)]
    pub op: RedOp,
    /// Root rank (broadcast).
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: u32,
    /// Number of ranks.
    #[arg(long, default_value_t = 2)]
    pub ranks: u32,
    /// Transport between ranks.
    #[arg(long, value_enum, default_value_t = TransportArg::Mem)]
    pub transport: TransportArg,
    /// libfabric provider (with `--transport libfabric`); without it `FI_PROVIDER`, else the
    /// automatic choice (efa, else shm when every rank is on this host, else tcp).
    #[arg(long, value_enum)]
    pub provider: Option<ProviderArg>,
    /// Load the progress half from this library (`libnccom_proxy.so` or another build of its C
    /// ABI) with `dlopen`: comms are created through its init half and every network task
    /// calls its seam. Without it the progress half is the in-process one.
    #[arg(long, value_name = "PATH")]
    pub progress_lib: Option<std::path::PathBuf>,
    /// One execution whose block schedule repeats the collective's block `-n` times (the ops
    /// are recycled between iterations) instead of one execution per iteration.
    #[arg(long = "loop")]
    pub loop_mode: bool,
    /// When each rank's device triggers its execution's barrier task: `launch` (the default:
    /// with the net triggers, as the seed gates its barrier task at the net stage; the barrier
    /// runs beside the collective and passes once every rank's device launched) or `end`
    /// (after its program ran: the barrier passes once every rank's collective ended, a second
    /// meeting of the ranks). The device waits for barrier-done at the end either way.
    #[arg(long, value_enum, default_value_t = BarrierArg::Launch)]
    pub barrier: BarrierArg,
    /// Algorithm: auto (the planner's tuner) or one by name. With auto,
    /// `NEURON_RT_PROXY_ALGO_<COLLECTIVE>` (e.g. `NEURON_RT_PROXY_ALGO_ALL_REDUCE=bruck`)
    /// names the algorithm of that collective instead.
    #[arg(long, value_enum, default_value_t = AlgoArg::Auto)]
    pub algo: AlgoArg,
    /// Ranks per host, comma-separated (`--hosts 4,4` or uneven `3,1,2`; they add up to
    /// `--ranks`; ranks numbered host by host): the host map of the hierarchical all-reduce and
    /// of the tuner, which then costs the flat algorithms at the inter-host constants and may
    /// pick `hierarchical`. In process the hosts are pretend (the same memory), for testing.
    #[arg(long, value_name = "N,N,...", value_parser = parse_hosts)]
    pub hosts: Option<HostsArg>,
    /// Largest FIFO entry (pipeline chunk) in bytes.
    #[arg(long, default_value_t = DEFAULT_CHUNK_BYTES, value_parser = parse_size)]
    pub chunk: u64,
    /// Streams (channels) the collective is split over, 1..=4: each rank's part is cut into
    /// this many contiguous slices, slice s on stream s, all run by one network task.
    #[arg(long, default_value_t = DEFAULT_STREAMS, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub streams: u32,
    /// Basic blocks (pipeline stages) per stream, 1..=16: each stream's slice is cut again
    /// into this many blocks with ids 1..=B, every non-empty (stream, block) filed at the
    /// network task's INIT and run in schedule order (with `--loop`, `1..=B` repeated `-n`
    /// times).
    #[arg(long, default_value_t = DEFAULT_BLOCKS, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub blocks: u32,
    /// Early receive posting with this many receives posted ahead of the device's host
    /// index (`ending_recv_credits`; 0 = off).
    #[arg(long = "early-recv", value_name = "N", default_value_t = DEFAULT_EARLY_RECV)]
    pub early_recv: u32,
    /// Early send completion: a send's FIFO entry is completed to the device as soon as the
    /// transport has taken the data (`--early-send`, `--early-send=on|off`).
    #[arg(
        long = "early-send",
        value_name = "on|off",
        num_args = 0..=1,
        require_equals = true,
        default_value = DEFAULT_EARLY_SEND,
        default_missing_value = "on",
        value_parser = parse_on_off
    )]
    pub early_send: bool,
    /// FIFO index wrap (`net_idx_loop_size`): the device never has this many entries of an
    /// op posted and not completed, and indices wrap at it (0 = no wrap).
    #[arg(long = "idx-wrap", value_name = "N", default_value_t = DEFAULT_IDX_WRAP, value_parser = parse_idx_wrap)]
    pub idx_wrap: u32,
    /// Initial send credits of each op (`initial_send_credits`: requests a send may have
    /// outstanding at the transport; 0 = the progress half's default).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CREDITS, value_parser = clap::value_parser!(u32).range(0..=128))]
    pub credits: u32,
    /// Pin rank r's device emulator to CPU r mod ncpus. Driver workers follow
    /// `NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY`.
    #[arg(long)]
    pub pin: bool,
    /// Ranks per network proxy (overrides `NEURON_RT_RANKS_PER_NETWORK_PROXY`).
    #[arg(long)]
    pub ranks_per_proxy: Option<u32>,
    /// Who drives the proxy queues: `thread` (a worker thread per queue) or `caller` (each
    /// rank's own thread drives its queue while it waits). Default: chosen by the threads
    /// each mode needs against the CPUs available (printed in the header).
    #[arg(long, value_enum)]
    pub driver: Option<DriverArg>,
    /// How waiting threads wait: `poll` (spin, yield, nap-poll) or `sleep` (in process: after
    /// a spin as long as a wake-up costs here, sleep until a bell rings; ranks as processes in
    /// caller mode: a driver with nothing to do blocks on its comm's CQ descriptor where the
    /// provider has one, tcp, and yields where it has none, shm; in worker mode the worker that
    /// plays the devices does). Default: `poll`. On 2 CPUs sleeping costs more latency than
    /// yielding (every hand-off becomes a wake-up: BENCHMARKS.md) but no CPU while a thread
    /// waits.
    #[arg(long, value_enum)]
    pub wait: Option<WaitArg>,
    /// How the device emulator runs: `thread` (a thread per rank) or `polled` (no thread of
    /// its own: polled between ticks by whoever drives its rank's queue, the caller's thread
    /// with `--driver caller`, the worker with `--driver thread`). Default: polled when a
    /// `--driver` is given; by the mode rule's choice otherwise (thread for worker mode).
    #[arg(long, value_enum)]
    pub device: Option<DeviceArg>,
    /// Write every row as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
    /// Draw busbw against size and the time per collective against size (log-log), side by
    /// side, as an SVG to this file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
    /// Record the engine's events (docs/tracing.md) and write them as a Chrome Trace Event /
    /// Perfetto JSON timeline to FILE (`%r` in FILE: one file per rank, needed when the ranks
    /// are processes), written also when the run fails; a per-op latency breakdown is printed
    /// after the footer. Recorded: the checked executions of every size (`-c`), with
    /// `--trace-all` the whole run.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
    /// With `--trace`: record the whole run (warm-up, calibration, timed and checked
    /// executions; the ring keeps the first `trace::CAPACITY` events and counts the dropped
    /// ones). For a run that hangs or fails, and to measure what recording costs.
    #[arg(long, requires = "trace")]
    pub trace_all: bool,
    /// With `--trace`: the event classes to record, a list of `ops` (where an op and a
    /// collective begin and end), `steps` (their state changes in between), `transport` (every
    /// post and completion), `transitions` (every other state machine), `drive` (the drive
    /// token), `sleep` (parking), or `all` (the default: the latency breakdown needs
    /// `ops,steps,transport`).
    #[arg(long, requires = "trace", value_name = "CLASSES", default_value = "all",
          value_parser = crate::trace::parse_mask)]
    pub trace_mask: u32,
    /// With `--plot`: overlay another run's results: a `--json` file of proxy-perf, an
    /// nccl-tests table or an OSU latency table (text; repeat the flag for several).
    #[arg(long, value_name = "FILE", requires = "plot")]
    pub compare: Vec<std::path::PathBuf>,
    /// After the sweep, print what one collective cost this process per size (voluntary and
    /// involuntary context switches, CPU time, ticks of its proxy queues), then every rank's protocol counters as a footer
    /// table (starts, block switches, early send completions, receives posted ahead and the
    /// most ahead, index wraps, peak outstanding send / receive requests; cumulative over the
    /// whole sweep).
    #[arg(long)]
    pub stats: bool,
    /// After the sweep, leave every comm idle (nothing submitted) for SECS seconds and print
    /// what the idle world cost this process: CPU as a share of one CPU, context switches.
    #[arg(long, value_name = "SECS")]
    pub idle: Option<u64>,
    /// Inject a fault into rank RANK (default: the last rank), to see the engine's failure
    /// rules at work: `stall-device` (its device never triggers: every rank ends NRT_TIMEOUT),
    /// `stall-rank` (its driving thread stops: the peers end NRT_TIMEOUT), `drop-comm` (its comm
    /// is aborted mid-run: it ends NRT_CLOSED, the peers NRT_TIMEOUT), `exit-rank` (its process
    /// exits mid-run, ranks as processes only (`--transport libfabric` or `shm`): the peers end
    /// NRT_NETWORK_PROXY_FAILURE, the log naming it), `error-completion`
    /// (its transport reports an error completion: it ends NRT_NETWORK_PROXY_FAILURE, the peers
    /// NRT_TIMEOUT), `eagain-storm` (its transport answers "try again" in storms: the run
    /// completes correctly). `stall-rank`, `error-completion` and `eagain-storm` wrap the
    /// in-process transport: `--transport mem` without `--progress-lib` only. The run then
    /// reports every rank's final status and exits non-zero when a rank failed, naming the
    /// failure the others follow from (the lowest rank whose status is not NRT_TIMEOUT, else
    /// the lowest failed rank; a `stall-rank` stall itself, as the stalled thread's ranks end
    /// only when the run releases it) and then the other failed ranks. Use a short
    /// `NEURON_RT_EXEC_TIMEOUT`.
    #[arg(long, value_name = "FAULT[:RANK]", value_parser = parse_inject)]
    pub inject: Option<Inject>,
    /// After the sweep, dump every proxy queue of this process (docs/design.md §6: one
    /// `proxy-dump ...` line per queue, slot, task, stream and op, on stderr through the log,
    /// error level) and say in one line whether each driving thread answered. A dump at any time
    /// is the signal chosen by `NEURON_RT_PROXY_DUMP_SIGNAL` (`USR1` or `USR2`).
    #[arg(long)]
    pub dump_on_exit: bool,
    /// Testing: the emulator of the last rank flips one byte of one received chunk in every
    /// execution (the run must then report wrong values and fail).
    #[arg(long, hide = true)]
    pub fault_inject: bool,
    /// `--algo` came from [`algo_env`] ([`Args::apply_algo_env`]); the state dump then says
    /// `why=env`.
    #[arg(skip)]
    pub algo_from_env: bool,
    /// Calibrate the tuner instead of the sweep: time all-reduce with direct, recursive
    /// doubling, Rabenseifner and ring at every size of `-b`..`-e` on `--ranks` ranks (in
    /// process; with `--transport libfabric` or `shm` over the processes' comm), fit the cost
    /// model's constants (α per step, o per FIFO entry, β per byte sent, γ per byte reduced) by least
    /// squares on the relative errors, print the fit and write the
    /// constants as JSON to FILE (then `NEURON_RT_PROXY_TUNE_FILE=FILE`; see
    /// docs/runtime-authors.md). When the ranks span hosts (processes whose bootstrap sees two
    /// hosts or more, or `--hosts`) it also times send-recv exchanges over the link between
    /// hosts and, on three ranks or more, direct all-to-alls up to 64 KiB (many messages over
    /// the link at once), and writes the link's α, β and per-message o as the file's
    /// inter-host constants.
    #[arg(long, value_name = "FILE")]
    pub tune: Option<std::path::PathBuf>,
    /// Cost against the number of ranks instead of the size sweep: the collective at `-b`
    /// bytes on each of these rank counts (in process), one row per count (time out of place
    /// and in place, the algorithm, the tuner's modelled time); with `--plot`, time against
    /// ranks, log-log, with `--compare-ranks` lines over it.
    #[arg(long, value_name = "N,N,...", value_delimiter = ',')]
    pub ranks_sweep: Vec<u32>,
    /// With `--ranks-sweep --plot`: another run's time against ranks, a text file of
    /// `ranks time_us` lines (`#` comments; the label is the file's name without extension),
    /// e.g. Open MPI's; repeat for several.
    #[arg(long, value_name = "FILE", requires = "ranks_sweep")]
    pub compare_ranks: Vec<std::path::PathBuf>,
    /// The tuner's constants: `NEURON_RT_PROXY_TUNE_FILE`'s, else the defaults
    /// ([`Args::apply_tune_env`]).
    #[arg(skip)]
    pub tuning: proxy_runtime::tune_file::Tuning,
    /// The kind of link the transport's messages take, which picks the tuner's default
    /// constants when no file gives them: memory in process; over libfabric the set-up sets it
    /// from the provider the comm opened (`LinkKind::of_provider`: shm, else network).
    #[arg(skip)]
    pub link: tuner::LinkKind,
}

/// The environment variable that names the algorithm of `c` when `--algo` is auto
/// (`NEURON_RT_PROXY_ALGO_ALL_REDUCE`, ...): the planner's [`tuner::algo_env_var`], which the
/// C library reads too.
pub fn algo_env(c: Collective) -> String {
    tuner::algo_env_var(c).to_owned()
}

impl Args {
    /// With `--algo auto`, takes the collective's algorithm from [`algo_env`] when that is
    /// set (an explicit `--algo` wins; `auto` in the variable keeps the tuner), parsed by the
    /// planner's [`tuner::parse_algo`] (the C library's parser too); records that it did
    /// ([`Args::algo_from_env`]).
    ///
    /// # Errors
    /// A message naming the variable when its value is not an algorithm's name, or names one
    /// the collective does not have.
    pub fn apply_algo_env(&mut self) -> Result<(), String> {
        if self.algo != AlgoArg::Auto {
            return Ok(());
        }
        let c: Collective = self.collective.into();
        let var = tuner::algo_env_var(c);
        if let Ok(v) = std::env::var(var) {
            if v.trim().is_empty() {
                return Ok(());
            }
            let a = tuner::parse_algo(c, var, &v)?;
            self.algo = AlgoArg::from_str(a.name(), false)?;
            self.algo_from_env = a != Algorithm::Auto;
        }
        Ok(())
    }

    /// Loads the tuner's constants from `NEURON_RT_PROXY_TUNE_FILE` when it is set
    /// ([`proxy_runtime::tune_file`]; the C library reads the same file).
    ///
    /// # Errors
    /// A message naming the variable, the file and what is wrong with it.
    pub fn apply_tune_env(&mut self) -> Result<(), String> {
        self.tuning = proxy_runtime::tune_file::Tuning::from_env()?;
        Ok(())
    }

    /// The header's tuner line: the constants and where they come from, and what decides the
    /// algorithm (`--algo`, the environment, or the tuner per size).
    pub fn tuner_line(&self) -> String {
        let c: Collective = self.collective.into();
        let a: Algorithm = self.algo.into();
        let how = if a == Algorithm::Auto {
            let why = match self.tuning {
                proxy_runtime::tune_file::Tuning::Default => "tuner",
                proxy_runtime::tune_file::Tuning::File(..) => "tuner-calibrated",
            };
            format!("the tuner's choice per size (footer), why={why}")
        } else if self.algo_from_env {
            format!("{} from {}, why=env", a.name(), tuner::algo_env_var(c))
        } else {
            format!("{} (--algo), why=asked", a.name())
        };
        let hosts = match &self.hosts {
            Some(HostsArg(m)) => format!(
                "; hosts {} (ranks per host)",
                m.sizes()
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            None => String::new(),
        };
        format!(
            "{}; algorithm: {how}{hosts}",
            self.tuning.describe(self.link)
        )
    }

    /// The protocol options for the header: `streams 1 blocks 1 early-recv off early-send off
    /// idx-wrap none credits default`.
    pub fn protocol_line(&self) -> String {
        let or = |v: u32, zero: &str| {
            if v == 0 {
                zero.to_owned()
            } else {
                v.to_string()
            }
        };
        format!(
            "streams {} blocks {} early-recv {} early-send {} idx-wrap {} credits {}",
            self.streams,
            self.blocks,
            or(self.early_recv, "off"),
            if self.early_send { "on" } else { "off" },
            or(self.idx_wrap, "none"),
            or(self.credits, "default")
        )
    }

    /// The protocol options as JSON: `{"streams", "blocks", "early_recv_credits" (0 = off),
    /// "early_send", "idx_wrap" (0 = none), "credits" (0 = the progress half's default)}`.
    pub fn protocol_json(&self) -> serde_json::Value {
        serde_json::json!({
            "streams": self.streams,
            "blocks": self.blocks,
            "early_recv_credits": self.early_recv,
            "early_send": self.early_send,
            "idx_wrap": self.idx_wrap,
            "credits": self.credits,
        })
    }

    /// The sizes of the sweep in bytes, each rounded down to whole elements (at least one).
    pub fn sizes(&self) -> Vec<u64> {
        let elt = self.dtype.size() as u64;
        let mut v = Vec::new();
        let mut s = self.min_bytes.max(1);
        while s <= self.max_bytes.max(self.min_bytes) && v.len() < 4096 {
            let r = (s / elt).max(1) * elt;
            if v.last() != Some(&r) {
                v.push(r);
            }
            let next = if self.step_bytes > 0 {
                s.saturating_add(self.step_bytes)
            } else {
                s.saturating_mul(self.step_factor.max(2))
            };
            if next == s {
                break;
            }
            s = next;
        }
        v
    }

    /// `-n` as given, or `None` when the count is calibrated per size (`--min-time`).
    pub fn fixed_iters(&self) -> Option<u32> {
        self.iters.map(|n| n.max(1))
    }

    /// The iteration setting for the header and the JSON: `20`, or `auto (min 50 ms)`.
    pub fn iters_label(&self) -> String {
        match self.fixed_iters() {
            Some(n) => n.to_string(),
            None => format!("auto (min {} ms)", self.min_time_ms),
        }
    }
}
