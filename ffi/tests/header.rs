//! The committed C header is what cbindgen generates from the current sources.
//!
//! `UPDATE_HEADER=1 cargo test -p proxy-ffi --test header` rewrites it.

use std::path::Path;

#[test]
fn committed_header_is_fresh() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    // Exactly the files that define the C ABI: the exports, their types, and the descriptors.
    let bindings = cbindgen::Builder::new()
        .with_src(dir.join("src/lib.rs"))
        .with_src(dir.join("../core/abi/src/lib.rs"))
        .with_src(dir.join("../core/src/base/desc.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen generation");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let fresh = String::from_utf8(fresh).expect("utf-8 header");
    let path = dir.join("include/nccom_proxy.h");
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&path, &fresh).expect("write header");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != fresh {
        let first = committed
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(fresh.lines().count()));
        panic!(
            "{} is stale (first difference at line {}); regenerate it with \
             `UPDATE_HEADER=1 cargo test -p proxy-ffi --test header` and commit it",
            path.display(),
            first + 1
        );
    }
}
