//! A worker job's error: its SQLSTATE and message, handed to the callers
//! that wait for the job (recorded in shared memory by the worker loop).
//! Owns only the error type and its conversions; it runs nothing.

use crate::errors::code_of;
use pgrx::prelude::*;

/// The worker's own `lock_timeout` (`transaction::FORCED_SETTINGS`), which
/// the callers' message names when it ends a job's statement.
pub const WORKER_LOCK_TIMEOUT: &str = "5s";
pub const WORKER_LOCK_TIMEOUT_C: &std::ffi::CStr = c"5s";

/// What a caller whose wait ran out is told when the job it waited for
/// was retried after lock contention (`JobError::is_contention`).
pub const CONTENTION_NOTE: &str = "the worker's last try waited longer than its lock_timeout (5s) for a lock \
     that another transaction holds on leaf_id's tables (or was canceled for one), and it retries; see pg_locks and pg_prepared_xacts";

/// An error from a job, handed to the callers waiting for it.
#[derive(Debug)]
pub struct JobError {
    pub sqlstate: i32,
    pub message: String,
}

/// How Citus reports a remote transaction that failed on a connection its
/// coordinated transaction needs (remote_transaction.c), with no SQLSTATE
/// of its own (`XX000`): the node went away, or its session failed before
/// the statement ran.
const CITUS_ESSENTIAL_CONNECTION_FAILED: &str = "failure on connection marked as essential";

impl JobError {
    /// A job's error as PostgreSQL (or Citus) reported it. Citus' failure
    /// of an essential connection is a connection failure (`08006`), which
    /// the callers are then told as one (`explain_unreachable`), never as an
    /// internal error.
    pub(crate) fn reported(sqlstate: i32, message: String) -> JobError {
        let sqlstate = if sqlstate == code_of(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR)
            && message.starts_with(CITUS_ESSENTIAL_CONNECTION_FAILED)
        {
            code_of(PgSqlErrorCode::ERRCODE_CONNECTION_FAILURE)
        } else {
            sqlstate
        };
        JobError { sqlstate, message }
    }

    pub(crate) fn new(code: PgSqlErrorCode, message: impl Into<String>) -> JobError {
        JobError {
            sqlstate: code_of(code),
            message: message.into(),
        }
    }

    /// Was the worker's own statement canceled (57014: `pg_cancel_backend`
    /// on the worker, or Citus canceling a backend that holds a lock it
    /// needs, as `citus_activate_node` does)? Not the callers' cancel: a
    /// caller told 57014 takes it for its own (PL/pgSQL's `WHEN OTHERS`
    /// cannot even catch it), so the worker retries without telling them.
    pub(crate) fn is_worker_canceled(&self) -> bool {
        self.sqlstate == code_of(PgSqlErrorCode::ERRCODE_QUERY_CANCELED)
    }

    /// The SQLSTATE and message the callers waiting for the job get. Never
    /// called for contention, which is retried (`is_contention`): a
    /// caller told 57014 would take it for its own cancel, and a lock
    /// timeout is about a statement it did not run.
    pub(crate) fn for_callers(&self) -> (i32, String) {
        debug_assert!(!self.is_contention());
        (self.sqlstate, self.message.clone())
    }

    /// Lock contention on leaf_id's tables: the worker's own statement
    /// canceled (by Citus for a lock it needs, or pg_cancel_backend) or
    /// ended by the worker's own `lock_timeout` (another job holding the
    /// row, on Citus a node's refill or claim through the shard). The job is
    /// retried: the callers wait on for it, up to their own
    /// `leaf_id.refill_timeout`, and are told what it waited for only when
    /// that runs out.
    pub(crate) fn is_contention(&self) -> bool {
        self.is_worker_canceled() || self.is_worker_lock_timeout()
    }

    /// Did the worker's own `lock_timeout` end its statement?
    fn is_worker_lock_timeout(&self) -> bool {
        self.sqlstate == code_of(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE)
            && self
                .message
                .starts_with("canceling statement due to lock timeout")
    }

    /// Class 08: a connection (on Citus, to another node) failed.
    pub(crate) fn is_connection_exception(&self) -> bool {
        self.sqlstate & ((1 << 12) - 1) == code_of(PgSqlErrorCode::ERRCODE_CONNECTION_EXCEPTION)
    }
}

pub(crate) fn spi_err(e: pgrx::spi::SpiError) -> JobError {
    JobError::new(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, e.to_string())
}

/// A job's error from a statement that could not reach another server
/// (SQLSTATE class 08): on Citus, a node holding a copy of a reference table
/// is down, and every write to the table needs every active node holding a
/// copy. Says which job failed and what the operator can do, before the
/// first line of the original message (the recorded message is cut at 256
/// bytes); the SQLSTATE stays. Other errors pass unchanged.
pub(crate) fn explain_unreachable(e: JobError, job: &str, table: &str) -> JobError {
    if !e.is_connection_exception() {
        return e;
    }
    let cause = e.message.lines().next().unwrap_or("").trim_end();
    JobError {
        sqlstate: e.sqlstate,
        message: format!(
            "leaf_id could not {job}: a node with a copy of {table} is unreachable; \
             start it, or run citus_disable_node for it: {cause}"
        ),
    }
}

pub const EXTENSION_GONE: &str = "extension leaf_id is not installed in this database";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citus_essential_connection_failure_is_a_connection_failure() {
        let internal = code_of(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR);
        let e = JobError::reported(
            internal,
            "failure on connection marked as essential: 127.0.0.1:5433".into(),
        );
        assert!(e.is_connection_exception());
        assert_eq!(
            e.sqlstate,
            code_of(PgSqlErrorCode::ERRCODE_CONNECTION_FAILURE)
        );
        let e = explain_unreachable(e, "refill tag \"t\"", "leaf_alloc");
        assert!(
            e.message
                .starts_with("leaf_id could not refill tag \"t\": a node")
        );
        assert!(e.message.ends_with("marked as essential: 127.0.0.1:5433"));
        // another internal error, or the text under another code, stays
        let other = JobError::reported(internal, "cache lookup failed".into());
        assert_eq!(other.sqlstate, internal);
        let raised = code_of(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE);
        let user = JobError::reported(raised, CITUS_ESSENTIAL_CONNECTION_FAILED.into());
        assert_eq!(user.sqlstate, raised);
    }
}
