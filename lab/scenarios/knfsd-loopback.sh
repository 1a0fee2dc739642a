#!/bin/sh
# Scenario: the guest's kernel NFSv3 client mounts the guest's own knfsd over
# RDMA (siw), writes a file and reads it back with an md5 match. The traffic
# stays inside the guest (10.0.2.15 routes over lo), so it is captured here
# with tcpdump into /share/capture.pcap for tshark on the host.
# (NFS/RDMA to 127.0.0.1 fails with EINVAL: always use 10.0.2.15.)
. /share/lib.sh

step rdma_up lab_rdma_up
step knfsd_up lab_knfsd_up
step capture_start lab_capture_start lo capture.pcap tcp port 20049
mkdir -p /mnt/a
step mount_rdma mount.nfs 10.0.2.15:/export /mnt/a -n -o vers=3,proto=rdma,port=20049,nolock
record xprt "$(lab_xprt /mnt/a)"
step xprt_is_rdma lab_expect_xprt /mnt/a rdma
step make_data dd if=/dev/urandom of=/tmp/data bs=64k count=${LAB_DATA_BLOCKS:-16}
step write dd if=/tmp/data of=/mnt/a/data bs=64k conv=fsync
# Drop the client's page cache so the read below goes over the wire (READs
# with Write chunks), not to memory.
step drop_caches sh -c 'sync; echo 3 >/proc/sys/vm/drop_caches'
step read_back lab_same_md5 /tmp/data /mnt/a/data /export/data
step umount umount /mnt/a
step capture_stop lab_capture_stop
