//! A session's tags and their (slot, epoch), looked up by the tag's bytes:
//! the last tag first (most calls repeat it: a column default, a bulk
//! insert), then a table. A tag seen before costs no allocation, no copy
//! and no pointer to follow: a short tag (at most `SHORT_TAG_MAX` bytes,
//! nearly every tag) is kept inline in an open-addressing table of 64-byte
//! entries, hashed straight from its bytes and compared in place; a long
//! tag is in a map of its own, and the last tag's buffer is reused. Every
//! tag the session has seen stays (bounded by `insert`'s caller): a
//! session drawing from a thousand tags in turn finds each one, with no
//! eviction to thrash. Pure: no pgrx. The caller keeps it in
//! process-local memory and gives only bytes that passed its checks
//! (UTF-8, a tag's length) to `insert`, so a hit says the bytes passed
//! them.
//!
//! The hash is FxHash's multiply-rotate on 8-byte words, not SipHash: the
//! table is one session's, so a caller who picks colliding tag names slows
//! only its own session, and a short tag costs a few cycles to hash. A
//! tag's last word is read with loads that may overlap the bytes before
//! it, never copied into a buffer first: a copy of a few bytes read back
//! as a word stalls the load behind the stores (store forwarding).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A (slot, epoch) pair: the tag's slot, valid while its epoch is unchanged.
pub type Hit = (usize, u64);

/// FxHash (as rustc's): for each 8-byte word, rotate, xor, multiply.
#[derive(Default)]
pub struct FxHasher(u64);

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(FX_SEED);
    }
}

impl Hasher for FxHasher {
    /// The length, then each whole word, then the last bytes as one word
    /// (`tail_word`): tags of one length hash apart when a byte differs.
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.add(bytes.len() as u64);
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(u64::from_le_bytes(w.try_into().unwrap()));
        }
        if !words.remainder().is_empty() {
            self.add(tail_word(bytes));
        }
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The last `len % 8` bytes of `bytes` (not a multiple of 8 long), held
/// in one word with loads from the slice: the last 8 bytes when there are
/// 8 or more (overlapping a word already hashed), else two 4-byte loads
/// that together cover 4 to 7 bytes, else bytes first, middle and last of
/// 1 to 3. The word depends on every one of the last bytes.
#[inline]
fn tail_word(bytes: &[u8]) -> u64 {
    let n = bytes.len();
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap()) as u64;
    if n >= 8 {
        u64::from_le_bytes(bytes[n - 8..].try_into().unwrap())
    } else if n >= 4 {
        u32_at(0) | (u32_at(n - 4) << 32)
    } else {
        bytes[0] as u64 | ((bytes[n / 2] as u64) << 8) | ((bytes[n - 1] as u64) << 16)
    }
}

/// A tag's hash (as the long tags' map computes it).
#[inline]
fn hash_of(tag: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(tag);
    h.0
}

type FxBuild = BuildHasherDefault<FxHasher>;

/// Tags of at most this many bytes are kept inline in the table.
pub const SHORT_TAG_MAX: usize = 32;
/// The table's first size, in entries (a power of two).
const TABLE_FIRST_SIZE: usize = 16;

/// One entry of the table: a short tag inline (`len` 0: empty; a tag has
/// at least one byte), its hash and its hit. 64 bytes: one cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Entry {
    hash: u64,
    hit: Hit,
    len: u8,
    key: [u8; SHORT_TAG_MAX],
}

const EMPTY: Entry = Entry {
    hash: 0,
    hit: (0, 0),
    len: 0,
    key: [0; SHORT_TAG_MAX],
};

impl Entry {
    #[inline]
    fn is(&self, hash: u64, tag: &[u8]) -> bool {
        self.hash == hash
            && self.len as usize == tag.len()
            && same_bytes(&self.key[..tag.len()], tag)
    }
}

/// Where a tag is in the table, or where it would go.
enum Probe {
    Found(usize),
    Vacant(usize),
}

/// The short tags: open addressing with linear probing, at most half full
/// (so a probe ends at an empty entry), the home entry chosen by the
/// hash's top bits (FxHash's low bits depend only on the tag's low bits).
struct ShortTags {
    entries: Vec<Entry>,
    /// 64 minus log2 of the table's size.
    shift: u32,
    count: usize,
}

impl ShortTags {
    const fn new() -> ShortTags {
        ShortTags {
            entries: Vec::new(),
            shift: 64,
            count: 0,
        }
    }

