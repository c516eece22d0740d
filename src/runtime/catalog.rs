//! The catalog versions (the extension's SQL objects) this library serves,
//! and what each one has. Plain Rust: `runtime::transaction` reads the
//! installed version once per job and hands the `Catalog` to the job.
//! Owns only the versions and their features; must not know how a job uses
//! them.
//!
//! Each version has what the one before it had, and more: so each feature
//! is "this version on", compared by the enum's order.
//! - 0.1.0: no `leaf_worker.owner_token` and no pinned copies, no guard
//!   functions (`leaf_id_alloc_row_conflict`, ...), no `leaf_alloc_tuning`;
//! - 0.2.0: the owner token, the guard functions and the tuning table, but
//!   no pinned copies (`leaf_worker.copies`, `holder_copy`), which snowflake
//!   mode needs: 0.1.0 and 0.2.0 serve segment mode only;
//! - 0.3.0: snowflake mode, no opaque IDs;
//! - 0.4.0: opaque IDs but no opaque grants, so only plain tags are served;
//! - 0.5.0: `leaf_alloc.opaque_grant` and `leaf_alloc_encoding`; its
//!   `leaf_opaque_create` differs in its SQL too (its Citus INSERT);
//! - 0.5.1: the same for the workers (its `leaf_opaque_create` sends a key
//!   to the other Citus nodes by COPY);
//! - 0.5.2: the same for the workers (it adds the `leaf_id_worker_status`
//!   view);
//! - 0.6.0: `leaf_alloc.max_value` and `draw_role`; it differs from 0.7.0
//!   only in where the tables are (the extension's schema; 0.7.0's own
//!   `leaf_id_catalog`, which `worker_sql::installed_extension` finds as the
//!   extension's member schema), so it serves everything;
//! - 0.7.0: the current catalog.

/// A catalog version this library serves, oldest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Catalog {
    V0_1_0,
    V0_2_0,
    V0_3_0,
    V0_4_0,
    V0_5_0,
    V0_5_1,
    V0_5_2,
    V0_6_0,
    V0_7_0,
}

// the current catalog is this library's own version
const _: () = assert!(same_str(
    Catalog::CURRENT.as_str(),
    env!("CARGO_PKG_VERSION")
));

const fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

impl Catalog {
    /// The catalog of this library's version (`CARGO_PKG_VERSION`).
    pub const CURRENT: Catalog = Catalog::V0_7_0;

    /// Every version served, oldest first.
    pub const ALL: [Catalog; 9] = [
        Catalog::V0_1_0,
        Catalog::V0_2_0,
        Catalog::V0_3_0,
        Catalog::V0_4_0,
        Catalog::V0_5_0,
        Catalog::V0_5_1,
        Catalog::V0_5_2,
        Catalog::V0_6_0,
        Catalog::V0_7_0,
    ];

