//! The phone WebSocket protocol (docs/api.md, Phone WebSocket): the JSON text frames exchanged with
//! a paired phone.
//!
//! Both the server's session and `smsgw phone-sim` speak through these types, so the two
//! cannot drift apart.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::sim_slot::SimSlot;

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
        /// The SIM slot to send from: present only for a SIM line's message (docs/api.md,
        /// "Phones"); absent, the phone's default SIM.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sim_slot: Option<SimSlot>,
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
    /// The device's health (docs/api.md, "Phone health"): every field optional, each one
    /// present replaces the stored one.
    Status(super::health::StatusFrame),
    /// Liveness, with optional device health.
    Heartbeat {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        battery: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<f64>,
    },
}

/// The `sim_slot` a phone's frame may carry beside its fields (docs/api.md, "Phone WebSocket"):
/// the SIM a `received` SMS arrived on, or the one a reported message was sent from. Read apart
/// from [`PhoneFrame`], only from frames that name it, so a one-line phone's frames are read
/// once.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct FrameSlot {
    #[serde(default)]
    pub sim_slot: Option<SimSlot>,
}

impl FrameSlot {
    /// The slot a frame's JSON text names; None when it names none, an error when it names one
    /// outside 1–3.
    pub fn of(text: &[u8]) -> Result<Option<SimSlot>, serde_json::Error> {
        const KEY: &[u8] = b"\"sim_slot\"";
        if !text.windows(KEY.len()).any(|w| w == KEY) {
            return Ok(None);
        }
        Ok(serde_json::from_slice::<FrameSlot>(text)?.sim_slot)
    }
}

/// Longest sender a `received` frame may carry, in characters after trimming (an E.164 number
/// is at most 16, a national form with punctuation or an alphanumeric sender id fewer than 32).
pub const MAX_SENDER_CHARS: usize = 32;

/// Longest text a `received` frame may carry, in UTF-16 code units: more than a ten-segment
/// concatenated SMS can hold in any encoding (1,530 GSM-7 characters, 670 UCS-2 units).
pub const MAX_RECEIVED_CONTENT_UTF16: usize = 1_600;

/// Longest `ref` a phone may tag a frame with, in characters.
pub const MAX_REF_CHARS: usize = 128;

/// Longest failure text kept from a phone's `failed` report, in characters: a longer one is cut
/// (the report still counts), on every transport ([`cut_failure_text`]).
pub const MAX_FAILURE_CHARS: usize = 512;

/// A phone's failure text as stored: its first [`MAX_FAILURE_CHARS`] characters.
pub fn cut_failure_text(mut text: String) -> String {
    if let Some((at, _)) = text.char_indices().nth(MAX_FAILURE_CHARS) {
        text.truncate(at);
    }
    text
}

/// Why a well-formed frame is refused (docs/api.md "Phone WebSocket").
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameRefusal {
    #[error("ref must be 1 to 128 characters")]
    Reference,
    #[error("from must be 1 to 32 characters without control characters")]
    Sender,
    #[error("content must be 1 to 1600 UTF-16 code units")]
    Content,
}

impl PhoneFrame {
    /// Checks the bounds of what the frame would have stored: a `received` frame's `ref`,
    /// sender and text, and the `ref` of a report. The JSON shape is serde's business.
    pub fn check_bounds(&self) -> Result<(), FrameRefusal> {
        let reference_ok = |r: &str| (1..=MAX_REF_CHARS).contains(&r.chars().count());
        match self {
            PhoneFrame::Received {
                reference,
                from,
                content,
                ..
            } => {
                if !reference_ok(reference) {
                    return Err(FrameRefusal::Reference);
                }
                let from = from.trim();
                if !(1..=MAX_SENDER_CHARS).contains(&from.chars().count())
                    || from.chars().any(char::is_control)
                {
                    return Err(FrameRefusal::Sender);
                }
                if content.is_empty() || content.encode_utf16().count() > MAX_RECEIVED_CONTENT_UTF16
                {
                    return Err(FrameRefusal::Content);
                }
                Ok(())
            }
            PhoneFrame::Sent { reference, .. }
            | PhoneFrame::Delivered { reference, .. }
            | PhoneFrame::Failed { reference, .. } => match reference {
                Some(r) if !reference_ok(r) => Err(FrameRefusal::Reference),
                _ => Ok(()),
            },
            PhoneFrame::Heartbeat { .. } | PhoneFrame::Status(_) => Ok(()),
        }
    }
}

