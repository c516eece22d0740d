//! The segment worker's jobs: reserve ranges in `leaf_alloc` (each in its
//! own transaction), publish them to the tags' double buffers, and drop tags
//! whose rows are gone. On Citus, keep a reserve of ranges for refills while
//! a node is down (`segment::reserve`).

use crate::backend::database_exists;
use crate::clock::unix_us;
use crate::errors::code_of;
use crate::runtime::worker_sql::{self as sql, Schema, Table};
use crate::segment::buffer::MAX_SEGMENT_LEN;
use crate::segment::reserve::{self as local_reserve, NoRange, Reserve};
use crate::segment::step::{PreviousRefill, StepPolicy};
use crate::settings;
use crate::shmem::{TagStatus, data_dir, shared};
use crate::transaction::{JobError, explain_unreachable, in_transaction, spi_err};
use crate::worker::WorkerContext;
use pgrx::prelude::*;
use pgrx::spi::Spi;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

struct Reserved {
    start: i64,
    len: i64,
    step: i64,
    table_step: i64,
    /// The end of everything the reservation recorded in `leaf_alloc`.
    end: i64,
    /// On Citus: the range reserved beyond the segment, for this server's
    /// reserve, and leaf_alloc's OID.
    extra: Option<(u32, (i64, i64))>,
    /// The tag's row was below this server's reservations: drop its reserve.
    drop_kept: bool,
}

/// leaf_alloc's OID (the reserve is bound to the table it came from).
fn alloc_table_oid(client: &mut pgrx::spi::SpiClient, schema: &Schema) -> Result<u32, JobError> {
    sql::table_oid(client, schema, Table::Alloc)?
        .map(|o| o.to_u32())
        .ok_or_else(|| {
            JobError::new(
                PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
                "leaf_id's leaf_alloc is not in the extension's schema",
            )
        })
}

fn reserve_io_error(e: std::io::Error) -> JobError {
    JobError::new(
        PgSqlErrorCode::ERRCODE_IO_ERROR,
        format!("leaf_id could not write its segment reserve file: {e}"),
    )
}

/// `leaf_id_reset_cache()`'s count of resets when this worker last read the
/// reserve file (one segment worker per database and process).
static RESETS_AT_LOAD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn resets(dboid: u32) -> u64 {
    shared().map_or(0, |sh| sh.reserve_resets(dboid))
}

/// The record outside the data directory of the database's reserve file.
fn reserve_record(dboid: u32) -> Option<crate::owner_file::BootRecord> {
    crate::shmem::boot_record(&format!("reserve{dboid}"))
}

/// The database's reserve as its file says: for this lifetime's token, the
/// write the record names, and no reset during or after the read.
fn load_reserve(dboid: u32) -> Reserve {
    let token = shared().expect("shared memory").owner_token();
    let before = resets(dboid);
    RESETS_AT_LOAD.store(before, SeqCst);
    if before % 2 == 1 {
        return Reserve::new(token); // a reset is removing the file
    }
    let recorded = reserve_record(dboid).and_then(|r| r.read());
    let kept = local_reserve::load(&data_dir(), dboid, token, recorded);
    if resets(dboid) != before {
        return Reserve::new(token);
    }
    kept
}

/// Whether `leaf_id_reset_cache()` ran since the file was read.
fn reset_since_load(dboid: u32) -> bool {
    resets(dboid) != RESETS_AT_LOAD.load(SeqCst)
}

/// Write the reserve with a fresh nonce, the record first (a crash between
/// the two leaves a file the record does not name: void, its ranges gaps);
/// unless a reset came after it was read: then the file the reset removed
/// must not come back, and its ranges are not used.
fn save_reserve(dboid: u32, reserve: &Reserve) -> Result<(), JobError> {
    let nonce = crate::shmem::random_nonce();
    let saved = match reserve_record(dboid) {
        None => Err(std::io::Error::other(
            "no record outside the data directory can be kept (the boot cannot be told)",
        )),
        Some(record) => record
            .write(nonce)
            .and_then(|()| local_reserve::save(&data_dir(), dboid, reserve, nonce)),
    }
    .map_err(reserve_io_error);
    if reset_since_load(dboid) {
        let _ = std::fs::remove_file(data_dir().join(local_reserve::file_name(dboid)));
        return Err(JobError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "the segment reserve was reset by leaf_id_reset_cache() during the refill".to_string(),
        ));
    }
    saved
}

