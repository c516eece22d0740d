//! The per-database background workers: every refill, worker-id claim and
//! high-water-mark renewal runs in one, each in its own transaction with
//! synchronous_commit on, never in a caller's transaction.
//!
//! Two per database, one per mode (`Role`): the segment worker refills, the
//! snowflake worker claims and renews, so that a refill that waits (a lock,
//! a Citus node that hangs) never holds back a lease renewal. Each is
//! started on demand by the first backend of a database that needs it (a
//! dynamic background worker); it exits when leaf_id is
//! dropped from the database, and leaves the database after
//! `leaf_id.worker_idle_timeout` without work (a connected worker blocks
//! DROP DATABASE, CREATE DATABASE ... TEMPLATE and ALTER DATABASE ...
//! RENAME); the next call that needs it starts it again. This file only
//! schedules: the jobs live with their mode (`segment::jobs`,
//! `snowflake::jobs`), the session and transaction handling in
//! `runtime::transaction`. It is the only module that knows both modes'
//! jobs, and nothing imports it.

use crate::runtime::bgworker::{WorkerContext, pack, postgres_die, unpack};
use crate::runtime::shmem::{Role, Shared, SnowflakeState, shared};
use crate::runtime::transaction::{self, in_transaction};
use crate::segment::jobs::SegmentJobs;
use crate::snowflake::jobs::SnowflakeJobs;
use crate::snowflake::lease_close::OwnerToken;
use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// # Safety
///
/// Only as the `on_shmem_exit` callback `attach` registers once the worker holds its
/// slot: PostgreSQL calls it once, at this worker's exit, with the Datum packed there (the database
/// slot's index, below `n_dbs`, and the role), and before ProcKill (registered earlier, so run
/// later) gives up the PGPROC that the LWLocks and the broadcast below need.
#[pg_guard]
unsafe extern "C-unwind" fn detach(_code: i32, arg: pg_sys::Datum) {
    let (db_index, role) = unpack(arg);
    let db_index = db_index as usize;
    if let Some(sh) = shared() {
        // an error exit may hold LWLocks; ours are needed below
        // SAFETY: in the exit of a process that still has its PGPROC (see Safety), as ProcKill
        // itself does: it releases whatever LWLocks an error exit left held (their guards' frames
        // never run again), so the locks taken below do not wait on this process.
        unsafe { pg_sys::LWLockReleaseAll() };
        let db = sh.db(db_index);
        match role {
            Role::Snowflake => {
                // no renewals without a worker: nothing more is issued, and
                // the next worker claims again
                db.generator.close(crate::snowflake::functions::epoch());
                if db.snowflake_state.load(SeqCst) == SnowflakeState::Ready as u32 {
                    db.snowflake_state
                        .store(SnowflakeState::NotRequested as u32, SeqCst);
                }
            }
            // give the database's tag slots back (idle exit, or DROP
            // DATABASE ... WITH (FORCE) ends the worker): cached ranges
            // become gaps, the next worker refills. Kept ranges could
            // outlive the database: a later database with its OID would
            // take them
            Role::Segment => sh.free_tags_of(db.dboid.load(SeqCst)),
        }
        // no worker, no wait: the view must not show it to the database
        // this slot goes to next
        crate::runtime::standby_wait::forget_wait(db_index, role);
        // last: a backend starts the next worker only once the pid is 0, and
        // that worker must not meet any of the teardown above
        let me = db.worker(role);
        me.latch.store(std::ptr::null_mut(), SeqCst);
        me.pid.store(0, SeqCst);
        sh.broadcast(db_index);
        // the background worker slot stays taken until the postmaster reaps
        // this process
        crate::settings::pause_point(
            "slow_worker_exit",
            "with its slot still taken",
            std::time::Duration::from_millis(300),
        );
    }
}

#[pg_guard]
// SAFETY: no other symbol of the server or its libraries is named `leaf_id_worker_main` (the
// extension's prefix); the postmaster looks it up by this name (`bgworker::start_dynamic`) and
// calls it with one Datum, this signature.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn leaf_id_worker_main(arg: pg_sys::Datum) {
    let (dboid, role) = unpack(arg);
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP);
    // SAFETY: `die` is PostgreSQL's async-signal-safe SIGTERM handler of backends: it sets flags
    // and this process's latch, and a background worker with shared memory access has its MyLatch
    // (InitProcess ran before this entry point).
    unsafe {
        // SIGTERM as for a backend: sets ProcDiePending, so a wait for a
        // synchronous standby ends and CHECK_FOR_INTERRUPTS exits
        crate::runtime::pg_version::set_sigterm_handler(postgres_die);
    }
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(dboid)), None);
    let Some(sh) = shared() else { return };
    let Some(db) = attach(sh, dboid, role) else {
        return;
    };
    transaction::harden_session();
    begin(sh, db, dboid, role);
    let mut ctx = WorkerContext {
        sh,
        db,
        dboid,
        role,
        extension_gone: false,
        more_work: false,
    };
    serve(&mut ctx);
}

