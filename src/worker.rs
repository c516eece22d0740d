//! The per-database background worker: every refill, worker-id claim and
//! high-water-mark renewal runs here, each in its own transaction with
//! synchronous_commit on, never in a caller's transaction.
//!
//! Started on demand by the first backend of a database that needs it (a
//! dynamic background worker), one per database; it exits when leaf_id is
//! dropped from the database.

use crate::clock::unix_us;
use crate::errors::code_of;
use crate::segment::buffer::MAX_SEGMENT_LEN;
use crate::segment::step::{PreviousRefill, StepPolicy};
use crate::settings;
use crate::shmem::{Shared, SnowflakeState, TagStatus, shared};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::spi::Spi;
use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// Register a dynamic background worker for the database. False if Postgres
/// has no free worker slot.
pub fn start_dynamic(dboid: u32) -> bool {
    BackgroundWorkerBuilder::new(&format!("leaf_id worker for database {dboid}"))
        .set_type("leaf_id worker")
        .set_library("leaf_id")
        .set_function("leaf_id_worker_main")
        .set_argument(Some(pg_sys::Datum::from(dboid)))
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .load_dynamic()
        .is_ok()
}

/// An error from a job, handed to the callers waiting for it.
#[derive(Debug)]
pub struct JobError {
    pub sqlstate: i32,
    pub message: String,
}

impl JobError {
    pub(crate) fn new(code: PgSqlErrorCode, message: impl Into<String>) -> JobError {
        JobError {
            sqlstate: code_of(code),
            message: message.into(),
        }
    }
}

/// Run `job` in a transaction of its own and commit it (synchronously: the
/// worker forces synchronous_commit on). Any error, Postgres' or the job's,
/// rolls the transaction back and is returned, not raised.
pub(crate) fn in_transaction<T>(
    job: impl FnOnce(&str) -> Result<T, JobError>,
) -> Result<T, JobError> {
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let mut committed = false;
    let committed_ref = AssertUnwindSafe(&mut committed);
    let job = AssertUnwindSafe(job);
    let result = PgTryBuilder::new(move || {
        let committed_ref = committed_ref;
        let job = job;
        let result = match extension_schema() {
            Some(schema) => (job.0)(&schema),
            None => Err(JobError::new(
                PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                EXTENSION_GONE,
            )),
        };
        if result.is_ok() {
            unsafe {
                pg_sys::PopActiveSnapshot();
                pg_sys::CommitTransactionCommand();
            }
            *committed_ref.0 = true;
        }
        result
    })
    .catch_others(|e| {
        let report = match &e {
            CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) => r,
            CaughtError::RustPanic { ereport, .. } => ereport,
        };
        Err(JobError {
            sqlstate: code_of(report.sql_error_code()),
            message: report.message().to_string(),
        })
    })
    .execute();
    if !committed {
        unsafe { pg_sys::AbortCurrentTransaction() };
    }
    result
}

const EXTENSION_GONE: &str = "extension leaf_id is not installed in this database";

/// The extension's schema, quoted; None when it is not installed.
fn extension_schema() -> Option<String> {
    Spi::get_one::<String>(
        "SELECT quote_ident(n.nspname) FROM pg_catalog.pg_extension e \
         JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'leaf_id'",
    )
    .ok()
    .flatten()
}

struct Refilled {
    start: i64,
    len: i64,
    step: i64,
    table_step: i64,
}

