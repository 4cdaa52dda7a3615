//! The Registry in a cluster (docs/architecture.md, "Cluster"): the notices of other nodes,
//! a resync after missed notices, lost leases, the phones online elsewhere, and what this
//! node tells the others about its phones.

use actix::prelude::*;
use uuid::Uuid;

use super::*;
use crate::actors::campaign::CampaignChange;
use crate::actors::cluster::{LeasesLost, Notice, Noticed, PhoneChange, PhonesOnline, Resync};
use crate::actors::webhook_endpoint;
use crate::store::cluster::{LeaseKey, Sweep};

impl Registry {
    /// Tells the other nodes about a change of a phone's record made here.
    pub(super) fn announce(&self, phone: Uuid, change: PhoneChange) {
        if let Some(cluster) = &self.deps.cluster {
            cluster.tell(Notice::Phone {
                phone,
                origin: cluster.node(),
                change,
            });
        }
    }

    /// This node stops owning the phone: its actor stops (the session, if any, closes) and
    /// the lease is released once it stopped.
    pub(super) fn let_go(&mut self, phone_id: Uuid) {
        let Some(cluster) = self.deps.cluster.clone() else {
            return;
        };
        let addr = self.phones.get_mut(&phone_id).and_then(|e| {
            e.session = None;
            e.addr.take()
        });
        actix::spawn(async move {
            if let Some(addr) = addr {
                let _ = addr.send(phone::StopPhone).await;
            }
            cluster.release(LeaseKey::Phone(phone_id.into())).await;
        });
    }

    /// A phone changed on another node: read its record again and apply the change here.
    fn phone_changed(&mut self, ctx: &mut Context<Self>, phone_id: Uuid, change: PhoneChange) {
        match change {
            PhoneChange::Unpaired => self.unpaired(phone_id, false, ctx),
            PhoneChange::TokenRotated => self.token_rotated(phone_id),
            PhoneChange::Paired | PhoneChange::PaceChanged => {
                let db = self.deps.db.clone();
                ctx.spawn(
                    async move { phones::by_id(&db, phone_id).await }
                        .into_actor(self)
                        .map(move |result, act, _| match result {
                            Ok(Some(record)) => {
                                let pace = record.pace;
                                match act.phones.get_mut(&phone_id) {
                                    // Known here already (its transport may be connected):
                                    // only the record changes.
                                    Some(entry) => entry.record = record,
                                    None => act.insert(record),
                                }
                                if change == PhoneChange::PaceChanged
                                    && let Some(entry) = act.phones.get(&phone_id)
                                    && let Some(addr) = &entry.addr
                                {
                                    let pace = pace.unwrap_or(act.deps.settings.pace);
                                    addr.do_send(phone::SetPace { pace: Some(pace) });
                                }
                            }
                            Ok(None) => {}
                            Err(err) => {
                                tracing::warn!(phone_id = %phone_id, error = %err, "phone change of another node not read")
                            }
                        }),
                );
            }
        }
    }
}

impl Handler<Noticed> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Noticed, ctx: &mut Self::Context) {
        let Some(me) = self.deps.cluster.as_ref().map(|c| c.node()) else {
            return;
        };
        tracing::debug!(notice = ?msg.0, "cluster notice");
        match msg.0 {
            Notice::Enqueue { phone, messages } => {
                if let Some(addr) = self.owned_addr(phone) {
                    addr.do_send(phone::LoadQueued { ids: messages });
                }
            }
            Notice::Release { phone, node } if node == me => self.let_go(phone),
            Notice::Release { .. } => {}
            Notice::Campaign { campaign } => {
                if self.runs_campaign(campaign) {
                    self.run_campaign(campaign, ctx);
                }
            }
            Notice::CampaignMessages { campaign, changes } => {
                if self.runs_campaign(campaign) {
                    self.campaigns.changed(
                        changes
                            .into_iter()
                            .map(|(message, status)| CampaignChange {
                                campaign,
                                message,
                                status,
                            })
                            .collect(),
                    );
                }
            }
            Notice::Simulate { messages } => self.load_simulated(ctx, messages),
            Notice::Endpoint { endpoint } => {
                let (db, subscriptions) = (
                    self.deps.db.clone(),
                    self.deps.webhooks.subscriptions.clone(),
                );
                actix::spawn(async move {
                    match crate::store::webhooks::find(&db, endpoint).await {
                        Ok(Some(record)) => subscriptions.upsert(&record),
                        Ok(None) => subscriptions.remove(endpoint),
                        Err(err) => {
                            tracing::warn!(endpoint_id = %endpoint, error = %err, "subscriptions not refreshed")
                        }
                    }
                });
                if let Some(addr) = self.webhooks.get(endpoint) {
                    addr.do_send(webhook_endpoint::Reload);
                    addr.do_send(webhook_endpoint::LoadPending);
                }
            }
            Notice::Deliveries {
                endpoint,
                deliveries,
            } => {
                if let Some(addr) = self.webhooks.get(endpoint) {
                    match deliveries {
                        Some(ids) => addr.do_send(webhook_endpoint::LoadDeliveries { ids }),
                        None => addr.do_send(webhook_endpoint::LoadPending),
                    }
                }
            }
            Notice::Online { phone, node } if node != me => {
                self.remote_online.insert(phone, node);
                // The phone moved: an actor of it still here lets go.
                if self.phones.get(&phone).is_some_and(|e| e.addr.is_some()) {
                    self.let_go(phone);
                }
            }
            Notice::Offline { phone, node } => {
                if self.remote_online.get(&phone) == Some(&node) {
                    self.remote_online.remove(&phone);
                }
            }
            Notice::Online { .. } => {}
            Notice::Phone {
                phone,
                origin,
                change,
            } if origin != me => self.phone_changed(ctx, phone, change),
            Notice::Phone { .. } => {}
        }
    }
}

