//! Renewing a snowflake lease on a majority of the copies of `leaf_worker`.
//! Pure: no pgrx, no SQL, no files.
//!
//! On Citus, `leaf_worker` is a reference table: a copy on every node, and a
//! write through Citus needs every copy. A renewal that needed every copy
//! would stop every node's snowflake IDs when any one node is down. So a
//! renewal writes each copy on its own (a guarded `GREATEST(mark, new)` on
//! the row of this node name and owner token) and counts: it holds when
//! this node's own copy and a majority of all copies took it.
//!
//! Why that is enough. Everything else that changes the row (a claim, a
//! takeover, a release, a clean close) still goes through Citus and needs
//! every copy, and a takeover requires, on every copy, an owner token it
//! read and a lease that has passed; the new holder issues only above the
//! time of its takeover. A lease this holder got from a majority is on at
//! least one copy besides its own (with two or more copies), and a takeover
//! reads that copy: it cannot pass while the lease runs, so it issues above
//! it. A released row's next owner likewise reads the mark of every copy,
//! not only its own (which may have missed the last leases), and issues
//! above the highest. A renewal after the takeover or the release finds the
//! new token or name on every copy but this node's own, which is no
//! majority. Owner tokens change only through
//! Citus (every copy at once), so a copy never holds an older token than the
//! others.
//!
//! This node's own copy must be among them because it is the one a restart
//! of this node reads its floor from (`owner_file`), while another node is
//! down.
//!
//! Which copies count. Each node lists the copies its own Citus metadata
//! has, and the coordinator may remove, disable or add nodes on one side of
//! a partition: the two sides would then count majorities of different sets.
//! So each claim pins the copies it wrote (their nodes' Citus group ids) in the row,
//! with the holder's own (`Pin`). Renewals count only pinned copies
//! (`pinned_renewal_holds`); a write that ends the holder's lease (a
//! release, a take-back by another server of its node name) must reach every
//! pinned copy but the holder's own (`missing_to_end_lease`), all of which
//! the holder's majority shares one with. The holder moves its pin to the
//! copies its metadata lists now only with a write through Citus that
//! reaches a majority of the old pin besides every new copy (`may_repin`):
//! a release of the old pin meets that write in a copy it also wrote, and
//! whichever is second fails on its guard.

/// Copies needed for a renewal to hold.
pub fn majority(copies: usize) -> usize {
    copies / 2 + 1
}

/// Whether a renewal holds: `own` is whether this node's own copy took it,
/// `others` how many of the other copies did, `copies` how many there are.
pub fn renewal_holds(own: bool, others: usize, copies: usize) -> bool {
    own && 1 + others >= majority(copies)
}

/// Whether a renewal holds by the copies pinned in the row: this node's own
/// copy took it, and with it (if pinned) the pinned copies among `others_took`
/// (group ids of the other copies that took it) are a majority of `pin`.
pub fn pinned_renewal_holds(
    pin: &[i64],
    own: Option<i64>,
    own_took: bool,
    others_took: &[i64],
) -> bool {
    let counted = pin
        .iter()
        .filter(|p| Some(**p) == own || others_took.contains(p))
        .count();
    own_took && !pin.is_empty() && counted >= majority(pin.len())
}

/// The pinned copies that a write ending the holder's lease must reach and
/// `reached` (the copies a write through Citus reaches here: the active
/// ones) lacks. Every pinned copy but the holder's own: any majority of
/// two or more copies has one of them. With one pinned copy, that one.
pub fn missing_to_end_lease(pin: &[i64], holder: Option<i64>, reached: &[i64]) -> Vec<i64> {
    pin.iter()
        .copied()
        .filter(|p| pin.len() < 2 || Some(*p) != holder)
        .filter(|p| !reached.contains(p))
        .collect()
}

