//! SQL surface of snowflake mode.
//! Must not run SQL: claims and renewals are the worker's (`snowflake::jobs`).

use crate::errors::{raise, raise_recorded, require_writable};
use crate::runtime::backend::{self, Deadline};
use crate::runtime::clock::{
    clock_ms, tstz_from_unix_ms, tstz_from_unix_ms_any, unix_ms_from_tstz,
};
use crate::runtime::shmem::{DbSlot, Role, Shared, SnowflakeState};
use crate::runtime::standby_wait;
use crate::settings;
use crate::snowflake::generator::{Clock, Config, Refusal};
use crate::snowflake::layout::{self, MAX_TIMESTAMP};
use pgrx::prelude::*;
use std::sync::atomic::Ordering::SeqCst;

struct PgClock;

impl Clock for PgClock {
    fn now_ms(&self) -> i64 {
        clock_ms()
    }
    /// Interruptible: a cancel or terminate ends the wait with an error.
    fn sleep_ms(&self, ms: i64) {
        let until = std::time::Instant::now() + std::time::Duration::from_millis(ms.max(0) as u64);
        loop {
            pgrx::check_for_interrupts!();
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            crate::runtime::clock::wait_on_latch(left);
        }
    }
    fn check_interrupts(&self) {
        pgrx::check_for_interrupts!();
    }
}

/// xorshift, seeded per backend: only to spread the first sequence of a millisecond.
fn random() -> i64 {
    static mut STATE: u64 = 0;
    // SAFETY: STATE is this function's own, so only this code touches it;
    // it is called from the SQL functions' draws (`&mut random` in
    // `take`), on the backend's one thread (no Rust thread of this
    // library draws IDs), and is not reentered: no two accesses overlap. It
    // is read and written by value, with no reference to it. MyProcPid is
    // the process's plain int global, set at its start.
    unsafe {
        if STATE == 0 {
            STATE = (pgrx::pg_sys::MyProcPid as u64) << 32
                ^ crate::runtime::clock::unix_us() as u64
                | 1;
        }
        STATE ^= STATE << 13;
        STATE ^= STATE >> 7;
        STATE ^= STATE << 17;
        (STATE >> 1) as i64
    }
}

/// The epoch, parsed once per process: it is a server-start setting,
/// validated when the library is preloaded.
pub fn epoch() -> i64 {
    static EPOCH: once_cell::sync::OnceCell<i64> = once_cell::sync::OnceCell::new();
    *EPOCH.get_or_init(|| settings::epoch_ms().unwrap_or(layout::LEAF_EPOCH_MS))
}

/// Validate the epoch setting at server start.
pub fn check_epoch() -> Result<i64, String> {
    let epoch = settings::epoch_ms()?;
    let now = crate::runtime::clock::unix_ms();
    if epoch < 0 || epoch > now {
        return Err(format!(
            "leaf_id.epoch_ms = {epoch} is in the future or negative"
        ));
    }
    if now - epoch > MAX_TIMESTAMP {
        return Err(format!(
            "leaf_id.epoch_ms = {epoch}: its 41 bits of milliseconds have run out"
        ));
    }
    Ok(epoch)
}

fn next_id() -> i64 {
    next_ids(1, Call::Single).0
}

/// Which call takes IDs from the generator.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    /// `leaf_snowflake_next()`.
    Single,
    /// A chunk of `leaf_snowflake_next(n)`, which leaves single calls their
    /// share of each millisecond (`Generator::next_batch_ids`).
    Batch,
}

/// Up to `want` consecutive IDs of one millisecond: `(first, count)`.
fn next_ids(want: i64, call: Call) -> (i64, i64) {
    let sh = backend::shared_or_raise();
    let mut waiting = Waiting::default();
    loop {
        // looked up on every round: the slot of a database whose workers
        // have left it may go to another database (`Shared::db_slot`)
        let db = backend::my_db_slot(sh);
        let slot = sh.db(db);
        // the slot's assignment, read once it is known to be this
        // database's: the same after the take, the generator was ours
        let assigned = slot.assigned.load(SeqCst);
        if slot.dboid.load(SeqCst) != backend::my_dboid() {
            continue; // given away since the lookup: look up again
        }
        if slot.snowflake_state.load(SeqCst) == SnowflakeState::Ready as u32 {
            match take(slot, assigned, want, call, &mut waiting) {
                Took::Ids(ids) => return ids,
                Took::LookAgain => continue,
                Took::Wait => {}
            }
        }
        wait_for_worker(sh, db, assigned, &mut waiting);
    }
}

