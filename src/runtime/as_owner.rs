//! Reading a table that someone else owns, as its owner, in a
//! security-restricted operation (as PostgreSQL's own REFRESH MATERIALIZED
//! VIEW and ANALYZE do): the adopt functions run as a superuser, and
//! whatever the table's owner can make a query run (an index predicate or
//! expression folded by the planner, a rule, a function of a type) must run
//! with the owner's rights, unable to SET ROLE back. Owns only that switch;
//! must not touch shared memory or leaf_id's tables.
//! `leaf_id_column_max` must not be callable by anyone but superusers (the
//! adopt functions call it); `leaf_opaque_grant` uses the switch to read a
//! key as the extension's owner.

use crate::runtime::text_arg::TextArg;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::Spi;

/// The largest value of integer column `col` of plain or partitioned table
/// `tab`, read as the table's owner in a security-restricted operation.
#[pg_extern(volatile, parallel_unsafe)]
fn leaf_id_column_max(tab: pg_sys::Oid, col: TextArg) -> Option<i64> {
    let col = col.text();
    // reads as another role: never for anyone granted EXECUTE by mistake
    // SAFETY: superuser() looks the current user's role up (cached, else the syscache), which needs
    // a transaction: this SQL function runs in its caller's.
    if !unsafe { pg_sys::superuser() } {
        crate::errors::raise(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            "leaf_id_column_max() is for superusers",
            None,
        );
    }
    let owner = Spi::get_two_with_args::<pg_sys::Oid, String>(
        "SELECT c.relowner, c.relkind::pg_catalog.text FROM pg_catalog.pg_class c \
         WHERE c.oid OPERATOR(pg_catalog.=) $1",
        &[tab.into()],
    );
    let Ok((Some(owner), Some(kind))) = owner else {
        crate::errors::raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            format!("relation with OID {} does not exist", tab.to_u32()),
            None,
        );
    };
    if kind != "r" && kind != "p" {
        crate::errors::raise(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            format!(
                "relation with OID {} is not a table (relkind {kind})",
                tab.to_u32()
            ),
            None,
        );
    }
    // the statement is put together by the server: %I and regclass output
    // quote the names
    let query: String = Spi::get_one_with_args(
        "SELECT pg_catalog.format('SELECT pg_catalog.max(%I)::pg_catalog.int8 FROM %s', \
         $2::pg_catalog.text, $1::pg_catalog.oid::pg_catalog.regclass)",
        &[tab.into(), col.into()],
    )
    .ok()
    .flatten()
    .unwrap_or_default();
    let saved = become_restricted(owner);
    let level;
    // SAFETY: in the function's transaction, as GUC nesting needs; the name and value are 'static
    // NUL-terminated strings, copied by the GUC code. GUC_ACTION_SAVE stacks the old value at
    // `level`, popped by `AtEOXact_GUC(false, level)` below, or by the (sub)transaction's abort if
    // the read raises in between.
    unsafe {
        // settings the owner's code changes end with the read
        level = pg_sys::NewGUCNestLevel();
        // a row-level security policy (the owner's FORCE ROW LEVEL SECURITY)
        // raises instead of running the owner's code or hiding rows
        pg_sys::set_config_option(
            c"row_security".as_ptr(),
            c"off".as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
    }
    // an error ends the transaction, whose abort restores the user
    let max = Spi::get_one::<i64>(&query).unwrap_or_else(|e| {
        crate::errors::raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, e.to_string(), None)
    });
    // SAFETY: `level` came from NewGUCNestLevel in this transaction, and the query since has popped
    // any level it pushed, so this pops ours: row_security and whatever the owner's code set.
    unsafe { pg_sys::AtEOXact_GUC(false, level) };
    restore_user(saved);
    max
}

/// The user and security context before `become_restricted`.
pub(crate) struct SavedUser(pg_sys::Oid, i32);

/// Run as `role` in a security-restricted operation until `restore_user`
/// (an error in between ends the transaction, whose abort restores the
/// user).
pub(crate) fn become_restricted(role: pg_sys::Oid) -> SavedUser {
    let (mut user, mut context) = (pg_sys::InvalidOid, 0);
    // SAFETY: both take and give plain values (the outputs are locals of this frame), in a SQL
    // function's transaction (both callers, leaf_id_column_max and leaf_opaque_grant, are SQL
    // functions); `restore_user` gives the saved user and context back, or the (sub)transaction's
    // abort resets them to what it saved.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            role,
            context
                | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
                | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
        );
    }
    SavedUser(user, context)
}

pub(crate) fn restore_user(saved: SavedUser) {
    // SAFETY: plain values; `saved` can only come from `become_restricted` (its fields are
    // private), in the same SQL function's transaction, so this puts back the caller's user and
    // context.
    unsafe { pg_sys::SetUserIdAndSecContext(saved.0, saved.1) };
}
