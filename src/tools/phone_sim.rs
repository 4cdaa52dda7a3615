//! `smsgw phone-sim`: a simulated phone over the real WebSocket protocol (docs/api.md,
//! Phone WebSocket), or over the device API as the SMSGate Android app speaks it (`smsgate`).
//!
//! It is a developer tool and the building block of the load-test harness: it reconnects with
//! backoff (to the next of several server URLs in turn, as a phone behind a load balancer would
//! land on another node), re-sends every report the server has not acked on the new session,
//! dedupes `send` frames by message id (a repeat is answered with the report already made, never
//! sent twice, and counted), fails a share of attempts, and delivers after a delay. The CLI
//! trusts a private CA (`--ca-file`), says why each reconnect happens, and can simulate incoming
//! SMS (`--receive`).

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_codec::Framed;
use awc::ws::{Codec, Frame, Message as WsMessage};
use awc::{BoxedSocket, Client};
use futures_util::{SinkExt, StreamExt};
use rand::Rng;
use rustls::pki_types::CertificateDer;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::domain::protocol::{PhoneFrame, ServerFrame};
use crate::domain::status::MessageStatus;

pub mod smsgate;
pub mod tls;

/// The protocol a simulated phone speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Protocol {
    /// smsgw's own WebSocket protocol (docs/api.md, Phone WebSocket).
    #[default]
    Websocket,
    /// The device API, as the SMSGate Android app speaks it.
    Smsgate,
}

/// Command-line options of the simulator.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Server base URL, e.g. http://127.0.0.1:8080. Repeat the flag or separate URLs with commas
    /// for several nodes: a lost connection moves on to the next URL.
    #[arg(long, required = true, value_delimiter = ',')]
    pub server: Vec<String>,
    /// Device token (dt_…) shown when the phone was paired.
    #[arg(long)]
    pub token: String,
    /// Share of send attempts that fail, 0.0–1.0.
    #[arg(long, default_value_t = 0.0)]
    pub fail_rate: f64,
    /// Delay between `sent` and `delivered`, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub deliver_after_ms: u64,
    /// `websocket` (smsgw's protocol) or `smsgate` (the device API, as the SMSGate Android
    /// app speaks it).
    #[arg(long, value_enum, default_value_t = Protocol::Websocket)]
    pub protocol: Protocol,
    /// PEM file of one or more certificates to trust besides the public roots, for a server
    /// with a self-signed or private-CA certificate. Default: the file SSL_CERT_FILE names.
    #[arg(
        long,
        value_name = "PATH",
        env = "SSL_CERT_FILE",
        hide_env_values = true,
        value_parser = CaFile::read
    )]
    pub ca_file: Option<CaFile>,
    /// An incoming SMS to simulate once connected, as "FROM: TEXT", e.g.
    /// "+14155550123: hello" (repeatable); `-` reads such lines from stdin.
    #[arg(long, value_name = "\"FROM: TEXT\" | -", value_parser = Receive::parse)]
    pub receive: Vec<Receive>,
    /// Battery level to report (0–100, not charging) in a `status` frame at each connect
    /// (WebSocket only; docs/api.md, "Phone health").
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub battery: Option<u8>,
}

/// The certificates of `--ca-file` (or `SSL_CERT_FILE`), read and checked before anything
/// connects.
#[derive(Debug, Clone)]
pub struct CaFile {
    pub certs: Vec<CertificateDer<'static>>,
}

impl CaFile {
    /// Reads a PEM file of trust anchors: refused when it cannot be read or holds no
    /// certificate that can be one. Others beside a usable one are left out, as a system
    /// bundle (SSL_CERT_FILE) may hold a few rustls cannot use.
    pub fn read(path: &str) -> Result<CaFile, String> {
        use rustls::pki_types::pem::PemObject;
        let named = |why: String| format!("{path} (--ca-file or SSL_CERT_FILE): {why}");
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| named(e.to_string()))?;
        if certs.is_empty() {
            return Err(named("no PEM certificate in the file".into()));
        }
        let mut roots = rustls::RootCertStore::empty();
        let (_, unusable) = roots.add_parsable_certificates(certs.iter().cloned());
        if roots.is_empty() {
            return Err(named(format!(
                "none of its {unusable} certificates is a usable CA certificate"
            )));
        }
        Ok(CaFile { certs })
    }
}

