//! The owner token file: Leaf's local worker-id file, made safe for copies.
//! Plain files only: must not touch shared memory or run SQL (`shmem` calls it).
//!
//! Each server lifetime holds its snowflake worker id under an owner token
//! (`shmem`). A restart of the *same* data directory may keep the token of
//! the lifetime before it: that lifetime is over (one postmaster per data
//! directory), so the restart holds its row at once, without the registry
//! write a takeover needs. That lets a node restart while a Citus node with
//! a copy of `leaf_worker` is down, as Leaf starts from its local file while
//! ZooKeeper is down.
//!
//! A copy must never inherit the token: two live servers with one token
//! would both pass the registry's owner check. So the file records where it
//! was written (boot of the kernel, data directory's device and inode, port,
//! system identifier), and only a start with all of these equal reuses it.
//! A `pg_basebackup` copy or a standby does not have the file (names that
//! start with `pgsql_tmp` are skipped by base backups and are not in WAL); a
//! file-level copy (`cp -a`, a volume snapshot) has it, but in another data
//! directory or on another boot. A reboot therefore also gets a new token:
//! it takes its row over as any other new holder does.

/// Where the file was written: a start that differs in anything is another
/// server, or one that cannot prove it is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub boot_id: String,
    pub data_dir_dev: u64,
    pub data_dir_ino: u64,
    pub port: i32,
    pub system_identifier: u64,
}

/// The file's name in the data directory.
pub const FILE_NAME: &str = "pgsql_tmp_leaf_id_owner";

pub fn format(token: i64, id: &Identity, start_nonce: u64) -> String {
    format!(
        "token={token}\nboot_id={}\ndata_dir_dev={}\ndata_dir_ino={}\nport={}\nsystem_identifier={}\nstart_nonce={start_nonce}\n",
        id.boot_id, id.data_dir_dev, id.data_dir_ino, id.port, id.system_identifier
    )
}

fn parse(text: &str) -> Option<(i64, Identity, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_string)
    };
    let token: i64 = field("token")?.parse().ok()?;
    let id = Identity {
        boot_id: field("boot_id")?,
        data_dir_dev: field("data_dir_dev")?.parse().ok()?,
        data_dir_ino: field("data_dir_ino")?.parse().ok()?,
        port: field("port")?.parse().ok()?,
        system_identifier: field("system_identifier")?.parse().ok()?,
    };
    let nonce = field("start_nonce")?.parse().ok()?;
    Some((token, id, nonce))
}

/// The token a start with identity `now` may keep from the file's text, if
/// the file was written by this data directory in this boot, by the start
/// whose nonce the record outside the data directory holds (`recorded`).
pub fn inherited_token(file_text: &str, now: &Identity, recorded: Option<u64>) -> Option<i64> {
    let (token, written_by, nonce) = parse(file_text)?;
    (token > 0 && !now.boot_id.is_empty() && written_by == *now && recorded == Some(nonce))
        .then_some(token)
}

/// A record outside the data directory, of `what` (the owner file, a
/// segment reserve file), one per data directory, port and cluster: the
/// nonce the file last written holds. `/dev/shm` is world-writable
/// (sticky), so a record is only believed if the server's user owns it and
/// it is a plain file, and it is written through a new file of a random name.
fn record_path_of(what: &str, id: &Identity) -> std::path::PathBuf {
    std::path::PathBuf::from(format!(
        "/dev/shm/leaf_id_{what}_{}_{}_{}_{}",
        id.system_identifier, id.data_dir_dev, id.data_dir_ino, id.port
    ))
}

/// A record outside the data directory for a file of it (see
/// `record_path_of`); None where the boot cannot be told.
pub struct BootRecord {
    path: std::path::PathBuf,
    owner_uid: u32,
}

impl BootRecord {
    pub fn of(
        what: &str,
        data_dir: &std::path::Path,
        port: i32,
        system_identifier: u64,
    ) -> Option<BootRecord> {
        use std::os::unix::fs::MetadataExt;
        let id = identity(data_dir, port, system_identifier)?;
        let owner_uid = std::fs::metadata(data_dir).ok()?.uid();
        Some(BootRecord {
            path: record_path_of(what, &id),
            owner_uid,
        })
    }

    /// The nonce recorded, if the record is there and trustworthy.
    pub fn read(&self) -> Option<u64> {
        read_record_at(&self.path, self.owner_uid)
    }

    pub fn write(&self, nonce: u64) -> std::io::Result<()> {
        write_record_at(&self.path, nonce)
    }

    /// Forget the record: no file written before is believed any more.
    pub fn remove(&self) -> std::io::Result<()> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// The record's nonce, if the record is a plain file of `uid` (the data
/// directory's owner, that is, the server's user). A name that is no plain
/// file at `lstat` cannot become one later: in a sticky directory only its
/// owner can replace it.
fn read_record_at(path: &std::path::Path, uid: u32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_file() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    text.trim().strip_prefix("start_nonce=")?.parse().ok()
}

fn write_record_at(path: &std::path::Path, nonce: u64) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("{nonce:016x}.tmp"));
    // create_new: never follows or reuses a name someone else planted
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let written = f
        .write_all(format!("start_nonce={nonce}\n").as_bytes())
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// This start's identity; None if the boot cannot be told (not Linux).
fn identity(data_dir: &std::path::Path, port: i32, system_identifier: u64) -> Option<Identity> {
    use std::os::unix::fs::MetadataExt;
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let meta = std::fs::metadata(data_dir).ok()?;
    Some(Identity {
        boot_id: boot_id.trim().to_string(),
        data_dir_dev: meta.dev(),
        data_dir_ino: meta.ino(),
        port,
        system_identifier,
    })
}

