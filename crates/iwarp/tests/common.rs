//! Helpers shared by the loopback tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use iwarp::{IwarpConfig, IwarpProvider, IwarpQp};
use rdma::{
    Access, Completion, ConnectParams, LocalSge, MemoryRegion, ProtectionDomain, QpEvent,
    QueuePairExt, RecvWr, RemoteAddr, SendOp, SendWr,
};

pub struct Side {
    pub qp: IwarpQp,
    pub pd: ProtectionDomain,
}

pub fn cfg(crc: bool) -> IwarpConfig {
    IwarpConfig {
        crc,
        first_send_delay: Duration::ZERO,
        ..IwarpConfig::default()
    }
}

/// A connected pair over TCP loopback: (active, passive).
pub async fn pair_with(active: IwarpConfig, passive: IwarpConfig) -> (Side, Side) {
    pair_params(
        active,
        passive,
        ConnectParams {
            ird: 8,
            ord: 8,
            ..Default::default()
        },
    )
    .await
}

pub async fn pair_params(
    active: IwarpConfig,
    passive: IwarpConfig,
    params: ConnectParams,
) -> (Side, Side) {
    let server = IwarpProvider::new(passive);
    let mut l = server.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr: SocketAddr = l.local_addr().unwrap();
    let pd_b = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let pd_b2 = pd_b.clone();
    let accept = tokio::spawn(async move {
        let req = l.accept().await.unwrap();
        req.accept(
            &pd_b2,
            ConnectParams {
                ird: 8,
                ord: 8,
                ..Default::default()
            },
        )
        .await
        .unwrap()
    });
    let pd_a = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let qp_a = IwarpProvider::new(active)
        .connect(addr, &pd_a, params)
        .await
        .unwrap();
    let qp_b = accept.await.unwrap();
    (
        Side {
            qp: qp_a,
            pd: pd_a.into(),
        },
        Side {
            qp: qp_b,
            pd: pd_b.into(),
        },
    )
}

pub async fn pair(crc: bool) -> (Side, Side) {
    pair_with(cfg(crc), cfg(crc)).await
}

pub fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect::<Vec<u8>>()
        .into()
}

pub async fn next_completion(qp: &IwarpQp) -> Completion {
    tokio::time::timeout(Duration::from_secs(60), qp.completion())
        .await
        .expect("completion timed out")
        .expect("queue pair closed with no completion")
}

pub async fn next_event(qp: &IwarpQp) -> QpEvent {
    tokio::time::timeout(Duration::from_secs(20), qp.event())
        .await
        .expect("event timed out")
        .expect("no event")
}

pub fn recv_wr(mr: &MemoryRegion, wr_id: u64, offset: usize, len: usize) -> RecvWr {
    RecvWr {
        wr_id,
        sgl: vec![LocalSge {
            mr: mr.clone(),
            offset,
            len,
        }],
    }
}

/// A Send of `data`, registered in `qp`'s protection domain.
pub fn send(qp: &dyn rdma::QueuePair, wr_id: u64, data: Bytes) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send,
        sgl: vec![qp.pd().sge(data).unwrap()],
    }
}

/// An RDMA Write of `data`, registered in `qp`'s protection domain.
pub fn write(
    qp: &dyn rdma::QueuePair,
    wr_id: u64,
    stag: rdma::STag,
    offset: u64,
    data: Bytes,
) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::RdmaWrite(RemoteAddr { stag, offset }),
        sgl: vec![qp.pd().sge(data).unwrap()],
    }
}

pub fn read(
    wr_id: u64,
    stag: rdma::STag,
    offset: u64,
    sink: &MemoryRegion,
    sink_off: usize,
    len: usize,
) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::RdmaRead {
            remote: RemoteAddr { stag, offset },
            sink: LocalSge {
                mr: sink.clone(),
                offset: sink_off,
                len,
            },
        },
        sgl: vec![],
    }
}

pub fn region(pd: &ProtectionDomain, len: usize, access: Access) -> MemoryRegion {
    pd.register(BytesMut::zeroed(len), access).unwrap()
}