/// One `--receive` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receive {
    /// An incoming SMS given on the command line.
    Sms { from: String, content: String },
    /// `-`: incoming SMS read from stdin, one "FROM: TEXT" line each.
    Stdin,
}

impl Receive {
    /// `-`, or "FROM: TEXT" (the sender before the first colon, the text after it; neither
    /// empty).
    pub fn parse(value: &str) -> Result<Receive, String> {
        if value.trim() == "-" {
            return Ok(Receive::Stdin);
        }
        let malformed =
            || format!("{value:?} is not \"FROM: TEXT\" (e.g. \"+14155550123: hello\") or -");
        let (from, content) = value.split_once(':').ok_or_else(malformed)?;
        let (from, content) = (from.trim(), content.trim());
        if from.is_empty() || content.is_empty() {
            return Err(malformed());
        }
        Ok(Receive::Sms {
            from: from.to_string(),
            content: content.to_string(),
        })
    }
}

/// How a simulated phone behaves.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Base URL of the server; several (one per node) separated by commas, tried in turn.
    pub server: String,
    pub token: String,
    pub fail_rate: f64,
    pub deliver_after: Duration,
    /// Interval of `heartbeat` frames.
    pub heartbeat_every: Duration,
    /// Certificates trusted besides the public roots (`--ca-file`).
    pub ca_certs: Vec<CertificateDer<'static>>,
    /// Battery level reported in a `status` frame at each connect (`--battery`).
    pub battery: Option<u8>,
}

impl From<SimArgs> for SimOptions {
    fn from(args: SimArgs) -> Self {
        SimOptions {
            server: args.server.join(","),
            token: args.token,
            fail_rate: args.fail_rate.clamp(0.0, 1.0),
            deliver_after: Duration::from_millis(args.deliver_after_ms),
            heartbeat_every: HEARTBEAT_EVERY,
            ca_certs: args.ca_file.map(|ca| ca.certs).unwrap_or_default(),
            battery: args.battery,
        }
    }
}

/// Heartbeats keep the session alive well inside the server's default 30 s timeout.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(10);
/// First reconnect delay; doubles up to [`MAX_BACKOFF`], with jitter.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// What happened inside a simulated phone (printed by the CLI, counted by the load test).
#[derive(Debug, Clone, PartialEq)]
pub enum SimEvent {
    Connected,
    /// A `send` frame; `repeat` when the message was already handled (deduped). `at` is when
    /// the frame was read off the socket (the load test measures accept → phone with it).
    Send {
        message_id: Uuid,
        attempt: u32,
        repeat: bool,
        at: Instant,
    },
    /// An injected inbound SMS went to the server as a `received` frame tagged `reference`.
    Forwarded {
        reference: String,
    },
    Reported {
        message_id: Uuid,
        status: MessageStatus,
    },
    Acked {
        reference: String,
    },
    ServerError {
        code: String,
        message: String,
    },
    Disconnected,
    /// The next connection is tried `after` this wait; `reason` says why the last one failed
    /// or ended ("connection refused", "TLS: …", "HTTP 404 — …").
    Reconnecting {
        after: Duration,
        reason: String,
    },
}

impl SimOptions {
    /// The server base URLs, in the order they are tried (blanks around commas dropped).
    pub fn servers(&self) -> Vec<&str> {
        self.server
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// Each server's URL as `to_url` makes it for a transport; refused when there is none.
    fn server_urls(
        &self,
        to_url: fn(&str) -> Result<String, SimError>,
    ) -> Result<Vec<String>, SimError> {
        let urls = self
            .servers()
            .into_iter()
            .map(to_url)
            .collect::<Result<Vec<_>, _>>()?;
        if urls.is_empty() {
            return Err(SimError::BadUrl(self.server.clone()));
        }
        Ok(urls)
    }
}

/// Sends an event to `events` when a caller listens (a gone listener is ignored).
fn emitter(events: &Option<mpsc::UnboundedSender<SimEvent>>) -> impl Fn(SimEvent) + '_ {
    move |event| {
        if let Some(tx) = events {
            let _ = tx.send(event);
        }
    }
}