/// Reserve the next range of a tag: `[max_id, max_id + n)`.
fn reserve(
    schema: &str,
    tag: &str,
    policy: StepPolicy,
    previous: Option<PreviousRefill>,
) -> Result<Refilled, JobError> {
    Spi::connect_mut(|client| {
        let row = client
            .update(
                &format!(
                    "SELECT max_id, step FROM {schema}.leaf_alloc WHERE biz_tag = $1 FOR UPDATE"
                ),
                None,
                &[tag.into()],
            )
            .map_err(|e| JobError::new(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, e.to_string()))?;
        if row.is_empty() {
            return Err(JobError::new(
                PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                format!("leaf_id tag \"{tag}\" does not exist in leaf_alloc"),
            ));
        }
        let row = row.first();
        let max_id: i64 = row.get(1).ok().flatten().unwrap_or(-1);
        let table_step: i64 = row.get::<i32>(2).ok().flatten().map(i64::from).unwrap_or(0);
        if table_step < 1 {
            return Err(JobError::new(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("leaf_alloc.step of tag \"{tag}\" is {table_step}; it must be at least 1"),
            ));
        }
        if max_id < 0 {
            return Err(JobError::new(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("leaf_alloc.max_id of tag \"{tag}\" is {max_id}; it must not be negative"),
            ));
        }
        let step = policy.next_step(table_step, previous);
        let room = i64::MAX - max_id;
        if room == 0 {
            return Err(JobError::new(
                PgSqlErrorCode::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                format!("leaf_id tag \"{tag}\" has reached the largest bigint: no IDs are left"),
            ));
        }
        let len = step.min(MAX_SEGMENT_LEN).min(room);
        client
            .update(
                &format!("UPDATE {schema}.leaf_alloc SET max_id = $2, update_time = now() WHERE biz_tag = $1"),
                None,
                &[tag.into(), (max_id + len).into()],
            )
            .map_err(|e| JobError::new(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, e.to_string()))?;
        Ok(Refilled {
            start: max_id,
            len,
            step,
            table_step,
        })
    })
}

struct Worker {
    sh: &'static Shared,
    db: usize,
    dboid: u32,
    /// per slot: what its last refill used and when (for the dynamic step)
    previous: HashMap<(usize, u64), (PreviousRefill, Instant)>,
    /// slots whose last refill failed: retried only when a caller asks
    failed: HashSet<(usize, u64)>,
    last_resync: Instant,
    last_heartbeat: Option<Instant>,
    extension_gone: bool,
}

impl Worker {
    fn policy() -> StepPolicy {
        StepPolicy {
            segment_duration: Duration::from_secs(settings::SEGMENT_DURATION.get() as u64),
            max_step: settings::MAX_STEP.get() as i64,
        }
    }

    fn note(&mut self, e: &JobError) {
        if e.message == EXTENSION_GONE {
            self.extension_gone = true;
        }
    }

    /// One refill of one slot, if it still needs one.
    fn refill(&mut self, i: usize) {
        let slot = self.sh.tag(i);
        let (target, tag, epoch) = {
            let _g = self.sh.lock_tag(i);
            if slot.dboid.load(SeqCst) != self.dboid || slot.status() == TagStatus::Missing {
                return;
            }
            slot.refill_requested.store(false, SeqCst);
            let Some(target) = slot.pair.refill_target() else {
                return;
            };
            slot.refill_in_flight.store(true, SeqCst);
            (target, slot.tag(), slot.epoch.load(SeqCst))
        };
        let previous = self
            .previous
            .get(&(i, epoch))
            .map(|(p, at)| PreviousRefill {
                elapsed: at.elapsed(),
                ..*p
            });
        let result = in_transaction(|schema| reserve(schema, &tag, Self::policy(), previous));
        {
            let _g = self.sh.lock_tag(i);
            slot.refill_in_flight.store(false, SeqCst);
            if slot.epoch.load(SeqCst) == epoch {
                match &result {
                    Ok(r) => {
                        // committed: only now may its IDs be handed out
                        let published = slot.pair.publish(target, r.start, r.len);
                        debug_assert!(published);
                        slot.dynamic_step.store(r.step, SeqCst);
                        slot.table_step.store(r.table_step, SeqCst);
                        slot.refills.fetch_add(1, SeqCst);
                        slot.last_refill_us.store(unix_us(), SeqCst);
                        slot.status.store(TagStatus::Active as u32, SeqCst);
                    }
                    Err(e) if e.sqlstate == code_of(PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT) => {
                        slot.pair.retire();
                        slot.status.store(TagStatus::Missing as u32, SeqCst);
                        slot.error.set(e.sqlstate, &e.message);
                    }
                    Err(e) => slot.error.set(e.sqlstate, &e.message),
                }
            }
        }
        match result {
            Ok(r) => {
                self.failed.remove(&(i, epoch));
                self.previous.insert(
                    (i, epoch),
                    (
                        PreviousRefill {
                            step: r.step,
                            table_step: r.table_step,
                            elapsed: Duration::ZERO,
                        },
                        Instant::now(),
                    ),
                );
            }
            Err(e) => {
                self.note(&e);
                self.failed.insert((i, epoch));
                pgrx::log!("leaf_id: refill of tag \"{}\" failed: {}", tag, e.message);
            }
        }
        self.sh.broadcast(self.db);
    }

