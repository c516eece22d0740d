//! Which worker id a node takes from the registry (`leaf_worker`).
//! Pure: no pgrx, no SQL, no files.
//!
//! The plan is made from a snapshot of the registry; the claim itself is an
//! `INSERT` (or an `UPDATE` of a released row) that the table's unique keys
//! (worker_id, node_name) make atomic, so two nodes that plan the same id
//! cannot both get it: the loser re-reads and plans again.
//!
//! A row is never deleted by leaf_id: a node that leaves an id releases it by
//! renaming the row to `released:<id>`, which keeps the id's persisted
//! high-water mark. Whoever takes the id over inherits that mark, so it
//! cannot reissue the IDs of the previous owner even if its clock lags.

use super::layout::MAX_WORKER_ID;

/// Node names with this prefix mark released rows.
pub const RELEASED_PREFIX: &str = "released:";

pub fn released_name(worker_id: i64) -> String {
    format!("{RELEASED_PREFIX}{worker_id}")
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegistryRow {
    pub worker_id: i64,
    pub node_name: String,
    /// The owner token of the server lifetime that holds the id; None once
    /// it closed cleanly or released the id.
    pub owner_token: Option<i64>,
    /// Persisted high-water mark (Unix ms): the holder's lease end.
    pub mark: Option<i64>,
}

impl RegistryRow {
    pub fn released(&self) -> bool {
        self.node_name.starts_with(RELEASED_PREFIX)
    }
}

/// How the node gets an id it does not own yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// No row for the id: insert one.
    Insert(i64),
    /// A released row: rename it to this node (its mark stays).
    TakeOver(i64),
}

