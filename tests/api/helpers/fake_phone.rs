//! A phone speaking the real WebSocket protocol, scripted by the test.

use std::time::Duration;

use actix_codec::Framed;
use awc::ws::{Codec, Frame, Message as WsMessage};
use awc::{BoxedSocket, Client};
use futures_util::{SinkExt, StreamExt};
use smsgw::domain::protocol::{PhoneFrame, ServerFrame};
use uuid::Uuid;

/// A phone speaking the real WebSocket protocol, scripted by the test.
pub struct FakePhone {
    framed: Framed<BoxedSocket, Codec>,
}

impl FakePhone {
    /// Opens the WebSocket; Err carries the HTTP status of a refused upgrade.
    pub async fn connect(url: &str, token: &str) -> Result<FakePhone, u16> {
        let client = Client::builder().finish();
        let result = client
            .ws(url)
            .bearer_auth(token)
            .max_frame_size(1 << 20)
            .connect()
            .await;
        match result {
            Ok((_, framed)) => Ok(FakePhone { framed }),
            Err(awc::error::WsClientError::InvalidResponseStatus(status)) => Err(status.as_u16()),
            Err(other) => panic!("websocket error: {other}"),
        }
    }

    /// Opens the WebSocket, trying again every 200 ms while the server refuses it (as while a
    /// surviving node has not yet seen a dead one go); panics after `within`.
    pub async fn connect_within(url: &str, token: &str, within: Duration) -> FakePhone {
        super::poll(within, Duration::from_millis(200), async || {
            FakePhone::connect(url, token)
                .await
                .map_err(|status| format!("the server refused the phone: {status}"))
        })
        .await
    }

    /// The next server frame within 5 s; None when the session closed or nothing came.
    pub async fn next_frame(&mut self) -> Option<ServerFrame> {
        self.next_frame_within(Duration::from_secs(5)).await
    }

