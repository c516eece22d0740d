//! Every `leaf_id.*` setting, with the descriptions `pg_settings` shows.
//! Must not import the rest of the crate but `errors` and the pure core's
//! parser of a setting (everything reads settings).

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::CString;

pub static MAX_TAGS: GucSetting<i32> = GucSetting::<i32>::new(1024);
pub static MAX_DATABASES: GucSetting<i32> = GucSetting::<i32>::new(16);
pub static MAX_TAGS_PER_DATABASE: GucSetting<i32> = GucSetting::<i32>::new(-1);
pub static SEGMENT_DURATION: GucSetting<i32> = GucSetting::<i32>::new(900);
pub static MAX_STEP: GucSetting<i32> = GucSetting::<i32>::new(1_000_000);
pub static REFILL_TIMEOUT: GucSetting<i32> = GucSetting::<i32>::new(10_000);
pub static TAG_RESYNC_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(60);
pub static WORKER_IDLE_TIMEOUT: GucSetting<i32> = GucSetting::<i32>::new(60_000);
pub static CITUS_RESERVE: GucSetting<i32> = GucSetting::<i32>::new(4);
pub static STANDBY_CONFIRM_TIMEOUT: GucSetting<i32> = GucSetting::<i32>::new(10_000);
pub static SYNCHRONIZED_STANDBY_SLOTS: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(None);

pub static WORKER_ID: GucSetting<i32> = GucSetting::<i32>::new(-1);
pub static NODE_NAME: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
pub static EPOCH_MS: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"1288834974657"));
pub static MAX_BACKWARD_MS: GucSetting<i32> = GucSetting::<i32>::new(5);
/// How far ahead of the clock the snowflake generator may issue once a
/// millisecond's 4,096 sequence numbers are used (0: wait, as Leaf does).
pub static MAX_RUN_AHEAD_MS: GucSetting<i32> = GucSetting::<i32>::new(0);
pub static RANDOM_SEQUENCE_START: GucSetting<bool> = GucSetting::<bool>::new(true);
pub static HEARTBEAT_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(1000);
pub static LEASE_AHEAD: GucSetting<i32> = GucSetting::<i32>::new(3000);
pub static TEST_CLOCK_OFFSET_MS: GucSetting<i32> = GucSetting::<i32>::new(0);
pub static TEST_FAULT_POINT: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
pub static TEST_MARKS: GucSetting<i32> = GucSetting::<i32>::new(0);
pub static TEST_SNOWFLAKE_TAKE_PAUSE_MS: GucSetting<i32> = GucSetting::<i32>::new(0);

