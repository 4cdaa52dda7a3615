//! Logs of the real binary: JSON with request ids and no secrets, human-readable by default.

use super::*;

/// JSON logs of the real binary: every line is a JSON object, requests carry their request id,
/// and no API key, device token or message content ever appears (at debug level, which logs
/// more than the default info).
async fn json_logs_carry_request_ids_and_no_secrets(backend: Backend) {
    let (url, _dir) = fresh_database(backend).await;
    let (mut server, log_path, _log_dir) = start_server_logging(
        &url,
        &[
            ("SMSGW_LOG__FORMAT", "json"),
            ("SMSGW_LOG__LEVEL", "debug"),
            ("SMSGW_WEBHOOKS__ALLOW_INSECURE_TARGETS", "true"),
        ],
    );
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish();
    let content = "secret-content-4f1c9e never log me";

    // A test-mode webhook endpoint, its key rotated: both signing keys stay out of the logs
    // while deliveries are signed with the current one.
    let receiver = WebhookReceiver::start().await;
    let mut created = client
        .post(format!("{}/v1/webhooks", server.address))
        .insert_header(("x-api-key", server.test_key.as_str()))
        .send_json(&json!({ "url": receiver.url, "events": ["message.sent", "message.delivered"] }))
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    let created: serde_json::Value = created.json().await.unwrap();
    let first_signing_key = created["data"]["signing_key"].as_str().unwrap().to_string();
    let mut rotated = client
        .post(format!(
            "{}/v1/webhooks/{}/rotate-key",
            server.address,
            created["data"]["id"].as_str().unwrap()
        ))
        .insert_header(("x-api-key", server.test_key.as_str()))
        .send()
        .await
        .unwrap();
    assert_eq!(rotated.status().as_u16(), 200);
    let rotated: serde_json::Value = rotated.json().await.unwrap();
    let signing_key = rotated["data"]["signing_key"].as_str().unwrap().to_string();
    assert!(signing_key.starts_with("whsec_") && signing_key != first_signing_key);

    let (mut phone, token) = connect_phone_to(&server, &client).await;
    let ws_url = format!(
        "{}/v1/phones/connect",
        server.address.replacen("http", "ws", 1)
    );
    let mut sent = client
        .post(format!("{}/v1/messages/send", server.address))
        .insert_header(("x-api-key", server.live_key.as_str()))
        .insert_header(("x-request-id", "req-logs-7d2a"))
        .send_json(&json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": content }))
        .await
        .unwrap();
    assert_eq!(sent.status().as_u16(), 202);
    assert_eq!(sent.headers().get("x-request-id").unwrap(), "req-logs-7d2a");
    let _: serde_json::Value = sent.json().await.unwrap();
    let (message_id, _, _, attempt) = phone.expect_send().await;
    assert_eq!(attempt, 1, "the phone got message {message_id}");
    let mut test_send = client
        .post(format!("{}/v1/messages/send", server.address))
        .insert_header(("x-api-key", server.test_key.as_str()))
        .send_json(&json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": content }))
        .await
        .unwrap();
    assert_eq!(test_send.status().as_u16(), 202);
    let _: serde_json::Value = test_send.json().await.unwrap();
    // message.sent and message.delivered of the test send reached the receiver, signed.
    assert_eq!(receiver.wait_for(2, Duration::from_secs(20)).await.len(), 2);
    let wrong_key = format!("sk_live_{}", "Z".repeat(40));
    let refused = client
        .get(format!("{}/v1/messages", server.address))
        .insert_header(("x-api-key", wrong_key.as_str()))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    assert_eq!(
        FakePhone::connect(&ws_url, "dt_wrongtoken0000000000")
            .await
            .err(),
        Some(401)
    );
    // A request that is not HTTP: the client's error, logged below ERROR.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let address = server.address.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(b"NOT HTTP AT ALL\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
        assert!(
            String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 400"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.signal("-TERM");
    server.exit_status().await;

    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 3, "the server logged something:\n{log}");
    let mut request_id_seen = false;
    let mut client_error_seen = false;
    for line in &lines {
        let entry: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("log line is not JSON ({e}): {line}"));
        assert!(
            entry["level"].is_string() && entry["timestamp"].is_string(),
            "{line}"
        );
        for secret in [
            server.live_key.as_str(),
            server.test_key.as_str(),
            wrong_key.as_str(),
            token.as_str(),
            first_signing_key.as_str(),
            signing_key.as_str(),
            "dt_wrongtoken",
            "secret-content-4f1c9e",
        ] {
            assert!(
                !line.contains(secret),
                "a secret or content was logged: {line}"
            );
        }
        request_id_seen |= line.contains("req-logs-7d2a");
        assert_ne!(
            entry["level"], "ERROR",
            "nothing here is a server error: {line}"
        );
        client_error_seen |= entry["level"] == "WARN" && entry["client_error"] == true;
    }
    assert!(request_id_seen, "request logs carry the request id:\n{log}");
    assert!(
        client_error_seen,
        "the malformed request is logged as a warning:\n{log}"
    );
}

/// Logs are human-readable by default (not JSON) and go to stderr, never stdout.
async fn logs_are_human_readable_by_default(backend: Backend) {
    let (url, _dir) = fresh_database(backend).await;
    let (mut server, log_path, _log_dir) =
        start_server_logging(&url, &[("SMSGW_LOG__LEVEL", "info")]);
    server.signal("-TERM");
    // The signal comes right after the address is printed: it is handled gracefully already.
    let status = server.exit_status().await;
    assert!(status.success(), "exit 0, got {status}");
    let log = std::fs::read_to_string(&log_path).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("shutdown requested"))
        .unwrap_or_else(|| panic!("the shutdown is logged at info:\n{log}"));
    assert!(line.contains("INFO"), "{line}");
    assert!(
        serde_json::from_str::<serde_json::Value>(line).is_err(),
        "not JSON: {line}"
    );
}

backend_tests!(
    logs_are_human_readable_by_default,
    json_logs_carry_request_ids_and_no_secrets,
);