/// What a snowflake call keeps between its tries.
#[derive(Default)]
struct Waiting {
    /// Set at the first wait: leaf_id.refill_timeout from then.
    deadline: Option<Deadline>,
    /// (slot, its assignment, error count) when this call first waited: a
    /// later error of the same slot and assignment is the answer to it.
    seen_error: Option<(usize, u64, u64)>,
    /// The test pauses around the take (`settings::snowflake_take_pause`)
    /// were passed: once per call.
    paused: bool,
}

impl Waiting {
    /// Ends the wait, if this call waited.
    fn end(&self) {
        if self.deadline.is_some() {
            backend::end_wait();
        }
    }
}

/// What a take from the generator came to.
enum Took {
    Ids((i64, i64)),
    /// The slot was given away meanwhile: look it up again.
    LookAgain,
    /// The lease ran out or the generator is closed: wait for the worker.
    Wait,
}

/// The hot path: one compare-and-swap on the database's generator. A
/// refusal that waiting cannot cure (the clock behind the mark) is raised.
fn take(slot: &DbSlot, assigned: u64, want: i64, call: Call, waiting: &mut Waiting) -> Took {
    let cfg = Config {
        epoch_ms: epoch(),
        max_backward_ms: settings::MAX_BACKWARD_MS.get() as i64,
        random_start: settings::RANDOM_SEQUENCE_START.get(),
        run_ahead_ms: settings::MAX_RUN_AHEAD_MS.get() as i64,
    };
    if !waiting.paused {
        settings::snowflake_take_pause("before the take");
    }
    let got = match call {
        Call::Batch => slot
            .generator
            .next_batch_ids(&cfg, &PgClock, &mut random, want),
        Call::Single => slot.generator.next_ids(&cfg, &PgClock, &mut random, want),
    };
    if !waiting.paused {
        waiting.paused = true;
        settings::snowflake_take_pause("after the take");
    }
    match got {
        // the slot was given away since the lookup (and maybe back): the
        // generator may have been another database's, whose IDs are not
        // this database's (a gap in its sequence)
        Ok(_) if slot.assigned.load(SeqCst) != assigned => Took::LookAgain,
        Ok(ids) => {
            waiting.end();
            Took::Ids(ids)
        }
        Err(Refusal::LeaseExpired { .. } | Refusal::Closed) => {
            // the worker renews the lease, or a new worker reopens
            slot.snowflake_lease_wanted.store(true, SeqCst);
            Took::Wait
        }
        Err(refusal) => {
            waiting.end();
            refuse(refusal)
        }
    }
}

/// The slow path: the worker's answer to this call (raised), or a request
/// for a claim and a wait (up to leaf_id.refill_timeout, then 55P03).
/// Returns when the call may look up its slot and try again.
fn wait_for_worker(sh: &Shared, db: usize, assigned: u64, waiting: &mut Waiting) {
    let slot = sh.db(db);
    let deadline = *waiting.deadline.get_or_insert_with(Deadline::from_setting);
    backend::prepare_wait(sh, db);
    let seq = slot.error.seq.load(SeqCst);
    let seen = match waiting.seen_error {
        Some((d, a, seen)) if d == db && a == assigned => seen,
        _ => {
            waiting.seen_error = Some((db, assigned, seq));
            seq
        }
    };
    let state = slot.snowflake_state.load(SeqCst);
    if seq != seen {
        let ((code, message), same) = {
            let _g = sh.lock_db(db);
            (slot.error.get(), slot.assigned.load(SeqCst) == assigned)
        };
        if !same {
            return; // another database's error, maybe: look up again
        }
        backend::end_wait();
        raise_recorded(code, message);
    }
    if state == SnowflakeState::NotRequested as u32 || state == SnowflakeState::Failed as u32 {
        // under the lock that gives database slots away: never into the
        // slot of another database
        let _g = sh.lock_global();
        if slot.dboid.load(SeqCst) == backend::my_dboid() {
            slot.snowflake_state
                .store(SnowflakeState::Requested as u32, SeqCst);
        }
    }
    backend::ensure_worker(sh, db, Role::Snowflake);
    if deadline.passed() {
        backend::end_wait();
        worker_timed_out(db, slot, assigned)
    }
    backend::wait(sh, db, &deadline);
}

