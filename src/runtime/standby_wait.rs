//! The worker's wait, after a commit, for the standbys that
//! `leaf_id.synchronized_standby_slots` names (`standby_rule` decides).
//! Owns reading this server's replication slots and the wait; must not know
//! what the commit reserved (`transaction::in_transaction` calls it for every
//! job that wrote, and refuses the job's result when it fails).

use crate::runtime::job_error::{JobError, spi_err};
use crate::runtime::shmem::Role;
use crate::runtime::standby_rule::{self, NoSlot, SlotRule, SlotState, Verdict};
use crate::runtime::worker_sql;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::spi::Spi;
use std::cell::Cell;
use std::time::{Duration, Instant};

thread_local! {
    /// The worker's database slot and role: where callers that time out
    /// read what its commit waits for. None in a renewal helper.
    static NOTE_AT: Cell<Option<(usize, Role)>> = const { Cell::new(None) };
    /// Whether the note says the worker waits.
    static NOTED: Cell<bool> = const { Cell::new(false) };
    /// The end of the latest commit whose noted wait for the slots ended
    /// unconfirmed (timed out, or the slots could not be read), its note
    /// left in place (`leave_unconfirmed`); None once the note is cleared,
    /// so Some only while `NOTED`.
    static UNCONFIRMED_AT: Cell<Option<u64>> = const { Cell::new(None) };
}

/// How often the slots are read while a commit waits. A standby reports a
/// flush as soon as it has written, so a wait is about one round trip.
const POLL: Duration = Duration::from_millis(2);

/// How often a wait's note (its lag) is written while it goes on.
const NOTE_EVERY: Duration = Duration::from_millis(100);

/// After this long the wait is also logged (a WARNING).
const LOG_AFTER: Duration = Duration::from_secs(1);

/// The worker of database slot `db` keeps its notes there (and clears any a
/// worker before it left).
pub fn note_waits_at(db: usize, role: Role) {
    NOTE_AT.with(|c| c.set(Some((db, role))));
    clear_note();
}

/// A worker's exit: its wait ends with it (shared memory only; the
/// process's own activity row goes with it), so that the slot's next
/// database is not shown it.
pub fn forget_wait(db: usize, role: Role) {
    if let Some(sh) = crate::runtime::shmem::shared() {
        let _g = sh.lock_db(db);
        sh.db(db).standby_wait[role as usize].set("", None, 0);
    }
}

/// What the worker of `role` of database `dboid`, in slot `db`, waits for
/// now ("" for nothing, or when the slot is another database's by now), for
/// the message of a caller that timed out.
pub fn waiting_for(db: usize, dboid: u32, role: Role) -> String {
    let Some(sh) = crate::runtime::shmem::shared() else {
        return String::new();
    };
    let _g = sh.lock_db(db);
    let slot = sh.db(db);
    (slot.dboid.load(std::sync::atomic::Ordering::SeqCst) == dboid)
        .then(|| slot.standby_wait[role as usize].get())
        .flatten()
        .map(|w| w.what)
        .unwrap_or_default()
}

/// The commit at `commit_end` stays unconfirmed, and so does the noted
/// wait: its note stays, with its since (a renewal helper notes nothing).
fn leave_unconfirmed(commit_end: u64) {
    if NOTED.with(Cell::get) {
        UNCONFIRMED_AT.with(|c| c.set(Some(commit_end)));
    }
}

/// The worker waits for nothing (any more).
fn clear_note() {
    UNCONFIRMED_AT.with(|c| c.set(None));
    set_note("", None)
}

fn set_note(what: &str, lag_bytes: Option<i64>) {
    let Some((db, role)) = NOTE_AT.with(|c| c.get()) else {
        return;
    };
    NOTED.with(|c| c.set(!what.is_empty()));
    report_activity(what);
    let Some(sh) = crate::runtime::shmem::shared() else {
        return;
    };
    let _g = sh.lock_db(db);
    sh.db(db).standby_wait[role as usize].set(what, lag_bytes, crate::runtime::clock::unix_us());
}

