//! `GET /v1/events/stream` in the document: each server-sent event is declared (`LiveEvent`,
//! one schema per event name, its `data` the JSON text of a documented payload), and every
//! event a live stream carries validates against that declaration.

use std::time::Duration;

use futures_util::StreamExt;
use smsgw::domain::protocol::PhoneFrame;

use super::validator::{conforms_event, event_errors};
use super::*;

const STREAM: &str = "/v1/events/stream";

/// The event names the document declares for the stream, through its `oneOf`.
fn declared_event_names(doc: &Value) -> BTreeSet<String> {
    let schema =
        &doc["paths"][STREAM]["get"]["responses"]["200"]["content"]["text/event-stream"]["schema"];
    let name = schema["$ref"]
        .as_str()
        .expect("the stream's schema is a component");
    let live_event =
        &doc["components"]["schemas"][name.trim_start_matches("#/components/schemas/")];
    live_event["oneOf"]
        .as_array()
        .expect("one schema per event")
        .iter()
        .flat_map(|option| {
            let event = option["$ref"].as_str().unwrap();
            let event =
                &doc["components"]["schemas"][event.trim_start_matches("#/components/schemas/")];
            assert_eq!(
                event["properties"]["data"]["contentMediaType"], "application/json",
                "{event}"
            );
            assert!(
                event["properties"]["data"]["contentSchema"]["$ref"].is_string(),
                "{event}"
            );
            event["properties"]["event"]["enum"]
                .as_array()
                .unwrap()
                .clone()
        })
        .map(|name| name.as_str().unwrap().to_string())
        .collect()
}

/// Reads the next event of an SSE body as `{event, data}` (data as its raw text; comments
/// skipped), or None when none comes within 10 s.
async fn next_event(
    body: &mut (
             impl futures_util::Stream<Item = Result<bytes::Bytes, awc::error::PayloadError>> + Unpin
         ),
    buffer: &mut String,
) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let mut event = serde_json::Map::new();
            for line in block.lines().filter(|l| !l.starts_with(':')) {
                if let Some((field, value)) = line.split_once(": ") {
                    event.insert(field.to_string(), Value::String(value.to_string()));
                }
            }
            if !event.is_empty() {
                return Some(Value::Object(event));
            }
        }
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .ok()??;
        buffer.push_str(std::str::from_utf8(&chunk.ok()?).unwrap());
    }
}

async fn every_live_event_matches_its_declared_schema(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    assert_eq!(
        declared_event_names(&doc),
        ["message.status", "phone.status", "snapshot"]
            .map(String::from)
            .into()
    );
    let (_, token) = app.pair_phone(SENDER).await;
    let response = app
        .client
        .get(format!("{}{STREAM}", app.address))
        .insert_header(("x-api-key", app.live_key.as_str()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut body = Box::pin(response);
    let mut buffer = String::new();

    // Every kind of event: the snapshot, a phone online and offline, an outbound message's
    // statuses and an inbound message.
    let mut phone = app.connect_phone(&token).await;
    let id = app.send_live("validated events").await;
    let (message_id, ..) = phone.expect_send().await;
    assert_eq!(message_id.to_string(), id);
    phone
        .report_acked(PhoneFrame::Sent {
            message_id,
            reference: Some("s1".into()),
        })
        .await;
    phone
        .report_acked(PhoneFrame::Delivered {
            message_id,
            reference: Some("d1".into()),
        })
        .await;
    phone.receive("in1", "+14155550177", "an answer").await;
    phone.close().await;

    let mut seen = Vec::new();
    let mut phone_went_offline = false;
    while !phone_went_offline {
        let event = next_event(&mut body, &mut buffer)
            .await
            .unwrap_or_else(|| panic!("the stream stopped short; events so far: {seen:?}"));
        conforms_event(&doc, "get", STREAM, &event);
        let data: Value = serde_json::from_str(event["data"].as_str().unwrap()).unwrap();
        phone_went_offline = event["event"] == "phone.status" && data["online"] == false;
        seen.push((event["event"].as_str().unwrap().to_string(), data));
    }
    let kinds: BTreeSet<&str> = seen.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(kinds, ["message.status", "phone.status", "snapshot"].into());
    assert!(
        seen.iter()
            .any(|(_, d)| d["direction"] == "inbound" && d["status"] == "delivered"),
        "{seen:?}"
    );
}

/// The check can fail: an event whose data has an undocumented or missing field, whose name
/// and data disagree, or whose data is not JSON text, is refused.
#[test]
fn drifted_events_are_refused() {
    let doc: Value = serde_json::from_str(smsgw::api::openapi::document_json()).unwrap();
    let fine = json!({ "event": "snapshot", "data": "{\"phones\":[]}" });
    assert_eq!(
        event_errors(&doc, "get", STREAM, &fine),
        Vec::<String>::new()
    );
    for drifted in [
        json!({ "event": "snapshot", "data": "{\"phones\":[],\"more\":1}" }),
        json!({ "event": "snapshot", "data": "{}" }),
        json!({ "event": "phone.status", "data": "{\"phones\":[]}" }),
        json!({ "event": "snapshot", "data": { "phones": [] } }),
        json!({ "event": "snapshot", "data": "phones" }),
        json!({ "data": "{\"phones\":[]}" }),
    ] {
        assert!(
            !event_errors(&doc, "get", STREAM, &drifted).is_empty(),
            "{drifted} passed"
        );
    }
}

backend_tests!(every_live_event_matches_its_declared_schema);
