//! `nlm-locktest`: fcntl record-lock tests run in the lab guest on a kernel NFS mount
//! of our server, so that every lock goes through the kernel's NLM client to our NLM.
//!
//! `suite FILE` runs thirteen parent/child tests that mirror the intent of
//! Connectathon's lock tests (cthon04 `tlocklfs` tests 1-13: regions of an unlocked
//! file, whole-file and byte locks seen by another process, the largest offset,
//! blocking lock granted when the holder unlocks, rewrite, read and write locks,
//! splitting by a partial unlock, close and a killed process releasing locks, lock
//! upgrade). It is written for this lab (cthon04 itself is not available here); a
//! parent process sets locks, a forked child (another lock owner) checks what it can
//! and cannot lock. Output: one `PASS`/`FAIL` line per test; exit 1 if any failed.
//!
//! Single operations for the two-client scenario:
//! - `hold FILE START LEN r|w STOPFILE`: F_SETLKW, print `held`, keep it until
//!   STOPFILE exists;
//! - `try FILE START LEN r|w`: F_SETLK, print `granted` (exit 0) or `denied` (exit 1);
//! - `getlk FILE START LEN r|w`: F_GETLK, print `unlocked` or `locked TYPE START LEN`;
//! - `wait FILE START LEN r|w SECS`: F_SETLKW bounded by SECS (alarm), print the
//!   seconds it took; then hold it until `STOPFILE`-less exit (releases at exit).
//!
//! LEN 0 means "to the end of the file", as in fcntl.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::time::Instant;

const EOF: i64 = 0;

fn open(path: &str) -> i32 {
    let c = CString::new(path).expect("path");
    // SAFETY: a valid NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o666) };
    assert!(fd >= 0, "open {path}: {}", std::io::Error::last_os_error());
    fd
}

fn flock(kind: i32, start: i64, len: i64) -> libc::flock {
    // SAFETY: flock is plain data.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = start;
    fl.l_len = len;
    fl
}

