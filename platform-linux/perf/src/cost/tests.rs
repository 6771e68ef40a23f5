use super::*;

#[test]
fn a_sleep_switches_voluntarily_and_burns_no_cpu_and_a_spin_burns_cpu() {
    let a = ProcCost::now();
    std::thread::sleep(Duration::from_millis(20));
    let slept = ProcCost::now().since(&a);
    assert!(slept.voluntary >= 1, "{slept:?}");
    let b = ProcCost::now();
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_millis(30) {
        std::hint::spin_loop();
    }
    let spun = ProcCost::now().since(&b);
    assert!(spun.cpu >= Duration::from_millis(10), "{spun:?}");
    assert!(spun.cpu_percent(t.elapsed()) > 30.0);
    assert_eq!(ProcCost::default().switches_per(0), (0.0, 0.0));
    let c = ProcCost {
        voluntary: 10,
        involuntary: 4,
        cpu: Duration::ZERO,
    };
    assert_eq!(c.switches_per(2), (5.0, 2.0));
}
