//! Round trips, DDP marking and reply-size bounds.

use xdr::{Bytes, Decode, Encode};

use crate::attr::*;
use crate::dir::*;
use crate::fs::*;
use crate::io::*;
use crate::mount::*;
use crate::readdir::*;
use crate::ulb::*;
use crate::*;

fn round_trip<T: Encode + Decode + PartialEq + core::fmt::Debug>(v: &T) -> Bytes {
    let wire = v.to_xdr().to_bytes();
    assert_eq!(&T::from_xdr(wire.clone()).unwrap(), v);
    wire
}

fn fh(n: usize) -> NfsFh3 {
    NfsFh3(Bytes::from(vec![0xa5; n]))
}

fn fattr() -> Fattr3 {
    Fattr3 {
        ftype: Ftype3::NF3REG,
        mode: 0o644,
        nlink: 1,
        uid: 1000,
        gid: 1000,
        size: 12345,
        used: 16384,
        rdev: SpecData3 {
            specdata1: 0,
            specdata2: 0,
        },
        fsid: 7,
        fileid: 99,
        atime: NfsTime3 {
            seconds: 1,
            nseconds: 2,
        },
        mtime: NfsTime3::default(),
        ctime: NfsTime3::default(),
    }
}

fn wcc() -> WccData {
    WccData {
        before: Some(WccAttr {
            size: 1,
            mtime: NfsTime3::default(),
            ctime: NfsTime3::default(),
        }),
        after: Some(fattr()),
    }
}

#[test]
fn fattr3_is_84_bytes() {
    assert_eq!(round_trip(&fattr()).len(), Fattr3::SIZE);
}

#[test]
fn unknown_enum_values_survive_decoding() {
    let s = NfsStat3::from_xdr(Bytes::from_static(&[0, 0, 0x27, 0x7f])).unwrap();
    assert_eq!(s, NfsStat3(10111));
    assert_eq!(s.name(), None);
    assert_eq!(format!("{:?}", NfsStat3::NFS3ERR_STALE), "NFS3ERR_STALE");
}

#[test]
fn file_handle_over_64_bytes_is_refused() {
    let wire = Bytes::from([&[0u8, 0, 0, 65][..], &[0; 68]].concat());
    assert!(NfsFh3::from_xdr(wire).is_err());
    round_trip(&fh(64));
}

#[test]
fn long_names_decode_so_the_server_can_answer_nametoolong() {
    let name = Filename3(Bytes::from(vec![b'x'; 300]));
    round_trip(&DirOpArgs3 { dir: fh(8), name });
}

#[test]
fn sattr3_all_arms_round_trip() {
    round_trip(&Sattr3::default());
    round_trip(&Sattr3 {
        mode: Some(0o755),
        uid: Some(1),
        gid: Some(2),
        size: Some(3),
        atime: SetTime::ServerTime,
        mtime: SetTime::ClientTime(NfsTime3 {
            seconds: 5,
            nseconds: 6,
        }),
    });
    // time_how 3 is not defined: a bad discriminant, hence GARBAGE_ARGS upstairs.
    let bad = Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]);
    assert!(Sattr3::from_xdr(bad).is_err());
}

#[test]
fn create_how_round_trips_and_rejects_unknown_mode() {
    for how in [
        CreateHow3::Unchecked(Sattr3::default()),
        CreateHow3::Guarded(Sattr3::default()),
        CreateHow3::Exclusive(*b"verifier"),
    ] {
        round_trip(&Create3Args {
            dir_op: DirOpArgs3 {
                dir: fh(16),
                name: "a".into(),
            },
            how,
        });
    }
    assert!(CreateHow3::from_xdr(Bytes::from_static(&[0, 0, 0, 3])).is_err());
}

#[test]
fn mknod_data_arms() {
    round_trip(&MknodData3::Device(
        Ftype3::NF3CHR,
        DeviceData3 {
            dev_attributes: Sattr3::default(),
            spec: SpecData3 {
                specdata1: 1,
                specdata2: 3,
            },
        },
    ));
    round_trip(&MknodData3::Pipe(Ftype3::NF3FIFO, Sattr3::default()));
    round_trip(&MknodData3::Other(Ftype3::NF3DIR));
}