/// A call's wait for a claim or renewal ran out (leaf_id.refill_timeout):
/// 55P03, saying what the worker waits for when it is known.
#[cold]
fn worker_timed_out(db: usize, slot: &DbSlot, assigned: u64) -> ! {
    let standby = standby_wait::waiting_for(db, backend::my_dboid(), Role::Snowflake);
    let what = "timed out waiting for the leaf_id worker to claim a worker id or renew the snowflake high-water mark";
    let contention =
        slot.snowflake_contention.load(SeqCst) && slot.assigned.load(SeqCst) == assigned;
    raise(
        PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
        if contention {
            format!("{what}: {}", crate::runtime::job_error::CONTENTION_NOTE)
        } else if standby.is_empty() {
            what.to_string()
        } else {
            format!("{what}: the worker's commit waits for {standby}")
        },
        Some("See the server log; leaf_id.refill_timeout sets how long calls wait."),
    )
}

fn refuse(refusal: Refusal) -> ! {
    match refusal {
        Refusal::ClockBehind { offset_ms } => raise(
            PgSqlErrorCode::ERRCODE_SYSTEM_ERROR,
            format!(
                "clock moved backwards: it is {offset_ms} ms behind the last snowflake ID issued"
            ),
            Some(
                "No ID is issued until the clock catches up; leaf_id.max_backward_ms sets how much rollback is waited out.",
            ),
        ),
        Refusal::BelowPersistedMark { behind_ms } => raise(
            PgSqlErrorCode::ERRCODE_SYSTEM_ERROR,
            format!(
                "clock is {behind_ms} ms behind the snowflake high-water mark persisted before the last restart"
            ),
            Some(
                "IDs up to that mark may have been issued before the restart; new IDs are refused until the clock passes it.",
            ),
        ),
        Refusal::OutOfRange => raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            "the clock is outside the 41-bit range of leaf_id.epoch_ms",
            None,
        ),
        Refusal::LeaseExpired { .. } | Refusal::Closed => unreachable!(),
    }
}

#[pg_extern(volatile, parallel_unsafe)]
fn leaf_snowflake_next() -> i64 {
    require_writable("leaf_snowflake_next()");
    next_id()
}

/// `n` snowflake IDs in one call, increasing, produced as the rows are read:
/// each chunk is one compare-and-swap of up to 256 IDs, and a batch leaves
/// the top 1,024 sequence numbers of every millisecond to single calls.
#[pg_extern(volatile, parallel_unsafe, name = "leaf_snowflake_next")]
fn leaf_snowflake_next_n(n: Option<i32>) -> SetOfIterator<'static, i64> {
    require_writable("leaf_snowflake_next()");
    backend::ids_in_chunks(n, |left| {
        let (first, count) = next_ids(left, Call::Batch);
        (first, count, |id| id)
    })
}

/// STABLE: the answer depends on leaf_id.epoch_ms. For an index or a
/// partition bound use the IMMUTABLE form that takes the epoch.
#[pg_extern(stable, parallel_safe, strict, name = "leaf_snowflake_decode")]
fn leaf_snowflake_decode(
    id: i64,
) -> TableIterator<
    'static,
    (
        name!(timestamp, TimestampWithTimeZone),
        name!(worker_id, i32),
        name!(sequence, i32),
    ),
> {
    TableIterator::once(decode_with(id, epoch()))
}

#[pg_extern(immutable, parallel_safe, strict, name = "leaf_snowflake_decode")]
fn leaf_snowflake_decode_epoch(
    id: i64,
    epoch_ms: i64,
) -> TableIterator<
    'static,
    (
        name!(timestamp, TimestampWithTimeZone),
        name!(worker_id, i32),
        name!(sequence, i32),
    ),
