//! The background worker's session and transactions.
//! Owns how a job runs; must not know what a job does (the modes' jobs).
//!
//! The worker runs as the bootstrap superuser, so nothing a database owner or
//! another role configured may change what its SQL means: the session is
//! hardened once at start (`harden_session`), and every job runs in its own
//! transaction (`in_transaction`), committed synchronously; what it wrote
//! is used only once the standbys of `leaf_id.synchronized_standby_slots`
//! have it (`standby_wait`).
//!
//! Every statement the worker runs names its functions and operators with
//! their schema (`pg_catalog.`, `OPERATOR(pg_catalog.=)`) and its tables with
//! the extension's schema (`runtime::worker_sql` builds every such text);
//! with `search_path = pg_catalog, pg_temp` on top, a function or operator
//! planted in another schema is never resolved.

use crate::errors::code_of;
use crate::runtime::catalog::Catalog;
use crate::runtime::job_error::{EXTENSION_GONE, JobError};
use crate::runtime::worker_sql::Schema;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::spi::Spi;
use std::ffi::CStr;
use std::panic::AssertUnwindSafe;

/// The catalog version (the extension's SQL objects) this library serves.
const CATALOG_VERSION: &str = Catalog::CURRENT.as_str();

/// The error of a job that needs the current catalog, on `catalog`.
pub fn needs_current_catalog(catalog: Catalog, what: &str) -> JobError {
    let version = catalog.as_str();
    JobError::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "{what} needs leaf_id's catalog version {CATALOG_VERSION}; this database has {version}: run ALTER EXTENSION leaf_id UPDATE"
        ),
    )
}

/// The settings the worker's session forces, over whatever the database,
/// the role or postgresql.conf set (`ALTER DATABASE ... SET` included).
pub const FORCED_SETTINGS: &[(&CStr, &CStr)] = &[
    // names resolve only in pg_catalog: nothing planted elsewhere runs
    (c"search_path", c"pg_catalog, pg_temp"),
    // the bootstrap superuser itself: a database owner may ALTER DATABASE
    // ... SET role to her own role, which would make every job hers
    (c"role", c"none"),
    // a refill is usable only once durable (and replicated, if synchronous)
    (c"synchronous_commit", c"on"),
    (c"default_transaction_read_only", c"off"),
    (c"default_transaction_isolation", c"read committed"),
    (c"default_transaction_deferrable", c"off"),
    // triggers and rules on the tables fire as for anyone else (a replica
    // role would skip them silently)
    (c"session_replication_role", c"origin"),
    (c"row_security", c"on"),
    // every timeout a database or role setting could make end the
    // worker's statements, transactions or session (a database owner may
    // ALTER DATABASE ... SET any of them): its own lock timeout, the rest off
    // (transaction_timeout, PostgreSQL 17 on, in OPTIONAL_FORCED_SETTINGS)
    (
        c"lock_timeout",
        crate::runtime::job_error::WORKER_LOCK_TIMEOUT_C,
    ),
    (c"statement_timeout", c"0"),
    (c"idle_in_transaction_session_timeout", c"0"),
    (c"idle_session_timeout", c"0"),
    (c"client_connection_check_interval", c"0"),
    (c"standard_conforming_strings", c"on"),
    // an error the worker catches must stay an error (any role may set
    // exit_on_error for the database, and FATAL would end the worker)
    (c"exit_on_error", c"off"),
    (c"application_name", c"leaf_id worker"),
];

/// Forced as `FORCED_SETTINGS` where the server has them.
pub const OPTIONAL_FORCED_SETTINGS: &[(&CStr, &CStr)] = &[
    // PostgreSQL 17 on: 1 ms for the database made every job end in FATAL,
    // and the worker restart in a loop
    (c"transaction_timeout", c"0"),
];

/// Force `FORCED_SETTINGS` (and those of `OPTIONAL_FORCED_SETTINGS` this
/// server has) for the rest of the worker's life, and, where Citus is
/// loaded, `bound_citus_waits`.
pub fn harden_session() {
    force_session_user();
    for (name, value) in FORCED_SETTINGS {
        force(name, value);
    }
    for (name, value) in OPTIONAL_FORCED_SETTINGS {
        if setting_defined(name) {
            force(name, value);
        }
    }
    bound_citus_waits();
}

