//! Closing a snowflake generator on the worker's exit or before a re-claim:
//! nothing more is issued, and the row's mark is lowered to the exact last
//! issued millisecond (never below what someone else persisted).

use crate::runtime::catalog::Catalog;
use crate::runtime::job_error::{JobError, spi_err};
use crate::runtime::shmem::{DbSlot, shared};
use crate::runtime::transaction::in_transaction;
use crate::runtime::worker_sql::{self as sql, Schema, Table};
use pgrx::spi::Spi;
use std::sync::atomic::Ordering::SeqCst;

/// What a close does with the row's owner token.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OwnerToken {
    /// Kept: the next worker of this server lifetime takes the row back.
    Keep,
    /// Let go: a shutdown, or before a re-claim.
    Release,
}

/// `close_and_persist` left the row as it was (on Citus, at an exit).
const SKIPPED_ON_CITUS: i64 = i64::MIN;

/// Close the generator and persist the exact last issued millisecond instead
/// of the lease, so that after a clean restart IDs are not refused while the
/// clock catches up with a mark set ahead of it. The row keeps a mark that
/// someone else raised above our lease. If this fails, the lease stays
/// persisted: safe. Runs on the worker's exit and before every re-claim.
/// `OwnerToken::Release`: the row's owner token goes too (a shutdown, a
/// re-claim); an idle exit keeps it, so that the next worker of this
/// lifetime needs no write of every Citus copy to take the row back.
pub fn close_and_persist(db: usize, owner_token: OwnerToken) {
    let slot = shared().expect("shared memory").db(db);
    let epoch = crate::snowflake::functions::epoch();
    // after this no ID can be issued with a later millisecond
    let last = slot.generator.close(epoch).unwrap_or(0);
    if slot.worker_id.load(SeqCst) < 0 || slot.generator.lease_ms.load(SeqCst) == 0 {
        return; // never claimed in this lifetime
    }
    let lease = slot.generator.lease_ms.load(SeqCst);
    let mark = last.max(slot.generator.floor_ms.load(SeqCst));
    let worker_id = slot.generator.worker_id();
    // closed: another database of this server that takes the id next starts
    // above what was issued, not above the whole lease
    shared().expect("shared memory").note_worker_id_closed(
        worker_id,
        slot.dboid.load(SeqCst),
        mark,
    );
    let row = CloseRow {
        mark,
        worker_id,
        node: slot.node_name(),
        epoch,
        lease,
        token: shared().expect("shared memory").owner_token(),
        owner_token,
    };
    let result = in_transaction(|schema, catalog| write_close(schema, catalog, &row));
    report_close(slot, &row, result);
}

/// What a close writes to the worker id's row (`sql::worker_close`).
struct CloseRow {
    /// The exact last issued millisecond (Unix ms), or the floor above it.
    mark: i64,
    worker_id: i64,
    node: String,
    epoch: i64,
    /// The lease the generator held (Unix ms).
    lease: i64,
    /// This server lifetime's owner token.
    token: i64,
    owner_token: OwnerToken,
}

/// The close's update of the row, in the worker's transaction: the row's
/// mark after it (None when no row or more than one was updated), or
/// `SKIPPED_ON_CITUS`.
fn write_close(schema: &Schema, catalog: Catalog, row: &CloseRow) -> Result<Option<i64>, JobError> {
    if !catalog.has_snowflake() {
        return Err(crate::runtime::transaction::needs_current_catalog(
            catalog,
            "snowflake mode",
        ));
    }
    Spi::connect_mut(|client| {
        if crate::runtime::transaction::cancel_held_off()
            && crate::citus::copies::is_citus_table(client, schema, Table::Worker)?
        {
            // Citus ends a distributed statement silently, with only this
            // node's copy written, when a cancel or terminate is pending
            // while interrupts are held (as on this exit): the copies
            // would disagree on the token. The row keeps its lease
            // instead; a restart of this data directory keeps the token
            // (owner_file) and goes on above that lease.
            return Ok(Some(SKIPPED_ON_CITUS));
        }
        client
            .update(
                // on a shutdown the owner token goes too: a restart
                // takes the row back at once, and so may a copy
                &sql::worker_close(schema),
                None,
                &[
                    row.mark.into(),
                    (row.worker_id as i32).into(),
                    row.node.as_str().into(),
                    row.epoch.into(),
                    row.lease.into(),
                    row.token.into(),
                    (row.owner_token == OwnerToken::Release).into(),
                ],
            )
            .map_err(spi_err)
            .map(|t| {
                if t.len() != 1 {
                    None
                } else {
                    t.first().get::<i64>(1).ok().flatten()
                }
            })
    })
}

/// The close's outcome in the server log; a mark written lowers the
/// generator's lease to it (a reopen must renew first).
fn report_close(slot: &DbSlot, row: &CloseRow, result: Result<Option<i64>, JobError>) {
    match result {
        Ok(Some(SKIPPED_ON_CITUS)) => pgrx::log!(
            "leaf_id: snowflake worker id {} closed; its leaf_worker row keeps its lease (a shutdown cannot write every Citus copy)",
            row.worker_id
        ),
        Ok(Some(written)) if written >= row.mark => {
            // the lease follows the row down: a reopen must renew first
            slot.generator
                .lease_ms
                .store(written.min(row.lease), SeqCst);
            pgrx::log!(
                "leaf_id: snowflake worker id {} closed at {}",
                row.worker_id,
                written
            );
        }
        Ok(_) => pgrx::warning!(
            "leaf_id: could not persist the last snowflake millisecond: the leaf_worker row of worker id {} for node \"{}\" is gone or was changed; it keeps its earlier mark",
            row.worker_id,
            row.node
        ),
        Err(e) => pgrx::warning!(
            "leaf_id: could not persist the last snowflake millisecond: {}",
            e.message
        ),
    }
}
