//! A phone's WebSocket session (docs/api.md, Phone WebSocket): a transport that carries frames
//! between the socket and the phone's [`Phone`] actor, and watches for silence.
//!
//! The session reads and writes the bare TCP connection with actix-http's RFC 6455 codec and
//! holds no buffer while the phone is idle (bytes are read only once the socket is readable, and
//! the buffer is released when every frame in it was decoded): 10,000 idle phones cost their
//! actors and sockets, not 10,000 pairs of HTTP buffers.
//!
//! The Phone actor only ever sees a [`Link`] (`actors::link`): a bounded channel of outgoing
//! frames. The device API's transport (`actors::device_link`: server-sent events with REST
//! fetch) provides the same link. The session reaches the registry through
//! [`TransportRecipients`], never its address.
//!
//! A device's SIM lines share its session (docs/api.md, "Phones"): their `send` frames name
//! their `sim_slot`, and the session remembers which slot each message left on, so a report on
//! it reaches the line's actor (through the Registry, [`LineFrame`]) even when the phone does
//! not repeat the slot; a `received` frame names the slot it arrived on.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix::Addr;
use actix_codec::{Decoder, Encoder};
use actix_http::ws::{CloseCode, CloseReason, Codec, Frame, Item, Message as WsMessage};
use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::link::{LINK_CAPACITY, Link, Outgoing, next_session_id};
use super::phone::{Phone, Report};
use super::registry::{Connected, Disconnected, LineFrame, Seen, TransportRecipients};
use crate::domain::protocol::{FrameErrorCode, FrameSlot, PhoneFrame, ServerFrame};
use crate::domain::sim_slot::SimSlot;

/// How often a live session refreshes the phone's last_seen_at.
const SEEN_EVERY: Duration = Duration::from_secs(5);

/// Largest WebSocket message a phone may send, in bytes (a frame or a fragmented message).
const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// Bytes read from the socket at a time, in bytes.
const READ_CHUNK_BYTES: usize = 4 * 1024;

/// Frames the Phone actor queued that one socket write may carry.
const FRAMES_PER_WRITE: usize = 64;

/// Messages of SIM lines whose slot a session remembers until their final report; past it
/// the memory starts over (a report naming its `sim_slot` still reaches its line).
const MAX_LINE_SENDS: usize = 4096;

/// How long the session waits for the phone's answer to its close frame.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How many sessions of one server are running, so a graceful stop can wait for their close
/// frames: sessions are tasks of their own, which the HTTP server's stop does not count.
#[derive(Debug, Default)]
pub struct LiveSessions {
    running: AtomicU64,
}

impl LiveSessions {
    /// Sessions still running.
    pub fn count(&self) -> u64 {
        self.running.load(Ordering::Acquire)
    }

    /// Waits until every session ended, or `limit` passed; true when none is left.
    pub async fn ended_within(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while self.count() > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }
}

/// Counts one running session for as long as it lives.
struct Running<'a>(&'a LiveSessions);

