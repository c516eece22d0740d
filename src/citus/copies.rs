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

use crate::runtime::job_error::{JobError, spi_err};
use crate::runtime::worker_sql::{self as sql, Schema, Shard, Table};
use crate::snowflake::quorum;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// Where the copies of a reference table (`leaf_worker`, `leaf_alloc`) are.
pub struct Copies {
    /// This node's copy (the reference table's shard).
    shard: Shard,
    /// The other nodes holding a copy: (host, port).
    others: Vec<(String, i32)>,
    /// The Citus group id of each of `others`: a copy's identity (a
    /// disabled node's copy may be dropped and made again with another
    /// placement id; a node removed and added again gets a new group).
    other_groups: Vec<i64>,
    /// The group id of this node, if it has a copy.
    own_group: Option<i64>,
    /// The nodes holding a copy that Citus lists as inactive
    /// (`citus_disable_node`): writes through Citus skip them.
    disabled: Vec<(String, i32)>,
    /// The group ids of the copies on active nodes: what a write
    /// through Citus reaches.
    active: Vec<i64>,
    /// The group ids of every copy listed, active or not.
    listed: Vec<i64>,
}

impl Copies {
    pub fn count(&self) -> usize {
        1 + self.others.len()
    }
    /// This node's copy: the shard table, read without Citus.
    pub fn shard(&self) -> &Shard {
        &self.shard
    }
    /// The group ids a write through Citus reaches (active nodes).
    pub fn active(&self) -> &[i64] {
        &self.active
    }
    pub fn all_active(&self) -> bool {
        self.disabled.is_empty()
    }
    pub fn own_group(&self) -> Option<i64> {
        self.own_group
    }
}

/// The copies of `leaf_worker` as this node's Citus metadata lists them,
/// and whether this node has one; None when it is no Citus table.
pub fn of_worker_registry_anywhere(
    client: &mut SpiClient,
    schema: &Schema,
) -> Result<Option<(Copies, bool)>, JobError> {
    placements(client, schema, Table::Worker)
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
    let mut own_group = None;
    let mut others = Vec::new();
    let mut other_groups = Vec::new();
    let mut disabled = Vec::new();
    let mut active = Vec::new();
    let mut listed = Vec::new();
    for row in rows {
        let id: i64 = row.get(1).map_err(spi_err)?.unwrap_or(0);
        let host: String = row.get(2).map_err(spi_err)?.unwrap_or_default();
        let port: i32 = row.get(3).map_err(spi_err)?.unwrap_or(0);
        let group: i64 = row.get(6).map_err(spi_err)?.unwrap_or(0);
        listed.push(group);
        if row.get::<bool>(5).map_err(spi_err)?.unwrap_or(true) {
            active.push(group);
        } else {
            disabled.push((host.clone(), port));
        }
        if row.get::<bool>(4).map_err(spi_err)?.unwrap_or(false) {
            own_group = Some(group);
        } else {
            others.push((host, port));
            other_groups.push(group);
        }
        shard.get_or_insert(id);
    }
    // this node's copy is found by name: it must be the extension's
    if let (Some(id), Some(_)) = (shard, own_group) {
        verify_own_shard(client, schema, table, id)?;
    }
    // no placement at all: not a Citus table
    Ok(shard.map(|id| {
        (
            Copies {
                shard: schema.shard(table, id),
                others,
                other_groups,
                own_group,
                disabled,
                active,
                listed,
            },
            own_group.is_some(),
        )
    }))
}

