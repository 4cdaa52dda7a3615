//! The retention job: one supervised actor that, every `retention.interval`, empties message
//! content after `retention.content_after` and deletes records after `retention.record_after`,
//! batch by batch, logging the counts. It fires no webhook (the store writes bypass the
//! writer's change listener).
//!
//! Mailbox: none; it only runs on its timer. A restart (supervision) simply starts the timer
//! again: every sweep derives its work from the database.

use std::time::Duration;

use actix::prelude::*;

use super::Deps;
use crate::store::StoreError;
use crate::store::retention::{
    RETENTION_BATCH, SweepCounts, delete_records_batch, remove_contents_batch,
};

/// Pause between two batches of one sweep, so other writers get the lock in between.
const PAUSE_BETWEEN_BATCHES: Duration = Duration::from_millis(10);

/// Runs the retention sweeps; started once in `startup.rs`.
pub struct Retention {
    deps: Deps,
    /// A sweep is under way; the next tick is skipped rather than run concurrently.
    sweeping: bool,
}

impl Retention {
    /// A retention job over these dependencies.
    pub fn new(deps: Deps) -> Retention {
        Retention {
            deps,
            sweeping: false,
        }
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.sweeping {
            return;
        }
        self.sweeping = true;
        let deps = self.deps.clone();
        ctx.spawn(
            async move { sweep(&deps).await }
                .into_actor(self)
                .map(|result, act, _| {
                    act.sweeping = false;
                    match result {
                        Ok(counts) if counts != SweepCounts::default() => tracing::info!(
                            contents_removed = counts.contents_removed,
                            records_deleted = counts.records_deleted,
                            deliveries_deleted = counts.deliveries_deleted,
                            "retention sweep"
                        ),
                        Ok(_) => {}
                        // Retried at the next tick; nothing is lost by waiting.
                        Err(err) => tracing::error!(error = %err, "retention sweep failed"),
                    }
                }),
        );
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// One sweep: content removal, then record deletion, each batch by batch until a batch comes
/// back short.
async fn sweep(deps: &Deps) -> Result<SweepCounts, StoreError> {
    // In a cluster one node at a time sweeps: the holder of the `retention` sweep lease.
    if let Some(cluster) = &deps.cluster
        && cluster
            .acquire(crate::store::cluster::LeaseKey::Sweep(
                crate::store::cluster::Sweep::Retention,
            ))
            .await
            .is_none()
    {
        return Ok(SweepCounts::default());
    }
    let settings = &deps.settings.retention;
    let clock = &deps.clock;
    let db = &deps.db;
    let records_cutoff = || clock.now_ms().saturating_sub(millis(settings.record_after));
    let contents_removed = in_batches(|| {
        let now = clock.now_ms();
        remove_contents_batch(db, now.saturating_sub(millis(settings.content_after)), now)
    })
    .await?;
    let records_deleted = in_batches(|| delete_records_batch(db, records_cutoff())).await?;
    // Finished webhook deliveries and their attempts live as long as message records.
    let deliveries_deleted = in_batches(|| {
        crate::store::webhooks::delete_finished_batch(db, records_cutoff(), RETENTION_BATCH)
    })
    .await?;
    // Fired phone alert events (docs/api.md, "Phone health") live as long as message records.
    in_batches(|| crate::store::health::delete_events_batch(db, records_cutoff(), RETENTION_BATCH))
        .await?;
    Ok(SweepCounts {
        contents_removed,
        records_deleted,
        deliveries_deleted,
    })
}

/// Runs `batch` (each run at most [`RETENTION_BATCH`] rows, retried while the database is
/// busy) until a run comes back short, pausing between runs; how many rows it did in all.
async fn in_batches<F, Fut>(mut batch: F) -> Result<u64, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, StoreError>>,
{
    let mut total = 0;
    loop {
        let n = crate::store::retry_busy(&mut batch).await?;
        total += n;
        if n < RETENTION_BATCH {
            return Ok(total);
        }
        actix::clock::sleep(PAUSE_BETWEEN_BATCHES).await;
    }
}

impl Actor for Retention {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let every = self.deps.settings.retention.interval;
        ctx.run_interval(every, |act, ctx| act.tick(ctx));
    }
}

impl Supervised for Retention {
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.sweeping = false;
    }
}
