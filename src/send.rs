//! The send use case: one message, a bulk send, an AI reply, or a campaign's next recipients,
//! from a typed request to stored and handed on. The `/v1` handlers, AI replies (drafts sent
//! through the API and auto mode), campaigns and the compatibility APIs all call these
//! functions (the actors through callbacks injected at start-up: [`campaign_feeder`],
//! [`auto_replies`]); a handler only parses its body into a
//! request (`TryFrom` at the edge), calls, and renders (docs/api.md, Messages).
//!
//! Layering: api → send → actors/store → domain. Nothing here knows HTTP: a refusal is a
//! [`SendError`], which each caller turns into its own answer.

use std::collections::HashSet;
use std::sync::Arc;

use actix::Addr;
use chrono::{DateTime, Utc};
use sea_orm::DatabaseConnection;
use uuid::Uuid;

use crate::actors::ai::{AutoReplies, AutoReply, AutoReplyRequest};
use crate::actors::campaign::{Fed, FeedRequest, Feeder};
use crate::actors::phone::{Phone, Reservation};
use crate::actors::registry::{ChooseLines, Enqueue, Registry, Route, RouteError};
use crate::clock::SharedClock;
use crate::config::{LimitSettings, Settings};
use crate::domain::ai::DraftStatus;
use crate::domain::campaign::RecipientStatus;
use crate::domain::ids::{MessageId, PhoneId};
use crate::domain::phone_number::PhoneNumber;
use crate::domain::quota::CountQuota;
use crate::domain::sms::SmsText;
use crate::domain::status::{MessageStatus, Mode, QueueClass};
use crate::store::StoreError;
use crate::store::messages::{ClientOptions, Message};
use crate::store::pools;
use crate::store::scoped::Scope;
use crate::store::writer::{
    Accept, AcceptOutcome, CampaignOp, CampaignOutcome, Content, DraftLink, NewMessage,
    NewWorkspaceLimit, Transition, Writer,
};

/// Most recipients of one bulk send.
pub const MAX_BULK_RECIPIENTS: usize = 500;
/// Longest accepted request_id, in characters.
pub const MAX_REQUEST_ID_CHARS: usize = 255;

/// What sending needs: the writer, the registry, the clock, the settings (message TTL) and
/// the database (sender pools and their sticky lines are read from it).
#[derive(Clone)]
pub struct SendDeps {
    pub writer: Writer,
    pub registry: Addr<Registry>,
    pub clock: SharedClock,
    pub settings: Arc<Settings>,
    pub db: DatabaseConnection,
}

/// Where a send goes out from (docs/api.md, Messages and "Pools"): one of your numbers
/// (`from_number`), or a sender pool (`from_pool`), whose line is chosen per recipient.
#[derive(Debug, Clone)]
pub enum SendFrom {
    Number(PhoneNumber),
    Pool(PoolKey),
}

/// A sender pool as `from_pool` names it: its id, or its name (a name is never a UUID).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolKey {
    Id(Uuid),
    Name(String),
}

impl PoolKey {
    /// An id when the text is a UUID, else a name.
    pub fn parse(text: String) -> PoolKey {
        match Uuid::parse_str(&text) {
            Ok(id) => PoolKey::Id(id),
            Err(_) => PoolKey::Name(text),
        }
    }
}

/// Who sends: the scope every write lands in, and when its workspace was created (ms since
/// the epoch; None when unknown), from which the use case resolves the new-workspace limit.
#[derive(Debug, Clone, Copy)]
pub struct Sender {
    pub scope: Scope,
    pub workspace_created_at: Option<i64>,
}

impl Sender {
    /// The new-workspace limit that applies to this sender (docs/api.md, Messages): live mode
    /// only, within the window after the workspace was created. Campaigns, whose launch counts
    /// against the same limit, read it here too.
    pub fn new_workspace_limit(&self, limits: &LimitSettings) -> Option<NewWorkspaceLimit> {
        let created_at = self.workspace_created_at?;
        NewWorkspaceLimit::of(limits, self.scope.mode, created_at)
    }
}

/// An idempotency key, 1 to [`MAX_REQUEST_ID_CHARS`] characters, unique per workspace and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(String);

