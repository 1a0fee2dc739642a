//! rdma-core's C API, loaded at run time: the crate's third `unsafe` module, beside
//! `crate::sys` and `crate::sys_conn`, which call rdma-core only through it.
//!
//! - Types: `bindings_x86_64_linux_gnu.rs`, bindgen's translation of rdma-core 44's
//!   `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>` (structs, enums as constant
//!   modules, layout assertions checked at compile time; no function declarations),
//!   generated once by `crates/verbs/scripts/gen-bindings` and committed. The headers are
//!   dual-licensed (GPL-2.0 or OpenIB.org BSD); the translation is taken under the
//!   BSD license, whose notice heads the file.
//! - Functions: `functions.rs` lists the 35 exported functions the crate calls, each
//!   with the header's prototype and the symbol version it binds to at link time.
//!   [`verbs`] and [`rdmacm`] `dlopen` `libibverbs.so.1` / `librdmacm.so.1` at first
//!   use (`libloading`) and resolve them (`dlvsym`) into tables of typed function
//!   pointers, once per process (`OnceLock`).
//! - The verbs the headers implement inline or as macros, done here exactly as the
//!   header does: [`ibv_post_send`], [`ibv_post_recv`], [`ibv_poll_cq`],
//!   [`ibv_req_notify_cq`], [`ibv_query_port`], [`ibv_reg_mr`].
//!
//! Nothing links libibverbs or librdmacm, so a binary starts on a host without
//! rdma-core; the absence is a [`LoadError`] at first use (docs/verbs-provider.md,
//! "Run-time loading", checked in a chroot).
//!
//! # Invariants
//!
//! 1. Prototypes: each function pointer type in `functions.rs` is the header's
//!    prototype (`crates/verbs/scripts/gen-bindings` type-checks every one against bindgen's
//!    declarations from the same headers), and each symbol is resolved at the version
//!    that prototype binds to when a C program links (`dlvsym`, never the older
//!    compat ABIs libibverbs also exports under `IBVERBS_1.0`), so a pointer is only
//!    called with the ABI it has.
//! 2. Lifetime: a library opened here is never closed (its handle is dropped without
//!    `dlclose`), so every resolved pointer, and every rdma-core object made through
//!    one, stays valid until the process exits.
//! 3. Tables: a [`Verbs`] or [`Rdmacm`] table exists only with every one of its
//!    functions resolved, and [`rdmacm`] gives one only with a [`Verbs`] table beside
//!    it (librdmacm needs libibverbs): holding a table is the proof that the
//!    library is loaded.
//! 4. Inline verbs take pointers to live objects of the loaded library (their callers'
//!    invariants) and read only what the header's inline code reads, in its order:
//!    `verbs_get_ctx_op` reads the extended context's `sz` before the op it guards,
//!    and no reference to the whole `verbs_context` is made (an older provider's is
//!    shorter than ours).
#![allow(unsafe_code)]

use std::ffi::{c_int, c_uint, c_void, CString};
use std::fmt;
use std::mem::{align_of, offset_of, size_of};
use std::sync::OnceLock;

#[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
#[path = "bindings_x86_64_linux_gnu.rs"]
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    unreachable_pub,
    missing_docs,
    clippy::all
)]
mod bindings;

#[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
compile_error!(
    "crates/verbs has rdma-core bindings only for x86_64-unknown-linux-gnu \
     (src/ffi/bindings_x86_64_linux_gnu.rs): on the target, install rdma-core's headers \
     (Debian: libibverbs-dev librdmacm-dev) and bindgen-cli, run \
     crates/verbs/scripts/gen-bindings <target triple>, and add the new file's cfg in \
     crates/verbs/src/ffi/mod.rs"
);

pub(crate) use bindings::*;

/// `wr.rdma` of `struct ibv_send_wr` (an anonymous struct in the header).
#[allow(non_camel_case_types)]
pub(crate) type ibv_send_wr_rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1;

// `crate::sys_conn` reads librdmacm's addresses as libc's sockaddr_storage.
const _: () = assert!(size_of::<sockaddr_storage>() == size_of::<libc::sockaddr_storage>());
const _: () = assert!(align_of::<sockaddr_storage>() == align_of::<libc::sockaddr_storage>());

