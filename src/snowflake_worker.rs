//! The snowflake half of the worker: claim a worker id from `leaf_worker`,
//! keep the persisted high-water mark ahead of the clock, and close the
//! generator on exit.
//!
//! The invariant every step keeps: the generator's lease (`lease_ms`, the
//! last millisecond it may issue) is never above the mark persisted in the
//! worker id's row. The lease is set to exactly what a committed statement
//! returned (never raised on its own), the generator is closed before any
//! re-claim, and a close lowers the row only to what was really issued.

use crate::clock::clock_ms;
use crate::errors::code_of;
use crate::runtime::worker_sql::{self as sql, Schema, Table};
use crate::settings;
use crate::shmem::{SnowflakeState, shared};
use crate::snowflake::claim::{self, ClaimPlan, OwnRow, RegistryRow, Take};
use crate::transaction::{JobError, explain_unreachable, in_transaction, spi_err};
use crate::worker::WorkerContext;
use pgrx::prelude::*;
use pgrx::spi::{Spi, SpiClient};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// The registry, read with a fresh snapshot (an `update` call: a read-only
/// SPI query would reuse the transaction's first snapshot, and the claim
/// reads again after waiting).
fn registry(client: &mut SpiClient, schema: &Schema) -> Result<Vec<RegistryRow>, JobError> {
    let rows = client
        .update(&sql::worker_registry(schema), None, &[])
        .map_err(spi_err)?;
    Ok(rows
        .filter_map(|r| {
            Some(RegistryRow {
                worker_id: r.get::<i32>(1).ok().flatten()? as i64,
                node_name: r.get::<String>(2).ok().flatten()?,
                owner_token: r.get::<i64>(3).ok().flatten(),
                mark: r.get::<i64>(4).ok().flatten(),
            })
        })
        .collect())
}

/// The worker id setting: None = claim one from the registry.
fn configured_worker_id() -> Option<i64> {
    match settings::WORKER_ID.get() {
        -1 => None,
        id => Some(id as i64),
    }
}