/// A request_id that is empty or too long.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
#[error("request_id must be 1 to 255 characters")]
pub struct InvalidRequestId;

impl RequestId {
    /// Accepts 1 to [`MAX_REQUEST_ID_CHARS`] characters.
    pub fn parse(text: String) -> Result<RequestId, InvalidRequestId> {
        if text.is_empty() || text.chars().count() > MAX_REQUEST_ID_CHARS {
            return Err(InvalidRequestId);
        }
        Ok(RequestId(text))
    }

    /// The key as given.
    pub fn into_string(self) -> String {
        self.0
    }
}

/// One SMS to send, every field already parsed.
#[derive(Debug, Clone)]
pub struct SendRequest {
    pub from: SendFrom,
    pub to_number: PhoneNumber,
    pub text: SmsText,
    pub request_id: Option<RequestId>,
    pub scheduled_for: Option<DateTime<Utc>>,
    /// Send through this phone only.
    pub device_id: Option<PhoneId>,
}

/// One text to up to [`MAX_BULK_RECIPIENTS`] numbers; a number given twice is sent once.
#[derive(Debug, Clone)]
pub struct BulkSendRequest {
    from: SendFrom,
    /// The distinct recipients, in request order.
    to_numbers: Vec<PhoneNumber>,
    /// `places[i]`: where `to_numbers[i]` is in the request.
    places: Vec<usize>,
    text: SmsText,
    device_id: Option<PhoneId>,
    /// The idempotency key, kept by the first message (the whole send is refused as a repeat).
    request_id: Option<RequestId>,
    /// What the client API keeps of its request, on every message.
    client: Option<ClientOptions>,
    /// Expires no later than this (ms since the epoch); never later than `messages.ttl`.
    expires_by: Option<i64>,
}

/// A bulk send without recipients or with more than [`MAX_BULK_RECIPIENTS`].
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
#[error("to_numbers must hold 1 to 500 numbers")]
pub struct RecipientCount;

impl BulkSendRequest {
    /// Keeps the first of each number; refuses 0 or more than [`MAX_BULK_RECIPIENTS`] given.
    pub fn new(
        from: SendFrom,
        to_numbers: Vec<PhoneNumber>,
        text: SmsText,
        device_id: Option<PhoneId>,
    ) -> Result<BulkSendRequest, RecipientCount> {
        if to_numbers.is_empty() || to_numbers.len() > MAX_BULK_RECIPIENTS {
            return Err(RecipientCount);
        }
        let mut seen = HashSet::new();
        let mut places = Vec::with_capacity(to_numbers.len());
        let to_numbers = to_numbers
            .into_iter()
            .enumerate()
            .filter(|(_, n)| seen.insert(n.clone()))
            .map(|(place, n)| {
                places.push(place);
                n
            })
            .collect();
        Ok(BulkSendRequest {
            from,
            to_numbers,
            places,
            text,
            device_id,
            request_id: None,
            client: None,
            expires_by: None,
        })
    }

    /// A send of the client API (docs/compat.md, Messages): refused as a repeat when
    /// `request_id` was used before, `client` kept on every message, expiring by `expires_by`
    /// (ms) when that is sooner than `messages.ttl`.
    pub fn for_client(
        self,
        request_id: RequestId,
        client: ClientOptions,
        expires_by: Option<i64>,
    ) -> BulkSendRequest {
        BulkSendRequest {
            request_id: Some(request_id),
            client: Some(client),
            expires_by,
            ..self
        }
    }
}

/// A reply to a conversation, sending an AI draft.
#[derive(Debug, Clone)]
pub struct ReplyRequest {
    /// The number of yours the conversation is on.
    pub from_number: PhoneNumber,
    pub to_number: PhoneNumber,
    pub text: SmsText,
    pub draft: DraftLink,
}