/// This node's copy of `table` (its shard `id`), which the jobs read and
/// write by name: with `citus.enable_manual_changes_to_shards` the owner of
/// the schema could drop it and make a look-alike with a trigger (which the
/// superuser's write would fire) or with forged marks. So it must be a plain
/// table of the extension's owner without triggers, rules or row security,
/// locked (a drop then waits for the job) and checked again under the lock.
fn verify_own_shard(
    client: &mut SpiClient,
    schema: &Schema,
    table: Table,
    id: i64,
) -> Result<(), JobError> {
    let name = schema.shard(table, id);
    let relname = sql::shard_relname(&name);
    let refused = || {
        JobError::new(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!(
                "this node's copy of {} ({relname}) is not a plain table of the extension's owner without \
                 triggers, rules or row security: leaf_id does not use it",
                table.name()
            ),
        )
    };
    let check = |client: &mut SpiClient| -> Result<Option<pg_sys::Oid>, JobError> {
        let row = client
            .select(
                sql::OWN_SHARD_CHECK,
                None,
                &[schema.tables_oid().into(), relname.into()],
            )
            .map_err(spi_err)?
            .next();
        let Some(row) = row else { return Ok(None) };
        let oid = row.get::<pg_sys::Oid>(1).map_err(spi_err)?;
        let good = row.get::<bool>(2).map_err(spi_err)?.unwrap_or(false);
        Ok(oid.filter(|_| good))
    };
    // (Citus hides shards from pg_class in a worker's session)
    client
        .update(sql::SHOW_SHARDS, None, &[])
        .map_err(spi_err)?;
    let Some(oid) = check(client)? else {
        return Err(refused());
    };
    // SAFETY: this runs in the job's transaction (`client` is its SPI
    // connection), where LockRelationOid may be called: it takes a lock on
    // the (database, OID) tag and reads no relation, so an OID dropped since
    // the check is harmless (the check below then finds no table). Its
    // ERRORs (deadlock, lock_timeout, cancel) come back through pgrx's
    // #[pg_guard] on pg_sys as a Rust panic, and the lock is released at the
    // transaction's end.
    unsafe { pg_sys::LockRelationOid(oid, pg_sys::AccessShareLock as pg_sys::LOCKMODE) };
    if check(client)? != Some(oid) {
        return Err(refused());
    }
    Ok(())
}

/// A claim's write of `leaf_worker` through Citus (an insert, a take-over of a
/// released row, a take-back, a move) stands only if it reached every copy:
/// `snowflake::quorum` counts a holder's renewals over every copy, the
/// disabled ones too, so a write that skipped a disabled node's copy may
/// overlap a live holder's majority in no copy at all (a coordinator that
/// disabled two live nodes of three would otherwise take their ids while they
/// renew with each other). Refused with 55000 while a copy's node is disabled;
/// `citus_activate_node` or `citus_remove_node` ends it.
pub fn require_every_copy_active(copies: &Copies, worker_id: i64) -> Result<(), JobError> {
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

/// The copies a worker id's lease counts (`quorum`): `copies` and
/// `holder_copy` of its row, read through Citus (every copy has the same:
/// only writes through Citus change them).
#[derive(Clone, Debug, PartialEq)]
pub struct Pin {
    /// None: a row not pinned yet (catalog 0.2.0), whose lease counted every
    /// copy listed.
    pub copies: Option<Vec<i64>>,
    pub holder: Option<i64>,
}

/// The pin of `worker_id`'s row (None: no such row).
pub fn pin_of(
    client: &mut SpiClient,
    schema: &Schema,
    worker_id: i64,
) -> Result<Option<Pin>, JobError> {
    let rows = client
        .update(
            &sql::worker_pin_read(schema),
            None,
            &[(worker_id as i32).into()],
        )
        .map_err(spi_err)?;
    let Some(row) = rows.into_iter().next() else {
        return Ok(None);
    };
    Ok(Some(Pin {
        copies: row
            .get::<Vec<Option<i64>>>(1)
            .map_err(spi_err)?
            .map(|v| v.into_iter().flatten().collect()),
        holder: row.get::<i64>(2).map_err(spi_err)?,
    }))
}

/// A write that ends another server's lease of `worker_id` (a take-back
/// from another owner token) must reach every copy its lease counts but the
/// holder's own (`quorum::missing_to_end_lease`): refused with 55000 when
/// this node's metadata has them not all on active nodes (removed or
/// disabled, as on one side of a partition).
pub fn require_lease_end_reaches(
    copies: &Copies,
    pin: &Pin,
    worker_id: i64,
) -> Result<(), JobError> {
    let missing = match &pin.copies {
        Some(p) => quorum::missing_to_end_lease(p, pin.holder, &copies.active),
        None => quorum::missing_to_end_lease(&copies.listed, None, &copies.active),
    };
    if missing.is_empty() {
        return Ok(());
    }
    Err(JobError::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "could not take snowflake worker id {worker_id} from its holder: the copies of leaf_worker its lease counts (on the nodes of Citus groups {missing:?}) are not on active nodes here; \
             activate the nodes or add them back"
        ),
    ))
}

/// Pin the copies a claim wrote (every active copy: a claim is refused
/// while any is disabled) in the row of `worker_id`, through Citus, in the
/// claim's transaction.
pub fn pin_claim(
    client: &mut SpiClient,
    schema: &Schema,
    copies: &Copies,
    worker_id: i64,
    node: &str,
    token: i64,
) -> Result<(), JobError> {
    if !set_pin(client, schema, copies, None, worker_id, node, token)? {
        return Err(JobError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "could not pin the copies of leaf_worker for worker id {worker_id}: its row is gone"
            ),
        ));
    }
    Ok(())
}

