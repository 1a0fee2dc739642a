//! An in-memory requester/responder pair with a virtual clock and fault injection
//! (quinn-proto's `tests/util.rs` `Pair`): both state machines, their registered
//! memory, the Sends in flight each way, and the Receive budgets, driven until
//! nothing moves.
//!
//! The harness is a strict driver: an RDMA Read or Write of an STag that is not
//! registered (or invalidated, or not writable) breaks the connection, exactly as an
//! iWARP Terminate would; a Send With Invalidate removes the STag before the message
//! is handed over; a message arriving when its direction has no Receive posted breaks
//! the connection too (v1 §7.2.2: "the RDMA provider MAY drop the RDMA connection").
//!
//! Like a driver, it puts each Reply the client receives back together from what the
//! server placed in the Call's fenced chunks (`Requester::assemble_reply`):
//! [`Pair::client_replies`].

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use xdr::XdrStream;

use crate::action::Action;
use crate::chunks::Segment;
use crate::error::ReplyError;
use crate::header::PrefixView;
use crate::marshal::Registration;
use crate::reassembly::Reassembled;
use crate::requester::{PlacedChunks, ReplyParts, Requester, RequesterEvent};
use crate::responder::{Responder, ResponderEvent};
use crate::rpc;
use crate::testutil::TestUlb;
use crate::wire::{MsgType, Xid};

/// Registered memory of one side.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    pub(crate) regions: HashMap<u32, (Vec<u8>, bool)>,
    next: u32,
    tag: u32,
    /// Largest segment a registration produces (several segments, one STag).
    pub(crate) max_segment: u32,
    /// What invalidated regions held when they were fenced (for assertions).
    pub(crate) fenced: HashMap<u32, Vec<u8>>,
}

impl Memory {
    fn new(tag: u32) -> Self {
        Memory {
            tag,
            max_segment: 4 << 20,
            ..Memory::default()
        }
    }

    fn register(&mut self, data: Vec<u8>, writable: bool) -> Vec<Segment> {
        self.next += 1;
        let h = self.tag | self.next;
        let len = data.len() as u64;
        self.regions.insert(h, (data, writable));
        let mut segs = Vec::new();
        let mut at = 0u64;
        while at < len || segs.is_empty() {
            let n = (len - at).min(u64::from(self.max_segment)) as u32;
            segs.push(Segment::new(h, n, at));
            at += u64::from(n);
        }
        segs
    }

    fn read(&self, segs: &[Segment]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for s in segs {
            let (r, _) = self.regions.get(&s.handle)?;
            let at = usize::try_from(s.offset).ok()?;
            out.extend_from_slice(r.get(at..at + s.length as usize)?);
        }
        Some(out)
    }

    fn write(&mut self, handle: u32, offset: u64, data: &[u8]) -> Option<()> {
        let (r, writable) = self.regions.get_mut(&handle)?;
        if !*writable {
            return None;
        }
        let at = usize::try_from(offset).ok()?;
        r.get_mut(at..at + data.len())?.copy_from_slice(data);
        Some(())
    }
}

/// What travels on the wire: the Send's bytes and the STag of a Send With Invalidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wire {
    pub(crate) bytes: Bytes,
    pub(crate) invalidate: Option<u32>,
}

impl Wire {
    pub(crate) fn msg_type(&self) -> Option<MsgType> {
        PrefixView::new_checked(&self.bytes[..])
            .ok()
            .map(|v| v.msg_type())
    }

    fn is_rpc(&self, kind: u32) -> bool {
        self.msg_type() == Some(MsgType::RDMA_MSG)
            && crate::header::Header::parse(&self.bytes, &crate::Limits::default())
                .ok()
                .and_then(|p| rpc::msg_type(&self.bytes[p.header_len..]))
                == Some(kind)
    }
}

/// The client's Write and Reply chunk handles of one Call, as registered.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallChunks {
    pub(crate) writes: Vec<u32>,
    pub(crate) reply: Option<u32>,
}

/// A Call's fenced client regions, read as a driver reads them after fencing: only
/// the bytes asked for are taken (copied out of the region).
struct FencedView<'a> {
    mem: &'a Memory,
    chunks: Option<&'a CallChunks>,
}

