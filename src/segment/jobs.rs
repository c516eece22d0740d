//! The segment worker's jobs: reserve ranges in `leaf_alloc` (each in its
//! own transaction), publish them to the tags' double buffers, and drop tags
//! whose rows are gone. On Citus, keep a reserve of ranges for refills while
//! a node is down (`segment::reserve`).
//! Owns the scheduling; the SQL of one refill is `segment::refill`'s, the file `segment::reserve_file`'s.

use crate::errors::code_of;
use crate::runtime::bgworker::WorkerContext;
use crate::runtime::clock::unix_us;
use crate::runtime::job_error::{JobError, explain_unreachable, spi_err};
use crate::runtime::shmem::{TagSlot, TagStatus, data_dir};
use crate::runtime::transaction::in_transaction;
use crate::runtime::worker_sql as sql;
use crate::segment::opaque::Domain;
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

    /// One refill of one slot, if it still needs one: take it on, reserve
    /// a range (from leaf_alloc, or from this server's reserve on Citus),
    /// publish it or the error to the slot, remember how it went.
    fn refill(&mut self, ctx: &mut WorkerContext, i: usize) {
        let Some(job) = self.take_on(ctx, i) else {
            return;
        };
        let (result, attempt) = self.reserve_range(ctx, &job);
        // (again for a segment from the reserve, which has no transaction)
        let result = match result {
            Ok(r) if job.encoding.is_some_and(|e| e != r.encoding) => {
                Err(encoding_changed(&job.tag))
            }
            other => other,
        };
        publish(ctx, &job, &result, attempt.draw_role_seen);
        match result {
            Ok(r) => self.remember_refill(&job, &r, attempt.tuning, attempt.known_step),
            Err(e) => {
                ctx.note(&e);
                self.back_off(&job, &e);
            }
        }
        ctx.sh.broadcast(ctx.db);
    }

    /// The slot's refill, taken on (its `refill_in_flight` set) if the slot
    /// is still this database's, its tag known, and a segment of its pair
    /// empty.
    fn take_on(&self, ctx: &WorkerContext, i: usize) -> Option<RefillJob> {
        let sh = ctx.sh;
        let slot = sh.tag(i);
        let (target, tag, epoch) = {
            let _g = sh.lock_tag(i);
            if slot.dboid.load(SeqCst) != ctx.dboid || slot.status() == TagStatus::Missing {
                return None;
            }
            slot.refill_requested.store(false, SeqCst);
            let target = slot.pair.refill_target()?;
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
        Some(RefillJob {
            slot: i,
            target,
            reserved_end: sh.reserved_end(ctx.dboid, &tag),
            tag,
            epoch,
            // within the slot's epoch every segment has one encoding (a row
            // deleted and inserted again with another domain in this server
            // lifetime: the epoch's first IDs were issued under the old one).
            // Only this worker sets it; the refill checks it before it writes.
            encoding: slot.encoding.get(),
            previous,
        })
    }

    /// The job's range: from leaf_alloc, or on Citus from this server's
    /// reserve while refills through Citus fail (first, for a while after
    /// one failed; or instead of one that just failed).
    fn reserve_range(
        &mut self,
        ctx: &WorkerContext,
        job: &RefillJob,
    ) -> (Result<Reserved, JobError>, Attempt) {
        let mut attempt = Attempt {
            known_step: job.previous.map(|p| p.step),
            tuning: false,
            draw_role_seen: None,
        };
        let kept = self.kept_reserve(ctx.dboid);
        if let Some(r) = self.reserve_first(ctx.dboid, &job.tag, attempt.known_step) {
            return (Ok(r), attempt);
        }
        let result = reserve_in_table(ctx, job, &kept, &mut attempt);
        if kept.has_tag(&job.tag) {
            // the refill may have written the file (a dropped reserve of
            // the tag) and then failed: the file is the truth
            self.reserve = None;
        }
        let result = match result {
            Ok(r) => {
                crate::settings::fault_point("after_refill_commit");
                if self.citus_failed_at.take().is_some() {
                    pgrx::log!("leaf_id: refills through Citus work again");
                }
                self.keep_extra(ctx.dboid, &job.tag, &r);
                Ok(r)
            }
            Err(e) if reserve_may_serve(&e) => {
                match self.reserve_instead(ctx.dboid, &job.tag, attempt.known_step, &e) {
                    Some(r) => Ok(r),
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        (result, attempt)
    }

    /// A segment from the reserve while refills go to it first (a refill
    /// through Citus failed less than `RESERVE_FIRST_FOR` ago). A reserve
    /// that cannot serve (used up, or its file not written) leaves the
    /// refill to Citus.
    fn reserve_first(
        &mut self,
        dboid: u32,
        tag: &str,
        known_step: Option<i64>,
    ) -> Option<Reserved> {
        let first = self
            .citus_failed_at
            .is_some_and(|t| t.elapsed() < RESERVE_FIRST_FOR);
        if !first {
            return None;
        }
        match self.from_reserve(dboid, tag, known_step)? {
            Ok(r) => Some(r),
            Err(e) => {
                warn_reserve_failed(tag, &e);
                None
            }
        }
    }

    /// A node unreachable, or its refill holding the shard (`e`): a segment
    /// from the reserve instead (its IDs are this server's alone), if it
    /// has one.
    fn reserve_instead(
        &mut self,
        dboid: u32,
        tag: &str,
        known_step: Option<i64>,
        e: &JobError,
    ) -> Option<Reserved> {
        match self.from_reserve(dboid, tag, known_step)? {
            Ok(r) => {
                if self.citus_failed_at.replace(Instant::now()).is_none() {
                    pgrx::log!(
                        "leaf_id: a refill through Citus failed ({}); refills come from this server's reserve",
                        e.message
                    );
                }
                Some(r)
            }
            Err(reserve_error) => {
                warn_reserve_failed(tag, &reserve_error);
                None
            }
        }
    }

    /// After a published refill: its step, for the next one's (and the
    /// table's tuned step when it changed), and the end of its backoff.
    fn remember_refill(
        &mut self,
        job: &RefillJob,
        r: &Reserved,
        tuning: bool,
        known_step: Option<i64>,
    ) {
        if tuning && known_step != Some(r.step) {
            save_tuned_step(&job.tag, r.step);
        }
        let key = (job.slot, job.epoch);
        if self.failed.remove(&key).is_some() {
            pgrx::log!("leaf_id: refill of tag \"{}\" works again", job.tag);
        }
        let done = PreviousRefill {
            step: r.step,
            table_step: r.table_step,
            elapsed: Duration::ZERO,
        };
        self.previous.insert(key, (done, Instant::now()));
    }

    /// After a failed refill: its prefetch is tried again after a delay
    /// that doubles up to `MAX_RETRY`, and the failure is logged at most
    /// every `LOG_EVERY`.
    fn back_off(&mut self, job: &RefillJob, e: &JobError) {
        let now = Instant::now();
        let log = match self.failed.get_mut(&(job.slot, job.epoch)) {
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
                let first = Backoff {
                    retry_at: now + FIRST_RETRY,
                    delay: FIRST_RETRY,
                    last_logged: now,
                };
                self.failed.insert((job.slot, job.epoch), first);
                true
            }
        };
        if log {
            pgrx::warning!(
                "leaf_id: refill of tag \"{}\" failed: {} (retried with backoff)",
                job.tag,
                e.message
            );
        }
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

/// A refill the worker took on: the slot, which segment of its pair the
/// range fills, and what the slot said when it was taken.
struct RefillJob {
    slot: usize,
    target: usize,
    tag: String,
    epoch: u64,
    /// The slot's encoding in its epoch (`None`: no segment yet).
    encoding: Option<Option<Domain>>,
    /// The tag's last refill by this worker, in this epoch.
    previous: Option<PreviousRefill>,
    /// This server's mark of the tag's reservations (`Shared::reserved_end`).
    reserved_end: i64,
}

/// What a refill's reservation learned on the way to its range or error.
struct Attempt {
    /// The step of the tag's last refill: this worker's, or the table's
    /// tuned step.
    known_step: Option<i64>,
    /// The catalog keeps tuned steps (`Catalog::has_tuning`).
    tuning: bool,
    /// Who may draw the tag, once its row was read: also for a refill
    /// refused after that (a Postgres error too, which unwinds).
    draw_role_seen: Option<u32>,
}

/// The job's range from leaf_alloc, in a transaction of its own. The mark
/// of the reservation is remembered before the commit makes the range
/// usable: if the commit fails it only leaves a gap.
fn reserve_in_table(
    ctx: &WorkerContext,
    job: &RefillJob,
    kept: &Reserve,
    attempt: &mut Attempt,
) -> Result<Reserved, JobError> {
    in_transaction(|schema, catalog| {
        attempt.tuning = catalog.has_tuning();
        let tuned = match job.previous {
            None if attempt.tuning => read_tuned_step(schema, &job.tag)?,
            _ => None,
        };
        attempt.known_step = attempt.known_step.or(tuned);
        let cfg = RefillConfig {
            schema,
            catalog,
            dboid: ctx.dboid,
            tag: &job.tag,
            reserved_end: job.reserved_end,
            tuning: Tuning {
                policy: SegmentJobs::policy(),
                previous: job.previous,
                tuned,
            },
            kept,
            slot_encoding: job.encoding,
        };
        let locked = lock_tag_row(&cfg)?;
        attempt.draw_role_seen = Some(locked.draw_role);
        let r = reserve(&cfg, &locked)?;
        // (durable where this transaction records r.end in the tag's
        // leaf_alloc_encoding row: catalog 0.5.0 on)
        remember_reserved(ctx.dboid, &job.tag, r.end, Durability::of(catalog))?;
        Ok(r)
    })
    .map_err(|e| explain_unreachable(e, &format!("refill tag \"{}\"", job.tag), "leaf_alloc"))
}

/// The refill's outcome, told to the slot if it is still in the job's
/// epoch: the range published (only now may its IDs be handed out), the
/// tag marked missing, contention noted (the refill is retried), or the
/// error recorded for the callers.
fn publish(
    ctx: &WorkerContext,
    job: &RefillJob,
    result: &Result<Reserved, JobError>,
    draw_role_seen: Option<u32>,
) {
    let slot = ctx.sh.tag(job.slot);
    let _g = ctx.sh.lock_tag(job.slot);
    slot.refill_in_flight.store(false, SeqCst);
    if slot.epoch.load(SeqCst) != job.epoch {
        return;
    }
    match result {
        Ok(r) => publish_range(slot, job, r),
        Err(e) if e.sqlstate == code_of(PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT) => {
            slot.pair.retire();
            slot.status.store(TagStatus::Missing as u32, SeqCst);
            slot.error.set(e.sqlstate, &e.message);
        }
        // a refill canceled or ended by the worker's own lock_timeout is
        // retried (the waiting callers ask at once; a prefetch after
        // FIRST_RETRY): the callers wait on for it, up to their timeout,
        // which then says so
        Err(e) if e.is_contention() => slot.contention.store(true, SeqCst),
        Err(e) => {
            // (the callers that may not draw the tag get 42501 instead of
            // the error)
            if let Some(role) = draw_role_seen {
                slot.draw_role.store(role, SeqCst);
            }
            let (code, message) = e.for_callers();
            slot.error.set(code, &message)
        }
    }
}

/// A committed range into the slot's pair, under the slot's lock.
fn publish_range(slot: &TagSlot, job: &RefillJob, r: &Reserved) {
    if job.encoding.is_none() {
        // set before the publish: a caller that takes from the segment
        // reads it after
        slot.encoding.set(r.encoding);
    }
    // (also before the publish: the caller that takes from it checks it
    // after its take)
    slot.draw_role.store(r.draw_role, SeqCst);
    let published = slot.pair.publish(job.target, r.start, r.len);
    debug_assert!(published);
    // what callers asked for while it was in flight, under this lock as
    // they ask (a wait for an empty pair, the 10% mark of the segment this
    // fills the other of), is answered: another request would reserve the
    // next segment at once
    slot.refill_requested.store(false, SeqCst);
    slot.dynamic_step.store(r.step, SeqCst);
    slot.table_step.store(r.table_step, SeqCst);
    slot.refills.fetch_add(1, SeqCst);
    slot.contention.store(false, SeqCst);
    slot.last_refill_us.store(unix_us(), SeqCst);
    slot.status.store(TagStatus::Active as u32, SeqCst);
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
