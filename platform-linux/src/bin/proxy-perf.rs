//! `proxy-perf`: nccl-tests-style bandwidth and latency of collectives through the proxy &
//! progress engine, every output byte checked. See `proxy_platform_linux::perf`.
//!
//! ```text
//! cargo run --release -p proxy-platform-linux --bin proxy-perf -- all-reduce --ranks 4 -b 8 -e 64M -f 4
//! ```

use clap::Parser;
use proxy_platform_linux::perf::{args::Args, run_cli};

fn main() {
    let args = Args::parse();
    std::process::exit(run_cli(&args));
}