/// Take the database's worker place of this mode (this process's pid and
/// latch), unless the slot went to another database or another worker
/// holds the place; `detach` gives it back at the worker's exit.
fn attach(sh: &'static Shared, dboid: u32, role: Role) -> Option<usize> {
    let db = sh.db_slot(dboid)?;
    {
        let _g = sh.lock_global();
        if sh.db(db).dboid.load(SeqCst) != dboid {
            return None; // the slot went to another database meanwhile
        }
        let me = sh.db(db).worker(role);
        if me.pid.load(SeqCst) != 0 {
            return None; // another worker serves this database in this mode
        }
        // SAFETY: MyProcPid is this process's int global, set at its start, read by value.
        me.pid.store(unsafe { pg_sys::MyProcPid }, SeqCst);
        // SAFETY: MyLatch is this process's pointer global, read by value: the procLatch of this
        // worker's PGPROC (InitProcess), in shared memory for the server's lifetime, so backends
        // may set it through `wake_worker`.
        me.latch.store(unsafe { pg_sys::MyLatch }, SeqCst);
        me.requested_at.store(0, SeqCst);
    }
    // SAFETY: registers `detach` (see its Safety) with this worker's slot index and role by value,
    // only now that the slot's pid is ours, so it undoes this worker's state only; one
    // registration, well within PostgreSQL's MAX_ON_EXITS.
    unsafe { pg_sys::on_shmem_exit(Some(detach), pack(db as u32, role)) };
    Some(db)
}

/// What a new worker does before its first round.
fn begin(sh: &Shared, db: usize, dboid: u32, role: Role) {
    let slot = sh.db(db);
    match role {
        // ranges cached by an earlier worker of this database are dropped
        // (gaps): the table they came from may have been dropped and
        // recreated since
        Role::Segment => sh.free_tags_of(dboid),
        Role::Snowflake => {
            if slot.snowflake_state.load(SeqCst) != SnowflakeState::NotRequested as u32 {
                slot.snowflake_state
                    .store(SnowflakeState::Requested as u32, SeqCst);
            }
        }
    }
    pgrx::log!("{} started for database {}", role.backend_type(), dboid);
    crate::runtime::standby_wait::note_waits_at(db, role);
}

/// How often the worker checks, in a transaction, that the extension is
/// still installed in its database.
const EXTENSION_CHECK_EVERY: Duration = Duration::from_secs(1);
/// The longest and shortest sleep between rounds.
const LONGEST_SLEEP: Duration = Duration::from_millis(1000);
const SHORTEST_SLEEP: Duration = Duration::from_millis(1);

/// The worker's rounds, until a SIGTERM, the extension dropped from its
/// database, or leaf_id.worker_idle_timeout.
fn serve(ctx: &mut WorkerContext) {
    let mut jobs = match ctx.role {
        Role::Segment => Jobs::Segment(SegmentJobs::new()),
        Role::Snowflake => Jobs::Snowflake(SnowflakeJobs::new()),
    };
    let mut last_check = Instant::now();
    let mut idle = Idle::new();
    loop {
        if ctx.stopping() {
            close_for_exit(ctx, OwnerToken::Release);
            return;
        }
        if BackgroundWorker::sighup_received() {
            // SAFETY: the worker's main loop between jobs, with no transaction open: where
            // PostgreSQL's own background workers reload the configuration after a SIGHUP.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
            transaction::harden_session();
            if let Jobs::Snowflake(snowflake) = &mut jobs {
                snowflake.settings_reloaded(ctx);
            }
        }
        let due = match &mut jobs {
            Jobs::Segment(segments) => {
                // a bounded round: the loop looks at a terminate, a reload
                // and the extension between rounds
                segments.run(ctx, ROUND_BUDGET);
                segments.next_due()
            }
            Jobs::Snowflake(snowflake) => {
                snowflake.run(ctx);
                snowflake.timeout(ctx)
            }
        };
        if last_check.elapsed() >= EXTENSION_CHECK_EVERY {
            last_check = Instant::now();
            if let Err(e) = in_transaction(|_, _| Ok(())) {
                ctx.note(&e);
            }
        }
        if ctx.extension_gone {
            leave_dropped(ctx);
            return;
        }
        let idle_left = idle.left(ctx);
        if idle_left == Some(Duration::ZERO) {
            leave_idle(ctx);
            return;
        }
        let timeout = if std::mem::take(&mut ctx.more_work) {
            SHORTEST_SLEEP
        } else {
            [due, idle_left]
                .into_iter()
                .flatten()
                .fold(LONGEST_SLEEP, Duration::min)
                .max(SHORTEST_SLEEP)
        };
        // not pgrx's wait_latch, which processes interrupts: a SIGTERM must
        // reach the loop, which closes the generator and persists its last
        // millisecond first
        crate::runtime::clock::wait_on_latch(timeout);
    }
}