/// Why a send was refused (docs/api.md, Messages, lists the check order). `index` counts the
/// request's recipients, as given (bulk sends: duplicates included).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("recipient {index} is a premium-rate number")]
    PremiumRate { index: usize },
    #[error("device_id is not one of the workspace's phones")]
    UnknownDevice,
    #[error("device_id belongs to a phone with another number than from_number")]
    NumberMismatch,
    /// No phone of `number` is online (`pinned`: the one the caller chose is not).
    #[error("no phone of {number} is online")]
    NoDevice { number: PhoneNumber, pinned: bool },
    #[error("from_pool names no pool of this workspace and mode")]
    UnknownPool,
    /// No line of the pool (its name) is online.
    #[error("no line of pool {0} is online")]
    NoPoolLine(String),
    #[error("recipient {index} opted out")]
    OptedOut { index: usize },
    #[error("the recipient turned AI replies off")]
    AiRepliesOff,
    #[error("request_id was used by message {0}")]
    Duplicate(MessageId),
    #[error("the new-workspace limit of {limit} messages is reached")]
    LimitReached { limit: u32, window_ends_at: i64 },
    /// A message quota would be passed; a daily one resets at `resets_at`, in
    /// `retry_after_secs` (docs/api.md, Quotas).
    #[error("a message quota is reached")]
    QuotaExceeded {
        quota: CountQuota,
        resets_at: Option<i64>,
        retry_after_secs: u64,
    },
    /// The draft was sent or discarded meanwhile (`None`: it is gone).
    #[error("the draft is not pending")]
    DraftNotPending(Option<DraftStatus>),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The registry or the accept task is gone (the server is stopping).
    #[error("{0}")]
    Unavailable(String),
}

/// Sends one SMS: through an idle online phone at once when one has pace to spare (the
/// message is then stored as `sending`), else queued. Returns the stored message.
#[tracing::instrument(skip_all, fields(workspace_id = %sender.scope.workspace_id))]
pub async fn send(
    deps: &SendDeps,
    sender: Sender,
    request: SendRequest,
) -> Result<Message, SendError> {
    if request.to_number.is_premium_rate() {
        return Err(SendError::PremiumRate { index: 0 });
    }
    let lane = lanes(
        deps,
        sender.scope,
        &request.from,
        request.device_id,
        std::slice::from_ref(&request.to_number),
    )
    .await?
    .into_iter()
    .next()
    .ok_or_else(|| SendError::Unavailable("no lane chosen".into()))?;
    let routing = lane.routing;
    let now = deps.clock.now_ms();
    let scheduled_for = request.scheduled_for.map(|t| t.timestamp_millis());
    // Fast path: an idle online phone with pace to spare takes the message in the accept's own
    // commit (stored as `sending`), and its frame leaves as soon as that commit is done.
    let reserved = match (&routing.phone, scheduled_for) {
        (Some(phone), None) => Reservation::take(phone).await,
        _ => None,
    };
    let request_id = request.request_id.map(RequestId::into_string);
    let new = NewMessage::outbound(
        QueueClass::Single,
        lane.from_number,
        request.to_number.into_string(),
        request.text.into(),
        expires_at(deps, scheduled_for.unwrap_or(now).max(now)),
    )
    .with_pool(lane.pool_id)
    .with_status(if reserved.is_some() {
        MessageStatus::Sending
    } else {
        MessageStatus::Queued
    })
    .with_device(routing.device_id, routing.pinned)
    .with_request_id(request_id.clone())
    .with_schedule(scheduled_for);
    let accept = Accept {
        scope: sender.scope,
        request_id,
        messages: vec![new],
        device_available: routing.available,
        limit: sender.new_workspace_limit(&deps.settings.limits),
        draft: None,
    };
    let outcome = accept_and_hand_over(deps, accept, reserved).await?;
    let stored = accepted(outcome, &request.from, request.device_id.is_some())?;
    only(stored)
}

