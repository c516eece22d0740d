//! What both modes share inside Postgres. For now: `worker_sql`, the one
//! module that builds the SQL text the workers and helpers run.

pub mod worker_sql;
