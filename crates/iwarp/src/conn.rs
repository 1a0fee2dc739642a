//! The per-connection RDMAP/DDP/MPA state machine (sans-IO).
//!
//! Read first: RFC 5040 §5 (data transfer semantics, ordering), §6 (RDMA Read
//! flow), §7 (errors); RFC 5041 §5 (placement, MSN/MO), §7 (errors); RFC 5044 §6
//! (FPDU framing).
//!
//! Driving a [`Connection`] (the driver in [`crate::driver`] does exactly this):
//!
//! 1. feed received stream bytes with [`Connection::handle_input`], end of stream
//!    with [`Connection::handle_eof`], transport failures with
//!    [`Connection::handle_transport_error`];
//! 2. post work with [`Connection::post_send`] / [`Connection::post_recv`];
//! 3. drain [`Connection::poll_transmit`] into the socket until it returns `false`,
//!    arm a timer for [`Connection::poll_timeout`];
//! 4. drain [`Connection::poll_completion`] and [`Connection::poll_event`];
//! 5. once [`Connection::is_finished`], flush the last batch and close the stream.
//!
//! The core never reads a clock: `now` is an argument.
//!
//! DoS bounds: posted receives and sends are capped by [`Limits`]; inbound Read
//! Requests by our IRD (excess is a protocol error); the receive buffer holds at most
//! one partial FPDU (65 KiB) plus what one socket read delivers; outgoing data is
//! segmented lazily, one batch at a time.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use rdma::software::{ResolvedRegion, SoftwarePd};
use rdma::{
    Access, Completion, DisconnectReason, LocalSge, PostError, ProtectionDomain, QpEvent, RecvWr,
    STag, SendOp, SendWr, WcOpcode, WcStatus,
};

use crate::error::{ProtocolError, TerminateCode};
use crate::handshake::Negotiated;
use crate::tx::TxBatch;
use crate::wire::ddp::{
    queue, DdpHeader, Opcode, ReadRequest, SegmentHeader, TerminateControl, READ_REQUEST_LEN,
    TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use crate::wire::mpa;

mod direct;
pub use direct::DirectPlacement;

/// Resource limits of one connection.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest ULPDU (DDP segment incl. header) we send; bigger messages are
    /// segmented. At most 65535 (MPA's 16-bit length).
    pub max_ulpdu: usize,
    /// Send queue depth.
    pub max_send_wr: usize,
    /// Receive queue depth.
    pub max_recv_wr: usize,
    /// Tagged payloads with at least this many bytes still to come are read straight
    /// into the target region ([`Connection::poll_direct`]); 0 turns that off.
    pub direct_placement_min: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_ulpdu: 65_516,
            max_send_wr: 4096,
            max_recv_wr: 4096,
            direct_placement_min: 16 * 1024,
        }
    }
}

#[derive(Debug)]
enum State {
    Open,
    Closed(DisconnectReason),
}

/// Which bytes a message carries.
enum Source {
    Gather {
        sgl: Vec<LocalSge>,
        idx: usize,
        off: usize,
    },
    Region {
        region: ResolvedRegion,
        offset: u64,
    },
    Inline(Bytes),
}

enum TxKind {
    Untagged {
        opcode: Opcode,
        qn: u32,
        msn: u32,
        rsvd_ulp: u32,
    },
    Tagged {
        opcode: Opcode,
        stag: u32,
        to: u64,
    },
}

/// A message being segmented onto the wire.
struct TxMsg {
    /// Send-queue sequence number to complete when fully emitted.
    seq: Option<u64>,
    kind: TxKind,
    src: Source,
    total: usize,
    sent: usize,
    /// When done: this was a Read Request; start expecting its response.
    read: Option<OutRead>,
    /// When done: this was a Read Response; one inbound read fewer in flight.
    response: bool,
}

struct OutRead {
    seq: u64,
    sink: ResolvedRegion,
    sink_stag: u32,
    sink_to: u64,
    len: u64,
    received: u64,
}

struct SqEntry {
    wr_id: u64,
    opcode: WcOpcode,
    len: usize,
    status: Option<WcStatus>,
}

struct RxSend {
    wr: RecvWr,
    msn: u32,
    placed: usize,
    cap: usize,
}

