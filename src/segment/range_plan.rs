//! The plan of one refill through `leaf_alloc`: from the tag's row, as read
//! under its lock, the step and the bounds, where the range starts and ends,
//! or why no range can be reserved. Pure: no pgrx, no SQL, no files;
//! `segment::refill` reads the row and records the plan.
//!
//! Its rules:
//! - a range never starts below the row's `max_id`, nor below what was
//!   reserved for the tag before (this server lifetime's mark, and the
//!   tag's recorded end in `leaf_alloc_encoding`): a `max_id` moved back, or
//!   a row deleted and inserted again lower, cannot make ranges overlap;
//! - it never passes the row's `max_value`, nor an opaque domain (`2^bits`),
//!   nor the largest bigint: with no room left, no range;
//! - its segment is at most the step, `MAX_SEGMENT_LEN`, and for an opaque
//!   tag the domain's `max_segment`; the step stays within its bounds
//!   (`segment::step`);
//! - on Citus the same reservation tops this server's reserve up to
//!   `leaf_id.citus_reserve` segments, right after the segment and within
//!   the same limits; opaque tags keep no reserve; a row below this server's
//!   reservations voids its reserve.

use crate::segment::buffer::MAX_SEGMENT_LEN;
use crate::segment::opaque::Domain;
use crate::segment::reserve::Reserve;
use crate::segment::step::{PreviousRefill, StepPolicy};

/// `max_id` of a row whose `max_id` is NULL: refused as negative.
const NULL_MAX_ID: i64 = -1;
/// The step of a row whose `step` is NULL: refused as below the least.
const NULL_STEP: i64 = 0;
/// The least step a row may have.
const LEAST_TABLE_STEP: i64 = 1;
/// The least `max_id` a row may have.
const LEAST_MAX_ID: i64 = 0;
/// A `max_value` below this counts as this (no IDs at all).
const LEAST_MAX_VALUE: i64 = -1;
/// An opaque domain at least this wide does not limit the counter: its
/// `2^bits` is past the largest bigint.
const UNLIMITING_BITS: u32 = 63;

/// A tag's row in `leaf_alloc` as the lock's `RETURNING` gave it. `None`: the
/// column is NULL, or the catalog has no such column (no opaque IDs before
/// 0.4.0, no grant before 0.5.0, no tag limits before 0.6.0); a refill
/// treats both alike.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagRow {
    pub max_id: Option<i64>,
    pub step: Option<i32>,
    pub opaque_domain: Option<String>,
    pub opaque_check: Option<i64>,
    pub opaque_grant: Option<i64>,
    pub max_value: Option<i64>,
    /// The role's name (`TagSlot::draw_role` is resolved from it).
    pub draw_role: Option<String>,
}

/// Why a row cannot be refilled whatever its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadRow {
    /// `step` is below 1 (or NULL: 0).
    StepBelowOne(i64),
    /// `max_id` is negative (or NULL: -1).
    NegativeMaxId(i64),
}

/// A row's counter and step, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub max_id: i64,
    pub table_step: i64,
}

impl TagRow {
    /// The row's `max_id` and `step`, or why they cannot be refilled (the
    /// step is checked first).
    pub fn counts(&self) -> Result<Counts, BadRow> {
        let max_id = self.max_id.unwrap_or(NULL_MAX_ID);
        let table_step = self.step.map_or(NULL_STEP, i64::from);
        if table_step < LEAST_TABLE_STEP {
            return Err(BadRow::StepBelowOne(table_step));
        }
        if max_id < LEAST_MAX_ID {
            return Err(BadRow::NegativeMaxId(max_id));
        }
        Ok(Counts { max_id, table_step })
    }
}

/// How the step is tuned: the policy, the previous refill of this server
/// lifetime, and the step saved before it (`leaf_alloc_tuning`).
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    pub policy: StepPolicy,
    pub previous: Option<PreviousRefill>,
    pub tuned: Option<i64>,
}

impl Tuning {
    /// The step of this refill: the previous refill's, tuned; for the first
    /// of this server lifetime the saved one (`StepPolicy::first_step`).
    pub fn step(&self, table_step: i64) -> i64 {
        match self.previous {
            Some(_) => self.policy.next_step(table_step, self.previous),
            None => self.policy.first_step(table_step, self.tuned),
        }
    }
}

/// The ends a range must not start below, besides the row's `max_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The end of what this server lifetime reserved for the tag.
    pub reserved_end: i64,
    /// The tag's recorded end (`leaf_alloc_encoding`; 0 without one).
    pub recorded_end: i64,
}

/// What the plan of a segment takes.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput {
    pub counts: Counts,
    pub step: i64,
    pub bounds: Bounds,
    pub max_value: Option<i64>,
    pub encoding: Option<Domain>,
}

