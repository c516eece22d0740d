//! The per-database background worker: every refill, worker-id claim and
//! high-water-mark renewal runs here, each in its own transaction with
//! synchronous_commit on, never in a caller's transaction.
//!
//! Started on demand by the first backend of a database that needs it (a
//! dynamic background worker), one per database; it exits when leaf_id is
//! dropped from the database, and leaves the database after
//! `leaf_id.worker_idle_timeout` without work (a connected worker blocks
//! DROP DATABASE, CREATE DATABASE ... TEMPLATE and ALTER DATABASE ...
//! RENAME); the next call that needs it starts it again. This file only
//! schedules: the jobs live with their mode (`segment_worker`,
//! `snowflake_worker`), the session and transaction handling in
//! `transaction`.

use crate::segment_worker::SegmentJobs;
use crate::shmem::{Shared, SnowflakeState, shared};
use crate::snowflake_worker::SnowflakeJobs;
use crate::transaction::{self, EXTENSION_GONE, JobError, in_transaction};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::pg_sys;
use pgrx::prelude::*;
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

/// What every job of the worker needs: shared memory, its database, and
/// whether it should stop.
pub struct WorkerContext {
    pub sh: &'static Shared,
    pub db: usize,
    pub dboid: u32,
    extension_gone: bool,
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
        unsafe { (&raw const pg_sys::ProcDiePending).read_volatile() != 0 }
    }
}

unsafe extern "C-unwind" {
    /// PostgreSQL's own SIGTERM handler of backends (pgrx wraps `pg_sys::die`
    /// in a Rust function; a signal handler needs the C symbol).
    #[link_name = "die"]
    fn postgres_die(signo: std::ffi::c_int);
}

#[pg_guard]
unsafe extern "C-unwind" fn detach(_code: i32, arg: pg_sys::Datum) {
    if let Some(sh) = shared() {
        // an error exit may hold LWLocks; ours are needed below
        unsafe { pg_sys::LWLockReleaseAll() };
        let db = sh.db(arg.value());
        // no renewals without a worker: nothing more is issued, and the next
        // worker claims again
        db.generator.close(crate::snowflake_api::epoch());
        if db.snowflake_state.load(SeqCst) == SnowflakeState::Ready as u32 {
            db.snowflake_state
                .store(SnowflakeState::NotRequested as u32, SeqCst);
        }
        // give the database's tag slots back (idle exit, or DROP DATABASE
        // ... WITH (FORCE) ends the worker): cached ranges become gaps, the
        // next worker refills. Kept ranges could outlive the database: a
        // later database with its OID would take them
        sh.free_tags_of(db.dboid.load(SeqCst));
        // last: a backend starts the next worker only once the pid is 0, and
        // that worker must not meet any of the teardown above
        db.worker_latch.store(std::ptr::null_mut(), SeqCst);
        db.worker_pid.store(0, SeqCst);
        sh.broadcast(arg.value());
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn leaf_id_worker_main(arg: pg_sys::Datum) {
    let dboid = arg.value() as u32;
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP);
    unsafe {
        // SIGTERM as for a backend: sets ProcDiePending, so a wait for a
        // synchronous standby ends and CHECK_FOR_INTERRUPTS exits
        pg_sys::pqsignal(pg_sys::SIGTERM as i32, Some(postgres_die));
    }
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
    transaction::harden_session();
    // ranges cached by an earlier worker of this database are dropped (gaps):
    // the table they came from may have been dropped and recreated since
    sh.free_tags_of(dboid);
    let slot = sh.db(db);
    if slot.snowflake_state.load(SeqCst) != SnowflakeState::NotRequested as u32 {
        slot.snowflake_state
            .store(SnowflakeState::Requested as u32, SeqCst);
    }
    pgrx::log!("leaf_id worker started for database {}", dboid);

    let mut ctx = WorkerContext {
        sh,
        db,
        dboid,
        extension_gone: false,
        more_work: false,
    };
    let mut segments = SegmentJobs::new();
    let mut snowflake = SnowflakeJobs::new();
    let mut last_check = Instant::now();
    let mut idle = Idle::new();
    loop {
        if ctx.stopping() {
            close_for_exit(db);
            break;
        }
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
            transaction::harden_session();
            snowflake.settings_reloaded(&ctx);
        }
        // the renewal first: refills that cannot finish (a Citus node that
        // hangs) must not push it past the lease
        snowflake.run(&mut ctx);
        segments.run(
            &mut ctx,
            Duration::from_millis(crate::settings::HEARTBEAT_INTERVAL.get() as u64 / 2),
        );
        if last_check.elapsed() >= Duration::from_secs(1) {
            last_check = Instant::now();
            if let Err(e) = in_transaction(|_| Ok(())) {
                ctx.note(&e);
            }
        }
        if ctx.extension_gone {
            pgrx::log!(
                "leaf_id worker for database {} exits: the extension is not installed",
                dboid
            );
            sh.free_tags_of(dboid);
            break;
        }
        let idle_left = idle.left(&ctx);
        if idle_left == Some(Duration::ZERO) {
            pgrx::log!(
                "leaf_id worker for database {} leaves it: idle for leaf_id.worker_idle_timeout ({} ms)",
                dboid,
                crate::settings::WORKER_IDLE_TIMEOUT.get()
            );
            // as on a clean shutdown; calls meanwhile (a closed generator, a
            // refill request) find no worker once it has gone and start the
            // next one; the cached ranges become gaps (`detach`)
            close_for_exit(db);
            break;
        }
        let timeout = [segments.next_due(), snowflake.timeout(&ctx), idle_left]
            .into_iter()
            .flatten()
            .fold(Duration::from_millis(1000), Duration::min)
            .max(Duration::from_millis(1));
        let timeout = if std::mem::take(&mut ctx.more_work) {
            Duration::from_millis(1)
        } else {
            timeout
        };
        // not pgrx's wait_latch, which processes interrupts: a SIGTERM must
        // reach the loop, which closes the generator and persists its last
        // millisecond first
        crate::clock::wait_on_latch(timeout);
    }
}