/// `preloading`: PGC_POSTMASTER settings can only be defined while
/// shared_preload_libraries is processed; loaded later (a misconfiguration
/// the functions report), leaf_id defines only the others.
pub fn register(preloading: bool) {
    if preloading {
        register_postmaster_settings();
    }
    GucRegistry::define_int_guc(
        c"leaf_id.segment_duration",
        c"Target lifetime of one segment, for the dynamic step.",
        c"A segment used up faster doubles the next step (up to leaf_id.max_step); one that lasts twice as long halves it (not below the table's step).",
        &SEGMENT_DURATION,
        1,
        i32::MAX / 2,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"leaf_id.max_tags_per_database",
        c"Number of tag slots one database may hold (of leaf_id.max_tags); -1: its share, as other databases need theirs.",
        c"With -1, beyond its share (leaf_id.max_tags / leaf_id.max_databases) a database gets a new tag slot only while every other database in use can still reach its share and one share stays free for a database that comes; half its share (at least 8; with a number: an eighth of it) of its tags may wait for their first refill at once. Beyond that a new tag fails with 53400.",
        &MAX_TAGS_PER_DATABASE,
        -1,
        1_000_000,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"leaf_id.max_step",
        c"Largest step the dynamic step may grow to.",
        c"A table step above it is still used as given.",
        &MAX_STEP,
        1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"leaf_id.refill_timeout",
        c"How long a call waits for the background worker (a refill, a worker id claim, a lease renewal) before it fails.",
        c"Calls wait only when both segments of a tag are empty, or before the first ID.",
        &REFILL_TIMEOUT,
        1,
        3_600_000,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"leaf_id.tag_resync_interval",
        c"How often the background worker checks that cached tags still exist in leaf_alloc.",
        c"A deleted tag stops issuing IDs at its next refill or resync, whichever comes first.",
        &TAG_RESYNC_INTERVAL,
        1,
        86_400,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"leaf_id.citus_reserve",
        c"Segments each tag keeps in reserve on a Citus node, for refills while a node with a copy of leaf_alloc is down; 0 = none.",
        c"While every node answers, a refill through Citus also reserves this many segments of the tag's current step in leaf_alloc, kept in a file of this data directory. When a refill through Citus fails, the next segment comes from that reserve (IDs lower than the node's latest). A restart of the same data directory keeps it; a copy of the server, a promoted standby or a reboot does not, and its ranges become gaps. No effect without Citus.",
        &CITUS_RESERVE,
        0,
        10_000,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"leaf_id.worker_idle_timeout",
        c"How long a database's background worker (one per mode: segment, snowflake) stays without work before it leaves the database; 0 = it never leaves.",
        c"Idle means no ID of its mode drawn and no refill, claim or renewal asked for. The snowflake worker's leaving closes the generator as a clean shutdown does; the segment worker's drops the cached segments (gaps). The next call that needs a worker starts it again. While it is connected, DROP DATABASE (without FORCE), CREATE DATABASE ... TEMPLATE and ALTER DATABASE ... RENAME of its database fail.",
        &WORKER_IDLE_TIMEOUT,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    // reload only: the worker's session takes the database's settings, and
    // a database owner's ALTER DATABASE ... SET of a user setting would
    // decide how long it waits (1 ms: every commit unconfirmed and its
    // range thrown away; an hour: the worker held up)
    GucRegistry::define_int_guc(
        c"leaf_id.standby_confirm_timeout",
        c"How long a leaf_id worker waits for the standbys of leaf_id.synchronized_standby_slots to confirm its commit before the job fails with 55P03.",
        c"Nothing the commit reserved is used then (it stays reserved: gaps), and the next job tries again. Callers wait up to their own leaf_id.refill_timeout.",
        &STANDBY_CONFIRM_TIMEOUT,
        1,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    // SAFETY: pgrx asks that the hooks be #[pg_guard] functions, so that a
    // panic in them becomes an ERROR: `check_standby_slots` is made by
    // `string_check_hook!`, which marks it #[pgrx::pg_guard]; no assign or
    // show hook.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"leaf_id.synchronized_standby_slots",
            c"Physical replication slots whose standbys must have flushed a leaf_id worker's commit before what it reserved is used ('*': every permanent physical slot).",
            c"A comma-separated list of slot names, '*', or empty (off). A refill, reserve, snowflake lease or worker id claim is used only once each named standby has it, so that a promoted asynchronous standby reissues nothing; the worker waits up to leaf_id.standby_confirm_timeout for it, callers up to leaf_id.refill_timeout, then they fail with 55P03.",
            &SYNCHRONIZED_STANDBY_SLOTS,
            GucContext::Sighup,
            GucFlags::default(),
            Some(check_standby_slots),
            None,
            None,
        )
    };
    GucRegistry::define_int_guc(
        c"leaf_id.worker_id",
        c"Snowflake worker id (0..1023), or -1 to claim one from the leaf_worker table.",
        c"Read when the database's snowflake worker starts, and at a reload that changes it (the worker then closes its generator and claims again). A configured id that leaf_worker gives to another node is refused.",
        &WORKER_ID,
        -1,
        1023,
        GucContext::Suset,
        GucFlags::default(),
    );
    // SAFETY: as for leaf_id.synchronized_standby_slots: `check_node_name`
    // is made by `string_check_hook!`, a #[pgrx::pg_guard] function.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"leaf_id.node_name",
            c"Name of this node in leaf_worker (at most 256 bytes); empty means the system identifier and port.",
            c"The same node name gets the same worker id back after a restart.",
            &NODE_NAME,
            GucContext::Suset,
            GucFlags::default(),
            Some(check_node_name),
            None,
            None,
        )
    };
    GucRegistry::define_int_guc(
        c"leaf_id.max_backward_ms",
        c"Clock rollback the snowflake generator waits out (twice the offset) instead of failing.",
        c"A clock further behind the last issued millisecond makes leaf_snowflake_next() fail.",
        &MAX_BACKWARD_MS,
        0,
        1000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"leaf_id.max_run_ahead_ms",
        c"How far ahead of the clock snowflake IDs may be issued once a millisecond's sequence runs out.",
        c"0 waits for the next millisecond, as Leaf does. Never past the persisted high-water mark (leaf_id.lease_ahead); a decoded ID may show a time up to this far ahead.",
        &MAX_RUN_AHEAD_MS,
        0,
        1000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_bool_guc(
        c"leaf_id.random_sequence_start",
        c"Start each millisecond's snowflake sequence at a random 0..99, as Leaf does.",
        c"Keeps id % n sharding even at low rates; off starts every millisecond at 0.",
        &RANDOM_SEQUENCE_START,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"leaf_id.heartbeat_interval",
        c"How often the background worker renews the snowflake high-water mark in leaf_worker.",
        c"Each renewal persists a mark leaf_id.lease_ahead in the future.",
        &HEARTBEAT_INTERVAL,
        10,
        60_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"leaf_id.lease_ahead",
        c"How far ahead of the clock the persisted snowflake high-water mark is set.",
        c"No ID beyond the persisted mark is issued; after a crash, IDs are refused until the clock passes it. Must exceed leaf_id.heartbeat_interval.",
        &LEASE_AHEAD,
        20,
        600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"leaf_id.test_clock_offset_ms",
        c"FOR TESTS ONLY: shifts the snowflake generator's clock by this many milliseconds.",
        c"Negative values move time backwards. Superuser only.",
        &TEST_CLOCK_OFFSET_MS,
        -86_400_000,
        86_400_000,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"leaf_id.test_snowflake_take_pause_ms",
        c"FOR TESTS ONLY: a snowflake call pauses this long before it takes from the generator and again after it, once per call.",
        c"Lets a test give the database's shared slot to another database and back inside a call. 0: never. Superuser only.",
        &TEST_SNOWFLAKE_TAKE_PAUSE_MS,
        0,
        600_000,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_string_guc(
        c"leaf_id.test_fault_point",
        c"FOR TESTS ONLY: the background worker crashes or pauses when it reaches the named point; empty: never.",
        c"Points: after_refill_commit (crash); slow_worker_exit (an idle worker pauses 1.5 s after it decides to leave and 0.3 s after it gave its slots back); slow_tag_lookup (a refill that finds no row pauses 1.5 s before it looks again, and 3 s before it answers that the tag does not exist); slow_lease_move (a snowflake renewal pauses 3 s after its commit, before the lease moves). Lets tests place events inside a window between two of the worker's steps.",
        &TEST_FAULT_POINT,
        GucContext::Sighup,
        GucFlags::default(),
    );
}

fn fault_point_is(name: &str) -> bool {
    TEST_FAULT_POINT
        .get()
        .is_some_and(|p| p.to_bytes() == name.as_bytes())
}

/// A crash for tests at a named point of a worker job
/// (`leaf_id.test_fault_point`).
pub fn fault_point(name: &str) {
    if fault_point_is(name) {
        pgrx::log!("leaf_id: leaf_id.test_fault_point = {name}: crashing");
        std::process::abort();
    }
}

/// The pause of a snowflake call around its take
/// (`leaf_id.test_snowflake_take_pause_ms`; a plain read when it is 0).
#[inline]
pub fn snowflake_take_pause(step: &str) {
    let ms = TEST_SNOWFLAKE_TAKE_PAUSE_MS.get();
    if ms > 0 {
        pgrx::log!("leaf_id: leaf_id.test_snowflake_take_pause_ms: pausing {ms} ms {step}");
        std::thread::sleep(std::time::Duration::from_millis(ms as u64));
    }
}

/// A pause for tests at a named point (`leaf_id.test_fault_point`); `step`
/// tells the two pauses of one point apart in the log.
pub fn pause_point(name: &str, step: &str, pause: std::time::Duration) {
    if fault_point_is(name) {
        pgrx::log!(
            "leaf_id: leaf_id.test_fault_point = {name}: pausing {} ms {step}",
            pause.as_millis()
        );
        std::thread::sleep(pause);
    }
}

fn register_postmaster_settings() {
    GucRegistry::define_int_guc(
        c"leaf_id.max_tags",
        c"Number of segment-mode tags that shared memory can cache, over all databases.",
        c"Each cached tag takes one slot; deleted tags free theirs. Requires a restart.",
        &MAX_TAGS,
        1,
        1_000_000,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"leaf_id.max_databases",
        c"Number of databases that can use leaf_id at once.",
        c"Each such database also needs up to two of max_worker_processes (one worker per mode it uses). A database whose workers have left it (idle) gives its slot to another one that needs it. Requires a restart.",
        &MAX_DATABASES,
        1,
        10_000,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"leaf_id.test_marks",
        c"Tests only: the number of reserved-range marks in shared memory; 0 = 4 per leaf_id.max_tags, at least 16384.",
        c"Lets a test fill the marks with a few tags. Requires a restart.",
        &TEST_MARKS,
        0,
        1_000_000,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"leaf_id.epoch_ms",
        c"Snowflake epoch in Unix milliseconds (Leaf's default 1288834974657, 2010-11-04).",
        c"Must not be in the future, and its 41 bits of milliseconds must not have run out. Requires a restart.",
        &EPOCH_MS,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

/// What one database may hold of the `n_tags` tag slots that the
/// `n_dbs` database slots share (`Shared::find_or_allocate_tag`).
#[derive(Clone, Copy, Debug)]
pub struct TagBounds {
    /// leaf_id.max_tags_per_database when set (else usize::MAX).
    pub max_held: usize,
    /// When it is not set (-1), the database's share, max_tags /
    /// max_databases: beyond it a database takes a slot only while every
    /// other database in use can still reach its own, and a share stays
    /// for a database that comes (usize::MAX: no share rule).
    pub share: usize,
    /// How many of its tags may wait for their first refill at once.
    pub max_loading: usize,
}

pub fn tag_bounds(n_tags: usize, n_dbs: usize) -> TagBounds {
    match MAX_TAGS_PER_DATABASE.get() {
        n if n < 0 => {
            let share = (n_tags / n_dbs.max(1)).max(1);
            TagBounds {
                max_held: usize::MAX,
                share,
                max_loading: (share / 2).max(8),
            }
        }
        n => TagBounds {
            max_held: (n as usize).max(1),
            share: usize::MAX,
            max_loading: (n as usize / 8).max(8),
        },
    }
}

/// The epoch setting, parsed. `Err` carries why it is invalid.
pub fn epoch_ms() -> Result<i64, String> {
    let raw = EPOCH_MS
        .get()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    raw.trim()
        .parse::<i64>()
        .map_err(|_| format!("leaf_id.epoch_ms = \"{raw}\" is not a number of milliseconds"))
}

/// Longest `leaf_id.node_name`: the bytes shared memory keeps of it (the
/// renewals and the close compare the row's name with the kept one, so a
/// longer name would never match).
pub const NODE_NAME_MAX_BYTES: usize = 256;

/// A string setting's check hook named `$name`: `$why` says why a value
/// is refused (None: it is accepted); a refusal is 22023 with that detail.
macro_rules! string_check_hook {
    ($name:ident, $why:expr) => {
        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn $name(
            newval: *mut *mut std::ffi::c_char,
            _extra: *mut *mut std::ffi::c_void,
            _source: pgrx::pg_sys::GucSource::Type,
        ) -> bool {
            // SAFETY: PostgreSQL calls a string setting's check hook with
            // `newval` pointing to the `char *` of the candidate value
            // (guc.c's call_string_check_hook passes on its caller's), valid
            // to read during the call; the value itself may be NULL (a NULL
            // boot value).
            let value = unsafe { *newval };
            if value.is_null() {
                return true;
            }
            let why: fn(&std::ffi::CStr) -> Option<String> = $why;
            // SAFETY: `value` is not NULL (checked): the candidate string,
            // NUL-terminated and malloc'd by guc.c, which keeps it until the
            // hook returns; `why` only reads it and keeps no borrow.
            match why(unsafe { std::ffi::CStr::from_ptr(value) }) {
                None => true,
                Some(detail) => refuse_value(detail),
            }
        }
    };
}

/// A check hook's refusal: 22023, with `detail`.
fn refuse_value(detail: String) -> bool {
    let detail = CString::new(detail).expect("no NUL");
    // SAFETY: called only from the check hooks of `string_check_hook!`, on
    // the process's one thread, where guc.c reads GUC_check_errcode's code
    // and GUC_check_errdetail_string after the hook returns false (it resets
    // both before each hook call). The detail is pstrdup'd into the current
    // memory context, which lives until guc.c reports it right after the
    // hook returns; `detail` outlives the copy.
    unsafe {
        pgrx::pg_sys::GUC_check_errcode(crate::errors::code_of(
            pgrx::PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        ));
        pgrx::pg_sys::GUC_check_errdetail_string = pgrx::pg_sys::pstrdup(detail.as_ptr());
    }
    false
}

// Refuse a node name shared memory cannot keep whole.
string_check_hook!(check_node_name, |value| {
    let len = value.to_bytes().len();
    (len > NODE_NAME_MAX_BYTES).then(|| {
        format!("leaf_id.node_name is {len} bytes long; the limit is {NODE_NAME_MAX_BYTES}.")
    })
});

// Refuse a leaf_id.synchronized_standby_slots that is no list of slot names.
string_check_hook!(check_standby_slots, |value| {
    crate::runtime::standby_rule::parse_rule(&value.to_string_lossy())
        .err()
        .map(|why| format!("leaf_id.synchronized_standby_slots: {why}."))
});

/// `leaf_id.synchronized_standby_slots`, parsed (the check hook refused
/// anything else).
pub fn standby_slots_rule() -> crate::runtime::standby_rule::SlotRule {
    let text = SYNCHRONIZED_STANDBY_SLOTS
        .get()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    // refused by the hook; should one get through, it names a slot that
    // cannot exist: nothing is confirmed (closed, never open)
    crate::runtime::standby_rule::parse_rule(&text)
        .unwrap_or(crate::runtime::standby_rule::SlotRule::Named(vec![text]))
}

/// Node name: the setting, or `<system identifier>:<port>`.
pub fn node_name() -> String {
    match NODE_NAME.get() {
        Some(s) if !s.to_bytes().is_empty() => s.to_string_lossy().into_owned(),
        _ => {
            // SAFETY: the callers are the snowflake worker's claim and jobs,
            // a process attached to shared memory, where GetSystemIdentifier
            // reads the control file's copy (in shared memory since
            // XLOGShmemInit); PostPortNumber is the postmaster's
            // PGC_POSTMASTER `port`, a plain int set before any child starts
            // and never changed, copied here by value (format! would borrow
            // the static itself).
            let (system, port) = unsafe {
                (
                    pgrx::pg_sys::GetSystemIdentifier(),
                    pgrx::pg_sys::PostPortNumber,
                )
            };
            format!("{system}:{port}")
        }
    }
}
