//! The Registry's message handlers, all of them: its own messages (declared in `mod.rs`), and
//! those declared beside the actors they concern: `campaign::{Wake, CampaignChanges,
//! Finished}` and `webhook_endpoint::{DeliveriesCreated, EndpointChanged, EndpointDeleted}`.

use std::collections::HashMap;

use actix::prelude::*;
use uuid::Uuid;

use super::*;
use crate::actors::campaign::{self, CampaignChanges, Finished, Wake};
use crate::actors::cluster::{LeasesLost, Notice, Noticed, PhoneChange, PhonesOnline, Resync};
use crate::actors::webhook_endpoint::{
    self, Deliver, DeliveriesCreated, EndpointChanged, EndpointDeleted,
};
use crate::store::cluster::{LeaseKind, Sweep};
use crate::store::webhooks::PendingDelivery;

/// Most message changes a `campaign_messages` notice carries (about 60 bytes each: the
/// payload stays far below PostgreSQL's 8,000 bytes).
const CAMPAIGN_NOTICE_CHANGES: usize = 64;

impl Handler<Route> for Registry {
    type Result = Result<Option<Routed>, RouteError>;

    fn handle(&mut self, msg: Route, _: &mut Self::Context) -> Self::Result {
        let online = match msg.device_id {
            Some(device) => {
                let entry = self.phones.get(&device).ok_or(RouteError::UnknownDevice)?;
                if entry.record.workspace_id != msg.scope.workspace_id
                    || entry.record.mode != msg.scope.mode
                {
                    return Err(RouteError::UnknownDevice);
                }
                if entry.record.phone_number != msg.from_number {
                    return Err(RouteError::NumberMismatch);
                }
                self.is_online(device).then_some(device)
            }
            None if msg.scope.mode == Mode::Test => None,
            None => self.online_for(msg.scope, &msg.from_number),
        };
        Ok(online.and_then(|device_id| {
            let local = self
                .phones
                .get(&device_id)
                .is_some_and(|e| e.session.is_some());
            if local {
                self.phone_addr(device_id).map(|phone| Routed {
                    device_id,
                    phone: Some(phone),
                })
            } else {
                // Online on another node: the send takes the queue, and that node is told.
                Some(Routed {
                    device_id,
                    phone: None,
                })
            }
        }))
    }
}

impl Handler<Enqueue> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Enqueue, _: &mut Self::Context) {
        self.deliver(msg.messages);
    }
}

impl Handler<Cancel> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Cancel, _: &mut Self::Context) {
        self.forget(msg.message_id, msg.device_id, msg.scope, &msg.from_number);
    }
}

impl Handler<Connected> for Registry {
    type Result = ResponseActFuture<Self, Option<Addr<Phone>>>;

    fn handle(&mut self, msg: Connected, _: &mut Self::Context) -> Self::Result {
        if self.phones.contains_key(&msg.phone_id) || self.deps.cluster.is_none() {
            return Box::pin(actix::fut::ready(self.connected(msg)));
        }
        // Paired on another node moments ago (its notice may not have arrived yet).
        let db = self.deps.db.clone();
        let phone_id = msg.phone_id;
        Box::pin(
            async move { phones::by_id(&db, phone_id).await }
                .into_actor(self)
                .map(move |found, act, _| {
                    if let Ok(Some(record)) = found
                        && !act.phones.contains_key(&record.id)
                    {
                        act.insert(record);
                    }
                    act.connected(msg)
                }),
        )
    }
}

impl Registry {
    fn connected(&mut self, msg: Connected) -> Option<Addr<Phone>> {
        let addr = self.phone_addr(msg.phone_id)?;
        let now = self.deps.clock.now_ms();
        let entry = self.phones.get_mut(&msg.phone_id)?;
        let came_online = entry.session.is_none();
        entry.session = Some(msg.link.session_id);
        entry.last_seen_at = Some(now);
        let scope = entry.record.scope();
        addr.do_send(phone::Attach { link: msg.link });
        if came_online {
            self.publish_phone_status(scope, msg.phone_id, true, now);
        }
        Some(addr)
    }
}

