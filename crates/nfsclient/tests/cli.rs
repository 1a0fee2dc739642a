//! The `nfs` binary against our `nfsd` over TCP: put a file of 1 MiB + 1 bytes, get
//! it back byte-exact, and ls, stat, cat, mkdir, rm, with errors carrying the
//! server's status.

mod common;

use std::process::Output;

use common::{pattern, TempDir, TestServer};

async fn nfs(s: &TestServer, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_nfs"))
        .args([
            "--nfs-port",
            &s.nfs.port().to_string(),
            "--mount-port",
            &s.mount.port().to_string(),
            "--quiet",
        ])
        .args(args)
        .output()
        .await
        .expect("nfs runs")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "nfs failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_get_1_mib_plus_1_round_trip() {
    let s = TestServer::start("cli-rt", false, false).await;
    let local = TempDir::new("cli-local");
    let src = local.path().join("payload.bin");
    let data = pattern((1 << 20) + 1, 42);
    std::fs::write(&src, &data).unwrap();
    let export = s.dir.export();

    // put into the export root (a directory: the file keeps its name).
    let o = nfs(
        &s,
        &["put", src.to_str().unwrap(), &format!("127.0.0.1:{export}")],
    )
    .await;
    ok(&o);
    assert_eq!(std::fs::read(s.local("payload.bin")).unwrap(), data);

    // get it back under another name, through the URL form.
    let back = local.path().join("back.bin");
    let url = format!("nfs://127.0.0.1:{}{export}/payload.bin", s.nfs.port());
    ok(&nfs(&s, &["get", &url, back.to_str().unwrap()]).await);
    assert_eq!(std::fs::read(&back).unwrap(), data, "byte-exact round trip");

    // ls and ls -l list it with its size; stat shows the attributes.
    let ls = ok(&nfs(&s, &["ls", &format!("127.0.0.1:{export}")]).await);
    assert_eq!(ls, "payload.bin\n");
    let ll = ok(&nfs(&s, &["ls", "-l", &format!("127.0.0.1:{export}")]).await);
    assert!(ll.starts_with("-rw"), "{ll}");
    assert!(ll.contains(" 1048577 "), "{ll}");
    let st = ok(&nfs(&s, &["stat", &format!("127.0.0.1:{export}/payload.bin")]).await);
    assert!(st.contains("Size: 1048577"), "{st}");
    assert!(st.contains("Type: NF3REG"), "{st}");

    // put with --sync (FILE_SYNC writes) over an existing file truncates it first.
    let small = local.path().join("small.txt");
    std::fs::write(&small, b"hello, nfs\n").unwrap();
    ok(&nfs(
        &s,
        &[
            "put",
            "--sync",
            small.to_str().unwrap(),
            &format!("127.0.0.1:{export}/payload.bin"),
        ],
    )
    .await);
    let cat = ok(&nfs(&s, &["cat", &format!("127.0.0.1:{export}/payload.bin")]).await);
    assert_eq!(cat, "hello, nfs\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkdir_rm_and_errors() {
    let s = TestServer::start("cli-ops", false, false).await;
    let export = s.dir.export();
    let at = |p: &str| format!("127.0.0.1:{export}/{p}");
    ok(&nfs(&s, &["mkdir", "-p", "-m", "750", &at("a/b/c")]).await);
    assert!(s.local("a/b/c").is_dir());
    let st = ok(&nfs(&s, &["stat", &at("a/b/c")]).await);
    assert!(st.contains("(0750)"), "{st}");
    ok(&nfs(&s, &["mkdir", &at("a/d")]).await);
    let ls = ok(&nfs(&s, &["ls", &at("a")]).await);
    assert_eq!(ls, "b\nd\n");

    // Errors exit non-zero and name the server's status.
    let o = nfs(&s, &["rm", "-d", &at("a/b")]).await;
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("NFS RMDIR: NFS3ERR_NOTEMPTY"), "{err}");
    let o = nfs(&s, &["cat", &at("a/missing")]).await;
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("NFS3ERR_NOENT"));
    let o = nfs(&s, &["get", &at("a"), "/dev/null"]).await;
    assert!(String::from_utf8_lossy(&o.stderr).contains("NFS3ERR_ISDIR"));
    let o = nfs(&s, &["mkdir", &at("a/d")]).await;
    assert!(String::from_utf8_lossy(&o.stderr).contains("NFS3ERR_EXIST"));

    ok(&nfs(&s, &["rm", "-d", &at("a/b/c")]).await);
    ok(&nfs(&s, &["rm", "-d", &at("a/b")]).await);
    std::fs::write(s.local("a/f"), b"x").unwrap();
    ok(&nfs(&s, &["rm", &at("a/f")]).await);
    assert_eq!(ok(&nfs(&s, &["ls", &at("a")]).await), "d\n");

    // ls -l shows symbolic links with their target.
    std::os::unix::fs::symlink("d/../elsewhere", s.local("a/sl")).unwrap();
    let ll = ok(&nfs(&s, &["ls", "-l", &at("a")]).await);
    assert!(
        ll.lines()
            .any(|l| l.starts_with('l') && l.ends_with(" sl -> d/../elsewhere")),
        "{ll}"
    );

    // --export says where the export ends (no MNT probing).
    let o = nfs(&s, &["--export", &export, "ls", &at("a")]).await;
    assert_eq!(ok(&o), "d\nsl\n");

    // ls -a adds the server's `.` and `..` first; -l gives them attributes.
    assert_eq!(
        ok(&nfs(&s, &["ls", "-a", &at("a")]).await),
        ".\n..\nd\nsl\n"
    );
    let la = ok(&nfs(&s, &["ls", "-la", &at("a")]).await);
    let la: Vec<&str> = la.lines().collect();
    assert_eq!(la.len(), 4, "{la:?}");
    assert!(la[0].starts_with('d') && la[0].ends_with(" ."), "{la:?}");
    assert!(la[1].starts_with('d') && la[1].ends_with(" .."), "{la:?}");
    let o = nfs(&s, &["--export", "/elsewhere", "ls", &at("a")]).await;
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not inside the export"));

    // A bad target is a usage error before any RPC.
    let o = nfs(&s, &["ls", "no-colon"]).await;
    assert!(!o.status.success());
}

