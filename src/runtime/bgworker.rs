//! A leaf_id background worker's identity: its argument packing, starting a
//! dynamic worker of a mode for a database, the context its jobs get, and
//! PostgreSQL's SIGTERM handler. Owns no loop and no job (`worker_loop`,
//! the modes' `jobs`); helpers (`citus::renewal_helper`) use it too.

use crate::runtime::job_error::{EXTENSION_GONE, JobError};
use crate::runtime::shmem::{Role, Shared};
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::pg_sys;

/// Two numbers in one Datum: a background worker's argument (and its exit
/// callback's), such as a database and a mode.
pub(crate) fn pack_pair(low: u32, high: u32) -> pg_sys::Datum {
    pg_sys::Datum::from((low as u64) | ((high as u64) << 32))
}

pub(crate) fn unpack_pair(arg: pg_sys::Datum) -> (u32, u32) {
    let v = arg.value() as u64;
    (v as u32, (v >> 32) as u32)
}

/// The worker's argument: its database (an OID or a slot index) and its mode.
pub(crate) fn pack(what: u32, role: Role) -> pg_sys::Datum {
    pack_pair(what, role as u32)
}

pub(crate) fn unpack(arg: pg_sys::Datum) -> (u32, Role) {
    let (what, role) = unpack_pair(arg);
    (what, Role::from_index(role as usize))
}

/// Register a dynamic background worker of this mode for the database.
/// False if Postgres has no free worker slot.
pub fn start_dynamic(dboid: u32, role: Role) -> bool {
    BackgroundWorkerBuilder::new(&format!("{} for database {dboid}", role.backend_type()))
        .set_type(role.backend_type())
        .set_library("leaf_id")
        .set_function("leaf_id_worker_main")
        .set_argument(Some(pack(dboid, role)))
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .load_dynamic()
        .is_ok()
}

/// What every job of the worker needs: shared memory, its database, and
/// whether it should stop.
pub struct WorkerContext {
    pub sh: &'static Shared,
    pub db: usize,
    pub dboid: u32,
    pub role: Role,
    pub extension_gone: bool,
    /// a job left work for the next round (no sleep before it)
    pub more_work: bool,
}

impl WorkerContext {
    /// Look at a job's error: a dropped extension ends the worker.
    pub fn note(&mut self, e: &JobError) {
        if e.message == EXTENSION_GONE {
            self.extension_gone = true;
        }
    }

    /// Was the worker told to terminate (SIGTERM: shutdown, or
    /// pg_terminate_backend)? (A commit whose wait for a synchronous standby
    /// the signal cut short is refused by `in_transaction`.)
    pub fn stopping(&self) -> bool {
        // SAFETY: ProcDiePending is this process's `volatile sig_atomic_t`, set by PostgreSQL's
        // SIGTERM handler (`die`) on this same thread; a volatile read through a raw pointer, with
        // no reference to the static, is how C reads it too.
        unsafe { (&raw const pg_sys::ProcDiePending).read_volatile() != 0 }
    }
}

// SAFETY: the declaration matches PostgreSQL's `void die(SIGNAL_ARGS)` (tcopprot.h: one int, no
// result, no unwinding); it is only handed to `set_sigterm_handler` as a signal handler, never
// called from Rust.
unsafe extern "C-unwind" {
    /// PostgreSQL's own SIGTERM handler of backends (pgrx wraps `pg_sys::die`
    /// in a Rust function; a signal handler needs the C symbol).
    #[link_name = "die"]
    pub(crate) fn postgres_die(signo: std::ffi::c_int);
}