/// RFC 8267 §4.1: READ3resok data is DDP-eligible; the encoder must reference the
/// buffer, not copy it.
#[test]
fn read_data_is_a_ddp_item_without_copy() {
    let data = Bytes::from(vec![7u8; 4097]);
    let res: Read3Res = NfsResult::Ok(Read3ResOk {
        file_attributes: Some(fattr()),
        count: 4097,
        eof: true,
        data: DdpData(data.clone()),
    });
    let s = res.to_xdr();
    assert_eq!(s.ddp.len(), 1);
    assert_eq!(s.ddp[0].data.as_ptr(), data.as_ptr());
    // status, post_op_attr, count, eof, length word: then the data.
    assert_eq!(s.xdr_position(0), Some(4 + 88 + 4 + 4 + 4));
    let back = Read3Res::from_xdr(s.to_bytes()).unwrap();
    assert_eq!(back, res);
}

#[test]
fn write_and_symlink_args_carry_their_ddp_item() {
    let w = Write3Args {
        file: fh(32),
        offset: 10,
        count: 3,
        stable: StableHow::FILE_SYNC,
        data: DdpData(Bytes::from_static(b"abc")),
    };
    assert_eq!(w.to_xdr().ddp.len(), 1);
    round_trip(&w);
    let s = Symlink3Args {
        dir_op: DirOpArgs3 {
            dir: fh(32),
            name: "l".into(),
        },
        symlink: SymlinkData3 {
            symlink_attributes: Sattr3::default(),
            symlink_data: NfsPath3(Bytes::from_static(b"target")),
        },
    };
    assert_eq!(s.to_xdr().ddp.len(), 1);
    round_trip(&s);
    let r: ReadLink3Res = NfsResult::Ok(ReadLink3ResOk {
        symlink_attributes: None,
        data: NfsPath3(Bytes::from_static(b"t")),
    });
    assert_eq!(r.to_xdr().ddp.len(), 1);
    // Nothing else is DDP-eligible.
    let l: Lookup3Res = NfsResult::Fail(
        NfsStat3::NFS3ERR_NOENT,
        Lookup3ResFail {
            dir_attributes: None,
        },
    );
    assert!(l.to_xdr().ddp.is_empty());
    assert!(call_has_ddp_item(NfsProc3::WRITE) && call_has_ddp_item(NfsProc3::SYMLINK));
    assert!(reply_has_ddp_item(NfsProc3::READ) && reply_has_ddp_item(NfsProc3::READLINK));
    assert!(!call_has_ddp_item(NfsProc3::READ) && !reply_has_ddp_item(NfsProc3::WRITE));
}

