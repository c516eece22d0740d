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

/// Copies needed for a renewal to hold.
pub fn majority(copies: usize) -> usize {
    copies / 2 + 1
}

/// Whether a renewal holds: `own` is whether this node's own copy took it,
/// `others` how many of the other copies did, `copies` how many there are.
pub fn renewal_holds(own: bool, others: usize, copies: usize) -> bool {
    own && 1 + others >= majority(copies)
}

#[cfg(test)]
mod tests {
    use super::*;

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
