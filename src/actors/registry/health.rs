//! The registry's part in phone health (docs/api.md, "Phone health"): it opens and ends each
//! phone's alert episodes and fires their webhook events.
//!
//! - `phone.offline`: a phone going offline opens an `offline` episode; every
//!   [`ALERT_SWEEP_EVERY`] the registry claims the episodes open longer than
//!   `phones.offline_alert_after` whose phone is still offline anywhere, and fires them. The
//!   episode is a row, so a restart (or another node) finds it; at start every paired phone
//!   offline since its stored last-seen time gets one, for an outage that began while no
//!   server ran.
//! - `phone.online`: a phone coming back ends the episode; if it had alerted, fires.
//! - `phone.low_battery`: a health report at or below the threshold and not charging opens a
//!   `low_battery` episode of the device and fires it; one above it, or charging, ends it.
//! - `phone.stalled`: the Phone actor's watchdog says [`LineStalled`]; [`LineUnstalled`]
//!   ends it.
//!
//! Every open, end and claim is a conditional update (`store::health`), so each episode fires
//! once whatever restarts and nodes.

use std::time::Duration;

use actix::prelude::*;
use uuid::Uuid;

use super::Registry;
pub use crate::actors::phone::{HealthReported, LineStalled, LineUnstalled};
use crate::actors::webhook_endpoint::DeliveriesCreated;
use crate::clock::format_ms;
use crate::domain::health::AlertKind;
use crate::domain::webhook_event::EventKind;
use crate::store::{health, phones};

/// How often open offline episodes are checked for a due alert.
pub const ALERT_SWEEP_EVERY: Duration = Duration::from_secs(1);

/// An alert episode fired: the event to deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fired {
    /// The episode of this kind began at `since`.
    Opened { kind: AlertKind, since: i64 },
    /// The phone is back online at `since` after an offline alert.
    BackOnline { since: i64 },
}

impl Handler<HealthReported> for Registry {
    type Result = ();

    fn handle(&mut self, msg: HealthReported, ctx: &mut Self::Context) {
        let db = self.deps.db.clone();
        let now = self.deps.clock.now_ms();
        let phone_id = msg.phone_id;
        let low = msg.health.is_low_battery();
        ctx.spawn(
            async move {
                if !low {
                    health::end_episode(&db, phone_id, AlertKind::LowBattery, now).await?;
                    return Ok(false);
                }
                health::open_episode(&db, phone_id, AlertKind::LowBattery, now).await?;
                health::claim_alert(&db, phone_id, AlertKind::LowBattery, now, now).await
            }
            .into_actor(self)
            .map(
                move |claimed: Result<bool, crate::store::StoreError>, act, _| match claimed {
                    Ok(true) => act.fire(
                        phone_id,
                        Fired::Opened {
                            kind: AlertKind::LowBattery,
                            since: now,
                        },
                    ),
                    Ok(false) => {}
                    Err(err) => {
                        tracing::error!(%phone_id, error = %err, "low battery not recorded")
                    }
                },
            ),
        );
    }
}

impl Handler<LineStalled> for Registry {
    type Result = ();

    fn handle(&mut self, msg: LineStalled, ctx: &mut Self::Context) {
        tracing::warn!(phone_id = %msg.phone_id, cause = msg.cause.as_str(), "line stalled");
        // Its pooled queue moves on to the pool's other lines at once (docs/api.md, "Pools");
        // the failover sweep keeps draining it while it stays stalled.
        ctx.notify(super::DrainLine {
            phone_id: msg.phone_id,
        });
        let db = self.deps.db.clone();
        let now = self.deps.clock.now_ms();
        let LineStalled {
            phone_id, since, ..
        } = msg;
        ctx.spawn(
            async move {
                health::open_episode(&db, phone_id, AlertKind::Stalled, since).await?;
                health::claim_alert(&db, phone_id, AlertKind::Stalled, now, now).await
            }
            .into_actor(self)
            .map(
                move |claimed: Result<bool, crate::store::StoreError>, act, _| match claimed {
                    Ok(true) => act.fire(
                        phone_id,
                        Fired::Opened {
                            kind: AlertKind::Stalled,
                            since,
                        },
                    ),
                    Ok(false) => {}
                    Err(err) => tracing::error!(%phone_id, error = %err, "stall not recorded"),
                },
            ),
        );
    }
}

