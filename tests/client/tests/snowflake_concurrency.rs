//! Snowflake mode under concurrency: 8 connections x 200,000 IDs.

use leaf_id_client_tests::*;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const THREADS: usize = 8;
const BATCH: i32 = 20_000;
const PER_THREAD: usize = 200_000;

#[test]
fn snowflake_8x200k_unique_increasing_one_worker() {
    let test = "snowflake_8x200k_unique_increasing_one_worker";
    let start = Instant::now();
    let mut admin = connect(test);
    ensure_extension(&mut admin);
    // first call may wait for the worker to claim a worker id
    let first = query_ids(&mut admin, "SELECT leaf_snowflake_next()", &[]);
    let status_worker: Option<i32> = admin
        .query_one("SELECT worker_id FROM leaf_snowflake_status", &[])
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("leaf_snowflake_status: {}", pg_err(&e)));
    let (_, first_worker, _) = snowflake_parts(first[0]);
    // the server's own decode agrees with the layout
    let decoded: i32 = admin
        .query_one(
            "SELECT worker_id FROM leaf_snowflake_decode($1)",
            &[&first[0]],
        )
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("leaf_snowflake_decode: {}", pg_err(&e)));
    assert_eq!(
        decoded as i64, first_worker,
        "leaf_snowflake_decode({}) worker id",
        first[0]
    );
    assert_eq!(
        status_worker,
        Some(decoded),
        "leaf_snowflake_status.worker_id vs the IDs' worker id"
    );

    let per_thread: Vec<(Vec<i64>, Duration)> = run_workers(THREADS, |t| {
        let mut c = connect(&format!("{test}-{t}"));
        let stmt = c
            .prepare("SELECT leaf_snowflake_next() FROM generate_series(1, $1::int)")
            .expect("prepare");
        let t0 = Instant::now();
        let mut ids: Vec<i64> = Vec::with_capacity(PER_THREAD);
        while ids.len() < PER_THREAD {
            check_budget(
                start,
                TEST_BUDGET,
                &format!("thread {t} after {} IDs", ids.len()),
            );
            let rows = c
                .query(&stmt, &[&BATCH])
                .unwrap_or_else(|e| panic!("thread {t} after {} IDs: {}", ids.len(), pg_err(&e)));
            assert_eq!(
                rows.len(),
                BATCH as usize,
                "thread {t}: a batch returned {} rows",
                rows.len()
            );
            ids.extend(rows.iter().map(|r| r.get::<_, i64>(0)));
        }
        // Rows come back in generation order, so one connection's IDs must
        // strictly increase, batch after batch.
        if let Some((i, prev, cur)) = first_non_increase(&ids) {
            panic!(
                "thread {t}: IDs not strictly increasing in the order received: \
                 #{} = {prev} {:?}, #{i} = {cur} {:?}",
                i - 1,
                snowflake_parts(prev),
                snowflake_parts(cur)
            );
        }
        // the server decodes a few of them the same way
        for &id in [ids[0], ids[ids.len() / 2], ids[ids.len() - 1]].iter() {
            let r = c
                .query_one(
                    "SELECT worker_id, sequence FROM leaf_snowflake_decode($1)",
                    &[&id],
                )
                .unwrap_or_else(|e| panic!("decode {id}: {}", pg_err(&e)));
            let (_, w, s) = snowflake_parts(id);
            assert_eq!(
                (r.get::<_, i32>(0) as i64, r.get::<_, i32>(1) as i64),
                (w, s),
                "decode of {id}"
            );
        }
        (ids, t0.elapsed())
    });

    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let epoch_ms: i64 = admin
        .query_one(
            "SELECT (extract(epoch FROM epoch) * 1000)::bigint FROM leaf_snowflake_status",
            &[],
        )
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("leaf_snowflake_status.epoch: {}", pg_err(&e)));
    let sf = admin
        .query_one(
            "SELECT rollback_events, sequence_waits FROM leaf_snowflake_status",
            &[],
        )
        .expect("leaf_snowflake_status");
    let (rollbacks, seq_waits): (i64, i64) = (sf.get(0), sf.get(1));

    let mut all: Vec<i64> = first.clone();
    let mut owners = vec!["first".to_string()];
    for (t, (ids, _)) in per_thread.iter().enumerate() {
        all.extend_from_slice(ids);
        owners.extend(std::iter::repeat_n(format!("thread {t}"), ids.len()));
    }
    let mut wrong_worker = all
        .iter()
        .filter(|&&id| snowflake_parts(id).1 != first_worker);
    if let Some(&bad) = wrong_worker.next() {
        panic!(
            "ID {bad} decodes to worker id {} but the others to {first_worker} ({} such IDs)",
            snowflake_parts(bad).1,
            1 + wrong_worker.count()
        );
    }
    // timestamps are plausible: between the start of the test (less slack)
    // and now (plus slack), in the server's epoch
    let started_ms = now_ms - start.elapsed().as_millis() as i64;
    for &id in [all.iter().min().unwrap(), all.iter().max().unwrap()] {
        let ms = snowflake_parts(id).0 + epoch_ms;
        assert!(
            ms >= started_ms - 5_000 && ms <= now_ms + 5_000,
            "ID {id} has timestamp {ms} ms, outside the test's run [{started_ms}, {now_ms}] (+-5 s)"
        );
    }
    let slowest = per_thread.iter().map(|p| p.1).max().unwrap();
    let span_ms = snowflake_parts(*all.iter().max().unwrap()).0
        - snowflake_parts(*all.iter().min().unwrap()).0;
    report(
        test,
        &format!(
            "{} IDs from {THREADS} connections in {:.2?} (slowest thread {slowest:.2?}), worker id {first_worker}, \
             spanning {span_ms} ms ({:.0} IDs/ms); rollback_events={rollbacks} sequence_waits={seq_waits}",
            all.len(),
            start.elapsed(),
            all.len() as f64 / span_ms.max(1) as f64
        ),
    );
    assert_unique(test, &all, Some(&owners));
}
