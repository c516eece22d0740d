//! Every statement text the background workers and the renewal helpers run
//! that names one of leaf_id's tables, and the only place in leaf_id that
//! puts SQL text together.
//! Owns the text of the statements; must not run them (the jobs do).
//!
//! Owns the two ways anything variable enters a statement. A name: only the
//! extension's schema, as `quote_ident` returned it on this server in the
//! same transaction (`Schema`, whose pg_namespace row that query locks, so
//! the name cannot change under the statements), next to table names that
//! are constants here; a relation is otherwise found by OID. A value: bound
//! as a parameter ($1, ...); a statement for another Citus node, which takes
//! no parameters, is put together on this server by `pg_catalog.format`
//! with %I and %L from bound values. Must not touch shared memory or decide
//! anything: the jobs do.

use crate::runtime::catalog::Catalog;
use crate::runtime::job_error::{JobError, spi_err};
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// The extension's schema in the running job's transaction, and the schema
/// of its tables: from catalog 0.7.0 the extension's own member schema
/// (`leaf_id_catalog`, which only its owner may use), before it the
/// extension's schema.
pub struct Schema {
    /// The extension's schema (its functions), `quote_ident(nspname)`,
    /// computed by the server.
    quoted: String,
    /// The name itself: only ever bound, never pasted.
    name: String,
    /// The tables' schema, quoted by the server.
    tables_quoted: String,
    /// Its name: only ever bound, never pasted.
    tables_name: String,
    tables_oid: pg_sys::Oid,
}

/// leaf_id's tables (their names are constants of this module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Alloc,
    AllocTuning,
    Worker,
    OpaqueDomain,
    AllocEncoding,
}

impl Table {
    pub const fn name(self) -> &'static str {
        match self {
            Table::Alloc => "leaf_alloc",
            Table::AllocTuning => "leaf_alloc_tuning",
            Table::Worker => "leaf_worker",
            Table::OpaqueDomain => "leaf_opaque_domain",
            Table::AllocEncoding => "leaf_alloc_encoding",
        }
    }
}

impl Schema {
    /// The OID of the tables' schema.
    pub fn tables_oid(&self) -> pg_sys::Oid {
        self.tables_oid
    }

    /// A table of the extension, schema-qualified.
    fn table(&self, t: Table) -> String {
        format!("{}.{}", self.tables_quoted, t.name())
    }

    /// A function of the extension, schema-qualified.
    fn function(&self, f: &'static str) -> String {
        format!("{}.{f}", self.quoted)
    }

    /// This node's copy of a Citus reference table (its shard, which Citus
    /// names `<table>_<shard id>` in the table's schema).
    pub fn shard(&self, t: Table, shard_id: i64) -> Shard {
        Shard {
            qualified: format!("{}.{}_{shard_id}", self.tables_quoted, t.name()),
            relname: format!("{}_{shard_id}", t.name()),
        }
    }
}

/// The relation name of this node's copy (bound, never pasted).
pub fn shard_relname(shard: &Shard) -> &str {
    &shard.relname
}

/// The OID of the relation named $2 in the schema of OID $1, and whether it
/// is a plain table of the extension's owner without triggers, rules or row
/// security (`citus::copies::verify_own_shard`).
pub const OWN_SHARD_CHECK: &str = "SELECT c.oid, c.relkind OPERATOR(pg_catalog.=) 'r' \
     AND c.relowner OPERATOR(pg_catalog.=) e.extowner AND NOT c.relhastriggers AND NOT c.relhasrules \
     AND NOT c.relrowsecurity \
     FROM pg_catalog.pg_class c JOIN pg_catalog.pg_extension e ON e.extname OPERATOR(pg_catalog.=) 'leaf_id' \
     WHERE c.relnamespace OPERATOR(pg_catalog.=) $1::pg_catalog.oid \
     AND c.relname OPERATOR(pg_catalog.=) $2::pg_catalog.text::pg_catalog.name";

/// This node's copy of a Citus reference table.
pub struct Shard {
    /// Schema-qualified, for statements run here.
    qualified: String,
    /// The relation's name, bound for statements built for other nodes.
    relname: String,
}

