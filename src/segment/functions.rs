//! SQL surface of segment mode: `leaf_segment_next(tag)` and
//! `leaf_segment_status()`.
//! Must not run SQL or wait beyond `leaf_id.refill_timeout`: refills are the worker's.

use crate::errors::{raise, raise_recorded, require_writable};
use crate::runtime::backend::{self, Deadline};
use crate::runtime::backend_local::BackendLocal;
use crate::runtime::clock::tstz_from_unix_us;
use crate::runtime::shmem::{
    NoTagSlot, Role, Shared, TAG_MAX_BYTES, TAG_MAX_CHARS, TagSlot, TagStatus,
};
use crate::runtime::standby_wait;
use crate::runtime::text_arg::TextArg;
use crate::segment::buffer::{SlowPath, TakeMany};
use crate::segment::opaque::{Domain, RangeEncoder};
use crate::segment::opaque_runs::SessionRuns;
use crate::segment::tag_cache::TagCache;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering::SeqCst;

thread_local! {
    /// Opaque IDs this session encoded and has not handed out yet
    /// (`segment::opaque_runs`).
    static OPAQUE_RUNS: RefCell<SessionRuns> = RefCell::new(SessionRuns::default());
}

/// The session's tags and their (slot, epoch), valid while the slot's epoch
/// is unchanged (`segment::tag_cache`). Only tags that passed
/// `validate_tag` (and so are UTF-8) go in.
static TAGS: BackendLocal<RefCell<TagCache>> = BackendLocal::new(RefCell::new(TagCache::new()));
/// Has this session ever kept a run? Until it has, a call skips the runs
/// (a plain tag's call pays nothing for opaque IDs).
static RUNS_KEPT: BackendLocal<Cell<bool>> = BackendLocal::new(Cell::new(false));

fn validate_tag(tag: Option<&str>) -> &str {
    let Some(tag) = tag else {
        raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "leaf_id tag must not be NULL",
            None,
        )
    };
    if tag.is_empty() {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "leaf_id tag must not be empty",
            None,
        );
    }
    // bytes bound characters from above: count only long tags
    let chars = if tag.len() <= TAG_MAX_CHARS {
        tag.len()
    } else {
        tag.chars().count()
    };
    if chars > TAG_MAX_CHARS {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("leaf_id tag is {chars} characters long; the limit is {TAG_MAX_CHARS}"),
            None,
        );
    }
    tag
}

// A tag is UTF-8 (checked before validate_tag), so its characters bound its
// bytes: at most 4 each. A slot holds TAG_MAX_BYTES.
const _: () = assert!(4 * TAG_MAX_CHARS <= TAG_MAX_BYTES);

fn cached_slot(sh: &Shared, dboid: u32, tag: &str) -> (usize, u64) {
    if let Some(hit) = TAGS.get().borrow_mut().get(tag.as_bytes()) {
        return hit;
    }
    // (no borrow held: the allocation may wait)
    let found = allocate_slot(sh, dboid, tag);
    TAGS.get()
        .borrow_mut()
        .insert(tag.as_bytes(), found, 4 * sh.n_tags());
    found
}

/// The tag's slot, allocated if need be within the database's bounds
/// (`settings::TagBounds`): with as many of its tags waiting for a
/// first refill as it may have, the call waits (up to
/// leaf_id.refill_timeout) for one of them to be answered.
fn allocate_slot(sh: &Shared, dboid: u32, tag: &str) -> (usize, u64) {
    let bounds = crate::settings::tag_bounds(sh.n_tags(), sh.n_dbs());
    let mut deadline: Option<Deadline> = None;
    loop {
        let found = sh
            .find_or_allocate_tag(dboid, tag, bounds)
            .or_else(|refusal| {
                if refusal == NoTagSlot::ServerFull && backend::reclaim_dropped_databases(sh) {
                    sh.find_or_allocate_tag(dboid, tag, bounds)
                } else {
                    Err(refusal)
                }
            });
        let refusal = match found {
            Ok(found) => {
                if deadline.is_some() {
                    backend::end_wait();
                }
                return found;
            }
            Err(refusal) => refusal,
        };
        if let NoTagSlot::DatabaseLoading { .. } = refusal {
            let deadline = deadline.get_or_insert_with(Deadline::from_setting);
            if !deadline.passed() {
                let db = backend::my_db_slot(sh);
                backend::prepare_wait(sh, db);
                backend::ensure_worker(sh, db, Role::Segment);
                backend::wait(sh, db, deadline);
                continue;
            }
        }
        if deadline.is_some() {
            backend::end_wait();
        }
        no_slot(sh, refusal)
    }
}