/// The worker's row in pg_stat_activity (its `query`, which only
/// pg_read_all_stats members and superusers see) says what its commit waits
/// for, and is idle again when nothing is waited for.
fn report_activity(what: &str) {
    let text = (!what.is_empty())
        .then(|| {
            std::ffi::CString::new(format!("leaf_id worker: its commit waits for {what}")).ok()
        })
        .flatten();
    // SAFETY: pgstat_report_activity writes this process's own backend status entry (and returns at
    // once if it has none); `t` is a NUL-terminated string alive for the call, which it copies, and
    // the idle state passes no string, which it accepts.
    unsafe {
        match &text {
            Some(t) => {
                pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_RUNNING, t.as_ptr())
            }
            None => {
                pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_IDLE, std::ptr::null())
            }
        }
    }
}

/// Around the worker's commit when synchronous standbys are defined: the
/// commit waits inside PostgreSQL for them (synchronous_commit = on), and a
/// caller that times out meanwhile says so. Each such commit's wait has its
/// own since (one that failed leaves none to go on from), unless an earlier
/// commit's wait for the slots ended unconfirmed: the worker's commits have
/// gone unconfirmed since that one's, and its note comes back with this
/// commit's `confirm`.
pub(crate) fn note_synchronous_commit(waiting: bool) {
    let unconfirmed = UNCONFIRMED_AT.with(Cell::get).is_some();
    if waiting {
        if !unconfirmed {
            clear_note();
        }
        set_note(
            "the synchronous standbys of synchronous_standby_names (it commits with synchronous_commit = on)",
            None,
        );
    } else if !unconfirmed {
        clear_note();
    }
}

thread_local! {
    /// The rule this worker last warned finds no physical slot (once per
    /// rule, and again after one that found a slot).
    static WARNED_RULE: std::cell::RefCell<Option<SlotRule>> = const { std::cell::RefCell::new(None) };
}

/// A WARNING when `leaf_id.synchronized_standby_slots` is set and finds no
/// physical slot: `*` then waits for no standby (one that streams without
/// a slot, or a cascading standby fed by another standby, has none here),
/// and named slots that are missing or logical confirm nothing.
fn warn_without_physical_slot(rule: &SlotRule, slots: &[SlotState]) {
    let found = standby_rule::no_physical_slot(rule, slots);
    let warned_already = WARNED_RULE.with(|w| w.borrow().as_ref() == Some(rule));
    match found {
        None => WARNED_RULE.with(|w| *w.borrow_mut() = None),
        Some(_) if warned_already => {}
        Some(NoSlot::NoneToWaitFor) => {
            WARNED_RULE.with(|w| *w.borrow_mut() = Some(rule.clone()));
            pgrx::warning!(
                "leaf_id.synchronized_standby_slots is '*' but this server has no permanent physical replication slot: the workers' commits wait for no standby (a standby that streams without a slot, or a cascading standby, is never waited for)"
            );
        }
        Some(NoSlot::NoneNamedExists) => {
            WARNED_RULE.with(|w| *w.borrow_mut() = Some(rule.clone()));
            pgrx::warning!(
                "leaf_id.synchronized_standby_slots names no physical replication slot of this server: every commit of the workers waits for {} and fails after leaf_id.standby_confirm_timeout",
                match rule {
                    SlotRule::Named(names) => names.join(", "),
                    _ => String::new(),
                }
            );
        }
    }
}

