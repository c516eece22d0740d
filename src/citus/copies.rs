//! The copies of `leaf_worker` on Citus, written one by one.
//! Must not keep state between jobs or know a mode's scheduling.
//!
//! A snowflake renewal on Citus writes each node's copy of the reference
//! table separately (`snowflake::quorum` says why a majority is enough): its
//! own copy in the worker's transaction, every other copy in a transaction
//! of its own on that node, through Citus' `master_run_on_worker` (one new
//! connection per node, in parallel, bounded by `citus.node_connection_timeout`).
//! A copy that is not this node's row and token raises (the guard of
//! `citus::guard`), so it does not count.

use crate::runtime::job::{JobError, spi_err};
use crate::runtime::worker_sql::{self as sql, Schema, Shard, Table};
use crate::snowflake::quorum;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// Where the copies of a reference table (`leaf_worker`, `leaf_alloc`) are.
pub struct Copies {
    /// This node's copy (the reference table's shard).
    shard: Shard,
    /// The other nodes holding a copy: (host, port).
    others: Vec<(String, i32)>,
    /// The nodes holding a copy that Citus lists as inactive
    /// (`citus_disable_node`): writes through Citus skip them.
    disabled: Vec<(String, i32)>,
}

impl Copies {
    pub fn count(&self) -> usize {
        1 + self.others.len()
    }
    /// This node's copy: the shard table, read without Citus.
    pub fn shard(&self) -> &Shard {
        &self.shard
    }
}

/// The copies of `leaf_worker` when it is a Citus reference table with a
/// copy on this node; None otherwise (a plain table: one copy; any other
/// Citus table is written through Citus).
pub fn of_worker_registry(
    client: &mut SpiClient,
    schema: &Schema,
) -> Result<Option<Copies>, JobError> {
    of_reference_table(client, schema, Table::Worker)
}

/// The copies of leaf_id's `table` when it is a Citus reference table with a
/// copy on this node; None otherwise.
pub fn of_reference_table(
    client: &mut SpiClient,
    schema: &Schema,
    table: Table,
) -> Result<Option<Copies>, JobError> {
    Ok(placements(client, schema, table)?.and_then(|(copies, own)| own.then_some(copies)))
}

/// On a node that has no copy of its own of `leaf_worker` (added with
/// `citus_add_node`, before `replicate_reference_tables`): every copy, as
/// `others` (so `count()` means nothing here). Such a node reads and writes
/// the registry through Citus, which reads one copy; a claim reads every
/// copy's mark with this. None if the node has a copy or there is none.
pub fn of_worker_registry_elsewhere(
    client: &mut SpiClient,
    schema: &Schema,
) -> Result<Option<Copies>, JobError> {
    Ok(placements(client, schema, Table::Worker)?
        .and_then(|(copies, own)| (!own).then_some(copies)))
}

/// The placements of `table`: this node's (if `own`) as the shard, the
/// others as `others`; None when it is no Citus table with placements.
fn placements(
    client: &mut SpiClient,
    schema: &Schema,
    table: Table,
) -> Result<Option<(Copies, bool)>, JobError> {
    if !select_bool(client, sql::CITUS_METADATA_PRESENT, &[])? {
        return Ok(None);
    }
    let Some(oid) = sql::table_oid(client, schema, table)? else {
        return Ok(None);
    };
    let rows = client
        .select(sql::REFERENCE_TABLE_PLACEMENTS, None, &[oid.into()])
        .map_err(spi_err)?;
    let mut shard = None;
    let mut own = false;
    let mut others = Vec::new();
    let mut disabled = Vec::new();
    for row in rows {
        let id: i64 = row.get(1).map_err(spi_err)?.unwrap_or(0);
        let host: String = row.get(2).map_err(spi_err)?.unwrap_or_default();
        let port: i32 = row.get(3).map_err(spi_err)?.unwrap_or(0);
        if !row.get::<bool>(5).map_err(spi_err)?.unwrap_or(true) {
            disabled.push((host.clone(), port));
        }
        if row.get::<bool>(4).map_err(spi_err)?.unwrap_or(false) {
            own = true;
        } else {
            others.push((host, port));
        }
        shard.get_or_insert(id);
    }
    // no placement at all: not a Citus table
    Ok(shard.map(|id| {
        (
            Copies {
                shard: schema.shard(table, id),
                others,
                disabled,
            },
            own,
        )
    }))
}

