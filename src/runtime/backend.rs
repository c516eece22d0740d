//! What a calling backend does around the lock-free hot paths: find its
//! database's slot, start the database's worker, and wait (bounded) for it.
//! Must not run SQL or change a table: anything that talks to the database is the worker's.

use crate::errors::raise;
use crate::runtime::shmem::{Role, Shared, WORKER_START_GRACE_MS};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// Registrations tried, 20 ms apart, before "no background worker slot".
const START_ATTEMPTS: u32 = 50;

pub fn my_dboid() -> u32 {
    // SAFETY: MyDatabaseId is this process's plain Oid global, set by InitPostgres before any SQL
    // function or worker job runs and never changed after; read by value on the process's one
    // thread.
    unsafe { pg_sys::MyDatabaseId.to_u32() }
}

/// This database's slot, cached per backend.
pub fn my_db_slot(sh: &Shared) -> usize {
    static mut CACHED: Option<usize> = None;
    // SAFETY: CACHED is a static of this process (not in shared memory) that only this function
    // touches, by value (no reference to it is made), on the one thread that runs SQL functions; a
    // cached index is a hint only, used after its slot's owner is checked to be this database.
    unsafe {
        if let Some(i) = CACHED
            && sh.db(i).dboid.load(SeqCst) == my_dboid()
        {
            return i;
        }
        let slot = sh.db_slot(my_dboid()).or_else(|| {
            reclaim_dropped_databases(sh);
            sh.db_slot(my_dboid())
        });
        match slot {
            Some(i) => {
                CACHED = Some(i);
                i
            }
            None => raise(
                PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
                format!(
                    "leaf_id is used by {} databases already (leaf_id.max_databases = {})",
                    sh.n_dbs(),
                    sh.n_dbs()
                ),
                Some("Raise leaf_id.max_databases and restart the server."),
            ),
        }
    }
}

/// Does the database exist (needs a transaction)?
pub fn database_exists(dboid: u32) -> bool {
    // SAFETY: the syscache needs a transaction, which every caller is in: `exists` of
    // `Shared::reclaim_dropped_databases` and `forget_marks_of_dropped_databases`, called from SQL
    // functions and from worker jobs inside `in_transaction`, with none of leaf_id's LWLocks held;
    // the keys are Datums by value.
    unsafe {
        pg_sys::SearchSysCacheExists(
            pg_sys::SysCacheIdentifier::DATABASEOID as i32,
            pg_sys::Datum::from(dboid),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
        )
    }
}

/// Free the slots of databases that were dropped (needs a transaction).
pub fn reclaim_dropped_databases(sh: &Shared) -> bool {
    sh.reclaim_dropped_databases(database_exists)
}

/// Make sure the database's worker of this mode runs (or is starting);
/// wake it.
pub fn ensure_worker(sh: &Shared, db: usize, role: Role) {
    let worker = sh.db(db).worker(role);
    if worker.pid.load(SeqCst) != 0 {
        sh.wake_worker(db, role);
        return;
    }
    let now = crate::runtime::clock::unix_ms();
    {
        let _g = sh.lock_global();
        if sh.db(db).dboid.load(SeqCst) != my_dboid() {
            // the slot went to another database since the caller found it:
            // its next look finds this database's slot
            return;
        }
        if worker.pid.load(SeqCst) != 0 {
            drop(_g);
            sh.wake_worker(db, role);
            return;
        }
        let requested = worker.requested_at.load(SeqCst);
        if requested != 0 && now - requested < WORKER_START_GRACE_MS {
            return;
        }
        worker.requested_at.store(now, SeqCst);
    }
    // a worker that has just left (idle) holds its background worker slot
    // until the postmaster has reaped it: with no spare slot, try again
    // for a moment before calling it a configuration limit
    let started = (0..START_ATTEMPTS).any(|attempt| {
        if attempt > 0 {
            pgrx::check_for_interrupts!();
            crate::runtime::clock::wait_on_latch(Duration::from_millis(20));
        }
        let started = crate::runtime::bgworker::start_dynamic(my_dboid(), role);
        if started && attempt > 0 {
            pgrx::log!(
                "leaf_id: started the {} at attempt {} (no background worker slot was free before)",
                role.backend_type(),
                attempt + 1
            );
        }
        started
    });
    if !started {
        worker.requested_at.store(0, SeqCst);
        raise(
            PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!(
                "could not start the {} for this database",
                role.backend_type()
            ),
            Some(
                "Each database that uses leaf_id needs a background worker per mode it uses (segment, snowflake): raise max_worker_processes.",
            ),
        );
    }
}