/// ALPN of the WebSocket transport: HTTP/1.1 only (an upgrade cannot ride on HTTP/2).
const HTTP1_ONLY: &[&[u8]] = &[b"http/1.1"];
/// ALPN of the device API transport: HTTP/2 first, as the app's OkHttp offers it.
const HTTP2_FIRST: &[&[u8]] = &[b"h2", b"http/1.1"];

/// The HTTP client of a simulated phone: it trusts the public roots and `ca_certs` (see
/// [`tls::client_config`]), offers `protocols` over TLS, and each request gives up after 10 s.
fn http_client(ca_certs: &[CertificateDer<'static>], protocols: &[&[u8]]) -> Client {
    let config = tls::client_config(ca_certs, protocols);
    Client::builder()
        .connector(awc::Connector::new().rustls_0_23(Arc::new(config)))
        .timeout(Duration::from_secs(10))
        .finish()
}

/// Why a connection could not be made, in a few words for the reconnect line.
fn send_failure(err: &awc::error::SendRequestError) -> String {
    use awc::error::{ConnectError, SendRequestError};
    match err {
        SendRequestError::Connect(ConnectError::Io(io)) | SendRequestError::Send(io) => {
            io_failure(io)
        }
        SendRequestError::Connect(ConnectError::Timeout) | SendRequestError::Timeout => {
            "timed out".into()
        }
        SendRequestError::Connect(ConnectError::Resolver(e)) => {
            format!("cannot resolve the host: {e}")
        }
        other => other.to_string(),
    }
}

/// A socket error: a TLS failure is named as one (rustls's own words, with a hint), a refusal
/// plainly.
fn io_failure(err: &std::io::Error) -> String {
    if let Some(tls) = err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        return tls::failure(tls);
    }
    match err.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::ConnectionReset => "connection reset".into(),
        std::io::ErrorKind::TimedOut => "timed out".into(),
        _ => err.to_string(),
    }
}

/// Why a WebSocket upgrade failed (a refused token is not retried: see [`run_phone`]).
fn ws_failure(err: &awc::error::WsClientError, server: &str) -> String {
    use awc::error::WsClientError;
    match err {
        WsClientError::InvalidResponseStatus(status) => status_failure(status.as_u16(), server),
        WsClientError::SendRequest(err) => send_failure(err),
        other => other.to_string(),
    }
}

/// An HTTP status where the phone's endpoint should be. A 404 points at the usual mistake:
/// `--server` is the base URL, and the simulator adds the endpoint's path itself.
fn status_failure(status: u16, server: &str) -> String {
    if status != 404 {
        return format!("HTTP {status}");
    }
    let path = server
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|at| &rest[at..]))
        .unwrap_or("")
        .trim_end_matches('/');
    if path.is_empty() {
        format!("HTTP 404 — is smsgw at {server}? --server is its base URL (https://host:port)")
    } else {
        format!("HTTP 404 — --server is the base URL (https://host:port), not …{path}")
    }
}

/// Sleeps a jittered `backoff` before a reconnect (announced through `emit` with `reason`) and
/// returns the next one.
async fn wait(backoff: Duration, reason: String, emit: &impl Fn(SimEvent)) -> Duration {
    let jittered = backoff.mul_f64(rand::rng().random_range(0.5..1.5));
    emit(SimEvent::Reconnecting {
        after: jittered,
        reason,
    });
    tokio::time::sleep(jittered).await;
    (backoff * 2).min(MAX_BACKOFF)
}

/// The URL tried after a lost or failed connection to `servers[at]`: the next one in turn.
fn next_server(at: usize, servers: usize) -> usize {
    (at + 1) % servers.max(1)
}