/// Sends one text to many numbers, atomically: every message is stored queued, or none is.
/// Returns the stored messages, one per distinct number, in request order.
#[tracing::instrument(skip_all, fields(workspace_id = %sender.scope.workspace_id))]
pub async fn send_bulk(
    deps: &SendDeps,
    sender: Sender,
    request: BulkSendRequest,
) -> Result<Vec<Message>, SendError> {
    let places = &request.places;
    let place = |i: usize| places.get(i).copied().unwrap_or(i);
    // The first premium-rate number given is the first one kept (duplicates follow it).
    if let Some(i) = request
        .to_numbers
        .iter()
        .position(PhoneNumber::is_premium_rate)
    {
        return Err(SendError::PremiumRate { index: place(i) });
    }
    let lanes = lanes(
        deps,
        sender.scope,
        &request.from,
        request.device_id,
        &request.to_numbers,
    )
    .await?;
    let expires_at = expires_at(deps, deps.clock.now_ms());
    let expires_at = request
        .expires_by
        .map_or(expires_at, |by| by.min(expires_at));
    let request_id = request.request_id.map(RequestId::into_string);
    let device_available = lanes.iter().all(|lane| lane.routing.available);
    let messages = request
        .to_numbers
        .iter()
        .zip(lanes)
        .enumerate()
        .map(|(i, (to, lane))| {
            NewMessage::outbound(
                QueueClass::Bulk,
                lane.from_number,
                to.as_str().to_string(),
                request.text.clone().into(),
                expires_at,
            )
            .with_device(lane.routing.device_id, lane.routing.pinned)
            .with_pool(lane.pool_id)
            .with_request_id(request_id.clone().filter(|_| i == 0))
            .with_client(request.client.clone())
        })
        .collect();
    let accept = Accept {
        scope: sender.scope,
        request_id,
        messages,
        device_available,
        limit: sender.new_workspace_limit(&deps.settings.limits),
        draft: None,
    };
    let outcome = accept_and_hand_over(deps, accept, None).await?;
    accepted(outcome, &request.from, request.device_id.is_some()).map_err(|err| match err {
        SendError::OptedOut { index } => SendError::OptedOut {
            index: place(index),
        },
        other => other,
    })
}

/// Sends a reply to a conversation and marks its AI draft sent in the same commit; queued
/// through whichever phone of `from_number` is online.
#[tracing::instrument(skip_all, fields(workspace_id = %sender.scope.workspace_id))]
pub async fn reply(
    deps: &SendDeps,
    sender: Sender,
    request: ReplyRequest,
) -> Result<Message, SendError> {
    // Drafts are not made for premium-rate senders; one stored before that rule is refused.
    if request.to_number.is_premium_rate() {
        return Err(SendError::PremiumRate { index: 0 });
    }
    let routing = route(deps, sender.scope, request.from_number.as_str(), None).await?;
    let now = deps.clock.now_ms();
    let new = NewMessage::outbound(
        QueueClass::Single,
        request.from_number.as_str().to_string(),
        request.to_number.into_string(),
        request.text.into(),
        expires_at(deps, now),
    )
    .with_device(routing.device_id, false);
    let accept = Accept {
        scope: sender.scope,
        request_id: None,
        messages: vec![new],
        device_available: routing.available,
        limit: sender.new_workspace_limit(&deps.settings.limits),
        draft: Some(request.draft),
    };
    let outcome = accept_and_hand_over(deps, accept, None).await?;
    let from = SendFrom::Number(request.from_number);
    only(accepted(outcome, &from, false)?)
}

/// Where accepted messages go: a phone (live) or the simulated phone (test).
#[derive(Clone)]
struct Routing {
    device_id: Option<Uuid>,
    pinned: bool,
    available: bool,
    /// The chosen online phone's actor (live mode).
    phone: Option<Addr<Phone>>,
}

/// Finds the phone for a send from `from_number`, or learns there is none (docs/api.md,
/// Messages, check order: this runs before the writer checks idempotency, but its answer is
/// applied after).
async fn route(
    deps: &SendDeps,
    scope: Scope,
    from_number: &str,
    device_id: Option<PhoneId>,
) -> Result<Routing, SendError> {
    let device_id = device_id.map(PhoneId::as_uuid);
    let answer = deps
        .registry
        .send(Route {
            scope,
            from_number: from_number.to_string(),
            device_id,
        })
        .await
        .map_err(|e| SendError::Unavailable(format!("registry unavailable: {e}")))?;
    match answer {
        Ok(found) => Ok(Routing {
            device_id: found.as_ref().map(|r| r.device_id).or(device_id),
            pinned: device_id.is_some(),
            available: scope.mode == Mode::Test || found.is_some(),
            phone: found.and_then(|r| r.phone),
        }),
        Err(RouteError::UnknownDevice) => Err(SendError::UnknownDevice),
        Err(RouteError::NumberMismatch) => Err(SendError::NumberMismatch),
    }
}

