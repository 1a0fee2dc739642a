//! The NFS Version 3 Upper Layer Binding for RPC-over-RDMA (RFC 8267).
//!
//! What an RPC-over-RDMA transport needs to know about NFSv3 and nothing else:
//! - which items may move by Direct Data Placement (RFC 8267 §4.1), which the codecs
//!   of this crate already mark with [`xdr::Encoder::ddp_opaque`];
//! - how large a reply can be, so a requester can size a Reply chunk (RFC 8267 §4.2,
//!   RFC 8166 §3.5.3: "the requester provides a Reply chunk ... when it is possible
//!   that the reply might not fit inline"), see [`max_reply_size`];
//! - the service port and netids (RFC 8267 §5, RFC 5666 §12).
//!
//! MOUNT and NLM are not bound to RDMA: a client uses them over TCP or UDP.

use xdr::{Bytes, DataItem, Decode, Decoder};

use crate::readdir::POST_OP_ATTR_SIZE;
use crate::{NfsFh3, NfsProc3, StableHow};

/// Where a call's DDP-eligible item's data lies in its arguments, from their first
/// bytes `args` (not necessarily all of them): WRITE3args' `data` (§4.1), which a
/// byte-stream transport may receive apart (`oncrpc::tcp::call_data`), as
/// RPC-over-RDMA receives it by Read chunk. `None` for every other procedure (a
/// SYMLINK's path is small), or when the arguments up to the data's length word do
/// not decode from `args`.
pub fn call_data_item(proc: NfsProc3, args: &[u8]) -> Option<DataItem> {
    if proc != NfsProc3::WRITE {
        return None;
    }
    let mut dec = Decoder::new(Bytes::copy_from_slice(args));
    NfsFh3::decode(&mut dec).ok()?;
    dec.u64().ok()?; // offset
    dec.u32().ok()?; // count
    StableHow::decode(&mut dec).ok()?;
    let len = dec.u32().ok()?;
    Some(DataItem {
        offset: dec.position(),
        len: len as usize,
    })
}

/// RFC 8267 §5: "the NFS/RDMA port 20049".
pub const NFS_RDMA_PORT: u16 = 20049;
/// Netid for NFS over RDMA on IPv4.
pub const NETID_RDMA: &str = "rdma";
/// Netid for NFS over RDMA on IPv6.
pub const NETID_RDMA6: &str = "rdma6";

/// Longest symbolic link target this binding sizes replies for (Linux `PATH_MAX`).
pub const MAX_PATH: usize = 4096;

/// RFC 8267 §4.1: "The following items are DDP-eligible in NFS version 3:
/// the opaque file data in the WRITE procedure's argument, the pathname in the
/// SYMLINK procedure's argument". Other arguments never are.
pub fn call_has_ddp_item(proc: NfsProc3) -> bool {
    matches!(proc, NfsProc3::WRITE | NfsProc3::SYMLINK)
}

/// RFC 8267 §4.1: "... the opaque file data in the READ procedure's result, the
/// pathname in the READLINK procedure's result". Other results never are.
pub fn reply_has_ddp_item(proc: NfsProc3) -> bool {
    matches!(proc, NfsProc3::READ | NfsProc3::READLINK)
}

const STATUS: usize = 4;
const WCC_DATA: usize = 4 + 24 + POST_OP_ATTR_SIZE;
const POST_OP_FH: usize = 4 + 4 + crate::NFS3_FHSIZE as usize;
const FH: usize = 4 + crate::NFS3_FHSIZE as usize;

/// Largest encoded result (the NFS part of the reply, after the RPC reply header) of
/// procedure `proc`, counting DDP-eligible items in full, or `None` for an unknown
/// procedure.
///
/// `count` is the argument that bounds variable results and is ignored elsewhere:
/// READ3args `count`, READDIR3args `count`, READDIRPLUS3args `maxcount`.
pub fn max_reply_size(proc: NfsProc3, count: u32) -> Option<usize> {
    let count = count as usize;
    Some(match proc {
        NfsProc3::NULL => 0,
        NfsProc3::READ => max_inline_reply_size(proc, 0)? + xdr::padded_len(count),
        NfsProc3::READLINK => max_inline_reply_size(proc, 0)? + MAX_PATH,
        _ => max_inline_reply_size(proc, count as u32)?,
    })
}

/// Like [`max_reply_size`], but without the DDP-eligible data: the size of what stays
/// inline when READ or READLINK data moves through a Write chunk (the data's length
/// word stays inline).
pub fn max_inline_reply_size(proc: NfsProc3, count: u32) -> Option<usize> {
    let count = count as usize;
    Some(match proc {
        NfsProc3::NULL => 0,
        NfsProc3::GETATTR => STATUS + crate::readdir::FATTR3_SIZE,
        NfsProc3::SETATTR | NfsProc3::REMOVE | NfsProc3::RMDIR => STATUS + WCC_DATA,
        NfsProc3::LOOKUP => STATUS + FH + 2 * POST_OP_ATTR_SIZE,
        NfsProc3::ACCESS => STATUS + POST_OP_ATTR_SIZE + 4,
        NfsProc3::READLINK => STATUS + POST_OP_ATTR_SIZE + 4,
        NfsProc3::READ => STATUS + POST_OP_ATTR_SIZE + 4 + 4 + 4,
        NfsProc3::WRITE => STATUS + WCC_DATA + 4 + 4 + 8,
        NfsProc3::CREATE | NfsProc3::MKDIR | NfsProc3::SYMLINK | NfsProc3::MKNOD => {
            STATUS + POST_OP_FH + POST_OP_ATTR_SIZE + WCC_DATA
        }
        NfsProc3::RENAME => STATUS + 2 * WCC_DATA,
        NfsProc3::LINK => STATUS + POST_OP_ATTR_SIZE + WCC_DATA,
        // §3.3.16: count is "the maximum size of the READDIR3resok structure";
        // §3.3.17: maxcount, of READDIRPLUS3resok. Failures are smaller.
        NfsProc3::READDIR | NfsProc3::READDIRPLUS => STATUS + count.max(POST_OP_ATTR_SIZE),
        NfsProc3::FSSTAT => STATUS + POST_OP_ATTR_SIZE + 6 * 8 + 4,
        NfsProc3::FSINFO => STATUS + POST_OP_ATTR_SIZE + 7 * 4 + 8 + 8 + 4,
        NfsProc3::PATHCONF => STATUS + POST_OP_ATTR_SIZE + 2 * 4 + 4 * 4,
        NfsProc3::COMMIT => STATUS + WCC_DATA + 8,
        _ => return None,
    })
}