/// The schema (quoted, and its name and OID) and version of the extension
/// in this database, with the schema of its tables; None when it is not
/// installed. The extension's schema's pg_namespace row is locked (FOR
/// SHARE) until the transaction ends: a database owner who renames the
/// schema, or creates another one by its old name, waits for the job, so
/// every name the job's statements resolve is the extension's. The tables'
/// schema (catalog 0.7.0 on) is found as a member of the extension, never
/// by its name; only superusers may rename or change it.
pub(crate) fn installed_extension(
    client: &mut SpiClient,
) -> Result<Option<(Schema, String)>, JobError> {
    let rows = client
        .update(
            "SELECT pg_catalog.quote_ident(n.nspname::pg_catalog.text), n.nspname::pg_catalog.text, \
             e.extversion::pg_catalog.text, \
             pg_catalog.quote_ident(t.nspname::pg_catalog.text), t.nspname::pg_catalog.text, t.oid, n.oid \
             FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n \
             ON n.oid OPERATOR(pg_catalog.=) e.extnamespace \
             LEFT JOIN LATERAL (SELECT m.nspname, m.oid FROM pg_catalog.pg_depend d \
               JOIN pg_catalog.pg_namespace m ON m.oid OPERATOR(pg_catalog.=) d.objid \
               WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass::pg_catalog.oid \
               AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass::pg_catalog.oid \
               AND d.refobjid OPERATOR(pg_catalog.=) e.oid AND d.deptype OPERATOR(pg_catalog.=) 'e'::pg_catalog.\"char\" \
               LIMIT 1) t ON true \
             WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id'::pg_catalog.name \
             FOR SHARE OF n",
            None,
            &[],
        )
        .map_err(spi_err)?;
    let Some(row) = rows.into_iter().next() else {
        return Ok(None);
    };
    let (Some(quoted), Some(name), Some(version), Some(oid)) = (
        row.get::<String>(1).map_err(spi_err)?,
        row.get::<String>(2).map_err(spi_err)?,
        row.get::<String>(3).map_err(spi_err)?,
        row.get::<pg_sys::Oid>(7).map_err(spi_err)?,
    ) else {
        return Ok(None);
    };
    let member = (
        row.get::<String>(4).map_err(spi_err)?,
        row.get::<String>(5).map_err(spi_err)?,
        row.get::<pg_sys::Oid>(6).map_err(spi_err)?,
    );
    // (before catalog 0.7.0 the tables are in the extension's schema)
    let (tables_quoted, tables_name, tables_oid) = match member {
        (Some(q), Some(n), Some(o)) => (q, n, o),
        _ => (quoted.clone(), name.clone(), oid),
    };
    Ok(Some((
        Schema {
            quoted,
            name,
            tables_quoted,
            tables_name,
            tables_oid,
        },
        version,
    )))
}

/// The OID of the relation named $2 in the schema of OID $1.
pub const TABLE_OID: &str = "SELECT c.oid FROM pg_catalog.pg_class c \
     WHERE c.relnamespace OPERATOR(pg_catalog.=) $1::pg_catalog.oid \
     AND c.relname OPERATOR(pg_catalog.=) $2::pg_catalog.text::pg_catalog.name";

/// The OID of one of leaf_id's tables (None: not there).
pub fn table_oid(
    client: &mut SpiClient,
    s: &Schema,
    t: Table,
) -> Result<Option<pg_sys::Oid>, JobError> {
    match client
        .select(TABLE_OID, None, &[s.tables_oid.into(), t.name().into()])
        .map_err(spi_err)?
        .next()
    {
        Some(row) => row.get::<pg_sys::Oid>(1).map_err(spi_err),
        None => Ok(None),
    }
}

// --- Citus metadata ----------------------------------------------------

/// Is Citus' metadata there (the extension created in this database)?
/// This server's replication slots: name, physical, temporary, and the
/// position a physical slot's standby has flushed (`runtime::standby_wait`).
pub const REPLICATION_SLOTS: &str = "SELECT slot_name::pg_catalog.text, \
     slot_type OPERATOR(pg_catalog.=) 'physical', temporary, restart_lsn::pg_catalog.text \
     FROM pg_catalog.pg_replication_slots";

/// Worker ids other databases of this server are configured with
/// (`ALTER DATABASE ... SET leaf_id.worker_id`, or `ALTER ROLE ... IN
/// DATABASE` for the bootstrap superuser, whose role the workers run as): a
/// claim from the registry leaves them free. $1: this database's OID.
pub const WORKER_IDS_CONFIGURED_ELSEWHERE: &str = "SELECT DISTINCT pg_catalog.substr(c, 19)::pg_catalog.int4 \
     FROM pg_catalog.pg_db_role_setting s, pg_catalog.unnest(s.setconfig) AS c \
     WHERE s.setdatabase OPERATOR(pg_catalog.<>) $1 AND s.setdatabase OPERATOR(pg_catalog.<>) 0::pg_catalog.oid \
       AND (s.setrole OPERATOR(pg_catalog.=) 0::pg_catalog.oid OR s.setrole OPERATOR(pg_catalog.=) 10::pg_catalog.oid) \
       AND c OPERATOR(pg_catalog.~) '^leaf_id\\.worker_id=[0-9]{1,4}$'";

pub const CITUS_METADATA_PRESENT: &str = "SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_shard') IS NOT NULL \
     AND pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL \
     AND pg_catalog.to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL";

/// Is Citus' partition catalog there?
pub const CITUS_PARTITIONS_PRESENT: &str =
    "SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL";

/// Is the table of OID $1 a Citus table?
pub const IS_CITUS_TABLE: &str = "SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition \
     WHERE logicalrelid OPERATOR(pg_catalog.=) $1::pg_catalog.oid::pg_catalog.regclass)";

