#!/bin/sh
# Scenario: the guest's kernel NFS client mounts a server, writes a file,
# drops its caches, reads the file back (md5 must match) and records the
# mountstats xprt line (proof of the transport actually used).
#
# Parameters (GuestScript::env):
#   LAB_SERVER        server address; default 10.0.2.2, i.e. the host's
#                     127.0.0.1 (a server under test on the host)
#   LAB_LOCAL_KNFSD=1 start the guest's own knfsd and mount that (server
#                     10.0.2.15: NFS/RDMA to 127.0.0.1 fails with EINVAL)
#   LAB_GUEST_SERVER  run this binary from /share/bin (GuestScript::binary)
#                     in the guest with $LAB_GUEST_SERVER_ARGS, wait for it
#                     to listen on LAB_NFS_PORT, and mount it (server
#                     10.0.2.15); its output is /share/<name>.log
#   LAB_PROTO         rdma (default) or tcp
#   LAB_NFS_PORT      default 20049 for rdma, 2049 for tcp
#   LAB_NFS_VERS      default 3
#   LAB_EXPORT        default /export
#   LAB_MOUNT_PORT    NFSv3 only: MOUNT over TCP at this port, no rpcbind
#                     lookup (default 20048, the guest rpc.mountd's port)
#   LAB_CAPTURE_IFACE tcpdump this guest interface into /share/capture.pcap
#                     (lo for guest-internal traffic; host<->guest traffic is
#                     better captured host side: capture_host_side())
#   LAB_DATA_BLOCKS   64 KiB blocks written (default 16 = 1 MiB)
. /share/lib.sh

PROTO=${LAB_PROTO:-rdma}
if [ "$PROTO" = rdma ]; then PORT=${LAB_NFS_PORT:-20049}; else PORT=${LAB_NFS_PORT:-2049}; fi
VERS=${LAB_NFS_VERS:-3}
SERVER=${LAB_SERVER:-10.0.2.2}
OPTS="vers=$VERS,proto=$PROTO,port=$PORT"
[ "$VERS" = 3 ] && OPTS="$OPTS,nolock,mountproto=tcp,mountport=${LAB_MOUNT_PORT:-20048}"

step rdma_up lab_rdma_up
if [ "${LAB_LOCAL_KNFSD:-0}" = 1 ]; then
  SERVER=10.0.2.15
  step knfsd_up lab_knfsd_up
fi
if [ -n "${LAB_GUEST_SERVER:-}" ]; then
  SERVER=10.0.2.15
  # shellcheck disable=SC2086 # the arguments are a word list on purpose
  lab_run_binary "$LAB_GUEST_SERVER" ${LAB_GUEST_SERVER_ARGS:-}
  step guest_server_listens lab_wait_listen "$PORT" 30
fi
if [ -n "${LAB_CAPTURE_IFACE:-}" ]; then
  step capture_start lab_capture_start "$LAB_CAPTURE_IFACE" capture.pcap tcp port "$PORT"
fi
mkdir -p /mnt/a
step mount mount.nfs "$SERVER:${LAB_EXPORT:-/export}" /mnt/a -n -o "$OPTS"
record xprt "$(lab_xprt /mnt/a)"
step "xprt_is_$PROTO" lab_expect_xprt /mnt/a "$PROTO"
step make_data dd if=/dev/urandom of=/tmp/data bs=64k count="${LAB_DATA_BLOCKS:-16}"
step write dd if=/tmp/data of=/mnt/a/data bs=64k conv=fsync
# Drop the client's page cache so the read below goes over the wire (NFS
# READs; over RDMA with Write chunks), not to memory.
step drop_caches sh -c 'sync; echo 3 >/proc/sys/vm/drop_caches'
if [ "${LAB_LOCAL_KNFSD:-0}" = 1 ]; then
  step read_back lab_same_md5 /tmp/data /mnt/a/data /export/data
else
  step read_back lab_same_md5 /tmp/data /mnt/a/data
fi
step umount umount /mnt/a
[ -n "${LAB_CAPTURE_IFACE:-}" ] && step capture_stop lab_capture_stop
exit 0
