//! The NFSv3 result-union helper; `xdr_struct!` and `open_enum!` come from `xdr`.

/// A result union of RFC 1813's usual shape:
/// `union switch (nfsstat3 status) { case NFS3_OK: OK resok; default: FAIL resfail; }`.
macro_rules! nfs_result {
    ($(#[$m:meta])* $name:ident = $ok:ty, $fail:ty) => {
        $(#[$m])*
        pub type $name = crate::NfsResult<$ok, $fail>;
    };
}
