//! What both modes share inside Postgres. For now: `worker_sql`, the one
//! module that builds the SQL text the workers and helpers run, and
//! `as_owner`, reading a table as its owner (the adopt functions).

pub mod as_owner;
pub mod worker_sql;