impl FencedView<'_> {
    fn take(&self, handle: Option<u32>, len: usize) -> Option<Bytes> {
        let region = self.mem.fenced.get(&handle?)?;
        Some(Bytes::copy_from_slice(region.get(..len)?))
    }
}

impl PlacedChunks for FencedView<'_> {
    fn reply_chunk(&mut self, len: usize) -> Option<Bytes> {
        self.take(self.chunks.and_then(|c| c.reply), len)
    }

    fn write_chunk(&mut self, index: usize, len: usize) -> Option<Bytes> {
        self.take(self.chunks.and_then(|c| c.writes.get(index).copied()), len)
    }
}

type ServerUlp = Box<dyn FnMut(Xid, Bytes) -> Option<XdrStream>>;
type ClientUlp = Box<dyn FnMut(Xid, Bytes) -> XdrStream>;

/// A connected pair.
pub(crate) struct Pair {
    pub(crate) now: Instant,
    pub(crate) client: Requester<TestUlb>,
    pub(crate) server: Responder<TestUlb>,
    pub(crate) client_mem: Memory,
    pub(crate) server_mem: Memory,
    pub(crate) to_server: VecDeque<Wire>,
    pub(crate) to_client: VecDeque<Wire>,
    /// Every Send each way, in order (for assertions on the bytes).
    pub(crate) sent_by_client: Vec<Wire>,
    pub(crate) sent_by_server: Vec<Wire>,
    /// Fault injection: Sends from the client for which this says true are lost.
    pub(crate) drop_to_server: Box<dyn FnMut(&Wire) -> bool>,
    /// Fault injection: rewrites each Send from the server before the client gets it
    /// (a lying responder); `sent_by_server` keeps the original.
    pub(crate) tamper_to_client: Box<dyn FnMut(&mut Wire)>,
    pub(crate) client_events: Vec<RequesterEvent>,
    /// The client's Write and Reply chunks of each Call (its latest registration).
    pub(crate) client_chunks: HashMap<Xid, CallChunks>,
    /// Each Reply the client received, put back together from its fenced chunks as a
    /// driver does (`Requester::assemble_reply`), or why it could not be.
    pub(crate) client_replies: HashMap<Xid, Result<Reassembled, ReplyError>>,
    pub(crate) server_events: Vec<ResponderEvent>,
    /// The server's upper layer: a Reply for each Call (`None`: keep it pending).
    pub(crate) server_ulp: ServerUlp,
    /// The client's upper layer for backward Calls.
    pub(crate) client_ulp: ClientUlp,
    /// Why the connection broke, if it did.
    pub(crate) broken: Option<String>,
    pub(crate) closed: bool,
    /// Receives posted on the server for the client's forward messages, and for
    /// backward Replies; on the client for backward Calls.
    pub(crate) server_receives: u32,
    pub(crate) server_backward_receives: u32,
    pub(crate) client_backward_receives: u32,
    /// Receives posted on the server now (forward and backward): each message the
    /// server receives takes one, `Responder::poll_reposts` gives them back. A message
    /// arriving with none posted breaks the connection, as on a real provider.
    pub(crate) server_posted: u32,
    /// Most client messages (other than backward Replies) ever queued at the server
    /// at once, and most backward Calls queued at the client.
    pub(crate) max_forward_in_flight: usize,
    pub(crate) max_backward_in_flight: usize,
}

impl Pair {
    pub(crate) fn new(
        client: Requester<TestUlb>,
        server: Responder<TestUlb>,
        credits: u32,
    ) -> Self {
        Pair {
            now: Instant::now(),
            client,
            server,
            client_mem: Memory {
                max_segment: u32::MAX,
                ..Memory::new(0xc000_0000)
            },
            server_mem: Memory::new(0x5000_0000),
            to_server: VecDeque::new(),
            to_client: VecDeque::new(),
            sent_by_client: Vec::new(),
            sent_by_server: Vec::new(),
            drop_to_server: Box::new(|_| false),
            tamper_to_client: Box::new(|_| {}),
            client_events: Vec::new(),
            client_chunks: HashMap::new(),
            client_replies: HashMap::new(),
            server_events: Vec::new(),
            server_ulp: Box::new(|xid, _| Some(crate::testutil::rpc_reply(xid.0, &[], None))),
            client_ulp: Box::new(|xid, _| crate::testutil::rpc_reply(xid.0, &[], None)),
            broken: None,
            closed: false,
            server_receives: credits,
            server_backward_receives: 0,
            client_backward_receives: 0,
            server_posted: credits,
            max_forward_in_flight: 0,
            max_backward_in_flight: 0,
        }
    }

