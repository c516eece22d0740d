//! Shared memory: one region with the per-database slots and the per-tag
//! slots, plus the LWLocks that guard their slow paths.
//! Owns the layout and the hooks; must not run SQL or know what a job does.
//!
//! The size depends on settings (`leaf_id.max_tags`, `leaf_id.max_databases`),
//! so the region is requested and laid out by hand rather than with a
//! fixed-size static. Everything in it is `#[repr(C)]`, and zeroed memory is
//! a valid empty state.

use crate::segment::buffer::SegmentPair;
use crate::segment::opaque::Domain;
use crate::settings;
use crate::snowflake::generator::Generator;
use pgrx::pg_sys;
use std::cell::UnsafeCell;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU8, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};

/// A worker registered but not attached after this long is given up (a
/// backend registers it again; its database slot may go to another).
pub const WORKER_START_GRACE_MS: i64 = 10_000;

/// 128 characters of UTF-8.
pub const TAG_MAX_BYTES: usize = 512;
pub const TAG_MAX_CHARS: usize = 128;
const MESSAGE_BYTES: usize = 256;
const TRANCHE: &std::ffi::CStr = c"leaf_id";

/// The last error a background-worker job hit, for the callers waiting on it.
/// Written and read with the owner's lock held; `seq` counts errors.
#[repr(C)]
pub struct ErrorCell {
    pub seq: AtomicU64,
    sqlstate: AtomicI32,
    len: AtomicU32,
    message: UnsafeCell<[u8; MESSAGE_BYTES]>,
}

impl ErrorCell {
    /// Owner's lock held.
    pub fn set(&self, sqlstate: i32, message: &str) {
        let bytes = truncate_utf8(message, MESSAGE_BYTES);
        // SAFETY: the bytes are written only here and read only in `get`, each with the owner's
        // LWLock held exclusively: a tag's cell under `lock_tag` (segment::jobs, segment::functions), a
        // database's under `lock_db` (snowflake::jobs, snowflake::functions), a wait note's under
        // `lock_db` (standby_wait, worker_status). So no process touches them meanwhile, and this
        // `&mut` is the only reference while it lives; `bytes.len() <= MESSAGE_BYTES`
        // (truncate_utf8).
        unsafe { (&mut *self.message.get())[..bytes.len()].copy_from_slice(bytes) };
        self.len.store(bytes.len() as u32, SeqCst);
        self.sqlstate.store(sqlstate, SeqCst);
        self.seq.fetch_add(1, SeqCst);
    }
    /// Owner's lock held.
    pub fn get(&self) -> (i32, String) {
        let len = (self.len.load(SeqCst) as usize).min(MESSAGE_BYTES);
        // SAFETY: the owner's LWLock is held (see `set` for which, and where), which every write
        // holds too: nothing writes the bytes while this shared borrow lives; `len` is clamped to
        // the array.
        let msg = unsafe { String::from_utf8_lossy(&(&*self.message.get())[..len]).into_owned() };
        (self.sqlstate.load(SeqCst), msg)
    }
}

fn truncate_utf8(s: &str, max: usize) -> &[u8] {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s.as_bytes()[..end]
}

/// Snowflake state of a database slot.
#[repr(u32)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SnowflakeState {
    NotRequested = 0,
    Requested = 1,
    Ready = 2,
    Failed = 3,
}

/// The two background workers of a database, one per mode: a snowflake
/// renewal must not wait behind a refill (on Citus, a refill can hang on a
/// node that stops answering; the renewals need only a majority).
#[repr(usize)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    Segment = 0,
    Snowflake = 1,
}

impl Role {
    pub fn from_index(i: usize) -> Role {
        if i == Role::Snowflake as usize {
            Role::Snowflake
        } else {
            Role::Segment
        }
    }
    /// The process's `backend_type` in pg_stat_activity.
    pub fn backend_type(self) -> &'static str {
        match self {
            Role::Segment => "leaf_id segment worker",
            Role::Snowflake => "leaf_id snowflake worker",
        }
    }
}

/// One background worker of a database.
#[repr(C)]
pub struct WorkerSlot {
    pub pid: AtomicI32,
    pub latch: AtomicPtr<pg_sys::Latch>,
    /// Unix ms when a backend registered a worker that has not attached yet.
    pub requested_at: AtomicI64,
}

impl WorkerSlot {
    fn clear(&self) {
        self.pid.store(0, SeqCst);
        self.latch.store(std::ptr::null_mut(), SeqCst);
        self.requested_at.store(0, SeqCst);
    }
}

/// One database that uses leaf_id: its workers and its snowflake generator.
#[repr(C)]
pub struct DbSlot {
    /// 0 = free
    pub dboid: AtomicU32,
    /// Bumped whenever the slot is given to a database or freed (under the
    /// global lock): a backend that read it before a take and finds it
    /// unchanged after knows the generator it took from was its database's
    /// all along, also if the slot went to another database and came back
    /// in between.
    pub assigned: AtomicU64,
    workers: [WorkerSlot; 2],
    /// Woken on every refill, claim and renewal.
    pub cv: UnsafeCell<pg_sys::ConditionVariable>,
    pub snowflake_state: AtomicU32,
    pub snowflake_lease_wanted: AtomicBool,
    /// The last claim or renewal ended in lock contention and is retried
    /// (`JobError::is_contention`); cleared by one that works.
    pub snowflake_contention: AtomicBool,
    pub worker_id: AtomicI32,
    /// 0 = from leaf_id.worker_id, 1 = claimed from leaf_worker
    pub worker_id_from_registry: AtomicBool,
    pub generator: Generator,
    /// Guarded by the database's lock.
    pub error: ErrorCell,
    /// The node name of the last claim (`set_node_name`, `node_name`):
    /// written by the database's snowflake worker, read by it and by
    /// `leaf_snowflake_status` in any backend, without a lock. Atomic bytes
    /// with a version that is odd while a write is in progress, so a reader
    /// never sees a name half written.
    node_name_len: AtomicU32,
    node_name: [AtomicU8; crate::settings::NODE_NAME_MAX_BYTES],
    node_name_version: AtomicU32,
    /// The snowflake worker's requests to its renewal helpers, one slot per
    /// other copy of leaf_worker (`citus::renewal_helper`).
    copy_slots: [crate::runtime::copy_slot::CopySlot; crate::runtime::copy_slot::MAX_OTHER_COPIES],
    /// Per worker (`Role`): what its last commit waits for (`standby_wait`);
    /// callers that time out and the status views say so. Guarded by the
    /// database's lock.
    pub standby_wait: [StandbyWaitNote; 2],
}

/// What a worker's commit waits for, and since when: the standby slots and
/// their lag, or the synchronous standbys. Guarded by the database's lock.
#[repr(C)]
pub struct StandbyWaitNote {
    /// The description; empty when the worker waits for nothing.
    pub text: ErrorCell,
    /// Unix microseconds when the wait began (0 = none).
    pub since_us: AtomicI64,
    /// The most bytes a waited-for slot is behind the commit; -1 = unknown
    /// (no position reported, no such slot, synchronous standbys).
    pub lag_bytes: AtomicI64,
}

