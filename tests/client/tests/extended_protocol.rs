//! What only a driver that speaks the extended query protocol shows: the TAP
//! tests send SQL through psql, which uses the simple protocol (one Query
//! message, planned and run at once, results as text). The `postgres` crate
//! parses a statement once and binds it again and again (so the server's plan
//! cache decides how it is planned), reads a portal in parts, gets errors as
//! SQLSTATEs on a connection it goes on using, and asks for results in
//! binary.

use leaf_id_client_tests::*;
use postgres::error::SqlState;
use postgres::types::{FromSql, ToSql, Type};
use postgres::{Client, Row, SimpleQueryMessage, Statement};
use std::time::{Duration, Instant};

/// The budget of each test here (every statement is bounded by the server's
/// `statement_timeout` as well).
const BUDGET: Duration = Duration::from_secs(60);

/// A bound parameter.
type Param<'a> = &'a (dyn ToSql + Sync);

/// Executions of each prepared statement per plan cache mode: more than 5,
/// after which `auto` may run a statement with parameters on its generic plan
/// (one without parameters runs on it from the first execution).
const EXECUTIONS: usize = 12;

/// A statement prepared once and executed EXECUTIONS times under each
/// `plan_cache_mode` (auto, force_generic_plan, force_custom_plan) draws a new
/// ID at every execution, none twice: `SELECT leaf_segment_next($1)` (the tag
/// bound), `SELECT leaf_segment_next('<tag>')` (the tag a constant in the SQL
/// text), `INSERT ... DEFAULT VALUES RETURNING id` and `INSERT ... (note)
/// VALUES ($1) RETURNING id` into a table whose id defaults to
/// `leaf_segment_next('<tag>')`, and `SELECT leaf_snowflake_next()`.
/// `pg_prepared_statements` shows that the statements ran on generic (cached)
/// plans: the ones without parameters always, the others under
/// force_generic_plan. A build that declared `leaf_segment_next(text)`
/// IMMUTABLE failed here: the planner folds a call with a constant tag into
/// the cached plan, which then returns one ID at every execution (the
/// constant tag and both INSERTs, 8 of the 15 cases). STABLE would pass: the
/// planner folds only IMMUTABLE calls, so no plan repeats an ID. The first
/// half of the executions runs in a transaction that rolls back: the
/// snowflake IDs drawn there are not drawn again (the one check of the former
/// rollback.rs that no TAP test makes; the segment ones are TAP 001's).
#[test]
fn prepared_statements_draw_a_new_id_at_every_execution() {
    let test = "prepared_statements_draw_a_new_id_at_every_execution";
    let start = Instant::now();
    let (mut c, tag) = connect_with_tag(test, "plancache", 10);
    let table = unique_name("plancache");
    c.batch_execute(&format!(
        "CREATE TABLE {table} (id bigint NOT NULL DEFAULT leaf_segment_next('{}'), note text)",
        tag.name
    ))
    .unwrap_or_else(|e| panic!("create table: {}", pg_err(&e)));

    let mut segment_ids = Vec::new();
    let mut snowflake_ids = Vec::new();
    let mut failures = Vec::new();
    let mut plans = Vec::new();
    for mode in ["auto", "force_generic_plan", "force_custom_plan"] {
        c.batch_execute(&format!("SET plan_cache_mode = {mode}"))
            .unwrap();
        // (label, SQL, parameters, snowflake?); the mode in a comment makes
        // each statement's text its own in pg_prepared_statements
        let cases: [(&str, String, Vec<Param>, bool); 5] = [
            (
                "tag bound as $1",
                format!("SELECT leaf_segment_next($1) /* {mode} */"),
                vec![&tag.name as Param],
                false,
            ),
            (
                "tag a constant in the SQL",
                format!("SELECT leaf_segment_next('{}') /* {mode} */", tag.name),
                vec![],
                false,
            ),
            (
                "INSERT DEFAULT VALUES",
                format!("INSERT INTO {table} DEFAULT VALUES RETURNING id /* {mode} */"),
                vec![],
                false,
            ),
            (
                "INSERT (note) VALUES ($1)",
                format!("INSERT INTO {table} (note) VALUES ($1) RETURNING id /* {mode} */"),
                vec![&mode as Param],
                false,
            ),
            (
                "leaf_snowflake_next()",
                format!("SELECT leaf_snowflake_next() /* {mode} */"),
                vec![],
                true,
            ),
        ];
        let stmts: Vec<Statement> = cases
            .iter()
            .map(|case| c.prepare(&case.1).expect("prepare"))
            .collect();
        let mut drawn: Vec<Vec<i64>> = vec![Vec::new(); cases.len()];
        c.batch_execute("BEGIN").unwrap();
        for round in 0..EXECUTIONS {
            if round == EXECUTIONS / 2 {
                c.batch_execute("ROLLBACK").unwrap();
            }
            check_budget(start, BUDGET, &format!("{mode} round {round}"));
            for (k, (label, _, params, _)) in cases.iter().enumerate() {
                let row = c
                    .query_one(&stmts[k], params)
                    .unwrap_or_else(|e| panic!("{mode}/{label} round {round}: {}", pg_err(&e)));
                drawn[k].push(row.get(0));
            }
        }

        for (k, (label, sql, params, snowflake)) in cases.iter().enumerate() {
            let row = c
                .query_one(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
                    &[sql],
                )
                .unwrap_or_else(|e| panic!("pg_prepared_statements: {}", pg_err(&e)));
            let (generic, custom): (i64, i64) = (row.get(0), row.get(1));
            plans.push(format!(
                "{mode}/{label}: {generic} generic, {custom} custom"
            ));
            let forced_generic = params.is_empty() || mode == "force_generic_plan";
            let on_plans = if forced_generic {
                generic
            } else if mode == "force_custom_plan" {
                custom
            } else {
                generic + custom
            };
            assert!(
                on_plans >= EXECUTIONS as i64,
                "{mode}/{label}: {generic} generic and {custom} custom plans for {EXECUTIONS} executions"
            );
            let (repeated, n) = duplicates(&drawn[k], 3);
            if n > 0 {
                failures.push(format!(
                    "{mode}/{label} ({generic} generic plans, {custom} custom): {n} IDs returned more than once \
                     in {EXECUTIONS} executions, (id, times): {repeated:?}; IDs in order: {:?}",
                    drawn[k]
                ));
            }
            if *snowflake {
                snowflake_ids.extend(&drawn[k]);
            } else {
                segment_ids.extend(&drawn[k]);
            }
        }
    }
    report(
        test,
        &format!(
            "{:.2?}: {} segment and {} snowflake IDs; plans: {}",
            start.elapsed(),
            segment_ids.len(),
            snowflake_ids.len(),
            plans.join("; ")
        ),
    );
    assert!(
        failures.is_empty(),
        "a prepared statement returned an ID again:\n{}",
        failures.join("\n")
    );
    assert_unique(&format!("{test}: segment IDs"), &segment_ids, None);
    assert_unique(&format!("{test}: snowflake IDs"), &snowflake_ids, None);
    c.batch_execute(&format!("DROP TABLE {table}")).ok();
}

