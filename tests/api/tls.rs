//! HTTPS in the binary (`server.tls`, docs/api.md "HTTPS"): with a self-signed certificate made
//! here, the server serves the API, the phone WebSocket and the device API's event stream over
//! TLS; bad certificate files stop it at start with a clear error and a non-zero exit. Every
//! URL it builds says https/wss, over HTTP/1.1 as over HTTP/2.

use std::time::Duration;

use awc::Client;
use futures_util::StreamExt;
use serde_json::{Value, json};
use smsgw::config::TlsSettings;
use smsgw::domain::protocol::ServerFrame;

use crate::backend_tests;
use crate::helpers::{Backend, RECIPIENT, SENDER, SelfSigned, run_cli, send_body, spawn_app_with};

/// A certificate for 127.0.0.1 and its key, as PEM files in a temporary directory, and a client
/// that trusts only that certificate (offering no ALPN protocol: it speaks HTTP/1.1).
fn self_signed() -> (tempfile::TempDir, TlsSettings, Client) {
    let (dir, tls, client, _) = self_signed_with_h2();
    (dir, tls, client)
}

/// [`self_signed`], and a second client that offers HTTP/2 (ALPN `h2`, `http/1.1`).
fn self_signed_with_h2() -> (tempfile::TempDir, TlsSettings, Client, Client) {
    let cert = SelfSigned::leaf();
    let (dir, tls, _) = cert.files();
    let (http1, h2) = (cert.client(&[]), cert.client(&[b"h2", b"http/1.1"]));
    (dir, tls, http1, h2)
}

async fn json_of(
    response: &mut awc::ClientResponse<
        impl futures_util::Stream<Item = Result<bytes::Bytes, awc::error::PayloadError>> + Unpin,
    >,
) -> Value {
    serde_json::from_slice(&response.body().await.unwrap()).unwrap()
}

