//! leaf_id: Meituan Leaf's distributed IDs inside PostgreSQL.
//!
//! Pure algorithms: `segment` (double buffer, dynamic step, the reserve kept
//! on Citus) and `snowflake`
//! (layout, generator and clock rules, worker-id claim). Postgres glue:
//! `settings` (GUCs), `shmem` (shared memory), `owner_file` (the owner token kept
//! across restarts of one data directory), `clock` (time conversions), `worker` (the
//! background worker's loop), `segment_worker` and `snowflake_worker` (its jobs),
//! `transaction` (its hardened session and transactions), `backend` (waiting on it),
//! `segment_api` and `snowflake_api` (the SQL functions), `guard_api` (checks
//! run on every copy of a table by the worker's updates), `citus_copies` (the snowflake
//! renewal on a majority of the Citus copies of leaf_worker), `errors`, and
//! `runtime` (what both modes share: `worker_sql`, the one module that
//! builds SQL text; `as_owner`, reading a table as its owner).

use pgrx::prelude::*;

pub mod backend;
pub mod citus_copies;
pub mod clock;
pub mod errors;
pub mod guard_api;
pub mod owner_file;
pub mod renewal_helper;
pub mod runtime;
pub mod segment;
pub mod segment_api;
pub mod segment_worker;
pub mod settings;
pub mod shmem;
pub mod snowflake;
pub mod snowflake_api;
pub mod snowflake_worker;
pub mod transaction;
pub mod worker;

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!("../sql/finish.sql", name = "finish", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    check_server_minor();
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    settings::register(preloading);
    if !preloading {
        // functions raise a clear error; nothing else to do without shared memory
        return;
    }
    if let Err(why) = snowflake_api::check_epoch() {
        errors::raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, why, None);
    }
    shmem::install_hooks();
}

/// PostgreSQL 15.13 changed `WalSndCtl`'s flag of synchronous standbys from
/// a bool to a bit set, which the worker reads to know that a commit reached
/// them (`transaction::commit_replicated`): on an older minor the byte would
/// be misread as "no synchronous standby", and a cut-short wait would pass.
const MIN_SERVER_VERSION_NUM: i64 = 150013;

fn check_server_minor() {
    let running = unsafe { pg_sys::GetConfigOption(c"server_version_num".as_ptr(), false, false) };
    let running = (!running.is_null())
        .then(|| unsafe { std::ffi::CStr::from_ptr(running) }.to_string_lossy().parse::<i64>().ok())
        .flatten()
        .unwrap_or(0);
    if running < MIN_SERVER_VERSION_NUM {
        errors::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("leaf_id needs PostgreSQL 15.13 or later; this server's server_version_num is {running}"),
            Some("Update the server to the latest minor release of PostgreSQL 15."),
        );
    }
}

#[cfg(feature = "pg_test")]
mod pg_tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'leaf_id'"]
    }
}
