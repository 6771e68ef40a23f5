//! The committed C header is what cbindgen generates from the current sources, and it compiles
//! cleanly as C11 and as C++17 (`-Wall -Wextra -Werror`), with the progress half's header.
//!
//! `UPDATE_HEADER=1 cargo test -p proxy-driver-ffi --test header` rewrites it.

use std::path::Path;
use std::process::Command;

fn dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn committed_header_is_fresh() {
    let config = cbindgen::Config::from_file(dir().join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_src(dir().join("src/lib.rs"))
        .with_src(dir().join("src/types.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen generation");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let fresh = String::from_utf8(fresh).expect("utf-8 header");
    let path = dir().join("include/nrt_proxy.h");
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
             `UPDATE_HEADER=1 cargo test -p proxy-driver-ffi --test header` and commit it",
            path.display(),
            first + 1
        );
    }
}

/// The header's `NRT_PROXY_PROVIDER_OWN_SHM` (written in cbindgen.toml's trailer: cbindgen emits
/// no string constant) is the library's.
#[test]
fn the_own_shm_provider_name_is_the_librarys() {
    let header = std::fs::read_to_string(dir().join("include/nrt_proxy.h")).expect("header");
    let define = format!(
        "#define NRT_PROXY_PROVIDER_OWN_SHM \"{}\"",
        nrt_proxy::NRT_PROXY_PROVIDER_OWN_SHM
    );
    assert!(header.contains(&define), "the header lacks `{define}`");
}

/// Compiles a translation unit that includes the header (and uses every type) as C11 with `cc`
/// and as C++17 with `c++`.
#[test]
fn header_compiles_as_c11_and_cpp17() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let src = "#include \"nrt_proxy.h\"\n\
               int use_all(void);\n\
               int use_all(void) {\n\
                 nrt_proxy_config_t c; nrt_proxy_comm_config_t cc; nrt_proxy_block_t b;\n\
                 nrt_proxy_network_task_t n; nrt_proxy_barrier_task_t bt; nrt_proxy_task_record_t r;\n\
                 nrt_proxy_plan_params_t pp; nrt_proxy_plan_layout_t pl; nrt_proxy_plan_block_info_t pb;\n\
                 nrt_proxy_plan_addresses_t pa; nrt_proxy_plan_instr_t pi; nrt_proxy_plan_t *plan = NULL;\n\
                 (void)c; (void)cc; (void)b; (void)n; (void)bt; (void)r;\n\
                 (void)pp; (void)pl; (void)pb; (void)pa; (void)pi; (void)plan;\n\
                 return (int)sizeof(nrt_proxy_task_record_t) + (int)NRT_PROXY_ABI_VERSION_MAJOR;\n\
               }\n";
    for (cc, std, ext) in [("cc", "-std=c11", "c"), ("c++", "-std=c++17", "cpp")] {
        let file = tmp.join(format!("nrt_proxy_header.{ext}"));
        std::fs::write(&file, src).expect("write source");
        let o = Command::new(cc)
            .args([std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-c", "-o"])
            .arg(tmp.join(format!("nrt_proxy_header_{ext}.o")))
            .arg("-I")
            .arg(dir().join("include"))
            .arg("-I")
            .arg(dir().join("../include"))
            .arg(&file)
            .output()
            .unwrap_or_else(|e| panic!("cannot run `{cc}`: {e} (install gcc / g++)"));
        assert!(
            o.status.success(),
            "{cc} {std} failed:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
