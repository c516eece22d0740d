//! Segment mode on Citus: a reserve of IDs that a server keeps for itself,
//! for refills while a node with a copy of `leaf_alloc` is down.
//! Pure but for its file's read and write: no pgrx, no SQL.
//!
//! A refill through Citus needs every copy of `leaf_alloc`. So while the
//! cluster is whole, a refill also reserves a few segments more than it
//! hands out (they are recorded in `leaf_alloc.max_id` like any range, so no
//! other server takes them) and keeps them here. When a refill through Citus
//! fails, the next segment comes from this reserve instead, without Citus.
//!
//! The reserve lives in a file of the data directory, one per database,
//! written durably before any ID of it is handed out, and bound to the
//! server's owner token (`owner_file`): a restart of the same data directory
//! goes on with it (also while a node is down), a copy of the server or a
//! promoted standby never uses it (no file, or another token), so the two
//! cannot hand out the same range. A range is used only while the tag's row
//! in this server's copy of `leaf_alloc` is the one it was reserved from:
//! `max_id` at least the end of this server's reservations. A row deleted
//! and inserted again below that (`max_id = max(id) + 1`), or moved back,
//! drops the tag's reserve: those IDs may be handed out again by others.
//!
//! Each write of the file also carries a fresh nonce, recorded outside the
//! data directory for this boot (`owner_file::BootRecord`); a file is used
//! only if its nonce is the one recorded. A file brought back by a restore
//! of the data directory in place (from a snapshot of the running server,
//! a volume rolled back) is an older write, and is void.

/// A tag's reserve: ranges `[start, end)` reserved from `leaf_alloc` and not
/// handed out, lowest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagReserve {
    pub tag: String,
    /// `leaf_alloc`'s OID when the ranges were reserved: the extension
    /// dropped and created again has a new table.
    pub table_oid: u32,
    /// The highest `max_id` this server's reservations set for the tag.
    pub reserved_through: i64,
    pub ranges: Vec<(i64, i64)>,
}

impl TagReserve {
    pub fn remaining(&self) -> i64 {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }
}

/// The reserve of one database of one server lifetime's token.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reserve {
    pub token: i64,
    pub tags: Vec<TagReserve>,
}

/// Why `take` gave nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRange {
    /// Nothing reserved for the tag (or all of it handed out).
    Empty,
    /// The tag's row is not the one the ranges came from: its reserve was
    /// dropped.
    RowChanged,
}

impl Reserve {
    pub fn new(token: i64) -> Reserve {
        Reserve {
            token,
            tags: Vec::new(),
        }
    }

    fn find(&self, tag: &str) -> Option<usize> {
        self.tags.iter().position(|t| t.tag == tag)
    }

    /// IDs left in the tag's reserve (0 if it was reserved from another
    /// table).
    pub fn remaining(&self, tag: &str, table_oid: u32) -> i64 {
        self.find(tag)
            .map(|i| &self.tags[i])
            .filter(|t| t.table_oid == table_oid)
            .map_or(0, TagReserve::remaining)
    }

    /// The highest `max_id` this server's reservations of the tag set (0 if
    /// none, or from another table): a row below it was moved back, or
    /// deleted and inserted again.
    pub fn reserved_through(&self, tag: &str, table_oid: u32) -> i64 {
        self.find(tag)
            .map(|i| &self.tags[i])
            .filter(|t| t.table_oid == table_oid)
            .map_or(0, |t| t.reserved_through)
    }

    /// Forget the tag's reserve (its ranges become gaps).
    /// Does the reserve hold anything of `tag`?
    pub fn has_tag(&self, tag: &str) -> bool {
        self.find(tag).is_some()
    }

    pub fn drop_tag(&mut self, tag: &str) -> bool {
        let before = self.tags.len();
        self.tags.retain(|t| t.tag != tag);
        self.tags.len() != before
    }

    /// Add a range that a committed reservation recorded in `leaf_alloc`
    /// (whose `max_id` it set to `reserved_through`). A reserve of another
    /// table is dropped first.
    pub fn add(&mut self, tag: &str, table_oid: u32, range: (i64, i64), reserved_through: i64) {
        let i = match self.find(tag) {
            Some(i) if self.tags[i].table_oid == table_oid => i,
            Some(i) => {
                self.tags[i] = TagReserve {
                    tag: tag.to_string(),
                    table_oid,
                    reserved_through: 0,
                    ranges: Vec::new(),
                };
                i
            }
            None => {
                self.tags.push(TagReserve {
                    tag: tag.to_string(),
                    table_oid,
                    reserved_through: 0,
                    ranges: Vec::new(),
                });
                self.tags.len() - 1
            }
        };
        let t = &mut self.tags[i];
        t.reserved_through = t.reserved_through.max(reserved_through);
        if range.0 < range.1 {
            t.ranges.push(range);
            t.ranges.sort_unstable();
            // ranges from one table never overlap; adjoining ones merge
            let mut merged: Vec<(i64, i64)> = Vec::new();
            for r in t.ranges.drain(..) {
                match merged.last_mut() {
                    Some(last) if last.1 == r.0 => last.1 = r.1,
                    _ => merged.push(r),
                }
            }
            t.ranges = merged;
        }
    }

