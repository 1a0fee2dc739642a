#!/bin/bash
# Two lab guests joined by a qemu socket network on eth1 (192.168.77.1 server, .2 client),
# with host-side captures of eth1 on both qemus (filter-dump, snaplen CAPLEN) and a relay of
# the client's dump requests to the server guest. Takes the machine's lab guest lock.
# usage: run.sh LABCHECKOUT WORKDIR SERVER_SCRIPT CLIENT_SCRIPT
set -u
MAIN=$1; W=$2; SS=$3; CS=$4; HERE=$(cd "$(dirname "$0")" && pwd)
. "$MAIN/lab/cache/lab.env" || exit 2
mkdir -p $W/s/share/bin $W/c/share/bin $W/s/share/results $W/c/share/results
cp "$SS" $W/s/share/guest.sh; cp "$CS" $W/c/share/guest.sh
for g in s c; do
  cp "$HERE/common.sh" "$HERE/diag.sh" $W/$g/share/
  cp -r "${SSLIB:-$HERE/sslib}" $W/$g/share/sslib
done
K=$(dirname "$LAB_KERNEL_IMAGE")/kernel/$LAB_KV/lib/modules/$LAB_KV/kernel
for g in s c; do cp $K/crypto/crc32_generic.ko $W/$g/share/ 2>/dev/null; done
for f in /usr/sbin/rpc.statd /usr/sbin/sm-notify; do cp $f $W/c/share/bin/; done
cp -L /lib/x86_64-linux-gnu/libcap.so.2 $W/c/share/bin/ 2>/dev/null
exec 9>/tmp/rpcrdma-lab-guest.lock
flock -n 9 || { echo "waiting for the lab guest lock"; flock 9; }
PORT=$((41000 + RANDOM % 1000))
CAP=${CAPLEN:-200}
boot() { # NAME NETDEV-OPTS MAC-SUFFIX MEM EXTRA...
  local n=$1 nd=$2 mac=$3 mem=$4; shift 4
  local fd=()
  [ "${HOSTCAP:-1}" = 1 ] && fd=(-object filter-dump,id=fd1,netdev=n1,file=$W/$n/eth1.pcap,maxlen=$CAP)
  local pin=()
  [ -n "${PIN:-}" ] && pin=(taskset -c $PIN)
  timeout ${QTIMEOUT:-1500} "${pin[@]}" "$LAB_QEMU" -accel tcg -cpu max -m $mem -smp 1 -nodefaults -display none -no-reboot -monitor none \
    -pidfile $W/$n/qemu.pid -serial file:$W/$n/console.log -kernel "$LAB_KERNEL_IMAGE" -initrd "$LAB_INITRD" -append "console=ttyS0 quiet loglevel=4 panic=-1" \
    -netdev user,id=n0 -device virtio-net-pci,netdev=n0 -netdev socket,id=n1,$nd -device virtio-net-pci,netdev=n1,mac=52:54:00:77:00:$mac \
    "${fd[@]}" \
    -virtfs local,path=$W/$n/share,mount_tag=host0,security_model=none,id=host0 "$@" < /dev/null > $W/$n/qemu.log 2>&1
}
relay() { # client's dump requests -> server share; FREEZE=PHASE:DELAY:SECS stops the server qemu
  local frozen=0
  while :; do
    if [ -n "${FREEZE:-}" ] && [ $frozen = 0 ] && [ -f $W/c/share/results/phase.${FREEZE%%:*} ]; then
      frozen=1; IFS=: read -r _ fd fs <<< "$FREEZE"
      ( sleep $fd; q=$(cat $W/s/qemu.pid); echo "FREEZE server qemu $q for $fs s at $(date +%T)"; kill -STOP $q
        sleep $fs; kill -CONT $q; echo "THAW server qemu $q at $(date +%T)" ) &
    fi
    for n in 1 2 3; do
      [ -f $W/c/share/results/dumpreq.$n ] && [ ! -f $W/s/share/dumpreq.$n ] && { touch $W/s/share/dumpreq.$n; echo "relayed dump $n at $(date +%T)"; }
    done
    sleep 1
  done
}
T0=$(date +%s)
boot s listen=127.0.0.1:$PORT 01 1536 & SPID=$!
sleep 1
relay & RPID=$!
JPID=
# JITTER=s|c|sc: SIGSTOP/SIGCONT the server's, client's or both qemus at random (jitter.sh)
if [ -n "${JITTER:-}" ]; then
  jf=(); [[ $JITTER == *s* ]] && jf+=($W/s/qemu.pid); [[ $JITTER == *c* ]] && jf+=($W/c/qemu.pid)
  $HERE/jitter.sh "${jf[@]}" > $W/jitter.log 2>&1 & JPID=$!
fi
boot c connect=127.0.0.1:$PORT 02 2048 -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap,id=hostroot
echo "client guest done after $(( $(date +%s) - T0 )) s"
[ -n "$JPID" ] && kill $JPID
sleep 2; kill $RPID 2>/dev/null
touch $W/s/share/stop
for i in $(seq 1 120); do kill -0 $SPID 2>/dev/null || break; sleep 1; done
kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
echo "both guests done after $(( $(date +%s) - T0 )) s"
