//! A session's runs of opaque IDs (pure). An opaque ID costs ten SipHash
//! calls that depend on each other; `Domain::encode_lanes` computes
//! `LANES` of them side by side for little more than the cost of one. So a
//! session that draws single IDs of an opaque tag takes a run of counter
//! values with one `fetch_add`, encodes them together, hands out the first
//! and keeps the rest here for its next calls.
//!
//! Why this keeps every ID unique: a run's values were taken from one of
//! the tag's published segments by this session alone, like any other
//! take; they are only handed out later. A run is tied to the tag slot's
//! (index, epoch) it was taken under, and `pop` hands out nothing once the
//! slot's epoch moved (the tag was deleted, its database dropped or its
//! extension created anew), so a run never outlives its tag.
//!
//! What it costs: values a session takes and does not hand out (it ends,
//! or its slot moves) are never issued: gaps in the counter, which opaque
//! IDs do not show. A run starts at one value per tag and doubles up to
//! `LANES`, so a session wastes at most as many values as it used, and at
//! most `LANES - 1`. Plain tags never use runs: their IDs are one
//! increasing stream of all sessions.

use crate::segment::opaque::LANES;

/// Tags a session keeps runs for; the least recently used run beyond
/// them is dropped (its values become gaps).
pub const MAX_RUNS: usize = 64;

#[derive(Clone, Copy)]
struct Run {
    slot: usize,
    epoch: u64,
    /// Values the next take asks for: 1, 2, 4, ... up to `LANES`.
    size: usize,
    ids: [i64; LANES],
    next: usize,
    len: usize,
}

/// The runs of one session, the most recently used first.
#[derive(Default)]
pub struct SessionRuns {
    runs: Vec<Run>,
}

impl SessionRuns {
    fn find(&self, slot: usize, epoch: u64) -> Option<usize> {
        self.runs
            .iter()
            .position(|r| r.slot == slot && r.epoch == epoch)
    }

    /// The next ID of the run taken under the tag slot's (index, epoch),
    /// if it has one left and `still_current()` says the slot's epoch is
    /// still `epoch` (asked only then: it reads shared memory).
    pub fn pop(
        &mut self,
        slot: usize,
        epoch: u64,
        still_current: impl FnOnce() -> bool,
    ) -> Option<i64> {
        let k = self.find(slot, epoch)?;
        if self.runs[k].next == self.runs[k].len {
            return None;
        }
        if !still_current() {
            // the slot went to another tag, or this one anew: never hand
            // these out
            self.runs.remove(k);
            return None;
        }
        self.runs[..=k].rotate_right(1);
        let run = &mut self.runs[0];
        let id = run.ids[run.next];
        run.next += 1;
        Some(id)
    }

    /// Counter values the next take of this slot and epoch asks for.
    pub fn take_size(&self, slot: usize, epoch: u64) -> u64 {
        self.find(slot, epoch).map_or(1, |k| self.runs[k].size) as u64
    }

    /// After a take under (slot, epoch) whose first ID was handed out:
    /// keep `rest` (at most `LANES - 1` IDs) for the next calls, and let
    /// the next take ask for twice as many values as this one took
    /// (`rest.len() + 1`).
    pub fn keep(&mut self, slot: usize, epoch: u64, rest: &[i64]) {
        assert!(rest.len() < LANES, "a run holds at most LANES IDs");
        // a run of an earlier epoch of the slot is of another tag
        self.runs.retain(|r| r.slot != slot || r.epoch == epoch);
        let size = ((rest.len() + 1) * 2).min(LANES);
        let mut run = Run {
            slot,
            epoch,
            size,
            ids: [0; LANES],
            next: 0,
            len: rest.len(),
        };
        run.ids[..rest.len()].copy_from_slice(rest);
        match self.find(slot, epoch) {
            Some(k) => {
                self.runs[k] = run;
                self.runs[..=k].rotate_right(1);
            }
            None => {
                self.runs.truncate(MAX_RUNS - 1);
                self.runs.insert(0, run);
            }
        }
    }

    /// Drop every run (their values become gaps).
    pub fn clear(&mut self) {
        self.runs.clear();
    }

