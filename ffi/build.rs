//! Link flags of `libnccom_proxy.so`.

fn main() {
    // `-z nodelete`: dlclose() never unmaps the library. A Rust library is not safe to unload
    // (thread-local destructors, the logger and other process-lifetime statics live in it), and
    // unmapping would turn that process-lifetime state into leaks.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");
}
