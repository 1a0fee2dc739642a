//! qemu's machine protocol (QMP) over a guest's `qmp.sock`: one connection per
//! exchange, commands in, answers out.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::LabError;

/// Send each of `commands` (JSON objects) in turn and return qemu's answer to
/// each (its `"return"` or `"error"` line). An answer that is an error is
/// returned as such, not turned into `Err`: the caller decides what it means.
pub(crate) fn exchange(sock: &Path, commands: &[String]) -> Result<Vec<String>, LabError> {
    let what = |e| LabError::io(format!("QMP {}", sock.display()), e);
    let s = UnixStream::connect(sock).map_err(what)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(what)?;
    let mut r = BufReader::new(s.try_clone().map_err(what)?);
    let mut w = s;
    let mut answer = || -> Result<String, LabError> {
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).map_err(what)? == 0 {
                return Err(LabError::GuestGone("a QMP answer".into()));
            }
            // Skip the greeting and asynchronous events.
            if line.contains("\"return\"") || line.contains("\"error\"") {
                return Ok(line.trim().to_string());
            }
        }
    };
    w.write_all(b"{\"execute\":\"qmp_capabilities\"}\n")
        .map_err(what)?;
    answer()?;
    let mut answers = Vec::with_capacity(commands.len());
    for c in commands {
        w.write_all(c.as_bytes()).map_err(what)?;
        w.write_all(b"\n").map_err(what)?;
        answers.push(answer()?);
    }
    Ok(answers)
}

/// Run `command`; its error answer becomes `Err`.
pub(crate) fn execute(sock: &Path, command: &str) -> Result<(), LabError> {
    let a = exchange(sock, &[command.to_string()])?;
    match a.first() {
        Some(a) if a.contains("\"error\"") => Err(LabError::io(
            format!("QMP {command}"),
            std::io::Error::other(a.clone()),
        )),
        _ => Ok(()),
    }
}