fn no_slot(sh: &Shared, refusal: NoTagSlot) -> ! {
    let limit = PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED;
    match refusal {
        NoTagSlot::ServerFull => raise(
            limit,
            format!(
                "all {} leaf_id tag slots are in use (leaf_id.max_tags = {})",
                sh.n_tags(),
                sh.n_tags()
            ),
            Some(
                "Raise leaf_id.max_tags and restart the server, or delete unused tags from leaf_alloc.",
            ),
        ),
        NoTagSlot::DatabaseFull { held } => raise(
            limit,
            format!(
                "this database holds {held} leaf_id tag slots, its bound (leaf_id.max_tags_per_database = {})",
                crate::settings::MAX_TAGS_PER_DATABASE.get()
            ),
            Some(
                "Raise leaf_id.max_tags_per_database (and leaf_id.max_tags), or delete unused tags from leaf_alloc.",
            ),
        ),
        NoTagSlot::DatabaseShare { held, share } => raise(
            limit,
            format!(
                "this database holds {held} leaf_id tag slots, at least its share of {share} (leaf_id.max_tags / leaf_id.max_databases), and the slots still unused are kept for the other databases to reach theirs"
            ),
            Some(
                "Raise leaf_id.max_tags (and restart the server), lower leaf_id.max_databases, or delete unused tags from leaf_alloc.",
            ),
        ),
        NoTagSlot::DatabaseLoading { loading } => raise(
            limit,
            format!(
                "{loading} leaf_id tags of this database wait for their first refill, as many as may at once (half its share of leaf_id.max_tags / leaf_id.max_databases, at least 8)"
            ),
            Some(
                "Tags that do not exist in leaf_alloc are answered by the background worker; see the server log if it is stuck.",
            ),
        ),
    }
}

fn forget(tag: &str) {
    TAGS.get().borrow_mut().forget(tag.as_bytes());
}

/// How many times a call takes again from a segment that changed under it
/// (`TakeMany::Stale`: a publish since its ticket) before it goes to the
/// slow path, which looks at the pair under the tag's lock. A publish is
/// rare (one per segment), so a second try almost always succeeds; the bound
/// only keeps a call from spinning while publishes keep coming.
const STALE_TAKE_TRIES: usize = 4;

/// Ask the worker for a refill of this slot (a flag and a latch: cheap).
fn request_refill(sh: &Shared, db: usize, slot: usize) {
    sh.tag(slot).refill_requested.store(true, SeqCst);
    sh.wake_worker(db, Role::Segment);
}

/// Does the tag's `leaf_alloc.draw_role` let the current user draw its
/// IDs? One atomic load for a tag without one (the rule).
#[inline]
fn may_draw(slot: &TagSlot) -> bool {
    match slot.draw_role.load(SeqCst) {
        crate::segment::draw_role::ANYONE => true,
        role => has_privs_of(role),
    }
}

#[cold]
fn has_privs_of(role: u32) -> bool {
    // (true for superusers; a role's members that inherit its privileges)
    // SAFETY: called only from the SQL functions of this file (the draws and
    // leaf_segment_status), in the caller's transaction, which the catalog
    // lookups of has_privs_of_role need; GetUserId reads the session's user,
    // set for any backend. `role` is any OID: one that names no role (its
    // role dropped since) is a member of nothing, and the check is false.
    unsafe { pgrx::pg_sys::has_privs_of_role(pgrx::pg_sys::GetUserId(), role.into()) }
}

#[cold]
fn not_drawer(tag: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!("permission denied to draw IDs of leaf_id tag \"{tag}\""),
        Some(
            "Only superusers and roles with the privileges of the role its leaf_alloc.draw_role names may draw them.",
        ),
    )
}

