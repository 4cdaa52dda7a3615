//! Inbound throughput: N phones (default 1,000) connected over real WebSockets each report K
//! `received` frames (default 10) as fast as the server acks them; prints the messages stored
//! and acked per second (an ack is sent only after the message is committed). Webhook delivery
//! is not part of this figure.
//!
//! Run: `cargo run --release --example bench_inbound [-- PHONES PER_PHONE]`.
//! The phones run on their own thread and runtime, so their JSON work does not share the
//! server's writer thread.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use awc::ws::{Frame, Message as WsMessage};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use smsgw::domain::protocol::{PhoneFrame, ServerFrame};
use smsgw::startup::Application;

async fn run_phone(ws_url: String, token: String, per_phone: usize, start: Instant) -> Duration {
    let (_, mut framed) = awc::Client::builder()
        .timeout(Duration::from_secs(60))
        .finish()
        .ws(ws_url)
        .bearer_auth(token)
        .connect()
        .await
        .unwrap();
    // hello
    let _ = framed.next().await;
    let wait = start.saturating_duration_since(Instant::now());
    tokio::time::sleep(wait).await;
    let begun = Instant::now();
    for i in 0..per_phone {
        let frame = PhoneFrame::Received {
            reference: format!("r{i}"),
            from: "+14155550177".into(),
            content: format!("inbound message number {i}"),
            received_at: chrono::Utc::now(),
        };
        let text = serde_json::to_string(&frame).unwrap();
        framed.send(WsMessage::Text(text.into())).await.unwrap();
    }
    let mut acked = 0;
    while acked < per_phone {
        match framed.next().await {
            Some(Ok(Frame::Text(bytes))) => {
                if let Ok(ServerFrame::Ack { .. }) = serde_json::from_slice(&bytes) {
                    acked += 1;
                }
            }
            Some(Ok(Frame::Ping(b))) => {
                let _ = framed.send(WsMessage::Pong(b)).await;
            }
            Some(Ok(_)) => {}
            other => panic!("session ended: {other:?}"),
        }
    }
    begun.elapsed()
}

#[actix_web::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let phones: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let per_phone: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let dir = tempfile::tempdir().unwrap();
    let settings = common::bench_settings(dir.path(), "warn");
    let app = Application::build(settings).await.unwrap();
    let key = app.initial_keys.clone().unwrap().live_key;
    let base = format!("http://{}", app.address());
    actix_web::rt::spawn(app.run_until_stopped());

    let client = awc::Client::default();
    let mut tokens = Vec::with_capacity(phones);
    for i in 0..phones {
        let mut reply = client
            .post(format!("{base}/v1/phones"))
            .insert_header(("x-api-key", key.as_str()))
            .send_json(&json!({ "phone_number": format!("+1202555{:04}", i % 10_000) }))
            .await
            .unwrap();
        let body: Value = reply.json().await.unwrap();
        tokens.push(body["data"]["device_token"].as_str().unwrap().to_string());
    }
    let ws_url = format!("{}/v1/phones/connect", base.replacen("http", "ws", 1));
    let total = phones * per_phone;
    let phones_thread = std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            // Everyone connects first, then all start together.
            let start = Instant::now() + Duration::from_secs(5);
            let tasks: Vec<_> = tokens
                .into_iter()
                .map(|t| actix_web::rt::spawn(run_phone(ws_url.clone(), t, per_phone, start)))
                .collect();
            let mut longest = Duration::ZERO;
            for task in tasks {
                longest = longest.max(task.await.unwrap());
            }
            longest
        })
    });
    let elapsed = actix_web::rt::task::spawn_blocking(move || phones_thread.join().unwrap())
        .await
        .unwrap();
    println!(
        "{phones} phones x {per_phone} = {total} inbound messages stored and acked in {:.0} ms: {:.0} messages/s",
        elapsed.as_secs_f64() * 1000.0,
        total as f64 / elapsed.as_secs_f64()
    );
    // Exit before the runtime drops the pool (sqlx wants a runtime to close connections).
    std::process::exit(0);
}
