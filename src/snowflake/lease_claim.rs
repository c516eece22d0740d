//! Claiming a snowflake worker id: read `leaf_worker`, plan the claim
//! (`snowflake::claim`, pure), take the row (insert, released row, own row
//! back, or a takeover after its lease), persist a first mark, and publish
//! the claim to shared memory. Renewals and the close are `lease_renew`'s
//! and `lease_close`'s.
//!
//! The invariant every step keeps: the generator's lease (`lease_ms`, the
//! last millisecond it may issue) is never above the mark persisted in the
//! worker id's row. The lease is set to exactly what a committed statement
//! returned (never raised on its own), the generator is closed before any
//! re-claim, and a close lowers the row only to what was really issued.

use crate::runtime::catalog::Catalog;
use crate::runtime::clock::clock_ms;
use crate::runtime::job::{JobError, spi_err};
use crate::runtime::shmem::shared;
use crate::runtime::worker_sql::{self as sql, Schema};
use crate::settings;
use crate::snowflake::claim::{self, ClaimPlan, OwnRow, RegistryRow, Take};
use crate::snowflake::layout::MAX_WORKER_ID;
use crate::snowflake::lease_renew::{lease_ahead, persist};
use pgrx::prelude::*;
use pgrx::spi::{Spi, SpiClient};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

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
pub(crate) fn configured_worker_id() -> Option<i64> {
    match settings::WORKER_ID.get() {
        -1 => None,
        id => Some(id as i64),
    }
}

/// How many times a claim reads the registry and tries to take an id before
/// it gives up (55P03): a try whose insert or take-over finds the row taken
/// meanwhile (another server was first) reads the registry again. Ten lost
/// races in a row mean the registry keeps changing, not a race.
const CLAIM_TRIES: usize = 10;

