//! A campaign request checked, expanded and rendered, writing nothing (docs/api.md,
//! Campaigns): what creation stores and a preview shows. The checks run in the documented
//! order; the first failing one is the answer.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::wire::{CreateCampaignIn, RecipientIn};
use crate::api::fields::{parse_number, parse_timestamp};
use crate::api::{AppState, Caller, off_worker, required};
use crate::domain::campaign::{RecipientStatus, RenderFailure, SkipReason};
use crate::domain::phone_number::PhoneNumber;
use crate::domain::sms::{self, ContentError, MAX_SEGMENTS, SmsText, SmsTextBuilder};
use crate::domain::status::Mode;
use crate::domain::template;
use crate::error::ApiError;
use crate::send::{PoolKey, SendFrom};
use crate::store::campaigns::NewRecipient;
use crate::store::contacts::{self, Contact};
use crate::store::{phones, pools};

/// Most recipients of one campaign, explicit and from tags together (docs/api.md, Campaigns).
pub(super) const MAX_CAMPAIGN_RECIPIENTS: usize = 10_000;
/// Longest campaign name (docs/api.md, Campaigns).
const MAX_NAME_CHARS: usize = 120;
/// Longest campaign body, in characters: the 1,530 of a text of 10 segments with room for
/// its tokens (docs/api.md "Campaigns", limits).
const MAX_BODY_CHARS: usize = 4_096;
/// Most vars of one recipient, and the longest name, in characters (the limits of a contact's
/// custom fields).
const MAX_VARS: usize = 50;
const MAX_VAR_NAME_CHARS: usize = 64;
/// Longest var value, in characters: 10 segments of GSM-7; a text holding a longer value
/// cannot be sent.
const MAX_VAR_VALUE_CHARS: usize = 1_530;

/// A recipient before expansion: the explicit ones keep their vars.
struct Wanted {
    to: PhoneNumber,
    vars: BTreeMap<String, String>,
}

/// Renders a recipient's text: its vars first, then its contact's fields; missing → "".
/// Rendering stops as soon as the text cannot fit in 10 segments, so a recipient costs at most
/// that much memory and work, whatever the body's tokens and the values.
fn render(
    body: &str,
    vars: &BTreeMap<String, String>,
    contact: Option<&Contact>,
) -> Result<SmsText, ContentError> {
    let mut text = SmsTextBuilder::new();
    let lookup = |name: &str| value_of(name, vars, contact);
    // A break only means the text is too long; `finish` says so.
    let _ = template::render_into(body, lookup, |piece| text.push_str(piece));
    text.finish()
}

/// A template variable's value for one recipient: its vars first, then its contact's fields.
fn value_of<'v>(
    name: &str,
    vars: &'v BTreeMap<String, String>,
    contact: Option<&'v Contact>,
) -> Option<&'v str> {
    if let Some(value) = vars.get(name) {
        return Some(value.as_str());
    }
    let contact = contact?;
    match name {
        "first_name" => contact.first_name.as_deref(),
        "last_name" => contact.last_name.as_deref(),
        "email" => contact.email.as_deref(),
        other => contact.custom_fields.get(other).map(String::as_str),
    }
}

/// The variables of `names` that render empty for one recipient (no value, or a blank one).
fn missing_vars(
    names: &[String],
    vars: &BTreeMap<String, String>,
    contact: Option<&Contact>,
) -> Vec<String> {
    names
        .iter()
        .filter(|name| value_of(name, vars, contact).is_none_or(|v| v.trim().is_empty()))
        .cloned()
        .collect()
}

/// Checks a campaign body: at most [`MAX_BODY_CHARS`], and its own text (the tokens left
/// empty) within 10 segments, since rendering only adds to it.
fn parse_body(body: &str) -> Result<(), ApiError> {
    if body.trim().is_empty() {
        return Err(ApiError::validation("body", "body must not be empty"));
    }
    if body.chars().count() > MAX_BODY_CHARS {
        return Err(ApiError::validation(
            "body",
            format!("body must be at most {MAX_BODY_CHARS} characters"),
        ));
    }
    let mut literal = String::with_capacity(body.len());
    let _ = template::render_into(
        body,
        |_| None,
        |piece| {
            literal.push_str(piece);
            std::ops::ControlFlow::Continue(())
        },
    );
    let measure = sms::measure(&literal);
    if measure.segments > MAX_SEGMENTS {
        return Err(ApiError::ContentTooLong {
            field: "body".to_string(),
            segments: measure.segments,
            encoding: measure.encoding.as_str(),
        });
    }
    Ok(())
}

