//! The second transport of the Phone actor: server-sent events plus REST fetch and report,
//! compatible with the SMSGate Android app (docs/api.md "Device API for the SMSGate Android
//! app"). The Phone actor sees the same [`Link`] as for a WebSocket session: what it hands over
//! (a `send` frame, already stored as `sending` and counted in the pace log) lands in this
//! phone's outbox, every open event stream hears `MessageEnqueued` (one until a fetch answers
//! it, so a backlog costs one fetch per page), and `GET /message` serves the outbox, at most
//! [`MAX_FETCH`] at a time, until the phone reports a state. The app fetches once per hint, never
//! a second page on its own: once it reported everything a fetch served, or went quiet for
//! [`HINT_AGAIN`], what is left in the outbox is announced again. Queue, pace, retries and expiry
//! stay in the actor.
//!
//! The link is attached while the phone is *online*: an event stream is open, or the phone
//! fetched or reported within [`ONLINE_WINDOW`]. When neither holds, the link detaches like a
//! closed WebSocket session, and the actor queues its handed-over messages again (the app
//! dedupes by message id, so each send is named by an [`AppMessageId`]).
//!
//! One transport is current per phone, the newest connection: opening an event stream takes the
//! phone over (a connected WebSocket is closed with 4000), and a WebSocket that connects ends the
//! event streams. A fetch, report or inbound post is activity, not a connection: it attaches the
//! link only when no transport is current, and otherwise reaches the Phone actor without
//! replacing anything.
//!
//! # The pieces
//!
//! - **Attaching**: an event stream opening sends the Registry `Connected` (the newest wins);
//!   a fetch, report or inbound post sends `ConnectIfIdle`, which attaches only while no
//!   transport is current and otherwise answers the Phone actor to report to. At most
//!   [`MAX_STREAMS`] streams per phone; opening one more ends the oldest. The links live in
//!   `AppState::device_links` ([`DeviceLinks`]), swept of links nobody holds whenever the map
//!   doubled.
//! - **Carrying**: a task per link carries what the Phone actor queues on it. A `send` frame
//!   enters the outbox (`outbox.rs`: hand-over order, kept by place and by message id, so a
//!   hand-over or a report walks no backlog); `Outgoing::Withdrawn` becomes a
//!   `MessageCancelled` event; `Outgoing::Close` (replaced, unpaired) sends the streams a
//!   comment with the reason and ends them. With no stream and no request for
//!   [`ONLINE_WINDOW`], the task sends `Disconnected`, exactly like a closed session.
//! - **Fetching**: each fetch reads its page in one query (the messages still `sending` on
//!   this phone, with dates and options), each under its [`AppMessageId`] (the message id, or
//!   `<id>-<n>` for the n-th send after failures, counted from the timeline's
//!   `attempt_failed` entries the first time a retry is served). Hand-overs no longer
//!   `sending` here leave the outbox instead of holding a place in every page.
//! - **Reporting**: the link remembers the id each fetch served a send under until its final
//!   report, so a report is checked without a read (a send no fetch here named is read from
//!   the store) and counts only for the current send. Reports and inbound posts reach the
//!   Phone actor as `ReportAndWait`, answered once the outcome is stored, so the HTTP answer
//!   means stored.
//! - **SIM lines** (docs/api.md, "Phones"): a device's lines hand over on its link; their
//!   hand-overs carry the line's slot (served as the app's `simNumber`), and a report on one
//!   (or an SMS posted with a line's `simNumber`) goes to the line's actor through the
//!   Registry ([`LineFrame`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use actix::Addr;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use tokio::sync::{Mutex, mpsc, oneshot};
use uuid::Uuid;

mod outbox;

use outbox::Outbox;
pub use outbox::{AppMessageId, Handout};

use super::link::{LINK_CAPACITY, Link, Outgoing, next_session_id};
use super::phone::{Phone, ReportAndWait};
use super::registry::{
    ConnectIfIdle, Connected, Disconnected, LineFrame, NotAttached, Seen, TransportRecipients,
};
use crate::domain::protocol::{PhoneFrame, ServerFrame};
use crate::domain::sim_slot::SimSlot;
use crate::store::phones::PhoneRecord;

/// How long a phone without an open event stream stays online after its last fetch or report.
pub const ONLINE_WINDOW: Duration = Duration::from_secs(60);

