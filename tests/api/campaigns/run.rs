//! A campaign's state machine on a live phone: schedules, feeding at the phone's pace, pause,
//! resume, cancel and restarts.

use super::*;
use crate::helpers::typed;
use smsgw::api::campaigns::{CampaignOut, CampaignRecipientOut};

/// The moves of docs/api.md, Campaigns, on a campaign scheduled an hour ahead (so nothing sends),
/// and the 409 `invalid_state` of every other move.
async fn scheduled_pause_resume_cancel(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = &app.test_key;
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let mut body = launched(campaign("Later", plain(&numbers(3))));
    body["scheduled_for"] = json!(later.to_rfc3339());
    let created = create(&app, key, body).await;
    let id = id_of(&created);
    assert_eq!(created["status"], "scheduled");
    let echoed = parse_time(&created["scheduled_for"]);
    assert!(
        (echoed.timestamp_millis() - later.timestamp_millis()).abs() <= 1,
        "scheduled_for kept: {echoed} vs {later}"
    );
    assert_eq!(created["counts"], counts(&[("total", 3), ("pending", 3)]));

    assert_invalid_state(control(&app, key, &id, "launch").await, "scheduled");
    assert_invalid_state(control(&app, key, &id, "resume").await, "scheduled");
    let paused = control(&app, key, &id, "pause").await.expect(200);
    assert_eq!(paused.data()["status"], "paused");
    assert_eq!(read(&app, key, &id).await["status"], "paused");
    assert_invalid_state(control(&app, key, &id, "pause").await, "paused");
    assert_invalid_state(control(&app, key, &id, "launch").await, "paused");
    let resumed = control(&app, key, &id, "resume").await.expect(200);
    assert_eq!(
        resumed.data()["status"],
        "scheduled",
        "scheduled_for is still ahead"
    );
    let canceled = control(&app, key, &id, "cancel").await.expect(200);
    assert_eq!(canceled.data()["status"], "canceled");
    assert_eq!(
        canceled.data()["counts"],
        counts(&[("total", 3), ("canceled", 3)])
    );
    for operation in ["resume", "pause", "launch", "cancel"] {
        assert_invalid_state(control(&app, key, &id, operation).await, "canceled");
    }
    let list = recipients(&app, key, &id).await;
    assert_eq!(statuses(&list), ["canceled"; 3]);
    for r in &list {
        assert_eq!(typed::<CampaignRecipientOut>(r).message_id, None, "{r}");
    }
    assert_eq!(read(&app, key, &id).await["status"], "canceled");

    // A draft can be neither paused nor resumed, but it can be canceled.
    let draft = id_of(&create(&app, key, campaign("Draft", plain(&numbers(1)))).await);
    assert_invalid_state(control(&app, key, &draft, "pause").await, "draft");
    assert_invalid_state(control(&app, key, &draft, "resume").await, "draft");
    let canceled = control(&app, key, &draft, "cancel").await.expect(200);
    assert_eq!(canceled.data()["status"], "canceled");
    assert_eq!(
        canceled.data()["counts"],
        counts(&[("total", 1), ("canceled", 1)])
    );

    // Launching a draft whose scheduled_for is ahead schedules it.
    let mut body = campaign("Draft for later", plain(&numbers(1)));
    body["scheduled_for"] = json!(later.to_rfc3339());
    let draft = id_of(&create(&app, key, body).await);
    let launched = control(&app, key, &draft, "launch").await.expect(200);
    assert_eq!(launched.data()["status"], "scheduled");

    let control_message = control_campaign_completes(&app).await;
    assert!(
        outbound_besides(&app, key, &control_message)
            .await
            .is_empty(),
        "nothing scheduled, paused or canceled was sent"
    );
}