/// The placements of the reference table of OID $1 on primary nodes: shard
/// id, host, port, whether it is this node's, whether the node is active,
/// the node's group id (a copy's identity: a disabled node's copy may be
/// dropped and made again with a new placement id, while a node removed and
/// added again gets a new group).
pub const REFERENCE_TABLE_PLACEMENTS: &str = "SELECT s.shardid, n.nodename::pg_catalog.text, n.nodeport, \
     n.groupid OPERATOR(pg_catalog.=) (SELECT groupid FROM pg_catalog.pg_dist_local_group), \
     n.isactive, p.groupid::pg_catalog.int8 \
     FROM pg_catalog.pg_dist_shard s \
     JOIN pg_catalog.pg_dist_placement p ON p.shardid OPERATOR(pg_catalog.=) s.shardid \
     JOIN pg_catalog.pg_dist_node n ON n.groupid OPERATOR(pg_catalog.=) p.groupid \
     AND n.noderole OPERATOR(pg_catalog.=) 'primary' \
     WHERE s.logicalrelid OPERATOR(pg_catalog.=) $1::pg_catalog.oid::pg_catalog.regclass \
     AND EXISTS (SELECT FROM pg_catalog.pg_dist_partition d \
       WHERE d.logicalrelid OPERATOR(pg_catalog.=) s.logicalrelid \
       AND d.partmethod OPERATOR(pg_catalog.=) 'n' AND d.repmodel OPERATOR(pg_catalog.=) 't') \
     ORDER BY n.nodename, n.nodeport";

/// Let this transaction's catalog queries see Citus' shards.
pub const SHOW_SHARDS: &str =
    "SELECT pg_catalog.set_config('citus.override_table_visibility', 'off', true)";

/// Let the worker's transaction write a shard directly.
pub const ALLOW_SHARD_WRITES: &str =
    "SELECT pg_catalog.set_config('citus.enable_manual_changes_to_shards', 'on', true)";

/// A DO statement that sets each (setting, value) with `SET LOCAL` and Citus'
/// SET propagation on, so that the sessions Citus opens on other nodes in
/// the transaction get them too (`transaction::force_remote_settings`).
/// `SET` takes no parameters, so the names and values are written into the
/// text: only the worker's own constants (`'static`), and only letters,
/// digits, `_` and `.` (anything else panics: nothing can end the literal
/// or the dollar quote).
pub fn set_local_propagated(settings: &[(&'static str, &'static str)]) -> String {
    let plain = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    };
    let mut body = String::from("SET LOCAL citus.propagate_set_commands = 'local';\n");
    for (name, value) in settings {
        assert!(
            plain(name) && plain(value),
            "not a plain setting: {name} = {value}"
        );
        body.push_str(&format!("SET LOCAL {name} = '{value}';\n"));
    }
    format!("DO $leaf_id_remote$\nBEGIN\n{body}END\n$leaf_id_remote$")
}

/// Run $3 (one statement per node) on hosts $1, ports $2, in parallel.
pub const RUN_ON_WORKERS_PARALLEL: &str = "SELECT node_name, node_port, success, result \
     FROM pg_catalog.master_run_on_worker($1, $2, $3, true)";

/// Run $3 on host $1, port $2 (arrays of one).
pub const RUN_ON_WORKER: &str =
    "SELECT success, result FROM pg_catalog.master_run_on_worker($1, $2, $3, false)";

// --- segment mode: leaf_alloc ------------------------------------------

/// Lock the row of tag $1 by a write (max_id, step).
/// With opaque IDs (catalog 0.4.0 on) also the tag's opaque domain and the
/// fingerprint of the encoding its last refill recorded.
/// With grants (catalog 0.5.0 on) also the row's opaque grant.
/// With tag limits (catalog 0.6.0 on) also its max_value and draw_role.
pub fn alloc_lock_row(s: &Schema, catalog: Catalog) -> String {
    format!(
        "UPDATE {} SET update_time = pg_catalog.now() \
         WHERE biz_tag OPERATOR(pg_catalog.=) $1 RETURNING max_id, step{}{}{}",
        s.table(Table::Alloc),
        if catalog.has_opaque() {
            ", opaque_domain, opaque_check"
        } else {
            ""
        },
        if catalog.has_grants_and_history() {
            ", opaque_grant"
        } else {
            ""
        },
        if catalog.has_tag_limits() {
            ", max_value, draw_role::pg_catalog.text"
        } else {
            ""
        }
    )
}

/// The OID of the role named $1 (`leaf_alloc.draw_role`), on this server.
pub fn role_oid() -> &'static str {
    "SELECT r.oid FROM pg_catalog.pg_authid r WHERE r.rolname OPERATOR(pg_catalog.=) $1::pg_catalog.text"
}

/// Width and key of opaque domain $1.
pub fn opaque_domain_key(s: &Schema) -> String {
    format!(
        "SELECT bits, key FROM {} WHERE name OPERATOR(pg_catalog.=) $1",
        s.table(Table::OpaqueDomain)
    )
}

/// Does tag $1 have a row?
pub fn alloc_row_exists(s: &Schema) -> String {
    format!(
        "SELECT 1 FROM {} WHERE biz_tag OPERATOR(pg_catalog.=) $1",
        s.table(Table::Alloc)
    )
}

