//! Keeps the daily message counts (`store::stats`; docs/api.md, "Statistics") and the same
//! per phone, a SIM line being a phone (`store::phone_stats`; docs/api.md, "Phone stats"): the
//! writer's change listener tells it what each committed batch counted (`Counted`), and it
//! adds them up in memory and writes them every [`FLUSH_EVERY`], one upsert per day and scope
//! (or phone), so the counts cost the message path no write of their own. A crash loses at
//! most the counts of the last interval.
//!
//! A phone's delivery also counts its time from hand-over (the message's latest `sending`
//! timeline entry, read back at the flush, one indexed read per flush) in the phone's
//! histogram of the day.
//!
//! Mailbox: `Counted` (from the listener, never waited for).

use std::collections::HashMap;
use std::time::Duration;

use actix::prelude::*;
use sea_orm::DatabaseConnection;
use uuid::Uuid;

use crate::domain::change::{ChangeKind, FailureReason};
use crate::domain::delivery_time::bucket_of;
use crate::domain::status::MessageStatus;
use crate::store::phone_stats::{self, LineDay};
use crate::store::scoped::Scope;
use crate::store::stats::{self, DayCounts, day_of};
use crate::store::writer::Change;

/// How often the counts are written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Counts of committed changes, by scope and UTC day.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Counted {
    pub counts: Vec<(Scope, i32, DayCounts)>,
    /// The same changes per phone (a line), in commit order.
    pub lines: Vec<LineCounted>,
}

/// One change that counts for the phone the message is assigned to (`device_id`), on the UTC
/// day it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineCounted {
    pub phone_id: Uuid,
    pub day: i32,
    pub event: LineEvent,
}

/// What counts for a phone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineEvent {
    Sent,
    /// Delivered at `at` (ms): its time to deliver runs from its latest hand-over.
    Delivered {
        message_id: Uuid,
        at: i64,
    },
    /// Failed after all attempts, or expired, for `reason` when one is known.
    Failed {
        reason: Option<String>,
    },
}

impl Counted {
    /// What a batch of committed changes counts: `sent`, `delivered`, `failed` (and `expired`,
    /// a message that never went out) and `received`, on the UTC day the change happened.
    /// Per phone the same, except a failure because the phone itself was unpaired: its
    /// figures went with it.
    pub fn of(changes: &[Change]) -> Counted {
        let mut counts: HashMap<(Scope, i32), DayCounts> = HashMap::new();
        let lines = changes.iter().filter_map(LineCounted::of).collect();
        for change in changes {
            let one = match change.kind {
                ChangeKind::Moved(MessageStatus::Sent) => DayCounts {
                    sent: 1,
                    ..DayCounts::default()
                },
                ChangeKind::Moved(MessageStatus::Delivered) => DayCounts {
                    delivered: 1,
                    ..DayCounts::default()
                },
                ChangeKind::Moved(MessageStatus::Failed | MessageStatus::Expired) => DayCounts {
                    failed: 1,
                    ..DayCounts::default()
                },
                ChangeKind::Received => DayCounts {
                    received: 1,
                    ..DayCounts::default()
                },
                _ => continue,
            };
            let message = &change.message;
            let scope = Scope {
                workspace_id: message.workspace_id,
                mode: message.mode,
            };
            counts
                .entry((scope, day_of(message.updated_at)))
                .or_default()
                .add(one);
        }
        Counted {
            counts: counts
                .into_iter()
                .map(|((scope, day), c)| (scope, day, c))
                .collect(),
            lines,
        }
    }
}

impl LineCounted {
    /// What a committed change counts for its message's phone, if anything.
    fn of(change: &Change) -> Option<LineCounted> {
        let message = &change.message;
        let phone_id = message.device_id?;
        let event = match change.kind {
            ChangeKind::Moved(MessageStatus::Sent) => LineEvent::Sent,
            ChangeKind::Moved(MessageStatus::Delivered) => LineEvent::Delivered {
                message_id: message.id,
                at: message.updated_at,
            },
            ChangeKind::Moved(MessageStatus::Failed | MessageStatus::Expired) => {
                if message.failure_reason == Some(FailureReason::PhoneUnpaired) {
                    return None;
                }
                LineEvent::Failed {
                    reason: message
                        .failure_reason
                        .as_ref()
                        .map(|r| r.as_str().to_string()),
                }
            }
            _ => return None,
        };
        Some(LineCounted {
            phone_id,
            day: day_of(message.updated_at),
            event,
        })
    }
}

