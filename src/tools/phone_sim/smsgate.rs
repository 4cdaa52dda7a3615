//! `smsgw phone-sim --protocol smsgate`: a simulated phone that speaks the device API the way the
//! SMSGate Android app does (docs/api.md "Device API for the SMSGate Android app"): it
//! registers with the device token, reads its webhook and signing key, holds an event stream,
//! fetches on open and on every `MessageEnqueued` (once per hint: like the app, it never asks
//! for a next page by itself after a full one), reports Processed → Sent → Delivered (or
//! Failed), and posts inbound SMS as signed `sms:received` webhooks. Like the app it dedupes
//! fetched messages by id (a known id is reported again, never sent twice; a retry after a
//! failure comes under a new id) and reconnects its stream with backoff, to the next of several
//! server URLs in turn.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use awc::Client;
use futures_util::StreamExt;
use hmac::{Hmac, KeyInit, Mac};
use rand::Rng;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::domain::app_protocol::{AppEvent, AppMessageState};
use crate::domain::status::MessageStatus;

use super::{
    FIRST_BACKOFF, HTTP2_FIRST, SimCommand, SimError, SimEvent, SimOptions, emitter, http_client,
    next_server, send_failure, status_failure, wait,
};
use crate::actors::device_link::AppMessageId;

/// Where the device API is mounted under the server's base URL.
const MOUNT: &str = "/mobile/v1";

/// The app's state names, as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Sent,
    Delivered,
    Failed,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Sent => AppMessageState::Sent,
            State::Delivered => AppMessageState::Delivered,
            State::Failed => AppMessageState::Failed,
        }
        .as_str()
    }

    fn event(self) -> MessageStatus {
        match self {
            State::Sent => MessageStatus::Sent,
            State::Delivered => MessageStatus::Delivered,
            State::Failed => MessageStatus::Failed,
        }
    }
}

/// Why a step of the app's start failed.
enum Failure {
    /// The token was refused (401/403): the simulator stops.
    Refused(u16),
    /// Anything else: reconnect later, saying why.
    Retry(String),
}

/// What registration handed the phone.
struct Registered {
    token: String,
    webhook_url: Option<String>,
    signing_key: String,
}

/// Runs one simulated app until its token is refused.
pub async fn run_phone(
    options: SimOptions,
    events: Option<mpsc::UnboundedSender<SimEvent>>,
    mut commands: Option<mpsc::UnboundedReceiver<SimCommand>>,
) -> Result<(), SimError> {
    let bases = options.server_urls(base_url)?;
    let servers = options.servers();
    let mut at = 0;
    let emit = emitter(&events);
    let client = http_client(&options.ca_certs, HTTP2_FIRST);
    // The last state reported per app message id: a message served again is reported again.
    let mut outcome: HashMap<String, State> = HashMap::new();
    let (timer_tx, mut timer_rx) = mpsc::unbounded_channel::<String>();
    let mut backoff = FIRST_BACKOFF;
    let mut inbound_seq: u64 = 0;
    loop {
        let base = &bases[at];
        let registered = match register(&client, base, servers[at], &options.token).await {
            Ok(registered) => registered,
            Err(Failure::Refused(status)) => return Err(SimError::Refused(status)),
            Err(Failure::Retry(reason)) => {
                at = next_server(at, bases.len());
                backoff = wait(backoff, reason, &emit).await;
                continue;
            }
        };
        let app = AppCalls {
            client: &client,
            base,
            token: &registered.token,
        };
        let stream = client
            .get(format!("{base}/events"))
            .bearer_auth(&registered.token)
            .timeout(Duration::from_secs(3600))
            .send()
            .await;
        let mut stream = match stream {
            Ok(response) if response.status().is_success() => Box::pin(response),
            Ok(response) if response.status().as_u16() == 401 => {
                return Err(SimError::Refused(401));
            }
            failed => {
                let reason = match failed {
                    Ok(response) => status_failure(response.status().as_u16(), servers[at]),
                    Err(err) => send_failure(&err),
                };
                at = next_server(at, bases.len());
                backoff = wait(backoff, reason, &emit).await;
                continue;
            }
        };
        backoff = FIRST_BACKOFF;
        emit(SimEvent::Connected);
        // Fetch on connect, as the app does from 1.53.1 on.
        app.fetch_and_send(&options, &mut outcome, &timer_tx, &emit)
            .await;
        let mut buffer = String::new();
        loop {
            tokio::select! {
                chunk = stream.next() => {
                    let Some(Ok(chunk)) = chunk else { break };
                    buffer.push_str(&String::from_utf8_lossy(&chunk));
                    let mut enqueued = false;
                    while let Some(end) = buffer.find("\n\n") {
                        let frame: String = buffer.drain(..end + 2).collect();
                        if frame.lines().any(|l| l == "event: MessageEnqueued") {
                            enqueued = true;
                        }
                    }
                    if enqueued {
                        app.fetch_and_send(&options, &mut outcome, &timer_tx, &emit).await;
                    }
                }
                Some(app_id) = timer_rx.recv() => {
                    if outcome.get(&app_id) == Some(&State::Sent) {
                        outcome.insert(app_id.clone(), State::Delivered);
                        app.report(&app_id, State::Delivered).await;
                        if let Some(id) = AppMessageId::parse(&app_id) {
                            emit(SimEvent::Reported { message_id: id.message_id, status: MessageStatus::Delivered });
                        }
                    }
                }
                Some(command) = next_command(&mut commands) => {
                    let SimCommand::Receive { from, content } = command else {
                        break; // Reconnect: the event stream is dropped and opened again.
                    };
                    inbound_seq += 1;
                    let reference = format!("sim-{}-{inbound_seq}", Uuid::now_v7());
                    emit(SimEvent::Forwarded { reference: reference.clone() });
                    if let Some(url) = &registered.webhook_url
                        && post_inbound(&client, url, &registered.signing_key, &reference, &from, &content).await
                    {
                        emit(SimEvent::Acked { reference });
                    }
                }
            }
        }
        emit(SimEvent::Disconnected);
        at = next_server(at, bases.len());
        backoff = wait(backoff, "the event stream ended".into(), &emit).await;
    }
}