/// `leaf_id.lease_ahead` must exceed `leaf_id.heartbeat_interval`, or the
/// lease runs out between renewals and IDs stop.
fn lease_ahead() -> Result<i64, JobError> {
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

/// Worker ids the generators of the other databases of this server use
/// (hold the global lock for an answer that stays true).
fn used_by_other_databases(db: usize) -> Vec<i64> {
    let sh = shared().expect("shared memory");
    (0..sh.n_dbs())
        .filter(|&d| d != db && sh.db(d).dboid.load(SeqCst) != 0)
        .filter_map(|d| {
            let id = sh.db(d).worker_id.load(SeqCst);
            (id >= 0).then_some(id as i64)
        })
        .collect()
}

/// Claim (or re-take) this node's worker id and persist a first mark. The
/// generator is closed (`SnowflakeJobs::claim`).
pub fn claim(schema: &Schema, db: usize) -> Result<Claimed, JobError> {
    if crate::transaction::catalog_is_legacy() {
        return Err(crate::transaction::needs_current_catalog("snowflake mode"));
    }
    let sh = shared().expect("shared memory");
    let slot = sh.db(db);
    let token = sh.owner_token();
    let node = settings::node_name();
    let configured = configured_worker_id();
    let ahead = lease_ahead()?;
    // a dropped database's generator no longer needs its id (its slot stays
    // until reclaimed; with idle workers, DROP DATABASE needs no FORCE)
    crate::backend::reclaim_dropped_databases(sh);
    let used_here = used_by_other_databases(db);
    // whether the claim wrote leaf_worker (through Citus: every copy), and
    // the time of a takeover from another token (the new floor)
    let mut wrote_registry = false;
    let mut taken_at = 0;
    let (worker_id, persisted) = Spi::connect_mut(|client| {
        for _attempt in 0..10 {
            let rows = registry(client, schema)?;
            let take = |client: &mut SpiClient, take: Take| -> Result<bool, JobError> {
                let got = match take {
                    Take::Insert(id) => client.update(
                        &sql::worker_insert(schema),
                        None,
                        &[(id as i32).into(), node.as_str().into(), token.into()],
                    ),
                    Take::TakeOver(id) => client.update(
                        &sql::worker_take_released(schema),
                        None,
                        &[
                            (id as i32).into(),
                            node.as_str().into(),
                            claim::released_name(id).as_str().into(),
                            token.into(),
                        ],
                    ),
                };
                Ok(!got.map_err(spi_err)?.is_empty())
            };
            let id = match claim::plan(&rows, &node, configured, &used_here) {
                ClaimPlan::Reuse(id) => {
                    let row = rows
                        .iter()
                        .find(|r| r.worker_id == id)
                        .expect("planned from rows");
                    match claim::own_row(row, token, clock_ms()) {
                        OwnRow::Mine => id,
                        OwnRow::TakeBack => {
                            let now = clock_ms();
                            if !take_back(client, schema, row, token, now)? {
                                continue; // the row is gone meanwhile: plan again
                            }
                            wrote_registry = true;
                            if row.owner_token.is_some() {
                                taken_at = now;
                            }
                            id
                        }
                        OwnRow::LeaseLive { until_ms } => {
                            // this server before a crash, or a live copy of
                            // it: a live holder renews every heartbeat
                            // interval (a slow job of its worker may delay
                            // that by a lock_timeout), so watch the row
                            // until its lease passes or for that long
                            let watch_end = (until_ms + 1).min(
                                clock_ms()
                                    + 2 * settings::HEARTBEAT_INTERVAL.get() as i64
                                    + WORKER_LOCK_TIMEOUT_MS,
                            );
                            // a row that changed, while watched or before
                            // the take-back, has a live holder
                            if !row_unchanged_until(client, schema, row, watch_end)? {
                                return Err(held_by_live_server(id, &node));
                            }
                            let now = clock_ms();
                            if !take_back(client, schema, row, token, now)? {
                                return Err(held_by_live_server(id, &node));
                            }
                            wrote_registry = true;
                            taken_at = now;
                            id
                        }
                    }
                }
                ClaimPlan::Take(t) => {
                    if !take(client, t)? {
                        continue; // another node took it first: plan again
                    }
                    wrote_registry = true;
                    t.id()
                }
                ClaimPlan::Move { release, take: t } => {
                    wrote_registry = true;
                    // keep the old id's row and mark for whoever takes it next
                    client
                        .update(
                            &sql::worker_release(schema),
                            None,
                            &[
                                (release as i32).into(),
                                node.as_str().into(),
                                claim::released_name(release).as_str().into(),
                            ],
                        )
                        .map_err(spi_err)?;
                    if !take(client, t)? {
                        if configured.is_none() {
                            continue; // another node took it first: plan again
                        }
                        return Err(JobError::new(
                            PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
                            format!(
                                "leaf_id.worker_id {} was taken by another node meanwhile",
                                t.id()
                            ),
                        ));
                    }
                    t.id()
                }
                ClaimPlan::OwnedByOther { worker_id, owner } => {
                    return Err(JobError::new(
                        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                        format!(
                            "leaf_id.worker_id {worker_id} belongs to node \"{owner}\" in leaf_worker, not to this node \"{node}\""
                        ),
                    ));
                }
                ClaimPlan::UsedByOtherDatabase(id) => return Err(used_by_other_database(id)),
                ClaimPlan::Full => {
                    return Err(JobError::new(
                        PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
                        "all 1024 snowflake worker ids in leaf_worker are taken",
                    ));
                }
            };
            // no FOR UPDATE: on a Citus reference table it locks on the first
            // worker node too, which may be down; a change of the row after
            // this read fails the guarded persist below
            let row = client
                .update(&sql::worker_mark(schema), None, &[(id as i32).into()])
                .map_err(spi_err)?
                .first();
            let mark = row.get::<i64>(1).ok().flatten().unwrap_or(0);
            let mark_epoch = row.get::<i64>(2).ok().flatten();
            let epoch = crate::snowflake_api::epoch();
            let mut mark = claim::floor_for_epoch(mark, mark_epoch, epoch).map_err(|e| {
                JobError::new(PgSqlErrorCode::ERRCODE_DATA_CORRUPTED, e.describe(id))
            })?;
            if let Some(copies) = crate::citus_copies::of_worker_registry(client, schema)? {
                // this node's own copy, read without Citus (which may read
                // another copy): it is in every majority that granted this
                // node a lease, so a restart's floor covers them all
                mark = mark.max(crate::citus_copies::mark_on_own_copy(
                    client, &copies, id, epoch,
                )?);
                // this node's copy may have missed leases that a majority
                // granted (a released row's last holder went on renewing
                // without it): a claim that wrote every copy reads every
                // copy's mark as well
                if wrote_registry {
                    mark = mark.max(crate::citus_copies::highest_mark_on_other_copies(
                        client, schema, &copies, id, epoch,
                    )?);
                }
            } else if wrote_registry {
                // no copy here: the mark read through Citus came from one
                // copy, which may have missed the last holder's leases
                if let Some(all) = crate::citus_copies::of_worker_registry_elsewhere(client, schema)? {
                    mark = mark.max(crate::citus_copies::highest_mark_on_other_copies(
                        client, schema, &all, id, epoch,
                    )?);
                }
            }
            return Ok((id, mark.max(taken_at)));
        }
        Err(JobError::new(
            PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
            "could not claim a snowflake worker id: leaf_worker kept changing",
        ))
    })?;
    let same_id =
        slot.worker_id.load(SeqCst) == worker_id as i32 && slot.generator.worker_id() == worker_id;
    // within one lifetime the generator's own state goes on (same id); the
    // row's mark counts in every case
    let kept = same_id.then(|| {
        (
            slot.generator.floor_ms.load(SeqCst),
            slot.generator.lease_ms.load(SeqCst),
        )
    });
    // another database of this server may have issued with the id in this
    // lifetime (its registry is not ours): start above its lease; and a
    // generator started afresh also above this database's own earlier
    // lease with the id (a registry dropped and created again forgets it)
    let dboid = slot.dboid.load(SeqCst);
    let noted = if same_id {
        sh.other_database_lease(worker_id, dboid)
    } else {
        sh.lifetime_lease(worker_id)
    };
    let floor = claim::claim_floor(persisted, kept).max(noted);
    let last = if same_id {
        slot.generator
            .last_issued_ms(crate::snowflake_api::epoch())
            .unwrap_or(0)
    } else {
        0
    };
    if !same_id {
        wait_for_floor(floor);
    }
    // a claim that wrote through Citus renews through it as well (its own
    // uncommitted write locks every copy); one that only found its own row
    // (a restart of this data directory) needs a majority of the copies
    let lease = persist(
        db,
        schema,
        worker_id,
        &node,
        clock_ms().max(floor).max(last).saturating_add(ahead),
        wrote_registry,
    )?;
    Ok(Claimed {
        worker_id,
        floor,
        lease,
        same_id,
        configured,
        node,
    })
}

/// Take this node's own row from a holder that can no longer issue (see
/// `OwnRow::TakeBack`), at `now_ms`. Every copy of the row (one, or one per
/// Citus node) must still have the token read, and, if a holder had it, a
/// lease that has passed: a holder that renewed meanwhile (on any copy)
/// fails the statement (guard_api, 55006). The taker issues above `now_ms`,
/// so above every lease a copy holds, including one this node's copy missed.
fn take_back(
    client: &mut SpiClient,
    schema: &Schema,
    row: &RegistryRow,
    token: i64,
    now_ms: i64,
) -> Result<bool, JobError> {
    let got = client
        .update(
            &sql::worker_take_back(schema),
            None,
            &[
                (row.worker_id as i32).into(),
                row.node_name.as_str().into(),
                row.owner_token.unwrap_or(0).into(),
                token.into(),
                now_ms.into(),
            ],
        )
        .map_err(spi_err)?;
    if !got.is_empty() {
        pgrx::log!(
            "leaf_id: took snowflake worker id {} of node \"{}\" back from owner token {:?} (lease end {:?})",
            row.worker_id,
            row.node_name,
            row.owner_token,
            row.mark
        );
    }
    Ok(!got.is_empty())
}

fn held_by_live_server(id: i64, node: &str) -> JobError {
    JobError::new(
        PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
        format!(
            "snowflake worker id {id} of node \"{node}\" is held by another live server: it renewed the lease while this server watched its leaf_worker row"
        ),
    )
}

/// A restart of this data directory holds its row at once (`owner_file`),
/// with the lease of the lifetime before it still running: wait until the
/// clock passes it, as a takeover watches a row for as long (two heartbeats
/// and a lock timeout at most), instead of refusing calls meanwhile. A floor
/// further ahead (a long lease, a clock behind the mark) is not waited for:
/// calls are refused (58000) until the clock passes it.
fn wait_for_floor(floor: i64) {
    let limit = 2 * settings::HEARTBEAT_INTERVAL.get() as i64 + WORKER_LOCK_TIMEOUT_MS;
    let behind = floor - clock_ms();
    if behind < 0 || behind > limit {
        return;
    }
    while clock_ms() <= floor {
        pgrx::check_for_interrupts!();
        crate::clock::wait_on_latch(Duration::from_millis(
            (floor - clock_ms()).clamp(1, 100) as u64
        ));
    }
}

/// `close_and_persist` left the row as it was (on Citus, at an exit).
const SKIPPED_ON_CITUS: i64 = i64::MIN;

/// The worker session's lock_timeout (`FORCED_SETTINGS`).
const WORKER_LOCK_TIMEOUT_MS: i64 = 5000;

/// Read the row again and again (interruptibly, with fresh snapshots) until
/// the snowflake clock reaches `until_ms`: false as soon as its owner token
/// or mark differs from `row`.
fn row_unchanged_until(
    client: &mut SpiClient,
    schema: &Schema,
    row: &RegistryRow,
    until_ms: i64,
) -> Result<bool, JobError> {
    loop {
        let now = registry(client, schema)?
            .into_iter()
            .find(|r| r.worker_id == row.worker_id);
        if now.as_ref() != Some(row) {
            return Ok(false);
        }
        let left = until_ms - clock_ms();
        if left <= 0 {
            return Ok(true);
        }
        pgrx::check_for_interrupts!();
        crate::clock::wait_on_latch(Duration::from_millis(left.min(100) as u64));
    }
}

/// A committed claim, to publish to shared memory.
pub struct Claimed {
    worker_id: i64,
    floor: i64,
    lease: i64,
    same_id: bool,
    configured: Option<i64>,
    node: String,
}

fn used_by_other_database(id: i64) -> JobError {
    JobError::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "snowflake worker id {id} is already used by another database of this server: two generators with one worker id would issue the same IDs"
        ),
    )
}

