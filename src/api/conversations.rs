//! Conversations API: messages grouped by the number on the other side, with the contact's
//! name and the AI drafts answering inbound messages (docs/api.md, "Conversations").

use crate::api::page::PageParams;
use std::collections::HashMap;

use actix_web::http::StatusCode;
use actix_web::web;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::envelope::envelope_of;
use super::page::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, decode_cursor, parse_cursor, parse_limit};
use super::{Answer, AppState, Caller, DocumentedRoute, QueryParams, encode_cursor};
use crate::clock::format_ms;
use crate::domain::ids::CampaignId;
use crate::domain::status::Direction;
use crate::error::{ApiError, ErrorCode, success};
use crate::store::conversations::{self, ContactName, Summary};
use crate::store::messages::{Message, Position};

/// Longest `q`, in characters.
const MAX_QUERY_CHARS: usize = 64;
/// Longest counterpart number in a path (a phone's `from` is at most 32 characters).
const MAX_NUMBER_CHARS: usize = 32;
/// Messages of one conversation per page: default and most.
const DEFAULT_MESSAGES: u64 = 200;
const MAX_MESSAGES: u64 = 200;

/// The conversation operations (route registry, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    vec![
        DocumentedRoute::of::<__path_list>(|| web::to(list)).errors(&[ErrorCode::ValidationFailed]),
        DocumentedRoute::of::<__path_get>(|| web::to(get)).errors(&[ErrorCode::ValidationFailed]),
    ]
}

/// The contact of a conversation's number.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConversationContactOut {
    pub id: Uuid,
    /// First and last name; null when the contact has neither.
    pub name: Option<String>,
}

impl From<&ContactName> for ConversationContactOut {
    fn from(contact: &ContactName) -> ConversationContactOut {
        ConversationContactOut {
            id: contact.id,
            name: contact.display(),
        }
    }
}

/// The newest message of a conversation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LastMessageOut {
    pub id: Uuid,
    /// `outbound` or `inbound`.
    pub direction: String,
    /// The text (`""` once retention removed it).
    pub body: String,
    pub status: String,
    pub created_at: String,
}

/// One conversation of the list.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConversationOut {
    /// The number on the other side: E.164, or a sender id such as a short code.
    pub number: String,
    pub contact: Option<ConversationContactOut>,
    pub last_message: LastMessageOut,
    pub last_activity_at: String,
    /// Inbound messages from the number still stored (records live 24 hours after they end).
    pub inbound_count: u64,
    /// AI drafts answering the number that wait for review.
    pub pending_drafts: u64,
}

/// A page of conversations.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConversationPageOut {
    pub conversations: Vec<ConversationOut>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}
envelope_of!(
    ConversationPageEnvelope,
    ConversationPageOut,
    "A page of conversations."
);

/// An AI draft beside the inbound message it answers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConversationDraftOut {
    pub id: Uuid,
    /// `pending`, `sent` or `discarded`.
    pub status: String,
    pub body: String,
    pub created_at: String,
}

/// A message of a conversation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConversationMessageOut {
    pub id: Uuid,
    /// `outbound` or `inbound`.
    pub direction: String,
    pub status: String,
    pub from_number: String,
    pub to_number: String,
    /// The text (`""` once retention removed it).
    pub content: String,
    pub segments: u32,
    pub campaign_id: Option<Uuid>,
    pub created_at: String,
    pub sent_at: Option<String>,
    pub delivered_at: Option<String>,
    pub failed_at: Option<String>,
    pub failure_reason: Option<String>,
    /// Inbound messages only: the AI drafts answering it (at most one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drafts: Option<Vec<ConversationDraftOut>>,
}

