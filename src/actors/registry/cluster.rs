//! The Registry in a cluster (docs/architecture.md, "Cluster"): the notices of other nodes,
//! a resync after missed notices, lost leases, the phones online elsewhere, and what this
//! node tells the others about its phones.

use actix::prelude::*;
use uuid::Uuid;

use super::*;
use crate::cluster::{LeasesLost, Notice, Noticed, PhoneChange, PhonesOnline, Resync};
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
        let addr = self.directory.let_go(phone_id);
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
                                // Known here already, its transport may be connected: only
                                // the record changes.
                                act.directory.record_changed(record.clone());
                                act.attach_line(&record);
                                if change == PhoneChange::PaceChanged
                                    && let Some(addr) = act.directory.actor(phone_id)
                                {
                                    let pace = act.directory.pace_of(phone_id);
                                    addr.do_send(phone::SetPace { pace });
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
            // The campaigns' supervisor gets these (`Cluster::start_campaigns`).
            Notice::Campaign { .. } | Notice::CampaignMessages { .. } => {}
            Notice::Simulate { messages } => self.load_simulated(ctx, messages),
            // The webhook endpoints' supervisor takes these (`Cluster::route_endpoints`).
            Notice::Endpoint { .. } | Notice::Deliveries { .. } => {}
            Notice::Online { phone, node } if node != me => {
                // The phone moved: an actor of it still here lets go.
                if self.directory.online_elsewhere(phone, node) {
                    self.let_go(phone);
                }
            }
            Notice::Offline { phone, node } => {
                self.directory.offline_elsewhere(phone, node);
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
                        let owned: Vec<Uuid> = act.directory.ids();
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
                // Their supervisors stop their own (`Cluster::start_campaigns`,
                // `Cluster::route_endpoints`).
                LeaseKey::Campaign(_) | LeaseKey::WebhookEndpoint(_) | LeaseKey::Sweep(_) => {}
                LeaseKey::Phone(phone_id) => {
                    tracing::warn!(%phone_id, "phone lease lost: its actor stops here");
                    if let Some(addr) = self.directory.let_go(phone_id.as_uuid()) {
                        addr.do_send(phone::StopPhone);
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
        let unknown = self.directory.online_anywhere(msg.0, me);
        for phone in unknown {
            self.phone_changed(ctx, phone, PhoneChange::Paired);
        }
    }
}

impl Handler<phone::NotOwned> for Registry {
    type Result = ();

    fn handle(&mut self, msg: phone::NotOwned, _: &mut Self::Context) {
        // Its actor stops by itself.
        self.directory.let_go(msg.phone_id);
    }
}
