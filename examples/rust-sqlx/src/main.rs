//! leaf_id from Rust with sqlx (async, on tokio). The keys come from column
//! defaults on the server; sqlx reads them back with `RETURNING`:
//!
//!   id bigint PRIMARY KEY DEFAULT leaf_segment_next('sqlx_order')   -- or leaf_snowflake_next()
//!
//! Read keys into `i64` (PostgreSQL's bigint). sqlx has no ORM layer that
//! inserts for you: write the INSERT with `RETURNING id`; for many rows, one
//! `INSERT ... SELECT * FROM UNNEST($1::text[]) RETURNING id`.
//! Run by scripts/test-examples.sh with LEAF_ID_URL pointing at a database
//! that has leaf_id; panics on a failed check.
use sqlx::postgres::PgPoolOptions;

fn check(ok: bool, what: &str) {
    assert!(ok, "sqlx: FAILED: {what}");
    println!("ok - {what}");
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), sqlx::Error> {
    let url = std::env::var("LEAF_ID_URL").expect("LEAF_ID_URL");
    let pool = PgPoolOptions::new().max_connections(2).connect(&url).await?;
    for statement in [
        "CREATE EXTENSION IF NOT EXISTS leaf_id",
        "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('sqlx_order', 100) ON CONFLICT DO NOTHING",
        "DROP TABLE IF EXISTS sqlx_orders, sqlx_events",
        "CREATE TABLE sqlx_orders (id bigint PRIMARY KEY DEFAULT leaf_segment_next('sqlx_order'), item text NOT NULL)",
        "CREATE TABLE sqlx_events (id bigint PRIMARY KEY DEFAULT leaf_snowflake_next(), kind text NOT NULL)",
    ] {
        sqlx::query(statement).execute(&pool).await?;
    }

    let id: i64 = sqlx::query_scalar("INSERT INTO sqlx_orders (item) VALUES ($1) RETURNING id")
        .bind("pen")
        .fetch_one(&pool)
        .await?;
    check(id > 0, &format!("INSERT ... RETURNING id reads the segment key back ({id})"));
    let ids: Vec<i64> =
        sqlx::query_scalar("INSERT INTO sqlx_orders (item) SELECT * FROM UNNEST($1::text[]) RETURNING id")
            .bind(vec!["a", "b", "c"])
            .fetch_all(&pool)
            .await?;
    check(
        ids.len() == 3 && ids.iter().all(|&i| i > id),
        &format!("a bulk INSERT from UNNEST returns three keys ({ids:?})"),
    );
    let (found, item): (i64, String) = sqlx::query_as("SELECT id, item FROM sqlx_orders WHERE id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await?;
    check(found == id && item == "pen", "the row is there under its key");

    let event: i64 = sqlx::query_scalar("INSERT INTO sqlx_events (kind) VALUES ('signup') RETURNING id")
        .fetch_one(&pool)
        .await?;
    let worker: i32 = sqlx::query_scalar("SELECT worker_id FROM leaf_snowflake_decode($1)")
        .bind(event)
        .fetch_one(&pool)
        .await?;
    check(event > 1 << 22, &format!("a snowflake key ({event}), decodable (worker {worker})"));

    let mut tx = pool.begin().await?;
    let rolled_back: i64 = sqlx::query_scalar("INSERT INTO sqlx_orders (item) VALUES ('rolled back') RETURNING id")
        .fetch_one(&mut *tx)
        .await?;
    tx.rollback().await?;
    let after: i64 = sqlx::query_scalar("INSERT INTO sqlx_orders (item) VALUES ('after') RETURNING id")
        .fetch_one(&pool)
        .await?;
    check(
        after > rolled_back,
        &format!("a rolled-back insert's key ({rolled_back}) is not handed out again (next: {after})"),
    );
    println!("sqlx: all checks passed");
    Ok(())
}
