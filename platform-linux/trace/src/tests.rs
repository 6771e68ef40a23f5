use super::*;
use proxy_core::base::trace::Kind;

fn at(ts_ns: u64, kind: Kind, f: impl FnOnce(&mut Record)) -> Record {
    let mut r = Record {
        ts_ns,
        thread: 1,
        ..Record::new(kind)
    };
    f(&mut r);
    r
}

fn op(ts: u64, to: u8, rank: u32) -> Record {
    at(ts, Kind::Transition, |r| {
        r.machine = "op";
        // DONE(0) -> HANDSHAKE(1) -> TRANSFER(2) -> DONE.
        r.from = (to + 2) % 3;
        r.to = to;
        r.rank = rank;
        r.stream = 0;
        r.block = 1;
        r.op = 3;
        r.side = proxy_core::base::trace::SEND;
    })
}

fn io(ts: u64, kind: Kind, entry: u32) -> Record {
    at(ts, kind, |r| {
        r.rank = 0;
        r.stream = 0;
        r.block = 1;
        r.op = 3;
        r.entry = entry;
        r.bytes = 100;
        r.side = proxy_core::base::trace::SEND;
    })
}

fn task(ts: u64, from: u8, to: u8) -> Record {
    at(ts, Kind::Transition, |r| {
        r.machine = "task";
        r.from = from;
        r.to = to;
        r.op = 8;
        r.entry = 0;
    })
}

/// One send op's execution on rank 0 inside a network task's: handshake 1..3 µs, first post
/// at 4, last completion at 9, DONE at 10; the task waits for its trigger 0..2 µs. The
/// rearm (handshake) and the task records have no rank: they get the thread's.
fn sample() -> Trace {
    let recs = vec![
        task(0, 0, 2),
        op(1_000, 1, NONE),
        task(2_000, 2, 1),
        op(3_000, 2, 0),
        io(4_000, Kind::Post, 0),
        io(5_000, Kind::Post, 1),
        io(8_000, Kind::Complete, 0),
        io(9_000, Kind::Complete, 1),
        op(10_000, 0, 0),
        task(11_000, 1, 4),
    ];
    let mut threads = HashMap::new();
    threads.insert(1, "rank-0".to_string());
    Trace::new(recs, threads, Drained::default())
}

#[test]
fn ranks_come_from_the_thread() {
    let t = sample();
    assert!(t.records.iter().all(|r| r.rank == 0), "{:?}", t.records);
}

#[test]
fn breakdown_splits_an_op_into_its_phases() {
    let t = sample();
    let ops = breakdown::op_times(&t);
    assert_eq!(
        ops,
        [breakdown::OpTimes {
            send: true,
            bytes: 200,
            handshake_ns: 2_000,
            device_ns: 1_000,
            transfer_ns: 5_000,
            completion_ns: 1_000,
        }]
    );
    assert_eq!(ops[0].total_ns(), 9_000);
    assert_eq!(breakdown::trigger_waits(&t), [2_000]);
    let text = breakdown::text(&t);
    assert!(
        text.contains("waiting for the device trigger: 2.00 us (mean of 1)"),
        "{text}"
    );
    let row = text.lines().last().unwrap();
    let f: Vec<&str> = row.trim_start_matches('#').split_whitespace().collect();
    assert_eq!(
        f,
        ["send", "200", "1", "2.00", "1.00", "5.00", "1.00", "9.00"]
    );
}

#[test]
fn chrome_events_nest_and_carry_ids() {
    let t = sample();
    let doc = chrome::document(&t, None, "test");
    let ev = doc["traceEvents"].as_array().unwrap();
    let x: Vec<_> = ev.iter().filter(|e| e["ph"] == "X").collect();
    let names: Vec<&str> = x.iter().map(|e| e["name"].as_str().unwrap()).collect();
    // In the order they end.
    assert_eq!(names, ["wait-trigger", "handshake", "transfer", "run"]);
    let transfer = x[2];
    assert_eq!(transfer["pid"], 0);
    assert_eq!(transfer["ts"].as_f64(), Some(3.0));
    assert_eq!(transfer["dur"].as_f64(), Some(7.0));
    assert_eq!(transfer["args"]["op"], 3);
    // The posts and completions are instants on the op's track, inside the transfer.
    let io: Vec<_> = ev
        .iter()
        .filter(|e| e["ph"] == "i" && e["tid"] == transfer["tid"])
        .collect();
    assert_eq!(io.len(), 4);
    for e in io {
        let ts = e["ts"].as_f64().unwrap();
        assert!((3.0..=10.0).contains(&ts), "{e}");
        assert_eq!(e["args"]["bytes"], 100);
    }
    // The counter: 100, 200, 100, 0 bytes in flight.
    let c: Vec<u64> = ev
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| e["args"]["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(c, [100, 200, 100, 0]);
    // Metadata names the rank and the thread.
    assert!(ev
        .iter()
        .any(|e| e["name"] == "process_name" && e["args"]["name"] == "rank 0"));
    assert!(ev
        .iter()
        .any(|e| e["name"] == "thread_name" && e["args"]["name"] == "rank-0"));
    // One rank's file holds nothing of another.
    let other = chrome::document(&t, Some(1), "test");
    assert!(other["traceEvents"].as_array().unwrap().is_empty());
}

#[test]
fn per_rank_paths() {
    let p = std::path::Path::new("/tmp/t-%r.json");
    assert!(per_rank(p));
    assert_eq!(path_for(p, 3), std::path::PathBuf::from("/tmp/t-3.json"));
    assert!(!per_rank(std::path::Path::new("/tmp/t.json")));
}

#[test]
fn a_wait_open_at_a_mark_counts_from_the_mark() {
    let mut recs = sample().records;
    // The op was re-armed long before the window began at 500 ns.
    recs[1].ts_ns = 0;
    recs.push(at(500, Kind::Mark, |r| r.op = 1));
    let t = Trace::new(recs, HashMap::new(), Drained::default());
    let ops = breakdown::op_times(&t);
    assert_eq!(ops[0].handshake_ns, 3_000 - 500);
    assert_eq!(breakdown::trigger_waits(&t), [2_000 - 500]);
    let doc = chrome::document(&t, None, "test");
    let hs = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "handshake")
        .unwrap()
        .clone();
    assert_eq!(hs["ts"].as_f64(), Some(0.5));
    assert_eq!(hs["dur"].as_f64(), Some(2.5));
}

