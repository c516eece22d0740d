//! Shared helpers for the leaf_id client tests.
//!
//! The tests talk to a running PostgreSQL 15 server with leaf_id in
//! `shared_preload_libraries`, over TCP on 127.0.0.1:
//! - `LEAF_ID_TEST_PORT` (required): the server's port;
//! - `LEAF_ID_TEST_DB` (default `postgres`): the database.
//!
//! User `postgres`, trust authentication. Each test makes its own uniquely
//! named tags and tables, so tests may run concurrently with each other.

use postgres::{Client, Config, NoTls};
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use postgres;

/// No single statement may run longer than this (server-side `statement_timeout`).
pub const STATEMENT_TIMEOUT_MS: u64 = 60_000;

/// Default budget of one test: its loops stop and fail past this.
pub const TEST_BUDGET: Duration = Duration::from_secs(150);

pub fn port() -> u16 {
    let raw = std::env::var("LEAF_ID_TEST_PORT").unwrap_or_else(|_| {
        panic!(
            "LEAF_ID_TEST_PORT is not set: point it at a running PostgreSQL 15 with leaf_id preloaded \
             (or run scripts/test-client.sh, which starts a throwaway cluster)"
        )
    });
    raw.trim()
        .parse()
        .unwrap_or_else(|_| panic!("LEAF_ID_TEST_PORT={raw:?} is not a port number"))
}

pub fn dbname() -> String {
    std::env::var("LEAF_ID_TEST_DB")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "postgres".to_string())
}

fn config(application_name: &str) -> Config {
    let mut c = Config::new();
    c.host("127.0.0.1")
        .port(port())
        .user("postgres")
        .dbname(&dbname())
        .application_name(application_name)
        .connect_timeout(Duration::from_secs(10))
        .options(&format!(
            "-c statement_timeout={STATEMENT_TIMEOUT_MS} -c lock_timeout=30000 -c idle_in_transaction_session_timeout=180000"
        ));
    c
}

/// A new connection (loopback, bounded statement time).
pub fn connect(application_name: &str) -> Client {
    let cfg = config(application_name);
    let mut last = None;
    // A few tries: the server may still be coming up when a script starts it.
    for _ in 0..5 {
        match cfg.connect(NoTls) {
            Ok(c) => return c,
            Err(e) => {
                last = Some(e);
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    }
    panic!(
        "cannot connect to 127.0.0.1:{} database {}: {}",
        port(),
        dbname(),
        last.map(|e| e.to_string()).unwrap_or_default()
    )
}

/// Error text with the server's message, detail and hint when there are any.
pub fn pg_err(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!(
                "{}: {} (SQLSTATE {})",
                db.severity(),
                db.message(),
                db.code().code()
            );
            if let Some(d) = db.detail() {
                s.push_str(&format!("; DETAIL: {d}"));
            }
            if let Some(h) = db.hint() {
                s.push_str(&format!("; HINT: {h}"));
            }
            s
        }
        None => e.to_string(),
    }
}

/// The SQLSTATE of a server error (`None` for a client-side error, such as a
/// lost connection).
pub fn sqlstate(e: &postgres::Error) -> Option<&str> {
    e.as_db_error().map(|db| db.code().code())
}

/// `CREATE EXTENSION IF NOT EXISTS leaf_id`, serialized between concurrent
/// tests by an advisory lock (two concurrent CREATE EXTENSION IF NOT EXISTS
/// can otherwise both try to create it).
pub fn ensure_extension(client: &mut Client) {
    let mut tx = client.transaction().expect("begin");
    tx.execute("SELECT pg_advisory_xact_lock(7461726590001)", &[])
        .expect("advisory lock");
    tx.batch_execute("CREATE EXTENSION IF NOT EXISTS leaf_id")
        .unwrap_or_else(|e| panic!("CREATE EXTENSION leaf_id failed: {}", pg_err(&e)));
    tx.commit().expect("commit");
}

/// A name no other test (in this or another process) uses.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_000_000;
    format!("ct_{prefix}_{}_{nanos}_{n}", std::process::id())
}

/// A connection named `application_name` with the extension created, and a
/// new tag of `step` (named after `prefix`).
pub fn connect_with_tag(application_name: &str, prefix: &str, step: i32) -> (Client, Tag) {
    let mut client = connect(application_name);
    ensure_extension(&mut client);
    let tag = Tag::create(&mut client, prefix, step);
    (client, tag)
}

/// A row of `leaf_alloc` made for one test; deleted again when the test
/// passes (kept when it panics, to look at).
pub struct Tag {
    pub name: String,
}

impl Tag {
    pub fn create(client: &mut Client, prefix: &str, step: i32) -> Tag {
        Tag::create_from(client, prefix, step, 1)
    }

    /// A tag whose row has `max_id`: its IDs start there.
    pub fn create_from(client: &mut Client, prefix: &str, step: i32, max_id: i64) -> Tag {
        let name = unique_name(prefix);
        client
            .execute(
                "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id, description) VALUES ($1, $2, $3, 'leaf_id client test')",
                &[&name, &step, &max_id],
            )
            .unwrap_or_else(|e| panic!("inserting tag {name}: {}", pg_err(&e)));
        Tag { name }
    }
}