/// Where one recipient's message goes out from: its number, its phone, and the pool it was
/// chosen in.
#[derive(Clone)]
struct Lane {
    from_number: String,
    routing: Routing,
    pool_id: Option<Uuid>,
}

/// The lane of each of `to` (in order): the one routing of `from_number`, or a line of the
/// pool chosen per recipient (docs/api.md, "Pools"). A pool with no line online is refused
/// here, before anything is stored.
async fn lanes(
    deps: &SendDeps,
    scope: Scope,
    from: &SendFrom,
    device_id: Option<PhoneId>,
    to: &[PhoneNumber],
) -> Result<Vec<Lane>, SendError> {
    let key = match from {
        SendFrom::Number(number) => {
            let lane = Lane {
                from_number: number.as_str().to_string(),
                routing: route(deps, scope, number.as_str(), device_id).await?,
                pool_id: None,
            };
            return Ok(vec![lane; to.len()]);
        }
        SendFrom::Pool(key) => key,
    };
    let pool = match key {
        PoolKey::Id(id) => pools::get(&deps.db, scope, *id).await,
        PoolKey::Name(name) => pools::by_name(&deps.db, scope, name).await,
    };
    let pool = match pool {
        Err(StoreError::NotFound) => return Err(SendError::UnknownPool),
        other => other?,
    };
    let numbers: Vec<String> = to.iter().map(|n| n.as_str().to_string()).collect();
    let sticky = pools::sticky(&deps.db, pool.id, &numbers).await?;
    let choose = ChooseLines {
        scope,
        pool_id: pool.id,
        lines: pool.phone_ids.clone(),
        sticky: numbers.iter().map(|n| sticky.get(n).copied()).collect(),
        must_send: false,
    };
    let picks = deps
        .registry
        .send(choose)
        .await
        .map_err(|e| SendError::Unavailable(format!("registry unavailable: {e}")))?
        .ok_or(SendError::NoPoolLine(pool.name))?;
    let live = scope.mode == Mode::Live;
    Ok(picks
        .into_iter()
        .map(|pick| Lane {
            from_number: pick.phone_number,
            routing: Routing {
                // Test mode's simulated phones send by number, as for `from_number`.
                device_id: live.then_some(pick.phone_id),
                pinned: false,
                available: true,
                phone: pick.phone,
            },
            pool_id: Some(pool.id),
        })
        .collect())
}

/// When a message that may start at `starts` (ms) expires: the configured TTL later.
fn expires_at(deps: &SendDeps, starts: i64) -> i64 {
    expires_after(deps.settings.messages.ttl, starts)
}

/// `starts` (ms) plus `ttl`, saturating.
fn expires_after(ttl: std::time::Duration, starts: i64) -> i64 {
    let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    starts.saturating_add(ttl)
}

/// Hands stored `queued` messages to their phones' queues (through the registry, which
/// routes each to its phone's actor, on this node or its owner's).
fn enqueue(registry: &Addr<Registry>, messages: Vec<Message>) {
    if !messages.is_empty() {
        registry.do_send(Enqueue { messages });
    }
}

/// The one message of a single accept.
fn only(stored: Vec<Message>) -> Result<Message, SendError> {
    stored
        .into_iter()
        .next()
        .ok_or_else(|| SendError::Unavailable("the writer accepted no message".into()))
}

