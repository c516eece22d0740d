//! Which standbys must have a worker's commit before it is used
//! (`leaf_id.synchronized_standby_slots`), decided from the state of this
//! server's replication slots. Plain Rust: the worker reads the slots
//! (`standby_wait`) and asks here.
//!
//! Why: a refill, a reserve, a snowflake lease or a worker-id claim that
//! is used before a standby has it can be reserved again by that standby
//! once it is promoted (asynchronous replication, Patroni's default). So,
//! as PostgreSQL 17's `synchronized_standby_slots` does for logical
//! decoding, the worker uses what it committed only after every named
//! physical slot's standby has flushed past the commit. A physical slot's
//! `restart_lsn` is the position its standby last reported as flushed.

/// The setting, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotRule {
    /// Empty: no standby is waited for (only synchronous replication's own wait).
    Off,
    /// `*`: every permanent physical slot of this server, whichever exist at
    /// the time (an HA manager keeps one per member: Patroni's `use_slots`).
    EveryPhysical,
    /// These slots, each of which must exist and be physical.
    Named(Vec<String>),
}

/// Longest slot name (NAMEDATALEN - 1).
pub const SLOT_NAME_MAX: usize = 63;

/// Parse `leaf_id.synchronized_standby_slots`: empty, `*`, or a
/// comma-separated list of slot names (lower-case letters, digits and
/// underscores, as `pg_create_physical_replication_slot` accepts).
pub fn parse_rule(text: &str) -> Result<SlotRule, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(SlotRule::Off);
    }
    if text == "*" {
        return Ok(SlotRule::EveryPhysical);
    }
    let mut names: Vec<String> = Vec::new();
    for raw in text.split(',') {
        let name = raw.trim();
        if name == "*" {
            return Err("\"*\" must be the whole setting".into());
        }
        if name.is_empty() {
            return Err("a slot name is empty".into());
        }
        if name.len() > SLOT_NAME_MAX {
            return Err(format!(
                "slot name \"{name}\" is longer than {SLOT_NAME_MAX} bytes"
            ));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(format!(
                "slot name \"{name}\" may contain only lower-case letters, digits and underscores"
            ));
        }
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    Ok(SlotRule::Named(names))
}

/// One row of `pg_replication_slots`, as far as the rule needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotState {
    pub name: String,
    pub physical: bool,
    pub temporary: bool,
    /// `restart_lsn`: for a physical slot, what its standby has flushed;
    /// None before a standby first reported, or once the slot is invalidated.
    pub flushed: Option<u64>,
}

/// Why a slot does not confirm a commit (yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Behind {
    /// Its standby has flushed up to `flushed`, `bytes` short of the commit.
    Lagging { flushed: u64, bytes: u64 },
    /// No position: no standby has used the slot yet, or it was invalidated.
    NoPosition,
    /// The named slot does not exist on this server.
    Missing,
    /// The named slot is a logical slot: it confirms no physical standby.
    Logical,
}

/// The verdict on one commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Confirmed,
    /// Slots that have not confirmed it, in the rule's (or the server's) order.
    Waiting(Vec<(String, Behind)>),
}

/// Whether the slots have by now flushed past `unconfirmed_at`, the end of
/// the worker's latest commit whose wait ended unconfirmed (None: none did,
/// or a later one was confirmed): then the wait that commit began is over,
/// though no commit was confirmed since, and the next wait has a since of
/// its own.
pub fn unconfirmed_wait_ended(
    rule: &SlotRule,
    slots: &[SlotState],
    unconfirmed_at: Option<u64>,
) -> bool {
    unconfirmed_at.is_some_and(|end| verdict(rule, slots, end) == Verdict::Confirmed)
}

/// Has every slot the rule names flushed past `commit_end` (the end of the
/// commit record)?
pub fn verdict(rule: &SlotRule, slots: &[SlotState], commit_end: u64) -> Verdict {
    let behind_of = |s: &SlotState| -> Option<Behind> {
        if !s.physical {
            return Some(Behind::Logical);
        }
        match s.flushed {
            None => Some(Behind::NoPosition),
            Some(f) if f >= commit_end => None,
            Some(f) => Some(Behind::Lagging {
                flushed: f,
                bytes: commit_end - f,
            }),
        }
    };
    let waiting: Vec<(String, Behind)> = match rule {
        SlotRule::Off => Vec::new(),
        SlotRule::EveryPhysical => slots
            .iter()
            .filter(|s| s.physical && !s.temporary)
            .filter_map(|s| behind_of(s).map(|b| (s.name.clone(), b)))
            .collect(),
        SlotRule::Named(names) => names
            .iter()
            .filter_map(|n| match slots.iter().find(|s| &s.name == n) {
                None => Some((n.clone(), Behind::Missing)),
                Some(s) => behind_of(s).map(|b| (n.clone(), b)),
            })
            .collect(),
    };
    if waiting.is_empty() {
        Verdict::Confirmed
    } else {
        Verdict::Waiting(waiting)
    }
}

