//! Graceful shutdown of the real binary: SIGTERM and SIGINT lose nothing accepted and tell
//! phones the server is going away.

use super::*;

async fn sigterm_loses_nothing_accepted(backend: Backend) {
    let (url, _dir) = fresh_database(backend).await;
    let mut server = start_server(&url, true);
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish();

    // A phone is connected: it must see a 1001 "going away" close.
    let (mut phone, _) = connect_phone_to(&server, &client).await;

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
    let (results, ()) = tokio::join!(join_all(sends), killer);
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
    let status = server.exit_status().await;
    assert!(status.success(), "exit 0 after SIGTERM, got {status}");

    // Every accepted message is in the database, and a restarted server delivers it.
    let restarted = start_server(&url, false);
    for id in &accepted {
        poll(
            Duration::from_secs(20),
            Duration::from_millis(50),
            async || {
                let mut res = client
                    .get(format!("{}/v1/messages/{id}", restarted.address))
                    .insert_header(("x-api-key", server.test_key.as_str()))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status().as_u16(), 200, "accepted message {id} was lost");
                let body: serde_json::Value = res.json().await.unwrap();
                if body["data"]["status"] == "delivered" {
                    return Ok(());
                }
                Err(format!("{id} never delivered after restart: {body}"))
            },
        )
        .await;
    }
    drop(restarted);
}

/// SIGINT (Ctrl-C) stops the server as gracefully as SIGTERM: every phone sees 1001 (the
/// sessions are not HTTP connections the server's stop waits for, so this needs the server to
/// wait for them), exit 0 in 10 s.
async fn sigint_stops_gracefully(backend: Backend) {
    let (url, _dir) = fresh_database(backend).await;
    let mut server = start_server(&url, true);
    let client = awc::Client::new();
    let mut phones = Vec::new();
    for _ in 0..20 {
        phones.push(connect_phone_to(&server, &client).await.0);
    }
    server.signal("-INT");
    let codes = join_all(phones.iter_mut().map(FakePhone::close_code)).await;
    assert_eq!(codes, vec![Some(1001); 20]);
    let status = server.exit_status().await;
    assert!(status.success(), "exit 0 after SIGINT, got {status}");
}

backend_tests!(sigint_stops_gracefully, sigterm_loses_nothing_accepted,);
