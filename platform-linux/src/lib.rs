//! Linux platform of the proxy engine: worker threads, host memory, transports, the device emulator and `proxy-perf`.

pub mod bootstrap;
#[cfg(feature = "libfabric")]
pub mod libfabric;
#[cfg(feature = "libfabric")]
pub mod net_setup;
