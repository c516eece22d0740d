//! A segment refill: reserve the next range of a tag in `leaf_alloc` (in
//! the worker's transaction), or, on Citus while a node is down, take it
//! from this server's reserve; record what was reserved. Owns the SQL steps
//! of one refill; scheduling and publishing are `segment::jobs`'.

use crate::runtime::backend::database_exists;
use crate::runtime::catalog::Catalog;
use crate::runtime::job_error::{JobError, spi_err};
use crate::runtime::shmem::shared;
use crate::runtime::transaction::in_transaction;
use crate::runtime::worker_sql::{self as sql, Schema, Table};
use crate::segment::draw_role;
use crate::segment::opaque::Domain;
use crate::segment::range_plan::{
    BadRow, Bounds, CitusReserve, NoRoom, PlanInput, Range, Start, TagRow, Tuning, plan_segment,
};
use crate::segment::reserve::{NoRange, Reserve};
use crate::segment::reserve_file::save_reserve;
use crate::settings;
use pgrx::prelude::*;
use pgrx::spi::{Spi, SpiTupleTable};
use std::time::Duration;

pub(crate) struct Reserved {
    pub(crate) start: i64,
    pub(crate) len: i64,
    pub(crate) step: i64,
    pub(crate) table_step: i64,
    /// The end of everything the reservation recorded in `leaf_alloc`.
    pub(crate) end: i64,
    /// On Citus: the range reserved beyond the segment, for this server's
    /// reserve, and leaf_alloc's OID.
    pub(crate) extra: Option<(u32, (i64, i64))>,
    /// The tag's row was below this server's reservations: drop its reserve.
    pub(crate) drop_kept: bool,
    /// The range's IDs are this opaque domain's permutation of the counter
    /// (None: plain).
    pub(crate) encoding: Option<Domain>,
    /// Who may draw the tag's IDs (`TagSlot::draw_role`).
    pub(crate) draw_role: u32,
}

/// `TagSlot::draw_role` of a row's `draw_role`: `draw_role::ANYONE` for
/// NULL, the role's OID, or `draw_role::SUPERUSERS_ONLY` for a name that no
/// role has on this server.
fn draw_role_oid(client: &mut pgrx::spi::SpiClient, name: Option<String>) -> Result<u32, JobError> {
    let Some(name) = name else {
        return Ok(draw_role::ANYONE);
    };
    let oid = client
        .select(sql::role_oid(), None, &[name.as_str().into()])
        .map_err(spi_err)?
        .next()
        .and_then(|r| r.get::<pg_sys::Oid>(1).ok().flatten())
        .map(|o| o.to_u32());
    if oid.is_none() {
        pgrx::warning!(
            "leaf_id: the draw_role of a tag in leaf_alloc names \"{}\", which no role of this server is called: only superusers may draw that tag's IDs",
            name
        );
    }
    Ok(oid.unwrap_or(draw_role::SUPERUSERS_ONLY))
}

/// leaf_alloc's OID (the reserve is bound to the table it came from).
fn alloc_table_oid(client: &mut pgrx::spi::SpiClient, schema: &Schema) -> Result<u32, JobError> {
    sql::table_oid(client, schema, Table::Alloc)?
        .map(|o| o.to_u32())
        .ok_or_else(|| {
            JobError::new(
                PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
                "leaf_id's leaf_alloc is not in the extension's schema",
            )
        })
}

/// Column ordinals of `worker_sql::alloc_lock_row`'s `RETURNING`.
const COL_MAX_ID: usize = 1;
const COL_STEP: usize = 2;
const COL_OPAQUE_DOMAIN: usize = 3;
const COL_OPAQUE_CHECK: usize = 4;
const COL_OPAQUE_GRANT: usize = 5;
const COL_MAX_VALUE: usize = 6;
const COL_DRAW_ROLE: usize = 7;
/// `slow_tag_lookup` pauses (tests): after the lock found no row, and
/// after the row was not found either.
const PAUSE_AFTER_NO_LOCK: Duration = Duration::from_millis(1500);
const PAUSE_AFTER_NO_ROW: Duration = Duration::from_millis(3000);

