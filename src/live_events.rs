//! Live status for the portal's event stream (docs/api.md, "Live events"): phones going
//! online or offline (published by the Registry) and message status changes (published by the
//! writer's change listener), fanned out to the open `GET /v1/events/stream` responses of the
//! same workspace and mode. Never a reason to wait: each stream has a small bounded buffer and
//! an event that does not fit is dropped for that stream, not buffered.

use std::sync::Mutex;

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::domain::status::{Direction, MessageStatus};
use crate::store::scoped::Scope;

/// Events buffered towards one stream; a reader this far behind misses events (it can read
/// the resources again; the next `phone.status` or `message.status` carries the state whole).
pub const STREAM_CAPACITY: usize = 64;

/// Open streams per workspace and mode; one more is refused (429).
pub const MAX_STREAMS_PER_SCOPE: usize = 5;

/// A phone's live state, as the snapshot and `phone.status` show it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PhoneStatusOut {
    pub id: Uuid,
    pub online: bool,
    /// When the phone was last heard from (RFC 3339, milliseconds); null when never.
    pub last_seen_at: Option<String>,
}

/// A message's new status, as `message.status` shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct LiveMessageStatus {
    pub id: Uuid,
    /// The message status after the change (`queued`, `sending`, `sent`, `delivered`, …).
    pub status: MessageStatus,
    /// `outbound` or `inbound` (an inbound message appears once, `delivered`).
    pub direction: Direction,
}

/// One event for the streams of a scope.
#[derive(Debug, Clone)]
pub enum LiveEvent {
    PhoneStatus(PhoneStatusOut),
    MessageStatus(LiveMessageStatus),
}

/// The event names of the stream, written once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
pub enum EventName {
    #[strum(serialize = "snapshot")]
    Snapshot,
    #[strum(serialize = "phone.status")]
    PhoneStatus,
    #[strum(serialize = "message.status")]
    MessageStatus,
}

/// One SSE frame: `event: NAME` and a one-line JSON `data`.
pub fn frame(name: EventName, data: &impl Serialize) -> Bytes {
    let name: &'static str = name.into();
    let json = serde_json::to_string(data).unwrap_or_else(|_| "null".into());
    Bytes::from(format!("event: {name}\ndata: {json}\n\n"))
}

impl LiveEvent {
    fn frame(&self) -> Bytes {
        match self {
            LiveEvent::PhoneStatus(status) => frame(EventName::PhoneStatus, status),
            LiveEvent::MessageStatus(status) => frame(EventName::MessageStatus, status),
        }
    }
}

struct Stream {
    scope: Scope,
    sender: mpsc::Sender<Bytes>,
}

/// The open streams; shared by the Registry, the change listener and the HTTP workers.
#[derive(Default)]
pub struct LiveEvents {
    streams: Mutex<Vec<Stream>>,
}

/// Too many streams are open for the scope.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("at most {MAX_STREAMS_PER_SCOPE} event streams may be open per workspace and mode")]
pub struct TooManyStreams;

impl LiveEvents {
    /// Opens a stream of the scope's events; closed when the receiver is dropped.
    pub fn subscribe(&self, scope: Scope) -> Result<mpsc::Receiver<Bytes>, TooManyStreams> {
        let Ok(mut streams) = self.streams.lock() else {
            return Err(TooManyStreams);
        };
        streams.retain(|s| !s.sender.is_closed());
        if streams.iter().filter(|s| s.scope == scope).count() >= MAX_STREAMS_PER_SCOPE {
            return Err(TooManyStreams);
        }
        let (sender, receiver) = mpsc::channel(STREAM_CAPACITY);
        streams.push(Stream { scope, sender });
        Ok(receiver)
    }

    /// Hands `events` to the scope's streams; never waits (a full stream misses them).
    pub fn publish(&self, events: impl IntoIterator<Item = (Scope, LiveEvent)>) {
        let Ok(mut streams) = self.streams.lock() else {
            return;
        };
        if streams.is_empty() {
            return;
        }
        let mut closed = false;
        for (scope, event) in events {
            let mut frame = None;
            for stream in streams.iter().filter(|s| s.scope == scope) {
                let bytes = frame.get_or_insert_with(|| event.frame()).clone();
                if let Err(mpsc::error::TrySendError::Closed(_)) = stream.sender.try_send(bytes) {
                    closed = true;
                }
            }
        }
        if closed {
            streams.retain(|s| !s.sender.is_closed());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::domain::status::Mode;

    fn scope(mode: Mode) -> Scope {
        Scope {
            workspace_id: Uuid::nil().into(),
            mode,
        }
    }

    fn status(id: Uuid) -> LiveEvent {
        LiveEvent::MessageStatus(LiveMessageStatus {
            id,
            status: MessageStatus::Sent,
            direction: Direction::Outbound,
        })
    }

    #[test]
    fn events_reach_the_streams_of_their_scope_only() {
        let hub = LiveEvents::default();
        let mut live = hub.subscribe(scope(Mode::Live)).unwrap();
        let mut test = hub.subscribe(scope(Mode::Test)).unwrap();
        hub.publish([(scope(Mode::Live), status(Uuid::nil()))]);
        let frame = live.try_recv().unwrap();
        assert!(frame.starts_with(b"event: message.status\ndata: {"));
        assert!(test.try_recv().is_err());
    }

    #[test]
    fn a_slow_reader_loses_events_and_never_holds_the_publisher() {
        let hub = LiveEvents::default();
        let mut slow = hub.subscribe(scope(Mode::Live)).unwrap();
        let events = (0..STREAM_CAPACITY * 3).map(|_| (scope(Mode::Live), status(Uuid::nil())));
        hub.publish(events);
        let mut read = 0;
        while slow.try_recv().is_ok() {
            read += 1;
        }
        assert_eq!(read, STREAM_CAPACITY);
    }

    #[test]
    fn streams_per_scope_are_bounded_and_freed_when_dropped() {
        let hub = LiveEvents::default();
        let open: Vec<_> = (0..MAX_STREAMS_PER_SCOPE)
            .map(|_| hub.subscribe(scope(Mode::Live)).unwrap())
            .collect();
        assert!(hub.subscribe(scope(Mode::Live)).is_err());
        assert!(hub.subscribe(scope(Mode::Test)).is_ok());
        drop(open);
        assert!(hub.subscribe(scope(Mode::Live)).is_ok());
    }
}
