//! Link flags of `libnccom_proxy.so`.

fn main() {
    // The SONAME: the major of the C ABI (`NCCOM_PROXY_ABI_VERSION_MAJOR`). A program linked with
    // `-lnccom_proxy` records `libnccom_proxy.so.1`, and `libnrt_proxy.so` loads
    // `libnccom_proxy.so.1` by default (README "ABI versions").
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccom_proxy.so.1");
    // `-z nodelete`: dlclose() never unmaps the library. A Rust library is not safe to unload
    // (thread-local destructors, the logger and other process-lifetime statics live in it), and
    // unmapping would turn that process-lifetime state into leaks.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");
}