/// What a refill through `leaf_alloc` works from.
pub(crate) struct RefillConfig<'a> {
    pub(crate) schema: &'a Schema,
    pub(crate) catalog: Catalog,
    pub(crate) dboid: u32,
    pub(crate) tag: &'a str,
    /// The end of what this server lifetime already reserved for the tag.
    pub(crate) reserved_end: i64,
    pub(crate) tuning: Tuning,
    /// This server's Citus reserve, as kept.
    pub(crate) kept: &'a Reserve,
    /// The encoding this server's slot issued under in this lifetime (None:
    /// none yet).
    pub(crate) slot_encoding: Option<Option<Domain>>,
}

/// The tag's row, locked and read once, and who may draw its IDs.
pub(crate) struct LockedRow {
    row: TagRow,
    /// `TagSlot::draw_role` of the row's `draw_role`.
    pub(crate) draw_role: u32,
}

/// Where leaf_alloc is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// A Citus table (its refills keep this server's reserve).
    Citus,
    /// This server's own table (also a 0.1.0 catalog's, which has no guard
    /// functions: its refills never count as Citus ones).
    Local,
}

/// The first step of a refill: lock the tag's row and read it once. Its
/// draw role is known before any refusal of `reserve`: a refused refill's
/// error reaches only the callers that may draw the tag (others get 42501,
/// not what the error tells of the row).
pub(crate) fn lock_tag_row(cfg: &RefillConfig<'_>) -> Result<LockedRow, JobError> {
    Spi::connect_mut(|client| {
        // A write, not SELECT ... FOR UPDATE, locks the row: on a Citus
        // reference table a FOR UPDATE locks only this node's copy, while a
        // write is serialized with the writes of every other node, so the
        // max_id it returns is the latest one (a stale read there reserved
        // one range on two nodes).
        let lock_sql = sql::alloc_lock_row(cfg.schema, cfg.catalog);
        let mut rows = client
            .update(&lock_sql, None, &[cfg.tag.into()])
            .map_err(spi_err)?;
        if rows.is_empty() {
            rows = lock_after_miss(client, cfg, &lock_sql)?;
        }
        let row = read_tag_row(&rows.first(), cfg.catalog)?;
        let draw_role = draw_role_oid(client, row.draw_role.clone())?;
        Ok(LockedRow { row, draw_role })
    })
}

/// The lock found no row: the tag is unknown, or its row was committed
/// since the update's snapshot (a tag inserted just now), so the update
/// again, with a new one.
fn lock_after_miss<'c>(
    client: &mut pgrx::spi::SpiClient<'c>,
    cfg: &RefillConfig<'_>,
    lock_sql: &String,
) -> Result<SpiTupleTable<'c>, JobError> {
    settings::pause_point(
        "slow_tag_lookup",
        "after the update found no row",
        PAUSE_AFTER_NO_LOCK,
    );
    let exists = !client
        .select(&sql::alloc_row_exists(cfg.schema), None, &[cfg.tag.into()])
        .map_err(spi_err)?
        .is_empty();
    if !exists {
        settings::pause_point(
            "slow_tag_lookup",
            "after the row was not found",
            PAUSE_AFTER_NO_ROW,
        );
        return Err(unknown_tag(cfg.tag));
    }
    let rows = client
        .update(lock_sql, None, &[cfg.tag.into()])
        .map_err(spi_err)?;
    if rows.is_empty() {
        return Err(not_recorded(
            cfg.tag,
            "the row could not be locked by an update",
        ));
    }
    Ok(rows)
}

/// The locked row's columns; those the catalog lacks are None.
fn read_tag_row(row: &SpiTupleTable<'_>, catalog: Catalog) -> Result<TagRow, JobError> {
    let mut columns = TagRow {
        // (NULL, or unreadable: refused by `TagRow::counts`)
        max_id: row.get::<i64>(COL_MAX_ID).ok().flatten(),
        step: row.get::<i32>(COL_STEP).ok().flatten(),
        ..TagRow::default()
    };
    if catalog.has_opaque() {
        columns.opaque_domain = row.get::<String>(COL_OPAQUE_DOMAIN).map_err(spi_err)?;
        columns.opaque_check = row.get::<i64>(COL_OPAQUE_CHECK).map_err(spi_err)?;
    }
    if catalog.has_grants_and_history() {
        columns.opaque_grant = row.get::<i64>(COL_OPAQUE_GRANT).map_err(spi_err)?;
    }
    // (a catalog with limits has opaque domains and grants: columns 6, 7)
    if catalog.has_tag_limits() {
        columns.max_value = row.get::<i64>(COL_MAX_VALUE).map_err(spi_err)?;
        columns.draw_role = row.get::<String>(COL_DRAW_ROLE).map_err(spi_err)?;
    }
    Ok(columns)
}

