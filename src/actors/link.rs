//! The Phone actor's handle on its current transport: a [`Link`], a bounded channel of
//! [`Outgoing`] items. Every transport provides one — a WebSocket session
//! (`actors::phone_session`), the device API's event streams and fetches
//! (`actors::device_link`), test mode's simulator (`actors::simulator`) — so the Phone actor
//! knows none of them, and they know the Phone only through the messages they send it.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;
use uuid::Uuid;

use crate::domain::protocol::ServerFrame;

/// Frames buffered towards one phone before the transport is considered stuck and closed.
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
    /// A queued message of this phone was cancelled or expired before it was handed over: a
    /// hint for transports that announce it (the device API's `MessageCancelled`); the
    /// WebSocket protocol has no frame for it.
    Withdrawn {
        message_id: Uuid,
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

    /// Tells the transport a queued message was withdrawn (see [`Outgoing::Withdrawn`]).
    pub fn withdraw(&self, message_id: Uuid) {
        let _ = self.tx.try_send(Outgoing::Withdrawn { message_id });
    }

    /// Asks the transport to close.
    pub fn close(&self, code: u16, reason: &str) {
        let _ = self.tx.try_send(Outgoing::Close {
            code,
            reason: reason.to_string(),
        });
    }
}

static NEXT_SESSION_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh session id, unique in this process across every transport.
pub fn next_session_id() -> u64 {
    NEXT_SESSION_ID.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outgoing_items_stay_small() {
        // Every idle session's channel holds a block of these: keep them a few words.
        assert!(std::mem::size_of::<Outgoing>() <= 40);
    }

    #[test]
    fn session_ids_are_never_reused() {
        let first = next_session_id();
        let second = next_session_id();
        assert!(second > first);
    }

    #[tokio::test]
    async fn a_full_or_closed_link_refuses_frames() {
        let (tx, mut rx) = mpsc::channel(1);
        let link = Link { session_id: 1, tx };
        let frame = || ServerFrame::Error {
            code: crate::domain::protocol::FrameErrorCode::BadFrame
                .as_str()
                .to_string(),
            message: "test".into(),
        };
        assert!(link.send(frame()));
        assert!(!link.send(frame()), "the channel holds one item");
        assert!(matches!(rx.recv().await, Some(Outgoing::Frame(_))));
        drop(rx);
        assert!(!link.send(frame()), "the transport is gone");
    }
}
