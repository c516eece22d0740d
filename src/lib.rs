//! leaf_id: Meituan Leaf's distributed IDs inside PostgreSQL.
//!
//! One folder per concern (docs/architecture.md):
//! - `segment` and `snowflake`: each mode, its pure core (plain Rust, unit
//!   tested with `cargo test`), its SQL functions (`functions`) and its worker
//!   jobs;
//! - `runtime`: what both modes share inside Postgres (shared memory, the
//!   background worker and its loop, the hardened session, the one module
//!   that builds the workers' SQL, waiting on the worker, the owner file,
//!   the clock);
//! - `citus`: the copies of a reference table, the renewal helpers, the
//!   guard functions;
//! - `settings` (every GUC) and `errors` (SQLSTATEs) at the top.
//!
//! Arrows point one way: a mode's SQL surface and jobs use `runtime` and
//! `citus`, which use the pure core; only `runtime::worker_loop` knows both
//! modes' jobs. `scripts/check-imports.py` (run by the test command) fails
//! on an import circle.
//!
//! Every `unsafe` block and impl says why it is sound there, in a
//! `// SAFETY:` comment: the lint is denied, and the test command's first
//! step runs clippy with warnings denied (scripts/test.sh). pgrx's macros'
//! own unsafe code is not checked by it (clippy skips proc-macro output).
#![deny(clippy::undocumented_unsafe_blocks)]

use pgrx::prelude::*;

pub mod citus;
pub mod errors;
pub mod runtime;
pub mod segment;
pub mod settings;
pub mod snowflake;

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!("../sql/finish.sql", name = "finish", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    check_server_minor();
    // SAFETY: a bool global of this process that PostgreSQL sets around loading
    // shared_preload_libraries; read by value on the one thread that runs `_PG_init`.
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    settings::register(preloading);
    if !preloading {
        // functions raise a clear error; nothing else to do without shared memory
        return;
    }
    if let Err(why) = snowflake::functions::check_epoch() {
        errors::raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, why, None);
    }
    runtime::shmem::install_hooks();
}

/// Refuse a minor release older than `pg_version::MIN_SERVER_VERSION_NUM`
/// (its record of synchronous standbys has another layout).
fn check_server_minor() {
    use runtime::pg_version::{MAJOR, MIN_SERVER_VERSION_NUM};
    // SAFETY: the name is a 'static NUL-terminated string; server_version_num always exists (else
    // missing_ok = false would raise), and no privilege is checked, so no catalog is read. The
    // result is NULL or a NUL-terminated string valid until the next GetConfigOption call.
    let running = unsafe { pg_sys::GetConfigOption(c"server_version_num".as_ptr(), false, false) };
    let running = (!running.is_null())
        .then(|| {
            // SAFETY: `running` is non-null (checked above) and NUL-terminated, and nothing calls
            // GetConfigOption again before `to_string_lossy` has copied it.
            unsafe { std::ffi::CStr::from_ptr(running) }
                .to_string_lossy()
                .parse::<i64>()
                .ok()
        })
        .flatten()
        .unwrap_or(0);
    if running < MIN_SERVER_VERSION_NUM {
        errors::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!(
                "leaf_id needs PostgreSQL {MAJOR}.{} or later; this server's server_version_num is {running}",
                MIN_SERVER_VERSION_NUM % 100
            ),
            Some(&format!(
                "Update the server to the latest minor release of PostgreSQL {MAJOR}."
            )),
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
