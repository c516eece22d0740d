//! The real clock, and Unix times as Postgres timestamps.
//! Must not decide what a clock step means (the generator's rules do).

use pgrx::prelude::*;

/// Unix milliseconds of the real clock.
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The snowflake clock (generator and worker): the system clock shifted by
/// the test setting `leaf_id.test_clock_offset_ms`.
pub fn clock_ms() -> i64 {
    unix_ms() + crate::settings::TEST_CLOCK_OFFSET_MS.get() as i64
}

pub fn unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Sleep on this process's latch until it is set or `timeout` passes. Does
/// not process interrupts itself: callers check for them (or for a
/// terminate request) around it.
pub fn wait_on_latch(timeout: std::time::Duration) {
    use pgrx::pg_sys;
    // SAFETY: MyLatch is this process's own latch (a local one from process start, its PGPROC's
    // procLatch after InitProcess), so WaitLatch may wait on it and ResetLatch clear it; every
    // caller (backends, workers, helpers) is a child of the postmaster, whose death
    // WL_EXIT_ON_PM_DEATH watches for.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            timeout.as_millis().max(1) as std::ffi::c_long,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
}

/// Postgres timestamps count microseconds from 2000-01-01.
const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// None for 0 (never set).
pub fn tstz_from_unix_us(us: i64) -> Option<TimestampWithTimeZone> {
    if us == 0 {
        return None;
    }
    TimestampWithTimeZone::try_from(us - PG_EPOCH_OFFSET_US).ok()
}

/// Unix milliseconds of a finite timestamp (rounded down); None past i64.
pub fn unix_ms_from_tstz(ts: TimestampWithTimeZone) -> Option<i64> {
    let pg_us: i64 = ts.into();
    Some(pg_us.checked_add(PG_EPOCH_OFFSET_US)?.div_euclid(1000))
}

/// Any Unix millisecond (0 included) as a timestamp; None out of range.
pub fn tstz_from_unix_ms_any(ms: i64) -> Option<TimestampWithTimeZone> {
    TimestampWithTimeZone::try_from(ms.checked_mul(1000)?.checked_sub(PG_EPOCH_OFFSET_US)?).ok()
}

pub fn tstz_from_unix_ms(ms: i64) -> Option<TimestampWithTimeZone> {
    tstz_from_unix_us(ms.checked_mul(1000)?)
}
