//! Status moves inside the writer's transaction: the moves a message can make (one named
//! constructor each), how a batch's moves are grouped into shared UPDATEs, and the timeline
//! entries and changes a written move records. Reroutes (a queued message to another phone)
//! live here too.

use std::collections::HashMap;

use sea_orm::DatabaseTransaction;
use uuid::Uuid;

use super::task::Batch;
use super::{Change, rows, sql};
use crate::domain::change::{ChangeKind, FailureReason};
use crate::domain::status::MessageStatus;
use crate::store::StoreError;
use crate::store::cluster::Lease;
use crate::store::messages::Message;

/// Move a message to another status if its current status allows it. Built by one
/// constructor per move; the fields say what the UPDATE sets and checks.
#[derive(Debug, Clone)]
pub struct Transition {
    pub(super) id: Uuid,
    pub(super) to: MessageStatus,
    /// Only when the message is currently assigned to this phone (status reports).
    pub(super) expect_device: Option<Uuid>,
    /// A phone's report: only an outbound message handed over at least once may move.
    pub(super) reported: bool,
    /// Assign the message to this phone (hand-over).
    pub(super) set_device: Option<Uuid>,
    /// Count a send attempt (hand-over).
    pub(super) count_attempt: bool,
    pub(super) failure_reason: Option<FailureReason>,
    /// Timeline kind; the target status when None.
    pub(super) event_kind: Option<ChangeKind>,
    pub(super) detail: Option<String>,
    /// The lease this move acts under (a cluster node's hand-over): written only while the
    /// lease is still held with this fence (docs/architecture.md, "Cluster").
    pub(super) fence: Option<Lease>,
}

impl Transition {
    /// A plain move to `to`, recorded under its own name.
    fn to(id: Uuid, to: MessageStatus) -> Transition {
        Transition {
            id,
            to,
            expect_device: None,
            reported: false,
            set_device: None,
            count_attempt: false,
            failure_reason: None,
            event_kind: None,
            detail: None,
            fence: None,
        }
    }

    /// Writes the move only while `lease` is held as given (same node, same fencing
    /// number): a node that lost the phone's lease cannot hand its messages over any more.
    pub fn fenced(self, lease: Option<Lease>) -> Transition {
        Transition {
            fence: lease,
            ..self
        }
    }

    /// Hand-over: `sending`, assigned to `device`, one more send attempt.
    pub fn hand_over(id: Uuid, device: Option<Uuid>) -> Transition {
        Transition {
            set_device: device,
            count_attempt: true,
            detail: Some(crate::store::messages::handover_detail(device)),
            ..Transition::to(id, MessageStatus::Sending)
        }
    }

    /// A phone's report that the message reached `to` (`sent`, `delivered`): only when it is
    /// assigned to `device` and was handed over at least once.
    pub fn report(id: Uuid, device: Option<Uuid>, to: MessageStatus) -> Transition {
        Transition {
            expect_device: device,
            reported: true,
            ..Transition::to(id, to)
        }
    }

    /// A failed attempt with attempts left: queued again, recorded as `attempt_failed` with the
    /// phone's `error`.
    pub fn failed_attempt(
        id: Uuid,
        device: Option<Uuid>,
        error: String,
        detail: String,
    ) -> Transition {
        Transition {
            expect_device: device,
            event_kind: Some(ChangeKind::AttemptFailed),
            failure_reason: Some(FailureReason::Reported(error)),
            detail: Some(detail),
            ..Transition::to(id, MessageStatus::Queued)
        }
    }

    /// A phone's failure report that ends the message: `failed`, with the phone's `error` when
    /// it gave one.
    pub fn failed_on_phone(
        id: Uuid,
        device: Option<Uuid>,
        error: Option<String>,
        detail: Option<String>,
    ) -> Transition {
        Transition {
            expect_device: device,
            failure_reason: error.map(FailureReason::Reported),
            detail,
            ..Transition::to(id, MessageStatus::Failed)
        }
    }

    /// Back to `queued` (a hand-over that did not happen, a restart, a disconnect).
    pub fn requeue(id: Uuid, detail: impl Into<String>) -> Transition {
        Transition {
            detail: Some(detail.into()),
            ..Transition::to(id, MessageStatus::Queued)
        }
    }

