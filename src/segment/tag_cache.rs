//! A session's tags and their (slot, epoch), looked up by the tag's bytes:
//! the last tag in front (most calls repeat it: a column default, a bulk
//! insert), then a map. A tag seen before costs no allocation: the map is
//! probed with the bytes, and the last tag's buffer is reused. Pure: no
//! pgrx. The caller keeps it in process-local memory and gives only bytes
//! that passed its checks (UTF-8, a tag's length) to `insert`, so a hit
//! says the bytes passed them.
//!
//! The hash is FxHash's multiply-rotate on 8-byte words, not SipHash: the
//! map is one session's, so a caller who picks colliding tag names slows
//! only its own session, and a short tag costs a few cycles to hash.

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
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(u64::from_le_bytes(w.try_into().unwrap()));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            // (the length keeps "a" and "a\0" apart)
            self.add(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 56));
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

/// Tags of at most this many bytes are kept in the front cache too.
pub const FRONT_KEY_MAX: usize = 32;
/// The front cache: sets of ways, a tag's set chosen by its hash. 1,024
/// entries, `leaf_id.max_tags`' default: a session that draws from every
/// tag of the server finds most of them in the front (56 KiB, allocated at
/// the session's first tag).
const FRONT_SETS: usize = 256;
const FRONT_WAYS: usize = 4;

/// One tag of the front cache, its bytes inline (`len` 0: empty; a tag has
/// at least one byte).
#[derive(Clone, Copy)]
struct FrontEntry {
    len: u8,
    key: [u8; FRONT_KEY_MAX],
    hit: Hit,
}

const EMPTY: FrontEntry = FrontEntry {
    len: 0,
    key: [0; FRONT_KEY_MAX],
    hit: (0, 0),
};

/// The session's tags: a small set-associative front cache of short tags,
/// whose entries hold their bytes inline (a change between tags already in
/// it neither allocates nor copies), and a map of every tag behind it. The
/// last tag is looked at first (an index into the front, or for a long tag
/// a copy of its bytes).
pub struct TagCache {
    map: HashMap<Box<[u8]>, Hit, BuildHasherDefault<FxHasher>>,
    /// Allocated at the first insert (`FRONT_SETS * FRONT_WAYS` entries).
    front: Vec<FrontEntry>,
    /// Per set, the way the next install replaces (round robin).
    next_way: [u8; FRONT_SETS],
    /// The last tag, when it is in the front.
    last_front: Option<usize>,
    /// The last tag, when it is longer than `FRONT_KEY_MAX`: its bytes and
    /// hit (the buffer keeps its capacity).
    last_long: Vec<u8>,
    last_long_hit: Option<Hit>,
}

impl Default for TagCache {
    fn default() -> Self {
        Self::new()
    }
}

/// A tag's hash, from its bytes alone (the front's set).
#[inline]
fn hash_of(tag: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(tag);
    h.finish()
}

impl TagCache {
    pub const fn new() -> TagCache {
        TagCache {
            map: HashMap::with_hasher(BuildHasherDefault::new()),
            front: Vec::new(),
            next_way: [0; FRONT_SETS],
            last_front: None,
            last_long: Vec::new(),
            last_long_hit: None,
        }
    }

    /// The first entry of the tag's set in the front.
    #[inline]
    fn set_of(tag: &[u8]) -> usize {
        // (the product's top bits depend on every input bit)
        (hash_of(tag) >> (64 - FRONT_SETS.trailing_zeros())) as usize * FRONT_WAYS
    }

    /// Is entry `i` the tag? Never for an empty entry, whatever the tag
    /// (an empty tag, which no caller may insert, matches nothing).
    #[inline]
    fn front_is(&self, i: usize, tag: &[u8]) -> bool {
        let e = &self.front[i];
        e.len != 0 && e.len as usize == tag.len() && same_bytes(&e.key[..tag.len()], tag)
    }

    /// The last tag's hit, if `tag` is the last tag.
    #[inline]
    pub fn last(&self, tag: &[u8]) -> Option<Hit> {
        if tag.len() <= FRONT_KEY_MAX {
            let i = self.last_front?;
            return self.front_is(i, tag).then(|| self.front[i].hit);
        }
        match self.last_long_hit {
            Some(hit) if same_bytes(&self.last_long, tag) => Some(hit),
            _ => None,
        }
    }

    /// The hit of a tag seen before (it becomes the last tag).
    #[inline]
    pub fn get(&mut self, tag: &[u8]) -> Option<Hit> {
        if let Some(hit) = self.last(tag) {
            return Some(hit);
        }
        if tag.len() <= FRONT_KEY_MAX && !self.front.is_empty() {
            let set = Self::set_of(tag);
            for i in set..set + FRONT_WAYS {
                if self.front_is(i, tag) {
                    self.last_front = Some(i);
                    return Some(self.front[i].hit);
                }
            }
            let hit = *self.map.get(tag)?;
            self.install(set, tag, hit);
            return Some(hit);
        }
        let hit = *self.map.get(tag)?;
        self.set_last_long(tag, hit);
        Some(hit)
    }