/// Record max_id = $2 for tag $1 if it is still $3: every copy of the row
/// must say $3, or the statement fails (`leaf_id_alloc_row_conflict`); a
/// 0.1.0 catalog has no such function and matches in the WHERE clause.
/// With opaque IDs (catalog 0.4.0 on), also records fingerprint $4 of the
/// encoding the range is issued under (`leaf_alloc.opaque_check`); with
/// grants (0.5.0 on), also the grant $5 of the new max_id (NULL: plain).
pub fn alloc_record_end(s: &Schema, catalog: Catalog) -> String {
    let table = s.table(Table::Alloc);
    let check = match (catalog.has_opaque(), catalog.has_grants_and_history()) {
        (true, true) => ", opaque_check = $4, opaque_grant = $5",
        (true, false) => ", opaque_check = $4",
        _ => "",
    };
    if !catalog.has_row_guards() {
        format!(
            "UPDATE {table} SET update_time = pg_catalog.now(), max_id = $2 \
             WHERE biz_tag OPERATOR(pg_catalog.=) $1 AND max_id OPERATOR(pg_catalog.=) $3 RETURNING max_id"
        )
    } else {
        format!(
            "UPDATE {table} SET update_time = pg_catalog.now(), max_id = \
             CASE WHEN max_id OPERATOR(pg_catalog.=) $3 THEN $2 \
             ELSE {}(biz_tag, max_id) END{check} \
             WHERE biz_tag OPERATOR(pg_catalog.=) $1 RETURNING max_id",
            s.function("leaf_id_alloc_row_conflict")
        )
    }
}

/// max_id of tag $1.
pub fn alloc_max_id(s: &Schema) -> String {
    format!(
        "SELECT max_id FROM {} WHERE biz_tag OPERATOR(pg_catalog.=) $1",
        s.table(Table::Alloc)
    )
}

/// max_id and step of tag $1 in this node's copy, read without Citus; with
/// tag limits (catalog 0.6.0 on) also its draw_role.
pub fn shard_alloc_row(shard: &Shard, catalog: Catalog) -> String {
    format!(
        "SELECT max_id, step{} FROM {} WHERE biz_tag OPERATOR(pg_catalog.=) $1",
        if catalog.has_tag_limits() {
            ", draw_role::pg_catalog.text"
        } else {
            ""
        },
        shard.qualified
    )
}

/// Every tag.
/// (As the bytes they are stored as, which the slots hold too: a `text`
/// column of a database whose encoding is not UTF-8 need not be UTF-8,
/// and is never taken for Rust characters.)
pub fn alloc_tags(s: &Schema) -> String {
    format!(
        "SELECT pg_catalog.convert_to(biz_tag, pg_catalog.getdatabaseencoding()) FROM {}",
        s.table(Table::Alloc)
    )
}

/// Which of the tags in array $1 have a row (as their stored bytes, as above).
pub fn alloc_tags_among(s: &Schema) -> String {
    format!(
        "SELECT pg_catalog.convert_to(biz_tag, pg_catalog.getdatabaseencoding()) FROM {} WHERE biz_tag OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[])",
        s.table(Table::Alloc)
    )
}

/// The tuned step of tag $1.
pub fn tuned_step(s: &Schema) -> String {
    format!(
        "SELECT tuned_step FROM {} WHERE biz_tag OPERATOR(pg_catalog.=) $1",
        s.table(Table::AllocTuning)
    )
}

/// Save step $2 of tag $1.
pub fn save_tuned_step(s: &Schema) -> String {
    format!(
        "INSERT INTO {} AS t (biz_tag, tuned_step, update_time) \
         VALUES ($1, $2, pg_catalog.now()) ON CONFLICT (biz_tag) DO UPDATE \
         SET tuned_step = EXCLUDED.tuned_step, update_time = pg_catalog.now()",
        s.table(Table::AllocTuning)
    )
}

/// The encoding (fingerprint) tag $1 has issued under and the end of all
/// that was reserved for it, kept when its row is deleted (catalog 0.5.0
/// on).
pub fn alloc_encoding_of(s: &Schema) -> String {
    format!(
        "SELECT opaque_check, reserved_end FROM {} WHERE biz_tag OPERATOR(pg_catalog.=) $1",
        s.table(Table::AllocEncoding)
    )
}

/// Raise the recorded end of tag $1 to $2 (the refill reads it back: a
/// trigger or rule must not skip or lower it).
pub fn record_alloc_end(s: &Schema) -> String {
    format!(
        "UPDATE {} SET reserved_end = pg_catalog.int8larger(reserved_end, $2) \
         WHERE biz_tag OPERATOR(pg_catalog.=) $1",
        s.table(Table::AllocEncoding)
    )
}

/// Record encoding $2 for tag $1 unless one is recorded.
pub fn record_alloc_encoding(s: &Schema) -> String {
    format!(
        "INSERT INTO {} (biz_tag, opaque_check) VALUES ($1, $2) ON CONFLICT (biz_tag) DO NOTHING",
        s.table(Table::AllocEncoding)
    )
}

// --- snowflake mode: leaf_worker ---------------------------------------

/// The registry: worker_id, node_name, owner_token, last_timestamp.
pub fn worker_registry(s: &Schema) -> String {
    format!(
        "SELECT worker_id, node_name, owner_token, last_timestamp FROM {}",
        s.table(Table::Worker)
    )
}

