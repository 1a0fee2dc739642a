//! The NFSv3 Upper Layer Binding for RPC-over-RDMA (RFC 8267), for both roles: one
//! binding shared by the server (`nfsd`), the client (`nfsclient`) and the lab's tests.
//!
//! Specs: RFC 8267 §4.1 (DDP-eligible items), §4.2 (reply size);
//! rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §8 (what a ULB provides), §8.1.1
//! (DDP-eligibility violations). Built with the `rdma` feature.
//!
//! - Responder: whether a program is bound (`binds`: NFS version 3, and NFS_ACL
//!   version 3 as Linux uses it, see below; MOUNT is not bound, RFC 8267 §5) and
//!   where a Call's DDP-eligible arguments are, the only places a Read chunk may go
//!   (`call_ddp_positions`: WRITE's data and SYMLINK's path, found by decoding). DDP-eligible *results*
//!   (READ data, READLINK path) are already marked by this crate's encoders
//!   ([`xdr::Encoder::ddp_opaque`]), so the reply marshaler needs no help for them.
//! - Requester (choices as Linux xprtrdma makes them): a Write chunk is offered only
//!   for READ data; READLINK's path comes back inline or in the Reply chunk, which
//!   `reply_sizing` sizes from the procedure's bound (READ/READDIR counts).
//!   `reply_ddp_offsets` says where placed READ data goes back into the reply.
//!
//! # NFS_ACL
//! The Linux NFSv3 client sends an NFS_ACL (program 100227) version 3 NULL on the NFS
//! transport right after FSINFO and PATHCONF, over RDMA too, and waits for its
//! answer: a server that stays silent (as rfc5666bis §8 literally asks for a program
//! without a ULB) stalls every mount until that call times out. Linux knfsd serves
//! NFS_ACL on its RDMA listener. No RFC binds NFS_ACL, but it has no DDP-eligible
//! item and small replies, i.e. a trivial binding; we treat it as bound so the
//! dispatcher answers PROG_UNAVAIL (we do not implement NFS_ACL), exactly as over
//! TCP, and the client goes on without ACLs.

use crate::ulb::{call_has_ddp_item, max_reply_size};
use crate::{DirOpArgs3, NfsFh3, NfsProc3, Sattr3, NFS_PROGRAM, NFS_V3};
use rpcrdma::rpc::ProcId;
use rpcrdma::ulb::{ReplySizing, UpperLayerBinding};
use xdr::{Bytes, Decode, Decoder, XdrStream};

/// RPC reply header before the results (RFC 5531 §9), with the largest verifier
/// (`opaque body<400>`, §8.2).
const RPC_REPLY_HEADER_MAX: usize = 6 * 4 + 400;

/// NFS_ACL program number (Linux `NFS_ACL_PROGRAM`; no RFC).
pub const NFS_ACL_PROGRAM: u32 = 100_227;

/// NFS version 3 (program 100003) over RPC-over-RDMA, as served by `nfsd`; plus the
/// trivial NFS_ACL version 3 binding (module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct Nfs3Binding;

/// READ3args `count` (RFC 1813 §3.3.6), READDIR3args `count` (§3.3.16) or
/// READDIRPLUS3args `maxcount` (§3.3.17) of an encoded Call; 0 for other procedures.
fn bounding_count(proc: NfsProc3, call: &XdrStream) -> Option<u32> {
    let mut a = Decoder::new(call.inline.clone());
    // RFC 5531 §9: xid, CALL, rpcvers, prog, vers, proc, cred, verf.
    for _ in 0..6 {
        a.u32().ok()?;
    }
    for _ in 0..2 {
        a.u32().ok()?;
        a.opaque(400).ok()?;
    }
    a.opaque(crate::NFS3_FHSIZE).ok()?;
    match proc {
        NfsProc3::READ => {
            a.u64().ok()?;
            a.u32().ok()
        }
        NfsProc3::READDIR => {
            a.u64().ok()?;
            a.opaque_fixed(crate::NFS3_COOKIEVERFSIZE).ok()?;
            a.u32().ok()
        }
        NfsProc3::READDIRPLUS => {
            a.u64().ok()?;
            a.opaque_fixed(crate::NFS3_COOKIEVERFSIZE).ok()?;
            a.u32().ok()?;
            a.u32().ok()
        }
        _ => Some(0),
    }
}

