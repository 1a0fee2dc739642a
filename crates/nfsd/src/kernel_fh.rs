//! The kernel's own file handles: `name_to_handle_at(2)` and `open_by_handle_at(2)`,
//! which rustix does not wrap. This is nfsd's one module of hand-written FFI for them
//! (the other `unsafe` block is `creds`' setfsuid/setfsgid).
//!
//! A kernel handle is what knfsd puts in its NFS handles: an opaque, file-system
//! defined name of an inode that survives reboots (ext4 and xfs: inode number and
//! generation, 8 or 12 bytes; tmpfs: 12; btrfs: 20; overlayfs and FUSE more or none).
//! `open_by_handle_at` turns one back into a descriptor in constant time, without any
//! path walk, but needs CAP_DAC_READ_SEARCH (the server running as root); without it
//! the call fails with EPERM and [`crate::vfs`] falls back to finding the inode by
//! searching the export. `name_to_handle_at` needs no privilege.
//!
//! Invariants the `unsafe` blocks rely on:
//! - `Buf` has the layout of `struct file_handle` followed by `MAX_HANDLE_SZ` bytes
//!   of `f_handle` (`repr(C)`, the two `int`-sized fields first), so the kernel never
//!   writes past it: `handle_bytes` is set to the room there is before each call, and
//!   the kernel fails with EOVERFLOW rather than write more.
//! - The kernel's `handle_bytes` is checked against that room before any byte of
//!   `f_handle` is read.
//! - The descriptors passed are borrowed for the call only; a descriptor the kernel
//!   returns is owned by exactly one `OwnedFd`.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use rustix::fs::OFlags;

/// Largest kernel handle (Linux `MAX_HANDLE_SZ`).
const MAX_HANDLE_SZ: usize = 128;

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct Buf {
    handle_bytes: libc::c_uint,
    handle_type: libc::c_int,
    f_handle: [u8; MAX_HANDLE_SZ],
}

impl Buf {
    fn empty() -> Buf {
        Buf {
            handle_bytes: MAX_HANDLE_SZ as libc::c_uint,
            handle_type: 0,
            f_handle: [0; MAX_HANDLE_SZ],
        }
    }
}

/// A kernel file handle as `name_to_handle_at` returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelHandle {
    /// The file system's handle type (`FILEID_*`).
    pub handle_type: i32,
    /// The opaque handle, at most 128 bytes.
    pub bytes: Vec<u8>,
}

/// The kernel handle of the object `fd` is open on (any descriptor, O_PATH ones
/// included), and the id of the mount it was reached through.
///
/// Errors: EOPNOTSUPP where the file system cannot make handles (procfs, some FUSE).
pub fn name_to_handle(fd: impl AsFd) -> std::io::Result<(KernelHandle, i32)> {
    handle_at(fd, c"", libc::AT_EMPTY_PATH)
}

/// The kernel handle of entry `name` (one path component) of directory `dir`, not
/// following it if it is a symbolic link, and the id of the mount it was reached
/// through (another mount's when `name` is a mount point). One system call, without
/// opening the entry.
pub fn name_to_handle_in(dir: impl AsFd, name: &CStr) -> std::io::Result<(KernelHandle, i32)> {
    handle_at(dir, name, 0)
}

fn handle_at(
    dir: impl AsFd,
    path: &CStr,
    flags: libc::c_int,
) -> std::io::Result<(KernelHandle, i32)> {
    let mut buf = Buf::empty();
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `buf` is a `struct file_handle` with `handle_bytes` bytes of room after
    // it (module invariants); `path` is a NUL-terminated string (with AT_EMPTY_PATH
    // the empty one names `dir` itself); `mount_id` is a valid int to write.
    let rc = unsafe {
        libc::name_to_handle_at(
            dir.as_fd().as_raw_fd(),
            path.as_ptr(),
            (&mut buf as *mut Buf).cast::<libc::file_handle>(),
            &mut mount_id,
            flags,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let len = buf.handle_bytes as usize;
    if len > MAX_HANDLE_SZ {
        return Err(std::io::Error::from_raw_os_error(libc::EOVERFLOW));
    }
    Ok((
        KernelHandle {
            handle_type: buf.handle_type,
            bytes: buf.f_handle[..len].to_vec(),
        },
        mount_id,
    ))
}

/// Opens the object `handle` names on the file system `mount_fd` is open on
/// (`mount_fd` must not be an O_PATH descriptor: the kernel refuses those with
/// EBADF). `flags` as for open(2); O_PATH opens any type, symbolic links included.
///
/// Errors: ESTALE when the object no longer exists (the handle's generation no longer
/// matches), EPERM without CAP_DAC_READ_SEARCH, EINVAL for a handle the file system
/// cannot parse.
pub fn open_by_handle(
    mount_fd: impl AsFd,
    handle: &KernelHandle,
    flags: OFlags,
) -> std::io::Result<OwnedFd> {
    if handle.bytes.len() > MAX_HANDLE_SZ {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut buf = Buf::empty();
    buf.handle_bytes = handle.bytes.len() as libc::c_uint;
    buf.handle_type = handle.handle_type;
    buf.f_handle[..handle.bytes.len()].copy_from_slice(&handle.bytes);
    // SAFETY: `buf` is a valid `struct file_handle` whose `handle_bytes` bytes follow
    // it (module invariants); the kernel only reads it.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount_fd.as_fd().as_raw_fd(),
            (&mut buf as *mut Buf).cast::<libc::file_handle>(),
            (flags | OFlags::CLOEXEC).bits() as libc::c_int,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_names_the_same_inode_again() {
        let dir = std::env::temp_dir().join(format!("nfsd-kfh-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, b"x").unwrap();
        let fd = rustix::fs::open(
            &file,
            OFlags::PATH | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let (h, mnt) = name_to_handle(&fd).expect("the temp directory's file system makes handles");
        assert!(!h.bytes.is_empty() && h.bytes.len() <= MAX_HANDLE_SZ);
        // Same object, same handle and mount.
        let (again, mnt2) = name_to_handle(&fd).unwrap();
        assert_eq!((&h, mnt), (&again, mnt2));
        let mount_fd = rustix::fs::open(
            &dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        match open_by_handle(&mount_fd, &h, OFlags::PATH) {
            Ok(opened) => {
                let a = rustix::fs::fstat(&fd).unwrap();
                let b = rustix::fs::fstat(&opened).unwrap();
                assert_eq!((a.st_dev, a.st_ino), (b.st_dev, b.st_ino));
            }
            // Not root: the kernel says so, and nfsd falls back to searching.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}"),
        }
        // Removed, and no descriptor keeps the inode alive: the handle is stale.
        drop(fd);
        std::fs::remove_file(&file).unwrap();
        if let Err(e) = open_by_handle(&mount_fd, &h, OFlags::PATH) {
            assert!(
                matches!(e.raw_os_error(), Some(libc::ESTALE) | Some(libc::EPERM)),
                "{e}"
            );
        } else {
            panic!("a removed file's handle opened");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
