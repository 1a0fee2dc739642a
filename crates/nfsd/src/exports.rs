//! Who may use which export, and how: the exports table in the `/etc/exports` syntax
//! of Linux (exports(5)), and the one access check every MOUNT and NFS call goes
//! through ([`Clients::admit`]).
//!
//! ```text
//! # path            client(options) ...
//! /srv/export       192.168.1.0/24(rw,no_root_squash) *(ro)
//! /srv/public       -ro,insecure  *
//! "/srv/with space" host.example(rw,all_squash,anonuid=1000,anongid=1000)
//! ```
//!
//! Clients: `*` (anyone), an IPv4 or IPv6 address, a network (`10.0.0.0/8`,
//! `10.0.0.0/255.0.0.0`, `fd00::/8`), or a host name, resolved once when the file is
//! loaded (again on every reload). A caller matching several entries of a line gets
//! the options of the most specific kind, as exports(5) orders them: a single host,
//! then a network, then `*`; within one kind, the first listed.
//!
//! Options: `ro` (the default) / `rw`; `root_squash` (the default) /
//! `no_root_squash` / `all_squash` (`no_all_squash` undoes it); `anonuid=N`,
//! `anongid=N` (65534 by default); `secure` (the default: a TCP caller's source port
//! must be below 1024) / `insecure`. RPC-over-RDMA callers count as secure, as Linux
//! knfsd counts them (`svc_rdma_secure_port`): the RDMA connection manager has no
//! privileged ports. `nfsd_only` (ours; knfsd has no such option) declares that the
//! export's directories change only through this server, never by local processes or
//! another server: NFSv4.1 then reports each change of a directory as atomic
//! (`change_info4.atomic`; nfsd's `dir_locks` module), which spares the Linux client a
//! revalidation of the directory after each file it creates or removes. `-options`
//! right after the path set the line's defaults. Options knfsd has that change nothing
//! here are accepted and ignored ([`NO_EFFECT`]).
//!
//! # What this does not do
//!
//! Netgroups (`@group`), host name wildcards (`*.example.com`, which need a reverse
//! lookup of every caller), Kerberos flavors (`gss/krb5`, `sec=krb5`), and the options
//! whose meaning our server does not have (`fsid=`, `crossmnt`, `nohide`, `mountpoint`,
//! `refer=`, `replicas=`, `pnfs`): each is an error naming its line, never silently
//! dropped. A host name is not looked up again between reloads (SIGHUP reloads).

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use oncrpc::{Gids, Peer, Protocol};

use crate::creds::{Identity, Squash};

/// Options knfsd accepts that need nothing from us: `sync`/`async` (we answer WRITE
/// and COMMIT as RFC 1813 says whatever is asked), `wdelay`/`no_wdelay` (write
/// gathering), `subtree_check`/`no_subtree_check` (every handle is resolved inside its
/// export anyway), the NLM options (no lock manager yet) and `sec=sys`.
pub const NO_EFFECT: &[&str] = &[
    "sync",
    "async",
    "wdelay",
    "no_wdelay",
    "subtree_check",
    "no_subtree_check",
    "secure_locks",
    "insecure_locks",
    "auth_nlm",
    "no_auth_nlm",
    "sec=sys",
];

/// Options whose meaning this server does not implement (an error, with the reason).
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "fsid",
        "export ids come from the directory's device and inode",
    ),
    (
        "crossmnt",
        "file systems mounted below an export are not served",
    ),
    (
        "nohide",
        "file systems mounted below an export are not served",
    ),
    ("mountpoint", "not supported"),
    ("mp", "not supported"),
    ("refer", "NFSv4 referrals: this is an NFSv3 server"),
    ("replicas", "NFSv4 referrals: this is an NFSv3 server"),
    ("pnfs", "this is an NFSv3 server"),
    ("sec", "only AUTH_SYS (sec=sys) is served"),
];

/// How a client may use an export: the exports(5) options that mean something here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportOptions {
    /// `ro`: every modifying procedure gets NFS3ERR_ROFS.
    pub read_only: bool,
    /// `root_squash`, `no_root_squash`, `all_squash`.
    pub squash: Squash,
    /// `anonuid`: the uid squashed callers (and AUTH_NONE callers) act as.
    pub anon_uid: u32,
    /// `anongid`.
    pub anon_gid: u32,
    /// `secure`: a caller over TCP must come from a source port below 1024.
    pub secure: bool,
    /// `nfsd_only`: the admin declares that nothing but this server changes the
    /// export's directories (module docs). Off by default: a local process may.
    pub nfsd_only: bool,
}