/// A worker's wait for standbys, as the status views show it.
pub struct StandbyWait {
    pub what: String,
    pub since_us: i64,
    pub lag_bytes: Option<i64>,
}

impl StandbyWaitNote {
    /// The database's lock held. An empty `what` ends the wait. Until then
    /// the since stays, whatever `what` says meanwhile: one standby stopped
    /// keeps the worker's commits unconfirmed while another lags a round trip
    /// behind each of them, or while each also waits for the synchronous
    /// standbys, and an alert on the since must not start again at every
    /// commit (`standby_wait` clears the note where a wait ends).
    pub fn set(&self, what: &str, lag_bytes: Option<i64>, now_us: i64) {
        if what.is_empty() {
            self.since_us.store(0, SeqCst);
        } else if self.since_us.load(SeqCst) == 0 {
            self.since_us.store(now_us, SeqCst);
        }
        self.lag_bytes.store(lag_bytes.unwrap_or(-1), SeqCst);
        self.text.set(0, what);
    }
    /// The database's lock held. None when the worker waits for nothing.
    pub fn get(&self) -> Option<StandbyWait> {
        let what = self.text.get().1;
        (!what.is_empty()).then(|| {
            let lag = self.lag_bytes.load(SeqCst);
            StandbyWait {
                what,
                since_us: self.since_us.load(SeqCst),
                lag_bytes: (lag >= 0).then_some(lag),
            }
        })
    }
}

/// Status of a tag slot.
#[repr(u32)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TagStatus {
    Free = 0,
    /// Allocated, first refill not done yet.
    Loading = 1,
    Active = 2,
    /// The tag is not (or no longer) in leaf_alloc.
    Missing = 3,
}

impl TagStatus {
    pub fn from_u32(v: u32) -> TagStatus {
        match v {
            1 => TagStatus::Loading,
            2 => TagStatus::Active,
            3 => TagStatus::Missing,
            _ => TagStatus::Free,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            TagStatus::Free => "free",
            TagStatus::Loading => "loading",
            TagStatus::Active => "active",
            TagStatus::Missing => "missing",
        }
    }
}

/// One cached tag of one database.
#[repr(C)]
pub struct TagSlot {
    /// 0 = free. Changed under the global lock only.
    pub dboid: AtomicU32,
    /// Bumped whenever the slot is freed or given to another tag: a backend's
    /// cached (slot, epoch) is valid while the epoch is unchanged.
    pub epoch: AtomicU64,
    pub status: AtomicU32,
    pub tag_len: AtomicU32,
    tag: UnsafeCell<[u8; TAG_MAX_BYTES]>,
    pub pair: SegmentPair,
    pub refill_requested: AtomicBool,
    pub refill_in_flight: AtomicBool,
    /// The last refill ended in lock contention and is retried
    /// (`JobError::is_contention`); cleared by a refill that works.
    pub contention: AtomicBool,
    pub dynamic_step: AtomicI64,
    pub table_step: AtomicI64,
    pub refills: AtomicU64,
    pub waits: AtomicU64,
    /// Unix microseconds of the last refill, 0 = none.
    pub last_refill_us: AtomicI64,
    /// Guarded by the slot's lock.
    pub error: ErrorCell,
    /// How this slot's IDs are encoded, set by the worker before it
    /// publishes the epoch's first segment and never changed within the
    /// epoch (a refill that reads another encoding is refused).
    pub encoding: EncodingCell,
    /// Who may draw the tag's IDs: 0 = every role that may run the
    /// function; else the OID of the role whose privileges a caller needs
    /// (`leaf_alloc.draw_role`, resolved by the worker; 1 = a name no role
    /// has: superusers only). Stored by every refill before it publishes.
    pub draw_role: AtomicU32,
}

/// A tag slot's encoding: `bits` 0 = plain IDs, else an opaque domain of
/// that width and key. `set` tells whether the epoch's first refill has
/// set it. Zeroed memory is "not set".
#[repr(C)]
pub struct EncodingCell {
    set: AtomicBool,
    bits: AtomicU32,
    k0: AtomicU64,
    k1: AtomicU64,
}

impl EncodingCell {
    /// The encoding, once set: `Some(None)` plain, `Some(Some(d))` opaque.
    pub fn get(&self) -> Option<Option<Domain>> {
        if !self.set.load(SeqCst) {
            return None;
        }
        Some(self.domain())
    }

    /// The domain to encode with: read after taking IDs from a published
    /// segment, which the worker published after setting this.
    pub fn domain(&self) -> Option<Domain> {
        match self.bits.load(SeqCst) {
            0 => None,
            bits => Domain::from_key_words(bits, self.k0.load(SeqCst), self.k1.load(SeqCst)),
        }
    }

    /// The slot's lock held, before the first publish of the epoch.
    pub fn set(&self, domain: Option<Domain>) {
        let (bits, (k0, k1)) = domain.map_or((0, (0, 0)), |d| (d.bits(), d.key_words()));
        self.k0.store(k0, SeqCst);
        self.k1.store(k1, SeqCst);
        self.bits.store(bits, SeqCst);
        self.set.store(true, SeqCst);
    }

    /// The slot's lock held, after the epoch changed.
    fn clear(&self) {
        self.set.store(false, SeqCst);
        self.bits.store(0, SeqCst);
        self.k0.store(0, SeqCst);
        self.k1.store(0, SeqCst);
    }
}