/// Each bound of `max_reply_size` equals the size of the largest result we can build.
#[test]
fn max_reply_sizes_match_largest_results() {
    let big_fh = Some(fh(64));
    let cases: Vec<(NfsProc3, usize)> = vec![
        (
            NfsProc3::GETATTR,
            NfsResult::<_, Void>::Ok(GetAttr3ResOk {
                obj_attributes: fattr(),
            })
            .to_xdr()
            .xdr_len(),
        ),
        (
            NfsProc3::SETATTR,
            SetAttr3Res::Ok(SetAttr3Wcc { obj_wcc: wcc() })
                .to_xdr()
                .xdr_len(),
        ),
        (
            NfsProc3::LOOKUP,
            Lookup3Res::Ok(Lookup3ResOk {
                object: fh(64),
                obj_attributes: Some(fattr()),
                dir_attributes: Some(fattr()),
            })
            .to_xdr()
            .xdr_len(),
        ),
        (
            NfsProc3::ACCESS,
            Access3Res::Ok(Access3ResOk {
                obj_attributes: Some(fattr()),
                access: 0x3f,
            })
            .to_xdr()
            .xdr_len(),
        ),
        (
            NfsProc3::READLINK,
            ReadLink3Res::Ok(ReadLink3ResOk {
                symlink_attributes: Some(fattr()),
                data: NfsPath3(Bytes::from(vec![b'p'; MAX_PATH])),
            })
            .to_xdr()
            .xdr_len(),
        ),
        (
            NfsProc3::WRITE,
            Write3Res::Ok(Write3ResOk {
                file_wcc: wcc(),
                count: 1,
                committed: StableHow::FILE_SYNC,
                verf: [0; 8],
            })
            .to_xdr()
            .xdr_len(),
        ),
        (
            NfsProc3::CREATE,
            Create3Res::Ok(Create3ResOk {
                obj: big_fh.clone(),
                obj_attributes: Some(fattr()),
                dir_wcc: wcc(),
            })
            .to_xdr()
            .xdr_len(),
        ),
        (
            NfsProc3::RENAME,
            Rename3Res::Ok(Rename3Wcc {
                fromdir_wcc: wcc(),
                todir_wcc: wcc(),
            })
            .to_xdr()
            .xdr_len(),
        ),
        (
            NfsProc3::LINK,
            Link3Res::Ok(Link3Wcc {
                file_attributes: Some(fattr()),
                linkdir_wcc: wcc(),
            })
            .to_xdr()
            .xdr_len(),
        ),
        (
            NfsProc3::FSSTAT,
            FsStat3Res::Ok(FsStat3ResOk {
                obj_attributes: Some(fattr()),
                tbytes: 0,
                fbytes: 0,
                abytes: 0,
                tfiles: 0,
                ffiles: 0,
                afiles: 0,
                invarsec: 0,
            })
            .to_xdr()
            .xdr_len(),
        ),
        (
            NfsProc3::FSINFO,
            FsInfo3Res::Ok(FsInfo3ResOk {
                obj_attributes: Some(fattr()),
                rtmax: 0,
                rtpref: 0,
                rtmult: 0,
                wtmax: 0,
                wtpref: 0,
                wtmult: 0,
                dtpref: 0,
                maxfilesize: 0,
                time_delta: NfsTime3::default(),
                properties: 0,
            })
            .to_xdr()
            .xdr_len(),
        ),
        (
            NfsProc3::PATHCONF,
            PathConf3Res::Ok(PathConf3ResOk {
                obj_attributes: Some(fattr()),
                linkmax: 0,
                name_max: 0,
                no_trunc: true,
                chown_restricted: true,
                case_insensitive: false,
                case_preserving: true,
            })
            .to_xdr()
            .xdr_len(),
        ),
        (
            NfsProc3::COMMIT,
            Commit3Res::Ok(Commit3ResOk {
                file_wcc: wcc(),
                verf: [0; 8],
            })
            .to_xdr()
            .xdr_len(),
        ),
    ];
    for (proc, len) in cases {
        assert_eq!(max_reply_size(proc, 0), Some(len), "{:?}", proc.name());
    }
    let read = Read3Res::Ok(Read3ResOk {
        file_attributes: Some(fattr()),
        count: 5,
        eof: false,
        data: DdpData(Bytes::from_static(b"12345")),
    })
    .to_xdr();
    assert_eq!(max_reply_size(NfsProc3::READ, 5), Some(read.xdr_len()));
    assert_eq!(
        max_inline_reply_size(NfsProc3::READ, 5),
        Some(read.inline.len())
    );
    assert_eq!(max_reply_size(NfsProc3(22), 0), None);
}

#[test]
fn readdir_entry_sizes_are_exact() {
    let e = Entry3 {
        fileid: 1,
        name: "hello".into(),
        cookie: 2,
    };
    assert_eq!(e.to_xdr().xdr_len() + 4, entry3_size(5));
    let p = EntryPlus3 {
        fileid: 1,
        name: "hello".into(),
        cookie: 2,
        name_attributes: Some(fattr()),
        name_handle: Some(fh(30)),
    };
    assert_eq!(p.to_xdr().xdr_len() + 4, entryplus3_size(&p));
    let res = ReadDir3ResOk {
        dir_attributes: Some(fattr()),
        cookieverf: [1; 8],
        reply: DirList3 {
            entries: vec![e].into(),
            eof: true,
        },
    };
    assert_eq!(round_trip(&res).len(), RESOK_FIXED_SIZE + entry3_size(5));
}

