//! Operations: health, readiness, metrics, and graceful shutdown of the real binary.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::json;

use crate::backend_tests;
use crate::helpers::{Backend, FakePhone, RECIPIENT, SENDER, fresh_database, spawn_app};

async fn health_ready_and_metrics(backend: Backend) {
    let app = spawn_app(backend).await;
    app.request("GET", "/health", None, None).await.expect(200);
    let ready = app.request("GET", "/ready", None, None).await.expect(200);
    assert_eq!(ready.data()["database"], "ok");
    let sent = app.send_test(RECIPIENT, "counted").await.expect(202);
    assert!(sent.headers.contains_key("x-request-id"));
    app.wait_for_status(
        &app.test_key,
        sent.data()["id"].as_str().unwrap(),
        "delivered",
    )
    .await;
    let mut response = app
        .client
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = String::from_utf8(response.body().await.unwrap().to_vec()).unwrap();
    for name in [
        "smsgw_http_requests_total",
        "smsgw_http_request_duration_seconds_bucket",
        "smsgw_message_transitions_total",
        "smsgw_phones_online",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
    }
    assert!(
        text.contains(r#"route="/v1/messages/send""#),
        "requests are labelled by route"
    );
}

/// A server process started from the real binary; prints its keys and address on stdout.
struct ServerProcess {
    child: Child,
    address: String,
    test_key: String,
    live_key: String,
}

/// Starts `smsgw serve` on the database; only a first start prints the keys.
impl Drop for ServerProcess {
    /// A failing test must not leave a server running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(database_url: &str, first_start: bool) -> ServerProcess {
    let mut child = Command::new(env!("CARGO_BIN_EXE_smsgw"))
        .arg("serve")
        .env("SMSGW_DATABASE__URL", database_url)
        .env("SMSGW_SERVER__BIND", "127.0.0.1:0")
        .env("SMSGW_TEST_MODE__DELIVER_AFTER", "50ms")
        .env("SMSGW_LIMITS__API_PER_SECOND", "0")
        .env("SMSGW_LOG__LEVEL", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("server starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let (mut test_key, mut live_key, mut address) = (None, None, None);
    while address.is_none() {
        let line = lines
            .next()
            .expect("server prints its address")
            .expect("line");
        if let Some(k) = line.strip_prefix("test key: ") {
            test_key = Some(k.to_string());
        } else if let Some(k) = line.strip_prefix("live key: ") {
            live_key = Some(k.to_string());
        } else if let Some(a) = line.strip_prefix("listening on ") {
            address = Some(a.to_string());
        }
    }
    assert_eq!(
        test_key.is_some() && live_key.is_some(),
        first_start,
        "keys are printed on the first start only"
    );
    ServerProcess {
        child,
        address: address.unwrap(),
        test_key: test_key.unwrap_or_default(),
        live_key: live_key.unwrap_or_default(),
    }
}

async fn sigterm_loses_nothing_accepted(backend: Backend) {
    let (url, _dir) = fresh_database(backend).await;
    let mut server = start_server(&url, true);
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish();

    // A phone is connected: it must see a 1001 "going away" close.
    let mut pair = client
        .post(format!("{}/v1/phones", server.address))
        .insert_header(("x-api-key", server.live_key.as_str()))
        .send_json(&json!({ "phone_number": SENDER }))
        .await
        .unwrap();
    let paired: serde_json::Value = pair.json().await.unwrap();
    let token = paired["data"]["device_token"].as_str().unwrap().to_string();
    let ws_url = format!(
        "{}/v1/phones/connect",
        server.address.replacen("http", "ws", 1)
    );
    let mut phone = FakePhone::connect(&ws_url, &token)
        .await
        .expect("phone connects");
    assert!(phone.next_frame().await.is_some(), "hello");

    // 300 concurrent sends; SIGTERM goes out once 50 of them were accepted, while the rest are
    // in flight or not yet sent.
    let pid = server.child.id().to_string();
    let accepted_so_far = std::rc::Rc::new(std::cell::Cell::new(0usize));
    let sends = (0..300).map(|i| {
        let client = client.clone();
        let url = format!("{}/v1/messages/send", server.address);
        let key = server.test_key.clone();
        let counter = accepted_so_far.clone();
        async move {
            let mut res = client
                .post(url)
                .insert_header(("x-api-key", key.as_str()))
                .send_json(&json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": format!("m{i}") }))
                .await
                .ok()?;
            if res.status().as_u16() != 202 {
                return None;
            }
            let body: serde_json::Value = res.json().await.ok()?;
            counter.set(counter.get() + 1);
            body["data"]["id"].as_str().map(str::to_string)
        }
    });
    let killer = {
        let counter = accepted_so_far.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            while counter.get() < 50 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
        }
    };
    let (results, ()) = futures_util::join!(join_all(sends), killer);
    let accepted: Vec<String> = results.into_iter().flatten().collect();
    assert!(
        !accepted.is_empty(),
        "some sends were accepted before the signal"
    );

    assert_eq!(
        phone.close_code().await,
        Some(1001),
        "phones are told the server is going away"
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the server exits within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "exit 0 after SIGTERM, got {status}");

    // Every accepted message is in the database, and a restarted server delivers it.
    let restarted = start_server(&url, false);
    for id in &accepted {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut res = client
                .get(format!("{}/v1/messages/{id}", restarted.address))
                .insert_header(("x-api-key", server.test_key.as_str()))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status().as_u16(), 200, "accepted message {id} was lost");
            let body: serde_json::Value = res.json().await.unwrap();
            if body["data"]["status"] == "delivered" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{id} never delivered after restart: {body}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    drop(restarted);
}

backend_tests!(health_ready_and_metrics, sigterm_loses_nothing_accepted);
