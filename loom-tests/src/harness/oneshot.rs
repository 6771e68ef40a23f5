//! Model 15: a one-shot hand-over (`driver::oneshot::OneShot`): a library thread sets the
//! outcome of its launch while the caller waits for it (`nrt_proxy_host_device_start` /
//! `_wait`).
//!
//! [`oneshot_set_vs_wait`]: one thread sets a value (a heap string, so that a read before the
//! write is a data race loom sees) while another waits for it without a timeout, parking on the
//! cell. Checked: the waiter gets exactly the value set; a lost wake-up is a deadlock.

use proxy_core::base::sync::Arc;
use proxy_core::base::time::NoClock;
use proxy_core::driver::oneshot::OneShot;

use super::{thread, ModelPark};

/// The model body (see the module docs).
pub fn oneshot_set_vs_wait() {
    let o = Arc::new(OneShot::new());
    let setter = {
        let o = o.clone();
        thread::spawn(move || assert!(o.set(String::from("launch done"))))
    };
    let got = o.wait(&ModelPark::default(), &NoClock, None);
    assert_eq!(
        got.as_deref(),
        Some("launch done"),
        "the waiter gets the value set"
    );
    setter.join().unwrap();
    assert!(!o.set(String::from("again")), "a second set is refused");
}

#[cfg(all(test, not(loom)))]
mod tests;
