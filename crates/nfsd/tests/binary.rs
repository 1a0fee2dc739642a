//! The `nfsd` binary over TCP: an independent client (libnfs-utils: nfs-ls, nfs-cat,
//! nfs-cp) lists, reads and writes byte-exact, and meets the rules of an exports file
//! (allowed, denied, read-only, squash, secure ports, SIGHUP reloads); our oncrpc
//! client checks the wire answers; SIGTERM shuts the server down cleanly.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{pattern, TempDir};

/// A running `nfsd` process, killed on drop.
struct Nfsd {
    child: Child,
    /// Its state directory (the handle key) unless the arguments named one.
    _state: Option<TempDir>,
    nfs: SocketAddr,
    mount: SocketAddr,
    lines: Vec<String>,
    rest: std::sync::mpsc::Receiver<String>,
}

impl Nfsd {
    fn start(args: &[&str], export: &Path) -> Nfsd {
        let mut args = args.to_vec();
        args.push(export.to_str().unwrap());
        Nfsd::start_with(&args)
    }

    fn start_with(args: &[&str]) -> Nfsd {
        Nfsd::start_as(args, false)
    }

    /// Starts nfsd, as uid/gid 65534 if `nobody`. A state directory of its own
    /// unless `args` give `--state-dir` (so tests never write the default one).
    fn start_as(args: &[&str], nobody: bool) -> Nfsd {
        let state = (!args.contains(&"--state-dir")).then(|| TempDir::new("state"));
        let mut cmd = if nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_nfsd"));
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_nfsd"))
        };
        if let Some(s) = &state {
            cmd.arg("--state-dir").arg(s.path());
        }
        let mut child = cmd
            .args([
                "--bind",
                "127.0.0.1",
                "--nfs-port",
                "0",
                "--mount-port",
                "0",
                "--nlm-port",
                "0",
                "--rpcbind",
                "off",
                // Port 20049 may be taken (the lab's hostfwd, another server);
                // tests/rdma.rs covers the RDMA listener.
                "--no-rdma",
            ])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("nfsd starts");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (mut nfs, mut mount, mut lines) = (None, None, Vec::new());
        loop {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap() == 0 {
                panic!("nfsd exited before it was ready: {lines:?}");
            }
            let line = line.trim_end().to_string();
            let addr = || {
                line.rsplit(' ')
                    .next()
                    .unwrap()
                    .parse::<SocketAddr>()
                    .unwrap()
            };
            if line.starts_with("nfsd: NFS listening on tcp ") {
                nfs = Some(addr());
            } else if line.starts_with("nfsd: MOUNT v3 listening on tcp ") {
                mount = Some(addr());
            }
            let ready = line == "nfsd: ready";
            lines.push(line);
            if ready {
                break;
            }
        }
        // Keep draining stdout in the background so the server never blocks on it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Nfsd {
            child,
            _state: state,
            nfs: nfs.expect("NFS address line"),
            mount: mount.expect("MOUNT address line"),
            lines,
            rest: rx,
        }
    }

    /// The next line of output, within 10 s.
    fn next_line(&self) -> String {
        self.rest
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("a line from nfsd")
    }

    fn url(&self, path: &Path) -> String {
        format!(
            "nfs://127.0.0.1{}?nfsport={}&mountport={}&version=3",
            path.display(),
            self.nfs.port(),
            self.mount.port()
        )
    }

    /// SIGTERM, then the exit status and the remaining output.
    fn terminate(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let status = self.child.wait().unwrap();
        let rest = self.rest.iter().collect();
        (status, rest)
    }
}

impl Drop for Nfsd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tool(name: &str) -> std::path::PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "`{name}` not found: this test needs Debian's libnfs-utils \
         (apt-get install -y libnfs-utils)"
    );
}

