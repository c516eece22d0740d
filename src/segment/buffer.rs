//! The double buffer of one tag: two segments of reserved IDs, lock-free on the
//! hot path.
//! Pure: no pgrx, no SQL, no files.
//!
//! Pure Rust over std atomics, `#[repr(C)]` so it can live in shared memory.
//! Taking an ID is one `fetch_add` on the current segment's state word; the
//! rest of the hot path is plain loads. Everything that changes which range a
//! segment holds (publish, switch, retire) runs with the owner's lock held
//! (an LWLock in Postgres, a mutex in the unit tests): only readers are
//! lock-free.
//!
//! Why a generation: a reader may load `current`, be preempted, and
//! `fetch_add` on a segment that has meanwhile been exhausted, switched away
//! from and refilled with a new range. Each publish gives the segment a new
//! generation. The reader loads the full 64-bit generation of the metadata
//! before its `fetch_add` ([`Segment::begin_take`]), and afterwards
//! ([`Segment::finish_take`]) accepts its offset only if the word it got back
//! carries the generation the metadata has now, complete and unchanged while
//! read: then the offset belongs to that range. That is the expected
//! generation, or the next one when the reader's `fetch_add` landed on the
//! word a publish had just reset (its offset is then the new range's, and
//! nobody else's). The word holds only the low 24 bits of the generation;
//! they wrap after 2^24 publishes (retires count too), so a reader that finds
//! 2^24 - 1 or more publishes since its look gets `Stale`. An offset is
//! handed to exactly one `fetch_add`, so every ID of a range goes to at most
//! one caller.
//!
//! IDs are unique, not strictly increasing per session: a reader stalled
//! between loading `current` and its `fetch_add` can take from a segment that
//! was switched away from and refilled with a newer range meanwhile, so its
//! ID can be above the IDs its session takes next.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering::SeqCst};

const OFFSET_BITS: u32 = 40;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
const GEN_MASK: u64 = (1 << (64 - OFFSET_BITS)) - 1;
/// Set in `meta_gen` while `start`/`len` are being rewritten.
const WRITING: u64 = 1 << 63;
/// Longest range one segment can hold (the offset must not overflow into the
/// generation bits even when many stale readers over-increment it).
pub const MAX_SEGMENT_LEN: i64 = 1 << 36;

fn pack(generation: u64, offset: u64) -> u64 {
    ((generation & GEN_MASK) << OFFSET_BITS) | (offset & OFFSET_MASK)
}
fn unpack(word: u64) -> (u64, u64) {
    (word >> OFFSET_BITS, word & OFFSET_MASK)
}

/// What a reader holds between the two halves of a take.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    /// full generation of the metadata before the `fetch_add`
    expected: u64,
    /// the word the `fetch_add` returned
    word: u64,
    /// how many offsets the `fetch_add` took
    n: u64,
}

/// Most offsets one `fetch_add` takes. Only readers that saw IDs left add
/// (`begin_take`), each once per look: even 2^18 backends adding this much
/// past a segment of `MAX_SEGMENT_LEN` stay below 2^40, so the offset never
/// carries into the generation bits.
pub const MAX_TAKE: u64 = 1 << 16;

/// One reserved range `[start, start + len)` and how much of it is taken.
#[repr(C)]
#[derive(Default)]
pub struct Segment {
    /// low 24 bits of the generation << 40 | number of `fetch_add`s since the
    /// range was published
    state: AtomicU64,
    /// full generation whose range `start`/`len` describe (| WRITING while
    /// changing); only ever grows
    meta_gen: AtomicU64,
    start: AtomicI64,
    len: AtomicI64,
}

/// What one attempt to take an ID from a segment gave.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Take {
    /// An ID, and whether this caller crossed the prefetch threshold (10% used).
    Id { id: i64, crossed_threshold: bool },
    /// Nothing left in this segment (or it was never filled).
    Exhausted,
    /// The segment changed under the caller; try again.
    Stale,
}

/// What one attempt to take several IDs gave.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum TakeMany {
    /// `count` consecutive IDs from `first`; whether this take crossed the
    /// prefetch threshold (10% used).
    Ids {
        first: i64,
        count: i64,
        crossed_threshold: bool,
    },
    Exhausted,
    Stale,
}

impl From<TakeMany> for Take {
    fn from(t: TakeMany) -> Take {
        match t {
            TakeMany::Ids {
                first,
                crossed_threshold,
                ..
            } => Take::Id {
                id: first,
                crossed_threshold,
            },
            TakeMany::Exhausted => Take::Exhausted,
            TakeMany::Stale => Take::Stale,
        }
    }
}