#[test]
fn mount_results_round_trip() {
    round_trip(&MountRes3::Ok {
        fhandle: Bytes::from_static(b"0123456789abcdef"),
        auth_flavors: vec![1, 0],
    });
    round_trip(&MountRes3::Fail(MountStat3::MNT3ERR_NOENT));
    round_trip(&Exports(vec![ExportNode {
        ex_dir: DirPath(Bytes::from_static(b"/export")),
        ex_groups: vec![],
    }]));
    round_trip(&MountList(vec![MountBody {
        ml_hostname: MntName(Bytes::from_static(b"host")),
        ml_directory: DirPath(Bytes::from_static(b"/export")),
    }]));
}

#[test]
fn procedure_names() {
    assert_eq!(NfsProc3::READDIRPLUS.name(), Some("READDIRPLUS"));
    assert_eq!(NfsProc3(22).name(), None);
}

/// Decodes `bytes` as every argument and result type; must never panic.
fn decode_everything(bytes: &[u8]) {
    fn try_it<T: Decode>(b: &[u8]) {
        let _ = T::from_xdr(Bytes::copy_from_slice(b));
    }
    try_it::<GetAttr3Args>(bytes);
    try_it::<SetAttr3Args>(bytes);
    try_it::<Lookup3Args>(bytes);
    try_it::<Access3Args>(bytes);
    try_it::<ReadLink3Args>(bytes);
    try_it::<Read3Args>(bytes);
    try_it::<Write3Args>(bytes);
    try_it::<Create3Args>(bytes);
    try_it::<MkDir3Args>(bytes);
    try_it::<Symlink3Args>(bytes);
    try_it::<Mknod3Args>(bytes);
    try_it::<Remove3Args>(bytes);
    try_it::<Rename3Args>(bytes);
    try_it::<Link3Args>(bytes);
    try_it::<ReadDir3Args>(bytes);
    try_it::<ReadDirPlus3Args>(bytes);
    try_it::<FsRootArgs>(bytes);
    try_it::<Commit3Args>(bytes);
    try_it::<GetAttr3Res>(bytes);
    try_it::<SetAttr3Res>(bytes);
    try_it::<Lookup3Res>(bytes);
    try_it::<Access3Res>(bytes);
    try_it::<ReadLink3Res>(bytes);
    try_it::<Read3Res>(bytes);
    try_it::<Write3Res>(bytes);
    try_it::<Create3Res>(bytes);
    try_it::<Remove3Res>(bytes);
    try_it::<Rename3Res>(bytes);
    try_it::<Link3Res>(bytes);
    try_it::<ReadDir3Res>(bytes);
    try_it::<ReadDirPlus3Res>(bytes);
    try_it::<FsStat3Res>(bytes);
    try_it::<FsInfo3Res>(bytes);
    try_it::<PathConf3Res>(bytes);
    try_it::<Commit3Res>(bytes);
    try_it::<DirPath>(bytes);
    try_it::<MountRes3>(bytes);
    try_it::<MountList>(bytes);
    try_it::<Exports>(bytes);
}

proptest::proptest! {
    /// No decoder panics on arbitrary input (the wire can send anything).
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
        decode_everything(&bytes);
    }

    /// Nor on mostly-valid input: small words (plausible lengths and discriminants).
    #[test]
    fn small_words_never_panic(words in proptest::collection::vec(0u32..5, 0..64)) {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        decode_everything(&bytes);
    }
}

/// `ulb::call_data_item`: WRITE's data, found from the arguments' first bytes up to
/// and including its length word; no other procedure has one.
#[test]
fn writes_data_is_found_from_its_arguments_first_bytes() {
    let wire = Write3Args {
        file: fh(32),
        offset: 10,
        count: 5,
        stable: StableHow::UNSTABLE,
        data: DdpData(Bytes::from_static(b"abcde")),
    }
    .to_xdr()
    .to_bytes();
    let item = call_data_item(NfsProc3::WRITE, &wire).expect("the data");
    assert_eq!(&wire[item.offset..item.offset + item.len], b"abcde");
    assert_eq!(
        call_data_item(NfsProc3::WRITE, &wire[..item.offset]),
        Some(item)
    );
    assert_eq!(
        call_data_item(NfsProc3::WRITE, &wire[..item.offset - 1]),
        None
    );
    assert_eq!(call_data_item(NfsProc3::SYMLINK, &wire), None);
}