/// A phone's delivery waiting for its hand-over time (read at the flush).
#[derive(Debug, Clone, Copy)]
struct Timed {
    phone_id: Uuid,
    day: i32,
    message_id: Uuid,
    at: i64,
}

/// Adds up the daily counts and writes them; started once in `startup.rs`.
pub struct DailyStats {
    db: DatabaseConnection,
    pending: HashMap<(Scope, i32), DayCounts>,
    writing: bool,
    /// Per phone and day, what is not written yet.
    lines: HashMap<(Uuid, i32), LineDay>,
    /// Deliveries whose time to deliver is not counted yet.
    timed: Vec<Timed>,
    writing_lines: bool,
}

impl DailyStats {
    /// Counts written to `db`.
    pub fn new(db: DatabaseConnection) -> DailyStats {
        DailyStats {
            db,
            pending: HashMap::new(),
            writing: false,
            lines: HashMap::new(),
            timed: Vec::new(),
            writing_lines: false,
        }
    }

    fn flush_lines(&mut self, ctx: &mut Context<Self>) {
        if self.writing_lines || (self.lines.is_empty() && self.timed.is_empty()) {
            return;
        }
        self.writing_lines = true;
        let lines = std::mem::take(&mut self.lines);
        let timed = std::mem::take(&mut self.timed);
        let db = self.db.clone();
        ctx.spawn(
            async move {
                let written = write_lines(&db, lines, timed).await;
                written.err()
            }
            .into_actor(self)
            .map(|failed, act, _| {
                act.writing_lines = false;
                if let Some((err, lines, timed)) = failed {
                    // Kept for the next flush: counts are added, never lost to a failed write.
                    tracing::warn!(error = %err, "phone counts not written; retrying");
                    for (key, day) in lines {
                        act.lines.entry(key).or_default().add(&day);
                    }
                    act.timed.extend(timed);
                }
            }),
        );
    }

    fn flush(&mut self, ctx: &mut Context<Self>) {
        if self.writing || self.pending.is_empty() {
            return;
        }
        self.writing = true;
        let batch: Vec<(Scope, i32, DayCounts)> = self
            .pending
            .drain()
            .map(|((scope, day), c)| (scope, day, c))
            .collect();
        let db = self.db.clone();
        ctx.spawn(
            async move {
                let written = crate::store::retry_busy(|| stats::add(&db, &batch)).await;
                (written, batch)
            }
            .into_actor(self)
            .map(|(written, batch), act, _| {
                act.writing = false;
                if let Err(err) = written {
                    // Kept for the next flush: counts are added, never lost to a failed write.
                    tracing::warn!(error = %err, "daily counts not written; retrying");
                    for (scope, day, c) in batch {
                        act.pending.entry((scope, day)).or_default().add(c);
                    }
                }
            }),
        );
    }
}

impl Actor for DailyStats {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(FLUSH_EVERY, |act, ctx| {
            act.flush(ctx);
            act.flush_lines(ctx);
        });
    }
}

impl Handler<Counted> for DailyStats {
    type Result = ();

    fn handle(&mut self, msg: Counted, _: &mut Self::Context) {
        for (scope, day, c) in msg.counts {
            self.pending.entry((scope, day)).or_default().add(c);
        }
        for line in msg.lines {
            let day = self.lines.entry((line.phone_id, line.day)).or_default();
            match line.event {
                LineEvent::Sent => day.sent += 1,
                LineEvent::Delivered { message_id, at } => {
                    day.delivered += 1;
                    self.timed.push(Timed {
                        phone_id: line.phone_id,
                        day: line.day,
                        message_id,
                        at,
                    });
                }
                LineEvent::Failed { reason } => day.add_failure(reason.as_deref()),
            }
        }
    }
}

/// What a failed [`write_lines`] hands back to be tried again.
type Unwritten = (
    crate::store::StoreError,
    HashMap<(Uuid, i32), LineDay>,
    Vec<Timed>,
);

