//! `proxy-perf`: nccl-tests-style bandwidth and latency of collectives through the proxy &
//! progress engine, every output byte checked. See the `proxy_perf` library.
//!
//! ```text
//! cargo run --release -p proxy-perf -- all-reduce --ranks 4 -b 8 -e 64M -f 4
//! # ranks as processes over libfabric (loopback), and the progress half through dlopen:
//! cargo run --release -p proxy-perf --features libfabric -- \
//!     all-reduce --transport libfabric --provider shm --ranks 2 -b 8 -e 4M
//! cargo build --release -p proxy-ffi
//! cargo run --release -p proxy-perf -- \
//!     all-reduce --ranks 4 --progress-lib target/release/libnccom_proxy.so
//! ```

use clap::Parser;
use proxy_perf::{args::Args, init_logging, run_cli, EXIT_ERROR};

fn main() {
    let mut args = Args::parse();
    init_logging();
    if let Err(e) = args.apply_algo_env().and_then(|()| args.apply_tune_env()) {
        eprintln!("proxy-perf: error: {e}");
        std::process::exit(EXIT_ERROR);
    }
    std::process::exit(run_cli(&args));
}