/// WebSocket close code sent to a session replaced by a newer one for the same phone.
pub const CLOSE_REPLACED: u16 = 4000;

#[cfg(test)]
mod tests {
    use super::*;

    fn received(from: &str, content: &str) -> PhoneFrame {
        PhoneFrame::Received {
            reference: "r1".into(),
            from: from.into(),
            content: content.into(),
            received_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn received_frames_are_bounded() {
        assert_eq!(received("+14155550123", "hi").check_bounds(), Ok(()));
        assert_eq!(received("VERIFY", "x").check_bounds(), Ok(()));
        assert_eq!(
            received("VERIFY", "").check_bounds(),
            Err(FrameRefusal::Content)
        );
        assert_eq!(
            received("+1415\n5552006", "x").check_bounds(),
            Err(FrameRefusal::Sender)
        );
        assert_eq!(received(&"9".repeat(32), "x").check_bounds(), Ok(()));
        assert_eq!(
            received(&"9".repeat(33), "x").check_bounds(),
            Err(FrameRefusal::Sender)
        );
        assert_eq!(
            received("  ", "x").check_bounds(),
            Err(FrameRefusal::Sender)
        );
        assert_eq!(
            received("a\u{0}b", "x").check_bounds(),
            Err(FrameRefusal::Sender)
        );
        assert_eq!(received("+1", &"a".repeat(1_600)).check_bounds(), Ok(()));
        assert_eq!(
            received("+1", &"a".repeat(1_601)).check_bounds(),
            Err(FrameRefusal::Content)
        );
        // An emoji is two UTF-16 units.
        assert_eq!(
            received("+1", &"\u{1F600}".repeat(801)).check_bounds(),
            Err(FrameRefusal::Content)
        );
        let long_ref = PhoneFrame::Sent {
            message_id: Uuid::nil(),
            reference: Some("r".repeat(129)),
        };
        assert_eq!(long_ref.check_bounds(), Err(FrameRefusal::Reference));
    }

    #[test]
    fn a_frame_names_its_sim_slot_beside_its_fields() {
        let slot = |text: &str| FrameSlot::of(text.as_bytes()).map_err(|_| ());
        assert_eq!(slot(r#"{"type":"heartbeat"}"#), Ok(None));
        assert_eq!(
            slot(
                r#"{"type":"sent","message_id":"00000000-0000-0000-0000-000000000000","sim_slot":2}"#
            ),
            Ok(SimSlot::parse(2).ok())
        );
        assert_eq!(slot(r#"{"type":"sent","sim_slot":null}"#), Ok(None));
        assert!(slot(r#"{"type":"sent","sim_slot":4}"#).is_err());
        // The frame itself still reads: the extra field is ignored.
        let frame: PhoneFrame = serde_json::from_str(
            r#"{"type":"received","ref":"r","from":"+1","content":"x","received_at":"2026-11-25T10:00:00Z","sim_slot":2}"#,
        )
        .unwrap();
        assert!(matches!(frame, PhoneFrame::Received { .. }));
    }

    #[test]
    fn failure_text_is_cut_to_512_characters() {
        assert_eq!(cut_failure_text("no signal".into()), "no signal");
        assert_eq!(cut_failure_text("x".repeat(512)).len(), 512);
        assert_eq!(cut_failure_text("x".repeat(200_002)).len(), 512);
        // Characters, not bytes: a multi-byte text is cut on a character boundary.
        let cut = cut_failure_text("é".repeat(600));
        assert_eq!(cut.chars().count(), 512);
    }
}
