//! The driver half on real threads: worker threads, registry groups, back-pressure, leave,
//! idle CPU, affinity, host memory shared with a child process.
//!
//! Every wait is bounded by a count and a time (`deadline`).

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use proxy_core::base::status::NrtStatus;
use proxy_core::driver::queue::{QueueConfig, SlotHandle, TaskBox};
use proxy_core::driver::record::TaskRecord;
use proxy_core::driver::task::{BlockFifos, NetworkTask, NetworkTaskSpec};
use proxy_core::driver::trigger::TriggerWords;
use proxy_core::testing::{seam, Script};
use proxy_runtime::hostmem::{HostMem, TriggerWord, LINE};
use proxy_runtime::worker::waiter;
use proxy_runtime::{registry, Config, LinuxRegistry};

// ---- a scripted comm behind extern "C" seam functions: proxy-core's `testing::Script` ------

fn net_task(s: &Arc<Script>, id: u32, streams: &[u32]) -> TaskBox {
    Box::new(
        NetworkTask::new(NetworkTaskSpec {
            task_id: id,
            // SAFETY: every test keeps its Script alive until its tasks are reported.
            comm: unsafe { s.handle() },
            comm_id: 1,
            seam: seam(),
            blocks: streams
                .iter()
                .map(|&stream| BlockFifos {
                    stream,
                    bb: 0,
                    ..Default::default()
                })
                .collect(),
            schedule: None,
            triggers: TriggerWords::none(),
            wait_for_device: false,
            skip: false,
            timeout_ns: Some(30_000_000_000),
        })
        .unwrap(),
    )
}

fn deadline(secs: u64) -> impl Fn() {
    let end = Instant::now() + Duration::from_secs(secs);
    move || assert!(Instant::now() < end, "bounded wait ran out")
}

fn cfg(rpnp: u32, cap: usize) -> Config {
    Config {
        ranks_per_network_proxy: rpnp,
        queue: QueueConfig {
            slots: 8,
            submit_capacity: cap,
            status_capacity: cap,
        },
        spin: Duration::from_micros(20),
        ..Config::default()
    }
}

/// Submits `task`, collecting records while the slot answers QUEUE_FULL. Returns whether
/// back-pressure was seen.
fn submit_retry(h: &mut SlotHandle, mut task: TaskBox, out: &mut Vec<TaskRecord>) -> bool {
    let check = deadline(60);
    let mut saw_full = false;
    loop {
        match h.submit(task) {
            Ok(()) => return saw_full,
            Err(r) => {
                assert_eq!(r.status, NrtStatus::QueueFull);
                saw_full = true;
                task = r.task;
                if let Some(rec) = h.wait_record(&waiter(Duration::from_micros(20))) {
                    out.push(rec);
                }
                check();
            }
        }
    }
}

fn drain(h: &mut SlotHandle, out: &mut Vec<TaskRecord>) {
    let check = deadline(60);
    while h.outstanding() > 0 {
        out.push(h.wait_record(&waiter(Duration::from_micros(20))).unwrap());
        check();
    }
}

// ---- throughput and back-pressure ----------------------------------------------------------

fn many_tasks(cap: usize) -> bool {
    const PRODUCERS: u32 = 4;
    const PER: u32 = 2_500;
    let reg = Arc::new(registry(&cfg(PRODUCERS, cap)).unwrap());
    let start_all = Arc::new(Barrier::new(PRODUCERS as usize));
    let threads: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (reg, start_all) = (reg.clone(), start_all.clone());
            std::thread::spawn(move || {
                let s = Script::new(1 + p % 2);
                let mut m = reg.join(p).unwrap();
                start_all.wait();
                let mut recs = Vec::new();
                let mut saw_full = false;
                for i in 0..PER {
                    let streams: &[u32] = if i % 3 == 0 { &[0, 1] } else { &[p] };
                    saw_full |=
                        submit_retry(&mut m.slot, net_task(&s, p * PER + i, streams), &mut recs);
                }
                drain(&mut m.slot, &mut recs);
                let slot = m.slot.slot();
                let left = reg.leave(m, &waiter(Duration::from_micros(20)));
                assert!(left.is_empty());
                // every task exactly once, in submission order, DONE with success
                let ids: Vec<u32> = recs.iter().map(|r| r.task_id).collect();
                let want: Vec<u32> = (p * PER..(p + 1) * PER).collect();
                assert_eq!(ids, want, "producer {p}: order or loss");
                assert!(recs
                    .iter()
                    .all(|r| r.is_done() && r.status() == NrtStatus::Success && r.slot == slot));
                let (st, _, sp) = s.counts();
                assert_eq!(st, sp, "stop once per filed stream");
                saw_full
            })
        })
        .collect();
    let fulls: Vec<bool> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(reg.group_count(), 0);
    fulls.into_iter().any(|f| f)
}

