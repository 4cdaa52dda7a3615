//! Keeps the daily message counts (`store::stats`; docs/api.md, "Statistics"): the writer's
//! change listener tells it what each committed batch counted (`Counted`), and it adds them up
//! in memory and writes them every [`FLUSH_EVERY`], one upsert per day and scope, so the
//! counts cost the message path no write of their own. A crash loses at most the counts of
//! the last interval.
//!
//! Mailbox: `Counted` (from the listener, never waited for).

use std::collections::HashMap;
use std::time::Duration;

use actix::prelude::*;
use sea_orm::DatabaseConnection;

use crate::domain::change::ChangeKind;
use crate::domain::status::MessageStatus;
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
}

impl Counted {
    /// What a batch of committed changes counts: `sent`, `delivered`, `failed` (and `expired`,
    /// a message that never went out) and `received`, on the UTC day the change happened.
    pub fn of(changes: &[Change]) -> Counted {
        let mut counts: HashMap<(Scope, i32), DayCounts> = HashMap::new();
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
        }
    }
}

/// Adds up the daily counts and writes them; started once in `startup.rs`.
pub struct DailyStats {
    db: DatabaseConnection,
    pending: HashMap<(Scope, i32), DayCounts>,
    writing: bool,
}

impl DailyStats {
    /// Counts written to `db`.
    pub fn new(db: DatabaseConnection) -> DailyStats {
        DailyStats {
            db,
            pending: HashMap::new(),
            writing: false,
        }
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
        ctx.run_interval(FLUSH_EVERY, |act, ctx| act.flush(ctx));
    }
}

impl Handler<Counted> for DailyStats {
    type Result = ();

    fn handle(&mut self, msg: Counted, _: &mut Self::Context) {
        for (scope, day, c) in msg.counts {
            self.pending.entry((scope, day)).or_default().add(c);
        }
    }
}
