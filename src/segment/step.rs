//! Leaf's dynamic step: how many IDs the next refill reserves.
//! Pure: no pgrx, no SQL, no files.
//!
//! A segment that lasted less than the segment duration doubles the step (up
//! to the maximum); one that lasted two durations or more halves it (never
//! below the table's step); in between the step stays. A change of the
//! table's step takes effect at the next refill.

use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct StepPolicy {
    pub segment_duration: Duration,
    pub max_step: i64,
}

/// What the previous refill of a tag used, if there was one.
#[derive(Debug, Clone, Copy)]
pub struct PreviousRefill {
    pub step: i64,
    pub table_step: i64,
    pub elapsed: Duration,
}

impl StepPolicy {
    pub fn next_step(&self, table_step: i64, previous: Option<PreviousRefill>) -> i64 {
        let Some(prev) = previous else {
            return table_step;
        };
        if prev.table_step != table_step {
            return table_step;
        }
        let step = if prev.elapsed < self.segment_duration {
            if prev.step.saturating_mul(2) <= self.max_step {
                prev.step * 2
            } else {
                prev.step
            }
        } else if prev.elapsed < self.segment_duration * 2 {
            prev.step
        } else {
            prev.step / 2
        };
        step.max(table_step)
    }

    /// The step of a tag's first refill in this server lifetime: the step it
    /// was tuned to before (leaf_alloc_tuning, Leaf issue #111), within
    /// `max_step` and never below the table's step; else the table's step.
    pub fn first_step(&self, table_step: i64, tuned: Option<i64>) -> i64 {
        tuned.map_or(table_step, |t| t.min(self.max_step).max(table_step))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn policy() -> StepPolicy {
        StepPolicy {
            segment_duration: 15 * MIN,
            max_step: 1_000_000,
        }
    }
    fn prev(step: i64, table_step: i64, elapsed: Duration) -> Option<PreviousRefill> {
        Some(PreviousRefill {
            step,
            table_step,
            elapsed,
        })
    }

    #[test]
    fn first_refill_uses_table_step() {
        assert_eq!(policy().next_step(1000, None), 1000);
    }

    #[test]
    fn first_refill_resumes_tuned_step_within_bounds() {
        let p = policy();
        assert_eq!(p.first_step(1000, Some(64_000)), 64_000);
        assert_eq!(
            p.first_step(1000, Some(5_000_000)),
            1_000_000,
            "capped by max_step"
        );
        assert_eq!(
            p.first_step(1000, Some(10)),
            1000,
            "never below the table's step"
        );
        assert_eq!(p.first_step(2_000_000, Some(10)), 2_000_000);
        assert_eq!(p.first_step(1000, None), 1000);
    }

    #[test]
    fn fast_segments_double_up_to_max() {
        let p = policy();
        assert_eq!(p.next_step(1000, prev(1000, 1000, MIN)), 2000);
        assert_eq!(
            p.next_step(1000, prev(600_000, 1000, MIN)),
            600_000,
            "doubling would pass the max"
        );
        assert_eq!(p.next_step(1000, prev(500_000, 1000, MIN)), 1_000_000);
    }

    #[test]
    fn normal_segments_keep_step() {
        assert_eq!(policy().next_step(1000, prev(4000, 1000, 20 * MIN)), 4000);
        assert_eq!(policy().next_step(1000, prev(4000, 1000, 15 * MIN)), 4000);
    }

    #[test]
    fn slow_segments_halve_not_below_table_step() {
        let p = policy();
        assert_eq!(p.next_step(1000, prev(4000, 1000, 30 * MIN)), 2000);
        assert_eq!(p.next_step(1000, prev(1000, 1000, 90 * MIN)), 1000);
        assert_eq!(p.next_step(1000, prev(1500, 1000, 90 * MIN)), 1000);
    }

    #[test]
    fn table_step_change_takes_effect_at_next_refill() {
        let p = policy();
        assert_eq!(p.next_step(10, prev(64_000, 1000, MIN)), 10);
        assert_eq!(p.next_step(5000, prev(2000, 1000, 90 * MIN)), 5000);
    }

    #[test]
    fn table_step_above_max_is_respected() {
        assert_eq!(
            policy().next_step(2_000_000, prev(2_000_000, 2_000_000, MIN)),
            2_000_000
        );
    }
}