/// The sonames loaded (what rdma-core's runtime packages install, Debian:
/// `libibverbs1`, `librdmacm1`).
pub(crate) const VERBS_SONAME: &str = "libibverbs.so.1";
/// See [`VERBS_SONAME`].
pub(crate) const RDMACM_SONAME: &str = "librdmacm.so.1";

/// Why a library's table could not be had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LoadError {
    /// `dlopen` failed: the library, or one it needs, is not installed.
    Open {
        lib: &'static str,
        /// `dlerror()`.
        detail: String,
    },
    /// The library lacks a function at the version this crate calls it with
    /// (not rdma-core's, or older than every rdma-core release).
    Symbol {
        lib: &'static str,
        name: &'static str,
        version: &'static str,
        /// `dlerror()`.
        detail: String,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Open { lib, detail } => write!(f, "{lib} could not be loaded: {detail}"),
            LoadError::Symbol {
                lib,
                name,
                version,
                detail,
            } => write!(f, "{lib} has no {name}@{version}: {detail}"),
        }
    }
}

/// An open library's handle (invariant 2: never closed).
struct Lib {
    soname: &'static str,
    handle: *mut c_void,
}

impl Lib {
    fn open(soname: &'static str) -> Result<Lib, LoadError> {
        // SAFETY: loading libibverbs/librdmacm runs their initialisers, which have no
        // preconditions on the caller (the same happens when a program linking them
        // starts). RTLD_NOW: an unresolvable dependency fails here, not at a call.
        let lib = unsafe {
            libloading::os::unix::Library::open(Some(soname), libc::RTLD_NOW | libc::RTLD_LOCAL)
        }
        .map_err(|e| LoadError::Open {
            lib: soname,
            detail: e.to_string(),
        })?;
        Ok(Lib {
            soname,
            handle: lib.into_raw(),
        })
    }

    /// `dlvsym(handle, name, version)`, non-null.
    fn sym(&self, name: &'static str, version: &'static str) -> Result<*mut c_void, LoadError> {
        let err = |detail: String| LoadError::Symbol {
            lib: self.soname,
            name,
            version,
            detail,
        };
        let cname = CString::new(name).map_err(|e| err(e.to_string()))?;
        let cversion = CString::new(version).map_err(|e| err(e.to_string()))?;
        libloading::os::unix::with_dlerror(
            || {
                // SAFETY: a live handle (invariant 2) and NUL-terminated strings.
                let p = unsafe { libc::dlvsym(self.handle, cname.as_ptr(), cversion.as_ptr()) };
                (!p.is_null()).then_some(p)
            },
            |msg| msg.to_string_lossy().into_owned(),
        )
        .map_err(|e| err(e.unwrap_or_else(|| "resolved to NULL".to_string())))
    }
}

/// Defines a table of function pointers and its resolver from `functions.rs`
/// (`crates/verbs/scripts/gen-bindings` reads the same file with a macro of its own, to check the
/// prototypes).
macro_rules! functions {
    ($(
        $(#[$doc:meta])*
        $table:ident {
            $( $version:literal fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?; )*
        }
    )*) => {$(
        $(#[$doc])*
        pub(crate) struct $table {
            $( pub(crate) $name: unsafe extern "C" fn($($ty),*) $(-> $ret)?, )*
        }

        impl $table {
            /// Resolves every function of the table in `lib`.
            fn resolve(lib: &Lib) -> Result<$table, LoadError> {
                Ok($table {$(
                    $name: {
                        let p = lib.sym(stringify!($name), $version)?;
                        // SAFETY: a non-null address of that function at that
                        // version, whose prototype this is (invariant 1).
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) $(-> $ret)?>(p)
                        }
                    },
                )*})
            }
        }
    )*};
}

include!("functions.rs");

static VERBS: OnceLock<Result<Verbs, LoadError>> = OnceLock::new();
static RDMACM: OnceLock<Result<Rdmacm, LoadError>> = OnceLock::new();

/// libibverbs' table, loading it at the first call (later calls return the same
/// table or the same error).
pub(crate) fn verbs() -> Result<&'static Verbs, &'static LoadError> {
    VERBS
        .get_or_init(|| Verbs::resolve(&Lib::open(VERBS_SONAME)?))
        .as_ref()
}