/// Worker ids other databases of this server are configured with, which a
/// claim from the registry leaves free (else a database that claimed first
/// would take the id another one is configured with, and that one would be
/// refused).
fn configured_for_other_databases(client: &mut SpiClient) -> Result<Vec<i64>, JobError> {
    let rows = client
        .update(
            sql::WORKER_IDS_CONFIGURED_ELSEWHERE,
            None,
            // SAFETY: MyDatabaseId is this process's plain Oid global, set
            // when the worker connected to its database and never changed
            // after; read by value on the process's one thread.
            &[unsafe { pg_sys::MyDatabaseId }.into()],
        )
        .map_err(spi_err)?;
    Ok(rows
        .filter_map(|r| r.get::<i32>(1).ok().flatten().map(i64::from))
        .collect())
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
/// generator is closed (`SnowflakeJobs::claim`). `avoid`: the id released
/// from under this server, taken from the registry only if no other is free
/// (`claim::plan`).
pub fn claim(
    schema: &Schema,
    catalog: Catalog,
    db: usize,
    avoid: Option<i64>,
) -> Result<Claimed, JobError> {
    if !catalog.has_snowflake() {
        return Err(crate::runtime::transaction::needs_current_catalog(
            catalog,
            "snowflake mode",
        ));
    }
    let sh = shared().expect("shared memory");
    let slot = sh.db(db);
    let token = sh.owner_token();
    let node = settings::node_name();
    let configured = configured_worker_id();
    let ahead = lease_ahead()?;
    // a dropped database's generator no longer needs its id (its slot stays
    // until reclaimed; with idle workers, DROP DATABASE needs no FORCE)
    crate::runtime::backend::reclaim_dropped_databases(sh);
    let used_here = used_by_other_databases(db);
    // whether the claim wrote leaf_worker (through Citus: every copy), and
    // the time of a takeover from another token (the new floor)
    let mut wrote_registry = false;
    let mut taken_at = 0;
    // a taken row's floor from the clock (`taken_row_floor`), used on Citus
    let mut released_at = 0;
    let mut waits_for_release = false;
    let (worker_id, persisted) = Spi::connect_mut(|client| {
        let kept_for_others = match configured {
            None => configured_for_other_databases(client)?,
            Some(_) => Vec::new(),
        };
        for _attempt in 0..CLAIM_TRIES {
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
            let id = match claim::plan_keeping(
                &rows,
                &node,
                configured,
                &used_here,
                avoid,
                &kept_for_others,
            ) {
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
                    released_at = taken_row_floor(ahead);
                    t.id()
                }
                ClaimPlan::Move { release, take: t } => {
                    wrote_registry = true;
                    // keep the old id's row and mark for whoever takes it next;
                    // only this server's, or one whose holder can no longer
                    // issue (as for a take-back)
                    let row = rows
                        .iter()
                        .find(|r| r.worker_id == release)
                        .expect("planned from rows");
                    let now = clock_ms();
                    match claim::own_row(row, token, now) {
                        OwnRow::Mine => {}
                        OwnRow::TakeBack => require_lease_end_reaches(client, schema, row)?,
                        OwnRow::LeaseLive { .. } => {
                            return Err(held_by_live_server(release, &node));
                        }
                    }
                    client
                        .update(
                            &sql::worker_release(schema),
                            None,
                            &[
                                (release as i32).into(),
                                node.as_str().into(),
                                claim::released_name(release).as_str().into(),
                                row.owner_token.unwrap_or(0).into(),
                                token.into(),
                                now.into(),
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
                    released_at = taken_row_floor(ahead);
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
                        format!(
                            "all {} snowflake worker ids in leaf_worker are taken",
                            MAX_WORKER_ID + 1
                        ),
                    ));
                }
            };
            let citus = crate::citus::copies::of_worker_registry_anywhere(client, schema)?;
            if let (true, Some((copies, _))) = (wrote_registry, &citus) {
                // (rolled back with the write when refused)
                crate::citus::copies::require_every_copy_active(copies, id)?;
                // the copies this claim wrote are the ones its lease counts
                crate::citus::copies::pin_claim(client, schema, copies, id, &node, token)?;
            }
            // no FOR UPDATE: on a Citus reference table it locks on the first
            // worker node too, which may be down; a change of the row after
            // this read fails the guarded persist below
            let row = client
                .update(&sql::worker_mark(schema), None, &[(id as i32).into()])
                .map_err(spi_err)?
                .first();
            let mark = row.get::<i64>(1).ok().flatten().unwrap_or(0);
            let mark_epoch = row.get::<i64>(2).ok().flatten();
            let epoch = crate::snowflake::sql::epoch();
            let mut mark = claim::floor_for_epoch(mark, mark_epoch, epoch).map_err(|e| {
                JobError::new(PgSqlErrorCode::ERRCODE_DATA_CORRUPTED, e.describe(id))
            })?;
            if let Some((copies, true)) = &citus {
                // this node's own copy, read without Citus (which may read
                // another copy): it is in every majority that granted this
                // node a lease, so a restart's floor covers them all
                mark = mark.max(crate::citus::copies::mark_on_own_copy(
                    client, copies, id, epoch,
                )?);
                // this node's copy may have missed leases that a majority
                // granted (a released row's last holder went on renewing
                // without it): a claim that wrote every copy reads every
                // copy's mark as well
                if wrote_registry {
                    mark = mark.max(crate::citus::copies::highest_mark_on_other_copies(
                        client, schema, copies, id, epoch,
                    )?);
                    mark = mark.max(released_at);
                    waits_for_release = released_at > 0;
                }
            } else if wrote_registry {
                // no copy here: the mark read through Citus came from one
                // copy, which may have missed the last holder's leases
                if let Some((all, false)) = &citus {
                    mark = mark.max(crate::citus::copies::highest_mark_on_other_copies(
                        client, schema, all, id, epoch,
                    )?);
                    mark = mark.max(released_at);
                    waits_for_release = released_at > 0;
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
            .last_issued_ms(crate::snowflake::sql::epoch())
            .unwrap_or(0)
    } else {
        0
    };
    // (a released id taken back in this lifetime waits too, rather than
    // refusing calls until the clock passes the floor)
    if !same_id || waits_for_release {
        wait_for_floor(floor);
    }
    // a claim that wrote through Citus renews through it as well (its own
    // uncommitted write locks every copy); one that only found its own row
    // (a restart of this data directory) needs a majority of the copies
    let (lease, _) = persist(
        db,
        schema,
        catalog,
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
/// fails the statement (`citus::guard`, 55006). The taker issues above `now_ms`,
/// so above every lease a copy holds, including one this node's copy missed.
fn take_back(
    client: &mut SpiClient,
    schema: &Schema,
    row: &RegistryRow,
    token: i64,
    now_ms: i64,
) -> Result<bool, JobError> {
    let Some(pin) = crate::citus::copies::pin_of(client, schema, row.worker_id)? else {
        return Ok(false);
    };
    if row.owner_token.is_some() {
        require_pin_reached(client, schema, &pin, row.worker_id)?;
    }
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
                pin.copies.clone().into(),
                pin.holder.into(),
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

/// On Citus, a write that ends another server's lease of `row` must reach
/// every copy that lease counts (`citus::copies::require_lease_end_reaches`);
/// a row without an owner token has no lease to end.
fn require_lease_end_reaches(
    client: &mut SpiClient,
    schema: &Schema,
    row: &RegistryRow,
) -> Result<(), JobError> {
    if row.owner_token.is_none() {
        return Ok(());
    }
    match crate::citus::copies::pin_of(client, schema, row.worker_id)? {
        Some(pin) => require_pin_reached(client, schema, &pin, row.worker_id),
        None => Ok(()),
    }
}

fn require_pin_reached(
    client: &mut SpiClient,
    schema: &Schema,
    pin: &crate::citus::copies::Pin,
    worker_id: i64,
) -> Result<(), JobError> {
    match crate::citus::copies::of_worker_registry_anywhere(client, schema)? {
        Some((copies, _)) => {
            crate::citus::copies::require_lease_end_reaches(&copies, pin, worker_id)
        }
        None => Ok(()),
    }
}

/// The floor of a row taken now (used on Citus, where other nodes share the
/// registry): above every lease its last holder can still have. A released
/// row's holder stops renewing once the release is on a majority of the
/// copies, which is before this claim, and each renewal leases at most
/// `lease_ahead` past its own time. A row inserted now may have had a
/// holder too: a row deleted (or the table truncated) under a live holder
/// leaves no mark, and that node issues up to its lease, then stops (its
/// renewal finds no row). The marks read from every copy say the same
/// unless a copy was overwritten meanwhile (on Citus,
/// `replicate_reference_tables` after `citus_activate_node` copies one copy
/// over the others, marks included: `tests/citus/216`). Assumes the same
/// `leaf_id.lease_ahead` and synchronized clocks on every node.
fn taken_row_floor(ahead: i64) -> i64 {
    clock_ms().saturating_add(ahead)
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
        crate::runtime::clock::wait_on_latch(Duration::from_millis(
            (floor - clock_ms()).clamp(1, 100) as u64,
        ));
    }
}

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
        crate::runtime::clock::wait_on_latch(Duration::from_millis(left.min(100) as u64));
    }
}

/// A committed claim, to publish to shared memory.
pub struct Claimed {
    pub(crate) worker_id: i64,
    pub(crate) floor: i64,
    pub(crate) lease: i64,
    pub(crate) same_id: bool,
    pub(crate) configured: Option<i64>,
    pub(crate) node: String,
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