    /// IDs kept and not handed out yet, over all runs.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.runs.iter().map(|r| r.len - r.next).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session's draws of one tag: the IDs in order, as `segment::functions`
    /// makes them (a take of `take_size` values, the first handed out).
    fn draw(runs: &mut SessionRuns, counter: &mut i64, slot: usize, epoch: u64) -> i64 {
        if let Some(id) = runs.pop(slot, epoch, || true) {
            return id;
        }
        let n = runs.take_size(slot, epoch) as usize;
        let taken: Vec<i64> = (0..n as i64).map(|i| *counter + i).collect();
        *counter += n as i64;
        runs.keep(slot, epoch, &taken[1..]);
        taken[0]
    }

    #[test]
    fn runs_double_up_to_lanes_and_hand_out_every_value_in_order() {
        let mut runs = SessionRuns::default();
        let mut counter = 100;
        let mut sizes = vec![];
        let mut ids = vec![];
        for _ in 0..40 {
            sizes.push(runs.take_size(3, 7));
            ids.push(draw(&mut runs, &mut counter, 3, 7));
        }
        assert_eq!(
            ids,
            (100..140).collect::<Vec<_>>(),
            "no value lost, none twice"
        );
        // a take of 1, then 2, 4 and 8 values; the size is read before each draw
        assert_eq!(&sizes[..5], &[1, 2, 4, 4, 8]);
        assert!(sizes[4..].iter().all(|&s| s == LANES as u64));
        assert_eq!(runs.pending(), counter as usize - 140);
    }

    #[test]
    fn a_session_wastes_at_most_what_it_used() {
        for used in 1..50usize {
            let mut runs = SessionRuns::default();
            let mut counter = 0;
            for _ in 0..used {
                draw(&mut runs, &mut counter, 0, 1);
            }
            let wasted = runs.pending();
            assert!(
                wasted < LANES && wasted <= used,
                "{used} used, {wasted} wasted"
            );
        }
    }

    #[test]
    fn a_moved_epoch_hands_out_nothing_of_the_old_run() {
        let mut runs = SessionRuns::default();
        let mut counter = 0;
        for _ in 0..4 {
            draw(&mut runs, &mut counter, 5, 1);
        }
        assert!(runs.pending() > 0);
        // the slot's epoch moved: the run is dropped, not handed out
        assert_eq!(runs.pop(5, 1, || false), None);
        assert_eq!(runs.pending(), 0);
        assert_eq!(runs.take_size(5, 1), 1, "starts over");
        // a new epoch of the same slot replaces any run of an older one
        let mut runs = SessionRuns::default();
        let mut counter = 0;
        for _ in 0..4 {
            draw(&mut runs, &mut counter, 5, 1);
        }
        runs.keep(5, 2, &[900, 901, 902]);
        assert_eq!(runs.pop(5, 1, || true), None, "the old epoch's run is gone");
        assert_eq!(runs.pop(5, 2, || true), Some(900));
    }

    #[test]
    fn runs_of_several_tags_stay_apart_and_the_oldest_goes_first() {
        let mut runs = SessionRuns::default();
        let mut counters = vec![0i64; MAX_RUNS + 1];
        for (slot, c) in counters.iter_mut().enumerate() {
            *c = slot as i64 * 1000;
        }
        let mut seen = std::collections::HashSet::new();
        for round in 0..5 {
            for (slot, counter) in counters.iter_mut().enumerate().take(MAX_RUNS) {
                let id = draw(&mut runs, counter, slot, 1);
                assert_eq!(
                    id / 1000,
                    slot as i64,
                    "slot {slot}'s ID from its own counter"
                );
                assert!(seen.insert(id), "{id} twice (round {round})");
            }
        }
        assert_eq!(runs.runs.len(), MAX_RUNS);
        // one more tag: the least recently used run (slot 0) is dropped
        draw(&mut runs, &mut counters[MAX_RUNS], MAX_RUNS, 1);
        assert_eq!(runs.runs.len(), MAX_RUNS);
        assert!(runs.find(0, 1).is_none());
        assert!(runs.find(1, 1).is_some());
    }
}