/// Reserve the next range of a tag: `[max_id, max_id + n)`, never below the
/// end of what this server lifetime already reserved for the tag
/// (`reserved_end`): a row deleted and inserted again, or a `max_id` moved
/// back, cannot make a range overlap one already handed to callers.
#[allow(clippy::too_many_arguments)]
fn reserve(
    schema: &Schema,
    dboid: u32,
    tag: &str,
    reserved_end: i64,
    policy: StepPolicy,
    previous: Option<PreviousRefill>,
    tuned: Option<i64>,
    kept: &Reserve,
) -> Result<Reserved, JobError> {
    Spi::connect_mut(|client| {
        // A write, not SELECT ... FOR UPDATE, locks the row: on a Citus
        // reference table a FOR UPDATE locks only this node's copy, while a
        // write is serialized with the writes of every other node, so the
        // max_id it returns is the latest one (a stale read there reserved
        // one range on two nodes).
        let row = client
            .update(&sql::alloc_lock_row(schema), None, &[tag.into()])
            .map_err(spi_err)?;
        if row.is_empty() {
            let exists = client
                .select(&sql::alloc_row_exists(schema), None, &[tag.into()])
                .map_err(spi_err)?
                .len()
                > 0;
            if exists {
                return Err(not_recorded(
                    tag,
                    "the row could not be locked by an update",
                ));
            }
            return Err(JobError::new(
                PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                format!("leaf_id tag \"{tag}\" does not exist in leaf_alloc"),
            ));
        }
        let row = row.first();
        let max_id: i64 = row.get(1).ok().flatten().unwrap_or(-1);
        let table_step: i64 = row.get::<i32>(2).ok().flatten().map(i64::from).unwrap_or(0);
        if table_step < 1 {
            return Err(JobError::new(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("leaf_alloc.step of tag \"{tag}\" is {table_step}; it must be at least 1"),
            ));
        }
        if max_id < 0 {
            return Err(JobError::new(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("leaf_alloc.max_id of tag \"{tag}\" is {max_id}; it must not be negative"),
            ));
        }
        let start = if max_id < reserved_end {
            pgrx::warning!(
                "leaf_id: leaf_alloc.max_id of tag \"{}\" is {}, below {} that this server already reserved for it; the reservation starts at {}",
                tag,
                max_id,
                reserved_end,
                reserved_end
            );
            reserved_end
        } else {
            max_id
        };
        let step = match previous {
            Some(_) => policy.next_step(table_step, previous),
            None => policy.first_step(table_step, tuned),
        };
        let room = i64::MAX - start;
        if room == 0 {
            return Err(JobError::new(
                PgSqlErrorCode::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                format!("leaf_id tag \"{tag}\" has reached the largest bigint: no IDs are left"),
            ));
        }
        let len = step.min(MAX_SEGMENT_LEN).min(room);
        // on Citus, top this server's reserve up to leaf_id.citus_reserve
        // segments of this step, in the same reservation
        let citus_oid = if !crate::transaction::catalog_is_legacy()
            && crate::citus_copies::is_citus_table(client, schema, Table::Alloc)?
        {
            Some(alloc_table_oid(client, schema)?)
        } else {
            None
        };
        // a row below this server's reservations (deleted and inserted
        // again, or moved back) voids its reserve: others may hand those
        // IDs out now
        let drop_kept = citus_oid.is_some_and(|oid| max_id < kept.reserved_through(tag, oid));
        if drop_kept {
            // written before the commit, as a take from the reserve is: a
            // crash after the commit must not leave the file serving ranges
            // that the moved-back row lets other nodes hand out
            let mut dropped = kept.clone();
            dropped.drop_tag(tag);
            save_reserve(dboid, &dropped)?;
            pgrx::warning!(
                "leaf_id: the reserve of tag \"{}\" was dropped: leaf_alloc.max_id is below the ranges this server reserved (the row was moved back, or deleted and inserted again)",
                tag
            );
        }
        let target = settings::CITUS_RESERVE.get() as i64;
        let extra = match citus_oid {
            Some(oid) if target > 0 => {
                let left = if drop_kept {
                    0
                } else {
                    kept.remaining(tag, oid)
                };
                let missing = target
                    .saturating_mul(len)
                    .saturating_sub(left)
                    .clamp(0, room - len);
                (missing > 0).then_some((oid, missing))
            }
            _ => None,
        };
        let end = start + len + extra.map_or(0, |(_, n)| n);
        // exactly this row must now say `end`: a trigger that skips or
        // changes the update, or a rule, must not let a range be published
        // that the table did not record
        // the row is locked (above): every copy of it must still say
        // `max_id`, or the statement fails (guard_api; a 0.1.0 catalog has
        // no guard function and matches in the WHERE clause)
        let updated = client
            .update(
                &sql::alloc_record_end(schema, crate::transaction::catalog_is_legacy()),
                None,
                &[tag.into(), end.into(), max_id.into()],
            )
            .map_err(spi_err)?;
        let returned: Vec<Option<i64>> = updated.map(|r| r.get::<i64>(1).ok().flatten()).collect();
        let recorded = client
            .select(&sql::alloc_max_id(schema), None, &[tag.into()])
            .map_err(spi_err)?
            .map(|r| r.get::<i64>(1).ok().flatten())
            .collect::<Vec<_>>();
        if returned != [Some(end)] || recorded != [Some(end)] {
            return Err(not_recorded(
                tag,
                &format!(
                    "max_id should be {end}; the update returned {returned:?}, the row has {recorded:?}"
                ),
            ));
        }
        Ok(Reserved {
            start,
            len,
            step,
            table_step,
            end,
            extra: extra.map(|(oid, _)| (oid, (start + len, end))),
            drop_kept,
        })
    })
}