/// Why the simulator stopped.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(
        "the server refused the device token (HTTP {0}); pair the phone again or rotate its token"
    )]
    Refused(u16),
    #[error("invalid server URL {0}")]
    BadUrl(String),
}

/// Reports waiting for their ack, and the final report of every message handled, kept across
/// sessions.
#[derive(Default)]
struct Memory {
    next_ref: u64,
    unacked: BTreeMap<u64, PhoneFrame>,
    /// The last report made per message: a repeated `send` is answered with it.
    outcome: HashMap<Uuid, PhoneFrame>,
}

impl Memory {
    fn tag(&mut self, frame: PhoneFrame) -> PhoneFrame {
        self.next_ref += 1;
        let reference = format!("r{}", self.next_ref);
        let tagged = match frame {
            PhoneFrame::Sent { message_id, .. } => PhoneFrame::Sent {
                message_id,
                reference: Some(reference),
            },
            PhoneFrame::Delivered { message_id, .. } => PhoneFrame::Delivered {
                message_id,
                reference: Some(reference),
            },
            PhoneFrame::Failed {
                message_id, error, ..
            } => PhoneFrame::Failed {
                message_id,
                error,
                reference: Some(reference),
            },
            PhoneFrame::Received {
                from,
                content,
                received_at,
                ..
            } => PhoneFrame::Received {
                reference,
                from,
                content,
                received_at,
            },
            other => return other,
        };
        self.unacked.insert(self.next_ref, tagged.clone());
        tagged
    }

    fn ack(&mut self, reference: &str) -> bool {
        reference
            .strip_prefix('r')
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| self.unacked.remove(&n).is_some())
    }
}

/// Commands a caller can give a running simulated phone.
#[derive(Debug, Clone)]
pub enum SimCommand {
    /// An SMS "arrives" on the phone and is forwarded as a `received` frame.
    Receive { from: String, content: String },
    /// The phone drops its connection (as when it changes networks) and connects again after
    /// its first backoff.
    Reconnect,
}