/// Take the free worker id $1 for node $2 with token $3.
pub fn worker_insert(s: &Schema) -> String {
    format!(
        "INSERT INTO {} (worker_id, node_name, owner_token) VALUES ($1, $2, $3) \
         ON CONFLICT DO NOTHING RETURNING worker_id",
        s.table(Table::Worker)
    )
}

/// Take over released id $1 (named $3) for node $2 with token $4.
pub fn worker_take_released(s: &Schema) -> String {
    format!(
        "UPDATE {} SET node_name = $2, owner_token = $4 \
         WHERE worker_id OPERATOR(pg_catalog.=) $1 AND node_name OPERATOR(pg_catalog.=) $3 RETURNING worker_id",
        s.table(Table::Worker)
    )
}

/// Release id $1 of node $2 (renamed $3), keeping its mark, if it has the
/// token $4 read (0: none), and that token is this server's $5 or its
/// lease is before $6; every copy must agree.
pub fn worker_release(s: &Schema) -> String {
    format!(
        "UPDATE {} SET node_name = CASE \
         WHEN node_name OPERATOR(pg_catalog.=) $2 AND COALESCE(owner_token, 0) OPERATOR(pg_catalog.=) $4 \
         AND (owner_token IS NULL OR owner_token OPERATOR(pg_catalog.=) $5 \
              OR COALESCE(last_timestamp, -1) OPERATOR(pg_catalog.<) $6) THEN $3 \
         ELSE {}(worker_id, node_name, owner_token)::pg_catalog.text END, owner_token = NULL \
         WHERE worker_id OPERATOR(pg_catalog.=) $1",
        s.table(Table::Worker),
        s.function("leaf_id_worker_row_conflict")
    )
}

/// The mark and its epoch of id $1.
pub fn worker_mark(s: &Schema) -> String {
    format!(
        "SELECT last_timestamp, epoch_ms FROM {} WHERE worker_id OPERATOR(pg_catalog.=) $1",
        s.table(Table::Worker)
    )
}

/// The mark and its epoch of id $1 on this node's copy of leaf_worker.
pub fn shard_worker_mark(shard: &Shard) -> String {
    format!(
        "SELECT last_timestamp, epoch_ms FROM {} WHERE worker_id OPERATOR(pg_catalog.=) $1",
        shard.qualified
    )
}

/// Take back id $1 of node $2 from token $3 (0: none) for token $4, when
/// its lease is before $5 or it has no token, and its pin is $6, $7 (as
/// checked); every copy must agree.
pub fn worker_take_back(s: &Schema) -> String {
    format!(
        "UPDATE {} SET owner_token = CASE \
         WHEN node_name OPERATOR(pg_catalog.=) $2 AND COALESCE(owner_token, 0) OPERATOR(pg_catalog.=) $3 \
         AND (owner_token IS NULL OR COALESCE(last_timestamp, -1) OPERATOR(pg_catalog.<) $5) \
         AND copies IS NOT DISTINCT FROM $6::pg_catalog.int8[] \
         AND holder_copy IS NOT DISTINCT FROM $7::pg_catalog.int8 THEN $4 \
         ELSE {}(worker_id, node_name, owner_token) END \
         WHERE worker_id OPERATOR(pg_catalog.=) $1 \
         RETURNING worker_id",
        s.table(Table::Worker),
        s.function("leaf_id_worker_row_conflict")
    )
}

/// Raise the mark of id $2 to at least $1 (epoch $4) if node $3 with token
/// $5 holds it; every copy must agree.
pub fn worker_renew(s: &Schema) -> String {
    renew_in(s, &s.table(Table::Worker))
}

/// `worker_renew` on this node's copy of leaf_worker only (55006 when the
/// row is not this node's with this token).
pub fn shard_worker_renew(s: &Schema, shard: &Shard) -> String {
    renew_in(s, &shard.qualified)
}

fn renew_in(s: &Schema, relation: &str) -> String {
    format!(
        "UPDATE {relation} SET last_timestamp = \
         CASE WHEN node_name OPERATOR(pg_catalog.=) $3 AND owner_token OPERATOR(pg_catalog.=) $5 \
         THEN GREATEST(last_timestamp, $1) \
         ELSE {}(worker_id, node_name, owner_token) END, \
         epoch_ms = $4, heartbeat_at = pg_catalog.now() \
         WHERE worker_id OPERATOR(pg_catalog.=) $2 \
         RETURNING last_timestamp, copies, holder_copy",
        s.function("leaf_id_worker_row_conflict")
    )
}

/// The copies id $1's lease counts and the holder's own (`citus::copies::Pin`).
pub fn worker_pin_read(s: &Schema) -> String {
    format!(
        "SELECT copies, holder_copy FROM {} WHERE worker_id OPERATOR(pg_catalog.=) $1",
        s.table(Table::Worker)
    )
}

/// What a new pin of a worker id's copies asks of the pin before it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PinOver {
    /// Nothing: the row's first pin, or one that replaces any.
    Any,
    /// Every copy still pins the copies in $6.
    Pinned,
}