/// A deadline for waiting on the worker, from leaf_id.refill_timeout.
#[derive(Clone, Copy)]
pub struct Deadline(Instant);

impl Deadline {
    pub fn from_setting() -> Deadline {
        Deadline(
            Instant::now() + Duration::from_millis(crate::settings::REFILL_TIMEOUT.get() as u64),
        )
    }
    pub fn passed(&self) -> bool {
        Instant::now() >= self.0
    }
    fn remaining_ms(&self) -> i64 {
        self.0.saturating_duration_since(Instant::now()).as_millis() as i64
    }
}

/// Sleep on the database's condition variable until woken or a short time
/// passes. Call `prepare_wait` before checking the condition to avoid a
/// lost wakeup. Interruptible (query cancel works).
pub fn prepare_wait(sh: &Shared, db: usize) {
    // SAFETY: the condition variable is the database slot's, in shared memory for the server's
    // lifetime and initialised at startup (PostgreSQL's CV calls lock it); a backend has the PGPROC
    // and latch a sleep needs. A process sleeps on one CV at a time: this cancels an earlier
    // prepare.
    unsafe { pg_sys::ConditionVariablePrepareToSleep(sh.db(db).cv.get()) };
}

pub fn wait(sh: &Shared, db: usize, deadline: &Deadline) {
    let ms = deadline.remaining_ms().clamp(1, 100);
    // SAFETY: as in `prepare_wait`: a valid, initialised CV in shared memory, and a backend with
    // its own latch to wait on; a cancel raised in the sleep is an ordinary ERROR, which unwinds
    // from here (the transaction's abort cancels the prepared sleep).
    unsafe {
        pg_sys::ConditionVariableTimedSleep(sh.db(db).cv.get(), ms, pg_sys::PG_WAIT_EXTENSION);
    }
}

pub fn end_wait() {
    // SAFETY: takes no pointer, and only undoes this process's prepared sleep (nothing if none).
    unsafe { pg_sys::ConditionVariableCancelSleep() };
}

/// The shared region, or a clear error when the library was not preloaded.
pub fn shared_or_raise() -> &'static crate::runtime::shmem::Shared {
    match crate::runtime::shmem::shared() {
        Some(s) => s,
        None => crate::errors::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "leaf_id is not loaded through shared_preload_libraries",
            Some(
                "Add leaf_id to shared_preload_libraries in postgresql.conf and restart the server.",
            ),
        ),
    }
}

pub fn shared_db() -> (&'static Shared, usize) {
    let sh = shared_or_raise();
    let db = my_db_slot(sh);
    (sh, db)
}

/// `n` IDs for a batch call, drawn in chunks: `take(left)` gives up to
/// `left` consecutive values as `(first, count, encode)`, `count >= 1`,
/// each handed out as `encode(value)` (an opaque tag's permutation, or the
/// value itself), called for the chunk's values in increasing order. NULL
/// and negative `n` are refused.
pub fn ids_in_chunks<E: FnMut(i64) -> i64 + 'static>(
    n: Option<i32>,
    mut take: impl FnMut(i64) -> (i64, i64, E) + 'static,
) -> pgrx::iter::SetOfIterator<'static, i64> {
    let n = match n {
        None => raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "the number of IDs must not be NULL",
            None,
        ),
        Some(n) if n < 0 => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("the number of IDs must not be negative (got {n})"),
            None,
        ),
        Some(n) => n as i64,
    };
    // one chunk at a time, as the rows are read: a huge batch holds no
    // list of IDs, can be cancelled between any two chunks, and takes IDs
    // no faster than its rows are used
    let mut left = n;
    let mut chunk = 0..0;
    let mut encode: Option<E> = None;
    pgrx::iter::SetOfIterator::new(std::iter::from_fn(move || {
        if chunk.is_empty() {
            if left == 0 {
                return None;
            }
            pgrx::check_for_interrupts!();
            let (first, count, e) = take(left);
            chunk = first..first + count;
            encode = Some(e);
            left -= count;
        }
        let value = chunk.next()?;
        Some(encode.as_mut().map_or(value, |e| e(value)))
    }))
}