/// A rule that finds no physical slot to wait for: `*` on a server with no
/// permanent physical slot (every commit is confirmed without any standby),
/// or names none that is a physical slot here (every commit waits for them
/// and fails). None when the rule finds one, or is off.
pub fn no_physical_slot(rule: &SlotRule, slots: &[SlotState]) -> Option<NoSlot> {
    match rule {
        SlotRule::Off => None,
        SlotRule::EveryPhysical => {
            (!slots.iter().any(|s| s.physical && !s.temporary)).then_some(NoSlot::NoneToWaitFor)
        }
        SlotRule::Named(names) => (!names
            .iter()
            .any(|n| slots.iter().any(|s| &s.name == n && s.physical)))
        .then_some(NoSlot::NoneNamedExists),
    }
}

/// What `no_physical_slot` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoSlot {
    /// `*`, and no permanent physical slot: nothing is waited for.
    NoneToWaitFor,
    /// Named slots, none of them a physical slot here: nothing confirms.
    NoneNamedExists,
}

/// `X/Y` as PostgreSQL prints an LSN.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (hi, lo) = text.split_once('/')?;
    let hi = u32::from_str_radix(hi, 16).ok()?;
    let lo = u32::from_str_radix(lo, 16).ok()?;
    Some(((hi as u64) << 32) | lo as u64)
}

pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// The most bytes a waited-for slot's standby is behind the commit; None
/// when none of them has reported a position (missing, logical, unused).
pub fn most_bytes_behind(waiting: &[(String, Behind)]) -> Option<i64> {
    waiting
        .iter()
        .filter_map(|(_, b)| match b {
            Behind::Lagging { bytes, .. } => Some(i64::try_from(*bytes).unwrap_or(i64::MAX)),
            _ => None,
        })
        .max()
}