/// Whether the holder may move its pin from `pin` to `view` (the active
/// copies its metadata lists now) with one write through Citus, which
/// reaches every copy of `view`: only if the two differ and `view` has a
/// majority of `pin`. A row not pinned yet (None, from catalog 0.2.0)
/// counted every copy listed, so it is pinned only while every listed copy
/// is active (`all_active`).
pub fn may_repin(pin: Option<&[i64]>, view: &[i64], all_active: bool) -> bool {
    if view.is_empty() {
        return false;
    }
    match pin {
        None => all_active,
        Some(pin) => {
            let same = pin.len() == view.len() && pin.iter().all(|p| view.contains(p));
            let kept = pin.iter().filter(|p| view.contains(p)).count();
            !same && kept >= majority(pin.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewals_count_only_the_pinned_copies() {
        // pinned: 1 (own), 2, 3; copies 4 and 5 were added on the holder's side
        let pin = [1, 2, 3];
        assert!(pinned_renewal_holds(&pin, Some(1), true, &[2]));
        assert!(
            !pinned_renewal_holds(&pin, Some(1), true, &[4, 5]),
            "new copies are no majority of the pinned ones"
        );
        assert!(!pinned_renewal_holds(&pin, Some(1), false, &[2, 3]));
        // a holder whose own copy is not pinned needs a majority without it
        assert!(!pinned_renewal_holds(&pin, Some(9), true, &[2]));
        assert!(pinned_renewal_holds(&pin, Some(9), true, &[2, 3]));
        assert!(pinned_renewal_holds(&[1], Some(1), true, &[]));
        assert!(!pinned_renewal_holds(&[], Some(1), true, &[]));
    }

    #[test]
    fn a_lease_ends_only_by_a_write_of_every_pinned_copy_but_the_holders() {
        // the coordinator (copy 1) removed nodes 2 and 3 while 2 held an id
        // and renewed with 3: its writes reach copy 1 only
        assert_eq!(missing_to_end_lease(&[1, 2, 3], Some(2), &[1]), vec![3]);
        assert!(missing_to_end_lease(&[1, 2, 3], Some(2), &[1, 3]).is_empty());
        assert_eq!(missing_to_end_lease(&[7], Some(7), &[]), vec![7]);
        assert_eq!(missing_to_end_lease(&[1, 2], None, &[1]), vec![2]);
        // exhaustive: for every pin of up to 5 copies, every holder and every
        // set reached, a write missing nothing shares a copy with every
        // renewal that holds (so the second of the two fails its guard)
        for n in 1..=5i64 {
            let pin: Vec<i64> = (1..=n).collect();
            for holder in 1..=n {
                for reached_bits in 0..(1u32 << n) {
                    let reached: Vec<i64> = (1..=n)
                        .filter(|c| reached_bits & (1 << (c - 1)) != 0)
                        .collect();
                    if !missing_to_end_lease(&pin, Some(holder), &reached).is_empty() {
                        continue;
                    }
                    for took_bits in 0..(1u32 << n) {
                        let took: Vec<i64> = (1..=n)
                            .filter(|c| *c != holder && took_bits & (1 << (c - 1)) != 0)
                            .collect();
                        if pinned_renewal_holds(&pin, Some(holder), true, &took) {
                            let shared = took.iter().any(|c| reached.contains(c))
                                || (n == 1 && reached.contains(&holder));
                            assert!(
                                shared,
                                "pin {pin:?} holder {holder} reached {reached:?} took {took:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_pin_moves_only_with_a_majority_of_the_old_one() {
        assert!(may_repin(Some(&[1, 2, 3]), &[1, 2], true), "a removed node");
        assert!(
            may_repin(Some(&[1, 2, 3]), &[1, 2, 3, 4], true),
            "an added node"
        );
        assert!(
            !may_repin(Some(&[1, 2, 3]), &[1, 3, 2], true),
            "the same copies"
        );
        assert!(
            !may_repin(Some(&[1, 2, 3]), &[1, 4, 5], true),
            "one old copy of three"
        );
        assert!(!may_repin(Some(&[1, 2, 3]), &[], true));
        assert!(may_repin(None, &[1, 2], true));
        assert!(
            !may_repin(None, &[1, 2], false),
            "unpinned, with a disabled copy"
        );
        // a re-pin and a write that ends the lease of the old pin share a copy
        for n in 1..=5i64 {
            let pin: Vec<i64> = (1..=n).collect();
            for view_bits in 1..(1u32 << (n + 2)) {
                let view: Vec<i64> = (1..=n + 2)
                    .filter(|c| view_bits & (1 << (c - 1)) != 0)
                    .collect();
                if !may_repin(Some(&pin), &view, true) {
                    continue;
                }
                for holder in 1..=n {
                    let ends: Vec<i64> = missing_to_end_lease(&pin, Some(holder), &[]);
                    assert!(
                        ends.iter().any(|c| view.contains(c)),
                        "pin {pin:?} view {view:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn one_node_of_three_may_be_down() {
        assert!(renewal_holds(true, 2, 3));
        assert!(renewal_holds(true, 1, 3), "one other node down");
        assert!(!renewal_holds(true, 0, 3), "both other nodes down");
        assert!(
            !renewal_holds(false, 2, 3),
            "this node's own copy is needed"
        );
    }

    #[test]
    fn majorities_of_any_size_overlap_beyond_the_own_copy() {
        // a renewal's copies (own + others) and a takeover's (every copy
        // but the holder's own, which a copy of the holder may have forked)
        // share a copy that both really wrote
        for copies in 1..=9 {
            let renewal_others = majority(copies) - 1;
            let takeover = copies - 1; // a takeover needs every other copy
            assert!(
                copies == 1 || renewal_others + takeover > copies - 1,
                "{copies}"
            );
            assert!(renewal_holds(true, renewal_others, copies));
            if copies > 1 {
                assert!(!renewal_holds(true, renewal_others - 1, copies), "{copies}");
            }
        }
        assert_eq!(majority(1), 1);
        assert_eq!(majority(2), 2);
        assert_eq!(majority(4), 3);
        assert_eq!(majority(5), 3);
    }
}