/// librdmacm's table with libibverbs' (loaded first, invariant 3).
pub(crate) fn rdmacm() -> Result<(&'static Verbs, &'static Rdmacm), &'static LoadError> {
    let verbs = verbs()?;
    let cm = RDMACM
        .get_or_init(|| Rdmacm::resolve(&Lib::open(RDMACM_SONAME)?))
        .as_ref()?;
    Ok((verbs, cm))
}

// ---- The verbs rdma-core's headers implement inline (rdma-core 44, verbs.h) ----

/// `ibv_post_send`, verbs.h: `static inline int ibv_post_send(struct ibv_qp *qp,
/// struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr) { return
/// qp->context->ops.post_send(qp, wr, bad_wr); }`. A provider without the op (none
/// exists; the header would call NULL) gives EOPNOTSUPP.
///
/// # Safety
/// `qp` is a live QP of the loaded libibverbs, `wr` a valid work request list whose
/// SGEs name registered memory, `bad_wr` writable.
pub(crate) unsafe fn ibv_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the contract; a live QP's context and ops table outlive it.
    unsafe {
        match (*(*qp).context).ops.post_send {
            Some(op) => op(qp, wr, bad_wr),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_post_recv`, verbs.h: `return qp->context->ops.post_recv(qp, wr, bad_wr);`.
///
/// # Safety
/// As [`ibv_post_send`].
pub(crate) unsafe fn ibv_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: as ibv_post_send.
    unsafe {
        match (*(*qp).context).ops.post_recv {
            Some(op) => op(qp, wr, bad_wr),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_poll_cq`, verbs.h: `return cq->context->ops.poll_cq(cq, num_entries, wc);`
/// (negative on error; -EOPNOTSUPP without the op).
///
/// # Safety
/// `cq` is a live CQ of the loaded libibverbs; `wc` has room for `num_entries`.
pub(crate) unsafe fn ibv_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the contract; a live CQ's context and ops table outlive it.
    unsafe {
        match (*(*cq).context).ops.poll_cq {
            Some(op) => op(cq, num_entries, wc),
            None => -libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_req_notify_cq`, verbs.h: `return cq->context->ops.req_notify_cq(cq,
/// solicited_only);`.
///
/// # Safety
/// `cq` is a live CQ of the loaded libibverbs.
pub(crate) unsafe fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: as ibv_poll_cq.
    unsafe {
        match (*(*cq).context).ops.req_notify_cq {
            Some(op) => op(cq, solicited_only),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// The extended context's `query_port` op (`int (*)(struct ibv_context *, uint8_t,
/// struct ibv_port_attr *, size_t)`).
type QueryPortOp = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;

/// verbs.h's `verbs_get_ctx_op(ctx, query_port)`: `verbs_get_ctx(ctx)` is the
/// `struct verbs_context` whose last member `ctx` is, if `ctx->abi_compat ==
/// __VERBS_ABI_IS_EXTENDED` (`(void *)UINTPTR_MAX`); the op is there if
/// `vctx->sz >= sizeof(*vctx) - offsetof(struct verbs_context, query_port)` (the
/// struct "grows up": an older provider's lacks the first fields) and it is not NULL.
///
/// # Safety
/// `ctx` is a live context of the loaded libibverbs.
unsafe fn verbs_get_ctx_op_query_port(ctx: *mut ibv_context) -> Option<QueryPortOp> {
    // SAFETY: the contract (a live ibv_context).
    if unsafe { (*ctx).abi_compat } as usize != usize::MAX {
        return None;
    }
    // The fields are addressed from `ctx` backwards (wrapping: no pointer is formed
    // to the start of our, possibly longer, verbs_context) and `sz` is read before
    // the op it guards (invariant 4).
    let base = offset_of!(verbs_context, context);
    let at = |field: usize| ctx.cast::<u8>().wrapping_sub(base - field);
    // SAFETY: `sz` is immediately before `context` in every verbs_context (verbs.h:
    // "Must be immediately before struct ibv_context"), so inside the provider's.
    let sz = unsafe { at(offset_of!(verbs_context, sz)).cast::<usize>().read() };
    if sz < size_of::<verbs_context>() - offset_of!(verbs_context, query_port) {
        return None;
    }
    // SAFETY: `sz` says the provider's struct reaches back to `query_port`; a
    // nullable function pointer is an `Option` of one.
    unsafe {
        at(offset_of!(verbs_context, query_port))
            .cast::<Option<QueryPortOp>>()
            .read()
    }
}

/// `ibv_query_port`, verbs.h: a macro for the inline `___ibv_query_port`, which calls
/// the extended context's `query_port` op with `sizeof(*port_attr)` when the provider
/// has it, else zeroes `port_attr` and calls the exported `ibv_query_port` with it
/// cast to `struct _compat_ibv_port_attr *`.
///
/// # Safety
/// `context` is a live context of the loaded libibverbs; `port_attr` writable.
pub(crate) unsafe fn ibv_query_port(
    v: &Verbs,
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: the contract.
    unsafe {
        match verbs_get_ctx_op_query_port(context) {
            Some(op) => op(context, port_num, port_attr, size_of::<ibv_port_attr>()),
            None => {
                std::ptr::write_bytes(port_attr, 0, 1);
                (v.ibv_query_port)(context, port_num, port_attr.cast())
            }
        }
    }
}

/// `ibv_reg_mr`, verbs.h: a macro for `__ibv_reg_mr(pd, addr, length, access,
/// is_access_const)`, which calls the exported `ibv_reg_mr` when the flags are
/// known to have no bit of `IBV_ACCESS_OPTIONAL_RANGE`, else `ibv_reg_mr_iova2(pd,
/// addr, length, (uintptr_t)addr, access)` (`IBVERBS_1.8`). This crate's flags never
/// have optional bits (`crate::sys::access`), so this is the first branch, which
/// works with every rdma-core (rdma-core's exported `ibv_reg_mr` itself calls
/// `ibv_reg_mr_iova2` with `iova = addr`); optional bits are refused with EINVAL
/// rather than resolving a second function nobody calls.
///
/// # Safety
/// `pd` is a live PD of the loaded libibverbs; `addr..addr + length` stays allocated
/// until the region is deregistered.
pub(crate) unsafe fn ibv_reg_mr(
    v: &Verbs,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    if access as c_uint & ib_uverbs_access_flags::IB_UVERBS_ACCESS_OPTIONAL_RANGE != 0 {
        // SAFETY: errno is the calling thread's.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return std::ptr::null_mut();
    }
    // SAFETY: the contract.
    unsafe { (v.ibv_reg_mr)(pd, addr, length, access) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test machines have rdma-core's libraries (scripts/test-all installs
    /// libibverbs1 and librdmacm1): every function of both tables resolves there,
    /// at its version.
    #[test]
    fn every_function_resolves_in_the_installed_rdma_core() {
        let (v, cm) = rdmacm().unwrap_or_else(|e| {
            panic!("{e} (install rdma-core's libraries, Debian: libibverbs1 librdmacm1)")
        });
        assert!(std::ptr::eq(v, verbs().expect("loaded")));
        assert!(std::ptr::eq(cm, rdmacm().expect("loaded").1), "loaded once");
    }

    #[test]
    fn a_missing_library_or_symbol_is_a_load_error() {
        let e = Lib::open("libibverbs-not-there.so.1")
            .err()
            .expect("no such library");
        assert!(matches!(
            &e,
            LoadError::Open {
                lib: "libibverbs-not-there.so.1",
                ..
            }
        ));
        assert!(e.to_string().contains("could not be loaded"), "{e}");
        let lib = Lib::open(VERBS_SONAME).expect("libibverbs1 installed");
        assert!(lib.sym("ibv_get_device_list", "IBVERBS_1.1").is_ok());
        let e = lib.sym("ibv_get_device_list", "IBVERBS_9.9").unwrap_err();
        assert!(
            matches!(
                &e,
                LoadError::Symbol {
                    name: "ibv_get_device_list",
                    version: "IBVERBS_9.9",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn the_header_constants_used_inline_are_as_expected() {
        assert_eq!(
            ib_uverbs_access_flags::IB_UVERBS_ACCESS_OPTIONAL_RANGE,
            0x3ff0_0000
        );
        assert_eq!(
            offset_of!(verbs_context, sz) + 8,
            offset_of!(verbs_context, context)
        );
    }
}