impl Handler<LineUnstalled> for Registry {
    type Result = ();

    fn handle(&mut self, msg: LineUnstalled, ctx: &mut Self::Context) {
        tracing::info!(phone_id = %msg.phone_id, "line no longer stalled");
        let db = self.deps.db.clone();
        let now = self.deps.clock.now_ms();
        ctx.spawn(
            async move {
                if let Err(err) =
                    health::end_episode(&db, msg.phone_id, AlertKind::Stalled, now).await
                {
                    tracing::error!(phone_id = %msg.phone_id, error = %err, "stall end not recorded");
                }
            }
            .into_actor(self),
        );
    }
}

impl Registry {
    /// A phone went offline here at `now`: its outage begins (unless one is open).
    pub(super) fn outage_began(&self, phone_id: Uuid, now: i64, ctx: &mut Context<Self>) {
        let db = self.deps.db.clone();
        ctx.spawn(
            async move {
                if let Err(err) = health::open_episode(&db, phone_id, AlertKind::Offline, now).await
                {
                    tracing::error!(%phone_id, error = %err, "outage not recorded");
                }
            }
            .into_actor(self),
        );
    }

    /// A phone came online at `now`: its outage ends, and fires `phone.online` if it alerted.
    pub(super) fn outage_ended(&self, phone_id: Uuid, now: i64) {
        let deps = self.deps.clone();
        let endpoints = self.alerts_to.clone();
        actix::spawn(async move {
            match health::end_episode(&deps.db, phone_id, AlertKind::Offline, now).await {
                Ok(Some(true)) => {
                    deliver(deps, endpoints, phone_id, Fired::BackOnline { since: now }).await
                }
                Ok(_) => {}
                Err(err) => tracing::error!(%phone_id, error = %err, "outage end not recorded"),
            }
        });
    }

    /// Fires the offline alerts that are due: episodes open longer than
    /// `phones.offline_alert_after` of phones offline everywhere, each claimed once.
    pub(super) fn sweep_offline_alerts(&mut self, ctx: &mut Context<Self>) {
        let db = self.deps.db.clone();
        let now = self.deps.clock.now_ms();
        let after = i64::try_from(self.deps.settings.phones.offline_alert_after.as_millis())
            .unwrap_or(i64::MAX);
        let began_by = now.saturating_sub(after);
        ctx.spawn(
            async move { health::due_alerts(&db, AlertKind::Offline, began_by).await }
                .into_actor(self)
                .map(move |due, act, ctx| {
                    let due = match due {
                        Ok(due) => due,
                        Err(err) => {
                            tracing::error!(error = %err, "offline alerts not read");
                            return;
                        }
                    };
                    for (phone_id, since) in due {
                        let db = act.deps.db.clone();
                        // Connected here (its connect may have been stored before the
                        // disconnect, on another node, opened the episode) or unpaired: the
                        // episode ends unalerted. Online on another node: that node ends it.
                        if act.directory.connected_here(phone_id) || act.directory.record(phone_id).is_none()
                        {
                            ctx.spawn(
                                async move {
                                    if let Err(err) =
                                        health::end_episode(&db, phone_id, AlertKind::Offline, now).await
                                    {
                                        tracing::error!(%phone_id, error = %err, "outage end not recorded");
                                    }
                                }
                                .into_actor(act),
                            );
                            continue;
                        }
                        if act.directory.is_online(phone_id) {
                            continue;
                        }
                        ctx.spawn(
                            async move {
                                health::claim_alert(&db, phone_id, AlertKind::Offline, began_by, now)
                                    .await
                            }
                            .into_actor(act)
                            .map(move |claimed, act, _| match claimed {
                                Ok(true) => act.fire(
                                    phone_id,
                                    Fired::Opened {
                                        kind: AlertKind::Offline,
                                        since,
                                    },
                                ),
                                Ok(false) => {}
                                Err(err) => {
                                    tracing::error!(%phone_id, error = %err, "offline alert not claimed")
                                }
                            }),
                        );
                    }
                }),
        );
    }

