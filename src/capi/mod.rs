//! The C API: opaque handles, plain result codes and a thread-local error message over the
//! Rust API, for C and C++ programs (`include/redis_lock.h`, generated from this module by
//! cbindgen).
//!
//! This is the only module with `unsafe` code: it turns C pointers into references after
//! checking them for NULL, and every `extern "C"` body runs behind a panic boundary
//! ([`boundary::guarded`]), so no Rust panic ever unwinds into C.
#![allow(unsafe_code)]
// The exported names are C's: `redis_lock_manager`, `REDIS_LOCK_OK`, ...
#![allow(non_camel_case_types)]

mod boundary;
mod fair_lock;
mod lock;
mod manager;
mod read_write_lock;
mod semaphore;
mod stats;