/// F_SETLK / F_SETLKW: Ok(true) granted, Ok(false) denied (EAGAIN / EACCES).
fn setlk(fd: i32, cmd: i32, kind: i32, start: i64, len: i64) -> Result<bool, std::io::Error> {
    let mut fl = flock(kind, start, len);
    // SAFETY: fd is open; fl is a valid flock.
    let r = unsafe { libc::fcntl(fd, cmd, &mut fl) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

/// F_GETLK: None if (start, len) could be locked with `kind`, else the lock in the way.
fn getlk(fd: i32, kind: i32, start: i64, len: i64) -> Option<(i32, i64, i64)> {
    let mut fl = flock(kind, start, len);
    // SAFETY: as above.
    let r = unsafe { libc::fcntl(fd, libc::F_GETLK, &mut fl) };
    assert!(r == 0, "F_GETLK: {}", std::io::Error::last_os_error());
    (fl.l_type != libc::F_UNLCK as i16).then_some((fl.l_type as i32, fl.l_start, fl.l_len))
}

const W: i32 = libc::F_WRLCK;
const R: i32 = libc::F_RDLCK;
const U: i32 = libc::F_UNLCK;

fn lock(fd: i32, kind: i32, start: i64, len: i64) {
    let ok = setlk(fd, libc::F_SETLK, kind, start, len).expect("F_SETLK");
    assert!(ok, "parent could not lock {start}+{len} ({kind})");
}

/// Runs `f` in a child process (another lock owner); returns its failures (exit code).
fn child(f: impl FnOnce() -> u32) -> u32 {
    // SAFETY: fork in a single-threaded program.
    match unsafe { libc::fork() } {
        0 => {
            let n = f();
            // SAFETY: leave the child at once, without the parent's atexit handlers.
            unsafe { libc::_exit(n.min(100) as i32) }
        }
        pid if pid > 0 => {
            let mut status = 0;
            // SAFETY: our child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status) as u32
            } else {
                1
            }
        }
        _ => panic!("fork: {}", std::io::Error::last_os_error()),
    }
}

/// In a child: expect F_SETLK of (kind, start, len) to be `granted` or denied; a
/// granted lock is released again.
fn expect(fd: i32, kind: i32, start: i64, len: i64, granted: bool) -> u32 {
    match setlk(fd, libc::F_SETLK, kind, start, len) {
        Ok(g) if g == granted => {
            if g {
                let _ = setlk(fd, libc::F_SETLK, U, start, len);
            }
            0
        }
        Ok(g) => {
            println!(
                "  child: F_SETLK {} {start}+{len}: {} (expected {})",
                if kind == W { "write" } else { "read" },
                if g { "granted" } else { "denied" },
                if granted { "granted" } else { "denied" }
            );
            if g {
                let _ = setlk(fd, libc::F_SETLK, U, start, len);
            }
            1
        }
        Err(e) => {
            println!("  child: F_SETLK {start}+{len}: {e}");
            1
        }
    }
}

fn expect_getlk(fd: i32, kind: i32, start: i64, len: i64, want: Option<(i32, i64, i64)>) -> u32 {
    let got = getlk(fd, kind, start, len);
    if got == want {
        0
    } else {
        println!("  child: F_GETLK {start}+{len}: {got:?}, expected {want:?}");
        1
    }
}

fn unlock_all(fd: i32) {
    let _ = setlk(fd, libc::F_SETLK, U, 0, EOF);
}

fn pipe() -> (i32, i32) {
    let mut p = [0i32; 2];
    // SAFETY: p has room for two descriptors.
    assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
    (p[0], p[1])
}

fn signal_pipe(w: i32) {
    // SAFETY: w is a pipe's write end.
    unsafe { libc::write(w, b"x".as_ptr().cast(), 1) };
}

fn wait_pipe(r: i32) {
    let mut b = [0u8; 1];
    // SAFETY: r is a pipe's read end.
    unsafe { libc::read(r, b.as_mut_ptr().cast(), 1) };
}

/// The largest offset tested: 2^62 (a large-file offset, below Linux's OFFSET_MAX).
const BIG: i64 = 1 << 62;

fn suite(path: &str) -> bool {
    let fd = open(path);
    let mut all_ok = true;
    let mut run = |n: u32, what: &str, f: &mut dyn FnMut() -> u32| {
        let t = Instant::now();
        let failures = f();
        unlock_all(fd);
        println!(
            "{} test {n}: {what} ({:.2} s)",
            if failures == 0 { "PASS" } else { "FAIL" },
            t.elapsed().as_secs_f64()
        );
        all_ok &= failures == 0;
    };
    run(1, "regions of an unlocked file", &mut || {
        child(|| {
            expect(fd, W, 0, EOF, true)
                + expect(fd, W, 0, 1, true)
                + expect(fd, W, BIG, 1, true)
                + expect_getlk(fd, W, 0, EOF, None)
        })
    });
    run(
        2,
        "whole-file write lock is seen by another process",
        &mut || {
            lock(fd, W, 0, EOF);
            child(|| {
                expect(fd, W, 0, 1, false)
                    + expect(fd, R, 1, 1, false)
                    + expect(fd, W, 100_000, 1, false)
                    + expect(fd, W, 0, EOF, false)
                    + expect(fd, R, BIG, 1, false)
                    + expect_getlk(fd, W, 10, 1, Some((W, 0, 0)))
            })
        },
    );
    run(3, "lock of the first byte", &mut || {
        lock(fd, W, 0, 1);
        child(|| {
            expect(fd, W, 0, 1, false)
                + expect(fd, W, 1, 1, true)
                + expect(fd, W, 0, EOF, false)
                + expect(fd, W, 1, EOF, true)
        })
    });
    run(4, "lock of the second byte", &mut || {
        lock(fd, W, 1, 1);
        child(|| {
            expect(fd, W, 0, 1, true)
                + expect(fd, W, 1, 1, false)
                + expect(fd, W, 0, 2, false)
                + expect(fd, W, 2, EOF, true)
        })
    });
    run(5, "lock of the first two bytes", &mut || {
        lock(fd, W, 0, 2);
        child(|| {
            expect(fd, W, 0, 1, false) + expect(fd, W, 1, 1, false) + expect(fd, W, 2, 1, true)
        })
    });
    run(
        6,
        "lock at a large offset (2^62) and to the end",
        &mut || {
            lock(fd, W, BIG, EOF);
            child(|| {
                expect(fd, W, BIG, 1, false)
                    + expect(fd, W, BIG + 4096, 1, false)
                    + expect(fd, W, BIG - 1, 1, true)
                    + expect(fd, W, 0, EOF, false)
                    + expect(fd, W, 0, 1, true)
            })
        },
    );
    run(
        7,
        "blocking lock is granted when the holder unlocks",
        &mut || {
            lock(fd, W, 0, EOF);
            let (r, w) = pipe();
            // SAFETY: fork in a single-threaded program.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                signal_pipe(w);
                let t = Instant::now();
                // SAFETY: bounded wait: SIGALRM interrupts F_SETLKW after 25 s.
                unsafe { libc::alarm(25) };
                let ok = setlk(fd, libc::F_SETLKW, W, 0, 1);
                let secs = t.elapsed().as_secs_f64();
                println!("  child: F_SETLKW waited {secs:.2} s: {ok:?}");
                // Granted by the server's GRANTED callback, not the client's 30 s poll.
                let code = if matches!(ok, Ok(true)) && secs < 20.0 {
                    0
                } else {
                    1
                };
                // SAFETY: leave the child.
                unsafe { libc::_exit(code) }
            }
            wait_pipe(r);
            std::thread::sleep(std::time::Duration::from_secs(2));
            let _ = setlk(fd, libc::F_SETLK, U, 0, EOF);
            let mut status = 0;
            // SAFETY: our child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            u32::from(!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0))
        },
    );
    run(8, "rewrite of a lock, then downgrade to read", &mut || {
        lock(fd, W, 0, 10);
        lock(fd, W, 0, 10);
        let mut f = child(|| expect(fd, R, 5, 1, false));
        lock(fd, R, 0, 10);
        f += child(|| expect(fd, R, 0, 10, true) + expect(fd, W, 5, 1, false));
        f
    });
    run(9, "read locks are shared, write locks are not", &mut || {
        lock(fd, R, 0, 10);
        child(|| {
            expect(fd, R, 0, 10, true) + expect(fd, W, 5, 1, false) + expect(fd, W, 10, 1, true)
        })
    });
    run(10, "a partial unlock splits a locked region", &mut || {
        lock(fd, W, 0, 3);
        lock(fd, U, 1, 1);
        child(|| {
            expect(fd, W, 0, 1, false) + expect(fd, W, 1, 1, true) + expect(fd, W, 2, 1, false)
        })
    });
    run(11, "close() releases the process's locks", &mut || {
        let fd2 = open(path);
        lock(fd2, W, 0, EOF);
        let mut f = child(|| expect(fd, W, 0, 1, false));
        // SAFETY: our descriptor.
        unsafe { libc::close(fd2) };
        f += child(|| expect(fd, W, 0, EOF, true));
        f
    });
    run(12, "a killed process's locks are released", &mut || {
        let (r, w) = pipe();
        // SAFETY: fork in a single-threaded program.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = setlk(fd, libc::F_SETLK, W, 0, EOF);
            signal_pipe(w);
            if !matches!(ok, Ok(true)) {
                // SAFETY: leave the child.
                unsafe { libc::_exit(1) }
            }
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
        wait_pipe(r);
        let mut f = u32::from(setlk(fd, libc::F_SETLK, W, 0, 1).ok() != Some(false));
        // SAFETY: our child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        let t = Instant::now();
        let mut got = false;
        while t.elapsed().as_secs() < 10 && !got {
            got = setlk(fd, libc::F_SETLK, W, 0, EOF).ok() == Some(true);
            if !got {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
        f += u32::from(!got);
        f
    });
    run(
        13,
        "lock upgrade waits for another reader to go",
        &mut || {
            lock(fd, R, 0, 10);
            let (r, w) = pipe();
            let (r2, w2) = pipe();
            // SAFETY: fork in a single-threaded program.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let ok = setlk(fd, libc::F_SETLK, R, 0, 10);
                signal_pipe(w);
                wait_pipe(r2);
                // SAFETY: leave the child (its lock goes with it).
                unsafe { libc::_exit(i32::from(!matches!(ok, Ok(true)))) }
            }
            wait_pipe(r);
            let mut f = u32::from(setlk(fd, libc::F_SETLK, W, 0, 10).ok() != Some(false));
            signal_pipe(w2);
            let mut status = 0;
            // SAFETY: our child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            f += u32::from(!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0));
            let t = Instant::now();
            let mut got = false;
            while t.elapsed().as_secs() < 10 && !got {
                got = setlk(fd, libc::F_SETLK, W, 0, 10).ok() == Some(true);
                if !got {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            }
            f += u32::from(!got);
            f += child(|| expect(fd, R, 0, 1, false));
            f
        },
    );
    all_ok
}

fn kind(s: &str) -> i32 {
    match s {
        "r" => R,
        "w" => W,
        _ => panic!("lock type r or w, not {s}"),
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let num = |i: usize| -> i64 { a[i].parse().expect("a number") };
    let code = match a.get(1).map(String::as_str) {
        Some("suite") if a.len() == 3 => i32::from(!suite(&a[2])),
        Some("hold") if a.len() == 7 => {
            let fd = open(&a[2]);
            match setlk(fd, libc::F_SETLKW, kind(&a[5]), num(3), num(4)) {
                Ok(true) => {
                    println!("held");
                    while !std::path::Path::new(&a[6]).exists() {
                        std::thread::sleep(std::time::Duration::from_millis(200));
                    }
                    0
                }
                other => {
                    println!("hold failed: {other:?}");
                    2
                }
            }
        }
        Some("try") if a.len() == 6 => {
            let fd = open(&a[2]);
            match setlk(fd, libc::F_SETLK, kind(&a[5]), num(3), num(4)) {
                Ok(true) => {
                    println!("granted");
                    0
                }
                Ok(false) => {
                    println!("denied");
                    1
                }
                Err(e) => {
                    println!("error {e}");
                    2
                }
            }
        }
        Some("getlk") if a.len() == 6 => {
            let fd = open(&a[2]);
            match getlk(fd, kind(&a[5]), num(3), num(4)) {
                None => println!("unlocked"),
                Some((t, s, l)) => {
                    println!("locked {} {s} {l}", if t == W { "w" } else { "r" })
                }
            }
            0
        }
        Some("wait") if a.len() == 7 => {
            let fd = open(&a[2]);
            let t = Instant::now();
            // SAFETY: bounded wait.
            unsafe { libc::alarm(num(6) as u32) };
            match setlk(fd, libc::F_SETLKW, kind(&a[5]), num(3), num(4)) {
                Ok(true) => {
                    println!("granted after {:.2} s", t.elapsed().as_secs_f64());
                    0
                }
                other => {
                    println!(
                        "not granted after {:.2} s: {other:?}",
                        t.elapsed().as_secs_f64()
                    );
                    1
                }
            }
        }
        _ => {
            eprintln!(
                "usage: nlm-locktest suite FILE | hold FILE START LEN r|w STOPFILE | \
                 try FILE START LEN r|w | getlk FILE START LEN r|w | wait FILE START LEN r|w SECS"
            );
            2
        }
    };
    std::process::exit(code);
}
