//! Claiming a snowflake worker id: read `leaf_worker`, plan the claim
//! (`snowflake::claim_plan`, pure), take the row (insert, released row, own row
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
use crate::runtime::job_error::{JobError, spi_err};
use crate::runtime::shmem::shared;
use crate::runtime::worker_sql::{self as sql, Schema};
use crate::settings;
use crate::snowflake::claim_plan::{
    self, ClaimInput, ClaimSettings, ClaimStep, Continue, EndsLease, IfLost, MarksRead, Refusal,
    RegistryCopies, RegistryRow, Take, Took, Waits, Wrote,
};
use crate::snowflake::layout::MAX_WORKER_ID;
use crate::snowflake::lease_renew::{Route, lease_ahead, persist};
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

/// What a claim reads once, before its tries.
struct ClaimContext<'a> {
    schema: &'a Schema,
    catalog: Catalog,
    db: usize,
    /// `leaf_id.lease_ahead`.
    ahead: i64,
    /// The plan's settings (`kept_for_others` is read in the transaction).
    settings: ClaimSettings,
}

/// Claim (or re-take) this node's worker id and persist a first mark. The
/// generator is closed (`SnowflakeJobs::claim`). `avoid`: the id released
/// from under this server, taken from the registry only if no other is free
/// (`claim_plan::plan`).
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
    let token = sh.owner_token();
    let node = settings::node_name();
    let configured = configured_worker_id();
    let ahead = lease_ahead()?;
    // a dropped database's generator no longer needs its id (its slot stays
    // until reclaimed; with idle workers, DROP DATABASE needs no FORCE)
    crate::runtime::backend::reclaim_dropped_databases(sh);
    let used_here = used_by_other_databases(db);
    let cx = ClaimContext {
        schema,
        catalog,
        db,
        ahead,
        settings: ClaimSettings {
            node,
            token,
            configured,
            used_here,
            avoid,
            kept_for_others: Vec::new(),
        },
    };
    let (took, from) = Spi::connect_mut(|client| claim_in_spi(client, &cx))?;
    finish_claim(cx, &took, from)
}

/// The claim's transaction: plan and record tries until one takes an id,
/// then read the marks it continues from.
fn claim_in_spi(client: &mut SpiClient, cx: &ClaimContext) -> Result<(Took, Continue), JobError> {
    let settings = ClaimSettings {
        kept_for_others: match cx.settings.configured {
            None => configured_for_other_databases(client)?,
            Some(_) => Vec::new(),
        },
        ..cx.settings.clone()
    };
    // a try that released a row and then lost its new id wrote the registry
    let mut wrote_before = Wrote::Nothing;
    for _attempt in 0..CLAIM_TRIES {
        let rows = registry(client, cx.schema)?;
        let input = ClaimInput {
            settings: &settings,
            rows: &rows,
            now_ms: clock_ms(),
        };
        match record_step(client, cx, claim_plan::plan_step(&input))? {
            Tried::Lost(wrote) => wrote_before = wrote_before.or(wrote),
            Tried::Took(took) => {
                let took = Took {
                    wrote: took.wrote.or(wrote_before),
                    ..took
                };
                let from = read_marks(client, cx, &took)?;
                return Ok((took, from));
            }
        }
    }
    Err(JobError::new(
        PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
        "could not claim a snowflake worker id: leaf_worker kept changing",
    ))
}

/// What one try recorded.
enum Tried {
    /// The row changed meanwhile: plan again.
    Lost(Wrote),
    Took(Took),
}

impl Tried {
    fn took(worker_id: i64, taken_at: i64, released_at: i64) -> Tried {
        Tried::Took(Took {
            worker_id,
            wrote: Wrote::Registry,
            taken_at,
            released_at,
        })
    }
}

/// Record one try's step in `leaf_worker`.
fn record_step(
    client: &mut SpiClient,
    cx: &ClaimContext,
    step: ClaimStep,
) -> Result<Tried, JobError> {
    match step {
        ClaimStep::Keep(id) => Ok(Tried::Took(Took {
            worker_id: id,
            wrote: Wrote::Nothing,
            taken_at: 0,
            released_at: 0,
        })),
        ClaimStep::TakeBack(row) => {
            let now = clock_ms();
            if !take_back(client, cx.schema, &row, cx.settings.token, now)? {
                return Ok(Tried::Lost(Wrote::Nothing)); // the row is gone meanwhile
            }
            let taken_at = if row.owner_token.is_some() { now } else { 0 };
            Ok(Tried::took(row.worker_id, taken_at, 0))
        }
        ClaimStep::WatchThenTakeBack { row, until_ms } => {
            record_watched_take_back(client, cx, &row, until_ms)
        }
        ClaimStep::Take(t) => {
            if !insert_or_take_over(client, cx, t)? {
                return Ok(Tried::Lost(Wrote::Nothing)); // another node took it first
            }
            Ok(Tried::took(t.id(), 0, taken_row_floor(cx.ahead)))
        }
        ClaimStep::Move {
            release,
            ends,
            take,
            lost,
            at_ms,
        } => record_move(client, cx, &release, ends, take, lost, at_ms),
        ClaimStep::Refuse(r) => Err(refusal(r, &cx.settings.node)),
    }
}

