//! Row mapping of the writer: a new message as the [`Message`] it becomes and as its row, and a
//! timeline entry's row.

use entity::{message_events, messages};
use sea_orm::{ActiveValue::NotSet, Set};
use uuid::Uuid;

use super::NewMessage;
use crate::domain::change::ChangeKind;
use crate::domain::ids::CampaignId;
use crate::domain::status::MessageStatus;
use crate::store::messages::Message;
use crate::store::scoped::Scope;

/// The message `new` becomes when stored at `now`.
pub(super) fn to_message(new: &NewMessage, scope: Scope, now: i64) -> Message {
    Message {
        id: new.id,
        workspace_id: scope.workspace_id,
        mode: scope.mode,
        direction: new.direction,
        status: new.status,
        class: new.class,
        from_number: new.from_number.clone(),
        to_number: new.to_number.clone(),
        content: new.content.clone(),
        segments: new.segments,
        encoding: new.encoding,
        device_id: new.device_id,
        pinned: new.pinned,
        campaign_id: new.campaign_id,
        request_id: new.request_id.clone(),
        scheduled_for: new.scheduled_for,
        expires_at: new.expires_at,
        created_at: now,
        updated_at: now,
        sent_at: None,
        delivered_at: (new.status == MessageStatus::Delivered).then_some(now),
        failed_at: None,
        failure_reason: None,
        send_attempts: u32::from(new.status == MessageStatus::Sending),
        client: new.client.clone(),
        pool_id: new.pool_id,
    }
}

/// The row of a new message.
pub(super) fn to_row(message: &Message, new: &NewMessage) -> messages::ActiveModel {
    messages::ActiveModel {
        id: Set(message.id),
        workspace_id: Set(message.workspace_id.as_uuid()),
        test_mode: Set(message.mode.is_test()),
        direction: Set(message.direction.as_str().to_string()),
        status: Set(message.status.as_str().to_string()),
        priority: Set(message.class.as_i16()),
        from_number: Set(message.from_number.clone()),
        to_number: Set(message.to_number.clone()),
        content: Set(message.content.clone()),
        segments: Set(i32::try_from(message.segments).unwrap_or(i32::MAX)),
        encoding: Set(message.encoding.as_str().to_string()),
        device_id: Set(message.device_id),
        pinned: Set(message.pinned),
        campaign_id: Set(message.campaign_id.map(CampaignId::as_uuid)),
        request_id: Set(message.request_id.clone()),
        inbound_ref: Set(new.inbound_ref.clone()),
        scheduled_for: Set(message.scheduled_for),
        expires_at: Set(message.expires_at),
        created_at: Set(message.created_at),
        updated_at: Set(message.updated_at),
        sent_at: Set(message.sent_at),
        delivered_at: Set(message.delivered_at),
        failed_at: Set(None),
        failure_reason: Set(None),
        send_attempts: Set(i32::try_from(message.send_attempts).unwrap_or(i32::MAX)),
        content_removed_at: Set(None),
        group_id: Set(message.client.as_ref().map(|c| c.group_id.clone())),
        sim_number: Set(message
            .client
            .as_ref()
            .and_then(|c| c.sim_number.map(i16::from))),
        sms_priority: Set(message.client.as_ref().map(|c| i16::from(c.priority))),
        with_delivery_report: Set(message
            .client
            .as_ref()
            .is_none_or(|c| c.with_delivery_report)),
        pool_id: Set(message.pool_id),
    }
}

/// A timeline entry's row.
pub(super) fn event_row(
    message_id: Uuid,
    kind: ChangeKind,
    status: MessageStatus,
    at: i64,
    detail: Option<String>,
) -> message_events::ActiveModel {
    message_events::ActiveModel {
        id: NotSet,
        message_id: Set(message_id),
        kind: Set(kind.as_str().to_string()),
        status: Set(status.as_str().to_string()),
        at: Set(at),
        detail: Set(detail),
    }
}
