//! The segment worker's jobs: reserve ranges in `leaf_alloc` (each in its
//! own transaction), publish them to the tags' double buffers, and drop tags
//! whose rows are gone. On Citus, keep a reserve of ranges for refills while
//! a node is down (`segment::reserve`).
//! Owns the scheduling; the SQL of one refill is `segment::refill`'s, the file `segment::reserve_file`'s.

use crate::errors::code_of;
use crate::runtime::bgworker::WorkerContext;
use crate::runtime::clock::unix_us;
use crate::runtime::job::{JobError, explain_unreachable, spi_err};
use crate::runtime::shmem::{TagStatus, data_dir};
use crate::runtime::transaction::in_transaction;
use crate::runtime::worker_sql as sql;
use crate::segment::range_plan::Tuning;
use crate::segment::refill::{
    Durability, RefillConfig, Reserved, encoding_changed, lock_tag_row, read_tuned_step,
    remember_reserved, reserve, save_tuned_step, take_from_reserve,
};
use crate::segment::reserve::{self as local_reserve, Reserve};
use crate::segment::reserve_file::{load_reserve, reset_since_load, save_reserve};
use crate::segment::step::{PreviousRefill, StepPolicy};
use crate::settings;
use pgrx::prelude::*;
use pgrx::spi::Spi;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

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