/// One iWARP connection after MPA setup: RDMAP over DDP over MPA FPDUs.
pub struct Connection {
    /// The protection domain and its STag table, which tagged placements, Read
    /// Requests and remote invalidations are checked against.
    pd: SoftwarePd,
    crc: bool,
    ird: usize,
    ord: usize,
    limits: Limits,
    state: State,
    hold_until: Option<Instant>,
    terminate: Option<TerminateCode>,
    // Send side.
    sq: VecDeque<(u64, SendWr)>,
    cur: Option<TxMsg>,
    responses: VecDeque<TxMsg>,
    tx_msn: [u32; 3],
    reads_out: VecDeque<OutRead>,
    sq_order: VecDeque<SqEntry>,
    sq_base: u64,
    next_seq: u64,
    // Receive side.
    rq: VecDeque<RecvWr>,
    rx_msn: [u32; 3],
    rx_cur: Option<RxSend>,
    inbound_reads: usize,
    /// A direct placement in progress (see `direct`).
    direct: Option<direct::DirectState>,
    /// Pad and CRC bytes of a directly placed FPDU still to skip.
    skip_trailer: usize,
    completions: VecDeque<Completion>,
    events: VecDeque<QpEvent>,
}

fn check_local(pd: &ProtectionDomain, s: &LocalSge, need: Access) -> Result<(), PostError> {
    let ok = s.mr.pd_id() == pd.id()
        && s.mr.access().contains(need)
        && s.offset.checked_add(s.len).is_some_and(|e| e <= s.mr.len());
    if ok {
        Ok(())
    } else {
        Err(PostError::LocalProtection)
    }
}

impl Connection {
    /// A connection in the data-transfer phase.
    ///
    /// `first_send_delay`: when we are the active side, hold every FPDU until `now +
    /// delay` (works around the siw accept race, docs/linux-facts.md).
    pub fn new(
        pd: SoftwarePd,
        neg: &Negotiated,
        limits: Limits,
        now: Instant,
        first_send_delay: std::time::Duration,
    ) -> Connection {
        let hold_until =
            (neg.active && !first_send_delay.is_zero()).then(|| now + first_send_delay);
        let mut limits = limits;
        // A Read Request is never segmented (RFC 5040 §4.4), so the smallest usable
        // ULPDU holds its untagged header and 28-byte body.
        limits.max_ulpdu = limits
            .max_ulpdu
            .clamp(UNTAGGED_HEADER_LEN + READ_REQUEST_LEN, 65_535);
        Connection {
            pd,
            crc: neg.crc,
            ird: neg.ird as usize,
            ord: neg.ord as usize,
            limits,
            state: State::Open,
            hold_until,
            terminate: None,
            sq: VecDeque::new(),
            cur: None,
            responses: VecDeque::new(),
            // RFC 5041 §5.1: "The MSN ... MUST be set to one (1) for the first DDP
            // Message on each queue".
            tx_msn: [1; 3],
            reads_out: VecDeque::new(),
            sq_order: VecDeque::new(),
            sq_base: 0,
            next_seq: 0,
            rq: VecDeque::new(),
            rx_msn: [1; 3],
            rx_cur: None,
            inbound_reads: 0,
            direct: None,
            skip_trailer: 0,
            completions: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// CRC in use.
    pub fn crc(&self) -> bool {
        self.crc
    }

    /// True until the connection ends.
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open)
    }

    /// Why the connection ended, once it has.
    pub fn close_reason(&self) -> Option<&DisconnectReason> {
        match &self.state {
            State::Open => None,
            State::Closed(r) => Some(r),
        }
    }

    /// True once closed and the last FPDU (a Terminate, if any) has been handed out:
    /// the driver should flush and close the stream.
    pub fn is_finished(&self) -> bool {
        !self.is_open() && self.terminate.is_none()
    }

