//! The tuner's calibration file: the constants of the planner's cost model
//! (`proxy_collectives::planner::tuner::CostModel`) measured on one machine (`proxy-perf
//! --tune FILE` writes it), read at start-up from `NEURON_RT_PROXY_TUNE_FILE` by proxy-perf and
//! by the C library (`libnrt_proxy`), which hand the numbers to the planner (the core is
//! `no_std` and parses nothing).
//!
//! ```json
//! {
//!   "version": 1,
//!   "cost_model": { "step_ns": 2100, "entry_ns": 950, "byte_ps": 41, "reduce_ps": 30 },
//!   "inter_host_cost_model": { "step_ns": 30000, "entry_ns": 2000, "byte_ps": 800, "reduce_ps": 30 },
//!   "measured_on": "proxy-perf --tune: all-reduce, transport mem, 4 ranks, 2 CPUs",
//!   "samples": 40,
//!   "rms_relative_error": 0.18,
//!   "inter_host_samples": 8,
//!   "inter_host_rms_relative_error": 0.05
//! }
//! ```
//!
//! `version` and `cost_model` (all four fields) are required, unknown fields refused;
//! `inter_host_cost_model` is optional (the link between hosts; `cost_model` without it;
//! `proxy-perf --tune` run across hosts measures it, one host's run leaves it out); the rest
//! describes the fits (`inter_host_samples` and `inter_host_rms_relative_error` only when the
//! link was measured). Without the variable the planner's defaults for the kind of link the
//! transport's messages take apply (`LinkKind::default_cost_model`: memory, shared memory or
//! network; between hosts `LinkKind::default_inter_host_model`). A file that cannot be read or parsed, or holds an absurd
//! constant, is an error that names the file and what is wrong (never a silent fall-back to
//! the defaults); writing goes to a temporary file renamed over the old one, so a failed write
//! leaves the old file whole.

use std::path::{Path, PathBuf};

use proxy_collectives::planner::tuner::{CostModel, LinkKind};
use serde::{Deserialize, Serialize};

/// The variable that names the calibration file.
pub const TUNE_FILE_ENV: &str = "NEURON_RT_PROXY_TUNE_FILE";

/// The `version` this code reads and writes.
pub const TUNE_FILE_VERSION: u32 = 1;

/// Largest `step_ns` / `entry_ns` accepted: 10 s (a larger one is a unit mistake).
pub const MAX_NS: u64 = 10_000_000_000;
/// Largest `byte_ps` / `reduce_ps` accepted: 1 ms per byte.
pub const MAX_PS: u64 = 1_000_000_000;

/// The constants as the file spells them (the planner's [`CostModel`], field for field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModelJson {
    /// `α`: nanoseconds per dependent network step.
    pub step_ns: u64,
    /// `o`: nanoseconds per FIFO entry sent or received.
    pub entry_ns: u64,
    /// `β`: picoseconds per byte sent.
    pub byte_ps: u64,
    /// `γ`: picoseconds per byte reduced.
    pub reduce_ps: u64,
}

impl From<CostModel> for CostModelJson {
    fn from(m: CostModel) -> Self {
        Self {
            step_ns: m.step_ns,
            entry_ns: m.entry_ns,
            byte_ps: m.byte_ps,
            reduce_ps: m.reduce_ps,
        }
    }
}

impl From<CostModelJson> for CostModel {
    fn from(m: CostModelJson) -> Self {
        Self {
            step_ns: m.step_ns,
            entry_ns: m.entry_ns,
            byte_ps: m.byte_ps,
            reduce_ps: m.reduce_ps,
        }
    }
}