async fn next_command(
    commands: &mut Option<mpsc::UnboundedReceiver<SimCommand>>,
) -> Option<SimCommand> {
    match commands {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// `POST /device`, `PATCH /device`, `GET /webhooks`, `GET /settings`, as the app's start does
/// (`server` is the URL given, for the hint of a 404).
async fn register(
    client: &Client,
    base: &str,
    server: &str,
    token: &str,
) -> Result<Registered, Failure> {
    let mut reply = client
        .post(format!("{base}/device"))
        .bearer_auth(token)
        .send_json(&json!({ "name": "smsgw/phone-sim", "simCards": [] }))
        .await
        .map_err(|err| Failure::Retry(send_failure(&err)))?;
    let status = reply.status().as_u16();
    if status == 401 || status == 403 {
        return Err(Failure::Refused(status));
    }
    if !reply.status().is_success() {
        return Err(Failure::Retry(status_failure(status, server)));
    }
    let not_the_device_api =
        || Failure::Retry("POST /device did not answer as smsgw's device API".into());
    let body: Value = reply.json().await.map_err(|_| not_the_device_api())?;
    let (Some(id), Some(token)) = (body["id"].as_str(), body["token"].as_str()) else {
        return Err(not_the_device_api());
    };
    let token = token.to_string();
    let _ = client
        .patch(format!("{base}/device"))
        .bearer_auth(&token)
        .send_json(&json!({ "id": id, "simCards": [] }))
        .await;
    let get = |path: &'static str| {
        let request = client.get(format!("{base}{path}")).bearer_auth(&token);
        async move {
            match request.send().await {
                Ok(mut reply) => reply.json::<Value>().await.unwrap_or(Value::Null),
                Err(_) => Value::Null,
            }
        }
    };
    let hooks = get("/webhooks").await;
    let webhook_url = hooks.as_array().and_then(|hooks| {
        hooks
            .iter()
            .find(|h| h["event"] == AppEvent::SmsReceived.as_str())
            .and_then(|h| h["url"].as_str())
            .map(str::to_string)
    });
    let settings = get("/settings").await;
    let signing_key = settings["webhooks"]["signing_key"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Ok(Registered {
        token,
        webhook_url,
        signing_key,
    })
}

struct AppCalls<'a> {
    client: &'a Client,
    base: &'a str,
    token: &'a str,
}

impl AppCalls<'_> {
    /// Fetches what the server hands out and "sends" each new message; a known one is reported
    /// again with its last state.
    async fn fetch_and_send(
        &self,
        options: &SimOptions,
        outcome: &mut HashMap<String, State>,
        timers: &mpsc::UnboundedSender<String>,
        emit: &impl Fn(SimEvent),
    ) {
        let fetched = self
            .client
            .get(format!("{}/message?order=fifo", self.base))
            .bearer_auth(self.token)
            .send()
            .await;
        let Ok(mut reply) = fetched else { return };
        let at = Instant::now();
        let messages: Vec<Value> = reply.json().await.unwrap_or_default();
        for message in messages {
            // The app keeps ids as they come; the sim reads them only for its own events.
            let Some(app_id) = message["id"].as_str().map(str::to_string) else {
                continue;
            };
            let Some(AppMessageId { message_id, send }) = AppMessageId::parse(&app_id) else {
                continue;
            };
            if let Some(done) = outcome.get(&app_id).copied() {
                emit(SimEvent::Send {
                    message_id,
                    attempt: send,
                    repeat: true,
                    at,
                });
                self.report(&app_id, done).await;
                continue;
            }
            emit(SimEvent::Send {
                message_id,
                attempt: send,
                repeat: false,
                at,
            });
            self.report_named(&app_id, AppMessageState::Processed.as_str(), None)
                .await;
            let fails = options.fail_rate > 0.0 && rand::rng().random_bool(options.fail_rate);
            let state = if fails { State::Failed } else { State::Sent };
            outcome.insert(app_id.clone(), state);
            self.report(&app_id, state).await;
            emit(SimEvent::Reported {
                message_id,
                status: state.event(),
            });
            if state == State::Sent {
                let (timers, delay) = (timers.clone(), options.deliver_after);
                actix_web::rt::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = timers.send(app_id);
                });
            }
        }
    }

    async fn report(&self, app_id: &str, state: State) {
        let error = (state == State::Failed).then_some("simulated radio failure");
        self.report_named(app_id, state.name(), error).await;
    }

    /// `PATCH /message` with one item, as the app's state worker sends it.
    async fn report_named(&self, app_id: &str, state: &str, error: Option<&str>) {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut recipient = json!({ "phoneNumber": "", "state": state });
        if let Some(error) = error {
            recipient["error"] = json!(error);
        }
        let body = json!([{
            "id": app_id,
            "state": state,
            "recipients": [recipient],
            "states": { state: now }
        }]);
        let _ = self
            .client
            .patch(format!("{}/message", self.base))
            .bearer_auth(self.token)
            .send_json(&body)
            .await;
    }
}