/// One ID of the tag. A plain tag's is one `fetch_add` on its segment; an
/// opaque tag's comes from this session's run of encoded IDs, and a new run
/// is one `fetch_add` and one `Domain::encode_lanes` (`segment::opaque_runs`).
pub fn next_id(tag: &str) -> i64 {
    let (sh, _) = backend::shared_db();
    let hit = cached_slot(sh, backend::my_dboid(), tag);
    next_id_at(tag, hit)
}

/// `next_id` of the tag whose (slot, epoch) the caller looked up.
fn next_id_at(tag: &str, (i, epoch): (usize, u64)) -> i64 {
    let (sh, _) = backend::shared_db();
    let dboid = backend::my_dboid();
    if RUNS_KEPT.get().get() {
        // a run kept by this session, perhaps as another role (SET ROLE):
        // refused before it is touched, so that it stays for the next call
        // (a slot given to another tag since is not asked: the pop drops
        // the run, and the take below checks)
        let slot = sh.tag(i);
        // (the epoch read after the role: unchanged, the role was this tag's)
        if !may_draw(slot) && slot.epoch.load(SeqCst) == epoch {
            not_drawer(tag)
        }
        let kept = OPAQUE_RUNS.with(|r| {
            r.borrow_mut()
                .pop(i, epoch, || sh.tag(i).epoch.load(SeqCst) == epoch)
        });
        if let Some(id) = kept {
            return id;
        }
    }
    let looked_up = Some((i, epoch));
    let take = take_ids(sh, dboid, tag, looked_up, |slot, epoch, opaque| {
        if opaque {
            OPAQUE_RUNS.with(|r| r.borrow().take_size(slot, epoch))
        } else {
            1
        }
    });
    match take.encoding {
        // (a take of more than one value is asked for opaque slots only,
        // whose encoding never changes within the epoch)
        None => take.first,
        Some(d) => {
            let taken = take.count as usize;
            let ids = d
                .encode_consecutive(take.first, taken)
                .unwrap_or_else(|e| outside_domain(e.value, e.bits));
            OPAQUE_RUNS.with(|r| r.borrow_mut().keep(take.slot, take.epoch, &ids[1..taken]));
            RUNS_KEPT.get().set(true);
            ids[0]
        }
    }
}

/// A take: `count` (>= 1) consecutive counter values from `first`, taken
/// from the tag slot `slot` in its epoch `epoch`, and their encoding.
struct Take {
    first: i64,
    count: i64,
    encoding: Option<Domain>,
    slot: usize,
    epoch: u64,
}

fn outside_domain(value: i64, bits: u32) -> ! {
    // a refill never reserves beyond the domain
    raise(
        PgSqlErrorCode::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
        format!("counter value {value} is outside the tag's opaque domain of {bits} bits"),
        None,
    )
}

/// Up to `want` (1..=MAX_TAKE) consecutive counter values of the tag:
/// `(first, count, encoding)`, `count >= 1`, from one `fetch_add` on the
/// current segment (fewer than `want` when the segment has fewer left);
/// the IDs are the values under the encoding (the value itself, or its
/// opaque domain's permutation).
pub fn next_ids(tag: &str, want: u64) -> (i64, i64, Option<Domain>) {
    let (sh, _) = backend::shared_db();
    let take = take_ids(sh, backend::my_dboid(), tag, None, |_, _, _| want);
    (take.first, take.count, take.encoding)
}