/// One calibration file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuneFile {
    /// [`TUNE_FILE_VERSION`].
    pub version: u32,
    /// The constants.
    pub cost_model: CostModelJson,
    /// The constants of a link between hosts (`PlanParams::inter_host_model`: what the flat
    /// all-reduces pay when ranks span hosts, and the leaders of the hierarchical one);
    /// optional, `cost_model` when absent. `proxy-perf --tune` writes it when its ranks span
    /// hosts (α and β fitted to timed exchanges over the link; o and γ are the host's), and
    /// leaves it out with one host; it may also be written by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inter_host_cost_model: Option<CostModelJson>,
    /// How and where they were measured (free text).
    #[serde(default)]
    pub measured_on: String,
    /// Measurements the fit used.
    #[serde(default)]
    pub samples: u32,
    /// Root mean square of the fit's relative errors (0.1 = 10 %).
    #[serde(default)]
    pub rms_relative_error: f64,
    /// Measurements the fit of `inter_host_cost_model` used (timed exchanges between hosts);
    /// absent when it was not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inter_host_samples: Option<u32>,
    /// Root mean square of that fit's relative errors (0.1 = 10 %); absent when it was not
    /// measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inter_host_rms_relative_error: Option<f64>,
}

impl TuneFile {
    /// A file of `model` with the fit's description.
    pub fn new(model: CostModel, measured_on: String, samples: u32, rms: f64) -> Self {
        Self {
            version: TUNE_FILE_VERSION,
            cost_model: model.into(),
            inter_host_cost_model: None,
            measured_on,
            samples,
            rms_relative_error: rms,
            inter_host_samples: None,
            inter_host_rms_relative_error: None,
        }
    }

    /// This file with the link between hosts measured: `model` fitted to `samples`
    /// measurements with a root mean square relative error `rms`.
    pub fn with_inter_host(mut self, model: CostModel, samples: u32, rms: f64) -> Self {
        self.inter_host_cost_model = Some(model.into());
        self.inter_host_samples = Some(samples);
        self.inter_host_rms_relative_error = Some(rms);
        self
    }

    /// The planner's constants.
    pub fn model(&self) -> CostModel {
        self.cost_model.into()
    }

    /// The constants between hosts: `inter_host_cost_model`, else [`TuneFile::model`].
    pub fn inter_host_model(&self) -> CostModel {
        self.inter_host_cost_model.unwrap_or(self.cost_model).into()
    }

    /// Checks the version and the ranges.
    ///
    /// # Errors
    /// What is wrong, in words.
    pub fn check(&self) -> Result<(), String> {
        if self.version != TUNE_FILE_VERSION {
            return Err(format!(
                "version {} (this build reads {TUNE_FILE_VERSION})",
                self.version
            ));
        }
        let models = [
            ("cost_model", Some(&self.cost_model)),
            ("inter_host_cost_model", self.inter_host_cost_model.as_ref()),
        ];
        for (what, m) in models {
            let Some(m) = m else { continue };
            for (name, v, max) in [
                ("step_ns", m.step_ns, MAX_NS),
                ("entry_ns", m.entry_ns, MAX_NS),
                ("byte_ps", m.byte_ps, MAX_PS),
                ("reduce_ps", m.reduce_ps, MAX_PS),
            ] {
                if v > max {
                    return Err(format!("{what}.{name} is {v}, above {max}"));
                }
            }
        }
        Ok(())
    }

    /// Parses and checks a file's text.
    ///
    /// # Errors
    /// serde_json's message (with line and column) or [`TuneFile::check`]'s.
    pub fn parse(text: &str) -> Result<Self, String> {
        let f: Self = serde_json::from_str(text).map_err(|e| e.to_string())?;
        f.check()?;
        Ok(f)
    }

    /// Reads, parses and checks `path`.
    ///
    /// # Errors
    /// `"<path>: <what>"` when the file cannot be read or is not a good calibration file.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Writes the file to `path`: pretty JSON into `<path>.tmp`, then renamed over `path` (a
    /// failure leaves any old file whole).
    ///
    /// # Errors
    /// `"<path>: <what>"`.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        self.check()?;
        let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
        let mut text = serde_json::to_string_pretty(self).map_err(|e| err(&e))?;
        text.push('\n');
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, text).map_err(|e| err(&e))?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            err(&e)
        })
    }
}