impl DbSlot {
    pub fn copy_slots(&self) -> &[crate::runtime::copy_slot::CopySlot] {
        &self.copy_slots
    }
    pub fn worker(&self, role: Role) -> &WorkerSlot {
        &self.workers[role as usize]
    }
    /// Does any of the database's workers run (or hold its slot)?
    pub fn any_worker(&self) -> bool {
        self.workers.iter().any(|w| w.pid.load(SeqCst) != 0)
    }
    /// Record the node name of a claim. One writer: only the database's
    /// snowflake worker claims (`WorkerSlot::pid`, set under the global
    /// lock, admits one per slot).
    pub fn set_node_name(&self, name: &str) {
        let bytes = truncate_utf8(name, crate::settings::NODE_NAME_MAX_BYTES);
        self.node_name_version.fetch_add(1, SeqCst); // odd: a write is in progress
        // (the bytes' stores stay after the odd version, for a reader's
        // acquire fence to pair with)
        std::sync::atomic::fence(Release);
        for (cell, &b) in self.node_name.iter().zip(bytes) {
            cell.store(b, Relaxed);
        }
        self.node_name_len.store(bytes.len() as u32, Relaxed);
        self.node_name_version.fetch_add(1, SeqCst); // even: the name is whole
    }
    /// The node name of the last claim, never half written: read again
    /// while a write is in progress or one ended during the read (at most
    /// `NODE_NAME_READ_TRIES` times; the name is shown, never used for IDs).
    pub fn node_name(&self) -> String {
        let mut bytes = Vec::with_capacity(crate::settings::NODE_NAME_MAX_BYTES);
        for _ in 0..NODE_NAME_READ_TRIES {
            let before = self.node_name_version.load(SeqCst);
            let len = (self.node_name_len.load(Relaxed) as usize)
                .min(crate::settings::NODE_NAME_MAX_BYTES);
            bytes.clear();
            bytes.extend(self.node_name[..len].iter().map(|b| b.load(Relaxed)));
            // (the bytes' loads stay before the second look at the version)
            std::sync::atomic::fence(Acquire);
            if before.is_multiple_of(2) && self.node_name_version.load(SeqCst) == before {
                break;
            }
            std::hint::spin_loop();
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// How often `DbSlot::node_name` reads again while the worker writes it
/// (a write takes well under a microsecond, and a worker writes once per
/// claim).
const NODE_NAME_READ_TRIES: u32 = 100_000;

impl TagSlot {
    /// Global lock held (or the slot owned by the caller's database).
    pub fn tag(&self) -> String {
        let len = (self.tag_len.load(SeqCst) as usize).min(TAG_MAX_BYTES);
        // SAFETY: the bytes are written only by `Shared::claim_tag_slot_locked`, holding both the
        // global lock and this slot's lock; every caller of `tag()` holds the slot's lock
        // (`lock_tag` in segment::jobs and `leaf_segment_status`), so no write overlaps this
        // borrow. `len` is clamped to the array.
        unsafe { String::from_utf8_lossy(&(&*self.tag.get())[..len]).into_owned() }
    }
    fn tag_is(&self, tag: &str) -> bool {
        let len = self.tag_len.load(SeqCst) as usize;
        // SAFETY: only `Shared::tag_census_locked` calls this, with the global lock held, which
        // every write of the bytes holds too (`Shared::claim_tag_slot_locked`); `len == tag.len()`
        // was checked, and a stored length never exceeds TAG_MAX_BYTES (it is written with bytes
        // that fit the array).
        len == tag.len() && unsafe { &(&*self.tag.get())[..len] } == tag.as_bytes()
    }
    pub fn status(&self) -> TagStatus {
        TagStatus::from_u32(self.status.load(SeqCst))
    }
}

/// The end of the highest range this server lifetime reserved for one tag
/// of one database, kept when the tag's slot is freed (deleted, re-created,
/// rewound tags): a later reservation never starts below it. Keyed by a
/// 64-bit keyed hash of the tag (`tag_hash`); a collision can only move a
/// tag forward (a gap).
/// Guarded by the global lock.
#[repr(C)]
pub struct ReservedMark {
    /// 0 = free
    dboid: AtomicU32,
    tag_hash: AtomicU64,
    end: AtomicI64,
    /// The refill that last raised `end` also recorded it in the tag's
    /// `leaf_alloc_encoding.reserved_end`, in its transaction: the mark may
    /// be reused for another tag when all are taken (every later refill
    /// starts at or above the recorded end).
    durable: AtomicBool,
}

/// A tag's mark key: SipHash-2-4 under the random key of this lifetime of
/// the shared memory (the same in every process; marks live no longer).
/// Keyed, so that a tag admin cannot pick a name whose hash is a victim
/// tag's and push its floor up (FNV-1a, unkeyed, let her search for one).
fn tag_hash(key: (u64, u64), tag: &str) -> u64 {
    crate::segment::opaque::siphash24(key.0, key.1, tag.as_bytes())
}

/// Marks kept: 4 per tag slot, at least 16384 (tags deleted and created
/// again, over all databases, in one server lifetime).
fn n_marks(n_tags: usize) -> usize {
    match settings::TEST_MARKS.get() {
        n if n > 0 => n as usize,
        _ => (4 * n_tags).max(16_384),
    }
}

/// Buckets of the segment reserves' reset counts (`Header::reserve_resets`).
const RESET_BUCKETS: usize = 64;

#[repr(C)]
struct Header {
    n_dbs: u32,
    n_tags: u32,
    /// Random, per lifetime of the shared memory (a server start, or its
    /// reinitialisation after a crash): written into the leaf_worker row this
    /// server claims, so a physical copy with the same node name is told apart.
    owner_token: i64,
    /// Random, per lifetime of the shared memory: the key of the marks'
    /// tag hashes (`tag_hash`).
    mark_key: (u64, u64),
    /// Raised by `leaf_id_reset_cache()` before (0) and after (1) it removes
    /// a database's segment reserve file: a worker that read its file before,
    /// or while one runs, must not use or write it back. Kept by database
    /// OID (modulo `RESET_BUCKETS`), not in a database slot: a slot may go to
    /// another database while a reset runs, or a database have none; two at
    /// once are told apart (started differs from finished while any runs),
    /// and databases that share a bucket only reload their files.
    reserve_resets: [[AtomicU64; 2]; RESET_BUCKETS],
    /// Per snowflake worker id: the database of this server that last held
    /// a lease with it in this lifetime, and the lease's end. Another
    /// database's registry knows nothing of that lease (a copy of the
    /// database, a dropped one), so a claim of the id there starts above it.
    /// Under the global lock.
    worker_id_leases: [WorkerIdLease; crate::snowflake::layout::MAX_WORKER_ID as usize + 1],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct WorkerIdLease {
    dboid: u32,
    until_ms: i64,
}

pub struct Shared {
    header: *mut Header,
    dbs: *mut DbSlot,
    tags: *mut TagSlot,
    marks: *mut ReservedMark,
    n_dbs: usize,
    n_tags: usize,
    locks: *mut pg_sys::LWLockPadded,
}

// SAFETY: a `Shared` is pointers and counts written once by `on_shmem_startup` and only read after.
// What they point to is shared memory PostgreSQL maps for the server's lifetime and that many
// processes use at once: atomics, UnsafeCells used only under the LWLock named at each access,
// and header fields written at startup or under the global
// lock. Within a process only the one thread that runs PostgreSQL code uses it: leaf_id starts no
// thread, and pgrx panics on a pg_sys call (LWLockAcquire included) from any other thread, so the
// LWLocks never have to tell two threads of one PGPROC apart.
unsafe impl Sync for Shared {}
// SAFETY: as for Sync above: the pointers are valid in the whole process (shared memory mapped at
// one address), and nothing in a `Shared` belongs to the thread that made it.
unsafe impl Send for Shared {}

static mut SHARED: Option<Shared> = None;
static mut PREV_SHMEM_REQUEST_HOOK: Option<unsafe extern "C-unwind" fn()> = None;
static mut PREV_SHMEM_STARTUP_HOOK: Option<unsafe extern "C-unwind" fn()> = None;

fn counts() -> (usize, usize) {
    (
        settings::MAX_DATABASES.get() as usize,
        settings::MAX_TAGS.get() as usize,
    )
}

/// Offsets of the database slots, tag slots and marks, and the total size.
fn layout(n_dbs: usize, n_tags: usize) -> (usize, usize, usize, usize) {
    let align = |x: usize| x.next_multiple_of(64);
    let dbs_at = align(size_of::<Header>());
    let tags_at = align(dbs_at + n_dbs * size_of::<DbSlot>());
    let marks_at = align(tags_at + n_tags * size_of::<TagSlot>());
    let total = align(marks_at + n_marks(n_tags) * size_of::<ReservedMark>());
    (dbs_at, tags_at, marks_at, total)
}

fn n_locks(n_dbs: usize, n_tags: usize) -> i32 {
    (1 + n_dbs + n_tags) as i32
}

/// From `_PG_init`, only while shared_preload_libraries is processed.
pub fn install_hooks() {
    // SAFETY: `_PG_init` calls this only while shared_preload_libraries is processed: in the
    // postmaster before it forks (or an EXEC_BACKEND child as it starts), on one thread, before
    // PostgreSQL calls any of these hooks, so the statics and PostgreSQL's hook variables are
    // written with no reader; the previous hooks are kept to be chained. On 13 and 14 `request`
    // runs here, which is where those versions take requests (see its Safety).
    unsafe {
        #[cfg(any(feature = "pg13", feature = "pg14"))]
        request();
        #[cfg(not(any(feature = "pg13", feature = "pg14")))]
        {
            PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
            pg_sys::shmem_request_hook = Some(on_shmem_request);
        }
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(on_shmem_startup);
    }
}

/// # Safety
///
/// Call only where PostgreSQL takes add-in shared memory requests: in the postmaster while
/// shared_preload_libraries is processed (13, 14), or in `shmem_request_hook` (15 on). Elsewhere 13
/// and 14 ignore the requests (the startup hook would find no room) and 15 on raise a FATAL.
unsafe fn request() {
    let (n_dbs, n_tags) = counts();
    // SAFETY: the caller is where requests are taken (see Safety); the tranche name is a 'static
    // NUL-terminated string shorter than NAMEDATALEN, which PostgreSQL copies.
    unsafe {
        pg_sys::RequestAddinShmemSpace(layout(n_dbs, n_tags).3);
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), n_locks(n_dbs, n_tags));
    }
}

/// # Safety
///
/// Only as `shmem_request_hook` (installed by `install_hooks`, 15 on): PostgreSQL calls it in the
/// postmaster while it takes shared memory requests, which is what `request` needs.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_shmem_request() {
    // SAFETY: PREV_SHMEM_REQUEST_HOOK was set in `install_hooks`, before PostgreSQL could call this
    // hook, to the hook that was installed before (a function of a library that stays loaded); it
    // is read by value on the postmaster's one thread. We are in shmem_request_hook, as `request`
    // needs.
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST_HOOK {
            prev();
        }
        request();
    }
}

