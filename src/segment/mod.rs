//! Segment mode: ranges of IDs reserved from `leaf_alloc`, double-buffered
//! in shared memory, and on Citus a reserve kept for refills while a node is
//! down; an opaque tag hands out a keyed permutation of its counter.
//!
//! The pure core (no pgrx): `buffer` (the double buffer's state machine),
//! `draw_role` (who may draw, as a slot holds it), `step` (the dynamic
//! step), `range_plan` (a refill's range, planned from the tag's row),
//! `reserve` (the Citus reserve's rules and file format), `opaque`
//! (the keyed permutation), `opaque_runs` (a session's runs of encoded
//! opaque IDs), `tag_cache` (a session's tags and their slots). Inside
//! Postgres: `functions` (the SQL functions), `opaque_functions` (the opaque
//! domains' Rust functions), `jobs` (the segment worker's scheduling),
//! `refill` (one refill), `reserve_file` (the reserve's file).
pub mod buffer;
pub mod draw_role;
pub mod functions;
pub mod jobs;
pub mod opaque;
pub mod opaque_functions;
pub mod opaque_runs;
pub mod range_plan;
pub mod refill;
pub mod reserve;
pub mod reserve_file;
pub mod step;
pub mod tag_cache;