/// `next_ids` with the number of values to take asked of `want(slot,
/// epoch, opaque)` for the slot the take is tried on (`opaque`: the slot's
/// encoding is set and opaque). `looked_up`: the tag's (slot, epoch) if
/// the caller already has it from `cached_slot`, so that a call looks the
/// tag up once.
fn take_ids(
    sh: &Shared,
    dboid: u32,
    tag: &str,
    mut looked_up: Option<(usize, u64)>,
    want: impl Fn(usize, u64, bool) -> u64,
) -> Take {
    let mut waiting = Waiting::default();
    loop {
        let (i, epoch) = looked_up
            .take()
            .unwrap_or_else(|| cached_slot(sh, dboid, tag));
        let slot = sh.tag(i);
        // who may draw: checked before the take, so that a refused caller
        // takes nothing (a range of a first refill, whose role was not yet
        // known here, is checked again after the take)
        if !may_draw(slot) {
            // (the epoch read after the role: a slot given to another tag
            // since this session cached it is not this tag's refusal)
            if slot.epoch.load(SeqCst) != epoch {
                forget(tag);
                continue;
            }
            waiting.end();
            not_drawer(tag)
        }
        let want = want(i, epoch, slot.encoding.domain().is_some());
        if let Some(take) = take_at_hand(sh, tag, (i, epoch), want, &waiting) {
            return take;
        }
        wait_for_ids(sh, tag, (i, epoch), &mut waiting);
    }
}

/// What a take that found no ID at hand keeps between its tries.
#[derive(Default)]
struct Waiting {
    /// Set at the first wait: leaf_id.refill_timeout from then.
    deadline: Option<Deadline>,
    /// The (slot, epoch) this call first waited on, and its error count
    /// then: a later error of the same (slot, epoch) is the answer to this
    /// call.
    seen_error: Option<(usize, u64, u64)>,
    /// The wait is counted in the slot's `waits` (once per call).
    counted_wait: bool,
    /// A 42704 answer to a first refill that another call asked for may
    /// come from a read of leaf_alloc before this call began (the tag
    /// inserted just before it): asked again once, with a slot of its own.
    asked_again: bool,
}

impl Waiting {
    /// Ends the wait, if this call waited.
    #[inline]
    fn end(&self) {
        if self.deadline.is_some() {
            backend::end_wait();
        }
    }

    /// The error count of the slot when this call first waited on it.
    fn seen_error_seq(&mut self, (i, epoch): (usize, u64), now: u64) -> u64 {
        match self.seen_error {
            Some((si, se, seq)) if (si, se) == (i, epoch) => seq,
            _ => {
                self.seen_error = Some((i, epoch, now));
                now
            }
        }
    }
}

/// The hot path: one `fetch_add` on the slot's current segment, tried
/// again while a publish changes the segment under it (at most
/// `STALE_TAKE_TRIES` times). `None`: no ID at hand for this tag (its
/// segments used up, or the slot went to another tag meanwhile). Always
/// inline: when it was a call, its `Take` came back through the stack and
/// the caller's wide loads of the callee's narrow stores stalled on store
/// forwarding (a 24 ns call took 31).
#[inline(always)]
fn take_at_hand(
    sh: &Shared,
    tag: &str,
    (i, epoch): (usize, u64),
    want: u64,
    waiting: &Waiting,
) -> Option<Take> {
    let slot = sh.tag(i);
    for _ in 0..STALE_TAKE_TRIES {
        let (first, count, crossed_threshold) = match slot.pair.take_many(want) {
            TakeMany::Ids {
                first,
                count,
                crossed_threshold,
            } => (first, count, crossed_threshold),
            TakeMany::Stale => continue,
            TakeMany::Exhausted => return None,
        };
        // set before the segment was published; read before the epoch
        // check, which tells it was this tag's
        let encoding = slot.encoding.domain();
        if slot.epoch.load(SeqCst) != epoch {
            // the slot went to another tag meanwhile: not ours. The buffer
            // may accept a take begun before the retire for the new tag's
            // range (it names the current generation), so this check is
            // what keeps it from this tag's caller
            return None;
        }
        // (stored before the publish, as the encoding)
        if !may_draw(slot) {
            if slot.epoch.load(SeqCst) != epoch {
                // not this tag's take: a gap
                return None;
            }
            waiting.end();
            not_drawer(tag)
        }
        if crossed_threshold {
            request_refill(sh, backend::my_db_slot(sh), i);
        }
        waiting.end();
        return Some(Take {
            first,
            count,
            encoding,
            slot: i,
            epoch,
        });
    }
    None
}

/// What the worker recorded for the slot, read under the tag's lock.
struct Recorded {
    code: i32,
    message: String,
    /// Who may read it: the role the worker stored with it.
    draw_role: u32,
    /// The slot never had a segment (its first refill failed).
    never_served: bool,
}