impl UpperLayerBinding for Nfs3Binding {
    /// RFC 8267 binds NFS versions 2 and 3; we serve version 3. "MOUNT ... \[is\] not
    /// bound": a MOUNT call over RDMA earns no reply (rfc5666bis §8: "Responders
    /// MUST NOT reply to RPC-over-RDMA messages for Upper Layer Protocols that do
    /// not have a Upper Layer Binding").
    fn binds(&self, prog: u32, vers: u32) -> bool {
        (prog == NFS_PROGRAM || prog == NFS_ACL_PROGRAM) && vers == NFS_V3
    }

    fn reply_sizing(&self, proc_id: ProcId, call: &XdrStream) -> ReplySizing {
        if proc_id.prog != NFS_PROGRAM {
            // NFS_ACL: we answer PROG_UNAVAIL, a bare reply header.
            return ReplySizing {
                max_reply: RPC_REPLY_HEADER_MAX as u32,
                ddp_results: Vec::new(),
            };
        }
        let proc = NfsProc3(proc_id.proc_num);
        let count = bounding_count(proc, call).unwrap_or(0);
        let results = max_reply_size(proc, count).unwrap_or(0);
        ReplySizing {
            max_reply: u32::try_from(RPC_REPLY_HEADER_MAX + results).unwrap_or(u32::MAX),
            ddp_results: if proc == NfsProc3::READ {
                vec![count]
            } else {
                Vec::new()
            },
        }
    }

    /// RFC 8267 §4.1: "the opaque file data in the WRITE procedure's argument, the
    /// pathname in the SYMLINK procedure's argument" are DDP-eligible; nothing else.
    /// Each is found by decoding the arguments before it (`WRITE3args`: file, offset,
    /// count, stable; `SYMLINK3args`: where, then `symlinkdata3`'s attributes), so a
    /// Read chunk placed over the file handle or a name is told from one over the data.
    fn call_ddp_positions(&self, proc_id: ProcId, call: &Bytes) -> Option<Vec<u32>> {
        let proc = NfsProc3(proc_id.proc_num);
        if proc_id.prog != NFS_PROGRAM || !call_has_ddp_item(proc) {
            return Some(Vec::new());
        }
        let mut args = rpcrdma::rpc::call_args(call)?;
        match proc {
            NfsProc3::WRITE => {
                NfsFh3::decode(&mut args).ok()?;
                args.u64().ok()?; // offset
                args.u32().ok()?; // count
                args.u32().ok()?; // stable
            }
            _ => {
                DirOpArgs3::decode(&mut args).ok()?;
                Sattr3::decode(&mut args).ok()?;
            }
        }
        args.u32().ok()?; // the item's length word; its data follows
        Some(vec![u32::try_from(args.position()).ok()?])
    }