/// This server before a crash, or a live copy of it: a live holder renews
/// every heartbeat interval (a slow job of its worker may delay that by a
/// lock_timeout), so watch the row until its lease passes or for that long.
/// A row that changed, while watched or before the take-back, has a live
/// holder.
fn record_watched_take_back(
    client: &mut SpiClient,
    cx: &ClaimContext,
    row: &RegistryRow,
    until_ms: i64,
) -> Result<Tried, JobError> {
    let watch_end = (until_ms + 1).min(clock_ms() + watch_limit_ms());
    if !row_unchanged_until(client, cx.schema, row, watch_end)? {
        return Err(held_by_live_server(row.worker_id, &cx.settings.node));
    }
    // unchanged for the whole watch: the holder no longer renews. Taken
    // at its lease's end when this server's clock is still behind it (a
    // promoted standby whose clock is late): the claim then continues from
    // that mark, and calls are refused (58000) until the clock passes it;
    // taken at the clock's time, the take-back would fail until then
    let at = clock_ms().max(until_ms + 1);
    if !take_back(client, cx.schema, row, cx.settings.token, at)? {
        return Err(held_by_live_server(row.worker_id, &cx.settings.node));
    }
    Ok(Tried::took(row.worker_id, at, 0))
}

/// Release this node's row `release` (keeping its mark for whoever takes
/// the id next), then take `take`.
fn record_move(
    client: &mut SpiClient,
    cx: &ClaimContext,
    release: &RegistryRow,
    ends: EndsLease,
    take: Take,
    lost: IfLost,
    at_ms: i64,
) -> Result<Tried, JobError> {
    if ends == EndsLease::Passed {
        require_lease_end_reaches(client, cx.schema, release)?;
    }
    let node = cx.settings.node.as_str();
    client
        .update(
            &sql::worker_release(cx.schema),
            None,
            &[
                (release.worker_id as i32).into(),
                node.into(),
                claim_plan::released_name(release.worker_id).as_str().into(),
                release.owner_token.unwrap_or(0).into(),
                cx.settings.token.into(),
                at_ms.into(),
            ],
        )
        .map_err(spi_err)?;
    if !insert_or_take_over(client, cx, take)? {
        return match lost {
            IfLost::PlanAgain => Ok(Tried::Lost(Wrote::Registry)),
            IfLost::Refuse => Err(JobError::new(
                PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
                format!(
                    "leaf_id.worker_id {} was taken by another node meanwhile",
                    take.id()
                ),
            )),
        };
    }
    Ok(Tried::took(take.id(), 0, taken_row_floor(cx.ahead)))
}

/// Insert a row for the id, or rename a released one to this node: false if
/// another node was first.
fn insert_or_take_over(
    client: &mut SpiClient,
    cx: &ClaimContext,
    take: Take,
) -> Result<bool, JobError> {
    let (schema, node, token) = (cx.schema, cx.settings.node.as_str(), cx.settings.token);
    let got = match take {
        Take::Insert(id) => client.update(
            &sql::worker_insert(schema),
            None,
            &[(id as i32).into(), node.into(), token.into()],
        ),
        Take::TakeOver(id) => client.update(
            &sql::worker_take_released(schema),
            None,
            &[
                (id as i32).into(),
                node.into(),
                claim_plan::released_name(id).as_str().into(),
                token.into(),
            ],
        ),
    };
    Ok(!got.map_err(spi_err)?.is_empty())
}

fn refusal(r: Refusal, node: &str) -> JobError {
    match r {
        Refusal::OwnedByOther { worker_id, owner } => JobError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "leaf_id.worker_id {worker_id} belongs to node \"{owner}\" in leaf_worker, not to this node \"{node}\""
            ),
        ),
        Refusal::UsedByOtherDatabase(id) => used_by_other_database(id),
        Refusal::Full => JobError::new(
            PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!(
                "all {} snowflake worker ids in leaf_worker are taken",
                MAX_WORKER_ID + 1
            ),
        ),
        Refusal::HeldByLiveServer(id) => held_by_live_server(id, node),
    }
}

