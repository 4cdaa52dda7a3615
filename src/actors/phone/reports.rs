//! What a Phone actor does with its phone's frames about messages: a status report on an
//! outbound message (the decision is `domain::status_report`'s; this writes it and settles or
//! requeues the message) and an inbound SMS.

use actix::prelude::*;
use uuid::Uuid;

use super::*;
use crate::store::messages::Message;

enum ReportOutcome {
    Moved(Box<Message>),
    Ignored,
    NotYours,
}

impl Phone {
    /// Applies a phone's report on an outbound message: the decision is
    /// [`status_report::decide`]'s, this performs its write and then acks, refuses, and settles
    /// or requeues the message in the queue.
    pub(super) fn status_report(
        &mut self,
        message_id: Uuid,
        report: StatusReport,
        reference: Option<String>,
        done: Option<Done>,
        ctx: &mut Context<Self>,
    ) {
        self.status_report_try(message_id, report, reference, done, 0, ctx);
    }

    /// [`Phone::status_report`], the `tries`-th time.
    fn status_report_try(
        &mut self,
        message_id: Uuid,
        report: StatusReport,
        reference: Option<String>,
        done: Option<Done>,
        tries: u32,
        ctx: &mut Context<Self>,
    ) {
        let again = report.clone();
        let deps = self.deps.clone();
        let device = self.identity.device_id;
        let max_attempts = self.deps.settings.messages.max_send_attempts;
        let success = !matches!(report, StatusReport::Failed { .. });
        ctx.spawn(
            async move {
                // The common path (`sent`, `delivered`) is one guarded write whose guard is the
                // rule of `decide`; the read below only tells a stale report (acked) from a
                // stranger's (refused), and gives a failure its attempt count.
                let moves_to = report.moves_to();
                if let Some(to) = moves_to {
                    let transition = Transition::report(message_id, device, to);
                    if let Some(row) = deps.writer.transition(transition).await? {
                        return Ok(ReportOutcome::Moved(Box::new(row)));
                    }
                }
                let current = messages::get(&deps.db, message_id)
                    .await?
                    .map(|m| ReportedMessage {
                        status: m.status,
                        send_attempts: m.send_attempts,
                        outbound: m.direction == Direction::Outbound,
                        on_this_phone: device.is_none() || m.device_id == device,
                    });
                let decision = status_report::decide(&report, current.as_ref(), max_attempts);
                let detail = decision.failure_detail();
                let transition = match decision {
                    ReportDecision::NotYours => {
                        return Ok::<_, crate::store::StoreError>(ReportOutcome::NotYours);
                    }
                    // The guarded write of a `sent` or `delivered` report was refused: a move
                    // the re-read now allows came after it, so this report is stale.
                    ReportDecision::Ignore | ReportDecision::Advance(_) => {
                        return Ok(ReportOutcome::Ignored);
                    }
                    ReportDecision::RetryLater { reason, .. } => Transition::failed_attempt(
                        message_id,
                        device,
                        reason,
                        detail.unwrap_or_default(),
                    ),
                    ReportDecision::FailedFinal { reason, .. } => {
                        Transition::failed_on_phone(message_id, device, Some(reason), detail)
                    }
                };
                Ok(match deps.writer.transition(transition).await? {
                    Some(row) => ReportOutcome::Moved(Box::new(row)),
                    None => ReportOutcome::Ignored,
                })
            }
            .into_actor(self)
            .map(move |result, act, ctx| match result {
                Ok(ReportOutcome::Moved(row)) => {
                    act.ack(reference);
                    answer(done);
                    let settled = row.status != MessageStatus::Sending;
                    if row.status.is_terminal() || row.status == MessageStatus::Sent {
                        // A late report can settle a message that waits for another attempt.
                        act.queue.remove_waiting(row.id);
                    }
                    if row.status != MessageStatus::Sending {
                        let item = act.queue.settle(row.id);
                        if row.status == MessageStatus::Queued {
                            let item = item.unwrap_or_else(|| QueuedMessage::from(row.as_ref()));
                            act.retry_first(item, ctx);
                        }
                    }
                    if settled {
                        act.watch_reported(success, ctx);
                    }
                }
                Ok(ReportOutcome::Ignored) => {
                    act.ack(reference);
                    answer(done);
                }
                Ok(ReportOutcome::NotYours) => {
                    act.reject(
                        FrameErrorCode::UnknownMessage,
                        format!("message {message_id} was not sent to this phone"),
                    );
                    answer(done);
                }
                Err(err) => match retry_after(&err, done.is_some(), tries) {
                    // The database is away and the session stays: written once it is back.
                    Some(wait) => {
                        ctx.run_later(wait, move |act, ctx| {
                            act.status_report_try(
                                message_id,
                                again,
                                reference,
                                None,
                                tries + 1,
                                ctx,
                            )
                        });
                    }
                    // Not acked: the phone re-sends the report (after reconnecting, or the
                    // device API's caller at once).
                    None => {
                        tracing::error!(message_id = %message_id, error = %err, "report not stored")
                    }
                },
            }),
        );
    }