/// # Safety
///
/// Only as `shmem_startup_hook` (installed by `install_hooks`): PostgreSQL calls it once shared
/// memory is created, at the end of CreateSharedMemoryAndSemaphores (the control file and the
/// LWLocks are set up by then): in the postmaster at start and after a crash (no child runs then),
/// and with EXEC_BACKEND in each child as it starts; `request` reserved room and locks.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_shmem_startup() {
    // SAFETY: PREV_SHMEM_STARTUP_HOOK is the hook installed before ours, saved in `install_hooks`
    // before this could run; read by value on this process's one thread. MainLWLockArray is set up
    // before the hook; its index 21 is AddinShmemInitLock (lwlocknames, 13 to 18), taken as
    // PostgreSQL's own modules take it here (the postmaster has no PGPROC but meets no contention).
    // `ShmemInitStruct` returns `total` bytes (reserved by `request` from the same PGC_POSTMASTER
    // settings, else it raises), aligned to a cache line (ShmemAllocRaw), so `base` plus the
    // 64-byte multiples of `layout` is aligned for every `#[repr(C)]` type here. When it is new,
    // the region is zeroed (a valid empty state for every slot) and the header and condition
    // variables are set with the lock held, before any other process maps it. The tranche has
    // `n_locks(n_dbs, n_tags)` locks (requested in `request`). SHARED is written only here, with no
    // `&` to it alive: the postmaster never calls `shared()`, and a child runs this before any SQL
    // function or worker.
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP_HOOK {
            prev();
        }
        let (n_dbs, n_tags) = counts();
        let (dbs_at, tags_at, marks_at, total) = layout(n_dbs, n_tags);
        pg_sys::LWLockAcquire(
            &raw mut (*pg_sys::MainLWLockArray.add(21)).lock,
            pg_sys::LWLockMode::LW_EXCLUSIVE,
        );
        let mut found = false;
        let base = pg_sys::ShmemInitStruct(c"leaf_id".as_ptr(), total, &mut found) as *mut u8;
        if !found {
            std::ptr::write_bytes(base, 0, total);
            let header = base as *mut Header;
            (*header).n_dbs = n_dbs as u32;
            (*header).n_tags = n_tags as u32;
            (*header).owner_token = owner_token_for_this_lifetime();
            (*header).mark_key = (random_nonce(), random_nonce());
            let dbs = base.add(dbs_at) as *mut DbSlot;
            for i in 0..n_dbs {
                pg_sys::ConditionVariableInit((*dbs.add(i)).cv.get());
                (*dbs.add(i)).worker_id.store(-1, SeqCst);
                (*dbs.add(i)).generator.clear();
            }
        }
        let locks = pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr());
        pg_sys::LWLockRelease(&raw mut (*pg_sys::MainLWLockArray.add(21)).lock);
        SHARED = Some(Shared {
            header: base as *mut Header,
            dbs: base.add(dbs_at) as *mut DbSlot,
            tags: base.add(tags_at) as *mut TagSlot,
            marks: base.add(marks_at) as *mut ReservedMark,
            n_dbs,
            n_tags,
            locks,
        });
    }
}

/// The data directory (the owner file and the segment reserve files).
pub fn data_dir() -> std::path::PathBuf {
    // SAFETY: DataDir is set by the postmaster (SelectConfigFiles) before it loads this library,
    // and inherited by every child; a NUL-terminated absolute path, never freed or changed while
    // the process runs, read on its one thread.
    let dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) };
    std::path::PathBuf::from(dir.to_string_lossy().into_owned())
}

/// The token this lifetime holds its worker ids under: the previous
/// lifetime's after a restart of the same data directory (`owner_file`),
/// else a new random one.
///
/// # Safety
///
/// Only from `on_shmem_startup` (its one caller): `GetSystemIdentifier` reads the control file,
/// which is in shared memory once XLOGShmemInit has run, before the startup hook.
unsafe fn owner_token_for_this_lifetime() -> i64 {
    // SAFETY: `new_owner_token` needs only a process of the server (its Safety).
    let fresh = unsafe { new_owner_token() };
    // SAFETY: PostPortNumber is a plain int setting, set from the configuration before shared
    // memory is created and read by value; the control file `GetSystemIdentifier` reads is in place
    // (this function's Safety).
    let (token, outcome) = crate::runtime::owner_file::token_for_this_lifetime(
        &data_dir(),
        unsafe { pg_sys::PostPortNumber },
        unsafe { pg_sys::GetSystemIdentifier() },
        fresh,
        random_nonce(), // this start's nonce
    );
    match outcome {
        Ok(true) => {
            pgrx::log!("leaf_id: this restart of the data directory keeps owner token {token}")
        }
        Ok(false) => {}
        Err(e) => pgrx::warning!("leaf_id: {e}; the next start gets a new owner token"),
    }
    token
}

/// A random nonce for a file's write (`owner_file::BootRecord`).
pub fn random_nonce() -> u64 {
    // SAFETY: `new_owner_token` needs only a process of the server (its Safety).
    unsafe { new_owner_token() as u64 }
}

