use super::*;
use log::LevelFilter;

#[test]
fn levels() {
    assert_eq!(level_from(None), LevelFilter::Error);
    assert_eq!(level_from(Some("debug")), LevelFilter::Debug);
    assert_eq!(level_from(Some(" WARN ")), LevelFilter::Warn);
    assert_eq!(level_from(Some("off")), LevelFilter::Off);
    assert_eq!(level_from(Some("bogus")), LevelFilter::Error);
}

#[test]
fn guard_answers_results_and_catches_panics() {
    assert_eq!(guard("t", || Ok(())), crate::NRT_SUCCESS);
    assert_eq!(guard("t", || Err(NrtStatus::Invalid)), crate::NRT_INVALID);
    assert_eq!(guard("t", || panic!("boom")), NRT_FAILURE);
    assert_eq!(
        lookup_status("t", "comm", 1, LookupError::Busy),
        NrtStatus::Failure
    );
    assert_eq!(
        lookup_status("t", "comm", 1, LookupError::Stale),
        NrtStatus::InvalidHandle
    );
}

struct Obj {
    poisoned: bool,
    failures: u32,
}

impl Guarded for Obj {
    fn poisoned(&mut self) -> &mut bool {
        &mut self.poisoned
    }

    fn note_failure(&mut self, _what: &str, _status: NrtStatus) {
        self.failures += 1;
    }
}

#[test]
fn insert_and_handle_out() {
    let table: &HandleTable<u8, 1> = &HandleTable::new(0x7E58);
    let mut out: *mut u8 = core::ptr::dangling_mut();
    // SAFETY: a local, writable and aligned.
    let o = unsafe { c_handle_out("t", &raw mut out) }.unwrap();
    assert!(o.is_null(), "NULL before anything can fail");
    *o = insert_live("t", "obj", table, 1).unwrap();
    assert_eq!(
        insert_live::<u8, u8, 1>("t", "obj", table, 2),
        Err(NrtStatus::Resource)
    );
    assert_eq!(remove_live("t", "obj", table, out.addr()), Ok(1));
    assert_eq!(
        c_handle("t", "obj", core::ptr::null_mut::<u8>()),
        Err(NrtStatus::InvalidHandle)
    );
    assert_eq!(c_handle("t", "obj", out), Ok(out.addr()));
    // SAFETY: NULL is refused before any access.
    assert!(unsafe { c_handle_out::<u8>("t", core::ptr::null_mut()) }.is_err());
}

#[test]
fn entry_looks_up_and_guards() {
    let table: &HandleTable<Obj> = &HandleTable::new(0x7E57);
    let h = table
        .insert(Obj {
            poisoned: false,
            failures: 0,
        })
        .ok()
        .unwrap();
    let call = |f: fn(&mut Obj) -> Result<(), NrtStatus>| {
        crate::entry!(WHAT = "t", {
            with_live(WHAT, "obj", table, h, |o| {
                call_guarded(WHAT, "obj", h, o, f)
            })
        })
    };
    assert_eq!(call(|_| Ok(())), crate::NRT_SUCCESS);
    assert_eq!(call(|_| Err(NrtStatus::Invalid)), crate::NRT_INVALID);
    assert_eq!(with_live("t", "obj", table, h, |o| Ok(o.failures)), Ok(1));
    assert_eq!(call(|_| panic!("planted")), NRT_FAILURE);
    assert_eq!(call(|_| Ok(())), NRT_FAILURE, "poisoned");
    assert!(remove_live("t", "obj", table, h).is_ok());
    assert_eq!(call(|_| Ok(())), crate::NRT_INVALID_HANDLE, "stale");
    assert!(remove_live("t", "obj", table, h).is_err());
}
