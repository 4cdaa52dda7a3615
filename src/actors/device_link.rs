//! The second transport of the Phone actor: server-sent events plus REST fetch and report,
//! compatible with the SMSGate Android app (docs/api.md "Device API for the SMSGate Android
//! app"). The Phone actor sees the same [`Link`] as for a WebSocket session: what it hands over
//! (a `send` frame, already stored as `sending` and counted in the pace log) lands in this
//! phone's outbox, every open event stream hears `MessageEnqueued`, and `GET /message` serves
//! the outbox until the phone reports a state. Queue, pace, retries and expiry stay in the actor.
//!
//! The link is attached while the phone is *online*: an event stream is open, or the phone
//! fetched or reported within [`ONLINE_WINDOW`]. When neither holds, the link detaches like a
//! closed WebSocket session, and the actor queues its handed-over messages again (the app
//! dedupes by message id).

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use actix::Addr;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use tokio::sync::{Mutex, mpsc, oneshot};
use uuid::Uuid;

use super::phone::{Phone, Report};
use super::phone_session::{LINK_CAPACITY, Link, Outgoing, next_session_id};
use super::registry::{Connected, Disconnected, Registry, Seen};
use crate::domain::protocol::{PhoneFrame, ServerFrame};

/// How long a phone without an open event stream stays online after its last fetch or report.
pub const ONLINE_WINDOW: Duration = Duration::from_secs(60);

/// Longest silence on an event stream: a `:keepalive` comment is written after it (the app's
/// server sends one every 15 s, and proxies close idle connections).
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// How often an attached link checks whether its phone is still online.
const ONLINE_CHECK: Duration = Duration::from_secs(5);

/// Events buffered towards one event stream; a stream that falls this far behind misses
/// `MessageEnqueued` hints (the next fetch still serves everything).
const STREAM_CAPACITY: usize = 64;

/// How long an inbound post waits for its message to be stored before asking the app to retry.
const INBOUND_WAIT: Duration = Duration::from_secs(10);

/// Messages one `GET /message` hands out at most (the app's limit).
pub const MAX_FETCH: usize = 100;

/// A message handed over to the phone and not yet reported on.
#[derive(Debug, Clone)]
pub struct Handout {
    pub message_id: Uuid,
    pub to: String,
    pub content: String,
    pub attempt: u32,
    pub handed_at: DateTime<Utc>,
}

/// Order of a fetch: oldest hand-over first (`fifo`) or newest first (`lifo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchOrder {
    Fifo,
    Lifo,
}

/// A named server-sent event.
#[derive(Debug, Clone)]
pub enum Event {
    /// Messages wait to be fetched.
    MessageEnqueued,
    /// A queued message was cancelled or expired before it was handed out.
    MessageCancelled { message_id: Uuid },
}

impl Event {
    /// The event as one SSE frame: a name and a data line, which the app needs on every event.
    pub fn frame(&self) -> Bytes {
        match self {
            Event::MessageEnqueued => Bytes::from_static(b"event: MessageEnqueued\ndata: null\n\n"),
            Event::MessageCancelled { message_id } => Bytes::from(format!(
                "event: MessageCancelled\ndata: {{\"messageId\":\"{message_id}\"}}\n\n"
            )),
        }
    }
}

/// The `:keepalive` comment frame.
pub const KEEPALIVE_FRAME: &[u8] = b":keepalive\n\n";

/// The links of every phone that uses this transport, shared by all HTTP workers.
pub struct DeviceLinks {
    registry: Addr<Registry>,
    phones: StdMutex<HashMap<Uuid, Arc<DeviceLink>>>,
}

/// The transport state of one phone.
pub struct DeviceLink {
    phone_id: Uuid,
    registry: Addr<Registry>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    attached: Option<Attached>,
    /// Hand-overs not yet reported, in hand-over order.
    outbox: Vec<Handout>,
    streams: Vec<mpsc::Sender<Bytes>>,
    last_active: Option<tokio::time::Instant>,
    /// Inbound messages waiting for the actor's ack (stored), by reference.
    waiting: HashMap<String, Vec<oneshot::Sender<()>>>,
}

#[derive(Clone)]
struct Attached {
    session_id: u64,
    phone: Addr<Phone>,
}

/// The phone is not paired (any more): its token just stopped working.
#[derive(Debug)]
pub struct NotPaired;

impl DeviceLinks {
    pub fn new(registry: Addr<Registry>) -> DeviceLinks {
        DeviceLinks {
            registry,
            phones: StdMutex::new(HashMap::new()),
        }
    }

    /// The link of this phone, created on first use.
    pub fn of(&self, phone_id: Uuid) -> Arc<DeviceLink> {
        let mut phones = match self.phones.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        phones
            .entry(phone_id)
            .or_insert_with(|| {
                Arc::new(DeviceLink {
                    phone_id,
                    registry: self.registry.clone(),
                    state: Mutex::new(State::default()),
                })
            })
            .clone()
    }
}

impl DeviceLink {
    /// Opens an event stream: the receiver yields SSE frames (keepalives are the caller's).
    /// A stream opened while messages wait starts with `MessageEnqueued`.
    pub async fn open_stream(self: &Arc<Self>) -> Result<mpsc::Receiver<Bytes>, NotPaired> {
        let (tx, rx) = mpsc::channel(STREAM_CAPACITY);
        let mut state = self.state.lock().await;
        self.attach(&mut state).await?;
        if !state.outbox.is_empty() {
            let _ = tx.try_send(Event::MessageEnqueued.frame());
        }
        state.streams.push(tx);
        Ok(rx)
    }

