//! A real HTTP server standing in for a webhook target: it records every request and answers
//! as scripted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

/// One request a [`WebhookReceiver`] got.
#[derive(Debug, Clone)]
pub struct Received {
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    pub at: std::time::Instant,
}

impl Received {
    /// The body parsed as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("webhook body is JSON")
    }

    /// A header by lowercase name.
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }

    /// Asserts the request is signed with `key` by the Standard Webhooks rule (webhook-id,
    /// webhook-timestamp and the exact body), checked at `now` (Unix seconds).
    #[track_caller]
    pub fn assert_standard_signature(&self, key: &str, now: i64) {
        let timestamp: i64 = self
            .header("webhook-timestamp")
            .parse()
            .expect("webhook-timestamp is Unix seconds");
        smsgw::domain::signing::verify_standard(
            key,
            self.header("webhook-id"),
            timestamp,
            &self.body,
            self.header("webhook-signature"),
            now,
        )
        .expect("webhook-signature verifies");
    }
}

#[derive(Default)]
struct ReceiverScript {
    /// Statuses answered in order; 200 once exhausted.
    statuses: std::collections::VecDeque<u16>,
    /// Delays before answering, in order; `default_delay` once exhausted.
    delays: std::collections::VecDeque<Duration>,
    default_delay: Duration,
    received: Vec<Received>,
}

/// A real HTTP server on 127.0.0.1 that records every request (headers and exact body
/// bytes) and answers as scripted: a sequence of statuses and of delays.
pub struct WebhookReceiver {
    pub url: String,
    state: Arc<std::sync::Mutex<ReceiverScript>>,
    handle: actix_web::dev::ServerHandle,
}

impl WebhookReceiver {
    /// Starts a receiver answering 200 at once.
    pub async fn start() -> WebhookReceiver {
        let state = Arc::new(std::sync::Mutex::new(ReceiverScript::default()));
        let shared = state.clone();
        let server = actix_web::HttpServer::new(move || {
            let shared = shared.clone();
            actix_web::App::new().default_service(actix_web::web::to(
                move |req: actix_web::HttpRequest, body: actix_web::web::Bytes| {
                    let shared = shared.clone();
                    async move {
                        let (status, delay) = {
                            let mut script = shared.lock().unwrap();
                            script.received.push(Received {
                                headers: req
                                    .headers()
                                    .iter()
                                    .map(|(k, v)| {
                                        (
                                            k.as_str().to_ascii_lowercase(),
                                            v.to_str().unwrap_or("").to_string(),
                                        )
                                    })
                                    .collect(),
                                body: body.to_vec(),
                                at: std::time::Instant::now(),
                            });
                            let status = script.statuses.pop_front().unwrap_or(200);
                            let delay = script.delays.pop_front().unwrap_or(script.default_delay);
                            (status, delay)
                        };
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        actix_web::HttpResponse::build(
                            actix_web::http::StatusCode::from_u16(status).unwrap(),
                        )
                        .body("ok")
                    }
                },
            ))
        })
        .workers(1)
        .disable_signals()
        .shutdown_timeout(0)
        .bind("127.0.0.1:0")
        .expect("receiver binds");
        let address = server.addrs()[0];
        let server = server.run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        WebhookReceiver {
            url: format!("http://{address}/hook"),
            state,
            handle,
        }
    }

    /// Answers these statuses, in order, to the next requests (then 200).
    pub fn answer(&self, statuses: &[u16]) {
        self.state.lock().unwrap().statuses.extend(statuses);
    }

    /// Forgets the statuses scripted and not yet answered: 200 from now on.
    pub fn clear_answers(&self) {
        self.state.lock().unwrap().statuses.clear();
    }

    /// Waits this long before answering the next requests, in order.
    pub fn delay(&self, delays: &[Duration]) {
        self.state.lock().unwrap().delays.extend(delays);
    }

    /// Waits this long before answering every request not scripted otherwise.
    pub fn delay_always(&self, delay: Duration) {
        self.state.lock().unwrap().default_delay = delay;
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    /// Waits until at least `n` requests arrived; panics after `within`.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        super::poll(within, Duration::from_millis(10), async || {
            let received = self.received();
            match received.len() >= n {
                true => Ok(received),
                false => Err(format!(
                    "receiver got {} requests, expected {n}",
                    received.len()
                )),
            }
        })
        .await
    }

    /// Stops the server.
    pub async fn stop(self) {
        self.handle.stop(false).await;
    }
}
