//! Functions that the worker's guarded UPDATEs call to refuse a row that is
//! not as the worker read it.
//! Must not read or write anything: they only raise.
//!
//! On a Citus reference table an UPDATE runs on every copy of the table, but
//! its row count and RETURNING come from one copy only. A WHERE clause that
//! matches on one copy and not on another would pass unnoticed. So the
//! worker's UPDATEs match the row by its key only and check the expected
//! values in a CASE whose other branch calls one of these functions: every
//! copy checks its own row, and any copy that differs fails the statement
//! (and the distributed transaction). They are IMMUTABLE only so that Citus
//! sends them to each copy instead of evaluating them once; their
//! arguments are columns, so nothing folds them into a constant.

use crate::errors::raise;
use crate::runtime::text_arg::TextArg;
use pgrx::prelude::*;

#[pg_extern(immutable, parallel_safe)]
fn leaf_id_worker_row_conflict(
    worker_id: Option<i32>,
    node_name: Option<TextArg>,
    owner_token: Option<i64>,
) -> Option<i64> {
    let node_name = node_name.map(|n| n.shown());
    raise(
        PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
        format!(
            "the leaf_worker row of worker id {} is not held by this server: it has node \"{}\" and owner token {}",
            worker_id.map_or("NULL".into(), |w| w.to_string()),
            node_name.as_deref().unwrap_or("NULL"),
            owner_token.map_or("NULL".into(), |t| t.to_string()),
        ),
        Some(
            "Another server took the id over or it was released; on Citus, the copies of leaf_worker may disagree.",
        ),
    )
}

#[pg_extern(immutable, parallel_safe)]
fn leaf_id_alloc_row_conflict(biz_tag: Option<TextArg>, max_id: Option<i64>) -> Option<i64> {
    let biz_tag = biz_tag.map(|t| t.shown());
    raise(
        PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        format!(
            "leaf_alloc.max_id of tag \"{}\" is {} in one copy of the table and different in another",
            biz_tag.as_deref().unwrap_or("NULL"),
            max_id.map_or("NULL".into(), |m| m.to_string()),
        ),
        Some("The copies of the Citus reference table leaf_alloc disagree; no range is reserved."),
    )
}