impl Take {
    pub fn id(self) -> i64 {
        match self {
            Take::Insert(id) | Take::TakeOver(id) => id,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimPlan {
    /// The node already owns this id (same node after a restart).
    Reuse(i64),
    /// The node owns no id: take this one.
    Take(Take),
    /// The node owns `release`, but the setting asks for another id:
    /// release the old row (keeping its mark), then take the new id.
    Move { release: i64, take: Take },
    /// The configured id belongs to another node.
    OwnedByOther { worker_id: i64, owner: String },
    /// Every id 0..=1023 is owned.
    Full,
    /// The id is the generator of another database of this server: two
    /// generators with one id would issue the same IDs.
    UsedByOtherDatabase(i64),
}

/// `configured`: the id from the setting, or None to take one.
/// `used_here`: ids other databases of this server issue with.
/// `avoid`: taken from the registry only when no other id is free: the id an
/// operator just released from under this server
/// (`leaf_snowflake_release_worker_id`) is meant for another node, which
/// would otherwise race this server's re-claim for it.
pub fn plan(
    rows: &[RegistryRow],
    node: &str,
    configured: Option<i64>,
    used_here: &[i64],
    avoid: Option<i64>,
) -> ClaimPlan {
    plan_keeping(rows, node, configured, used_here, avoid, &[])
}

/// `plan`, where a claim from the registry also never takes an id of
/// `kept_for_others`: the ids other databases of this server are configured
/// with (`leaf_id.worker_id` set for them), so that a database that claims
/// first does not take the id another one will start with (that one would
/// then be refused). An id this node already owns is kept.
pub fn plan_keeping(
    rows: &[RegistryRow],
    node: &str,
    configured: Option<i64>,
    used_here: &[i64],
    avoid: Option<i64>,
    kept_for_others: &[i64],
) -> ClaimPlan {
    // the registry's answer, then the ids of this server's other generators
    let in_registry = plan_in_registry(rows, node, configured, used_here, avoid, kept_for_others);
    match in_registry {
        ClaimPlan::Reuse(id) if used_here.contains(&id) => ClaimPlan::UsedByOtherDatabase(id),
        ClaimPlan::Take(t) if used_here.contains(&t.id()) => ClaimPlan::UsedByOtherDatabase(t.id()),
        ClaimPlan::Move { take, .. } if used_here.contains(&take.id()) => {
            ClaimPlan::UsedByOtherDatabase(take.id())
        }
        plan => plan,
    }
}

/// The plan from the registry alone (`plan_keeping`'s arguments).
fn plan_in_registry(
    rows: &[RegistryRow],
    node: &str,
    configured: Option<i64>,
    used_here: &[i64],
    avoid: Option<i64>,
    kept: &[i64],
) -> ClaimPlan {
    let own = rows.iter().find(|r| r.node_name == node);
    let take_of = |id: i64| match rows.iter().find(|r| r.worker_id == id) {
        Some(_) => Take::TakeOver(id),
        None => Take::Insert(id),
    };
    match configured {
        Some(id) => {
            if let Some(r) = rows.iter().find(|r| r.worker_id == id) {
                if r.node_name == node {
                    return ClaimPlan::Reuse(id);
                }
                if !r.released() {
                    return ClaimPlan::OwnedByOther {
                        worker_id: id,
                        owner: r.node_name.clone(),
                    };
                }
            }
            match own {
                Some(r) => ClaimPlan::Move {
                    release: r.worker_id,
                    take: take_of(id),
                },
                None => ClaimPlan::Take(take_of(id)),
            }
        }
        None => {
            let owned: std::collections::HashSet<i64> = rows
                .iter()
                .filter(|r| !r.released())
                .map(|r| r.worker_id)
                .collect();
            let is_free =
                |id: &i64| !owned.contains(id) && !used_here.contains(id) && !kept.contains(id);
            let free = (0..=MAX_WORKER_ID)
                .find(|id| is_free(id) && Some(*id) != avoid)
                .or(avoid.filter(is_free));
            match (own, free) {
                (Some(r), _) if !used_here.contains(&r.worker_id) => ClaimPlan::Reuse(r.worker_id),
                // the registry is a copy of the one of another database of
                // this server (CREATE DATABASE ... TEMPLATE, a restore), whose
                // generator issues with this id: move to a free one, keeping
                // the old row (and its mark) released
                (Some(r), Some(id)) => ClaimPlan::Move {
                    release: r.worker_id,
                    take: take_of(id),
                },
                (None, Some(id)) => ClaimPlan::Take(take_of(id)),
                (_, None) => ClaimPlan::Full,
            }
        }
    }
}

/// What a server does with the row under its own node name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnRow {
    /// Its own token: a re-claim within this server lifetime.
    Mine,
    /// No holder (closed cleanly), or a holder whose lease has run out, so it
    /// issues nothing more (a live holder renews its lease ahead of its
    /// clock): take the row with a compare-and-set on (token, mark). Whoever
    /// held it cannot renew after that, and the new floor is its lease end.
    TakeBack,
    /// Another token with a lease that runs to `until_ms`: this server before
    /// a crash, or another live server with the same node name (a physical
    /// copy, a promoted standby). Look again once the lease has passed: if
    /// it was renewed meanwhile, the holder is alive.
    LeaseLive { until_ms: i64 },
}

pub fn own_row(row: &RegistryRow, my_token: i64, now_ms: i64) -> OwnRow {
    match row.owner_token {
        Some(t) if t == my_token => OwnRow::Mine,
        None => OwnRow::TakeBack,
        Some(_) => match row.mark {
            Some(until_ms) if until_ms >= now_ms => OwnRow::LeaseLive { until_ms },
            _ => OwnRow::TakeBack,
        },
    }
}

/// The persisted mark, moved to the current epoch: a mark `m` persisted
/// under epoch `e_old` bounds IDs whose time part is at most `m - e_old`, so
/// under epoch `e_new` only milliseconds above `m - e_old + e_new` are new.
/// `epoch` is the current (valid, not negative) epoch. A stored epoch the
/// generator cannot have written the mark under (negative, or after the
/// mark: a hand edit) bounds nothing, so no floor follows from it.
pub fn floor_for_epoch(
    mark: i64,
    mark_epoch: Option<i64>,
    epoch: i64,
) -> Result<i64, ImplausibleEpoch> {
    match mark_epoch {
        Some(e_old) if mark > 0 => {
            if !(0..=mark).contains(&e_old) {
                return Err(ImplausibleEpoch {
                    mark,
                    epoch_ms: e_old,
                });
            }
            // mark - e_old is in [0, mark]: no overflow
            Ok((mark - e_old).saturating_add(epoch))
        }
        _ => Ok(mark),
    }
}

/// A row whose `epoch_ms` no generator can have written with its mark.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct ImplausibleEpoch {
    pub mark: i64,
    pub epoch_ms: i64,
}

impl ImplausibleEpoch {
    pub fn describe(&self, worker_id: i64) -> String {
        format!(
            "the leaf_worker row of snowflake worker id {worker_id} has epoch_ms {} and last_timestamp {}: no generator writes a mark before its epoch or a negative epoch, so the row was edited and bounds no IDs; set epoch_ms to the epoch its IDs were issued under",
            self.epoch_ms, self.mark
        )
    }
}

/// The floor of a claim: the generator issues only milliseconds above it.
/// Every claim takes the row's persisted mark (moved into the current epoch)
/// into account, also a re-claim of the same id within one server lifetime.
/// `kept`: the generator's floor and lease in this lifetime, for the same id.
/// A row mark at or below that lease is this server's own (the generator's
/// last issued ID guards it, so the floor stays); a row mark above it was
/// raised by someone else (another owner of a released id, an operator) and
/// may cover IDs issued elsewhere: it becomes the floor.
pub fn claim_floor(row_mark: i64, kept: Option<(i64, i64)>) -> i64 {
    match kept {
        Some((floor, lease)) if row_mark <= lease => floor,
        Some((floor, _)) => row_mark.max(floor),
        None => row_mark,
    }
}

/// What a claim reads once, before its tries: everything `plan_step` needs
/// besides one try's registry rows and clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimSettings {
    pub node: String,
    /// This server lifetime's owner token.
    pub token: i64,
    /// The id from the setting, or None to take one.
    pub configured: Option<i64>,
    /// Ids other databases of this server issue with.
    pub used_here: Vec<i64>,
    /// The id released from under this server (`plan`).
    pub avoid: Option<i64>,
    /// Ids other databases of this server are configured with.
    pub kept_for_others: Vec<i64>,
}