/// Longest silence on an event stream: a `:keepalive` comment is written after it (the app's
/// server sends one every 15 s, and proxies close idle connections).
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// How often an attached link checks whether its phone is still online.
const ONLINE_CHECK: Duration = Duration::from_secs(5);

/// Event streams one phone (one device token) may hold open: opening one more ends the oldest,
/// as a newer WebSocket session replaces an older one.
pub const MAX_STREAMS: usize = 3;

/// The comment an event stream ended by a newer one of the same phone is sent before it ends.
const REPLACED_STREAM_FRAME: &[u8] = b": replaced by a newer event stream\n\n";

/// Events buffered towards one event stream; a stream that falls this far behind misses
/// `MessageEnqueued` hints (the next fetch still serves everything).
const STREAM_CAPACITY: usize = 64;

/// How long a report or an inbound post waits for its outcome to be stored before the phone is
/// asked to retry (the app retries a failed report 10 times, an inbound post 14 times).
pub const STORE_WAIT: Duration = Duration::from_secs(10);

/// Messages one `GET /message` hands out at most (the app's limit).
pub const MAX_FETCH: usize = 100;

/// How long a `MessageEnqueued` may go without a fetch before it is sent again: until a fetch
/// answers it, new hand-overs send no further hint (a backlog costs one fetch, not one per
/// message), so a hint the app lost must not hold the outbox back for good. Likewise a phone
/// that neither fetched nor reported for this long while messages wait in its outbox (the
/// answer to its fetch was lost, or it stopped short) hears the hint again.
pub const HINT_AGAIN: Duration = Duration::from_secs(5);

/// Sends a link remembers the app id of ([`DeviceLink::current_send`]); past it the record
/// starts over, and reports fall back to reading the message.
const MAX_NAMED: usize = 4096;

/// Links kept before the map of links is first swept of idle ones.
const SWEEP_FLOOR: usize = 64;

/// How long a device token's phone is answered from memory ([`DeviceLinks::phone_of_token`]).
/// A rotation or unpairing through this server forgets it at once; through another node of a
/// cluster it takes effect here within this time.
pub const TOKEN_TTL: Duration = Duration::from_secs(2);

/// Device tokens remembered at most; past it the memory starts over.
const MAX_TOKENS: usize = 16_384;

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
    registry: Arc<TransportRecipients>,
    phones: StdMutex<Phones>,
    /// The phone of each device token hash seen lately, and when it was read.
    tokens: StdMutex<HashMap<String, (PhoneRecord, tokio::time::Instant)>>,
}

/// The map of links, swept of idle ones whenever it doubled since the last sweep.
struct Phones {
    links: HashMap<Uuid, Arc<DeviceLink>>,
    sweep_at: usize,
}

impl Phones {
    /// Drops the links nobody holds but the map: not attached (an attached link's task holds
    /// it), no request under way. Such a link has no stream, outbox or waiter left, and as the
    /// map's lock is held nobody can take it meanwhile.
    fn sweep(&mut self) {
        self.links.retain(|_, link| Arc::strong_count(link) > 1);
        self.sweep_at = (self.links.len() * 2).max(SWEEP_FLOOR);
    }
}

/// The transport state of one phone.
pub struct DeviceLink {
    phone_id: Uuid,
    registry: Arc<TransportRecipients>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    attached: Option<Attached>,
    /// Hand-overs not yet reported, in hand-over order.
    outbox: Outbox,
    /// The messages of the outbox a fetch served and the phone has not reported yet. Once
    /// none is left while others wait, the phone is done with its page: it hears the hint
    /// again (the app fetches once per hint, not page after page).
    served: HashSet<Uuid>,
    streams: Vec<mpsc::Sender<Bytes>>,
    last_active: Option<tokio::time::Instant>,
    /// When the `MessageEnqueued` no fetch has answered yet went out; None once a fetch came.
    hinted: Option<tokio::time::Instant>,
    /// The app id of each send a fetch served here, until its final report or the detach: a
    /// report is checked against it without reading the message.
    named: HashMap<Uuid, AppMessageId>,
    /// The slot of each SIM line's send handed over here, until its final report or the
    /// detach: its reports go to the line.
    line_sends: HashMap<Uuid, SimSlot>,
}