/// What the slots that hold a commit up are waiting for, for messages:
/// `standby slot "s1" (flushed up to 0/3000060, 1234 bytes behind)`.
pub fn describe(waiting: &[(String, Behind)]) -> String {
    let one = |(name, b): &(String, Behind)| -> String {
        let why = match b {
            Behind::Lagging { flushed, bytes } => {
                format!(
                    "flushed up to {}, {bytes} bytes behind",
                    format_lsn(*flushed)
                )
            }
            Behind::NoPosition => "no standby has reported a position to it".to_string(),
            Behind::Missing => "no such slot on this server".to_string(),
            Behind::Logical => "a logical slot, which confirms no standby".to_string(),
        };
        format!("standby slot \"{name}\" ({why})")
    };
    let parts: Vec<String> = waiting.iter().map(one).collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(name: &str, flushed: Option<u64>) -> SlotState {
        SlotState {
            name: name.into(),
            physical: true,
            temporary: false,
            flushed,
        }
    }

    #[test]
    fn an_unconfirmed_wait_ends_once_the_slots_flushed_past_its_commit() {
        let every = SlotRule::EveryPhysical;
        let slots = [slot("s1", Some(100)), slot("s2", Some(300))];
        assert!(!unconfirmed_wait_ended(&every, &slots, None));
        assert!(unconfirmed_wait_ended(&every, &slots, Some(100)));
        // s1 is still short of it
        assert!(!unconfirmed_wait_ended(&every, &slots, Some(101)));
        // only the named slots count
        let s2 = SlotRule::Named(vec!["s2".into()]);
        assert!(unconfirmed_wait_ended(&s2, &slots, Some(300)));
        assert!(!unconfirmed_wait_ended(&s2, &slots, Some(301)));
        assert!(!unconfirmed_wait_ended(
            &every,
            &[slot("s1", None)],
            Some(1)
        ));
    }

    #[test]
    fn finds_rules_without_a_physical_slot() {
        let logical = SlotState {
            name: "l".into(),
            physical: false,
            temporary: false,
            flushed: None,
        };
        let temporary = SlotState {
            name: "t".into(),
            physical: true,
            temporary: true,
            flushed: Some(5),
        };
        let none: Vec<SlotState> = Vec::new();
        assert_eq!(no_physical_slot(&SlotRule::Off, &none), None);
        assert_eq!(
            no_physical_slot(&SlotRule::EveryPhysical, &none),
            Some(NoSlot::NoneToWaitFor)
        );
        // a logical or temporary slot is no standby's
        assert_eq!(
            no_physical_slot(
                &SlotRule::EveryPhysical,
                &[logical.clone(), temporary.clone()]
            ),
            Some(NoSlot::NoneToWaitFor)
        );
        assert_eq!(
            no_physical_slot(
                &SlotRule::EveryPhysical,
                &[logical.clone(), slot("s1", None)]
            ),
            None
        );
        let named = SlotRule::Named(vec!["s1".into(), "l".into()]);
        assert_eq!(
            no_physical_slot(&named, std::slice::from_ref(&logical)),
            Some(NoSlot::NoneNamedExists)
        );
        assert_eq!(
            no_physical_slot(&named, &[logical, slot("s1", Some(1))]),
            None
        );
        assert_eq!(
            no_physical_slot(&SlotRule::Named(vec!["s9".into()]), &[slot("s1", Some(1))]),
            Some(NoSlot::NoneNamedExists)
        );
    }

    #[test]
    fn parses_the_setting() {
        assert_eq!(parse_rule(""), Ok(SlotRule::Off));
        assert_eq!(parse_rule("  "), Ok(SlotRule::Off));
        assert_eq!(parse_rule(" * "), Ok(SlotRule::EveryPhysical));
        assert_eq!(
            parse_rule("s1, s_2,s1"),
            Ok(SlotRule::Named(vec!["s1".into(), "s_2".into()]))
        );
        assert!(parse_rule("s1,,s2").is_err());
        assert!(parse_rule("s1, *").is_err());
        assert!(parse_rule("S1").is_err());
        assert!(parse_rule("a-b").is_err());
        assert!(parse_rule("x'; DROP TABLE t; --").is_err());
        assert!(parse_rule(&"a".repeat(64)).is_err());
        assert!(parse_rule(&"a".repeat(63)).is_ok());
    }

    #[test]
    fn off_confirms_everything() {
        assert_eq!(
            verdict(&SlotRule::Off, &[slot("s1", Some(1))], 100),
            Verdict::Confirmed
        );
    }

    #[test]
    fn named_slots_must_have_flushed_past_the_commit() {
        let rule = parse_rule("s1, s2").unwrap();
        let slots = [
            slot("s1", Some(100)),
            slot("s2", Some(99)),
            slot("s3", None),
        ];
        assert_eq!(
            verdict(&rule, &slots, 100),
            Verdict::Waiting(vec![(
                "s2".into(),
                Behind::Lagging {
                    flushed: 99,
                    bytes: 1
                }
            )])
        );
        assert_eq!(verdict(&rule, &slots, 99), Verdict::Confirmed);
        // s3 is not named: its standby does not hold anything up
        assert_eq!(
            verdict(&parse_rule("s1").unwrap(), &slots, 100),
            Verdict::Confirmed
        );
    }

    #[test]
    fn a_missing_logical_or_unused_named_slot_never_confirms() {
        let mut logical = slot("l", Some(u64::MAX));
        logical.physical = false;
        let slots = [slot("s1", None), logical];
        let v = verdict(&parse_rule("s1, l, gone").unwrap(), &slots, 1);
        assert_eq!(
            v,
            Verdict::Waiting(vec![
                ("s1".into(), Behind::NoPosition),
                ("l".into(), Behind::Logical),
                ("gone".into(), Behind::Missing),
            ])
        );
    }

    #[test]
    fn every_physical_slot_counts_but_temporary_and_logical_ones() {
        let mut temp = slot("pg_basebackup_1", Some(0));
        temp.temporary = true;
        let mut logical = slot("l", Some(0));
        logical.physical = false;
        let slots = [slot("a", Some(50)), slot("b", Some(10)), temp, logical];
        assert_eq!(
            verdict(&SlotRule::EveryPhysical, &slots, 50),
            Verdict::Waiting(vec![(
                "b".into(),
                Behind::Lagging {
                    flushed: 10,
                    bytes: 40
                }
            )])
        );
        assert_eq!(
            verdict(&SlotRule::EveryPhysical, &slots, 10),
            Verdict::Confirmed
        );
        // no physical slot at all: nothing to wait for
        assert_eq!(
            verdict(&SlotRule::EveryPhysical, &[], 10),
            Verdict::Confirmed
        );
    }

    #[test]
    fn lsns_round_trip_and_messages_name_the_slot() {
        assert_eq!(parse_lsn("0/3000060"), Some(0x3000060));
        assert_eq!(parse_lsn("1A/FF"), Some((0x1A << 32) | 0xFF));
        assert_eq!(parse_lsn("nope"), None);
        assert_eq!(format_lsn((0x1A << 32) | 0xFF), "1A/FF");
        assert_eq!(
            describe(&[(
                "s1".into(),
                Behind::Lagging {
                    flushed: 0x3000060,
                    bytes: 1234
                }
            )]),
            "standby slot \"s1\" (flushed up to 0/3000060, 1234 bytes behind)"
        );
    }

    #[test]
    fn the_lag_shown_is_the_most_a_reporting_slot_is_behind() {
        let lagging =
            |name: &str, bytes| (String::from(name), Behind::Lagging { flushed: 0, bytes });
        assert_eq!(most_bytes_behind(&[]), None);
        assert_eq!(
            most_bytes_behind(&[
                ("gone".into(), Behind::Missing),
                ("new".into(), Behind::NoPosition)
            ]),
            None
        );
        assert_eq!(
            most_bytes_behind(&[
                lagging("s1", 10),
                ("gone".into(), Behind::Missing),
                lagging("s2", 4096)
            ]),
            Some(4096)
        );
        assert_eq!(
            most_bytes_behind(&[lagging("s1", u64::MAX)]),
            Some(i64::MAX)
        );
    }
}
