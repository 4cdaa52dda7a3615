//! The local webhook receiver: verifies both signatures of every delivery (`X-Signature` and
//! Standard Webhooks), records each event once by event_id, and offers a hanging endpoint that
//! never answers (the slow endpoint of the `webhooks` scenario).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde::Deserialize;
use uuid::Uuid;

use super::LoadError;
use crate::domain::signing;

/// One event as first received.
#[derive(Debug, Clone)]
pub struct Received {
    pub event: String,
    pub message_id: Option<Uuid>,
    pub at: Instant,
}

/// What the receiver saw.
#[derive(Default)]
pub struct Inbox {
    /// Signing key of the healthy endpoint (set once the endpoint is created).
    pub signing_key: Option<String>,
    /// First delivery of every event, by event_id.
    pub events: HashMap<String, Received>,
    /// Deliveries of an event_id already counted after a 2xx: real duplicates.
    pub duplicates: u64,
    /// Of those, the event ids and when each repeat arrived (the cluster scenario tells a
    /// redelivery of an attempt in flight at the kill from a second owner's delivery).
    pub repeats: Vec<(String, Instant)>,
    /// Deliveries whose signature did not verify (answered 400, so they are not counted).
    pub bad_signatures: u64,
    /// Requests that reached the hanging endpoint.
    pub hanging_hits: u64,
    /// Requests that reached the flaky endpoint, and those it answered 500.
    pub flaky_hits: u64,
    pub flaky_failures: u64,
}

/// A running receiver; stopped when dropped.
pub struct Receiver {
    pub url: String,
    pub inbox: Arc<Mutex<Inbox>>,
    handle: actix_web::dev::ServerHandle,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let handle = self.handle.clone();
        actix_web::rt::spawn(async move { handle.stop(false).await });
    }
}

fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// Verifies a delivery against `key`; both signature schemes must hold.
fn verified(req: &HttpRequest, body: &[u8], key: &str) -> bool {
    let now = chrono::Utc::now().timestamp();
    let legacy = match (
        header(req, "x-signature"),
        header(req, "x-timestamp").and_then(|t| t.parse::<i64>().ok()),
    ) {
        (Some(sig), Some(ts)) => signing::verify(key, body, sig, ts, now).is_ok(),
        _ => false,
    };
    let standard = match (
        header(req, "webhook-id"),
        header(req, "webhook-timestamp").and_then(|t| t.parse::<i64>().ok()),
        header(req, "webhook-signature"),
    ) {
        (Some(id), Some(ts), Some(sig)) => {
            signing::verify_standard(key, id, ts, body, sig, now).is_ok()
        }
        _ => false,
    };
    legacy && standard
}

/// The parts of a delivery's body the receiver keeps (the rest is skipped, not built: the
/// receiver shares the machine with the server it measures).
#[derive(Deserialize)]
struct Delivery {
    #[serde(default)]
    event_id: String,
    #[serde(default)]
    event: String,
    #[serde(default)]
    message: Option<DeliveredMessage>,
}

#[derive(Deserialize)]
struct DeliveredMessage {
    #[serde(default)]
    id: Option<Uuid>,
}

async fn healthy(
    req: HttpRequest,
    body: web::Bytes,
    inbox: web::Data<Arc<Mutex<Inbox>>>,
) -> HttpResponse {
    let at = Instant::now();
    let Ok(mut inbox) = inbox.lock() else {
        return HttpResponse::InternalServerError().finish();
    };
    let Some(key) = inbox.signing_key.clone() else {
        return HttpResponse::ServiceUnavailable().finish();
    };
    if !verified(&req, &body, &key) {
        inbox.bad_signatures += 1;
        return HttpResponse::BadRequest().finish();
    }
    let Ok(delivery) = serde_json::from_slice::<Delivery>(&body) else {
        inbox.bad_signatures += 1;
        return HttpResponse::BadRequest().finish();
    };
    match inbox.events.entry(delivery.event_id) {
        std::collections::hash_map::Entry::Occupied(slot) => {
            let event_id = slot.key().clone();
            inbox.duplicates += 1;
            inbox.repeats.push((event_id, at));
        }
        std::collections::hash_map::Entry::Vacant(slot) => {
            slot.insert(Received {
                event: delivery.event,
                message_id: delivery.message.and_then(|m| m.id),
                at,
            });
        }
    }
    HttpResponse::Ok().finish()
}

async fn hanging(inbox: web::Data<Arc<Mutex<Inbox>>>) -> HttpResponse {
    if let Ok(mut inbox) = inbox.lock() {
        inbox.hanging_hits += 1;
    }
    actix_web::rt::time::sleep(Duration::from_secs(3600)).await;
    HttpResponse::Ok().finish()
}

/// Answers 500 to every fourth request and 200 to the rest: an endpoint that fails a share
/// of attempts (the soak scenario), so retries run all along.
async fn flaky(inbox: web::Data<Arc<Mutex<Inbox>>>) -> HttpResponse {
    let Ok(mut inbox) = inbox.lock() else {
        return HttpResponse::InternalServerError().finish();
    };
    inbox.flaky_hits += 1;
    if inbox.flaky_hits % 4 == 0 {
        inbox.flaky_failures += 1;
        return HttpResponse::InternalServerError().finish();
    }
    HttpResponse::Ok().finish()
}

/// Starts the receiver on 127.0.0.1:0: `/healthy`, `/hanging` and `/flaky`.
pub fn start() -> Result<Receiver, LoadError> {
    let inbox = Arc::new(Mutex::new(Inbox::default()));
    let data = web::Data::new(inbox.clone());
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .route("/healthy", web::post().to(healthy))
            .route("/hanging", web::post().to(hanging))
            .route("/flaky", web::post().to(flaky))
    })
    .workers(1)
    .max_connections(100_000)
    .disable_signals()
    .bind("127.0.0.1:0")
    .map_err(|e| LoadError::Setup(format!("webhook receiver: {e}")))?;
    let addr = server
        .addrs()
        .first()
        .copied()
        .ok_or_else(|| LoadError::Setup("webhook receiver has no address".into()))?;
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    Ok(Receiver {
        url: format!("http://{addr}"),
        inbox,
        handle,
    })
}
