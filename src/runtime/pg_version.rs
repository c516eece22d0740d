//! Everything that differs between the PostgreSQL majors leaf_id builds for
//! (15 to 18, one Cargo feature each). One item per difference, each saying
//! what changed in which major; nothing else in the crate names a major.

use pgrx::pg_sys;

/// The major this library was built for.
#[cfg(feature = "pg15")]
pub const MAJOR: u32 = 15;
#[cfg(feature = "pg16")]
pub const MAJOR: u32 = 16;
#[cfg(feature = "pg17")]
pub const MAJOR: u32 = 17;
#[cfg(feature = "pg18")]
pub const MAJOR: u32 = 18;

/// The oldest minor release served. The May 2025 minors (15.13, 16.9,
/// 17.5) turned `WalSndCtl`'s flag of synchronous standbys from a bool into
/// a bit set (`sync_standbys_status`), which the worker reads to know that a
/// commit reached them (`transaction::commit_replicated`); on an older
/// minor the byte would be misread, and a cut-short wait would pass. 18 had
/// the bit set from its first release. (16.9 and 17.5 by the same backpatch
/// as 15.13; not checked against their headers, which this project's
/// machines cannot get.)
#[cfg(feature = "pg15")]
pub const MIN_SERVER_VERSION_NUM: i64 = 150013;
#[cfg(feature = "pg16")]
pub const MIN_SERVER_VERSION_NUM: i64 = 160009;
#[cfg(feature = "pg17")]
pub const MIN_SERVER_VERSION_NUM: i64 = 170005;
#[cfg(feature = "pg18")]
pub const MIN_SERVER_VERSION_NUM: i64 = 180000;

/// Install `handler` for SIGTERM in a background worker.
/// 18: `pqsignal` became a macro over `pqsignal_be` in the backend, which
/// returns nothing.
///
/// # Safety
///
/// `handler` must be safe to run as a signal handler at any point of this
/// process (async-signal-safe, no unwinding): the callers pass PostgreSQL's
/// own `die` (`bgworker::postgres_die`).
pub unsafe fn set_sigterm_handler(handler: unsafe extern "C-unwind" fn(std::ffi::c_int)) {
    // SAFETY: `pqsignal` installs `handler` for SIGTERM, a signal number it
    // accepts (sigaction; on 17 behind its wrapper that checks the pid), on
    // the process's one thread; the handler is fit to run at any time (this
    // function's Safety).
    #[cfg(any(feature = "pg15", feature = "pg16", feature = "pg17"))]
    unsafe {
        pg_sys::pqsignal(pg_sys::SIGTERM as i32, Some(handler));
    }
    // SAFETY: as above: `pqsignal_be` is 18's backend `pqsignal`, which
    // installs `handler` for SIGTERM the same way.
    #[cfg(feature = "pg18")]
    unsafe {
        pg_sys::pqsignal_be(pg_sys::SIGTERM as i32, Some(handler));
    }
}