/// The record outside the data directory of one of its files.
pub fn boot_record(what: &str) -> Option<crate::runtime::owner_file::BootRecord> {
    // SAFETY: PostPortNumber is a plain int setting, set before any child is forked and read by
    // value; `GetSystemIdentifier` reads the control file, in shared memory since before the
    // startup hook, which every caller's process (workers, backends) has attached.
    crate::runtime::owner_file::BootRecord::of(
        what,
        &data_dir(),
        unsafe { pg_sys::PostPortNumber },
        unsafe { pg_sys::GetSystemIdentifier() },
    )
}

/// A random positive token (0 stands for "no owner" in SQL comparisons).
///
/// # Safety
///
/// No precondition beyond running in a process of the server: `pg_strong_random` writes only the
/// caller's buffer, and `MyProcPid` is set when the process starts.
unsafe fn new_owner_token() -> i64 {
    let mut buf = [0u8; 8];
    // SAFETY: pg_strong_random writes at most `buf.len()` bytes to `buf`, a live local array.
    let ok = unsafe { pg_sys::pg_strong_random(buf.as_mut_ptr().cast(), buf.len()) };
    let mut token = i64::from_ne_bytes(buf) & i64::MAX;
    if !ok || token == 0 {
        // no strong randomness: time and pid still differ between servers
        // SAFETY: MyProcPid is this process's plain int global, set at its start, read by value.
        token = (crate::runtime::clock::unix_us() ^ (unsafe { pg_sys::MyProcPid } as i64) << 40)
            & i64::MAX
            | 1;
    }
    token
}

/// The shared region, or None when the library was not preloaded.
// (clippy would read SHARED in place, `SHARED.as_ref()`: a reference to a
// `static mut`, which the raw pointer avoids)
#[allow(clippy::deref_addrof)]
pub fn shared() -> Option<&'static Shared> {
    // SAFETY: SHARED is written only by `on_shmem_startup`: in the postmaster before it forks (the
    // children inherit it) or in an EXEC_BACKEND child at its start, before any caller of this
    // runs; the postmaster, which writes it again after a crash, never calls this. Read through a
    // raw pointer (no `&mut` exists), on the process's one thread, so the `&'static` stays valid.
    unsafe { (*(&raw const SHARED)).as_ref() }
}

/// An exclusive LWLock, released on drop. Never raise an ERROR while holding
/// one: copy what the error needs, drop the guard, then raise.
pub struct LockGuard(*mut pg_sys::LWLock);

impl Drop for LockGuard {
    fn drop(&mut self) {
        // SAFETY: a LockGuard is made only by `lock_at`, right after this process acquired that
        // lock (a live LWLock of the tranche); it is not Send, so it is dropped in that process,
        // once. An ERROR unwinds the Rust frames (this drop, with the lock still held) before
        // PostgreSQL's abort releases every LWLock, and a FATAL exits without returning to them, so
        // the lock is held here.
        unsafe { pg_sys::LWLockRelease(self.0) };
    }
}

/// Why a tag got no slot.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum NoTagSlot {
    /// Every slot of the server is in use.
    ServerFull,
    /// The database holds `held` slots, leaf_id.max_tags_per_database.
    DatabaseFull { held: usize },
    /// The database holds `held` slots, at least its share, and the unheld
    /// ones are kept for the other databases to reach theirs.
    DatabaseShare { held: usize, share: usize },
    /// `loading` of the database's slots wait for their first refill, its
    /// bound: a caller may wait for one of them to be answered.
    DatabaseLoading { loading: usize },
}

/// What the tag slots hold, as seen by a database whose tag has none
/// (`Shared::tag_census_locked`).
#[derive(Default)]
struct TagCensus {
    /// The first slot no database owns.
    free: Option<usize>,
    /// The first slot whose tag is Missing (a database owns it, unused).
    missing: Option<usize>,
    /// The database's own slots, Missing ones aside.
    held: usize,
    /// How many of those wait for their first refill.
    loading: usize,
    /// The slots nobody holds: free, or Missing.
    unheld: usize,
    /// Per database, the slots it holds (Missing ones aside).
    held_by: std::collections::HashMap<u32, usize>,
}

/// Where a tag stands among the tag slots of its database.
enum TagLookup {
    /// It has slot `slot`, of epoch `epoch`.
    Found { slot: usize, epoch: u64 },
    /// It has none: what the slots hold.
    Absent(TagCensus),
}

/// Every reserved mark is in use (the caller may free those of dropped
/// databases and try again).
pub struct MarksFull;

impl Shared {
    /// Global lock held: `db`'s generator may issue with `worker_id` up to
    /// `until_ms` (noted before the generator gets the lease).
    pub fn note_worker_id_lease_locked(&self, worker_id: i64, dboid: u32, until_ms: i64) {
        // SAFETY: `header` points to the region's header (on_shmem_startup: aligned, valid for the
        // server's lifetime). `worker_id_leases` is read and written only with the global lock
        // held: the callers hold it (`note_worker_id_lease`, `publish_claim`), so this `&mut` to
        // the array is the only access to it in any process while it lives.
        let Some(e) = (unsafe { (*self.header).worker_id_leases.get_mut(worker_id as usize) })
        else {
            return;
        };
        if e.dboid == dboid {
            e.until_ms = e.until_ms.max(until_ms);
        } else {
            *e = WorkerIdLease { dboid, until_ms };
        }
    }

    /// `db`'s generator was closed having issued with `worker_id` up to
    /// `issued_ms`: no more is issued under its lease, so another database
    /// taking the id needs only to start above that.
    pub fn note_worker_id_closed(&self, worker_id: i64, dboid: u32, issued_ms: i64) {
        let _g = self.lock_global();
        // SAFETY: as in `note_worker_id_lease_locked`: the header is valid, and the global lock,
        // taken just above, is held by every access to `worker_id_leases`, so this `&mut` is the
        // only one.
        if let Some(e) = unsafe { (*self.header).worker_id_leases.get_mut(worker_id as usize) }
            && e.dboid == dboid
        {
            e.until_ms = issued_ms;
        }
    }

    /// `note_worker_id_lease_locked`, taking the global lock.
    pub fn note_worker_id_lease(&self, worker_id: i64, dboid: u32, until_ms: i64) {
        let _g = self.lock_global();
        self.note_worker_id_lease_locked(worker_id, dboid, until_ms);
    }

    /// Global lock held: the end of the lease a database of this server last
    /// held with `worker_id` in this lifetime (0: none), unless that database
    /// is `except`.
    fn noted_lease_locked(&self, worker_id: i64, except: Option<u32>) -> i64 {
        // SAFETY: the header is valid (see `note_worker_id_lease_locked`); the callers hold the
        // global lock (`other_database_lease`, `lifetime_lease`, `publish_claim`), which every
        // write of `worker_id_leases` holds, so nothing writes the array while it is read.
        match unsafe { (*self.header).worker_id_leases.get(worker_id as usize) } {
            Some(e) if e.dboid != 0 && Some(e.dboid) != except => e.until_ms,
            _ => 0,
        }
    }

    /// Global lock held: the end of the lease another database of this
    /// server last held with `worker_id` in this lifetime (0: none).
    pub fn other_database_lease_locked(&self, worker_id: i64, dboid: u32) -> i64 {
        self.noted_lease_locked(worker_id, Some(dboid))
    }