fn run(cmd: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", cmd.display()));
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}\n{}",
        cmd.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn make_export(base: &TempDir) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let export = base.path().join("export");
    std::fs::create_dir_all(export.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(base.path().join("outside")).unwrap();
    std::fs::write(base.path().join("outside/secret"), b"secret").unwrap();
    // Root is squashed to nobody by default: let nobody write here.
    for d in [&export, &export.join("sub"), &export.join("sub/deeper")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    export.canonicalize().unwrap()
}

const SIZES: [usize; 6] = [0, 1, 4095, 65536, (1 << 20) + 1, 5 * (1 << 20) + 7];

#[test]
fn libnfs_lists_reads_and_writes_byte_exact() {
    let (nfs_ls, nfs_cat, nfs_cp) = (tool("nfs-ls"), tool("nfs-cat"), tool("nfs-cp"));
    let base = TempDir::new("libnfs");
    let export = make_export(&base);
    for (i, size) in SIZES.iter().enumerate() {
        std::fs::write(
            export.join(format!("server-{size}.bin")),
            pattern(*size, i as u64),
        )
        .unwrap();
    }
    std::fs::write(
        export.join("sub/deeper/note.txt"),
        b"hello from the server\n",
    )
    .unwrap();
    let server = Nfsd::start(&[], &export);
    // The directory shortcut: everyone, read-write, root squashed, any port.
    let want = format!(
        "nfsd: export {} to *(rw,root_squash,insecure,anonuid=65534,anongid=65534), fsid",
        export.display()
    );
    assert!(
        server.lines.iter().any(|l| l.starts_with(&want)),
        "{:?}",
        server.lines
    );

    // nfs-ls: the root and a subdirectory.
    let ls = String::from_utf8(run(&nfs_ls, &[&server.url(&export)])).unwrap();
    for size in SIZES {
        assert!(ls.contains(&format!("server-{size}.bin")), "nfs-ls: {ls}");
    }
    assert!(ls.contains("sub"), "nfs-ls: {ls}");
    let ls = String::from_utf8(run(&nfs_ls, &[&server.url(&export.join("sub/deeper"))])).unwrap();
    assert!(ls.contains("note.txt"), "nfs-ls sub/deeper: {ls}");
    // nfs-ls -R: exactly the tree. Our listings start with `.` and `..`; nfs-ls skips
    // them by name (utils/nfs-ls.c), so it neither prints nor recurses into them
    // (the kernel lab's nfs_tcp scenario checks them as a kernel mount sees them).
    let ls = String::from_utf8(run(&nfs_ls, &["-R", &server.url(&export)])).unwrap();
    let mut listed: Vec<&str> = ls.lines().map(|l| l.rsplit(' ').next().unwrap()).collect();
    listed.sort();
    let mut want: Vec<String> = SIZES.iter().map(|s| format!("server-{s}.bin")).collect();
    want.extend(["sub", "sub/deeper", "sub/deeper/note.txt"].map(String::from));
    want.sort();
    assert_eq!(listed, want, "nfs-ls -R: {ls}");

    // nfs-cat.
    let cat = run(
        &nfs_cat,
        &[&server.url(&export.join("sub/deeper/note.txt"))],
    );
    assert_eq!(cat, b"hello from the server\n");

    // nfs-cp out of the server: byte-exact.
    let local = TempDir::new("libnfs-local");
    for (i, size) in SIZES.iter().enumerate() {
        let dst = local.path().join(format!("got-{size}.bin"));
        run(
            &nfs_cp,
            &[
                &server.url(&export.join(format!("server-{size}.bin"))),
                dst.to_str().unwrap(),
            ],
        );
        assert_eq!(
            std::fs::read(&dst).unwrap(),
            pattern(*size, i as u64),
            "read of {size} bytes"
        );
    }

    // nfs-cp into the server (new names: nfs-cp refuses an existing destination).
    for (i, size) in SIZES.iter().enumerate() {
        let src = local.path().join(format!("put-{size}.bin"));
        let data = pattern(*size, 100 + i as u64);
        std::fs::write(&src, &data).unwrap();
        let dst = export.join(format!("sub/client-{size}.bin"));
        run(&nfs_cp, &[src.to_str().unwrap(), &server.url(&dst)]);
        assert_eq!(std::fs::read(&dst).unwrap(), data, "write of {size} bytes");
    }
    // And what was written reads back through NFS.
    let back = local.path().join("back.bin");
    let big = SIZES[SIZES.len() - 1];
    run(
        &nfs_cp,
        &[
            &server.url(&export.join(format!("sub/client-{big}.bin"))),
            back.to_str().unwrap(),
        ],
    );
    assert_eq!(
        std::fs::read(&back).unwrap(),
        pattern(big, 100 + SIZES.len() as u64 - 1)
    );

    // Nothing outside the export was touched.
    assert_eq!(
        std::fs::read(base.path().join("outside/secret")).unwrap(),
        b"secret"
    );
    assert_eq!(
        std::fs::read_dir(base.path().join("outside"))
            .unwrap()
            .count(),
        1
    );

    let (status, rest) = server.terminate();
    assert!(status.success(), "exit status {status:?}");
    assert!(rest.iter().any(|l| l == "nfsd: stopped"), "{rest:?}");
    // The duplicate request cache's counters at exit: the WRITEs and CREATEs went
    // through it.
    assert!(
        rest.iter()
            .any(|l| l.starts_with("nfsd: duplicate request cache: ")
                && l.contains(" misses, ")
                && !l.contains(" 0 misses, ")),
        "{rest:?}"
    );
}

/// A SIGTERM sent the moment `nfsd: ready` is printed is caught and stops the server
/// cleanly: the handlers are in place before that line (once they were installed
/// only when serving began, and about one start in five died of the signal).
#[test]
fn sigterm_right_after_ready_is_a_clean_stop() {
    let base = TempDir::new("sigterm");
    let export = make_export(&base);
    for _ in 0..20 {
        let (status, rest) = Nfsd::start(&[], &export).terminate();
        assert!(status.success(), "exit status {status:?}: {rest:?}");
        assert!(rest.iter().any(|l| l == "nfsd: stopped"), "{rest:?}");
    }
}

/// Runs `cmd args`, as uid/gid 65534 if `nobody` (so libnfs cannot bind a port
/// below 1024); its exit status and stderr.
fn try_run(cmd: &Path, args: &[&str], nobody: bool) -> (bool, String) {
    let mut c = if nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(cmd);
        c
    } else {
        Command::new(cmd)
    };
    let out = c
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", cmd.display()));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The rules of an exports file against libnfs, an independent client (as root it
/// calls from a port below 1024, as nobody from above; `?uid=` sets its AUTH_SYS uid):
/// a listed client is served, one not listed gets MNT3ERR_ACCES, `ro` refuses writes,
/// squashing maps owners, `secure` refuses high ports and `insecure` takes them;
/// SIGHUP reloads the file (and a bad file keeps the rules in force); a malformed file
/// stops the server at start, naming the line.
#[test]
fn libnfs_meets_the_exports_rules() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let (nfs_ls, nfs_cat, nfs_cp) = (tool("nfs-ls"), tool("nfs-cat"), tool("nfs-cp"));
    let base = TempDir::new("libnfs-exports");
    let dir = |name: &str| {
        let d = base.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        d.canonicalize().unwrap()
    };
    let (open, ro, squash, rootsq, denied, insecure) = (
        dir("open"),
        dir("ro"),
        dir("squash"),
        dir("rootsq"),
        dir("denied"),
        dir("insecure"),
    );
    std::fs::write(ro.join("note"), b"read me\n").unwrap();
    let exports = base.path().join("exports");
    let table = |open_to: &str| {
        format!(
            "# the rules under test\n\
             {} {open_to}(rw,no_root_squash)\n\
             {} 127.0.0.1(ro)\n\
             {} 127.0.0.0/8(rw,all_squash,anonuid=1234,anongid=4321)\n\
             {} localhost(rw) # root_squash by default\n\
             {} 192.0.2.0/24(rw,no_root_squash)\n\
             {} -rw,insecure 127.0.0.1\n",
            open.display(),
            ro.display(),
            squash.display(),
            rootsq.display(),
            denied.display(),
            insecure.display()
        )
    };
    std::fs::write(&exports, table("127.0.0.1")).unwrap();
    let server = Nfsd::start_with(&["--exports", exports.to_str().unwrap()]);
    let want = format!(
        "nfsd: export {} to 127.0.0.1(rw,no_root_squash,secure,anonuid=65534,anongid=65534), fsid",
        open.display()
    );
    assert!(
        server.lines.iter().any(|l| l.starts_with(&want)),
        "{:?}",
        server.lines
    );
    let local = TempDir::new("libnfs-exports-local");
    let src = local.path().join("src");
    std::fs::write(&src, b"data\n").unwrap();
    let put = |dst: &Path, query: &str| {
        let url = format!("{}{query}", server.url(dst));
        try_run(&nfs_cp, &[src.to_str().unwrap(), &url], false)
    };
    let owner = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.uid(), m.gid())
    };

    // Allowed, read-write, root not squashed.
    let (ok, err) = put(&open.join("f"), "&uid=0&gid=0");
    assert!(ok, "nfs-cp into {}: {err}", open.display());
    assert_eq!(owner(&open.join("f")), (0, 0));
    let ls = String::from_utf8(run(&nfs_ls, &[&server.url(&open)])).unwrap();
    assert!(ls.contains(" f"), "nfs-ls: {ls}");

    // Denied: not listed.
    let (ok, err) = try_run(&nfs_ls, &[&server.url(&denied)], false);
    assert!(
        !ok && err.contains("MNT3ERR_ACCES"),
        "nfs-ls of {}: {err}",
        denied.display()
    );
    let (ok, _) = put(&denied.join("f"), "");
    assert!(!ok);
    assert_eq!(std::fs::read_dir(&denied).unwrap().count(), 0);

    // Read-only: reads work, writes do not.
    assert_eq!(
        run(&nfs_cat, &[&server.url(&ro.join("note"))]),
        b"read me\n"
    );
    let (ok, err) = put(&ro.join("f"), "");
    assert!(!ok, "nfs-cp into the ro export succeeded: {err}");
    assert!(!ro.join("f").exists());

    // Squashing: all_squash maps everyone to anonuid/anongid; root_squash only root.
    assert!(put(&squash.join("u1000"), "&uid=1000&gid=1000").0);
    assert_eq!(owner(&squash.join("u1000")), (1234, 4321));
    assert!(put(&rootsq.join("root"), "&uid=0&gid=0").0);
    assert_eq!(owner(&rootsq.join("root")), (65534, 65534));
    assert!(put(&rootsq.join("u1000"), "&uid=1000&gid=1001").0);
    assert_eq!(owner(&rootsq.join("u1000")), (1000, 1001));

    // secure (the default) refuses a source port >= 1024; insecure takes it.
    let (ok, err) = try_run(&nfs_ls, &[&server.url(&open)], true);
    assert!(
        !ok && err.contains("MNT3ERR_ACCES"),
        "nfs-ls as nobody: {err}"
    );
    let (ok, err) = try_run(&nfs_ls, &[&server.url(&insecure)], true);
    assert!(ok, "nfs-ls as nobody of the insecure export: {err}");

    // SIGHUP: `open` is now for another host only.
    let hup = |server: &Nfsd| {
        let pid = rustix::process::Pid::from_raw(server.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    };
    std::fs::write(&exports, table("192.0.2.1")).unwrap();
    hup(&server);
    let line = server.next_line();
    assert_eq!(
        line,
        format!("nfsd: SIGHUP: exports reloaded from {}", exports.display())
    );
    let (ok, err) = try_run(&nfs_ls, &[&server.url(&open)], false);
    assert!(
        !ok && err.contains("MNT3ERR_ACCES"),
        "nfs-ls after the reload: {err}"
    );
    // A malformed file is refused and the rules in force stay: still refused, and
    // the other exports still served.
    std::fs::write(&exports, table("127.0.0.1").replace("(ro)", "(ro,bogus)")).unwrap();
    hup(&server);
    let (ok, _) = try_run(&nfs_ls, &[&server.url(&open)], false);
    assert!(!ok);
    assert_eq!(
        run(&nfs_cat, &[&server.url(&ro.join("note"))]),
        b"read me\n"
    );
    let (status, _) = server.terminate();
    assert!(status.success());

    // A malformed file at start: a clear error naming the file and line, no server.
    let out = Command::new(env!("CARGO_BIN_EXE_nfsd"))
        .args([
            "--no-rdma",
            "--rpcbind",
            "off",
            "--nfs-port",
            "0",
            "--mount-port",
            "0",
            "--nlm-port",
            "0",
        ])
        .args(["--exports", exports.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim_end(),
        format!(
            "nfsd: {}: line 3: unknown option \"bogus\"",
            exports.display()
        )
    );
}

mod wire {
    //! Our own client over TCP against the binary.

    use super::*;
    use nfs3::io::*;
    use nfs3::mount::*;
    use nfs3::*;
    use oncrpc::{
        AcceptStat, AcceptedStatus, AuthSysParms, Client, ClientConfig, ClientError, TcpTransport,
    };
    use xdr::{Bytes, Decode, Encode, XdrStream};

    fn client(addr: SocketAddr) -> Client {
        let cred = AuthSysParms {
            stamp: 7,
            machinename: Bytes::from_static(b"wire-test"),
            uid: 1000,
            gid: 1000,
            gids: oncrpc::Gids::new(&[1000]).unwrap(),
        };
        Client::new(
            TcpTransport::new(addr),
            ClientConfig {
                cred: oncrpc::Credentials::Sys(cred).to_opaque_auth(),
                ..ClientConfig::default()
            },
        )
    }

    async fn call<R: Decode>(c: &Client, prog: u32, proc_: u32, args: XdrStream) -> R {
        let reply = c.call(prog, 3, proc_, args).await.expect("call succeeds");
        R::from_xdr(reply.results.rest()).expect("result decodes")
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn tcp_calls_garbage_and_graceful_shutdown() {
        let base = TempDir::new("wire");
        let export = make_export(&base);
        let data = pattern(3 << 20, 9);
        std::fs::write(export.join("big"), &data).unwrap();
        let server = Nfsd::start(&[], &export);
        let mount = client(server.mount);
        let nfs = client(server.nfs);
        let path = DirPath(Bytes::copy_from_slice(
            export.as_os_str().as_encoded_bytes(),
        ));
        let MountRes3::Ok { fhandle, .. } =
            call::<MountRes3>(&mount, MOUNT_PROGRAM, 1, path.to_xdr()).await
        else {
            panic!("MNT failed")
        };
        let root = NfsFh3(fhandle);
        let look: dir::Lookup3Res = call(
            &nfs,
            NFS_PROGRAM,
            3,
            dir::Lookup3Args {
                what: DirOpArgs3 {
                    dir: root.clone(),
                    name: "big".into(),
                },
            }
            .to_xdr(),
        )
        .await;
        let NfsResult::Ok(look) = look else {
            panic!("{look:?}")
        };
        let big = look.object;

        // Garbage and truncated arguments over TCP: GARBAGE_ARGS.
        for args in [
            &b"\xde\xad"[..],
            &b"\x00\x00\x00\x24rN3"[..],
            &[0xff; 12][..],
        ] {
            let r = nfs
                .call(
                    NFS_PROGRAM,
                    3,
                    6,
                    XdrStream::inline_only(Bytes::copy_from_slice(args)),
                )
                .await;
            assert!(
                matches!(
                    r,
                    Err(ClientError::Accepted(AcceptedStatus::Void(
                        AcceptStat::GARBAGE_ARGS
                    )))
                ),
                "{r:?}"
            );
        }
        // A forged handle: BADHANDLE; a write by uid 1000 into a root-owned file: ACCES.
        let forged: Read3Res = call(
            &nfs,
            NFS_PROGRAM,
            6,
            Read3Args {
                file: NfsFh3(Bytes::from_static(&[7; 36])),
                offset: 0,
                count: 1,
            }
            .to_xdr(),
        )
        .await;
        assert_eq!(forged.status(), NfsStat3::NFS3ERR_BADHANDLE);
        let w: Write3Res = call(
            &nfs,
            NFS_PROGRAM,
            7,
            Write3Args {
                file: big.clone(),
                offset: 0,
                count: 1,
                stable: StableHow::FILE_SYNC,
                data: DdpData(Bytes::from_static(b"x")),
            }
            .to_xdr(),
        )
        .await;
        assert_eq!(w.status(), NfsStat3::NFS3ERR_ACCES);

        // Many 1 MiB READs in flight, then SIGTERM: every call the server took in
        // is answered in full before it exits.
        let mut calls = Vec::new();
        for i in 0..24u64 {
            let nfs = nfs.clone();
            let fh = big.clone();
            calls.push(tokio::spawn(async move {
                let args = Read3Args {
                    file: fh,
                    offset: (i % 3) << 20,
                    count: 1 << 20,
                };
                nfs.call(NFS_PROGRAM, 3, 6, args.to_xdr())
                    .await
                    .map(|r| (i, r))
            }));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let (status, rest) = tokio::task::spawn_blocking(move || server.terminate())
            .await
            .unwrap();
        assert!(status.success(), "exit status {status:?}");
        assert!(
            rest.iter().any(|l| l.contains("SIGTERM: shutting down")),
            "{rest:?}"
        );
        let mut answered = 0;
        for c in calls {
            if let Ok((i, reply)) = c.await.unwrap() {
                let res = Read3Res::from_xdr(reply.results.rest()).unwrap();
                let NfsResult::Ok(ok) = res else {
                    panic!("{res:?}")
                };
                let off = ((i % 3) << 20) as usize;
                assert_eq!(&ok.data.0[..], &data[off..off + (1 << 20)]);
                answered += 1;
            }
        }
        assert!(answered > 0, "no READ completed before shutdown");
    }

    /// MNT of `export`, then LOOKUPs down `path`: the handles on the way.
    async fn walk(server: &Nfsd, export: &Path, path: &[&str]) -> Vec<NfsFh3> {
        let mount = client(server.mount);
        let nfs = client(server.nfs);
        let dir = DirPath(Bytes::copy_from_slice(
            export.as_os_str().as_encoded_bytes(),
        ));
        let MountRes3::Ok { fhandle, .. } =
            call::<MountRes3>(&mount, MOUNT_PROGRAM, 1, dir.to_xdr()).await
        else {
            panic!("MNT failed")
        };
        let mut handles = vec![NfsFh3(fhandle)];
        for name in path {
            let look: dir::Lookup3Res = call(
                &nfs,
                NFS_PROGRAM,
                3,
                dir::Lookup3Args {
                    what: DirOpArgs3 {
                        dir: handles.last().unwrap().clone(),
                        name: (*name).into(),
                    },
                }
                .to_xdr(),
            )
            .await;
            let NfsResult::Ok(look) = look else {
                panic!("LOOKUP {name}: {look:?}")
            };
            handles.push(look.object);
        }
        handles
    }

    async fn getattr(server: &Nfsd, fh: &NfsFh3) -> NfsStat3 {
        let r: attr::GetAttr3Res = call(
            &client(server.nfs),
            NFS_PROGRAM,
            1,
            attr::GetAttr3Args { object: fh.clone() }.to_xdr(),
        )
        .await;
        match r {
            NfsResult::Ok(_) => NfsStat3::NFS3_OK,
            NfsResult::Fail(s, _) => s,
        }
    }

    /// The binary keeps its handle key in --state-dir: handles taken before a restart
    /// work after it, as root (opened by handle) and as nobody (no
    /// CAP_DAC_READ_SEARCH: found by searching, as the startup line says), with the
    /// same bytes either way; a key nobody may not read is a clear error.
    #[tokio::test(flavor = "multi_thread")]
    async fn handles_survive_a_restart_of_the_binary_as_root_and_as_nobody() {
        use std::os::unix::fs::PermissionsExt;
        assert!(
            rustix::process::geteuid().is_root(),
            "this test runs nfsd as root and as nobody: run it as root"
        );
        let base = TempDir::new("restart");
        let export = make_export(&base);
        std::fs::write(export.join("sub/deeper/note.txt"), b"kept\n").unwrap();
        let state = base.path().join("state");
        let state_arg = state.to_str().unwrap();
        let args = ["--state-dir", state_arg, export.to_str().unwrap()];
        let path = ["sub", "deeper", "note.txt"];

        let server = Nfsd::start_with(&args);
        assert!(
            server
                .lines
                .iter()
                .any(|l| l.ends_with("kernel file handles (open_by_handle_at)")),
            "{:?}",
            server.lines
        );
        let before = walk(&server, &export, &path).await;
        let key = std::fs::metadata(state.join("fh.key")).unwrap();
        assert_eq!(key.permissions().mode() & 0o777, 0o600);
        let (status, rest) = server.terminate();
        assert!(status.success(), "{status}: {rest:?}");

        // Restarted as root: the old handles work, and are the ones LOOKUP gives.
        let server = Nfsd::start_with(&args);
        for fh in &before {
            assert_eq!(getattr(&server, fh).await, NfsStat3::NFS3_OK);
        }
        assert_eq!(walk(&server, &export, &path).await, before);
        let (status, rest) = server.terminate();
        assert!(status.success(), "{status}: {rest:?}");

        // As nobody, the root-owned key cannot be read: a clear error, no server.
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_nfsd"))
            .args([
                "--no-rdma",
                "--rpcbind",
                "off",
                "--nfs-port",
                "0",
                "--mount-port",
                "0",
                "--nlm-port",
                "0",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "nfsd: file handle key {state_arg}/fh.key: cannot read it: Permission denied"
            )) && err.contains("--state-dir"),
            "{err}"
        );

        // Given the key, nobody serves the same handles, found by searching.
        rustix::fs::chown(&state, Some(rustix::process::Uid::from_raw(65534)), None).unwrap();
        rustix::fs::chown(
            state.join("fh.key"),
            Some(rustix::process::Uid::from_raw(65534)),
            None,
        )
        .unwrap();
        let server = Nfsd::start_as(&args, true);
        assert!(
            server.lines.iter().any(|l| l.contains(
                "kernel file handles, found by searching the export after a restart (open_by_handle_at: "
            ) && l.contains("CAP_DAC_READ_SEARCH")),
            "{:?}",
            server.lines
        );
        for fh in &before {
            assert_eq!(getattr(&server, fh).await, NfsStat3::NFS3_OK);
        }
        assert_eq!(walk(&server, &export, &path).await, before);
        // Removed: stale, on the fallback too.
        std::fs::remove_file(export.join("sub/deeper/note.txt")).unwrap();
        assert_eq!(getattr(&server, &before[3]).await, NfsStat3::NFS3ERR_STALE);
        let (status, rest) = server.terminate();
        assert!(status.success(), "{status}: {rest:?}");
    }
}

/// `GET path` of nfsd's metrics listener: the status line and the body.
fn http_get(addr: SocketAddr, method: &str, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").expect("a header and a body");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// `--metrics`: the page parses with the Prometheus project's parser, and its
/// counters move as libnfs (an independent client) writes, reads and lists: calls
/// by procedure with matching histogram counts, TCP bytes at least the data moved,
/// the reply cache's misses (WRITE and CREATE go through it); other paths are 404
/// and other methods 405.
#[test]
fn metrics_page_parses_and_counts_what_libnfs_does() {
    let (nfs_cat, nfs_cp, nfs_ls) = (tool("nfs-cat"), tool("nfs-cp"), tool("nfs-ls"));
    let base = TempDir::new("metrics");
    let export = make_export(&base);
    let server = Nfsd::start(&["--metrics", "127.0.0.1:0"], &export);
    let line = server
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("nfsd: metrics on http://"))
        .unwrap_or_else(|| panic!("no metrics line: {:?}", server.lines));
    let addr: SocketAddr = line.split('/').next().unwrap().parse().unwrap();

    let scrape = || {
        let (status, body) = http_get(addr, "GET", "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK");
        lab::prometheus::parse(&body).unwrap_or_else(|e| panic!("{e}"))
    };
    let before = scrape();
    let size = 3 << 20;
    let local = TempDir::new("metrics-local");
    let src = local.path().join("put.bin");
    std::fs::write(&src, pattern(size, 9)).unwrap();
    let dst = export.join("put.bin");
    run(&nfs_cp, &[src.to_str().unwrap(), &server.url(&dst)]);
    assert_eq!(run(&nfs_cat, &[&server.url(&dst)]), pattern(size, 9));
    run(&nfs_ls, &[&server.url(&export)]);
    let after = scrape();

    let get =
        |m: &std::collections::BTreeMap<String, f64>, k: &str| m.get(k).copied().unwrap_or(0.0);
    let moved = |k: &str| get(&after, k) - get(&before, k);
    let proc_ = |p: &str| format!("procedure=\"{p}\",program=\"nfs\",version=\"3\"");
    for p in ["WRITE", "READ", "CREATE", "READDIRPLUS"] {
        let calls = moved(&format!("nfsd_rpc_calls_total{{{}}}", proc_(p)));
        assert!(calls >= 1.0, "{p}: {calls} calls");
        assert_eq!(
            get(
                &after,
                &format!("nfsd_rpc_duration_seconds_count{{{}}}", proc_(p))
            ),
            get(&after, &format!("nfsd_rpc_calls_total{{{}}}", proc_(p))),
            "{p}: histogram count = calls"
        );
        let inf = format!(
            "nfsd_rpc_duration_seconds_bucket{{le=\"+Inf\",{}}}",
            proc_(p)
        );
        assert_eq!(
            get(&after, &inf),
            get(&after, &format!("nfsd_rpc_calls_total{{{}}}", proc_(p)))
        );
    }
    let mnt = "nfsd_rpc_calls_total{procedure=\"MNT\",program=\"mount\",version=\"3\"}";
    assert!(moved(mnt) >= 3.0, "one MNT per libnfs run: {}", moved(mnt));
    assert!(moved("nfsd_tcp_received_bytes_total{}") >= size as f64);
    assert!(moved("nfsd_tcp_sent_bytes_total{}") >= size as f64);
    assert!(moved("nfsd_tcp_connections_total{}") >= 3.0);
    assert!(moved("nfsd_reply_cache_misses_total{}") >= 1.0);
    assert!(get(&after, "nfsd_memory_limit_bytes{}") > 0.0);

    assert_eq!(http_get(addr, "GET", "/other").0, "HTTP/1.1 404 Not Found");
    assert_eq!(
        http_get(addr, "POST", "/metrics").0,
        "HTTP/1.1 405 Method Not Allowed"
    );
    let (status, body) = http_get(addr, "HEAD", "/metrics");
    assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 200 OK", ""));
    let (status, _) = server.terminate();
    assert!(status.success());
}

/// Starts nfsd on loopback ports of its own (no NLM, rpcbind or RDMA), its state in
/// `state`, with `args` and `env`, standard output and error piped, and reads
/// standard output up to its `ready` line: the child, and the rest of that output.
fn start_piped(
    state: &Path,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nfsd"))
        .args([
            "--bind",
            "127.0.0.1",
            "--nfs-port",
            "0",
            "--mount-port",
            "0",
        ])
        .args(["--no-nlm", "--rpcbind", "off", "--no-rdma", "--state-dir"])
        .arg(state)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while line.trim_end() != "nfsd: ready" {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "nfsd exited before ready"
        );
    }
    (child, out)
}

/// `--log-format json`: every line nfsd writes to standard error is one JSON object
/// with a level and a message (Python's json module reads each); the default text
/// format has no ANSI colours when standard error is not a terminal.
#[test]
fn log_lines_are_json_objects_or_plain_text() {
    let base = TempDir::new("logs");
    let export = make_export(&base);
    let state = TempDir::new("logs-state");
    for (format, json) in [("json", true), ("text", false)] {
        let os = std::ffi::OsStr::new;
        let (child, mut out) = start_piped(
            state.path(),
            &[os("--log-format"), os(format), export.as_os_str()],
            &[("RUST_LOG", os("info"))],
        );
        // Keep reading standard output: nfsd prints its last lines at the stop.
        let drain = std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let out = child.wait_with_output().unwrap();
        drain.join().unwrap().unwrap();
        assert!(out.status.success(), "{format}: {:?}", out.status);
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.lines().count() >= 2, "{format}: {err}");
        assert!(!err.contains('\u{1b}'), "{format}: ANSI escapes in {err:?}");
        if json {
            let check = Command::new("/usr/bin/python3")
                .args([
                    "-c",
                    "import json, sys\nfor l in sys.stdin:\n    o = json.loads(l)\n    assert o['level'] and o['fields']['message'], l",
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write;
            check
                .stdin
                .as_ref()
                .unwrap()
                .write_all(err.as_bytes())
                .unwrap();
            let r = check.wait_with_output().unwrap();
            assert!(
                r.status.success(),
                "{err}\n{}",
                String::from_utf8_lossy(&r.stderr)
            );
        } else {
            assert!(
                err.lines()
                    .all(|l| l.contains(" INFO ") || l.contains(" WARN ")),
                "{err}"
            );
        }
    }
}

/// The long options `--help` lists: each option's own line starts with it (after
/// a short form, if any).
fn help_flags(help: &str) -> std::collections::BTreeSet<String> {
    help.lines()
        .map(str::trim_start)
        .filter_map(|l| {
            let l = l
                .strip_prefix("-")
                .filter(|r| r.len() > 3 && &r[1..3] == ", ")
                .map_or(l, |r| &r[3..]);
            let name = l.strip_prefix("--")?.split([' ', '=', '<']).next()?;
            (!name.is_empty()).then(|| format!("--{name}"))
        })
        .collect()
}

/// `--generate-man-pages`: nfsd-rs.8 lists every option `--help` shows, and
/// nfsd-rs.conf.5 every one a configuration file may set.
#[test]
fn man_pages_list_every_option_of_help() {
    let help = Command::new(env!("CARGO_BIN_EXE_nfsd"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let flags = help_flags(&help);
    assert!(flags.len() > 40, "{flags:?}");
    let dir = TempDir::new("man");
    run(
        Path::new(env!("CARGO_BIN_EXE_nfsd")),
        &["--generate-man-pages", dir.path().to_str().unwrap()],
    );
    let page = std::fs::read_to_string(dir.path().join("nfsd-rs.8")).unwrap();
    let conf = std::fs::read_to_string(dir.path().join("nfsd-rs.conf.5")).unwrap();
    for flag in &flags {
        let roff = flag.replace('-', "\\-");
        assert!(page.contains(&roff), "nfsd-rs.8 lacks {flag}");
        let name = &roff[4..];
        if !["config", "help", "version"].contains(&&flag[2..]) {
            assert!(
                conf.contains(&format!("\\fB{name}\\fR = ")),
                "nfsd-rs.conf.5 lacks {flag}"
            );
        }
    }
    assert!(
        page.starts_with(".ie") || page.contains(".TH nfsd-rs 8"),
        "{}",
        &page[..200]
    );
}

/// A configuration file (`--config`) sets options as the command line does, which
/// wins over it; a flag takes true or false; an unknown setting, a malformed line or
/// a missing file named by --config is an error naming the file and line.
#[test]
fn config_file_settings_and_the_command_line_wins() {
    let base = TempDir::new("conf");
    let export = make_export(&base);
    let conf = base.path().join("nfsd-rs.conf");
    std::fs::write(
        &conf,
        "# test\nread-only = true\nsquash = all\nmetrics = 127.0.0.1:0\nno-nlm = false\n",
    )
    .unwrap();
    let server = Nfsd::start(
        &["--config", conf.to_str().unwrap(), "--squash", "none"],
        &export,
    );
    let export_line = server
        .lines
        .iter()
        .find(|l| l.starts_with("nfsd: export "))
        .unwrap();
    assert!(
        export_line.contains("*(ro,no_root_squash,"),
        "{export_line}"
    );
    assert!(
        server
            .lines
            .iter()
            .any(|l| l.starts_with("nfsd: metrics on http://127.0.0.1:")),
        "{:?}",
        server.lines
    );
    drop(server);

    let nfsd = Path::new(env!("CARGO_BIN_EXE_nfsd"));
    for (text, want) in [
        (
            "bind = 127.0.0.1\nmax-memroy = 2G\n",
            ":2: no setting \"max-memroy\"",
        ),
        (
            "read-only = maybe\n",
            "line 1: read-only: \"maybe\" is not true or false",
        ),
        ("just words\n", ":1: \"just words\" is not NAME = VALUE"),
        ("config = /etc/other.conf\n", ":1: no setting \"config\""),
    ] {
        std::fs::write(&conf, text).unwrap();
        let (ok, err) = try_run(nfsd, &["--config", conf.to_str().unwrap(), "/tmp"], false);
        assert!(!ok && err.contains(want), "{text:?}: {err}");
    }
    let (ok, err) = try_run(
        nfsd,
        &["--config", "/nonexistent/nfsd-rs.conf", "/tmp"],
        false,
    );
    assert!(!ok && err.contains("/nonexistent/nfsd-rs.conf"), "{err}");
}

/// Started by a service manager (`$NOTIFY_SOCKET`, as systemd's `Type=notify` sets
/// it), nfsd sends READY=1 once it serves (after its `ready` line), RELOADING=1
/// then READY=1 around a SIGHUP reload, and STOPPING=1 at SIGTERM; for a path and
/// for an abstract socket name.
#[test]
fn readiness_reload_and_stop_reach_the_service_manager() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
    let base = TempDir::new("notify");
    let export = make_export(&base);
    let exports = base.path().join("exports");
    std::fs::write(&exports, format!("{} *(rw,insecure)\n", export.display())).unwrap();
    let abstract_name = format!("nfsd-test-notify-{}", std::process::id());
    let path = base.path().join("notify.sock");
    for (sock, env) in [
        (
            UnixDatagram::bind(&path).unwrap(),
            path.display().to_string(),
        ),
        (
            UnixDatagram::bind_addr(&UnixAddr::from_abstract_name(&abstract_name).unwrap())
                .unwrap(),
            format!("@{abstract_name}"),
        ),
    ] {
        sock.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let recv = || {
            let mut buf = [0u8; 512];
            let n = sock.recv(&mut buf).expect("a notification within 20 s");
            String::from_utf8(buf[..n].to_vec()).unwrap()
        };
        let state = TempDir::new("notify-state");
        let (mut child, mut out) = start_piped(
            state.path(),
            &[std::ffi::OsStr::new("--exports"), exports.as_os_str()],
            &[("NOTIFY_SOCKET", std::ffi::OsStr::new(&env))],
        );
        let ready = recv();
        assert!(ready.starts_with("READY=1\n"), "{env}: {ready:?}");
        let drain = std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
        assert!(recv().starts_with("RELOADING=1\n"), "{env}");
        assert!(recv().starts_with("READY=1\n"), "{env}");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        assert!(recv().starts_with("STOPPING=1\n"), "{env}");
        assert!(child.wait().unwrap().success());
        drain.join().unwrap().unwrap();
    }
}

/// A port another server holds (as knfsd holds 2049) stops nfsd with the port and
/// a hint, not a bare "address in use".
#[test]
fn a_port_in_use_is_named_with_a_hint() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let state = TempDir::new("inuse-state");
    let (ok, err) = try_run(
        Path::new(env!("CARGO_BIN_EXE_nfsd")),
        &[
            "--bind",
            "127.0.0.1",
            "--nfs-port",
            &port,
            "--no-rdma",
            "--no-nlm",
            "--rpcbind",
            "off",
            "--state-dir",
            state.path().to_str().unwrap(),
            "/tmp",
        ],
        false,
    );
    assert!(!ok);
    assert!(
        err.contains(&format!("NFS tcp 127.0.0.1:{port}: Address already in use"))
            && err.contains("nfs-server.service"),
        "{err}"
    );
}

/// Nobody reading standard output any more (a closed pipe) does not stop nfsd: its
/// status lines at shutdown go nowhere and it still exits cleanly (`println!` would
/// panic on EPIPE).
#[test]
fn a_closed_standard_output_is_no_panic() {
    let base = TempDir::new("epipe");
    let export = make_export(&base);
    let state = TempDir::new("epipe-state");
    let (child, out) = start_piped(state.path(), &[export.as_os_str()], &[]);
    drop(out);
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !err.contains("panicked"),
        "{:?}: {err}",
        out.status
    );
}