/// Posts an inbound SMS to the phone's webhook the way the app does: `X-Timestamp` and
/// `X-Signature` = hex HMAC-SHA256 of the body followed by the timestamp. True when accepted.
async fn post_inbound(
    client: &Client,
    url: &str,
    signing_key: &str,
    event_id: &str,
    from: &str,
    content: &str,
) -> bool {
    let body = json!({
        "id": event_id,
        "webhookId": "smsgw-inbound",
        "event": AppEvent::SmsReceived.as_str(),
        "deviceId": "",
        "payload": {
            "messageId": event_id,
            "message": content,
            "sender": from,
            "phoneNumber": from,
            "receivedAt": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        }
    })
    .to_string();
    let timestamp = chrono::Utc::now().timestamp().to_string();
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(signing_key.as_bytes()) else {
        return false;
    };
    mac.update(body.as_bytes());
    mac.update(timestamp.as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    client
        .post(url)
        .insert_header(("content-type", "application/json"))
        .insert_header(("x-timestamp", timestamp))
        .insert_header(("x-signature", signature))
        .send_body(body)
        .await
        .is_ok_and(|reply| reply.status().is_success())
}

/// The device API's base URL under the server's.
fn base_url(server: &str) -> Result<String, SimError> {
    let base = server.trim_end_matches('/');
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(SimError::BadUrl(server.to_string()));
    }
    Ok(format!("{base}{MOUNT}"))
}