/// The bootstrap superuser as the session's user, before `role` is forced:
/// a database owner may ALTER DATABASE ... SET session_authorization to any
/// role (the worker connects as the bootstrap superuser, who may become
/// anyone), and every job would run as that role. The setting's check looks
/// the name up: in a transaction of its own (never called inside a job's).
fn force_session_user() {
    // SAFETY: only `harden_session` calls this, in a worker or helper connected to its database and
    // outside any transaction (at its start, and between jobs after a SIGHUP), so a transaction may
    // start here; the name is palloc'd in it and copied by the GUC code before the commit frees it.
    unsafe {
        pg_sys::StartTransactionCommand();
        let name =
            pg_sys::GetUserNameFromId(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID), false);
        pg_sys::SetConfigOption(
            c"session_authorization".as_ptr(),
            name,
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        );
        pg_sys::CommitTransactionCommand();
    }
}

fn force(name: &CStr, value: &CStr) {
    // SAFETY: `name` and `value` are NUL-terminated and alive for the call, and the GUC code copies
    // the value; a setting that is refused raises an ERROR (PGC_S_OVERRIDE) rather than returning.
    // Called from `harden_session` in a worker's main line, outside a transaction: none of the
    // settings it forces so needs the catalog (session_authorization, which does, is set in a
    // transaction by `force_session_user`).
    unsafe {
        pg_sys::SetConfigOption(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        )
    };
}

/// Interrupts are held off (the worker's exit) while a cancel or terminate
/// is pending: Citus then stops a distributed statement early without an
/// error (its `IsHoldOffCancellationReceived`).
pub fn cancel_held_off() -> bool {
    // SAFETY: InterruptHoldoffCount (volatile uint32), ProcDiePending and QueryCancelPending
    // (volatile sig_atomic_t) are this process's globals, set by mainline code or a signal handler
    // on this same thread; read volatile through raw pointers, with no reference to the statics.
    unsafe {
        (&raw const pg_sys::InterruptHoldoffCount).read_volatile() > 0
            && ((&raw const pg_sys::ProcDiePending).read_volatile() != 0
                || (&raw const pg_sys::QueryCancelPending).read_volatile() != 0)
    }
}

/// How long the worker waits for a connection to another Citus node: half
/// the margin between renewals and the end of the lease, so that a node
/// that hangs (a network partition) costs a renewal less than that margin.
pub fn citus_connect_timeout_ms() -> i64 {
    let margin = crate::settings::LEASE_AHEAD.get() as i64
        - crate::settings::HEARTBEAT_INTERVAL.get() as i64;
    (margin / 2).clamp(100, 2000)
}

/// How long a snowflake renewal waits for the other copies' answers
/// (`renewal_helper`): three quarters of the margin between renewals and
/// the end of the lease, and at least the connect timeout and 200 ms more.
pub fn renewal_wait_ms() -> i64 {
    let margin = crate::settings::LEASE_AHEAD.get() as i64
        - crate::settings::HEARTBEAT_INTERVAL.get() as i64;
    (margin * 3 / 4).max(citus_connect_timeout_ms() + 200)
}

/// On Citus, a node that hangs instead of refusing connections (a network
/// partition, a stopped server) would hold a statement on a cached
/// connection for as long as TCP lets it: the worker's next jobs, and, for a
/// refill, through Citus' lock on the shard, every other node's refills. So
/// the workers keep no connections between transactions (a new connection
/// cannot hang longer than the connect timeout) and connect with a short
/// timeout. (A statement already running on a node at the instant it hangs
/// still waits: that is why renewals have a worker of their own, and send
/// their statements through helpers, `renewal_helper`.)
fn bound_citus_waits() {
    if !citus_loaded() {
        return; // no Citus in this server
    }
    let timeout = std::ffi::CString::new(citus_connect_timeout_ms().to_string()).expect("digits");
    force(c"citus.node_connection_timeout", &timeout);
    if setting_defined(c"citus.max_cached_conns_per_worker") {
        force(c"citus.max_cached_conns_per_worker", c"0");
    }
}

