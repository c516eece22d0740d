//! Raising errors with a real SQLSTATE, and the checks every entry point shares.
//! Must not import the rest of the crate (everything imports it).

use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;

/// Raise an ERROR with the given SQLSTATE, message and optional hint.
pub fn raise(code: PgSqlErrorCode, message: impl Into<String>, hint: Option<&str>) -> ! {
    let mut report = ErrorReport::new(code, message.into(), "leaf_id");
    if let Some(h) = hint {
        report = report.set_hint(h.to_string());
    }
    report.report(PgLogLevel::ERROR);
    unreachable!()
}

/// Raise an error that a background-worker job recorded (sqlstate as Postgres packs it).
pub fn raise_recorded(sqlstate: i32, message: String) -> ! {
    if sqlstate == 0 || message.is_empty() {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            "leaf_id background worker reported an error without a message",
            None,
        )
    }
    if !is_known_to_pgrx(sqlstate) {
        keep_raw_code_of_next_error(sqlstate);
    }
    raise(PgSqlErrorCode::from(sqlstate), message, None)
}

/// Does pgrx's `PgSqlErrorCode` have this SQLSTATE? It has only the codes
/// PostgreSQL defines; any other (a user's trigger may `RAISE ... USING
/// ERRCODE = 'LF001'`) becomes `XX000` in it.
pub fn is_known_to_pgrx(sqlstate: i32) -> bool {
    code_of(PgSqlErrorCode::from(sqlstate)) == sqlstate
}

/// The SQLSTATE pgrx reads as `XX000`.
const INTERNAL_ERROR: i32 = PgSqlErrorCode::ERRCODE_INTERNAL_ERROR as isize as i32;

/// The code `RAW_CODE_CONTEXT` gives the next `XX000` error; 0 for none.
static mut RAW_CODE: i32 = 0;

/// An error-context entry: `errfinish` calls every entry of
/// `error_context_stack` while the error is the top of the error stack, so
/// its `errcode` call sets the code that handlers and the client see.
static mut RAW_CODE_CONTEXT: pg_sys::ErrorContextCallback = pg_sys::ErrorContextCallback {
    previous: std::ptr::null_mut(),
    callback: Some(give_raw_code),
    arg: std::ptr::null_mut(),
};

// SAFETY: the declaration matches elog.h's `int errcode(int sqlerrcode)`; it is called only from
// `give_raw_code`, while an error is being reported (which errcode needs).
unsafe extern "C-unwind" {
    // not in pgrx's bindings (it keeps errstart/errcode to itself)
    fn errcode(sqlerrcode: std::os::raw::c_int) -> std::os::raw::c_int;
}

/// # Safety
///
/// Only as the callback of `RAW_CODE_CONTEXT`: PostgreSQL calls it while a report is on the error
/// stack (errfinish, or GetErrorContextStack), which `geterrcode` reads and `errcode` sets.
unsafe extern "C-unwind" fn give_raw_code(_arg: *mut std::os::raw::c_void) {
    // SAFETY: RAW_CODE is this process's static, read and written through raw pointers (no
    // reference) on its one thread; a report is on the error stack (see Safety), so geterrcode
    // reads it and errcode sets its code.
    unsafe {
        let code = (&raw const RAW_CODE).read();
        if code != 0 && pg_sys::geterrcode() == INTERNAL_ERROR {
            (&raw mut RAW_CODE).write(0);
            errcode(code);
        }
    }
}

/// Make the ERROR raised next (as `XX000`, all pgrx can raise) carry
/// `sqlstate` instead. The entry is pushed for that error only: the raise
/// never returns, and the handler that catches it (PostgresMain, a PL/pgSQL
/// EXCEPTION block) resets `error_context_stack` to what it saved before
/// this function's caller ran, so the entry is gone with the error. Only for
/// a raise that follows at once, with no Rust catch in between.
fn keep_raw_code_of_next_error(sqlstate: i32) {
    // SAFETY: RAW_CODE and RAW_CODE_CONTEXT are this process's statics, used through raw pointers
    // on its one thread; the entry is static, so the stack never points to freed memory through it.
    // Its `previous` is the current top, which stays alive while the raise that follows at once
    // (the one caller, `raise_recorded`, raises next, with no Rust catch in between) unwinds to its
    // handler, and that handler (PG_CATCH, PostgresMain) sets error_context_stack back to what it
    // saved before, which unlinks the entry.
    unsafe {
        (&raw mut RAW_CODE).write(sqlstate);
        let entry = &raw mut RAW_CODE_CONTEXT;
        // linked already: linking it again would make it its own previous
        if pg_sys::error_context_stack != entry {
            (*entry).previous = pg_sys::error_context_stack;
            pg_sys::error_context_stack = entry;
        }
    }
}

/// IDs need writes by the worker: refuse on a standby and, as nextval() does,
/// in a read-only transaction.
pub fn require_writable(function: &str) {
    // A server that has left recovery never enters it again without a
    // restart (which ends this backend): once seen out of it, the call
    // (a guarded FFI call, a sigsetjmp on every ID) is skipped.
    static mut LEFT_RECOVERY: bool = false;
    // SAFETY: LEFT_RECOVERY is this backend's static, read and written by value on the one thread
    // that runs SQL functions; RecoveryInProgress reads shared XLogCtl state any backend may read,
    // and XactReadOnly is this process's global, read in the caller's transaction.
    unsafe {
        if !LEFT_RECOVERY && pg_sys::RecoveryInProgress() {
            raise(
                PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
                format!("cannot execute {function} during recovery"),
                Some("leaf_id issues IDs only on the primary."),
            );
        }
        LEFT_RECOVERY = true;
        if pg_sys::XactReadOnly {
            raise(
                PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
                format!("cannot execute {function} in a read-only transaction"),
                None,
            );
        }
    }
}

pub fn code_of(code: PgSqlErrorCode) -> i32 {
    code as isize as i32
}
