#!/bin/sh
# server guest: our nfsd on 192.168.77.1 exporting a tmpfs (NFSD_ARGS from /share/nfsd.args),
# dumping QP/CQ/TCP/process state whenever the host relays a dump request (/share/dumpreq.N)
. /share/common.sh
. /share/diag.sh
PEER=192.168.77.2
net_up 192.168.77.1; rdma_up $(cat /share/rdma.kind 2>/dev/null || echo siw)
[ -f /share/stress.sh ] && . /share/stress.sh
trace_setup server
mkdir -p /srv/export && mount -t tmpfs -o size=900m tmpfs /srv/export
[ -f /share/pre-server.sh ] && . /share/pre-server.sh
RUST_LOG=${RUST_LOG:-info} /share/bin/nfsd --bind 192.168.77.1 --squash none $(cat /share/nfsd.args 2>/dev/null) /srv/export > /share/results/nfsd.log 2>&1 &
NFSD_PID=$!; echo "nfsd pid $NFSD_PID"
i=0; n=1
until [ -f /share/stop ]; do
  if [ -f /share/dumpreq.$n ]; then dump_state /share/results/dump$n; n=$((n+1)); fi
  sleep 1; i=$((i+1)); [ $i -gt 1400 ] && break
done
kill -0 $NFSD_PID 2>/dev/null && echo "nfsd still alive at stop" || echo "nfsd had exited"
kill -USR1 $NFSD_PID; sleep 3
dump_state /share/results/end-server >/dev/null
kill $NFSD_PID; sleep 1; echo "server done"