/// A campaign scheduled shortly ahead starts by itself at that time and completes.
async fn scheduled_campaign_starts_on_time(backend: Backend) {
    let app = spawn_app(backend).await;
    let at = chrono::Utc::now() + chrono::Duration::milliseconds(1500);
    let mut body = launched(campaign("Soon", plain(&numbers(2))));
    body["scheduled_for"] = json!(at.to_rfc3339());
    let created = create(&app, &app.test_key, body).await;
    let id = id_of(&created);
    assert_eq!(created["status"], "scheduled");
    assert_eq!(typed::<CampaignOut>(&created).started_at, None);
    let done = wait_for_campaign_status(&app, &app.test_key, &id, "completed").await;
    assert_eq!(done["counts"], counts(&[("total", 2), ("delivered", 2)]));
    let earliest = at - chrono::Duration::milliseconds(1);
    assert!(
        parse_time(&done["started_at"]) >= earliest,
        "started at scheduled_for: {done}"
    );
    for message in outbound_messages(&app, &app.test_key).await {
        assert!(parse_time(&message["sent_at"]) >= earliest, "{message}");
    }
}

/// A live campaign waits for its phone (nothing fails meanwhile), then feeds it every recipient
/// in order as campaign messages, and completes once every message is delivered.
async fn live_campaign_feeds_the_phone_in_order(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let to = numbers(5);
    let recipients_in: Vec<Value> = to
        .iter()
        .enumerate()
        .map(|(i, n)| json!({ "to": n, "vars": { "n": i.to_string() } }))
        .collect();
    let mut body = launched(campaign("Live", json!(recipients_in)));
    body["body"] = json!("Number {{n}}");
    let created = create(&app, &app.live_key, body).await;
    let id = id_of(&created);
    assert_eq!(created["status"], "running");

    // No phone online: the campaign waits (and a test-mode campaign meanwhile runs its
    // whole life).
    control_campaign_completes(&app).await;
    let waiting = read(&app, &app.live_key, &id).await;
    assert_eq!(waiting["status"], "running");
    assert_eq!(waiting["counts"], counts(&[("total", 5), ("pending", 5)]));

    let mut phone = app.connect_phone(&token).await;
    let sends = expect_sends(&mut phone, 5).await;
    let sent_to: Vec<&str> = sends.iter().map(|(_, to, _)| to.as_str()).collect();
    assert_eq!(sent_to, to, "recipient order");
    let contents: Vec<&str> = sends.iter().map(|(_, _, c)| c.as_str()).collect();
    assert_eq!(
        contents,
        ["Number 0", "Number 1", "Number 2", "Number 3", "Number 4"]
    );
    let ids: Vec<Uuid> = sends.iter().map(|(id, ..)| *id).collect();
    let list = wait_for_recipients(&app, &app.live_key, &id, |list| {
        list.iter().all(|r| r["message_id"].is_string())
    })
    .await;
    assert_eq!(statuses(&list), ["queued"; 5], "with the phone: queued");
    let listed: Vec<String> = list
        .iter()
        .map(|r| r["message_id"].as_str().unwrap().to_string())
        .collect();
    let framed: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    assert_eq!(listed, framed);

    report_delivered(&mut phone, &ids).await;
    let done = wait_for_campaign_status(&app, &app.live_key, &id, "completed").await;
    assert_eq!(done["counts"], counts(&[("total", 5), ("delivered", 5)]));
    assert!(done["finished_at"].is_string());
    let list = recipients(&app, &app.live_key, &id).await;
    assert_eq!(statuses(&list), ["delivered"; 5]);
    let message = app
        .get(&format!("/v1/messages/{}", ids[0]), &app.live_key)
        .await
        .expect(200);
    assert_eq!(message.data()["campaign_id"], id.as_str());
    assert_eq!(message.data()["device_id"], phone_id.as_str());
    assert_eq!(message.data()["test_mode"], false);
    assert!(
        phone.next_frame_within(QUIET).await.is_none(),
        "nothing sent twice"
    );
}

