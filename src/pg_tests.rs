//! `#[pg_test]` tests of the SQL surface. They run inside a transaction that
//! is rolled back, so the background worker never sees rows they insert:
//! behaviour that needs the worker is tested with real clients (tests/,
//! pg_test/).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn decode_follows_leaf_layout() {
        let id = (123_456_i64 << 22) | (5 << 12) | 77;
        let row = Spi::get_three::<TimestampWithTimeZone, i32, i32>(&format!(
            "SELECT timestamp, worker_id, sequence FROM leaf_snowflake_decode({id})"
        ))
        .unwrap();
        assert_eq!((row.1, row.2), (Some(5), Some(77)));
        let unix_ms = Spi::get_one::<f64>(&format!(
            "SELECT extract(epoch FROM timestamp)::float8 * 1000 FROM leaf_snowflake_decode({id})"
        ))
        .unwrap()
        .unwrap();
        assert_eq!(unix_ms.round() as i64, 1_288_834_974_657 + 123_456);
    }

    #[pg_test]
    fn min_id_is_smallest_of_its_millisecond() {
        let min = Spi::get_one::<i64>("SELECT leaf_snowflake_min_id('2024-01-01 00:00:00.001+00')")
            .unwrap()
            .unwrap();
        let before = Spi::get_one::<i64>("SELECT leaf_snowflake_min_id('2024-01-01 00:00:00+00')")
            .unwrap()
            .unwrap();
        assert_eq!(min - before, 1 << 22);
        assert_eq!(min & ((1 << 22) - 1), 0);
    }

    #[pg_test(error = "leaf_id tag must not be NULL")]
    fn null_tag_is_an_error() {
        Spi::get_one::<i64>("SELECT leaf_segment_next(NULL)").unwrap();
    }

    #[pg_test(error = "leaf_id tag must not be empty")]
    fn empty_tag_is_an_error() {
        Spi::get_one::<i64>("SELECT leaf_segment_next('')").unwrap();
    }

    #[pg_test(error = "leaf_id tag is 129 characters long; the limit is 128")]
    fn oversized_tag_is_an_error() {
        Spi::get_one::<i64>("SELECT leaf_segment_next(repeat('x', 129))").unwrap();
    }

    #[pg_test(
        error = "new row for relation \"leaf_alloc\" violates check constraint \"leaf_alloc_step_positive\""
    )]
    fn table_rejects_step_below_one() {
        Spi::run("INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('t', 0)").unwrap();
    }

    #[pg_test(
        error = "new row for relation \"leaf_alloc\" violates check constraint \"leaf_alloc_max_id_not_negative\""
    )]
    fn table_rejects_negative_max_id() {
        Spi::run(
            "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id) VALUES ('t', 1, -5)",
        )
        .unwrap();
    }

    /// The worker does not see this uncommitted row, so the tag is unknown to it.
    #[pg_test(error = "leaf_id tag \"pg_test uncommitted\" does not exist in leaf_alloc")]
    fn tag_must_be_committed_before_use() {
        Spi::run("INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('pg_test uncommitted', 10)")
            .unwrap();
        Spi::get_one::<i64>("SELECT leaf_segment_next('pg_test uncommitted')").unwrap();
    }

    #[pg_test]
    fn snowflake_ids_increase_and_decode_to_now() {
        let (a, b) =
            Spi::get_two::<i64, i64>("SELECT leaf_snowflake_next(), leaf_snowflake_next()")
                .unwrap();
        assert!(a.unwrap() < b.unwrap());
        let recent = Spi::get_one::<bool>(&format!(
            "SELECT abs(extract(epoch FROM timestamp - now())) < 60 FROM leaf_snowflake_decode({})",
            b.unwrap()
        ))
        .unwrap();
        assert_eq!(recent, Some(true));
    }

    #[pg_test]
    fn settings_are_visible_with_descriptions() {
        let n = Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_settings WHERE name LIKE 'leaf_id.%' AND short_desc <> ''",
        )
        .unwrap();
        assert_eq!(n, Some(23));
    }

    #[pg_test(error = "cannot execute leaf_segment_next() in a read-only transaction")]
    fn read_only_transaction_is_refused() {
        Spi::run("SET TRANSACTION READ ONLY").unwrap();
        Spi::get_one::<i64>("SELECT leaf_segment_next('x')").unwrap();
    }
}
