//! A phone's WebSocket session (contract §6): a transport that carries frames between the
//! socket and the phone's [`Phone`](super::phone::Phone) actor, and watches for silence.
//!
//! The Phone actor only ever sees a [`Link`]: a bounded channel of outgoing frames. Another
//! transport (server-sent events with REST polling) can provide the same link later.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix::Addr;
use actix_ws::{CloseCode, CloseReason, Message as WsMessage, MessageStream, Session};
use futures_util::StreamExt;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::phone::{Phone, Report};
use super::registry::{Connected, Disconnected, Registry, Seen};
use crate::domain::protocol::{PhoneFrame, ServerFrame};

/// Frames buffered towards one phone before the session is considered stuck and closed.
pub const LINK_CAPACITY: usize = 1024;

/// What the Phone actor can tell its transport.
///
/// The frame is boxed: a tokio channel allocates its slots in blocks of 32 up front, so an
/// unboxed `ServerFrame` (over 100 bytes) made every idle session hold several KB; boxed, the
/// enum is a few words.
#[derive(Debug, Clone)]
pub enum Outgoing {
    Frame(Box<ServerFrame>),
    /// Close the session with this WebSocket close code.
    Close {
        code: u16,
        reason: String,
    },
}

/// A Phone actor's handle on its current transport.
#[derive(Debug, Clone)]
pub struct Link {
    /// Distinguishes sessions of the same phone, so a late `Disconnected` of a replaced session
    /// does not detach its successor.
    pub session_id: u64,
    pub tx: mpsc::Sender<Outgoing>,
}

impl Link {
    /// Queues a frame; false when the transport is gone or stuck.
    pub fn send(&self, frame: ServerFrame) -> bool {
        self.tx.try_send(Outgoing::Frame(Box::new(frame))).is_ok()
    }

    /// Asks the transport to close.
    pub fn close(&self, code: u16, reason: &str) {
        let _ = self.tx.try_send(Outgoing::Close {
            code,
            reason: reason.to_string(),
        });
    }
}

/// How often a live session refreshes the phone's last_seen_at.
const SEEN_EVERY: Duration = Duration::from_secs(5);

static NEXT_SESSION_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh session id.
pub fn next_session_id() -> u64 {
    NEXT_SESSION_ID.fetch_add(1, Ordering::Relaxed)
}

/// Runs one WebSocket session until either side closes or the phone falls silent for
/// `heartbeat_timeout`. Ping/pong and every frame count as life.
pub async fn run(
    phone_id: Uuid,
    registry: Addr<Registry>,
    mut session: Session,
    mut stream: MessageStream,
    heartbeat_timeout: Duration,
) {
    let session_id = next_session_id();
    let (tx, mut rx) = mpsc::channel(LINK_CAPACITY);
    let link = Link { session_id, tx };
    let phone: Addr<Phone> = match registry.send(Connected { phone_id, link }).await {
        Ok(Some(addr)) => addr,
        _ => {
            let _ = session
                .close(Some(CloseReason {
                    code: CloseCode::Policy,
                    description: Some("phone is not paired".into()),
                }))
                .await;
            return;
        }
    };
    let mut last_heard = tokio::time::Instant::now();
    let mut last_reported = last_heard;
    let check_every = (heartbeat_timeout / 4).max(Duration::from_millis(50));
    let mut ticker = tokio::time::interval(check_every);
    let close_reason = loop {
        tokio::select! {
            incoming = stream.next() => {
                let Some(Ok(message)) = incoming else {
                    break None;
                };
                last_heard = tokio::time::Instant::now();
                if last_heard.duration_since(last_reported) >= SEEN_EVERY {
                    last_reported = last_heard;
                    registry.do_send(Seen { phone_id });
                }
                match message {
                    WsMessage::Text(text) => match serde_json::from_str::<PhoneFrame>(&text) {
                        Ok(frame) => phone.do_send(Report { session_id, frame }),
                        Err(err) => {
                            let reply = ServerFrame::Error {
                                code: "bad_frame".into(),
                                message: format!("frame not understood: {err}"),
                            };
                            if send_frame(&mut session, &reply).await.is_err() {
                                break None;
                            }
                        }
                    },
                    WsMessage::Binary(_) => {
                        let reply = ServerFrame::Error {
                            code: "bad_frame".into(),
                            message: "frames are JSON text".into(),
                        };
                        if send_frame(&mut session, &reply).await.is_err() {
                            break None;
                        }
                    }
                    WsMessage::Ping(bytes) if session.pong(&bytes).await.is_err() => break None,
                    WsMessage::Close(_) => break None,
                    _ => {}
                }
            }
            outgoing = rx.recv() => {
                match outgoing {
                    Some(Outgoing::Frame(frame)) => {
                        if send_frame(&mut session, &frame).await.is_err() {
                            break None;
                        }
                    }
                    Some(Outgoing::Close { code, reason }) => {
                        break Some(CloseReason { code: CloseCode::Other(code), description: Some(reason) });
                    }
                    None => break None,
                }
            }
            _ = ticker.tick() => {
                if last_heard.elapsed() > heartbeat_timeout {
                    break Some(CloseReason {
                        code: CloseCode::Policy,
                        description: Some("heartbeat timeout".into()),
                    });
                }
            }
        }
    };
    registry.do_send(Disconnected {
        phone_id,
        session_id,
    });
    let _ = session.close(close_reason).await;
}

async fn send_frame(session: &mut Session, frame: &ServerFrame) -> Result<(), ()> {
    let text = serde_json::to_string(frame).map_err(|_| ())?;
    session.text(text).await.map_err(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outgoing_items_stay_small() {
        // Every idle session's channel holds a block of these: keep them a few words.
        assert!(std::mem::size_of::<Outgoing>() <= 40);
    }
}
