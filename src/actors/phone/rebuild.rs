//! How a Phone actor rebuilds its queue and pace log from the database (at start, and in a
//! cluster when this node takes the phone over), and loads the queued messages another node
//! stored (docs/architecture.md, "Cluster").

use actix::prelude::*;
use uuid::Uuid;

use super::*;

impl Phone {
    pub(super) fn rebuild(&mut self, ctx: &mut Context<Self>) {
        let Some(device) = self.identity.device_id else {
            self.ready = true;
            return;
        };
        let db = self.deps.db.clone();
        let writer = self.deps.writer.clone();
        let cluster = self.deps.cluster.clone();
        // A pace log covers the last 30 minutes, or 24 hours with a daily cap (bounded: no
        // more sends than the deepest window counts).
        let pace = self.pace.unwrap_or_default();
        let since = (self.deps.clock.now() - PaceLog::horizon(pace)).timestamp_millis();
        let limit = pace.history_len();
        ctx.wait(
            async move {
                // In a cluster the phone is first claimed (its lease), then its queue is
                // rebuilt from the database as after a restart: what another node handed over
                // and the phone did not report is queued again and sent once more.
                let mut taken = Vec::new();
                if let Some(cluster) = &cluster {
                    if !claim(cluster, device).await {
                        return Ok(None);
                    }
                    for mut message in messages::unfinished_of_phone(&db, device).await? {
                        if message.status == MessageStatus::Sending {
                            let transition = Transition::requeue(
                                message.id,
                                "the phone moved to another node before reporting; queued again",
                            );
                            match writer.transition(transition).await? {
                                Some(row) => message = row,
                                None => continue,
                            }
                        }
                        if message.status == MessageStatus::Queued {
                            taken.push(message);
                        }
                    }
                }
                let times = messages::handoffs_since(&db, device, since, limit).await?;
                Ok::<_, crate::store::StoreError>(Some((times, taken)))
            }
            .into_actor(self)
            .map(move |result, act, ctx| {
                match result {
                    Ok(Some((times, taken))) => {
                        let now = act.deps.clock.now();
                        act.log = PaceLog::from_sends(times.into_iter().map(from_ms), pace, now);
                        let now_ms = now.timestamp_millis();
                        for message in &taken {
                            act.queue.enqueue(QueuedMessage::from(message), now_ms);
                        }
                    }
                    Ok(None) => {
                        tracing::warn!(phone_id = %device, "the phone's lease stays with another node; closing its session here");
                        if let Some(link) = act.link.take() {
                            act.close_link(link, CLOSE_TRY_AGAIN, "the phone is owned by another node; reconnect");
                        }
                        act.queue.drain_all();
                        act.stopping = true;
                        if let Some(owner) = &act.owner {
                            owner.do_send(NotOwned { phone_id: device });
                        }
                        ctx.stop();
                        return;
                    }
                    Err(err) => {
                        tracing::error!(error = %err, "pace log not rebuilt; starting empty")
                    }
                }
                act.ready = true;
                act.dispatch(ctx);
            }),
        );
    }

    /// Gives the pace log the history `pace` needs and it did not keep (a daily cap was set or
    /// raised): the older sends are read back from the database; the log's own last 30
    /// minutes stay as they are (they include hand-overs still being written). Without a
    /// pace before (`had_pace` false) the log recorded nothing: all of it is read back.
    /// Nothing is handed over until the log is complete.
    pub(super) fn widen_log(&mut self, pace: Pace, had_pace: bool, ctx: &mut Context<Self>) {
        let Some(device) = self.identity.device_id else {
            self.log = PaceLog::for_pace(pace);
            self.dispatch(ctx);
            return;
        };
        self.ready = false;
        let db = self.deps.db.clone();
        let since = (self.deps.clock.now() - PaceLog::horizon(pace)).timestamp_millis();
        let limit = pace.history_len();
        ctx.wait(
            async move { messages::handoffs_since(&db, device, since, limit).await }
                .into_actor(self)
                .map(move |result, act, ctx| {
                    let now = act.deps.clock.now();
                    let pace = act.pace.unwrap_or(pace);
                    // The live log holds every send after this instant; the database, the
                    // ones before.
                    let live_from = if had_pace {
                        now - THIRTY_MINUTE_WINDOW
                    } else {
                        chrono::DateTime::<chrono::Utc>::MAX_UTC
                    };
                    match result {
                        Ok(times) => {
                            let older = times.into_iter().map(from_ms).filter(|t| *t <= live_from);
                            let live: Vec<_> = act.log.sends().filter(|t| *t > live_from).collect();
                            act.log = PaceLog::from_sends(older.chain(live), pace, now);
                        }
                        Err(err) => {
                            // Only the last 30 minutes count until the next rebuild.
                            tracing::error!(error = %err, "pace log not widened for the daily cap");
                            act.log.keep_for(pace);
                        }
                    }
                    act.ready = true;
                    act.dispatch(ctx);
                }),
        );
    }

    /// Loads queued messages of this phone another node stored.
    pub(super) fn load_queued(&mut self, ids: Option<Vec<Uuid>>, ctx: &mut Context<Self>) {
        let Some(device) = self.identity.device_id else {
            return;
        };
        let db = self.deps.db.clone();
        ctx.spawn(
            async move {
                match ids {
                    Some(ids) => messages::queued_of_phone(&db, device, &ids).await,
                    None => messages::unfinished_of_phone(&db, device).await,
                }
            }
            .into_actor(self)
            .map(|result, act, ctx| match result {
                Ok(found) => {
                    tracing::debug!(
                        count = found.len(),
                        "queued messages of another node loaded"
                    );
                    let now = act.deps.clock.now_ms();
                    for message in found.iter().filter(|m| m.status == MessageStatus::Queued) {
                        act.queue.enqueue(QueuedMessage::from(message), now);
                    }
                    act.dispatch(ctx);
                }
                Err(err) => {
                    tracing::error!(error = %err, "queued messages of another node not loaded")
                }
            }),
        );
    }
}