/// Return once every standby the rule names has flushed past `commit_end`
/// (the end of the worker's commit record); an error when one has not
/// within `leaf_id.standby_confirm_timeout`, or when the worker is told to
/// stop (both 55P03):
/// the caller must then not use what the commit reserved (it stays reserved
/// in the table, so nothing is handed out twice; those IDs are skipped).
pub(crate) fn confirm(commit_end: u64) -> Result<(), JobError> {
    let rule = crate::settings::standby_slots_rule();
    if rule == SlotRule::Off {
        // the setting emptied while a wait was noted: nothing is waited for
        if NOTED.with(Cell::get) {
            clear_note();
        }
        return Ok(());
    }
    let timeout =
        Duration::from_millis(crate::settings::STANDBY_CONFIRM_TIMEOUT.get().max(0) as u64);
    let mut wait = CommitWait {
        commit_end,
        start: Instant::now(),
        logged: false,
        noted: None,
    };
    let mut looked_for_slots = false;
    loop {
        let slots = read_slots().inspect_err(|_| leave_unconfirmed(commit_end))?;
        if !looked_for_slots {
            looked_for_slots = true;
            warn_without_physical_slot(&rule, &slots);
            // the standbys caught up with the commit left unconfirmed, though
            // none of the worker's commits was confirmed since: that wait
            // is over, and one of this commit starts its own since
            if standby_rule::unconfirmed_wait_ended(&rule, &slots, UNCONFIRMED_AT.with(Cell::get)) {
                clear_note();
            }
        }
        match standby_rule::verdict(&rule, &slots, commit_end) {
            Verdict::Confirmed => {
                wait.end_confirmed();
                return Ok(());
            }
            Verdict::Waiting(waiting) => {
                let what = standby_rule::describe(&waiting);
                wait.note(&what, &waiting);
                if wait.start.elapsed() >= timeout {
                    leave_unconfirmed(commit_end);
                    return Err(timed_out(&what, timeout));
                }
                crate::runtime::clock::wait_on_latch(POLL);
                // told to stop (shutdown, pg_terminate_backend): leave before
                // the next read of the slots would end the worker at once
                // SAFETY: ProcDiePending is this process's `volatile sig_atomic_t`, set by `die` on
                // this thread; read volatile through a raw pointer, as C does.
                if unsafe { (&raw const pg_sys::ProcDiePending).read_volatile() != 0 } {
                    clear_note();
                    // (55P03 for the callers that waited for this job: the
                    // worker is told to stop, not they; 57P01 would tell a
                    // client or a pooler that its own session was ended)
                    return Err(JobError::new(
                        PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
                        format!(
                            "the leaf_id worker stops while its commit waits for {what}: nothing it reserved is used"
                        ),
                    ));
                }
            }
        }
    }
}

/// One commit's wait for the standbys (`confirm`): where the commit
/// record ends, when the wait began, whether it was logged, and when its
/// note was last written.
struct CommitWait {
    commit_end: u64,
    start: Instant,
    /// The WARNING after `LOG_AFTER` was written.
    logged: bool,
    /// None until the first note.
    noted: Option<Instant>,
}

impl CommitWait {
    /// Still waiting for `what` (`waiting`): the note, every `NOTE_EVERY`
    /// (the lag the views show moves while the wait goes on), and the
    /// WARNING once the wait has lasted `LOG_AFTER`.
    fn note(&mut self, what: &str, waiting: &[(String, standby_rule::Behind)]) {
        let lag = standby_rule::most_bytes_behind(waiting);
        if self
            .noted
            .is_none_or(|at: Instant| at.elapsed() >= NOTE_EVERY)
        {
            self.noted = Some(Instant::now());
            set_note(what, lag);
        }
        if !self.logged && self.start.elapsed() >= LOG_AFTER {
            self.logged = true;
            pgrx::warning!(
                "leaf_id: the worker's commit at {} waits for {}: leaf_id.synchronized_standby_slots names it, and nothing the commit reserved is used before it confirms",
                standby_rule::format_lsn(self.commit_end),
                what
            );
        }
    }

