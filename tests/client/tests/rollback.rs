//! IDs drawn in transactions that roll back are spent: they are never
//! handed out again, whatever happens afterwards.

use leaf_id_client_tests::*;
use std::collections::HashSet;
use std::time::{Duration, Instant};

const THREADS: usize = 6;
const ROUNDS: usize = 40;

/// What one connection saw in phase 1.
#[derive(Default)]
struct Drawn {
    rolled_back: Vec<i64>,
    committed: Vec<i64>,
}

fn ids_of(rows: &[leaf_id_client_tests::postgres::Row]) -> Vec<i64> {
    rows.iter().map(|r| r.get::<_, i64>(0)).collect()
}

/// Phase 1: several connections at once draw IDs in transactions that roll
/// back (plain SELECTs, INSERTs with `DEFAULT leaf_segment_next(...)`,
/// transactions aborted by an error, savepoints rolled back), and some that
/// commit. Phase 2: fresh connections draw many more. No ID of phase 2 may be
/// one of phase 1, and no ID may appear twice anywhere.
#[test]
fn segment_rolled_back_ids_never_reissued() {
    let test = "segment_rolled_back_ids_never_reissued";
    let start = Instant::now();
    let mut admin = connect(test);
    ensure_extension(&mut admin);
    // step 10: refills go on all through the rollbacks
    let tag = Tag::create(&mut admin, "rollback", 10);
    let table = unique_name("rbtable");
    admin
        .batch_execute(&format!(
            "CREATE TABLE {table} (id bigint PRIMARY KEY DEFAULT leaf_segment_next('{}'), conn int NOT NULL, note text)",
            tag.name
        ))
        .unwrap_or_else(|e| panic!("create table: {}", pg_err(&e)));

    let phase1: Vec<Drawn> = run_workers(THREADS, |t| {
        let mut c = connect(&format!("{test}-{t}"));
        let t = t as i32;
        let mut d = Drawn::default();
        for round in 0..ROUNDS {
            check_budget(start, TEST_BUDGET, &format!("connection {t} round {round}"));
            let ctx = |what: &str, e: postgres::Error| -> String {
                format!("connection {t} round {round} ({what}): {}", pg_err(&e))
            };
            match (round + t as usize) % 5 {
                // plain draws, rolled back
                0 => {
                    let mut tx = c.transaction().unwrap();
                    let rows = tx
                        .query(
                            "SELECT leaf_segment_next($1) FROM generate_series(1, 500)",
                            &[&tag.name],
                        )
                        .unwrap_or_else(|e| panic!("{}", ctx("select", e)));
                    d.rolled_back.extend(ids_of(&rows));
                    tx.rollback().unwrap();
                }
                // INSERT ... DEFAULT leaf_segment_next(), rolled back
                1 => {
                    let mut tx = c.transaction().unwrap();
                    let rows = tx
                        .query(
                            &format!("INSERT INTO {table} (conn) SELECT $1 FROM generate_series(1, 500) RETURNING id"),
                            &[&t],
                        )
                        .unwrap_or_else(|e| panic!("{}", ctx("insert", e)));
                    d.rolled_back.extend(ids_of(&rows));
                    tx.rollback().unwrap();
                }
                // a transaction aborted by an error, then rolled back
                2 => {
                    c.batch_execute("BEGIN").unwrap();
                    let rows = c
                        .query(
                            &format!("INSERT INTO {table} (conn) SELECT $1 FROM generate_series(1, 300) RETURNING id"),
                            &[&t],
                        )
                        .unwrap_or_else(|e| panic!("{}", ctx("insert", e)));
                    d.rolled_back.extend(ids_of(&rows));
                    // (the expected error is kept out of the server log)
                    c.batch_execute("SET LOCAL log_min_messages = panic")
                        .unwrap();
                    let failed = c.batch_execute("SELECT 1 / 0");
                    assert!(failed.is_err(), "1/0 should fail");
                    c.batch_execute("ROLLBACK").unwrap();
                }
                // a savepoint rolled back inside a transaction that commits
                3 => {
                    let mut tx = c.transaction().unwrap();
                    {
                        let mut sp = tx.savepoint("s1").unwrap();
                        let rows = sp
                            .query(
                                &format!(
                                    "INSERT INTO {table} (conn, note) SELECT $1, 'savepoint' FROM generate_series(1, 200) RETURNING id"
                                ),
                                &[&t],
                            )
                            .unwrap_or_else(|e| panic!("{}", ctx("insert in savepoint", e)));
                        d.rolled_back.extend(ids_of(&rows));
                        sp.rollback().unwrap();
                    }
                    let rows = tx
                        .query(
                            &format!("INSERT INTO {table} (conn, note) SELECT $1, 'kept' FROM generate_series(1, 200) RETURNING id"),
                            &[&t],
                        )
                        .unwrap_or_else(|e| panic!("{}", ctx("insert after savepoint", e)));
                    tx.commit()
                        .unwrap_or_else(|e| panic!("{}", ctx("commit", e)));
                    d.committed.extend(ids_of(&rows));
                }
                // committed single-row inserts
                _ => {
                    for _ in 0..50 {
                        let row = c
                            .query_one(
                                &format!("INSERT INTO {table} (conn) VALUES ($1) RETURNING id"),
                                &[&t],
                            )
                            .unwrap_or_else(|e| panic!("{}", ctx("single insert", e)));
                        d.committed.push(row.get(0));
                    }
                }
            }
        }
        d
    });

    let rolled_back: Vec<i64> = phase1
        .iter()
        .flat_map(|d| d.rolled_back.iter().copied())
        .collect();
    let committed: Vec<i64> = phase1
        .iter()
        .flat_map(|d| d.committed.iter().copied())
        .collect();
    let phase1_max = rolled_back.iter().chain(&committed).copied().max().unwrap();

    // the table holds exactly the committed rows
    let in_table: Vec<i64> = query_ids(
        &mut admin,
        &format!("SELECT id FROM {table} ORDER BY id"),
        &[],
    );
    let mut committed_sorted = committed.clone();
    committed_sorted.sort_unstable();
    assert_eq!(
        in_table.len(),
        committed_sorted.len(),
        "rows in {table} vs committed inserts"
    );
    assert!(
        in_table == committed_sorted,
        "the table's ids differ from the committed inserts' ids"
    );

    // Phase 2: draw many more, from 4 fresh connections at once.
    let phase2: Vec<Vec<i64>> = run_workers(4, |t| {
        let mut c = connect(&format!("{test}-after-{t}"));
        let mut ids = Vec::new();
        for _ in 0..5 {
            check_budget(start, TEST_BUDGET, &format!("phase 2 connection {t}"));
            ids.extend(query_ids(
                &mut c,
                "SELECT leaf_segment_next($1) FROM generate_series(1, 10000)",
                &[&tag.name],
            ));
        }
        ids
    });
    let after: Vec<i64> = phase2.concat();
    let status = segment_status(&mut admin, &tag.name).unwrap_or_default();

    let rb: HashSet<i64> = rolled_back.iter().copied().collect();
    let cm: HashSet<i64> = committed.iter().copied().collect();
    let reissued_rb: Vec<i64> = after
        .iter()
        .copied()
        .filter(|id| rb.contains(id))
        .take(10)
        .collect();
    let reissued_cm: Vec<i64> = after
        .iter()
        .copied()
        .filter(|id| cm.contains(id))
        .take(10)
        .collect();
    report(
        test,
        &format!(
            "phase 1: {} rolled-back + {} committed IDs from {THREADS} connections; phase 2: {} IDs; {:.2?}; \
             refills={} waits={}",
            rolled_back.len(),
            committed.len(),
            after.len(),
            start.elapsed(),
            status.refills,
            status.waits
        ),
    );
    assert!(
        reissued_rb.is_empty(),
        "IDs from rolled-back transactions were handed out again: {reissued_rb:?}"
    );
    assert!(
        reissued_cm.is_empty(),
        "committed IDs were handed out again: {reissued_cm:?}"
    );

    let mut everything = rolled_back.clone();
    everything.extend(&committed);
    everything.extend(&after);
    assert_unique(test, &everything, None);
    // one increasing stream: everything drawn after phase 1 ended is above it
    let after_min = *after.iter().min().unwrap();
    assert!(
        after_min > phase1_max,
        "an ID drawn after phase 1 ({after_min}) is not above phase 1's largest ({phase1_max})"
    );

    admin.batch_execute(&format!("DROP TABLE {table}")).ok();
}