/// Checks one recipient's vars (`field` is `recipients[i].vars`): how many, their names and
/// the length of each value, the first offending name in order being the one named.
fn parse_vars(vars: &BTreeMap<String, String>, field: &str) -> Result<(), ApiError> {
    if vars.len() > MAX_VARS {
        return Err(ApiError::validation(
            field,
            format!("{field} may have at most {MAX_VARS} entries"),
        ));
    }
    for (name, value) in vars {
        let name_chars = name.chars().count();
        if name_chars == 0 || name_chars > MAX_VAR_NAME_CHARS {
            return Err(ApiError::validation(
                field,
                format!("{field} names must be 1 to {MAX_VAR_NAME_CHARS} characters"),
            ));
        }
        if value.chars().count() > MAX_VAR_VALUE_CHARS {
            let at = format!("{field}.{name}");
            return Err(ApiError::validation(
                &at,
                format!("{at} must be at most {MAX_VAR_VALUE_CHARS} characters"),
            ));
        }
    }
    Ok(())
}

/// The explicit recipients, each number and its vars parsed (the first invalid one is the
/// error).
fn parse_recipients(explicit: Vec<RecipientIn>) -> Result<Vec<Wanted>, ApiError> {
    let mut wanted = Vec::with_capacity(explicit.len());
    for (i, r) in explicit.into_iter().enumerate() {
        let field = format!("recipients[{i}].to");
        let to = required(r.to, &field)?;
        let to = parse_number(&to, &field)?;
        let vars = r.vars.unwrap_or_default();
        parse_vars(&vars, &format!("recipients[{i}].vars"))?;
        wanted.push(Wanted { to, vars });
    }
    Ok(wanted)
}

/// Adds the tagged contacts not already wanted (in their order), refuses a campaign past its
/// limit, and renders each recipient's text; with each, the body's variables it has no value
/// for (none for a skipped recipient).
fn expand(
    mut wanted: Vec<Wanted>,
    mut seen: HashSet<String>,
    tagged: Vec<Contact>,
    mut by_number: HashMap<String, Contact>,
    template: &str,
) -> Result<Vec<(NewRecipient, Vec<String>)>, ApiError> {
    for contact in tagged {
        if seen.contains(&contact.phone_number) {
            continue;
        }
        let Ok(to) = PhoneNumber::parse(&contact.phone_number) else {
            continue;
        };
        seen.insert(contact.phone_number.clone());
        wanted.push(Wanted {
            to,
            vars: BTreeMap::new(),
        });
        by_number.insert(contact.phone_number.clone(), contact);
        if wanted.len() > MAX_CAMPAIGN_RECIPIENTS {
            return Err(ApiError::validation(
                "contact_tags",
                "with the tagged contacts the campaign has over 10,000 recipients",
            ));
        }
    }
    let names = template::variables(template);
    Ok(wanted
        .iter()
        .map(|w| {
            let contact = by_number.get(w.to.as_str());
            let planned = recipient(template, w, contact);
            let missing = if planned.status == RecipientStatus::Skipped {
                Vec::new()
            } else {
                missing_vars(&names, &w.vars, contact)
            };
            (planned, missing)
        })
        .collect())
}

/// The stored form of one recipient: skipped, failed (its text cannot be sent: no text is
/// stored) or pending.
fn recipient(body: &str, wanted: &Wanted, contact: Option<&Contact>) -> NewRecipient {
    let unsent = NewRecipient {
        to_number: wanted.to.as_str().to_string(),
        content: String::new(),
        segments: 0,
        encoding: String::new(),
        status: RecipientStatus::Skipped,
        skip_reason: None,
        failure_reason: None,
    };
    let skip_reason = if wanted.to.is_premium_rate() {
        Some(SkipReason::PremiumRate)
    } else if contact.is_some_and(|c| c.opted_out) {
        Some(SkipReason::OptedOut)
    } else {
        None
    };
    if let Some(reason) = skip_reason {
        return NewRecipient {
            skip_reason: Some(reason.as_str().to_string()),
            ..unsent
        };
    }
    match render(body, &wanted.vars, contact) {
        Ok(text) => NewRecipient {
            segments: text.segments(),
            encoding: text.encoding().as_str().to_string(),
            content: text.into_string(),
            status: RecipientStatus::Pending,
            ..unsent
        },
        Err(err) => NewRecipient {
            status: RecipientStatus::Failed,
            failure_reason: Some(
                match err {
                    ContentError::Empty => RenderFailure::ContentEmpty,
                    ContentError::TooLong { .. } => RenderFailure::ContentTooLong,
                }
                .as_str()
                .to_string(),
            ),
            ..unsent
        },
    }
}

