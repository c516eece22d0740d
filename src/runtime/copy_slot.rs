//! The shared-memory slot of one other Citus copy for a snowflake renewal:
//! the request the snowflake worker posts and the renewal helper's answer
//! (`citus::renewal_helper` uses it; `shmem` lays the slots out per
//! database). Owns the slot's layout and its text fields; sends nothing.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering::SeqCst};

/// Other copies a renewal writes through helpers; beyond that count a copy
/// is not written (and not counted).
pub const MAX_OTHER_COPIES: usize = 16;
const HOST_BYTES: usize = 256;
const COMMAND_BYTES: usize = 4096;
const ANSWER_BYTES: usize = 512;
/// A helper registered but not started after this long is given up.
const START_GRACE_MS: i64 = 10_000;
/// `pid` of a slot whose helper is registered but has not started yet.
pub(crate) const STARTING: i32 = -1;

/// One other copy's slot: the request the snowflake worker posts, and the
/// helper's answer. Zeroed memory is an idle slot.
#[repr(C)]
pub struct CopySlot {
    /// The helper's pid while it runs, STARTING before, 0 when none runs.
    pub(crate) pid: AtomicI32,
    /// Unix ms when the worker registered the helper.
    pub(crate) registered_at: AtomicI64,
    /// The request number the slot holds, and the last one answered.
    pub(crate) asked: AtomicU64,
    pub(crate) answered: AtomicU64,
    /// 1 when the statement succeeded.
    pub(crate) success: AtomicU32,
    pub(crate) port: AtomicI32,
    pub(crate) host_len: AtomicU32,
    pub(crate) host: UnsafeCell<[u8; HOST_BYTES]>,
    pub(crate) command_len: AtomicU32,
    pub(crate) command: UnsafeCell<[u8; COMMAND_BYTES]>,
    pub(crate) answer_len: AtomicU32,
    pub(crate) answer: UnsafeCell<[u8; ANSWER_BYTES]>,
}

pub(crate) fn write_text<const N: usize>(
    buf: &UnsafeCell<[u8; N]>,
    len: &AtomicU32,
    s: &str,
) -> bool {
    if s.len() > N {
        return false;
    }
    // SAFETY: each text has one writer at a time and no reader meanwhile, by the slot's protocol
    // (`citus::renewal_helper` is the only user). `host` and `command` are written by the
    // database's one snowflake worker only while the slot's pid is 0 (`free()`), and read by a
    // helper only after it swapped for its pid the STARTING stored after those writes (a helper
    // given up before it started, STARTING swapped back to 0, can only take a later STARTING,
    // stored after that request's writes). `answer` is written by the helper holding the slot, and
    // read by the worker only once `answered`, stored after the write, is its request. Otherwise
    // the pid goes back to 0 only at the helper's exit, or when no helper could be registered.
    // `s.len() <= N` was checked.
    unsafe { (&mut *buf.get())[..s.len()].copy_from_slice(s.as_bytes()) };
    len.store(s.len() as u32, SeqCst);
    true
}

pub(crate) fn write_truncated<const N: usize>(buf: &UnsafeCell<[u8; N]>, len: &AtomicU32, s: &str) {
    let mut end = s.len().min(N);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    write_text(buf, len, &s[..end]);
}

pub(crate) fn read_text<const N: usize>(buf: &UnsafeCell<[u8; N]>, len: &AtomicU32) -> String {
    let n = (len.load(SeqCst) as usize).min(N);
    // SAFETY: by the slot's protocol (see `write_text`) no write of this text overlaps the read: a
    // helper reads `host`/`command` only once the slot's pid is its own, while the worker writes
    // them only at pid 0; the worker reads `answer` only after the helper's write of it (`answered`
    // is stored after). `n` is clamped to the array.
    unsafe { String::from_utf8_lossy(&(&*buf.get())[..n]).into_owned() }
}

impl CopySlot {
    /// No helper runs or is starting.
    pub(crate) fn idle(&self) -> bool {
        self.pid.load(SeqCst) == 0
    }

    /// Free for a new request? A helper that never started is given up.
    pub(crate) fn free(&self) -> bool {
        match self.pid.load(SeqCst) {
            0 => true,
            // a compare-and-swap: a helper that starts at this instant stores
            // its pid first, and its slot is then not given to another
            STARTING
                if crate::runtime::clock::unix_ms() - self.registered_at.load(SeqCst)
                    > START_GRACE_MS =>
            {
                self.pid
                    .compare_exchange(STARTING, 0, SeqCst, SeqCst)
                    .is_ok()
            }
            _ => false,
        }
    }
}
