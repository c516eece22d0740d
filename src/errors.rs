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
    raise(PgSqlErrorCode::from(sqlstate), message, None)
}

/// IDs need writes by the worker: refuse on a standby and, as nextval() does,
/// in a read-only transaction.
pub fn require_writable(function: &str) {
    unsafe {
        if pg_sys::RecoveryInProgress() {
            raise(
                PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
                format!("cannot execute {function} during recovery"),
                Some("leaf_id issues IDs only on the primary."),
            );
        }
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