/// The extension was dropped from the worker's database: its cached
/// ranges go (they came from the dropped tables).
fn leave_dropped(ctx: &WorkerContext) {
    pgrx::log!(
        "{} for database {} exits: the extension is not installed",
        ctx.role.backend_type(),
        ctx.dboid
    );
    if ctx.role == Role::Segment {
        ctx.sh.free_tags_of(ctx.dboid);
    }
}

/// Idle for leaf_id.worker_idle_timeout: leave as on a clean shutdown;
/// calls meanwhile (a closed generator, a refill request) find no worker
/// once it has gone and start the next one; the cached ranges become gaps
/// (`detach`). The row keeps its owner token: the next worker of this
/// lifetime takes it back as its own (on Citus, with a majority of the
/// copies).
fn leave_idle(ctx: &WorkerContext) {
    pgrx::log!(
        "{} for database {} leaves it: idle for leaf_id.worker_idle_timeout ({} ms)",
        ctx.role.backend_type(),
        ctx.dboid,
        crate::settings::WORKER_IDLE_TIMEOUT.get()
    );
    crate::settings::pause_point(
        "slow_worker_exit",
        "before leaving",
        Duration::from_millis(1500),
    );
    close_for_exit(ctx, OwnerToken::Keep);
}

/// How long the segment worker goes on starting refills in one round.
const ROUND_BUDGET: Duration = Duration::from_millis(500);

/// A worker's jobs: those of its mode.
enum Jobs {
    Segment(SegmentJobs),
    Snowflake(SnowflakeJobs),
}

/// Before a clean exit (SIGTERM, or idle): close the snowflake generator and
/// persist its exact last millisecond, and keep or let go of the row's owner
/// token. No more interrupts: the last mark is written, and a
/// wait for a synchronous standby ends at once (ProcDiePending).
fn close_for_exit(ctx: &WorkerContext, token: OwnerToken) {
    if ctx.role == Role::Snowflake {
        // SAFETY: HOLD_INTERRUPTS(): InterruptHoldoffCount is this process's global, changed only
        // by mainline code on this one thread (no signal handler touches it); never resumed, as the
        // worker exits right after.
        unsafe { pg_sys::InterruptHoldoffCount += 1 };
        crate::snowflake::lease_close::close_and_persist(ctx.db, token);
    }
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

    /// What the database's callers and jobs of the worker's mode have done:
    /// the snowflake generator's word (every ID, close, reopen), or every
    /// tag slot's epoch and segment words (every take, refill, switch, free).
    fn usage(ctx: &WorkerContext) -> Vec<u64> {
        let sh = ctx.sh;
        if ctx.role == Role::Snowflake {
            return vec![sh.db(ctx.db).generator.state_word()];
        }
        let mut v = Vec::new();
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

    /// Work asked for: a lease renewal or a claim, or a refill. A caller that
    /// waits on the worker asks again on every round of its wait (a tag whose
    /// first refill keeps failing, with nobody asking, does not keep it).
    fn wanted(ctx: &WorkerContext) -> bool {
        let sh = ctx.sh;
        let slot = sh.db(ctx.db);
        if ctx.role == Role::Snowflake {
            return slot.snowflake_lease_wanted.load(SeqCst)
                || slot.snowflake_state.load(SeqCst) == SnowflakeState::Requested as u32;
        }
        (0..sh.n_tags()).any(|i| {
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