/// A claim's write of `leaf_worker` through Citus (an insert, a take-over of a
/// released row, a take-back, a move) stands only if it reached every copy:
/// `snowflake::quorum` counts a holder's renewals over every copy, the
/// disabled ones too, so a write that skipped a disabled node's copy may
/// overlap a live holder's majority in no copy at all (a coordinator that
/// disabled two live nodes of three would otherwise take their ids while they
/// renew with each other). Refused with 55000 while a copy's node is disabled;
/// `citus_activate_node` or `citus_remove_node` ends it.
pub fn require_every_copy_active(
    client: &mut SpiClient,
    schema: &Schema,
    worker_id: i64,
) -> Result<(), JobError> {
    let Some((copies, _)) = placements(client, schema, Table::Worker)? else {
        return Ok(());
    };
    if copies.disabled.is_empty() {
        return Ok(());
    }
    let nodes: Vec<String> = copies
        .disabled
        .iter()
        .map(|(h, p)| format!("{h}:{p}"))
        .collect();
    Err(JobError::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "could not claim snowflake worker id {worker_id}: the copy of leaf_worker on disabled Citus node {} would miss the claim; \
             activate the node (citus_activate_node), or remove it (citus_remove_node) if it is gone for good",
            nodes.join(", ")
        ),
    ))
}

thread_local! {
    /// The copies the last renewal that held did not reach ("host:port").
    static MISSED: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Tell the operator when renewals start or stop missing copies (a node
/// down or back), once per change rather than once per heartbeat.
fn note_degraded(worker_id: i64, took: usize, copies: usize, failures: &[String]) {
    let missed: Vec<String> = failures
        .iter()
        .map(|f| f.split(": ").next().unwrap_or("").to_string())
        .collect();
    MISSED.with(|m| {
        if *m.borrow() == missed {
            return;
        }
        if missed.is_empty() {
            pgrx::log!(
                "leaf_id: the snowflake lease of worker id {worker_id} is renewed on all {copies} copies of leaf_worker again"
            );
        } else {
            pgrx::log!(
                "leaf_id: the snowflake lease of worker id {worker_id} is renewed on {took} of {copies} copies of leaf_worker (a majority); not on: {}",
                failures.join("; ")
            );
        }
        *m.borrow_mut() = missed;
    });
}

/// A query's one boolean (NULL: false).
fn select_bool(
    client: &mut SpiClient,
    query: &str,
    args: &[pgrx::datum::DatumWithOid],
) -> Result<bool, JobError> {
    Ok(client
        .select(query, None, args)
        .map_err(spi_err)?
        .first()
        .get::<bool>(1)
        .map_err(spi_err)?
        .unwrap_or(false))
}

/// Whether `table` (of leaf_id's schema) is a Citus table.
pub fn is_citus_table(
    client: &mut SpiClient,
    schema: &Schema,
    table: Table,
) -> Result<bool, JobError> {
    if !crate::runtime::transaction::citus_loaded() {
        return Ok(false); // no query on every refill of a server without Citus
    }
    if !select_bool(client, sql::CITUS_PARTITIONS_PRESENT, &[])? {
        return Ok(false);
    }
    let Some(oid) = sql::table_oid(client, schema, table)? else {
        return Ok(false);
    };
    select_bool(client, sql::IS_CITUS_TABLE, &[oid.into()])
}

/// Run `command` on every other node's copy, each in a transaction of its own
/// on a new connection, in parallel (the connect timeout is the worker
/// session's, `transaction::bound_citus_waits`): per node, its result, or
/// "host:port: error".
fn on_other_copies(
    client: &mut SpiClient,
    copies: &Copies,
    command: &str,
) -> Result<Vec<Result<String, String>>, JobError> {
    if copies.others.is_empty() {
        return Ok(Vec::new());
    }
    let hosts: Vec<String> = copies.others.iter().map(|(h, _)| h.clone()).collect();
    let ports: Vec<i32> = copies.others.iter().map(|(_, p)| *p).collect();
    let commands = vec![command.to_string(); hosts.len()];
    let results = client
        .update(
            sql::RUN_ON_WORKERS_PARALLEL,
            None,
            &[hosts.into(), ports.into(), commands.into()],
        )
        .map_err(spi_err)?;
    let mut answers = Vec::new();
    for r in results {
        let result = r.get::<String>(4).map_err(spi_err)?.unwrap_or_default();
        answers.push(if r.get::<bool>(3).map_err(spi_err)?.unwrap_or(false) {
            Ok(result)
        } else {
            Err(format!(
                "{}:{}: {}",
                r.get::<String>(1).map_err(spi_err)?.unwrap_or_default(),
                r.get::<i32>(2).map_err(spi_err)?.unwrap_or(0),
                result.trim()
            ))
        });
    }
    Ok(answers)
}

/// Renew the mark of `worker_id` to at least `mark` on this node's copy (in
/// the caller's transaction, committed by it) and on every other copy (each
/// committed on its own): Ok when a majority holds it.
#[allow(clippy::too_many_arguments)]
pub fn renew_on_majority(
    client: &mut SpiClient,
    db: usize,
    schema: &Schema,
    copies: &Copies,
    worker_id: i64,
    node: &str,
    token: i64,
    mark: i64,
    epoch: i64,
    remote_lock_timeout_ms: i64,
) -> Result<(), JobError> {
    // this node's copy first: if it is not ours (55006), nothing else is
    client
        .update(sql::ALLOW_SHARD_WRITES, None, &[])
        .map_err(spi_err)?;
    let own = client
        .update(
            &sql::shard_worker_renew(schema, &copies.shard),
            None,
            &[
                mark.into(),
                (worker_id as i32).into(),
                node.into(),
                epoch.into(),
                token.into(),
            ],
        )
        .map_err(spi_err)?
        .len()
        == 1;
    if !own {
        return Err(JobError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "could not renew the snowflake lease: this node's copy of leaf_worker has no row for worker id {worker_id}"
            ),
        ));
    }
    let mut acks = 0;
    let mut failures = Vec::new();
    let (schema_name, shard_name) = sql::remote_names(schema, &copies.shard);
    let command = sql::build_on_server(
        client,
        sql::BUILD_REMOTE_RENEWAL,
        &[
            remote_lock_timeout_ms.to_string().into(),
            schema_name.into(),
            shard_name.into(),
            node.into(),
            token.into(),
            mark.into(),
            epoch.into(),
            (worker_id as i32).into(),
            format!("no leaf_worker row of worker id {worker_id} on this node").into(),
        ],
    )?;
    // each other copy through a helper process of its own, so that a node
    // that hangs with the statement in flight holds only that helper
    for answer in crate::citus::renewal_helper::run_on_others(
        db,
        &copies.others,
        &command,
        std::time::Duration::from_millis(crate::runtime::transaction::renewal_wait_ms() as u64),
    ) {
        match answer {
            Ok(_) => acks += 1,
            Err(failure) => failures.push(failure),
        }
    }
    if quorum::renewal_holds(own, acks, copies.count()) {
        note_degraded(worker_id, 1 + acks, copies.count(), &failures);
        return Ok(());
    }
    // a copy that another token holds means the row was taken over: the
    // caller claims again; otherwise nodes are unreachable
    let taken = failures
        .iter()
        .any(|f| f.contains("is not held by this server"));
    Err(JobError::new(
        if taken {
            PgSqlErrorCode::ERRCODE_OBJECT_IN_USE
        } else {
            PgSqlErrorCode::ERRCODE_CONNECTION_FAILURE
        },
        format!(
            "the snowflake lease of worker id {worker_id} was renewed on {} of {} copies of leaf_worker, fewer than a majority ({}); not on: {}",
            1 + acks,
            copies.count(),
            quorum::majority(copies.count()),
            failures.join("; ")
        ),
    ))
}

