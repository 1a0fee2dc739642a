# lab/guest/lib.sh: sourced by every guest scenario script (`. /share/lib.sh`).
#
# The harness copies this file into the share at each boot, so editing it
# needs no initramfs rebuild. It gives scenario scripts named steps whose
# outcome the host turns into test results, and the usual guest setup
# (siw, knfsd with its RDMA listener, captures, host handshakes).
#
# A guest boot runs one scenario script (/share/guest.sh), or, in a shared boot
# (GuestConfig::shared_boot), several in turn: lab_serve_runs below runs each
# from /share/runs/<name>/ with LAB_RUN_DIR set to that directory, where its
# results, handshake files, logs and captures then go. LAB_RUN_DIR is /share
# for a scenario that has the boot to itself.
#
# Results go to $LAB_RUN_DIR/results, one record per line:
#   BEGIN <step> <uptime>         a step started
#   PASS <step> <uptime>          it succeeded
#   FAIL <step> rc=<n> <uptime>   it failed; the script stops here
#   VALUE <key> <text>            a measured value (e.g. the mountstats xprt line)
# A step with a BEGIN and no end is the one that hung when the harness timed out.

LAB_RUN_DIR=${LAB_RUN_DIR:-/share}
RESULTS=$LAB_RUN_DIR/results
: "${LAB_STEP_TIMEOUT:=60}"
LAB_CLEANUPS=""

lab_uptime() { cut -d' ' -f1 /proc/uptime; }
lab_log() { echo "[$(lab_uptime)] $*"; }

# Run cleanup commands (registered with lab_on_exit) when the script exits,
# however it exits: a failed step still stops its captures cleanly.
lab_on_exit() { LAB_CLEANUPS="$*; $LAB_CLEANUPS"; }
lab_run_cleanups() {
  local c=$LAB_CLEANUPS
  LAB_CLEANUPS=""
  [ -n "$c" ] && eval "$c"
  return 0
}
trap 'lab_run_cleanups' EXIT

