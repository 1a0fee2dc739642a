use std::net::SocketAddr;

use super::*;

/// Resolves `server.example` to 192.0.2.7 and 2001:db8::7; anything else fails.
fn fake(name: &str) -> io::Result<Vec<IpAddr>> {
    match name {
        "server.example" => Ok(vec![
            "192.0.2.7".parse().unwrap(),
            "2001:db8::7".parse().unwrap(),
        ]),
        _ => Err(io::Error::new(io::ErrorKind::NotFound, "unknown host")),
    }
}

fn parse_ok(text: &str) -> Vec<ExportLine> {
    parse(text, &mut fake).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn parse_err(text: &str) -> ExportsError {
    match parse(text, &mut fake) {
        Ok(t) => panic!("{text:?} parsed: {t:?}"),
        Err(e) => e,
    }
}

fn tcp(addr: &str) -> Peer {
    Peer {
        addr: addr.parse::<SocketAddr>().unwrap(),
        protocol: Protocol::Tcp,
    }
}

fn rdma(addr: &str) -> Peer {
    Peer {
        protocol: Protocol::Rdma,
        ..tcp(addr)
    }
}

#[test]
fn defaults_are_those_of_exports_5() {
    let t = parse_ok("/srv/a 10.0.0.1\n");
    let o = t[0].clients.admit(Some(&tcp("10.0.0.1:700"))).unwrap();
    assert_eq!(*o, ExportOptions::default());
    assert!(o.read_only && o.secure && o.squash == Squash::Root);
    assert_eq!((o.anon_uid, o.anon_gid), (65534, 65534));
}

#[test]
fn options_apply_in_order_over_the_line_defaults() {
    let t = parse_ok(
        "/srv/a -rw,insecure 10.0.0.1(all_squash,anonuid=1000,anongid=100,nfsd_only) 10.0.0.2(ro,no_root_squash)",
    );
    let a = t[0].clients.admit(Some(&tcp("10.0.0.1:5000"))).unwrap();
    assert_eq!(
        *a,
        ExportOptions {
            read_only: false,
            squash: Squash::All,
            anon_uid: 1000,
            anon_gid: 100,
            secure: false,
            nfsd_only: true,
        }
    );
    let b = t[0].clients.admit(Some(&tcp("10.0.0.2:5000"))).unwrap();
    assert!(b.read_only && !b.secure && b.squash == Squash::None && !b.nfsd_only);
    assert_eq!(t[0].clients.to_string(), "10.0.0.1(rw,all_squash,insecure,anonuid=1000,anongid=100,nfsd_only) 10.0.0.2(ro,no_root_squash,insecure,anonuid=65534,anongid=65534)");
}

#[test]
fn a_client_not_listed_is_denied() {
    let t = parse_ok("/srv/a 10.0.0.0/8(rw,insecure) fd00::/8(rw,insecure)");
    let c = &t[0].clients;
    assert!(c.admit(Some(&tcp("10.200.3.4:5000"))).is_ok());
    assert!(c.admit(Some(&tcp("[fd12::1]:5000"))).is_ok());
    assert_eq!(c.admit(Some(&tcp("11.0.0.1:5000"))), Err(Denied::NotListed));
    assert_eq!(
        c.admit(Some(&tcp("[fe80::1]:5000"))),
        Err(Denied::NotListed)
    );
    // A call from no transport is nobody's.
    assert_eq!(c.admit(None), Err(Denied::NotListed));
}

#[test]
fn ipv4_mapped_ipv6_callers_match_ipv4_entries() {
    let t = parse_ok("/srv/a 192.168.1.0/24(rw,insecure)");
    assert!(t[0]
        .clients
        .admit(Some(&tcp("[::ffff:192.168.1.9]:5000")))
        .is_ok());
}

#[test]
fn netmasks_in_both_notations_and_host_bits_cleared() {
    let t = parse_ok("/a 10.1.2.3/255.255.0.0(insecure)\n/b 10.1.2.3/16(insecure)");
    assert_eq!(
        t[0].clients.0[0].client,
        Client::Network("10.1.0.0".parse().unwrap(), 16)
    );
    assert_eq!(t[0].clients.0[0].client, t[1].clients.0[0].client);
    assert!(t[0].clients.admit(Some(&tcp("10.1.200.1:2000"))).is_ok());
    assert!(matches!(
        parse_err("/a 10.0.0.0/255.0.255.0").kind,
        ErrorKind::BadNetwork(ref n) if n == "10.0.0.0/255.0.255.0"
    ));
    assert!(matches!(
        parse_err("/a 10.0.0.0/33").kind,
        ErrorKind::BadNetwork(_)
    ));
}

#[test]
fn the_most_specific_entry_wins_whatever_the_order() {
    // exports(5): single host, then network, then `*`, regardless of order.
    let t = parse_ok(
        "/srv/a *(ro,insecure) 10.0.0.0/8(rw,insecure) 10.0.0.5(rw,no_root_squash,insecure)",
    );
    let c = &t[0].clients;
    assert_eq!(
        c.admit(Some(&tcp("10.0.0.5:5000"))).unwrap().squash,
        Squash::None
    );
    let net = c.admit(Some(&tcp("10.0.0.6:5000"))).unwrap();
    assert!(!net.read_only && net.squash == Squash::Root);
    assert!(c.admit(Some(&tcp("192.0.2.1:5000"))).unwrap().read_only);
    // Within one kind, the first listed.
    let t = parse_ok("/srv/a 10.0.0.0/8(rw,insecure) 10.0.0.0/16(ro,insecure)");
    assert!(
        !t[0]
            .clients
            .admit(Some(&tcp("10.0.0.1:5000")))
            .unwrap()
            .read_only
    );
}

#[test]
fn secure_wants_a_tcp_source_port_below_1024_and_rdma_counts_as_secure() {
    let t = parse_ok("/srv/a 10.0.0.1(rw) 10.0.0.2(rw,insecure)");
    let c = &t[0].clients;
    assert!(c.admit(Some(&tcp("10.0.0.1:1023"))).is_ok());
    assert_eq!(
        c.admit(Some(&tcp("10.0.0.1:1024"))),
        Err(Denied::InsecurePort)
    );
    assert!(c.admit(Some(&tcp("10.0.0.2:40000"))).is_ok());
    // knfsd's svc_rdma_secure_port: every RDMA call is secure.
    assert!(c.admit(Some(&rdma("10.0.0.1:40000"))).is_ok());
    // In process (no transport): never secure.
    let t = parse_ok("/srv/a *(rw)");
    assert_eq!(t[0].clients.admit(None), Err(Denied::InsecurePort));
}

#[test]
fn host_names_resolve_at_load_to_every_address() {
    let t = parse_ok("/srv/a server.example(rw,insecure)");
    let c = &t[0].clients;
    assert!(c.admit(Some(&tcp("192.0.2.7:5000"))).is_ok());
    assert!(c.admit(Some(&tcp("[2001:db8::7]:5000"))).is_ok());
    assert_eq!(
        c.admit(Some(&tcp("192.0.2.8:5000"))),
        Err(Denied::NotListed)
    );
    let e = parse_err("/srv/a\n/srv/b nowhere.example(rw)");
    assert_eq!(e.line, 2);
    assert!(matches!(e.kind, ErrorKind::UnknownHost(ref h, _) if h == "nowhere.example"));
}

#[test]
fn comments_continuations_quotes_and_escapes() {
    let t = parse_ok(
        "# exports\n\n/srv/a \\\n   10.0.0.1(rw)   # trailing comment\n\"/srv/with space\" 10.0.0.2\n/srv/oct\\040al 10.0.0.3\n",
    );
    assert_eq!(t.len(), 3);
    assert_eq!((t[0].path.to_str(), t[0].line), (Some("/srv/a"), 3));
    assert!(!t[0].clients.0[0].options.read_only);
    assert_eq!(
        (t[1].path.to_str(), t[1].line),
        (Some("/srv/with space"), 5)
    );
    assert_eq!(t[2].path.to_str(), Some("/srv/oct al"));
}

#[test]
fn a_path_alone_is_exported_to_everyone_with_the_line_options() {
    let t = parse_ok("/srv/a -rw");
    assert_eq!(t[0].clients.0.len(), 1);
    assert_eq!(t[0].clients.0[0].client, Client::Anyone);
    assert!(!t[0].clients.0[0].options.read_only);
}

#[test]
fn options_knfsd_needs_and_we_do_not_are_accepted() {
    let t = parse_ok("/srv/a *(rw,sync,no_subtree_check,wdelay,sec=sys,insecure_locks)");
    assert!(!t[0].clients.0[0].options.read_only);
}

/// Each malformed line is an error naming its line and what is wrong.
#[test]
fn malformed_lines_are_errors_naming_the_line() {
    let cases: &[(&str, usize, &str)] = &[
        (
            "/a *(rw)\nrelative *(rw)",
            2,
            "export path \"relative\" is not absolute",
        ),
        ("/a *(rw,bogus)", 1, "unknown option \"bogus\""),
        ("/a *(fsid=0)", 1, "option \"fsid=0\" is not supported"),
        ("/a *(sec=krb5)", 1, "option \"sec=krb5\" is not supported"),
        ("/a *(anonuid=x)", 1, "\"anonuid=x\": want a number"),
        ("/a *(anonuid=)", 1, "\"anonuid=\": want a number"),
        (
            "#\n/a 10.0.0.1 (rw)",
            2,
            "options \"(rw)\" follow a space, not a client",
        ),
        ("/a *(rw", 1, "bad client entry \"*(rw\""),
        ("/a *(rw)x", 1, "bad client entry \"*(rw)x\""),
        (
            "/a @trusted(rw)",
            1,
            "client \"@trusted\" is not supported: netgroups",
        ),
        (
            "/a *.example.com(rw)",
            1,
            "client \"*.example.com\" is not supported: host name wildcards",
        ),
        ("/a gss/krb5(rw)", 1, "not supported: Kerberos"),
        ("/a 10.0.0.1/x(rw)", 1, "is not an address or network"),
        ("/a host!(rw)", 1, "is not an address or network"),
        ("\"/a *(rw)", 1, "unterminated quote"),
        ("/a\\04 *", 1, "bad escape"),
        (
            "/a *\n\n/a 10.0.0.1",
            3,
            "\"/a\" is already exported on line 1",
        ),
        ("# nothing\n", 0, "no export listed"),
    ];
    for (text, line, want) in cases {
        let e = parse_err(text);
        assert_eq!(e.line, *line, "{text:?}: {e}");
        assert!(
            e.to_string().contains(want),
            "{text:?}: {e} (want {want:?})"
        );
        if *line > 0 {
            assert!(e.to_string().starts_with(&format!("line {line}: ")), "{e}");
        }
    }
}

#[test]
fn load_names_the_file() {
    let dir = std::env::temp_dir().join(format!("nfsd-exports-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("exports");
    std::fs::write(&f, "/srv/a 127.0.0.1(rw)\n/srv/b *(rw,nope)\n").unwrap();
    let e = load(&f).unwrap_err().to_string();
    assert_eq!(
        e,
        format!("{}: line 2: unknown option \"nope\"", f.display())
    );
    let e = load(&dir.join("missing")).unwrap_err().to_string();
    assert!(e.contains("missing: cannot read"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn identity_mapping_per_squash_mode() {
    let o = |squash| ExportOptions {
        squash,
        ..ExportOptions::default()
    };
    let root = o(Squash::Root);
    assert_eq!(root.identity(Some((0, 0, gids(&[0, 5])))).uid, 65534);
    assert_eq!(
        root.identity(Some((0, 0, gids(&[0, 5])))).groups[..],
        [65534, 5]
    );
    assert_eq!(root.identity(Some((1000, 100, gids(&[])))).uid, 1000);
    assert_eq!(root.identity(None).uid, 65534);
    let all = ExportOptions {
        anon_uid: 7,
        anon_gid: 8,
        ..o(Squash::All)
    };
    let id = all.identity(Some((1000, 1000, gids(&[1, 2]))));
    assert_eq!((id.uid, id.gid, id.groups.len()), (7, 8, 0));
    assert_eq!(o(Squash::None).identity(Some((0, 0, gids(&[])))).uid, 0);
}

fn gids(ids: &[u32]) -> oncrpc::Gids {
    oncrpc::Gids::new(ids).unwrap()
}