/// Reserve the next range of a tag whose row `lock_tag_row` locked:
/// `[max_id, max_id + n)`, never below the end of what this server lifetime
/// already reserved for the tag (`reserved_end`): a row deleted and
/// inserted again, or a `max_id` moved back, cannot make a range overlap
/// one already handed to callers (`segment::range_plan`).
pub(crate) fn reserve(cfg: &RefillConfig<'_>, locked: &LockedRow) -> Result<Reserved, JobError> {
    Spi::connect_mut(|client| {
        let row = &locked.row;
        let counts = row.counts().map_err(|b| bad_row(cfg.tag, b))?;
        let step = cfg.tuning.step(counts.table_step);
        let encoding = match &row.opaque_domain {
            Some(name) => Some(opaque_domain(client, cfg.schema, cfg.tag, name)?),
            None => None,
        };
        let check = encoding.map_or(0, |d| d.fingerprint());
        // Decided here, before anything is written: the encoding this
        // server's slot issued under in this lifetime, the one the row
        // recorded, and the one the tag ever issued under (kept when the
        // row is deleted, and across restarts: `leaf_alloc_encoding`). A tag
        // never issues under two encodings, whose IDs could be equal.
        if cfg.slot_encoding.is_some_and(|e| e != encoding)
            || row.opaque_check.is_some_and(|c| c != check)
        {
            return Err(encoding_changed(cfg.tag));
        }
        // (a 0.1.0 catalog has no guard functions: its refills never count
        // as Citus ones, and keep no reserve)
        let placement = if cfg.catalog.has_row_guards()
            && crate::citus::copies::is_citus_table(client, cfg.schema, Table::Alloc)?
        {
            Placement::Citus
        } else {
            Placement::Local
        };
        let recorded_end = recorded_end(client, cfg, placement, check)?;
        check_grant(cfg, row, encoding, counts.max_id)?;
        let bounds = Bounds {
            reserved_end: cfg.reserved_end,
            recorded_end,
        };
        let plan = plan_segment(&PlanInput {
            counts,
            step,
            bounds,
            max_value: row.max_value,
            encoding,
        });
        if let Start::RaisedToFloor(floor) = plan.start {
            warn_raised(cfg.tag, counts.max_id, floor);
        }
        let segment = plan
            .segment
            .map_err(|why| no_room(cfg.tag, row.opaque_domain.as_deref(), why))?;
        let range = segment.range(citus_reserve(client, cfg, placement)?);
        if range.drop_kept {
            drop_reserve(cfg)?;
        }
        record_range(client, cfg, &range, counts.max_id, encoding)?;
        Ok(Reserved {
            start: range.start,
            len: range.len,
            step: range.step,
            table_step: counts.table_step,
            end: range.end,
            extra: range.extra,
            drop_kept: range.drop_kept,
            encoding,
            draw_role: locked.draw_role,
        })
    })
}

/// The refusal of a row whose step or max_id cannot be refilled.
fn bad_row(tag: &str, bad: BadRow) -> JobError {
    JobError::new(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        match bad {
            BadRow::StepBelowOne(step) => {
                format!("leaf_alloc.step of tag \"{tag}\" is {step}; it must be at least 1")
            }
            BadRow::NegativeMaxId(max_id) => {
                format!("leaf_alloc.max_id of tag \"{tag}\" is {max_id}; it must not be negative")
            }
        },
    )
}