impl<'a> Running<'a> {
    fn enter(sessions: &'a LiveSessions) -> Running<'a> {
        sessions.running.fetch_add(1, Ordering::AcqRel);
        Running(sessions)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Runs one WebSocket session on `io` (already upgraded; `early` holds bytes the phone sent
/// right behind its upgrade request) until either side closes or the phone falls silent for
/// `heartbeat_timeout`. Ping/pong and every frame count as life.
pub async fn run<T: SessionIo>(
    phone_id: Uuid,
    registry: std::sync::Arc<TransportRecipients>,
    sessions: std::sync::Arc<LiveSessions>,
    io: T,
    early: BytesMut,
    heartbeat_timeout: Duration,
) {
    let _running = Running::enter(&sessions);
    let mut socket = Socket::new(io, early);
    let session_id = next_session_id();
    let (tx, mut rx) = mpsc::channel(LINK_CAPACITY);
    let link = Link { session_id, tx };
    let phone: Addr<Phone> = match registry.connected.send(Connected { phone_id, link }).await {
        Ok(Some(addr)) => addr,
        _ => {
            socket
                .close(reason(CloseCode::Policy, "phone is not paired"))
                .await;
            return;
        }
    };
    let mut line_sends: HashMap<Uuid, SimSlot> = HashMap::new();
    let mut last_heard = tokio::time::Instant::now();
    let mut last_reported = last_heard;
    let check_every = (heartbeat_timeout / 4).max(Duration::from_millis(50));
    let mut ticker = tokio::time::interval(check_every);
    let ending = loop {
        tokio::select! {
            incoming = socket.next() => {
                last_heard = tokio::time::Instant::now();
                if last_heard.duration_since(last_reported) >= SEEN_EVERY {
                    last_reported = last_heard;
                    registry.seen.do_send(Seen { phone_id });
                }
                let reply = match incoming {
                    Ok(Some(Incoming::Text(bytes))) => {
                        // RFC 6455 §8.1: a text message that is not UTF-8 fails the connection
                        // with 1007.
                        if std::str::from_utf8(&bytes).is_err() {
                            break Ending::Close(reason(CloseCode::Invalid, "text is not valid UTF-8"));
                        }
                        match serde_json::from_slice::<PhoneFrame>(&bytes)
                            .and_then(|frame| Ok((frame, FrameSlot::of(&bytes)?)))
                        {
                            Ok((frame, named)) => match frame.check_bounds() {
                                Ok(()) => {
                                    match slot_of(&frame, named, &mut line_sends) {
                                        Some(sim_slot) => registry.line_frame.do_send(LineFrame {
                                            device_id: phone_id,
                                            sim_slot,
                                            session_id,
                                            frame,
                                            done: None,
                                        }),
                                        None => phone.do_send(Report { session_id, frame }),
                                    }
                                    None
                                }
                                Err(refusal) => Some(error_frame(format!("frame refused: {refusal}"))),
                            },
                            Err(err) => Some(error_frame(format!("frame not understood: {err}"))),
                        }
                    }
                    Ok(Some(Incoming::Binary)) => Some(error_frame("frames are JSON text".into())),
                    Ok(Some(Incoming::Ping(bytes))) => Some(WsMessage::Pong(bytes)),
                    Ok(Some(Incoming::Pong)) => None,
                    Ok(Some(Incoming::Close)) => break Ending::Answer,
                    Ok(None) => break Ending::Gone,
                    Err(SocketError::Io(err)) => {
                        tracing::debug!(error = %err, "phone connection failed");
                        break Ending::Gone;
                    }
                    Err(SocketError::Protocol(code)) => break Ending::Close(reason(code, "protocol error")),
                };
                if let Some(reply) = reply
                    && !socket.write_within(heartbeat_timeout, [reply]).await
                {
                    break Ending::Gone;
                }
            }
            outgoing = rx.recv() => {
                // Everything already queued leaves in one write, in order.
                let mut batch = Vec::new();
                let mut close = None;
                let mut next = outgoing;
                loop {
                    match next {
                        Some(Outgoing::Frame(frame)) => {
                            if let ServerFrame::Send { message_id, sim_slot: Some(slot), .. } = *frame {
                                if line_sends.len() >= MAX_LINE_SENDS {
                                    line_sends.clear();
                                }
                                line_sends.insert(message_id, slot);
                            }
                            match serde_json::to_string(&frame) {
                                Ok(text) => batch.push(WsMessage::Text(text.into())),
                                Err(err) => tracing::error!(error = %err, "server frame not serialized"),
                            }
                        }
                        Some(Outgoing::Withdrawn { .. }) => {}
                        Some(Outgoing::Close { code, reason: text }) => {
                            close = Some(reason(CloseCode::Other(code), &text));
                            break;
                        }
                        None => {
                            close = Some(None);
                            break;
                        }
                    }
                    if batch.len() >= FRAMES_PER_WRITE {
                        break;
                    }
                    next = match rx.try_recv() {
                        Ok(item) => Some(item),
                        Err(_) => break,
                    };
                }
                let written = socket.write_within(heartbeat_timeout, batch).await;
                if !written {
                    break Ending::Gone;
                }
                if let Some(close) = close {
                    break Ending::Close(close);
                }
            }
            _ = ticker.tick() => {
                if last_heard.elapsed() > heartbeat_timeout {
                    break Ending::Close(reason(CloseCode::Policy, "heartbeat timeout"));
                }
            }
        }
    };
    // The close handshake below can take a while; the Phone actor's address is not needed for
    // it (a stopped Phone ends once its last address is gone).
    drop(phone);
    registry.disconnected.do_send(Disconnected {
        phone_id,
        session_id,
    });
    tracing::debug!(%phone_id, session_id, ending = ending.name(), "phone session ending");
    match ending {
        Ending::Close(close) => socket.close(close).await,
        Ending::Answer => socket.close(None).await,
        Ending::Gone => {}
    }
}

/// The SIM slot whose line a frame is about: the slot it names, else (for a report) the slot
/// its message was sent from on this session; None for the device itself. A final report
/// (`delivered`, `failed`) ends the memory of its message.
fn slot_of(
    frame: &PhoneFrame,
    named: Option<SimSlot>,
    line_sends: &mut HashMap<Uuid, SimSlot>,
) -> Option<SimSlot> {
    let remembered = match frame {
        PhoneFrame::Sent { message_id, .. } => line_sends.get(message_id).copied(),
        PhoneFrame::Delivered { message_id, .. } | PhoneFrame::Failed { message_id, .. } => {
            line_sends.remove(message_id)
        }
        PhoneFrame::Received { .. } | PhoneFrame::Heartbeat { .. } | PhoneFrame::Status(_) => None,
    };
    named.or(remembered)
}

/// How a session ends.
enum Ending {
    /// The server closes, with this reason.
    Close(Option<CloseReason>),
    /// The phone sent a close frame: answer it.
    Answer,
    /// The connection is gone (or stuck): nothing more to write.
    Gone,
}

impl Ending {
    fn name(&self) -> &'static str {
        match self {
            Ending::Close(_) => "server closes",
            Ending::Answer => "phone closed",
            Ending::Gone => "connection gone",
        }
    }
}

fn reason(code: CloseCode, text: &str) -> Option<CloseReason> {
    Some(CloseReason {
        code,
        description: Some(text.to_string()),
    })
}

fn error_frame(message: String) -> WsMessage {
    let frame = ServerFrame::Error {
        code: FrameErrorCode::BadFrame.as_str().to_string(),
        message,
    };
    // unwrap_or_default: a frame of two strings always serializes.
    WsMessage::Text(serde_json::to_string(&frame).unwrap_or_default().into())
}

/// A whole message from the phone.
enum Incoming {
    Text(Bytes),
    Binary,
    Ping(Bytes),
    Pong,
    Close,
}

#[derive(Debug)]
enum SocketError {
    Io(io::Error),
    /// The phone broke the WebSocket protocol; close with this code.
    Protocol(CloseCode),
}

/// A connection a session runs on: plain TCP, or TLS when the server has a certificate
/// (`server.tls`).
pub trait SessionIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static {
    /// Reads what is available into `buf`; 0 at end of stream. Cancel-safe.
    fn read_some(&mut self, buf: &mut BytesMut) -> impl Future<Output = io::Result<usize>>;
}

impl SessionIo for TcpStream {
    /// Waits for readiness before reserving buffer space, so an idle phone holds none.
    async fn read_some(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        loop {
            self.readable().await?;
            if buf.capacity() - buf.len() < READ_CHUNK_BYTES {
                buf.reserve(READ_CHUNK_BYTES);
            }
            match self.try_read_buf(buf) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
        }
    }
}

impl SessionIo for actix_tls::accept::rustls_0_23::TlsStream<TcpStream> {
    /// TLS records are read through rustls, which needs the buffer up front.
    async fn read_some(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        use tokio::io::AsyncReadExt;
        if buf.capacity() - buf.len() < READ_CHUNK_BYTES {
            buf.reserve(READ_CHUNK_BYTES);
        }
        self.read_buf(buf).await
    }
}

/// One server-side WebSocket connection over a bare TCP (or TLS) stream.
struct Socket<T> {
    io: T,
    codec: Codec,
    /// Bytes read and not yet decoded; empty (no allocation) while the phone is idle.
    read_buf: BytesMut,
    /// A fragmented message being assembled: whether it is text, and its bytes so far.
    fragments: Option<(bool, BytesMut)>,
}

impl<T: SessionIo> Socket<T> {
    fn new(io: T, early: BytesMut) -> Socket<T> {
        Socket {
            io,
            codec: Codec::new().max_size(MAX_MESSAGE_BYTES),
            read_buf: early,
            fragments: None,
        }
    }

    /// The next whole message; None at end of stream. Cancel-safe: its only await is the
    /// socket's readiness, and partial input stays in `self`.
    async fn next(&mut self) -> Result<Option<Incoming>, SocketError> {
        loop {
            while let Some(frame) = self.decode()? {
                if let Some(message) = self.assemble(frame)? {
                    return Ok(Some(message));
                }
            }
            match self.io.read_some(&mut self.read_buf).await {
                Ok(0) => return Ok(None),
                Ok(_) => {}
                Err(err) => return Err(SocketError::Io(err)),
            }
        }
    }

    /// One frame out of the read buffer, releasing the buffer once it is empty.
    fn decode(&mut self) -> Result<Option<Frame>, SocketError> {
        let frame = self.codec.decode(&mut self.read_buf).map_err(|err| {
            tracing::debug!(error = %err, "phone broke the WebSocket protocol");
            SocketError::Protocol(match err {
                actix_http::ws::ProtocolError::Overflow => CloseCode::Size,
                _ => CloseCode::Protocol,
            })
        })?;
        if self.read_buf.is_empty() && self.read_buf.capacity() > 0 {
            self.read_buf = BytesMut::new();
        }
        Ok(frame)
    }

    /// Joins fragments; a whole message when `frame` completes one.
    fn assemble(&mut self, frame: Frame) -> Result<Option<Incoming>, SocketError> {
        let whole = |text: bool, bytes: Bytes| {
            if text {
                Incoming::Text(bytes)
            } else {
                Incoming::Binary
            }
        };
        Ok(Some(match frame {
            Frame::Text(bytes) => Incoming::Text(bytes),
            Frame::Binary(_) => Incoming::Binary,
            Frame::Ping(bytes) => Incoming::Ping(bytes),
            Frame::Pong(_) => Incoming::Pong,
            Frame::Close(_) => Incoming::Close,
            Frame::Continuation(item) => match (item, self.fragments.take()) {
                (Item::FirstText(bytes), None) => {
                    self.fragments = Some((true, BytesMut::from(&bytes[..])));
                    return Ok(None);
                }
                (Item::FirstBinary(bytes), None) => {
                    self.fragments = Some((false, BytesMut::from(&bytes[..])));
                    return Ok(None);
                }
                (Item::Continue(bytes), Some((text, mut so_far))) => {
                    Self::extend(&mut so_far, &bytes)?;
                    self.fragments = Some((text, so_far));
                    return Ok(None);
                }
                (Item::Last(bytes), Some((text, mut so_far))) => {
                    Self::extend(&mut so_far, &bytes)?;
                    whole(text, so_far.freeze())
                }
                _ => return Err(SocketError::Protocol(CloseCode::Protocol)),
            },
        }))
    }

    fn extend(so_far: &mut BytesMut, more: &[u8]) -> Result<(), SocketError> {
        if so_far.len() + more.len() > MAX_MESSAGE_BYTES {
            return Err(SocketError::Protocol(CloseCode::Size));
        }
        so_far.extend_from_slice(more);
        Ok(())
    }

    /// Writes `messages` in one write; false when the socket failed or did not take them
    /// within `limit` (a phone that stops reading is treated as gone).
    async fn write_within(
        &mut self,
        limit: Duration,
        messages: impl IntoIterator<Item = WsMessage>,
    ) -> bool {
        let mut out = BytesMut::new();
        for message in messages {
            if self.codec.encode(message, &mut out).is_err() {
                return false;
            }
        }
        if out.is_empty() {
            return true;
        }
        matches!(
            tokio::time::timeout(limit, async {
                self.io.write_all(&out).await?;
                // A no-op on TCP; TLS may hold the last record until flushed.
                self.io.flush().await
            })
            .await,
            Ok(Ok(()))
        )
    }

    /// Sends a close frame, waits briefly for the phone's answer, and ends the connection.
    async fn close(mut self, reason: Option<CloseReason>) {
        if !self
            .write_within(CLOSE_GRACE, [WsMessage::Close(reason)])
            .await
        {
            return;
        }
        let _ = tokio::time::timeout(CLOSE_GRACE, async {
            while let Ok(Some(message)) = self.next().await {
                if matches!(message, Incoming::Close) {
                    break;
                }
            }
        })
        .await;
        let _ = self.io.shutdown().await;
    }
}