/// The mark of `worker_id` on this node's copy of leaf_worker (moved into
/// `epoch`), read from the shard itself, without Citus.
pub fn mark_on_own_copy(
    client: &mut SpiClient,
    copies: &Copies,
    worker_id: i64,
    epoch: i64,
) -> Result<i64, JobError> {
    let Some(row) = client
        .select(
            &sql::shard_worker_mark(&copies.shard),
            None,
            &[(worker_id as i32).into()],
        )
        .map_err(spi_err)?
        .into_iter()
        .next()
    else {
        return Ok(0);
    };
    let mark = row.get::<i64>(1).map_err(spi_err)?.unwrap_or(0);
    let mark_epoch = row.get::<i64>(2).map_err(spi_err)?;
    crate::snowflake::claim::floor_for_epoch(mark, mark_epoch, epoch).map_err(|e| {
        JobError::new(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            e.describe(worker_id),
        )
    })
}

/// The highest mark of `worker_id` on the other nodes' copies (each moved
/// into `epoch`), read on each node: a claim that takes over a released row
/// must issue above every lease its last holder was granted, and a majority
/// may have granted one that this node's copy (which the caller read)
/// missed. Every copy must answer.
pub fn highest_mark_on_other_copies(
    client: &mut SpiClient,
    schema: &Schema,
    copies: &Copies,
    worker_id: i64,
    epoch: i64,
) -> Result<i64, JobError> {
    let (schema_name, shard_name) = sql::remote_names(schema, &copies.shard);
    let read = sql::build_on_server(
        client,
        sql::BUILD_REMOTE_MARK_READ,
        &[
            schema_name.into(),
            shard_name.into(),
            (worker_id as i32).into(),
        ],
    )?;
    let mut answers = Vec::new();
    for answer in on_other_copies(client, copies, &read)? {
        answers.push(answer.map_err(|failure| {
            JobError::new(
                PgSqlErrorCode::ERRCODE_CONNECTION_FAILURE,
                format!(
                    "could not read the mark of snowflake worker id {worker_id} on every copy of leaf_worker: {failure}"
                ),
            )
        })?);
    }
    let mut highest = 0;
    for a in &answers {
        let mut parts = a.split(',').map(|p| p.trim().parse::<i64>().ok());
        let mark = parts.next().flatten().unwrap_or(0);
        let mark_epoch = parts.next().flatten();
        let floor =
            crate::snowflake::claim::floor_for_epoch(mark, mark_epoch, epoch).map_err(|e| {
                JobError::new(
                    PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                    e.describe(worker_id),
                )
            })?;
        highest = highest.max(floor);
    }
    Ok(highest)
}
