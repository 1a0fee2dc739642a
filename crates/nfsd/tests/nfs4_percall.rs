//! A driver, not a test: sends an nfsd that runs elsewhere the NFSv4.1 COMPOUNDs the
//! Linux client sends for open(O_CREAT)+close (OPEN with GETFH, ACCESS and GETATTR;
//! ACCESS of the directory; CLOSE), open(O_RDONLY)+close, stat (LOOKUP, GETFH,
//! GETATTR), access and
//! unlink (REMOVE, GETATTR), N files each, one at a time, so that `strace -f -c -p`
//! of that nfsd counts its system calls per call
//! (docs/bench/percall/measure41.sh runs it; docs/bench/README.md, "NFSv4.1
//! COMPOUNDs inline"). Ignored by `cargo test`; run by name with
//! NFSD_ADDR=host:port NFSD_EXPORT=/path N=500 WHAT=create|open|openfh|lookup|access|list|listplus|remove
//! (list: N listings of the whole directory by READDIR; listplus: with the Linux
//! client's readdirplus attributes; openfh: the open of a file whose handle the
//! client has, OPEN_NOATTR with CLAIM_FH, as in `nfsbench lab`'s open phase).
mod common;
use common::nfs4::*;
use nfs4::compound::{NfsArgop4, NfsResop4};
use nfs4::fh::*;
use nfs4::state::*;
use nfs4::*;
use xdr::Encoder;

/// GETATTR of what the Linux client asks with OPEN and LOOKUP: type, change, size,
/// fsid, fileid, mode, numlinks, owner, owner_group, rawdev, space_used, the three
/// times and mounted_on_fileid.
fn big_getattr() -> NfsArgop4 {
    NfsArgop4::GetAttr(GetAttr4Args {
        attr_request: Bitmap4::from_bits(&[1, 3, 4, 8, 20, 33, 35, 36, 37, 41, 45, 47, 52, 53, 55]),
    })
}

/// OPEN of `name` in `dir` as the Linux client sends it (with GETFH, ACCESS and
/// GETATTR), created as `how` says: the open stateid and the file's handle.
async fn open(
    s: &mut Session,
    dir: &NfsFh4,
    name: &str,
    access: u32,
    how: Option<CreateHow4>,
) -> (StateId4, NfsFh4) {
    let owner = StateOwner4 {
        clientid: s.clientid,
        owner: b"open id:\x00\x00\x00\x01".as_slice().into(),
    };
    let res = s
        .run(vec![
            NfsArgop4::PutFh(PutFh4Args {
                object: dir.clone(),
            }),
            NfsArgop4::Open(Open4Args {
                seqid: 0,
                share_access: access,
                share_deny: 0,
                owner,
                openhow: OpenFlag4(how),
                claim: OpenClaim4::Null(name.into()),
            }),
            NfsArgop4::GetFh,
            NfsArgop4::Access(Access4Args { access: 0x1f }),
            big_getattr(),
        ])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let (NfsResop4::Open(Res4::Ok(o)), NfsResop4::GetFh(Res4::Ok(fh))) =
        (&res.resarray[2], &res.resarray[3])
    else {
        panic!("OPEN: {res:?}")
    };
    (o.stateid, fh.object.clone())
}

/// CLOSE of the open `stateid` of the file `fh`.
async fn close(s: &mut Session, fh: NfsFh4, stateid: StateId4) {
    let res = s
        .run(vec![
            NfsArgop4::PutFh(PutFh4Args { object: fh }),
            NfsArgop4::Close(Close4Args {
                seqid: 0,
                open_stateid: stateid,
            }),
        ])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
}