/// The timeouts of `FORCED_SETTINGS` that Citus' sessions on the other
/// nodes (a refill's write to every copy of a reference table, a claim's)
/// would otherwise take from their database's settings there, which its
/// owner may set to 1 ms: each job sets them for its transaction with
/// Citus' SET propagation on (`citus.propagate_set_commands = 'local'`
/// sends a `SET LOCAL` run in a DO block to every node the transaction
/// reaches). `default_transaction_read_only` cannot be undone so (a
/// transaction's first query decides it), nor the sessions that
/// `master_run_on_worker` opens (renewals, take-over reads): docs/citus.md.
const REMOTE_FORCED_SETTINGS: &[&CStr] = &[
    // (first: its timer runs from the remote transaction's start, so a
    // short one may still end a cold session before this is read)
    c"transaction_timeout",
    c"statement_timeout",
    c"lock_timeout",
    c"idle_in_transaction_session_timeout",
];

/// The DO statement that sets `REMOTE_FORCED_SETTINGS` (those this server
/// has) for the job's transaction and Citus' sessions in it.
fn citus_remote_settings_sql() -> &'static str {
    static SQL: once_cell::sync::OnceCell<String> = once_cell::sync::OnceCell::new();
    SQL.get_or_init(|| {
        let settings: Vec<(&'static str, &'static str)> = REMOTE_FORCED_SETTINGS
            .iter()
            .filter(|name| setting_defined(name))
            .map(|name| {
                let value = FORCED_SETTINGS
                    .iter()
                    .chain(OPTIONAL_FORCED_SETTINGS)
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.to_str().expect("ASCII"))
                    .expect("a forced setting");
                (name.to_str().expect("ASCII"), value)
            })
            .collect();
        crate::runtime::worker_sql::set_local_propagated(&settings)
    })
}

/// On a server with Citus: the job's transaction, and the sessions Citus
/// opens on other nodes for it, get the worker's timeouts.
fn force_remote_settings() -> Result<(), JobError> {
    if !citus_loaded() {
        return Ok(());
    }
    Spi::run(citus_remote_settings_sql()).map_err(crate::runtime::job_error::spi_err)
}

/// Is a setting defined (by PostgreSQL or a loaded library)?
fn setting_defined(name: &CStr) -> bool {
    // SAFETY: `name` is NUL-terminated and alive for the call; with missing_ok and no privilege
    // check, GetConfigOption only looks the setting up (no catalog, no transaction) and returns
    // NULL or a pointer that is only compared with NULL here.
    unsafe { !pg_sys::GetConfigOption(name.as_ptr(), true, false).is_null() }
}

/// Is the Citus library loaded in this server (its settings are defined)?
pub fn citus_loaded() -> bool {
    setting_defined(c"citus.node_connection_timeout")
}

/// Run `job` in a transaction of its own and commit it (synchronously: the
/// worker forces synchronous_commit on). Any error, Postgres' or the job's,
/// rolls the transaction back and is returned, not raised. `job` gets the
/// extension's schema, whose name stays as it is until the transaction ends,
/// and its catalog version, read once here (one this library does not serve
/// is refused before the job runs).
pub(crate) fn in_transaction<T>(
    job: impl FnOnce(&Schema, Catalog) -> Result<T, JobError>,
) -> Result<T, JobError> {
    // SAFETY: callers run this in a worker or renewal helper connected to its database, from its
    // main line and never inside another transaction (jobs run one after another, and
    // `standby_wait::confirm` starts its own only after this one ends), so a transaction may start
    // here, and its snapshot is the one pushed onto an empty active stack.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let mut committed = false;
    let committed_ref = AssertUnwindSafe(&mut committed);
    // the end of the job's commit record, when it wrote
    let mut commit_end: Option<u64> = None;
    let commit_end_ref = AssertUnwindSafe(&mut commit_end);
    let mut code_keeper = pg_sys::ErrorContextCallback {
        // SAFETY: error_context_stack is this process's global, read by value on its one thread.
        previous: unsafe { pg_sys::error_context_stack },
        callback: Some(note_reported_code),
        arg: std::ptr::null_mut(),
    };
    LAST_REPORTED_CODE.with(|c| c.set(0));
    // SAFETY: `code_keeper` lives in this frame until the function returns, and `_unlink`, declared
    // after it and so dropped before it (on return or unwind), puts the previous top back: the
    // stack never points to it once it is gone. Its callback only reads the error being reported.
    unsafe { pg_sys::error_context_stack = &raw mut code_keeper };
    // unlinked however the job ends (`code_keeper` dies with this frame)
    let _unlink = ContextRestore(code_keeper.previous);
    let job = AssertUnwindSafe(job);
    let result = PgTryBuilder::new(move || {
        let committed_ref = committed_ref;
        let commit_end_ref = commit_end_ref;
        let job = job;
        let value = run_job(job.0)?;
        let end = commit_job();
        *committed_ref.0 = true;
        *commit_end_ref.0 = end;
        if end.is_some() && !commit_replicated() {
            return Err(JobError::new(
                PgSqlErrorCode::ERRCODE_QUERY_CANCELED,
                "the leaf_id worker's wait for the synchronous standby was cancelled: its commit is not used",
            ));
        }
        Ok(value)
    })
    .catch_others(|e| Err(job_error_of(e)))
    .execute();
    if !committed {
        // SAFETY: the transaction started above was not committed: an error (caught by
        // PgTryBuilder) left it in progress or failed, and AbortCurrentTransaction ends it either
        // way, popping its snapshots (and does nothing if none had started).
        unsafe { pg_sys::AbortCurrentTransaction() };
    }
    match (result, commit_end) {
        // what the job committed is used only once the standbys that
        // leaf_id.synchronized_standby_slots names have it
        (Ok(value), Some(end)) => crate::runtime::standby_wait::confirm(end).map(|()| value),
        (result, _) => result,
    }
}