    /// `failed` because its phone was unpaired.
    pub fn unpair(id: Uuid) -> Transition {
        Transition {
            failure_reason: Some(FailureReason::PhoneUnpaired),
            ..Transition::to(id, MessageStatus::Failed)
        }
    }

    /// `expired`: not handed to a phone before `expires_at`.
    pub fn expire(id: Uuid) -> Transition {
        Transition {
            failure_reason: Some(FailureReason::Expired),
            detail: Some("not handed to a phone before expires_at".into()),
            ..Transition::to(id, MessageStatus::Expired)
        }
    }

    /// `canceled` by its owner or its campaign.
    pub fn cancel(id: Uuid, detail: impl Into<String>) -> Transition {
        Transition {
            detail: Some(detail.into()),
            ..Transition::to(id, MessageStatus::Canceled)
        }
    }

    /// The same move with this timeline detail.
    pub fn with_detail(self, detail: impl Into<String>) -> Transition {
        Transition {
            detail: Some(detail.into()),
            ..self
        }
    }
}

/// Move a queued, unpinned message from one phone to another with the same number.
#[derive(Debug, Clone)]
pub struct Reroute {
    pub id: Uuid,
    pub from_device: Uuid,
    pub to_device: Uuid,
    /// The new phone's number when it differs (a pooled message moving to another line of
    /// its pool, docs/api.md "Pools"); None between phones that share a number.
    pub to_number: Option<String>,
    pub detail: String,
}

/// A move of the batch and where its answer goes: the message after the move, or None when
/// it was refused.
pub(super) struct Move<'a> {
    pub(super) transition: &'a Transition,
    pub(super) answer: &'a mut Option<Option<Message>>,
}

/// Writes `moves` (the batch's transitions, with their answers) in grouped statements:
/// round k holds each message's k-th move of the batch, so one message's moves keep their
/// order; inside a round, moves that set and check the same things share one
/// `UPDATE … WHERE id IN (…) RETURNING *`. The timeline and change bookkeeping then runs in
/// request order, exactly as if each move had been its own statement.
pub(super) async fn apply_moves(
    txn: &DatabaseTransaction,
    batch: &mut Batch,
    moves: Vec<Move<'_>>,
    now: i64,
) -> Result<(), StoreError> {
    if moves.is_empty() {
        return Ok(());
    }
    let moves = refuse_stale_fences(txn, moves).await?;
    let mut seen: HashMap<Uuid, usize> = HashMap::new();
    let rounds: Vec<usize> = moves
        .iter()
        .map(|m| {
            let next = seen.entry(m.transition.id).or_insert(0);
            *next += 1;
            *next - 1
        })
        .collect();
    let last_round = rounds.iter().copied().max().unwrap_or(0);
    let mut rows: Vec<Option<Message>> = vec![None; moves.len()];
    for round in 0..=last_round {
        let mut groups: Vec<(sql::UpdateKey<'_>, Vec<usize>)> = Vec::new();
        for (i, m) in moves.iter().enumerate() {
            if rounds[i] != round {
                continue;
            }
            let key = sql::UpdateKey::of(m.transition);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(i),
                None => groups.push((key, vec![i])),
            }
        }
        for (_, members) in groups {
            for chunk in members.chunks(crate::store::IDS_PER_STATEMENT) {
                let group: Vec<&Transition> = chunk.iter().map(|&i| moves[i].transition).collect();
                let mut returned = sql::apply_group(txn, &group, now).await?;
                for &i in chunk {
                    rows[i] = returned.remove(&moves[i].transition.id);
                }
            }
        }
    }
    for (m, row) in moves.into_iter().zip(rows) {
        if let Some(message) = &row {
            record_move(txn, batch, m.transition, message, now).await?;
        }
        *m.answer = Some(row);
    }
    Ok(())
}

