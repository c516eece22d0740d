//! Segment IDs of a tag form one increasing stream shared by all sessions
//! (shared memory), not per-session caches.

use leaf_id_client_tests::*;
use std::time::Instant;

/// Two sessions draw in turn, one ID per call; `sessions` draws in all.
/// Returns the IDs in wall-clock order.
fn alternate(test: &str, tag: &str, draws: usize) -> Vec<i64> {
    let start = Instant::now();
    let mut a = connect(&format!("{test}-a"));
    let mut b = connect(&format!("{test}-b"));
    let sa = a.prepare("SELECT leaf_segment_next($1)").unwrap();
    let sb = b.prepare("SELECT leaf_segment_next($1)").unwrap();
    let mut ids = Vec::with_capacity(draws);
    for i in 0..draws {
        if i % 500 == 0 {
            check_budget(start, TEST_BUDGET, &format!("draw {i}"));
        }
        let (c, s) = if i % 2 == 0 {
            (&mut a, &sa)
        } else {
            (&mut b, &sb)
        };
        let id: i64 = c
            .query_one(s, &[&tag])
            .unwrap_or_else(|e| {
                panic!(
                    "draw {i} (session {}): {}",
                    if i % 2 == 0 { "A" } else { "B" },
                    pg_err(&e)
                )
            })
            .get(0);
        ids.push(id);
    }
    ids
}

fn assert_increasing(what: &str, ids: &[i64]) {
    if let Some((i, prev, cur)) = first_non_increase(ids) {
        let who = |k: usize| if k % 2 == 0 { "A" } else { "B" };
        let lo = i.saturating_sub(4);
        let hi = (i + 4).min(ids.len());
        panic!(
            "{what}: not strictly increasing in wall-clock order at draw #{i}: session {} got {prev}, then session {} got {cur}; \
             draws {lo}..{hi}: {:?}",
            who(i - 1),
            who(i),
            &ids[lo..hi]
        );
    }
}

/// Large step (1,000,000): all draws come from one segment, so two sessions
/// taking turns must see consecutive values: a, a+1, a+2, ...
#[test]
fn segment_two_sessions_one_stream_large_step() {
    let test = "segment_two_sessions_one_stream_large_step";
    let start = Instant::now();
    let mut admin = connect(test);
    ensure_extension(&mut admin);
    let tag = Tag::create(&mut admin, "stream_large", 1_000_000);
    let ids = alternate(test, &tag.name, 4_000);
    let gaps = ids.windows(2).filter(|w| w[1] != w[0] + 1).count();
    report(
        test,
        &format!(
            "{} alternating draws in {:.2?}: {}..{}, {gaps} gaps",
            ids.len(),
            start.elapsed(),
            ids[0],
            ids[ids.len() - 1]
        ),
    );
    assert_increasing(test, &ids);
    assert_eq!(
        gaps, 0,
        "with step 1,000,000 the 4,000 draws all come from one segment, so they should be consecutive; first ids {:?}",
        &ids[..8.min(ids.len())]
    );
}

/// Small step (3): the two sessions cross a segment boundary every few draws,
/// and the stream must still strictly increase.
#[test]
fn segment_two_sessions_one_stream_small_step() {
    let test = "segment_two_sessions_one_stream_small_step";
    let start = Instant::now();
    let mut admin = connect(test);
    ensure_extension(&mut admin);
    let tag = Tag::create(&mut admin, "stream_small", 3);
    let ids = alternate(test, &tag.name, 2_000);
    let status = segment_status(&mut admin, &tag.name).unwrap_or_default();
    report(
        test,
        &format!(
            "{} alternating draws in {:.2?}: {}..{}; refills={} waits={} dynamic_step={}",
            ids.len(),
            start.elapsed(),
            ids[0],
            ids[ids.len() - 1],
            status.refills,
            status.waits,
            status.dynamic_step
        ),
    );
    assert_increasing(test, &ids);
}

/// Under concurrency each session's own IDs still strictly increase (the
/// stream is shared, so what one session sees is a subsequence of it).
#[test]
fn segment_each_session_increasing_under_concurrency() {
    let test = "segment_each_session_increasing_under_concurrency";
    let start = Instant::now();
    let mut admin = connect(test);
    ensure_extension(&mut admin);
    let tag = Tag::create(&mut admin, "stream_conc", 10);
    let per: Vec<Vec<i64>> = run_workers(4, |t| {
        let mut c = connect(&format!("{test}-{t}"));
        let mut ids = Vec::new();
        for _ in 0..10 {
            check_budget(start, TEST_BUDGET, &format!("session {t}"));
            ids.extend(query_ids(
                &mut c,
                "SELECT leaf_segment_next($1) FROM generate_series(1, 5000)",
                &[&tag.name],
            ));
        }
        if let Some((i, prev, cur)) = first_non_increase(&ids) {
            panic!(
                "session {t}: its IDs do not strictly increase: #{} = {prev}, #{i} = {cur}",
                i - 1
            );
        }
        ids
    });
    report(
        test,
        &format!(
            "{} sessions x {} IDs in {:.2?}",
            per.len(),
            per[0].len(),
            start.elapsed()
        ),
    );
    assert_unique(test, &per.concat(), None);
}
