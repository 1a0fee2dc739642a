//! The status monitor (NSM, program 100024 version 1; XNFS chapter 11, "Network
//! Status Monitor Protocol"), as far as a lock server needs it.
//!
//! - **Our state number** ([`NsmState::open`]): kept in `<state-dir>/nsm/state`,
//!   raised at every start and odd while we run (XNFS: "the state number is
//!   incremented ... it is odd while the host is up").
//! - **The clients to notify** ([`NsmState::monitor`]): every client host that got a
//!   lock is written to `<state-dir>/nsm/clients` (its `caller_name` and the address
//!   it called from) before the lock is granted, so that after a restart
//!   ([`NsmState::previous`]) we can send each one SM_NOTIFY ([`super::callback`]) and
//!   it reclaims its locks in our grace period.
//! - **Clients that reboot** ([`NsmService`]): a client's statd sends us SM_NOTIFY
//!   when it restarts; we drop every lock and share of that host (by `mon_name`
//!   equal to its `caller_name`, or to the address it locked from).
//!
//! SM_MON, SM_UNMON and SM_UNMON_ALL are for local lock managers asking their own
//! statd; ours is in process, so they answer `stat_fail` (SM_MON) or our state.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use oncrpc::{Request, Service, ServiceError, ServiceResult};
use xdr::{Bytes, Decode, Encoder};

use super::xdr::{sm_proc, StatChge, SM_MAXSTRLEN};
use super::Nlm;

/// Our NSM state and the clients we must notify after a restart.
#[derive(Debug)]
pub struct NsmState {
    dir: PathBuf,
    /// Our state number in this run (odd).
    pub state: i32,
    clients: Mutex<BTreeMap<Bytes, IpAddr>>,
    previous: Vec<(Bytes, IpAddr)>,
}

impl NsmState {
    /// Opens (creating) `<state_dir>/nsm`, raises the state number to the next odd
    /// one and writes it back (synced) before anything is served.
    pub fn open(state_dir: &Path) -> std::io::Result<NsmState> {
        let dir = state_dir.join("nsm");
        crate::creds::server_files(|| std::fs::create_dir_all(&dir))
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        let state_file = dir.join("state");
        let old: i32 = match std::fs::read_to_string(&state_file) {
            Ok(s) => s.trim().parse().unwrap_or(0),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", state_file.display()),
                ))
            }
        };
        // Odd while up: the next odd number after the last one used (wrapping past
        // i32::MAX to 1).
        let state = match old.checked_add(if old % 2 != 0 { 2 } else { 1 }) {
            Some(s) if s > 0 => s,
            _ => 1,
        };
        write_synced(&state_file, format!("{state}\n").as_bytes())?;
        let previous = read_clients(&dir.join("clients"));
        Ok(NsmState {
            clients: Mutex::new(previous.iter().cloned().collect()),
            previous,
            dir,
            state,
        })
    }

    /// The clients that held locks in the previous run (to send SM_NOTIFY).
    pub fn previous(&self) -> &[(Bytes, IpAddr)] {
        &self.previous
    }

    fn clients(&self) -> std::sync::MutexGuard<'_, BTreeMap<Bytes, IpAddr>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `host` (calling from `addr`) as a client to notify after a restart;
    /// written and synced before this returns, unless already recorded.
    pub fn monitor(&self, host: &Bytes, addr: IpAddr) -> std::io::Result<()> {
        let mut clients = self.clients();
        if clients.get(host) == Some(&addr) {
            return Ok(());
        }
        clients.insert(host.clone(), addr);
        self.save(&clients)
    }

    /// Forgets `host` (it rebooted and dropped its locks).
    pub fn unmonitor(&self, host: &[u8]) {
        let mut clients = self.clients();
        if clients.remove(host).is_some() {
            if let Err(e) = self.save(&clients) {
                tracing::warn!(error = %e, "cannot save the NSM client list");
            }
        }
    }

    /// The recorded hosts whose name or address is `mon_name`.
    pub fn matching(&self, mon_name: &[u8]) -> Vec<Bytes> {
        self.clients()
            .iter()
            .filter(|(h, a)| h.as_ref() == mon_name || a.to_string().as_bytes() == mon_name)
            .map(|(h, _)| h.clone())
            .collect()
    }

    fn save(&self, clients: &BTreeMap<Bytes, IpAddr>) -> std::io::Result<()> {
        let mut text = String::new();
        for (host, addr) in clients {
            // The name as hex: caller names are bytes, and one per line must parse back.
            let hex: String = host.iter().map(|b| format!("{b:02x}")).collect();
            text.push_str(&format!("{addr} {hex}\n"));
        }
        write_synced(&self.dir.join("clients"), text.as_bytes())
    }
}

