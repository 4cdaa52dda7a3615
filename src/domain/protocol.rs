//! The phone WebSocket protocol (docs/api.md, Phone WebSocket): the JSON text frames exchanged with
//! a paired phone.
//!
//! Both the server's session and `smsgw phone-sim` speak through these types, so the two
//! cannot drift apart.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The per-phone pace announced in `hello` and exposed by the phones API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaceOut {
    pub per_minute: u32,
    pub per_30_minutes: u32,
}

/// A frame the server sends to a phone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// First frame of every session.
    Hello {
        device_id: Uuid,
        phone_number: String,
        pace: PaceOut,
    },
    /// Send one SMS. `attempt` counts from 1; the phone dedupes by `message_id`.
    Send {
        message_id: Uuid,
        to: String,
        content: String,
        segments: u32,
        encoding: String,
        attempt: u32,
    },
    /// The report or inbound message the phone tagged with `ref` is stored.
    Ack {
        #[serde(rename = "ref")]
        reference: String,
    },
    /// A frame could not be processed; the session stays open. `code` is a
    /// [`FrameErrorCode`]'s name (a string on the wire, so a client reads codes it does not know).
    Error { code: String, message: String },
}

/// The `code` of a server `error` frame (docs/api.md "Phone WebSocket").
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum FrameErrorCode {
    /// The frame is not JSON, or not a frame this server knows.
    BadFrame,
    /// A report names a message that was not sent to this phone.
    UnknownMessage,
}

impl FrameErrorCode {
    /// The code as sent in the frame.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A frame a phone sends to the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PhoneFrame {
    /// The radio sent the message.
    Sent {
        message_id: Uuid,
        #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
        reference: Option<String>,
    },
    /// The carrier confirmed delivery.
    Delivered {
        message_id: Uuid,
        #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
        reference: Option<String>,
    },
    /// This attempt failed.
    Failed {
        message_id: Uuid,
        error: String,
        #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
        reference: Option<String>,
    },
    /// An SMS arrived on the phone.
    Received {
        #[serde(rename = "ref")]
        reference: String,
        from: String,
        content: String,
        received_at: chrono::DateTime<chrono::Utc>,
    },
    /// Liveness, with optional device health.
    Heartbeat {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        battery: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<f64>,
    },
}

/// WebSocket close code sent to a session replaced by a newer one for the same phone.
pub const CLOSE_REPLACED: u16 = 4000;