/// Stores accepted messages, then hands them on: to the phone that reserved the hand-over
/// (`reserved`, single sends), or to their phones' queues through the registry. A refused
/// accept gives a reserved pace slot back. This runs as a task of its own, so a caller that
/// goes away mid-request (a client hanging up) cannot leave a stored message unqueued or a
/// reserved slot taken.
async fn accept_and_hand_over(
    deps: &SendDeps,
    accept: Accept,
    reserved: Option<Reservation>,
) -> Result<AcceptOutcome, SendError> {
    let (writer, registry) = (deps.writer.clone(), deps.registry.clone());
    let outcome = actix::spawn(async move {
        let outcome = writer.accept(accept).await;
        match (&outcome, reserved) {
            (Ok(AcceptOutcome::Accepted(stored)), Some(reserved)) => {
                if let Some(message) = stored.first() {
                    hand_to(reserved, message.clone(), &writer, &registry).await;
                }
            }
            (Ok(AcceptOutcome::Accepted(stored)), None) => enqueue(&registry, stored.clone()),
            (_, Some(reserved)) => reserved.release(),
            (_, None) => {}
        }
        outcome
    })
    .await
    .map_err(|e| SendError::Unavailable(format!("accept task ended: {e}")))??;
    Ok(outcome)
}

/// Gives a message stored as `sending` on a reserved phone to that phone's actor. If the actor
/// cannot take it (gone because the phone was unpaired meanwhile, or its mailbox is full), the
/// message goes back to `queued` and through the registry, which routes it again or fails it
/// like any message of an unpaired phone (a frame already queued is deduped by the phone).
async fn hand_to(
    reserved: Reservation,
    message: Message,
    writer: &Writer,
    registry: &Addr<Registry>,
) {
    let id = message.id;
    if reserved.hand(message).is_ok() {
        return;
    }
    let back = Transition::requeue(
        id,
        "the phone's actor stopped before the message was sent; queued again",
    );
    match writer.transition(back).await {
        Ok(Some(queued)) => enqueue(registry, vec![queued]),
        Ok(None) => {}
        Err(err) => {
            tracing::error!(message_id = %id, error = %err, "message not queued again; it is sent after the next restart")
        }
    }
}

/// Turns the writer's answer into the stored messages or the refusal; `pinned` when the
/// caller chose the phone.
fn accepted(
    outcome: AcceptOutcome,
    from: &SendFrom,
    pinned: bool,
) -> Result<Vec<Message>, SendError> {
    match outcome {
        AcceptOutcome::Accepted(messages) => Ok(messages),
        AcceptOutcome::OptedOut { index } => Err(SendError::OptedOut { index }),
        AcceptOutcome::AiRepliesOff => Err(SendError::AiRepliesOff),
        AcceptOutcome::Duplicate(id) => Err(SendError::Duplicate(id.into())),
        AcceptOutcome::NoDevice => Err(match from {
            SendFrom::Number(number) => SendError::NoDevice {
                number: number.clone(),
                pinned,
            },
            SendFrom::Pool(PoolKey::Name(name)) => SendError::NoPoolLine(name.clone()),
            SendFrom::Pool(PoolKey::Id(id)) => SendError::NoPoolLine(id.to_string()),
        }),
        AcceptOutcome::LimitReached {
            limit,
            window_ends_at,
        } => Err(SendError::LimitReached {
            limit,
            window_ends_at,
        }),
        AcceptOutcome::QuotaExceeded {
            quota,
            resets_at,
            retry_after_secs,
        } => Err(SendError::QuotaExceeded {
            quota,
            resets_at,
            retry_after_secs,
        }),
        AcceptOutcome::DraftNotPending(status) => Err(SendError::DraftNotPending(status)),
    }
}

