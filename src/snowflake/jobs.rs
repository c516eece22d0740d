//! The snowflake worker's jobs: claim when asked (`lease_claim`), renew the
//! lease every heartbeat (`lease_renew`), close before a re-claim
//! (`lease_close`), and tell waiting callers. Owns the scheduling only.

use crate::errors::code_of;
use crate::runtime::bgworker::WorkerContext;
use crate::runtime::job_error::explain_unreachable;
use crate::runtime::shmem::SnowflakeState;
use crate::runtime::transaction::in_transaction;
use crate::settings;
use crate::snowflake::lease_claim::{claim, configured_worker_id, publish_claim};
use crate::snowflake::lease_close::{OwnerToken, close_and_persist};
use crate::snowflake::lease_renew::{renew, repin};
use pgrx::prelude::*;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// The worker's snowflake jobs.
pub struct SnowflakeJobs {
    last_heartbeat: Option<Instant>,
    /// (worker id setting, node name) of the last claim: a reload that
    /// changes either makes the worker claim again
    claimed_with: Option<(Option<i64>, String)>,
    /// No pin move before this (after one that failed or was not allowed).
    repin_after: Option<Instant>,
    /// The worker id a renewal found no longer ours (released by an
    /// operator, or taken over): the re-claim takes another if one is free.
    lost_id: Option<i64>,
    /// No claim before this: the last one ended in lock contention.
    claim_after: Option<Instant>,
}

/// How long a claim that ended in lock contention waits before the next
/// try (one that hit the worker's lock_timeout waited 5 s already; one
/// canceled for a lock must not be tried again at once).
const CLAIM_RETRY: Duration = Duration::from_millis(100);

/// How long a pin move that failed waits before the next try.
const REPIN_RETRY: Duration = Duration::from_secs(10);

impl Default for SnowflakeJobs {
    fn default() -> Self {
        Self::new()
    }
}

impl SnowflakeJobs {
    pub fn new() -> SnowflakeJobs {
        SnowflakeJobs {
            last_heartbeat: None,
            claimed_with: None,
            repin_after: None,
            lost_id: None,
            claim_after: None,
        }
    }

    /// After a reload: `leaf_id.worker_id` and `leaf_id.node_name` take
    /// effect now, by a re-claim (the generator is closed first).
    pub fn settings_reloaded(&mut self, ctx: &WorkerContext) {
        let slot = ctx.sh.db(ctx.db);
        let now = (configured_worker_id(), settings::node_name());
        if self.claimed_with.as_ref().is_some_and(|c| *c != now)
            && slot.snowflake_state.load(SeqCst) == SnowflakeState::Ready as u32
        {
            pgrx::log!("leaf_id: snowflake worker id or node name changed: claiming again");
            slot.snowflake_state
                .store(SnowflakeState::Requested as u32, SeqCst);
        }
    }

    /// One round: a claim when callers asked for one (and no retry delay
    /// holds it back), else the lease's renewal when it is due or asked for.
    pub fn run(&mut self, ctx: &mut WorkerContext) {
        let slot = ctx.sh.db(ctx.db);
        let state = slot.snowflake_state.load(SeqCst);
        if state == SnowflakeState::Requested as u32
            && self.claim_after.is_none_or(|t| Instant::now() >= t)
        {
            self.claim_now(ctx);
        } else if state == SnowflakeState::Ready as u32 {
            let due = self.last_heartbeat.is_none_or(|t| {
                t.elapsed() >= Duration::from_millis(settings::HEARTBEAT_INTERVAL.get() as u64)
            });
            // clear the request either way: this renewal serves it
            let wanted = slot.snowflake_lease_wanted.swap(false, SeqCst);
            if due || wanted {
                self.renew_now(ctx);
            }
        }
    }

    /// Claim a worker id (the generator closed first: nothing may be issued
    /// while the claim changes it), and tell the waiting callers.
    fn claim_now(&mut self, ctx: &mut WorkerContext) {
        let sh = ctx.sh;
        let slot = sh.db(ctx.db);
        if !slot.generator.is_closed() {
            close_and_persist(ctx.db, OwnerToken::Release);
        }
        slot.generator.close(crate::snowflake::functions::epoch());
        let (db, avoid) = (ctx.db, self.lost_id);
        let result = in_transaction(|schema, catalog| claim(schema, catalog, db, avoid))
            .map_err(|e| explain_unreachable(e, "claim a snowflake worker id", "leaf_worker"))
            .and_then(|c| publish_claim(db, &c).map(|()| c));
        let _g = sh.lock_db(ctx.db);
        match result {
            Ok(claimed) => {
                self.claimed_with = Some((claimed.configured, claimed.node.clone()));
                self.lost_id = None;
                self.claim_after = None;
                slot.snowflake_contention.store(false, SeqCst);
                slot.snowflake_state
                    .store(SnowflakeState::Ready as u32, SeqCst);
                self.last_heartbeat = Some(Instant::now());
            }
            // contention on leaf_id's tables (on Citus: every node claiming
            // at once): claimed again, the callers wait on
            Err(e) if e.is_contention() => {
                ctx.note(&e);
                slot.snowflake_contention.store(true, SeqCst);
                self.claim_after = Some(Instant::now() + CLAIM_RETRY);
                pgrx::log!(
                    "leaf_id: snowflake worker id claim retried after lock contention: {}",
                    e.message
                );
            }
            Err(e) => {
                ctx.note(&e);
                let (code, message) = e.for_callers();
                slot.error.set(code, &message);
                slot.snowflake_state
                    .store(SnowflakeState::Failed as u32, SeqCst);
                pgrx::warning!("leaf_id: snowflake worker id claim failed: {}", e.message);
            }
        }
        drop(_g);
        sh.broadcast(ctx.db);
    }