/// Runs one simulated phone until its token is refused. Events go to `events` when given;
/// `commands` lets a caller inject inbound SMS.
pub async fn run_phone(
    options: SimOptions,
    events: Option<mpsc::UnboundedSender<SimEvent>>,
    mut commands: Option<mpsc::UnboundedReceiver<SimCommand>>,
) -> Result<(), SimError> {
    let urls = options.server_urls(ws_url)?;
    let servers = options.servers();
    let mut at = 0;
    let emit = emitter(&events);
    let client = http_client(&options.ca_certs, HTTP1_ONLY);
    let mut memory = Memory::default();
    let mut backoff = FIRST_BACKOFF;
    let (timer_tx, mut timer_rx) = mpsc::unbounded_channel::<PhoneFrame>();
    loop {
        let connected = client
            .ws(urls[at].as_str())
            .bearer_auth(&options.token)
            .max_frame_size(1 << 20)
            .connect()
            .await;
        let mut framed: Framed<BoxedSocket, Codec> = match connected {
            Ok((_, framed)) => framed,
            Err(awc::error::WsClientError::InvalidResponseStatus(status))
                if status.as_u16() == 401 || status.as_u16() == 403 =>
            {
                return Err(SimError::Refused(status.as_u16()));
            }
            Err(err) => {
                let reason = ws_failure(&err, servers[at]);
                at = next_server(at, urls.len());
                backoff = wait(backoff, reason, &emit).await;
                continue;
            }
        };
        backoff = FIRST_BACKOFF;
        emit(SimEvent::Connected);
        // Every report not acked on an earlier session goes again, oldest first.
        let pending: Vec<PhoneFrame> = memory.unacked.values().cloned().collect();
        let mut alive = true;
        if let Some(battery) = options.battery {
            let status = PhoneFrame::Status(crate::domain::health::StatusFrame {
                battery_percent: Some(i64::from(battery)),
                charging: Some(false),
                ..Default::default()
            });
            alive = send(&mut framed, &status).await;
        }
        for frame in pending {
            alive &= send(&mut framed, &frame).await;
        }
        let mut heartbeat = tokio::time::interval(options.heartbeat_every);
        heartbeat.tick().await;
        while alive {
            tokio::select! {
                incoming = framed.next() => {
                    let Some(Ok(frame)) = incoming else { break };
                    match frame {
                        Frame::Text(bytes) => {
                            let at = Instant::now();
                            let Ok(frame) = serde_json::from_slice::<ServerFrame>(&bytes) else {
                                continue;
                            };
                            alive = handle_frame(frame, at, &options, &mut memory, &mut framed, &timer_tx, &emit).await;
                        }
                        Frame::Ping(bytes) => {
                            alive = framed.send(WsMessage::Pong(bytes)).await.is_ok();
                        }
                        Frame::Close(_) => break,
                        _ => {}
                    }
                }
                Some(report) = timer_rx.recv() => {
                    if let PhoneFrame::Delivered { message_id, .. } = &report {
                        memory.outcome.insert(*message_id, report.clone());
                        emit(SimEvent::Reported { message_id: *message_id, status: MessageStatus::Delivered });
                    }
                    let tagged = memory.tag(report);
                    alive = send(&mut framed, &tagged).await;
                }
                Some(command) = next_command(&mut commands) => {
                    let SimCommand::Receive { from, content } = command else {
                        let _ = framed.send(WsMessage::Close(None)).await;
                        break;
                    };
                    let frame = memory.tag(PhoneFrame::Received {
                        reference: String::new(),
                        from,
                        content,
                        received_at: chrono::Utc::now(),
                    });
                    if let PhoneFrame::Received { reference, .. } = &frame {
                        emit(SimEvent::Forwarded { reference: reference.clone() });
                    }
                    alive = send(&mut framed, &frame).await;
                }
                _ = heartbeat.tick() => {
                    alive = send(&mut framed, &PhoneFrame::Heartbeat { battery: Some(0.9), signal: Some(0.8) }).await;
                }
            }
        }
        emit(SimEvent::Disconnected);
        at = next_server(at, urls.len());
        // The session was up, so `backoff` is the first again and stays so for this wait.
        wait(backoff, "the session ended".into(), &emit).await;
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

async fn handle_frame(
    frame: ServerFrame,
    at: Instant,
    options: &SimOptions,
    memory: &mut Memory,
    framed: &mut Framed<BoxedSocket, Codec>,
    timers: &mpsc::UnboundedSender<PhoneFrame>,
    emit: &impl Fn(SimEvent),
) -> bool {
    match frame {
        ServerFrame::Send {
            message_id,
            attempt,
            ..
        } => {
            if let Some(done) = memory.outcome.get(&message_id).cloned() {
                // Already handled: the radio does not send twice; report the outcome again.
                emit(SimEvent::Send {
                    message_id,
                    attempt,
                    repeat: true,
                    at,
                });
                let tagged = memory.tag(done);
                return send(framed, &tagged).await;
            }
            emit(SimEvent::Send {
                message_id,
                attempt,
                repeat: false,
                at,
            });
            let fails = options.fail_rate > 0.0 && rand::rng().random_bool(options.fail_rate);
            let report = if fails {
                emit(SimEvent::Reported {
                    message_id,
                    status: MessageStatus::Failed,
                });
                PhoneFrame::Failed {
                    message_id,
                    error: "simulated radio failure".into(),
                    reference: None,
                }
            } else {
                emit(SimEvent::Reported {
                    message_id,
                    status: MessageStatus::Sent,
                });
                let sent = PhoneFrame::Sent {
                    message_id,
                    reference: None,
                };
                memory.outcome.insert(message_id, sent.clone());
                let timers = timers.clone();
                let delay = options.deliver_after;
                actix_web::rt::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = timers.send(PhoneFrame::Delivered {
                        message_id,
                        reference: None,
                    });
                });
                sent
            };
            let tagged = memory.tag(report);
            send(framed, &tagged).await
        }
        ServerFrame::Ack { reference } => {
            if memory.ack(&reference) {
                emit(SimEvent::Acked { reference });
            }
            true
        }
        ServerFrame::Error { code, message } => {
            emit(SimEvent::ServerError { code, message });
            true
        }
        ServerFrame::Hello { .. } => true,
    }
}

