//! The snowflake generator and its clock rules, over an injected clock.
//! Pure: no pgrx, no SQL, no files.
//!
//! State is one `AtomicU64`: closed flag | worker id | milliseconds since
//! epoch | sequence, advanced by compare-and-swap: lock-free, shared by all
//! sessions. Everything an ID is made of is in the word the caller swaps, so
//! a caller can never combine a worker id with another id's state (a re-claim
//! that changes the worker id replaces the word).
//!
//! Clock rules (Leaf's, plus a persisted high-water mark):
//! - a millisecond is issued only if it is above `floor_ms` (the mark the
//!   previous run of the server persisted) and at most `lease_ms` (the mark
//!   this run has persisted); so nothing issued before a crash is issued again;
//! - clock behind the last issued millisecond by at most `max_backward_ms`:
//!   wait twice the offset, read again, fail if still behind; further behind: fail;
//! - sequence exhausted within a millisecond: wait for the next one, or,
//!   with `run_ahead_ms` above 0, go on in the next millisecond before the
//!   clock reaches it, at most `run_ahead_ms` ahead of the clock and never
//!   past `lease_ms` (so a crash still leaves every issued millisecond at or
//!   below the persisted mark); a clock behind the last issued millisecond
//!   by at most `run_ahead_ms` goes on from it the same way.
//!
//! Every wait checks for interrupts (`Clock::check_interrupts`) and is
//! bounded: the rollback wait by `max_backward_ms`, the wait for the next
//! millisecond by the clock (a clock that steps back ends it).

use super::layout::{MAX_SEQUENCE, MAX_TIMESTAMP, SEQUENCE_BITS, encode};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::SeqCst};

pub trait Clock {
    /// Unix milliseconds.
    fn now_ms(&self) -> i64;
    /// Sleep; in Postgres an interruptible wait.
    fn sleep_ms(&self, ms: i64);
    /// Called in every wait loop; in Postgres CHECK_FOR_INTERRUPTS (a cancel
    /// or terminate raises from here).
    fn check_interrupts(&self) {}
}

#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub epoch_ms: i64,
    pub max_backward_ms: i64,
    /// Start each millisecond at a random 0..99 (Leaf) or at 0.
    pub random_start: bool,
    /// How far ahead of the clock a take may issue once a millisecond's
    /// sequence has run out (0: wait for the clock, as Leaf does).
    pub run_ahead_ms: i64,
}

/// What a take does, from the clock's millisecond and the last issued ID
/// (`plan_take`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakePlan {
    /// Issue in millisecond `t` (since the epoch) from sequence `seq`, or
    /// from the start of a millisecond (`seq: None`: random or 0).
    Issue { t: i64, seq: Option<i64> },
    /// Wait until the clock moves on, then plan again.
    WaitNextMs,
    /// The clock is behind the last issued millisecond by more than the
    /// generator may run ahead: `offset_ms` beyond that allowance (with no
    /// run-ahead, how far the clock is behind).
    Behind { offset_ms: i64 },
}

/// The last issued ID's millisecond and sequence, as `plan_take` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastIssued {
    pub t: i64,
    pub seq: i64,
}

