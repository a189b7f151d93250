//! Gives the shared library (built as `libredis_rlock_ffi.so`) the versioned soname it is
//! installed under on ELF targets, `libredis_rlock.so.<major>`, as C libraries have: programs linked against it then record that name and keep loading a
//! compatible library when a newer one with another major version is installed beside it.
//! `scripts/install-c` installs the file as `libredis_rlock.so.<version>`, with the soname and
//! `libredis_rlock.so` as symlinks.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    // ELF systems whose linkers take GNU's `-soname`; macOS (install names) and Windows (DLL
    // names) version their libraries otherwise.
    if matches!(
        target_os.as_str(),
        "linux" | "android" | "freebsd" | "netbsd" | "openbsd" | "dragonfly"
    ) {
        let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets it");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libredis_rlock.so.{major}");
    }
}