/// Pause withdraws the messages not yet with the phone (their records go, the recipients are
/// pending again) and stops the feeding even when the pace would allow more; the messages with
/// the phone finish; resume queues the rest anew.
async fn pause_withdraws_queued_messages_and_resume_sends_the_rest(backend: Backend) {
    let PacedCampaign {
        app,
        phone_id,
        mut phone,
        to,
        id,
        first,
        ..
    } = paced_campaign(backend, "Paused").await;
    assert_eq!([&first[0].1, &first[1].1], [&to[0], &to[1]]);
    // The pace holds the other three in the queue.
    let list = wait_for_recipients(&app, &app.live_key, &id, |list| {
        list.iter().all(|r| r["message_id"].is_string())
    })
    .await;
    let withdrawn: Vec<String> = list[2..]
        .iter()
        .map(|r| r["message_id"].as_str().unwrap().to_string())
        .collect();

    let paused = control(&app, &app.live_key, &id, "pause").await.expect(200);
    assert_eq!(paused.data()["status"], "paused");
    let list = recipients(&app, &app.live_key, &id).await;
    assert_eq!(
        statuses(&list),
        ["queued", "queued", "pending", "pending", "pending"]
    );
    for message_id in &withdrawn {
        app.get(&format!("/v1/messages/{message_id}"), &app.live_key)
            .await
            .expect_error(404, "not_found");
    }
    let campaign = read(&app, &app.live_key, &id).await;
    assert_eq!(
        campaign["counts"],
        counts(&[("total", 5), ("queued", 2), ("pending", 3)])
    );
    app.set_pace(&phone_id, 100, 100).await;
    assert!(
        phone.next_frame_within(QUIET).await.is_none(),
        "a paused campaign feeds nothing"
    );

    // The two with the phone finish; the campaign stays paused.
    finish_while_paused(&app, &id, &mut phone, &first).await;

    let resumed = control(&app, &app.live_key, &id, "resume")
        .await
        .expect(200);
    assert_eq!(resumed.data()["status"], "running");
    let rest = expect_sends(&mut phone, 3).await;
    let rest_to: Vec<&str> = rest.iter().map(|(_, to, _)| to.as_str()).collect();
    assert_eq!(rest_to, &to[2..]);
    for (message_id, ..) in &rest {
        assert!(
            !withdrawn.contains(&message_id.to_string()),
            "queued anew with new ids"
        );
    }
    let ids: Vec<Uuid> = rest.iter().map(|(id, ..)| *id).collect();
    report_delivered(&mut phone, &ids).await;
    let done = wait_for_campaign_status(&app, &app.live_key, &id, "completed").await;
    assert_eq!(done["counts"], counts(&[("total", 5), ("delivered", 5)]));
    assert_eq!(outbound_messages(&app, &app.live_key).await.len(), 5);
}

/// A message handed to a phone that went away before reporting is `queued` again, but it may
/// have been sent: pause leaves it (it goes out again, with its id, for the phone to dedupe)
/// and withdraws only the messages no phone ever had.
async fn pause_keeps_messages_a_phone_already_had(backend: Backend) {
    let PacedCampaign {
        app,
        phone_id,
        token,
        phone,
        id,
        first: handed,
        ..
    } = paced_campaign(backend, "Gone").await;
    wait_for_recipients(&app, &app.live_key, &id, |list| {
        list.iter().all(|r| r["message_id"].is_string())
    })
    .await;
    phone.close().await;
    app.wait_online(&phone_id, false).await;
    for (message_id, ..) in &handed {
        app.wait_for_status(&app.live_key, &message_id.to_string(), "queued")
            .await;
    }

    control(&app, &app.live_key, &id, "pause").await.expect(200);
    let list = recipients(&app, &app.live_key, &id).await;
    assert_eq!(
        statuses(&list),
        ["queued", "queued", "pending", "pending", "pending"]
    );
    for (message_id, ..) in &handed {
        let message = app.message(&app.live_key, &message_id.to_string()).await;
        assert_eq!(message["status"], "queued");
        assert_eq!(message["send_attempts"], 1);
    }

    app.set_pace(&phone_id, 100, 100).await;
    let mut phone = app.connect_phone(&token).await;
    let again = expect_sends(&mut phone, 2).await;
    let again_ids: HashSet<Uuid> = again.iter().map(|(id, ..)| *id).collect();
    let handed_ids: HashSet<Uuid> = handed.iter().map(|(id, ..)| *id).collect();
    assert_eq!(
        again_ids, handed_ids,
        "the same messages, for the phone to dedupe"
    );
    assert!(
        phone.next_frame_within(QUIET).await.is_none(),
        "a paused campaign feeds nothing more"
    );
    finish_while_paused(&app, &id, &mut phone, &again).await;
}