    /// `other_database_lease_locked`, taking the global lock.
    pub fn other_database_lease(&self, worker_id: i64, dboid: u32) -> i64 {
        let _g = self.lock_global();
        self.other_database_lease_locked(worker_id, dboid)
    }

    /// The end of the lease any database of this server, this one included,
    /// last held with `worker_id` in this lifetime (0: none), for a claim
    /// that starts the generator afresh: this database may have issued with
    /// the id before, under a registry that is gone (dropped and created
    /// again) or with another id in between.
    pub fn lifetime_lease(&self, worker_id: i64) -> i64 {
        let _g = self.lock_global();
        self.noted_lease_locked(worker_id, None)
    }

    /// How many resets of a segment reserve of this server started and how
    /// many finished in this lifetime (any database's: a worker then reads
    /// its file again).
    pub fn reserve_resets(&self, dboid: u32) -> &[AtomicU64; 2] {
        // SAFETY: the header is in shared memory, valid and aligned for the server's lifetime (see
        // `on_shmem_startup`); the borrowed counters are atomics, which any process may use at
        // once.
        unsafe { &(*self.header).reserve_resets[dboid as usize % RESET_BUCKETS] }
    }

    /// This server lifetime's owner token (see `Header::owner_token`).
    pub fn owner_token(&self) -> i64 {
        // SAFETY: the header is valid for the server's lifetime; `owner_token` is written once in
        // `on_shmem_startup`, before any other process maps the region, and never again.
        unsafe { (*self.header).owner_token }
    }

    pub fn n_tags(&self) -> usize {
        self.n_tags
    }
    /// How many reserved-range marks shared memory holds.
    pub fn n_marks(&self) -> usize {
        n_marks(self.n_tags)
    }
    pub fn n_dbs(&self) -> usize {
        self.n_dbs
    }
    pub fn tag(&self, i: usize) -> &TagSlot {
        assert!(i < self.n_tags);
        // SAFETY: `i < n_tags` (asserted) and `tags` points to the `n_tags` slots `layout` placed
        // in the region from ShmemInitStruct: aligned, valid for the server's lifetime, zeroed or
        // initialised (a valid TagSlot either way). Its fields are atomics, or the tag bytes and
        // error cell that are used only under the locks named there, so a shared reference is sound
        // in every process.
        unsafe { &*self.tags.add(i) }
    }
    pub fn db(&self, i: usize) -> &DbSlot {
        assert!(i < self.n_dbs);
        // SAFETY: `i < n_dbs` (asserted) and `dbs` points to the `n_dbs` slots `layout` placed in
        // the region: aligned, valid for the server's lifetime, zeroed or initialised at startup.
        // Its fields are atomics, the condition variable (PostgreSQL's CV calls lock it) and
        // UnsafeCells used only as argued at their accesses, so a shared reference is sound in
        // every process.
        unsafe { &*self.dbs.add(i) }
    }
    fn lock_at(&self, i: usize) -> LockGuard {
        // SAFETY: `locks` is the tranche's array of `n_locks(n_dbs, n_tags)` LWLocks in shared
        // memory (GetNamedLWLockTranche in the startup hook). `i` is in it: 0, `1 + db` or `1 +
        // n_dbs + tag`, where every caller passes an index it got from `db_slot`/`find_db_slot` or
        // a `0..n` loop, and lock_tag's callers index the slot first with `tag(i)`, which asserts
        // (not checked here). Only backends and workers call this, which have the PGPROC that
        // LWLockAcquire waits with.
        unsafe {
            let lock = &raw mut (*self.locks.add(i)).lock;
            pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
            LockGuard(lock)
        }
    }
    /// Guards slot allocation (tag and database slots).
    pub fn lock_global(&self) -> LockGuard {
        self.lock_at(0)
    }
    pub fn lock_db(&self, i: usize) -> LockGuard {
        self.lock_at(1 + i)
    }
    /// Guards a tag's switch, refill and error cell.
    pub fn lock_tag(&self, i: usize) -> LockGuard {
        self.lock_at(1 + self.n_dbs + i)
    }

    /// The database's slot, allocated if needed. None when all are taken.
    /// The database's slot if it has one (taking none).
    pub fn find_db_slot(&self, dboid: u32) -> Option<usize> {
        (0..self.n_dbs).find(|&i| self.db(i).dboid.load(SeqCst) == dboid)
    }

    pub fn db_slot(&self, dboid: u32) -> Option<usize> {
        let find = || self.find_db_slot(dboid);
        if let Some(i) = find() {
            return Some(i);
        }
        let _g = self.lock_global();
        if let Some(i) = find() {
            return Some(i);
        }
        // a free slot, else one whose database no worker serves and that
        // holds nothing of its own (`DbSlot::left`): a role that can
        // connect to many databases with leaf_id must not keep them all
        let i = (0..self.n_dbs)
            .find(|&i| self.db(i).dboid.load(SeqCst) == 0)
            .or_else(|| (0..self.n_dbs).find(|&i| self.db_left_locked(i)))?;
        let db = self.db(i);
        db.workers.iter().for_each(WorkerSlot::clear);
        db.snowflake_state
            .store(SnowflakeState::NotRequested as u32, SeqCst);
        db.worker_id.store(-1, SeqCst);
        db.snowflake_lease_wanted.store(false, SeqCst);
        db.snowflake_contention.store(false, SeqCst);
        db.generator.clear();
        // the owner first, then the count: a backend that read the count
        // before it (and the old owner after) sees the count move
        db.dboid.store(dboid, SeqCst);
        db.assigned.fetch_add(1, SeqCst);
        Some(i)
    }

    /// Global lock held: has the database of slot `i` left it, so that
    /// another database may take it? No worker of it runs or is starting,
    /// no renewal helper, no snowflake claim is asked for or held (the
    /// generator closed when its worker left), and none of its tags is
    /// cached (they went with its segment worker). What it loses is kept
    /// elsewhere: the worker id's lease in the header (a generator started
    /// afresh starts above it), and the tags' marks and recorded ends.
    fn db_left_locked(&self, i: usize) -> bool {
        let db = self.db(i);
        let dboid = db.dboid.load(SeqCst);
        dboid != 0
            && db.workers.iter().all(|w| {
                let asked = w.requested_at.load(SeqCst);
                // (a worker registered and never attached: given up after
                // the backends' grace, as they do)
                w.pid.load(SeqCst) == 0
                    && (asked == 0
                        || crate::runtime::clock::unix_ms() - asked > WORKER_START_GRACE_MS)
            })
            && db.copy_slots.iter().all(|c| c.idle())
            && matches!(
                db.snowflake_state.load(SeqCst),
                s if s == SnowflakeState::NotRequested as u32 || s == SnowflakeState::Failed as u32
            )
            && db.generator.is_closed()
            && !(0..self.n_tags).any(|t| self.tag(t).dboid.load(SeqCst) == dboid)
    }