/// The job, given the extension's schema and its catalog version, read
/// once here: one this library does not serve is refused before the job
/// runs, and a dropped extension ends the worker (`EXTENSION_GONE`).
fn run_job<T>(job: impl FnOnce(&Schema, Catalog) -> Result<T, JobError>) -> Result<T, JobError> {
    let Some((schema, version)) = installed_extension()? else {
        return Err(JobError::new(
            PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
            EXTENSION_GONE,
        ));
    };
    let Some(catalog) = Catalog::from_version(&version) else {
        return Err(JobError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "leaf_id's library {CATALOG_VERSION} cannot serve its catalog of version {version} in this database: \
                 run ALTER EXTENSION leaf_id UPDATE"
            ),
        ));
    };
    force_remote_settings()?;
    job(&schema, catalog)
}

/// Commit the job's transaction (noting a wait for synchronous standbys
/// while it lasts): the end of its commit record, if it wrote.
fn commit_job() -> Option<u64> {
    // SAFETY: in the transaction `in_transaction` started, still in progress (the job returned
    // Ok, and jobs run SPI only, which never ends the transaction); the call only reads its state.
    let wrote = unsafe { pg_sys::GetTopTransactionIdIfAny() } != pg_sys::InvalidTransactionId;
    let sync_wait = wrote && synchronous_standbys_defined();
    if sync_wait {
        crate::runtime::standby_wait::note_synchronous_commit(true);
    }
    // SAFETY: the snapshot `in_transaction` pushed is on top (each Spi::connect popped what it
    // pushed) and its transaction is in progress, so both calls end what it began.
    unsafe {
        pg_sys::PopActiveSnapshot();
        pg_sys::CommitTransactionCommand();
    }
    if sync_wait {
        crate::runtime::standby_wait::note_synchronous_commit(false);
    }
    // SAFETY: XactLastCommitEnd is this process's global, set by the commit just made; read by
    // value through a raw pointer, with no reference to the static.
    wrote.then(|| unsafe { (&raw const pg_sys::XactLastCommitEnd).read() })
}

/// A job's error caught from Postgres (SPI), a raised report or a panic,
/// with its SQLSTATE as raised (`raw_code_of`).
fn job_error_of(e: CaughtError) -> JobError {
    let (report, sqlstate) = match &e {
        // raised by Postgres (SPI): a user's code may hide behind XX000
        CaughtError::PostgresError(r) => (r, raw_code_of(r.sql_error_code())),
        CaughtError::ErrorReport(r) => (r, code_of(r.sql_error_code())),
        CaughtError::RustPanic { ereport, .. } => (ereport, code_of(ereport.sql_error_code())),
    };
    JobError::reported(sqlstate, report.message().to_string())
}

/// Puts `error_context_stack` back to the entry it holds when dropped.
struct ContextRestore(*mut pg_sys::ErrorContextCallback);

impl Drop for ContextRestore {
    fn drop(&mut self) {
        // SAFETY: `self.0` is the entry that was on top when `in_transaction` linked its own: null,
        // or one of a frame below, still alive; putting it back restores the stack as it was.
        unsafe { pg_sys::error_context_stack = self.0 };
    }
}

thread_local! {
    /// The SQLSTATE of the last report made during a job (`note_reported_code`).
    static LAST_REPORTED_CODE: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
}