/// Answers the moves whose lease moved on (another node owns the thing now) as refused, and
/// keeps the others; one statement for every fenced move of the batch, none without.
async fn refuse_stale_fences<'a>(
    txn: &DatabaseTransaction,
    moves: Vec<Move<'a>>,
) -> Result<Vec<Move<'a>>, StoreError> {
    let fences: Vec<&Lease> = moves
        .iter()
        .filter_map(|m| m.transition.fence.as_ref())
        .collect();
    if fences.is_empty() {
        return Ok(moves);
    }
    let held = crate::store::cluster::still_held(txn, &fences).await?;
    let mut kept = Vec::with_capacity(moves.len());
    for m in moves {
        match &m.transition.fence {
            Some(lease) if !held.contains(lease) => {
                tracing::warn!(message_id = %m.transition.id, "move refused: its lease moved to another node");
                *m.answer = Some(None);
            }
            _ => kept.push(m),
        }
    }
    Ok(kept)
}

/// The timeline entry and published change of a move that was written.
async fn record_move(
    txn: &DatabaseTransaction,
    batch: &mut Batch,
    t: &Transition,
    message: &Message,
    now: i64,
) -> Result<(), StoreError> {
    if t.to == MessageStatus::Sent {
        batch.sent.insert(message.id);
    }
    if t.to == MessageStatus::Delivered && implied_sent(txn, batch, message, now).await? {
        // A delivery report that overtook its `sent` report (or came alone): the message was
        // sent, so the timeline and the event channel record `sent` first, exactly once.
        batch.sent.insert(message.id);
        batch.events.push(rows::event_row(
            message.id,
            MessageStatus::Sent.into(),
            MessageStatus::Sent,
            now,
            None,
        ));
        let mut sent = message.clone();
        sent.status = MessageStatus::Sent;
        sent.delivered_at = None;
        batch.changes.push(Change {
            kind: MessageStatus::Sent.into(),
            message: sent,
        });
    }
    let kind = t.event_kind.unwrap_or(t.to.into());
    batch.events.push(rows::event_row(
        message.id,
        kind,
        t.to,
        now,
        t.detail.clone(),
    ));
    batch.changes.push(Change {
        kind,
        message: message.clone(),
    });
    Ok(())
}

/// Whether a message just moved to `delivered` never recorded `sent`: its `sent_at` was
/// only now filled in by the delivery (see [`sql::apply_group`]) and no `sent` entry exists.
async fn implied_sent(
    txn: &DatabaseTransaction,
    batch: &Batch,
    message: &Message,
    now: i64,
) -> Result<bool, StoreError> {
    if message.sent_at != Some(now) || batch.sent.contains(&message.id) {
        return Ok(false);
    }
    Ok(!sql::has_sent_entry(txn, message.id).await?)
}