/// A consistent view of a segment, for status reports.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SegmentView {
    pub start: i64,
    /// next ID this segment would hand out (== end when exhausted)
    pub next: i64,
    pub end: i64,
}

impl SegmentView {
    pub fn remaining(&self) -> i64 {
        self.end - self.next
    }
}

impl Segment {
    /// Lock-free: take one ID.
    pub fn take(&self) -> Take {
        self.take_many(1).into()
    }

    /// Lock-free: take up to `n` consecutive IDs (at most [`MAX_TAKE`]) with
    /// one `fetch_add`; fewer when the segment has fewer left.
    pub fn take_many(&self, n: u64) -> TakeMany {
        self.finish_take(self.begin_take(n))
    }

    /// First half of a take: the generation the reader expects, then its one
    /// `fetch_add` of `n` offsets (none on a segment it sees exhausted).
    /// Split only so that tests can interleave
    /// publishes between the halves.
    pub fn begin_take(&self, n: u64) -> Ticket {
        let n = n.clamp(1, MAX_TAKE);
        let expected = self.meta_gen.load(SeqCst);
        // a segment seen exhausted is not added to: callers retrying through
        // a long refill outage cannot carry the offset into the generation
        // bits (only readers that saw IDs left add past the end, each once)
        let seen = self.state.load(SeqCst);
        let (seen_gen, seen_offset) = unpack(seen);
        // nor is a segment being published (the caller retries)
        if expected & WRITING != 0
            || (seen_gen == expected & GEN_MASK && seen_offset as i64 >= self.len.load(SeqCst))
        {
            return Ticket {
                expected,
                word: seen,
                n: 0,
            };
        }
        let word = self.state.fetch_add(n, SeqCst);
        Ticket { expected, word, n }
    }

    /// Second half of a take: what the ticket's offsets are.
    pub fn finish_take(&self, ticket: Ticket) -> TakeMany {
        let (word_gen, offset) = unpack(ticket.word);
        let m1 = self.meta_gen.load(SeqCst);
        let start = self.start.load(SeqCst);
        let len = self.len.load(SeqCst);
        let m2 = self.meta_gen.load(SeqCst);
        // The word's full generation X is at least `expected` (the word had
        // `expected` when the reader loaded it, and only grows) and the
        // metadata reaches X only after the word does, so m1 >= X - 1. With
        // m1 not writing, m1 = m2, and fewer than 2^24 publishes since
        // `expected`, low bits equal to m1's mean X = m1: start/len are X's
        // range. That also names the offsets of a reader whose `fetch_add`
        // landed on the word a publish had just reset (else the range's first
        // ID would be nobody's).
        if ticket.expected & WRITING != 0
            || m1 & WRITING != 0
            || m1 != m2
            || m1.wrapping_sub(ticket.expected) >= GEN_MASK
            || word_gen != m1 & GEN_MASK
        {
            // a publish happened since the reader's fetch_add (or is under
            // way, or too many to tell): its offsets belong to no range it can name
            return TakeMany::Stale;
        }
        let offset = offset as i64;
        if ticket.n == 0 {
            // a ticket without a fetch_add owns no offset
            return if offset < len {
                TakeMany::Stale
            } else {
                TakeMany::Exhausted
            };
        }
        if offset < len {
            // one caller gets exactly these offsets (the part past the end
            // is nobody's: later takes see the segment exhausted)
            let count = (ticket.n as i64).min(len - offset);
            let threshold = len / 10;
            TakeMany::Ids {
                first: start + offset,
                count,
                crossed_threshold: offset <= threshold && threshold < offset + count,
            }
        } else {
            TakeMany::Exhausted
        }
    }

    /// Consistent snapshot; `None` while a writer is active (never, under the lock).
    pub fn view(&self) -> SegmentView {
        let (generation, offset) = unpack(self.state.load(SeqCst));
        let m = self.meta_gen.load(SeqCst);
        let start = self.start.load(SeqCst);
        let len = self.len.load(SeqCst);
        let taken = if m & GEN_MASK == generation && m & WRITING == 0 {
            (offset as i64).min(len)
        } else {
            len
        };
        SegmentView {
            start,
            next: start + taken,
            end: start + len,
        }
    }

    /// IDs not yet taken (0 when exhausted or empty).
    pub fn remaining(&self) -> i64 {
        self.view().remaining()
    }