/// An error-context callback: `errfinish` runs it for every report made
/// while a job runs, the job's ERROR last, with the code as raised.
///
/// # Safety
///
/// Only as the callback of `in_transaction`'s error-context entry: PostgreSQL calls it while a
/// report is on the error stack (errfinish, or GetErrorContextStack), which `geterrcode` needs.
unsafe extern "C-unwind" fn note_reported_code(_arg: *mut std::os::raw::c_void) {
    // SAFETY: a report is on the error stack (see Safety), whose code geterrcode returns.
    let code = unsafe { pg_sys::geterrcode() };
    // classes 00, 01 and 02 are no errors (a WARNING a trigger logs before
    // it rethrows with a bare RAISE, which does not pass errfinish again)
    let class = code & 0xFFF;
    let not_an_error = [c"00000", c"01000", c"02000"]
        .iter()
        .any(|s| class == (sqlstate_of(s) & 0xFFF));
    if !not_an_error {
        LAST_REPORTED_CODE.with(|c| c.set(code));
    }
}

/// A five-character SQLSTATE packed as PostgreSQL does (MAKE_SQLSTATE).
fn sqlstate_of(s: &CStr) -> i32 {
    s.to_bytes()
        .iter()
        .enumerate()
        .map(|(i, b)| (((*b - b'0') & 0x3F) as i32) << (6 * i))
        .sum()
}

/// The code a job's error was raised with. pgrx turns a code it does not
/// know (a user's trigger may raise `LF001`) into `XX000`; the error's own
/// code, noted as it was raised, is what the callers get.
fn raw_code_of(caught: PgSqlErrorCode) -> i32 {
    let caught = code_of(caught);
    let raised = LAST_REPORTED_CODE.with(|c| c.get());
    if caught == code_of(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR)
        && raised != 0
        && !crate::errors::is_known_to_pgrx(raised)
    {
        raised
    } else {
        caught
    }
}

/// Are synchronous standbys defined (synchronous_standby_names, as the
/// walsenders last read it)? Then a commit waits for them.
fn synchronous_standbys_defined() -> bool {
    // SAFETY: WalSndCtl points to the walsenders' shared struct, set up with shared memory (NULL
    // checked anyway); max_wal_senders is a plain int read by value. `sync_standbys_status` is one
    // byte the checkpointer writes under SyncRepLock, read here volatile and unlocked as
    // SyncRepWaitForLSN's own fast exit reads it; its layout is that of the minor releases
    // `check_server_minor` admits.
    unsafe {
        let ctl = pg_sys::WalSndCtl;
        if ctl.is_null() || (&raw const pg_sys::max_wal_senders).read() == 0 {
            return false; // no synchronous replication is possible
        }
        let status = (&raw const (*ctl).sync_standbys_status).read_volatile() as u32;
        status & pg_sys::SYNC_STANDBY_DEFINED != 0
    }
}

/// Did the last commit reach the synchronous standbys, if any are
/// configured? A cancel (pg_cancel_backend, or SIGTERM) ends the commit's
/// wait for them early: the commit is durable here but maybe not on the
/// standby, so after a failover what it reserved could be reserved again.
fn commit_replicated() -> bool {
    if !synchronous_standbys_defined() {
        return true;
    }
    // SAFETY: WalSndCtl is non-null (synchronous_standbys_defined said so) and valid for the
    // server's lifetime. `lsn[SYNC_REP_WAIT_FLUSH]` is an aligned 8-byte XLogRecPtr that walsenders
    // write under SyncRepLock; read volatile and unlocked, a single load on the 64-bit servers
    // leaf_id runs on (its Datum packing needs 64 bits too), and a stale value is only lower, which
    // refuses the commit. XactLastCommitEnd is this process's global.
    unsafe {
        let ctl = pg_sys::WalSndCtl;
        let flushed = (&raw const (*ctl).lsn[pg_sys::SYNC_REP_WAIT_FLUSH as usize]).read_volatile();
        flushed >= (&raw const pg_sys::XactLastCommitEnd).read()
    }
}

/// The extension's schema and version (`worker_sql::installed_extension`,
/// which locks the schema's name for the transaction); None when it is not
/// installed. The library is shared by every version's SQL, so a job first
/// checks that the tables have the shape it writes.
pub(crate) fn installed_extension() -> Result<Option<(Schema, String)>, JobError> {
    Spi::connect_mut(crate::runtime::worker_sql::installed_extension)
}