/// A segment from this server's reserve, without Citus (a refill through
/// it failed): None if there is no reserve, or it is used up, or the tag's
/// row in this node's copy of `leaf_alloc` is no longer the one it was
/// reserved from. The reserve file is written before the commit, so its
/// range is never handed out twice, at worst lost.
fn take_from_reserve(
    schema: &Schema,
    dboid: u32,
    tag: &str,
    previous_step: Option<i64>,
    kept: &mut Reserve,
) -> Result<Option<Reserved>, JobError> {
    Spi::connect_mut(|client| {
        let Some(copies) = crate::citus_copies::of_reference_table(client, schema, Table::Alloc)?
        else {
            return Ok(None);
        };
        let oid = alloc_table_oid(client, schema)?;
        // this node's copy, read without Citus
        let row = client
            .select(&sql::shard_alloc_row(copies.shard()), None, &[tag.into()])
            .map_err(spi_err)?;
        let (max_id, table_step) = match row.into_iter().next() {
            Some(r) => (
                r.get::<i64>(1).map_err(spi_err)?,
                r.get::<i32>(2).map_err(spi_err)?.map_or(1, i64::from),
            ),
            None => (None, 1),
        };
        let want = previous_step.unwrap_or(table_step).max(1);
        match kept.take(tag, oid, max_id, want) {
            Ok((start, len)) => {
                save_reserve(dboid, kept)?;
                remember_reserved(dboid, tag, start + len)?;
                Ok(Some(Reserved {
                    start,
                    len,
                    step: want,
                    table_step,
                    end: start + len,
                    extra: None,
                    drop_kept: false,
                }))
            }
            Err(NoRange::RowChanged) => {
                pgrx::warning!(
                    "leaf_id: the reserve of tag \"{}\" was dropped: the tag's row in leaf_alloc is not the one it was reserved from (max_id {:?})",
                    tag,
                    max_id
                );
                save_reserve(dboid, kept)?;
                Ok(None)
            }
            Err(NoRange::Empty) => Ok(None),
        }
    })
}

