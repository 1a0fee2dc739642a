//! The service manager's readiness protocol (systemd's `sd_notify`, as the unit's
//! `Type=notify` expects): one datagram of `KEY=VALUE` lines to the Unix socket named
//! by `$NOTIFY_SOCKET` (a path, or an abstract name written with a leading `@`).
//!
//! nfsd sends `READY=1` once every listener is bound and the signal handlers are in
//! place, `RELOADING=1` then `READY=1` around a SIGHUP reload of the exports file, and
//! `STOPPING=1` when it begins to shut down, each with a `STATUS=` line for
//! `systemctl status`. Without `$NOTIFY_SOCKET` (not started by a service manager)
//! nothing is sent. A failed send is logged once and otherwise ignored: the server
//! serves either way.
//!
//! Protocol: sd_notify(3) and systemd.service(5) `Type=notify`.

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Where the service manager listens, from `$NOTIFY_SOCKET`.
fn manager_addr() -> Option<std::io::Result<SocketAddr>> {
    let name = std::env::var_os("NOTIFY_SOCKET")?;
    Some(match name.as_encoded_bytes().strip_prefix(b"@") {
        Some(abs) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(abs)
        }
        None => SocketAddr::from_pathname(std::path::Path::new(&name)),
    })
}

/// Sends `state` (lines of `KEY=VALUE`) to the service manager, if there is one.
/// Returns whether it was sent.
pub fn notify(state: &str) -> bool {
    let Some(addr) = manager_addr() else {
        return false;
    };
    let sent = addr.and_then(|addr| {
        let sock = UnixDatagram::unbound()?;
        sock.send_to_addr(state.as_bytes(), &addr)
    });
    match sent {
        Ok(_) => true,
        Err(e) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(error = %e, "cannot notify the service manager ($NOTIFY_SOCKET)");
            });
            false
        }
    }
}