/// Pin copies $4 (holder's own $5) in the row of id $1 if node $2 with
/// token $3 holds it (and, `PinOver::Pinned`, if every copy still pins
/// $6); every copy must agree.
pub fn worker_set_pin(s: &Schema, over: PinOver) -> String {
    let old = match over {
        PinOver::Pinned => " AND copies IS NOT DISTINCT FROM $6::pg_catalog.int8[]",
        PinOver::Any => "",
    };
    format!(
        "UPDATE {} SET holder_copy = CASE \
         WHEN node_name OPERATOR(pg_catalog.=) $2 AND owner_token OPERATOR(pg_catalog.=) $3{old} \
         THEN $5::pg_catalog.int8 ELSE {}(worker_id, node_name, owner_token) END, \
         copies = $4::pg_catalog.int8[] \
         WHERE worker_id OPERATOR(pg_catalog.=) $1 \
         RETURNING worker_id",
        s.table(Table::Worker),
        s.function("leaf_id_worker_row_conflict")
    )
}

/// Close id $2 of node $3 with token $6: the mark goes down to $1 unless
/// someone raised it above the lease $5 (epoch $4); the token goes if $7.
pub fn worker_close(s: &Schema) -> String {
    format!(
        "UPDATE {} SET last_timestamp = \
         CASE WHEN node_name OPERATOR(pg_catalog.<>) $3 OR owner_token IS NULL \
         OR owner_token OPERATOR(pg_catalog.<>) $6 \
         THEN {}(worker_id, node_name, owner_token) \
         WHEN last_timestamp OPERATOR(pg_catalog.>) $5 THEN last_timestamp ELSE $1 END, \
         owner_token = CASE WHEN $7 THEN NULL ELSE owner_token END, \
         epoch_ms = $4, heartbeat_at = pg_catalog.now() \
         WHERE worker_id OPERATOR(pg_catalog.=) $2 \
         RETURNING last_timestamp",
        s.table(Table::Worker),
        s.function("leaf_id_worker_row_conflict")
    )
}

/// Builds, on this server, the DO statement that renews a copy of
/// leaf_worker on another node: $1 lock_timeout (ms, as text), $2 the
/// extension's schema's name, $3 the shard's name, $4 node name, $5 token,
/// $6 mark, $7 epoch, $8 worker id, $9 the message when the row is missing,
/// $10 the tables' schema's name (the extension's before catalog 0.7.0;
/// its own schema, which only superusers may rename, from 0.7.0). The body is
/// quoted by %L, every name by %I and every value by %L. The remote commit
/// is synchronous, so an acknowledged copy is durable.
///
/// Before it writes, the block makes sure that the shard it names is that
/// node's copy and nobody else's code (the shard is found by name there, and
/// with `citus.enable_manual_changes_to_shards` the owner of the schema can
/// drop it and make a look-alike with a trigger, which the superuser's update
/// would fire): the schema is locked by its row and must be the extension's,
/// the relation is locked under its name, and it must then be a plain table
/// of the extension's owner without triggers, rules or row security (42501).
pub const BUILD_REMOTE_RENEWAL: &str = "SELECT pg_catalog.format('DO %L', pg_catalog.format(\
     'BEGIN \
     PERFORM pg_catalog.set_config(''search_path'', ''pg_catalog, pg_temp'', true); \
     PERFORM pg_catalog.set_config(''synchronous_commit'', ''on'', true); \
     PERFORM pg_catalog.set_config(''lock_timeout'', %L, true); \
     PERFORM pg_catalog.set_config(''citus.enable_manual_changes_to_shards'', ''on'', true); \
     PERFORM pg_catalog.set_config(''citus.override_table_visibility'', ''off'', true); \
     PERFORM 1 FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_extension e \
     ON e.extnamespace OPERATOR(pg_catalog.=) n.oid \
     WHERE e.extname OPERATOR(pg_catalog.=) ''leaf_id'' AND n.nspname OPERATOR(pg_catalog.=) %L FOR SHARE OF n; \
     IF NOT FOUND THEN RAISE EXCEPTION USING MESSAGE = %L, ERRCODE = ''55000''; END IF; \
     LOCK TABLE %I.%I IN ROW EXCLUSIVE MODE; \
     IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_extension e \
     ON e.extname OPERATOR(pg_catalog.=) ''leaf_id'' \
     WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(%L) AND c.relkind OPERATOR(pg_catalog.=) ''r'' \
     AND c.relowner OPERATOR(pg_catalog.=) e.extowner AND NOT c.relhastriggers AND NOT c.relhasrules \
     AND NOT c.relrowsecurity) \
     THEN RAISE EXCEPTION USING MESSAGE = %L, ERRCODE = ''42501''; END IF; \
     UPDATE %I.%I SET last_timestamp = \
     CASE WHEN node_name OPERATOR(pg_catalog.=) %L AND owner_token OPERATOR(pg_catalog.=) %L::pg_catalog.int8 \
     THEN GREATEST(last_timestamp, %L::pg_catalog.int8) \
     ELSE %I.leaf_id_worker_row_conflict(worker_id, node_name, owner_token) END, \
     epoch_ms = %L::pg_catalog.int8, heartbeat_at = pg_catalog.now() \
     WHERE worker_id OPERATOR(pg_catalog.=) %L::pg_catalog.int4; \
     IF NOT FOUND THEN RAISE EXCEPTION USING MESSAGE = %L, ERRCODE = ''55000''; END IF; \
     END', $1::pg_catalog.text, \
     $2::pg_catalog.text, \
     pg_catalog.format('leaf_id''s schema is not %I on this node', $2::pg_catalog.text), \
     $10::pg_catalog.text, $3::pg_catalog.text, \
     pg_catalog.format('%I.%I', $10::pg_catalog.text, $3::pg_catalog.text), \
     pg_catalog.format('%I.%I on this node is not leaf_id''s copy of leaf_worker (not a plain table of the \
extension''s owner without triggers, rules or row security): the renewal is refused', \
     $10::pg_catalog.text, $3::pg_catalog.text), \
     $10::pg_catalog.text, $3::pg_catalog.text, $4::pg_catalog.text, \
     $5::pg_catalog.int8, $6::pg_catalog.int8, $2::pg_catalog.text, $7::pg_catalog.int8, \
     $8::pg_catalog.int4, $9::pg_catalog.text))";