/// The end of everything any server reserved for the tag, kept when its
/// row is deleted and across restarts (`leaf_alloc_encoding`; 0 before
/// catalog 0.5.0); the tag's first refill records its encoding there. The
/// tag must have issued under `check`.
fn recorded_end(
    client: &mut pgrx::spi::SpiClient<'_>,
    cfg: &RefillConfig<'_>,
    placement: Placement,
    check: i64,
) -> Result<i64, JobError> {
    let (schema, tag) = (cfg.schema, cfg.tag);
    if !cfg.catalog.has_grants_and_history() {
        return Ok(0);
    }
    // on Citus it must be one table for every node (a reference table,
    // as leaf_alloc): a node's own would not know what the others
    // issued under, and let a tag change its encoding there
    if placement == Placement::Citus
        && !crate::citus::copies::is_citus_table(client, schema, Table::AllocEncoding)?
    {
        return Err(JobError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "leaf_alloc is a Citus table but leaf_alloc_encoding is not, so a refill of tag \"{tag}\" cannot see \
                 what the other nodes issued: run SELECT create_reference_table('leaf_id_catalog.leaf_alloc_encoding') on the coordinator"
            ),
        ));
    }
    let recorded = match encoding_history(client, schema, tag)? {
        Some(r) => Some(r),
        None => {
            client
                .update(
                    &sql::record_alloc_encoding(schema),
                    None,
                    &[tag.into(), check.into()],
                )
                .map_err(spi_err)?;
            // (read again: a concurrent first refill on another node
            // may have recorded another encoding first)
            encoding_history(client, schema, tag)?
        }
    };
    match recorded {
        Some((h, end)) if h == check => Ok(end),
        _ => Err(encoding_changed(tag)),
    }
}

/// Only a role that may decode the domain made the tag use it at this
/// max_id (`leaf_opaque_grant`), or a refill of this tag wrote the grant:
/// refused before anything is written (a tag admin's own tag, or a max_id
/// she moved, would hand her the domain's codebook).
fn check_grant(
    cfg: &RefillConfig<'_>,
    row: &TagRow,
    encoding: Option<Domain>,
    max_id: i64,
) -> Result<(), JobError> {
    let (Some(name), Some(d)) = (&row.opaque_domain, encoding) else {
        return Ok(());
    };
    if !cfg.catalog.has_grants_and_history() {
        return Err(crate::runtime::transaction::needs_current_catalog(
            cfg.catalog,
            "an opaque tag",
        ));
    }
    if row.opaque_grant != Some(d.grant(cfg.tag, max_id)) {
        return Err(not_granted(cfg.tag, name, max_id));
    }
    Ok(())
}

/// Never below what was reserved before: this server lifetime's mark, and
/// the tag's recorded end (a max_id moved back, by hand or by replaying an
/// old row with its grant, or a row deleted and inserted again lower, after
/// a restart or on another Citus node).
fn warn_raised(tag: &str, max_id: i64, floor: i64) {
    pgrx::warning!(
        "leaf_id: leaf_alloc.max_id of tag \"{}\" is {}, below {} that was already reserved for it; the reservation starts at {}",
        tag,
        max_id,
        floor,
        floor
    );
}

/// The refusal of a refill with no room left below the tag's limit.
fn no_room(tag: &str, domain_name: Option<&str>, why: NoRoom) -> JobError {
    JobError::new(
        PgSqlErrorCode::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
        match (why, domain_name) {
            (NoRoom::MaxValue(max_value), _) => format!(
                "leaf_id tag \"{tag}\" has reached its leaf_alloc.max_value ({max_value}): no IDs are left"
            ),
            (NoRoom::Domain { bits }, Some(name)) => format!(
                "leaf_id tag \"{tag}\" has used every value of its opaque domain \"{name}\" (below 2^{bits}): no IDs are left"
            ),
            _ => format!("leaf_id tag \"{tag}\" has reached the largest bigint: no IDs are left"),
        },
    )
}

/// On Citus, this server's reserve, topped up to leaf_id.citus_reserve
/// segments of this step in the same reservation.
fn citus_reserve<'a>(
    client: &mut pgrx::spi::SpiClient<'_>,
    cfg: &RefillConfig<'a>,
    placement: Placement,
) -> Result<Option<CitusReserve<'a>>, JobError> {
    if placement == Placement::Local {
        return Ok(None);
    }
    Ok(Some(CitusReserve {
        oid: alloc_table_oid(client, cfg.schema)?,
        kept: cfg.kept,
        tag: cfg.tag,
        target: settings::CITUS_RESERVE.get() as i64,
    }))
}