impl Handler<ConnectIfIdle> for Registry {
    type Result = ResponseActFuture<Self, Result<Addr<Phone>, NotAttached>>;

    fn handle(&mut self, msg: ConnectIfIdle, ctx: &mut Self::Context) -> Self::Result {
        if self
            .phones
            .get(&msg.phone_id)
            .is_some_and(|entry| entry.session.is_some())
        {
            let busy = self
                .phone_addr(msg.phone_id)
                .map_or(Err(NotAttached::NotPaired), |addr| {
                    Err(NotAttached::Busy(addr))
                });
            return Box::pin(actix::fut::ready(busy));
        }
        // No transport is current: connect as a new one would.
        let connected = Connected {
            phone_id: msg.phone_id,
            link: msg.link,
        };
        Box::pin(
            <Self as Handler<Connected>>::handle(self, connected, ctx)
                .map(|phone, _, _| phone.ok_or(NotAttached::NotPaired)),
        )
    }
}

impl Handler<Disconnected> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Disconnected, ctx: &mut Self::Context) {
        let now = self.deps.clock.now_ms();
        let Some(entry) = self.phones.get_mut(&msg.phone_id) else {
            return;
        };
        if entry.session == Some(msg.session_id) {
            entry.session = None;
        }
        entry.last_seen_at = Some(now);
        let went_offline = entry.session.is_none();
        let addr = entry.addr.clone();
        let (scope, number) = (entry.record.scope(), entry.record.phone_number.clone());
        if let Some(addr) = &addr {
            addr.do_send(phone::Detach {
                session_id: msg.session_id,
            });
        }
        if went_offline {
            self.publish_phone_status(scope, msg.phone_id, false, now);
        }
        if went_offline && let Some(addr) = addr {
            let online: Vec<Uuid> = self
                .alternatives(scope, &number, msg.phone_id)
                .into_iter()
                .filter(|id| self.phones.get(id).is_some_and(|e| e.session.is_some()))
                .collect();
            if !online.is_empty() {
                self.reroute_from(ctx, addr, msg.phone_id, online, false);
            }
        }
        if went_offline && let Some(cluster) = self.deps.cluster.clone() {
            cluster.tell(crate::actors::cluster::Notice::Offline {
                phone: msg.phone_id,
                node: cluster.node(),
            });
            let phone_id = msg.phone_id;
            ctx.run_later(OFFLINE_GRACE, move |act, _| {
                if act
                    .phones
                    .get(&phone_id)
                    .is_some_and(|e| e.session.is_none())
                {
                    act.let_go(phone_id);
                }
            });
        }
        let db = self.deps.db.clone();
        let id = msg.phone_id;
        actix::spawn(async move {
            if let Err(err) = phones::touch(&db, id, now).await {
                tracing::warn!(phone_id = %id, error = %err, "last_seen_at not stored");
            }
        });
    }
}

impl Handler<Paired> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Paired, _: &mut Self::Context) {
        self.announce(msg.phone.id, PhoneChange::Paired);
        self.insert(msg.phone);
    }
}

impl Handler<PaceChanged> for Registry {
    type Result = ();

    fn handle(&mut self, msg: PaceChanged, _: &mut Self::Context) {
        self.announce(msg.phone_id, PhoneChange::PaceChanged);
        let Some(entry) = self.phones.get_mut(&msg.phone_id) else {
            return;
        };
        entry.record.pace = msg.pace;
        let pace = self
            .phones
            .get(&msg.phone_id)
            .map(|e| self.pace_of(&e.record));
        if let Some(entry) = self.phones.get(&msg.phone_id)
            && let Some(addr) = &entry.addr
        {
            addr.do_send(phone::SetPace { pace });
        }
    }
}

impl Handler<Unpaired> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Unpaired, ctx: &mut Self::Context) {
        self.announce(msg.phone_id, PhoneChange::Unpaired);
        self.unpaired(msg.phone_id, true, ctx);
    }
}