/// One conversation: its messages oldest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConversationDetailOut {
    pub number: String,
    pub contact: Option<ConversationContactOut>,
    /// The newest messages (at most `limit`), oldest first.
    pub messages: Vec<ConversationMessageOut>,
    /// Whether older messages exist; pass `next_cursor` as `cursor` to read them.
    pub has_more: bool,
    pub next_cursor: Option<String>,
}
envelope_of!(
    ConversationDetailEnvelope,
    ConversationDetailOut,
    "One conversation."
);

/// The list's cursor: the (last activity, number) of the last conversation of a page.
fn encode_list_cursor(summary: &Summary) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}:{}", summary.last_activity_at, summary.number))
}

fn decode_list_cursor(cursor: &str) -> Option<(i64, String)> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (at, number) = text.split_once(':')?;
    Some((at.parse().ok()?, number.to_string()))
}

/// Whether a conversation matches `q`: its number contains it (or its digits, when `q` has
/// some), or its contact's name contains it, case-insensitively.
fn matches(q: &str, number: &str, contact: Option<&ContactName>) -> bool {
    let q = q.to_lowercase();
    if number.to_lowercase().contains(&q) {
        return true;
    }
    let digits: String = q.chars().filter(char::is_ascii_digit).collect();
    if !digits.is_empty()
        && q.chars()
            .all(|c| c.is_ascii_digit() || " +-().".contains(c))
        && number.contains(&digits)
    {
        return true;
    }
    contact
        .and_then(ContactName::display)
        .is_some_and(|name| name.to_lowercase().contains(&q))
}