    /// At start: every paired phone not online here, seen before, gets an outage since it was
    /// last seen (none is opened over an open one), so an outage that began while no server
    /// ran alerts too. Run after `phones.heartbeat_timeout`, so the phones that reconnect to
    /// the restarted server are online by then.
    pub(super) fn outages_since_start(&mut self, ctx: &mut Context<Self>) {
        let offline: Vec<(Uuid, i64)> = self
            .directory
            .ids()
            .into_iter()
            .filter(|id| !self.directory.is_online(*id))
            .filter_map(|id| Some((id, self.directory.record(id)?.last_seen_at?)))
            .collect();
        let db = self.deps.db.clone();
        ctx.spawn(
            async move {
                for (phone_id, since) in offline {
                    if let Err(err) =
                        health::open_episode(&db, phone_id, AlertKind::Offline, since).await
                    {
                        tracing::error!(%phone_id, error = %err, "outage not recorded");
                    }
                }
            }
            .into_actor(self),
        );
    }

    /// Delivers the event of a fired episode to the endpoints subscribed to it.
    fn fire(&self, phone_id: Uuid, fired: Fired) {
        actix::spawn(deliver(
            self.deps.clone(),
            self.alerts_to.clone(),
            phone_id,
            fired,
        ));
    }
}

/// The `data` of a phone alert event (docs/api.md, "Phone health").
#[derive(Debug, serde::Serialize)]
struct EventData {
    phone_id: Uuid,
    phone_number: String,
    name: Option<String>,
    since: String,
    /// The device's health as last reported; null before any report.
    health: Option<HealthData>,
}

/// A device's health in an event's `data`, as `GET /v1/phones/{id}` shows it.
#[derive(Debug, serde::Serialize)]
struct HealthData {
    battery_percent: Option<u8>,
    charging: Option<bool>,
    network: Option<crate::domain::health::Network>,
    sims: Option<Vec<crate::domain::health::SimCard>>,
    reported_at: String,
}

/// Stores the fired episode's event and one delivery per subscribed endpoint (one
/// transaction), then hands the deliveries to the endpoints (docs/api.md, "Webhooks").
async fn deliver(
    deps: crate::actors::Deps,
    endpoints: Option<Recipient<DeliveriesCreated>>,
    phone_id: Uuid,
    fired: Fired,
) {
    let (kind, since) = match fired {
        Fired::Opened { kind, since } => (
            match kind {
                AlertKind::Offline => EventKind::PhoneOffline,
                AlertKind::LowBattery => EventKind::PhoneLowBattery,
                AlertKind::Stalled => EventKind::PhoneStalled,
            },
            since,
        ),
        Fired::BackOnline { since } => (EventKind::PhoneOnline, since),
    };
    tracing::warn!(%phone_id, event = kind.as_str(), "phone alert");
    let result = async {
        let Some(phone) = phones::by_id(&deps.db, phone_id).await? else {
            return Ok(Vec::new());
        };
        let device = phone.line.map_or(phone.id, |l| l.device_phone_id);
        let health = health::of(&deps.db, &[device]).await?.remove(&device);
        let data = EventData {
            phone_id,
            phone_number: phone.phone_number.clone(),
            name: phone.name.clone(),
            since: format_ms(since),
            health: health.map(|h| HealthData {
                battery_percent: h.battery_percent,
                charging: h.charging,
                network: h.network,
                sims: h.sims,
                reported_at: format_ms(h.reported_at),
            }),
        };
        let data = serde_json::to_value(&data).map_err(|err| {
            crate::store::StoreError::corrupt("phone_events", "data", phone_id, err.to_string())
        })?;
        let now = deps.clock.now_ms();
        let event_id = Uuid::now_v7();
        let deliveries = deps.webhooks.subscriptions.deliveries_for_phone(
            phone.scope(),
            kind,
            &phone.phone_number,
            event_id,
            now,
        );
        if deliveries.is_empty() {
            return Ok(deliveries);
        }
        health::record_event(
            &deps.db,
            event_id,
            phone_id,
            kind.as_str(),
            &data,
            &deliveries,
            now,
        )
        .await?;
        Ok::<_, crate::store::StoreError>(deliveries)
    }
    .await;
    match result {
        Ok(deliveries) if !deliveries.is_empty() => {
            if let Some(endpoints) = endpoints {
                endpoints.do_send(DeliveriesCreated { deliveries });
            }
        }
        Ok(_) => {}
        Err(err) => tracing::error!(%phone_id, error = %err, "phone alert not delivered"),
    }
}