impl State {
    /// Tells the streams that messages wait, unless a hint is still unanswered.
    fn hint(&mut self) {
        if self.hinted.is_none() && broadcast(self, &Event::MessageEnqueued) {
            self.hinted = Some(tokio::time::Instant::now());
        }
    }

    /// The phone reported (or the outbox dropped) the last message a fetch served: if others
    /// wait behind them (a backlog longer than a page), hint again. The app fetches once per
    /// hint and never asks for a next page by itself.
    fn page_done(&mut self) {
        if self.served.is_empty() && !self.outbox.is_empty() {
            self.hint();
        }
    }
}

#[derive(Clone)]
struct Attached {
    session_id: u64,
    phone: Addr<Phone>,
}

/// Where the phone's frames go: this link is the current transport, or another one is.
enum Linked {
    Current(Attached),
    Elsewhere(Addr<Phone>),
}

impl Linked {
    /// The session id of this link when it is current; 0 (no session) otherwise.
    fn session_id(&self) -> u64 {
        match self {
            Linked::Current(attached) => attached.session_id,
            Linked::Elsewhere(_) => 0,
        }
    }

    fn phone(self) -> Addr<Phone> {
        match self {
            Linked::Current(attached) => attached.phone,
            Linked::Elsewhere(phone) => phone,
        }
    }
}

/// The phone is not paired (any more): its token just stopped working.
#[derive(Debug)]
pub struct NotPaired;

/// A report or inbound post handed to the Phone actor: resolves once its outcome is stored.
#[must_use]
pub struct Pending(Option<oneshot::Receiver<()>>);

impl Pending {
    /// Nothing to store.
    pub fn done() -> Pending {
        Pending(None)
    }

    /// True when every one is stored within `limit`.
    pub async fn all_within(pending: Vec<Pending>, limit: Duration) -> bool {
        let waits = pending.into_iter().filter_map(|p| p.0);
        tokio::time::timeout(limit, async {
            for wait in waits {
                if wait.await.is_err() {
                    return false;
                }
            }
            true
        })
        .await
        .unwrap_or(false)
    }
}

impl DeviceLinks {
    pub fn new(registry: Arc<TransportRecipients>) -> DeviceLinks {
        DeviceLinks {
            registry,
            phones: StdMutex::new(Phones {
                links: HashMap::new(),
                sweep_at: SWEEP_FLOOR,
            }),
            tokens: StdMutex::new(HashMap::new()),
        }
    }

    /// The phone of a device token hash read within [`TOKEN_TTL`], if any: every device-API
    /// request authenticates, and the app makes three or four per message.
    pub fn phone_of_token(&self, token_hash: &str) -> Option<PhoneRecord> {
        let tokens = lock(&self.tokens);
        tokens
            .get(token_hash)
            .filter(|(_, at)| at.elapsed() < TOKEN_TTL)
            .map(|(phone, _)| phone.clone())
    }

    /// Remembers the phone a token hash was just read to belong to.
    pub fn remember_token(&self, token_hash: &str, phone: &PhoneRecord) {
        let mut tokens = lock(&self.tokens);
        if tokens.len() >= MAX_TOKENS {
            tokens.retain(|_, (_, at)| at.elapsed() < TOKEN_TTL);
            if tokens.len() >= MAX_TOKENS {
                tokens.clear();
            }
        }
        tokens.insert(
            token_hash.to_string(),
            (phone.clone(), tokio::time::Instant::now()),
        );
    }

    /// Forgets every token of a phone whose token was rotated or that was unpaired: the old
    /// token is refused from the next request on.
    pub fn forget_tokens_of(&self, phone_id: Uuid) {
        lock(&self.tokens).retain(|_, (phone, _)| phone.id != phone_id);
    }

    /// The link of this phone, created on first use.
    pub fn of(&self, phone_id: Uuid) -> Arc<DeviceLink> {
        let mut phones = lock(&self.phones);
        if let Some(link) = phones.links.get(&phone_id) {
            return link.clone();
        }
        if phones.links.len() >= phones.sweep_at {
            phones.sweep();
        }
        let link = Arc::new(DeviceLink {
            phone_id,
            registry: self.registry.clone(),
            state: Mutex::new(State::default()),
        });
        phones.links.insert(phone_id, link.clone());
        link
    }

    /// How many phones have a link in the map (idle ones until the next sweep).
    pub fn len(&self) -> usize {
        lock(&self.phones).links.len()
    }

