//! Giving memory back to the system after load (issue 16, docs/hostile-peers.md
//! "Memory").
//!
//! With glibc's default settings a server that served a burst kept its peak RSS: the
//! allocator raises its mmap threshold each time a large block is freed (up to 32
//! MiB), after which the per-connection buffer slabs (`rpcrdma_transport`'s Receive
//! and Send pools, 512 KiB each by default) come from the heap, where `calloc` makes
//! every page resident and freed blocks stay in the process. Measured with
//! `rss_probe`: 34 KiB per idle connection in a first round of 300, 1,077 KiB in the
//! third; 322 MiB kept after they closed.
//!
//! [`configure`] fixes the threshold at [`MMAP_THRESHOLD`] (which turns the dynamic
//! adjustment off): larger blocks are mappings of their own, unmapped when freed and
//! resident only where written. [`trim_when_idle`] returns the free memory left in the
//! heaps (`malloc_trim`) periodically. Both are no-ops where the C library is not
//! glibc.
#![allow(unsafe_code)]

use std::time::Duration;

/// Blocks of this size and more get a mapping of their own: a connection's buffer
/// slabs (128 × 4 KiB) and 1 MiB data buffers.
pub const MMAP_THRESHOLD: usize = 256 * 1024;

/// How often free heap memory is returned.
pub const TRIM_PERIOD: Duration = Duration::from_secs(10);

/// Sets glibc's mmap threshold (see the module docs). Call once, early.
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; it takes no pointers.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
    }
}

/// Returns free heap memory to the system (`malloc_trim(0)`: every arena, free
/// pages in the middle of a heap too). Whether anything was returned.
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers and is thread-safe (it locks each arena).
    unsafe {
        libc::malloc_trim(0) != 0
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// Calls [`trim`] every [`TRIM_PERIOD`], off the runtime's worker threads.
pub async fn trim_when_idle() {
    let mut tick = tokio::time::interval(TRIM_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let _ = tokio::task::spawn_blocking(trim).await;
    }
}