    fn my_slots(&self) -> Vec<usize> {
        (0..self.sh.n_tags())
            .filter(|&i| self.sh.tag(i).dboid.load(SeqCst) == self.dboid)
            .collect()
    }

    fn refill_all_needed(&mut self) {
        for i in self.my_slots() {
            let slot = self.sh.tag(i);
            // a failed slot waits for a caller's request instead of being
            // retried (and logged) on every round
            let retry_allowed = !self.failed.contains(&(i, slot.epoch.load(SeqCst)));
            let wanted = match slot.status() {
                TagStatus::Loading | TagStatus::Active => {
                    slot.refill_requested.load(SeqCst)
                        || (retry_allowed && slot.pair.wants_prefetch())
                }
                _ => false,
            };
            if wanted {
                self.refill(i);
            }
        }
    }

    /// Drop cached tags whose rows are gone from leaf_alloc.
    fn resync(&mut self) {
        self.last_resync = Instant::now();
        let tags = in_transaction(|schema| {
            Spi::connect(|client| {
                let rows = client
                    .select(
                        &format!("SELECT biz_tag FROM {schema}.leaf_alloc"),
                        None,
                        &[],
                    )
                    .map_err(|e| {
                        JobError::new(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, e.to_string())
                    })?;
                Ok(rows
                    .filter_map(|r| r.get::<String>(1).ok().flatten())
                    .collect::<HashSet<String>>())
            })
        });
        let tags = match tags {
            Ok(t) => t,
            Err(e) => {
                self.note(&e);
                return;
            }
        };
        for i in self.my_slots() {
            let slot = self.sh.tag(i);
            let _g = self.sh.lock_tag(i);
            if slot.dboid.load(SeqCst) == self.dboid
                && slot.status() == TagStatus::Active
                && !tags.contains(&slot.tag())
            {
                slot.pair.retire();
                slot.status.store(TagStatus::Missing as u32, SeqCst);
                slot.error.set(
                    code_of(PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT),
                    &format!("leaf_id tag \"{}\" was deleted from leaf_alloc", slot.tag()),
                );
            }
        }
        let sh = self.sh;
        self.previous
            .retain(|(i, epoch), _| sh.tag(*i).epoch.load(SeqCst) == *epoch);
        self.failed
            .retain(|(i, epoch)| sh.tag(*i).epoch.load(SeqCst) == *epoch);
        self.sh.broadcast(self.db);
    }

    fn snowflake(&mut self) {
        let slot = self.sh.db(self.db);
        let state = slot.snowflake_state.load(SeqCst);
        if state == SnowflakeState::Requested as u32 {
            let result = in_transaction(|schema| crate::snowflake_worker::claim(schema, self.db));
            let _g = self.sh.lock_db(self.db);
            match result {
                Ok(claimed) => {
                    crate::snowflake_worker::publish_claim(self.db, &claimed);
                    slot.snowflake_state
                        .store(SnowflakeState::Ready as u32, SeqCst);
                    self.last_heartbeat = Some(Instant::now());
                }
                Err(e) => {
                    self.note(&e);
                    slot.error.set(e.sqlstate, &e.message);
                    slot.snowflake_state
                        .store(SnowflakeState::Failed as u32, SeqCst);
                    pgrx::log!("leaf_id: snowflake worker id claim failed: {}", e.message);
                }
            }
            drop(_g);
            self.sh.broadcast(self.db);
        } else if state == SnowflakeState::Ready as u32 {
            let due = self.last_heartbeat.is_none_or(|t| {
                t.elapsed() >= Duration::from_millis(settings::HEARTBEAT_INTERVAL.get() as u64)
            });
            // clear the request either way: this renewal serves it
            let wanted = slot.snowflake_lease_wanted.swap(false, SeqCst);
            if due || wanted {
                self.last_heartbeat = Some(Instant::now());
                let result =
                    in_transaction(|schema| crate::snowflake_worker::renew(schema, self.db));
                match result {
                    Ok(mark) => crate::snowflake_worker::publish_lease(self.db, mark),
                    Err(e) => {
                        self.note(&e);
                        let _g = self.sh.lock_db(self.db);
                        slot.error.set(e.sqlstate, &e.message);
                        pgrx::log!(
                            "leaf_id: snowflake high-water mark renewal failed: {}",
                            e.message
                        );
                    }
                }
                self.sh.broadcast(self.db);
            }
        }
    }