/// Queues up to `request.room` pending recipients of a running campaign as messages (one
/// writer operation, which checks the campaign still runs, under its lease, and counts the
/// message quotas) and hands them to their phone's queue. Routed, expiring and enqueued like
/// every other send; the recipients' opt-outs are applied by the writer (docs/api.md,
/// Campaigns).
pub async fn feed_campaign(
    deps: &SendDeps,
    db: &DatabaseConnection,
    request: FeedRequest,
) -> Result<Fed, StoreError> {
    let FeedRequest {
        campaign,
        room,
        lease,
    } = request;
    let device_id = if campaign.scope.mode == Mode::Test || campaign.pool_id.is_some() {
        None
    } else {
        match route(deps, campaign.scope, &campaign.from_number, None).await {
            Ok(Routing {
                device_id: Some(device_id),
                available: true,
                ..
            }) => Some(device_id),
            _ => return Ok(Fed::NoPhone),
        }
    };
    let pending = crate::store::campaigns::pending(db, campaign.id, room as u64).await?;
    if pending.is_empty() {
        return Ok(Fed::Exhausted);
    }
    // A pool campaign spreads its recipients over the pool's lines by the send's own choice
    // (docs/api.md, "Pools"); without a line online it waits like a campaign without a phone.
    let pool_lanes = match campaign.pool_id {
        None => None,
        Some(pool_id) => {
            let to: Vec<PhoneNumber> = pending
                .iter()
                .filter_map(|r| PhoneNumber::parse(&r.to_number).ok())
                .collect();
            if to.len() != pending.len() {
                return Err(StoreError::corrupt(
                    "campaign_recipients",
                    "to_number",
                    campaign.id.as_uuid(),
                    "not E.164",
                ));
            }
            let from = SendFrom::Pool(PoolKey::Id(pool_id));
            match lanes(deps, campaign.scope, &from, None, &to).await {
                Ok(lanes) => Some(lanes),
                Err(SendError::Store(err)) => return Err(err),
                Err(_) => return Ok(Fed::NoPhone),
            }
        }
    };
    let expires_at = expires_at(deps, deps.clock.now_ms());
    let messages = pending
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let content = Content {
                content: r.content,
                segments: r.segments,
                encoding: r.encoding,
            };
            let lane = pool_lanes.as_ref().and_then(|lanes| lanes.get(i));
            let message = NewMessage::outbound(
                QueueClass::Campaign,
                lane.map_or_else(|| campaign.from_number.clone(), |l| l.from_number.clone()),
                r.to_number,
                content,
                expires_at,
            )
            .with_device(lane.map_or(device_id, |l| l.routing.device_id), false)
            .with_pool(lane.and_then(|l| l.pool_id))
            .with_campaign(campaign.id);
            (r.id, message)
        })
        .collect();
    let op = CampaignOp::Feed {
        id: campaign.id,
        scope: campaign.scope,
        messages,
        lease,
    };
    match deps.writer.campaign(op).await? {
        CampaignOutcome::Fed {
            messages,
            opted_out,
            held,
        } => {
            crate::telemetry::count_campaign_recipients(
                RecipientStatus::Canceled,
                opted_out as u64,
            );
            let ids = messages.iter().map(|m| MessageId::from(m.id)).collect();
            enqueue(&deps.registry, messages);
            Ok(Fed::Queued { ids, held })
        }
        CampaignOutcome::LeaseLost => Ok(Fed::LeaseLost),
        _ => Ok(Fed::Stopped),
    }
}

/// The campaigns' [`Feeder`]: [`feed_campaign`] with these dependencies.
pub fn campaign_feeder(deps: SendDeps, db: DatabaseConnection) -> Feeder {
    Arc::new(move |request| {
        let (deps, db) = (deps.clone(), db.clone());
        Box::pin(async move { feed_campaign(&deps, &db, request).await })
    })
}

/// Sends an AI reply of auto mode (docs/api.md, AI replies): [`reply`], its refusals sorted
/// into what the AI actor does next.
pub async fn auto_reply(
    deps: &SendDeps,
    request: AutoReplyRequest,
) -> Result<AutoReply, StoreError> {
    let sender = Sender {
        scope: request.scope,
        workspace_created_at: request.workspace_created_at,
    };
    let reply_request = ReplyRequest {
        from_number: request.from_number,
        to_number: request.to_number,
        text: request.text,
        draft: request.draft,
    };
    match reply(deps, sender, reply_request).await {
        Ok(_) => Ok(AutoReply::Sent),
        Err(SendError::OptedOut { .. } | SendError::AiRepliesOff) => Ok(AutoReply::Refused),
        Err(SendError::Store(err)) => Err(err),
        // No online phone, the new-workspace limit, a premium-rate sender: sent by hand.
        Err(_) => Ok(AutoReply::Later),
    }
}

