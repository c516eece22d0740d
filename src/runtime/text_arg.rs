//! `TextArg`: a `text` argument read in place, and checked as UTF-8 before
//! anything takes it for characters. pgrx's `&str` detoasts every argument
//! through a guarded FFI call (a `sigsetjmp` per call) and takes the bytes
//! for UTF-8 unchecked; a tag is short and stored inline (a 1-byte or 4-byte
//! uncompressed header), so its bytes are read where they are, and only a
//! compressed or out-of-line value goes through `pg_detoast_datum_packed`.
//! To SQL it is `text`, as `&str` was.
//!
//! Why the check even in a UTF-8 database: the server checks the encoding of
//! what it parses, but not of a custom setting sent at connection start
//! (`PGOPTIONS='-c x.t=...'`), so `current_setting('x.t')` can hand a
//! function bytes that are not UTF-8, and a `str` made of them is undefined
//! behaviour in Rust.

use pgrx::callconv::{Arg, ArgAbi};
use pgrx::datum::FromDatum;
use pgrx::nullable::Nullable;
use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::varlena::{varatt_is_1b_e, varatt_is_4b_c, varlena_to_byte_slice};

/// A `text` argument's bytes, not yet checked as UTF-8.
pub struct TextArg<'a>(&'a [u8]);

impl<'a> TextArg<'a> {
    /// The bytes as they came.
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.0
    }

    /// The bytes shown as characters, for a message that names the value
    /// (what is not UTF-8 shown as U+FFFD): never a lookup by it.
    pub fn shown(&self) -> String {
        String::from_utf8_lossy(self.0).into_owned()
    }

    /// The characters: the bytes checked as UTF-8, else `22021`.
    pub fn text(&self) -> &'a str {
        match std::str::from_utf8(self.0) {
            Ok(text) => text,
            Err(_) => not_utf8(),
        }
    }
}

fn not_utf8() -> ! {
    // SAFETY: GetDatabaseEncoding takes no pointer and reads a global that InitPostgres sets from
    // the database before any SQL function runs.
    let utf8_database = unsafe { pg_sys::GetDatabaseEncoding() } == pg_sys::pg_enc::PG_UTF8 as i32;
    let message = if utf8_database {
        "leaf_id takes text of UTF-8 characters only, and this argument is not valid UTF-8 (a custom setting sent at connection start is not checked by the server)"
    } else {
        "leaf_id takes text of UTF-8 characters only (this database's encoding is not UTF-8, and the argument is not valid UTF-8)"
    };
    crate::errors::raise(
        pgrx::PgSqlErrorCode::ERRCODE_CHARACTER_NOT_IN_REPERTOIRE,
        message,
        None,
    )
}

impl FromDatum for TextArg<'_> {
    /// # Safety
    ///
    /// `FromDatum`'s: unless `is_null`, `datum` is a varlena (a `text`) handed over by PostgreSQL,
    /// valid for as long as the returned bytes are used: the function call.
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _typoid: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null || datum.is_null() {
            return None;
        }
        let mut varlena = datum.cast_mut_ptr::<pg_sys::varlena>();
        // SAFETY: a non-null `text` datum points to a varlena that lives as
        // long as the call; a compressed or out-of-line one is detoasted
        // into memory of the call's context first (pg_detoast_datum_packed
        // pallocs in CurrentMemoryContext, not reset during the call), so
        // what `varlena_to_byte_slice` reads in place is an inline value
        // with a 1-byte or 4-byte header, its length taken from that header.
        unsafe {
            if varatt_is_1b_e(varlena) || varatt_is_4b_c(varlena) {
                varlena = pg_sys::pg_detoast_datum_packed(varlena);
            }
            Some(TextArg(varlena_to_byte_slice(varlena)))
        }
    }
}

// SAFETY: both methods unbox only through `FromDatum` above, on the argument PostgreSQL passes for
// a `TEXT` parameter, and the bytes borrowed carry the call's lifetime `'fcx`, within which the
// argument (or its detoasted copy in the caller's memory context) lives.
unsafe impl<'fcx> ArgAbi<'fcx> for TextArg<'fcx> {
    /// # Safety
    ///
    /// `ArgAbi`'s: the argument is a non-null datum of this call of the SQL type `TextArg` maps to,
    /// `TEXT` (see `SqlTranslatable` below), which is all the generated SQL lets PostgreSQL pass.
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        // SAFETY: the argument is a `text` datum of this call (this function's Safety), as
        // `from_polymorphic_datum` requires; a NULL panics before any read.
        unsafe {
            arg.unbox_arg_using_from_datum()
                .unwrap_or_else(|| panic!("argument {index} must not be null"))
        }
    }

    /// # Safety
    ///
    /// `ArgAbi`'s: the argument is a datum of this call of SQL type `TEXT` or NULL.
    unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
        // SAFETY: the argument is a `text` datum of this call or NULL (this function's Safety),
        // which `from_polymorphic_datum` takes, a NULL as None without a read.
        unsafe { arg.unbox_arg_using_from_datum().into() }
    }
}

// SAFETY: the SQL type declared for the argument is `TEXT`, whose datums are the varlenas
// `from_polymorphic_datum` reads; a TextArg is never returned (RETURN_SQL is an error), so no
// mapping of results is claimed.
unsafe impl SqlTranslatable for TextArg<'_> {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(TextArg<'static>);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("TEXT"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Err(ReturnsError::Datum);
}