/// The slow path, under the tag's lock: the worker's answer to this call
/// (raised), a switch to the other segment, or a request for a refill and
/// a wait for it (up to leaf_id.refill_timeout, then 55P03). Returns when
/// the take may be tried again (the database's slot is looked up again:
/// that of a database whose workers have left it may go to another one).
fn wait_for_ids(sh: &Shared, tag: &str, (i, epoch): (usize, u64), waiting: &mut Waiting) {
    let slot = sh.tag(i);
    let db = backend::my_db_slot(sh);
    let deadline = *waiting.deadline.get_or_insert_with(Deadline::from_setting);
    backend::prepare_wait(sh, db);
    let guard = sh.lock_tag(i);
    if slot.epoch.load(SeqCst) != epoch {
        drop(guard);
        forget(tag);
        return;
    }
    let error_seq = slot.error.seq.load(SeqCst);
    let seen = waiting.seen_error_seq((i, epoch), error_seq);
    let missing = slot.status() == TagStatus::Missing;
    if missing && error_seq == seen {
        // found missing before this call asked: the row may be back
        // since, so ask again with a fresh slot
        drop(guard);
        sh.free_tag(i, epoch);
        forget(tag);
        return;
    }
    if error_seq != seen {
        // the worker's answer to this call (read before the slot may be
        // given back)
        let (code, message) = slot.error.get();
        let recorded = Recorded {
            code,
            message,
            draw_role: slot.draw_role.load(SeqCst),
            never_served: missing || slot.status() == TagStatus::Loading,
        };
        drop(guard);
        return answer_recorded(sh, tag, (i, epoch), recorded, waiting);
    }
    match slot.pair.on_exhausted() {
        SlowPath::Retry => {}
        SlowPath::Switched => {
            drop(guard);
            request_refill(sh, db, i);
        }
        SlowPath::Wait => {
            // asked under the tag's lock, as the worker publishes a refill
            // and clears the request: a request is never left set by a
            // caller that the publish already answered
            slot.refill_requested.store(true, SeqCst);
            drop(guard);
            if !waiting.counted_wait {
                waiting.counted_wait = true;
                slot.waits.fetch_add(1, SeqCst);
            }
            backend::ensure_worker(sh, db, Role::Segment);
            if deadline.passed() {
                backend::end_wait();
                refill_timed_out(db, tag, slot, epoch)
            }
            backend::wait(sh, db, &deadline);
        }
    }
}

/// The worker's answer to this call, raised; or, for a slot that never
/// had a segment, the slot given back (the slots are shared by every
/// database, and calls with tags that cannot be refilled, a Citus node
/// down or a refill refused, must not keep them all), and a first 42704
/// asked again (`Waiting::asked_again`).
fn answer_recorded(
    sh: &Shared,
    tag: &str,
    (i, epoch): (usize, u64),
    recorded: Recorded,
    waiting: &mut Waiting,
) {
    if recorded.never_served {
        sh.free_tag(i, epoch);
        forget(tag);
        let unknown = crate::errors::code_of(PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT);
        if !waiting.asked_again && recorded.code == unknown {
            waiting.asked_again = true;
            waiting.seen_error = None;
            return;
        }
    }
    backend::end_wait();
    // (the error may tell of the row: for those who may draw it)
    if recorded.draw_role != crate::segment::draw_role::ANYONE && !has_privs_of(recorded.draw_role)
    {
        not_drawer(tag)
    }
    raise_recorded(recorded.code, recorded.message);
}

/// A call's wait for a refill ran out (leaf_id.refill_timeout): 55P03,
/// saying what the worker waits for when it is known.
#[cold]
fn refill_timed_out(db: usize, tag: &str, slot: &TagSlot, epoch: u64) -> ! {
    let standby = standby_wait::waiting_for(db, backend::my_dboid(), Role::Segment);
    // (read with the epoch: another tag's contention is not this call's)
    let contention = slot.contention.load(SeqCst) && slot.epoch.load(SeqCst) == epoch;
    raise(
        PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
        if contention {
            format!(
                "timed out waiting for a refill of leaf_id tag \"{tag}\": {}",
                crate::runtime::job_error::CONTENTION_NOTE
            )
        } else if standby.is_empty() {
            format!("timed out waiting for a refill of leaf_id tag \"{tag}\"")
        } else {
            format!(
                "timed out waiting for a refill of leaf_id tag \"{tag}\": the worker's commit waits for {standby}"
            )
        },
        Some(
            "The leaf_id background worker did not reserve a new segment within leaf_id.refill_timeout; see the server log.",
        ),
    )
}

