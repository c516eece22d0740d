//! Renewing a snowflake lease: write the mark (the last millisecond the
//! generator may issue) to the worker id's row, every copy checked (on
//! Citus copy by copy, a majority enough). Used by the claim, the heartbeat
//! and the close.

use crate::runtime::catalog::Catalog;
use crate::runtime::clock::clock_ms;
use crate::runtime::job_error::{JobError, spi_err};
use crate::runtime::shmem::shared;
use crate::runtime::worker_sql::{self as sql, Schema};
use crate::settings;
use pgrx::prelude::*;
use pgrx::spi::Spi;
use std::sync::atomic::Ordering::SeqCst;

/// `leaf_id.lease_ahead` must exceed `leaf_id.heartbeat_interval`, or the
/// lease runs out between renewals and IDs stop.
pub(crate) fn lease_ahead() -> Result<i64, JobError> {
    let (ahead, beat) = (
        settings::LEASE_AHEAD.get(),
        settings::HEARTBEAT_INTERVAL.get(),
    );
    if ahead <= beat {
        return Err(JobError::new(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "leaf_id.lease_ahead ({ahead} ms) must be greater than leaf_id.heartbeat_interval ({beat} ms)"
            ),
        ));
    }
    Ok(ahead as i64)
}

/// How a mark is written on Citus (elsewhere there is one copy).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Route {
    /// Each copy of leaf_worker on its own; a majority is enough.
    CopyByCopy,
    /// One statement through Citus, which writes every copy (a claim that
    /// wrote through Citus: its own uncommitted write locks every copy).
    ThroughCitus,
}

/// Write the mark; the generator may use it only after the commit. Returns
/// the row's mark after the update (never below `mark`), and whether the
/// holder should move the row's pin (`repin`). Every copy of the
/// row must still be this server's (node name and owner token), or the
/// statement fails (`citus::guard`). On Citus, `Route::CopyByCopy` writes
/// the copies one by one and a majority is enough (`snowflake::quorum`), so
/// that one node down does not stop the others.
pub(crate) fn persist(
    db: usize,
    schema: &Schema,
    catalog: Catalog,
    worker_id: i64,
    node: &str,
    mark: i64,
    route: Route,
) -> Result<(i64, bool), JobError> {
    if !catalog.has_snowflake() {
        return Err(crate::runtime::transaction::needs_current_catalog(
            catalog,
            "snowflake mode",
        ));
    }
    let token = shared().expect("shared memory").owner_token();
    if route == Route::CopyByCopy {
        let renewed = Spi::connect_mut(|client| {
            let Some(copies) = crate::citus::copies::of_worker_registry(client, schema)? else {
                return Ok(None);
            };
            let lease = crate::citus::copies::LeaseRenewal {
                worker_id,
                node,
                token,
                mark,
                epoch: crate::snowflake::functions::epoch(),
            };
            crate::citus::copies::renew_on_majority(
                client,
                db,
                schema,
                &copies,
                &lease,
                crate::runtime::transaction::citus_connect_timeout_ms(),
            )
            .map(Some)
        })?;
        if let Some(repin) = renewed {
            return Ok((mark, repin));
        }
    }
    let updated = update_mark(schema, worker_id, node, mark, token)?;
    renewed_mark(updated, worker_id, node, mark)
}

/// What one statement that writes `mark` to the row (`sql::worker_renew`)
/// finds: Some with the row's mark after it (`Some(None)` when the row is
/// there and a trigger skipped the update), None when the row is gone.
fn update_mark(
    schema: &Schema,
    worker_id: i64,
    node: &str,
    mark: i64,
    token: i64,
) -> Result<Option<Option<i64>>, JobError> {
    Spi::connect_mut(|client| {
        client
            .update(
                &sql::worker_renew(schema),
                None,
                &[
                    mark.into(),
                    (worker_id as i32).into(),
                    node.into(),
                    crate::snowflake::functions::epoch().into(),
                    token.into(),
                ],
            )
            .map_err(spi_err)
            .and_then(|t| {
                if t.len() == 1 {
                    return Ok(Some(t.first().get::<i64>(1).ok().flatten()));
                }
                // no row updated: gone (None), or there and the update
                // skipped by a trigger (Some(None), refused below)
                let there = !client
                    .select(
                        &sql::worker_mark(schema),
                        None,
                        &[(worker_id as i32).into()],
                    )
                    .map_err(spi_err)?
                    .is_empty();
                Ok(there.then_some(None))
            })
    })
}

/// `persist`'s answer from what `update_mark` found: the row's mark when
/// it is at least `mark`, else why the lease is not renewed.
fn renewed_mark(
    updated: Option<Option<i64>>,
    worker_id: i64,
    node: &str,
    mark: i64,
) -> Result<(i64, bool), JobError> {
    match updated {
        Some(Some(m)) if m >= mark => Ok((m, false)),
        // the row is gone (deleted, or the table truncated): the id is no
        // longer held here, so claim again (55006, as for a row another
        // server took); the lease issued so far stays this node's, and on
        // Citus another node's new row starts above it (`taken_row_floor`)
        None => Err(crate::citus::copies::worker_row_gone(worker_id, node)),
        _ => Err(JobError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "could not persist the snowflake high-water mark: the leaf_worker row of worker id {worker_id} for node \"{node}\" is gone or a trigger changed the update"
            ),
        )),
    }
}

/// Renew the mark with the claimed worker id and node name (settings changed
/// since take effect at the next claim): the commit happens in the caller
/// (`in_transaction`), the mark is used only after it.
pub(crate) fn renew(schema: &Schema, catalog: Catalog, db: usize) -> Result<(i64, bool), JobError> {
    let slot = shared().expect("shared memory").db(db);
    let worker_id = slot.generator.worker_id();
    // never below the current lease: the row must cover what may be issued
    let mark = (clock_ms() + lease_ahead()?).max(slot.generator.lease_ms.load(SeqCst));
    persist(
        db,
        schema,
        catalog,
        worker_id,
        &slot.node_name(),
        mark,
        Route::CopyByCopy,
    )
}

/// Move the pin of this node's row to the copies its Citus metadata lists
/// as active now (`citus::copies::repin`), after a renewal that held found
/// them different: the worker id and the groups pinned now, when moved.
pub(crate) fn repin(
    schema: &Schema,
    catalog: Catalog,
    db: usize,
) -> Result<Option<(i64, Vec<i64>)>, JobError> {
    if !catalog.has_snowflake() {
        return Ok(None);
    }
    let slot = shared().expect("shared memory").db(db);
    let worker_id = slot.generator.worker_id();
    let token = shared().expect("shared memory").owner_token();
    Spi::connect_mut(|client| {
        let Some(copies) = crate::citus::copies::of_worker_registry(client, schema)? else {
            return Ok(None);
        };
        let Some(old) = crate::citus::copies::pin_of(client, schema, worker_id)? else {
            return Ok(None);
        };
        crate::citus::copies::repin(
            client,
            schema,
            &copies,
            &old,
            worker_id,
            &slot.node_name(),
            token,
        )
        .map(|moved| moved.map(|groups| (worker_id, groups)))
    })
}
