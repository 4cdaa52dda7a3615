//! Health, readiness and the metrics of requests, messages, phones and queues.

use super::*;

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
    let text = scrape(&app).await;
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

/// The value of the first sample of `name` whose labels contain every one of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            return None;
        }
        let (series, value) = rest.rsplit_once(' ')?;
        labels
            .iter()
            .all(|l| series.contains(l))
            .then(|| value.parse().ok())
            .flatten()
    })
}

async fn scrape(app: &TestApp) -> String {
    let mut response = app
        .client
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers().get("content-type").unwrap();
    assert!(content_type.to_str().unwrap().starts_with("text/plain"));
    String::from_utf8(response.body().limit(16 << 20).await.unwrap().to_vec()).unwrap()
}

/// Polls /metrics until `check` holds (gauges are process-wide and tests run in parallel).
async fn scrape_until(app: &TestApp, what: &str, check: impl Fn(&str) -> bool) -> String {
    poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || {
            let text = scrape(app).await;
            match check(&text) {
                true => Ok(text),
                false => Err(format!("{what}:\n{text}")),
            }
        },
    )
    .await
}

/// Every metric of issue 6 is exported, described, and moves with what happens.
async fn metrics_cover_requests_messages_phones_queues(backend: Backend) {
    let app = spawn_app(backend).await;
    let text = scrape(&app).await;
    for (name, label) in [
        ("smsgw_queue_depth", r#"class="single""#),
        ("smsgw_queue_depth", r#"class="bulk""#),
        ("smsgw_queue_depth", r#"class="campaign""#),
        ("smsgw_webhook_attempts_total", r#"outcome="success""#),
        ("smsgw_webhook_attempts_total", r#"outcome="timeout""#),
        ("smsgw_campaign_recipients_total", r#"state="delivered""#),
        ("smsgw_ai_drafts_total", r#"outcome="created""#),
        // Counted from the database at the scrape (every status, 0 when none).
        ("smsgw_messages", r#"status="queued""#),
        ("smsgw_messages", r#"status="delivered""#),
        ("smsgw_messages", r#"status="canceled""#),
    ] {
        assert!(
            sample(&text, name, &[label]).is_some(),
            "{name}{{{label}}} exists before any event:\n{text}"
        );
    }

    // Requests by route pattern and status, with latency.
    let id = uuid::Uuid::now_v7();
    app.request(
        "GET",
        &format!("/v1/messages/{id}"),
        Some(&app.test_key),
        None,
    )
    .await
    .expect(404);
    app.request("GET", "/no/such/route", None, None)
        .await
        .expect(404);
    let sent = app.send_test(RECIPIENT, "counted").await.expect(202);
    app.wait_for_status(
        &app.test_key,
        sent.data()["id"].as_str().unwrap(),
        "delivered",
    )
    .await;
    // A held message waits in the single queue of its (simulated) phone.
    app.send(
        &app.test_key,
        json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": "later",
                "scheduled_for": "2999-01-01T00:00:00Z" }),
    )
    .await
    .expect(202);
    let (_, _phone) = app.online_phone(SENDER).await;

    let text = scrape_until(&app, "metrics after traffic", |text| {
        sample(text, "smsgw_phones_online", &[]).is_some_and(|v| v >= 1.0)
            && sample(text, "smsgw_queue_depth", &[r#"class="single""#]).is_some_and(|v| v >= 1.0)
    })
    .await;
    for labels in [
        &[
            r#"route="/v1/messages/{id}""#,
            r#"method="GET""#,
            r#"status="404""#,
        ][..],
        &[
            r#"route="/v1/messages/send""#,
            r#"method="POST""#,
            r#"status="202""#,
        ][..],
        &[r#"route="unmatched""#, r#"status="404""#][..],
    ] {
        assert!(
            sample(&text, "smsgw_http_requests_total", labels).is_some_and(|v| v >= 1.0),
            "requests counted by route pattern and status {labels:?}:\n{text}"
        );
        let mut bucket = labels.to_vec();
        bucket.push(r#"le="+Inf""#);
        assert!(
            sample(&text, "smsgw_http_request_duration_seconds_bucket", &bucket)
                .is_some_and(|v| v >= 1.0),
            "latency histogram by route and status {labels:?}"
        );
    }
    // (A histogram shows once it has a sample: smsgw_webhook_attempt_duration_seconds appears
    // with the first webhook attempt.)
    for name in [
        "smsgw_http_requests_total",
        "smsgw_http_request_duration_seconds",
        "smsgw_message_transitions_total",
        "smsgw_phones_online",
        "smsgw_queue_depth",
        "smsgw_webhook_attempts_total",
        "smsgw_campaign_recipients_total",
        "smsgw_ai_drafts_total",
        "smsgw_messages",
        "smsgw_writer_batch_jobs",
        "smsgw_writer_commit_duration_seconds",
    ] {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} is described:\n{text}"
        );
    }
    assert!(
        !text.contains(&id.to_string()),
        "ids never become label values (the route pattern is used)"
    );
    // The writer's transactions: jobs per batch in buckets of its own (1 … 512), durations in
    // the latency buckets. The send above committed at least one batch.
    assert!(
        sample(&text, "smsgw_writer_batch_jobs_bucket", &[r#"le="512""#]).is_some_and(|v| v >= 1.0),
        "batch sizes counted in jobs:\n{text}"
    );
    assert!(
        sample(&text, "smsgw_writer_batch_jobs_sum", &[]).is_some_and(|v| v >= 1.0),
        "jobs summed:\n{text}"
    );
    assert!(
        sample(
            &text,
            "smsgw_writer_commit_duration_seconds_bucket",
            &[r#"le="10""#]
        )
        .is_some_and(|v| v >= 1.0),
        "commit durations counted:\n{text}"
    );
    for kind in ["queued", "sending", "sent", "delivered"] {
        assert!(
            sample(
                &text,
                "smsgw_message_transitions_total",
                &[&format!("kind=\"{kind}\"")]
            )
            .is_some_and(|v| v >= 1.0),
            "transition {kind} counted"
        );
    }
}

backend_tests!(
    health_ready_and_metrics,
    metrics_cover_requests_messages_phones_queues,
);