/// No portmapper on the server (nothing listens: the connection is refused) and no
/// --mount-port: `nfs` says so at once, with what to do, instead of waiting out its
/// 30 s call timeout for a connection that will never be accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_portmapper_fails_at_once_with_a_hint() {
    // A loopback port where nothing listens (bound, then closed).
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let started = std::time::Instant::now();
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_nfs"))
        .args(["--portmap-port", &port.to_string(), "--quiet"])
        .args(["ls", "127.0.0.1:/srv/export"])
        .output()
        .await
        .expect("nfs runs");
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "nfs succeeded: {err}");
    assert!(
        took < std::time::Duration::from_secs(5),
        "took {took:?}: {err}"
    );
    assert!(
        err.contains(&format!(
            "no portmapper at 127.0.0.1:{port}: Connection refused"
        )),
        "{err}"
    );
    assert!(
        err.contains("nfs: hint: ") && err.contains("--mount-port"),
        "{err}"
    );
}

/// The long options an `--help` lists (each on its own line, after a short form).
fn help_flags(help: &str) -> Vec<String> {
    help.lines()
        .map(str::trim_start)
        .filter_map(|l| {
            let l = l
                .strip_prefix('-')
                .filter(|r| r.len() > 3 && &r[1..3] == ", ")
                .map_or(l, |r| &r[3..]);
            let name = l.strip_prefix("--")?.split([' ', '=', '<']).next()?;
            (!name.is_empty()).then(|| format!("--{name}"))
        })
        .collect()
}

/// `nfs --generate-man-pages`: nfs.1 lists every option of `nfs --help`, and
/// nfs-COMMAND.1 every option of `nfs COMMAND --help`, for every command.
#[test]
fn man_pages_list_every_option_of_help() {
    let nfs = env!("CARGO_BIN_EXE_nfs");
    let help = |args: &[&str]| {
        let o = std::process::Command::new(nfs).args(args).output().unwrap();
        String::from_utf8(o.stdout).unwrap()
    };
    let dir = TempDir::new("man");
    let o = std::process::Command::new(nfs)
        .arg("--generate-man-pages")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let top = help(&["--help"]);
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 8, "{commands:?}");
    let mut pages = vec![("nfs.1".to_string(), top)];
    for c in &commands {
        pages.push((format!("nfs-{c}.1"), help(&[c, "--help"])));
    }
    for (page, help) in pages {
        let text = std::fs::read_to_string(dir.path().join(&page)).unwrap();
        let flags = help_flags(&help);
        assert!(!flags.is_empty(), "{page}");
        for f in flags {
            assert!(text.contains(&f.replace('-', "\\-")), "{page} lacks {f}");
        }
    }
}
