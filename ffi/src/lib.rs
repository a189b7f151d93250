//! The C API of redis-rlock: opaque handles, plain result codes and a thread-local error
//! message over the Rust API, for C and C++ programs. Builds `libredis_rlock_ffi.so` and
//! `libredis_rlock_ffi.a`; the header, `include/redis_rlock.h`, is generated from this crate by
//! cbindgen (`ffi/cbindgen.toml`). `scripts/install-c` installs the libraries as
//! `libredis_rlock`, with the header and pkg-config and CMake files (docs/C.md).
//!
//! A crate of its own so that Rust programs, which depend on `redis-rlock`, build no C
//! libraries, and so that `redis-rlock` has no `unsafe` code outside its tests. This is where
//! the unsafe code is: it turns C pointers into references after checking them for NULL, and
//! every `extern "C"` body runs behind a panic boundary (`boundary.rs`), so no Rust panic ever
//! unwinds into C.
#![deny(missing_docs)]
// The exported names are C's: `redis_rlock_manager`, `REDIS_RLOCK_OK`, ...
#![allow(non_camel_case_types)]

mod boundary;
mod cancel;
mod count_down_latch;
mod fair_lock;
mod health;
mod lock;
mod manager;
mod permit_expirable_semaphore;
mod read_write_lock;
mod semaphore;
mod spin_lock;
mod stats;
mod string_lock;

// Only the header's constant: public so that the compiler counts it as used.
pub use cancel::REDIS_RLOCK_WAIT_FOREVER;
pub use permit_expirable_semaphore::REDIS_RLOCK_PERMIT_ID_SIZE;
pub use semaphore::REDIS_RLOCK_SEMAPHORE_MAX_PERMITS;
