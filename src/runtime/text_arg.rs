//! `TextArg`: a `text` argument read in place, for the functions called once
//! per ID (`leaf_segment_next(tag)`). pgrx's `&str` detoasts every argument
//! through a guarded FFI call (a `sigsetjmp` per call); a tag is short and
//! stored inline (a 1-byte or 4-byte uncompressed header), so its bytes are
//! read where they are, and only a compressed or out-of-line value goes
//! through `pg_detoast_datum_packed`. To SQL it is `text`, as `&str` was.

use pgrx::callconv::{Arg, ArgAbi};
use pgrx::datum::FromDatum;
use pgrx::nullable::Nullable;
use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::varlena::{varatt_is_1b_e, varatt_is_4b_c, varlena_to_byte_slice};

/// A `text` argument's characters.
pub struct TextArg<'a>(pub &'a str);

/// Is the database's encoding UTF-8 (asked once per backend: a database
/// never changes its encoding)?
fn database_is_utf8() -> bool {
    static mut UTF8: Option<bool> = None;
    unsafe {
        match UTF8 {
            Some(yes) => yes,
            None => {
                let yes = pg_sys::GetDatabaseEncoding() == pg_sys::pg_enc::PG_UTF8 as i32;
                UTF8 = Some(yes);
                yes
            }
        }
    }
}

impl FromDatum for TextArg<'_> {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _typoid: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null || datum.is_null() {
            return None;
        }
        let mut varlena = datum.cast_mut_ptr::<pg_sys::varlena>();
        unsafe {
            // out of line (a TOAST pointer) or compressed: detoasted
            if varatt_is_1b_e(varlena) || varatt_is_4b_c(varlena) {
                varlena = pg_sys::pg_detoast_datum_packed(varlena);
            }
            let bytes = varlena_to_byte_slice(varlena);
            if database_is_utf8() {
                // the server checked the text's encoding when it made it
                Some(TextArg(std::str::from_utf8_unchecked(bytes)))
            } else {
                match std::str::from_utf8(bytes) {
                    Ok(text) => Some(TextArg(text)),
                    Err(_) => crate::errors::raise(
                        pgrx::PgSqlErrorCode::ERRCODE_CHARACTER_NOT_IN_REPERTOIRE,
                        "leaf_id takes tags of UTF-8 characters only (this database's encoding is not UTF-8, and the tag is not valid UTF-8)",
                        None,
                    ),
                }
            }
        }
    }
}

unsafe impl<'fcx> ArgAbi<'fcx> for TextArg<'fcx> {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        unsafe {
            arg.unbox_arg_using_from_datum()
                .unwrap_or_else(|| panic!("argument {index} must not be null"))
        }
    }

    unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
        unsafe { arg.unbox_arg_using_from_datum().into() }
    }
}

unsafe impl SqlTranslatable for TextArg<'_> {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(TextArg<'static>);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("TEXT"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Err(ReturnsError::Datum);
}