    pub(super) fn inbound(
        &mut self,
        reference: String,
        from: String,
        content: String,
        done: Option<Done>,
        ctx: &mut Context<Self>,
    ) {
        self.inbound_try(reference, from, content, done, 0, ctx);
    }

    /// [`Phone::inbound`], the `tries`-th time.
    fn inbound_try(
        &mut self,
        reference: String,
        from: String,
        content: String,
        done: Option<Done>,
        tries: u32,
        ctx: &mut Context<Self>,
    ) {
        let again = (from.clone(), content.clone());
        let Some(device) = self.identity.device_id else {
            return;
        };
        let now = self.deps.clock.now_ms();
        let new = NewMessage::inbound(
            crate::domain::phone_number::normalize_sender(&from, &self.identity.number),
            self.identity.number.clone(),
            Content::received(content),
            now,
        )
        .with_device(Some(device), false)
        .with_inbound_ref(reference.clone());
        let writer = self.deps.writer.clone();
        let scope = self.identity.scope;
        ctx.spawn(
            async move { writer.inbound(new, scope).await }
                .into_actor(self)
                .map(move |result, act, ctx| match result {
                    Ok(InboundOutcome::Stored(_)) | Ok(InboundOutcome::Repeat) => {
                        act.ack(Some(reference));
                        answer(done);
                    }
                    Err(err) => match retry_after(&err, done.is_some(), tries) {
                        Some(wait) => {
                            ctx.run_later(wait, move |act, ctx| {
                                let (from, content) = again;
                                act.inbound_try(reference, from, content, None, tries + 1, ctx)
                            });
                        }
                        None => tracing::error!(
                            error = %err,
                            "inbound message not stored; the phone will re-send it"
                        ),
                    },
                }),
        );
    }
}

/// When a frame whose write failed is written again: only while the database is unavailable
/// (docs/deploy.md, "Bad days"), since the phone's session stays open and the phone would
/// re-send the frame only after reconnecting; backing off from 1 s to 30 s, for about ten
/// minutes, after which the phone's own re-send after its next reconnect is left to do it. A
/// device-API report (`answered`: an HTTP caller waits) is answered with the error instead:
/// the app retries it itself.
fn retry_after(
    err: &crate::store::StoreError,
    answered: bool,
    tries: u32,
) -> Option<std::time::Duration> {
    const GIVE_UP_AFTER: u32 = 25;
    if answered
        || tries >= GIVE_UP_AFTER
        || !matches!(err, crate::store::StoreError::Unavailable(_))
    {
        return None;
    }
    if tries == 0 {
        tracing::warn!(error = %err, "a phone's frame waits for the database");
    }
    Some(
        std::time::Duration::from_secs(1u64 << tries.min(5))
            .min(std::time::Duration::from_secs(30)),
    )
}