impl Drop for Tag {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "[leaf_id client tests] keeping tag {} for inspection (test failed)",
                self.name
            );
            return;
        }
        if let Ok(mut c) = config("leaf_id_client_cleanup").connect(NoTls) {
            let _ = c.execute("DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = $1", &[&self.name]);
        }
    }
}

/// One row of `leaf_segment_status`.
#[derive(Debug, Clone, Default)]
pub struct SegmentStatus {
    pub status: String,
    pub refills: i64,
    pub waits: i64,
    pub dynamic_step: i64,
    pub table_step: i64,
}

pub fn segment_status(client: &mut Client, tag: &str) -> Option<SegmentStatus> {
    let rows = client
        .query(
            "SELECT status, refills, waits, dynamic_step, table_step FROM leaf_segment_status WHERE tag = $1",
            &[&tag],
        )
        .unwrap_or_else(|e| panic!("reading leaf_segment_status: {}", pg_err(&e)));
    rows.first().map(|r| SegmentStatus {
        status: r.get(0),
        refills: r.get(1),
        waits: r.get(2),
        dynamic_step: r.get(3),
        table_step: r.get(4),
    })
}

/// IDs of one batch statement, in the order the server returned them.
pub fn query_ids(
    client: &mut Client,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> Vec<i64> {
    client
        .query(sql, params)
        .unwrap_or_else(|e| panic!("{sql}: {}", pg_err(&e)))
        .iter()
        .map(|r| r.get::<_, i64>(0))
        .collect()
}

/// Duplicates among `ids`: (id, how many times), the first `limit` of them
/// in id order, and how many distinct ids are duplicated in all.
pub fn duplicates(ids: &[i64], limit: usize) -> (Vec<(i64, usize)>, usize) {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    let mut shown = Vec::new();
    let mut total = 0;
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i + 1;
        while j < sorted.len() && sorted[j] == sorted[i] {
            j += 1;
        }
        if j - i > 1 {
            total += 1;
            if shown.len() < limit {
                shown.push((sorted[i], j - i));
            }
        }
        i = j;
    }
    (shown, total)
}

/// Panics with a readable message when `ids` holds a duplicate. `owners`
/// says who drew each id (same length as `ids`), for the message.
pub fn assert_unique(what: &str, ids: &[i64], owners: Option<&[String]>) {
    let (shown, total) = duplicates(ids, 10);
    if total == 0 {
        return;
    }
    let mut msg = format!(
        "{what}: {total} IDs were handed out more than once (of {} drawn). First ones:",
        ids.len()
    );
    let mut who: HashMap<i64, Vec<&str>> = HashMap::new();
    if let Some(o) = owners {
        let wanted: std::collections::HashSet<i64> = shown.iter().map(|d| d.0).collect();
        for (id, owner) in ids.iter().zip(o) {
            if wanted.contains(id) {
                who.entry(*id).or_default().push(owner);
            }
        }
    }
    for (id, n) in shown {
        msg.push_str(&format!("\n  id {id} x{n}"));
        if let Some(w) = who.get(&id) {
            msg.push_str(&format!(" drawn by {}", w.join(", ")));
        }
    }
    panic!("{msg}");
}

/// First place where `ids` does not strictly increase: (index, previous, value).
pub fn first_non_increase(ids: &[i64]) -> Option<(usize, i64, i64)> {
    ids.windows(2)
        .position(|w| w[1] <= w[0])
        .map(|i| (i + 1, ids[i], ids[i + 1]))
}

/// A line of test output that shows even when cargo captures the test's
/// output (it writes to the process's stderr directly, not through the
/// captured `eprintln!`).
pub fn report(test: &str, msg: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "[leaf_id client] {test}: {msg}");
}

/// Fails the test when its budget has run out (`what`: where it was).
pub fn check_budget(start: Instant, budget: Duration, what: &str) {
    if start.elapsed() > budget {
        panic!(
            "{what}: over the test's time budget of {budget:?} (elapsed {:?})",
            start.elapsed()
        );
    }
}

/// Runs `n` workers on their own threads, each given its index, and returns
/// their results in index order; a panicking worker fails the caller with its
/// message.
pub fn run_workers<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let f = &f;
                std::thread::Builder::new()
                    .name(format!("worker-{i}"))
                    .spawn_scoped(s, move || f(i))
                    .expect("spawn")
            })
            .collect();
        let mut out = Vec::with_capacity(n);
        let mut failures = Vec::new();
        for (i, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok(v) => out.push(v),
                Err(p) => {
                    let msg = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "panic".to_string());
                    failures.push(format!("worker {i}: {msg}"));
                }
            }
        }
        if !failures.is_empty() {
            panic!(
                "{} worker(s) failed:\n{}",
                failures.len(),
                failures.join("\n")
            );
        }
        out
    })
}

/// Snowflake layout (Leaf): 41 bits of milliseconds since the epoch, 10 bits
/// of worker id, 12 bits of sequence.
pub fn snowflake_parts(id: i64) -> (i64, i64, i64) {
    (id >> 22, (id >> 12) & 0x3ff, id & 0xfff)
}