fn not_recorded(tag: &str, detail: &str) -> JobError {
    JobError::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "leaf_id could not record the reservation of tag \"{tag}\" in leaf_alloc ({detail}): a trigger or rule on leaf_alloc changed or skipped it, and no ID is handed out that the table has not recorded"
        ),
    )
}

/// A slot whose refill failed: when its prefetch may be tried again.
struct Backoff {
    retry_at: Instant,
    delay: Duration,
    last_logged: Instant,
}

const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(10);
const LOG_EVERY: Duration = Duration::from_secs(60);

/// The worker's segment jobs, and what it remembers between them.
pub struct SegmentJobs {
    /// per (slot, epoch): what its last refill used and when (dynamic step)
    previous: HashMap<(usize, u64), (PreviousRefill, Instant)>,
    /// per (slot, epoch) whose last refill failed: its prefetch is retried
    /// with a growing delay (a caller's request is served at once)
    failed: HashMap<(usize, u64), Backoff>,
    last_resync: Instant,
    /// This server's reserve for the database (Citus), loaded on first use.
    reserve: Option<Reserve>,
    /// When a refill through Citus last failed and the reserve served: for
    /// a while refills go to the reserve first.
    citus_failed_at: Option<Instant>,
    /// The reserve file could neither be written nor removed.
    reserve_unusable: bool,
}

/// How long refills use the reserve first after a refill through Citus
/// failed (a node that hangs would cost each one the connect timeout).
const RESERVE_FIRST_FOR: Duration = Duration::from_secs(5);

impl SegmentJobs {
    pub fn new() -> SegmentJobs {
        SegmentJobs {
            previous: HashMap::new(),
            failed: HashMap::new(),
            last_resync: Instant::now(),
            reserve: None,
            citus_failed_at: None,
            reserve_unusable: false,
        }
    }

    /// The database's reserve, as its file says (this lifetime's token).
    fn kept_reserve(&mut self, dboid: u32) -> Reserve {
        if reset_since_load(dboid) {
            self.reserve = None;
        }
        self.reserve.get_or_insert_with(|| load_reserve(dboid)).clone()
    }

    /// After a committed reservation: add its extra range to the reserve
    /// (a drop of the tag's reserve was written before the commit).
    fn keep_extra(&mut self, dboid: u32, tag: &str, r: &Reserved) {
        if !r.drop_kept && r.extra.is_none() {
            return;
        }
        let mut kept = self.kept_reserve(dboid);
        if r.drop_kept {
            kept.drop_tag(tag); // written before the commit already
        }
        if let Some((oid, range)) = r.extra {
            kept.add(tag, oid, range, r.end);
        }
        match save_reserve(dboid, &kept) {
            Ok(()) => self.reserve = Some(kept),
            Err(e) => {
                // the old file must not serve a dropped reserve: remove it
                // (its ranges become gaps), or use no reserve any more
                let removed =
                    std::fs::remove_file(data_dir().join(local_reserve::file_name(dboid))).is_ok();
                pgrx::warning!(
                    "leaf_id: could not write the segment reserve file for tag \"{}\": {}; {}",
                    tag,
                    e.message,
                    if removed {
                        "the reserve of this database is dropped"
                    } else {
                        "no refill of this database comes from the reserve until the worker restarts"
                    }
                );
                self.reserve = None;
                self.reserve_unusable = !removed;
            }
        }
    }

    /// A segment from the reserve, in a transaction of its own.
    fn from_reserve(
        &mut self,
        dboid: u32,
        tag: &str,
        previous_step: Option<i64>,
    ) -> Option<Result<Reserved, JobError>> {
        if settings::CITUS_RESERVE.get() == 0 || self.reserve_unusable {
            return None;
        }
        let mut kept = self.kept_reserve(dboid);
        let got = in_transaction(|schema| {
            take_from_reserve(schema, dboid, tag, previous_step, &mut kept)
        });
        // the file is the truth: a failed write left the range in it
        self.reserve = None;
        got.transpose()
    }

