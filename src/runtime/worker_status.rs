//! `leaf_id_worker_status()`: this database's two workers as the
//! `leaf_id_worker_status` view shows them (catalog 0.5.2 on): whether each
//! runs, and what its last commit waits for before what it reserved is used
//! (the standby slots of `leaf_id.synchronized_standby_slots` and their lag,
//! or the synchronous standbys). One row per worker, not per tag: a wait
//! holds up every tag of the database (segment) or the whole generator
//! (snowflake).

use crate::runtime::backend;
use crate::runtime::clock::tstz_from_unix_us;
use crate::runtime::shmem::Role;
use pgrx::prelude::*;
use std::sync::atomic::Ordering::SeqCst;

// (the columns' names and types are spelled in the signature, where pgrx
// reads them for the SQL function: no type alias can stand in for them)
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe)]
fn leaf_id_worker_status() -> TableIterator<
    'static,
    (
        name!(mode, String),
        name!(pid, Option<i32>),
        name!(standby_wait, Option<String>),
        name!(standby_wait_since, Option<TimestampWithTimeZone>),
        name!(standby_lag_bytes, Option<i64>),
    ),
> {
    let sh = backend::shared_or_raise();
    let dboid = backend::my_dboid();
    let rows = [(Role::Segment, "segment"), (Role::Snowflake, "snowflake")]
        .into_iter()
        .map(|(role, mode)| {
            // no database slot: neither worker ever ran (or its slot went to
            // another database after both had left it); a look takes none
            let found = sh.find_db_slot(dboid).and_then(|db| {
                let _g = sh.lock_db(db);
                let slot = sh.db(db);
                // the slot may have gone to another database meanwhile
                (slot.dboid.load(SeqCst) == dboid).then(|| {
                    let pid = slot.worker(role).pid.load(SeqCst);
                    (
                        (pid > 0).then_some(pid),
                        slot.standby_wait[role as usize].get(),
                    )
                })
            });
            let (pid, wait) = found.unwrap_or((None, None));
            (
                mode.to_string(),
                pid,
                wait.as_ref().map(|w| w.what.clone()),
                wait.as_ref().and_then(|w| tstz_from_unix_us(w.since_us)),
                wait.as_ref().and_then(|w| w.lag_bytes),
            )
        })
        .collect::<Vec<_>>();
    TableIterator::new(rows)
}