/// Move the pin of this node's row to the copies its metadata lists as
/// active now, through Citus (every active copy), if `quorum::may_repin`
/// allows it for `old`: the groups pinned now, or None when not needed or
/// not allowed.
pub fn repin(
    client: &mut SpiClient,
    schema: &Schema,
    copies: &Copies,
    old: &Pin,
    worker_id: i64,
    node: &str,
    token: i64,
) -> Result<Option<Vec<i64>>, JobError> {
    if !quorum::may_repin(old.copies.as_deref(), &copies.active, copies.all_active()) {
        return Ok(None);
    }
    Ok(
        set_pin(client, schema, copies, Some(old), worker_id, node, token)?
            .then(|| copies.active.clone()),
    )
}

/// Write the active copies as the pin of `worker_id`'s row held by `node`
/// and `token` (and, if `old` is given, still pinning `old` on every copy):
/// whether the row was there.
fn set_pin(
    client: &mut SpiClient,
    schema: &Schema,
    copies: &Copies,
    old: Option<&Pin>,
    worker_id: i64,
    node: &str,
    token: i64,
) -> Result<bool, JobError> {
    let mut args: Vec<pgrx::datum::DatumWithOid> = vec![
        (worker_id as i32).into(),
        node.into(),
        token.into(),
        copies.active.clone().into(),
        copies.own_group.into(),
    ];
    let over = match old {
        Some(old) => {
            args.push(old.copies.clone().into());
            sql::PinOver::Pinned
        }
        None => sql::PinOver::Any,
    };
    let done = client
        .update(&sql::worker_set_pin(schema, over), None, &args)
        .map_err(spi_err)?;
    Ok(!done.is_empty())
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

/// A renewal of a worker id's lease: the mark its holder, this node with
/// its owner token, persists on the copies of leaf_worker.
pub struct LeaseRenewal<'a> {
    pub worker_id: i64,
    pub node: &'a str,
    pub token: i64,
    pub mark: i64,
    /// leaf_id.epoch_ms, in which the mark counts.
    pub epoch: i64,
}

/// Renew the lease to at least its mark on this node's copy (in the
/// caller's transaction, committed by it) and on every other copy (each
/// committed on its own): Ok when a majority of the copies the row pins
/// holds it (`quorum::pinned_renewal_holds`; of every copy listed for a row
/// not pinned yet), with whether the holder should move its pin
/// (`repin`).
pub fn renew_on_majority(
    client: &mut SpiClient,
    db: usize,
    schema: &Schema,
    copies: &Copies,
    lease: &LeaseRenewal,
    remote_lock_timeout_ms: i64,
) -> Result<bool, JobError> {
    // this node's copy first: if it is not ours (55006), nothing else is
    let pin = renew_own_copy(client, schema, copies, lease)?;
    let (took, failures) =
        renew_other_copies(client, db, schema, copies, lease, remote_lock_timeout_ms)?;
    // (this node's copy took it: renew_own_copy returned)
    let own_took = true;
    // the copies this lease counts: those its claim pinned (a row from
    // catalog 0.2.0 not pinned yet: every copy listed)
    let (counted, holds) = match &pin.copies {
        Some(p) => (
            p.len(),
            quorum::pinned_renewal_holds(p, copies.own_group, own_took, &took),
        ),
        None => (
            copies.count(),
            quorum::renewal_holds(own_took, took.len(), copies.count()),
        ),
    };
    if holds {
        note_degraded(lease.worker_id, 1 + took.len(), copies.count(), &failures);
        return Ok(quorum::may_repin(
            pin.copies.as_deref(),
            &copies.active,
            copies.all_active(),
        ));
    }
    Err(short_of_majority(
        lease,
        copies,
        counted,
        took.len(),
        &failures,
    ))
}

/// The lease on this node's copy, through the shard itself (Citus would
/// write every copy): the row's pin, or 55006 when the row is not this
/// node's (deleted or truncated under it: claim again).
fn renew_own_copy(
    client: &mut SpiClient,
    schema: &Schema,
    copies: &Copies,
    lease: &LeaseRenewal,
) -> Result<Pin, JobError> {
    client
        .update(sql::ALLOW_SHARD_WRITES, None, &[])
        .map_err(spi_err)?;
    let renewed = client
        .update(
            &sql::shard_worker_renew(schema, &copies.shard),
            None,
            &[
                lease.mark.into(),
                (lease.worker_id as i32).into(),
                lease.node.into(),
                lease.epoch.into(),
                lease.token.into(),
            ],
        )
        .map_err(spi_err)?;
    if renewed.len() != 1 {
        return Err(worker_row_gone(lease.worker_id, lease.node));
    }
    let row = renewed.first();
    Ok(Pin {
        copies: row
            .get::<Vec<Option<i64>>>(2)
            .map_err(spi_err)?
            .map(|v| v.into_iter().flatten().collect()),
        holder: row.get::<i64>(3).map_err(spi_err)?,
    })
}