/// Where the next ID goes. `t` is the clock's millisecond (since the
/// epoch), `last` the last issued ID, if any; sequence numbers above
/// `top_seq` are not used; no millisecond past `lease_t` (the persisted
/// mark, since the epoch) and none more than `run_ahead_ms` ahead of `t` is
/// started. Pure: the generator's rules in one place.
pub fn plan_take(
    t: i64,
    last: Option<LastIssued>,
    top_seq: i64,
    run_ahead_ms: i64,
    lease_t: i64,
) -> TakePlan {
    let Some(last) = last else {
        return TakePlan::Issue { t, seq: None };
    };
    if t > last.t {
        return TakePlan::Issue { t, seq: None };
    }
    let lead = last.t - t;
    let allowed = run_ahead_ms.max(0);
    if lead > allowed {
        // (a clock that steps back while a burst runs ahead is behind only
        // by what passes the allowance: that much is waited out or refused)
        return TakePlan::Behind {
            offset_ms: lead - allowed,
        };
    }
    if last.seq < top_seq {
        return TakePlan::Issue {
            t: last.t,
            seq: Some(last.seq + 1),
        };
    }
    let next = last.t + 1;
    if next - t <= run_ahead_ms && next <= lease_t && next <= MAX_TIMESTAMP {
        TakePlan::Issue { t: next, seq: None }
    } else {
        TakePlan::WaitNextMs
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The clock is behind the last issued millisecond.
    ClockBehind { offset_ms: i64 },
    /// The clock has not yet passed the high-water mark persisted by the
    /// previous run of the server.
    BelowPersistedMark { behind_ms: i64 },
    /// The clock is past the mark this run has persisted; the worker must
    /// renew it before this millisecond can be issued.
    LeaseExpired { ahead_ms: i64 },
    /// The clock is before the epoch or past the 41 bits.
    OutOfRange,
    /// The worker closed the generator (it is exiting and persisting the
    /// exact last millisecond); a new worker reopens it.
    Closed,
}

/// Set in the state word once the generator is closed: a compare-and-swap
/// against the word can then no longer succeed, so nothing is issued after
/// the last millisecond the closing worker read.
const CLOSED: u64 = 1 << 63;
/// The worker id sits above the 53 bits of milliseconds and sequence.
const WORKER_SHIFT: u32 = 53;
/// Milliseconds and sequence of the last issued ID (0 = none yet).
const ISSUED_MASK: u64 = (1 << WORKER_SHIFT) - 1;
const WORKER_MASK: u64 = super::layout::MAX_WORKER_ID as u64;
/// Most IDs one chunk of a batch call takes with one compare-and-swap.
pub const BATCH_CHUNK: i64 = 256;
/// Sequence numbers at the top of every millisecond that batch calls leave
/// to single calls (a quarter: a batch still gets 3,072 IDs a millisecond).
pub const BATCH_LEAVES: i64 = 1024;

/// Shared state of one generator. `#[repr(C)]`: lives in shared memory.
#[repr(C)]
#[derive(Default)]
pub struct Generator {
    /// CLOSED | worker id << 53 | (ms since epoch) << 12 | sequence of the
    /// last issued id
    last: AtomicU64,
    /// Unix ms; ids only above this (persisted mark of the previous run)
    pub floor_ms: AtomicI64,
    /// Unix ms; ids only at or below this (persisted by this run)
    pub lease_ms: AtomicI64,
    pub rollback_events: AtomicU64,
    pub sequence_waits: AtomicU64,
    /// Bumped by every reopen and reset, before the word that lets callers
    /// issue again: a caller whose checks (floor, lease) ran before a close
    /// and whose compare-and-swap lands after a reopen that put back the
    /// very word it read (ABA) sees the change and does not use its ID.
    openings: AtomicU64,
}

impl Generator {
    /// Unix ms of the last issued id, or None.
    pub fn last_issued_ms(&self, epoch_ms: i64) -> Option<i64> {
        issued_ms(self.last.load(SeqCst), epoch_ms)
    }

    /// The worker id the generator issues IDs with.
    pub fn worker_id(&self) -> i64 {
        ((self.last.load(SeqCst) >> WORKER_SHIFT) & WORKER_MASK) as i64
    }

    /// The state word: changes with every ID issued, and with every close,
    /// reopen and reset (the worker watches it to see whether IDs are drawn).
    pub fn state_word(&self) -> u64 {
        self.last.load(SeqCst)
    }

    /// Is the generator closed?
    pub fn is_closed(&self) -> bool {
        self.last.load(SeqCst) & CLOSED != 0
    }

    /// Stop issuing, and return the last issued millisecond (Unix ms): no
    /// ID with a later millisecond exists until `reopen` or `reset`.
    pub fn close(&self, epoch_ms: i64) -> Option<i64> {
        issued_ms(self.last.fetch_or(CLOSED, SeqCst), epoch_ms)
    }

    /// Issue again after `close`, going on from the last issued ID.
    pub fn reopen(&self) {
        self.openings.fetch_add(1, SeqCst);
        self.last.fetch_and(!CLOSED, SeqCst);
    }

    /// Start afresh with a worker id (a new id, or a new lifetime): nothing
    /// issued yet. Set `floor_ms` and `lease_ms` before: the word published
    /// here is what lets callers issue again.
    pub fn reset(&self, worker_id: i64) {
        debug_assert!((0..=super::layout::MAX_WORKER_ID).contains(&worker_id));
        self.openings.fetch_add(1, SeqCst);
        self.last
            .store((worker_id as u64 & WORKER_MASK) << WORKER_SHIFT, SeqCst);
    }

    /// Back to the zeroed state of shared memory: closed, no worker id.
    pub fn clear(&self) {
        self.last.store(CLOSED, SeqCst);
        self.floor_ms.store(0, SeqCst);
        self.lease_ms.store(0, SeqCst);
    }

    pub fn next_id(
        &self,
        cfg: &Config,
        clock: &dyn Clock,
        random: &mut dyn FnMut() -> i64,
    ) -> Result<i64, Refusal> {
        self.next_ids(cfg, clock, random, 1).map(|(first, _)| first)
    }

    /// Up to `want` consecutive IDs of one millisecond with one
    /// compare-and-swap: `(first, count)`, `count >= 1` (fewer when the
    /// millisecond's sequence runs out).
    pub fn next_ids(
        &self,
        cfg: &Config,
        clock: &dyn Clock,
        random: &mut dyn FnMut() -> i64,
        want: i64,
    ) -> Result<(i64, i64), Refusal> {
        self.take_ids(cfg, clock, random, want, MAX_SEQUENCE, &mut || {})
    }

    /// `next_ids` for one chunk of a batch call: at most `BATCH_CHUNK` IDs,
    /// and never the top `BATCH_LEAVES` sequence numbers of a millisecond,
    /// which stay for single calls. A batch of any size thus leaves other
    /// sessions room in every millisecond instead of taking each one whole.
    pub fn next_batch_ids(
        &self,
        cfg: &Config,
        clock: &dyn Clock,
        random: &mut dyn FnMut() -> i64,
        want: i64,
    ) -> Result<(i64, i64), Refusal> {
        self.take_ids(
            cfg,
            clock,
            random,
            want.min(BATCH_CHUNK),
            MAX_SEQUENCE - BATCH_LEAVES,
            &mut || {},
        )
    }

    /// Up to `want` IDs with sequence numbers at most `top_seq`;
    /// `before_cas` runs between the checks and the compare-and-swap (tests
    /// run a close and reopen there).
    fn take_ids(
        &self,
        cfg: &Config,
        clock: &dyn Clock,
        random: &mut dyn FnMut() -> i64,
        want: i64,
        top_seq: i64,
        before_cas: &mut dyn FnMut(),
    ) -> Result<(i64, i64), Refusal> {
        let want = want.clamp(1, top_seq + 1);
        let mut waited_backward = false;
        loop {
            let openings = self.openings.load(SeqCst);
            // Load the state before reading the clock: a clock read that is
            // older than the state (a preempted caller) would look like a
            // rollback; read after it, a smaller clock is a real one.
            let word = self.last.load(SeqCst);
            if word & CLOSED != 0 {
                return Err(Refusal::Closed);
            }
            let now = clock.now_ms();
            let (t, lease) = self.checked_now(now, cfg.epoch_ms)?;
            let worker_id = (word >> WORKER_SHIFT) & WORKER_MASK;
            let last = last_issued_of(word);
            let lease_t = lease.saturating_sub(cfg.epoch_ms);
            let (t, seq) = match plan_take(t, last, top_seq, cfg.run_ahead_ms, lease_t) {
                TakePlan::Issue { t, seq: Some(seq) } => (t, seq),
                TakePlan::Issue { t, seq: None } if cfg.random_start => {
                    (t, random().rem_euclid(100))
                }
                TakePlan::Issue { t, seq: None } => (t, 0),
                TakePlan::WaitNextMs => {
                    self.sequence_waits.fetch_add(1, SeqCst);
                    wait_next_ms(clock, now);
                    continue;
                }
                TakePlan::Behind { offset_ms } => {
                    self.rollback_events.fetch_add(1, SeqCst);
                    if offset_ms <= cfg.max_backward_ms && !waited_backward {
                        waited_backward = true;
                        clock.sleep_ms(offset_ms * 2);
                        continue;
                    }
                    return Err(Refusal::ClockBehind { offset_ms });
                }
            };
            let count = want.min(top_seq - seq + 1);
            let new_word = word_of(worker_id, t, seq + count - 1);
            before_cas();
            if self
                .last
                .compare_exchange(word, new_word, SeqCst, SeqCst)
                .is_ok()
            {
                if self.openings.load(SeqCst) != openings {
                    // closed and reopened since the checks: the floor or
                    // lease may have changed; these IDs are a gap
                    continue;
                }
                return Ok((encode(t, worker_id as i64, seq), count));
            }
            clock.check_interrupts();
        }
    }

    /// The clock's Unix millisecond `now` checked against the marks (above
    /// `floor_ms`, at most `lease_ms`) and the 41 bits: its millisecond
    /// since the epoch, and the lease it was checked against.
    #[inline]
    fn checked_now(&self, now: i64, epoch_ms: i64) -> Result<(i64, i64), Refusal> {
        let floor = self.floor_ms.load(SeqCst);
        if now <= floor {
            return Err(Refusal::BelowPersistedMark {
                behind_ms: floor - now + 1,
            });
        }
        let lease = self.lease_ms.load(SeqCst);
        if now > lease {
            return Err(Refusal::LeaseExpired {
                ahead_ms: now - lease,
            });
        }
        let t = now - epoch_ms;
        // not the epoch millisecond itself: its first ID (time 0,
        // sequence 0) is the word of a generator that issued nothing
        if !(1..=MAX_TIMESTAMP).contains(&t) {
            return Err(Refusal::OutOfRange);
        }
        Ok((t, lease))
    }
}

/// The last issued ID's millisecond and sequence in a state word (None:
/// nothing issued yet).
#[inline]
fn last_issued_of(word: u64) -> Option<LastIssued> {
    let issued = word & ISSUED_MASK;
    (issued != 0).then_some(LastIssued {
        t: (issued >> SEQUENCE_BITS) as i64,
        seq: (issued & MAX_SEQUENCE as u64) as i64,
    })
}

/// The state word of a generator open with `worker_id` whose last issued
/// ID is sequence `last_seq` of millisecond `t` (since the epoch).
#[inline]
fn word_of(worker_id: u64, t: i64, last_seq: i64) -> u64 {
    (worker_id << WORKER_SHIFT) | ((t as u64) << SEQUENCE_BITS) | last_seq as u64
}

fn issued_ms(word: u64, epoch_ms: i64) -> Option<i64> {
    let issued = word & ISSUED_MASK;
    (issued != 0).then(|| (issued >> SEQUENCE_BITS) as i64 + epoch_ms)
}

/// Wait until the clock passes `now`. Ends early if the clock steps back
/// (the caller's rollback rules decide then), so it never waits out a step.
fn wait_next_ms(clock: &dyn Clock, now: i64) {
    // sub-millisecond: spin on the clock, as Leaf's tilNextMillis
    let mut spins: u32 = 0;
    loop {
        let t = clock.now_ms();
        if t != now {
            return;
        }
        spins += 1;
        if spins.is_multiple_of(1024) {
            clock.check_interrupts();
        }
        if spins > 100_000 {
            clock.sleep_ms(1);
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snowflake::layout::{LEAF_EPOCH_MS, decode};
    use std::cell::Cell;

    struct FakeClock {
        now: Cell<i64>,
        /// ms added per read, to let spin loops progress
        tick_every: Cell<u32>,
        reads: Cell<u32>,
        slept: Cell<i64>,
    }
    impl FakeClock {
        fn at(ms: i64) -> Self {
            FakeClock {
                now: Cell::new(ms),
                tick_every: Cell::new(0),
                reads: Cell::new(0),
                slept: Cell::new(0),
            }
        }
    }
    impl Clock for FakeClock {
        fn now_ms(&self) -> i64 {
            self.reads.set(self.reads.get() + 1);
            if self.tick_every.get() > 0 && self.reads.get().is_multiple_of(self.tick_every.get()) {
                self.now.set(self.now.get() + 1);
            }
            self.now.get()
        }
        fn sleep_ms(&self, ms: i64) {
            self.slept.set(self.slept.get() + ms);
            self.now.set(self.now.get() + ms);
        }
    }

    const T0: i64 = LEAF_EPOCH_MS + 1_000_000;

    fn cfg() -> Config {
        Config {
            epoch_ms: LEAF_EPOCH_MS,
            max_backward_ms: 5,
            random_start: false,
            run_ahead_ms: 0,
        }
    }
    fn generator() -> Generator {
        let g = Generator::default();
        g.lease_ms.store(i64::MAX, SeqCst);
        g.reset(7);
        g
    }
    fn zero() -> i64 {
        0
    }

    #[test]
    fn ids_carry_time_worker_and_sequence() {
        let g = generator();
        let clock = FakeClock::at(T0);
        let a = g.next_id(&cfg(), &clock, &mut zero).unwrap();
        let b = g.next_id(&cfg(), &clock, &mut zero).unwrap();
        let d = decode(b, LEAF_EPOCH_MS).unwrap();
        assert_eq!((d.unix_ms, d.worker_id, d.sequence), (T0, 7, 1));
        assert_eq!(b, a + 1);
    }

    #[test]
    fn the_epoch_millisecond_itself_is_refused() {
        // its first ID (time 0, sequence 0) would be the word of a generator
        // that has issued nothing, and the next call would issue it again
        let g = generator();
        let clock = FakeClock::at(LEAF_EPOCH_MS);
        let first = g.next_id(&cfg(), &clock, &mut zero);
        let second = g.next_id(&cfg(), &clock, &mut zero);
        assert!(
            first.is_err() || first != second,
            "the same ID twice at the epoch millisecond: {first:?}, {second:?}"
        );
        assert_eq!(first, Err(Refusal::OutOfRange));
        clock.now.set(LEAF_EPOCH_MS + 1);
        let a = g.next_id(&cfg(), &clock, &mut zero).unwrap();
        let b = g.next_id(&cfg(), &clock, &mut zero).unwrap();
        assert_eq!(b, a + 1, "from the next millisecond on, IDs as always");
    }

    #[test]
    fn random_start_is_below_100() {
        let g = generator();
        let clock = FakeClock::at(T0);
        let mut r = || 12_345_i64;
        let c = Config {
            random_start: true,
            ..cfg()
        };
        let d = decode(g.next_id(&c, &clock, &mut r).unwrap(), LEAF_EPOCH_MS).unwrap();
        assert_eq!(d.sequence, 45);
        clock.now.set(T0 + 1);
        let mut r = || -3_i64;
        let d = decode(g.next_id(&c, &clock, &mut r).unwrap(), LEAF_EPOCH_MS).unwrap();
        assert_eq!(d.sequence, 97);
    }

    #[test]
    fn sequence_exhaustion_waits_for_next_ms_never_wraps() {
        let g = generator();
        let clock = FakeClock::at(T0);
        let mut last = 0;
        for _ in 0..=MAX_SEQUENCE {
            let id = g.next_id(&cfg(), &clock, &mut zero).unwrap();
            assert!(id > last);
            last = id;
        }
        clock.tick_every.set(10);
        let id = g.next_id(&cfg(), &clock, &mut zero).unwrap();
        let d = decode(id, LEAF_EPOCH_MS).unwrap();
        assert_eq!((d.unix_ms, d.sequence), (T0 + 1, 0));
        assert!(id > last);
        assert_eq!(g.sequence_waits.load(SeqCst), 1);
    }

    #[test]
    fn the_plan_without_run_ahead_is_leafs() {
        let last = Some(LastIssued { t: 10, seq: 5 });
        let full = Some(LastIssued { t: 10, seq: 4095 });
        assert_eq!(
            plan_take(10, None, 4095, 0, 99),
            TakePlan::Issue { t: 10, seq: None }
        );
        assert_eq!(
            plan_take(11, last, 4095, 0, 99),
            TakePlan::Issue { t: 11, seq: None }
        );
        assert_eq!(
            plan_take(10, last, 4095, 0, 99),
            TakePlan::Issue {
                t: 10,
                seq: Some(6)
            }
        );
        assert_eq!(plan_take(10, full, 4095, 0, 99), TakePlan::WaitNextMs);
        assert_eq!(
            plan_take(8, last, 4095, 0, 99),
            TakePlan::Behind { offset_ms: 2 }
        );
    }

    #[test]
    fn the_plan_runs_ahead_within_the_setting_and_the_lease() {
        let full = Some(LastIssued { t: 10, seq: 4095 });
        // the next millisecond before the clock, when allowed
        assert_eq!(
            plan_take(10, full, 4095, 1, 99),
            TakePlan::Issue { t: 11, seq: None }
        );
        // already one ahead: a second one needs 2 ms of run-ahead
        let ahead = Some(LastIssued { t: 11, seq: 4095 });
        assert_eq!(plan_take(10, ahead, 4095, 1, 99), TakePlan::WaitNextMs);
        assert_eq!(
            plan_take(10, ahead, 4095, 2, 99),
            TakePlan::Issue { t: 12, seq: None }
        );
        // an ahead millisecond with sequence left goes on in it
        let partly = Some(LastIssued { t: 12, seq: 7 });
        assert_eq!(
            plan_take(10, partly, 4095, 2, 99),
            TakePlan::Issue {
                t: 12,
                seq: Some(8)
            }
        );
        // never past the persisted mark
        assert_eq!(plan_take(10, full, 4095, 5, 10), TakePlan::WaitNextMs);
        // a clock further behind than the run-ahead is a rollback, by what
        // passes the run-ahead
        assert_eq!(
            plan_take(9, ahead, 4095, 1, 99),
            TakePlan::Behind { offset_ms: 1 }
        );
        // never past the layout's last millisecond
        let last_ms = Some(LastIssued {
            t: MAX_TIMESTAMP,
            seq: 4095,
        });
        assert_eq!(
            plan_take(MAX_TIMESTAMP, last_ms, 4095, 5, i64::MAX),
            TakePlan::WaitNextMs
        );
    }

    #[test]
    fn a_clock_stepped_back_during_a_run_ahead_waits_out_only_the_excess() {
        // a burst 3 ms ahead of a frozen clock, then the clock 2 ms back:
        // 5 ms behind the last ID, 2 beyond the run-ahead of 3, within
        // max_backward_ms (5): waited out (twice 2 ms), not refused
        let (g, clock, c) = (generator(), FakeClock::at(T0), run_ahead(3));
        let last = burst(&g, &clock, &c, 4);
        clock.now.set(T0 - 2);
        let id = g.next_id(&c, &clock, &mut zero).unwrap();
        assert!(id > last);
        assert_eq!(clock.slept.get(), 4, "twice the 2 ms beyond the run-ahead");
        assert_eq!(g.rollback_events.load(SeqCst), 1);
    }

    fn run_ahead(ms: i64) -> Config {
        Config {
            run_ahead_ms: ms,
            ..cfg()
        }
    }

    /// `ms` milliseconds' worth of IDs, each above the one before: the
    /// last one.
    fn burst(g: &Generator, clock: &FakeClock, c: &Config, ms: i64) -> i64 {
        let mut last = 0;
        for _ in 0..ms * (MAX_SEQUENCE + 1) {
            let id = g.next_id(c, clock, &mut zero).unwrap();
            assert!(id > last);
            last = id;
        }
        last
    }

    #[test]
    fn a_frozen_clock_gets_the_run_ahead_without_waiting_then_waits() {
        let (g, clock, c) = (generator(), FakeClock::at(T0), run_ahead(3));
        let last = burst(&g, &clock, &c, 4);
        assert_eq!(clock.now.get(), T0, "the clock never moved");
        assert_eq!(g.sequence_waits.load(SeqCst), 0);
        assert_eq!(decode(last, LEAF_EPOCH_MS).unwrap().unix_ms, T0 + 3);
        clock.tick_every.set(10);
        let id = g.next_id(&c, &clock, &mut zero).unwrap();
        assert!(id > last);
        assert_eq!(
            g.sequence_waits.load(SeqCst),
            1,
            "3 ms ahead: the next one waited"
        );
    }

    /// A small xorshift for the properties below (no crate).
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> i64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n) as i64
        }
    }

    #[test]
    fn running_ahead_never_passes_the_mark_the_setting_or_an_issued_id() {
        // random clocks (forward, stalled, stepped back a little), batch
        // sizes, run-ahead settings and marks: every ID is above the one
        // before, at or below the persisted mark, and at most the run-ahead
        // ahead of the clock that issued it
        for seed in 1..=200_u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let g = generator();
            let lease = T0 + 5 + rng.below(30);
            g.lease_ms.store(lease, SeqCst);
            let c = Config {
                run_ahead_ms: rng.below(6),
                max_backward_ms: 2,
                random_start: seed % 2 == 0,
                ..cfg()
            };
            let clock = FakeClock::at(T0);
            clock.tick_every.set(64);
            let mut random = || 37;
            let mut last = 0;
            for _ in 0..400 {
                match rng.below(10) {
                    0..=3 => clock.now.set(clock.now.get() + rng.below(3)),
                    4 => clock.now.set(clock.now.get() - rng.below(4)),
                    _ => {}
                }
                let want = 1 + rng.below(3000);
                match g.next_ids(&c, &clock, &mut random, want) {
                    Ok((first, count)) => {
                        assert!(first > last, "seed {seed}: {first} after {last}");
                        let ms = decode(first, LEAF_EPOCH_MS).unwrap().unix_ms;
                        assert!(ms <= lease, "seed {seed}: ms {ms} past the mark {lease}");
                        assert!(
                            ms - clock.now.get() <= c.run_ahead_ms,
                            "seed {seed}: ms {ms} more than {} ahead of {}",
                            c.run_ahead_ms,
                            clock.now.get()
                        );
                        last = first + count - 1;
                    }
                    Err(Refusal::ClockBehind { .. }) => {}
                    Err(Refusal::LeaseExpired { .. }) => break,
                    Err(e) => panic!("seed {seed}: {e:?}"),
                }
            }
        }
    }

    #[test]
    fn small_rollback_waits_twice_the_offset_then_succeeds() {
        let g = generator();
        let clock = FakeClock::at(T0);
        let before = g.next_id(&cfg(), &clock, &mut zero).unwrap();
        clock.now.set(T0 - 3);
        let after = g.next_id(&cfg(), &clock, &mut zero).unwrap();
        assert_eq!(clock.slept.get(), 6);
        assert!(after > before);
        assert_eq!(g.rollback_events.load(SeqCst), 1);
    }

    #[test]
    fn small_rollback_still_behind_after_wait_fails() {
        struct Stuck(Cell<i64>);
        impl Clock for Stuck {
            fn now_ms(&self) -> i64 {
                self.0.get()
            }
            fn sleep_ms(&self, _: i64) {}
        }
        let g = generator();
        let clock = Stuck(Cell::new(T0));
        g.next_id(&cfg(), &clock, &mut zero).unwrap();
        clock.0.set(T0 - 4);
        assert_eq!(
            g.next_id(&cfg(), &clock, &mut zero),
            Err(Refusal::ClockBehind { offset_ms: 4 })
        );
    }

    #[test]
    fn large_rollback_fails_without_waiting() {
        let g = generator();
        let clock = FakeClock::at(T0);
        g.next_id(&cfg(), &clock, &mut zero).unwrap();
        clock.now.set(T0 - 1000);
        assert_eq!(
            g.next_id(&cfg(), &clock, &mut zero),
            Err(Refusal::ClockBehind { offset_ms: 1000 })
        );
        assert_eq!(clock.slept.get(), 0);
    }

    #[test]
    fn persisted_marks_bound_the_issued_milliseconds() {
        let g = generator();
        g.floor_ms.store(T0 + 10, SeqCst);
        g.lease_ms.store(T0 + 20, SeqCst);
        let clock = FakeClock::at(T0);
        assert_eq!(
            g.next_id(&cfg(), &clock, &mut zero),
            Err(Refusal::BelowPersistedMark { behind_ms: 11 })
        );
        clock.now.set(T0 + 10);
        assert!(
            g.next_id(&cfg(), &clock, &mut zero).is_err(),
            "the mark itself may have been issued"
        );
        clock.now.set(T0 + 11);
        assert!(g.next_id(&cfg(), &clock, &mut zero).is_ok());
        clock.now.set(T0 + 20);
        assert!(g.next_id(&cfg(), &clock, &mut zero).is_ok());
        clock.now.set(T0 + 21);
        assert_eq!(
            g.next_id(&cfg(), &clock, &mut zero),
            Err(Refusal::LeaseExpired { ahead_ms: 1 })
        );
    }

    #[test]
    fn closed_generator_issues_nothing_until_reopened() {
        let g = generator();
        let clock = FakeClock::at(T0);
        let before = g.next_id(&cfg(), &clock, &mut zero).unwrap();
        assert_eq!(g.close(LEAF_EPOCH_MS), Some(T0));
        clock.now.set(T0 + 5);
        assert_eq!(g.next_id(&cfg(), &clock, &mut zero), Err(Refusal::Closed));
        assert_eq!(
            g.last_issued_ms(LEAF_EPOCH_MS),
            Some(T0),
            "closing issues nothing"
        );
        g.reopen();
        assert!(g.next_id(&cfg(), &clock, &mut zero).unwrap() > before);
        assert_eq!(Generator::default().close(LEAF_EPOCH_MS), None);
    }

    #[test]
    fn the_worker_id_comes_from_the_swapped_word() {
        let g = generator();
        let clock = FakeClock::at(T0);
        let a = g.next_id(&cfg(), &clock, &mut zero).unwrap();
        assert_eq!(decode(a, LEAF_EPOCH_MS).unwrap().worker_id, 7);
        // a re-claim closes, then publishes a word with the new id: a caller
        // that swaps against the old word fails and retries with the new one
        g.close(LEAF_EPOCH_MS);
        assert_eq!(g.next_id(&cfg(), &clock, &mut zero), Err(Refusal::Closed));
        g.reset(9);
        assert_eq!(g.worker_id(), 9);
        let b = g.next_id(&cfg(), &clock, &mut zero).unwrap();
        let d = decode(b, LEAF_EPOCH_MS).unwrap();
        assert_eq!(
            (d.worker_id, d.sequence),
            (9, 0),
            "fresh state for the new id"
        );
        let cleared = Generator::default();
        cleared.clear();
        assert_eq!(
            cleared.next_id(&cfg(), &clock, &mut zero),
            Err(Refusal::Closed)
        );
    }

    /// A clock that steps back while a caller waits for the next
    /// millisecond: the wait ends at once (no waiting out the step), the
    /// rollback rule refuses, and interrupts were checked while spinning.
    #[test]
    fn wait_for_next_ms_ends_when_the_clock_steps_back() {
        struct StepBack {
            now: Cell<i64>,
            reads: Cell<u32>,
            interrupt_checks: Cell<u32>,
        }
        impl Clock for StepBack {
            fn now_ms(&self) -> i64 {
                self.reads.set(self.reads.get() + 1);
                if self.reads.get() == 50_000 {
                    self.now.set(self.now.get() - 10_000); // 10 s back
                }
                self.now.get()
            }
            fn sleep_ms(&self, _: i64) {}
            fn check_interrupts(&self) {
                self.interrupt_checks.set(self.interrupt_checks.get() + 1);
            }
        }
        let g = generator();
        let clock = StepBack {
            now: Cell::new(T0),
            reads: Cell::new(0),
            interrupt_checks: Cell::new(0),
        };
        for _ in 0..=MAX_SEQUENCE {
            g.next_id(&cfg(), &clock, &mut zero).unwrap();
        }
        let started = std::time::Instant::now();
        assert_eq!(
            g.next_id(&cfg(), &clock, &mut zero),
            Err(Refusal::ClockBehind { offset_ms: 10_000 })
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert!(
            clock.interrupt_checks.get() > 0,
            "the spin checked for interrupts"
        );
    }

    #[test]
    fn next_ids_takes_a_run_of_one_millisecond() {
        let g = generator();
        let clock = FakeClock::at(T0);
        let (first, count) = g.next_ids(&cfg(), &clock, &mut zero, 10).unwrap();
        assert_eq!(count, 10);
        let d = decode(first, LEAF_EPOCH_MS).unwrap();
        assert_eq!((d.unix_ms, d.sequence), (T0, 0));
        assert_eq!(g.next_id(&cfg(), &clock, &mut zero).unwrap(), first + 10);
        // only what is left of the millisecond's sequence
        let (first, count) = g.next_ids(&cfg(), &clock, &mut zero, 10_000).unwrap();
        assert_eq!(count, MAX_SEQUENCE + 1 - 11);
        assert_eq!(decode(first, LEAF_EPOCH_MS).unwrap().sequence, 11);
        clock.tick_every.set(10);
        let next = g.next_id(&cfg(), &clock, &mut zero).unwrap();
        assert!(next > first + count - 1);
    }

    #[test]
    fn a_batch_leaves_the_top_of_every_millisecond_to_single_calls() {
        let g = generator();
        let clock = FakeClock::at(T0);
        let mut batch = 0;
        loop {
            let (first, count) = g
                .next_batch_ids(&cfg(), &clock, &mut zero, 1 << 30)
                .unwrap();
            assert!(count <= BATCH_CHUNK, "a chunk of {count}");
            batch += count;
            let last = decode(first + count - 1, LEAF_EPOCH_MS).unwrap();
            assert!(last.sequence <= MAX_SEQUENCE - BATCH_LEAVES);
            if last.sequence == MAX_SEQUENCE - BATCH_LEAVES {
                break;
            }
        }
        assert_eq!(batch, MAX_SEQUENCE + 1 - BATCH_LEAVES);
        // single calls still get IDs of this millisecond, all that is left
        for i in 0..BATCH_LEAVES {
            let d = decode(g.next_id(&cfg(), &clock, &mut zero).unwrap(), LEAF_EPOCH_MS).unwrap();
            assert_eq!(
                (d.unix_ms, d.sequence),
                (T0, MAX_SEQUENCE - BATCH_LEAVES + 1 + i)
            );
        }
        // the batch's next chunk waits for the next millisecond
        clock.tick_every.set(10);
        let (first, _) = g
            .next_batch_ids(&cfg(), &clock, &mut zero, 1 << 30)
            .unwrap();
        assert!(decode(first, LEAF_EPOCH_MS).unwrap().unix_ms > T0);
    }

    /// A caller checks floor and lease, stalls; the generator is closed, a
    /// re-claim raises the floor (another server issued with the id up to
    /// it) and reopens, which puts back the word the caller read: its
    /// compare-and-swap succeeds, but its ID must not be used.
    #[test]
    fn a_caller_stalled_across_a_close_and_reopen_does_not_issue_below_the_new_floor() {
        let g = generator();
        g.floor_ms.store(T0 - 100, SeqCst);
        let clock = FakeClock::at(T0);
        let mut stalled = true;
        let got = g.take_ids(&cfg(), &clock, &mut zero, 1, MAX_SEQUENCE, &mut || {
            if std::mem::take(&mut stalled) {
                g.close(LEAF_EPOCH_MS);
                g.floor_ms.store(T0, SeqCst);
                g.reopen();
            }
        });
        match got {
            Ok((id, _)) => {
                let ms = decode(id, LEAF_EPOCH_MS).unwrap().unix_ms;
                assert!(ms > T0, "issued at {ms}, not above the floor {T0}");
            }
            Err(r) => assert_eq!(r, Refusal::BelowPersistedMark { behind_ms: 1 }),
        }
    }

    #[test]
    fn before_epoch_is_refused() {
        let g = generator();
        let clock = FakeClock::at(LEAF_EPOCH_MS - 1);
        assert_eq!(
            g.next_id(&cfg(), &clock, &mut zero),
            Err(Refusal::OutOfRange)
        );
    }

    #[test]
    fn threads_get_unique_increasing_ids() {
        struct Real;
        impl Clock for Real {
            fn now_ms(&self) -> i64 {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64
            }
            fn sleep_ms(&self, ms: i64) {
                std::thread::sleep(std::time::Duration::from_millis(ms as u64));
            }
        }
        let g = std::sync::Arc::new(generator());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || {
                    let mut v = Vec::new();
                    for _ in 0..50_000 {
                        v.push(g.next_id(&cfg(), &Real, &mut zero).unwrap());
                    }
                    assert!(v.windows(2).all(|w| w[0] < w[1]), "per-thread order");
                    v
                })
            })
            .collect();
        let mut all: Vec<i64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
    }
}