    fn break_with(&mut self, why: String) {
        if self.broken.is_none() {
            self.broken = Some(why);
        }
    }

    fn drain_client(&mut self) -> bool {
        let mut moved = false;
        while let Some(a) = self.client.poll_action() {
            moved = true;
            match a {
                Action::Register { xid, registrations } => {
                    let mut chunks = CallChunks::default();
                    let segs = registrations
                        .iter()
                        .map(|r| match r {
                            Registration::Read { data, .. } => {
                                self.client_mem.register(data.concat(), false)
                            }
                            Registration::Write { len } => {
                                let segs = self.client_mem.register(vec![0; *len as usize], true);
                                chunks.writes.push(segs[0].handle);
                                segs
                            }
                            Registration::Reply { len } => {
                                let segs = self.client_mem.register(vec![0; *len as usize], true);
                                chunks.reply = Some(segs[0].handle);
                                segs
                            }
                        })
                        .collect();
                    self.client_chunks.insert(xid, chunks);
                    self.client.handle_registered(xid, segs).unwrap();
                }
                Action::Send {
                    send, invalidate, ..
                } => {
                    let w = Wire {
                        bytes: Bytes::from(send.concat()),
                        invalidate,
                    };
                    self.sent_by_client.push(w.clone());
                    if !(self.drop_to_server)(&w) {
                        self.to_server.push_back(w);
                    }
                }
                Action::RdmaRead {
                    xid,
                    chunk,
                    segments,
                } => match self.server_mem.read(&segments) {
                    Some(d) => self.client.handle_read_done(xid, chunk, Bytes::from(d)),
                    None => self.break_with(format!("client RDMA Read of {segments:?}")),
                },
                Action::Invalidate { handles, .. } => {
                    for h in handles {
                        if let Some((data, _)) = self.client_mem.regions.remove(&h) {
                            self.client_mem.fenced.insert(h, data);
                        }
                    }
                }
                Action::PostBackwardReceives(n) => self.client_backward_receives += n,
                Action::PostReceives(_) => {}
                Action::Close => self.closed = true,
                Action::RdmaWrite { .. } => panic!("requester never writes"),
            }
        }
        while let Some(e) = self.client.poll_event() {
            moved = true;
            if let RequesterEvent::BackwardCall { xid, payload } = &e {
                let reply = (self.client_ulp)(*xid, payload.clone());
                self.client.send_backward_reply(*xid, reply).unwrap();
            }
            if let (RequesterEvent::Reply { xid, .. }, Some(parts)) = (&e, ReplyParts::of(&e)) {
                let mut placed = FencedView {
                    mem: &self.client_mem,
                    chunks: self.client_chunks.get(xid),
                };
                let assembled = self.client.assemble_reply(parts, &mut placed);
                self.client_replies.insert(*xid, assembled);
            }
            self.client_events.push(e);
        }
        moved
    }