impl Handler<Resync> for Registry {
    type Result = ();

    /// Notices may have been missed: every phone owned here loads its queued messages again,
    /// and so do the simulated phones when test mode runs here.
    fn handle(&mut self, _: Resync, ctx: &mut Self::Context) {
        self.resync(ctx);
    }
}

impl Registry {
    /// Every phone owned here loads its queued messages again, and so do the simulated phones
    /// when test mode runs here. One read of the queued messages names what waits for
    /// which phone, and only phones with queued messages read them (by id, [`NOTICE_IDS`] a
    /// time): with thousands of phones a node leaving costs a few statements, not one per
    /// phone at once, which would hold the pool (and the heartbeat behind it).
    pub(super) fn resync(&mut self, ctx: &mut Context<Self>) {
        self.load_simulated(ctx, None);
        let db = self.deps.db.clone();
        ctx.spawn(
            async move { crate::store::messages::queued_live_by_phone(&db).await }
                .into_actor(self)
                .map(|result, act, _| match result {
                    Ok(by_phone) => {
                        for (phone, ids) in by_phone {
                            let Some(addr) = act.owned_addr(phone) else {
                                continue;
                            };
                            for chunk in ids.chunks(NOTICE_IDS) {
                                addr.do_send(phone::LoadQueued {
                                    ids: Some(chunk.to_vec()),
                                });
                            }
                        }
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "queued messages not read in one pass; each phone reads its own");
                        let owned: Vec<Uuid> = act.phones.keys().copied().collect();
                        for phone in owned {
                            if let Some(addr) = act.owned_addr(phone) {
                                addr.do_send(phone::LoadQueued { ids: None });
                            }
                        }
                    }
                }),
        );
    }
}

impl Handler<LeasesLost> for Registry {
    type Result = ();

    fn handle(&mut self, msg: LeasesLost, _: &mut Self::Context) {
        // Stop acting at once: the new owner rebuilds everything from the database.
        for lease in msg.0 {
            match lease.key {
                LeaseKey::Sweep(Sweep::TestMode) => self.stop_test_mode(),
                LeaseKey::Campaign(id) => {
                    tracing::warn!(campaign_id = %id, "campaign lease lost: its actor stops here");
                    self.campaigns.finished(id);
                }
                LeaseKey::WebhookEndpoint(id) => {
                    tracing::warn!(endpoint_id = %id, "endpoint lease lost: its actor stops here");
                    self.webhooks.stop(id);
                }
                LeaseKey::Sweep(_) => {}
                LeaseKey::Phone(phone_id) => {
                    tracing::warn!(%phone_id, "phone lease lost: its actor stops here");
                    if let Some(entry) = self.phones.get_mut(&phone_id.as_uuid()) {
                        entry.session = None;
                        if let Some(addr) = entry.addr.take() {
                            addr.do_send(phone::StopPhone);
                        }
                    }
                }
            }
        }
    }
}

impl Handler<PhonesOnline> for Registry {
    type Result = ();

    /// The phones online anywhere, read every heartbeat. One online elsewhere that this node
    /// does not know was paired while its `paired` notice could not reach this node (sent
    /// before this node listened, as when nodes start together): it is read now, as the notice
    /// would have had it read, so the API shows it and sends here route to it.
    fn handle(&mut self, msg: PhonesOnline, ctx: &mut Self::Context) {
        let Some(me) = self.deps.cluster.as_ref().map(|c| c.node()) else {
            return;
        };
        self.remote_online = msg.0.into_iter().filter(|(_, node)| *node != me).collect();
        let unknown: Vec<Uuid> = self
            .remote_online
            .keys()
            .filter(|phone| !self.phones.contains_key(phone))
            .copied()
            .collect();
        for phone in unknown {
            self.phone_changed(ctx, phone, PhoneChange::Paired);
        }
    }
}

impl Handler<phone::NotOwned> for Registry {
    type Result = ();

    fn handle(&mut self, msg: phone::NotOwned, _: &mut Self::Context) {
        if let Some(entry) = self.phones.get_mut(&msg.phone_id) {
            entry.session = None;
            entry.addr = None;
        }
    }
}
