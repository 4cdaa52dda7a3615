//! Pairing and the phone's WebSocket session: token rules, one session per phone, silent phones
//! going offline, fragments and pings, bytes behind the upgrade request.

use super::*;

async fn pairing_and_token_rules(backend: Backend) {
    let app = spawn_app(backend).await;
    let reply = app
        .post(
            "/v1/phones",
            &app.live_key,
            json!({ "phone_number": SENDER, "name": "Front desk" }),
        )
        .await
        .expect(201);
    let data = reply.data();
    let id = data["id"].as_str().unwrap().to_string();
    let token = data["device_token"].as_str().unwrap().to_string();
    assert!(token.starts_with("dt_"));
    assert_eq!(data["online"], false);
    assert_eq!(
        data["pace"],
        json!({ "per_minute": 6, "per_30_minutes": 25, "per_day": null, "jitter_seconds": 0 })
    );
    let got = app
        .get(&format!("/v1/phones/{id}"), &app.live_key)
        .await
        .expect(200);
    assert!(
        got.data().get("device_token").is_none(),
        "the token is shown only at pairing"
    );
    assert_eq!(got.data()["name"], "Front desk");
    app.get(&format!("/v1/phones/{id}"), &app.test_key)
        .await
        .expect_error(404, "not_found");
    let bad = app
        .post("/v1/phones", &app.live_key, json!({ "phone_number": "12" }))
        .await
        .expect_error(422, "invalid_phone_number");
    assert_eq!(bad.data()["field"], "phone_number");
    app.patch(
        &format!("/v1/phones/{id}"),
        &app.live_key,
        json!({ "pace": { "per_minute": 0, "per_30_minutes": 5 } }),
    )
    .await
    .expect_error(422, "validation_failed");

    assert_eq!(
        FakePhone::connect(&app.ws_url(), "dt_wrong").await.err(),
        Some(401)
    );
    let mut phone = app.connect_phone(&token).await;
    app.wait_online(&id, true).await;
    let list = app.get("/v1/phones", &app.live_key).await.expect(200);
    assert_eq!(list.data()["phones"][0]["online"], true);
    assert!(list.data()["phones"][0]["last_seen_at"].is_string());

    let rotated = app
        .post(
            &format!("/v1/phones/{id}/rotate-token"),
            &app.live_key,
            json!({}),
        )
        .await
        .expect(200);
    let new_token = rotated.data()["device_token"].as_str().unwrap().to_string();
    assert_ne!(new_token, token);
    assert_eq!(
        phone.close_code().await,
        Some(4001),
        "rotation closes the session"
    );
    assert_eq!(
        FakePhone::connect(&app.ws_url(), &token).await.err(),
        Some(401)
    );
    let phone = app.connect_phone(&new_token).await;
    app.wait_online(&id, true).await;

    app.delete(&format!("/v1/phones/{id}"), &app.live_key)
        .await
        .expect(200);
    let mut phone = phone;
    assert_eq!(
        phone.close_code().await,
        Some(4001),
        "unpairing closes the session"
    );
    assert_eq!(
        FakePhone::connect(&app.ws_url(), &new_token).await.err(),
        Some(401)
    );
    app.get(&format!("/v1/phones/{id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
}

async fn one_session_per_phone(backend: Backend) {
    let app = spawn_app(backend).await;
    let (_, token) = app.pair_phone(SENDER).await;
    let mut old = app.connect_phone(&token).await;
    let mut new = app.connect_phone(&token).await;
    assert_eq!(old.close_code().await, Some(4000));
    let id = app.send_live("to the newest session").await;
    assert_eq!(new.expect_send().await.0.to_string(), id);
}

async fn silent_phones_go_offline(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.phones.heartbeat_timeout = Duration::from_millis(300)
    })
    .await;
    let (phone_id, mut phone) = app.online_phone(SENDER).await;
    // The fake phone answers nothing: after the timeout the server closes the session.
    let code = phone.close_code().await;
    assert!(code.is_some(), "the server closed the silent session");
    app.wait_online(&phone_id, false).await;
    app.send(&app.live_key, send_body(SENDER, RECIPIENT, "x"))
        .await
        .expect_error(503, "no_device_available");
}

