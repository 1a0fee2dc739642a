//! Helpers shared by the unit tests.

use bytes::Bytes;

/// Decodes a hex string, ignoring whitespace.
pub(crate) fn hex(s: &str) -> Bytes {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len() % 2 == 0, "odd hex length");
    let nib = |c: u8| match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("bad hex digit {c}"),
    };
    Bytes::from(
        digits
            .chunks(2)
            .map(|p| nib(p[0]) << 4 | nib(p[1]))
            .collect::<Vec<u8>>(),
    )
}

/// Encodes 32-bit words big-endian.
pub(crate) fn words(w: &[u32]) -> Bytes {
    Bytes::from(w.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>())
}

/// RPC-over-RDMA v1 headers captured from Linux 6.1 (crates/iwarp/tests/vectors/linux-6.1-siw.json).
pub(crate) mod vectors {
    pub(crate) const NULL_CALL_KERNEL_CLIENT: &str =
        "02c704b8000000010000008000000000000000000000000000000000";
    /// The NFSv3 NULL call that followed it in the same Send.
    pub(crate) const NULL_CALL_RPC: &str =
        "02c704b8 00000000 00000002 000186a3 00000003 00000000 00000000 00000000 00000000 00000000";
    pub(crate) const NULL_REPLY_KNFSD: &str =
        "02c704b8000000010000004000000000000000000000000000000000";
    pub(crate) const WRITE_CALL_READ_LIST: &str = "10c704b80000000100000080000000000000000100000070a886bd010002000010c704b8c4db5000000000000000000000000000";
    pub(crate) const READ_CALL_WRITE_LIST: &str = "0cc704b80000000100000080000000000000000000000001000000018cd1cf01000010000cc704b8c4d340000000000000000000";
    pub(crate) const READ_CALL_WRITE_LIST_PAD: &str = "3958cd2c000000010000008000000000000000000000000100000002f661100100000ffd3958cd2c84f08e20afb9010100000004000000009638ef2c0000000000000000";
    pub(crate) const READ_REPLY_WRITE_LIST: &str = "0cc704b80000000100000040000000000000000000000001000000018cd1cf01000000170cc704b8c4d340000000000000000000";
    pub(crate) const READ_REPLY_WRITE_LIST_PAD: &str = "3958cd2c000000010000004000000000000000000000000100000002f661100100000ffd3958cd2c84f08e20afb9010100000000000000009638ef2c0000000000000000";
    pub(crate) const GETACL_CALL_REPLY_CHUNK: &str = "0ec704b8000000010000008000000000000000000000000000000001000000036ecf0802000001000ec704b8c9f5d00096de0802000070000ec704b8c548c00004a5ee01000000040ec704b8c9f5d100";
    pub(crate) const GETACL_REPLY_NOMSG: &str = "0ec704b8000000010000004000000001000000000000000000000001000000036ecf0802000000880ec704b8c9f5d00096de0802000000000ec704b8c548c00004a5ee01000000000ec704b8c9f5d100";
    pub(crate) const READDIRPLUS_CALL_REPLY_CHUNK: &str = "3658cd2c00000001000000800000000000000000000000000000000100000003e0183b010000007c3658cd2c89fef800948c0301000100003658cd2c82720000a637d601000000043658cd2c89fef87c";
    pub(crate) const READDIRPLUS_REPLY_NOMSG: &str = "3658cd2c00000001000000400000000100000000000000000000000100000003e0183b010000007c3658cd2c89fef800948c03010000293c3658cd2c82720000a637d601000000003658cd2c89fef87c";
    pub(crate) const EXCHANGE_ID_CALL_REPLY_CHUNK: &str = "e4d853200000000100000080000000000000000000000000000000010000000113875d0100001090e4d853208a400000";
    pub(crate) const EXCHANGE_ID_REPLY_NOMSG: &str = "e4d853200000000100000040000000010000000000000000000000010000000113875d0100000064e4d853208a400000";
    pub(crate) const BAD_VERSION_CALL: &str =
        "df771353000000070000002000000000000000000000000000000000";
    pub(crate) const ERR_VERS_KNFSD: &str =
        "df771353000000070000004000000004000000010000000100000001";
    pub(crate) const MSGP_CALL: &str =
        "a95c540d0000000100000020000000020000000000000000000000000000000000000000";
    pub(crate) const ERR_CHUNK_MSGP_KNFSD: &str = "a95c540d00000001000000400000000400000002";
    pub(crate) const UNKNOWN_PROC_CALL: &str =
        "5528ca7e000000010000002000000009000000000000000000000000";
    pub(crate) const ERR_CHUNK_UNKNOWN_PROC_KNFSD: &str =
        "5528ca7e00000001000000400000000400000002";
}

/// An Upper Layer Binding for tests: NFSv3 numbers, fixed answers.
#[derive(Debug, Clone, Default)]
pub(crate) struct TestUlb {
    pub(crate) max_reply: u32,
    pub(crate) ddp_results: Vec<u32>,
    /// DDP-eligible arguments of every Call (0 or 1 are modelled).
    pub(crate) call_ddp: usize,
}

impl crate::ulb::UpperLayerBinding for TestUlb {
    fn binds(&self, prog: u32, vers: u32) -> bool {
        prog == 100_003 && vers == 3
    }

    fn reply_sizing(&self, _: crate::rpc::ProcId, _: &xdr::XdrStream) -> crate::ulb::ReplySizing {
        crate::ulb::ReplySizing {
            max_reply: self.max_reply,
            ddp_results: self.ddp_results.clone(),
        }
    }

    /// One DDP-eligible result, the last item of the reply ([`rpc_reply`] puts it
    /// there): its data goes back at the end of the reduced stream, after its count.
    fn reply_ddp_offsets(&self, _: crate::rpc::ProcId, reply: &Bytes) -> Option<Vec<usize>> {
        (!self.ddp_results.is_empty()).then(|| vec![reply.len()])
    }

    /// `call_ddp` arguments, the last one at the end of the reduced stream (as NFS
    /// WRITE's data, the last item of its arguments: [`nfs_call`] and Linux's WRITE
    /// vector place it there); earlier ones are not modelled.
    fn call_ddp_positions(&self, _: crate::rpc::ProcId, call: &Bytes) -> Option<Vec<u32>> {
        Some(match self.call_ddp {
            0 => Vec::new(),
            _ => vec![u32::try_from(call.len()).ok()?],
        })
    }
}

/// An NFSv3 Call (AUTH_NONE): header words, `extra` words, then an optional
/// DDP-eligible opaque.
pub(crate) fn nfs_call(
    xid: u32,
    proc_num: u32,
    extra: &[u32],
    ddp: Option<Bytes>,
) -> xdr::XdrStream {
    let mut e = xdr::Encoder::new();
    for w in [xid, 0, 2, 100_003, 3, proc_num, 0, 0, 0, 0] {
        e.u32(w);
    }
    for w in extra {
        e.u32(*w);
    }
    if let Some(d) = ddp {
        e.ddp_opaque(d);
    }
    e.finish()
}

/// An accepted, successful RPC Reply (AUTH_NONE): header words, `extra` words, then
/// an optional DDP-eligible opaque.
pub(crate) fn rpc_reply(xid: u32, extra: &[u32], ddp: Option<Bytes>) -> xdr::XdrStream {
    let mut e = xdr::Encoder::new();
    for w in [xid, 1, 0, 0, 0, 0] {
        e.u32(w);
    }
    for w in extra {
        e.u32(*w);
    }
    if let Some(d) = ddp {
        e.ddp_opaque(d);
    }
    e.finish()
}