    /// Remember a tag (it becomes the last tag). The map is emptied first
    /// once it holds more than `bound` tags (a session that invents names
    /// keeps no more than that).
    pub fn insert(&mut self, tag: &[u8], hit: Hit, bound: usize) {
        if self.map.len() > bound {
            self.clear();
        }
        self.map.insert(tag.into(), hit);
        if tag.len() <= FRONT_KEY_MAX {
            if self.front.is_empty() {
                self.front = vec![EMPTY; FRONT_SETS * FRONT_WAYS];
            }
            let set = Self::set_of(tag);
            match (set..set + FRONT_WAYS).find(|&i| self.front_is(i, tag)) {
                Some(i) => {
                    self.front[i].hit = hit;
                    self.last_front = Some(i);
                }
                None => self.install(set, tag, hit),
            }
        } else {
            self.set_last_long(tag, hit);
        }
    }

    /// Forget a tag (its slot went to another tag, or it was freed).
    pub fn forget(&mut self, tag: &[u8]) {
        self.map.remove(tag);
        if tag.len() <= FRONT_KEY_MAX && !self.front.is_empty() {
            let set = Self::set_of(tag);
            for i in set..set + FRONT_WAYS {
                if self.front_is(i, tag) {
                    self.front[i] = EMPTY;
                }
            }
        }
        self.last_front = None;
        self.last_long_hit = None;
    }

    /// Forget every tag.
    pub fn clear(&mut self) {
        self.map.clear();
        self.front.iter_mut().for_each(|e| *e = EMPTY);
        self.last_front = None;
        self.last_long_hit = None;
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Put a short tag into its set of the front (the set's next way).
    #[inline]
    fn install(&mut self, set: usize, tag: &[u8], hit: Hit) {
        let way = self.next_way[set / FRONT_WAYS] as usize;
        self.next_way[set / FRONT_WAYS] = ((way + 1) % FRONT_WAYS) as u8;
        let e = &mut self.front[set + way];
        e.len = tag.len() as u8;
        e.key[..tag.len()].copy_from_slice(tag);
        e.hit = hit;
        self.last_front = Some(set + way);
    }

    #[inline]
    fn set_last_long(&mut self, tag: &[u8], hit: Hit) {
        self.last_long.clear();
        self.last_long.extend_from_slice(tag);
        self.last_long_hit = Some(hit);
    }
}

/// `a == b` without a call into libc's `memcmp` for the short tags that
/// are the rule (8 bytes at a time).
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
    fn the_front_is_a_power_of_two_of_sets_and_its_size_is_as_documented() {
        assert!(FRONT_SETS.is_power_of_two());
        assert_eq!(FRONT_SETS * FRONT_WAYS, 1024);
        assert_eq!(
            FRONT_SETS * FRONT_WAYS * std::mem::size_of::<FrontEntry>(),
            56 * 1024
        );
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
        // (the front's empty entries have length 0, as the empty tag)
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
        }
    }

    #[test]
    fn a_change_between_seen_tags_allocates_nothing() {
        let mut c = TagCache::new();
        let long = [b'x'; FRONT_KEY_MAX + 10];
        c.insert(b"order_items", (1, 1), 100);
        c.insert(b"order", (2, 1), 100);
        c.insert(&long, (3, 1), 100);
        let (front, last) = (c.front.as_ptr(), c.last_long.capacity());
        for _ in 0..1000 {
            assert_eq!(c.get(b"order_items"), Some((1, 1)));
            assert_eq!(c.get(&long), Some((3, 1)));
            assert_eq!(c.get(b"order"), Some((2, 1)));
        }
        assert_eq!((c.front.as_ptr(), c.last_long.capacity()), (front, last));
    }

    #[test]
    fn every_tag_is_found_whatever_the_front_evicted() {
        // more tags than the front holds: those evicted come from the map
        let mut c = TagCache::new();
        let n = FRONT_SETS * FRONT_WAYS * 3;
        for i in 0..n {
            c.insert(format!("tag_{i}").as_bytes(), (i, i as u64), 10 * n);
        }
        for round in 0..3 {
            for i in (0..n).rev() {
                assert_eq!(
                    c.get(format!("tag_{i}").as_bytes()),
                    Some((i, i as u64)),
                    "round {round}"
                );
            }
        }
        c.forget(b"tag_7");
        assert_eq!(c.get(b"tag_7"), None);
        assert_eq!(c.get(b"tag_8"), Some((8, 8)));
        c.insert(b"tag_8", (80, 1), 10 * n);
        assert_eq!(
            c.get(b"tag_8"),
            Some((80, 1)),
            "a new hit replaces the old one in the front"
        );
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
