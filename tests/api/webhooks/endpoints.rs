//! Webhook endpoints: the API and its validation, and the SSRF refusals at creation and at
//! delivery.

use super::*;
use crate::helpers::typed;
use smsgw::api::webhooks::DeliveryAttemptOut;

async fn endpoint_api_and_validation(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let receiver = WebhookReceiver::start().await;
    let created = app.create_webhook(&app.live_key,
        json!({ "url": receiver.url, "events": ["message.sent", "message.sent", "message.failed"],
                "phone_numbers": [SENDER, SENDER] }),
    )
    .await;
    let id = created["id"].as_str().unwrap().to_string();
    let key = created["signing_key"].as_str().unwrap();
    assert!(key.starts_with("whsec_"), "{created}");
    assert_eq!(created["events"], json!(["message.sent", "message.failed"]));
    assert_eq!(created["phone_numbers"], json!(["+14155550100"]));
    assert_eq!(created["enabled"], true);
    assert!(is_api_timestamp(created["created_at"].as_str().unwrap()));

    let got = app
        .get(&format!("/v1/webhooks/{id}"), &app.live_key)
        .await
        .expect(200);
    assert_eq!(got.data()["url"], receiver.url.as_str());
    assert!(
        got.data().get("signing_key").is_none(),
        "key shown again: {}",
        got.body
    );
    let listed = app.get("/v1/webhooks", &app.live_key).await.expect(200);
    assert_eq!(listed.data()["webhooks"].as_array().unwrap().len(), 1);
    assert!(listed.data()["webhooks"][0].get("signing_key").is_none());
    assert_eq!(listed.data()["has_more"], false);

    // The other mode sees nothing.
    app.get(&format!("/v1/webhooks/{id}"), &app.test_key)
        .await
        .expect_error(404, "not_found");
    let other = app.get("/v1/webhooks", &app.test_key).await.expect(200);
    assert_eq!(other.data()["webhooks"], json!([]));

    let patched = app
        .patch(
            &format!("/v1/webhooks/{id}"),
            &app.live_key,
            json!({ "events": ["message.delivered"], "phone_numbers": [], "enabled": false }),
        )
        .await
        .expect(200);
    assert_eq!(patched.data()["events"], json!(["message.delivered"]));
    assert_eq!(patched.data()["phone_numbers"], json!([]));
    assert_eq!(patched.data()["enabled"], false);

    let rotated = app
        .post(
            &format!("/v1/webhooks/{id}/rotate-key"),
            &app.live_key,
            json!({}),
        )
        .await
        .expect(200);
    let new_key = rotated.data()["signing_key"].as_str().unwrap();
    assert!(new_key.starts_with("whsec_") && new_key != key);

    // Validation: 422 naming the field; nothing is created.
    app.post(
        "/v1/webhooks",
        &app.live_key,
        json!({ "events": ["message.sent"] }),
    )
    .await
    .expect_error(422, "validation_failed");
    let r = app
        .post(
            "/v1/webhooks",
            &app.live_key,
            json!({ "url": receiver.url, "events": ["message.sent", "message.bounced"] }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(r.data()["field"], "events[1]");
    let r = app
        .post(
            "/v1/webhooks",
            &app.live_key,
            json!({ "url": receiver.url, "events": [] }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(r.data()["field"], "events");
    let r = app
        .post(
            "/v1/webhooks",
            &app.live_key,
            json!({ "url": receiver.url, "events": ["message.sent"], "phone_numbers": ["12"] }),
        )
        .await
        .expect_error(422, "invalid_phone_number");
    assert_eq!(r.data()["field"], "phone_numbers[0]");
    let r = app
        .post(
            "/v1/webhooks",
            &app.live_key,
            json!({ "url": "ftp://example.com/x", "events": ["message.sent"] }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(r.data()["field"], "url");
    app.post(
        "/v1/webhooks",
        &app.live_key,
        json!({ "url": 5, "events": ["message.sent"] }),
    )
    .await
    .expect_error(400, "invalid_json");
    let listed = app.get("/v1/webhooks", &app.live_key).await.expect(200);
    assert_eq!(listed.data()["webhooks"].as_array().unwrap().len(), 1);
    let r = app
        .get(
            "/v1/webhooks/not-a-uuid/deliveries?cursor=zzz",
            &app.live_key,
        )
        .await;
    assert_eq!(r.status, 404);
    let r = app
        .get(
            &format!("/v1/webhooks/{id}/deliveries?limit=0"),
            &app.live_key,
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(r.data()["field"], "limit");

    app.delete(&format!("/v1/webhooks/{id}"), &app.live_key)
        .await
        .expect(200);
    app.get(&format!("/v1/webhooks/{id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
    app.delete(&format!("/v1/webhooks/{id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
    receiver.stop().await;
}

async fn every_ssrf_class_is_refused_at_creation(backend: Backend) {
    let resolver = Arc::new(StaticResolver::new());
    resolver.set("loopback.example", vec!["127.0.0.1".parse().unwrap()]);
    resolver.set("private.example", vec!["10.1.2.3".parse().unwrap()]);
    resolver.set(
        "mixed.example",
        vec![
            "93.184.216.34".parse().unwrap(),
            "192.168.1.1".parse().unwrap(),
        ],
    );
    resolver.set("metadata.example", vec!["169.254.169.254".parse().unwrap()]);
    resolver.set("v6local.example", vec!["fd00::1".parse().unwrap()]);
    resolver.set("public.example", vec!["93.184.216.34".parse().unwrap()]);
    let app = spawn_app_with_resolver(backend, resolver, |_| {}).await;
    assert!(!app.settings.webhooks.allow_insecure_targets);
    let refused = [
        "http://public.example/hook",
        "https://127.0.0.1/hook",
        "https://127.1.2.3:8443/hook",
        "https://[::1]/hook",
        "https://10.0.0.1/hook",
        "https://172.16.5.4/hook",
        "https://192.168.0.10/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://100.64.0.1/hook",
        "https://[fc00::1]/hook",
        "https://[fe80::1]/hook",
        "https://224.0.0.1/hook",
        "https://[ff02::1]/hook",
        "https://0.0.0.0/hook",
        "https://[::]/hook",
        "https://192.0.2.1/hook",
        "https://198.51.100.7/hook",
        "https://203.0.113.9/hook",
        "https://[2001:db8::1]/hook",
        "https://198.18.0.1/hook",
        "https://[::ffff:127.0.0.1]/hook",
        "https://[::ffff:10.0.0.1]/hook",
        "https://[64:ff9b::a9fe:a9fe]/hook",
        "https://[2002:7f00:1::]/hook",
        "https://2130706433/hook",
        "https://0x7f.0.0.1/hook",
        "https://user:pw@public.example/hook",
        "https://loopback.example/hook",
        "https://private.example/hook",
        "https://mixed.example/hook",
        "https://metadata.example/hook",
        "https://v6local.example/hook",
        "https://unknown.example/hook",
    ];
    for url in refused {
        let reply = app
            .post(
                "/v1/webhooks",
                &app.live_key,
                json!({ "url": url, "events": ["message.sent"] }),
            )
            .await;
        assert_eq!(reply.status, 422, "{url} was not refused: {}", reply.body);
        assert_eq!(reply.code(), "validation_failed", "{url}");
        assert_eq!(reply.data()["field"], "url", "{url}");
        // An http://, private or loopback target names the setting that allows it.
        let message = reply.body["message"].as_str().unwrap_or_default();
        let insecure = url.starts_with("http://")
            || url.contains("127.")
            || url.contains("loopback.")
            || url.contains("private.");
        if insecure {
            assert!(
                message.contains("webhooks.allow_insecure_targets"),
                "{url}: {message}"
            );
        }
    }
    let listed = app.get("/v1/webhooks", &app.live_key).await.expect(200);
    assert_eq!(listed.data()["webhooks"], json!([]));
    // A public name is accepted (no request is made at creation).
    app.create_webhook(
        &app.live_key,
        json!({ "url": "https://public.example/hook", "events": ["message.sent"] }),
    )
    .await;
}

async fn a_name_rebound_to_loopback_is_refused_at_delivery(backend: Backend) {
    let resolver = Arc::new(StaticResolver::new());
    resolver.set("rebind.example", vec!["93.184.216.34".parse().unwrap()]);
    let app = spawn_app_with_resolver(backend, resolver.clone(), |s| {
        s.webhooks.retry_schedule = vec![Duration::from_millis(200)];
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    let endpoint = app
        .create_webhook(
            &app.test_key,
            json!({ "url": "https://rebind.example/hook", "events": ["message.sent"] }),
        )
        .await;
    // After creation the name re-resolves to loopback (DNS rebinding).
    resolver.set("rebind.example", vec!["127.0.0.1".parse().unwrap()]);
    let id = endpoint["id"].as_str().unwrap();
    app.send_test(RECIPIENT, "rebind").await.expect(202);
    let rows = wait_for_attempts(&app, &app.test_key, id, 1).await;
    assert_eq!(rows[0]["error"], "blocked_address", "{}", rows[0]);
    assert_eq!(typed::<DeliveryAttemptOut>(&rows[0]).status_code, None);
    assert_eq!(rows[0]["state"], "failed");
    assert!(receiver.received().is_empty());
    receiver.stop().await;
}

backend_tests!(
    endpoint_api_and_validation,
    every_ssrf_class_is_refused_at_creation,
    a_name_rebound_to_loopback_is_refused_at_delivery,
);