/// Write the file durably (write, fsync, rename, fsync the directory).
fn write_durably(dir: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{FILE_NAME}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(FILE_NAME))?;
    std::fs::File::open(dir)?.sync_all()
}

/// The owner token of the lifetime that starts now, from the postmaster at
/// shared-memory creation: the file's token if the previous start of this
/// data directory in this boot wrote it, else `fresh`. The file and the
/// record then name this start (`nonce`, random); if either cannot be
/// written, the next start simply gets a fresh token.
pub fn token_for_this_lifetime(
    data_dir: &std::path::Path,
    port: i32,
    system_identifier: u64,
    fresh: i64,
    nonce: u64,
) -> (i64, Result<bool, String>) {
    let (Some(id), Some(record)) = (
        identity(data_dir, port, system_identifier),
        BootRecord::of("owner", data_dir, port, system_identifier),
    ) else {
        return (fresh, Ok(false));
    };
    let kept = std::fs::read_to_string(data_dir.join(FILE_NAME))
        .ok()
        .and_then(|text| inherited_token(&text, &id, record.read()));
    let token = kept.unwrap_or(fresh);
    // the file first: a crash before the record leaves the two disagreeing,
    // which only costs the next start its token
    let written = write_durably(data_dir, &format(token, &id, nonce))
        .map_err(|e| format!("could not write {FILE_NAME}: {e}"))
        .and_then(|()| {
            record
                .write(nonce)
                .map_err(|e| format!("could not write {}: {e}", record.path.display()))
        });
    match written {
        Ok(()) => (token, Ok(kept.is_some())),
        Err(e) => (token, Err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> Identity {
        Identity {
            boot_id: "b7c1".into(),
            data_dir_dev: 2049,
            data_dir_ino: 131_075,
            port: 5432,
            system_identifier: 7_400_000_000_000_000_001,
        }
    }

    #[test]
    fn the_same_data_directory_in_the_same_boot_keeps_its_token() {
        assert_eq!(
            inherited_token(&format(42, &id(), 9), &id(), Some(9)),
            Some(42)
        );
    }

    #[test]
    fn a_file_restored_in_place_or_without_its_record_gets_a_fresh_token() {
        let file = format(42, &id(), 9);
        // an older start's file brought back: the record names a later start
        assert_eq!(inherited_token(&file, &id(), Some(10)), None);
        // no record (cleared, not ours, unreadable): nothing can be proven
        assert_eq!(inherited_token(&file, &id(), None), None);
        // a file of the previous format has no nonce
        let old = file.replace("start_nonce=9\n", "");
        assert_eq!(inherited_token(&old, &id(), Some(9)), None);
    }

    #[test]
    fn a_record_is_believed_only_as_a_plain_file_of_the_server_user_written_by_us() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = std::env::temp_dir().join(format!("leaf_id_record_test_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let uid = std::fs::metadata(&dir).unwrap().uid();
        let record = dir.join("leaf_id_owner_1_2_3_4");
        write_record_at(&record, 42).unwrap();
        assert_eq!(read_record_at(&record, uid), Some(42));
        assert_eq!(
            read_record_at(&record, uid + 1),
            None,
            "another user's record"
        );
        std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(
            read_record_at(&record, uid),
            None,
            "a record others may write"
        );
        std::fs::remove_file(&record).unwrap();
        let planted = dir.join("planted");
        std::fs::write(&planted, "start_nonce=42\n").unwrap();
        std::os::unix::fs::symlink(&planted, &record).unwrap();
        assert_eq!(read_record_at(&record, uid), None, "a symbolic link");
        // the temporary name is created anew: a name planted there is refused
        std::fs::remove_file(&record).unwrap();
        std::os::unix::fs::symlink(&planted, record.with_extension(format!("{:016x}.tmp", 7)))
            .unwrap();
        assert!(write_record_at(&record, 7).is_err());
        assert_eq!(
            std::fs::read_to_string(&planted).unwrap(),
            "start_nonce=42\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn any_other_start_gets_a_fresh_token() {
        let file = format(42, &id(), 9);
        let differs: [fn(&mut Identity); 5] = [
            |i| i.boot_id = "other boot".into(), // a reboot, another machine
            |i| i.data_dir_dev = 2050,           // a volume snapshot
            |i| i.data_dir_ino = 9,              // cp -a of the directory
            |i| i.port = 5433,                   // another server's file
            |i| i.system_identifier = 1,         // a new cluster, same path
        ];
        for change in differs {
            let mut now = id();
            change(&mut now);
            assert_eq!(inherited_token(&file, &now, Some(9)), None, "{now:?}");
        }
    }

    #[test]
    fn a_damaged_or_empty_file_gives_no_token() {
        assert_eq!(inherited_token("", &id(), Some(9)), None);
        assert_eq!(inherited_token("token=42\n", &id(), Some(9)), None);
        let text = format(42, &id(), 9).replace("token=42", "token=x");
        assert_eq!(inherited_token(&text, &id(), Some(9)), None);
        assert_eq!(inherited_token(&format(0, &id(), 9), &id(), Some(9)), None);
        let mut no_boot = id();
        no_boot.boot_id = String::new();
        assert_eq!(
            inherited_token(&format(42, &no_boot, 9), &no_boot, Some(9)),
            None,
            "without a boot id nothing can be proven"
        );
    }
}