    /// Find the tag's slot in the database, or allocate one in Loading state,
    /// within the database's bounds (`settings::TagBounds`): one tenant
    /// inventing tag names, or with more tags than its share, must not take
    /// the slots every database shares. Returns (slot, epoch).
    pub fn find_or_allocate_tag(
        &self,
        dboid: u32,
        tag: &str,
        bounds: settings::TagBounds,
    ) -> Result<(usize, u64), NoTagSlot> {
        let _g = self.lock_global();
        let census = match self.tag_census_locked(dboid, tag) {
            TagLookup::Found { slot, epoch } => return Ok((slot, epoch)),
            TagLookup::Absent(census) => census,
        };
        let i = census
            .free
            .or(census.missing)
            .ok_or(NoTagSlot::ServerFull)?;
        let held = census.held;
        if held >= bounds.max_held {
            return Err(NoTagSlot::DatabaseFull { held });
        }
        // beyond its share, only while every other database that uses
        // leaf_id (a worker runs, or a tag is cached) can still reach its
        // own, and one share stays for those that come (a free database
        // slot, or one whose database has left it): a database below its
        // share does not find the server full because of one above it
        if held >= bounds.share
            && census.unheld <= self.kept_for_others_locked(dboid, &census.held_by, bounds.share)
        {
            return Err(NoTagSlot::DatabaseShare {
                held,
                share: bounds.share,
            });
        }
        if census.loading >= bounds.max_loading {
            return Err(NoTagSlot::DatabaseLoading {
                loading: census.loading,
            });
        }
        Ok((i, self.claim_tag_slot_locked(i, dboid, tag)))
    }

    /// Global lock held: the slot of `tag` in database `dboid` with its
    /// epoch, or, when it has none, what the tag slots hold (`TagCensus`).
    fn tag_census_locked(&self, dboid: u32, tag: &str) -> TagLookup {
        let mut census = TagCensus::default();
        for i in 0..self.n_tags {
            let slot = self.tag(i);
            let owner = slot.dboid.load(SeqCst);
            let status = slot.status();
            if owner == dboid && status != TagStatus::Missing {
                if slot.tag_is(tag) {
                    return TagLookup::Found {
                        slot: i,
                        epoch: slot.epoch.load(SeqCst),
                    };
                }
                census.held += 1;
                census.loading += usize::from(status == TagStatus::Loading);
            }
            if owner == 0 || status == TagStatus::Missing {
                census.unheld += 1;
            } else {
                *census.held_by.entry(owner).or_default() += 1;
            }
            if census.free.is_none() && owner == 0 {
                census.free = Some(i);
            }
            if census.missing.is_none() && owner != 0 && status == TagStatus::Missing {
                census.missing = Some(i);
            }
        }
        TagLookup::Absent(census)
    }

    /// Global lock held: how many unheld tag slots stay for the databases
    /// other than `dboid`: what each one in use (a worker runs, or a tag is
    /// cached) lacks of its `share`, and one share for those that come
    /// when a database slot is free or its database has left it.
    fn kept_for_others_locked(
        &self,
        dboid: u32,
        held_by: &std::collections::HashMap<u32, usize>,
        share: usize,
    ) -> usize {
        let (mut kept_for_others, mut newcomers) = (0, false);
        for d in 0..self.n_dbs {
            let db = self.db(d);
            let o = db.dboid.load(SeqCst);
            if o == dboid {
                continue;
            }
            let theirs = held_by.get(&o).copied().unwrap_or(0);
            if o != 0 && (theirs > 0 || db.any_worker()) {
                kept_for_others += share.saturating_sub(theirs);
            } else {
                newcomers = true;
            }
        }
        if newcomers {
            kept_for_others += share;
        }
        kept_for_others
    }

    /// Global lock held: give tag slot `i` (free, or Missing) to `tag` of
    /// database `dboid`, in Loading state with its counters at zero and a
    /// refill asked for. Returns the slot's new epoch.
    fn claim_tag_slot_locked(&self, i: usize, dboid: u32, tag: &str) -> u64 {
        let slot = self.tag(i);
        let _t = self.lock_tag(i);
        slot.epoch.fetch_add(1, SeqCst);
        slot.pair.retire();
        // SAFETY: both the global lock (held by the caller, `find_or_allocate_tag`) and the slot's
        // lock (`_t`) are held, and every reader of the bytes holds one of them (`tag()` the
        // slot's, `tag_is` the global), so no process reads or writes them meanwhile; a tag longer
        // than the array fails the bounds check (a panic, no write past).
        unsafe { (&mut *slot.tag.get())[..tag.len()].copy_from_slice(tag.as_bytes()) };
        slot.tag_len.store(tag.len() as u32, SeqCst);
        for counter in [&slot.dynamic_step, &slot.table_step, &slot.last_refill_us] {
            counter.store(0, SeqCst);
        }
        slot.refills.store(0, SeqCst);
        slot.waits.store(0, SeqCst);
        slot.refill_in_flight.store(false, SeqCst);
        slot.contention.store(false, SeqCst);
        slot.refill_requested.store(true, SeqCst);
        slot.encoding.clear();
        slot.draw_role.store(0, SeqCst);
        slot.status.store(TagStatus::Loading as u32, SeqCst);
        slot.dboid.store(dboid, SeqCst);
        slot.epoch.load(SeqCst)
    }

    /// Free a slot (deleted tag, dropped extension), if it still has this epoch.
    pub fn free_tag(&self, i: usize, epoch: u64) {
        let _g = self.lock_global();
        let slot = self.tag(i);
        let _t = self.lock_tag(i);
        if slot.epoch.load(SeqCst) != epoch {
            return;
        }
        slot.epoch.fetch_add(1, SeqCst);
        slot.pair.retire();
        slot.encoding.clear();
        slot.status.store(TagStatus::Free as u32, SeqCst);
        slot.dboid.store(0, SeqCst);
    }

    /// Give back the slots of databases that no longer exist (dropped while
    /// their worker was gone). `exists` asks the catalog.
    pub fn reclaim_dropped_databases(&self, exists: impl Fn(u32) -> bool) -> bool {
        let mut reclaimed = false;
        for d in 0..self.n_dbs {
            let db = self.db(d);
            let dboid = db.dboid.load(SeqCst);
            if dboid == 0 || db.any_worker() || exists(dboid) {
                continue;
            }
            self.free_tags_of(dboid);
            let _g = self.lock_global();
            if db.dboid.load(SeqCst) == dboid && !db.any_worker() {
                db.dboid.store(0, SeqCst);
                db.assigned.fetch_add(1, SeqCst);
                reclaimed = true;
            }
        }
        reclaimed
    }

    /// Drop every cached tag of a database: their ranges become gaps.
    pub fn free_tags_of(&self, dboid: u32) {
        for i in 0..self.n_tags {
            let slot = self.tag(i);
            if slot.dboid.load(SeqCst) != dboid {
                continue;
            }
            // the owner and the epoch read under the global lock, which
            // every allocation holds: a slot that went to another database
            // since the look above is left alone
            let epoch = {
                let _g = self.lock_global();
                (slot.dboid.load(SeqCst) == dboid).then(|| slot.epoch.load(SeqCst))
            };
            if let Some(epoch) = epoch {
                self.free_tag(i, epoch);
            }
        }
    }