    #[inline]
    fn probe(&self, hash: u64, tag: &[u8]) -> Probe {
        let mask = self.entries.len() - 1;
        let mut i = (hash >> self.shift) as usize;
        loop {
            let e = &self.entries[i];
            if e.len == 0 {
                return Probe::Vacant(i);
            }
            if e.is(hash, tag) {
                return Probe::Found(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The tag's entry, if it is in the table.
    #[inline]
    fn find(&self, tag: &[u8]) -> Option<usize> {
        if self.count == 0 {
            return None;
        }
        match self.probe(hash_of(tag), tag) {
            Probe::Found(i) => Some(i),
            Probe::Vacant(_) => None,
        }
    }

    /// Puts the tag (at most `SHORT_TAG_MAX` bytes, not empty) in the
    /// table with its hit; returns its entry.
    fn put(&mut self, tag: &[u8], hit: Hit) -> usize {
        if 2 * (self.count + 1) > self.entries.len() {
            self.grow();
        }
        let hash = hash_of(tag);
        match self.probe(hash, tag) {
            Probe::Found(i) => {
                self.entries[i].hit = hit;
                i
            }
            Probe::Vacant(i) => {
                let e = &mut self.entries[i];
                e.hash = hash;
                e.hit = hit;
                e.len = tag.len() as u8;
                e.key = [0; SHORT_TAG_MAX];
                e.key[..tag.len()].copy_from_slice(tag);
                self.count += 1;
                i
            }
        }
    }

    /// The table at twice its size (or its first), every tag moved over.
    fn grow(&mut self) {
        let size = (2 * self.entries.len()).max(TABLE_FIRST_SIZE);
        self.rebuild(size, |_| true);
    }

    /// The table at `size` entries, with the tags that `keep`.
    fn rebuild(&mut self, size: usize, keep: impl Fn(&Entry) -> bool) {
        let old = std::mem::replace(&mut self.entries, vec![EMPTY; size]);
        self.shift = 64 - size.trailing_zeros();
        self.count = 0;
        for e in old.iter().filter(|e| e.len != 0 && keep(e)) {
            let Probe::Vacant(i) = self.probe(e.hash, &e.key[..e.len as usize]) else {
                unreachable!("a tag is in the old table once")
            };
            self.entries[i] = *e;
            self.count += 1;
        }
    }

    /// Takes the tag out (the table rebuilt without it: a rare event, a
    /// tag whose slot changed).
    fn remove(&mut self, tag: &[u8]) {
        if let Some(i) = self.find(tag) {
            let gone = self.entries[i];
            self.rebuild(self.entries.len(), |e| {
                !e.is(gone.hash, &gone.key[..gone.len as usize])
            });
        }
    }

    fn clear(&mut self) {
        self.entries.iter_mut().for_each(|e| *e = EMPTY);
        self.count = 0;
    }
}

/// The tag a session drew from last.
#[derive(Clone, Copy)]
enum Last {
    None,
    /// A short tag: its entry in the table.
    Short(usize),
    /// A long tag: its bytes are in `TagCache::last_long`.
    Long(Hit),
}

/// The session's tags: a table of the short ones, their bytes inline, and
/// a map of the long ones; the last tag is looked at first.
pub struct TagCache {
    short: ShortTags,
    long: HashMap<Box<[u8]>, Hit, FxBuild>,
    last: Last,
    /// The last tag's bytes when it is long (the buffer keeps its capacity).
    last_long: Vec<u8>,
}

impl Default for TagCache {
    fn default() -> Self {
        Self::new()
    }
}

impl TagCache {
    pub const fn new() -> TagCache {
        TagCache {
            short: ShortTags::new(),
            long: HashMap::with_hasher(BuildHasherDefault::new()),
            last: Last::None,
            last_long: Vec::new(),
        }
    }

    /// The last tag's hit, if `tag` is the last tag.
    #[inline(always)]
    pub fn last(&self, tag: &[u8]) -> Option<Hit> {
        match self.last {
            Last::Short(i) => {
                let e = &self.short.entries[i];
                // (`Short` names a filled entry; the empty tag is refused
                // here too, so that no hit ever says it passed the checks)
                (is_short(tag)
                    && e.len as usize == tag.len()
                    && same_bytes(&e.key[..tag.len()], tag))
                .then_some(e.hit)
            }
            Last::Long(hit) => same_bytes(&self.last_long, tag).then_some(hit),
            Last::None => None,
        }
    }

    /// The tag's hit, if the session has it (and the tag becomes the last
    /// tag).
    #[inline]
    pub fn get(&mut self, tag: &[u8]) -> Option<Hit> {
        match self.last(tag) {
            Some(hit) => Some(hit),
            None => self.lookup(tag),
        }
    }

    /// The hit of a tag that is not the last tag, if the session has it
    /// (and the tag becomes the last tag). Out of line: the caller's path
    /// for the last tag stays short.
    #[inline(never)]
    pub fn lookup(&mut self, tag: &[u8]) -> Option<Hit> {
        if is_short(tag) {
            let i = self.short.find(tag)?;
            self.last = Last::Short(i);
            return Some(self.short.entries[i].hit);
        }
        let hit = *self.long.get(tag)?;
        self.set_last_long(tag, hit);
        Some(hit)
    }

    /// Remembers the tag's hit (and makes it the last tag). With more than
    /// `bound` tags remembered, forgets them all first.
    pub fn insert(&mut self, tag: &[u8], hit: Hit, bound: usize) {
        if self.len() > bound {
            self.clear();
        }
        if is_short(tag) {
            let i = self.short.put(tag, hit);
            self.last = Last::Short(i);
        } else {
            self.long.insert(tag.into(), hit);
            self.set_last_long(tag, hit);
        }
    }

    /// Forgets the tag (its slot went to another tag, or was freed).
    pub fn forget(&mut self, tag: &[u8]) {
        if is_short(tag) {
            self.short.remove(tag);
        } else {
            self.long.remove(tag);
        }
        self.last = Last::None;
    }

    /// Forgets every tag.
    pub fn clear(&mut self) {
        self.short.clear();
        self.long.clear();
        self.last = Last::None;
    }

    pub fn len(&self) -> usize {
        self.short.count + self.long.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn set_last_long(&mut self, tag: &[u8], hit: Hit) {
        self.last_long.clear();
        self.last_long.extend_from_slice(tag);
        self.last = Last::Long(hit);
    }
}

/// Is the tag kept inline? (Not empty: an empty entry has length 0.)
#[inline]
fn is_short(tag: &[u8]) -> bool {
    !tag.is_empty() && tag.len() <= SHORT_TAG_MAX
}

#[inline]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (a8.remainder(), b8.remainder());
    a8.zip(b8).all(|(x, y)| {
        u64::from_ne_bytes(x.try_into().unwrap()) == u64::from_ne_bytes(y.try_into().unwrap())
    }) && ra.iter().zip(rb).all(|(x, y)| x == y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn an_entry_is_one_cache_line_and_a_short_tag_is_inline() {
        assert_eq!(std::mem::size_of::<Entry>(), 64);
        assert!(!is_short(b""));
        assert!(!is_short(&[b'x'; SHORT_TAG_MAX + 1]));
        assert!(is_short(&[b'x'; SHORT_TAG_MAX]));
    }

    #[test]
    fn the_last_word_depends_on_each_last_byte() {
        for n in 1..=SHORT_TAG_MAX + 9 {
            let base: Vec<u8> = (0..n as u8).map(|b| b.wrapping_mul(37) | 1).collect();
            if n % 8 == 0 {
                continue;
            }
            for i in n - n % 8..n {
                let mut other = base.clone();
                other[i] ^= 0x40;
                assert_ne!(tail_word(&base), tail_word(&other), "length {n}, byte {i}");
                assert_ne!(hash_of(&base), hash_of(&other), "length {n}, byte {i}");
            }
        }
    }

    #[test]
    fn the_last_tag_and_the_map() {
        let mut c = TagCache::new();
        assert_eq!(c.get(b"a"), None);
        c.insert(b"a", (1, 10), 100);
        c.insert(b"b", (2, 20), 100);
        assert_eq!(c.last(b"b"), Some((2, 20)));
        assert_eq!(c.last(b"a"), None);
        assert_eq!(c.get(b"a"), Some((1, 10)));
        assert_eq!(c.last(b"a"), Some((1, 10)), "a hit becomes the last tag");
        c.forget(b"a");
        assert_eq!(c.get(b"a"), None);
        assert_eq!(c.get(b"b"), Some((2, 20)));
        c.clear();
        assert_eq!(c.get(b"b"), None);
        assert!(c.is_empty());
    }

    #[test]
    fn an_empty_tag_is_never_found() {
        let mut c = TagCache::new();
        assert_eq!(c.get(b""), None);
        c.insert(b"a", (1, 1), 100);
        // (the table's empty entries have length 0, as the empty tag)
        assert_eq!(c.last(b""), None);
        assert_eq!(c.get(b""), None);
        c.forget(b"a");
        assert_eq!(c.get(b""), None);
    }

    #[test]
    fn the_map_is_bounded() {
        let mut c = TagCache::new();
        for i in 0..50u32 {
            c.insert(format!("t{i}").as_bytes(), (i as usize, 0), 8);
            assert!(c.len() <= 9);
            // (the tag just inserted is kept, whatever was cleared for it)
            assert_eq!(c.get(format!("t{i}").as_bytes()), Some((i as usize, 0)));
        }
        // an insert that finds more than 8 tags clears them first: at t9,
        // t18, t27, t36 and t45, so t45..t49 are left
        assert_eq!(c.len(), 5);
        assert_eq!(c.get(b"t44"), None);
        assert_eq!(c.get(b"t45"), Some((45, 0)));
    }

    #[test]
    fn a_change_between_seen_tags_allocates_nothing() {
        let mut c = TagCache::new();
        let long = [b'x'; SHORT_TAG_MAX + 10];
        c.insert(b"order_items", (1, 1), 100);
        c.insert(b"order", (2, 1), 100);
        c.insert(&long, (3, 1), 100);
        let capacities = |c: &TagCache| {
            (
                c.short.entries.as_ptr(),
                c.long.capacity(),
                c.last_long.capacity(),
            )
        };
        let before = capacities(&c);
        for _ in 0..1000 {
            assert_eq!(c.get(b"order_items"), Some((1, 1)));
            assert_eq!(c.get(&long), Some((3, 1)));
            assert_eq!(c.get(b"order"), Some((2, 1)));
        }
        assert_eq!(capacities(&c), before);
    }

    #[test]
    fn every_tag_is_found_in_any_order() {
        // short and long tags, looked up in an order other than the inserts'
        let mut c = TagCache::new();
        let n = 3000;
        let name = |i: usize| {
            if i.is_multiple_of(3) {
                format!("{i}_{}", "y".repeat(SHORT_TAG_MAX))
            } else {
                format!("tag_{i}")
            }
        };
        for i in 0..n {
            c.insert(name(i).as_bytes(), (i, i as u64), 10 * n);
        }
        assert_eq!(c.len(), n);
        for round in 0..3 {
            for i in (0..n).rev() {
                assert_eq!(
                    c.get(name(i).as_bytes()),
                    Some((i, i as u64)),
                    "round {round}"
                );
            }
        }
        c.forget(b"tag_7");
        assert_eq!(c.get(b"tag_7"), None);
        assert_eq!(c.get(b"tag_8"), Some((8, 8)));
        c.insert(b"tag_8", (80, 1), 10 * n);
        c.insert(b"tag_10", (100, 1), 10 * n);
        assert_eq!(
            c.get(b"tag_8"),
            Some((80, 1)),
            "a new hit replaces the old one"
        );
        let long9 = name(9);
        c.forget(long9.as_bytes());
        assert_eq!(c.get(long9.as_bytes()), None);
        assert_eq!(c.get(name(12).as_bytes()), Some((12, 12)));
    }

    /// Random inserts, lookups and forgets over tags of 1 to 40 bytes (short
    /// and long, many of one length and one byte apart) give what a plain
    /// map of the same operations gives.
    #[test]
    fn it_answers_as_a_map_would() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut random = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        // for each length, the tag of one repeated byte and each tag one
        // byte apart from it
        let mut tags: Vec<Vec<u8>> = Vec::new();
        for len in 1..=40 {
            tags.push(vec![b'a'; len]);
            for at in 0..len {
                let mut t = vec![b'a'; len];
                t[at] = b'b';
                tags.push(t);
            }
        }
        let mut c = TagCache::new();
        let mut model: HashMap<Vec<u8>, Hit> = HashMap::new();
        for step in 0..50_000u64 {
            let tag = &tags[random(tags.len() as u64) as usize];
            match random(10) {
                0..=2 => {
                    c.insert(tag, (step as usize, step), usize::MAX);
                    model.insert(tag.clone(), (step as usize, step));
                }
                3 => {
                    c.forget(tag);
                    model.remove(tag);
                }
                _ => assert_eq!(c.get(tag), model.get(tag).copied(), "step {step}"),
            }
            assert_eq!(c.len(), model.len(), "step {step}");
        }
    }

    #[test]
    fn tags_that_differ_in_their_last_bytes_or_length_hash_apart() {
        let h = |t: &[u8]| BuildHasherDefault::<FxHasher>::new().hash_one(t);
        assert_ne!(h(b"a"), h(b"a\0"));
        assert_ne!(h(b"order_1"), h(b"order_2"));
        assert_ne!(h(b"12345678a"), h(b"12345678b"));
    }

    #[test]
    fn same_bytes_is_equality() {
        let words = [
            "",
            "a",
            "t",
            "order",
            "orders",
            "1234567",
            "12345678",
            "123456789",
            "0123456789abcdef",
            "0123456789abcdeg",
            "0123456789abcdef0",
            "été",
            "ete",
        ];
        for a in words {
            for b in words {
                assert_eq!(
                    same_bytes(a.as_bytes(), b.as_bytes()),
                    a == b,
                    "{a:?} {b:?}"
                );
            }
        }
        // one byte differs, at every position of a 20-byte tag
        let base = [b'x'; 20];
        for i in 0..20 {
            let mut other = base;
            other[i] = b'y';
            assert!(!same_bytes(&base, &other), "position {i}");
        }
    }
}