    fn policy() -> StepPolicy {
        StepPolicy {
            segment_duration: Duration::from_secs(settings::SEGMENT_DURATION.get() as u64),
            max_step: settings::MAX_STEP.get() as i64,
        }
    }

    /// One round: the refills that are due (no new one once `budget` has
    /// passed: the rest waits for the next round, after the worker has
    /// looked at a terminate or reload), and the resync when it is due.
    pub fn run(&mut self, ctx: &mut WorkerContext, budget: Duration) {
        self.refill_all_needed(ctx, Instant::now() + budget);
        let interval = Duration::from_secs(settings::TAG_RESYNC_INTERVAL.get() as u64);
        if self.last_resync.elapsed() >= interval {
            self.resync(ctx);
        }
    }

    /// How long the worker may sleep before a failed prefetch is due.
    pub fn next_due(&self) -> Option<Duration> {
        self.failed
            .values()
            .map(|b| b.retry_at.saturating_duration_since(Instant::now()))
            .min()
    }

    fn my_slots(ctx: &WorkerContext) -> Vec<usize> {
        let sh = ctx.sh;
        (0..sh.n_tags())
            .filter(|&i| sh.tag(i).dboid.load(SeqCst) == ctx.dboid)
            .collect()
    }

    fn refill_all_needed(&mut self, ctx: &mut WorkerContext, stop_at: Instant) {
        for i in Self::my_slots(ctx) {
            if Instant::now() >= stop_at {
                ctx.more_work = true;
                break;
            }
            let slot = ctx.sh.tag(i);
            let retry_due = self
                .failed
                .get(&(i, slot.epoch.load(SeqCst)))
                .is_none_or(|b| Instant::now() >= b.retry_at);
            let wanted = match slot.status() {
                TagStatus::Loading | TagStatus::Active => {
                    slot.refill_requested.load(SeqCst) || (retry_due && slot.pair.wants_prefetch())
                }
                _ => false,
            };
            if wanted {
                self.refill(ctx, i);
            }
        }
    }

