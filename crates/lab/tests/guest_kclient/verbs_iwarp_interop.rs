//! The two RDMA providers interoperate on the wire (issue 14): in the guest, over
//! soft-iWARP `siw0` (10.0.2.15),
//! 1. our `nfs` client on verbs (siw0, `--rdma-provider verbs`) against our `nfsd` on
//!    the userspace iWARP provider (`--rdma-provider iwarp`: MPA over its own TCP
//!    socket), and
//! 2. our `nfs` client on the userspace iWARP provider against our `nfsd` on verbs
//!    (siw0's kernel iWARP listener),
//!
//! each PUTting 8 MiB (the server's RDMA Reads) and GETting it back (its RDMA
//! Writes), md5 of the original, the copy and the server's file equal, and each
//! side's own line naming the provider it ran on.

use std::time::Duration;

use lab::workspace::build_binary;
use lab::{GuestScript, Lab};

const GUEST: &str = r#". /share/lib.sh
step rdma_up lab_rdma_up
step make sh -c 'head -c 8388608 /dev/urandom > /tmp/i8m'
nfsd_up() {
  mkdir -p /srv/i$1 && mount -t tmpfs -o size=64m tmpfs /srv/i$1 && chmod 777 /srv/i$1 || return 1
  /share/bin/nfsd --bind 10.0.2.15 --nfs-port $2 --mount-port $3 --rdma-port $4 \
    --rdma-provider $5 --rpcbind off --no-nlm --squash none --state-dir /tmp/nfsd-state-i$1 /srv/i$1 \
    >"$LAB_RUN_DIR/nfsd-$1.txt" 2>&1 &
  echo $! >/tmp/nfsd-i$1.pid
  i=0
  while ! grep -q '^nfsd: ready' "$LAB_RUN_DIR/nfsd-$1.txt" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 100 ] && { cat "$LAB_RUN_DIR/nfsd-$1.txt"; return 1; }; sleep 0.1
  done
}
nfsd_down() {
  kill -TERM $(cat /tmp/nfsd-i$1.pid); sleep 1; cat "$LAB_RUN_DIR/nfsd-$1.txt"
}
transfer() {
  out="$LAB_RUN_DIR/nfs-$1"
  for op in put get; do
    if [ $op = put ]; then args="put /tmp/i8m 10.0.2.15:/srv/i$1/f"; else args="get 10.0.2.15:/srv/i$1/f /tmp/i8m-$1"; fi
    NFS_LOG=nfsclient=info /share/bin/nfs -q -v -t rdma --rdma-provider $4 --nfs-port $2 \
      --mount-port $3 --timeout 60 $args 2>"$out-$op.txt" || { cat "$out-$op.txt"; return 1; }
    cat "$out-$op.txt"
  done
  lab_same_md5 /tmp/i8m /tmp/i8m-$1 /srv/i$1/f
}
step nfsd_iwarp_up nfsd_up a 13049 13048 23049 iwarp
step verbs_client_to_iwarp_server transfer a 23049 13048 verbs
step nfsd_iwarp_down nfsd_down a
step nfsd_verbs_up nfsd_up b 13149 13148 23149 verbs
step iwarp_client_to_verbs_server transfer b 23149 13148 iwarp
step nfsd_verbs_down nfsd_down b
exit 0
"#;

/// `text` (a side's output) has a line containing `want`.
fn has_line(text: &str, want: &str, what: &str) -> Result<(), String> {
    if text.lines().any(|l| l.contains(want)) {
        Ok(())
    } else {
        Err(format!("{what}: no line with {want:?} in:\n{text}"))
    }
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn verbs_and_userspace_iwarp_interoperate_over_siw0() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfsd = build_binary("nfsd", "nfsd");
    let nfs = build_binary("nfsclient", "nfs");
    let script = GuestScript::inline("verbs-iwarp-interop", GUEST)
        .binary("nfsd", &nfsd)
        .binary("nfs", &nfs);
    let mut o = lab
        .guest(script)
        .run_name("verbs-iwarp-interop")
        .shared_boot("kclient")
        .timeout(Duration::from_secs(300))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));
    let cases = [
        (
            "a",
            "via userspace iWARP [--rdma-provider iwarp]",
            "provider=verbs on siw0",
        ),
        (
            "b",
            "via verbs on siw0 [--rdma-provider verbs]",
            "provider=userspace iWARP",
        ),
    ];
    for (run, server_line, client_line) in cases {
        o.host_step(
            &format!("providers_{run}_checked"),
            |o| -> Result<(), String> {
                let read = |f: &str| {
                    std::fs::read_to_string(o.share_file(f)).map_err(|e| format!("share/{f}: {e}"))
                };
                has_line(&read(&format!("nfsd-{run}.txt"))?, server_line, "nfsd")?;
                for op in ["put", "get"] {
                    let text = read(&format!("nfs-{run}-{op}.txt"))?;
                    has_line(&text, client_line, op)?;
                    has_line(&text, "nfs: rdma calls=", op)?;
                }
                Ok(())
            },
        );
    }
    o.assert_passed();
}