/// A tag this session looked up before, when `bytes` are its bytes: its
/// characters and its (slot, epoch). Most calls repeat the previous tag (a
/// column default, a bulk insert), or one of a few (inserts into several
/// tables in turn): they skip the UTF-8 check and the tag's validation,
/// which its bytes passed when it was looked up.
#[inline]
fn seen_tag(bytes: &[u8]) -> Option<(&str, (usize, u64))> {
    let tags = TAGS.get();
    // the last tag (most calls): a shared borrow and one compare, inline
    let last = tags.borrow().last(bytes);
    let hit = match last {
        Some(hit) => hit,
        None => tags.borrow_mut().lookup(bytes)?,
    };
    // SAFETY: `bytes` equal a tag that `cached_slot` put into TAGS, whose
    // callers give only tags that passed `validate_tag`, which are `&str`:
    // UTF-8.
    Some((unsafe { std::str::from_utf8_unchecked(bytes) }, hit))
}

#[pg_extern(volatile, parallel_unsafe)]
fn leaf_segment_next(tag: Option<TextArg>) -> i64 {
    if let Some((tag, hit)) = tag.as_ref().and_then(|t| seen_tag(t.bytes())) {
        require_writable("leaf_segment_next()");
        return next_id_at(tag, hit);
    }
    let tag = validate_tag(tag.map(|t| t.text()));
    require_writable("leaf_segment_next()");
    next_id(tag)
}

/// IDs one chunk of a batch call takes with one `fetch_add` (at most
/// `segment::buffer::MAX_TAKE`).
const BATCH_CHUNK: u64 = 256;

/// `n` IDs of the tag in one call, produced as the rows are read: each
/// chunk of up to `BATCH_CHUNK` IDs is one `fetch_add` on the current
/// segment, so single calls of other sessions get in between.
#[pg_extern(volatile, parallel_unsafe, name = "leaf_segment_next")]
fn leaf_segment_next_n(tag: Option<TextArg>, n: Option<i32>) -> SetOfIterator<'static, i64> {
    let tag = validate_tag(tag.map(|t| t.text()));
    require_writable("leaf_segment_next()");
    let tag = tag.to_string();
    backend::ids_in_chunks(n, move |left| {
        let (first, count, encoding) = next_ids(&tag, (left as u64).min(BATCH_CHUNK));
        let mut encoder = encoding.map(|d| RangeEncoder::new(d, first + count));
        (first, count, move |value| match encoder.as_mut() {
            None => value,
            Some(e) => e
                .encode(value)
                .unwrap_or_else(|e| outside_domain(e.value, e.bits)),
        })
    })
}

#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe)]
fn leaf_segment_status() -> TableIterator<
    'static,
    (
        name!(tag, String),
        name!(status, String),
        name!(current_buffer, Option<i32>),
        name!(buffer0_start, Option<i64>),
        name!(buffer0_next, Option<i64>),
        name!(buffer0_end, Option<i64>),
        name!(buffer1_start, Option<i64>),
        name!(buffer1_next, Option<i64>),
        name!(buffer1_end, Option<i64>),
        name!(next_ready, Option<bool>),
        name!(refill_in_flight, Option<bool>),
        name!(dynamic_step, Option<i64>),
        name!(table_step, i64),
        name!(refills, Option<i64>),
        name!(waits, Option<i64>),
        name!(last_refill, Option<TimestampWithTimeZone>),
        name!(opaque_bits, Option<i32>),
    ),