/// Snowflake IDs drawn in rolled-back transactions are not issued again.
#[test]
fn snowflake_rolled_back_ids_never_reissued() {
    let test = "snowflake_rolled_back_ids_never_reissued";
    let start = Instant::now();
    let mut admin = connect(test);
    ensure_extension(&mut admin);
    let per_conn: Vec<(Vec<i64>, Vec<i64>)> = run_workers(4, |t| {
        let mut c = connect(&format!("{test}-{t}"));
        let mut rolled_back = Vec::new();
        for _ in 0..10 {
            check_budget(start, TEST_BUDGET, &format!("connection {t}"));
            let mut tx = c.transaction().unwrap();
            rolled_back.extend(query_ids_tx(
                &mut tx,
                "SELECT leaf_snowflake_next() FROM generate_series(1, 5000)",
            ));
            tx.rollback().unwrap();
        }
        let after = query_ids(
            &mut c,
            "SELECT leaf_snowflake_next() FROM generate_series(1, 50000)",
            &[],
        );
        (rolled_back, after)
    });
    let rb: HashSet<i64> = per_conn.iter().flat_map(|p| p.0.iter().copied()).collect();
    let after: Vec<i64> = per_conn.iter().flat_map(|p| p.1.iter().copied()).collect();
    let reissued: Vec<i64> = after
        .iter()
        .copied()
        .filter(|id| rb.contains(id))
        .take(10)
        .collect();
    report(
        test,
        &format!(
            "{} rolled back, {} after, {:.2?}",
            rb.len(),
            after.len(),
            start.elapsed()
        ),
    );
    assert!(
        reissued.is_empty(),
        "snowflake IDs from rolled-back transactions handed out again: {reissued:?}"
    );
    let mut all: Vec<i64> = per_conn
        .iter()
        .flat_map(|p| p.0.iter().chain(&p.1).copied())
        .collect();
    all.sort_unstable();
    assert_unique(test, &all, None);
}