    /// The standbys confirmed the commit: the note cleared (also one an
    /// earlier job's commit left when it timed out: this later commit is on
    /// the standbys), the worker's latch set if the wait noted itself, and
    /// the end logged if its start was.
    fn end_confirmed(&self) {
        if NOTED.with(Cell::get) {
            clear_note();
        }
        if self.noted.is_some() {
            // a backend's wake-up that came during the wait was
            // consumed by it: the loop looks at its requests again
            // SAFETY: MyLatch is this process's own latch, valid for its whole life.
            unsafe { pg_sys::SetLatch(pg_sys::MyLatch) };
        }
        if self.logged {
            pgrx::log!(
                "leaf_id: the standbys confirmed the worker's commit at {} after {} ms",
                standby_rule::format_lsn(self.commit_end),
                self.start.elapsed().as_millis()
            );
        }
    }
}

/// The error of a commit that `what` did not confirm within `timeout`, the
/// worker's latch set first (as when the standbys confirm). The note stays:
/// the commit is still not confirmed, and the next job's wait goes on from
/// it (the views' since), unless the standbys have caught up with this
/// commit by then (`UNCONFIRMED_AT`).
fn timed_out(what: &str, timeout: Duration) -> JobError {
    // SAFETY: MyLatch is this process's own latch, valid for its whole life.
    unsafe { pg_sys::SetLatch(pg_sys::MyLatch) };
    JobError::new(
        PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
        format!(
            "{what} did not confirm the leaf_id worker's commit within leaf_id.standby_confirm_timeout ({} ms): nothing it reserved is used (leaf_id.synchronized_standby_slots)",
            timeout.as_millis()
        ),
    )
}

/// This server's replication slots, read in a transaction of their own
/// (`pg_replication_slots` takes the slots' locks; the worker's session
/// resolves names in pg_catalog only).
fn read_slots() -> Result<Vec<SlotState>, JobError> {
    let mut committed = false;
    let committed_ref = std::panic::AssertUnwindSafe(&mut committed);
    let result = PgTryBuilder::new(move || {
        let committed_ref = committed_ref;
        // SAFETY: only `confirm` calls this, which `in_transaction` calls after its own transaction
        // has ended: no transaction is open in this worker, so one may start here; the snapshot is
        // pushed in it and popped below, before the commit.
        unsafe {
            pg_sys::StartTransactionCommand();
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        }
        let slots = Spi::connect(|client| {
            let rows = client
                .select(worker_sql::REPLICATION_SLOTS, None, &[])
                .map_err(spi_err)?;
            let mut out = Vec::new();
            for row in rows {
                let name: String = row.get(1).map_err(spi_err)?.unwrap_or_default();
                let physical: bool = row.get(2).map_err(spi_err)?.unwrap_or(false);
                let temporary: bool = row.get(3).map_err(spi_err)?.unwrap_or(false);
                let lsn: Option<String> = row.get(4).map_err(spi_err)?;
                out.push(SlotState {
                    name,
                    physical,
                    temporary,
                    flushed: lsn.as_deref().and_then(standby_rule::parse_lsn),
                });
            }
            Ok::<_, JobError>(out)
        });
        // SAFETY: the snapshot pushed above is on top (Spi::connect popped whatever it pushed) and
        // the transaction started above is in progress (an error would have left this closure).
        unsafe {
            pg_sys::PopActiveSnapshot();
            pg_sys::CommitTransactionCommand();
        }
        *committed_ref.0 = true;
        slots
    })
    .catch_others(|e| {
        let message = match &e {
            CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) => r.message().to_string(),
            CaughtError::RustPanic { ereport, .. } => ereport.message().to_string(),
        };
        Err(JobError::new(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("leaf_id could not read the replication slots: {message}"),
        ))
    })
    .execute();
    if !committed {
        // SAFETY: the transaction started above was not committed: an error (caught by
        // PgTryBuilder) left it in progress or failed, and AbortCurrentTransaction ends it either
        // way, snapshots included (and does nothing if it never started).
        unsafe { pg_sys::AbortCurrentTransaction() };
    }
    result
}