async fn send(framed: &mut Framed<BoxedSocket, Codec>, frame: &PhoneFrame) -> bool {
    match serde_json::to_string(frame) {
        Ok(text) => framed.send(WsMessage::Text(text.into())).await.is_ok(),
        Err(_) => false,
    }
}

fn ws_url(server: &str) -> Result<String, SimError> {
    let base = server.trim_end_matches('/');
    let ws = if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else if base.starts_with("ws://") || base.starts_with("wss://") {
        base.to_string()
    } else {
        return Err(SimError::BadUrl(server.to_string()));
    };
    Ok(format!("{ws}/v1/phones/connect"))
}

/// The CLI: runs one phone and prints one line per event; each `--receive` SMS (and each line
/// of stdin with `--receive -`) is handed to it, to go out once it is connected. On Ctrl-C it
/// prints how many messages it sent and how many it was handed again (and did not send twice),
/// then stops.
pub async fn run(args: SimArgs) -> Result<(), Box<dyn std::error::Error>> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let counts = std::rc::Rc::new(std::cell::Cell::new((0u64, 0u64)));
    let printer = actix_web::rt::spawn({
        let counts = counts.clone();
        async move {
            while let Some(event) = rx.recv().await {
                println!("{}", describe(&event, &counts));
            }
        }
    });
    // Held until the phone stops, so the command channel stays open after stdin ends.
    let (commands, commands_rx) = mpsc::unbounded_channel();
    for receive in &args.receive {
        match receive {
            Receive::Sms { from, content } => {
                let _ = commands.send(SimCommand::Receive {
                    from: from.clone(),
                    content: content.clone(),
                });
            }
            Receive::Stdin => read_stdin(commands.clone())?,
        }
    }
    let protocol = args.protocol;
    let options = SimOptions::from(args);
    let phone = async {
        match protocol {
            Protocol::Websocket => run_phone(options, Some(tx), Some(commands_rx)).await,
            Protocol::Smsgate => smsgate::run_phone(options, Some(tx), Some(commands_rx)).await,
        }
    };
    let result = tokio::select! {
        result = phone => result,
        _ = tokio::signal::ctrl_c() => Ok(()),
    };
    drop(commands);
    // Let the printer drain what the phone emitted before the summary.
    actix_web::rt::task::yield_now().await;
    printer.abort();
    if result.is_ok() {
        let (sent, repeats) = counts.get();
        println!("stopped: {sent} messages sent, {repeats} duplicates received and not sent again");
    }
    result.map_err(Into::into)
}

/// Reads "FROM: TEXT" lines from stdin on a thread of its own and hands each to the phone; a
/// malformed line is named on stderr and skipped, a blank one ignored.
fn read_stdin(commands: mpsc::UnboundedSender<SimCommand>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("phone-sim-stdin".into())
        .spawn(move || {
            for (number, line) in std::io::stdin().lock().lines().enumerate() {
                let Ok(line) = line else { return };
                if line.trim().is_empty() {
                    continue;
                }
                match Receive::parse(&line) {
                    Ok(Receive::Sms { from, content }) => {
                        if commands
                            .send(SimCommand::Receive { from, content })
                            .is_err()
                        {
                            return;
                        }
                    }
                    Ok(Receive::Stdin) | Err(_) => eprintln!(
                        "stdin line {}: skipped, not \"FROM: TEXT\": {line}",
                        number + 1
                    ),
                }
            }
        })
        .map(drop)
}