/// Drop the tag's reserve: its row is below this server's reservations.
/// Written before the commit, as a take from the reserve is: a crash after
/// the commit must not leave the file serving ranges that the moved-back
/// row lets other nodes hand out.
fn drop_reserve(cfg: &RefillConfig<'_>) -> Result<(), JobError> {
    let mut dropped = cfg.kept.clone();
    dropped.drop_tag(cfg.tag);
    save_reserve(cfg.dboid, &dropped)?;
    pgrx::warning!(
        "leaf_id: the reserve of tag \"{}\" was dropped: leaf_alloc.max_id is below the ranges this server reserved (the row was moved back, or deleted and inserted again)",
        cfg.tag
    );
    Ok(())
}

/// Record the range: the row's max_id becomes its end, read back, and from
/// catalog 0.5.0 on the tag's recorded end too.
fn record_range(
    client: &mut pgrx::spi::SpiClient<'_>,
    cfg: &RefillConfig<'_>,
    range: &Range,
    max_id: i64,
    encoding: Option<Domain>,
) -> Result<(), JobError> {
    let (schema, tag, end) = (cfg.schema, cfg.tag, range.end);
    let (opaque, granted) = (
        cfg.catalog.has_opaque(),
        cfg.catalog.has_grants_and_history(),
    );
    // exactly this row must now say `end`: a trigger that skips or
    // changes the update, or a rule, must not let a range be published
    // that the table did not record
    // the row is locked (above): every copy of it must still say
    // `max_id`, or the statement fails (`citus::guard`; a 0.1.0 catalog has
    // no guard function and matches in the WHERE clause)
    let mut args = vec![tag.into(), end.into(), max_id.into()];
    if opaque {
        args.push(encoding.map_or(0, |d| d.fingerprint()).into());
    }
    if opaque && granted {
        args.push(encoding.map(|d| d.grant(tag, end)).into());
    }
    let updated = client
        .update(&sql::alloc_record_end(schema, cfg.catalog), None, &args)
        .map_err(spi_err)?;
    let returned: Vec<Option<i64>> = updated.map(|r| r.get::<i64>(1).ok().flatten()).collect();
    let recorded = client
        .select(&sql::alloc_max_id(schema), None, &[tag.into()])
        .map_err(spi_err)?
        .map(|r| r.get::<i64>(1).ok().flatten())
        .collect::<Vec<_>>();
    if returned != [Some(end)] || recorded != [Some(end)] {
        return Err(not_recorded(
            tag,
            &format!(
                "max_id should be {end}; the update returned {returned:?}, the row has {recorded:?}"
            ),
        ));
    }
    if granted {
        record_history_end(client, schema, tag, end)?;
    }
    Ok(())
}

/// The recorded end keeps the tag above this range after a restart (a
/// max_id moved back, a row re-created): the row must now say at least
/// `end`, read back after the update (a trigger or rule may have skipped or
/// lowered it, also after the update's own RETURNING would have shown it).
fn record_history_end(
    client: &mut pgrx::spi::SpiClient<'_>,
    schema: &Schema,
    tag: &str,
    end: i64,
) -> Result<(), JobError> {
    client
        .update(
            &sql::record_alloc_end(schema),
            None,
            &[tag.into(), end.into()],
        )
        .map_err(spi_err)?;
    let stored = encoding_history(client, schema, tag)?.map(|(_, e)| e);
    if stored.is_none_or(|e| e < end) {
        return Err(end_not_recorded(tag, end, stored));
    }
    Ok(())
}

/// The opaque domain a tag names: its width and key.
fn opaque_domain(
    client: &mut pgrx::spi::SpiClient,
    schema: &Schema,
    tag: &str,
    name: &str,
) -> Result<Domain, JobError> {
    let row = client
        .select(&sql::opaque_domain_key(schema), None, &[name.into()])
        .map_err(spi_err)?;
    let Some(row) = row.into_iter().next() else {
        return Err(JobError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "leaf_alloc.opaque_domain of tag \"{tag}\" is \"{name}\", which is not in leaf_opaque_domain"
            ),
        ));
    };
    let bits = row.get::<i32>(1).map_err(spi_err)?.unwrap_or(0);
    let key = row.get::<Vec<u8>>(2).map_err(spi_err)?.unwrap_or_default();
    // (never the key in a message)
    Domain::new(bits.into(), &key).map_err(|_| {
        JobError::new(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!(
                "opaque domain \"{name}\" of tag \"{tag}\" has a width of {bits} or a key that is not 16 bytes"
            ),
        )
    })
}

