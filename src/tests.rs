//! `#[pg_test]` tests of the SQL surface (run inside a rolled-back
//! transaction: the worker never sees rows these tests insert).
use pgrx::prelude::*;

#[pg_test]
fn decode_round_trip() {
    let id = (123_456_i64 << 22) | (5 << 12) | 77;
    let worker = Spi::get_one::<i32>(&format!("SELECT worker_id FROM leaf_snowflake_decode({id})")).unwrap();
    assert_eq!(worker, Some(5));
}