/// One printed line per event; `counts` keeps (messages sent, duplicates received).
fn describe(event: &SimEvent, counts: &std::cell::Cell<(u64, u64)>) -> String {
    match event {
        SimEvent::Connected => "connected".to_string(),
        SimEvent::Send {
            message_id,
            attempt,
            repeat: false,
            ..
        } => {
            let (sent, repeats) = counts.get();
            counts.set((sent + 1, repeats));
            format!("send {message_id} attempt {attempt}")
        }
        SimEvent::Send {
            message_id,
            attempt,
            repeat: true,
            ..
        } => {
            let (sent, repeats) = counts.get();
            counts.set((sent, repeats + 1));
            format!(
                "send {message_id} attempt {attempt} (repeat, not sent again; {} duplicates so far)",
                repeats + 1
            )
        }
        SimEvent::Reported { message_id, status } => format!("{} {message_id}", status.as_str()),
        SimEvent::Acked { reference } => format!("ack {reference}"),
        SimEvent::Forwarded { reference } => format!("received {reference}"),
        SimEvent::ServerError { code, message } => format!("server error {code}: {message}"),
        SimEvent::Disconnected => "disconnected".to_string(),
        SimEvent::Reconnecting { after, reason } => {
            format!("reconnecting in {} ms: {reason}", after.as_millis())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_map_to_the_websocket_endpoint() {
        assert_eq!(
            ws_url("http://127.0.0.1:8080/").ok().as_deref(),
            Some("ws://127.0.0.1:8080/v1/phones/connect")
        );
        assert_eq!(
            ws_url("https://gw.example").ok().as_deref(),
            Some("wss://gw.example/v1/phones/connect")
        );
        assert!(ws_url("gw.example").is_err());
    }

    #[test]
    fn several_servers_are_tried_in_turn() {
        let options = SimOptions {
            server: "http://a:1, http://b:2,,http://c:3".into(),
            token: "dt_x".into(),
            fail_rate: 0.0,
            deliver_after: Duration::ZERO,
            heartbeat_every: HEARTBEAT_EVERY,
            ca_certs: Vec::new(),
            battery: None,
        };
        assert_eq!(
            options.servers(),
            ["http://a:1", "http://b:2", "http://c:3"]
        );
        assert_eq!(next_server(0, 3), 1);
        assert_eq!(next_server(2, 3), 0, "after the last comes the first again");
        assert_eq!(next_server(0, 1), 0, "one server is retried");
    }

    #[test]
    fn received_sms_are_from_colon_text() {
        assert_eq!(
            Receive::parse("+14155550123: hello: there"),
            Ok(Receive::Sms {
                from: "+14155550123".into(),
                content: "hello: there".into()
            })
        );
        assert_eq!(Receive::parse("-"), Ok(Receive::Stdin));
        for malformed in ["hello", ": hello", "+14155550123:", "+14155550123:   ", ""] {
            assert!(Receive::parse(malformed).is_err(), "{malformed:?}");
        }
    }

    #[test]
    fn a_404_says_what_server_should_be() {
        let hint = status_failure(404, "https://gw.example:8443/api/mobile/v1/");
        assert!(
            hint.contains("--server is the base URL") && hint.ends_with("not …/api/mobile/v1"),
            "{hint}"
        );
        let hint = status_failure(404, "https://gw.example:8443");
        assert!(
            hint.contains("is smsgw at https://gw.example:8443?"),
            "{hint}"
        );
        assert_eq!(status_failure(502, "https://gw.example/x"), "HTTP 502");
    }

    #[test]
    fn repeats_are_counted_apart_from_sends() {
        let counts = std::cell::Cell::new((0, 0));
        let send = |repeat| SimEvent::Send {
            message_id: Uuid::nil(),
            attempt: 1,
            repeat,
            at: Instant::now(),
        };
        describe(&send(false), &counts);
        let line = describe(&send(true), &counts);
        assert!(line.contains("1 duplicates so far"), "{line}");
        assert_eq!(counts.get(), (1, 1));
    }

    #[test]
    fn reports_are_tagged_and_acked_once() {
        let mut memory = Memory::default();
        let id = Uuid::now_v7();
        let tagged = memory.tag(PhoneFrame::Sent {
            message_id: id,
            reference: None,
        });
        let PhoneFrame::Sent {
            reference: Some(reference),
            ..
        } = tagged
        else {
            panic!("tagged with a ref");
        };
        assert_eq!(memory.unacked.len(), 1);
        assert!(memory.ack(&reference));
        assert!(!memory.ack(&reference), "an ack counts once");
        assert!(memory.unacked.is_empty());
    }
}