#[test]
fn a_record_crosses_the_c_abi_unchanged() {
    let mut r = op(1_234, 2, 1);
    r.bytes = 77;
    r.entry = 5;
    let c = c_record::to_c(&r);
    let back = c_record::from_c(&c).unwrap();
    assert_eq!(back, r);
    assert!(std::ptr::eq(
        c_record::from_c(&c).unwrap().machine,
        back.machine
    ));
    let mut bad = c;
    bad.kind = 99;
    assert_eq!(c_record::from_c(&bad), None);
}

#[test]
fn the_tsc_clock_reads_as_clock_monotonic() {
    use proxy_core::base::time::Clock;
    // Not on x86_64 with an invariant TSC: nothing to check.
    let Some(tsc) = clock::TscClock::calibrate(2_000_000) else {
        return;
    };
    let mono = clock::MonotonicNs;
    let (a, t, b) = (mono.now_ns(), tsc.now_ns(), mono.now_ns());
    // Within 1 ms of the reads around it (a 2 ms calibration is good to a few µs; a
    // preemption between the reads may add to it).
    assert!(t + 1_000_000 >= a && t <= b + 1_000_000, "{a} {t} {b}");
    // Monotonic.
    let t2 = tsc.now_ns();
    assert!(t2 >= t);
    // The drain's re-fit moves a time by little.
    let refine = clock::refine();
    let now = clock::clock().now_ns();
    assert!(refine(now).abs_diff(now) < 1_000_000);
}

#[test]
fn ops_without_steps_draw_one_span_per_op_and_task() {
    // sample() without the steps: the op's HANDSHAKE -> TRANSFER and the task's WAITING ->
    // PROGRESSING left out.
    let s = sample();
    let recs: Vec<Record> = s
        .records
        .iter()
        .filter(|r| r.kind == Kind::Transition)
        .filter(|r| {
            let step = (r.machine == "op" && r.to == 2) || (r.machine == "task" && r.from == 2);
            !step
        })
        .copied()
        .collect();
    let t = Trace::new(recs, HashMap::new(), Drained::default());
    let doc = chrome::document(&t, None, "test");
    let x: Vec<&str> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(x.contains(&"op") && x.contains(&"task"), "{x:?}");
    assert!(
        !x.contains(&"handshake") && !x.contains(&"transfer"),
        "{x:?}"
    );
}

#[test]
fn an_ops_end_begins_its_next_execution_unless_an_arm_follows() {
    // `ops` alone: the walk's re-arm of an op at its DONE is not recorded
    // (`ProxyOp::recycle_in`). An op looping on its device (arm at 1 µs, DONE at 5 and 9 µs)
    // draws two executions, the second from the first's end; one whose next execution is
    // armed again by `start` (at 12 µs) begins there. The last end leaves no unfinished span.
    let recs = vec![
        op(1_000, 1, 0),
        op(5_000, 0, 0),
        op(9_000, 0, 0),
        op(12_000, 1, 0),
        op(15_000, 0, 0),
    ];
    let t = Trace::new(recs, HashMap::new(), Drained::default());
    let doc = chrome::document(&t, None, "test");
    let x: Vec<(String, f64, f64)> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["ts"].as_f64().unwrap(),
                e["dur"].as_f64().unwrap(),
            )
        })
        .collect();
    let op = |ts: f64, dur: f64| ("op".to_owned(), ts, dur);
    assert_eq!(x, [op(0.0, 4.0), op(4.0, 4.0), op(11.0, 3.0)]);
}