    /// True when no phone has a link.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl DeviceLink {
    /// Opens an event stream: the receiver yields SSE frames (keepalives are the caller's).
    /// A stream is a new connection: it makes this link the phone's current transport,
    /// replacing a WebSocket session. A stream opened while messages wait starts with
    /// `MessageEnqueued`. At most [`MAX_STREAMS`] are open: the oldest beyond it is told why,
    /// then ends.
    pub async fn open_stream(self: &Arc<Self>) -> Result<mpsc::Receiver<Bytes>, NotPaired> {
        let (tx, rx) = mpsc::channel(STREAM_CAPACITY);
        let mut state = self.state.lock().await;
        self.attach(&mut state, true).await?;
        state.streams.retain(|s| !s.is_closed());
        while state.streams.len() >= MAX_STREAMS {
            // Dropping the sender ends the stream once what it buffered is written.
            let oldest = state.streams.remove(0);
            let _ = oldest.try_send(Bytes::from_static(REPLACED_STREAM_FRAME));
        }
        if !state.outbox.is_empty() && tx.try_send(Event::MessageEnqueued.frame()).is_ok() {
            state.hinted = Some(tokio::time::Instant::now());
        }
        state.streams.push(tx);
        Ok(rx)
    }

    /// The messages handed over and not yet reported, at most [`MAX_FETCH`], each with the
    /// app id an earlier fetch named it by; none while another transport is current (they were
    /// handed to that one). It answers the `MessageEnqueued` sent so far: the next hand-over
    /// hints again.
    pub async fn fetch(self: &Arc<Self>, order: FetchOrder) -> Result<Vec<Handout>, NotPaired> {
        let mut state = self.state.lock().await;
        if let Linked::Elsewhere(_) = self.attach(&mut state, false).await? {
            return Ok(Vec::new());
        }
        state.last_active = Some(tokio::time::Instant::now());
        state.hinted = None;
        let take = |h: &Handout| Handout {
            app_id: state.named.get(&h.message_id).copied(),
            ..h.clone()
        };
        let out = match order {
            FetchOrder::Fifo => state.outbox.iter().take(MAX_FETCH).map(take).collect(),
            FetchOrder::Lifo => state
                .outbox
                .iter()
                .rev()
                .take(MAX_FETCH)
                .map(take)
                .collect(),
        };
        Ok(out)
    }

    /// Records what a fetch made of the outbox: the app ids it served its messages under
    /// (those still in the outbox), and the hand-overs it found no longer `sending` on this
    /// phone (cancelled, expired or reported meanwhile), which leave the outbox: they are never
    /// served again, and must not hold back the hint for the messages behind them. A stale
    /// hand-over is named with the time it was handed over, so a new hand-over of the same
    /// message since stays.
    pub async fn served(&self, served: &[AppMessageId], stale: &[(Uuid, DateTime<Utc>)]) {
        let mut state = self.state.lock().await;
        for (message_id, handed_at) in stale {
            if state
                .outbox
                .get(*message_id)
                .is_some_and(|h| h.handed_at == *handed_at)
            {
                state.outbox.remove(*message_id);
                state.served.remove(message_id);
            }
        }
        for app_id in served {
            if !state.outbox.contains(app_id.message_id) {
                continue;
            }
            if state.named.len() >= MAX_NAMED {
                state.named.clear();
            }
            state.named.insert(app_id.message_id, *app_id);
            state.served.insert(app_id.message_id);
        }
        if !stale.is_empty() {
            state.page_done();
        }
    }

    /// The send of `message_id` a fetch here last served; None when none did (or it was
    /// reported final, or forgotten): the caller reads the message instead.
    pub async fn current_send(&self, message_id: Uuid) -> Option<AppMessageId> {
        self.state.lock().await.named.get(&message_id).copied()
    }