/// IDs of the rows of a statement.
fn ids_of(rows: &[Row]) -> Vec<i64> {
    rows.iter().map(|r| r.get::<_, i64>(0)).collect()
}

/// A portal of `SELECT leaf_segment_next($1, $2)` with n = 10,000, read 100
/// rows at a time (Execute with a row limit, in one transaction), while a
/// second connection draws 3 single IDs of the same tag between the reads:
/// the batch takes its IDs as its rows are read (the other connection's IDs
/// lie inside the batch's range, not above it), no ID of either connection is
/// the other's or comes twice, and each connection's IDs strictly increase
/// (the two take turns, one client thread, so each one's IDs are in the order
/// taken). Then a portal closed after 100 of its 10,000 rows: every later
/// draw, of either connection, is above those 100 rows: the IDs the batch
/// had taken but not returned are a gap, never handed out.
#[test]
fn portal_read_in_parts_while_another_connection_draws() {
    let test = "portal_read_in_parts_while_another_connection_draws";
    const N: i32 = 10_000;
    const PAGE: i32 = 100;
    const BETWEEN: usize = 3;
    let start = Instant::now();
    let (mut a, tag) = connect_with_tag(&format!("{test}-portal"), "portal", 10);
    let mut b = connect(&format!("{test}-single"));
    let single = b.prepare("SELECT leaf_segment_next($1)").unwrap();
    let draw_b = |b: &mut Client, what: &str| -> i64 {
        b.query_one(&single, &[&tag.name])
            .unwrap_or_else(|e| panic!("{what}: {}", pg_err(&e)))
            .get(0)
    };

    // read in parts, the other connection drawing between the reads
    let (mut portal_ids, mut single_ids) = (Vec::new(), Vec::new());
    let mut reads = 0;
    {
        let mut tx = a.transaction().unwrap();
        let stmt = tx.prepare("SELECT leaf_segment_next($1, $2)").unwrap();
        let portal = tx.bind(&stmt, &[&tag.name, &N]).unwrap();
        loop {
            check_budget(start, BUDGET, &format!("read {reads} of the portal"));
            let rows = tx
                .query_portal(&portal, PAGE)
                .unwrap_or_else(|e| panic!("read {reads} of the portal: {}", pg_err(&e)));
            reads += 1;
            portal_ids.extend(ids_of(&rows));
            if rows.len() < PAGE as usize {
                break;
            }
            for _ in 0..BETWEEN {
                single_ids.push(draw_b(&mut b, "a single draw between reads"));
            }
        }
        tx.commit().unwrap();
    }
    assert_eq!(
        portal_ids.len(),
        N as usize,
        "rows of the portal, in {reads} reads"
    );
    let (lo, hi) = (portal_ids[0], portal_ids[portal_ids.len() - 1]);
    let inside = single_ids.iter().filter(|&&id| id > lo && id < hi).count();

    // a portal closed after its first read
    let closed: Vec<i64> = {
        let mut tx = a.transaction().unwrap();
        let stmt = tx.prepare("SELECT leaf_segment_next($1, $2)").unwrap();
        let portal = tx.bind(&stmt, &[&tag.name, &N]).unwrap();
        let rows = tx
            .query_portal(&portal, PAGE)
            .unwrap_or_else(|e| panic!("the portal closed early: {}", pg_err(&e)));
        drop(portal);
        tx.commit().unwrap();
        ids_of(&rows)
    };
    let mut later = query_ids(&mut a, "SELECT leaf_segment_next($1, 1000)", &[&tag.name]);
    for _ in 0..100 {
        later.push(draw_b(&mut b, "a draw after the portal closed early"));
    }
    let closed_max = *closed.iter().max().unwrap();
    let later_min = *later.iter().min().unwrap();
    report(
        test,
        &format!(
            "{:.2?}: {} IDs in {reads} reads ({lo}..{hi}), {} single draws between them ({inside} inside the \
             portal's range); portal closed after {} rows (up to {closed_max}), later draws from {later_min} \
             (a gap of {})",
            start.elapsed(),
            portal_ids.len(),
            single_ids.len(),
            closed.len(),
            later_min - closed_max - 1
        ),
    );
    assert_eq!(
        first_non_increase(&portal_ids),
        None,
        "the portal's IDs (index, previous, value)"
    );
    assert_eq!(
        first_non_increase(&single_ids),
        None,
        "the other connection's IDs (index, previous, value)"
    );
    // the draws after the last full read come after the whole batch
    assert!(
        inside >= single_ids.len() - BETWEEN,
        "only {inside} of {} single draws lie inside the portal's range {lo}..{hi}: the batch did not take its IDs \
         as its rows were read",
        single_ids.len()
    );
    assert_eq!(
        closed.len(),
        PAGE as usize,
        "rows of the portal closed early"
    );
    assert!(
        later_min > closed_max,
        "a draw after the portal closed early returned {later_min}, not above its rows (up to {closed_max})"
    );
    let mut all = portal_ids;
    let mut owners = vec!["portal".to_string(); all.len()];
    for (ids, who) in [
        (&single_ids, "single"),
        (&closed, "closed portal"),
        (&later, "later"),
    ] {
        all.extend(ids);
        owners.extend(std::iter::repeat_n(who.to_string(), ids.len()));
    }
    assert_unique(test, &all, Some(&owners));
}

