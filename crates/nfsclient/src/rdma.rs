//! The NFSv3 Upper Layer Binding for RPC-over-RDMA (RFC 8267) as the requester needs
//! it: which results come back in Write chunks, how large each reply can be (for the
//! Reply chunk), and where the placed data goes back into the reply stream.
//!
//! Specs: RFC 8267 §4.1 (DDP-eligible items), §4.2 / §5 (reply size, port);
//! rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §8 (what a ULB provides).
//!
//! Choices (as Linux xprtrdma makes them): a Write chunk is offered only for READ
//! data; READLINK's path, also DDP-eligible (§4.1), comes back inline or in the
//! Reply chunk, which `max_reply` sizes for a `MAX_PATH` target. A requester may
//! always decline to provide a Write chunk for an eligible result.
//!
//! The binding is also correct for a responder (`call_ddp_arguments`), so the NFS
//! server can use the same one.

use nfs3::ulb::{call_has_ddp_item, max_reply_size};
use nfs3::{NfsProc3, NfsStat3, NFS_PROGRAM, NFS_V3};
use rpcrdma::rpc::ProcId;
use rpcrdma::ulb::{ReplySizing, UpperLayerBinding};
use rpcrdma_transport::binding::results_offset;
use rpcrdma_transport::RdmaBinding;
use xdr::{Bytes, Decoder, XdrStream};

/// RPC reply header before the results (RFC 5531 §9): xid, REPLY, MSG_ACCEPTED,
/// verifier flavor and length, accept_stat; plus the largest verifier body
/// (`opaque body<400>`, RFC 5531 §8.2), since the server chooses it.
const RPC_REPLY_HEADER_MAX: usize = 6 * 4 + 400;

/// The NFSv3 binding (program 100003, version 3).
#[derive(Debug, Clone, Copy, Default)]
pub struct Nfs3RdmaBinding;

/// The arguments of an encoded Call, past its RPC header (RFC 5531 §9: xid, CALL,
/// rpcvers, prog, vers, proc, cred, verf).
fn call_args(call: &XdrStream) -> Option<Decoder> {
    let mut dec = Decoder::new(call.inline.clone());
    for _ in 0..6 {
        dec.u32().ok()?;
    }
    for _ in 0..2 {
        dec.u32().ok()?;
        dec.opaque(400).ok()?;
    }
    Some(dec)
}

/// The `count` that bounds a variable-size result: READ3args `count` (§3.3.6),
/// READDIR3args `count` (§3.3.16), READDIRPLUS3args `maxcount` (§3.3.17).
fn bounding_count(proc: NfsProc3, call: &XdrStream) -> Option<u32> {
    let mut a = call_args(call)?;
    a.opaque(nfs3::NFS3_FHSIZE).ok()?; // the handle
    match proc {
        NfsProc3::READ => {
            a.u64().ok()?; // offset
            a.u32().ok()
        }
        NfsProc3::READDIR => {
            a.u64().ok()?; // cookie
            a.opaque_fixed(nfs3::NFS3_COOKIEVERFSIZE).ok()?;
            a.u32().ok()
        }
        NfsProc3::READDIRPLUS => {
            a.u64().ok()?;
            a.opaque_fixed(nfs3::NFS3_COOKIEVERFSIZE).ok()?;
            a.u32().ok()?; // dircount
            a.u32().ok() // maxcount
        }
        _ => Some(0),
    }
}

impl UpperLayerBinding for Nfs3RdmaBinding {
    fn binds(&self, prog: u32, vers: u32) -> bool {
        // RFC 8267 binds NFS version 3 (and 2); MOUNT and NLM are not bound.
        prog == NFS_PROGRAM && vers == NFS_V3
    }

    fn reply_sizing(&self, proc_id: ProcId, call: &XdrStream) -> ReplySizing {
        let proc = NfsProc3(proc_id.proc_num);
        let count = bounding_count(proc, call).unwrap_or(0);
        let results = max_reply_size(proc, count).unwrap_or(0);
        ReplySizing {
            max_reply: u32::try_from(RPC_REPLY_HEADER_MAX + results).unwrap_or(u32::MAX),
            // RFC 8267 §4.1: READ3resok `data` moves through one Write chunk.
            ddp_results: if proc == NfsProc3::READ {
                vec![count]
            } else {
                Vec::new()
            },
        }
    }

    fn call_ddp_arguments(&self, proc_id: ProcId) -> usize {
        // RFC 8267 §4.1: WRITE3args `data` and SYMLINK3args `symlink_data`.
        usize::from(call_has_ddp_item(NfsProc3(proc_id.proc_num)))
    }
}