    /// The messages handed over and not yet reported, at most [`MAX_FETCH`].
    pub async fn fetch(self: &Arc<Self>, order: FetchOrder) -> Result<Vec<Handout>, NotPaired> {
        let mut state = self.state.lock().await;
        self.attach(&mut state).await?;
        state.last_active = Some(tokio::time::Instant::now());
        let mut out = state.outbox.clone();
        if order == FetchOrder::Lifo {
            out.reverse();
        }
        out.truncate(MAX_FETCH);
        Ok(out)
    }

    /// A state report from the phone: the message leaves the outbox, and a report that moves
    /// it (`frame`, None for Pending/Processed, which it already is) goes to the Phone actor.
    pub async fn report(
        self: &Arc<Self>,
        message_id: Uuid,
        frame: Option<PhoneFrame>,
    ) -> Result<(), NotPaired> {
        let mut state = self.state.lock().await;
        let attached = self.attach(&mut state).await?;
        state.last_active = Some(tokio::time::Instant::now());
        state.outbox.retain(|h| h.message_id != message_id);
        if let Some(frame) = frame {
            attached.phone.do_send(Report {
                session_id: attached.session_id,
                frame,
            });
        }
        Ok(())
    }

    /// An inbound SMS the phone posted (a `received` frame): handed to the Phone actor like a
    /// WebSocket frame; true once it is stored (or was already), false when that took longer
    /// than [`INBOUND_WAIT`].
    pub async fn inbound(self: &Arc<Self>, frame: PhoneFrame) -> Result<bool, NotPaired> {
        let PhoneFrame::Received { reference, .. } = &frame else {
            return Ok(false);
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.state.lock().await;
            let attached = self.attach(&mut state).await?;
            state.last_active = Some(tokio::time::Instant::now());
            state.waiting.entry(reference.clone()).or_default().push(tx);
            attached.phone.do_send(Report {
                session_id: attached.session_id,
                frame,
            });
        }
        Ok(matches!(
            tokio::time::timeout(INBOUND_WAIT, rx).await,
            Ok(Ok(()))
        ))
    }

    /// The Phone actor of this phone, with this link attached (attaching it when needed).
    async fn attach(self: &Arc<Self>, state: &mut State) -> Result<Attached, NotPaired> {
        if let Some(attached) = &state.attached {
            return Ok(attached.clone());
        }
        let session_id = next_session_id();
        let (tx, rx) = mpsc::channel(LINK_CAPACITY);
        let link = Link { session_id, tx };
        let phone = match self
            .registry
            .send(Connected {
                phone_id: self.phone_id,
                link,
            })
            .await
        {
            Ok(Some(phone)) => phone,
            _ => return Err(NotPaired),
        };
        let attached = Attached { session_id, phone };
        state.attached = Some(attached.clone());
        state.last_active = Some(tokio::time::Instant::now());
        actix_web::rt::spawn(self.clone().carry(session_id, rx));
        Ok(attached)
    }

    /// Carries what the Phone actor queues on the link into the outbox and the event streams,
    /// until the actor closes the link or the phone is no longer online.
    async fn carry(self: Arc<Self>, session_id: u64, mut rx: mpsc::Receiver<Outgoing>) {
        let mut ticker = tokio::time::interval(ONLINE_CHECK);
        loop {
            tokio::select! {
                outgoing = rx.recv() => {
                    let mut state = self.state.lock().await;
                    match outgoing {
                        Some(Outgoing::Frame(frame)) => match *frame {
                            ServerFrame::Ack { reference } => {
                                for waiter in state.waiting.remove(&reference).unwrap_or_default() {
                                    let _ = waiter.send(());
                                }
                            }
                            ServerFrame::Send { message_id, to, content, attempt, .. } => {
                                state.outbox.retain(|h| h.message_id != message_id);
                                state.outbox.push(Handout {
                                    message_id,
                                    to,
                                    content,
                                    attempt,
                                    handed_at: Utc::now(),
                                });
                                broadcast(&mut state, &Event::MessageEnqueued);
                            }
                            ServerFrame::Hello { .. } | ServerFrame::Error { .. } => {}
                        },
                        Some(Outgoing::Withdrawn { message_id }) => {
                            broadcast(&mut state, &Event::MessageCancelled { message_id });
                        }
                        Some(Outgoing::Close { .. }) | None => {
                            // Replaced by another transport, unpaired, or the server stops:
                            // the actor took back what was handed over; streams end.
                            if state.attached.as_ref().is_some_and(|a| a.session_id == session_id) {
                                state.attached = None;
                                state.outbox.clear();
                                state.streams.clear();
                            }
                            return;
                        }
                    }
                }
                _ = ticker.tick() => {
                    let mut state = self.state.lock().await;
                    state.streams.retain(|s| !s.is_closed());
                    let recently = state
                        .last_active
                        .is_some_and(|at| at.elapsed() < ONLINE_WINDOW);
                    if state.streams.is_empty() && !recently {
                        if state.attached.as_ref().is_some_and(|a| a.session_id == session_id) {
                            state.attached = None;
                            state.outbox.clear();
                        }
                        self.registry.do_send(Disconnected {
                            phone_id: self.phone_id,
                            session_id,
                        });
                        return;
                    }
                    self.registry.do_send(Seen { phone_id: self.phone_id });
                }
            }
        }
    }
}

/// Sends an event to every open stream of the phone; closed ones are dropped.
fn broadcast(state: &mut State, event: &Event) {
    let frame = event.frame();
    state.streams.retain(|s| {
        !matches!(
            s.try_send(frame.clone()),
            Err(mpsc::error::TrySendError::Closed(_))
        )
    });
}