/// One try of a claim: the registry read with a fresh snapshot, and the
/// clock just after.
#[derive(Debug, Clone, Copy)]
pub struct ClaimInput<'a> {
    pub settings: &'a ClaimSettings,
    pub rows: &'a [RegistryRow],
    pub now_ms: i64,
}

/// What one try of a claim does with the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimStep {
    /// This server lifetime holds the row already: write nothing.
    Keep(i64),
    /// This node's row without a holder that can still issue: take it back
    /// (`OwnRow::TakeBack`); a row gone meanwhile means plan again.
    TakeBack(RegistryRow),
    /// This node's row with another token's live lease: watch it until the
    /// lease ends, then take it back; a change means a live holder (refused).
    WatchThenTakeBack { row: RegistryRow, until_ms: i64 },
    /// Take an id this node owns no row of; lost to another node: plan again.
    Take(Take),
    /// Release this node's row `release` (ending a passed lease on every
    /// copy first when `ends` says so), then take `take`.
    Move {
        release: RegistryRow,
        ends: EndsLease,
        take: Take,
        lost: IfLost,
        /// The time the release is made at (the one `own_row` judged by).
        at_ms: i64,
    },
    /// No id for this node: the error to raise.
    Refuse(Refusal),
}

/// Whether a release ends another server's (passed) lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndsLease {
    /// The row is this server lifetime's own.
    Own,
    /// The row's holder can no longer issue (`OwnRow::TakeBack`).
    Passed,
}

/// What a `Move` does when another node takes its id first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfLost {
    /// An id from the registry: read it and plan again.
    PlanAgain,
    /// The configured id: refused (55P03).
    Refuse,
}

/// Why a claim is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The configured id belongs to another node.
    OwnedByOther { worker_id: i64, owner: String },
    /// Another database of this server issues with the id.
    UsedByOtherDatabase(i64),
    /// Every id is owned.
    Full,
    /// This node's row to release has another token's live lease.
    HeldByLiveServer(i64),
}

/// The step of one try: `plan_keeping`, then, for this node's own row,
/// `own_row` at `now_ms`.
pub fn plan_step(input: &ClaimInput) -> ClaimStep {
    let s = input.settings;
    let row_of = |id: i64| {
        input
            .rows
            .iter()
            .find(|r| r.worker_id == id)
            .expect("planned from rows")
            .clone()
    };
    let plan = plan_keeping(
        input.rows,
        &s.node,
        s.configured,
        &s.used_here,
        s.avoid,
        &s.kept_for_others,
    );
    match plan {
        ClaimPlan::Reuse(id) => reuse_step(row_of(id), s.token, input.now_ms),
        ClaimPlan::Take(t) => ClaimStep::Take(t),
        ClaimPlan::Move { release, take } => {
            move_step(row_of(release), take, s.token, input.now_ms, s.configured)
        }
        ClaimPlan::OwnedByOther { worker_id, owner } => {
            ClaimStep::Refuse(Refusal::OwnedByOther { worker_id, owner })
        }
        ClaimPlan::UsedByOtherDatabase(id) => ClaimStep::Refuse(Refusal::UsedByOtherDatabase(id)),
        ClaimPlan::Full => ClaimStep::Refuse(Refusal::Full),
    }
}

fn reuse_step(row: RegistryRow, token: i64, now_ms: i64) -> ClaimStep {
    match own_row(&row, token, now_ms) {
        OwnRow::Mine => ClaimStep::Keep(row.worker_id),
        OwnRow::TakeBack => ClaimStep::TakeBack(row),
        OwnRow::LeaseLive { until_ms } => ClaimStep::WatchThenTakeBack { row, until_ms },
    }
}

/// Keep the old id's row and mark for whoever takes it next: only this
/// server's, or one whose holder can no longer issue (as for a take-back).
fn move_step(
    release: RegistryRow,
    take: Take,
    token: i64,
    now_ms: i64,
    configured: Option<i64>,
) -> ClaimStep {
    let ends = match own_row(&release, token, now_ms) {
        OwnRow::Mine => EndsLease::Own,
        OwnRow::TakeBack => EndsLease::Passed,
        OwnRow::LeaseLive { .. } => {
            return ClaimStep::Refuse(Refusal::HeldByLiveServer(release.worker_id));
        }
    };
    let lost = match configured {
        None => IfLost::PlanAgain,
        Some(_) => IfLost::Refuse,
    };
    ClaimStep::Move {
        release,
        ends,
        take,
        lost,
        at_ms: now_ms,
    }
}