    /// Renew the lease (persist a new mark), then let the generator issue
    /// up to it; a renewal that finds the row no longer ours asks for a
    /// claim.
    fn renew_now(&mut self, ctx: &mut WorkerContext) {
        let sh = ctx.sh;
        let slot = sh.db(ctx.db);
        self.last_heartbeat = Some(Instant::now());
        let db = ctx.db;
        let renewed = in_transaction(|schema, catalog| renew(schema, catalog, db))
            .map_err(|e| explain_unreachable(e, "renew the snowflake lease", "leaf_worker"));
        match renewed {
            // in_transaction refuses a commit that a synchronous standby has
            // not confirmed
            Ok((mark, repin)) => {
                slot.snowflake_contention.store(false, SeqCst);
                // noted before the generator may issue up to it
                sh.note_worker_id_lease(slot.generator.worker_id(), slot.dboid.load(SeqCst), mark);
                // (tests: the row's new mark is committed, the lease not
                // moved yet; tests/tap/052 reads both)
                settings::pause_point(
                    "slow_lease_move",
                    "after the renewal's commit, before the lease moves",
                    Duration::from_millis(3000),
                );
                slot.generator.lease_ms.store(mark, SeqCst);
                if repin {
                    self.move_pin(db);
                }
            }
            // contention: renewed again at the next heartbeat (or at once
            // when a caller asks); the callers wait on
            Err(e) if e.is_contention() => {
                ctx.note(&e);
                slot.snowflake_contention.store(true, SeqCst);
                pgrx::log!(
                    "leaf_id: snowflake high-water mark renewal retried after lock contention: {}",
                    e.message
                );
            }
            Err(e) => {
                ctx.note(&e);
                let _g = sh.lock_db(ctx.db);
                let (code, message) = e.for_callers();
                slot.error.set(code, &message);
                pgrx::warning!(
                    "leaf_id: snowflake high-water mark renewal failed: {}",
                    e.message
                );
                if e.sqlstate == code_of(PgSqlErrorCode::ERRCODE_OBJECT_IN_USE) {
                    // the row is no longer ours (released, or taken over
                    // after our lease ran out): claim again, another id if
                    // one is free; the generator is closed first
                    self.lost_id = Some(slot.generator.worker_id());
                    slot.snowflake_state
                        .store(SnowflakeState::Requested as u32, SeqCst);
                }
            }
        }
        sh.broadcast(ctx.db);
    }

    /// The Citus nodes with a copy of leaf_worker changed since the claim:
    /// move the row's pin to them (`lease_renew::repin`), in a transaction
    /// of its own. A failure (a node unreachable) is logged and retried,
    /// at most every `REPIN_RETRY`; renewals meanwhile count the old pin.
    fn move_pin(&mut self, db: usize) {
        if self.repin_after.is_some_and(|t| Instant::now() < t) {
            return;
        }
        match in_transaction(|schema, catalog| repin(schema, catalog, db)) {
            Ok(Some((worker_id, groups))) => {
                self.repin_after = None;
                pgrx::log!(
                    "leaf_id: the snowflake lease of worker id {worker_id} now counts the copies of leaf_worker on Citus groups {groups:?}"
                );
            }
            Ok(None) => self.repin_after = Some(Instant::now() + REPIN_RETRY),
            Err(e) => {
                self.repin_after = Some(Instant::now() + REPIN_RETRY);
                pgrx::log!(
                    "leaf_id: could not move the snowflake lease to the copies of leaf_worker listed now (renewals count the copies of the claim): {}",
                    e.message
                );
            }
        }
    }

    /// How long the worker may sleep before the next renewal.
    pub fn timeout(&self, ctx: &WorkerContext) -> Option<Duration> {
        let state = ctx.sh.db(ctx.db).snowflake_state.load(SeqCst);
        if state == SnowflakeState::Requested as u32 {
            // a claim retried after contention: when it is due
            return self.claim_after.map(|t| {
                t.saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1))
            });
        }
        (state == SnowflakeState::Ready as u32).then(|| {
            Duration::from_millis(settings::HEARTBEAT_INTERVAL.get() as u64 / 2)
                .max(Duration::from_millis(5))
        })
    }
}
