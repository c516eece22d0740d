//! Segment mode: ranges of IDs reserved from `leaf_alloc`, double-buffered,
//! and on Citus a reserve kept for refills while a node is down.
pub mod buffer;
pub mod reserve;
pub mod step;
