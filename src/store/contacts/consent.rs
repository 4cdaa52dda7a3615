//! What a contact allows the workspace to send it (opted out: nothing; STOP AI: no AI
//! reply), read by sending, campaigns and the writer, and the opt-out keywords that change it,
//! applied inside the writer's inbound transaction.

use std::collections::HashMap;

use entity::contacts;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter,
    QuerySelect, Set,
};
use uuid::Uuid;

use super::{IDS_PER_LOOKUP, conflict_target};
use crate::domain::keywords::Keyword;
use crate::store::StoreError;
use crate::store::scoped::Scope;

/// Applies an opt-out keyword from `phone_number` inside the caller's transaction (the
/// writer's inbound batch): the contact is created when missing.
pub async fn apply_keyword<C: ConnectionTrait>(
    conn: &C,
    scope: Scope,
    phone_number: &str,
    keyword: Keyword,
    now_ms: i64,
) -> Result<(), StoreError> {
    let (opted_out, ai_replies) = match keyword {
        Keyword::OptOut => (true, true),
        Keyword::OptIn => (false, true),
        Keyword::StopAi => (false, false),
    };
    let row = contacts::ActiveModel {
        id: Set(Uuid::now_v7()),
        workspace_id: Set(scope.workspace_id.as_uuid()),
        test_mode: Set(scope.mode.is_test()),
        phone_number: Set(phone_number.to_string()),
        first_name: Set(None),
        last_name: Set(None),
        email: Set(None),
        custom_fields: Set("{}".into()),
        opted_out: Set(opted_out),
        opted_out_at: Set(opted_out.then_some(now_ms)),
        ai_replies: Set(ai_replies),
        created_at: Set(now_ms),
        updated_at: Set(now_ms),
    };
    let mut on_conflict = conflict_target();
    match keyword {
        Keyword::OptOut => {
            // A repeated STOP keeps the time of the first one.
            on_conflict.update_column(contacts::Column::OptedOut).value(
                contacts::Column::OptedOutAt,
                Expr::cust("COALESCE(contacts.opted_out_at, excluded.opted_out_at)"),
            );
        }
        Keyword::OptIn => {
            on_conflict.update_columns([contacts::Column::OptedOut, contacts::Column::OptedOutAt]);
        }
        Keyword::StopAi => {
            on_conflict.update_column(contacts::Column::AiReplies);
        }
    }
    on_conflict.update_column(contacts::Column::UpdatedAt);
    contacts::Entity::insert(row)
        .on_conflict(on_conflict)
        .exec_without_returning(conn)
        .await?;
    Ok(())
}

/// Which of `numbers` belong to opted-out contacts of this scope (inside a transaction: a
/// campaign checks again as it queues each recipient).
pub async fn opted_out_among<C: ConnectionTrait>(
    conn: &C,
    scope: Scope,
    numbers: &[String],
) -> Result<std::collections::HashSet<String>, StoreError> {
    let mut out = std::collections::HashSet::new();
    for chunk in numbers.chunks(IDS_PER_LOOKUP) {
        let rows: Vec<String> = contacts::Entity::find()
            .select_only()
            .column(contacts::Column::PhoneNumber)
            .filter(scope.of::<contacts::Entity>())
            .filter(contacts::Column::OptedOut.eq(true))
            .filter(contacts::Column::PhoneNumber.is_in(chunk.iter().cloned()))
            .into_tuple()
            .all(conn)
            .await?;
        out.extend(rows);
    }
    Ok(out)
}

/// Whether AI replies may go to this number: its contact (if any) has `ai_replies` on and has
/// not opted out (an opted-out number gets no text at all, drafted or not).
pub async fn ai_replies_to(
    db: &DatabaseConnection,
    scope: Scope,
    phone_number: &str,
) -> Result<bool, StoreError> {
    let key = ContactKey {
        scope,
        phone_number: phone_number.to_string(),
    };
    Ok(consent(db, &key).await?.allows_ai_replies())
}

/// What a contact lets the workspace send it. A number without a contact allows everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Consent {
    /// False once it texted STOP (or was opted out by hand): no text of any kind.
    pub texts: bool,
    /// False once it texted STOP AI (or `ai_replies` was turned off): no AI reply.
    pub ai_replies: bool,
}

impl Consent {
    /// A number without a contact, or a contact that restricts nothing.
    pub const ALL: Consent = Consent {
        texts: true,
        ai_replies: true,
    };

    /// Whether an AI reply (a draft or an auto reply) may go to it.
    pub fn allows_ai_replies(self) -> bool {
        self.texts && self.ai_replies
    }
}

/// A contact's number in one scope: the key of [`restrictions`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContactKey {
    pub scope: Scope,
    pub phone_number: String,
}

/// The numbers among `keys` whose contact restricts something (opted out, or AI replies off),
/// with what they allow; a number not in the answer allows everything. One indexed lookup
/// (`uq_contacts_number`) per scope and 512 numbers, the number list padded to a power of two so
/// the statement comes in a few shapes (see `store::id_list`). Used by the writer inside its
/// transaction, once per batch of sends.
pub async fn restrictions<C: ConnectionTrait>(
    conn: &C,
    keys: &[ContactKey],
) -> Result<HashMap<ContactKey, Consent>, StoreError> {
    let mut by_scope: HashMap<Scope, Vec<&str>> = HashMap::new();
    for key in keys {
        by_scope
            .entry(key.scope)
            .or_default()
            .push(key.phone_number.as_str());
    }
    let mut found = HashMap::new();
    for (scope, mut numbers) in by_scope {
        numbers.sort_unstable();
        numbers.dedup();
        for chunk in numbers.chunks(crate::store::IDS_PER_STATEMENT) {
            let mut padded = chunk.to_vec();
            if let Some(&first) = chunk.first() {
                padded.resize(chunk.len().next_power_of_two(), first);
            }
            let rows: Vec<(String, bool, bool)> = contacts::Entity::find()
                .select_only()
                .column(contacts::Column::PhoneNumber)
                .column(contacts::Column::OptedOut)
                .column(contacts::Column::AiReplies)
                .filter(scope.of::<contacts::Entity>())
                .filter(contacts::Column::PhoneNumber.is_in(padded))
                .filter(
                    Condition::any()
                        .add(contacts::Column::OptedOut.eq(true))
                        .add(contacts::Column::AiReplies.eq(false)),
                )
                .into_tuple()
                .all(conn)
                .await?;
            for (phone_number, opted_out, ai_replies) in rows {
                found.insert(
                    ContactKey {
                        scope,
                        phone_number,
                    },
                    Consent {
                        texts: !opted_out,
                        ai_replies,
                    },
                );
            }
        }
    }
    Ok(found)
}

/// What the contact of `key` allows now ([`Consent::ALL`] without a contact).
pub async fn consent<C: ConnectionTrait>(
    conn: &C,
    key: &ContactKey,
) -> Result<Consent, StoreError> {
    let found: Option<(bool, bool)> = contacts::Entity::find()
        .select_only()
        .column(contacts::Column::OptedOut)
        .column(contacts::Column::AiReplies)
        .filter(key.scope.of::<contacts::Entity>())
        .filter(contacts::Column::PhoneNumber.eq(key.phone_number.as_str()))
        .into_tuple()
        .one(conn)
        .await?;
    Ok(
        found.map_or(Consent::ALL, |(opted_out, ai_replies)| Consent {
            texts: !opted_out,
            ai_replies,
        }),
    )
}