    /// Owner's lock held, and the segment exhausted: give it a new range.
    fn publish(&self, start: i64, len: i64) {
        self.publish_interleaved(start, len, || {});
    }

    /// `publish`, with `between` run before its last store (tests run a
    /// reader there).
    fn publish_interleaved(&self, start: i64, len: i64, between: impl FnOnce()) {
        assert!(
            (0..=MAX_SEGMENT_LEN).contains(&len),
            "segment length out of range"
        );
        let generation = self.meta_gen.load(SeqCst) & !WRITING;
        let mut next_gen = generation + 1;
        // readers that load meta from here on see WRITING and retry
        self.meta_gen.store(generation | WRITING, SeqCst);
        self.start.store(start, SeqCst);
        self.len.store(len, SeqCst);
        // the word is reset before the new generation is published: a reader
        // that loads the new generation adds to the new word only (the old
        // word, even one whose offset carried into the generation bits, is
        // gone by then)
        let old = self.state.swap(pack(next_gen, 0), SeqCst);
        if unpack(old).0 != generation & GEN_MASK {
            // the old word's offset carried into the generation bits (which
            // the bounds on MAX_TAKE and MAX_SEGMENT_LEN should rule out): a
            // reader may hold a word that reads as `next_gen`, so the range
            // gets the generation after it (readers of the word just reset
            // then fail the generation check too)
            next_gen += 1;
            self.state.store(pack(next_gen, 0), SeqCst);
        }
        between();
        // the new range becomes takeable only now, complete
        self.meta_gen.store(next_gen, SeqCst);
    }
}

/// Two segments and which one is current. Readers only call [`take`];
/// everything else requires the owner's lock.
#[repr(C)]
#[derive(Default)]
pub struct SegmentPair {
    current: AtomicU32,
    segments: [Segment; 2],
}

/// What the owner should do after a failed take, decided under its lock.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum SlowPath {
    /// The current segment has IDs again (someone else switched): retry.
    Retry,
    /// Switched to the next segment, which was ready: retry. The old one
    /// needs a refill now.
    Switched,
    /// Both segments are empty: wait for a refill.
    Wait,
}

impl SegmentPair {
    /// Lock-free hot path.
    pub fn take(&self) -> Take {
        let current = self.current.load(SeqCst) as usize & 1;
        self.segments[current].take()
    }

    /// Lock-free: up to `n` IDs from the current segment, one `fetch_add`.
    pub fn take_many(&self, n: u64) -> TakeMany {
        let current = self.current.load(SeqCst) as usize & 1;
        self.segments[current].take_many(n)
    }

    pub fn current_index(&self) -> usize {
        self.current.load(SeqCst) as usize & 1
    }

    pub fn view(&self, index: usize) -> SegmentView {
        self.segments[index & 1].view()
    }

    /// Changes with every take that finds IDs left (each adds to a state
    /// word), publish and switch (callers waiting on an exhausted tag ask
    /// for a refill instead): the worker compares it over time to see whether the tag is in
    /// use. Only reads: the hot path stays one `fetch_add`.
    pub fn activity(&self) -> [u64; 3] {
        [
            self.current.load(SeqCst) as u64,
            self.segments[0].state.load(SeqCst),
            self.segments[1].state.load(SeqCst),
        ]
    }

    /// Is the non-current segment loaded with unused IDs?
    pub fn next_ready(&self) -> bool {
        self.segments[1 - self.current_index()].remaining() > 0
    }

    /// Owner's lock held: after a take came back Exhausted or Stale.
    pub fn on_exhausted(&self) -> SlowPath {
        let current = self.current_index();
        if self.segments[current].remaining() > 0 {
            return SlowPath::Retry;
        }
        if self.segments[1 - current].remaining() > 0 {
            self.current.store((1 - current) as u32, SeqCst);
            return SlowPath::Switched;
        }
        SlowPath::Wait
    }

    /// Owner's lock held: which segment a refill should fill, if any. Only an
    /// exhausted, non-current segment is ever refilled, so a published range
    /// is never overwritten while it still has IDs. When both are empty the
    /// current one is filled, so that waiters can go on at once.
    pub fn refill_target(&self) -> Option<usize> {
        let current = self.current_index();
        if self.segments[1 - current].remaining() > 0 {
            return None;
        }
        if self.segments[current].remaining() == 0 {
            return Some(current);
        }
        Some(1 - current)
    }