/// Counts the deliveries' times from their hand-overs, then writes the phones' figures, but
/// only for phones that still exist (one unpaired meanwhile has no figures to keep).
async fn write_lines(
    db: &DatabaseConnection,
    mut lines: HashMap<(Uuid, i32), LineDay>,
    timed: Vec<Timed>,
) -> Result<(), Unwritten> {
    let ids: Vec<Uuid> = timed.iter().map(|t| t.message_id).collect();
    let handed = match crate::store::retry_busy(|| phone_stats::handed_over_at(db, &ids)).await {
        Ok(handed) => handed,
        Err(err) => return Err((err, lines, timed)),
    };
    for t in &timed {
        // A delivery whose hand-over is not on its timeline counts without a time.
        if let Some(handed_at) = handed.get(&t.message_id) {
            lines
                .entry((t.phone_id, t.day))
                .or_default()
                .times
                .add(bucket_of(t.at - handed_at), 1);
        }
    }
    let phones: Vec<Uuid> = lines.keys().map(|(phone, _)| *phone).collect();
    let existing = match crate::store::retry_busy(|| phone_stats::existing(db, &phones)).await {
        Ok(existing) => existing,
        Err(err) => return Err((err, lines, Vec::new())),
    };
    let batch: Vec<(Uuid, i32, LineDay)> = lines
        .into_iter()
        .filter(|((phone, _), _)| existing.contains(phone))
        .map(|((phone, day), figures)| (phone, day, figures))
        .collect();
    match crate::store::retry_busy(|| phone_stats::add(db, &batch)).await {
        Ok(()) => Ok(()),
        Err(err) => {
            let lines = batch
                .into_iter()
                .map(|(phone, day, figures)| ((phone, day), figures))
                .collect();
            Err((err, lines, Vec::new()))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::domain::ids::WorkspaceId;
    use crate::domain::status::{Direction, Mode, QueueClass};
    use crate::store::messages::Message;

    const DAY_MS: i64 = 24 * 3600 * 1000;

    fn moved(status: MessageStatus, device: Option<Uuid>, reason: Option<FailureReason>) -> Change {
        Change {
            kind: ChangeKind::Moved(status),
            message: Message {
                id: Uuid::now_v7(),
                workspace_id: WorkspaceId::from(Uuid::now_v7()),
                mode: Mode::Live,
                direction: Direction::Outbound,
                status,
                class: QueueClass::Single,
                from_number: "+14155550100".into(),
                to_number: "+14155550123".into(),
                content: "hello".into(),
                segments: 1,
                encoding: crate::domain::sms::Encoding::Gsm7,
                device_id: device,
                pinned: false,
                campaign_id: None,
                pool_id: None,
                request_id: None,
                scheduled_for: None,
                expires_at: 0,
                created_at: 0,
                updated_at: 3 * DAY_MS + 5,
                sent_at: None,
                delivered_at: None,
                failed_at: None,
                failure_reason: reason,
                send_attempts: 1,
                client: None,
            },
        }
    }

    /// Each change counts for the phone its message is assigned to, on the change's UTC day;
    /// nothing counts without a phone, for a hand-over, or for the phone's own unpairing.
    #[test]
    fn changes_count_for_their_phone() {
        let phone = Uuid::now_v7();
        let delivered = moved(MessageStatus::Delivered, Some(phone), None);
        let delivered_id = delivered.message.id;
        let changes = vec![
            moved(MessageStatus::Sending, Some(phone), None),
            moved(MessageStatus::Sent, Some(phone), None),
            delivered,
            moved(
                MessageStatus::Failed,
                Some(phone),
                Some(FailureReason::Reported("RESULT_ERROR_NO_SERVICE".into())),
            ),
            moved(
                MessageStatus::Expired,
                Some(phone),
                Some(FailureReason::Expired),
            ),
            moved(
                MessageStatus::Failed,
                Some(phone),
                Some(FailureReason::PhoneUnpaired),
            ),
            moved(MessageStatus::Expired, None, Some(FailureReason::Expired)),
        ];
        let counted = Counted::of(&changes);
        let on = |event| LineCounted {
            phone_id: phone,
            day: 3,
            event,
        };
        assert_eq!(
            counted.lines,
            vec![
                on(LineEvent::Sent),
                on(LineEvent::Delivered {
                    message_id: delivered_id,
                    at: 3 * DAY_MS + 5,
                }),
                on(LineEvent::Failed {
                    reason: Some("RESULT_ERROR_NO_SERVICE".into()),
                }),
                on(LineEvent::Failed {
                    reason: Some(FailureReason::Expired.as_str().into()),
                }),
            ]
        );
    }
}
