//! Many servers: what leaf_id does when its tables are Citus reference
//! tables. `copies` (the copies of a reference table: which nodes hold one,
//! the snowflake renewal on a majority of them, reading marks on each),
//! `renewal_helper` (the short-lived processes that write the other nodes'
//! copies), `guard` (the SQL functions the guarded updates call on a copy
//! that differs).
pub mod copies;
pub mod guard;
pub mod renewal_helper;