/// Applies a reroute; the message after it, or None when it is no longer queued on
/// `from_device` (or pinned).
pub(super) async fn reroute(
    txn: &DatabaseTransaction,
    batch: &mut Batch,
    r: &Reroute,
    now: i64,
) -> Result<Option<Message>, StoreError> {
    let Some(message) = sql::reroute(txn, r, now).await? else {
        return Ok(None);
    };
    batch.events.push(rows::event_row(
        message.id,
        ChangeKind::Rerouted,
        MessageStatus::Queued,
        now,
        Some(r.detail.clone()),
    ));
    Ok(Some(message))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::clock::SystemClock;
    use crate::domain::status::{Mode, QueueClass};
    use crate::store::scoped::Scope;
    use crate::store::writer::{
        Accept, AcceptOutcome, ChangeListener, Content, NewMessage, Writer,
    };

    fn queued(id: Uuid) -> NewMessage {
        NewMessage {
            id,
            ..NewMessage::outbound(
                QueueClass::Single,
                "+14155550100".into(),
                "+14155550123".into(),
                Content::received("hi".into()),
                i64::MAX,
            )
        }
    }

    /// Moves submitted together land in one batch and its grouped UPDATEs: each keeps its own
    /// answer, one message's moves keep their order, and a guard refuses only its own move.
    #[test]
    fn a_batch_of_moves_keeps_each_answer_and_order() {
        crate::startup::block_on_system(async {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}?mode=rwc", dir.path().join("w.db").display());
            let db = crate::store::connect(&url, 2).await.unwrap();
            crate::store::migrate(&db).await.unwrap();
            let published: Arc<Mutex<Vec<(Uuid, &'static str)>>> = Arc::default();
            let sink = published.clone();
            let listener: ChangeListener = Arc::new(move |changes: Vec<Change>| {
                let mut sink = sink.lock().unwrap();
                sink.extend(changes.into_iter().map(|c| (c.message.id, c.kind.as_str())));
            });
            let writer = Writer::connect(
                &crate::store::DbOptions::new(&url),
                Arc::new(SystemClock),
                listener,
                None,
                super::super::MessageQuotas::none(),
            )
            .await
            .unwrap();
            let scope = Scope {
                workspace_id: Uuid::now_v7().into(),
                mode: Mode::Live,
            };
            let [a, b, c, d] = [
                Uuid::now_v7(),
                Uuid::now_v7(),
                Uuid::now_v7(),
                Uuid::now_v7(),
            ];
            let outcome = writer
                .accept(Accept {
                    scope,
                    request_id: None,
                    messages: vec![queued(a), queued(b), queued(c), queued(d)],
                    device_available: true,
                    limit: None,
                    draft: None,
                })
                .await
                .unwrap();
            assert!(matches!(outcome, AcceptOutcome::Accepted(ref m) if m.len() == 4));
            published.lock().unwrap().clear();

            let (one, two) = (Uuid::now_v7(), Uuid::now_v7());
            // Round 0: four hand-overs to two phones in one statement; round 1: reports from
            // both phones in one statement, one of them from the wrong phone; round 2: a's
            // delivery after its `sent`.
            let moves = vec![
                Transition::hand_over(a, Some(one)),
                Transition::hand_over(b, Some(one)),
                Transition::hand_over(c, Some(two)),
                Transition::hand_over(d, Some(two)),
                Transition::report(a, Some(one), MessageStatus::Sent),
                Transition::report(d, Some(two), MessageStatus::Sent),
                Transition::report(b, Some(two), MessageStatus::Sent),
                Transition::report(a, Some(one), MessageStatus::Delivered),
                Transition::report(c, Some(two), MessageStatus::Delivered),
            ];
            let answers =
                futures_util::future::join_all(moves.into_iter().map(|t| writer.transition(t)))
                    .await;
            let statuses: Vec<Option<(Uuid, MessageStatus, u32)>> = answers
                .into_iter()
                .map(|r| r.unwrap().map(|m| (m.id, m.status, m.send_attempts)))
                .collect();
            assert_eq!(
                statuses,
                vec![
                    Some((a, MessageStatus::Sending, 1)),
                    Some((b, MessageStatus::Sending, 1)),
                    Some((c, MessageStatus::Sending, 1)),
                    Some((d, MessageStatus::Sending, 1)),
                    Some((a, MessageStatus::Sent, 1)),
                    Some((d, MessageStatus::Sent, 1)),
                    None, // b is on phone one: phone two's report is refused
                    Some((a, MessageStatus::Delivered, 1)),
                    Some((c, MessageStatus::Delivered, 1)),
                ]
            );

            let timeline = |id| {
                let db = db.clone();
                async move {
                    let (_, events) = crate::store::messages::get_with_events(&db, scope, id)
                        .await
                        .unwrap();
                    events.into_iter().map(|e| e.kind).collect::<Vec<_>>()
                }
            };
            assert_eq!(
                timeline(a).await,
                ["queued", "sending", "sent", "delivered"]
            );
            assert_eq!(timeline(b).await, ["queued", "sending"]);
            // c's delivery overtook its `sent`: recorded once, before `delivered`.
            assert_eq!(
                timeline(c).await,
                ["queued", "sending", "sent", "delivered"]
            );
            assert_eq!(timeline(d).await, ["queued", "sending", "sent"]);
            for (id, phone) in [(a, one), (b, one), (c, two), (d, two)] {
                let message = crate::store::messages::get(&db, id).await.unwrap().unwrap();
                assert_eq!(message.device_id, Some(phone), "{id}");
            }
            let published = published.lock().unwrap().clone();
            let of = |id| -> Vec<&str> {
                published
                    .iter()
                    .filter(|(m, _)| *m == id)
                    .map(|(_, k)| *k)
                    .collect()
            };
            assert_eq!(of(a), ["sending", "sent", "delivered"]);
            assert_eq!(of(b), ["sending"]);
            assert_eq!(of(c), ["sending", "sent", "delivered"]);
            assert_eq!(of(d), ["sending", "sent"]);
        })
        .unwrap();
    }
}