/// Errors as a driver sees them, from a prepared `SELECT
/// leaf_segment_next($1)`: a NULL bound tag is 22004 (null_value_not_allowed),
/// an empty one 22023 (invalid_parameter_value), an unknown one 42704
/// (undefined_object), each read from `DbError::code()`, and after each the
/// same prepared statement on the same connection draws an ID. Inside a
/// transaction the error aborts it: the next execution is 25P02
/// (in_failed_sql_transaction); after ROLLBACK draws work again. The IDs drawn
/// in between strictly increase.
#[test]
fn errors_by_sqlstate_and_the_connection_goes_on() {
    let test = "errors_by_sqlstate_and_the_connection_goes_on";
    let start = Instant::now();
    let (mut c, tag) = connect_with_tag(test, "errors", 10);
    let unknown = unique_name("unknown"); // no row
    let stmt = c.prepare("SELECT leaf_segment_next($1)").unwrap();
    let draw = |c: &mut Client, tag: Option<&str>| c.query_one(&stmt, &[&tag]);
    let expect_error = |got: Result<Row, postgres::Error>, code: &SqlState, what: &str| {
        let e = match got {
            Ok(row) => panic!(
                "{what}: returned {row:?}, expected SQLSTATE {}",
                code.code()
            ),
            Err(e) => e,
        };
        let db = e
            .as_db_error()
            .unwrap_or_else(|| panic!("{what}: not an error of the server: {e}"));
        assert_eq!(db.code(), code, "{what}: {}", pg_err(&e));
    };
    let mut ids = Vec::new();
    let mut next = |c: &mut Client, what: &str| {
        check_budget(start, BUDGET, what);
        let row = draw(c, Some(&tag.name)).unwrap_or_else(|e| panic!("{what}: {}", pg_err(&e)));
        ids.push(row.get::<_, i64>(0));
    };

    next(&mut c, "the first draw");
    for (what, bad, code) in [
        ("a NULL tag", None, SqlState::NULL_VALUE_NOT_ALLOWED),
        ("an empty tag", Some(""), SqlState::INVALID_PARAMETER_VALUE),
        (
            "an unknown tag",
            Some(unknown.as_str()),
            SqlState::UNDEFINED_OBJECT,
        ),
    ] {
        expect_error(draw(&mut c, bad), &code, what);
        next(&mut c, &format!("the draw after {what}"));
    }

    c.batch_execute("BEGIN").unwrap();
    next(&mut c, "a draw in the transaction");
    expect_error(
        draw(&mut c, None),
        &SqlState::NULL_VALUE_NOT_ALLOWED,
        "a NULL tag in the transaction",
    );
    expect_error(
        draw(&mut c, Some(&tag.name)),
        &SqlState::IN_FAILED_SQL_TRANSACTION,
        "a draw after the error in the transaction",
    );
    c.batch_execute("ROLLBACK").unwrap();
    next(&mut c, "the draw after ROLLBACK");

    report(
        test,
        &format!("{:.2?}: IDs between the errors {ids:?}", start.elapsed()),
    );
    assert_eq!(
        first_non_increase(&ids),
        None,
        "the IDs drawn between the errors"
    );
}