impl Registry {
    /// Forgets an unpaired phone: its actor (if it runs here) reroutes or fails its queue. Without
    /// an actor, the node where it was unpaired (`origin`) fails its queued messages, unless
    /// another node has it online (that node's actor does).
    fn unpaired(&mut self, phone_id: Uuid, origin: bool, ctx: &mut Context<Self>) {
        let msg = Unpaired { phone_id };
        let online_elsewhere = self.remote_online.remove(&phone_id).is_some();
        let Some(entry) = self.phones.remove(&msg.phone_id) else {
            return;
        };
        let key = Self::number_key(entry.record.scope(), &entry.record.phone_number);
        if let Some(ids) = self.by_number.get_mut(&key) {
            ids.retain(|id| *id != msg.phone_id);
        }
        match entry.addr {
            Some(addr) => {
                // Unpinned messages move to another phone with the number; pinned ones fail.
                let targets = self.alternatives(
                    entry.record.scope(),
                    &entry.record.phone_number,
                    msg.phone_id,
                );
                if !targets.is_empty() {
                    self.reroute_from(ctx, addr.clone(), msg.phone_id, targets, true);
                }
                addr.do_send(phone::Unpair { stop: true });
            }
            None if !origin || online_elsewhere => {}
            None => {
                // No actor: fail its queued messages straight from the database.
                let deps = self.deps.clone();
                let phone_id = msg.phone_id;
                actix::spawn(async move {
                    let Ok(pending) = messages::unfinished_outbound(&deps.db).await else {
                        return;
                    };
                    for m in pending
                        .into_iter()
                        .filter(|m| m.device_id == Some(phone_id))
                    {
                        let transition =
                            Transition::unpair(m.id).with_detail("the phone was unpaired");
                        let _ = deps.writer.transition(transition).await;
                    }
                });
            }
        }
    }
}

impl Handler<TokenRotated> for Registry {
    type Result = ();

    fn handle(&mut self, msg: TokenRotated, _: &mut Self::Context) {
        self.announce(msg.phone_id, PhoneChange::TokenRotated);
        self.token_rotated(msg.phone_id);
    }
}

impl Registry {
    fn token_rotated(&mut self, phone_id: Uuid) {
        let msg = TokenRotated { phone_id };
        if let Some(entry) = self.phones.get_mut(&msg.phone_id) {
            entry.session = None;
            if let Some(addr) = &entry.addr {
                addr.do_send(phone::Unpair { stop: false });
            }
        }
    }
}

impl Handler<GetPhoneStates> for Registry {
    type Result = MessageResult<GetPhoneStates>;

    fn handle(&mut self, msg: GetPhoneStates, _: &mut Self::Context) -> Self::Result {
        MessageResult(
            msg.ids
                .into_iter()
                .filter_map(|id| {
                    self.phones.get(&id).map(|e| {
                        (
                            id,
                            PhoneState {
                                online: e.session.is_some() || self.remote_online.contains_key(&id),
                                last_seen_at: e.last_seen_at,
                            },
                        )
                    })
                })
                .collect(),
        )
    }
}

impl Handler<CountOnline> for Registry {
    type Result = usize;

    fn handle(&mut self, _: CountOnline, _: &mut Self::Context) -> usize {
        self.phones.values().filter(|e| e.session.is_some()).count()
    }
}

impl Handler<Shutdown> for Registry {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        if let Some(cluster) = self.deps.cluster.clone() {
            // Handed back first, so other nodes take over at once, not after expiry.
            actix::spawn(async move { cluster.hand_back().await });
        }
        for (_, entry) in self.phones.drain() {
            if let Some(addr) = entry.addr {
                addr.do_send(phone::StopPhone);
            }
        }
        for (_, addr) in self.simulated.drain() {
            addr.do_send(phone::StopPhone);
        }
        self.by_number.clear();
        self.webhooks.stop_all();
        self.campaigns.stop_all();
        ctx.stop();
    }
}

impl Handler<Seen> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Seen, _: &mut Self::Context) {
        let now = self.deps.clock.now_ms();
        if let Some(entry) = self.phones.get_mut(&msg.phone_id) {
            entry.last_seen_at = Some(now);
        }
    }
}

// Campaigns.

impl Handler<Wake> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Wake, ctx: &mut Self::Context) {
        self.wake_campaign(ctx, msg.id);
    }
}

