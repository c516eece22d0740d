//! `BackendLocal<T>`: a value of this backend process in a plain static,
//! for the state the hot path reads on every ID. A backend runs its SQL
//! functions on one thread (pgrx refuses a call from any other), so the
//! value needs no thread-local storage, whose every access from a shared
//! library is a call to `__tls_get_addr` and a check of its lazy state.
//! `T` is a `Cell` or `RefCell`: borrows stay checked.

pub struct BackendLocal<T>(T);

// SAFETY: read and written only by the one thread of its process that runs
// PostgreSQL code (pgrx calls SQL functions there, and panics on a pg_sys
// call from any other); leaf_id starts no thread in a server process, so no
// two threads ever share a `BackendLocal`. Each process has its own copy of
// the static (not in shared memory), and `T` is a `Cell` or `RefCell`, so
// borrows on that thread stay checked.
unsafe impl<T> Sync for BackendLocal<T> {}

impl<T> BackendLocal<T> {
    pub const fn new(value: T) -> Self {
        BackendLocal(value)
    }

    #[inline]
    pub fn get(&self) -> &T {
        &self.0
    }
}
