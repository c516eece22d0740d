//! Errors of segment mode reach the right caller: a draw from a tag that the
//! background worker cannot see fails with that tag's own error, even while
//! other sessions take shared-memory slots for new tags at the same time.

use leaf_id_client_tests::*;
use std::time::{Duration, Instant};

const ROUNDS: usize = 150;
/// Each session must get through at least this many rounds within the
/// budget, or the test fails: a test that ran out of time proved nothing.
const MIN_ROUNDS: usize = 50;

/// Sessions A draw from tags whose leaf_alloc row is still uncommitted (so
/// the worker reports them missing), while sessions B create fresh committed
/// tags (each taking a slot; a slot of a missing tag is reusable). Every
/// error A gets must be 42704 (undefined_object) naming A's own tag (a
/// 55P03 refill timeout names the tag too, and is wrong here); B never fails.
/// Every session runs at least MIN_ROUNDS rounds.
#[test]
fn segment_missing_tag_error_names_own_tag() {
    let test = "segment_missing_tag_error_names_own_tag";
    let start = Instant::now();
    let mut admin = connect(test);
    ensure_extension(&mut admin);
    let budget = Duration::from_secs(90);

    // (wrong errors, other problems, rounds run) per session
    let results: Vec<(Vec<String>, Vec<String>, usize)> = run_workers(4, |t| {
        let mut c = connect(&format!("{test}-{t}"));
        let mut wrong = Vec::new();
        let mut other = Vec::new();
        let mut rounds = 0;
        for round in 0..ROUNDS {
            if start.elapsed() > budget {
                break;
            }
            rounds += 1;
            let name = unique_name(&format!("err{t}"));
            if t % 2 == 0 {
                // A: uncommitted tag
                let mut tx = c.transaction().unwrap();
                tx.batch_execute("SET LOCAL leaf_id.refill_timeout = '5s'")
                    .unwrap();
                tx.execute(
                    "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ($1, 10)",
                    &[&name],
                )
                .unwrap();
                match tx.query_one("SELECT leaf_segment_next($1)", &[&name]) {
                    Ok(row) => other.push(format!(
                        "round {round}: draw from uncommitted tag {name} returned {}",
                        row.get::<_, i64>(0)
                    )),
                    Err(e) => {
                        let msg = pg_err(&e);
                        if sqlstate(&e) != Some("42704")
                            || !msg.contains(&format!("\"{name}\" does not exist"))
                        {
                            wrong.push(format!("round {round}: tag {name} failed with: {msg}"));
                        }
                    }
                }
                let _ = tx.rollback();
            } else {
                // B: fresh committed tag, one draw, then delete it
                c.execute(
                    "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ($1, 10)",
                    &[&name],
                )
                .unwrap();
                match c.query_one("SELECT leaf_segment_next($1)", &[&name]) {
                    Ok(row) => {
                        let id: i64 = row.get(0);
                        if id != 1 {
                            other.push(format!(
                                "round {round}: first ID of fresh tag {name} is {id}, expected 1"
                            ));
                        }
                    }
                    Err(e) => other.push(format!(
                        "round {round}: committed tag {name} failed: {}",
                        pg_err(&e)
                    )),
                }
                c.execute("DELETE FROM leaf_id_catalog.leaf_alloc WHERE biz_tag = $1", &[&name])
                    .unwrap();
            }
        }
        (wrong, other, rounds)
    });

    let wrong: Vec<&String> = results.iter().flat_map(|r| r.0.iter()).collect();
    let other: Vec<&String> = results.iter().flat_map(|r| r.1.iter()).collect();
    let rounds: Vec<usize> = results.iter().map(|r| r.2).collect();
    report(
        test,
        &format!(
            "{:.2?}: rounds per session {rounds:?}, {} wrong errors, {} other problems{}",
            start.elapsed(),
            wrong.len(),
            other.len(),
            wrong
                .first()
                .map(|w| format!("; first: {w}"))
                .unwrap_or_default()
        ),
    );
    assert!(
        wrong.is_empty() && other.is_empty(),
        "wrong errors (not 42704 naming the session's own tag) ({}): {:?}\nother problems ({}): {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)],
        other.len(),
        &other[..other.len().min(5)]
    );
    assert!(
        rounds.iter().all(|&n| n >= MIN_ROUNDS),
        "rounds per session {rounds:?}: a session ran fewer than {MIN_ROUNDS} rounds within {budget:?}"
    );
}