/// Builds, on this server, the query that reads the mark of a worker id on
/// another node's copy: $1 the tables' schema's name, $2 the shard's name, $3 the
/// worker id. Answers "mark,epoch", or "refused" when the relation it read
/// is not the extension's copy (`REMOTE_MARK_REFUSED`).
///
/// The shard is found by name on that node (see `BUILD_REMOTE_RENEWAL`), so
/// the query touches nothing of the relation but its `tableoid` until that
/// is known to be a plain table of the extension's owner without triggers,
/// rules or row security: a look-alike view has no `tableoid` (the query
/// fails to parse), and a look-alike table's columns, whose types and casts
/// could be its owner's code, are read only inside the CASE that checked it.
pub const BUILD_REMOTE_MARK_READ: &str = "SELECT pg_catalog.format(\
     'SELECT pg_catalog.max(CASE WHEN (SELECT c.relkind OPERATOR(pg_catalog.=) ''r'' \
     AND c.relowner OPERATOR(pg_catalog.=) e.extowner AND NOT c.relhastriggers AND NOT c.relhasrules \
     AND NOT c.relrowsecurity FROM pg_catalog.pg_class c JOIN pg_catalog.pg_extension e \
     ON e.extname OPERATOR(pg_catalog.=) ''leaf_id'' WHERE c.oid OPERATOR(pg_catalog.=) w.tableoid) \
     THEN CASE WHEN w.worker_id OPERATOR(pg_catalog.=) %L::pg_catalog.int4 \
     THEN pg_catalog.concat_ws('','', w.last_timestamp, w.epoch_ms) END \
     ELSE ''refused'' END) FROM %I.%I w', \
     $3::pg_catalog.int4, $1::pg_catalog.text, $2::pg_catalog.text)";

/// `BUILD_REMOTE_MARK_READ`'s answer when the copy is not the extension's.
pub const REMOTE_MARK_REFUSED: &str = "refused";

/// The names `BUILD_REMOTE_RENEWAL` and `BUILD_REMOTE_MARK_READ` take, as
/// text (bound, never pasted).
pub struct RemoteNames<'a> {
    /// The extension's schema (its functions).
    pub schema: &'a str,
    /// The schema of its tables, and so of their shards.
    pub tables_schema: &'a str,
    /// The shard's relation name.
    pub shard: &'a str,
}

/// The names of a remote renewal's or mark read's statement.
pub fn remote_names<'a>(s: &'a Schema, shard: &'a Shard) -> RemoteNames<'a> {
    RemoteNames {
        schema: &s.name,
        tables_schema: &s.tables_name,
        shard: &shard.relname,
    }
}

