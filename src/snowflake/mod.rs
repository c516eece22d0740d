//! Snowflake mode: time | worker id | sequence.
//!
//! The pure core (no pgrx): `layout` (the bits), `generator` (the lock-free
//! generator and its clock rules), `claim_plan` (planning a worker-id
//! claim), `quorum` (majorities of Citus copies). Inside Postgres:
//! `functions` (the SQL functions), `jobs` (the snowflake worker's scheduling) and the lease jobs
//! `lease_claim`, `lease_renew`, `lease_close`.
pub mod claim_plan;
pub mod functions;
pub mod generator;
pub mod jobs;
pub mod layout;
pub mod lease_claim;
pub mod lease_close;
pub mod lease_renew;
pub mod quorum;
