//! Finds the system libfabric with pkg-config, compiles the C shim of its `static inline` calls
//! and generates bindings for the allowlisted part of its API.

use std::env;
use std::path::PathBuf;

/// Oldest libfabric whose headers and ABI the backend is written against (Debian 12 ships it).
const MIN_VERSION: &str = "1.17";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=shim/shim.h");
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    // First probe without emitting link lines: only the include paths are needed to compile the
    // shim, and the shim's static archive must come before `-lfabric` on the link line.
    let lib = probe(false);
    cc::Build::new()
        .file("shim/shim.c")
        .includes(&lib.include_paths)
        .warnings(true)
        .extra_warnings(true)
        .compile("libfabric_sys_shim");
    let _ = probe(true);
    println!("cargo:rustc-env=LIBFABRIC_SYS_PKG_VERSION={}", lib.version);

    let mut builder = bindgen::Builder::default()
        .header("shim/shim.h")
        .clang_args(
            lib.include_paths
                .iter()
                .map(|p| format!("-I{}", p.display())),
        )
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .parse_callbacks(Box::new(MacroTypes))
        .use_core()
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .generate_comments(true)
        .prepend_enum_name(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        // Written by hand in lib.rs: bindgen cannot evaluate the casts, or 2.x headers may drop
        // the name.
        .blocklist_item("FI_ADDR_UNSPEC|FI_ADDR_NOTAVAIL|FI_KEY_NOTAVAIL|FI_CONTEXT|FI_CONTEXT2");
    for f in [
        "fi_getinfo",
        "fi_freeinfo",
        "fi_dupinfo",
        "fi_fabric",
        "fi_strerror",
        "fi_version",
        "lfsys_fi_.*",
    ] {
        builder = builder.allowlist_function(f);
    }
    for t in [
        "fi_info",
        "fi_cq_tagged_entry",
        "fi_cq_err_entry",
        "fi_cq_attr",
        "fi_av_attr",
    ] {
        builder = builder.allowlist_type(t);
    }
    for v in [
        // Capabilities and operation flags.
        "FI_(MSG|RMA|TAGGED|COLLECTIVE|READ|WRITE|RECV|SEND|TRANSMIT|REMOTE_READ|REMOTE_WRITE)",
        "FI_(DIRECTED_RECV|SOURCE|LOCAL_COMM|REMOTE_COMM)",
        // Memory-registration modes, message ordering, versions.
        "FI_MR_(LOCAL|RAW|VIRT_ADDR|ALLOCATED|PROV_KEY|MMU_NOTIFY|RMA_EVENT|ENDPOINT|HMEM)",
        "FI_ORDER_SAS",
        "FI_(MAJOR|MINOR)_VERSION",
        // Error numbers (positive; calls return their negation).
        "FI_(SUCCESS|EAGAIN|ENOMEM|EBUSY|EINVAL|ENOSYS|ENODATA|ENOENT|ECANCELED|EAVAIL|ETRUNC)",
        "FI_(ETOOSMALL|ENOKEY|EOTHER|ECONNREFUSED|ECONNRESET|ENOTCONN|EIO|EALREADY)",
        // Enumerations the backend sets or reads.
        "FI_EP_RDM",
        "FI_THREAD_DOMAIN",
        "FI_PROGRESS_(UNSPEC|AUTO|MANUAL)",
        "FI_AV_(TABLE|MAP|UNSPEC)",
        "FI_CQ_FORMAT_TAGGED",
        "FI_WAIT_(NONE|FD)",
        "FI_ADDR_(STR|SOCKADDR_IN|SOCKADDR_IN6)",
    ] {
        builder = builder.allowlist_var(v);
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        panic!(
            "libfabric-sys: bindgen failed on shim/shim.h ({e}); it needs libclang \
             (`apt-get install -y libclang-dev`)"
        )
    });
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs to OUT_DIR");
}

/// Gives the `#define` constants one Rust type per family instead of the smallest that fits:
/// capability, mode and order bits are `u64` and MR-mode bits `c_int` (the types of the `fi_info`
/// fields they go into), error numbers and versions `u32` (like the enumerators of `fi_errno.h`).
#[derive(Debug)]
struct MacroTypes;

impl bindgen::callbacks::ParseCallbacks for MacroTypes {
    fn int_macro(&self, name: &str, _value: i64) -> Option<bindgen::callbacks::IntKind> {
        use bindgen::callbacks::IntKind;
        if name.starts_with("FI_E") || name == "FI_SUCCESS" || name.ends_with("_VERSION") {
            Some(IntKind::U32)
        } else if name.starts_with("FI_MR_") {
            Some(IntKind::Int)
        } else {
            Some(IntKind::U64)
        }
    }
}

/// Probes pkg-config for libfabric >= [`MIN_VERSION`], with or without cargo link metadata.
fn probe(emit: bool) -> pkg_config::Library {
    pkg_config::Config::new()
        .atleast_version(MIN_VERSION)
        .cargo_metadata(emit)
        .probe("libfabric")
        .unwrap_or_else(|e| {
            panic!(
                "libfabric-sys: libfabric >= {MIN_VERSION} not found by pkg-config ({e}). \
                 Install it (Debian: `apt-get install -y libfabric-dev pkg-config`) or set \
                 PKG_CONFIG_PATH to the directory holding libfabric.pc."
            )
        })
}