/// Cancel marks the pending recipients and the queued messages `canceled`; the messages
/// already with the phone finish; nothing more is fed.
async fn cancel_stops_a_running_live_campaign(backend: Backend) {
    let PacedCampaign {
        app,
        phone_id,
        mut phone,
        id,
        first,
        ..
    } = paced_campaign(backend, "Stop").await;
    let list = wait_for_recipients(&app, &app.live_key, &id, |list| {
        list.iter().all(|r| r["message_id"].is_string())
    })
    .await;
    let queued: Vec<String> = list[2..]
        .iter()
        .map(|r| r["message_id"].as_str().unwrap().to_string())
        .collect();

    let canceled = control(&app, &app.live_key, &id, "cancel")
        .await
        .expect(200);
    assert_eq!(canceled.data()["status"], "canceled");
    for message_id in &queued {
        let message = app
            .wait_for_status(&app.live_key, message_id, "canceled")
            .await;
        assert!(
            message["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["type"] == "canceled"),
            "{message}"
        );
    }
    app.set_pace(&phone_id, 100, 100).await;
    assert!(
        phone.next_frame_within(QUIET).await.is_none(),
        "a canceled campaign feeds nothing"
    );
    let ids: Vec<Uuid> = first.iter().map(|(id, ..)| *id).collect();
    report_delivered(&mut phone, &ids).await;
    let list = wait_for_recipients(&app, &app.live_key, &id, |list| {
        statuses(list)[..2] == ["delivered", "delivered"]
    })
    .await;
    assert_eq!(statuses(&list)[2..], ["canceled"; 3]);
    let campaign = read(&app, &app.live_key, &id).await;
    assert_eq!(campaign["status"], "canceled", "not completed");
    assert_eq!(
        campaign["counts"],
        counts(&[("total", 5), ("delivered", 2), ("canceled", 3)])
    );
}

/// A restart mid-campaign loses nothing and repeats nothing: every recipient is sent exactly
/// once across both server lives, and the campaign completes.
async fn restart_carries_on_without_sending_twice(backend: Backend) {
    let app = spawn_paced(backend, 2, 2).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let mut phone = app.connect_phone(&token).await;
    let to = numbers(5);
    let id = id_of(
        &create(
            &app,
            &app.live_key,
            launched(campaign("Restart", plain(&to))),
        )
        .await,
    );
    let before = expect_sends(&mut phone, 2).await;
    let ids: Vec<Uuid> = before.iter().map(|(id, ..)| *id).collect();
    report_delivered(&mut phone, &ids).await;
    wait_for_campaign(&app, &app.live_key, &id, |c| c["counts"]["delivered"] == 2).await;

    drop(phone);
    let app = app.restart().await;
    let mut phone = app.connect_phone(&token).await;
    assert_eq!(read(&app, &app.live_key, &id).await["status"], "running");
    app.set_pace(&phone_id, 100, 100).await;
    let after = expect_sends(&mut phone, 3).await;
    let ids: Vec<Uuid> = after.iter().map(|(id, ..)| *id).collect();
    report_delivered(&mut phone, &ids).await;
    assert!(
        phone.next_frame_within(QUIET).await.is_none(),
        "no recipient is sent twice"
    );

    let all: Vec<&(Uuid, String, String)> = before.iter().chain(after.iter()).collect();
    let message_ids: HashSet<Uuid> = all.iter().map(|(id, ..)| *id).collect();
    let mut sent_to: Vec<&str> = all.iter().map(|(_, to, _)| to.as_str()).collect();
    sent_to.sort();
    assert_eq!(message_ids.len(), 5, "five distinct messages");
    assert_eq!(sent_to, to, "each recipient exactly once");

    let done = wait_for_campaign_status(&app, &app.live_key, &id, "completed").await;
    assert_eq!(done["counts"], counts(&[("total", 5), ("delivered", 5)]));
    let listed: HashSet<Uuid> = recipients(&app, &app.live_key, &id)
        .await
        .iter()
        .map(|r| r["message_id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(listed, message_ids);
    assert_eq!(outbound_messages(&app, &app.live_key).await.len(), 5);
}

backend_tests!(
    scheduled_pause_resume_cancel,
    scheduled_campaign_starts_on_time,
    live_campaign_feeds_the_phone_in_order,
    pause_withdraws_queued_messages_and_resume_sends_the_rest,
    pause_keeps_messages_a_phone_already_had,
    cancel_stops_a_running_live_campaign,
    restart_carries_on_without_sending_twice,
);
