//! A phone's queue as the phone sees it (docs/architecture.md, "Phones"): messages handed to a
//! phone that went away before reporting come back, after it reconnects, in their first order.

use std::time::Duration;

use serde_json::json;
use smsgw::domain::protocol::ServerFrame;
use uuid::Uuid;

use crate::backend_tests;
use crate::helpers::{Backend, FakePhone, SENDER, spawn_paced};

backend_tests!(requeued_messages_come_back_in_their_first_order);

/// The ids of the `send` frames that come until none came for `quiet`.
async fn sends(phone: &mut FakePhone, quiet: Duration) -> Vec<Uuid> {
    let mut ids = Vec::new();
    while let Some(frame) = phone.next_frame_within(quiet).await {
        if let ServerFrame::Send { message_id, .. } = frame {
            ids.push(message_id);
        }
    }
    ids
}

async fn requeued_messages_come_back_in_their_first_order(backend: Backend) {
    let app = spawn_paced(backend, 100_000, 100_000).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let mut phone = app.connect_phone(&token).await;
    app.wait_online(&phone_id, true).await;
    let to: Vec<String> = (0..8).map(|i| format!("+1650555{:04}", 3000 + i)).collect();
    let reply = app
        .bulk_send(
            &app.live_key,
            json!({ "from_number": SENDER, "content": "in order", "to_numbers": to }),
        )
        .await
        .expect(202);
    let accepted: Vec<Uuid> = reply.data()["message_ids"]
        .as_array()
        .expect("message_ids")
        .iter()
        .map(|id| id.as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(accepted.len(), 8, "{}", reply.body);
    let first = sends(&mut phone, Duration::from_millis(700)).await;
    assert_eq!(first, accepted, "handed over in accept order");
    // The phone goes away without reporting any, and comes back.
    phone.close().await;
    app.wait_online(&phone_id, false).await;
    let mut phone = app.connect_phone(&token).await;
    let again = sends(&mut phone, Duration::from_millis(700)).await;
    assert_eq!(again, accepted, "sent again in accept order");
}