/// An int8 result column as the server sent it.
struct Wire(Vec<u8>);

impl<'a> FromSql<'a> for Wire {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Wire(raw.to_vec()))
    }
    fn accepts(ty: &Type) -> bool {
        *ty == Type::INT8
    }
}

/// Binary results: the `postgres` crate asks for every result column in
/// binary, so an ID comes as 8 bytes, big-endian. 20 rows inserted by a
/// prepared `INSERT ... RETURNING` whose segment ID (of a tag whose max_id
/// is 0x123456789abcdef0, so that every byte counts) and snowflake ID are column
/// defaults: the IDs it returned, the table read back in binary (8 bytes
/// each) and the table read back as text through `simple_query` (the simple
/// protocol) are the same numbers, row for row.
#[test]
fn binary_ids_equal_text_ids() {
    let test = "binary_ids_equal_text_ids";
    const ROWS: i32 = 20;
    let start = Instant::now();
    let mut c = connect(test);
    ensure_extension(&mut c);
    let tag = Tag::create_from(&mut c, "binary", 10, 0x1234_5678_9abc_def0);
    let table = unique_name("binary");
    c.batch_execute(&format!(
        "CREATE TABLE {table} (n int PRIMARY KEY, id bigint NOT NULL DEFAULT leaf_segment_next('{}'), \
         event bigint NOT NULL DEFAULT leaf_snowflake_next())",
        tag.name
    ))
    .unwrap_or_else(|e| panic!("create table: {}", pg_err(&e)));
    let insert = c
        .prepare(&format!(
            "INSERT INTO {table} (n) SELECT g FROM generate_series(1, $1) g RETURNING n, id, event"
        ))
        .unwrap();
    let triple = |r: &Row| -> (i64, i64, i64) { (r.get::<_, i32>(0) as i64, r.get(1), r.get(2)) };
    let mut returned: Vec<(i64, i64, i64)> = c
        .query(&insert, &[&ROWS])
        .unwrap_or_else(|e| panic!("insert: {}", pg_err(&e)))
        .iter()
        .map(triple)
        .collect();
    returned.sort_unstable();

    let select = format!("SELECT n, id, event FROM {table} ORDER BY n");
    let rows = c.query(&select, &[]).unwrap();
    for r in &rows {
        for col in [1, 2] {
            let Wire(raw) = r.get::<_, Wire>(col);
            let value: i64 = r.get(col);
            assert_eq!(
                raw.len(),
                8,
                "column {col} of {r:?} came as {raw:?}, not 8 bytes"
            );
            assert_eq!(
                i64::from_be_bytes(raw[..].try_into().unwrap()),
                value,
                "column {col}: {raw:?}"
            );
        }
    }
    let binary: Vec<(i64, i64, i64)> = rows.iter().map(triple).collect();
    let text: Vec<(i64, i64, i64)> = c
        .simple_query(&select)
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                let num = |i: usize| r.get(i).unwrap().parse::<i64>().unwrap();
                Some((num(0), num(1), num(2)))
            }
            _ => None,
        })
        .collect();
    report(
        test,
        &format!(
            "{:.2?}: {ROWS} rows, first {:?}",
            start.elapsed(),
            binary.first()
        ),
    );
    assert_eq!(binary.len(), ROWS as usize, "rows read back");
    assert_eq!(
        returned, binary,
        "RETURNING vs the table read back in binary"
    );
    assert_eq!(
        text, binary,
        "the table as text (simple_query) vs in binary"
    );
    assert!(
        binary.iter().all(|r| r.1 >= 0x1234_5678_9abc_def0),
        "segment IDs below the tag's max_id: {binary:?}"
    );
    c.batch_execute(&format!("DROP TABLE {table}")).ok();
}