/// The lease on every other copy, each through a helper process of its
/// own, so that a node that hangs with the statement in flight holds only
/// that helper: the group ids of the copies that took it, and why the
/// others did not.
fn renew_other_copies(
    client: &mut SpiClient,
    db: usize,
    schema: &Schema,
    copies: &Copies,
    lease: &LeaseRenewal,
    remote_lock_timeout_ms: i64,
) -> Result<(Vec<i64>, Vec<String>), JobError> {
    let names = sql::remote_names(schema, &copies.shard);
    let worker_id = lease.worker_id;
    let command = sql::build_on_server(
        client,
        sql::BUILD_REMOTE_RENEWAL,
        &[
            remote_lock_timeout_ms.to_string().into(),
            names.schema.into(),
            names.shard.into(),
            lease.node.into(),
            lease.token.into(),
            lease.mark.into(),
            lease.epoch.into(),
            (worker_id as i32).into(),
            format!("no leaf_worker row of worker id {worker_id} on this node").into(),
            names.tables_schema.into(),
        ],
    )?;
    let wait =
        std::time::Duration::from_millis(crate::runtime::transaction::renewal_wait_ms() as u64);
    let answers = crate::citus::renewal_helper::run_on_others(db, &copies.others, &command, wait);
    let (mut took, mut failures) = (Vec::new(), Vec::new());
    for (group, answer) in copies.other_groups.iter().zip(answers) {
        match answer {
            Ok(_) => took.push(*group),
            Err(failure) => failures.push(failure),
        }
    }
    Ok((took, failures))
}

/// A renewal short of a majority: 55006 when a copy is held by another
/// token (the row was taken over: claim again), else 08006 (nodes
/// unreachable).
fn short_of_majority(
    lease: &LeaseRenewal,
    copies: &Copies,
    counted: usize,
    acks: usize,
    failures: &[String],
) -> JobError {
    let taken = failures
        .iter()
        .any(|f| f.contains("is not held by this server"));
    JobError::new(
        if taken {
            PgSqlErrorCode::ERRCODE_OBJECT_IN_USE
        } else {
            PgSqlErrorCode::ERRCODE_CONNECTION_FAILURE
        },
        format!(
            "the snowflake lease of worker id {} was renewed on {} of {} copies of leaf_worker, fewer than a majority of the {} copies its claim pinned ({}); not on: {}",
            lease.worker_id,
            1 + acks,
            copies.count(),
            counted,
            quorum::majority(counted),
            failures.join("; ")
        ),
    )
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
        .next()
    else {
        return Ok(0);
    };
    let mark = row.get::<i64>(1).map_err(spi_err)?.unwrap_or(0);
    let mark_epoch = row.get::<i64>(2).map_err(spi_err)?;
    crate::snowflake::claim_plan::floor_for_epoch(mark, mark_epoch, epoch).map_err(|e| {
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
    let names = sql::remote_names(schema, &copies.shard);
    let read = sql::build_on_server(
        client,
        sql::BUILD_REMOTE_MARK_READ,
        &[
            names.tables_schema.into(),
            names.shard.into(),
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
        if a.trim() == sql::REMOTE_MARK_REFUSED {
            return Err(JobError::new(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!(
                    "could not read the mark of snowflake worker id {worker_id} on every copy of leaf_worker: \
                     a node's copy is not a plain table of the extension's owner without triggers, rules or row security"
                ),
            ));
        }
        let mut parts = a.split(',').map(|p| p.trim().parse::<i64>().ok());
        let mark = parts.next().flatten().unwrap_or(0);
        let mark_epoch = parts.next().flatten();
        let floor = crate::snowflake::claim_plan::floor_for_epoch(mark, mark_epoch, epoch)
            .map_err(|e| {
                JobError::new(
                    PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                    e.describe(worker_id),
                )
            })?;
        highest = highest.max(floor);
    }
    Ok(highest)
}

/// The error of a renewal that found no row for its worker id (on a plain
/// server, or in this node's copy): 55006, which makes the snowflake worker
/// close its generator and claim again.
pub fn worker_row_gone(worker_id: i64, node: &str) -> JobError {
    JobError::new(
        PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
        format!(
            "the leaf_worker row of worker id {worker_id} for node \"{node}\" is gone (deleted, or the table truncated): the id is claimed again"
        ),
    )
}
