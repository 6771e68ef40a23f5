use super::*;

#[test]
fn an_explicit_name_is_the_only_candidate() {
    let d = std::env::temp_dir();
    assert_eq!(
        candidates(Some("/opt/x/libp.so".into()), Some(d)),
        vec![PathBuf::from("/opt/x/libp.so")]
    );
}

#[test]
fn the_copy_beside_this_library_comes_before_the_standard_search() {
    let dir = std::env::temp_dir().join(format!("nrt-proxy-locate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // No copy beside: the standard search only.
    assert_eq!(
        candidates(None, Some(dir.clone())),
        vec![PathBuf::from(PROGRESS_LIB_SONAME)]
    );
    std::fs::write(dir.join(PROGRESS_LIB_SONAME), b"").unwrap();
    assert_eq!(
        candidates(None, Some(dir.clone())),
        vec![
            dir.join(PROGRESS_LIB_SONAME),
            PathBuf::from(PROGRESS_LIB_SONAME)
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dladdr_names_the_object_of_a_function() {
    // In a test binary the function lives in the executable: its directory.
    let d = dir_of(dir_of as *const c_void).expect("dladdr knows the test binary");
    let exe = std::env::current_exe().unwrap();
    assert_eq!(d, exe.parent().unwrap());
}