/// Where a range starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At the row's `max_id`.
    AtMaxId(i64),
    /// At what was reserved before, above the row's `max_id` (warned of).
    RaisedToFloor(i64),
}

impl Start {
    pub fn at(self) -> i64 {
        match self {
            Start::AtMaxId(s) | Start::RaisedToFloor(s) => s,
        }
    }
}

/// Why no range can be reserved: no room left below the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    /// The row's `max_value` (it is the nearer limit).
    MaxValue(i64),
    /// Every value of the opaque domain, below `2^bits`.
    Domain { bits: u32 },
    /// The largest bigint.
    Bigint,
}

/// A segment that can be reserved: `[start, start + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub start: i64,
    pub len: i64,
    pub step: i64,
    /// Room below the limit from `start` (at least `len`).
    room: i64,
    max_id: i64,
    plain: bool,
}

/// A segment's plan: where it starts (known also when there is no room).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentPlan {
    pub start: Start,
    pub segment: Result<Segment, NoRoom>,
}

/// Plan a segment: its start, never below `max_id` nor the bounds; its
/// length, within the step and the limits.
pub fn plan_segment(input: &PlanInput) -> SegmentPlan {
    let max_id = input.counts.max_id;
    let floor = input.bounds.reserved_end.max(input.bounds.recorded_end);
    let start = if max_id < floor {
        Start::RaisedToFloor(floor)
    } else {
        Start::AtMaxId(max_id)
    };
    // the counter stays inside the domain (an opaque ID is the permutation
    // of a value below 2^bits) and at most the row's max_value
    let domain_limit = match input.encoding {
        Some(d) if d.bits() < UNLIMITING_BITS => 1i64 << d.bits(),
        _ => i64::MAX,
    };
    let value_limit = input
        .max_value
        .map_or(i64::MAX, |m| m.max(LEAST_MAX_VALUE).saturating_add(1));
    let room = domain_limit.min(value_limit).saturating_sub(start.at());
    if room <= 0 {
        let why = match (input.max_value, input.encoding) {
            (Some(m), _) if value_limit <= domain_limit => NoRoom::MaxValue(m),
            (_, Some(d)) if d.bits() < UNLIMITING_BITS => NoRoom::Domain { bits: d.bits() },
            _ => NoRoom::Bigint,
        };
        return SegmentPlan {
            start,
            segment: Err(why),
        };
    }
    // an opaque tag's segment is a small share of a narrow domain
    let len = input
        .step
        .min(MAX_SEGMENT_LEN)
        .min(room)
        .min(input.encoding.map_or(i64::MAX, |d| d.max_segment()));
    let segment = Segment {
        start: start.at(),
        len,
        step: input.step,
        room,
        max_id,
        plain: input.encoding.is_none(),
    };
    SegmentPlan {
        start,
        segment: Ok(segment),
    }
}

/// On Citus: this server's reserve, to top up in the same reservation.
#[derive(Debug, Clone, Copy)]
pub struct CitusReserve<'a> {
    /// leaf_alloc's OID.
    pub oid: u32,
    pub kept: &'a Reserve,
    pub tag: &'a str,
    /// `leaf_id.citus_reserve`: segments of this step to keep.
    pub target: i64,
}

/// What the reservation records: `[start, end)`, the segment first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub start: i64,
    pub len: i64,
    pub step: i64,
    pub end: i64,
    /// On Citus: leaf_alloc's OID and the range beyond the segment, for
    /// this server's reserve.
    pub extra: Option<(u32, (i64, i64))>,
    /// The row is below this server's reservations: its reserve is void.
    pub drop_kept: bool,
}

impl Segment {
    /// The whole range: the segment, and on Citus what tops the reserve up.
    pub fn range(&self, citus: Option<CitusReserve<'_>>) -> Range {
        // a row below this server's reservations (deleted and inserted
        // again, or moved back) voids its reserve: others may hand those
        // IDs out now
        let drop_kept = citus.is_some_and(|c| self.max_id < c.kept.reserved_through(c.tag, c.oid));
        // (opaque tags keep no reserve: it hands out plain ranges)
        let extra = citus.filter(|c| c.target > 0 && self.plain).and_then(|c| {
            let left = if drop_kept {
                0
            } else {
                c.kept.remaining(c.tag, c.oid)
            };
            self.missing(c.target, left).map(|n| (c.oid, n))
        });
        let end = self.start + self.len + extra.map_or(0, |(_, n)| n);
        Range {
            start: self.start,
            len: self.len,
            step: self.step,
            end,
            extra: extra.map(|(oid, _)| (oid, (self.start + self.len, end))),
            drop_kept,
        }
    }