    /// A state report from the phone: the message leaves the outbox, and a report that moves
    /// it (`frame`, None for Pending/Processed, which it already is) goes to the Phone actor:
    /// the line's when the message is a SIM line's (a send handed over here, or `line` when
    /// the caller read it from the store).
    pub async fn report(
        self: &Arc<Self>,
        message_id: Uuid,
        frame: Option<PhoneFrame>,
        line: Option<SimSlot>,
    ) -> Result<Pending, NotPaired> {
        let (phone, slot, session_id) = {
            let mut state = self.state.lock().await;
            let final_report = matches!(
                frame,
                Some(PhoneFrame::Delivered { .. } | PhoneFrame::Failed { .. })
            );
            let slot = match final_report {
                true => state.line_sends.remove(&message_id),
                false => state.line_sends.get(&message_id).copied(),
            }
            .or(line);
            state.outbox.remove(message_id);
            if state.served.remove(&message_id) {
                state.page_done();
            }
            if matches!(
                frame,
                Some(PhoneFrame::Delivered { .. } | PhoneFrame::Failed { .. })
            ) {
                // Final for this send: a retry after a failure is served under a new id.
                state.named.remove(&message_id);
            }
            let linked = self.attach(&mut state, false).await?;
            let session_id = linked.session_id();
            if let Linked::Current(_) = linked {
                state.last_active = Some(tokio::time::Instant::now());
            }
            (linked.phone(), slot, session_id)
        };
        Ok(match frame {
            Some(frame) => self.deliver_on(&phone, slot, session_id, frame),
            None => Pending::done(),
        })
    }

    /// An inbound SMS the phone posted (a `received` frame) on SIM slot `slot`: handed to the
    /// Phone actor like a WebSocket frame (the line's of that slot, if the device has one);
    /// resolves once it is stored (or was already).
    pub async fn inbound(
        self: &Arc<Self>,
        frame: PhoneFrame,
        slot: Option<SimSlot>,
    ) -> Result<Pending, NotPaired> {
        let (phone, session_id) = {
            let mut state = self.state.lock().await;
            let linked = self.attach(&mut state, false).await?;
            let session_id = linked.session_id();
            if let Linked::Current(_) = linked {
                state.last_active = Some(tokio::time::Instant::now());
            }
            (linked.phone(), session_id)
        };
        Ok(self.deliver_on(&phone, slot, session_id, frame))
    }

    /// Hands a frame to the device's actor, or through the Registry to the line on `slot`.
    fn deliver_on(
        &self,
        phone: &Addr<Phone>,
        slot: Option<SimSlot>,
        session_id: u64,
        frame: PhoneFrame,
    ) -> Pending {
        let Some(sim_slot) = slot else {
            return deliver(phone, frame);
        };
        let (done, wait) = oneshot::channel();
        self.registry.line_frame.do_send(LineFrame {
            device_id: self.phone_id,
            sim_slot,
            session_id,
            frame,
            done: Some(done),
        });
        Pending(Some(wait))
    }