    /// Up to `want` IDs from the lowest range of the tag's reserve, as
    /// `(start, len)`, if the tag's row in this server's copy of `leaf_alloc`
    /// (`row_max_id`, None: no row) is still the one they came from.
    pub fn take(
        &mut self,
        tag: &str,
        table_oid: u32,
        row_max_id: Option<i64>,
        want: i64,
    ) -> Result<(i64, i64), NoRange> {
        let Some(i) = self.find(tag) else {
            return Err(NoRange::Empty);
        };
        let t = &self.tags[i];
        let valid = t.table_oid == table_oid && row_max_id.is_some_and(|m| m >= t.reserved_through);
        if !valid {
            self.tags.remove(i);
            return Err(NoRange::RowChanged);
        }
        let t = &mut self.tags[i];
        let Some(first) = t.ranges.first_mut() else {
            return Err(NoRange::Empty);
        };
        let start = first.0;
        let len = want.max(1).min(first.1 - first.0);
        first.0 += len;
        if first.0 >= first.1 {
            t.ranges.remove(0);
        }
        Ok((start, len))
    }

    /// The file's text: a header with the token, then a line per range, and
    /// the nonce of this write.
    pub fn to_text(&self, nonce: u64) -> String {
        let mut s = format!("{HEADER} token={}\n", self.token);
        for t in &self.tags {
            let tag_hex: String = t.tag.bytes().map(|b| format!("{b:02x}")).collect();
            s.push_str(&format!(
                "tag {tag_hex} {} {}\n",
                t.table_oid, t.reserved_through
            ));
            for (start, end) in &t.ranges {
                s.push_str(&format!("range {start} {end}\n"));
            }
        }
        s.push_str(&format!("nonce {nonce}\nend\n"));
        s
    }

    /// The reserve in a file's text, if it is complete, was written under
    /// `token` and is the write whose nonce is `recorded`; else an empty
    /// reserve for `token` (nothing of another server lifetime's token, and
    /// no older write, is ever used).
    pub fn from_text(text: &str, token: i64, recorded: Option<u64>) -> Reserve {
        Self::parse(text)
            .filter(|(r, nonce)| r.token == token && token != 0 && recorded == Some(*nonce))
            .map_or_else(|| Reserve::new(token), |(r, _)| r)
    }

    fn parse(text: &str) -> Option<(Reserve, u64)> {
        let mut lines = text.lines();
        let token = lines
            .next()?
            .strip_prefix(HEADER)?
            .trim()
            .strip_prefix("token=")?
            .parse()
            .ok()?;
        let mut r = Reserve::new(token);
        let mut complete = false;
        let mut nonce = None;
        for line in lines {
            if complete {
                return None;
            }
            let f: Vec<&str> = line.split(' ').collect();
            match f.as_slice() {
                ["tag", hex, oid, through] => {
                    let bytes = (0..hex.len())
                        .step_by(2)
                        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                        .collect::<Option<Vec<u8>>>()?;
                    r.tags.push(TagReserve {
                        tag: String::from_utf8(bytes).ok()?,
                        table_oid: oid.parse().ok()?,
                        reserved_through: through.parse().ok()?,
                        ranges: Vec::new(),
                    });
                }
                ["range", start, end] => {
                    let (start, end): (i64, i64) = (start.parse().ok()?, end.parse().ok()?);
                    let t = r.tags.last_mut()?;
                    if start >= end || end > t.reserved_through {
                        return None;
                    }
                    t.ranges.push((start, end));
                }
                ["nonce", n] => nonce = Some(n.parse().ok()?),
                ["end"] => complete = true,
                _ => return None,
            }
        }
        Some((r, nonce?)).filter(|_| complete)
    }
}

const HEADER: &str = "leaf_id segment reserve v1";

/// The file's name in the data directory, for a database.
pub fn file_name(dboid: u32) -> String {
    format!("pgsql_tmp_leaf_id_reserve_{dboid}")
}

/// Read the database's reserve (empty if there is no file, or one of
/// another token, or not the write whose nonce is `recorded`).
pub fn load(dir: &std::path::Path, dboid: u32, token: i64, recorded: Option<u64>) -> Reserve {
    match std::fs::read_to_string(dir.join(file_name(dboid))) {
        Ok(text) => Reserve::from_text(&text, token, recorded),
        Err(_) => Reserve::new(token),
    }
}