impl Default for ExportOptions {
    /// exports(5)'s defaults: `ro,root_squash,secure,anonuid=65534,anongid=65534`.
    fn default() -> Self {
        ExportOptions {
            read_only: true,
            squash: Squash::Root,
            anon_uid: 65534,
            anon_gid: 65534,
            secure: true,
            nfsd_only: false,
        }
    }
}

impl ExportOptions {
    /// The identity a call acts as, from its AUTH_SYS uid, gid and groups
    /// (`None` for AUTH_NONE, which is always anonymous).
    pub fn identity(&self, sys: Option<(u32, u32, Gids)>) -> Identity {
        let anon = Identity {
            uid: self.anon_uid,
            gid: self.anon_gid,
            groups: Gids::default(),
        };
        let Some((uid, gid, groups)) = sys else {
            return anon;
        };
        match self.squash {
            Squash::All => anon,
            Squash::None => Identity { uid, gid, groups },
            Squash::Root => Identity {
                uid: if uid == 0 { self.anon_uid } else { uid },
                gid: if gid == 0 { self.anon_gid } else { gid },
                groups: groups.map(|g| if g == 0 { self.anon_gid } else { g }),
            },
        }
    }

    /// Applies one option word; `Err` says why it is refused.
    fn apply(&mut self, word: &str) -> Result<(), ErrorKind> {
        match word {
            "ro" => self.read_only = true,
            "rw" => self.read_only = false,
            "root_squash" => self.squash = Squash::Root,
            "no_root_squash" => self.squash = Squash::None,
            "all_squash" => self.squash = Squash::All,
            // Undoes all_squash: back to the default, root_squash.
            "no_all_squash" => self.squash = Squash::Root,
            "secure" => self.secure = true,
            "insecure" => self.secure = false,
            "nfsd_only" => self.nfsd_only = true,
            w if NO_EFFECT.contains(&w) => {}
            w => {
                let (name, value) = match w.split_once('=') {
                    Some((n, v)) => (n, Some(v)),
                    None => (w, None),
                };
                let id = |v: Option<&str>| {
                    v.and_then(|v| v.parse::<u32>().ok())
                        .ok_or_else(|| ErrorKind::BadNumber(w.to_string()))
                };
                match name {
                    "anonuid" => self.anon_uid = id(value)?,
                    "anongid" => self.anon_gid = id(value)?,
                    _ => {
                        return Err(match UNSUPPORTED.iter().find(|(n, _)| *n == name) {
                            Some((_, why)) => ErrorKind::UnsupportedOption(w.to_string(), why),
                            None => ErrorKind::UnknownOption(w.to_string()),
                        })
                    }
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for ExportOptions {
    /// In exports(5) words, e.g. `rw,root_squash,secure,anonuid=65534,anongid=65534`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{},{},{},anonuid={},anongid={}",
            if self.read_only { "ro" } else { "rw" },
            match self.squash {
                Squash::None => "no_root_squash",
                Squash::Root => "root_squash",
                Squash::All => "all_squash",
            },
            if self.secure { "secure" } else { "insecure" },
            self.anon_uid,
            self.anon_gid
        )?;
        if self.nfsd_only {
            f.write_str(",nfsd_only")?;
        }
        Ok(())
    }
}

/// Which callers a client entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Client {
    /// `*`: anyone.
    Anyone,
    /// One host: an address, or a host name and the addresses it resolved to.
    Host(Vec<IpAddr>),
    /// A network: the address (host bits cleared) and the prefix length.
    Network(IpAddr, u8),
}

impl Client {
    /// Does `ip` (canonical: no IPv4-mapped IPv6) belong to this client?
    fn matches(&self, ip: IpAddr) -> bool {
        match self {
            Client::Anyone => true,
            Client::Host(addrs) => addrs.iter().any(|a| a.to_canonical() == ip),
            Client::Network(net, prefix) => mask(ip, *prefix) == Some(*net),
        }
    }

    /// exports(5)'s order: single hosts first, then networks, then `*`.
    fn rank(&self) -> u8 {
        match self {
            Client::Host(_) => 0,
            Client::Network(..) => 1,
            Client::Anyone => 2,
        }
    }
}

/// `ip` with the bits after `prefix` cleared; `None` if `prefix` is too long for it.
fn mask(ip: IpAddr, prefix: u8) -> Option<IpAddr> {
    match ip {
        IpAddr::V4(a) if prefix <= 32 => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            Some(IpAddr::V4((u32::from(a) & m).into()))
        }
        IpAddr::V6(a) if prefix <= 128 => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            Some(IpAddr::V6((u128::from(a) & m).into()))
        }
        _ => None,
    }
}