    /// The Phone actor of this phone, with this link attached when it already is, when
    /// `take_over` (a new event stream), or when no other transport is current.
    async fn attach(
        self: &Arc<Self>,
        state: &mut State,
        take_over: bool,
    ) -> Result<Linked, NotPaired> {
        if let Some(attached) = &state.attached {
            return Ok(Linked::Current(attached.clone()));
        }
        let session_id = next_session_id();
        let (tx, rx) = mpsc::channel(LINK_CAPACITY);
        let link = Link { session_id, tx };
        let phone_id = self.phone_id;
        let phone = if take_over {
            match self
                .registry
                .connected
                .send(Connected { phone_id, link })
                .await
            {
                Ok(Some(phone)) => phone,
                _ => return Err(NotPaired),
            }
        } else {
            match self
                .registry
                .connect_if_idle
                .send(ConnectIfIdle { phone_id, link })
                .await
            {
                Ok(Ok(phone)) => phone,
                Ok(Err(NotAttached::Busy(phone))) => return Ok(Linked::Elsewhere(phone)),
                Ok(Err(NotAttached::NotPaired)) | Err(_) => return Err(NotPaired),
            }
        };
        let attached = Attached { session_id, phone };
        state.attached = Some(attached.clone());
        state.last_active = Some(tokio::time::Instant::now());
        actix_web::rt::spawn(self.clone().carry(session_id, rx));
        Ok(Linked::Current(attached))
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
                        Some(Outgoing::Frame(frame)) => {
                            // Acks are for WebSocket phones: reports and inbound posts here
                            // wait for their outcome instead (`ReportAndWait`).
                            if let ServerFrame::Send { message_id, to, content, attempt, sim_slot, .. } = *frame {
                                state.named.remove(&message_id);
                                state.served.remove(&message_id);
                                if let Some(slot) = sim_slot {
                                    if state.line_sends.len() >= MAX_NAMED {
                                        state.line_sends.clear();
                                    }
                                    state.line_sends.insert(message_id, slot);
                                }
                                state.outbox.push(Handout {
                                    message_id,
                                    to,
                                    content,
                                    attempt,
                                    handed_at: Utc::now(),
                                    app_id: None,
                                    sim_slot,
                                });
                                state.hint();
                            }
                        }
                        Some(Outgoing::Withdrawn { message_id }) => {
                            let _ = broadcast(&mut state, &Event::MessageCancelled { message_id });
                        }
                        Some(Outgoing::Close { reason, .. }) => {
                            // Replaced by a newer connection, or unpaired: the actor took back
                            // what was handed over; each stream is told why, then ends.
                            let told = Bytes::from(format!(": {reason}\n\n"));
                            for stream in &state.streams {
                                let _ = stream.try_send(told.clone());
                            }
                            self.detach(&mut state, session_id);
                            return;
                        }
                        None => {
                            // The Phone actor stopped (the server stops): streams end.
                            self.detach(&mut state, session_id);
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
                        self.detach(&mut state, session_id);
                        self.registry.disconnected.do_send(Disconnected {
                            phone_id: self.phone_id,
                            session_id,
                        });
                        return;
                    }
                    let quiet = state
                        .last_active
                        .is_none_or(|at| at.elapsed() >= HINT_AGAIN);
                    let again = match state.hinted {
                        // No fetch answered the hint: it may have been lost on the way.
                        Some(at) => at.elapsed() >= HINT_AGAIN,
                        // A fetch answered it, but the phone went quiet with messages left:
                        // the answer may have been lost, or the phone stopped short.
                        None => quiet,
                    };
                    if again {
                        state.hinted = None;
                        if !state.outbox.is_empty() {
                            state.hint();
                        }
                    }
                    self.registry.seen.do_send(Seen { phone_id: self.phone_id });
                }
            }
        }
    }

    /// Forgets session `session_id` if it is still this link's: its streams end, its outbox
    /// is the actor's again.
    fn detach(&self, state: &mut State, session_id: u64) {
        if state
            .attached
            .as_ref()
            .is_some_and(|a| a.session_id == session_id)
        {
            state.attached = None;
            state.outbox.clear();
            state.served.clear();
            state.streams.clear();
            state.named.clear();
            state.line_sends.clear();
            state.hinted = None;
        }
    }
}

/// Locks a map shared by the HTTP workers; a panic while it was held left nothing half done.
fn lock<T>(mutex: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Hands a frame to the Phone actor, to be answered once its outcome is stored.
fn deliver(phone: &Addr<Phone>, frame: PhoneFrame) -> Pending {
    let (done, wait) = oneshot::channel();
    phone.do_send(ReportAndWait { frame, done });
    Pending(Some(wait))
}

/// Sends an event to every open stream of the phone; closed ones are dropped. True when at
/// least one stream took it.
fn broadcast(state: &mut State, event: &Event) -> bool {
    let frame = event.frame();
    let mut heard = false;
    state.streams.retain(|s| match s.try_send(frame.clone()) {
        Ok(()) => {
            heard = true;
            true
        }
        Err(mpsc::error::TrySendError::Full(_)) => true,
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    });
    heard
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry nothing reads: the links below never attach.
    fn idle_registry() -> Arc<TransportRecipients> {
        let (tx, _rx) = actix::dev::channel::channel::<crate::actors::registry::Registry>(16);
        Arc::new(TransportRecipients::of(&Addr::new(tx)))
    }

    #[test]
    fn the_map_of_links_drops_idle_ones_as_new_phones_come() {
        let links = DeviceLinks::new(idle_registry());
        // 10,000 phones that each used the API once and left.
        for _ in 0..10_000 {
            drop(links.of(Uuid::now_v7()));
        }
        assert!(
            links.len() < 2 * SWEEP_FLOOR + 1,
            "{} links kept",
            links.len()
        );
        // A link someone still holds (an attached one's task, a request under way) stays,
        // and is the same link when asked for again.
        let held_id = Uuid::now_v7();
        let held = links.of(held_id);
        for _ in 0..10_000 {
            drop(links.of(Uuid::now_v7()));
        }
        assert!(Arc::ptr_eq(&held, &links.of(held_id)));
        assert!(
            links.len() < 2 * SWEEP_FLOOR + 1,
            "{} links kept",
            links.len()
        );
    }
}