/// Before a clean exit (SIGTERM, or idle): close the snowflake generator and
/// persist its exact last millisecond. No more interrupts: the last mark is
/// written, and a wait for a synchronous standby ends at once
/// (ProcDiePending).
fn close_for_exit(db: usize) {
    unsafe { pg_sys::InterruptHoldoffCount += 1 };
    crate::snowflake_worker::close_and_persist(db);
}

/// Is the worker idle: nothing drawn, refilled, claimed or asked for during
/// `leaf_id.worker_idle_timeout`? Watched from the worker's side only (state
/// words the callers change anyway), so the hot paths do nothing more.
struct Idle {
    since: Instant,
    seen: Vec<u64>,
}

impl Idle {
    fn new() -> Idle {
        Idle {
            since: Instant::now(),
            seen: Vec::new(),
        }
    }

    /// What the database's callers and jobs have done: the snowflake
    /// generator's word (every ID, close, reopen) and every tag slot's
    /// epoch and segment words (every take, refill, switch, free).
    fn usage(ctx: &WorkerContext) -> Vec<u64> {
        let sh = ctx.sh;
        let mut v = vec![sh.db(ctx.db).generator.state_word()];
        for i in 0..sh.n_tags() {
            let slot = sh.tag(i);
            if slot.dboid.load(SeqCst) == ctx.dboid {
                v.push(i as u64);
                v.push(slot.epoch.load(SeqCst));
                v.extend(slot.pair.activity());
            }
        }
        v
    }

    /// Work asked for: a refill, a lease renewal or a claim. A caller that
    /// waits on the worker asks again on every round of its wait (a tag whose
    /// first refill keeps failing, with nobody asking, does not keep it).
    fn wanted(ctx: &WorkerContext) -> bool {
        let sh = ctx.sh;
        let slot = sh.db(ctx.db);
        slot.snowflake_lease_wanted.load(SeqCst)
            || slot.snowflake_state.load(SeqCst) == SnowflakeState::Requested as u32
            || (0..sh.n_tags()).any(|i| {
                let t = sh.tag(i);
                t.dboid.load(SeqCst) == ctx.dboid
                    && (t.refill_requested.load(SeqCst) || t.refill_in_flight.load(SeqCst))
            })
    }

    /// How long until the worker may leave: None = never (timeout 0),
    /// zero = now.
    fn left(&mut self, ctx: &WorkerContext) -> Option<Duration> {
        let timeout = crate::settings::WORKER_IDLE_TIMEOUT.get();
        let usage = Self::usage(ctx);
        if usage != self.seen || Self::wanted(ctx) {
            self.seen = usage;
            self.since = Instant::now();
        }
        (timeout > 0)
            .then(|| Duration::from_millis(timeout as u64).saturating_sub(self.since.elapsed()))
    }
}
