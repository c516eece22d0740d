//! SQL surface of opaque domains, the parts in Rust: the key's randomness
//! and the permutation (`segment::opaque`). The rest (`leaf_opaque_create`,
//! `_drop`, `_encode`, `_decode`, the view) is PL/pgSQL in `sql/finish.sql`,
//! which reads the key table as the extension's owner. Both functions here
//! are revoked from PUBLIC.

use crate::errors::raise;
use crate::segment::opaque::{Domain, DomainError};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// 16 bytes from `pg_strong_random`, for a new domain's key.
#[pg_extern(volatile, parallel_safe)]
fn leaf_id_random_key() -> Vec<u8> {
    let mut key = vec![0u8; 16];
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
    let domain = Domain::new(bits.into(), key).unwrap_or_else(|e| match e {
        DomainError::Width(w) => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("the width of an opaque domain is 16 to 63 bits; it is {w}"),
            None,
        ),
        // (never the key itself)
        DomainError::KeyLength(n) => raise(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("the key of an opaque domain is 16 bytes; this one has {n}"),
            None,
        ),
    });
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