# step NAME CMD [ARGS...]: run one named step. Executables run under
# `timeout $LAB_STEP_TIMEOUT`; shell functions run directly (bounded by the
# harness's whole-run timeout). A failing step ends the script with rc 1.
step() {
  local name=$1 rc
  shift
  echo "BEGIN $name $(lab_uptime)" >>$RESULTS
  lab_log "== step $name: $*"
  case $(command -v "$1") in
    /*) timeout -s KILL "$LAB_STEP_TIMEOUT" "$@" ;;
    *) "$@" ;;
  esac
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "PASS $name $(lab_uptime)" >>$RESULTS
    lab_log "== step $name passed"
  else
    echo "FAIL $name rc=$rc $(lab_uptime)" >>$RESULTS
    lab_log "== step $name FAILED rc=$rc"
    exit 1
  fi
}

# record KEY TEXT...: a value for the host to check or report.
record() {
  local k=$1
  shift
  echo "VALUE $k $*" >>$RESULTS
  lab_log "value $k = $*"
}

# lab_ready: tell the host the guest is ready for host-side work.
lab_ready() { lab_uptime >"$LAB_RUN_DIR/ready"; lab_log "ready"; }

# lab_wait_for FILE SECS: wait for the host to create $LAB_RUN_DIR/FILE.
lab_wait_for() {
  local i=0 n=$(($2 * 5))
  while [ ! -e "$LAB_RUN_DIR/$1" ]; do
    [ $i -ge $n ] && { lab_log "no $LAB_RUN_DIR/$1 after $2 s"; return 1; }
    sleep 0.2
    i=$((i + 1))
  done
}

# lab_rdma_up: load siw and the NFS/RDMA modules, and create siw devices on
# eth0 and lo. LAB_SIW picks the siw build: stock (default), patched (the
# accept-race fix, lab/patches/), crc (asks for MPA CRC on every connection).
# Once per boot: in a shared boot a later scenario finds it done (and fails if
# it wants another siw build than the one loaded).
lab_rdma_up() {
  local m
  if [ -e /run/lab-rdma-up ]; then
    record siw "$(cat /run/lab-rdma-up)"
    [ "$(cat /run/lab-rdma-up)" = "${LAB_SIW:-stock}" ] && lab_log "rdma already up in this boot" && return 0
    lab_log "siw $(cat /run/lab-rdma-up) is loaded in this boot, not ${LAB_SIW:-stock}"
    return 1
  fi
  case ${LAB_SIW:-stock} in
    stock) modprobe siw || return 1 ;;
    patched | crc)
      modprobe ib_core && modprobe libcrc32c && insmod "/lib/modules/siw-$LAB_SIW.ko" || return 1
      ;;
    *) lab_log "unknown LAB_SIW=$LAB_SIW" && return 1 ;;
  esac
  record siw "${LAB_SIW:-stock}"
  for m in rpcrdma nfsv3 nfsv4 nfsd rdma_ucm ib_uverbs; do modprobe $m || return 1; done
  rdma link add siw0 type siw netdev eth0 || return 1
  rdma link add siw_lo type siw netdev lo || return 1
  rdma link show
  echo "${LAB_SIW:-stock}" >/run/lab-rdma-up
}

# lab_rxe_up: soft-RoCE (rdma_rxe) device rxe0 on eth0, beside siw0. rxe asks the
# crypto API for "crc32" when the link is created, so crc32_generic goes first
# (without it `rdma link add` fails with "No such file or directory"). Idempotent:
# passes at once when rxe0 exists. Two devices on eth0 make rdma_cm's choice for
# 10.0.2.15 depend on the device, so a scenario in a shared boot that adds rxe0
# removes it again (lab_rxe_down) before the next scenario runs.
lab_rxe_up() {
  rdma link show rxe0/1 >/dev/null 2>&1 && return 0
  modprobe crc32_generic && modprobe rdma_rxe && modprobe ib_uverbs || return 1
  rdma link add rxe0 type rxe netdev eth0 || return 1
  rdma link show rxe0/1
}

# lab_rxe_down: remove rxe0 (fails if it is still there afterwards).
lab_rxe_down() {
  rdma link show rxe0/1 >/dev/null 2>&1 || return 0
  rdma link delete rxe0 || return 1
  ! rdma link show rxe0/1 >/dev/null 2>&1
}

# lab_knfsd_up: knfsd exporting a tmpfs /export, with the RDMA listener on
# port ${LAB_NFSD_RDMA_PORT:-20049}. MOUNT is served over TCP by rpc.mountd.
# Once per boot, like lab_rdma_up.
lab_knfsd_up() {
  if [ -e /run/lab-knfsd-up ]; then
    [ "$(cat /run/lab-knfsd-up)" = "${LAB_NFSD_RDMA_PORT:-20049}" ] && lab_log "knfsd already up in this boot" && return 0
    lab_log "knfsd is up with RDMA port $(cat /run/lab-knfsd-up) in this boot, not ${LAB_NFSD_RDMA_PORT:-20049}"
    return 1
  fi
  mkdir -p /export /run/rpcbind /var/lib/nfs/rpc_pipefs || return 1
  mount -t tmpfs -o size=256m tmpfs /export || return 1
  echo "hello from guest knfsd" >/export/hello.txt
  mount -t nfsd nfsd /proc/fs/nfsd || return 1
  rpcbind -w || return 1
  echo '/export *(rw,no_root_squash,insecure,fsid=1,no_subtree_check,sync)' >/etc/exports
  exportfs -ra || return 1
  rpc.mountd -p 20048 || return 1
  # v4 grace and lease default to 90 s; shorten them or v4 opens stall.
  echo 10 >/proc/fs/nfsd/nfsv4leasetime
  echo 10 >/proc/fs/nfsd/nfsv4gracetime
  rpc.nfsd 8 || return 1 # Debian's nfsd has no v2: do not pass -N 2
  echo "rdma ${LAB_NFSD_RDMA_PORT:-20049}" >/proc/fs/nfsd/portlist || return 1
  lab_log "portlist: $(tr '\n' ' ' </proc/fs/nfsd/portlist)"
  grep -q "rdma ${LAB_NFSD_RDMA_PORT:-20049}" /proc/fs/nfsd/portlist || return 1
  # On an iWARP device (siw) the RDMA listener is a TCP socket; on RoCE there is none.
  if rdma link show | grep -q '^link siw'; then
    lab_wait_listen "${LAB_NFSD_RDMA_PORT:-20049}" 10 || return 1
  fi
  echo "${LAB_NFSD_RDMA_PORT:-20049}" >/run/lab-knfsd-up
}

# lab_statd_up [PORT]: rpcbind and rpc.statd in the guest, the client side of NFSv3
# locking: mount.nfs refuses a mount without `nolock` unless statd answers on
# the local rpcbind, and the kernel's lockd registers there. The initramfs has
# rpcbind but no rpc.statd: the scenario ships the host's
# (GuestScript::binary("rpc.statd", "/usr/sbin/rpc.statd")). With PORT, statd
# listens there (a port the host forwards). Once per boot: a statd already
# answering (started by another scenario of the boot) is kept.
lab_statd_up() {
  local i=0
  mkdir -p /run/rpcbind /var/lib/nfs/sm /var/lib/nfs/sm.bak || return 1
  rpcinfo -p 127.0.0.1 >/dev/null 2>&1 || rpcbind -w || return 1
  if rpcinfo -T tcp 127.0.0.1 100024 1 >/dev/null 2>&1; then
    lab_log "statd already up in this boot" && return 0
  fi
  # --no-notify: no SM_NOTIFY to former servers (and no sm-notify binary needed).
  /share/bin/rpc.statd --no-notify ${1:+-p "$1"} || return 1
  until rpcinfo -T tcp 127.0.0.1 100024 1 >/dev/null 2>&1 &&
    rpcinfo -T udp 127.0.0.1 100024 1 >/dev/null 2>&1; do
    [ $i -ge 50 ] && { lab_log "rpc.statd does not answer after 10 s"; rpcinfo -p 127.0.0.1; return 1; }
    sleep 0.2
    i=$((i + 1))
  done
  rpcinfo -p 127.0.0.1
}

# lab_lockd_port PORT: the kernel's lockd on a fixed port (TCP and UDP), set before
# lockd starts (a port the host forwards, for a server's GRANTED callbacks).
lab_lockd_port() {
  modprobe lockd || return 1
  echo "$1" >/proc/sys/fs/nfs/nlm_tcpport || return 1
  echo "$1" >/proc/sys/fs/nfs/nlm_udpport
}

# lab_capture_start IFACE FILE [FILTER...]: tcpdump in the guest (for traffic
# the host cannot see, e.g. guest loopback). FILE is relative to $LAB_RUN_DIR. The
# capture is written to the guest's tmpfs (9p under TCG is too slow for
# tcpdump to keep up) and copied to the share by lab_capture_stop, which
# also runs at exit.
lab_capture_start() {
  local ifc=$1
  LAB_CAPTURE=$2
  shift 2
  tcpdump -Z root -B 65536 -i "$ifc" -s 0 -U -w "/tmp/$LAB_CAPTURE" "$@" 2>/tmp/tcpdump.err &
  LAB_TCPDUMP=$!
  lab_on_exit lab_capture_stop
  # tcpdump prints "listening on" once the socket is open; wait for it so the
  # capture includes the MPA exchange that tshark needs to find iWARP.
  local i=0
  while ! grep -q listening /tmp/tcpdump.err; do
    [ $i -ge 50 ] && { cat /tmp/tcpdump.err; return 1; }
    sleep 0.1
    i=$((i + 1))
  done
}
lab_capture_stop() {
  [ -n "${LAB_TCPDUMP:-}" ] || return 0
  # Let tcpdump drain its buffer: stop once the file has not grown for 1 s
  # (bounded at 20 s).
  local f=/tmp/$LAB_CAPTURE last=-1 size i=0
  while [ $i -lt 40 ]; do
    size=$(stat -c %s "$f" 2>/dev/null || echo 0)
    [ "$size" = "$last" ] && break
    last=$size
    sleep 1
    i=$((i + 1))
  done
  kill -INT "$LAB_TCPDUMP" 2>/dev/null
  wait "$LAB_TCPDUMP" 2>/dev/null
  LAB_TCPDUMP=""
  cat /tmp/tcpdump.err
  record "capture:$LAB_CAPTURE" "$(grep -E 'captured|received|dropped' /tmp/tcpdump.err | tr '\n' ' ')"
  cp "$f" "$LAB_RUN_DIR/$LAB_CAPTURE" && sync
}

# lab_mountstats MOUNTPOINT KEY: the first line of its /proc/self/mountstats
# section that starts with KEY (e.g. "opts:", the mount options in force,
# among them the NFS version the mount negotiated).
lab_mountstats() {
  awk -v mp="$1" -v k="$2" '$1=="device" && $5==mp {f=1; next} $1=="device" {f=0} f && $1==k {print; exit}' \
    /proc/self/mountstats
}

# lab_xprt MOUNTPOINT: the "xprt:" line of /proc/self/mountstats for it.
lab_xprt() { lab_mountstats "$1" xprt:; }

# lab_expect_xprt MOUNTPOINT PROTO: the mount really uses PROTO (e.g. rdma).
lab_expect_xprt() {
  lab_xprt "$1" | grep -q "^[[:space:]]*xprt:[[:space:]]*$2 "
}

# lab_same_md5 FILE FILE...: all files have the same md5; records them.
lab_same_md5() {
  local first="" f s ok=0
  for f in "$@"; do
    s=$(md5sum "$f" | cut -d' ' -f1) || return 1
    record "md5:$f" "$s"
    [ -z "$first" ] && first=$s
    [ "$s" = "$first" ] || ok=1
  done
  return $ok
}

# lab_wait_listen PORT SECS: wait until something listens on TCP PORT (a
# server started in the background, or knfsd's RDMA listener, whose siw
# socket shows in /proc/net/tcp too).
lab_wait_listen() {
  local hex i=0 n=$(($2 * 5))
  hex=$(printf ':%04X' "$1")
  until awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p {f = 1} END {exit !f}' \
    /proc/net/tcp /proc/net/tcp6; do
    [ $i -ge $n ] && { lab_log "nothing listens on port $1 after $2 s"; return 1; }
    sleep 0.2
    i=$((i + 1))
  done
}

# lab_run_binary NAME [ARGS...]: run a host binary the harness copied into
# /share/bin (GuestScript::binary) in the background, output to
# $LAB_RUN_DIR/NAME.log; its pid is in LAB_PID_<NAME>. Stopped at exit.
lab_run_binary() {
  local name=$1
  shift
  "/share/bin/$name" "$@" >"$LAB_RUN_DIR/$name.log" 2>&1 &
  eval "LAB_PID_$(echo "$name" | tr -c 'A-Za-z0-9_\n' _)=$!"
  lab_on_exit "kill $! 2>/dev/null"
}

# lab_serve_runs: the script of a shared boot (GuestConfig::shared_boot). Runs
# the scenario scripts the host queues, one at a time, in order: the host
# writes /share/runs/<name>/{guest.sh,env.sh}, then /share/runs/queue-<n>
# holding <name>. Each runs in its own shell with LAB_RUN_DIR=/share/runs/<name>
# (output to guest.log there); then its dmesg.txt and syslog.txt are saved and
# exit-status written, which tells the host it ended. A scenario's failing step
# ends only that scenario. Returns (and the guest powers off) after
# LAB_IDLE_SECS (default 900) with nothing queued; normally the host ends the
# boot first.
lab_serve_runs() {
  local n=1 i name d rc
  while :; do
    i=0
    while [ ! -e "/share/runs/queue-$n" ]; do
      [ $i -ge $((${LAB_IDLE_SECS:-900} * 5)) ] && { lab_log "nothing queued for ${LAB_IDLE_SECS:-900} s"; return 0; }
      sleep 0.2
      i=$((i + 1))
    done
    name=$(cat "/share/runs/queue-$n")
    d=/share/runs/$name
    lab_log "run $n: $name"
    (
      export LAB_RUN_DIR="$d"
      [ -f "$d/env.sh" ] && . "$d/env.sh"
      cd /share && exec sh "$d/guest.sh"
    ) >"$d/guest.log" 2>&1
    rc=$?
    lab_log "run $n: $name exited rc=$rc"
    dmesg >"$d/dmesg.txt" 2>&1
    cp /tmp/syslog "$d/syslog.txt" 2>/dev/null
    echo $rc >"$d/exit-status.tmp" && mv "$d/exit-status.tmp" "$d/exit-status"
    sync
    n=$((n + 1))
  done
}

# lab_rdma_state DIR: what a stalled NFS/RDMA transfer leaves to read (issue 31):
# the mounts' counters (the client's `xprt: rdma` line), QP and CQ states, the RDMA
# device counters (rxe's hw_counters: retries, NAKs, drops), the TCP sockets under
# siw, the kernel log, the RPC client's tasks and transports (debugfs sunrpc: which
# queue each waiting RPC is on), and the rpcrdma trace if lab_trace_rpcrdma turned it
# on.
lab_rdma_state() {
  local d=$1 c f
  mkdir -p "$d"
  cat /proc/uptime >"$d/uptime.txt"
  cat /proc/self/mountstats >"$d/mountstats.txt" 2>&1
  mount -t debugfs nodev /sys/kernel/debug 2>/dev/null
  for f in /sys/kernel/debug/sunrpc/rpc_clnt/*/* /sys/kernel/debug/sunrpc/rpc_xprt/*/*; do
    [ -f "$f" ] && { echo "### $f"; cat "$f"; }
  done >"$d/debugfs-sunrpc.txt" 2>&1
  for c in "res show qp" "-d res show qp" "res show cq" "res show cm_id" "-d stat show" "link show"; do
    echo "### rdma $c"
    timeout 10 rdma $c 2>&1
  done >"$d/rdma.txt"
  for f in /sys/class/infiniband/*/ports/*/hw_counters/* /sys/class/infiniband/*/ports/*/counters/*; do
    [ -f "$f" ] && echo "$f $(cat "$f")"
  done >"$d/ib-counters.txt" 2>&1
  # /proc/net/dev for the NICs' frame counters: BusyBox's ip has no -s.
  { cat /proc/net/tcp; cat /proc/net/snmp; cat /proc/net/dev; cat /proc/interrupts; } >"$d/net.txt" 2>&1
  dmesg >"$d/dmesg.txt" 2>&1
  [ -f /sys/kernel/tracing/trace ] && tail -n 20000 /sys/kernel/tracing/trace >"$d/rpcrdma-trace.txt" 2>&1
  return 0
}

# lab_stall_watch NAME [PATTERN]: in the background, the first time the kernel logs
# PATTERN (grep's basic regular expression; by default "not responding": an NFS
# client gave up waiting for its server), or the host says the other guest of a pair
# did (/share/stall-peer, written by the host's wire watcher), save what a stall
# leaves to read once: our nfsd's connections ($SPID, if this guest runs it:
# SIGUSR1), lab_rdma_state under /share/stall-NAME, and eth1's counters again 10 s
# later (whether the wire between the guests still moves frames either way).
# docs/stalls.md says why.
lab_stall_watch() {
  local name=$1 pattern=${2:-not responding}
  (
    while sleep 5; do
      if [ -e /share/stall-peer ]; then
        lab_log "stall: the host says the $(cat /share/stall-peer) guest stalled, at $(lab_uptime)"
      else
        dmesg | grep -q "$pattern" || continue
        lab_log "stall: the kernel logged '$pattern' at $(lab_uptime)"
      fi
      [ -n "$SPID" ] && kill -USR1 "$SPID" 2>/dev/null && sleep 2
      lab_rdma_state "/share/stall-$name"
      sleep 10
      { cat /proc/net/dev; cat /proc/interrupts; } >"/share/stall-$name/net-10s-later.txt" 2>&1
      break
    done
  ) &
  lab_on_exit "kill $! 2>/dev/null"
}

# lab_trace_rpcrdma: the kernel's rpcrdma tracepoints (xprtrdma and svcrdma: Sends,
# Receives, credits, Reads, Writes, connects and disconnects) into a ring buffer,
# read by lab_rdma_state.
lab_trace_rpcrdma() {
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
  [ -d /sys/kernel/tracing/events/rpcrdma ] || return 0
  echo 8192 >/sys/kernel/tracing/buffer_size_kb
  echo 1 >/sys/kernel/tracing/events/rpcrdma/enable
  echo 1 >/sys/kernel/tracing/tracing_on
}