    /// IDs a reserve holding `left` lacks to hold `target` segments, within
    /// the room.
    fn missing(&self, target: i64, left: i64) -> Option<i64> {
        let missing = target
            .saturating_mul(self.len)
            .saturating_sub(left)
            .clamp(0, self.room - self.len);
        (missing > 0).then_some(missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::opaque::{MAX_BITS, MIN_BITS};
    use crate::segment::reserve::TagReserve;
    use std::time::Duration;

    /// Random inputs per property.
    const CASES: usize = 20_000;
    const TAG: &str = "t";
    const OID: u32 = 4242;
    const MAX_STEP: i64 = 1 << 20;
    const KEY: [u8; 16] = [7; 16];

    /// A small xorshift64*, seeded per property: failures repeat.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
        /// Mostly small values, sometimes near the largest bigint.
        fn count(&mut self) -> i64 {
            match self.below(4) {
                0 => self.below(1_000) as i64,
                1 => self.below(1 << 40) as i64,
                2 => i64::MAX - self.below(1 << 24) as i64,
                _ => (self.next() >> 1) as i64,
            }
        }
        fn maybe<T>(&mut self, f: impl FnOnce(&mut Rng) -> T) -> Option<T> {
            (self.below(2) == 0).then(|| f(self))
        }
    }

    /// One random refill: the plan's input and an optional Citus reserve.
    struct Case {
        input: PlanInput,
        tuning: Tuning,
        kept: Reserve,
        citus: Option<i64>,
    }

    fn case(rng: &mut Rng) -> Case {
        let table_step = 1 + rng.below(5_000) as i64;
        let max_id = rng.count();
        let policy = StepPolicy {
            segment_duration: Duration::from_secs(900),
            max_step: MAX_STEP,
        };
        // a previous refill's step was within its bounds
        let previous = rng.maybe(|r| PreviousRefill {
            step: table_step.max(1 + r.below(MAX_STEP as u64) as i64),
            table_step: if r.below(4) == 0 { 1 } else { table_step },
            elapsed: Duration::from_secs(r.below(3_600)),
        });
        let tuned = rng.maybe(|r| r.count());
        let tuning = Tuning {
            policy,
            previous,
            tuned,
        };
        let encoding = rng.maybe(|r| {
            let bits = MIN_BITS as i64 + r.below(u64::from(MAX_BITS - MIN_BITS + 1)) as i64;
            Domain::new(bits, &KEY).expect("a valid width")
        });
        let input = PlanInput {
            counts: Counts { max_id, table_step },
            step: tuning.step(table_step),
            bounds: Bounds {
                reserved_end: rng.maybe(|r| r.count()).unwrap_or(0),
                recorded_end: rng.maybe(|r| r.count()).unwrap_or(0),
            },
            max_value: rng.maybe(|r| r.count() - 2),
            encoding,
        };
        let kept = Reserve {
            token: 1,
            tags: vec![TagReserve {
                tag: TAG.into(),
                table_oid: if rng.below(4) == 0 { OID + 1 } else { OID },
                reserved_through: rng.count(),
                ranges: vec![(0, rng.below(1 << 30) as i64)],
            }],
        };
        let citus = rng.maybe(|r| r.below(5) as i64);
        Case {
            input,
            tuning,
            kept,
            citus,
        }
    }

    fn range_of(c: &Case) -> Result<Range, NoRoom> {
        let citus = c.citus.map(|target| CitusReserve {
            oid: OID,
            kept: &c.kept,
            tag: TAG,
            target,
        });
        plan_segment(&c.input).segment.map(|s| s.range(citus))
    }

    /// Run `check` over random cases; it names what a failing case broke.
    fn property(seed: u64, check: impl Fn(&Case, Result<Range, NoRoom>) -> Result<(), String>) {
        let mut rng = Rng(seed);
        for i in 0..CASES {
            let c = case(&mut rng);
            if let Err(e) = check(&c, range_of(&c)) {
                panic!(
                    "case {i} (seed {seed}): {e}\ninput {:?}\ncitus {:?}",
                    c.input, c.citus
                );
            }
        }
    }

    /// The first value past the range's limits.
    fn limit(input: &PlanInput) -> i64 {
        let value = input
            .max_value
            .map_or(i64::MAX, |m| m.max(LEAST_MAX_VALUE).saturating_add(1));
        let domain = input
            .encoding
            .filter(|d| d.bits() < UNLIMITING_BITS)
            .map_or(i64::MAX, |d| 1i64 << d.bits());
        value.min(domain)
    }

    #[test]
    fn a_range_never_starts_below_reserved_end_or_max_id() {
        property(0x9e37_79b9_7f4a_7c15, |c, r| {
            let b = c.input.bounds;
            let floor = c
                .input
                .counts
                .max_id
                .max(b.reserved_end)
                .max(b.recorded_end);
            match (plan_segment(&c.input).start, r) {
                (s, _) if s.at() < floor => Err(format!("starts at {} below {floor}", s.at())),
                (_, Ok(r)) if r.start != floor => Err(format!("starts at {} not {floor}", r.start)),
                (Start::RaisedToFloor(_), _) if c.input.counts.max_id >= floor => {
                    Err("raised though max_id is the floor".into())
                }
                _ => Ok(()),
            }
        });
    }

    #[test]
    fn a_range_never_passes_max_value_nor_the_domain() {
        property(0x2545_f491_4f6c_dd1d, |c, r| match r {
            Ok(r) if r.end > limit(&c.input) || r.len < 1 || r.start + r.len > r.end => {
                Err(format!("range {r:?} passes {}", limit(&c.input)))
            }
            Err(_) if plan_segment(&c.input).start.at() < limit(&c.input) => {
                Err("no range though there is room".into())
            }
            Err(NoRoom::MaxValue(m)) if Some(m) != c.input.max_value => {
                Err(format!("max_value {m} is not the row's"))
            }
            _ => Ok(()),
        });
    }

    #[test]
    fn the_step_stays_within_its_bounds() {
        property(0x1234_5678_9abc_def1, |c, r| {
            let table_step = c.input.counts.table_step;
            let step = c.tuning.step(table_step);
            let most = table_step.max(MAX_STEP);
            let most_len = step
                .min(MAX_SEGMENT_LEN)
                .min(c.input.encoding.map_or(i64::MAX, |d| d.max_segment()));
            match r {
                _ if step < table_step || step > most => {
                    Err(format!("step {step} outside [{table_step}, {most}]"))
                }
                Ok(r) if r.step != step || r.len > most_len => Err(format!(
                    "range {r:?}: step {step}, segment at most {most_len}"
                )),
                _ => Ok(()),
            }
        });
    }

    #[test]
    fn the_citus_reserve_tops_up_plain_tags_right_after_the_segment() {
        property(0x0bad_cafe_f00d_d00d, |c, r| {
            let Ok(r) = r else { return Ok(()) };
            let beyond = r.end - (r.start + r.len);
            let through = c.kept.reserved_through(TAG, OID);
            let target = c.citus.unwrap_or(0);
            match r.extra {
                None if beyond != 0 => Err(format!("{beyond} reserved beyond without a reserve")),
                Some(_) if c.input.encoding.is_some() => Err("an opaque tag kept a reserve".into()),
                Some((oid, _)) if oid != OID => Err("another table's reserve".into()),
                Some((_, e)) if e != (r.start + r.len, r.end) || beyond < 1 => {
                    Err(format!("extra {e:?} is not right after the segment"))
                }
                Some(_) if beyond > target.saturating_mul(r.len) => {
                    Err(format!("{beyond} beyond {target} segments of {}", r.len))
                }
                _ if r.drop_kept != (c.citus.is_some() && c.input.counts.max_id < through) => {
                    Err(format!(
                        "drop_kept {} with max_id {}",
                        r.drop_kept, c.input.counts.max_id
                    ))
                }
                _ => Ok(()),
            }
        });
    }

    #[test]
    fn no_room_names_the_nearer_limit() {
        let counts = Counts {
            max_id: 100,
            table_step: 10,
        };
        let narrow = Domain::new(16, &KEY).expect("16 bits");
        let input = |max_value, encoding| PlanInput {
            counts,
            step: 10,
            bounds: Bounds {
                reserved_end: 1 << 16,
                recorded_end: 0,
            },
            max_value,
            encoding,
        };
        let why = |i: PlanInput| plan_segment(&i).segment.err();
        assert_eq!(why(input(Some(99), None)), Some(NoRoom::MaxValue(99)));
        assert_eq!(
            why(input(Some(1 << 20), Some(narrow))),
            Some(NoRoom::Domain { bits: 16 })
        );
        assert_eq!(
            why(input(Some(10), Some(narrow))),
            Some(NoRoom::MaxValue(10))
        );
        assert_eq!(why(input(None, None)), None);
        let at_top = PlanInput {
            counts: Counts {
                max_id: i64::MAX,
                table_step: 1,
            },
            ..input(None, None)
        };
        assert_eq!(why(at_top), Some(NoRoom::Bigint));
        assert_eq!(plan_segment(&at_top).start, Start::AtMaxId(i64::MAX));
    }

    #[test]
    fn a_row_is_checked_step_first() {
        let row = |max_id, step| TagRow {
            max_id,
            step,
            ..TagRow::default()
        };
        assert_eq!(row(None, None).counts(), Err(BadRow::StepBelowOne(0)));
        assert_eq!(
            row(Some(-5), Some(0)).counts(),
            Err(BadRow::StepBelowOne(0))
        );
        assert_eq!(row(None, Some(3)).counts(), Err(BadRow::NegativeMaxId(-1)));
        assert_eq!(
            row(Some(0), Some(3)).counts(),
            Ok(Counts {
                max_id: 0,
                table_step: 3
            })
        );
    }
}