    /// Does the tag want a prefetch: current at least 10% used, next not ready?
    pub fn wants_prefetch(&self) -> bool {
        let v = self.view(self.current_index());
        let len = v.end - v.start;
        !self.next_ready() && (v.remaining() == 0 || v.next - v.start >= len / 10)
    }

    /// Owner's lock held: put a committed range into the target segment.
    /// Returns false (and changes nothing) if the target is no longer empty.
    pub fn publish(&self, index: usize, start: i64, len: i64) -> bool {
        let seg = &self.segments[index & 1];
        if seg.remaining() > 0 {
            return false;
        }
        seg.publish(start, len);
        true
    }

    /// Owner's lock held: drop both ranges (tag deleted or slot reused).
    /// Unused IDs become a gap; they are never handed out.
    pub fn retire(&self) {
        for seg in &self.segments {
            let start = seg.start.load(SeqCst);
            seg.publish(start, 0);
        }
        self.current.store(0, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::collections::HashSet;
    use std::sync::Arc;

    #[test]
    fn empty_pair_is_exhausted_and_targets_current() {
        let p = SegmentPair::default();
        assert_eq!(p.take(), Take::Exhausted);
        assert_eq!(p.on_exhausted(), SlowPath::Wait);
        assert_eq!(p.refill_target(), Some(0));
    }

    #[test]
    fn takes_in_order_and_flags_threshold_once() {
        let p = SegmentPair::default();
        assert!(p.publish(0, 100, 20));
        let mut crossed = 0;
        for want in 100..120 {
            match p.take() {
                Take::Id {
                    id,
                    crossed_threshold,
                } => {
                    assert_eq!(id, want);
                    crossed += crossed_threshold as i32;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(crossed, 1);
        assert_eq!(p.take(), Take::Exhausted);
        assert_eq!(
            p.view(0),
            SegmentView {
                start: 100,
                next: 120,
                end: 120
            }
        );
    }

    #[test]
    fn switch_to_ready_next_and_refill_only_exhausted() {
        let p = SegmentPair::default();
        assert!(p.publish(0, 1, 2));
        assert_eq!(p.refill_target(), Some(1));
        assert!(p.publish(1, 3, 2));
        assert_eq!(p.refill_target(), None, "both loaded: nothing to fill");
        assert!(
            !p.publish(0, 100, 5),
            "a loaded segment is never overwritten"
        );
        let ids: Vec<_> = (0..2).map(|_| p.take()).collect();
        assert!(matches!(ids[1], Take::Id { id: 2, .. }));
        assert_eq!(p.take(), Take::Exhausted);
        assert_eq!(p.on_exhausted(), SlowPath::Switched);
        assert!(matches!(p.take(), Take::Id { id: 3, .. }));
        assert_eq!(p.refill_target(), Some(0));
    }

    #[test]
    fn prefetch_wanted_after_ten_percent() {
        let p = SegmentPair::default();
        p.publish(0, 0, 100);
        for _ in 0..9 {
            p.take();
        }
        assert!(!p.wants_prefetch());
        p.take();
        assert!(p.wants_prefetch());
        p.publish(1, 100, 100);
        assert!(!p.wants_prefetch());
    }

    #[test]
    fn retire_stops_everything() {
        let p = SegmentPair::default();
        p.publish(0, 0, 100);
        p.publish(1, 100, 100);
        p.retire();
        assert_eq!(p.take(), Take::Exhausted);
        assert_eq!(p.on_exhausted(), SlowPath::Wait);
    }

    #[test]
    fn stale_word_from_old_generation_is_never_an_id() {
        let s = Segment::default();
        s.publish(10, 1);
        assert!(matches!(s.take(), Take::Id { id: 10, .. }));
        // a reader over-increments the exhausted segment, then a refill
        assert_eq!(s.take(), Take::Exhausted);
        s.publish(500, 3);
        // a word taken before the refill but checked after is never an ID
        let (generation, _) = unpack(s.state.load(SeqCst));
        assert_eq!(generation, 2);
        let got: Vec<_> = (0..4).map(|_| s.take()).collect();
        assert_eq!(
            got,
            vec![
                Take::Id {
                    id: 500,
                    crossed_threshold: true
                },
                Take::Id {
                    id: 501,
                    crossed_threshold: false
                },
                Take::Id {
                    id: 502,
                    crossed_threshold: false
                },
                Take::Exhausted
            ]
        );
    }

    /// A long refill outage: readers retrying on an exhausted segment must
    /// not carry its offset into the generation bits, and a word that did
    /// carry must never give an ID, even to a reader that reads the
    /// generation a publish is giving the segment at that instant.
    #[test]
    fn a_carry_into_the_generation_bits_is_never_an_id() {
        let s = Segment::default();
        s.publish(0, 10);
        // the offsets all taken, one step from the generation bits
        let (generation, _) = unpack(s.state.load(SeqCst));
        s.state.store(pack(generation, OFFSET_MASK), SeqCst);
        s.state.fetch_add(2, SeqCst); // the carry
        assert_eq!(unpack(s.state.load(SeqCst)), (generation + 1, 1));
        let mut ids = Vec::new();
        let mut early = None;
        s.publish_interleaved(100, 10, || early = Some(s.begin_take(1)));
        if let TakeMany::Ids { first, .. } = s.finish_take(early.unwrap()) {
            ids.push(first);
        }
        while let Take::Id { id, .. } = s.take() {
            ids.push(id);
        }
        let distinct: HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "an ID twice: {ids:?}");
        assert_eq!(ids.len(), 10);
    }

    /// The gap `tests/tap/007` once caught: a reader loads the generation,
    /// then a refill resets the word, and the reader's `fetch_add` lands on
    /// the new word before the new generation is published (its look at the
    /// word saw the new generation, so `begin_take` added). Its offset is the
    /// new range's first: it must get that ID, or nobody does.
    #[test]
    fn a_take_that_lands_on_the_new_word_during_a_publish_gets_its_id() {
        let s = Segment::default();
        s.publish(0, 1);
        assert!(matches!(s.take(), Take::Id { id: 0, .. }));
        assert_eq!(s.take(), Take::Exhausted);
        let expected = s.meta_gen.load(SeqCst);
        let mut ticket = None;
        s.publish_interleaved(100, 5, || {
            let word = s.state.fetch_add(1, SeqCst);
            ticket = Some(Ticket {
                expected,
                word,
                n: 1,
            });
        });
        let mut ids = Vec::new();
        if let TakeMany::Ids { first, .. } = s.finish_take(ticket.unwrap()) {
            ids.push(first);
        }
        while let Take::Id { id, .. } = s.take() {
            ids.push(id);
        }
        assert_eq!(
            ids,
            vec![100, 101, 102, 103, 104],
            "every ID of the range, once"
        );
    }

    /// A reader whose `fetch_add` landed on a word whose offset carried into
    /// the generation bits holds what reads as the next generation's offset:
    /// the publish must not give the range that generation.
    #[test]
    fn a_take_on_a_carried_word_is_stale_after_the_publish() {
        let s = Segment::default();
        s.publish(0, 10);
        let expected = s.meta_gen.load(SeqCst);
        let (generation, _) = unpack(s.state.load(SeqCst));
        s.state.store(pack(generation, OFFSET_MASK), SeqCst);
        s.state.fetch_add(2, SeqCst); // the carry: reads as (generation + 1, 1)
        let word = s.state.fetch_add(1, SeqCst);
        assert_eq!(unpack(word), (generation + 1, 1));
        s.publish(100, 10);
        let ticket = Ticket {
            expected,
            word,
            n: 1,
        };
        let mut ids = Vec::new();
        if let TakeMany::Ids { first, .. } = s.finish_take(ticket) {
            ids.push(first);
        }
        while let Take::Id { id, .. } = s.take() {
            ids.push(id);
        }
        let distinct: HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "an ID twice: {ids:?}");
    }

    #[test]
    fn takes_on_an_exhausted_segment_do_not_add() {
        let s = Segment::default();
        s.publish(0, 10);
        assert!(matches!(s.take_many(10), TakeMany::Ids { count: 10, .. }));
        let word = s.state.load(SeqCst);
        for _ in 0..100_000 {
            assert_eq!(s.take_many(MAX_TAKE), TakeMany::Exhausted);
        }
        assert_eq!(s.state.load(SeqCst), word, "no offset added after the end");
    }

    #[test]
    fn take_begun_before_a_refill_and_finished_after_is_stale() {
        let s = Segment::default();
        s.publish(10, 2);
        assert!(matches!(s.take(), Take::Id { id: 10, .. }));
        // a reader does its fetch_add on the live range (offset 1, an ID of
        // [10, 12) that nobody else gets) ...
        let ticket = s.begin_take(1);
        // ... stalls while the segment is exhausted and refilled ...
        assert!(matches!(s.take(), Take::Exhausted));
        s.publish(500, 3);
        // ... and must not add its offset to the new range's start
        assert_eq!(s.finish_take(ticket), TakeMany::Stale);
        assert!(matches!(s.take(), Take::Id { id: 500, .. }));
        assert!(matches!(s.take(), Take::Id { id: 501, .. }));
    }

    #[test]
    fn stalled_reader_is_stale_after_the_generation_wraps() {
        let s = Segment::default();
        s.publish(0, 10);
        let ticket = s.begin_take(1);
        let (word_gen, offset) = unpack(ticket.word);
        assert_eq!((word_gen, offset), (1, 0));
        // 2^24 publishes (retires count too): the 24 bits in the word repeat
        for _ in 0..GEN_MASK {
            s.publish(1000, 0);
        }
        s.publish(2_000_000, 10);
        assert_eq!(
            unpack(s.state.load(SeqCst)).0,
            word_gen,
            "the word's bits wrapped"
        );
        // the stalled reader's offset 0 is the new range's first ID, which the
        // next caller gets: the reader must not get it too
        assert_eq!(s.finish_take(ticket), TakeMany::Stale);
        assert!(matches!(s.take(), Take::Id { id: 2_000_000, .. }));
    }

    #[test]
    fn reader_stalled_across_a_switch_can_take_from_the_newer_range() {
        // documents why IDs are not strictly increasing per session
        let p = SegmentPair::default();
        p.publish(0, 0, 1);
        p.publish(1, 1, 1);
        let stalled_on = p.current_index(); // a reader loads `current` ...
        assert!(matches!(p.take(), Take::Id { id: 0, .. }));
        assert_eq!(p.on_exhausted(), SlowPath::Switched);
        assert!(p.publish(stalled_on, 2, 1)); // old segment refilled, newer range
        // ... and takes from the segment it loaded: 2, while current still has 1
        assert!(matches!(
            p.segments[stalled_on].take(),
            Take::Id { id: 2, .. }
        ));
        assert!(matches!(p.take(), Take::Id { id: 1, .. }));
    }

    #[test]
    fn take_many_gets_what_is_left_and_flags_the_threshold_once() {
        let s = Segment::default();
        s.publish(100, 50);
        assert_eq!(
            s.take_many(3),
            TakeMany::Ids {
                first: 100,
                count: 3,
                crossed_threshold: false
            }
        );
        assert_eq!(
            s.take_many(10),
            TakeMany::Ids {
                first: 103,
                count: 10,
                crossed_threshold: true
            },
            "offsets 3..13 cross 5 (10% of 50)"
        );
        assert_eq!(
            s.take_many(1000),
            TakeMany::Ids {
                first: 113,
                count: 37,
                crossed_threshold: false
            },
            "only what is left"
        );
        assert_eq!(s.take_many(1), TakeMany::Exhausted);
        assert_eq!(s.take(), Take::Exhausted);
    }

    /// Many threads take while one refiller switches and refills under a
    /// lock, as the Postgres glue does: every ID is handed out once, and
    /// only IDs of published ranges are handed out.
    #[test]
    fn concurrent_takes_with_refills_never_duplicate() {
        let pair = Arc::new(SegmentPair::default());
        let lock = Arc::new(Mutex::new(0i64)); // next range start
        const STEP: i64 = 7;
        const PER_THREAD: usize = 20_000;
        let refill = |pair: &SegmentPair, next: &mut i64| {
            while let Some(t) = pair.refill_target() {
                assert!(pair.publish(t, *next, STEP));
                *next += STEP;
            }
        };
        refill(&pair, &mut lock.lock());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let pair = pair.clone();
                let lock = lock.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::with_capacity(PER_THREAD + 5);
                    while got.len() < PER_THREAD {
                        // half the threads take several IDs at a time
                        let n = if t % 2 == 0 { 1 } else { 5 };
                        match pair.take_many(n) {
                            TakeMany::Ids { first, count, .. } => got.extend(first..first + count),
                            _ => {
                                let mut next = lock.lock();
                                pair.on_exhausted();
                                refill(&pair, &mut next);
                            }
                        }
                    }
                    got
                })
            })
            .collect();
        let mut all = HashSet::new();
        let mut max_start = 0;
        for t in threads {
            for id in t.join().unwrap() {
                assert!(all.insert(id), "duplicate id {id}");
                max_start = max_start.max(id);
            }
        }
        assert!(max_start < *lock.lock(), "id outside every published range");
        assert!(all.len() >= 4 * PER_THREAD);
    }
}