#[test]
fn ten_thousand_tasks_from_four_producers_each_reported_once_in_order() {
    many_tasks(256);
}

#[test]
fn ring_of_eight_pushes_back_and_loses_nothing() {
    assert!(many_tasks(8), "producers never saw NRT_QUEUE_FULL");
}

// ---- leave ---------------------------------------------------------------------------------

#[test]
fn comm_destroyed_with_tasks_queued_and_active_reports_closed_once() {
    let reg = registry(&cfg(1, 16)).unwrap();
    let s = Script::new(0); // never done
    let mut m = reg.join(0).unwrap();
    let lives: Vec<_> = (0..4)
        .map(|i| {
            let t = net_task(&s, i, &[0, 2]);
            let l = t.status_record();
            m.slot.submit(t).unwrap();
            l
        })
        .collect();
    let check = deadline(10);
    while s.counts().1 == 0 {
        check();
        std::thread::yield_now();
    }
    let recs = reg.leave(m, &waiter(Duration::from_micros(20)));
    let mut ids: Vec<u32> = recs.iter().map(|r| r.task_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [0, 1, 2, 3]);
    assert!(recs
        .iter()
        .all(|r| r.is_done() && r.status() == NrtStatus::Closed));
    assert!(lives.iter().all(|l| l.load().is_done()));
    // the active task filed (2 streams) and stopped both; the queued ones never started
    let (st, _, sp) = s.counts();
    assert_eq!((st, sp), (2, 2));
    assert_eq!(reg.group_count(), 0);
}

// ---- slots ---------------------------------------------------------------------------------