/// Write the reserve durably (write, fsync, rename, fsync the directory):
/// only then may an ID it no longer holds be handed out.
pub fn save(
    dir: &std::path::Path,
    dboid: u32,
    reserve: &Reserve,
    nonce: u64,
) -> std::io::Result<()> {
    use std::io::Write;
    let name = file_name(dboid);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(reserve.to_text(nonce).as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_lowest_ids_first_and_never_twice() {
        let mut r = Reserve::new(7);
        r.add("order", 100, (300, 400), 400);
        r.add("order", 100, (100, 200), 400);
        assert_eq!(r.remaining("order", 100), 200);
        let mut got = Vec::new();
        while let Ok((start, len)) = r.take("order", 100, Some(400), 30) {
            got.extend(start..start + len);
        }
        let expected: Vec<i64> = (100..200).chain(300..400).collect();
        assert_eq!(got, expected);
        assert_eq!(r.take("order", 100, Some(400), 30), Err(NoRange::Empty));
    }

    #[test]
    fn adjoining_ranges_merge() {
        let mut r = Reserve::new(7);
        r.add("t", 1, (10, 20), 20);
        r.add("t", 1, (20, 30), 30);
        assert_eq!(r.tags[0].ranges, vec![(10, 30)]);
        assert_eq!(r.tags[0].reserved_through, 30);
    }

    #[test]
    fn a_row_moved_back_or_gone_drops_the_tags_reserve() {
        for row in [None, Some(399), Some(1)] {
            let mut r = Reserve::new(7);
            r.add("t", 1, (300, 400), 400);
            assert_eq!(r.take("t", 1, row, 10), Err(NoRange::RowChanged), "{row:?}");
            assert_eq!(r.remaining("t", 1), 0);
        }
        // raised by an operator: still the same row
        let mut r = Reserve::new(7);
        r.add("t", 1, (300, 400), 400);
        assert_eq!(r.take("t", 1, Some(5000), 10), Ok((300, 10)));
        assert_eq!(r.reserved_through("t", 1), 400);
        assert_eq!(r.reserved_through("t", 2), 0);
        assert!(r.drop_tag("t"));
        assert_eq!(r.remaining("t", 1), 0);
        assert!(!r.drop_tag("t"));
    }

    #[test]
    fn a_new_table_drops_the_old_tables_reserve() {
        let mut r = Reserve::new(7);
        r.add("t", 1, (300, 400), 400);
        assert_eq!(r.remaining("t", 2), 0);
        assert_eq!(r.take("t", 2, Some(400), 10), Err(NoRange::RowChanged));
        r.add("t", 1, (300, 400), 400);
        r.add("t", 2, (1, 11), 11);
        assert_eq!(r.tags.len(), 1);
        assert_eq!(r.tags[0].ranges, vec![(1, 11)]);
        assert_eq!(r.tags[0].reserved_through, 11);
    }

    #[test]
    fn the_file_keeps_everything_for_the_same_token_only() {
        let mut r = Reserve::new(42);
        r.add("order", 100, (300, 400), 400);
        r.add("tag with spaces 'and quotes' ü", 100, (5, 9), 9);
        let text = r.to_text(7);
        assert_eq!(Reserve::from_text(&text, 42, Some(7)), r);
        assert_eq!(Reserve::from_text(&text, 43, Some(7)), Reserve::new(43));
        assert_eq!(Reserve::from_text(&text, 0, Some(7)), Reserve::new(0));
    }

    #[test]
    fn an_older_write_of_the_file_is_void() {
        // a restore in place brings back a file the record no longer names
        let mut r = Reserve::new(42);
        r.add("order", 100, (300, 400), 400);
        let text = r.to_text(7);
        assert_eq!(Reserve::from_text(&text, 42, Some(8)), Reserve::new(42));
        assert_eq!(
            Reserve::from_text(&text, 42, None),
            Reserve::new(42),
            "no record"
        );
        let no_nonce = text.replace("nonce 7\n", "");
        assert_eq!(Reserve::from_text(&no_nonce, 42, Some(7)), Reserve::new(42));
        let after_end = text.replace("nonce 7\nend\n", "end\nnonce 7\n");
        assert_eq!(
            Reserve::from_text(&after_end, 42, Some(7)),
            Reserve::new(42)
        );
    }

    #[test]
    fn a_damaged_file_gives_an_empty_reserve() {
        let mut r = Reserve::new(42);
        r.add("order", 100, (300, 400), 400);
        let text = r.to_text(7);
        let cut = text.trim_end().trim_end_matches("end");
        assert_eq!(
            Reserve::from_text(cut, 42, Some(7)),
            Reserve::new(42),
            "cut short"
        );
        let bad = text.replace("range 300 400", "range 300 500");
        assert_eq!(
            Reserve::from_text(&bad, 42, Some(7)),
            Reserve::new(42),
            "a range above the reservation"
        );
        let bad = text.replace("range 300 400", "range 400 300");
        assert_eq!(
            Reserve::from_text(&bad, 42, Some(7)),
            Reserve::new(42),
            "an empty range"
        );
        assert_eq!(Reserve::from_text("", 42, Some(7)), Reserve::new(42));
    }

    #[test]
    fn saved_and_loaded_durably() {
        let dir = std::env::temp_dir().join(format!("leaf_id_reserve_test_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = Reserve::new(42);
        r.add("order", 100, (300, 400), 400);
        save(&dir, 5, &r, 9).unwrap();
        assert_eq!(load(&dir, 5, 42, Some(9)), r);
        assert_eq!(load(&dir, 5, 42, Some(8)), Reserve::new(42));
        assert_eq!(load(&dir, 5, 41, Some(9)), Reserve::new(41));
        assert_eq!(load(&dir, 6, 42, Some(9)), Reserve::new(42));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