/// The AI actor's [`AutoReplies`]: [`auto_reply`] with these dependencies.
pub fn auto_replies(deps: SendDeps) -> AutoReplies {
    Arc::new(move |request| {
        let deps = deps.clone();
        Box::pin(async move { auto_reply(&deps, request).await })
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::ids::WorkspaceId;

    fn number(text: &str) -> PhoneNumber {
        PhoneNumber::parse(text).unwrap()
    }

    fn text() -> SmsText {
        SmsText::parse("hello".into()).unwrap()
    }

    fn scope(mode: Mode) -> Scope {
        Scope {
            workspace_id: WorkspaceId::from(Uuid::from_u128(7)),
            mode,
        }
    }

    #[test]
    fn a_request_id_holds_1_to_255_characters() {
        assert_eq!(RequestId::parse(String::new()), Err(InvalidRequestId));
        assert!(RequestId::parse("é".repeat(MAX_REQUEST_ID_CHARS)).is_ok());
        assert_eq!(
            RequestId::parse("a".repeat(MAX_REQUEST_ID_CHARS + 1)),
            Err(InvalidRequestId)
        );
        assert_eq!(RequestId::parse("k1".into()).unwrap().into_string(), "k1");
    }

    #[test]
    fn a_bulk_send_keeps_the_first_of_each_number_and_where_it_was() {
        let (a, b) = (number("+14155550101"), number("+14155550102"));
        let bulk = BulkSendRequest::new(
            SendFrom::Number(number("+14155550100")),
            vec![a.clone(), b.clone(), a.clone(), b.clone()],
            text(),
            None,
        )
        .unwrap();
        assert_eq!(bulk.to_numbers, [a, b]);
        assert_eq!(bulk.places, [0, 1]);
    }

    #[test]
    fn a_bulk_send_has_1_to_500_recipients() {
        let from = SendFrom::Number(number("+14155550100"));
        assert!(BulkSendRequest::new(from.clone(), vec![], text(), None).is_err());
        let many = vec![number("+14155550101"); MAX_BULK_RECIPIENTS + 1];
        assert_eq!(
            BulkSendRequest::new(from.clone(), many, text(), None).err(),
            Some(RecipientCount)
        );
        let most = vec![number("+14155550101"); MAX_BULK_RECIPIENTS];
        assert!(BulkSendRequest::new(from, most, text(), None).is_ok());
    }

    #[test]
    fn the_new_workspace_limit_applies_to_live_senders_of_known_age() {
        let limits = LimitSettings::default();
        let live = Sender {
            scope: scope(Mode::Live),
            workspace_created_at: Some(1_000),
        };
        let limit = live.new_workspace_limit(&limits).unwrap();
        assert_eq!(limit.max, limits.new_workspace_messages);
        assert_eq!(limit.window_starts_at, 1_000);
        let test = Sender {
            scope: scope(Mode::Test),
            ..live
        };
        assert!(test.new_workspace_limit(&limits).is_none());
        let unknown = Sender {
            workspace_created_at: None,
            ..live
        };
        assert!(unknown.new_workspace_limit(&limits).is_none());
    }

    #[test]
    fn a_message_expires_its_ttl_after_it_may_start() {
        assert_eq!(expires_after(Duration::from_secs(60), 1_000), 61_000);
        assert_eq!(expires_after(Duration::MAX, 1), i64::MAX);
    }

    #[test]
    fn refusals_of_the_writer_become_send_errors() {
        let from = SendFrom::Number(number("+14155550100"));
        let pool = SendFrom::Pool(PoolKey::parse("support".into()));
        assert!(matches!(
            accepted(AcceptOutcome::NoDevice, &pool, false),
            Err(SendError::NoPoolLine(name)) if name == "support"
        ));
        assert!(matches!(
            accepted(AcceptOutcome::NoDevice, &from, true),
            Err(SendError::NoDevice { pinned: true, .. })
        ));
        assert!(matches!(
            accepted(AcceptOutcome::OptedOut { index: 3 }, &from, false),
            Err(SendError::OptedOut { index: 3 })
        ));
        assert!(matches!(
            accepted(AcceptOutcome::Accepted(vec![]), &from, false),
            Ok(stored) if stored.is_empty()
        ));
        assert!(matches!(only(vec![]), Err(SendError::Unavailable(_))));
    }
}