fn query_ids_tx(tx: &mut postgres::Transaction<'_>, sql: &str) -> Vec<i64> {
    tx.query(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {}", pg_err(&e)))
        .iter()
        .map(|r| r.get::<_, i64>(0))
        .collect()
}

/// A tag whose leaf_alloc row exists only in a transaction that rolls back:
/// the background worker cannot see it, so a draw in that transaction fails
/// with 42704 (undefined_object) and hands out nothing. Once the tag is
/// committed for real it works, and starts at its committed `max_id`: nothing
/// was reserved for the row that rolled back.
#[test]
fn segment_uncommitted_tag_rolled_back() {
    let test = "segment_uncommitted_tag_rolled_back";
    let start = Instant::now();
    let mut admin = connect(test);
    ensure_extension(&mut admin);
    let name = unique_name("uncommitted");

    let mut c = connect(test);
    {
        let mut tx = c.transaction().unwrap();
        tx.batch_execute("SET LOCAL leaf_id.refill_timeout = '2s'")
            .unwrap();
        tx.execute(
            "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, description) VALUES ($1, 1000, 'uncommitted')",
            &[&name],
        )
        .unwrap();
        match tx.query(
            "SELECT leaf_segment_next($1) FROM generate_series(1, 100)",
            &[&name],
        ) {
            Ok(rows) => panic!(
                "a draw from tag {name}, whose row is not committed, returned {} IDs \
                 (the worker cannot see the row: it must fail with 42704)",
                rows.len()
            ),
            Err(e) => assert_eq!(
                sqlstate(&e),
                Some("42704"),
                "a draw from the uncommitted tag {name} must fail with 42704, got: {}",
                pg_err(&e)
            ),
        }
        tx.rollback().expect("rollback");
    }

    // now create the tag for real, and draw
    let tag = Tag { name: name.clone() };
    admin
        .execute(
            "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, max_id, step, description) VALUES ($1, 500, 1000, 'committed')",
            &[&name],
        )
        .unwrap();
    let mut later: Vec<i64> = Vec::new();
    let mut errors = Vec::new();
    // a cached "missing" state may take a moment to clear: retry for a while
    while later.is_empty() {
        match c.query(
            "SELECT leaf_segment_next($1) FROM generate_series(1, 5000)",
            &[&name],
        ) {
            Ok(rows) => later = ids_of(&rows),
            Err(e) => {
                errors.push(pg_err(&e));
                if start.elapsed() > Duration::from_secs(30) {
                    panic!("tag {name} still fails 30 s after it was committed: {errors:?}");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    report(
        test,
        &format!(
            "after commit: {} IDs ({}..{}), {} failed tries first{}",
            later.len(),
            later[0],
            later[later.len() - 1],
            errors.len(),
            errors
                .first()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default()
        ),
    );
    assert_eq!(
        later[0], 500,
        "the first ID of the committed tag is its committed max_id (nothing was reserved for the rolled-back row)"
    );
    assert_eq!(
        first_non_increase(&later),
        None,
        "one session's IDs of the committed tag strictly increase"
    );
    drop(tag);
}