impl RdmaBinding for Nfs3RdmaBinding {
    /// READ3resok (§3.3.6): `status`, `file_attributes` (post_op_attr), `count`,
    /// `eof`, then `data`'s length word: the placed data goes right after it. A
    /// failed READ has no data.
    fn reply_ddp_offsets(&self, proc_id: ProcId, reply: &Bytes) -> Option<Vec<usize>> {
        if NfsProc3(proc_id.proc_num) != NfsProc3::READ {
            return Some(Vec::new());
        }
        let Some(at) = results_offset(reply) else {
            return Some(Vec::new());
        };
        let mut dec = Decoder::new(reply.clone());
        dec.opaque_fixed(at).ok()?;
        if dec.u32().ok()? != NfsStat3::NFS3_OK.0 {
            return Some(Vec::new());
        }
        if dec.bool().ok()? {
            dec.opaque_fixed(nfs3::Fattr3::SIZE).ok()?;
        }
        dec.u32().ok()?; // count
        dec.bool().ok()?; // eof
        dec.u32().ok()?; // data's length word
        Some(vec![dec.position()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs3::io::{Read3Args, Read3ResOk};
    use nfs3::{DdpData, NfsFh3, NfsResult};
    use oncrpc::message::{CallHeader, Xid};
    use oncrpc::{OpaqueAuth, ReplyBody};
    use xdr::{Encode, Encoder};

    fn call(proc: NfsProc3, args: &impl Encode) -> XdrStream {
        let mut enc = Encoder::new();
        CallHeader::new(Xid(7), NFS_PROGRAM, NFS_V3, proc.0, OpaqueAuth::none()).encode(&mut enc);
        args.encode(&mut enc);
        enc.finish()
    }

    fn id(proc: NfsProc3) -> ProcId {
        ProcId {
            prog: NFS_PROGRAM,
            vers: NFS_V3,
            proc_num: proc.0,
        }
    }

    #[test]
    fn read_gets_one_write_chunk_of_its_count() {
        let args = Read3Args {
            file: NfsFh3(Bytes::from_static(&[1; 32])),
            offset: 1 << 40,
            count: 65536,
        };
        let s = Nfs3RdmaBinding.reply_sizing(id(NfsProc3::READ), &call(NfsProc3::READ, &args));
        assert_eq!(s.ddp_results, vec![65536]);
        assert!(s.max_reply as usize >= 65536 + 4 + 88 + 12);
    }

    #[test]
    fn other_procedures_get_no_write_chunk_and_bounded_replies() {
        let args = nfs3::attr::GetAttr3Args {
            object: NfsFh3(Bytes::from_static(&[1; 8])),
        };
        let s =
            Nfs3RdmaBinding.reply_sizing(id(NfsProc3::GETATTR), &call(NfsProc3::GETATTR, &args));
        assert!(s.ddp_results.is_empty());
        assert_eq!(s.max_reply as usize, RPC_REPLY_HEADER_MAX + 4 + 84);
        // READDIRPLUS is sized by maxcount.
        let rdp = nfs3::readdir::ReadDirPlus3Args {
            dir: NfsFh3(Bytes::from_static(&[1; 8])),
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 1024,
            maxcount: 32768,
        };
        let s = Nfs3RdmaBinding.reply_sizing(
            id(NfsProc3::READDIRPLUS),
            &call(NfsProc3::READDIRPLUS, &rdp),
        );
        assert_eq!(s.max_reply as usize, RPC_REPLY_HEADER_MAX + 4 + 32768);
    }

    #[test]
    fn only_write_and_symlink_carry_ddp_arguments() {
        for p in 0..22 {
            let n = Nfs3RdmaBinding.call_ddp_arguments(id(NfsProc3(p)));
            let want = usize::from(p == 7 || p == 10);
            assert_eq!(n, want, "procedure {p}");
        }
    }

    #[test]
    fn read_reply_data_goes_after_its_length_word() {
        // A reduced READ reply: the data was placed in the Write chunk, its length
        // word stays inline.
        let mut enc = Encoder::new();
        oncrpc::message::ReplyHeader {
            xid: Xid(7),
            body: ReplyBody::accepted(oncrpc::AcceptStat::SUCCESS),
        }
        .encode(&mut enc);
        let header_len = enc.inline_len();
        let res: NfsResult<Read3ResOk, nfs3::attr::ObjAttrFail> = NfsResult::Ok(Read3ResOk {
            file_attributes: None,
            count: 5,
            eof: true,
            data: DdpData(Bytes::new()),
        });
        res.encode(&mut enc);
        let reply = enc.finish().to_bytes();
        let offs = Nfs3RdmaBinding
            .reply_ddp_offsets(id(NfsProc3::READ), &reply)
            .unwrap();
        // status, post_op_attr (absent), count, eof, length word.
        assert_eq!(offs, vec![header_len + 5 * 4]);
        // A failed READ: nothing to put back.
        let mut enc = Encoder::new();
        oncrpc::message::ReplyHeader {
            xid: Xid(7),
            body: ReplyBody::accepted(oncrpc::AcceptStat::SUCCESS),
        }
        .encode(&mut enc);
        NfsStat3::NFS3ERR_IO.encode(&mut enc);
        enc.bool(false);
        let failed = enc.finish().to_bytes();
        assert_eq!(
            Nfs3RdmaBinding.reply_ddp_offsets(id(NfsProc3::READ), &failed),
            Some(vec![])
        );
    }
}