> {
    let sh = crate::runtime::backend::shared_or_raise();
    let dboid = backend::my_dboid();
    // an opaque tag's counters (its segments' bounds, its refills) are the
    // count that decoding reveals: NULL for a role that may not decode
    // (a catalog without opaque IDs has no opaque tag)
    let may_decode =
        crate::segment::opaque_functions::decode_privilege().is_some_and(|(may, _)| may);
    let mut rows = Vec::new();
    for i in 0..sh.n_tags() {
        let slot = sh.tag(i);
        if slot.dboid.load(SeqCst) != dboid || slot.status() == TagStatus::Free {
            continue;
        }
        // a tag's draw_role hides its counters as USAGE hides a sequence's
        // last_value in pg_sequences (asked before the slot's lock, which
        // the catalog lookup must not hold; the epoch tells it was this tag's)
        let epoch = slot.epoch.load(SeqCst);
        let drawable = may_draw(slot);
        let _g = sh.lock_tag(i);
        if slot.dboid.load(SeqCst) != dboid || slot.epoch.load(SeqCst) != epoch {
            continue;
        }
        let (b0, b1) = (slot.pair.view(0), slot.pair.view(1));
        let shown = (may_decode || slot.encoding.domain().is_none()) && drawable;
        let counter = |v: i64| shown.then_some(v);
        rows.push((
            slot.tag(),
            slot.status().name().to_string(),
            // (which segment is current, whether the next is there or
            // being refilled, and the waits, polled, time the segment
            // switches and so the count as well)
            shown.then(|| slot.pair.current_index() as i32),
            counter(b0.start),
            counter(b0.next),
            counter(b0.end),
            counter(b1.start),
            counter(b1.next),
            counter(b1.end),
            shown.then(|| slot.pair.next_ready()),
            shown.then(|| slot.refill_in_flight.load(SeqCst)),
            // (the dynamic step and the time of the last refill, polled,
            // give the count away as well)
            counter(slot.dynamic_step.load(SeqCst)),
            slot.table_step.load(SeqCst),
            counter(slot.refills.load(SeqCst) as i64),
            shown.then(|| slot.waits.load(SeqCst) as i64),
            tstz_from_unix_us(slot.last_refill_us.load(SeqCst)).filter(|_| shown),
            // NULL: plain IDs, or no refill yet
            slot.encoding.domain().map(|d| d.bits() as i32),
        ));
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    TableIterator::new(rows)
}

/// Run by CREATE EXTENSION (sql/finish.sql): a database that had leaf_id
/// before, dropped and created again within one server lifetime, must not
/// hand out segments cached from the dropped `leaf_alloc` (the new table
/// starts over, so they could repeat). Frees this database's tag slots and
/// makes the worker claim its snowflake worker id again in the new registry.
/// Also drops the database's segment reserve on Citus (its file), for a
/// restore procedure. Harmless at any time: unused cached IDs become gaps.
#[pg_extern(volatile, parallel_unsafe)]
fn leaf_id_reset_cache() {
    // superusers only, whatever was granted: it removes files of the server
    // SAFETY: superuser() reads the session's user and pg_authid through
    // the syscache: we are in the SQL function's transaction.
    if !unsafe { pgrx::pg_sys::superuser() } {
        crate::errors::raise(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            "permission denied for function leaf_id_reset_cache",
            Some("Only superusers may reset leaf_id's cache."),
        );
    }
    let Some(sh) = crate::runtime::shmem::shared() else {
        return;
    };
    let dboid = backend::my_dboid();
    crate::segment::reserve_file::remove_for_reset(sh, dboid);
    sh.free_tags_of(dboid);
    TAGS.get().borrow_mut().clear();
    // (other sessions' runs end by the slots' new epochs)
    OPAQUE_RUNS.with(|r| r.borrow_mut().clear());
    if let Some(db) = (0..sh.n_dbs()).find(|&d| sh.db(d).dboid.load(SeqCst) == dboid) {
        let slot = sh.db(db);
        if slot.snowflake_state.load(SeqCst)
            != crate::runtime::shmem::SnowflakeState::NotRequested as u32
        {
            slot.snowflake_state.store(
                crate::runtime::shmem::SnowflakeState::Requested as u32,
                SeqCst,
            );
            sh.wake_worker(db, crate::runtime::shmem::Role::Snowflake);
        }
    }
}