/// The constants in effect and where they came from (for headers and logs).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Tuning {
    /// No file: the planner's defaults.
    #[default]
    Default,
    /// From this file.
    File(PathBuf, TuneFile),
}

impl Tuning {
    /// The constants for a transport whose messages take `link`: the file's, else `link`'s
    /// defaults ([`LinkKind::default_cost_model`]).
    pub fn model(&self, link: LinkKind) -> CostModel {
        match self {
            Tuning::Default => link.default_cost_model(),
            Tuning::File(_, f) => f.model(),
        }
    }

    /// The constants between hosts ([`TuneFile::inter_host_model`]; `link`'s defaults between
    /// hosts without a file, [`LinkKind::default_inter_host_model`]).
    pub fn inter_host_model(&self, link: LinkKind) -> CostModel {
        match self {
            Tuning::Default => link.default_inter_host_model(),
            Tuning::File(_, f) => f.inter_host_model(),
        }
    }

    /// One line for a header: `cost model default for network links (α 4300 ns/step, ...;
    /// between hosts α 15000 ns/step, ...; no NEURON_RT_PROXY_TUNE_FILE)` (the constants between
    /// hosts where they differ) or `cost model from FILE (...; fit of N samples, rms error E
    /// %)`.
    pub fn describe(&self, link: LinkKind) -> String {
        let m = self.model(link);
        let consts = format!(
            "α {} ns/step, o {} ns/entry, β {} ps/B sent, γ {} ps/B reduced",
            m.step_ns, m.entry_ns, m.byte_ps, m.reduce_ps
        );
        match self {
            Tuning::Default => {
                let i = link.default_inter_host_model();
                let inter = if i == m {
                    String::new()
                } else {
                    format!(
                        "; between hosts α {} ns/step, o {} ns/entry, β {} ps/B sent, γ {} ps/B \
                         reduced",
                        i.step_ns, i.entry_ns, i.byte_ps, i.reduce_ps
                    )
                };
                format!(
                    "cost model default for {} links ({consts}{inter}; no {TUNE_FILE_ENV})",
                    link.name()
                )
            }
            Tuning::File(p, f) => {
                let fit = match (f.inter_host_samples, f.inter_host_rms_relative_error) {
                    (Some(n), Some(e)) => {
                        format!(" (fit of {n} exchanges, rms error {:.0} %)", e * 100.0)
                    }
                    _ => String::new(),
                };
                let inter = match f.inter_host_cost_model {
                    Some(i) => format!(
                        "; between hosts α {} ns/step, o {} ns/entry, β {} ps/B sent, γ {} ps/B \
                         reduced{fit}",
                        i.step_ns, i.entry_ns, i.byte_ps, i.reduce_ps
                    ),
                    None => String::new(),
                };
                format!(
                    "cost model from {} ({consts}{inter}; fit of {} samples, rms error {:.0} %)",
                    p.display(),
                    f.samples,
                    f.rms_relative_error * 100.0
                )
            }
        }
    }

    /// The tuning `lookup` gives: [`Tuning::File`] of the file [`TUNE_FILE_ENV`] names (an
    /// empty value is no file), else [`Tuning::Default`].
    ///
    /// # Errors
    /// `"NEURON_RT_PROXY_TUNE_FILE=<path>: <what>"` for a file that cannot be read or is bad.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        match lookup(TUNE_FILE_ENV).filter(|v| !v.trim().is_empty()) {
            None => Ok(Tuning::Default),
            Some(v) => {
                let p = PathBuf::from(v.trim());
                TuneFile::read(&p)
                    .map(|f| Tuning::File(p, f))
                    .map_err(|e| format!("{TUNE_FILE_ENV}={e}"))
            }
        }
    }

    /// [`Tuning::from_lookup`] of the process environment.
    ///
    /// # Errors
    /// As [`Tuning::from_lookup`].
    pub fn from_env() -> Result<Self, String> {
        Self::from_lookup(&|k| std::env::var(k).ok())
    }
}

#[cfg(test)]
mod tests;