/// After the take: on Citus, check and pin the copies a written claim
/// counts, then read the marks the claim continues from
/// (`claim_plan::continue_from`).
fn read_marks(
    client: &mut SpiClient,
    cx: &ClaimContext,
    took: &Took,
) -> Result<Continue, JobError> {
    let (schema, id) = (cx.schema, took.worker_id);
    let citus = crate::citus::copies::of_worker_registry_anywhere(client, schema)?;
    if let (Wrote::Registry, Some((copies, _))) = (took.wrote, &citus) {
        // (rolled back with the write when refused)
        crate::citus::copies::require_every_copy_active(copies, id)?;
        // the copies this claim wrote are the ones its lease counts
        let (node, token) = (cx.settings.node.as_str(), cx.settings.token);
        crate::citus::copies::pin_claim(client, schema, copies, id, node, token)?;
    }
    let (row, epoch) = row_mark(client, schema, id)?;
    let shape = match &citus {
        None => RegistryCopies::Plain,
        Some((_, true)) => RegistryCopies::CitusWithOwnCopy,
        Some((_, false)) => RegistryCopies::CitusElsewhere,
    };
    let reads = claim_plan::mark_reads(shape, took.wrote);
    let copies = citus.as_ref().map(|(c, _)| c);
    // this node's own copy, read without Citus (which may read another
    // copy): it is in every majority that granted this node a lease, so a
    // restart's floor covers them all
    let own_copy = match (reads.own_copy, copies) {
        (true, Some(c)) => Some(crate::citus::copies::mark_on_own_copy(
            client, c, id, epoch,
        )?),
        _ => None,
    };
    // a claim that wrote every copy reads every copy's mark as well: this
    // node's copy (or the one Citus read) may have missed leases that a
    // majority granted (a released row's last holder went on renewing
    // without it)
    let other_copies = match (reads.other_copies, copies) {
        (true, Some(c)) => Some(crate::citus::copies::highest_mark_on_other_copies(
            client, schema, c, id, epoch,
        )?),
        _ => None,
    };
    let marks = MarksRead {
        row,
        own_copy,
        other_copies,
    };
    Ok(claim_plan::continue_from(&marks, took))
}

/// The id's row mark, moved to the current epoch, and that epoch. No FOR
/// UPDATE: on a Citus reference table it locks on the first worker node
/// too, which may be down; a change of the row after this read fails the
/// guarded persist.
fn row_mark(client: &mut SpiClient, schema: &Schema, id: i64) -> Result<(i64, i64), JobError> {
    let row = client
        .update(&sql::worker_mark(schema), None, &[(id as i32).into()])
        .map_err(spi_err)?
        .first();
    let mark = row.get::<i64>(1).ok().flatten().unwrap_or(0);
    let mark_epoch = row.get::<i64>(2).ok().flatten();
    let epoch = crate::snowflake::functions::epoch();
    let mark = claim_plan::floor_for_epoch(mark, mark_epoch, epoch)
        .map_err(|e| JobError::new(PgSqlErrorCode::ERRCODE_DATA_CORRUPTED, e.describe(id)))?;
    Ok((mark, epoch))
}

/// After the claim's transaction: the floor (the persisted mark, this
/// lifetime's generator and leases), a wait for it, and the first persist.
fn finish_claim(cx: ClaimContext, took: &Took, from: Continue) -> Result<Claimed, JobError> {
    let sh = shared().expect("shared memory");
    let slot = sh.db(cx.db);
    let worker_id = took.worker_id;
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
    let floor = claim_plan::claim_floor(from.mark, kept).max(noted);
    let last = if same_id {
        slot.generator
            .last_issued_ms(crate::snowflake::functions::epoch())
            .unwrap_or(0)
    } else {
        0
    };
    // (a released id taken back in this lifetime waits too, rather than
    // refusing calls until the clock passes the floor)
    if !same_id || from.waits == Waits::ForRelease {
        wait_for_floor(floor);
    }
    // a claim that wrote through Citus renews through it as well (its own
    // uncommitted write locks every copy); one that only found its own row
    // (a restart of this data directory) needs a majority of the copies
    let (lease, _) = persist(
        cx.db,
        cx.schema,
        cx.catalog,
        worker_id,
        &cx.settings.node,
        clock_ms().max(floor).max(last).saturating_add(cx.ahead),
        match took.wrote {
            Wrote::Registry => Route::ThroughCitus,
            Wrote::Nothing => Route::CopyByCopy,
        },
    )?;
    Ok(Claimed {
        worker_id,
        floor,
        lease,
        same_id,
        configured: cx.settings.configured,
        node: cx.settings.node,
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
    let limit = watch_limit_ms();
    let behind = floor - clock_ms();
    if behind < 0 || behind > limit {
        return;
    }
    while clock_ms() <= floor {
        pgrx::check_for_interrupts!();
        crate::runtime::clock::wait_on_latch(Duration::from_millis(
            (floor - clock_ms()).clamp(MIN_WAIT_MS, MAX_WAIT_MS) as u64,
        ));
    }
}

/// The worker session's lock_timeout (`FORCED_SETTINGS`).
const WORKER_LOCK_TIMEOUT_MS: i64 = 5000;

/// How many heartbeat intervals a live holder may take to renew.
const RENEWALS_WATCHED: i64 = 2;

/// The longest and shortest single wait on the latch while watching a row
/// or the clock (interrupts are checked between waits).
const MAX_WAIT_MS: i64 = 100;
const MIN_WAIT_MS: i64 = 1;

/// How long a live holder may take to renew its lease: two heartbeat
/// intervals and a lock timeout.
fn watch_limit_ms() -> i64 {
    RENEWALS_WATCHED * settings::HEARTBEAT_INTERVAL.get() as i64 + WORKER_LOCK_TIMEOUT_MS
}

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
        crate::runtime::clock::wait_on_latch(Duration::from_millis(left.min(MAX_WAIT_MS) as u64));
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
