//! The C API of redis-lock: opaque handles, plain result codes and a thread-local error
//! message over the Rust API, for C and C++ programs. Builds `libredis_lock_ffi.so` and
//! `libredis_lock_ffi.a`, installed as `libredis_lock` (see `scripts/install-c`); the header, `include/redis_lock.h`, is generated from this crate by
//! cbindgen (`ffi/cbindgen.toml`). `scripts/install-c` installs both with pkg-config and CMake
//! files (docs/C.md).
//!
//! A crate of its own so that Rust programs, which depend on `redis-lock`, build no C
//! libraries, and so that `redis-lock` has no `unsafe` code at all. This is where the unsafe
//! code is: it turns C pointers into references after checking them for NULL, and every
//! `extern "C"` body runs behind a panic boundary ([`boundary::guarded`]), so no Rust panic
//! ever unwinds into C.
#![deny(missing_docs)]
// The exported names are C's: `redis_lock_manager`, `REDIS_LOCK_OK`, ...
#![allow(non_camel_case_types)]

mod boundary;
mod fair_lock;
mod lock;
mod manager;
mod read_write_lock;
mod semaphore;
mod stats;