/// Whether a claim wrote `leaf_worker` (through Citus: every copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrote {
    Nothing,
    Registry,
}

impl Wrote {
    pub fn or(self, other: Wrote) -> Wrote {
        match (self, other) {
            (Wrote::Nothing, Wrote::Nothing) => Wrote::Nothing,
            _ => Wrote::Registry,
        }
    }
}

/// Where `leaf_worker` is: a plain table, or a Citus reference table with
/// or without a copy on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistryCopies {
    Plain,
    CitusWithOwnCopy,
    CitusElsewhere,
}

/// The marks a claim reads after its write, beside the row's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkReads {
    /// This node's own copy (read without Citus).
    pub own_copy: bool,
    /// Every other copy (a claim that wrote them all reads them all).
    pub other_copies: bool,
}

pub fn mark_reads(copies: RegistryCopies, wrote: Wrote) -> MarkReads {
    MarkReads {
        own_copy: copies == RegistryCopies::CitusWithOwnCopy,
        other_copies: copies != RegistryCopies::Plain && wrote == Wrote::Registry,
    }
}

/// What a claim took, and the floors its write gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Took {
    pub worker_id: i64,
    pub wrote: Wrote,
    /// The time of a take-back from another token (its lease end): 0 if none.
    pub taken_at: i64,
    /// A taken row's floor from the clock (`taken_row_floor`): 0 if none.
    pub released_at: i64,
}

/// The marks a claim read: the row's (moved to the current epoch), and
/// those `mark_reads` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarksRead {
    pub row: i64,
    pub own_copy: Option<i64>,
    pub other_copies: Option<i64>,
}

/// Where a claim continues from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Continue {
    /// The persisted floor: never below a mark read.
    pub mark: i64,
    /// Whether the generator waits for the clock to pass a taken row's
    /// floor (on Citus, a released or inserted row).
    pub waits: Waits,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waits {
    No,
    ForRelease,
}