/// The session speaks WebSocket on the bare connection (not through actix-web's dispatcher):
/// fragmented messages are joined, pings are answered with their payload.
async fn fragments_and_pings_are_understood(backend: Backend) {
    let app = spawn_app(backend).await;
    let (_, mut phone) = app.online_phone(SENDER).await;
    let frame = PhoneFrame::Received {
        reference: "fragmented-1".into(),
        from: RECIPIENT.into(),
        content: "a message that arrives in three WebSocket fragments".into(),
        received_at: chrono::Utc::now(),
    };
    phone.send_fragmented(&frame, 3).await;
    assert_eq!(
        phone.next_frame().await,
        Some(ServerFrame::Ack {
            reference: "fragmented-1".into()
        })
    );
    assert_eq!(
        phone.ping(b"still there?").await.as_deref(),
        Some(&b"still there?"[..])
    );
    let inbox = app
        .get("/v1/messages?direction=inbound", &app.live_key)
        .await
        .expect(200);
    assert_eq!(
        inbox.data()["messages"][0]["content"],
        "a message that arrives in three WebSocket fragments"
    );
}

/// Writes an upgrade request for `path` (plus `then`, in the same write) on a raw connection;
/// returns the connection and everything read until the response head ended.
async fn raw_upgrade(
    app: &TestApp,
    path: &str,
    token: &str,
    then: &[u8],
) -> (tokio::net::TcpStream, String, bytes::BytesMut) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = app.address.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Authorization: Bearer {token}\r\n\r\n"
    )
    .into_bytes();
    request.extend_from_slice(then);
    stream.write_all(&request).await.unwrap();
    let mut read = bytes::BytesMut::new();
    let head_end = loop {
        if let Some(at) = read.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read_buf(&mut read))
            .await
            .expect("response within 5 s")
            .unwrap();
        assert!(n > 0, "connection closed before the response head");
    };
    let head = String::from_utf8(read.split_to(head_end).to_vec()).unwrap();
    (stream, head, read)
}

/// Frames a phone writes right behind its upgrade request (one TCP write) are not lost, and an
/// upgrade anywhere but `/v1/phones/connect` is refused in the envelope.
async fn bytes_behind_the_upgrade_request_are_read(backend: Backend) {
    use actix_codec::{Decoder, Encoder};
    use awc::ws::{Codec, Frame, Message};
    use tokio::io::AsyncReadExt;
    let app = spawn_app(backend).await;
    let (_, token) = app.pair_phone(SENDER).await;
    let mut client = Codec::new().client_mode();
    let mut early = bytes::BytesMut::new();
    let frame = PhoneFrame::Received {
        reference: "early-1".into(),
        from: RECIPIENT.into(),
        content: "sent with the handshake".into(),
        received_at: chrono::Utc::now(),
    };
    let text = serde_json::to_string(&frame).unwrap();
    client
        .encode(Message::Text(text.into()), &mut early)
        .unwrap();
    let (mut stream, head, mut read) =
        raw_upgrade(&app, "/v1/phones/connect", &token, &early).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mut frames = Vec::new();
    while frames.len() < 2 {
        while let Some(frame) = client.decode(&mut read).unwrap() {
            if let Frame::Text(bytes) = frame {
                frames.push(serde_json::from_slice::<ServerFrame>(&bytes).unwrap());
            }
        }
        if frames.len() < 2 {
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read_buf(&mut read))
                .await
                .expect("frames within 5 s")
                .unwrap();
            assert!(n > 0, "session closed early");
        }
    }
    assert!(matches!(frames[0], ServerFrame::Hello { .. }), "{frames:?}");
    assert_eq!(
        frames[1],
        ServerFrame::Ack {
            reference: "early-1".into()
        }
    );

    // Refusals answer the envelope and close the connection.
    for (path, token, status, code) in [
        ("/v1/elsewhere", token.as_str(), "404", "not_found"),
        ("/v1/phones/connect", "dt_wrong", "401", "invalid_api_key"),
    ] {
        let (mut stream, head, mut body) = raw_upgrade(&app, path, token, b"").await;
        assert!(head.starts_with(&format!("HTTP/1.1 {status}")), "{head}");
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
            .await
            .expect("closed within 5 s")
            .unwrap();
        body.extend_from_slice(&rest);
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["status"], "error");
        assert_eq!(body["error_code"], code);
    }
}

backend_tests!(
    pairing_and_token_rules,
    one_session_per_phone,
    silent_phones_go_offline,
    fragments_and_pings_are_understood,
    bytes_behind_the_upgrade_request_are_read,
);
