//! The lines of a state dump (docs/design.md §6, "State dump"): the line format both halves
//! write (`proxy-dump queue=<id> ... key=value`), the writers that prefix, count and log them,
//! and the `none` spelling of an absent value. The driver half's queue dump and the progress
//! half's comm dump write through these; what is dumped and when is the driver's
//! (`driver::dump`).
//!
//! Seed: none (the seed has no dump); docs/design.md §6.

use alloc::string::String;
use core::fmt;

/// The `log` target of every dump line.
pub const DUMP_TARGET: &str = "proxy_dump";

/// The prefix of every dump line.
pub const DUMP_PREFIX: &str = "proxy-dump";

/// A `fmt::Write` that puts `prefix` and a space before every line written through it.
pub struct Prefixed<'a> {
    out: &'a mut dyn fmt::Write,
    prefix: &'a str,
    at_start: bool,
}

impl<'a> Prefixed<'a> {
    /// Writes to `out`, each line prefixed with `prefix` and a space.
    pub fn new(out: &'a mut dyn fmt::Write, prefix: &'a str) -> Self {
        Self {
            out,
            prefix,
            at_start: true,
        }
    }
}

impl fmt::Write for Prefixed<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for piece in s.split_inclusive('\n') {
            if self.at_start {
                self.out.write_str(self.prefix)?;
                self.out.write_char(' ')?;
            }
            self.out.write_str(piece)?;
            self.at_start = piece.ends_with('\n');
        }
        Ok(())
    }
}

/// A `fmt::Write` that sends every complete line to the `log` facade (error level, target
/// [`DUMP_TARGET`]) and counts them; [`LogLines::finish`] flushes a last partial line.
#[derive(Debug, Default)]
pub struct LogLines {
    line: String,
    lines: u32,
}

impl LogLines {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lines sent so far.
    pub fn lines(&self) -> u32 {
        self.lines
    }

    /// Sends a last line that has no newline.
    pub fn finish(&mut self) {
        if !self.line.is_empty() {
            self.emit();
        }
    }

    fn emit(&mut self) {
        log::error!(target: DUMP_TARGET, "{}", self.line);
        self.lines += 1;
        self.line.clear();
    }
}

impl fmt::Write for LogLines {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for piece in s.split_inclusive('\n') {
            match piece.strip_suffix('\n') {
                Some(body) => {
                    self.line.push_str(body);
                    self.emit();
                }
                None => self.line.push_str(piece),
            }
        }
        Ok(())
    }
}

/// A `fmt::Write` that counts the lines going through it to `out`.
pub(crate) struct Counting<'a> {
    pub(crate) out: &'a mut dyn fmt::Write,
    pub(crate) lines: u32,
}

impl fmt::Write for Counting<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.lines += s.matches('\n').count() as u32;
        self.out.write_str(s)
    }
}

/// A value written as `none` when absent, else with `Display` (no spaces in a value).
pub(crate) struct Opt<T>(pub(crate) Option<T>);

impl<T: fmt::Display> fmt::Display for Opt<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("none"),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
