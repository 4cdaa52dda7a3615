//! `DELETE /v1/campaigns/{id}` (docs/api.md, Campaigns): a draft or a finished campaign goes with
//! its recipients, its messages stay; a scheduled, running or paused one must be canceled first.

use super::*;

/// `GET /v1/campaigns/{id}` and its recipients answer 404.
async fn assert_gone(app: &TestApp, key: &str, id: &str) {
    app.get(&format!("/v1/campaigns/{id}"), key)
        .await
        .expect_error(404, "not_found");
    app.get(&format!("/v1/campaigns/{id}/recipients"), key)
        .await
        .expect_error(404, "not_found");
}

/// A draft, a completed and a canceled campaign are deleted: 404 afterwards, recipients gone,
/// the completed one's messages kept with their `campaign_id`. Another mode's key, and a second
/// delete, find nothing.
async fn drafts_and_finished_campaigns_are_deleted(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = &app.test_key;

    let draft = id_of(&create(&app, key, campaign("Draft", plain(&numbers(3)))).await);
    // The live side of the workspace does not see the test side's campaign.
    app.delete(&format!("/v1/campaigns/{draft}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
    assert_eq!(read(&app, key, &draft).await["status"], "draft");
    let reply = app
        .delete(&format!("/v1/campaigns/{draft}"), key)
        .await
        .expect(200);
    assert_eq!(reply.data()["id"], draft.as_str(), "body: {}", reply.body);
    assert_gone(&app, key, &draft).await;
    app.delete(&format!("/v1/campaigns/{draft}"), key)
        .await
        .expect_error(404, "not_found");

    let done = id_of(&create(&app, key, launched(campaign("Done", plain(&numbers(2))))).await);
    wait_for_campaign_status(&app, key, &done, "completed").await;
    let sent: Vec<String> = recipients(&app, key, &done)
        .await
        .iter()
        .map(|r| r["message_id"].as_str().expect("a message").to_string())
        .collect();
    app.delete(&format!("/v1/campaigns/{done}"), key)
        .await
        .expect(200);
    assert_gone(&app, key, &done).await;
    assert!(campaigns(&app, key).await.is_empty(), "no campaign is left");
    for message in &sent {
        let kept = app
            .get(&format!("/v1/messages/{message}"), key)
            .await
            .expect(200);
        assert_eq!(kept.data()["status"], "delivered");
        assert_eq!(kept.data()["campaign_id"], done.as_str());
    }

    let canceled = id_of(&create(&app, key, campaign("Canceled", plain(&numbers(1)))).await);
    control(&app, key, &canceled, "cancel").await.expect(200);
    app.delete(&format!("/v1/campaigns/{canceled}"), key)
        .await
        .expect(200);
    assert_gone(&app, key, &canceled).await;
    app.delete("/v1/campaigns/not-an-id", key)
        .await
        .expect_error(404, "not_found");
}

/// A scheduled, running or paused campaign is refused with 409 `invalid_state` (cancel it first)
/// and stays as it was; once canceled it can be deleted.
async fn live_campaigns_must_be_canceled_first(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = &app.test_key;
    // Never delivered: the campaign stays running.
    let id = id_of(
        &create(
            &app,
            key,
            launched(campaign("Running", plain(&[NEVER_DELIVERED.to_string()]))),
        )
        .await,
    );
    wait_for_campaign(&app, key, &id, |c| c["counts"]["sent"] == 1).await;
    for status in ["running", "paused"] {
        let refused = app.delete(&format!("/v1/campaigns/{id}"), key).await;
        assert!(
            refused.body["message"]
                .as_str()
                .is_some_and(|m| m.contains("cancel it first")),
            "body: {}",
            refused.body
        );
        assert_invalid_state(refused, status);
        assert_eq!(read(&app, key, &id).await["status"], status);
        if status == "running" {
            control(&app, key, &id, "pause").await.expect(200);
        }
    }
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let mut body = launched(campaign("Later", plain(&numbers(1))));
    body["scheduled_for"] = json!(later.to_rfc3339());
    let scheduled = id_of(&create(&app, key, body).await);
    assert_invalid_state(
        app.delete(&format!("/v1/campaigns/{scheduled}"), key).await,
        "scheduled",
    );
    for id in [&id, &scheduled] {
        control(&app, key, id, "cancel").await.expect(200);
        app.delete(&format!("/v1/campaigns/{id}"), key)
            .await
            .expect(200);
        assert_gone(&app, key, id).await;
    }
}

backend_tests!(
    drafts_and_finished_campaigns_are_deleted,
    live_campaigns_must_be_canceled_first,
);
