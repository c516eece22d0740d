//! The segment reserve's file on this server (Citus): load and save it
//! durably, bound to the owner token and to a nonce recorded outside the
//! data directory, and remove it for `leaf_id_reset_cache()`. Owns the
//! file's I/O; what the reserve holds is `segment::reserve`'s (pure).

use crate::runtime::job_error::JobError;
use crate::runtime::shmem::{data_dir, shared};
use crate::segment::reserve::{self as local_reserve, Reserve};
use pgrx::prelude::*;
use std::sync::atomic::Ordering::SeqCst;

fn reserve_io_error(e: std::io::Error) -> JobError {
    JobError::new(
        PgSqlErrorCode::ERRCODE_IO_ERROR,
        format!("leaf_id could not write its segment reserve file: {e}"),
    )
}

/// `leaf_id_reset_cache()`'s count of resets when this worker last read the
/// reserve file (one segment worker per database and process).
static RESETS_AT_LOAD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Resets of the database's reserve started, and whether one runs now.
fn resets(dboid: u32) -> (u64, bool) {
    shared().map_or((0, false), |sh| {
        let [started, finished] = sh.reserve_resets(dboid);
        let f = finished.load(SeqCst);
        let s = started.load(SeqCst);
        (s, s != f)
    })
}

/// The record outside the data directory of the database's reserve file.
fn reserve_record(dboid: u32) -> Option<crate::runtime::owner_file::BootRecord> {
    crate::runtime::shmem::boot_record(&format!("reserve{dboid}"))
}

/// The database's reserve as its file says: for this lifetime's token, the
/// write the record names, and no reset during or after the read.
pub(crate) fn load_reserve(dboid: u32) -> Reserve {
    let token = shared().expect("shared memory").owner_token();
    let (before, running) = resets(dboid);
    RESETS_AT_LOAD.store(before, SeqCst);
    if running {
        return Reserve::new(token); // a reset may be removing the file
    }
    let recorded = reserve_record(dboid).and_then(|r| r.read());
    let kept = local_reserve::load(&data_dir(), dboid, token, recorded);
    if resets(dboid).0 != before {
        return Reserve::new(token);
    }
    kept
}

/// Whether `leaf_id_reset_cache()` ran since the file was read.
pub(crate) fn reset_since_load(dboid: u32) -> bool {
    resets(dboid).0 != RESETS_AT_LOAD.load(SeqCst)
}

/// Write the reserve with a fresh nonce, the record first (a crash between
/// the two leaves a file the record does not name: void, its ranges gaps);
/// unless a reset came after it was read: then the file the reset removed
/// must not come back, and its ranges are not used.
pub(crate) fn save_reserve(dboid: u32, reserve: &Reserve) -> Result<(), JobError> {
    let nonce = crate::runtime::shmem::random_nonce();
    let saved = match reserve_record(dboid) {
        None => Err(std::io::Error::other(
            "no record outside the data directory can be kept (the boot cannot be told)",
        )),
        Some(record) => record
            .write(nonce)
            .and_then(|()| local_reserve::save(&data_dir(), dboid, reserve, nonce)),
    }
    .map_err(reserve_io_error);
    if reset_since_load(dboid) {
        let _ = std::fs::remove_file(data_dir().join(local_reserve::file_name(dboid)));
        return Err(JobError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "the segment reserve was reset by leaf_id_reset_cache() during the refill".to_string(),
        ));
    }
    saved
}

/// Remove the database's segment reserve file and its record (without the
/// record no older write of the file is used). The reset is counted before
/// and after (`Shared::reserve_resets`), so that a worker that read the
/// file before or meanwhile never uses it or writes it back.
pub fn remove_for_reset(sh: &crate::runtime::shmem::Shared, dboid: u32) {
    let [started, finished] = sh.reserve_resets(dboid);
    started.fetch_add(1, SeqCst);
    let dir = crate::runtime::shmem::data_dir();
    let file = dir.join(local_reserve::file_name(dboid));
    let removed = reserve_record(dboid)
        .map_or(Ok(()), |r| r.remove())
        .and_then(|()| match std::fs::remove_file(&file) {
            Ok(()) => std::fs::File::open(&dir).and_then(|d| d.sync_all()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        });
    finished.fetch_add(1, SeqCst);
    if let Err(e) = removed {
        crate::errors::raise(
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!(
                "could not remove the segment reserve file {}: {e}",
                file.display()
            ),
            None,
        );
    }
}