impl Default for SegmentJobs {
    fn default() -> Self {
        Self::new()
    }
}

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
        self.reserve
            .get_or_insert_with(|| load_reserve(dboid))
            .clone()
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
                // (gone already: a reset removed it, and the refill's save
                // saw the reset)
                let removed =
                    match std::fs::remove_file(data_dir().join(local_reserve::file_name(dboid))) {
                        Ok(()) => true,
                        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
                    };
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
    // (a segment taken from the reserve, not a conversion from one: the
    // lint's `from_*` constructor convention does not apply)
    #[allow(clippy::wrong_self_convention)]
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
        let got = in_transaction(|schema, catalog| {
            take_from_reserve(schema, catalog, dboid, tag, previous_step, &mut kept)
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
        self.answer_unknown_tags(ctx);
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

    /// Answer the database's tags that wait for a first refill and have no
    /// row in leaf_alloc, all with one read: a caller who invents tag names
    /// costs the worker one lookup for all of them, not a refill
    /// transaction each (and so holds their slots for a round at most).
    /// Not while refills go to the Citus reserve first (a node may hang),
    /// and not for a single tag (its refill tells as cheaply).
    fn answer_unknown_tags(&mut self, ctx: &mut WorkerContext) {
        let sh = ctx.sh;
        if self
            .citus_failed_at
            .is_some_and(|t| t.elapsed() < RESERVE_FIRST_FOR)
        {
            return;
        }
        let waiting: Vec<(usize, u64, String)> = Self::my_slots(ctx)
            .into_iter()
            .filter_map(|i| {
                let slot = sh.tag(i);
                let _g = sh.lock_tag(i);
                (slot.dboid.load(SeqCst) == ctx.dboid
                    && slot.status() == TagStatus::Loading
                    && slot.refill_requested.load(SeqCst)
                    && !slot.refill_in_flight.load(SeqCst))
                .then(|| (i, slot.epoch.load(SeqCst), slot.tag()))
            })
            .collect();
        if waiting.len() < 2 {
            return;
        }
        let names: Vec<String> = waiting.iter().map(|(_, _, tag)| tag.clone()).collect();
        let found = in_transaction(|schema, _| {
            Spi::connect(|client| {
                let rows = client
                    .select(&sql::alloc_tags_among(schema), None, &[names.into()])
                    .map_err(spi_err)?;
                Ok(rows
                    .filter_map(|r| r.get::<Vec<u8>>(1).ok().flatten())
                    .collect::<HashSet<Vec<u8>>>())
            })
        });
        // a failed lookup leaves them to their refills, which say why
        let Ok(found) = found else { return };
        let mut answered = false;
        for (i, epoch, tag) in waiting {
            if found.contains(tag.as_bytes()) {
                continue;
            }
            let slot = sh.tag(i);
            let _g = sh.lock_tag(i);
            if slot.epoch.load(SeqCst) == epoch
                && slot.status() == TagStatus::Loading
                && !slot.refill_in_flight.load(SeqCst)
            {
                slot.refill_requested.store(false, SeqCst);
                slot.pair.retire();
                slot.status.store(TagStatus::Missing as u32, SeqCst);
                let e = crate::segment::refill::unknown_tag(&tag);
                slot.error.set(e.sqlstate, &e.message);
                answered = true;
            }
        }
        if answered {
            sh.broadcast(ctx.db);
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
        // within the slot's epoch every segment has one encoding (a row
        // deleted and inserted again with another domain in this server
        // lifetime: the epoch's first IDs were issued under the old one).
        // Only this worker sets it; the refill checks it before it writes.
        let slot_encoding = slot.encoding.get();
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
        // who may draw the tag, once its row was read: also for a refill
        // refused after that (a Postgres error too, which unwinds)
        let mut draw_role_seen = None;
        let result = from_reserve_first.unwrap_or_else(|| {
            in_transaction(|schema, catalog| {
                tuning = catalog.has_tuning();
                let tuned = match previous {
                    None if tuning => read_tuned_step(schema, &tag)?,
                    _ => None,
                };
                known_step = known_step.or(tuned);
                let cfg = RefillConfig {
                    schema,
                    catalog,
                    dboid: ctx.dboid,
                    tag: &tag,
                    reserved_end,
                    tuning: Tuning {
                        policy: Self::policy(),
                        previous,
                        tuned,
                    },
                    kept: &kept,
                    slot_encoding,
                };
                let locked = lock_tag_row(&cfg)?;
                draw_role_seen = Some(locked.draw_role);
                let r = reserve(&cfg, &locked)?;
                // remembered before the commit makes the range usable: if the
                // commit fails the mark only leaves a gap
                // (durable where this transaction records r.end in the
                // tag's leaf_alloc_encoding row: catalog 0.5.0 on)
                remember_reserved(ctx.dboid, &tag, r.end, Durability::of(catalog))?;
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
        // (again for a segment from the reserve, which has no transaction)
        let result = match result {
            Ok(r) if slot_encoding.is_some_and(|e| e != r.encoding) => Err(encoding_changed(&tag)),
            other => other,
        };
        {
            let _g = sh.lock_tag(i);
            slot.refill_in_flight.store(false, SeqCst);
            if slot.epoch.load(SeqCst) == epoch {
                match &result {
                    Ok(r) => {
                        if slot_encoding.is_none() {
                            // set before the publish: a caller that takes
                            // from the segment reads it after
                            slot.encoding.set(r.encoding);
                        }
                        // (also before the publish: the caller that takes
                        // from it checks it after its take)
                        slot.draw_role.store(r.draw_role, SeqCst);
                        // committed: only now may its IDs be handed out
                        let published = slot.pair.publish(target, r.start, r.len);
                        debug_assert!(published);
                        // what callers asked for while it was in flight,
                        // under this lock as they ask (a wait for an empty
                        // pair, the 10% mark of the segment this fills
                        // the other of), is answered: another request
                        // would reserve the next segment at once
                        slot.refill_requested.store(false, SeqCst);
                        slot.dynamic_step.store(r.step, SeqCst);
                        slot.table_step.store(r.table_step, SeqCst);
                        slot.refills.fetch_add(1, SeqCst);
                        slot.contention.store(false, SeqCst);
                        slot.last_refill_us.store(unix_us(), SeqCst);
                        slot.status.store(TagStatus::Active as u32, SeqCst);
                    }
                    Err(e) if e.sqlstate == code_of(PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT) => {
                        slot.pair.retire();
                        slot.status.store(TagStatus::Missing as u32, SeqCst);
                        slot.error.set(e.sqlstate, &e.message);
                    }
                    // a refill canceled or ended by the worker's own
                    // lock_timeout is retried (the waiting callers ask at
                    // once; a prefetch after FIRST_RETRY): the callers wait
                    // on for it, up to their timeout, which then says so
                    Err(e) if e.is_contention() => slot.contention.store(true, SeqCst),
                    Err(e) => {
                        // (the callers that may not draw the tag get 42501
                        // instead of the error)
                        if let Some(role) = draw_role_seen {
                            slot.draw_role.store(role, SeqCst);
                        }
                        let (code, message) = e.for_callers();
                        slot.error.set(code, &message)
                    }
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
        let tags = in_transaction(|schema, _| {
            Spi::connect(|client| {
                let rows = client
                    .select(&sql::alloc_tags(schema), None, &[])
                    .map_err(spi_err)?;
                Ok(rows
                    .filter_map(|r| r.get::<Vec<u8>>(1).ok().flatten())
                    .collect::<HashSet<Vec<u8>>>())
            })
        });
        let tags = match tags {
            Ok(t) => t,
            Err(e) => {
                // deleted tags keep their slots until a check succeeds: say so
                pgrx::warning!("leaf_id: the check for deleted tags failed: {}", e.message);
                ctx.note(&e);
                return;
            }
        };
        for i in Self::my_slots(ctx) {
            let slot = sh.tag(i);
            let _g = sh.lock_tag(i);
            if slot.dboid.load(SeqCst) == ctx.dboid
                && slot.status() == TagStatus::Active
                && !tags.contains(slot.tag().as_bytes())
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
