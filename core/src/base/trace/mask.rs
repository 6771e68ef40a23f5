//! The event classes a tracer records ([`super::Tracer::set_mask`]), as bits of a `u32` (the
//! C libraries' `NCCOM_TRACE_*` / `nrt_proxy_trace_start`'s mask, `proxy-perf --trace-mask`,
//! `NEURON_RT_PROXY_TRACE_MASK`), and their names.

/// Where an op and a collective begin and end: an op's DONE → HANDSHAKE by `start` and →
/// DONE, a task's leaving INIT and reaching DONE (two events per op and per collective's task).
/// The op walk's re-arm at an op's DONE is [`STEPS`] (the end implies it). The libraries'
/// default.
pub const OPS: u32 = 1 << 0;
/// The op and task state changes in between: an op's HANDSHAKE → TRANSFER and its re-arm by
/// the op walk at DONE, a task's waiting, progressing, idle, closing, re-arm (with [`OPS`]:
/// the `handshake` / `transfer` and `wait-trigger` / `run` spans of the timeline).
pub const STEPS: u32 = 1 << 5;
/// Every transport post and completion of a FIFO entry (bytes, peer).
pub const TRANSPORT: u32 = 1 << 1;
/// The transitions of every machine besides ops and tasks (slots, queues, the device
/// emulator's stages, ...).
pub const TRANSITIONS: u32 = 1 << 2;
/// The drive token taken and released.
pub const DRIVE: u32 = 1 << 3;
/// A driving thread going to sleep and waking up.
pub const SLEEP: u32 = 1 << 4;
/// Every class.
pub const ALL: u32 = OPS | STEPS | TRANSPORT | TRANSITIONS | DRIVE | SLEEP;
/// What the C libraries record when not told: [`OPS`].
pub const DEFAULT: u32 = OPS;

/// The classes by name, in bit order.
pub const NAMES: [(&str, u32); 7] = [
    ("ops", OPS),
    ("steps", STEPS),
    ("transport", TRANSPORT),
    ("transitions", TRANSITIONS),
    ("drive", DRIVE),
    ("sleep", SLEEP),
    ("all", ALL),
];

/// The mask a list of class names separated by `,` or `|` names (`"ops,transport"`, `"all"`;
/// surrounding blanks ignored, case-insensitive), or a number (`"0x3"`, `"3"`).
///
/// # Errors
/// The first word that is neither a class name nor a number; an empty list.
pub fn parse(s: &str) -> Result<u32, &str> {
    let s = s.trim();
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u32::from_str_radix(hex, 16).map(|m| m & ALL).map_err(|_| s);
    }
    if let Ok(m) = s.parse::<u32>() {
        return Ok(m & ALL);
    }
    let mut m = 0;
    for word in s.split([',', '|']).map(str::trim) {
        let bit = NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(word))
            .map(|(_, b)| *b)
            .ok_or(word)?;
        m |= bit;
    }
    Ok(m)
}