    /// When the driver must call [`Connection::poll_transmit`] again even without
    /// other events (end of the first-send hold).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.hold_until
    }

    // ---------------------------------------------------------------- posting

    /// Posts a send-queue work request.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        if !self.is_open() {
            return Err(PostError::NotConnected);
        }
        if self.sq.len() >= self.limits.max_send_wr {
            return Err(PostError::QueueFull);
        }
        for s in &wr.sgl {
            check_local(&self.pd, s, Access::NONE)?;
        }
        let (opcode, len) = match &wr.op {
            SendOp::RdmaRead { sink, .. } => {
                check_local(&self.pd, sink, Access::LOCAL_WRITE)?;
                if self.ord == 0 {
                    return Err(PostError::NoReadCredits);
                }
                (WcOpcode::RdmaRead, sink.len)
            }
            SendOp::RdmaWrite(_) => (WcOpcode::RdmaWrite, wr.len()),
            SendOp::LocalInvalidate(_) => (WcOpcode::LocalInvalidate, 0),
            _ => (WcOpcode::Send, wr.len()),
        };
        // RFC 5040 §5.3 / §4.4: message and Read sizes are 32-bit quantities.
        if u32::try_from(len).is_err() {
            return Err(PostError::TooLong);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.sq_order.push_back(SqEntry {
            wr_id: wr.wr_id,
            opcode,
            len,
            status: None,
        });
        self.sq.push_back((seq, wr));
        Ok(())
    }

    /// Posts a receive buffer for the next incoming Send.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if !self.is_open() {
            return Err(PostError::NotConnected);
        }
        if self.rq.len() >= self.limits.max_recv_wr {
            return Err(PostError::QueueFull);
        }
        for s in &wr.sgl {
            check_local(&self.pd, s, Access::LOCAL_WRITE)?;
        }
        self.rq.push_back(wr);
        Ok(())
    }

    /// Local disconnect: everything outstanding is flushed.
    pub fn close(&mut self) {
        self.close_with(DisconnectReason::Local, None);
    }

    /// Next completion.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<QpEvent> {
        self.events.pop_front()
    }

    /// True when [`Connection::poll_completion`] has something.
    pub fn has_completions(&self) -> bool {
        !self.completions.is_empty()
    }

    /// True when [`Connection::poll_event`] has something.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// True when [`Connection::poll_transmit`] may have something to do: work is
    /// queued or in progress, a Terminate is pending, or the connection ended (the
    /// driver then flushes and closes). False means a driver need not wake its
    /// transmit side.
    pub fn wants_transmit(&self) -> bool {
        !self.is_open()
            || self.terminate.is_some()
            || self.cur.is_some()
            || !self.responses.is_empty()
            || !self.sq.is_empty()
    }

    // ---------------------------------------------------------------- closing

    fn complete_seq(&mut self, seq: u64, status: WcStatus, len: Option<usize>) {
        let Some(i) = seq.checked_sub(self.sq_base) else {
            return;
        };
        if let Some(e) = self.sq_order.get_mut(i as usize) {
            if e.status.is_none() {
                e.status = Some(status);
                if let Some(l) = len {
                    e.len = l;
                }
            }
        }
        // Send-queue completions are delivered in posting order.
        while self.sq_order.front().is_some_and(|e| e.status.is_some()) {
            if let Some(e) = self.sq_order.pop_front() {
                self.sq_base += 1;
                let status = e.status.unwrap_or(WcStatus::Flushed);
                let len = if status == WcStatus::Success {
                    e.len
                } else {
                    0
                };
                self.completions
                    .push_back(Completion::new(e.wr_id, e.opcode, status, len));
            }
        }
    }

    fn close_with(&mut self, reason: DisconnectReason, head_read: Option<WcStatus>) {
        if !self.is_open() {
            return;
        }
        tracing::debug!(?reason, "iwarp connection closing");
        self.state = State::Closed(reason.clone());
        self.events.push_back(QpEvent::Disconnected(reason));
        self.hold_until = None;
        if let Some(rx) = self.rx_cur.take() {
            self.completions.push_back(Completion::new(
                rx.wr.wr_id,
                WcOpcode::Recv,
                WcStatus::Flushed,
                0,
            ));
        }
        let mut first = head_read;
        let reads: Vec<u64> = self.reads_out.drain(..).map(|r| r.seq).collect();
        for seq in reads {
            self.complete_seq(seq, first.take().unwrap_or(WcStatus::Flushed), None);
        }
        if let Some(seq) = self.cur.take().and_then(|m| m.seq) {
            self.complete_seq(seq, WcStatus::Flushed, None);
        }
        let pending: Vec<u64> = self.sq.drain(..).map(|(s, _)| s).collect();
        for seq in pending {
            self.complete_seq(seq, WcStatus::Flushed, None);
        }
        self.responses.clear();
        for wr in self.rq.drain(..) {
            self.completions.push_back(Completion::new(
                wr.wr_id,
                WcOpcode::Recv,
                WcStatus::Flushed,
                0,
            ));
        }
    }

    fn fail(&mut self, e: ProtocolError) {
        if !self.is_open() {
            return;
        }
        let code = e.terminate();
        tracing::debug!(error = %e, ?code, "iwarp protocol error, sending Terminate");
        // RFC 5040 §7.1: "the RDMAP layer MUST send a Terminate message ... and
        // terminate the stream".
        self.terminate = Some(code);
        self.close_with(
            DisconnectReason::LocalError {
                layer: code.layer,
                etype: code.etype,
                code: code.code,
            },
            None,
        );
    }

    /// The stream ended (peer closed).
    pub fn handle_eof(&mut self) {
        let reason = if self.rx_cur.is_some() || !self.reads_out.is_empty() {
            DisconnectReason::Transport(std::io::ErrorKind::UnexpectedEof)
        } else {
            DisconnectReason::PeerClosed
        };
        self.close_with(reason, None);
    }

    /// The stream failed.
    pub fn handle_transport_error(&mut self, kind: std::io::ErrorKind) {
        self.close_with(DisconnectReason::Transport(kind), None);
    }

    // ---------------------------------------------------------------- receive

    /// Consumes complete FPDUs from the front of `buf`, placing data and generating
    /// completions. Partial FPDUs stay in `buf`. After the connection ends, input is
    /// discarded.
    pub fn handle_input(&mut self, buf: &mut BytesMut) {
        if self.skip_trailer > 0 {
            // The pad and (zero) CRC field of a directly placed FPDU.
            let n = self.skip_trailer.min(buf.len());
            let _ = buf.split_to(n);
            self.skip_trailer -= n;
        }
        while self.is_open() && self.skip_trailer == 0 {
            match mpa::take_fpdu(buf, self.crc) {
                Ok(None) => return,
                Ok(Some(f)) => {
                    if let Err(e) = self.on_segment(f.ulpdu) {
                        self.fail(e);
                    }
                }
                Err(e) => self.fail(e.into()),
            }
        }
        if !self.is_open() {
            buf.clear();
        }
    }

    fn on_segment(&mut self, ulpdu: Bytes) -> Result<(), ProtocolError> {
        let (h, hl) = SegmentHeader::parse(&ulpdu)?;
        let payload = &ulpdu[hl..];
        match h.ddp {
            DdpHeader::Tagged { stag, to } => match h.opcode {
                Opcode::RDMA_WRITE => self.on_write(stag, to, payload),
                Opcode::READ_RESPONSE => self.on_read_response(stag, to, payload, h.last),
                // RFC 5040 §4.2: only Write and Read Response use tagged buffers.
                op => Err(ProtocolError::UnexpectedOpcode(op.0)),
            },
            DdpHeader::Untagged {
                rsvd_ulp,
                qn,
                msn,
                mo,
            } => {
                // RFC 5041 §7.2: queue numbers the ULP does not define are "Invalid QN".
                if qn > queue::TERMINATE {
                    return Err(ProtocolError::InvalidQueue(qn));
                }
                if h.opcode.queue() != Some(qn) {
                    return Err(ProtocolError::UnexpectedOpcode(h.opcode.0));
                }
                match qn {
                    queue::SEND => self.on_send(h.opcode, rsvd_ulp, msn, mo, h.last, payload),
                    queue::READ_REQUEST => self.on_read_request(msn, mo, h.last, payload),
                    _ => self.on_terminate(payload),
                }
            }
        }
    }

    fn on_write(&mut self, stag: u32, to: u64, payload: &[u8]) -> Result<(), ProtocolError> {
        // RFC 5041 §5.2 / §7.2: a tagged segment is placed only after its STag,
        // bounds and (RFC 5040 §5.2) rights are validated.
        let region = self
            .pd
            .resolve(STag(stag), to, payload.len() as u64, Access::REMOTE_WRITE)
            .map_err(ProtocolError::Tagged)?;
        region.place(to, payload).map_err(ProtocolError::Tagged)
    }

    fn on_read_response(
        &mut self,
        stag: u32,
        to: u64,
        payload: &[u8],
        last: bool,
    ) -> Result<(), ProtocolError> {
        let Some(r) = self.reads_out.front_mut() else {
            return Err(ProtocolError::UnexpectedOpcode(Opcode::READ_RESPONSE.0));
        };
        let len = payload.len() as u64;
        // RFC 5040 §5.5: Read Responses arrive in Read Request order; on an in-order
        // stream each segment continues where the previous one ended.
        if stag != r.sink_stag
            || Some(to) != r.sink_to.checked_add(r.received)
            || r.received + len > r.len
        {
            return Err(ProtocolError::ReadResponseMismatch);
        }
        r.sink.place(to, payload).map_err(ProtocolError::Tagged)?;
        r.received += len;
        if last {
            if r.received != r.len {
                return Err(ProtocolError::ReadResponseMismatch);
            }
            let seq = r.seq;
            let n = r.len as usize;
            self.reads_out.pop_front();
            self.complete_seq(seq, WcStatus::Success, Some(n));
        }
        Ok(())
    }

    fn on_send(
        &mut self,
        opcode: Opcode,
        rsvd_ulp: u32,
        msn: u32,
        mo: u32,
        last: bool,
        payload: &[u8],
    ) -> Result<(), ProtocolError> {
        let mut rx = match self.rx_cur.take() {
            Some(rx) => {
                if msn != rx.msn {
                    return Err(ProtocolError::MsnRange {
                        got: msn,
                        want: rx.msn,
                    });
                }
                rx
            }
            None => {
                // RFC 5041 §5.3: MSN increases by one per message on each queue.
                let want = self.rx_msn[0];
                if msn != want {
                    return Err(ProtocolError::MsnRange { got: msn, want });
                }
                // RFC 5041 §7.2 / RFC 5040 §5.3: a Send with no posted buffer is an
                // error ("Invalid MSN - no buffer available"), never buffered.
                let wr = self.rq.pop_front().ok_or(ProtocolError::NoBuffer)?;
                let cap = wr.capacity();
                RxSend {
                    wr,
                    msn,
                    placed: 0,
                    cap,
                }
            }
        };
        if mo as usize != rx.placed {
            self.rx_cur = Some(rx);
            return Err(ProtocolError::InvalidMo(mo));
        }
        if rx.placed + payload.len() > rx.cap {
            // RFC 5041 §7.2: "DDP Message too long for available buffer".
            self.completions.push_back(Completion::new(
                rx.wr.wr_id,
                WcOpcode::Recv,
                WcStatus::LocalLengthError,
                0,
            ));
            return Err(ProtocolError::MessageTooLong);
        }
        // Scatter into the posted buffer at the message offset.
        let mut skip = rx.placed;
        let mut data = payload;
        for sge in &rx.wr.sgl {
            if data.is_empty() {
                break;
            }
            if skip >= sge.len {
                skip -= sge.len;
                continue;
            }
            let n = (sge.len - skip).min(data.len());
            ResolvedRegion::local(&sge.mr)
                .place((sge.offset + skip) as u64, &data[..n])
                .map_err(|_| ProtocolError::MessageTooLong)?;
            data = &data[n..];
            skip = 0;
        }
        rx.placed += payload.len();
        if !last {
            self.rx_cur = Some(rx);
            return Ok(());
        }
        self.rx_msn[0] = self.rx_msn[0].wrapping_add(1);
        let mut c = Completion::new(rx.wr.wr_id, WcOpcode::Recv, WcStatus::Success, rx.placed);
        if opcode == Opcode::SEND_INVALIDATE || opcode == Opcode::SEND_SE_INVALIDATE {
            // RFC 5040 §5.3.1: Send with Invalidate invalidates the STag before the
            // message is delivered.
            let stag = STag(rsvd_ulp);
            if let Err(e) = self.pd.invalidate(stag) {
                self.completions.push_back(Completion::new(
                    rx.wr.wr_id,
                    WcOpcode::Recv,
                    WcStatus::RemoteOperationError,
                    0,
                ));
                return Err(ProtocolError::CannotInvalidate(e));
            }
            c.invalidated = Some(stag);
        }
        c.solicited = opcode == Opcode::SEND_SE || opcode == Opcode::SEND_SE_INVALIDATE;
        self.completions.push_back(c);
        Ok(())
    }

    fn on_read_request(
        &mut self,
        msn: u32,
        mo: u32,
        last: bool,
        payload: &[u8],
    ) -> Result<(), ProtocolError> {
        let want = self.rx_msn[1];
        if msn != want {
            return Err(ProtocolError::MsnRange { got: msn, want });
        }
        // A Read Request is one segment (RFC 5040 §4.4: fixed 28-byte message).
        if mo != 0 || !last {
            return Err(ProtocolError::InvalidMo(mo));
        }
        self.rx_msn[1] = want.wrapping_add(1);
        let rr = ReadRequest::parse(payload)?;
        // RFC 5040 §6.4: the responder queues at most IRD Read Requests; more is an
        // overflow of untagged queue 1.
        if self.inbound_reads >= self.ird {
            return Err(ProtocolError::IrdExceeded);
        }
        // RFC 5040 §6.4: the Data Source STag, offset, size and rights are
        // validated before any data is read.
        let region = self
            .pd
            .resolve(
                STag(rr.src_stag),
                rr.src_to,
                u64::from(rr.size),
                Access::REMOTE_READ,
            )
            .map_err(ProtocolError::ReadSource)?;
        self.inbound_reads += 1;
        self.responses.push_back(TxMsg {
            seq: None,
            kind: TxKind::Tagged {
                opcode: Opcode::READ_RESPONSE,
                stag: rr.sink_stag,
                to: rr.sink_to,
            },
            src: Source::Region {
                region,
                offset: rr.src_to,
            },
            total: rr.size as usize,
            sent: 0,
            read: None,
            response: true,
        });
        Ok(())
    }

    fn on_terminate(&mut self, payload: &[u8]) -> Result<(), ProtocolError> {
        let t = TerminateControl::parse(payload)?;
        tracing::debug!(?t, "iwarp Terminate received");
        // The failing operation is most likely the oldest Read outstanding.
        let head = match (t.layer, t.etype) {
            (0, 1) | (1, 1) => WcStatus::RemoteAccessError,
            _ => WcStatus::RemoteOperationError,
        };
        self.close_with(
            DisconnectReason::RemoteError {
                layer: t.layer,
                etype: t.etype,
                code: t.code,
            },
            Some(head),
        );
        Ok(())
    }

    // ---------------------------------------------------------------- transmit

    /// Appends FPDUs to `batch` until it holds at least `budget` bytes or nothing is
    /// ready. Returns true if anything was added.
    pub fn poll_transmit(&mut self, now: Instant, batch: &mut TxBatch, budget: usize) -> bool {
        let start = batch.len();
        if let Some(code) = self.terminate.take() {
            self.emit_terminate(code, batch);
            return true;
        }
        if !self.is_open() {
            return false;
        }
        if let Some(t) = self.hold_until {
            if now < t {
                return false;
            }
            self.hold_until = None;
        }
        while batch.len() - start < budget {
            let mut msg = match self.cur.take() {
                Some(m) => m,
                None => match self.next_message() {
                    Some(m) => m,
                    None => break,
                },
            };
            let done = self.emit_segment(&mut msg, batch);
            if done {
                self.finish_message(msg);
            } else {
                self.cur = Some(msg);
            }
            if !self.is_open() {
                break;
            }
        }
        batch.len() > start
    }

    fn finish_message(&mut self, msg: TxMsg) {
        if let Some(r) = msg.read {
            self.reads_out.push_back(r);
        } else if let Some(seq) = msg.seq {
            self.complete_seq(seq, WcStatus::Success, None);
        }
        if msg.response {
            self.inbound_reads = self.inbound_reads.saturating_sub(1);
        }
    }

    fn next_message(&mut self) -> Option<TxMsg> {
        if let Some(r) = self.responses.pop_front() {
            return Some(r);
        }
        let (seq, wr) = loop {
            let (_, front) = self.sq.front()?;
            // RFC 5040 §6.3 / RFC 6581: no more than ORD Read Requests outstanding; the
            // send queue waits (in order) until a Read Response completes.
            if matches!(front.op, SendOp::RdmaRead { .. }) && self.reads_out.len() >= self.ord {
                return None;
            }
            let (seq, wr) = self.sq.pop_front()?;
            match wr.op {
                SendOp::LocalInvalidate(stag) => self.local_invalidate(seq, stag),
                _ => break (seq, wr),
            }
        };
        let total = wr.len();
        let send = |opcode: Opcode, inv: u32, msn: &mut u32| {
            let m = *msn;
            *msn = msn.wrapping_add(1);
            TxKind::Untagged {
                opcode,
                qn: queue::SEND,
                msn: m,
                rsvd_ulp: inv,
            }
        };
        let kind = match &wr.op {
            SendOp::Send => send(Opcode::SEND, 0, &mut self.tx_msn[0]),
            SendOp::SendWithInvalidate(s) => {
                send(Opcode::SEND_INVALIDATE, s.0, &mut self.tx_msn[0])
            }
            SendOp::SendWithSolicitedEvent => send(Opcode::SEND_SE, 0, &mut self.tx_msn[0]),
            SendOp::SendWithSolicitedEventAndInvalidate(s) => {
                send(Opcode::SEND_SE_INVALIDATE, s.0, &mut self.tx_msn[0])
            }
            SendOp::RdmaWrite(r) => TxKind::Tagged {
                opcode: Opcode::RDMA_WRITE,
                stag: r.stag.0,
                to: r.offset,
            },
            SendOp::LocalInvalidate(_) => unreachable!("executed by the loop above"),
            SendOp::RdmaRead { remote, sink } => {
                let msn = self.tx_msn[1];
                self.tx_msn[1] = msn.wrapping_add(1);
                let rr = ReadRequest {
                    sink_stag: sink.mr.stag().0,
                    sink_to: sink.offset as u64,
                    size: sink.len as u32,
                    src_stag: remote.stag.0,
                    src_to: remote.offset,
                };
                let mut body = Vec::with_capacity(28);
                rr.emit(&mut body);
                return Some(TxMsg {
                    seq: Some(seq),
                    kind: TxKind::Untagged {
                        opcode: Opcode::READ_REQUEST,
                        qn: queue::READ_REQUEST,
                        msn,
                        rsvd_ulp: 0,
                    },
                    total: body.len(),
                    src: Source::Inline(body.into()),
                    sent: 0,
                    read: Some(OutRead {
                        seq,
                        sink: ResolvedRegion::local(&sink.mr),
                        sink_stag: rr.sink_stag,
                        sink_to: rr.sink_to,
                        len: u64::from(rr.size),
                        received: 0,
                    }),
                    response: false,
                });
            }
        };
        Some(TxMsg {
            seq: Some(seq),
            kind,
            src: Source::Gather {
                sgl: wr.sgl,
                idx: 0,
                off: 0,
            },
            total,
            sent: 0,
            read: None,
            response: false,
        })
    }

    /// A local invalidation reached the head of the send queue: it puts nothing on
    /// the wire and completes (in posting order, `complete_seq`) once the work posted
    /// before it has been started.
    fn local_invalidate(&mut self, seq: u64, stag: STag) {
        let status = match self.pd.invalidate(stag) {
            Ok(()) => WcStatus::Success,
            Err(e) => {
                tracing::debug!(stag = stag.0, error = %e, "local invalidate failed");
                WcStatus::LocalProtectionError
            }
        };
        self.complete_seq(seq, status, None);
    }

    /// Emits the next segment of `msg`; true when it was the last.
    fn emit_segment(&mut self, msg: &mut TxMsg, batch: &mut TxBatch) -> bool {
        let hdr_len = match msg.kind {
            TxKind::Tagged { .. } => TAGGED_HEADER_LEN,
            TxKind::Untagged { .. } => UNTAGGED_HEADER_LEN,
        };
        let room = self.limits.max_ulpdu - hdr_len;
        let n = room.min(msg.total - msg.sent);
        let last = msg.sent + n == msg.total;
        let header = match msg.kind {
            TxKind::Tagged { opcode, stag, to } => SegmentHeader {
                last,
                opcode,
                ddp: DdpHeader::Tagged {
                    stag,
                    to: to.wrapping_add(msg.sent as u64),
                },
            },
            TxKind::Untagged {
                opcode,
                qn,
                msn,
                rsvd_ulp,
            } => SegmentHeader {
                last,
                opcode,
                ddp: DdpHeader::Untagged {
                    rsvd_ulp,
                    qn,
                    msn,
                    mo: msg.sent as u32,
                },
            },
        };
        let ulpdu_len = hdr_len + n;
        let crc_on = self.crc;
        let mut crc = 0u32;
        let add_scratch = |batch: &mut TxBatch, crc: &mut u32, f: &dyn Fn(&mut Vec<u8>)| {
            let s = batch.scratch_len();
            batch.push_scratch(|v| f(v));
            if crc_on {
                *crc = crc32c::crc32c_append(*crc, batch.scratch(s..batch.scratch_len()));
            }
        };
        add_scratch(batch, &mut crc, &|v: &mut Vec<u8>| {
            v.extend_from_slice(&(ulpdu_len as u16).to_be_bytes());
            header.emit(v);
        });
        // Payload.
        let mut want = n;
        match &mut msg.src {
            Source::Inline(b) => {
                let piece = b.slice(msg.sent..msg.sent + n);
                if crc_on {
                    crc = crc32c::crc32c_append(crc, &piece);
                }
                batch.push_data(piece);
            }
            Source::Region { region, offset } => {
                let at = *offset + msg.sent as u64;
                if let Ok(Some(piece)) = region.shared_range(at, n) {
                    // A region registered from the consumer's bytes
                    // (`ProtectionDomain::register_bytes`): sent from them, no copy.
                    if crc_on {
                        crc = crc32c::crc32c_append(crc, &piece);
                    }
                    batch.push_data(piece);
                } else {
                    let s = batch.scratch_len();
                    let mut res = Ok(());
                    batch.push_scratch(|v| {
                        let before = v.len();
                        // COPY: region bytes into the FPDU (a Read Response from a
                        // region of owned, mutable memory).
                        res = region.copy_out(at, n, v);
                        if res.is_err() {
                            // Region shrank under us (deregistered): send zeros rather
                            // than stall; the ULP broke its own registration.
                            v.truncate(before);
                            v.resize(before + n, 0);
                        }
                    });
                    if crc_on {
                        crc = crc32c::crc32c_append(crc, batch.scratch(s..batch.scratch_len()));
                    }
                }
            }
            Source::Gather { sgl, idx, off } => {
                while want > 0 {
                    let Some(sge) = sgl.get(*idx) else { break };
                    let avail = sge.len - *off;
                    if avail == 0 {
                        *idx += 1;
                        *off = 0;
                        continue;
                    }
                    let k = avail.min(want);
                    let region = ResolvedRegion::local(&sge.mr);
                    let at = (sge.offset + *off) as u64;
                    if let Ok(Some(piece)) = region.shared_range(at, k) {
                        // A region registered from the consumer's bytes
                        // (`ProtectionDomain::register_bytes`): sent from them, no
                        // copy.
                        if crc_on {
                            crc = crc32c::crc32c_append(crc, &piece);
                        }
                        batch.push_data(piece);
                    } else {
                        let s = batch.scratch_len();
                        batch.push_scratch(|v| {
                            let before = v.len();
                            // COPY: local-SGE payload copied out of its region (owned,
                            // mutable memory behind a lock).
                            if region.copy_out(at, k, v).is_err() {
                                v.truncate(before);
                                v.resize(before + k, 0);
                            }
                        });
                        if crc_on {
                            crc = crc32c::crc32c_append(crc, batch.scratch(s..batch.scratch_len()));
                        }
                    }
                    *off += k;
                    want -= k;
                }
            }
        }
        let pad = mpa::pad_len(ulpdu_len);
        add_scratch(batch, &mut crc, &|v: &mut Vec<u8>| {
            v.extend(std::iter::repeat(0).take(pad));
        });
        let field = mpa::crc_field(if crc_on { crc } else { 0 });
        batch.push_scratch(|v| v.extend_from_slice(&field));
        msg.sent += n;
        last
    }

    fn emit_terminate(&mut self, code: TerminateCode, batch: &mut TxBatch) {
        let msn = self.tx_msn[2];
        self.tx_msn[2] = msn.wrapping_add(1);
        let mut ulpdu = Vec::with_capacity(UNTAGGED_HEADER_LEN + 4);
        SegmentHeader {
            last: true,
            opcode: Opcode::TERMINATE,
            ddp: DdpHeader::Untagged {
                rsvd_ulp: 0,
                qn: queue::TERMINATE,
                msn,
                mo: 0,
            },
        }
        .emit(&mut ulpdu);
        // RFC 5040 §4.8: Terminate Control; no copies of the failed headers
        // (HdrCt = 0), which the RFC allows.
        TerminateControl {
            layer: code.layer,
            etype: code.etype,
            code: code.code,
            hdr_m: false,
            hdr_d: false,
            hdr_r: false,
        }
        .emit(&mut ulpdu);
        let crc = self.crc;
        batch.push_scratch(|v| mpa::encode_fpdu(&ulpdu, crc, v));
    }
}
