//! Who may draw a tag's IDs, as a tag slot holds it in one `u32`
//! (`TagSlot::draw_role`): written by the worker from `leaf_alloc.draw_role`
//! before it publishes a range, read by every call (one atomic load for a
//! tag open to everyone). Any other value is the OID of the role whose
//! privileges a caller needs. Owns only the two reserved values.

/// The row's `draw_role` is NULL: every role that may run the function. A
/// zeroed (new or freed) slot says this.
pub const ANYONE: u32 = 0;

/// The row names a role that no role of this server is called: superusers
/// only. 1 is no role's OID (a cluster's roles start at 10), so
/// `has_privs_of_role` grants it to superusers alone.
pub const SUPERUSERS_ONLY: u32 = 1;