    fn mark_key(&self) -> (u64, u64) {
        // SAFETY: the header is valid for the server's lifetime; `mark_key` is written once in
        // `on_shmem_startup`, before any other process maps the region, and never again.
        unsafe { (*self.header).mark_key }
    }

    fn mark(&self, i: usize) -> &ReservedMark {
        assert!(i < n_marks(self.n_tags));
        // SAFETY: `i < n_marks(n_tags)` (asserted), the count `layout` reserved, the same in every
        // process (leaf_id.max_tags and the test mark count are PGC_POSTMASTER); `marks` is aligned
        // and valid for the server's lifetime, and a ReservedMark is atomics only (zeroed = free).
        unsafe { &*self.marks.add(i) }
    }

    /// The tag's mark, if it has one. Global lock held.
    fn find_mark(&self, dboid: u32, tag: &str) -> Option<&ReservedMark> {
        let h = tag_hash(self.mark_key(), tag);
        (0..n_marks(self.n_tags))
            .map(|i| self.mark(i))
            .find(|m| m.dboid.load(SeqCst) == dboid && m.tag_hash.load(SeqCst) == h)
    }

    /// The end of the highest range this server lifetime reserved for the
    /// tag (0 if none).
    pub fn reserved_end(&self, dboid: u32, tag: &str) -> i64 {
        let _g = self.lock_global();
        self.find_mark(dboid, tag).map_or(0, |m| m.end.load(SeqCst))
    }

    /// Remember that the tag's ranges now reach `end`. Call before the range
    /// is published. `durable`: the same transaction records `end` in the
    /// tag's `leaf_alloc_encoding` row. With every mark taken, a durable
    /// one is reused (this database's first): a tag admin who creates tag
    /// names by the thousand must not stop every database's new tags.
    pub fn record_reserved(
        &self,
        dboid: u32,
        tag: &str,
        end: i64,
        durable: bool,
    ) -> Result<(), MarksFull> {
        let _g = self.lock_global();
        if let Some(m) = self.find_mark(dboid, tag) {
            m.end.fetch_max(end, SeqCst);
            m.durable.store(durable, SeqCst);
            return Ok(());
        }
        let marks = || (0..n_marks(self.n_tags)).map(|i| self.mark(i));
        let taken = marks()
            .find(|m| m.dboid.load(SeqCst) == 0)
            .or_else(|| marks().find(|m| m.dboid.load(SeqCst) == dboid && m.durable.load(SeqCst)))
            .or_else(|| marks().find(|m| m.durable.load(SeqCst)))
            .ok_or(MarksFull)?;
        taken.tag_hash.store(tag_hash(self.mark_key(), tag), SeqCst);
        taken.end.store(end, SeqCst);
        taken.durable.store(durable, SeqCst);
        taken.dboid.store(dboid, SeqCst);
        Ok(())
    }

    /// Free the marks of databases that no longer exist (`exists` asks the
    /// catalog, outside the lock). True if any was freed.
    pub fn forget_marks_of_dropped_databases(&self, exists: impl Fn(u32) -> bool) -> bool {
        let n = n_marks(self.n_tags);
        let owners: std::collections::BTreeSet<u32> = {
            let _g = self.lock_global();
            (0..n).map(|i| self.mark(i).dboid.load(SeqCst)).collect()
        };
        let dropped: Vec<u32> = owners
            .into_iter()
            .filter(|&o| o != 0 && !exists(o))
            .collect();
        let _g = self.lock_global();
        for i in 0..n {
            let m = self.mark(i);
            if dropped.contains(&m.dboid.load(SeqCst)) {
                m.dboid.store(0, SeqCst);
            }
        }
        !dropped.is_empty()
    }

    /// Wake the database's worker of this mode, if it runs.
    pub fn wake_worker(&self, db: usize, role: Role) {
        let latch = self.db(db).worker(role).latch.load(SeqCst);
        if !latch.is_null() {
            // SAFETY: a non-null `latch` was stored by the worker as its MyLatch, which after
            // InitProcess is the `procLatch` of its PGPROC: shared memory, valid for the server's
            // lifetime. If the worker has exited since the load, the PGPROC is free or another
            // process's, and SetLatch on it is at worst a spurious wakeup, which every latch wait
            // of PostgreSQL tolerates.
            unsafe { pg_sys::SetLatch(latch) };
        }
    }

    pub fn broadcast(&self, db: usize) {
        // SAFETY: the condition variable is in the database slot, in shared memory for the server's
        // lifetime, initialised by ConditionVariableInit at startup; PostgreSQL's CV calls take its
        // spinlock, so many processes may use it at once. Broadcast needs MyProc: the callers are
        // backends and workers (`detach` too, which runs before ProcKill gives up the PGPROC).
        unsafe { pg_sys::ConditionVariableBroadcast(self.db(db).cv.get()) };
    }
}

#[cfg(test)]
mod tests {
    use super::{DbSlot, StandbyWaitNote};

    /// A wait's since stays whatever the note says meanwhile, and starts
    /// again only after the wait ended.
    #[test]
    fn a_wait_keeps_its_since_until_it_ends() {
        // SAFETY: zeroed memory is a note that waits for nothing (the
        // module's doc: shared memory starts zeroed).
        let note: Box<StandbyWaitNote> = unsafe { Box::new_zeroed().assume_init() };
        let since = |n: &StandbyWaitNote| n.get().map(|w| w.since_us);
        assert_eq!(since(&note), None);
        note.set("slot s1", Some(800), 100);
        note.set("slot s1, slot s2", Some(800), 200);
        note.set("the synchronous standbys", None, 300);
        note.set("slot s2", None, 400);
        assert_eq!(since(&note), Some(100));
        assert_eq!(
            note.get().map(|w| (w.what, w.lag_bytes)),
            Some(("slot s2".into(), None))
        );
        note.set("", None, 500);
        assert_eq!(since(&note), None);
        note.set("slot s1", Some(8), 600);
        assert_eq!(since(&note), Some(600));
    }

    /// A reader beside the writer sees one of the names written, whole:
    /// never the start of one with the rest of another.
    #[test]
    fn a_node_name_is_never_read_half_written() {
        let long = "a".repeat(200);
        // SAFETY: zeroed memory is the state PostgreSQL's shared memory
        // starts in, and a valid empty slot (the module's doc): atomics,
        // plain integers and C structs of integers and pointers.
        let slot: Box<DbSlot> = unsafe { Box::new_zeroed().assume_init() };
        slot.set_node_name(&long);
        struct Shared(Box<DbSlot>);
        // SAFETY: the two threads touch only the slot's node name, which is
        // atomics (`set_node_name`, `node_name`); nothing else of the slot.
        unsafe impl Sync for Shared {}
        impl Shared {
            fn slot(&self) -> &DbSlot {
                &self.0
            }
        }
        let shared = &Shared(slot);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..5_000 {
                    let name = if i % 2 == 0 { "bb" } else { &long };
                    shared.slot().set_node_name(name);
                    // (a claim writes it once; a writer that never pauses
                    // could keep the reader from a whole read)
                    std::thread::sleep(std::time::Duration::from_micros(5));
                }
            });
            for _ in 0..50_000 {
                let name = shared.slot().node_name();
                assert!(name == "bb" || name == long, "a torn name: {name:?}");
            }
        });
    }
}
