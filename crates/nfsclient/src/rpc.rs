//! One typed RPC call: encode the arguments, call, decode the whole result.

use oncrpc::Client;
use xdr::{Decode, Encode};

use crate::error::{Error, Result};

/// Calls (`prog`, `vers`, `proc_`) with `args` and decodes the results as `R`, which
/// must take the whole result body (trailing bytes are a decode error: a reply that
/// does not match the procedure's XDR is not trusted).
///
/// `what` names the call in errors ("NFS READ", "MOUNT MNT").
pub(crate) async fn call<A: Encode, R: Decode>(
    rpc: &Client,
    prog: u32,
    vers: u32,
    proc_: u32,
    what: &'static str,
    args: &A,
) -> Result<R> {
    let reply = rpc
        .call(prog, vers, proc_, args.to_xdr())
        .await
        .map_err(|source| Error::Rpc { what, source })?;
    let mut dec = reply.results;
    let decoded = R::decode(&mut dec).and_then(|r| dec.finish().map(|()| r));
    decoded.map_err(|source| Error::Decode { what, source })
}