/// Lists conversations, newest activity first; `q` matches the number or the contact's name.
#[utoipa::path(
    get,
    path = "/v1/conversations",
    tag = "conversations",
    params(
        PageParams,
        ("q" = Option<String>, Query, description = "Part of a number or a contact's name, up to 64 characters"),
    ),
    responses((status = 200, description = "A page of conversations.", body = ConversationPageEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn list(state: web::Data<AppState>, caller: Caller, query: QueryParams) -> Answer {
    let limit = parse_limit(&query, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)?;
    let after = parse_cursor(&query, decode_list_cursor)?;
    let q = query
        .get("q")
        .map(|q| q.trim().to_string())
        .filter(|q| !q.is_empty());
    if q.as_ref()
        .is_some_and(|q| q.chars().count() > MAX_QUERY_CHARS)
    {
        return Err(ApiError::validation("q", "q must be at most 64 characters"));
    }
    let scope = caller.scope();
    let mut all = conversations::summaries(&state.db, scope).await?;
    if let Some((at, number)) = &after {
        all.retain(|s| {
            s.last_activity_at < *at || (s.last_activity_at == *at && s.number > *number)
        });
    }
    // With `q`, names are needed to filter: the contacts of every candidate, by index.
    let mut contacts = HashMap::new();
    if let Some(q) = &q {
        let numbers: Vec<&str> = all.iter().map(|s| s.number.as_str()).collect();
        contacts = conversations::contacts_of(&state.db, scope, &numbers).await?;
        all.retain(|s| matches(q, &s.number, contacts.get(&s.number)));
    }
    let has_more = all.len() as u64 > limit;
    all.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let numbers: Vec<&str> = all.iter().map(|s| s.number.as_str()).collect();
    if q.is_none() {
        contacts = conversations::contacts_of(&state.db, scope, &numbers).await?;
    }
    let drafts = conversations::pending_drafts_of(&state.db, scope, &numbers).await?;
    let ids: Vec<Uuid> = all.iter().map(|s| s.last_message_id).collect();
    let last: HashMap<Uuid, Message> = conversations::messages_by_id(&state.db, scope, &ids)
        .await?
        .into_iter()
        .map(|m| (m.id, m))
        .collect();
    let next_cursor = if has_more {
        all.last().map(encode_list_cursor)
    } else {
        None
    };
    let items = all
        .iter()
        .filter_map(|s| {
            // A message removed by retention between the two reads leaves its conversation
            // out of this page.
            let message = last.get(&s.last_message_id)?;
            Some(ConversationOut {
                number: s.number.clone(),
                contact: contacts.get(&s.number).map(ConversationContactOut::from),
                last_message: LastMessageOut {
                    id: message.id,
                    direction: message.direction.as_str().to_string(),
                    body: message.content.clone(),
                    status: message.status.as_str().to_string(),
                    created_at: format_ms(message.created_at),
                },
                last_activity_at: format_ms(s.last_activity_at),
                inbound_count: s.inbound_count,
                pending_drafts: drafts.get(&s.number).copied().unwrap_or(0),
            })
        })
        .collect();
    Ok(success(
        StatusCode::OK,
        "conversations",
        ConversationPageOut {
            conversations: items,
            has_more,
            next_cursor,
        },
    ))
}

/// One conversation: the messages exchanged with `number`, oldest first, each inbound one
/// with the AI drafts answering it.
#[utoipa::path(
    get,
    path = "/v1/conversations/{number}",
    tag = "conversations",
    params(
        ("number" = String, Path, description = "The number on the other side, URL-encoded (`%2B14155550123`)"),
        ("limit" = Option<u32>, Query, description = "1–200, default 200: the newest messages"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous answer: older messages"),
    ),
    responses((status = 200, description = "The conversation (no messages when there are none).", body = ConversationDetailEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    query: QueryParams,
) -> Answer {
    let number = path.trim().to_string();
    if number.is_empty()
        || number.chars().count() > MAX_NUMBER_CHARS
        || number.chars().any(char::is_control)
    {
        return Err(ApiError::validation(
            "number",
            "number must be 1 to 32 characters: E.164 or a sender id",
        ));
    }
    let limit = parse_limit(&query, DEFAULT_MESSAGES, MAX_MESSAGES)?;
    let before = parse_cursor(&query, decode_cursor)?;
    let scope = caller.scope();
    let (mut messages, has_more) =
        conversations::messages_with(&state.db, scope, &number, before, limit).await?;
    let next_cursor = if has_more {
        messages.last().map(|m| {
            encode_cursor(Position {
                created_at: m.created_at,
                id: m.id,
            })
        })
    } else {
        None
    };
    messages.reverse();
    let inbound: Vec<Uuid> = messages
        .iter()
        .filter(|m| m.direction == Direction::Inbound)
        .map(|m| m.id)
        .collect();
    let mut drafts: HashMap<Uuid, Vec<ConversationDraftOut>> = HashMap::new();
    for draft in conversations::drafts_for(&state.db, scope, &inbound).await? {
        drafts
            .entry(draft.message_id)
            .or_default()
            .push(ConversationDraftOut {
                id: draft.id,
                status: draft.status,
                body: draft.content,
                created_at: format_ms(draft.created_at),
            });
    }
    let contact = conversations::contacts_of(&state.db, scope, &[number.as_str()])
        .await?
        .get(&number)
        .map(ConversationContactOut::from);
    let messages = messages
        .into_iter()
        .map(|m| ConversationMessageOut {
            drafts: (m.direction == Direction::Inbound)
                .then(|| drafts.remove(&m.id).unwrap_or_default()),
            id: m.id,
            direction: m.direction.as_str().to_string(),
            status: m.status.as_str().to_string(),
            from_number: m.from_number,
            to_number: m.to_number,
            content: m.content,
            segments: m.segments,
            campaign_id: m.campaign_id.map(CampaignId::as_uuid),
            created_at: format_ms(m.created_at),
            sent_at: m.sent_at.map(format_ms),
            delivered_at: m.delivered_at.map(format_ms),
            failed_at: m.failed_at.map(format_ms),
            failure_reason: m.failure_reason.map(|r| r.as_str().to_string()),
        })
        .collect();
    Ok(success(
        StatusCode::OK,
        "conversation",
        ConversationDetailOut {
            number,
            contact,
            messages,
            has_more,
            next_cursor,
        },
    ))
}