    fn drain_server(&mut self) -> bool {
        let mut moved = false;
        loop {
            self.server_posted += self.server.poll_reposts();
            let Some(a) = self.server.poll_action() else {
                break;
            };
            moved = true;
            match a {
                Action::Register { xid, registrations } => {
                    let segs = registrations
                        .iter()
                        .map(|r| match r {
                            Registration::Read { data, .. } => {
                                self.server_mem.register(data.concat(), false)
                            }
                            other => panic!("responder registers only Read chunks: {other:?}"),
                        })
                        .collect();
                    let _ = self.server.handle_registered(self.now, xid, segs);
                }
                Action::Send {
                    send, invalidate, ..
                } => {
                    let w = Wire {
                        bytes: Bytes::from(send.concat()),
                        invalidate,
                    };
                    self.sent_by_server.push(w.clone());
                    self.to_client.push_back(w);
                }
                Action::RdmaRead {
                    xid,
                    chunk,
                    segments,
                } => match self.client_mem.read(&segments) {
                    Some(d) => self.server.handle_read_done(xid, chunk, Bytes::from(d)),
                    None => self.break_with(format!("server RDMA Read of {segments:?}")),
                },
                Action::RdmaWrite { write, .. } => {
                    let data = write.data.concat();
                    if self
                        .client_mem
                        .write(write.handle, write.offset, &data)
                        .is_none()
                    {
                        self.break_with(format!("server RDMA Write to {:#x}", write.handle));
                    }
                }
                Action::Invalidate { handles, .. } => {
                    for h in handles {
                        self.server_mem.regions.remove(&h);
                    }
                }
                Action::PostReceives(n) => {
                    self.server_receives += n;
                    self.server_posted += n;
                    self.server.handle_receives_posted(n);
                }
                Action::PostBackwardReceives(n) => {
                    self.server_backward_receives += n;
                    self.server_posted += n;
                }
                Action::Close => self.closed = true,
            }
        }
        while let Some(e) = self.server.poll_event() {
            moved = true;
            if let ResponderEvent::Call { xid, payload, .. } = &e {
                if let Some(reply) = (self.server_ulp)(*xid, payload.to_bytes()) {
                    let _ = self.server.send_reply(*xid, reply);
                }
            }
            self.server_events.push(e);
        }
        moved
    }

    fn check_receive_budgets(&mut self) {
        let backward_replies = self
            .to_server
            .iter()
            .filter(|w| w.is_rpc(rpc::REPLY))
            .count();
        let forward = self.to_server.len() - backward_replies;
        let backward_calls = self
            .to_client
            .iter()
            .filter(|w| w.is_rpc(rpc::CALL))
            .count();
        self.max_forward_in_flight = self.max_forward_in_flight.max(forward);
        self.max_backward_in_flight = self.max_backward_in_flight.max(backward_calls);
        if forward > self.server_receives as usize {
            self.break_with(format!(
                "{forward} client messages for {} server Receives",
                self.server_receives
            ));
        }
        if backward_replies > self.server_backward_receives as usize {
            self.break_with("backward Reply without a backward Receive".into());
        }
        if backward_calls > self.client_backward_receives as usize {
            self.break_with("backward Call without a backward Receive".into());
        }
    }

    /// Executes every action and delivers every Send queued now. False if nothing
    /// moved.
    pub(crate) fn step(&mut self) -> bool {
        let mut moved = self.drain_client() | self.drain_server();
        self.check_receive_budgets();
        while let Some(w) = self.to_server.pop_front() {
            moved = true;
            if let Some(h) = w.invalidate {
                // Send With Invalidate: the STag is gone before the message arrives.
                self.server_mem.regions.remove(&h);
            }
            if self.server_posted == 0 {
                self.break_with("a client message found no server Receive posted".into());
                continue;
            }
            self.server_posted -= 1;
            self.server.handle_receive(w.bytes);
        }
        while let Some(mut w) = self.to_client.pop_front() {
            moved = true;
            (self.tamper_to_client)(&mut w);
            self.client.handle_receive(w.bytes);
        }
        moved |= self.drain_client() | self.drain_server();
        moved
    }

    /// Steps until nothing moves.
    pub(crate) fn run(&mut self) {
        for _ in 0..100_000 {
            if !self.step() {
                return;
            }
        }
        panic!("the pair never settled");
    }

    /// The client's Reply to `xid`, put back together (`Requester::assemble_reply`).
    pub(crate) fn client_reply(&self, xid: Xid) -> Option<Result<Bytes, ReplyError>> {
        let r = self.client_replies.get(&xid)?;
        Some(r.as_ref().map(Reassembled::to_bytes).map_err(Clone::clone))
    }

    /// The client's Reply (or failure) for `xid`.
    pub(crate) fn client_outcome(&self, xid: Xid) -> Option<&RequesterEvent> {
        self.client_events.iter().find(|e| match e {
            RequesterEvent::Reply { xid: x, .. } | RequesterEvent::Failed { xid: x, .. } => {
                *x == xid
            }
            RequesterEvent::BackwardCall { .. } => false,
        })
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod wire_examples;