/// The encoding (fingerprint) a tag issued under and the end of what was
/// reserved for it (`leaf_alloc_encoding`); None: no refill recorded one.
fn encoding_history(
    client: &mut pgrx::spi::SpiClient,
    schema: &Schema,
    tag: &str,
) -> Result<Option<(i64, i64)>, JobError> {
    let Some(row) = client
        .select(&sql::alloc_encoding_of(schema), None, &[tag.into()])
        .map_err(spi_err)?
        .next()
    else {
        return Ok(None);
    };
    // (both columns are NOT NULL)
    Ok(Some((
        row.get::<i64>(1).map_err(spi_err)?.unwrap_or(0),
        row.get::<i64>(2).map_err(spi_err)?.unwrap_or(0),
    )))
}

/// The refusal of a refill of an opaque tag whose row has no grant for its
/// domain at its max_id.
fn not_granted(tag: &str, domain: &str, max_id: i64) -> JobError {
    JobError::new(
        PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!(
            "tag \"{tag}\" may not use opaque domain \"{domain}\": leaf_alloc.opaque_grant is not the grant \
             of the domain for this tag at max_id {max_id} (set it to leaf_opaque_grant(domain, tag, max_id), \
             which only a role that may run leaf_opaque_decode, or a superuser, can compute)"
        ),
    )
}

/// The refusal of a refill whose encoding differs from the one the tag's
/// earlier IDs were issued under (recorded in its row, or used by this
/// server's slot): plain and opaque IDs, or the IDs of two keys or widths,
/// could be equal.
pub(crate) fn encoding_changed(tag: &str) -> JobError {
    JobError::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "tag \"{tag}\" now has another encoding (leaf_alloc.opaque_domain, or its domain's key or width) \
             than the IDs it issued before, so its IDs could repeat: a tag's opaque domain cannot change once \
             it has issued IDs, nor a domain's key or width (put leaf_alloc.opaque_domain or the domain's row \
             back, or use a new tag)"
        ),
    )
}

/// A segment from this server's reserve, without Citus (a refill through
/// it failed): None if there is no reserve, or it is used up, or the tag's
/// row in this node's copy of `leaf_alloc` is no longer the one it was
/// reserved from. The reserve file is written before the commit, so its
/// range is never handed out twice, at worst lost.
pub(crate) fn take_from_reserve(
    schema: &Schema,
    catalog: Catalog,
    dboid: u32,
    tag: &str,
    previous_step: Option<i64>,
    kept: &mut Reserve,
) -> Result<Option<Reserved>, JobError> {
    Spi::connect_mut(|client| {
        let Some(copies) = crate::citus::copies::of_reference_table(client, schema, Table::Alloc)?
        else {
            return Ok(None);
        };
        let oid = alloc_table_oid(client, schema)?;
        let limits = catalog.has_tag_limits();
        // this node's copy, read without Citus
        let row = client
            .select(
                &sql::shard_alloc_row(copies.shard(), catalog),
                None,
                &[tag.into()],
            )
            .map_err(spi_err)?;
        let (max_id, table_step, draw_role_name) = match row.into_iter().next() {
            Some(r) => (
                r.get::<i64>(1).map_err(spi_err)?,
                r.get::<i32>(2).map_err(spi_err)?.map_or(1, i64::from),
                if limits {
                    r.get::<String>(3).map_err(spi_err)?
                } else {
                    None
                },
            ),
            None => (None, 1, None),
        };
        let draw_role = draw_role_oid(client, draw_role_name)?;
        let want = previous_step.unwrap_or(table_step).max(1);
        match kept.take(tag, oid, max_id, want) {
            Ok((start, len)) => {
                save_reserve(dboid, kept)?;
                // (no transaction records it)
                remember_reserved(dboid, tag, start + len, Durability::MarkOnly)?;
                Ok(Some(Reserved {
                    start,
                    len,
                    step: want,
                    table_step,
                    end: start + len,
                    extra: None,
                    drop_kept: false,
                    // only plain tags keep a reserve
                    encoding: None,
                    draw_role,
                }))
            }
            Err(NoRange::RowChanged) => {
                pgrx::warning!(
                    "leaf_id: the reserve of tag \"{}\" was dropped: the tag's row in leaf_alloc is not the one it was reserved from (max_id {:?})",
                    tag,
                    max_id
                );
                save_reserve(dboid, kept)?;
                Ok(None)
            }
            Err(NoRange::Empty) => Ok(None),
        }
    })
}