> {
    TableIterator::once(decode_with(id, epoch_ms))
}

fn decode_with(id: i64, epoch_ms: i64) -> (TimestampWithTimeZone, i32, i32) {
    if !(0..=crate::runtime::clock::unix_ms() + MAX_TIMESTAMP).contains(&epoch_ms) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("epoch_ms {epoch_ms} is not a Unix millisecond a snowflake epoch can have"),
            None,
        )
    }
    let Some(d) = layout::decode(id, epoch_ms) else {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{id} is not a snowflake ID: snowflake IDs are not negative"),
            None,
        )
    };
    let Some(ts) = tstz_from_unix_ms_any(d.unix_ms) else {
        raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!("the time of snowflake ID {id} is outside the timestamp range"),
            None,
        )
    };
    (ts, d.worker_id as i32, d.sequence as i32)
}

/// STABLE: depends on leaf_id.epoch_ms (see the IMMUTABLE form).
#[pg_extern(stable, parallel_safe, strict, name = "leaf_snowflake_min_id")]
fn leaf_snowflake_min_id(at: TimestampWithTimeZone) -> i64 {
    min_id_with(at, epoch())
}

#[pg_extern(immutable, parallel_safe, strict, name = "leaf_snowflake_min_id")]
fn leaf_snowflake_min_id_epoch(at: TimestampWithTimeZone, epoch_ms: i64) -> i64 {
    min_id_with(at, epoch_ms)
}

fn min_id_with(at: TimestampWithTimeZone, e: i64) -> i64 {
    let out_of_range = || -> ! {
        raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            "timestamp is outside the range snowflake IDs can express",
            Some("Snowflake IDs cover leaf_id.epoch_ms plus 2^41 milliseconds (about 69 years)."),
        )
    };
    if !at.is_finite() {
        raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            "timestamp must be finite",
            None,
        );
    }
    let Some(unix_ms) = unix_ms_from_tstz(at) else {
        out_of_range()
    };
    if unix_ms < e || unix_ms > layout::last_unix_ms(e) {
        out_of_range()
    }
    layout::min_id_at(unix_ms, e)
}

#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe)]
fn leaf_snowflake_status() -> TableIterator<
    'static,
    (
        name!(state, String),
        name!(worker_id, Option<i32>),
        name!(worker_id_source, Option<String>),
        name!(node_name, Option<String>),
        name!(last_issued, Option<TimestampWithTimeZone>),
        name!(persisted_mark, Option<TimestampWithTimeZone>),
        name!(restart_floor, Option<TimestampWithTimeZone>),
        name!(rollback_events, i64),
        name!(sequence_waits, i64),
        name!(epoch, Option<TimestampWithTimeZone>),
        name!(layout_exhausted_at, Option<TimestampWithTimeZone>),
    ),
> {
    let (sh, db) = backend::shared_db();
    let slot = sh.db(db);
    let state = match slot.snowflake_state.load(SeqCst) {
        0 => "not started",
        1 => "claiming",
        2 => "ready",
        _ => "failed",
    };
    let e = epoch();
    let id = slot.worker_id.load(SeqCst);
    let known = id >= 0;
    let g = &slot.generator;
    TableIterator::once((
        state.to_string(),
        known.then_some(id),
        known.then(|| {
            if slot.worker_id_from_registry.load(SeqCst) {
                "leaf_worker"
            } else {
                "setting"
            }
            .to_string()
        }),
        known.then(|| slot.node_name()),
        g.last_issued_ms(e).and_then(tstz_from_unix_ms),
        Some(g.lease_ms.load(SeqCst))
            .filter(|&m| m > 0)
            .and_then(tstz_from_unix_ms),
        Some(g.floor_ms.load(SeqCst))
            .filter(|&m| m > 0)
            .and_then(tstz_from_unix_ms),
        g.rollback_events.load(SeqCst) as i64,
        g.sequence_waits.load(SeqCst) as i64,
        tstz_from_unix_ms(e),
        tstz_from_unix_ms(layout::last_unix_ms(e)),
    ))
}
