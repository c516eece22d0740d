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
