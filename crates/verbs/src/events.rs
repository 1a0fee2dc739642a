//! A device's asynchronous events (`ibv_get_async_event`): a port going down or up,
//! its addresses changing, the device failing. A connection learns that its device
//! died from its CM events (DEVICE_REMOVAL) and its flushed completions; these events
//! say why, and say it also when no connection is open (an operator's first
//! question when NFS/RDMA stops: is the link up?).
//!
//! [`watch_device_events`] opens every device a second time, for the events alone:
//! port and device events go to every open context of the device (the kernel's
//! uverbs delivers them to each), so this context sees them without taking anything
//! from librdmacm's. Events of a queue pair go to the context that made it, so they
//! are not seen here; its completions carry the error instead.

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::device::OpenError;
use crate::ffi::ibv_event_type;
use crate::sys::{self, RawAsyncEvent};
use crate::sys_conn;

/// An asynchronous event of an RDMA device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceEvent {
    /// The device's name (`rxe0`, `mlx5_0`, ...).
    pub device: String,
    /// What happened.
    pub kind: DeviceEventKind,
}

/// What happened to a device (the `IBV_EVENT_*` of its event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceEventKind {
    /// The port's link came up (`IBV_EVENT_PORT_ACTIVE`).
    PortActive(u8),
    /// The port's link went down (`IBV_EVENT_PORT_ERR`): connections through it stop.
    PortError(u8),
    /// The port's addresses (GIDs, LID, P_Key table) or subnet manager changed.
    PortChange(u8),
    /// The device failed (`IBV_EVENT_DEVICE_FATAL`): everything on it is lost.
    DeviceFatal,
    /// Any other event, by its `IBV_EVENT_*` number.
    Other(u32),
    /// The device's events could not be read any more (why): no further events
    /// come for it.
    Unwatched(String),
}

impl DeviceEventKind {
    fn from_raw(e: RawAsyncEvent) -> DeviceEventKind {
        use ibv_event_type::*;
        let port = e.port.unwrap_or(0);
        match e.event_type {
            IBV_EVENT_PORT_ACTIVE => DeviceEventKind::PortActive(port),
            IBV_EVENT_PORT_ERR => DeviceEventKind::PortError(port),
            IBV_EVENT_LID_CHANGE
            | IBV_EVENT_PKEY_CHANGE
            | IBV_EVENT_SM_CHANGE
            | IBV_EVENT_CLIENT_REREGISTER
            | IBV_EVENT_GID_CHANGE => DeviceEventKind::PortChange(port),
            IBV_EVENT_DEVICE_FATAL => DeviceEventKind::DeviceFatal,
            other => DeviceEventKind::Other(other),
        }
    }
}

impl fmt::Display for DeviceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.device;
        match self.kind {
            DeviceEventKind::PortActive(p) => write!(f, "RDMA device {d} port {p}: link up"),
            DeviceEventKind::PortError(p) => write!(
                f,
                "RDMA device {d} port {p}: link down (connections through it stop)"
            ),
            DeviceEventKind::PortChange(p) => {
                write!(f, "RDMA device {d} port {p}: addresses or subnet changed")
            }
            DeviceEventKind::DeviceFatal => write!(
                f,
                "RDMA device {d}: fatal device error (its connections are lost)"
            ),
            DeviceEventKind::Other(n) => write!(f, "RDMA device {d}: event {n}"),
            DeviceEventKind::Unwatched(ref why) => {
                write!(
                    f,
                    "RDMA device {d}: its events cannot be read any more ({why})"
                )
            }
        }
    }
}

/// Calls `on_event` with every asynchronous event of every RDMA device present now,
/// from tasks on the current tokio runtime, for as long as the process runs (a
/// device's task ends after its fatal error). Returns the names of the devices
/// watched: a device that cannot be opened or watched is left out. Once per
/// process: later calls watch nothing more and return an empty list.
///
/// Fails as [`crate::devices`] does (no rdma-core, no kernel RDMA). Needs a tokio
/// runtime.
pub fn watch_device_events(
    on_event: impl Fn(&DeviceEvent) + Send + Sync + 'static,
) -> Result<Vec<String>, OpenError> {
    static STARTED: OnceLock<()> = OnceLock::new();
    if STARTED.set(()).is_err() {
        return Ok(Vec::new());
    }
    let on_event = Arc::new(on_event);
    let mut watched = Vec::new();
    for ctx in sys::open_devices()
        .map_err(OpenError::from_list_error)?
        .into_iter()
        .flatten()
    {
        let name = ctx.name().to_string();
        let Ok(fd) = sys_conn::watch_context(Arc::new(ctx)) else {
            continue;
        };
        watched.push(name.clone());
        let on_event = on_event.clone();
        let event = move |kind| DeviceEvent {
            device: name.clone(),
            kind,
        };
        tokio::spawn(async move {
            loop {
                let mut ready = match fd.readable().await {
                    Ok(r) => r,
                    Err(e) => return on_event(&event(DeviceEventKind::Unwatched(e.to_string()))),
                };
                loop {
                    match fd.get_ref().0.next_async_event() {
                        Ok(Some(raw)) => {
                            let kind = DeviceEventKind::from_raw(raw);
                            let fatal = kind == DeviceEventKind::DeviceFatal;
                            on_event(&event(kind));
                            if fatal {
                                return;
                            }
                        }
                        Ok(None) => {
                            ready.clear_ready();
                            break;
                        }
                        Err(e) => {
                            return on_event(&event(DeviceEventKind::Unwatched(e.to_string())))
                        }
                    }
                }
            }
        });
    }
    Ok(watched)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_name_the_device_the_port_and_what_it_means() {
        use ibv_event_type::*;
        let ev = |event_type, port| {
            DeviceEvent {
                device: "rxe0".into(),
                kind: DeviceEventKind::from_raw(RawAsyncEvent { event_type, port }),
            }
            .to_string()
        };
        assert_eq!(
            ev(IBV_EVENT_PORT_ERR, Some(1)),
            "RDMA device rxe0 port 1: link down (connections through it stop)"
        );
        assert_eq!(
            ev(IBV_EVENT_PORT_ACTIVE, Some(1)),
            "RDMA device rxe0 port 1: link up"
        );
        assert_eq!(
            ev(IBV_EVENT_GID_CHANGE, Some(1)),
            "RDMA device rxe0 port 1: addresses or subnet changed"
        );
        assert_eq!(
            ev(IBV_EVENT_DEVICE_FATAL, None),
            "RDMA device rxe0: fatal device error (its connections are lost)"
        );
        assert_eq!(ev(IBV_EVENT_QP_FATAL, None), "RDMA device rxe0: event 1");
        assert!(sys::is_port_event(IBV_EVENT_PORT_ERR));
        assert!(!sys::is_port_event(IBV_EVENT_DEVICE_FATAL));
    }
}