fn read_clients(path: &Path) -> Vec<(Bytes, IpAddr)> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let (addr, hex) = l.split_once(' ')?;
            let addr: IpAddr = addr.parse().ok()?;
            if hex.len() % 2 != 0 || hex.len() > 2 * SM_MAXSTRLEN as usize {
                return None;
            }
            let name: Option<Vec<u8>> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                .collect();
            Some((Bytes::from(name?), addr))
        })
        .collect()
}

/// Writes `data` to `path` through a temporary file, synced, then renamed.
fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    // The server's own file, of its own group (`creds::server_files`).
    let res = crate::creds::server_files(|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    });
    res.map_err(|e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
    })
}

/// NSM version 1 as an RPC service: SM_NOTIFY from rebooted clients, SM_STAT.
#[derive(Debug, Clone)]
pub struct NsmService {
    nlm: Arc<Nlm>,
}

impl NsmService {
    /// The status monitor of a lock manager.
    pub fn new(nlm: Arc<Nlm>) -> Self {
        NsmService { nlm }
    }
}

/// `struct sm_stat_res { res res_stat; int state; }`, `res` 0 = stat_succ.
fn sm_stat_res(ok: bool, state: i32) -> xdr::XdrStream {
    let mut e = Encoder::new();
    e.u32(if ok { 0 } else { 1 }).i32(state);
    e.finish()
}

impl Service for NsmService {
    fn procedure_name(&self, _vers: u32, proc_: u32) -> Option<&'static str> {
        sm_proc::name(proc_)
    }

    async fn call(&self, req: Request) -> ServiceResult {
        let mut a = req.args;
        let state = self.nlm.nsm.state;
        match req.proc_ {
            sm_proc::NULL => {
                a.finish()?;
                Ok(xdr::XdrStream::default())
            }
            // SM_STAT(sm_name) -> sm_stat_res: "is this host monitored" in XNFS; we
            // answer our state, as Linux statd does.
            sm_proc::STAT => {
                let _name = a.string(SM_MAXSTRLEN)?;
                a.finish()?;
                Ok(sm_stat_res(true, state))
            }
            // SM_MON(mon) -> sm_stat_res: for local lock managers only.
            sm_proc::MON => Ok(sm_stat_res(false, state)),
            // SM_UNMON(mon_id), SM_UNMON_ALL(my_id) -> sm_stat { int state; }.
            sm_proc::UNMON | sm_proc::UNMON_ALL => {
                let mut e = Encoder::new();
                e.i32(state);
                Ok(e.finish())
            }
            sm_proc::SIMU_CRASH => Ok(xdr::XdrStream::default()),
            // SM_NOTIFY(stat_chge) -> void: `mon_name` rebooted; its locks are gone.
            sm_proc::NOTIFY => {
                let notice = StatChge::decode(&mut a)?;
                a.finish()?;
                tracing::info!(
                    host = %String::from_utf8_lossy(&notice.mon_name),
                    state = notice.state,
                    "SM_NOTIFY: a client restarted; dropping its locks"
                );
                // Off the runtime's threads: forgetting the host rewrites the client list.
                let nlm = self.nlm.clone();
                tokio::task::spawn_blocking(move || nlm.host_rebooted(&notice.mon_name))
                    .await
                    .map_err(|_| ServiceError::SystemErr)?;
                Ok(xdr::XdrStream::default())
            }
            _ => Err(ServiceError::ProcUnavail),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_is_odd_and_rises_at_each_open_and_clients_persist() {
        let dir = std::env::temp_dir().join(format!("nsm-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = NsmState::open(&dir).unwrap();
        assert_eq!(a.state, 1);
        assert!(a.previous().is_empty());
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        a.monitor(&Bytes::from_static(b"client one"), ip).unwrap();
        a.monitor(&Bytes::from_static(b"c2"), ip).unwrap();
        a.unmonitor(b"c2");
        drop(a);
        let b = NsmState::open(&dir).unwrap();
        assert_eq!(b.state, 3);
        assert_eq!(b.previous(), &[(Bytes::from_static(b"client one"), ip)]);
        assert_eq!(
            b.matching(b"10.0.0.7"),
            vec![Bytes::from_static(b"client one")]
        );
        assert_eq!(b.matching(b"client one").len(), 1);
        assert!(b.matching(b"other").is_empty());
        // An even number (a crash mid-write of another implementation) goes odd.
        std::fs::write(dir.join("nsm/state"), "8\n").unwrap();
        assert_eq!(NsmState::open(&dir).unwrap().state, 9);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
