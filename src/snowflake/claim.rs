//! Which worker id a node takes from the registry (`leaf_worker`).
//!
//! The plan is made from a snapshot of the registry; the claim itself is an
//! `INSERT` that the table's unique keys (worker_id, node_name) make atomic,
//! so two nodes that plan the same free id cannot both get it: the loser
//! re-reads and plans again.

use super::layout::MAX_WORKER_ID;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryRow {
    pub worker_id: i64,
    pub node_name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimPlan {
    /// The node already owns this id (same node after a restart).
    Reuse(i64),
    /// Insert a row for this id.
    Insert(i64),
    /// The configured id belongs to another node.
    OwnedByOther { worker_id: i64, owner: String },
    /// The node's row holds another id than the configured one.
    NodeHasOtherId { configured: i64, registered: i64 },
    /// Every id 0..=1023 is taken.
    Full,
}

/// `configured`: the id from the setting, or None to take one.
pub fn plan(rows: &[RegistryRow], node: &str, configured: Option<i64>) -> ClaimPlan {
    let own = rows.iter().find(|r| r.node_name == node);
    match configured {
        Some(id) => {
            if let Some(r) = rows.iter().find(|r| r.worker_id == id) {
                if r.node_name == node {
                    ClaimPlan::Reuse(id)
                } else {
                    ClaimPlan::OwnedByOther { worker_id: id, owner: r.node_name.clone() }
                }
            } else if let Some(r) = own {
                ClaimPlan::NodeHasOtherId { configured: id, registered: r.worker_id }
            } else {
                ClaimPlan::Insert(id)
            }
        }
        None => {
            if let Some(r) = own {
                return ClaimPlan::Reuse(r.worker_id);
            }
            let mut used: Vec<i64> = rows.iter().map(|r| r.worker_id).collect();
            used.sort_unstable();
            let mut candidate = 0;
            for id in used {
                if id == candidate {
                    candidate += 1;
                } else if id > candidate {
                    break;
                }
            }
            if candidate > MAX_WORKER_ID { ClaimPlan::Full } else { ClaimPlan::Insert(candidate) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(v: &[(i64, &str)]) -> Vec<RegistryRow> {
        v.iter().map(|&(worker_id, n)| RegistryRow { worker_id, node_name: n.to_string() }).collect()
    }

    #[test]
    fn same_node_gets_its_id_back() {
        assert_eq!(plan(&rows(&[(0, "a"), (3, "b")]), "b", None), ClaimPlan::Reuse(3));
    }

    #[test]
    fn new_node_gets_lowest_free() {
        assert_eq!(plan(&rows(&[]), "n", None), ClaimPlan::Insert(0));
        assert_eq!(plan(&rows(&[(0, "a"), (1, "b"), (3, "c")]), "n", None), ClaimPlan::Insert(2));
        assert_eq!(plan(&rows(&[(1, "b")]), "n", None), ClaimPlan::Insert(0));
    }

    #[test]
    fn full_registry() {
        let all: Vec<_> = (0..=MAX_WORKER_ID).map(|i| RegistryRow { worker_id: i, node_name: format!("n{i}") }).collect();
        assert_eq!(plan(&all, "new", None), ClaimPlan::Full);
        assert_eq!(plan(&all, "n5", None), ClaimPlan::Reuse(5));
    }

    #[test]
    fn configured_id_checks_owner() {
        let r = rows(&[(7, "other")]);
        assert_eq!(plan(&r, "me", Some(7)), ClaimPlan::OwnedByOther { worker_id: 7, owner: "other".into() });
        assert_eq!(plan(&r, "other", Some(7)), ClaimPlan::Reuse(7));
        assert_eq!(plan(&r, "me", Some(8)), ClaimPlan::Insert(8));
        assert_eq!(plan(&r, "other", Some(8)), ClaimPlan::NodeHasOtherId { configured: 8, registered: 7 });
    }
}