    /// The next server frame within `within`.
    pub async fn next_frame_within(&mut self, within: Duration) -> Option<ServerFrame> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let next = tokio::time::timeout_at(deadline, self.framed.next())
                .await
                .ok()??;
            match next.ok()? {
                Frame::Text(bytes) => {
                    return Some(serde_json::from_slice(&bytes).expect("server frame is JSON"));
                }
                Frame::Ping(bytes) => {
                    let _ = self.framed.send(WsMessage::Pong(bytes)).await;
                }
                Frame::Close(_) => return None,
                _ => {}
            }
        }
    }

    /// Waits for the close frame and returns its code.
    pub async fn close_code(&mut self) -> Option<u16> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let next = tokio::time::timeout_at(deadline, self.framed.next())
                .await
                .ok()??;
            if let Ok(Frame::Close(reason)) = next {
                return reason.map(|r| u16::from(r.code));
            }
        }
    }

    /// Sends a protocol frame.
    pub async fn send(&mut self, frame: &PhoneFrame) {
        let text = serde_json::to_string(frame).expect("frame serializes");
        self.framed
            .send(WsMessage::Text(text.into()))
            .await
            .expect("frame sent");
    }

    /// Sends raw text (for malformed-frame tests).
    pub async fn send_text(&mut self, text: &str) {
        self.framed
            .send(WsMessage::Text(text.to_string().into()))
            .await
            .expect("frame sent");
    }

    /// Writes one unfragmented text frame carrying `payload` as it is, valid UTF-8 or not
    /// (the codec only takes text it can check).
    pub async fn send_raw_text_frame(&mut self, payload: &[u8]) {
        use tokio::io::AsyncWriteExt;
        assert!(payload.len() < 126, "a short frame");
        // FIN + text opcode; masked (a client must mask) with a zero key, so the payload is
        // written as it is.
        let mut frame = vec![0x81, 0x80 | payload.len() as u8, 0, 0, 0, 0];
        frame.extend_from_slice(payload);
        let socket = self.framed.io_mut();
        socket.write_all(&frame).await.expect("frame written");
        socket.flush().await.expect("frame flushed");
    }

    /// The next `send` frame: (message_id, to, content, attempt).
    pub async fn expect_send(&mut self) -> (Uuid, String, String, u32) {
        match self.next_frame().await {
            Some(ServerFrame::Send {
                message_id,
                to,
                content,
                attempt,
                ..
            }) => (message_id, to, content, attempt),
            other => panic!("expected a send frame, got {other:?}"),
        }
    }

    /// Reports a message sent and then delivered, under these two references, without waiting
    /// for the acks.
    pub async fn report_sent_then_delivered(&mut self, message_id: Uuid, references: [String; 2]) {
        let [sent, delivered] = references.map(Some);
        self.send(&PhoneFrame::Sent {
            message_id,
            reference: sent,
        })
        .await;
        self.send(&PhoneFrame::Delivered {
            message_id,
            reference: delivered,
        })
        .await;
    }

    /// Reports the message sent, then waits for the ack of `reference`.
    pub async fn report(&mut self, frame: PhoneFrame) -> Option<ServerFrame> {
        self.send(&frame).await;
        self.next_frame().await
    }

    /// Reports a sent, delivered or failed frame and asserts the server acks its reference.
    pub async fn report_acked(&mut self, frame: PhoneFrame) {
        let reference = match &frame {
            PhoneFrame::Sent { reference, .. }
            | PhoneFrame::Delivered { reference, .. }
            | PhoneFrame::Failed { reference, .. } => reference.clone(),
            other => panic!("not a status report: {other:?}"),
        };
        let reference = reference.expect("a report with a reference to ack");
        assert_eq!(
            self.report(frame).await,
            Some(ServerFrame::Ack { reference })
        );
    }

    /// Forwards an SMS the phone received and waits for the server's ack (sent once the
    /// message is stored).
    pub async fn receive(&mut self, reference: &str, from: &str, content: &str) {
        let ack = self
            .report(PhoneFrame::Received {
                reference: reference.into(),
                from: from.into(),
                content: content.into(),
                received_at: chrono::Utc::now(),
            })
            .await;
        assert_eq!(
            ack,
            Some(ServerFrame::Ack {
                reference: reference.into()
            }),
            "the phone gets its ack once the message is stored"
        );
    }

    /// Sends a frame as a fragmented WebSocket message of `parts` frames.
    pub async fn send_fragmented(&mut self, frame: &PhoneFrame, parts: usize) {
        use actix_http::ws::Item;
        let text = serde_json::to_string(frame).expect("frame serializes");
        let bytes = bytes::Bytes::from(text);
        let size = bytes.len().div_ceil(parts);
        let chunks: Vec<bytes::Bytes> = bytes
            .chunks(size)
            .map(bytes::Bytes::copy_from_slice)
            .collect();
        let last = chunks.len() - 1;
        for (i, chunk) in chunks.into_iter().enumerate() {
            let item = match i {
                0 => Item::FirstText(chunk),
                i if i == last => Item::Last(chunk),
                _ => Item::Continue(chunk),
            };
            self.framed
                .send(WsMessage::Continuation(item))
                .await
                .expect("fragment sent");
        }
    }

    /// Pings the server and waits (5 s) for the pong; its payload.
    pub async fn ping(&mut self, payload: &'static [u8]) -> Option<bytes::Bytes> {
        self.framed
            .send(WsMessage::Ping(bytes::Bytes::from_static(payload)))
            .await
            .expect("ping sent");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let next = tokio::time::timeout_at(deadline, self.framed.next())
                .await
                .ok()??;
            if let Ok(Frame::Pong(bytes)) = next {
                return Some(bytes);
            }
        }
    }

    /// Closes the session from the phone side.
    pub async fn close(mut self) {
        let _ = self.framed.send(WsMessage::Close(None)).await;
    }
}
