//! The locked-memory limit, which registration runs into.
//!
//! Registering memory pins its pages, and the kernel charges pinned pages to the
//! process's `RLIMIT_MEMLOCK`. Debian's default soft limit is 8 MiB (`ulimit -l`
//! 8192), less than one NFS server's Read sinks for a few 1 MiB WRITEs; soft-iWARP
//! (`siw_umem_get`, Linux 6.1) applies the limit even to a process with
//! `CAP_IPC_LOCK`, so root is no exception there. A refused registration shows as
//! `ENOMEM` from `ibv_reg_mr` (found in the lab: the kernel client's first 1 MiB
//! WRITEs to our server over siw0 failed this way).

use std::io;

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Raises the locked-memory limit as far as the process may: unlimited when it may
/// raise hard limits (root, `CAP_SYS_RESOURCE`; RDMA servers are usually run so, as
/// `ulimit -l unlimited`), else the soft limit to the hard one. Returns the limit
/// now in force in bytes (`None`: unlimited). Call it once at startup, before
/// registering memory, and log it.
pub fn raise_locked_memory_limit() -> io::Result<Option<u64>> {
    let lim = getrlimit(Resource::Memlock);
    if lim.current.is_none() {
        return Ok(None);
    }
    let unlimited = Rlimit {
        current: None,
        maximum: None,
    };
    if setrlimit(Resource::Memlock, unlimited).is_ok() {
        return Ok(None);
    }
    if lim.current == lim.maximum {
        return Ok(lim.current);
    }
    let raised = Rlimit {
        current: lim.maximum,
        maximum: lim.maximum,
    };
    setrlimit(Resource::Memlock, raised).map_err(io::Error::from)?;
    Ok(raised.current)
}

/// The soft locked-memory limit in bytes (`None`: unlimited), for error messages.
pub fn locked_memory_limit() -> Option<u64> {
    getrlimit(Resource::Memlock).current
}

/// `err` from a registration, with the locked-memory limit named when the kernel
/// refused to pin the pages (`ENOMEM`), so the operator knows what to raise.
pub(crate) fn explain_registration_error(err: io::Error) -> io::Error {
    if err.raw_os_error() != Some(libc::ENOMEM) {
        return err;
    }
    let limit = match locked_memory_limit() {
        Some(bytes) => format!("{bytes} bytes"),
        None => "unlimited".to_string(),
    };
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        format!(
            "{err}: the kernel refused to pin the memory; the locked-memory limit \
             (RLIMIT_MEMLOCK, `ulimit -l`, systemd LimitMEMLOCK=) is {limit}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enomem_names_the_locked_memory_limit() {
        let e = explain_registration_error(io::Error::from_raw_os_error(libc::ENOMEM));
        assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
        assert!(e.to_string().contains("RLIMIT_MEMLOCK"), "{e}");
        let other = explain_registration_error(io::Error::from_raw_os_error(libc::EINVAL));
        assert_eq!(other.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn raising_leaves_a_limit_at_least_as_high() {
        let before = locked_memory_limit();
        let after = raise_locked_memory_limit().unwrap();
        match (before, after) {
            (Some(b), Some(a)) => assert!(a >= b),
            (None, a) => assert_eq!(a, None),
            (Some(_), None) => {}
        }
        assert_eq!(locked_memory_limit(), after);
    }
}
