//! Leaf's snowflake layout: sign 0 | 41 bits of milliseconds since the epoch |
//! 10 bits of worker id | 12 bits of sequence.
//! Pure: no pgrx, no SQL, no files.

pub const TIMESTAMP_BITS: u32 = 41;
pub const WORKER_BITS: u32 = 10;
pub const SEQUENCE_BITS: u32 = 12;
pub const MAX_WORKER_ID: i64 = (1 << WORKER_BITS) - 1;
pub const MAX_SEQUENCE: i64 = (1 << SEQUENCE_BITS) - 1;
pub const MAX_TIMESTAMP: i64 = (1 << TIMESTAMP_BITS) - 1;
/// Twitter's epoch, Leaf's default: 2010-11-04 01:42:54.657 UTC.
pub const LEAF_EPOCH_MS: i64 = 1_288_834_974_657;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Unix milliseconds.
    pub unix_ms: i64,
    pub worker_id: i64,
    pub sequence: i64,
}

/// `ms_since_epoch` must be within 0..=MAX_TIMESTAMP.
pub fn encode(ms_since_epoch: i64, worker_id: i64, sequence: i64) -> i64 {
    debug_assert!((0..=MAX_TIMESTAMP).contains(&ms_since_epoch));
    debug_assert!((0..=MAX_WORKER_ID).contains(&worker_id));
    debug_assert!((0..=MAX_SEQUENCE).contains(&sequence));
    (ms_since_epoch << (WORKER_BITS + SEQUENCE_BITS)) | (worker_id << SEQUENCE_BITS) | sequence
}

/// None for a negative id (no snowflake id is negative).
pub fn decode(id: i64, epoch_ms: i64) -> Option<Decoded> {
    if id < 0 {
        return None;
    }
    Some(Decoded {
        unix_ms: (id >> (WORKER_BITS + SEQUENCE_BITS)) + epoch_ms,
        worker_id: (id >> SEQUENCE_BITS) & MAX_WORKER_ID,
        sequence: id & MAX_SEQUENCE,
    })
}

/// Smallest id of a millisecond (any worker): for range predicates and
/// partition bounds on an id column. Clamped to the layout's range.
pub fn min_id_at(unix_ms: i64, epoch_ms: i64) -> i64 {
    let t = unix_ms.saturating_sub(epoch_ms).clamp(0, MAX_TIMESTAMP);
    encode(t, 0, 0)
}

/// Last Unix millisecond the layout can express with this epoch.
pub fn last_unix_ms(epoch_ms: i64) -> i64 {
    epoch_ms + MAX_TIMESTAMP
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_formula() {
        let id = encode(123_456, 5, 77);
        assert_eq!(id, (123_456 << 22) | (5 << 12) | 77);
    }

    #[test]
    fn round_trip() {
        for &(t, w, s) in &[
            (0, 0, 0),
            (MAX_TIMESTAMP, MAX_WORKER_ID, MAX_SEQUENCE),
            (1_000_000_000, 513, 4000),
        ] {
            let d = decode(encode(t, w, s), LEAF_EPOCH_MS).unwrap();
            assert_eq!(
                d,
                Decoded {
                    unix_ms: t + LEAF_EPOCH_MS,
                    worker_id: w,
                    sequence: s
                }
            );
        }
        assert!(encode(MAX_TIMESTAMP, MAX_WORKER_ID, MAX_SEQUENCE) > 0);
        assert_eq!(decode(-1, 0), None);
    }

    #[test]
    fn min_id_orders_with_time() {
        let t = LEAF_EPOCH_MS + 10_000;
        assert!(min_id_at(t, LEAF_EPOCH_MS) <= encode(10_000, 0, 0));
        assert!(min_id_at(t + 1, LEAF_EPOCH_MS) > encode(10_000, MAX_WORKER_ID, MAX_SEQUENCE));
        assert_eq!(min_id_at(0, LEAF_EPOCH_MS), 0);
    }

    #[test]
    fn layout_lasts_69_years() {
        let years = MAX_TIMESTAMP as f64 / (365.25 * 86_400_000.0);
        assert!(years > 69.0 && years < 70.0);
    }
}