/// One `client(options)` of an export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRule {
    /// The client as written (`*`, `10.0.0.0/8`, `host.example`), for messages.
    pub name: String,
    /// Who it names.
    pub client: Client,
    /// What they may do.
    pub options: ExportOptions,
}

/// Why a caller is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// No client entry of the export names the caller's address (or the call came
    /// from no transport, and the export is not open to `*`).
    NotListed,
    /// The entry is `secure` and the caller's TCP source port is 1024 or above (or
    /// unknown).
    InsecurePort,
}

/// The client list of one export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clients(pub Vec<ClientRule>);

impl Clients {
    /// Everyone, with `options`: what a directory given on the command line gets.
    pub fn anyone(options: ExportOptions) -> Clients {
        Clients(vec![ClientRule {
            name: "*".to_string(),
            client: Client::Anyone,
            options,
        }])
    }

    /// The access check: the options `peer` gets, or why it gets none. Every MNT and
    /// every NFS call with a handle goes through here, over TCP and RDMA alike.
    ///
    /// A call with no peer (dispatched in process) matches only `*`, and is never
    /// from a secure port.
    pub fn admit(&self, peer: Option<&Peer>) -> Result<&ExportOptions, Denied> {
        let ip = peer.map(|p| p.addr.ip().to_canonical());
        let rule = self
            .0
            .iter()
            .filter(|r| match ip {
                Some(ip) => r.client.matches(ip),
                None => r.client == Client::Anyone,
            })
            .min_by_key(|r| r.client.rank())
            .ok_or(Denied::NotListed)?;
        let secure_port = match peer {
            Some(p) => p.protocol == Protocol::Rdma || p.addr.port() < 1024,
            None => false,
        };
        if rule.options.secure && !secure_port {
            return Err(Denied::InsecurePort);
        }
        Ok(&rule.options)
    }
}

impl fmt::Display for Clients {
    /// `name(options) name(options) ...`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}({})", r.name, r.options)?;
        }
        Ok(())
    }
}

/// One exported directory and its clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportLine {
    /// The directory, absolute.
    pub path: PathBuf,
    /// Who may use it, how.
    pub clients: Clients,
    /// The line it starts on in the exports file (0: from the command line).
    pub line: usize,
}

impl ExportLine {
    /// `path` for everyone, with `options`: a directory given on the command line.
    pub fn everyone(path: impl Into<PathBuf>, options: ExportOptions) -> ExportLine {
        ExportLine {
            path: path.into(),
            clients: Clients::anyone(options),
            line: 0,
        }
    }
}

/// A malformed exports file: where and why.
#[derive(Debug)]
pub struct ExportsError {
    /// The file, when the table came from one.
    pub file: Option<PathBuf>,
    /// The 1-based line (0 when the whole file is at fault).
    pub line: usize,
    /// What is wrong.
    pub kind: ErrorKind,
}

/// What is wrong with an exports file.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file cannot be read.
    Read(io::Error),
    /// The path is not absolute.
    RelativePath(String),
    /// A `"` without its closing `"`.
    UnterminatedQuote,
    /// A `\` escape in a path that is not `\` and three octal digits.
    BadEscape,
    /// `(options)` separated from the client by a space: exports(5) would apply them
    /// to everyone, the classic mistake; written `client(options)` or `*(options)`.
    OptionsWithoutClient(String),
    /// `client(options` without `)`, or text after it.
    BadParentheses(String),
    /// An option we do not know.
    UnknownOption(String),
    /// An option knfsd has whose meaning we do not implement, and why.
    UnsupportedOption(String, &'static str),
    /// `anonuid=`/`anongid=` without a number.
    BadNumber(String),
    /// A client form we do not support (netgroup, wildcard, Kerberos), and why.
    UnsupportedClient(String, &'static str),
    /// A network whose address or prefix does not parse.
    BadNetwork(String),
    /// A host name that does not resolve.
    UnknownHost(String, io::Error),
    /// The directory is listed twice; the first time on this line.
    Duplicate(String, usize),
    /// The file lists no export.
    Empty,
}

impl fmt::Display for ExportsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}: ", file.display())?;
        }
        if self.line > 0 {
            write!(f, "line {}: ", self.line)?;
        }
        match &self.kind {
            ErrorKind::Read(e) => write!(f, "cannot read: {e}"),
            ErrorKind::RelativePath(p) => write!(f, "export path {p:?} is not absolute"),
            ErrorKind::UnterminatedQuote => f.write_str("unterminated quote"),
            ErrorKind::BadEscape => {
                f.write_str("bad escape in path (write \\ and three octal digits, e.g. \\040)")
            }
            ErrorKind::OptionsWithoutClient(w) => write!(
                f,
                "options {w:?} follow a space, not a client: write them right after the \
                 client, `host{w}`, or `*{w}` for everyone"
            ),
            ErrorKind::BadParentheses(w) => {
                write!(f, "bad client entry {w:?}: want client(options)")
            }
            ErrorKind::UnknownOption(o) => write!(f, "unknown option {o:?}"),
            ErrorKind::UnsupportedOption(o, why) => {
                write!(f, "option {o:?} is not supported: {why}")
            }
            ErrorKind::BadNumber(o) => write!(f, "{o:?}: want a number (e.g. anonuid=1000)"),
            ErrorKind::UnsupportedClient(c, why) => {
                write!(f, "client {c:?} is not supported: {why}")
            }
            ErrorKind::BadNetwork(c) => write!(
                f,
                "client {c:?} is not an address or network (want e.g. 10.0.0.0/8, \
                 10.0.0.0/255.0.0.0, fd00::/8)"
            ),
            ErrorKind::UnknownHost(h, e) => write!(f, "host name {h:?} does not resolve: {e}"),
            ErrorKind::Duplicate(p, first) => {
                write!(
                    f,
                    "{p:?} is already exported on line {first}: list all its clients on one line"
                )
            }
            ErrorKind::Empty => f.write_str("no export listed"),
        }
    }
}