    /// A requester's question; the responder never asks it. Answered for READ (the
    /// one result a Write chunk is offered for): right after the `data` length word
    /// of READ3resok.
    fn reply_ddp_offsets(&self, proc_id: ProcId, reply: &Bytes) -> Option<Vec<usize>> {
        if proc_id.prog != NFS_PROGRAM || NfsProc3(proc_id.proc_num) != NfsProc3::READ {
            return Some(Vec::new());
        }
        let Some(at) = rpcrdma::rpc::results_offset(reply) else {
            return Some(Vec::new());
        };
        let mut dec = Decoder::new(reply.clone());
        dec.opaque_fixed(at).ok()?;
        if dec.u32().ok()? != crate::NfsStat3::NFS3_OK.0 {
            return Some(Vec::new());
        }
        if dec.bool().ok()? {
            dec.opaque_fixed(crate::Fattr3::SIZE).ok()?;
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
    use crate::io::{Read3Args, Read3ResOk};
    use crate::{DdpData, NfsFh3, NfsResult, NfsStat3, MOUNT_PROGRAM};
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
        let s = Nfs3Binding.reply_sizing(id(NfsProc3::READ), &call(NfsProc3::READ, &args));
        assert_eq!(s.ddp_results, vec![65536]);
        assert!(s.max_reply as usize >= 65536 + 4 + 88 + 12);
    }

    #[test]
    fn other_procedures_get_no_write_chunk_and_bounded_replies() {
        let args = crate::attr::GetAttr3Args {
            object: NfsFh3(Bytes::from_static(&[1; 8])),
        };
        let s = Nfs3Binding.reply_sizing(id(NfsProc3::GETATTR), &call(NfsProc3::GETATTR, &args));
        assert!(s.ddp_results.is_empty());
        assert_eq!(s.max_reply as usize, RPC_REPLY_HEADER_MAX + 4 + 84);
        // READDIRPLUS is sized by maxcount.
        let rdp = crate::readdir::ReadDirPlus3Args {
            dir: NfsFh3(Bytes::from_static(&[1; 8])),
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 1024,
            maxcount: 32768,
        };
        let s = Nfs3Binding.reply_sizing(
            id(NfsProc3::READDIRPLUS),
            &call(NfsProc3::READDIRPLUS, &rdp),
        );
        assert_eq!(s.max_reply as usize, RPC_REPLY_HEADER_MAX + 4 + 32768);
    }

    /// A WRITE and a SYMLINK with every variable-length field before their DDP-eligible
    /// item set (a 40-byte handle, a name, attributes with times): the binding finds
    /// each item where the encoder put it (`DdpItem::inline_offset`, computed
    /// independently as it encodes), parsing the reduced Call as a responder gets it.
    fn write_and_symlink() -> [(NfsProc3, XdrStream); 2] {
        let fh = NfsFh3(Bytes::from_static(&[9; 40]));
        let write = crate::io::Write3Args {
            file: fh.clone(),
            offset: 1 << 33,
            count: 5,
            stable: crate::StableHow::FILE_SYNC,
            data: DdpData(Bytes::from_static(b"hello")),
        };
        let symlink = crate::dir::Symlink3Args {
            dir_op: crate::DirOpArgs3 {
                dir: fh,
                name: crate::Filename3(Bytes::from_static(b"a-link")),
            },
            symlink: crate::dir::SymlinkData3 {
                symlink_attributes: Sattr3 {
                    mode: Some(0o777),
                    uid: Some(1000),
                    atime: crate::SetTime::ClientTime(crate::NfsTime3 {
                        seconds: 1,
                        nseconds: 2,
                    }),
                    ..Sattr3::default()
                },
                symlink_data: crate::NfsPath3(Bytes::from_static(b"../target")),
            },
        };
        [
            (NfsProc3::WRITE, call(NfsProc3::WRITE, &write)),
            (NfsProc3::SYMLINK, call(NfsProc3::SYMLINK, &symlink)),
        ]
    }

    #[test]
    fn s8_1_1_write_and_symlink_data_are_found_where_the_encoder_put_them() {
        for (proc, stream) in write_and_symlink() {
            assert_eq!(stream.ddp.len(), 1, "{proc:?}");
            let want = stream.ddp[0].inline_offset as u32;
            assert_eq!(
                Nfs3Binding.call_ddp_positions(id(proc), &stream.inline),
                Some(vec![want]),
                "{proc:?}"
            );
            // Cut before the item's length word: it cannot be located.
            let cut = stream.inline.slice(..want as usize - 4);
            assert_eq!(Nfs3Binding.call_ddp_positions(id(proc), &cut), None);
        }
    }

    #[test]
    fn only_write_and_symlink_carry_ddp_arguments() {
        let any = call(NfsProc3::GETATTR, &NfsFh3(Bytes::from_static(&[1; 8]))).inline;
        for p in 0..22 {
            let proc = NfsProc3(p);
            if proc == NfsProc3::WRITE || proc == NfsProc3::SYMLINK {
                continue;
            }
            assert_eq!(
                Nfs3Binding.call_ddp_positions(id(proc), &any),
                Some(Vec::new()),
                "procedure {p}"
            );
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
        let res: NfsResult<Read3ResOk, crate::attr::ObjAttrFail> = NfsResult::Ok(Read3ResOk {
            file_attributes: None,
            count: 5,
            eof: true,
            data: DdpData(Bytes::new()),
        });
        res.encode(&mut enc);
        let reply = enc.finish().to_bytes();
        let offs = Nfs3Binding
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
            Nfs3Binding.reply_ddp_offsets(id(NfsProc3::READ), &failed),
            Some(vec![])
        );
    }

    #[test]
    fn read_reply_offsets_skip_a_non_empty_verifier() {
        // RPCSEC_GSS-style verifier (flavor 6, 37 bytes, padded to 40).
        let mut enc = Encoder::new();
        oncrpc::message::ReplyHeader {
            xid: Xid(8),
            body: ReplyBody::Accepted {
                verf: OpaqueAuth {
                    flavor: oncrpc::AuthFlavor::RPCSEC_GSS,
                    body: Bytes::from_static(&[9; 37]),
                },
                status: oncrpc::AcceptedStatus::Success,
            },
        }
        .encode(&mut enc);
        let header_len = enc.inline_len();
        assert_eq!(header_len, 24 + 40);
        let res: NfsResult<Read3ResOk, crate::attr::ObjAttrFail> = NfsResult::Ok(Read3ResOk {
            file_attributes: None,
            count: 5,
            eof: true,
            data: DdpData(Bytes::new()),
        });
        res.encode(&mut enc);
        let reply = enc.finish().to_bytes();
        assert_eq!(
            Nfs3Binding.reply_ddp_offsets(id(NfsProc3::READ), &reply),
            Some(vec![header_len + 5 * 4])
        );
        // Cut anywhere inside the results: no offset, no panic.
        for n in header_len..reply.len() {
            assert_eq!(
                Nfs3Binding.reply_ddp_offsets(id(NfsProc3::READ), &reply.slice(..n)),
                None,
                "{n} bytes"
            );
        }
    }

    /// ARCHITECTURE.md: the NFSv3 binding is written against the protocol core
    /// (`rpcrdma`), not the transport that runs it (issue item 6, layering).
    #[test]
    fn layering_the_binding_depends_on_the_core_only() {
        let manifest = include_str!("../Cargo.toml");
        assert!(manifest.contains("rdma = [\"dep:rpcrdma\"]"), "{manifest}");
        assert!(!manifest.contains("rpcrdma-transport"), "{manifest}");
    }

    #[test]
    fn binds_nfs3_and_nfs_acl3_not_mount_rfc8267() {
        assert!(Nfs3Binding.binds(NFS_PROGRAM, NFS_V3));
        assert!(!Nfs3Binding.binds(NFS_PROGRAM, 4));
        assert!(!Nfs3Binding.binds(MOUNT_PROGRAM, 3));
        assert!(Nfs3Binding.binds(NFS_ACL_PROGRAM, 3));
    }

    #[test]
    fn nfs_acl_calls_carry_no_ddp_items() {
        // NFS_ACL procedure 7 would be NFS WRITE's number: the program decides.
        for p in 0..8 {
            let id = ProcId {
                prog: NFS_ACL_PROGRAM,
                vers: 3,
                proc_num: p,
            };
            let (_, write) = &write_and_symlink()[0];
            assert_eq!(
                Nfs3Binding.call_ddp_positions(id, &write.inline),
                Some(Vec::new())
            );
        }
    }
}