#[test]
fn comms_join_and_leave_while_the_worker_ticks() {
    let reg = Arc::new(registry(&cfg(64, 16)).unwrap());
    // an anchor comm keeps the worker busy with an idle, never-done task
    let anchor_script = Script::new(0);
    anchor_script.idle.store(true, Ordering::SeqCst);
    let mut anchor = reg.join(0).unwrap();
    anchor
        .slot
        .submit(net_task(&anchor_script, 999, &[3]))
        .unwrap();
    // two comms of the same rank get separate slots
    let twin = reg.join(0).unwrap();
    assert_ne!(twin.slot.slot(), anchor.slot.slot());
    assert_eq!(twin.group(), anchor.group());
    let threads: Vec<_> = (0..3)
        .map(|t| {
            let reg = reg.clone();
            std::thread::spawn(move || {
                let s = Script::new(2);
                for round in 0..40 {
                    let mut m = reg.join(t + 1).unwrap();
                    let mut recs = Vec::new();
                    for i in 0..3 {
                        submit_retry(&mut m.slot, net_task(&s, round * 10 + i, &[t]), &mut recs);
                    }
                    if round % 2 == 0 {
                        drain(&mut m.slot, &mut recs);
                    }
                    recs.extend(reg.leave(m, &waiter(Duration::from_micros(20))));
                    assert_eq!(recs.len(), 3, "round {round}: each task reported once");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(reg.workers().len(), 1);
    let w = waiter(Duration::from_micros(20));
    assert!(reg.leave(twin, &w).is_empty());
    let recs = reg.leave(anchor, &w);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].status(), NrtStatus::Closed);
    assert_eq!(reg.group_count(), 0);
}

// ---- idle CPU ------------------------------------------------------------------------------

#[test]
fn an_idle_queue_uses_under_10ms_of_cpu_in_one_second() {
    let reg = registry(&cfg(1, 16)).unwrap();
    let m = reg.join(0).unwrap();
    std::thread::sleep(Duration::from_millis(50)); // let it settle into park
    let cpu = || {
        let mut t = None;
        reg.for_each_worker(|_, h| t = Some(h.cpu_time().unwrap()));
        t.unwrap()
    };
    let before = cpu();
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu() - before;
    assert!(
        used < Duration::from_millis(10),
        "idle worker used {used:?}"
    );
    reg.leave(m, &waiter(Duration::ZERO));
}

// ---- groups --------------------------------------------------------------------------------

fn thread_comm(tid: u64) -> Option<String> {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_owned())
}

#[test]
fn four_comms_two_per_proxy_make_exactly_two_named_workers_joined_on_leave() {
    let reg: LinuxRegistry = registry(&cfg(2, 16)).unwrap();
    let ms: Vec<_> = (0..4).map(|r| reg.join(r).unwrap()).collect();
    assert_eq!(
        ms.iter().map(|m| m.group()).collect::<Vec<_>>(),
        [0, 0, 1, 1]
    );
    let workers = reg.workers();
    assert_eq!(workers.len(), 2);
    let tids: Vec<u64> = workers.iter().map(|(_, t)| t.unwrap()).collect();
    assert_ne!(tids[0], tids[1]);
    for &tid in &tids {
        assert_eq!(thread_comm(tid), Some(format!("proxy-{tid}")));
    }
    let w = waiter(Duration::from_micros(20));
    let mut ms = ms.into_iter();
    reg.leave(ms.next().unwrap(), &w);
    assert_eq!(reg.workers().len(), 2, "group 0 still has a member");
    for m in ms {
        reg.leave(m, &w);
    }
    assert_eq!(reg.group_count(), 0);
    for &tid in &tids {
        assert_eq!(thread_comm(tid), None, "worker {tid} still running");
    }
}

// ---- affinity ------------------------------------------------------------------------------

#[test]
fn a_cpu_outside_the_allowed_set_fails_the_join_and_leaves_nothing() {
    let allowed = proxy_runtime::affinity::allowed_cpus().unwrap();
    let outside = (0..4096).find(|c| !allowed.contains(c)).unwrap();
    let reg = registry(&Config {
        cpu_affinity: vec![outside, allowed[0]],
        ..cfg(1, 16)
    })
    .unwrap();
    assert_eq!(reg.join(0).unwrap_err(), NrtStatus::Invalid);
    assert_eq!(reg.group_count(), 0);
    // the next CPU of the list is allowed: the next group starts, pinned there
    let m = reg.join(1).unwrap();
    let mut cpu = None;
    reg.for_each_worker(|_, h| cpu = h.cpu());
    assert_eq!(cpu, Some(allowed[0]));
    reg.leave(m, &waiter(Duration::ZERO));
}

// ---- host memory shared with a child process ----------------------------------------------

const CHILD_FD: &str = "PROXY_TEST_HOSTMEM_FD";
const CHILD_LINE: &str = "PROXY_TEST_HOSTMEM_LINE";

/// Not a test of its own: the child side of `memfd_trigger_from_a_child_process_starts_the_task`
/// (does nothing unless the parent set the variables).
#[test]
fn hostmem_child_helper() {
    let (Ok(fd), Ok(line)) = (std::env::var(CHILD_FD), std::env::var(CHILD_LINE)) else {
        return;
    };
    let fd: i32 = fd.parse().unwrap();
    let line: usize = line.parse().unwrap();
    // SAFETY: the parent passed us this inherited fd; we own our copy.
    let mem = HostMem::from_fd(unsafe { OwnedFd::from_raw_fd(fd) }).unwrap();
    let trig = mem.line_word(line).unwrap();
    assert_eq!(trig.load(), u32::MAX, "parent armed the trigger");
    trig.store(1); // the device reached the net stage
                   // wait (bounded) for the proxy to consume it
    let check = deadline(20);
    while trig.load() != 0 {
        check();
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn memfd_trigger_from_a_child_process_starts_the_task() {
    let mem = Arc::new(HostMem::new(4).unwrap());
    let _pad: TriggerWord = mem.alloc().unwrap();
    let trig: TriggerWord = mem.alloc().unwrap();
    assert_eq!(trig.line(), 1);
    assert_eq!(trig.addr() - mem.base_addr(), LINE as u64);
    let reg = registry(&cfg(1, 16)).unwrap();
    let s = Script::new(1);
    let mut m = reg.join(0).unwrap();
    // SAFETY: `mem` outlives the task (it lives to the end of this test, after the task ended).
    let triggers = TriggerWords::new(&[unsafe { trig.word() }]).unwrap();
    triggers.arm();
    let task = NetworkTask::new(NetworkTaskSpec {
        task_id: 5,
        // SAFETY: `s` lives to the end of this test, after the task ended.
        comm: unsafe { s.handle() },
        comm_id: 1,
        seam: seam(),
        blocks: vec![BlockFifos {
            stream: 0,
            bb: 0,
            ..Default::default()
        }],
        schedule: None,
        triggers,
        wait_for_device: true,
        skip: false,
        timeout_ns: Some(60_000_000_000),
    })
    .unwrap();
    m.slot.submit(Box::new(task)).unwrap();
    // the task waits for the device: filed, no progress call
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(s.counts(), (1, 0, 0));
    // hand the memfd to a child (dup clears close-on-exec)
    // SAFETY: dup of a valid fd.
    let dup = unsafe { libc::dup(std::os::fd::AsRawFd::as_raw_fd(&mem.fd())) };
    assert!(dup >= 0);
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "hostmem_child_helper",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD_FD, dup.to_string())
        .env(CHILD_LINE, trig.line().to_string())
        .status()
        .unwrap();
    // SAFETY: our copy of the dup'd fd, no longer needed.
    unsafe { libc::close(dup) };
    assert!(status.success(), "child failed: {status:?}");
    let rec = m
        .slot
        .wait_record(&waiter(Duration::from_micros(20)))
        .unwrap();
    assert_eq!((rec.task_id, rec.status()), (5, NrtStatus::Success));
    assert!(
        s.counts().1 >= 1,
        "the task progressed after the child's trigger"
    );
    assert_eq!(trig.load(), 0, "trigger consumed");
    reg.leave(m, &waiter(Duration::ZERO));
}