impl std::error::Error for ExportsError {}

impl From<ExportsError> for io::Error {
    fn from(e: ExportsError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e.to_string())
    }
}

/// Reads and parses an exports file, resolving host names with the system resolver.
pub fn load(file: &Path) -> Result<Vec<ExportLine>, ExportsError> {
    let with_file = |mut e: ExportsError| {
        e.file = Some(file.to_path_buf());
        e
    };
    let text = std::fs::read_to_string(file).map_err(|e| {
        with_file(ExportsError {
            file: None,
            line: 0,
            kind: ErrorKind::Read(e),
        })
    })?;
    parse(&text, &mut system_resolve).map_err(with_file)
}

/// The addresses of a host name, from the system resolver (`/etc/hosts`, DNS).
pub fn system_resolve(name: &str) -> io::Result<Vec<IpAddr>> {
    let addrs: Vec<IpAddr> = (name, 0).to_socket_addrs()?.map(|a| a.ip()).collect();
    if addrs.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "no address"));
    }
    Ok(addrs)
}

/// Parses the text of an exports file; host names are looked up with `resolve`.
///
/// Syntax (exports(5)): one export per line, `#` starts a comment, `\` at the end of
/// a line continues it; the path may be quoted (`"..."`) and may hold `\ooo` octal
/// escapes (`\040` for a space); then optional `-options` (the line's defaults); then
/// `client(options)` entries. A path with no client is exported to `*` with the
/// line's options, as exportfs does.
pub fn parse(
    text: &str,
    resolve: &mut dyn FnMut(&str) -> io::Result<Vec<IpAddr>>,
) -> Result<Vec<ExportLine>, ExportsError> {
    let mut out: Vec<ExportLine> = Vec::new();
    for (line, logical) in logical_lines(text) {
        let err = |kind| ExportsError {
            file: None,
            line,
            kind,
        };
        let words = split_words(&logical).map_err(err)?;
        let Some((path, rest)) = words.split_first() else {
            continue;
        };
        let path = unescape(path).map_err(err)?;
        if !path.starts_with('/') {
            return Err(err(ErrorKind::RelativePath(path)));
        }
        if let Some(first) = out.iter().find(|e| e.path == Path::new(&path)) {
            return Err(err(ErrorKind::Duplicate(path, first.line)));
        }
        let mut defaults = ExportOptions::default();
        let mut rest = rest;
        while let Some((w, more)) = rest.split_first() {
            let Some(opts) = w.strip_prefix('-') else {
                break;
            };
            apply_all(&mut defaults, opts).map_err(err)?;
            rest = more;
        }
        let mut clients = Vec::new();
        for w in rest {
            clients.push(client_rule(w, defaults, resolve).map_err(err)?);
        }
        if clients.is_empty() {
            clients.push(ClientRule {
                name: "*".to_string(),
                client: Client::Anyone,
                options: defaults,
            });
        }
        out.push(ExportLine {
            path: PathBuf::from(path),
            clients: Clients(clients),
            line,
        });
    }
    if out.is_empty() {
        return Err(ExportsError {
            file: None,
            line: 0,
            kind: ErrorKind::Empty,
        });
    }
    Ok(out)
}