    /// One refill of one slot, if it still needs one.
    fn refill(&mut self, ctx: &mut WorkerContext, i: usize) {
        let sh = ctx.sh;
        let slot = sh.tag(i);
        let (target, tag, epoch) = {
            let _g = sh.lock_tag(i);
            if slot.dboid.load(SeqCst) != ctx.dboid || slot.status() == TagStatus::Missing {
                return;
            }
            slot.refill_requested.store(false, SeqCst);
            let Some(target) = slot.pair.refill_target() else {
                return;
            };
            slot.refill_in_flight.store(true, SeqCst);
            (target, slot.tag(), slot.epoch.load(SeqCst))
        };
        let previous = self
            .previous
            .get(&(i, epoch))
            .map(|(p, at)| PreviousRefill {
                elapsed: at.elapsed(),
                ..*p
            });
        let reserved_end = sh.reserved_end(ctx.dboid, &tag);
        let mut tuning = false;
        let mut known_step = previous.map(|p| p.step);
        let kept = self.kept_reserve(ctx.dboid);
        let reserve_first = self
            .citus_failed_at
            .is_some_and(|t| t.elapsed() < RESERVE_FIRST_FOR);
        // a reserve that cannot serve (used up, or its file not written)
        // leaves the refill to Citus
        let from_reserve_first = if reserve_first {
            match self.from_reserve(ctx.dboid, &tag, known_step) {
                Some(Err(e)) => {
                    warn_reserve_failed(&tag, &e);
                    None
                }
                got => got,
            }
        } else {
            None
        };
        let served_by_reserve = from_reserve_first.is_some();
        let result = from_reserve_first.unwrap_or_else(|| {
            in_transaction(|schema| {
                tuning = !crate::transaction::catalog_is_legacy();
                let tuned = match previous {
                    None if tuning => read_tuned_step(schema, &tag)?,
                    _ => None,
                };
                known_step = known_step.or(tuned);
                let r = reserve(
                    schema,
                    ctx.dboid,
                    &tag,
                    reserved_end,
                    Self::policy(),
                    previous,
                    tuned,
                    &kept,
                )?;
                // remembered before the commit makes the range usable: if the
                // commit fails the mark only leaves a gap
                remember_reserved(ctx.dboid, &tag, r.end)?;
                Ok(r)
            })
            .map_err(|e| explain_unreachable(e, &format!("refill tag \"{tag}\""), "leaf_alloc"))
        });
        if !served_by_reserve && kept.has_tag(&tag) {
            // the refill may have written the file (a dropped reserve of
            // the tag) and then failed: the file is the truth
            self.reserve = None;
        }
        let result = match result {
            Ok(r) => {
                if !served_by_reserve {
                    crate::settings::fault_point("after_refill_commit");
                    if self.citus_failed_at.take().is_some() {
                        pgrx::log!("leaf_id: refills through Citus work again");
                    }
                    self.keep_extra(ctx.dboid, &tag, &r);
                }
                Ok(r)
            }
            // a node unreachable, or its refill holding the shard: the
            // reserve serves (its IDs are this server's alone)
            Err(e) if !served_by_reserve && reserve_may_serve(&e) => {
                match self.from_reserve(ctx.dboid, &tag, known_step) {
                    Some(Ok(r)) => {
                        if self.citus_failed_at.replace(Instant::now()).is_none() {
                            pgrx::log!(
                                "leaf_id: a refill through Citus failed ({}); refills come from this server's reserve",
                                e.message
                            );
                        }
                        Ok(r)
                    }
                    Some(Err(reserve_error)) => {
                        warn_reserve_failed(&tag, &reserve_error);
                        Err(e)
                    }
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        {
            let _g = sh.lock_tag(i);
            slot.refill_in_flight.store(false, SeqCst);
            if slot.epoch.load(SeqCst) == epoch {
                match &result {
                    Ok(r) => {
                        // committed: only now may its IDs be handed out
                        let published = slot.pair.publish(target, r.start, r.len);
                        debug_assert!(published);
                        slot.dynamic_step.store(r.step, SeqCst);
                        slot.table_step.store(r.table_step, SeqCst);
                        slot.refills.fetch_add(1, SeqCst);
                        slot.last_refill_us.store(unix_us(), SeqCst);
                        slot.status.store(TagStatus::Active as u32, SeqCst);
                    }
                    Err(e) if e.sqlstate == code_of(PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT) => {
                        slot.pair.retire();
                        slot.status.store(TagStatus::Missing as u32, SeqCst);
                        slot.error.set(e.sqlstate, &e.message);
                    }
                    Err(e) => slot.error.set(e.sqlstate, &e.message),
                }
            }
        }
        match result {
            Ok(r) => {
                if tuning && known_step != Some(r.step) {
                    save_tuned_step(&tag, r.step);
                }
                if self.failed.remove(&(i, epoch)).is_some() {
                    pgrx::log!("leaf_id: refill of tag \"{}\" works again", tag);
                }
                self.previous.insert(
                    (i, epoch),
                    (
                        PreviousRefill {
                            step: r.step,
                            table_step: r.table_step,
                            elapsed: Duration::ZERO,
                        },
                        Instant::now(),
                    ),
                );
            }
            Err(e) => {
                ctx.note(&e);
                let now = Instant::now();
                let log = match self.failed.get_mut(&(i, epoch)) {
                    Some(b) => {
                        b.delay = (b.delay * 2).min(MAX_RETRY);
                        b.retry_at = now + b.delay;
                        let due = b.last_logged.elapsed() >= LOG_EVERY;
                        if due {
                            b.last_logged = now;
                        }
                        due
                    }
                    None => {
                        self.failed.insert(
                            (i, epoch),
                            Backoff {
                                retry_at: now + FIRST_RETRY,
                                delay: FIRST_RETRY,
                                last_logged: now,
                            },
                        );
                        true
                    }
                };
                if log {
                    pgrx::warning!(
                        "leaf_id: refill of tag \"{}\" failed: {} (retried with backoff)",
                        tag,
                        e.message
                    );
                }
            }
        }
        sh.broadcast(ctx.db);
    }

    /// Drop cached tags whose rows are gone from leaf_alloc.
    fn resync(&mut self, ctx: &mut WorkerContext) {
        let sh = ctx.sh;
        self.last_resync = Instant::now();
        let tags = in_transaction(|schema| {
            Spi::connect(|client| {
                let rows = client
                    .select(&sql::alloc_tags(schema), None, &[])
                    .map_err(spi_err)?;
                Ok(rows
                    .filter_map(|r| r.get::<String>(1).ok().flatten())
                    .collect::<HashSet<String>>())
            })
        });
        let tags = match tags {
            Ok(t) => t,
            Err(e) => {
                ctx.note(&e);
                return;
            }
        };
        for i in Self::my_slots(ctx) {
            let slot = sh.tag(i);
            let _g = sh.lock_tag(i);
            if slot.dboid.load(SeqCst) == ctx.dboid
                && slot.status() == TagStatus::Active
                && !tags.contains(&slot.tag())
            {
                slot.pair.retire();
                slot.status.store(TagStatus::Missing as u32, SeqCst);
                slot.error.set(
                    code_of(PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT),
                    &format!("leaf_id tag \"{}\" was deleted from leaf_alloc", slot.tag()),
                );
            }
        }
        self.previous
            .retain(|(i, epoch), _| sh.tag(*i).epoch.load(SeqCst) == *epoch);
        self.failed
            .retain(|(i, epoch), _| sh.tag(*i).epoch.load(SeqCst) == *epoch);
        sh.broadcast(ctx.db);
    }
}

fn warn_reserve_failed(tag: &str, e: &JobError) {
    pgrx::warning!(
        "leaf_id: the segment reserve could not serve tag \"{}\": {}",
        tag,
        e.message
    );
}

/// Errors after which a refill may come from the reserve: a node with a
/// copy of leaf_alloc unreachable (class 08), or a lock not granted in time
/// (55P03: another node's refill that waits for a node that hangs holds the
/// shard).
fn reserve_may_serve(e: &JobError) -> bool {
    e.is_connection_exception() || e.sqlstate == code_of(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE)
}

/// The step the tag's refills used before this server lifetime (Leaf #111).
fn read_tuned_step(schema: &Schema, tag: &str) -> Result<Option<i64>, JobError> {
    Spi::connect(|client| {
        let rows = client
            .select(&sql::tuned_step(schema), None, &[tag.into()])
            .map_err(spi_err)?;
        Ok(rows
            .filter_map(|r| r.get::<i32>(1).ok().flatten())
            .map(i64::from)
            .next())
    })
}

/// Persist a changed step, in a transaction of its own after the refill's
/// commit: the step only tunes refills, so a failure here (a lock, a
/// trigger) is a WARNING and never stops a refill.
fn save_tuned_step(tag: &str, step: i64) {
    let step = step.min(i32::MAX as i64) as i32;
    let result = in_transaction(|schema| {
        Spi::connect_mut(|client| {
            client
                .update(
                    &sql::save_tuned_step(schema),
                    None,
                    &[tag.into(), step.into()],
                )
                .map(|_| ())
                .map_err(spi_err)
        })
    });
    if let Err(e) = result {
        pgrx::warning!(
            "leaf_id: could not persist the tuned step of tag \"{}\": {}",
            tag,
            e.message
        );
    }
}

/// Record the end of a reservation in shared memory (inside its transaction).
fn remember_reserved(dboid: u32, tag: &str, end: i64) -> Result<(), JobError> {
    let sh = shared().expect("shared memory");
    if sh.record_reserved(dboid, tag, end).is_ok()
        || (sh.forget_marks_of_dropped_databases(database_exists)
            && sh.record_reserved(dboid, tag, end).is_ok())
    {
        return Ok(());
    }
    Err(JobError::new(
        PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        format!(
            "leaf_id cannot remember the reserved ranges of another tag: all {} marks (4 per leaf_id.max_tags, at least 16384) are in use by tags of this server lifetime; raise leaf_id.max_tags and restart the server",
            sh.n_marks()
        ),
    ))
}
