//! The state dump of every proxy queue of a registry (docs/design.md §6): on an API call and
//! on the signal of `NEURON_RT_PROXY_DUMP_SIGNAL`, with real worker threads.
//!
//! Every wait is bounded by a count and a time.

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proxy_core::base::dump_lines::DUMP_TARGET;
use proxy_core::base::host_word::HostWord;
use proxy_core::driver::dump::DumpOutcome;
use proxy_core::driver::queue::TaskBox;
use proxy_core::driver::record::RunState;
use proxy_core::driver::task::{BlockFifos, NetworkTask, NetworkTaskSpec};
use proxy_core::driver::trigger::TriggerWords;
use proxy_core::testing::{seam, Script};
use proxy_runtime::dump::{dump_all, DumpSignal};
use proxy_runtime::worker::waiter;
use proxy_runtime::{registry, Config};

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target() == DUMP_TARGET
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            LINES.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

fn capture() {
    static CAPTURE: Capture = Capture;
    if log::set_logger(&CAPTURE).is_ok() {
        log::set_max_level(log::LevelFilter::Error);
    }
}

fn lines_with(key: &str) -> Vec<String> {
    LINES
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(key))
        .cloned()
        .collect()
}

/// A network task of comm `comm_id` waiting for `trigger` (armed: the device never writes it).
fn blocked_task(s: &Arc<Script>, id: u32, comm_id: u32, trigger: HostWord) -> TaskBox {
    Box::new(
        NetworkTask::new(NetworkTaskSpec {
            task_id: id,
            // SAFETY: the test keeps its Script alive until its tasks are reported.
            comm: unsafe { s.handle() },
            comm_id,
            seam: seam(),
            blocks: vec![BlockFifos {
                stream: 0,
                bb: 0,
                ..Default::default()
            }],
            schedule: None,
            triggers: TriggerWords::new(&[trigger]).unwrap(),
            wait_for_device: true,
            skip: false,
            timeout_ns: None,
        })
        .unwrap(),
    )
}

/// Two groups (one rank each), each with a network task blocked on its device: one API call
/// dumps both queues, each by its own worker thread, and the signal does the same.
#[test]
fn every_queue_of_a_registry_with_two_groups_is_dumped_on_call_and_on_signal() {
    capture();
    let words: Vec<&'static AtomicU32> = (0..2)
        .map(|_| &*Box::leak(Box::new(AtomicU32::new(0))))
        .collect();
    let reg = Arc::new(registry(&Config::default()).unwrap());
    let script = Arc::new(Script::new(0));
    let mut members = Vec::new();
    let mut live = Vec::new();
    for rank in 0..2u32 {
        let trigger = HostWord::from_static(words[rank as usize]);
        TriggerWords::new(&[trigger]).unwrap().arm();
        let mut m = reg.join(rank).unwrap();
        let task = blocked_task(&script, 40 + rank, 70 + rank, trigger);
        live.push(task.status_record());
        m.slot.submit(task).unwrap();
        members.push(m);
    }
    // Both tasks mid-run: filed, waiting for their devices (bounded wait).
    let end = Instant::now() + Duration::from_secs(20);
    while !live
        .iter()
        .all(|r| r.load().state() == Some(RunState::WaitingDeviceTrigger))
    {
        assert!(
            Instant::now() < end,
            "the tasks never reached the trigger wait"
        );
        std::thread::yield_now();
    }
    assert_eq!(reg.group_count(), 2);
    let out = dump_all(&reg, Duration::from_secs(10));
    assert_eq!(
        out,
        vec![(0, DumpOutcome::Written), (1, DumpOutcome::Written)]
    );
    for g in 0..2u32 {
        let head = lines_with(&format!(" group={g} reason=request mode=thread"));
        assert_eq!(head.len(), 1, "one header for group {g}: {head:?}");
        let queue = head[0]
            .split(' ')
            .find_map(|f| f.strip_prefix("queue="))
            .unwrap()
            .to_string();
        let mine = lines_with(&format!("queue={queue} "));
        let task = format!(
            "queue={queue} slot=0 task={} kind=network state=WaitingDeviceTrigger \
             status=NRT_SUCCESS comm={}",
            40 + g,
            70 + g
        );
        assert!(
            mine.iter().any(|l| l.contains(&task)),
            "{task} in {mine:#?}"
        );
        assert!(mine
            .iter()
            .any(|l| l.contains(" slot=0 task=") && l.contains("stream=0 block=0 pos=1/1")));
        assert!(mine
            .last()
            .unwrap()
            .ends_with(&format!("end lines={}", mine.len())));
    }
    assert_eq!(
        lines_with("proxy-dump registry groups=2 written=2 not_answered=0 driver_gone=0").len(),
        1
    );

    // The signal: the handler's watcher thread runs the same dump.
    let action_reg = reg.clone();
    let sig = DumpSignal::install(libc::SIGUSR2, move || {
        dump_all(&action_reg, Duration::from_secs(10));
    })
    .unwrap();
    // SAFETY: raise has no preconditions; SIGUSR2 has the handler installed just above.
    assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
    let end = Instant::now() + Duration::from_secs(20);
    while lines_with("proxy-dump registry groups=2 written=2").len() < 2 {
        assert!(Instant::now() < end, "the signal's dump never came");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(lines_with(" reason=request mode=thread").len(), 4);
    drop(sig);

    let w = waiter(Duration::from_micros(20));
    for (rank, m) in members.into_iter().enumerate() {
        words[rank].store(1, std::sync::atomic::Ordering::Release);
        let _ = reg.leave(m, &w);
    }
    assert_eq!(reg.group_count(), 0);
}
