#!/bin/bash
# Stall hunt loop (the issue 31 reproduction, with diagnostics): one line per run.
# usage: repro.sh [RUNS=10]   (as root; lab/setup must have run in LABMAIN)
# env: SERVER=ours|knfsd, FABRIC=siw|rxe, NFSD_ARGS, NFSD (default target/release/nfsd, built),
#      LABMAIN (the checkout, default this one), OUT (default lab/out/stall-hunt),
#      QTIMEOUT (default 600), STALL_S (default 40),
#      STRESS='sysctl -w ...' (run in both guests first),
#      PIN=0 (taskset both qemus onto host CPU 0: the guests starve each other, as on a loaded host),
#      FREEZE=write2:2:70 (SIGSTOP the server qemu 2 s after the client starts phase write2, for 70 s:
#        longer than xprtrdma's 60 s RPC timeout, so the client disconnects and reconnects),
#      PAR=4 (4 concurrent dd writers, then 4 concurrent readers, per phase), MOUNT_OPTS (client mount options),
#      MIB (MiB per file), HOGS=2 (2 busy loops at nice 0 on the host while the series runs),
#      STOP_AT=EPOCH (start no run after then),
#      TRACE=0|1|2 (kernel tracing in both guests: none, light, full; default 2), HOSTCAP=1 (qemu filter-dump of eth1 in both qemus), KEEPCAP=0 (drop pcaps of clean runs)
set -u
RUNS=${1:-10}; HERE=$(cd "$(dirname "$0")" && pwd)
SERVER=${SERVER:-ours}; FABRIC=${FABRIC:-siw}
LABMAIN=${LABMAIN:-$(cd "$HERE/../.." && pwd)}; OUT=${OUT:-$LABMAIN/lab/out/stall-hunt}
if [ -z "${NFSD:-}" ]; then
  (cd "$LABMAIN" && cargo build --release --quiet -p nfsd) || exit 1
  NFSD=$LABMAIN/target/release/nfsd
fi
mkdir -p $OUT
# ss (iproute2) and its libraries, for the guests' socket dumps (diag.sh SS)
if [ ! -x $OUT/sslib/ss ]; then
  mkdir -p $OUT/sslib; cp -L "$(command -v ss)" $OUT/sslib/
  ldd "$(command -v ss)" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | xargs -r -I{} cp -L {} $OUT/sslib/
fi
export SSLIB=$OUT/sslib
# HOGS=N: N busy loops at nice 0 on the host for the whole series (a shared host under load), killed at exit
HOGPIDS=
if [ -n "${HOGS:-}" ] && [ "$HOGS" -gt 0 ]; then
  for h in $(seq 1 $HOGS); do sh -c 'while :; do :; done' & HOGPIDS="$HOGPIDS $!"; done
  trap 'kill $HOGPIDS 2>/dev/null' EXIT
  echo "host hogs:$HOGPIDS"
fi
for r in $(seq 1 $RUNS); do
  # STOP_AT=EPOCH: start no run after this time (a series that must leave the lab free by a deadline)
  if [ -n "${STOP_AT:-}" ] && [ $(date +%s) -ge $STOP_AT ]; then echo "STOP_AT reached, $((r-1)) runs done"; break; fi
  W=$OUT/$(date +%H%M%S)-$SERVER-$FABRIC; mkdir -p $W/s/share/bin $W/c/share
  cp $NFSD $W/s/share/bin/nfsd
  echo $FABRIC > $W/s/share/rdma.kind; echo $FABRIC > $W/c/share/rdma.kind
  echo "${NFSD_ARGS:-}" > $W/s/share/nfsd.args
  echo ${STALL_S:-40} > $W/c/share/stall.s
  # PAR: concurrent dd writers then readers per phase; MOUNT_OPTS: the client's mount options; MIB: MiB per file
  [ -n "${PAR:-}" ] && echo $PAR > $W/c/share/par
  [ -n "${MOUNT_OPTS:-}" ] && echo "$MOUNT_OPTS" > $W/c/share/mount.opts
  [ -n "${MIB:-}" ] && echo $MIB > $W/c/share/dd.mib
  echo ${TRACE:-2} > $W/c/share/trace.level; echo ${TRACE:-2} > $W/s/share/trace.level
  # STRESS: a shell snippet run in both guests before the test (e.g. small TCP buffers)
  [ -n "${STRESS:-}" ] && { echo "$STRESS" > $W/s/share/stress.sh; echo "$STRESS" > $W/c/share/stress.sh; }
  T0=$(date +%s)
  QTIMEOUT=${QTIMEOUT:-600} $HERE/run.sh "$LABMAIN" $W $HERE/server-${SERVER}-stall.sh $HERE/client-stall.sh > $W/run.log 2>&1
  m=$(grep -c '^DD .* match$' $W/c/share/guest.log); nr=$(grep -c 'not responding' $W/c/share/kmsg.txt)
  res=$(grep -o 'RESULT [A-Z]*' $W/c/share/guest.log || echo "RESULT none")
  st=$(grep '^STALL' $W/c/share/guest.log)
  if [ "${KEEPCAP:-0}" = 0 ] && [ "$res" = "RESULT OK" ]; then rm -f $W/[sc]/eth1.pcap; fi
  echo "run $r ($SERVER, $FABRIC${NFSD_ARGS:+, $NFSD_ARGS}${PAR:+, PAR=$PAR}${MOUNT_OPTS:+, $MOUNT_OPTS}${PIN:+, PIN=$PIN}${HOGS:+, HOGS=$HOGS}) $(date +%T) $(( $(date +%s) - T0 ))s: $res, $m/3 intact, $nr 'not responding'; $st; $W"
done
