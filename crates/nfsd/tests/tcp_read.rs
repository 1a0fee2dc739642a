//! READ over TCP as `nfsd` composes it (`Bound` on loopback), where the data leaves
//! the file by `sendfile` behind the reply header, or with `--tcp-read-data copy` from
//! a mapping of the file right after the header (`nfsd::proc::io::read`,
//! `oncrpc::tcp`'s reply writer), each way: our NFSv3 client reads ranges around the edges
//! (nothing, one byte, unaligned counts and offsets, the last byte, at and past the end
//! of the file, a count over the file's size, an empty file) and checks bytes, count
//! and eof against the file; then pipelined 1 MiB READs of a file of 3 MiB + 3 bytes
//! from several tasks at once on one connection, so that replies with file data
//! follow each other (and small replies) on the socket, checked byte for byte; all
//! under a memory budget that a READ over TCP does not charge: its peak stays below
//! one READ's size.

mod common;

use std::time::Duration;

use common::{pattern, TempDir};
use nfsclient::{IoOptions, Mount, TransportKind};
use nfsd::server::{Bound, Config};
use oncrpc::tcp::FileData;

fn config(dir: &TempDir, tcp_read_data: FileData) -> Config {
    Config {
        // Over TCP READ data takes no buffer: only the connections (64 KiB each) and
        // the small Call records are charged, never a READ's 1 MiB.
        max_memory: 8 << 20,
        tcp_read_data,
        ..common::loopback_config(dir.path())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_read_by_sendfile_sends_file_ranges_exactly_with_eof() {
    reads_exactly(FileData::Sendfile).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_read_by_one_copy_sends_file_ranges_exactly_with_eof() {
    reads_exactly(FileData::Copy).await;
}

async fn reads_exactly(tcp_read_data: FileData) {
    let dir = TempDir::new("tcpread");
    let small = pattern(3 * 4096 + 5, 3);
    std::fs::write(dir.path().join("small"), &small).unwrap();
    std::fs::write(dir.path().join("empty"), b"").unwrap();
    let big = pattern(3 * (1 << 20) + 3, 11);
    std::fs::write(dir.path().join("big"), &big).unwrap();

    let bound = Bound::new(&config(&dir, tcp_read_data)).await.unwrap();
    let nfs_port = bound.nfs_addr().unwrap().port();
    let mount_port = bound.mount_addr().unwrap().port();
    let budget = bound.server().memory.clone();
    // The duplicate request cache's bound, reserved at start.
    let reserved = bound.reply_cache_reserved();
    let serving = common::serve(bound);
    let opts = common::mount_options(
        TransportKind::Tcp,
        nfs_port,
        mount_port,
        Duration::from_secs(20),
    );
    let export = dir.path().to_str().unwrap().to_string();
    let mut m = Mount::mount("127.0.0.1", &export, &opts).await.unwrap();

    // (offset, count) around the edges of a 12,293-byte file.
    let size = small.len() as u64;
    let (fh, _) = m.lookup_path("small").await.unwrap();
    let cases: &[(u64, u32)] = &[
        (0, 0),
        (0, 1),
        (1, 3),
        (3, 1),
        (0, 4095),
        (4093, 7),
        (4096, 4096),
        (5, 4099),
        (0, size as u32),
        (0, size as u32 - 1),
        (size - 1, 1),
        (size - 1, 10),
        (size - 5, 5),
        (size - 6, 5),
        (size, 0),
        (size, 1),
        (size + 100, 10),
        (u64::MAX - 3, 4),
        (7, 1 << 20),
    ];
    for &(offset, count) in cases {
        let r = m.nfs().read(&fh, offset, count).await.unwrap();
        let start = offset.min(size) as usize;
        let end = offset.saturating_add(count as u64).min(size) as usize;
        let want = &small[start..end];
        assert_eq!(r.count as usize, want.len(), "count at ({offset}, {count})");
        assert!(r.data.0[..] == want[..], "bytes at ({offset}, {count})");
        assert_eq!(
            r.eof,
            offset.saturating_add(r.count as u64) >= size,
            "eof at ({offset}, {count})"
        );
        let attrs = r.file_attributes.expect("post-op attributes");
        assert_eq!(attrs.size, size, "post-op size at ({offset}, {count})");
    }

    let (empty, _) = m.lookup_path("empty").await.unwrap();
    for (offset, count) in [(0, 0), (0, 10), (5, 1)] {
        let r = m.nfs().read(&empty, offset, count).await.unwrap();
        assert_eq!(
            (r.count, r.eof),
            (0, true),
            "empty file at ({offset}, {count})"
        );
    }

    // Pipelined 1 MiB READs (4 in flight) from three tasks sharing the connection, with
    // GETATTRs in between: whole records only, each reply's bytes where they belong.
    m.set_io_options(IoOptions {
        rsize: 1 << 20,
        wsize: 1 << 20,
        depth: 4,
        ..IoOptions::default()
    });
    let m = std::sync::Arc::new(m);
    let (bigfh, _) = m.lookup_path("big").await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (m, bigfh) = (m.clone(), bigfh.clone());
        tasks.push(tokio::spawn(async move {
            let mut reads = Vec::new();
            for _ in 0..3 {
                reads.push(m.read_all(&bigfh).await.unwrap());
                m.nfs().getattr(&bigfh).await.unwrap();
            }
            reads
        }));
    }
    for t in tasks {
        for got in t.await.unwrap() {
            assert!(got == big, "pipelined 1 MiB READs of a 3 MiB + 3 file");
        }
    }
    drop(m);
    assert!(
        budget.peak() > reserved && budget.peak() - reserved < 1 << 20,
        "connections and small Calls charged, no READ data: peak {} ({reserved} reserved)",
        budget.peak()
    );

    serving.stop().await;
}