/// After the claim's commit: let the generator run up to the persisted mark.
/// The generator is closed here; floor and lease are set before the word
/// that reopens it. Refused if another database of this server took the id
/// meanwhile.
pub fn publish_claim(db: usize, c: &Claimed) -> Result<(), JobError> {
    let sh = shared().expect("shared memory");
    let slot = sh.db(db);
    let floor = {
        let _g = sh.lock_global();
        if used_by_other_databases(db).contains(&c.worker_id) {
            return Err(used_by_other_database(c.worker_id));
        }
        slot.worker_id.store(c.worker_id as i32, SeqCst);
        let dboid = slot.dboid.load(SeqCst);
        // (again under the lock: another database may have held it since)
        let floor = c
            .floor
            .max(sh.other_database_lease_locked(c.worker_id, dboid));
        sh.note_worker_id_lease_locked(c.worker_id, dboid, c.lease);
        floor
    };
    slot.generator.floor_ms.store(floor, SeqCst);
    slot.generator.lease_ms.store(c.lease, SeqCst);
    slot.worker_id_from_registry
        .store(c.configured.is_none(), SeqCst);
    slot.set_node_name(&c.node);
    if c.same_id {
        // go on from the last issued ID of this lifetime
        slot.generator.reopen();
    } else {
        slot.generator.reset(c.worker_id);
    }
    Ok(())
}