/// The mark a claim continues from: every mark read, a takeover's time,
/// and, where every copy was read (Citus, written), a taken row's floor
/// from the clock, which the generator then waits for.
pub fn continue_from(marks: &MarksRead, took: &Took) -> Continue {
    let mut mark = marks.row.max(marks.own_copy.unwrap_or(marks.row));
    let mut waits = Waits::No;
    if let Some(other) = marks.other_copies {
        mark = mark.max(other).max(took.released_at);
        if took.released_at > 0 {
            waits = Waits::ForRelease;
        }
    }
    Continue {
        mark: mark.max(took.taken_at),
        waits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(v: &[(i64, &str)]) -> Vec<RegistryRow> {
        v.iter()
            .map(|&(worker_id, n)| RegistryRow {
                worker_id,
                node_name: n.to_string(),
                ..Default::default()
            })
            .collect()
    }

    /// Every id owned, id i by node "n<i>".
    fn all_owned() -> Vec<RegistryRow> {
        (0..=MAX_WORKER_ID)
            .map(|i| RegistryRow {
                worker_id: i,
                node_name: format!("n{i}"),
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn own_row_is_taken_back_only_when_no_live_holder_can_renew_it() {
        let row = |owner_token, mark| RegistryRow {
            worker_id: 3,
            node_name: "n".into(),
            owner_token,
            mark,
        };
        // this lifetime's own row
        assert_eq!(own_row(&row(Some(7), Some(5_000)), 7, 1_000), OwnRow::Mine);
        // closed cleanly (or a 0.1.0 row): nobody holds it
        assert_eq!(own_row(&row(None, Some(5_000)), 7, 1_000), OwnRow::TakeBack);
        // another lifetime whose lease ran out: it cannot issue any more
        assert_eq!(
            own_row(&row(Some(8), Some(999)), 7, 1_000),
            OwnRow::TakeBack
        );
        assert_eq!(own_row(&row(Some(8), None), 7, 1_000), OwnRow::TakeBack);
        // another lifetime within its lease, to the millisecond: maybe alive
        assert_eq!(
            own_row(&row(Some(8), Some(1_000)), 7, 1_000),
            OwnRow::LeaseLive { until_ms: 1_000 }
        );
        assert_eq!(
            own_row(&row(Some(8), Some(4_000)), 7, 1_000),
            OwnRow::LeaseLive { until_ms: 4_000 }
        );
    }

    #[test]
    fn same_node_gets_its_id_back() {
        assert_eq!(
            plan(&rows(&[(0, "a"), (3, "b")]), "b", None, &[], None),
            ClaimPlan::Reuse(3)
        );
    }

    #[test]
    fn new_node_gets_lowest_free() {
        assert_eq!(
            plan(&rows(&[]), "n", None, &[], None),
            ClaimPlan::Take(Take::Insert(0))
        );
        assert_eq!(
            plan(&rows(&[(0, "a"), (1, "b"), (3, "c")]), "n", None, &[], None),
            ClaimPlan::Take(Take::Insert(2))
        );
        assert_eq!(
            plan(&rows(&[(1, "b")]), "n", None, &[], None),
            ClaimPlan::Take(Take::Insert(0))
        );
    }

    #[test]
    fn released_ids_are_taken_over_with_their_row() {
        let r = rows(&[(0, "a"), (1, "released:1"), (2, "c")]);
        assert_eq!(
            plan(&r, "n", None, &[], None),
            ClaimPlan::Take(Take::TakeOver(1))
        );
        assert_eq!(
            plan(&r, "n", Some(1), &[], None),
            ClaimPlan::Take(Take::TakeOver(1))
        );
    }

    #[test]
    fn an_id_released_from_under_the_node_is_taken_last() {
        let r = rows(&[(0, "a"), (1, "released:1"), (2, "c")]);
        assert_eq!(
            plan(&r, "n", None, &[], Some(1)),
            ClaimPlan::Take(Take::Insert(3))
        );
        // a configured id is the operator's choice
        assert_eq!(
            plan(&r, "n", Some(1), &[], Some(1)),
            ClaimPlan::Take(Take::TakeOver(1))
        );
        // the only free id: taken all the same
        let mut all = all_owned();
        all[7].node_name = released_name(7);
        assert_eq!(
            plan(&all, "new", None, &[], Some(7)),
            ClaimPlan::Take(Take::TakeOver(7))
        );
        // nor is an avoided id that is owned or used here ever taken
        assert_eq!(
            plan(&all_owned(), "new", None, &[], Some(7)),
            ClaimPlan::Full
        );
        assert_eq!(plan(&all, "new", None, &[7], Some(7)), ClaimPlan::Full);
    }

    #[test]
    fn full_registry() {
        let all = all_owned();
        assert_eq!(plan(&all, "new", None, &[], None), ClaimPlan::Full);
        assert_eq!(plan(&all, "n5", None, &[], None), ClaimPlan::Reuse(5));
    }

    #[test]
    fn configured_id_checks_owner() {
        let r = rows(&[(7, "other")]);
        assert_eq!(
            plan(&r, "me", Some(7), &[], None),
            ClaimPlan::OwnedByOther {
                worker_id: 7,
                owner: "other".into()
            }
        );
        assert_eq!(plan(&r, "other", Some(7), &[], None), ClaimPlan::Reuse(7));
        assert_eq!(
            plan(&r, "me", Some(8), &[], None),
            ClaimPlan::Take(Take::Insert(8))
        );
    }

    #[test]
    fn moving_to_another_configured_id_releases_the_old_row() {
        let r = rows(&[(7, "other"), (9, "released:9")]);
        assert_eq!(
            plan(&r, "other", Some(8), &[], None),
            ClaimPlan::Move {
                release: 7,
                take: Take::Insert(8)
            }
        );
        assert_eq!(
            plan(&r, "other", Some(9), &[], None),
            ClaimPlan::Move {
                release: 7,
                take: Take::TakeOver(9)
            }
        );
    }

    #[test]
    fn ids_configured_for_other_databases_are_not_taken() {
        let r = rows(&[(0, "x")]);
        // 1 and 2 are other databases' configured ids: the lowest free is 3
        assert_eq!(
            plan_keeping(&r, "me", None, &[], None, &[1, 2]),
            ClaimPlan::Take(Take::Insert(3))
        );
        // an id this node owns is kept (the other database is refused, as
        // before, when it starts)
        let r = rows(&[(0, "x"), (1, "me")]);
        assert_eq!(
            plan_keeping(&r, "me", None, &[], None, &[1]),
            ClaimPlan::Reuse(1)
        );
        // a configured id is not affected
        assert_eq!(
            plan_keeping(&r, "me", Some(2), &[], None, &[2]),
            ClaimPlan::Move {
                release: 1,
                take: Take::Insert(2)
            }
        );
        // all free ids kept for others: full
        let kept: Vec<i64> = (1..=MAX_WORKER_ID).collect();
        assert_eq!(
            plan_keeping(&rows(&[(0, "x")]), "me", None, &[], None, &kept),
            ClaimPlan::Full
        );
    }

    #[test]
    fn ids_of_other_databases_of_this_server_are_not_taken() {
        let r = rows(&[(0, "a")]);
        assert_eq!(
            plan(&r, "n", None, &[1, 2], None),
            ClaimPlan::Take(Take::Insert(3))
        );
        assert_eq!(
            plan(&r, "n", Some(1), &[1], None),
            ClaimPlan::UsedByOtherDatabase(1)
        );
    }

    #[test]
    fn a_copied_registry_moves_off_the_id_another_database_uses() {
        // "a" owns 0 in this database's copy of the registry, and another
        // database of this server issues with 0
        let r = rows(&[(0, "a"), (1, "b")]);
        assert_eq!(
            plan(&r, "a", None, &[0], None),
            ClaimPlan::Move {
                release: 0,
                take: Take::Insert(2)
            }
        );
        let r = rows(&[(0, "a"), (1, "released:1")]);
        assert_eq!(
            plan(&r, "a", None, &[0], None),
            ClaimPlan::Move {
                release: 0,
                take: Take::TakeOver(1)
            }
        );
        // nothing free but its own id: refused, as a full registry
        assert_eq!(plan(&all_owned(), "n5", None, &[5], None), ClaimPlan::Full);
    }

    #[test]
    fn a_re_claim_takes_the_rows_later_mark() {
        // released with a mark 10 minutes ahead, taken back in one lifetime
        assert_eq!(claim_floor(600_000, Some((1_000, 3_000))), 600_000);
        // the row has our own lease: the generator goes on from its last ID
        assert_eq!(claim_floor(3_000, Some((1_000, 3_000))), 1_000);
        assert_eq!(claim_floor(500, Some((1_000, 3_000))), 1_000);
        // a new lifetime or another id: the row's mark
        assert_eq!(claim_floor(7_000, None), 7_000);
    }

    #[test]
    fn floor_moves_with_the_epoch() {
        assert_eq!(floor_for_epoch(5000, Some(1000), 1000), Ok(5000));
        assert_eq!(
            floor_for_epoch(5000, Some(1000), 1300),
            Ok(5300),
            "later epoch: same IDs come 300 ms later"
        );
        assert_eq!(floor_for_epoch(5000, Some(1000), 800), Ok(4800));
        assert_eq!(floor_for_epoch(5000, None, 800), Ok(5000));
        assert_eq!(
            floor_for_epoch(0, Some(1000), 5000),
            Ok(0),
            "no mark, no floor"
        );
    }

    #[test]
    fn a_hand_edited_epoch_gives_no_floor_and_no_overflow() {
        let epoch = 1_288_834_974_657;
        let mark = 1_800_000_000_000;
        // i64::MIN used to overflow epoch - e_old (a panic, or in release a
        // wrap to a floor far below the mark); i64::MAX and any epoch after
        // the mark lowered the floor below every issued ID
        for e_old in [i64::MIN, -1, mark + 1, i64::MAX] {
            assert_eq!(
                floor_for_epoch(mark, Some(e_old), epoch),
                Err(ImplausibleEpoch {
                    mark,
                    epoch_ms: e_old
                }),
                "epoch_ms {e_old}"
            );
        }
        assert_eq!(floor_for_epoch(mark, Some(0), epoch), Ok(mark + epoch));
        assert_eq!(floor_for_epoch(mark, Some(mark), epoch), Ok(epoch));
        assert_eq!(floor_for_epoch(i64::MAX, Some(0), epoch), Ok(i64::MAX));
    }
}

/// The claim's plan as properties over random registries (a small xorshift:
/// the crate takes no property-testing dependency).
#[cfg(test)]
mod plan_properties {
    use super::*;

    /// Random inputs per property.
    const CASES: usize = 20_000;
    const SEED: u64 = 0x9E37_79B9_7F4A_7C15;
    /// Ids a random registry uses (a few, so that rows, settings and the
    /// ids of other databases collide often).
    const FEW_IDS: u64 = 6;
    /// One registry in this many is full (every id owned).
    const FULL_ONE_IN: u64 = 40;
    const NODE: &str = "a";
    const OTHER_NODES: [&str; 3] = ["b", "c", "d"];
    const MY_TOKEN: i64 = 1;
    const TOKENS: u64 = 3;
    const NOW_MS: i64 = 1_000_000;
    /// Marks and lease ends lie within this many ms of `NOW_MS`.
    const MARK_SPREAD: i64 = 5;
    const ANY_MARK: u64 = 2_000_000;

    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn one_in(&mut self, n: u64) -> bool {
            self.below(n) == 0
        }
        fn maybe<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> Option<T> {
            if self.one_in(2) { None } else { Some(f(self)) }
        }
        fn id(&mut self) -> i64 {
            self.below(FEW_IDS) as i64
        }
        fn ids(&mut self) -> Vec<i64> {
            (0..FEW_IDS as i64)
                .filter(|_| self.one_in(FEW_IDS))
                .collect()
        }
        fn near_now(&mut self) -> i64 {
            NOW_MS - MARK_SPREAD + self.below(2 * MARK_SPREAD as u64 + 1) as i64
        }
    }

    fn random_row(g: &mut XorShift, worker_id: i64, node_name: String) -> RegistryRow {
        RegistryRow {
            worker_id,
            node_name,
            owner_token: g.maybe(|g| 1 + g.below(TOKENS) as i64),
            mark: g.maybe(XorShift::near_now),
        }
    }

    /// A registry as its unique keys allow: one row per id, one per node.
    fn random_rows(g: &mut XorShift) -> Vec<RegistryRow> {
        if g.one_in(FULL_ONE_IN) {
            return (0..=MAX_WORKER_ID)
                .map(|i| random_row(g, i, format!("n{i}")))
                .collect();
        }
        let mut names: Vec<&str> = std::iter::once(NODE).chain(OTHER_NODES).collect();
        let mut rows = Vec::new();
        for id in 0..FEW_IDS as i64 {
            if g.one_in(2) {
                continue;
            }
            let name = if names.is_empty() || g.one_in(3) {
                released_name(id)
            } else {
                names
                    .swap_remove(g.below(names.len() as u64) as usize)
                    .to_string()
            };
            rows.push(random_row(g, id, name));
        }
        rows
    }

    fn random_settings(g: &mut XorShift) -> ClaimSettings {
        ClaimSettings {
            node: NODE.to_string(),
            token: MY_TOKEN,
            configured: g.maybe(XorShift::id),
            used_here: g.ids(),
            avoid: g.maybe(XorShift::id),
            kept_for_others: g.ids(),
        }
    }

    /// The id a step takes (or keeps), if any.
    fn taken(step: &ClaimStep) -> Option<i64> {
        match step {
            ClaimStep::Keep(id) => Some(*id),
            ClaimStep::TakeBack(row) | ClaimStep::WatchThenTakeBack { row, .. } => {
                Some(row.worker_id)
            }
            ClaimStep::Take(t) | ClaimStep::Move { take: t, .. } => Some(t.id()),
            ClaimStep::Refuse(_) => None,
        }
    }

    /// A row whose holder may still issue: another token's lease not passed.
    fn live_other_lease(row: &RegistryRow) -> bool {
        matches!(own_row(row, MY_TOKEN, NOW_MS), OwnRow::LeaseLive { .. })
    }

    /// Checks one input's step; Err says which property broke.
    fn check_step(s: &ClaimSettings, rows: &[RegistryRow], step: &ClaimStep) -> Result<(), String> {
        let row_of = |id: i64| rows.iter().find(|r| r.worker_id == id);
        if let Some(id) = taken(step) {
            if s.used_here.contains(&id) {
                return Err(format!("takes {id}, which another database issues with"));
            }
            if let Some(r) = row_of(id).filter(|r| r.node_name != s.node && !r.released()) {
                return Err(format!("takes {id}, owned by node {:?}", r.node_name));
            }
            if s.configured.is_some_and(|c| c != id) {
                return Err(format!("takes {id}, not the configured id"));
            }
        }
        match step {
            ClaimStep::Keep(id) if row_of(*id).and_then(|r| r.owner_token) != Some(s.token) => {
                Err(format!("keeps {id} without holding it"))
            }
            ClaimStep::TakeBack(row)
                if live_other_lease(row) || row.owner_token == Some(s.token) =>
            {
                Err(format!("takes {row:?} back from a live owner"))
            }
            ClaimStep::WatchThenTakeBack { row, until_ms } if row.mark != Some(*until_ms) => {
                Err(format!("watches {row:?} to {until_ms}, not its lease end"))
            }
            ClaimStep::Move { release, .. } if live_other_lease(release) => {
                Err(format!("releases {release:?} under a live owner"))
            }
            ClaimStep::Move { release, ends, .. }
                if (*ends == EndsLease::Own) != (release.owner_token == Some(s.token)) =>
            {
                Err(format!("releases {release:?} as {ends:?}"))
            }
            ClaimStep::Take(Take::Insert(id)) if row_of(*id).is_some() => {
                Err(format!("inserts {id}, which has a row"))
            }
            ClaimStep::Take(Take::TakeOver(id)) if !row_of(*id).is_some_and(|r| r.released()) => {
                Err(format!("takes over {id}, which has no released row"))
            }
            _ => check_registry_claim(s, rows, step),
        }
    }

    /// A claim from the registry: never an id kept for another database
    /// (unless the node's own), the avoided id only if no other is free,
    /// refused as full only when no id is.
    fn check_registry_claim(
        s: &ClaimSettings,
        rows: &[RegistryRow],
        step: &ClaimStep,
    ) -> Result<(), String> {
        if s.configured.is_some() {
            return Ok(());
        }
        let free = |id: &i64| {
            !rows.iter().any(|r| r.worker_id == *id && !r.released())
                && !s.used_here.contains(id)
                && !s.kept_for_others.contains(id)
        };
        let other_free = (0..=MAX_WORKER_ID).any(|id| free(&id) && Some(id) != s.avoid);
        match step {
            ClaimStep::Take(t) | ClaimStep::Move { take: t, .. } => {
                if !free(&t.id()) {
                    return Err(format!("takes {}, which is not free", t.id()));
                }
                if Some(t.id()) == s.avoid && other_free {
                    return Err(format!("takes the avoided {}, another is free", t.id()));
                }
                Ok(())
            }
            ClaimStep::Refuse(Refusal::Full) if other_free || s.avoid.is_some_and(|a| free(&a)) => {
                Err("refused as full with a free id".to_string())
            }
            _ => Ok(()),
        }
    }

    fn first_broken(plan: impl Fn(&ClaimInput) -> ClaimStep) -> Option<String> {
        let mut g = XorShift(SEED);
        (0..CASES).find_map(|_| {
            let settings = random_settings(&mut g);
            let rows = random_rows(&mut g);
            let input = ClaimInput {
                settings: &settings,
                rows: &rows,
                now_ms: NOW_MS,
            };
            let step = plan(&input);
            check_step(&settings, &rows, &step)
                .err()
                .map(|e| format!("{e}: {settings:?} {rows:?} -> {step:?}"))
        })
    }

    #[test]
    fn a_claim_never_takes_an_id_held_by_another_live_owner() {
        if let Some(broken) = first_broken(plan_step) {
            panic!("{broken}");
        }
    }

    /// The check catches a plan that takes a row back under a live lease
    /// (`OwnRow::LeaseLive` treated as `TakeBack`).
    #[test]
    fn the_check_catches_a_take_back_under_a_live_lease() {
        let broken = |input: &ClaimInput| match plan_step(input) {
            ClaimStep::WatchThenTakeBack { row, .. } => ClaimStep::TakeBack(row),
            step => step,
        };
        assert!(first_broken(broken).is_some());
    }

    fn random_took(g: &mut XorShift) -> Took {
        Took {
            worker_id: g.id(),
            wrote: if g.one_in(2) {
                Wrote::Nothing
            } else {
                Wrote::Registry
            },
            taken_at: g.maybe(|g| g.below(ANY_MARK) as i64).unwrap_or(0),
            released_at: g.maybe(|g| g.below(ANY_MARK) as i64).unwrap_or(0),
        }
    }

    const SHAPES: [RegistryCopies; 3] = [
        RegistryCopies::Plain,
        RegistryCopies::CitusWithOwnCopy,
        RegistryCopies::CitusElsewhere,
    ];

    #[test]
    fn a_claim_never_continues_below_a_mark_it_read() {
        let mut g = XorShift(SEED);
        for _ in 0..CASES {
            let shape = SHAPES[g.below(SHAPES.len() as u64) as usize];
            let took = random_took(&mut g);
            let reads = mark_reads(shape, took.wrote);
            let row = g.below(ANY_MARK) as i64;
            let mut read = |wanted: bool| wanted.then(|| g.below(ANY_MARK) as i64);
            let marks = MarksRead {
                row,
                own_copy: read(reads.own_copy),
                other_copies: read(reads.other_copies),
            };
            let from = continue_from(&marks, &took);
            let read_marks = [Some(marks.row), marks.own_copy, marks.other_copies];
            for m in read_marks.into_iter().flatten() {
                assert!(from.mark >= m, "{from:?} below {m}: {marks:?} {took:?}");
            }
            // a take-back continues above the time it ended the lease
            assert!(from.mark >= took.taken_at, "{from:?} {took:?}");
            // on Citus, a claim that wrote the registry reads every copy,
            // starts above a taken row's floor and waits for it
            let citus_write = shape != RegistryCopies::Plain && took.wrote == Wrote::Registry;
            assert_eq!(reads.other_copies, citus_write, "{shape:?} {took:?}");
            assert_eq!(reads.own_copy, shape == RegistryCopies::CitusWithOwnCopy);
            if citus_write {
                assert!(from.mark >= took.released_at, "{from:?} {took:?}");
            }
            let waits = citus_write && took.released_at > 0;
            assert_eq!(from.waits == Waits::ForRelease, waits, "{from:?} {took:?}");
        }
    }

    /// A try that wrote the registry (a release before a lost take) keeps
    /// counting as written for the claim.
    #[test]
    fn a_write_is_never_forgotten_across_tries() {
        let all = [Wrote::Nothing, Wrote::Registry];
        for a in all {
            for b in all {
                let written = a == Wrote::Registry || b == Wrote::Registry;
                assert_eq!(a.or(b) == Wrote::Registry, written);
            }
        }
    }
}
