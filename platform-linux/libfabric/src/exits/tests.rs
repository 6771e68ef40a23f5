//! A child process watched through its pidfd: alive, then exited (a zombie until reaped).

use super::*;

#[test]
fn a_child_reads_alive_then_exited_and_bad_pids_are_not_watched() {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep");
    let w = PeerExit::open(child.id()).expect("pidfd of a live child");
    assert_eq!(w.pid(), child.id());
    assert!(!w.exited(), "a running child");
    child.kill().expect("kill the child");
    // Not reaped yet: a zombie reads exited too. Bounded: 2 s in 1 ms steps.
    let mut polls = 0;
    while !w.exited() {
        polls += 1;
        assert!(polls < 2000, "the killed child never read as exited");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    child.wait().expect("reap the child");
    assert!(w.exited(), "a reaped child stays exited");
    assert!(PeerExit::open(0).is_none(), "pid 0");
    assert!(PeerExit::open(u32::MAX).is_none(), "a pid out of range");
}
