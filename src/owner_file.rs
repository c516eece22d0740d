//! The owner token file: Leaf's local worker-id file, made safe for copies.
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

pub fn format(token: i64, id: &Identity) -> String {
    format!(
        "token={token}\nboot_id={}\ndata_dir_dev={}\ndata_dir_ino={}\nport={}\nsystem_identifier={}\n",
        id.boot_id, id.data_dir_dev, id.data_dir_ino, id.port, id.system_identifier
    )
}

fn parse(text: &str) -> Option<(i64, Identity)> {
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
    Some((token, id))
}

/// The token a start with identity `now` may keep from the file's text, if
/// the file was written by this data directory in this boot.
pub fn inherited_token(file_text: &str, now: &Identity) -> Option<i64> {
    let (token, written_by) = parse(file_text)?;
    (token > 0 && !now.boot_id.is_empty() && written_by == *now).then_some(token)
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
/// shared-memory creation: the file's token if this data directory wrote it
/// in this boot, else `fresh`. The file then names this lifetime's token; if
/// it cannot be written, the next start simply gets a fresh token.
pub fn token_for_this_lifetime(
    data_dir: &std::path::Path,
    port: i32,
    system_identifier: u64,
    fresh: i64,
) -> (i64, Result<bool, String>) {
    let Some(id) = identity(data_dir, port, system_identifier) else {
        return (fresh, Ok(false));
    };
    let kept = std::fs::read_to_string(data_dir.join(FILE_NAME))
        .ok()
        .and_then(|text| inherited_token(&text, &id));
    let token = kept.unwrap_or(fresh);
    match write_durably(data_dir, &format(token, &id)) {
        Ok(()) => (token, Ok(kept.is_some())),
        Err(e) => (token, Err(e.to_string())),
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
        assert_eq!(inherited_token(&format(42, &id()), &id()), Some(42));
    }

    #[test]
    fn any_other_start_gets_a_fresh_token() {
        let file = format(42, &id());
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
            assert_eq!(inherited_token(&file, &now), None, "{now:?}");
        }
    }

    #[test]
    fn a_damaged_or_empty_file_gives_no_token() {
        assert_eq!(inherited_token("", &id()), None);
        assert_eq!(inherited_token("token=42\n", &id()), None);
        let text = format(42, &id()).replace("token=42", "token=x");
        assert_eq!(inherited_token(&text, &id()), None);
        assert_eq!(inherited_token(&format(0, &id()), &id()), None);
        let mut no_boot = id();
        no_boot.boot_id = String::new();
        assert_eq!(
            inherited_token(&format(42, &no_boot), &no_boot),
            None,
            "without a boot id nothing can be proven"
        );
    }
}
