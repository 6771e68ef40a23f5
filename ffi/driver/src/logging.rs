//! The library's logger (the same as libnccom_proxy's): the `log` facade to stderr, level from `NEURON_RT_LOG_LEVEL`
//! (`ERROR`, `WARN`, `INFO`, `DEBUG`, `TRACE`; default `ERROR`), finer filters from `RUST_LOG`
//! (docs/design.md §8). Installed once, on the first call into the library; when the process already
//! has a logger for this copy of `log` (a Rust program linking the rlib), that one is kept.

use std::sync::Once;

static INIT: Once = Once::new();

fn level_from(s: Option<&str>) -> log::LevelFilter {
    match s.map(|s| s.trim().to_ascii_uppercase()).as_deref() {
        Some("TRACE") => log::LevelFilter::Trace,
        Some("DEBUG") => log::LevelFilter::Debug,
        Some("INFO") => log::LevelFilter::Info,
        Some("WARN" | "WARNING") => log::LevelFilter::Warn,
        Some("OFF" | "NONE") => log::LevelFilter::Off,
        _ => log::LevelFilter::Error,
    }
}

/// Installs the logger if this is the first call.
pub fn init() {
    INIT.call_once(|| {
        let level = level_from(std::env::var("NEURON_RT_LOG_LEVEL").ok().as_deref());
        let mut b = env_logger::Builder::new();
        b.filter_level(level);
        if let Ok(filters) = std::env::var("RUST_LOG") {
            b.parse_filters(&filters);
        }
        // Err: a logger is already installed; keep it.
        let _ = b.try_init();
    });
}

#[cfg(test)]
mod tests {
    use super::level_from;
    use log::LevelFilter;

    #[test]
    fn levels() {
        assert_eq!(level_from(None), LevelFilter::Error);
        assert_eq!(level_from(Some("debug")), LevelFilter::Debug);
        assert_eq!(level_from(Some(" WARN ")), LevelFilter::Warn);
        assert_eq!(level_from(Some("bogus")), LevelFilter::Error);
    }
}