impl Handler<CampaignChanges> for Registry {
    type Result = ();

    fn handle(&mut self, msg: CampaignChanges, _: &mut Self::Context) {
        let Some(cluster) = &self.deps.cluster else {
            self.campaigns.changed(msg.0);
            return;
        };
        // The changes of campaigns run by other nodes go to their owners (`campaign_messages`
        // notices), so they follow their messages as promptly as on one node.
        let (here, elsewhere): (Vec<_>, Vec<_>) = msg.0.into_iter().partition(|(campaign, ..)| {
            cluster
                .lease(LeaseKind::Campaign, &campaign.to_string())
                .is_some()
        });
        let mut per_campaign: HashMap<Uuid, Vec<(Uuid, MessageStatus)>> = HashMap::new();
        for (campaign, message, status) in elsewhere {
            per_campaign
                .entry(campaign)
                .or_default()
                .push((message, status));
        }
        for (campaign, changes) in per_campaign {
            for chunk in changes.chunks(CAMPAIGN_NOTICE_CHANGES) {
                cluster.tell(Notice::CampaignMessages {
                    campaign,
                    changes: chunk.to_vec(),
                });
            }
        }
        self.campaigns.changed(here);
    }
}

impl Handler<Finished> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Finished, _: &mut Self::Context) {
        self.campaigns.finished(msg.id);
        if let Some(cluster) = self.deps.cluster.clone() {
            let key = msg.id.to_string();
            actix::spawn(async move { cluster.release(LeaseKind::Campaign, &key).await });
        }
    }
}

impl Registry {
    /// Starts the campaign's actor if needed and makes it read the campaign again. In a
    /// cluster the campaign runs on the node holding its lease: this node takes the lease when
    /// it is free, else tells its owner (a `campaign` notice).
    pub(crate) fn wake_campaign(&mut self, ctx: &mut Context<Self>, id: Uuid) {
        let Some(cluster) = self.deps.cluster.clone() else {
            self.run_campaign(id, ctx);
            return;
        };
        let key = id.to_string();
        if cluster.lease(LeaseKind::Campaign, &key).is_some() {
            self.run_campaign(id, ctx);
            return;
        }
        ctx.spawn(
            async move {
                let owned = cluster.acquire(LeaseKind::Campaign, &key).await.is_some();
                if !owned {
                    cluster.notify(&Notice::Campaign { campaign: id }).await;
                }
                owned
            }
            .into_actor(self)
            .map(move |owned, act, ctx| {
                if owned {
                    act.run_campaign(id, ctx);
                }
            }),
        );
    }

    fn run_campaign(&mut self, id: Uuid, ctx: &mut Context<Self>) {
        let deps = self.deps().clone();
        let addr = self.campaigns.addr(&deps, ctx.address(), id);
        addr.do_send(campaign::Reload);
    }
}

// Webhook endpoints.

impl Handler<DeliveriesCreated> for Registry {
    type Result = ();

    fn handle(&mut self, msg: DeliveriesCreated, ctx: &mut Self::Context) {
        let mut per_endpoint: HashMap<Uuid, Vec<PendingDelivery>> = HashMap::new();
        for d in msg.deliveries {
            per_endpoint.entry(d.endpoint_id).or_default().push(d);
        }
        for (endpoint_id, deliveries) in per_endpoint {
            self.ensure_endpoint(ctx, endpoint_id, Some(deliveries));
        }
    }
}

impl Handler<EndpointChanged> for Registry {
    type Result = ();

    fn handle(&mut self, msg: EndpointChanged, ctx: &mut Self::Context) {
        let deps = self.deps().clone();
        if let Some(cluster) = &self.deps.cluster {
            // Every node refreshes its subscription index; the node running the endpoint's
            // actor reads the endpoint again.
            cluster.tell(Notice::Endpoint {
                endpoint: msg.endpoint_id,
            });
        }
        if self.deps.cluster.is_some() && !self.webhooks.running(msg.endpoint_id) {
            // The retried delivery, now due: to the owner, or this node takes the endpoint.
            if let Some(delivery) = msg.retry {
                self.ensure_endpoint(ctx, msg.endpoint_id, Some(vec![delivery]));
            }
            return;
        }
        match msg.retry {
            Some(delivery) => {
                let addr = self.webhooks.addr(&deps, msg.endpoint_id);
                addr.do_send(webhook_endpoint::Reload);
                addr.do_send(Deliver {
                    deliveries: vec![delivery],
                });
            }
            None => {
                self.webhooks.reload(msg.endpoint_id);
            }
        }
    }
}