/// A campaign request validated and expanded: what creation stores and a preview shows.
pub(in crate::api) struct Prepared {
    pub name: String,
    /// None when the campaign sends from a pool.
    pub from_number: Option<PhoneNumber>,
    /// The sender pool (`from_pool`, docs/api.md "Pools").
    pub pool_id: Option<uuid::Uuid>,
    pub template: String,
    pub scheduled_for: Option<i64>,
    pub launch: bool,
    /// Every recipient in order, with the body's variables it has no value for.
    pub recipients: Vec<(NewRecipient, Vec<String>)>,
}

/// Validates a campaign request (docs/api.md, Campaigns, in its order), expands its tags and
/// renders every recipient's text; writes nothing.
pub(in crate::api) async fn prepare(
    state: &AppState,
    caller: &Caller,
    body: CreateCampaignIn,
) -> Result<Prepared, ApiError> {
    let name = required(body.name, "name")?;
    if name.trim().is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(ApiError::validation(
            "name",
            "name must be 1 to 120 characters",
        ));
    }
    let from_text = crate::api::fields::from_field(body.from_number, body.from_pool)?;
    let template = required(body.body, "body")?;
    parse_body(&template)?;
    let explicit = body.recipients.unwrap_or_default();
    let tags = body.contact_tags.unwrap_or_default();
    if explicit.is_empty() && tags.is_empty() {
        return Err(ApiError::validation(
            "recipients",
            "give recipients, contact_tags or both",
        ));
    }
    if explicit.len() > MAX_CAMPAIGN_RECIPIENTS {
        return Err(ApiError::validation(
            "recipients",
            "a campaign has at most 10,000 recipients",
        ));
    }
    let from = crate::api::fields::parse_from(from_text, None)?;
    // Parsing 10,000 numbers (and below, rendering 10,000 texts) is CPU work of a few hundred
    // milliseconds: it runs on the blocking pool, not on the HTTP worker, whose other
    // connections (phone sessions among them) would wait for it.
    let mut wanted = off_worker(move || parse_recipients(explicit)).await?;
    for (i, tag) in tags.iter().enumerate() {
        if tag.trim().is_empty() {
            return Err(ApiError::validation(
                format!("contact_tags[{i}]"),
                "a tag must not be empty",
            ));
        }
    }
    let scheduled_for = body
        .scheduled_for
        .as_deref()
        .map(|t| parse_timestamp(t, "scheduled_for"))
        .transpose()?
        .map(|t| t.timestamp_millis());
    let (from_number, pool_id) = match from {
        SendFrom::Number(number) => (Some(number), None),
        SendFrom::Pool(key) => {
            let pool = match key {
                PoolKey::Id(id) => pools::get(&state.db, caller.scope(), id).await,
                PoolKey::Name(name) => pools::by_name(&state.db, caller.scope(), &name).await,
            };
            match pool {
                Ok(pool) => (None, Some(pool.id)),
                Err(crate::store::StoreError::NotFound) => {
                    return Err(ApiError::validation(
                        "from_pool",
                        "from_pool must be the id or name of a pool of this workspace and mode",
                    ));
                }
                Err(err) => return Err(err.into()),
            }
        }
    };
    if let Some(number) = &from_number
        && caller.mode == Mode::Live
        && !phones::has_number(&state.db, caller.scope(), number.as_str()).await?
    {
        return Err(ApiError::validation(
            "from_number",
            "from_number is not the number of one of your phones",
        ));
    }
    // Expand: the explicit list (first entry of a number wins), then the tagged contacts.
    let mut seen = HashSet::new();
    wanted.retain(|w| seen.insert(w.to.as_str().to_string()));
    let numbers: Vec<String> = seen.iter().cloned().collect();
    // Enough tagged contacts to fill the campaign past its limit even if each explicit number
    // is among them (then the request fails); more need not be read.
    let tagged_limit = (MAX_CAMPAIGN_RECIPIENTS + wanted.len() + 1) as u64;
    let (tagged, by_number) =
        contacts::for_campaign(&state.db, caller.scope(), &numbers, &tags, tagged_limit).await?;
    let text = template.clone();
    let recipients = off_worker(move || expand(wanted, seen, tagged, by_number, &text)).await?;
    Ok(Prepared {
        name,
        from_number,
        pool_id,
        template,
        scheduled_for,
        launch: body.launch_now.unwrap_or(false),
        recipients,
    })
}