    fn run_once(&mut self) {
        self.refill_all_needed();
        self.snowflake();
        let interval = Duration::from_secs(settings::TAG_RESYNC_INTERVAL.get() as u64);
        if self.last_resync.elapsed() >= interval {
            self.resync();
        }
    }

    fn timeout(&self) -> Duration {
        let mut t = Duration::from_millis(1000);
        if self.sh.db(self.db).snowflake_state.load(SeqCst) == SnowflakeState::Ready as u32 {
            t = t.min(
                Duration::from_millis(settings::HEARTBEAT_INTERVAL.get() as u64 / 2)
                    .max(Duration::from_millis(5)),
            );
        }
        t
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn detach(_code: i32, arg: pg_sys::Datum) {
    if let Some(sh) = shared() {
        // an error exit may hold LWLocks; ours are needed below
        unsafe { pg_sys::LWLockReleaseAll() };
        let db = sh.db(arg.value());
        // give the database's tag slots back (DROP DATABASE ... WITH (FORCE)
        // ends the worker): cached ranges become gaps, the next worker refills
        sh.free_tags_of(db.dboid.load(SeqCst));
        db.worker_latch.store(std::ptr::null_mut(), SeqCst);
        db.worker_pid.store(0, SeqCst);
        if db.snowflake_state.load(SeqCst) == SnowflakeState::Ready as u32 {
            // no renewals without a worker: the next worker claims again
            db.snowflake_state
                .store(SnowflakeState::NotRequested as u32, SeqCst);
        }
        sh.broadcast(arg.value());
    }
}

fn set_option(name: &std::ffi::CStr, value: &std::ffi::CStr) {
    unsafe {
        pg_sys::SetConfigOption(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        )
    };
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn leaf_id_worker_main(arg: pg_sys::Datum) {
    let dboid = arg.value() as u32;
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(dboid)), None);
    let Some(sh) = shared() else { return };
    let Some(db) = sh.db_slot(dboid) else { return };
    {
        let _g = sh.lock_global();
        let slot = sh.db(db);
        if slot.worker_pid.load(SeqCst) != 0 {
            return; // another worker serves this database
        }
        slot.worker_pid.store(unsafe { pg_sys::MyProcPid }, SeqCst);
        slot.worker_latch.store(unsafe { pg_sys::MyLatch }, SeqCst);
        slot.worker_requested_at.store(0, SeqCst);
    }
    unsafe { pg_sys::on_shmem_exit(Some(detach), pg_sys::Datum::from(db)) };
    // a refill is usable only once durable
    set_option(c"synchronous_commit", c"on");
    set_option(c"lock_timeout", c"5s");
    set_option(c"statement_timeout", c"0");
    set_option(c"idle_in_transaction_session_timeout", c"0");
    set_option(c"application_name", c"leaf_id worker");
    // ranges cached by an earlier worker of this database are dropped (gaps):
    // the table they came from may have been dropped and recreated since
    sh.free_tags_of(dboid);
    let slot = sh.db(db);
    if slot.snowflake_state.load(SeqCst) != SnowflakeState::NotRequested as u32 {
        slot.snowflake_state
            .store(SnowflakeState::Requested as u32, SeqCst);
    }
    pgrx::log!("leaf_id worker started for database {}", dboid);

    let mut w = Worker {
        sh,
        db,
        dboid,
        previous: HashMap::new(),
        failed: HashSet::new(),
        last_resync: Instant::now(),
        last_heartbeat: None,
        extension_gone: false,
    };
    let mut last_check = Instant::now();
    loop {
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        w.run_once();
        if last_check.elapsed() >= Duration::from_secs(1) {
            last_check = Instant::now();
            if let Err(e) = in_transaction(|_| Ok(())) {
                w.note(&e);
            }
        }
        if w.extension_gone {
            pgrx::log!(
                "leaf_id worker for database {} exits: the extension is not installed",
                dboid
            );
            sh.free_tags_of(dboid);
            break;
        }
        if !BackgroundWorker::wait_latch(Some(w.timeout())) {
            // SIGTERM (shutdown, pg_terminate_backend), not postmaster death:
            // then the worker exits at once. (wait_latch consumed pgrx's flag.)
            if unsafe { (&raw const pg_sys::ShutdownRequestPending).read_volatile() } != 0 {
                crate::snowflake_worker::close_and_persist(db);
            }
            break;
        }
    }
}
