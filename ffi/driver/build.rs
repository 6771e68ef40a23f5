//! Link flags of `libnrt_proxy.so`.

fn main() {
    // The SONAME: the major of the library's C ABI (`NRT_PROXY_ABI_VERSION_MAJOR`). A program
    // linked with `-lnrt_proxy` records `libnrt_proxy.so.1` and loads only a library of the same
    // major (README "ABI versions").
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnrt_proxy.so.1");
    // `-z nodelete`: dlclose() never unmaps the library (thread-local destructors, the logger and
    // other process-lifetime statics live in it), as libnccom_proxy.so.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");
}