impl Handler<EndpointDeleted> for Registry {
    type Result = ();

    fn handle(&mut self, msg: EndpointDeleted, _: &mut Self::Context) {
        self.webhooks.stop(msg.endpoint_id);
        if let Some(cluster) = &self.deps.cluster {
            cluster.tell(Notice::Endpoint {
                endpoint: msg.endpoint_id,
            });
            let (cluster, key) = (cluster.clone(), msg.endpoint_id.to_string());
            actix::spawn(async move { cluster.release(LeaseKind::WebhookEndpoint, &key).await });
        }
    }
}

impl Registry {
    /// Hands `deliveries` (None: those pending in the database) to the endpoint's actor. In a
    /// cluster the actor runs on the node holding the endpoint's lease: this node takes the
    /// lease when it is free, else tells the owner (an `endpoint` notice), which reads the
    /// pending deliveries from the database.
    pub(crate) fn ensure_endpoint(
        &mut self,
        ctx: &mut Context<Self>,
        endpoint_id: Uuid,
        deliveries: Option<Vec<PendingDelivery>>,
    ) {
        let deps = self.deps().clone();
        let Some(cluster) = deps.cluster.clone() else {
            let addr = self.webhooks.addr(&deps, endpoint_id);
            if let Some(deliveries) = deliveries {
                addr.do_send(Deliver { deliveries });
            }
            return;
        };
        let key = endpoint_id.to_string();
        if cluster.lease(LeaseKind::WebhookEndpoint, &key).is_some() {
            let addr = self.webhooks.addr(&deps, endpoint_id);
            if let Some(deliveries) = deliveries {
                addr.do_send(Deliver { deliveries });
            }
            return;
        }
        ctx.spawn(
            async move {
                let owned = cluster
                    .acquire(LeaseKind::WebhookEndpoint, &key)
                    .await
                    .is_some();
                if !owned {
                    cluster
                        .notify(&Notice::Endpoint {
                            endpoint: endpoint_id,
                        })
                        .await;
                }
                owned
            }
            .into_actor(self)
            .map(move |owned, act, _| {
                if owned {
                    // A new actor loads every pending delivery when it starts.
                    let deps = act.deps().clone();
                    let addr = act.webhooks.addr(&deps, endpoint_id);
                    if let Some(deliveries) = deliveries {
                        addr.do_send(Deliver { deliveries });
                    }
                }
            }),
        );
    }

    /// Takes over, in a cluster, the live campaigns and the webhook endpoints with pending
    /// deliveries that no node holds (their node died or stopped): one read of each list and of
    /// the live leases, then a lease attempt only for the free ones.
    pub(super) fn take_over(&mut self, ctx: &mut Context<Self>) {
        let Some(cluster) = self.deps.cluster.clone() else {
            return;
        };
        let db = self.deps.db.clone();
        ctx.spawn(
            async move {
                let campaigns = crate::store::campaigns::live(&db).await?;
                let endpoints = crate::store::webhooks::endpoints_with_pending(&db).await?;
                let held = |kind| {
                    let cluster = cluster.clone();
                    async move { cluster.live_keys(kind).await.unwrap_or_default() }
                };
                let campaign_leases = held(LeaseKind::Campaign).await;
                let endpoint_leases = held(LeaseKind::WebhookEndpoint).await;
                let mut taken = (Vec::new(), Vec::new());
                for id in campaigns {
                    let key = id.to_string();
                    if !campaign_leases.contains(&key)
                        && cluster.acquire(LeaseKind::Campaign, &key).await.is_some()
                    {
                        taken.0.push(id);
                    }
                }
                for id in endpoints {
                    let key = id.to_string();
                    if !endpoint_leases.contains(&key)
                        && cluster
                            .acquire(LeaseKind::WebhookEndpoint, &key)
                            .await
                            .is_some()
                    {
                        taken.1.push(id);
                    }
                }
                Ok::<_, crate::store::StoreError>(taken)
            }
            .into_actor(self)
            .map(|result, act, ctx| match result {
                Ok((campaigns, endpoints)) => {
                    if !campaigns.is_empty() || !endpoints.is_empty() {
                        tracing::info!(
                            campaigns = campaigns.len(),
                            endpoints = endpoints.len(),
                            "took over work no node held"
                        );
                    }
                    for id in campaigns {
                        act.run_campaign(id, ctx);
                    }
                    let deps = act.deps().clone();
                    for id in endpoints {
                        act.webhooks.addr(&deps, id);
                    }
                }
                Err(err) => tracing::warn!(error = %err, "take-over scan failed"),
            }),
        );
    }
}

