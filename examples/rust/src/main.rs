//! leaf_id from Rust with the `postgres` crate: a table whose key the
//! database assigns, IDs drawn before an insert, a batch, and a snowflake ID
//! decoded back to its time.
//!
//! Run against a server with leaf_id preloaded, as a superuser that may
//! CREATE EXTENSION and add tags (scripts/test-examples.sh starts one):
//!
//!     LEAF_ID_URL=postgresql://postgres@127.0.0.1:5432/postgres cargo run

use postgres::error::SqlState;
use postgres::{Client, NoTls};
use std::collections::HashSet;
use std::time::{Duration, SystemTime};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("LEAF_ID_URL")
        .unwrap_or_else(|_| "postgresql://postgres@127.0.0.1:5432/postgres".into());
    let mut client = Client::connect(&url, NoTls)?;

    // Set up once (an operator's step): the extension, a tag, a table.
    client.batch_execute(
        "CREATE EXTENSION IF NOT EXISTS leaf_id;
         INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, description) VALUES ('invoice', 1000, 'invoice numbers')
           ON CONFLICT (biz_tag) DO NOTHING;
         DROP TABLE IF EXISTS invoices;
         CREATE TABLE invoices (
           id bigint PRIMARY KEY DEFAULT leaf_segment_next('invoice'),
           amount_cents bigint NOT NULL);",
    )?;

    // The key comes back with RETURNING.
    let id: i64 = client
        .query_one(
            "INSERT INTO invoices (amount_cents) VALUES ($1) RETURNING id",
            &[&1999_i64],
        )?
        .get(0);

    // Or draw it first (to put it in a message before the row exists).
    let next: i64 = client
        .query_one("SELECT leaf_segment_next('invoice')", &[])?
        .get(0);
    client.execute(
        "INSERT INTO invoices (id, amount_cents) VALUES ($1, $2)",
        &[&next, &500_i64],
    )?;

    // 100 IDs in one round trip, for a loader or a client-side cache.
    let batch: Vec<i64> = client
        .query("SELECT leaf_segment_next('invoice', 100)", &[])?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let distinct: HashSet<i64> = batch.iter().copied().chain([id, next]).collect();
    assert_eq!(distinct.len(), 102, "102 distinct invoice IDs");

    // A snowflake ID, and what it says about itself.
    let sid: i64 = client
        .query_one("SELECT leaf_snowflake_next()", &[])?
        .get(0);
    let row = client.query_one(
        "SELECT timestamp, worker_id, sequence FROM leaf_snowflake_decode($1)",
        &[&sid],
    )?;
    let (at, worker_id, sequence): (SystemTime, i32, i32) = (row.get(0), row.get(1), row.get(2));
    let age = SystemTime::now().duration_since(at).unwrap_or_default();
    assert!(age < Duration::from_secs(60), "snowflake {sid} is from now");

    // A tag nobody created is an error with its own SQLSTATE, not a number.
    match client.query_one("SELECT leaf_segment_next('no such tag')", &[]) {
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_OBJECT) => {}
        other => panic!("expected 42704 for an unknown tag, got {other:?}"),
    }

    println!(
        "invoice {id}, then {next}, a batch {}..{}",
        batch[0], batch[99]
    );
    println!("snowflake {sid}: worker {worker_id}, sequence {sequence}, {age:?} ago");
    println!("leaf_id_example: ok");
    Ok(())
}