#[tokio::test]
#[ignore = "a measurement driver: docs/bench/percall/measure41.sh runs it"]
async fn percall41() {
    let env = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: see the module docs"))
    };
    let addr: std::net::SocketAddr = env("NFSD_ADDR").parse().expect("NFSD_ADDR: host:port");
    let export = std::path::PathBuf::from(env("NFSD_EXPORT"));
    let n: usize = std::env::var("N")
        .map(|s| s.parse().unwrap())
        .unwrap_or(500);
    let what = std::env::var("WHAT").unwrap_or("create".into());
    assert!(
        ["create", "open", "openfh", "lookup", "access", "list", "listplus", "remove"]
            .contains(&what.as_str()),
        "WHAT={what}: create, open, openfh, lookup, access, list, listplus or remove"
    );
    let mut s = Session::new(addr, &format!("percall-{}", std::process::id())).await;
    let mut ops = vec![NfsArgop4::PutRootFh];
    ops.extend(walk(&export));
    ops.push(NfsArgop4::GetFh);
    let res = s.run(ops).await;
    let NfsResop4::GetFh(Res4::Ok(dir)) = res.resarray.last().unwrap() else {
        panic!("{res:?}")
    };
    let dir = dir.object.clone();
    // openfh: the files' handles, taken before the measurement (the client has them
    // from the stat before its opens).
    let mut handles = Vec::new();
    if what == "openfh" {
        for i in 0..n {
            let res = s
                .run(vec![
                    NfsArgop4::PutFh(PutFh4Args {
                        object: dir.clone(),
                    }),
                    NfsArgop4::Lookup(Lookup4Args {
                        objname: format!("p{i}").as_str().into(),
                    }),
                    NfsArgop4::GetFh,
                ])
                .await;
            let NfsResop4::GetFh(Res4::Ok(fh)) = &res.resarray[3] else {
                panic!("LOOKUP p{i}: {res:?}")
            };
            handles.push(fh.object.clone());
        }
    }
    eprintln!("ready");
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let t = std::time::Instant::now();
    for i in 0..n {
        let name = format!("p{i}");
        if what == "create" {
            let mut e = Encoder::new();
            e.u32(0o644);
            let attrs = Fattr4 {
                attrmask: Bitmap4::from_bits(&[33]),
                attr_vals: AttrList4(e.finish().to_bytes()),
            };
            let how = Some(CreateHow4::Unchecked(attrs));
            let (stateid, fh) = open(&mut s, &dir, &name, OPEN4_SHARE_ACCESS_WRITE, how).await;
            let res = s
                .run(vec![
                    NfsArgop4::PutFh(PutFh4Args {
                        object: dir.clone(),
                    }),
                    NfsArgop4::Access(Access4Args { access: 0x1f }),
                    big_getattr(),
                ])
                .await;
            assert_eq!(res.status, NfsStat4::NFS4_OK);
            close(&mut s, fh, stateid).await;
        } else if what == "open" {
            // open(O_RDONLY) + close of a file that is there, as the Linux client
            // sends them after a stat.
            let (stateid, fh) = open(&mut s, &dir, &name, OPEN4_SHARE_ACCESS_READ, None).await;
            close(&mut s, fh, stateid).await;
        } else if what == "openfh" {
            // The same open as the Linux client sends it for a file whose handle it
            // has (OPEN_NOATTR: PUTFH of the file, OPEN with CLAIM_FH, ACCESS,
            // GETATTR; `encode_open_noattr` in fs/nfs/nfs4xdr.c).
            let fh = handles
                .get(i)
                .cloned()
                .expect("looked up before the measurement");
            let owner = StateOwner4 {
                clientid: s.clientid,
                owner: b"open id:\x00\x00\x00\x01".as_slice().into(),
            };
            let res = s
                .run(vec![
                    NfsArgop4::PutFh(PutFh4Args { object: fh.clone() }),
                    NfsArgop4::Open(Open4Args {
                        seqid: 0,
                        share_access: OPEN4_SHARE_ACCESS_READ,
                        share_deny: 0,
                        owner,
                        openhow: OpenFlag4(None),
                        claim: OpenClaim4::Fh,
                    }),
                    NfsArgop4::Access(Access4Args { access: 0x1f }),
                    big_getattr(),
                ])
                .await;
            let NfsResop4::Open(Res4::Ok(o)) = &res.resarray[2] else {
                panic!("OPEN: {res:?}")
            };
            close(&mut s, fh, o.stateid).await;
        } else if what == "lookup" {
            let res = s
                .run(vec![
                    NfsArgop4::PutFh(PutFh4Args {
                        object: dir.clone(),
                    }),
                    NfsArgop4::Lookup(Lookup4Args {
                        objname: name.as_str().into(),
                    }),
                    NfsArgop4::GetFh,
                    big_getattr(),
                ])
                .await;
            assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
        } else if what == "access" {
            let res = s
                .run(vec![
                    NfsArgop4::PutFh(PutFh4Args {
                        object: dir.clone(),
                    }),
                    NfsArgop4::Access(Access4Args { access: 0x1f }),
                    big_getattr(),
                ])
                .await;
            assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
        } else if what == "list" || what == "listplus" {
            // The whole directory, as `ls` over a Linux mount reads it (once per
            // "file": N listings): names and file ids, or (`listplus`) with the
            // attributes and handle of each entry the Linux client asks for its
            // readdirplus (`encode_readdir` in fs/nfs/nfs4xdr.c).
            let (mut cookie, mut verf, mut names) = (0u64, [0u8; 8], 0usize);
            loop {
                let res = s
                    .run(vec![
                        NfsArgop4::PutFh(PutFh4Args {
                            object: dir.clone(),
                        }),
                        NfsArgop4::ReadDir(nfs4::dir::ReadDir4Args {
                            cookie,
                            cookieverf: verf,
                            dircount: 8192,
                            maxcount: 32768,
                            attr_request: if what == "list" {
                                Bitmap4::from_bits(&[1, 20])
                            } else {
                                Bitmap4::from_bits(&[
                                    1, 3, 4, 8, 11, 19, 20, 33, 35, 36, 37, 41, 45, 47, 52, 53, 55,
                                    80,
                                ])
                            },
                        }),
                    ])
                    .await;
                let NfsResop4::ReadDir(Res4::Ok(ok)) = &res.resarray[2] else {
                    panic!("READDIR: {res:?}")
                };
                names += ok.reply.entries.len();
                verf = ok.cookieverf;
                match ok.reply.entries.last() {
                    Some(e) if !ok.reply.eof => cookie = e.cookie,
                    _ => break,
                }
            }
            if i == 0 {
                eprintln!("{names} names per listing");
            }
        } else if what == "remove" {
            let res = s
                .run(vec![
                    NfsArgop4::PutFh(PutFh4Args {
                        object: dir.clone(),
                    }),
                    NfsArgop4::Remove(nfs4::dir::Remove4Args {
                        target: name.as_str().into(),
                    }),
                    big_getattr(),
                ])
                .await;
            assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
        }
    }
    eprintln!("{what} {n}: {:?}", t.elapsed());
}