// The cluster (docs/architecture.md, "Cluster").

impl Registry {
    /// Tells the other nodes about a change of a phone's record made here.
    fn announce(&self, phone: Uuid, change: PhoneChange) {
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
            cluster
                .release(
                    crate::store::cluster::LeaseKind::Phone,
                    &phone_id.to_string(),
                )
                .await;
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
                let key = campaign.to_string();
                if self
                    .deps
                    .cluster
                    .as_ref()
                    .is_some_and(|c| c.lease(LeaseKind::Campaign, &key).is_some())
                {
                    self.run_campaign(campaign, ctx);
                }
            }
            Notice::CampaignMessages { campaign, changes } => {
                let key = campaign.to_string();
                if self
                    .deps
                    .cluster
                    .as_ref()
                    .is_some_and(|c| c.lease(LeaseKind::Campaign, &key).is_some())
                {
                    self.campaigns.changed(
                        changes
                            .into_iter()
                            .map(|(message, status)| (campaign, message, status))
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
        self.load_simulated(ctx, None);
        let owned: Vec<Uuid> = self.phones.keys().copied().collect();
        for phone in owned {
            if let Some(addr) = self.owned_addr(phone) {
                addr.do_send(phone::LoadQueued { ids: None });
            }
        }
    }
}

impl Handler<LeasesLost> for Registry {
    type Result = ();

    fn handle(&mut self, msg: LeasesLost, _: &mut Self::Context) {
        // Stop acting at once: the new owner rebuilds everything from the database.
        for lease in msg.0 {
            if lease.kind == LeaseKind::Sweep && lease.key == Sweep::TestMode.as_str() {
                self.stop_test_mode();
                continue;
            }
            let Ok(id) = lease.key.parse::<Uuid>() else {
                continue;
            };
            match lease.kind {
                LeaseKind::Campaign => {
                    tracing::warn!(campaign_id = %id, "campaign lease lost: its actor stops here");
                    self.campaigns.finished(id);
                    continue;
                }
                LeaseKind::WebhookEndpoint => {
                    tracing::warn!(endpoint_id = %id, "endpoint lease lost: its actor stops here");
                    self.webhooks.stop(id);
                    continue;
                }
                LeaseKind::Phone | LeaseKind::Sweep => {}
            }
            if lease.kind == crate::store::cluster::LeaseKind::Phone
                && let Ok(phone_id) = lease.key.parse::<Uuid>()
            {
                tracing::warn!(phone_id = %phone_id, "phone lease lost: its actor stops here");
                if let Some(entry) = self.phones.get_mut(&phone_id) {
                    entry.session = None;
                    if let Some(addr) = entry.addr.take() {
                        addr.do_send(phone::StopPhone);
                    }
                }
            }
        }
    }
}

impl Handler<PhonesOnline> for Registry {
    type Result = ();

    fn handle(&mut self, msg: PhonesOnline, _: &mut Self::Context) {
        let Some(me) = self.deps.cluster.as_ref().map(|c| c.node()) else {
            return;
        };
        self.remote_online = msg.0.into_iter().filter(|(_, node)| *node != me).collect();
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