/// Lines joined across `\`-newline continuations, comments removed, each with the
/// number of its first physical line.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        if cur.is_empty() {
            start = i + 1;
        }
        let line = strip_comment(raw);
        match line.strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head);
                cur.push(' ');
            }
            None => {
                cur.push_str(line);
                out.push((start, std::mem::take(&mut cur)));
            }
        }
    }
    if !cur.is_empty() {
        out.push((start, cur));
    }
    out
}

/// `line` up to a `#` that is not inside quotes.
fn strip_comment(line: &str) -> &str {
    let mut quoted = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted => return &line[..i],
            _ => {}
        }
    }
    line
}

/// Whitespace-separated words; `"..."` keeps spaces inside a word (quotes removed).
fn split_words(line: &str) -> Result<Vec<String>, ErrorKind> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut in_word = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quoted {
        return Err(ErrorKind::UnterminatedQuote);
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Decodes `\ooo` octal escapes (exportfs writes a space in a path as `\040`).
fn unescape(word: &str) -> Result<String, ErrorKind> {
    let mut out = Vec::with_capacity(word.len());
    let b = word.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let digits = b.get(i + 1..i + 4).ok_or(ErrorKind::BadEscape)?;
            let s = std::str::from_utf8(digits).map_err(|_| ErrorKind::BadEscape)?;
            let v = u8::from_str_radix(s, 8).map_err(|_| ErrorKind::BadEscape)?;
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ErrorKind::BadEscape)
}

fn apply_all(options: &mut ExportOptions, list: &str) -> Result<(), ErrorKind> {
    for w in list.split(',').filter(|w| !w.is_empty()) {
        options.apply(w)?;
    }
    Ok(())
}

/// One `client(options)` word, over the line's `defaults`.
fn client_rule(
    word: &str,
    defaults: ExportOptions,
    resolve: &mut dyn FnMut(&str) -> io::Result<Vec<IpAddr>>,
) -> Result<ClientRule, ErrorKind> {
    if word.starts_with('(') {
        return Err(ErrorKind::OptionsWithoutClient(word.to_string()));
    }
    let (name, opts) = match word.split_once('(') {
        Some((name, rest)) => match rest.strip_suffix(')') {
            Some(opts) if !opts.contains(['(', ')']) => (name, opts),
            _ => return Err(ErrorKind::BadParentheses(word.to_string())),
        },
        None if word.contains(')') => return Err(ErrorKind::BadParentheses(word.to_string())),
        None => (word, ""),
    };
    let mut options = defaults;
    apply_all(&mut options, opts)?;
    Ok(ClientRule {
        name: name.to_string(),
        client: client(name, resolve)?,
        options,
    })
}

/// What a client name names.
fn client(
    name: &str,
    resolve: &mut dyn FnMut(&str) -> io::Result<Vec<IpAddr>>,
) -> Result<Client, ErrorKind> {
    let unsupported = |why| Err(ErrorKind::UnsupportedClient(name.to_string(), why));
    if name == "*" {
        return Ok(Client::Anyone);
    }
    if name.starts_with('@') {
        return unsupported("netgroups are not supported; list the hosts or their network");
    }
    if name.starts_with("gss/") {
        return unsupported("Kerberos is not supported (AUTH_SYS only)");
    }
    if name.contains(['*', '?', '[']) {
        return unsupported(
            "host name wildcards need a reverse lookup of every caller; use a network (10.0.0.0/8)",
        );
    }
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Ok(Client::Host(vec![ip.to_canonical()]));
    }
    if let Some((addr, prefix)) = name.split_once('/') {
        let bad = || ErrorKind::BadNetwork(name.to_string());
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let prefix = match (prefix.parse::<u8>(), prefix.parse::<Ipv4Addr>(), addr) {
            (Ok(p), _, _) => p,
            // A dotted netmask: only contiguous ones are networks.
            (_, Ok(m), IpAddr::V4(_)) => {
                let m = u32::from(m);
                if m.leading_ones() + m.trailing_zeros() != 32 {
                    return Err(bad());
                }
                m.leading_ones() as u8
            }
            _ => return Err(bad()),
        };
        let net = mask(addr.to_canonical(), prefix).ok_or_else(bad)?;
        return Ok(Client::Network(net, prefix));
    }
    let valid = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if !valid {
        return Err(ErrorKind::BadNetwork(name.to_string()));
    }
    match resolve(name) {
        Ok(addrs) => Ok(Client::Host(
            addrs.into_iter().map(|a| a.to_canonical()).collect(),
        )),
        Err(e) => Err(ErrorKind::UnknownHost(name.to_string(), e)),
    }
}

#[cfg(test)]
mod tests;
