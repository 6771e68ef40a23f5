//! A record across the nccom ABI (`nccom_trace_record_t`, ABI 1.3): the progress library copies
//! its records out with [`to_c`], the driver library reads them back with [`from_c`].

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use proxy_abi::NccomTraceRecord;
use proxy_core::base::trace::{Kind, Record};

/// `r` as the C record (the machine's name cut at 14 bytes).
pub fn to_c(r: &Record) -> NccomTraceRecord {
    let mut machine = [0; 14];
    for (d, s) in machine.iter_mut().zip(r.machine.bytes()) {
        *d = s as std::ffi::c_char;
    }
    NccomTraceRecord {
        ts_ns: r.ts_ns,
        bytes: r.bytes,
        thread: r.thread,
        rank: r.rank,
        comm: r.comm,
        op: r.op,
        block: r.block,
        entry: r.entry,
        peer: r.peer,
        stream: r.stream,
        kind: r.kind as u8,
        from: r.from,
        to: r.to,
        side: r.side,
        edge: r.edge,
        machine,
    }
}

/// The record `c` describes; `None` for a kind this build does not know (a newer library's).
pub fn from_c(c: &NccomTraceRecord) -> Option<Record> {
    let kind = match c.kind {
        0 => Kind::Transition,
        1 => Kind::TokenTake,
        2 => Kind::TokenRelease,
        3 => Kind::Sleep,
        4 => Kind::Wake,
        5 => Kind::Post,
        6 => Kind::Complete,
        7 => Kind::Mark,
        _ => return None,
    };
    let bytes: Vec<u8> = c
        .machine
        .iter()
        .map(|&b| b as u8)
        .take_while(|&b| b != 0)
        .collect();
    Some(Record {
        ts_ns: c.ts_ns,
        bytes: c.bytes,
        machine: intern(&String::from_utf8_lossy(&bytes)),
        thread: c.thread,
        rank: c.rank,
        comm: c.comm,
        op: c.op,
        block: c.block,
        entry: c.entry,
        peer: c.peer,
        stream: c.stream,
        kind,
        from: c.from,
        to: c.to,
        side: c.side,
        edge: c.edge,
    })
}

/// `name` as a `&'static str`: each distinct machine name is leaked once (a handful per
/// process).
fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    let set = names.get_or_insert_with(HashSet::new);
    if let Some(s) = set.get(name) {
        return s;
    }
    let s: &'static str = Box::leak(name.to_owned().into_boxed_str());
    set.insert(s);
    s
}
