//! What both modes share inside Postgres: shared memory (`shmem`, with the
//! Citus helpers' slots in `copy_slot`), the owner file (`owner_file`), the
//! clock (`clock`), a background worker's identity and start (`bgworker`),
//! the catalog versions served and what each has (`catalog`, plain Rust),
//! the worker loop (`worker_loop`, the only module that knows both modes'
//! jobs), the hardened session and transactions (`transaction`, with the
//! jobs' error type in `job_error`), the one module that builds the workers' SQL
//! (`worker_sql`), a backend's side of waiting on the worker (`backend`),
//! reading a table as its owner (`as_owner`), which standbys must have a
//! worker's commit before it is used (`standby_rule`, plain Rust) and the
//! wait for them (`standby_wait`), and what differs between PostgreSQL
//! majors (`pg_version`); `worker_status` shows the workers to SQL, and
//! `text_arg` reads the hot functions' `text` argument in place, and
//! `backend_local` keeps their per-backend state without thread-local storage.

pub mod as_owner;
pub mod backend;
pub mod backend_local;
pub mod bgworker;
pub mod catalog;
pub mod clock;
pub mod copy_slot;
pub mod job_error;
pub mod owner_file;
pub mod pg_version;
pub mod shmem;
pub mod standby_rule;
pub mod standby_wait;
pub mod text_arg;
pub mod transaction;
pub mod worker_loop;
pub mod worker_sql;
pub mod worker_status;
