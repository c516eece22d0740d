//! Segment mode: ranges of IDs reserved from `leaf_alloc`, double-buffered.
pub mod buffer;
pub mod step;