/// Write the mark; the generator may use it only after the commit. Returns
/// the row's mark after the update (never below `mark`). Every copy of the
/// row must still be this server's (node name and owner token), or the
/// statement fails (guard_api). On Citus, unless `through_citus`, the copies
/// are written one by one and a majority is enough (`snowflake::quorum`), so
/// that one node down does not stop the others.
fn persist(
    db: usize,
    schema: &Schema,
    worker_id: i64,
    node: &str,
    mark: i64,
    through_citus: bool,
) -> Result<i64, JobError> {
    if crate::transaction::catalog_is_legacy() {
        return Err(crate::transaction::needs_current_catalog("snowflake mode"));
    }
    let token = shared().expect("shared memory").owner_token();
    if !through_citus {
        let renewed = Spi::connect_mut(|client| {
            let Some(copies) = crate::citus_copies::of_worker_registry(client, schema)? else {
                return Ok(false);
            };
            crate::citus_copies::renew_on_majority(
                client,
                db,
                schema,
                &copies,
                worker_id,
                node,
                token,
                mark,
                crate::snowflake_api::epoch(),
                crate::transaction::citus_connect_timeout_ms(),
            )
            .map(|()| true)
        })?;
        if renewed {
            return Ok(mark);
        }
    }
    let updated = Spi::connect_mut(|client| {
        client
            .update(
                &sql::worker_renew(schema),
                None,
                &[
                    mark.into(),
                    (worker_id as i32).into(),
                    node.into(),
                    crate::snowflake_api::epoch().into(),
                    token.into(),
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
    })?;
    match updated {
        Some(m) if m >= mark => Ok(m),
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
fn renew(schema: &Schema, db: usize) -> Result<i64, JobError> {
    let slot = shared().expect("shared memory").db(db);
    let worker_id = slot.generator.worker_id();
    // never below the current lease: the row must cover what may be issued
    let mark = (clock_ms() + lease_ahead()?).max(slot.generator.lease_ms.load(SeqCst));
    persist(db, schema, worker_id, &slot.node_name(), mark, false)
}

/// Close the generator and persist the exact last issued millisecond instead
/// of the lease, so that after a clean restart IDs are not refused while the
/// clock catches up with a mark set ahead of it. The row keeps a mark that
/// someone else raised above our lease. If this fails, the lease stays
/// persisted: safe. Runs on the worker's exit and before every re-claim.
/// `release_token`: the row's owner token goes too (a shutdown, a re-claim);
/// an idle exit keeps it, so that the next worker of this lifetime needs no
/// write of every Citus copy to take the row back.
pub fn close_and_persist(db: usize, release_token: bool) {
    let slot = shared().expect("shared memory").db(db);
    let epoch = crate::snowflake_api::epoch();
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
    let node = slot.node_name();
    let token = shared().expect("shared memory").owner_token();
    let result = in_transaction(|schema| {
        if crate::transaction::catalog_is_legacy() {
            return Err(crate::transaction::needs_current_catalog("snowflake mode"));
        }
        Spi::connect_mut(|client| {
            if crate::transaction::cancel_held_off()
                && crate::citus_copies::is_citus_table(client, schema, Table::Worker)?
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
                        mark.into(),
                        (worker_id as i32).into(),
                        node.as_str().into(),
                        epoch.into(),
                        lease.into(),
                        token.into(),
                        release_token.into(),
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
    });
    match result {
        Ok(Some(SKIPPED_ON_CITUS)) => pgrx::log!(
            "leaf_id: snowflake worker id {} closed; its leaf_worker row keeps its lease (a shutdown cannot write every Citus copy)",
            worker_id
        ),
        Ok(Some(written)) if written >= mark => {
            // the lease follows the row down: a reopen must renew first
            slot.generator.lease_ms.store(written.min(lease), SeqCst);
            pgrx::log!(
                "leaf_id: snowflake worker id {} closed at {}",
                worker_id,
                written
            );
        }
        Ok(_) => pgrx::warning!(
            "leaf_id: could not persist the last snowflake millisecond: the leaf_worker row of worker id {} for node \"{}\" is gone or was changed; it keeps its earlier mark",
            worker_id,
            node
        ),
        Err(e) => pgrx::warning!(
            "leaf_id: could not persist the last snowflake millisecond: {}",
            e.message
        ),
    }
}

/// The worker's snowflake jobs.
pub struct SnowflakeJobs {
    last_heartbeat: Option<Instant>,
    /// (worker id setting, node name) of the last claim: a reload that
    /// changes either makes the worker claim again
    claimed_with: Option<(Option<i64>, String)>,
}

impl SnowflakeJobs {
    pub fn new() -> SnowflakeJobs {
        SnowflakeJobs {
            last_heartbeat: None,
            claimed_with: None,
        }
    }

    /// After a reload: `leaf_id.worker_id` and `leaf_id.node_name` take
    /// effect now, by a re-claim (the generator is closed first).
    pub fn settings_reloaded(&mut self, ctx: &WorkerContext) {
        let slot = ctx.sh.db(ctx.db);
        let now = (configured_worker_id(), settings::node_name());
        if self.claimed_with.as_ref().is_some_and(|c| *c != now)
            && slot.snowflake_state.load(SeqCst) == SnowflakeState::Ready as u32
        {
            pgrx::log!("leaf_id: snowflake worker id or node name changed: claiming again");
            slot.snowflake_state
                .store(SnowflakeState::Requested as u32, SeqCst);
        }
    }

    pub fn run(&mut self, ctx: &mut WorkerContext) {
        let sh = ctx.sh;
        let slot = sh.db(ctx.db);
        let state = slot.snowflake_state.load(SeqCst);
        if state == SnowflakeState::Requested as u32 {
            // nothing may be issued while the claim changes the generator
            if !slot.generator.is_closed() {
                close_and_persist(ctx.db, true);
            }
            slot.generator.close(crate::snowflake_api::epoch());
            let db = ctx.db;
            let result = in_transaction(|schema| claim(schema, db))
                .map_err(|e| explain_unreachable(e, "claim a snowflake worker id", "leaf_worker"))
                .and_then(|c| publish_claim(db, &c).map(|()| c));
            let _g = sh.lock_db(ctx.db);
            match result {
                Ok(claimed) => {
                    self.claimed_with = Some((claimed.configured, claimed.node.clone()));
                    slot.snowflake_state
                        .store(SnowflakeState::Ready as u32, SeqCst);
                    self.last_heartbeat = Some(Instant::now());
                }
                Err(e) => {
                    ctx.note(&e);
                    slot.error.set(e.sqlstate, &e.message);
                    slot.snowflake_state
                        .store(SnowflakeState::Failed as u32, SeqCst);
                    pgrx::warning!("leaf_id: snowflake worker id claim failed: {}", e.message);
                }
            }
            drop(_g);
            sh.broadcast(ctx.db);
        } else if state == SnowflakeState::Ready as u32 {
            let due = self.last_heartbeat.is_none_or(|t| {
                t.elapsed() >= Duration::from_millis(settings::HEARTBEAT_INTERVAL.get() as u64)
            });
            // clear the request either way: this renewal serves it
            let wanted = slot.snowflake_lease_wanted.swap(false, SeqCst);
            if due || wanted {
                self.last_heartbeat = Some(Instant::now());
                let db = ctx.db;
                let renewed = in_transaction(|schema| renew(schema, db)).map_err(|e| {
                    explain_unreachable(e, "renew the snowflake lease", "leaf_worker")
                });
                match renewed {
                    // in_transaction refuses a commit that a synchronous
                    // standby has not confirmed
                    Ok(mark) => {
                        // noted before the generator may issue up to it
                        sh.note_worker_id_lease(
                            slot.generator.worker_id(),
                            slot.dboid.load(SeqCst),
                            mark,
                        );
                        slot.generator.lease_ms.store(mark, SeqCst)
                    }
                    Err(e) => {
                        ctx.note(&e);
                        let _g = sh.lock_db(ctx.db);
                        slot.error.set(e.sqlstate, &e.message);
                        pgrx::warning!(
                            "leaf_id: snowflake high-water mark renewal failed: {}",
                            e.message
                        );
                        if e.sqlstate == code_of(PgSqlErrorCode::ERRCODE_OBJECT_IN_USE) {
                            // the row is no longer ours (released, or taken
                            // over after our lease ran out): claim again;
                            // the generator is closed first
                            slot.snowflake_state
                                .store(SnowflakeState::Requested as u32, SeqCst);
                        }
                    }
                }
                sh.broadcast(ctx.db);
            }
        }
    }

    /// How long the worker may sleep before the next renewal.
    pub fn timeout(&self, ctx: &WorkerContext) -> Option<Duration> {
        (ctx.sh.db(ctx.db).snowflake_state.load(SeqCst) == SnowflakeState::Ready as u32).then(
            || {
                Duration::from_millis(settings::HEARTBEAT_INTERVAL.get() as u64 / 2)
                    .max(Duration::from_millis(5))
            },
        )
    }
}