    /// The version as `pg_extension.extversion` says it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Catalog::V0_1_0 => "0.1.0",
            Catalog::V0_2_0 => "0.2.0",
            Catalog::V0_3_0 => "0.3.0",
            Catalog::V0_4_0 => "0.4.0",
            Catalog::V0_5_0 => "0.5.0",
            Catalog::V0_5_1 => "0.5.1",
            Catalog::V0_5_2 => "0.5.2",
            Catalog::V0_6_0 => "0.6.0",
            Catalog::V0_7_0 => "0.7.0",
        }
    }

    /// The catalog of an installed version; None for one this library does
    /// not serve (exactly the strings `as_str` gives, nothing else).
    pub fn from_version(version: &str) -> Option<Catalog> {
        Catalog::ALL.into_iter().find(|c| c.as_str() == version)
    }

    /// `leaf_alloc_tuning` (the tuned step of each tag kept across restarts)
    /// and `leaf_worker.owner_token`: 0.2.0 on.
    pub fn has_tuning(self) -> bool {
        self >= Catalog::V0_2_0
    }

    /// The guard functions the guarded updates call on a row that differs
    /// (`leaf_id_alloc_row_conflict`, `leaf_id_worker_row_conflict`): 0.2.0
    /// on. (0.1.0's refills match max_id in the WHERE clause instead, and
    /// never run on Citus.)
    pub fn has_row_guards(self) -> bool {
        self >= Catalog::V0_2_0
    }

    /// `leaf_worker`'s pinned copies (`copies`, `holder_copy`), which
    /// snowflake mode needs: 0.3.0 on.
    pub fn has_snowflake(self) -> bool {
        self >= Catalog::V0_3_0
    }

    /// Opaque IDs (`leaf_alloc.opaque_domain`, `opaque_check`,
    /// `leaf_opaque_domain`): 0.4.0 on.
    pub fn has_opaque(self) -> bool {
        self >= Catalog::V0_4_0
    }

    /// `leaf_alloc.opaque_grant` (without it nothing proves that a tag's
    /// opaque domain was set by a role that may decode it, so opaque tags are
    /// refused) and `leaf_alloc_encoding` (each tag's encoding and reserved
    /// end, kept when its row is deleted): 0.5.0 on.
    pub fn has_grants_and_history(self) -> bool {
        self >= Catalog::V0_5_0
    }

    /// `leaf_alloc.max_value` (the largest counter value a tag issues) and
    /// `leaf_alloc.draw_role` (whose privileges a caller needs to draw the
    /// tag's IDs): 0.6.0 on.
    pub fn has_tag_limits(self) -> bool {
        self >= Catalog::V0_6_0
    }
}

#[cfg(test)]
mod tests {
    use super::Catalog;

    #[test]
    fn every_version_parses_to_its_variant_and_back() {
        let strings = [
            "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.5.1", "0.5.2", "0.6.0", "0.7.0",
        ];
        assert_eq!(strings.len(), Catalog::ALL.len());
        for (s, c) in strings.into_iter().zip(Catalog::ALL) {
            assert_eq!(Catalog::from_version(s), Some(c), "{s}");
            assert_eq!(c.as_str(), s);
        }
        // oldest first, as the features compare
        assert!(Catalog::ALL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(Catalog::CURRENT.as_str(), env!("CARGO_PKG_VERSION"));
        assert_eq!(Catalog::ALL.last(), Some(&Catalog::CURRENT));
    }

    #[test]
    fn an_unknown_version_is_refused() {
        for s in [
            "",
            "0.8.0",
            "0.0.9",
            "0.5.3",
            "0.7",
            "0.7.0 ",
            " 0.7.0",
            "v0.7.0",
            "0.7.0-rc.1",
            "00.7.0",
            "0.1.0\0",
        ] {
            assert_eq!(Catalog::from_version(s), None, "{s:?}");
        }
    }

    /// Each feature, version by version, as the lists of earlier releases
    /// said it (`OLDER_CATALOGS` and its kin in `runtime::transaction`: the
    /// current catalog was "none of the older ones" and had everything).
    #[test]
    fn features_match_the_earlier_version_lists() {
        let older_without_snowflake = ["0.1.0", "0.2.0"];
        let with_opaque = ["0.4.0", "0.5.0", "0.5.1", "0.5.2", "0.6.0"];
        let with_grants = ["0.5.0", "0.5.1", "0.5.2", "0.6.0"];
        let with_limits = ["0.6.0"];
        for c in Catalog::ALL {
            let v = c.as_str();
            let current = c == Catalog::CURRENT;
            let legacy = v == "0.1.0";
            assert_eq!(c.has_tuning(), !legacy, "{v}");
            assert_eq!(c.has_row_guards(), !legacy, "{v}");
            assert_eq!(
                c.has_snowflake(),
                !older_without_snowflake.contains(&v),
                "{v}"
            );
            assert_eq!(c.has_opaque(), current || with_opaque.contains(&v), "{v}");
            assert_eq!(
                c.has_grants_and_history(),
                current || with_grants.contains(&v),
                "{v}"
            );
            assert_eq!(
                c.has_tag_limits(),
                current || with_limits.contains(&v),
                "{v}"
            );
        }
    }
}
