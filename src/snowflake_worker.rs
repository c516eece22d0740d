//! The snowflake half of the worker: claim a worker id from `leaf_worker`
//! and keep the persisted high-water mark ahead of the clock.

use crate::clock::clock_ms;
use crate::settings;
use crate::shmem::shared;
use crate::snowflake::claim::{self, ClaimPlan, RegistryRow, Take};
use crate::worker::JobError;
use pgrx::prelude::*;
use pgrx::spi::{Spi, SpiClient};
use std::sync::atomic::Ordering::SeqCst;

fn spi_err(e: pgrx::spi::SpiError) -> JobError {
    JobError::new(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, e.to_string())
}

fn registry(client: &SpiClient, schema: &str) -> Result<Vec<RegistryRow>, JobError> {
    let rows = client
        .select(
            &format!("SELECT worker_id, node_name FROM {schema}.leaf_worker"),
            None,
            &[],
        )
        .map_err(spi_err)?;
    Ok(rows
        .filter_map(|r| {
            Some(RegistryRow {
                worker_id: r.get::<i32>(1).ok().flatten()? as i64,
                node_name: r.get::<String>(2).ok().flatten()?,
            })
        })
        .collect())
}

/// Claim (or re-take) this node's worker id and persist a first mark.
pub fn claim(schema: &str, db: usize) -> Result<Claimed, JobError> {
    let sh = shared().expect("shared memory");
    let slot = sh.db(db);
    let node = settings::node_name();
    let configured = match settings::WORKER_ID.get() {
        -1 => None,
        id => Some(id as i64),
    };
    let (worker_id, persisted) = Spi::connect_mut(|client| {
        for _attempt in 0..10 {
            let rows = registry(client, schema)?;
            let take = |client: &mut SpiClient, take: Take| -> Result<bool, JobError> {
                let got = match take {
                    Take::Insert(id) => client.update(
                        &format!(
                            "INSERT INTO {schema}.leaf_worker (worker_id, node_name) VALUES ($1, $2) \
                             ON CONFLICT DO NOTHING RETURNING worker_id"
                        ),
                        None,
                        &[(id as i32).into(), node.as_str().into()],
                    ),
                    Take::TakeOver(id) => client.update(
                        &format!(
                            "UPDATE {schema}.leaf_worker SET node_name = $2 \
                             WHERE worker_id = $1 AND node_name = $3 RETURNING worker_id"
                        ),
                        None,
                        &[(id as i32).into(), node.as_str().into(), claim::released_name(id).as_str().into()],
                    ),
                };
                Ok(!got.map_err(spi_err)?.is_empty())
            };
            let id = match claim::plan(&rows, &node, configured) {
                ClaimPlan::Reuse(id) => id,
                ClaimPlan::Take(t) => {
                    if !take(client, t)? {
                        continue; // another node took it first: plan again
                    }
                    t.id()
                }
                ClaimPlan::Move { release, take: t } => {
                    // keep the old id's row and mark for whoever takes it next
                    client
                        .update(
                            &format!("UPDATE {schema}.leaf_worker SET node_name = $3 WHERE worker_id = $1 AND node_name = $2"),
                            None,
                            &[(release as i32).into(), node.as_str().into(), claim::released_name(release).as_str().into()],
                        )
                        .map_err(spi_err)?;
                    if !take(client, t)? {
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
                ClaimPlan::Full => {
                    return Err(JobError::new(
                        PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
                        "all 1024 snowflake worker ids in leaf_worker are taken",
                    ));
                }
            };
            let row = client
                .update(
                    &format!("SELECT last_timestamp, epoch_ms FROM {schema}.leaf_worker WHERE worker_id = $1 FOR UPDATE"),
                    None,
                    &[(id as i32).into()],
                )
                .map_err(spi_err)?
                .first();
            let mark = row.get::<i64>(1).ok().flatten().unwrap_or(0);
            let mark_epoch = row.get::<i64>(2).ok().flatten();
            let mark = claim::floor_for_epoch(mark, mark_epoch, crate::snowflake_api::epoch());
            return Ok((id, mark));
        }
        Err(JobError::new(
            PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
            "could not claim a snowflake worker id: leaf_worker kept changing",
        ))
    })?;
    let same_lifetime = slot.worker_id.load(SeqCst) == worker_id as i32;
    // Within one shared-memory lifetime the generator itself never repeats;
    // the persisted mark guards what earlier lifetimes issued.
    let floor = if same_lifetime {
        slot.generator.floor_ms.load(SeqCst)
    } else {
        persisted
    };
    let lease = persist(
        schema,
        worker_id,
        &node,
        clock_ms().max(floor) + settings::LEASE_AHEAD.get() as i64,
    )?;
    Ok(Claimed {
        worker_id,
        floor,
        lease,
        same_lifetime,
        from_registry: configured.is_none(),
        node,
    })
}

/// A committed claim, to publish to shared memory.
pub struct Claimed {
    worker_id: i64,
    floor: i64,
    lease: i64,
    same_lifetime: bool,
    from_registry: bool,
    node: String,
}

/// After the claim's commit: let the generator run up to the persisted mark.
pub fn publish_claim(db: usize, c: &Claimed) {
    let slot = shared().expect("shared memory").db(db);
    if c.same_lifetime {
        // a worker of this server lifetime closed it on exit: go on from there
        slot.generator.reopen();
    } else {
        slot.generator.reset();
        slot.generator.floor_ms.store(c.floor, SeqCst);
        slot.worker_id.store(c.worker_id as i32, SeqCst);
    }
    slot.generator.lease_ms.fetch_max(c.lease, SeqCst);
    slot.worker_id_from_registry.store(c.from_registry, SeqCst);
    slot.set_node_name(&c.node);
}

/// After a renewal's commit.
pub fn publish_lease(db: usize, mark: i64) {
    shared()
        .expect("shared memory")
        .db(db)
        .generator
        .lease_ms
        .fetch_max(mark, SeqCst);
}

/// Write the mark; the generator may use it only after the commit.
fn persist(schema: &str, worker_id: i64, node: &str, mark: i64) -> Result<i64, JobError> {
    let updated = Spi::connect_mut(|client| {
        client
            .update(
                &format!(
                    "UPDATE {schema}.leaf_worker SET last_timestamp = GREATEST(last_timestamp, $1), epoch_ms = $4, \
                     heartbeat_at = now() WHERE worker_id = $2 AND node_name = $3 RETURNING last_timestamp"
                ),
                None,
                &[mark.into(), (worker_id as i32).into(), node.into(), crate::snowflake_api::epoch().into()],
            )
            .map_err(spi_err)
            .map(|t| if t.is_empty() { None } else { t.first().get::<i64>(1).ok().flatten() })
    })?;
    updated.ok_or_else(|| {
        JobError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("the leaf_worker row of worker id {worker_id} for node \"{node}\" is gone"),
        )
    })
}

/// Renew the mark: the commit happens in the caller (`in_transaction`), and
/// the new mark is published to the generator only after it.
pub fn renew(schema: &str, db: usize) -> Result<i64, JobError> {
    let sh = shared().expect("shared memory");
    let slot = sh.db(db);
    let worker_id = slot.worker_id.load(SeqCst) as i64;
    let mark = clock_ms() + settings::LEASE_AHEAD.get() as i64;
    persist(schema, worker_id, &settings::node_name(), mark)
}

/// On the worker's exit (shutdown, or terminated): close the generator and
/// persist the exact last issued millisecond instead of the lease, so that
/// after a clean restart IDs are not refused while the clock catches up with
/// a mark set ahead of it. If this fails, the lease stays persisted: safe.
pub fn close_and_persist(db: usize) {
    let sh = shared().expect("shared memory");
    let slot = sh.db(db);
    if slot.snowflake_state.load(SeqCst) != crate::shmem::SnowflakeState::Ready as u32 {
        return;
    }
    let epoch = crate::snowflake_api::epoch();
    // after this no ID can be issued with a later millisecond
    let last = slot.generator.close(epoch).unwrap_or(0);
    let mark = last.max(slot.generator.floor_ms.load(SeqCst));
    let worker_id = slot.worker_id.load(SeqCst);
    let node = settings::node_name();
    let result = crate::worker::in_transaction(|schema| {
        Spi::connect_mut(|client| {
            client
                .update(
                    &format!(
                        "UPDATE {schema}.leaf_worker SET last_timestamp = $1, epoch_ms = $4, heartbeat_at = now() \
                         WHERE worker_id = $2 AND node_name = $3"
                    ),
                    None,
                    &[mark.into(), worker_id.into(), node.as_str().into(), epoch.into()],
                )
                .map(|_| ())
                .map_err(spi_err)
        })
    });
    match result {
        Ok(()) => pgrx::log!(
            "leaf_id: snowflake worker id {} closed at {}",
            worker_id,
            mark
        ),
        Err(e) => pgrx::log!(
            "leaf_id: could not persist the last snowflake millisecond: {}",
            e.message
        ),
    }
}