async fn https_serves_the_api_the_websocket_and_events(backend: Backend) {
    smsgw::startup::install_crypto_provider();
    let (_dir, tls, client) = self_signed();
    let app = spawn_app_with(backend, |s| s.server.tls = Some(tls)).await;
    let base = app.address.replacen("http://", "https://", 1);

    // The API.
    let mut health = client.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    assert_eq!(json_of(&mut health).await["status"], "success");
    let pair = |number: &'static str| {
        let (client, base, key) = (client.clone(), base.clone(), app.live_key.clone());
        async move {
            let mut reply = client
                .post(format!("{base}/v1/phones"))
                .insert_header(("x-api-key", key))
                .send_json(&json!({ "phone_number": number }))
                .await
                .unwrap();
            assert_eq!(reply.status().as_u16(), 201);
            let data = json_of(&mut reply).await["data"].clone();
            (
                data["id"].as_str().unwrap().to_string(),
                data["device_token"].as_str().unwrap().to_string(),
            )
        }
    };

    // The phone WebSocket (wss).
    let (_, ws_token) = pair(SENDER).await;
    let (_, mut framed) = client
        .ws(format!(
            "{}/v1/phones/connect",
            base.replacen("https", "wss", 1)
        ))
        .bearer_auth(&ws_token)
        .connect()
        .await
        .expect("wss connects");
    let frame = tokio::time::timeout(Duration::from_secs(5), framed.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let awc::ws::Frame::Text(text) = frame else {
        panic!("expected a text frame, got {frame:?}");
    };
    let hello: ServerFrame = serde_json::from_slice(&text).unwrap();
    assert!(matches!(hello, ServerFrame::Hello { .. }), "{hello:?}");

    // The device API's event stream, and a send announced on it.
    let other = "+14155550101";
    let (_, sse_token) = pair(other).await;
    let events = client
        .get(format!("{base}/api/mobile/v1/events"))
        .bearer_auth(&sse_token)
        .timeout(Duration::from_secs(3600))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status().as_u16(), 200);
    assert_eq!(
        events.headers().get("content-type").unwrap(),
        "text/event-stream"
    );
    let mut events = Box::pin(events);
    let mut sent = client
        .post(format!("{base}/v1/messages/send"))
        .insert_header(("x-api-key", app.live_key.clone()))
        .send_json(&send_body(other, RECIPIENT, "over TLS"))
        .await
        .unwrap();
    assert_eq!(sent.status().as_u16(), 202, "{}", json_of(&mut sent).await);
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !seen.contains("event: MessageEnqueued\ndata: null\n\n") {
        let chunk = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("MessageEnqueued over TLS")
            .unwrap()
            .unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

/// Without `server.public_url`, an HTTP/1.1 client over TLS (which carries no scheme in its
/// requests) is handed https and wss URLs, as an HTTP/2 client is: the pairing URLs of
/// `GET /v1/workspace` and the inbound webhook URL of the device API.
async fn http1_clients_over_tls_get_https_urls(backend: Backend) {
    smsgw::startup::install_crypto_provider();
    let (_dir, tls, client, h2_client) = self_signed_with_h2();
    let app = spawn_app_with(backend, |s| s.server.tls = Some(tls)).await;
    let base = app.address.replacen("http://", "https://", 1);
    let host = base.trim_start_matches("https://").to_string();

    // HTTP/2 is served too.
    let mut workspace = h2_client
        .get(format!("{base}/v1/workspace"))
        .insert_header(("x-api-key", app.live_key.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(workspace.version(), awc::http::Version::HTTP_2);
    let pairing = json_of(&mut workspace).await["data"]["pairing"].clone();
    assert_eq!(
        pairing["device_api_url"],
        format!("https://{host}/mobile/v1")
    );

    let mut workspace = client
        .get(format!("{base}/v1/workspace"))
        .insert_header(("x-api-key", app.live_key.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(workspace.version(), awc::http::Version::HTTP_11);
    assert_eq!(workspace.status().as_u16(), 200);
    let pairing = json_of(&mut workspace).await["data"]["pairing"].clone();
    assert_eq!(
        pairing["device_api_url"],
        format!("https://{host}/mobile/v1")
    );
    assert_eq!(
        pairing["websocket_url"],
        format!("wss://{host}/v1/phones/connect")
    );

    let mut paired = client
        .post(format!("{base}/v1/phones"))
        .insert_header(("x-api-key", app.live_key.clone()))
        .send_json(&json!({ "phone_number": SENDER }))
        .await
        .unwrap();
    assert_eq!(paired.status().as_u16(), 201);
    let data = json_of(&mut paired).await["data"].clone();
    let (phone_id, token) = (
        data["id"].as_str().unwrap(),
        data["device_token"].as_str().unwrap(),
    );
    let mut hooks = client
        .get(format!("{base}/mobile/v1/webhooks"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(hooks.version(), awc::http::Version::HTTP_11);
    assert_eq!(hooks.status().as_u16(), 200);
    let url = json_of(&mut hooks).await[0]["url"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        url.starts_with(&format!("https://{host}/mobile/v1/inbound/{phone_id}/")),
        "{url}"
    );
}

/// The binary, whatever the database: the certificate is read before anything listens.
#[test]
fn bad_certificate_files_stop_the_server() {
    crate::helpers::run(bad_files_exit_non_zero());
}

async fn bad_files_exit_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let missing = dir.path().join("missing.pem").display().to_string();
    let garbage = garbage.display().to_string();
    let database = format!("sqlite://{}/db.sqlite?mode=rwc", dir.path().display());
    for (cert, key, named) in [
        (missing.as_str(), garbage.as_str(), missing.as_str()),
        (garbage.as_str(), garbage.as_str(), garbage.as_str()),
    ] {
        let out = run_cli(
            &["serve"],
            &[
                ("SMSGW_DATABASE__URL", database.as_str()),
                ("SMSGW_SERVER__BIND", "127.0.0.1:0"),
                ("SMSGW_SERVER__TLS__CERT_FILE", cert),
                ("SMSGW_SERVER__TLS__KEY_FILE", key),
            ],
        )
        .await;
        assert!(!out.status.success(), "serve must fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("server.tls") && stderr.contains(named),
            "{stderr}"
        );
        assert!(!stderr.contains(NO_PUBLIC_URL), "loopback: no warning");
    }
}

/// The start-up warning of a server reachable from elsewhere without `server.public_url`.
const NO_PUBLIC_URL: &str = "server.public_url is unset";

/// Bound to every address without `server.public_url`, `serve` warns at start (the bad
/// certificate then stops it before it serves anything).
#[test]
fn a_reachable_server_without_public_url_warns() {
    crate::helpers::run(async {
        let dir = tempfile::tempdir().unwrap();
        let database = format!("sqlite://{}/db.sqlite?mode=rwc", dir.path().display());
        let missing = dir.path().join("missing.pem").display().to_string();
        let out = run_cli(
            &["serve"],
            &[
                ("SMSGW_DATABASE__URL", database.as_str()),
                ("SMSGW_SERVER__BIND", "0.0.0.0:0"),
                ("SMSGW_SERVER__TLS__CERT_FILE", missing.as_str()),
                ("SMSGW_SERVER__TLS__KEY_FILE", missing.as_str()),
            ],
        )
        .await;
        assert!(!out.status.success(), "serve must fail on the certificate");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.matches(NO_PUBLIC_URL).count(), 1, "{stderr}");
    });
}

backend_tests!(
    https_serves_the_api_the_websocket_and_events,
    http1_clients_over_tls_get_https_urls,
);