/// A statement built on the server (`BUILD_REMOTE_*`) from bound values.
pub fn build_on_server(
    client: &mut SpiClient,
    builder: &str,
    args: &[pgrx::datum::DatumWithOid],
) -> Result<String, JobError> {
    client
        .select(builder, None, args)
        .map_err(spi_err)?
        .first()
        .get::<String>(1)
        .map_err(spi_err)?
        .ok_or_else(|| {
            JobError::new(
                pgrx::PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                "leaf_id could not build a statement for another node",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::set_local_propagated;
    use super::{Schema, Table, alloc_lock_row, alloc_record_end, shard_alloc_row};
    use crate::runtime::catalog::Catalog;

    /// A schema as `installed_extension` makes it on catalog 0.7.0.
    fn schema() -> Schema {
        Schema {
            quoted: "ext".into(),
            name: "ext".into(),
            tables_quoted: "leaf_id_catalog".into(),
            tables_name: "leaf_id_catalog".into(),
            tables_oid: pgrx::pg_sys::Oid::INVALID,
        }
    }

    /// The text of the builders that differ by catalog version, for one
    /// version: `alloc_lock_row`, `alloc_record_end`, `shard_alloc_row`.
    fn built(version: &str) -> [String; 3] {
        let s = schema();
        let catalog = Catalog::from_version(version).expect("a version served");
        [
            alloc_lock_row(&s, catalog),
            alloc_record_end(&s, catalog),
            shard_alloc_row(&s.shard(Table::Alloc, 7), catalog),
        ]
    }

    /// Each catalog version's statements, word for word.
    #[test]
    fn catalog_versions_statements_are_pinned() {
        const LOCK: &str = "UPDATE leaf_id_catalog.leaf_alloc SET update_time = pg_catalog.now() \
             WHERE biz_tag OPERATOR(pg_catalog.=) $1 RETURNING max_id, step";
        const OPAQUE: &str = ", opaque_domain, opaque_check";
        const GRANT: &str = ", opaque_grant";
        const LIMITS: &str = ", max_value, draw_role::pg_catalog.text";
        const LEGACY_END: &str = "UPDATE leaf_id_catalog.leaf_alloc SET update_time = pg_catalog.now(), \
             max_id = $2 WHERE biz_tag OPERATOR(pg_catalog.=) $1 AND max_id OPERATOR(pg_catalog.=) $3 \
             RETURNING max_id";
        let end = |check: &str| {
            format!(
                "UPDATE leaf_id_catalog.leaf_alloc SET update_time = pg_catalog.now(), max_id = \
                 CASE WHEN max_id OPERATOR(pg_catalog.=) $3 THEN $2 \
                 ELSE ext.leaf_id_alloc_row_conflict(biz_tag, max_id) END{check} \
                 WHERE biz_tag OPERATOR(pg_catalog.=) $1 RETURNING max_id"
            )
        };
        const SHARD: &str = "SELECT max_id, step FROM leaf_id_catalog.leaf_alloc_7 \
             WHERE biz_tag OPERATOR(pg_catalog.=) $1";
        const SHARD_LIMITS: &str = "SELECT max_id, step, draw_role::pg_catalog.text \
             FROM leaf_id_catalog.leaf_alloc_7 WHERE biz_tag OPERATOR(pg_catalog.=) $1";
        let no_check = end("");
        let check = end(", opaque_check = $4");
        let check_grant = end(", opaque_check = $4, opaque_grant = $5");
        let lock_opaque = format!("{LOCK}{OPAQUE}");
        let lock_grant = format!("{LOCK}{OPAQUE}{GRANT}");
        let lock_all = format!("{LOCK}{OPAQUE}{GRANT}{LIMITS}");
        let expected: [(&str, &str, &str, &str); 9] = [
            ("0.1.0", LOCK, LEGACY_END, SHARD),
            ("0.2.0", LOCK, &no_check, SHARD),
            ("0.3.0", LOCK, &no_check, SHARD),
            ("0.4.0", &lock_opaque, &check, SHARD),
            ("0.5.0", &lock_grant, &check_grant, SHARD),
            ("0.5.1", &lock_grant, &check_grant, SHARD),
            ("0.5.2", &lock_grant, &check_grant, SHARD),
            ("0.6.0", &lock_all, &check_grant, SHARD_LIMITS),
            ("0.7.0", &lock_all, &check_grant, SHARD_LIMITS),
        ];
        assert_eq!(expected.map(|e| e.0), Catalog::ALL.map(|c| c.as_str()));
        for (version, lock, record_end, shard) in expected {
            let [got_lock, got_end, got_shard] = built(version);
            assert_eq!(got_lock, lock, "alloc_lock_row on {version}");
            assert_eq!(got_end, record_end, "alloc_record_end on {version}");
            assert_eq!(got_shard, shard, "shard_alloc_row on {version}");
        }
    }

    /// Only plain constants reach `SET LOCAL`'s text.
    #[test]
    fn set_local_propagated_writes_only_plain_constants() {
        let sql = set_local_propagated(&[("statement_timeout", "0"), ("lock_timeout", "5s")]);
        assert!(sql.contains("SET LOCAL lock_timeout = '5s';"));
        for bad in [
            ("lock_timeout", "1'; DROP"),
            ("x$leaf_id_remote$", "0"),
            ("a", ""),
        ] {
            assert!(std::panic::catch_unwind(|| set_local_propagated(&[bad])).is_err());
        }
    }

    /// Nothing outside this module formats SQL text: no `format!` whose
    /// text starts a statement (a new one that pastes a name or value into
    /// SQL must be written here, where the rules are).
    #[test]
    fn no_other_module_formats_sql() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut offenders = Vec::new();
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs")
                    || path.ends_with("runtime/worker_sql.rs")
                    || path.ends_with("pg_tests.rs")
                {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
                for kw in [
                    "SELECT ", "UPDATE ", "INSERT ", "DELETE ", "DO ", "WITH ", "LOCK ",
                ] {
                    for open in ["format!(\"", "format!( \"", "format!(r\"", "format!(r#\""] {
                        if flat.contains(&format!("{open}{kw}")) {
                            offenders.push(format!("{}: {open}{kw}", path.display()));
                        }
                    }
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "SQL formatted outside worker_sql: {offenders:?}"
        );
    }
}
