//! Snowflake mode: time | worker id | sequence.
pub mod claim;
pub mod generator;
pub mod layout;
pub mod quorum;
