//! `#[pg_test]` tests of the SQL surface. They run inside a transaction that
//! is rolled back, so the background worker never sees rows they insert:
//! behaviour that needs the worker is tested with real clients (tests/).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn decode_round_trip() {
        let id = (123_456_i64 << 22) | (5 << 12) | 77;
        let worker = Spi::get_one::<i32>(&format!("SELECT worker_id FROM leaf_snowflake_decode({id})")).unwrap();
        assert_eq!(worker, Some(5));
    }
}
