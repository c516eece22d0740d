//! SQL surface of opaque domains, the parts in Rust: the key's randomness,
//! the permutation (`segment::opaque`), and a tag's grant. The rest is SQL in
//! `sql/finish.sql`: `leaf_opaque_create` and `_drop` (PL/pgSQL, superusers),
//! and `_encode`/`_decode`, SQL-standard bodies (bound to the key table and
//! to `leaf_id_opaque_code` by OID when created) that read the key as the
//! extension's owner. All but `leaf_opaque_grant` are revoked from PUBLIC;
//! it checks its caller itself.

use crate::errors::raise;
use crate::runtime::text_arg::TextArg;
use crate::runtime::worker_sql;
use crate::segment::opaque::{Domain, DomainError};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::Spi;

/// 16 bytes from `pg_strong_random`, for a new domain's key.
#[pg_extern(volatile, parallel_safe)]
fn leaf_id_random_key() -> Vec<u8> {
    let mut key = vec![0u8; 16];
    // SAFETY: pg_strong_random writes at most `key.len()` bytes to
    // `key.as_mut_ptr()`, the start of the live Vec of that many bytes.
    if !unsafe { pg_sys::pg_strong_random(key.as_mut_ptr().cast(), key.len()) } {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            "could not generate a random key for an opaque domain (pg_strong_random failed)",
            None,
        );
    }
    key
}

/// `value` through the permutation of width `bits` and `key`, or through
/// its inverse.
#[pg_extern(immutable, parallel_safe, strict)]
fn leaf_id_opaque_permute(bits: i32, key: &[u8], value: i64, inverse: bool) -> i64 {
    permute(bits, key, value, inverse)
}

/// The body of `leaf_opaque_encode` and `leaf_opaque_decode` (`caller`):
/// `value` of domain `domain` through its permutation or the inverse, given
/// the domain's row (`bits` and `key` NULL: there is none).
#[pg_extern(immutable, parallel_safe)]
fn leaf_id_opaque_code(
    caller: TextArg,
    domain: Option<TextArg>,
    value: Option<i64>,
    inverse: bool,
    bits: Option<i32>,
    key: Option<&[u8]>,
) -> i64 {
    // (both only name things in messages)
    let caller = caller.shown();
    let domain = domain.map(|d| d.shown());
    let (Some(domain), Some(value)) = (domain, value) else {
        raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            format!(
                "{caller}: the domain and the {} must not be NULL",
                if inverse { "ID" } else { "value" }
            ),
            None,
        );
    };
    let (Some(bits), Some(key)) = (bits, key) else {
        raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
            format!("opaque domain \"{domain}\" does not exist"),
            None,
        );
    };
    permute(bits, key, value, inverse)
}

/// The grant that lets tag `tag` issue the IDs of opaque domain `domain`
/// from `max_id` on (`leaf_alloc.opaque_grant`; `segment::opaque::Domain::grant`).
/// For superusers and the roles that may run `leaf_opaque_decode`: a tag
/// hands out the domain's encodings of its counters, which is what decoding
/// reveals. Reads the key as the extension's owner.
#[pg_extern(volatile, parallel_unsafe)]
fn leaf_opaque_grant(domain: Option<TextArg>, tag: Option<TextArg>, max_id: Option<i64>) -> i64 {
    let (domain, tag) = (domain.map(|d| d.text()), tag.map(|t| t.text()));
    let (Some(domain), Some(tag), Some(max_id)) = (domain, tag, max_id) else {
        raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "leaf_opaque_grant: the domain, the tag and max_id must not be NULL",
            None,
        );
    };
    let Some((may_decode, owner)) = decode_privilege() else {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "leaf_id's leaf_opaque_decode(text, bigint) is not in the extension's schema",
            None,
        );
    };
    if !may_decode {
        raise(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            "permission denied for function leaf_opaque_grant",
            Some(
                "Only superusers and roles that may run leaf_opaque_decode(text, bigint) may make a tag use an opaque domain.",
            ),
        );
    }
    let saved = crate::runtime::as_owner::become_restricted(owner);
    // The schema's name is locked for the transaction (as in the worker's
    // jobs), so the key table named in the query is the extension's. An
    // error ends the transaction, whose abort restores the user.
    let row = Spi::connect_mut(|client| {
        let schema = match worker_sql::installed_extension(client) {
            Ok(Some((schema, _))) => schema,
            Ok(None) => return Ok::<_, pgrx::spi::SpiError>(None),
            Err(e) => crate::errors::raise_recorded(e.sqlstate, e.message),
        };
        let rows = client.select(
            &worker_sql::opaque_domain_key(&schema),
            None,
            &[domain.into()],
        )?;
        Ok(match rows.into_iter().next() {
            Some(r) => Some((r.get::<i32>(1)?, r.get::<Vec<u8>>(2)?)),
            None => None,
        })
    })
    .unwrap_or_else(|e| raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, e.to_string(), None));
    crate::runtime::as_owner::restore_user(saved);
    let Some((Some(bits), Some(key))) = row else {
        raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
            format!("opaque domain \"{domain}\" does not exist"),
            None,
        );
    };
    let d = domain_of(bits, &key);
    d.grant(tag, max_id)
}

/// May the current user decode opaque IDs (EXECUTE on leaf_id's
/// `leaf_opaque_decode(text, bigint)`, found by the extension's namespace
/// OID)? And the extension's owner. (Superusers pass any privilege check.)
/// None: the catalog has no such function (older than 0.4.0).
pub(crate) fn decode_privilege() -> Option<(bool, pg_sys::Oid)> {
    // (catalog queries only, bound by the extension's namespace OID)
    let (may_decode, owner) = Spi::get_two::<bool, pg_sys::Oid>(
        "SELECT pg_catalog.has_function_privilege(p.oid, 'EXECUTE'), e.extowner \
         FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_proc p \
         ON p.pronamespace OPERATOR(pg_catalog.=) e.extnamespace \
         WHERE e.extname OPERATOR(pg_catalog.=) 'leaf_id' \
         AND p.proname OPERATOR(pg_catalog.=) 'leaf_opaque_decode' \
         AND p.proargtypes OPERATOR(pg_catalog.=) '25 20'::pg_catalog.oidvector",
    )
    .unwrap_or((None, None));
    let (Some(may_decode), Some(owner)) = (may_decode, owner) else {
        return None;
    };
    // SAFETY: superuser() reads the session's user id and pg_authid through
    // the syscache, which needs a transaction: the callers are SQL functions
    // (leaf_opaque_grant, leaf_segment_status), inside the caller's
    // transaction, where Spi just ran.
    Some((may_decode || unsafe { pg_sys::superuser() }, owner))
}

fn permute(bits: i32, key: &[u8], value: i64, inverse: bool) -> i64 {
    let domain = domain_of(bits, key);
    let permuted = if inverse {
        domain.decode(value)
    } else {
        domain.encode(value)
    };
    permuted.unwrap_or_else(|e| {
        raise(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!(
                "{} {} is outside the opaque domain's range [0, 2^{})",
                if inverse { "ID" } else { "value" },
                e.value,
                e.bits
            ),
            None,
        )
    })
}

fn domain_of(bits: i32, key: &[u8]) -> Domain {
    Domain::new(bits.into(), key).unwrap_or_else(|e| match e {
        DomainError::Width(w) => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "the width of an opaque domain is 16 to 63 bits (20 and up for new ones); it is {w}"
            ),
            None,
        ),
        // (never the key itself)
        DomainError::KeyLength(n) => raise(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("the key of an opaque domain is 16 bytes; this one has {n}"),
            None,
        ),
    })
}