fn end_not_recorded(tag: &str, end: i64, stored: Option<i64>) -> JobError {
    JobError::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "leaf_id could not record the end of the reservation of tag \"{tag}\" in leaf_alloc_encoding (it should be at least {end}; the row has {stored:?}): a trigger or rule on leaf_alloc_encoding changed or skipped it, and no ID is handed out that the table has not recorded"
        ),
    )
}

fn not_recorded(tag: &str, detail: &str) -> JobError {
    JobError::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "leaf_id could not record the reservation of tag \"{tag}\" in leaf_alloc ({detail}): a trigger or rule on leaf_alloc changed or skipped it, and no ID is handed out that the table has not recorded"
        ),
    )
}

/// The step the tag's refills used before this server lifetime (Leaf's issue #111).
pub(crate) fn read_tuned_step(schema: &Schema, tag: &str) -> Result<Option<i64>, JobError> {
    Spi::connect(|client| {
        let rows = client
            .select(&sql::tuned_step(schema), None, &[tag.into()])
            .map_err(spi_err)?;
        Ok(rows
            .filter_map(|r| r.get::<i32>(1).ok().flatten())
            .map(i64::from)
            .next())
    })
}

/// Persist a changed step, in a transaction of its own after the refill's
/// commit: the step only tunes refills, so a failure here (a lock, a
/// trigger) is a WARNING and never stops a refill.
pub(crate) fn save_tuned_step(tag: &str, step: i64) {
    let step = step.min(i32::MAX as i64) as i32;
    let result = in_transaction(|schema, _| {
        Spi::connect_mut(|client| {
            client
                .update(
                    &sql::save_tuned_step(schema),
                    None,
                    &[tag.into(), step.into()],
                )
                .map(|_| ())
                .map_err(spi_err)
        })
    });
    if let Err(e) = result {
        pgrx::warning!(
            "leaf_id: could not persist the tuned step of tag \"{}\": {}",
            tag,
            e.message
        );
    }
}

/// Whether the transaction of a reservation also records its end in the
/// tag's `leaf_alloc_encoding` row (`Shared::record_reserved`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// It does (catalog 0.5.0 on).
    Recorded,
    /// Only shared memory keeps it (older catalogs, and the Citus reserve,
    /// which has no transaction).
    MarkOnly,
}

impl Durability {
    /// What a refill through `leaf_alloc` on this catalog records.
    pub(crate) fn of(catalog: Catalog) -> Durability {
        if catalog.has_grants_and_history() {
            Durability::Recorded
        } else {
            Durability::MarkOnly
        }
    }
}

/// Record the end of a reservation in shared memory (inside its transaction).
pub(crate) fn remember_reserved(
    dboid: u32,
    tag: &str,
    end: i64,
    durability: Durability,
) -> Result<(), JobError> {
    let durable = durability == Durability::Recorded;
    let sh = shared().expect("shared memory");
    if sh.record_reserved(dboid, tag, end, durable).is_ok()
        || (sh.forget_marks_of_dropped_databases(database_exists)
            && sh.record_reserved(dboid, tag, end, durable).is_ok())
    {
        return Ok(());
    }
    Err(JobError::new(
        PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        format!(
            "leaf_id cannot remember the reserved ranges of another tag: all {} marks (4 per leaf_id.max_tags, at least 16384) are in use by tags of this server lifetime whose ends no table records (catalogs older than 0.5.0); raise leaf_id.max_tags and restart the server, or update the extension (ALTER EXTENSION leaf_id UPDATE)",
            sh.n_marks()
        ),
    ))
}

/// The answer to a tag that has no row in leaf_alloc.
pub fn unknown_tag(tag: &str) -> JobError {
    JobError::new(
        PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
        format!("leaf_id tag \"{tag}\" does not exist in leaf_alloc"),
    )
}
