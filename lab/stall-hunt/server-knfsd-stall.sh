#!/bin/sh
# server guest, control: Linux knfsd on 192.168.77.1 exporting a tmpfs, RDMA listener on 20049,
# svcrdma/sunrpc tracing, dumps on host-relayed requests (/share/dumpreq.N)
. /share/common.sh
. /share/diag.sh
PEER=192.168.77.2
net_up 192.168.77.1; rdma_up $(cat /share/rdma.kind 2>/dev/null || echo siw)
[ -f /share/stress.sh ] && . /share/stress.sh
trace_setup server
mkdir -p /srv/export /run/rpcbind /var/lib/nfs/rpc_pipefs /var/lib/nfs/v4recovery && mount -t tmpfs -o size=900m tmpfs /srv/export
modprobe nfsd; mount -t nfsd nfsd /proc/fs/nfsd
rpcbind -w
echo '/srv/export *(rw,no_root_squash,insecure,fsid=1,no_subtree_check,sync)' > /etc/exports
exportfs -ra; rpc.mountd -p 20048
echo 10 > /proc/fs/nfsd/nfsv4leasetime; echo 10 > /proc/fs/nfsd/nfsv4gracetime
rpc.nfsd 8 && echo "rdma 20049" > /proc/fs/nfsd/portlist && cat /proc/fs/nfsd/portlist
i=0; n=1
until [ -f /share/stop ]; do
  if [ -f /share/dumpreq.$n ]; then dump_state /share/results/dump$n; n=$((n+1)); fi
  sleep 1; i=$((i+1)); [ $i -gt 1400 ] && break
done
dump_state /share/results/end-server >/dev/null
echo "server done"
