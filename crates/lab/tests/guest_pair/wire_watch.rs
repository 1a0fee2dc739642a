//! The host's watch over a pair's wire (issue 31, `crates/lab/src/wire_watch.rs`):
//! when one guest's stall watcher saves its state, the host tells the other guest
//! to save its own, and records both qemus' eth1 queues and the host socket that
//! carries the wire. A stand-in stall (the server's script makes the directory a
//! stall watcher makes) drives it, so the check does not wait for a real stall.

use lab::{GuestScript, Lab};
use std::time::Duration;

const SERVER: &str = r#". /share/lib.sh
step eth1_up sh -c "ip link set eth1 up && ip addr add 10.0.3.1/24 dev eth1"
step reach sh -c 'i=0; until ping -c 1 -W 1 10.0.3.2 >/dev/null 2>&1; do i=$((i+1)); [ $i -gt 120 ] && exit 1; sleep 1; done'
# What lab_stall_watch leaves when it fires, as the host sees it.
mkdir -p /share/stall-stand-in
step host_told_this_guest sh -c 'i=0; until [ -e /share/stall-peer ]; do i=$((i+1)); [ $i -gt 60 ] && exit 1; sleep 1; done'
record peer "$(cat /share/stall-peer)"
# Stay up while the client's watcher saves its state (its 10 s look included):
# until the client's guest has powered off.
step client_gone sh -c 'i=0; while ping -c 1 -W 2 10.0.3.2 >/dev/null 2>&1; do i=$((i+1)); [ $i -gt 120 ] && exit 1; sleep 1; done'
exit 0
"#;

const CLIENT: &str = r#". /share/lib.sh
step eth1_up sh -c "ip link set eth1 up && ip addr add 10.0.3.2/24 dev eth1"
# A pattern no kernel logs: only the host's word can fire this watcher.
lab_stall_watch client 'no kernel logs this line'
step reach sh -c 'i=0; until ping -c 1 -W 1 10.0.3.1 >/dev/null 2>&1; do i=$((i+1)); [ $i -gt 120 ] && exit 1; sleep 1; done'
step watcher_saved_state sh -c 'i=0; until [ -f /share/stall-client/net-10s-later.txt ]; do i=$((i+1)); [ $i -gt 120 ] && exit 1; sleep 1; done'
exit 0
"#;

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn a_stall_in_one_guest_makes_the_host_look_at_the_wire_and_the_other_guest_save_its_state() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let (mut s, mut c) = lab
        .pair(
            GuestScript::inline("pair-wire-watch-server", SERVER),
            GuestScript::inline("pair-wire-watch-client", CLIENT),
        )
        .run_name("pair-wire-watch")
        .timeout(Duration::from_secs(300))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));
    c.host_step("client_watcher_fired_on_the_hosts_word", |c| {
        let log = std::fs::read_to_string(c.share_file("guest.log")).unwrap_or_default();
        let saved = c.share_file("stall-client/rdma.txt").exists();
        if log.contains("stall: the host says the server guest stalled") && saved {
            Ok(())
        } else {
            Err(format!("saved state: {saved}; guest.log:\n{log}"))
        }
    });
    for o in [&mut s, &mut c] {
        o.host_step("host_looked_at_both_qemus_and_the_socket", |o| {
            let path = o.out_dir.join("wire-stall.txt");
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            // The first look, made while both guests ran: every index a number.
            let first: String = text.split("+10 s:").next().unwrap_or_default().to_string();
            let queues_read = ["server", "client"].iter().all(|role| {
                ["rx", "tx"].iter().all(|q| {
                    first.lines().any(|l| {
                        l.trim_start()
                            .starts_with(&format!("{role} eth1 {q}: qemu last-avail "))
                            && !l.contains('?')
                    })
                })
            });
            if text.starts_with("the server guest saved its stall state (stall-stand-in)")
                && queues_read
                && first.contains("host ss: ESTAB")
            {
                Ok(())
            } else {
                Err(format!("{}:\n{text}", path.display()))
            }
        });
    }
    super::assert_both_passed(&s, &c);
}
