//! This node's part in a cluster of `smsgw serve` nodes on one PostgreSQL database
//! (docs/architecture.md, "Cluster"): its row in `cluster_nodes`, the leases it holds, the
//! heartbeat that renews them all in one statement, and the notification carrier
//! (`LISTEN`/`NOTIFY` on `smsgw_cluster`) that wakes the node owning a phone.
//!
//! A single node on SQLite has no `Cluster` (`Deps::cluster` is None) and does none of this.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use actix::prelude::*;
use sea_orm::DatabaseConnection;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::ClusterSettings;
use crate::domain::ids::{CampaignId, EndpointId, MessageId};
use crate::domain::status::MessageStatus;
use crate::store::StoreError;
use crate::store::cluster::{self as leases, Lease, LeaseKey, LeaseKind, Sweep};

/// What nodes tell each other (small JSON on the `smsgw_cluster` channel; messages themselves
/// are read from the database).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Notice {
    /// New `queued` messages of `phone` were stored: its owner loads them (those named, or
    /// every queued one when None).
    Enqueue {
        phone: Uuid,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        messages: Option<Vec<Uuid>>,
    },
    /// `node` holds the lease of `phone`, whose transport now connected to another node: let go.
    Release { phone: Uuid, node: Uuid },
    /// `phone` is online on `node` (it took the phone's lease with a live transport).
    Online { phone: Uuid, node: Uuid },
    /// `phone` is no longer online on `node`.
    Offline { phone: Uuid, node: Uuid },
    /// A campaign changed (API) on a node that does not run it: its owner reloads it.
    Campaign { campaign: CampaignId },
    /// Messages of `campaign` changed (message id, new status), committed by the writer of a
    /// node that does not run it: its owner takes them as its own writer's.
    CampaignMessages {
        campaign: CampaignId,
        changes: Vec<(MessageId, MessageStatus)>,
    },
    /// New test-mode messages were stored on a node that does not run test mode: the node
    /// that does (the `test_mode` sweep lease) loads them (those named, or every queued one
    /// when None).
    Simulate {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        messages: Option<Vec<Uuid>>,
    },
    /// A webhook endpoint was created, changed or deleted: every node refreshes its
    /// subscription index, and its owner reads the endpoint and its pending deliveries again.
    Endpoint { endpoint: EndpointId },
    /// A node that does not run the endpoint stored deliveries for it: its owner reads those
    /// named (≤ 64, by id), or every pending one when None (one such read at a time, see
    /// `webhook_endpoint`); nobody else does anything.
    Deliveries {
        endpoint: EndpointId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deliveries: Option<Vec<Uuid>>,
    },
    /// A phone was paired, edited, unpaired or had its token rotated on node `origin`.
    Phone {
        phone: Uuid,
        origin: Uuid,
        change: PhoneChange,
    },
}

impl Notice {
    /// Whether the notice concerns webhook endpoints: those go to the endpoints' supervisor
    /// ([`Cluster::route_endpoints`]), every other to the Registry.
    pub fn of_endpoints(&self) -> bool {
        matches!(self, Notice::Endpoint { .. } | Notice::Deliveries { .. })
    }
}

/// What happened to a phone's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhoneChange {
    Paired,
    PaceChanged,
    Unpaired,
    TokenRotated,
}

/// A notice arrived from the carrier (this node's own included).
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct Noticed(pub Notice);

/// The carrier reconnected: notices may have been missed, read the state again.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct Resync;

/// Leases this node held and no longer holds (a renewal failed or came too late, or another
/// node took them): stop acting on them at once.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct LeasesLost(pub Vec<Lease>);

/// The phones online anywhere in the cluster (their live phone leases), read every heartbeat.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct PhonesOnline(pub HashMap<Uuid, Uuid>);

/// Where the cluster's events go (the Registry), set once it started.
#[derive(Clone)]
struct Listeners {
    noticed: Recipient<Noticed>,
    resync: Recipient<Resync>,
    lost: Recipient<LeasesLost>,
    online: Recipient<PhonesOnline>,
}

/// Where the cluster's events about webhook endpoints go (their supervisor), set once it
/// started: endpoint notices, and the endpoint leases lost.
#[derive(Clone)]
struct EndpointListeners {
    noticed: Recipient<Noticed>,
    lost: Recipient<LeasesLost>,
}

/// This node in the cluster; cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    node: Uuid,
    address: String,
    db: DatabaseConnection,
    url: String,
    settings: ClusterSettings,
    /// Each lease this node holds, with when it was (last) taken: a renewal started before
    /// that cannot have covered it, so it is not counted lost by that renewal.
    held: Mutex<HashMap<LeaseKey, (Lease, Instant)>>,
    /// The leases being acquired now, with how many acquires of each run: one the database
    /// already gives this node while its acquire has not answered yet is not a stray.
    acquiring: Mutex<HashMap<LeaseKey, usize>>,
    /// Phone leases dropped because renewals failed for too long (the database away): not
    /// held (every fenced write on them is refused), but the phones' sessions stay open and
    /// the leases are taken again once the database answers (docs/deploy.md, "Bad days").
    /// Released ones leave; one another node took meanwhile is lost then.
    suspended: Mutex<HashMap<LeaseKey, Lease>>,
    /// The last renewal succeeded in time (readiness).
    renewing: AtomicBool,
    /// Set by a graceful stop: no new lease is taken.
    stopping: AtomicBool,
    listeners: OnceLock<Listeners>,
    /// Where the endpoints' notices and lost leases go (the `WebhookEndpoints` supervisor).
    endpoints: OnceLock<EndpointListeners>,
    /// Where the campaigns' notices and lost leases go (the `Campaigns` supervisor).
    campaigns: OnceLock<CampaignListeners>,
}

/// Where the campaigns' events go (the `Campaigns` supervisor), set once it started.
#[derive(Clone)]
struct CampaignListeners {
    noticed: Recipient<Noticed>,
    lost: Recipient<LeasesLost>,
}

impl Cluster {
    /// This node's part in a cluster: every node on PostgreSQL joins, advertising
    /// `cluster.advertise_address` or else `listening` (the address it listens on); a single
    /// node on SQLite does no cluster work at all and has no `Cluster`.
    pub async fn join_if_shared(
        db: &DatabaseConnection,
        settings: &crate::config::Settings,
        listening: std::net::SocketAddr,
    ) -> Result<Option<Cluster>, StoreError> {
        if crate::store::is_sqlite(db) {
            return Ok(None);
        }
        let advertised =
            (settings.cluster.advertise_address.clone()).unwrap_or_else(|| listening.to_string());
        let cluster = Cluster::join(
            db.clone(),
            &settings.database.url,
            advertised,
            settings.cluster.clone(),
        )
        .await?;
        Ok(Some(cluster))
    }

    /// Registers this node (a fresh id) in `cluster_nodes`.
    pub async fn join(
        db: DatabaseConnection,
        url: &str,
        address: String,
        settings: ClusterSettings,
    ) -> Result<Cluster, StoreError> {
        let node = Uuid::new_v4();
        leases::register_node(&db, node, &address).await?;
        tracing::info!(node = %node, %address, "joined the cluster");
        let cluster = Cluster {
            inner: Arc::new(Inner {
                node,
                address,
                db,
                url: url.to_string(),
                settings,
                held: Mutex::new(HashMap::new()),
                acquiring: Mutex::new(HashMap::new()),
                suspended: Mutex::new(HashMap::new()),
                renewing: AtomicBool::new(true),
                stopping: AtomicBool::new(false),
                listeners: OnceLock::new(),
                endpoints: OnceLock::new(),
                campaigns: OnceLock::new(),
            }),
        };
        // The sweeps nobody runs are taken at once (their node's lease rows exist from the
        // start, so no later write of this node's grows the database during a request).
        for sweep in [Sweep::Expiry, Sweep::Retention, Sweep::TestMode] {
            cluster.acquire(LeaseKey::Sweep(sweep)).await;
        }
        Ok(cluster)
    }

    /// This node's id.
    pub fn node(&self) -> Uuid {
        self.inner.node
    }

    /// How long a lease lasts unrenewed (`cluster.lease_ttl`).
    pub fn lease_ttl(&self) -> Duration {
        self.inner.settings.lease_ttl
    }

    /// The address this node advertises.
    pub fn address(&self) -> &str {
        &self.inner.address
    }

    /// Whether the node's leases are being renewed in time (`GET /ready`).
    pub fn healthy(&self) -> bool {
        self.inner.renewing.load(Ordering::Relaxed) && !self.inner.stopping.load(Ordering::Relaxed)
    }

    /// Starts the heartbeat and the notification listener, delivering their events to
    /// `registry`.
    pub fn start<A>(&self, registry: Addr<A>)
    where
        A: Actor<Context = Context<A>>
            + Handler<Noticed>
            + Handler<Resync>
            + Handler<LeasesLost>
            + Handler<PhonesOnline>,
    {
        let listeners = Listeners {
            noticed: registry.clone().recipient(),
            resync: registry.clone().recipient(),
            lost: registry.clone().recipient(),
            online: registry.recipient(),
        };
        if self.inner.listeners.set(listeners).is_err() {
            return;
        }
        actix::spawn(self.clone().heartbeats());
        actix::spawn(self.clone().listen());
    }

    /// Delivers the notices about webhook endpoints ([`Notice::of_endpoints`]) and the lost
    /// endpoint leases to `endpoints` (their supervisor) instead of the Registry. Set once.
    pub fn route_endpoints<A>(&self, endpoints: Addr<A>)
    where
        A: Actor<Context = Context<A>> + Handler<Noticed> + Handler<LeasesLost>,
    {
        let _ = self.inner.endpoints.set(EndpointListeners {
            noticed: endpoints.clone().recipient(),
            lost: endpoints.recipient(),
        });
    }

    /// Delivers the notices of campaigns and their lost leases to the campaigns' supervisor.
    pub fn start_campaigns(&self, noticed: Recipient<Noticed>, lost: Recipient<LeasesLost>) {
        let _ = self
            .inner
            .campaigns
            .set(CampaignListeners { noticed, lost });
    }

    /// Hands a notice to whoever acts on it: the campaigns' supervisor for a campaign's (none
    /// before it started: its take-over scan finds the campaign), the endpoints' supervisor for
    /// an endpoint's once it is routed, the Registry for the others.
    fn deliver_notice(&self, listeners: &Listeners, notice: Notice) {
        let campaign = matches!(
            notice,
            Notice::Campaign { .. } | Notice::CampaignMessages { .. }
        );
        if campaign {
            if let Some(campaigns) = self.inner.campaigns.get() {
                let _ = campaigns.noticed.try_send(Noticed(notice));
            }
            return;
        }
        match self.inner.endpoints.get() {
            Some(endpoints) if notice.of_endpoints() => {
                let _ = endpoints.noticed.try_send(Noticed(notice));
            }
            _ => {
                let _ = listeners.noticed.try_send(Noticed(notice));
            }
        }
    }

    /// Hands lost leases to whoever acted on them: the campaigns' and endpoints' supervisors
    /// for theirs (once they started), the Registry for the others.
    fn deliver_lost(&self, listeners: &Listeners, lost: Vec<Lease>) {
        let (campaigns, rest): (Vec<Lease>, Vec<Lease>) = lost
            .into_iter()
            .partition(|lease| lease.key.kind() == LeaseKind::Campaign);
        if !campaigns.is_empty()
            && let Some(listener) = self.inner.campaigns.get()
        {
            let _ = listener.lost.try_send(LeasesLost(campaigns));
        }
        let rest = match self.inner.endpoints.get() {
            Some(to) => {
                let (endpoints, rest): (Vec<Lease>, Vec<Lease>) = rest
                    .into_iter()
                    .partition(|lease| lease.key.kind() == LeaseKind::WebhookEndpoint);
                if !endpoints.is_empty() {
                    let _ = to.lost.try_send(LeasesLost(endpoints));
                }
                rest
            }
            None => rest,
        };
        if !rest.is_empty() {
            let _ = listeners.lost.try_send(LeasesLost(rest));
        }
    }

    /// Takes the lease of `key` for this node, or None when another node holds it (or this
    /// node is stopping, or the database did not answer).
    pub async fn acquire(&self, key: LeaseKey) -> Option<Lease> {
        if self.inner.stopping.load(Ordering::Relaxed) {
            return None;
        }
        *self.acquiring().entry(key).or_default() += 1;
        let taken = leases::acquire(
            &self.inner.db,
            self.inner.node,
            key,
            self.inner.settings.lease_ttl,
        )
        .await;
        // Held before it stops being acquired, so a heartbeat always finds it in one of them.
        let lease = match taken {
            Ok(Some(lease)) => {
                self.held().insert(key, (lease.clone(), Instant::now()));
                Some(lease)
            }
            Ok(None) => None,
            Err(err) => {
                tracing::warn!(lease = %key, error = %err, "lease not taken");
                None
            }
        };
        let mut acquiring = self.acquiring();
        if let Some(count) = acquiring.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                acquiring.remove(&key);
            }
        }
        lease
    }

    /// Whether the lease on `key` is suspended: renewals failed while the database was away,
    /// and it is taken again once it answers. Work on it waits (a fenced write now would be
    /// refused as if the lease had moved on).
    pub fn is_suspended(&self, key: LeaseKey) -> bool {
        self.suspended().contains_key(&key)
    }

    /// The lease this node holds on `key`, if any.
    pub fn lease(&self, key: LeaseKey) -> Option<Lease> {
        self.held().get(&key).map(|(lease, _)| lease.clone())
    }

    /// The lease a fenced write on `key` carries: the one this node holds, or, once it is lost
    /// here, one with fence 0, which no lease ever has, so the write is refused.
    pub fn fence(&self, key: LeaseKey) -> Lease {
        self.lease(key).unwrap_or(Lease {
            key,
            node: self.node(),
            fence: 0,
        })
    }

    /// Forgets `lease` here, without a write: a fenced write carrying it was refused, so it
    /// moved to another node already (a newer lease of this node on the same thing is kept).
    /// Until then the node would keep starting the actor it no longer owns.
    pub fn lost(&self, lease: &Lease) {
        let mut held = self.held();
        if held
            .get(&lease.key)
            .is_some_and(|(ours, _)| ours.fence == lease.fence)
        {
            held.remove(&lease.key);
        }
    }

    /// Lets go of this node's lease on `key`.
    pub async fn release(&self, key: LeaseKey) {
        self.suspended().remove(&key);
        let lease = self.held().remove(&key).map(|(lease, _)| lease);
        if let Some(lease) = lease
            && let Err(err) = leases::release(&self.inner.db, &lease).await
        {
            tracing::warn!(lease = %key, error = %err, "lease not released; it expires");
        }
    }

    /// Whether this node is the only live one (a cluster starting from nothing).
    pub async fn alone(&self) -> bool {
        self.live_node_ids()
            .await
            .is_ok_and(|ids| ids.iter().all(|id| *id == self.inner.node))
    }

    /// The ids of the live nodes (heartbeat within `lease_ttl`, not stopping), this one
    /// included.
    pub async fn live_node_ids(&self) -> Result<std::collections::HashSet<Uuid>, StoreError> {
        Ok(
            leases::live_nodes(&self.inner.db, self.inner.settings.lease_ttl)
                .await?
                .into_iter()
                .map(|n| n.id)
                .collect(),
        )
    }

    /// The keys of every live lease of `kind` (any node's).
    pub async fn live_keys(
        &self,
        kind: LeaseKind,
    ) -> Result<std::collections::HashSet<LeaseKey>, StoreError> {
        Ok(leases::live(&self.inner.db, kind)
            .await?
            .into_iter()
            .map(|lease| lease.key)
            .collect())
    }

    /// The live holder of `key`.
    pub async fn holder(&self, key: LeaseKey) -> Option<Lease> {
        leases::holder(&self.inner.db, key).await.ok().flatten()
    }

    /// Tells every node (this one included) `notice`.
    pub async fn notify(&self, notice: &Notice) {
        let Ok(payload) = serde_json::to_string(notice) else {
            return;
        };
        if let Err(err) = leases::notify(&self.inner.db, &payload).await {
            tracing::warn!(error = %err, ?notice, "cluster notice not sent");
        }
    }

    /// [`Cluster::notify`] from synchronous code (an actor's handler).
    pub fn tell(&self, notice: Notice) {
        let cluster = self.clone();
        actix::spawn(async move { cluster.notify(&notice).await });
    }

    /// A graceful stop: marks the node stopping and hands every lease back at once, so other
    /// nodes take them over without waiting for them to expire.
    pub async fn hand_back(&self) {
        self.inner.stopping.store(true, Ordering::Relaxed);
        let held: Vec<Lease> = self.held().drain().map(|(_, (lease, _))| lease).collect();
        match leases::hand_back(&self.inner.db, self.inner.node).await {
            Ok(count) => tracing::info!(leases = count, "handed the node's leases back"),
            Err(err) => tracing::warn!(error = %err, "leases not handed back; they expire"),
        }
        for lease in held {
            if let LeaseKey::Phone(phone) = lease.key {
                self.notify(&Notice::Offline {
                    phone: phone.as_uuid(),
                    node: self.inner.node,
                })
                .await;
            }
        }
    }

    fn suspended(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseKey, Lease>> {
        self.inner
            .suspended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes again the phone leases suspended while the database was away: a phone still
    /// connected here keeps its session; one whose lease another node took meanwhile is lost
    /// (its actor stops and the session closes, so the phone reconnects to its new owner).
    async fn resume_suspended(&self, listeners: &Listeners) {
        let suspended: Vec<LeaseKey> = self.suspended().keys().copied().collect();
        if suspended.is_empty() {
            return;
        }
        let mut lost = Vec::new();
        for key in suspended {
            let Some(lease) = self.suspended().get(&key).cloned() else {
                continue; // released meanwhile
            };
            match self.acquire(key).await {
                Some(_) if self.suspended().remove(&key).is_none() => {
                    // Released while it was being taken again: let go of it once more.
                    self.release(key).await;
                }
                Some(_) => {}
                None => {
                    self.suspended().remove(&key);
                    lost.push(lease);
                }
            }
        }
        tracing::info!(lost = lost.len(), "suspended phone leases taken again");
        if !lost.is_empty() {
            self.deliver_lost(listeners, lost);
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseKey, (Lease, Instant)>> {
        self.inner
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Taken while [`Cluster::held`]'s guard is held, never the other way round.
    fn acquiring(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseKey, usize>> {
        self.inner
            .acquiring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Hands back the leases a renewal answered that this node does not hold (strays): the
    /// database gives them to it, but it acts on none of them, so each would stay its own,
    /// renewed by every heartbeat, and no node would ever take it over (docs/api.md,
    /// "Several nodes"). A renewal that came too late (every lease dropped here while the
    /// database renewed them) or an acquire whose answer was lost leaves them.
    async fn hand_back_strays(&self, strays: Vec<Lease>) {
        for lease in strays {
            tracing::warn!(lease = %lease.key, "a lease this node does not act on is handed back");
            if let Err(err) = leases::release(&self.inner.db, &lease).await {
                tracing::warn!(lease = %lease.key, error = %err, "stray lease not handed back; the next heartbeat tries again");
            }
        }
    }

    /// Renews every lease of the node each `cluster.heartbeat`. A lease missing from the
    /// renewal is lost; when renewals fail for so long that the leases may have expired
    /// (`lease_ttl` less one heartbeat since the last renewal was sent), every lease is dropped
    /// before another node can take it.
    async fn heartbeats(self) {
        let settings = self.inner.settings.clone();
        let mut last_ok = Instant::now();
        let deadline = settings.lease_ttl.saturating_sub(settings.heartbeat);
        loop {
            tokio::time::sleep(settings.heartbeat).await;
            if self.inner.stopping.load(Ordering::Relaxed) {
                return;
            }
            let sent = Instant::now();
            let renewal = tokio::time::timeout(
                deadline.max(Duration::from_millis(100)),
                leases::heartbeat(&self.inner.db, self.inner.node, settings.lease_ttl),
            )
            .await;
            let Some(listeners) = self.inner.listeners.get().cloned() else {
                continue;
            };
            match renewal {
                Ok(Ok(renewed)) => {
                    last_ok = sent;
                    self.resume_suspended(&listeners).await;
                    self.inner.renewing.store(true, Ordering::Relaxed);
                    let (lost, strays) = {
                        let mut held = self.held();
                        // A lease taken after this renewal was sent may be missing from its
                        // answer (the UPDATE's snapshot predates the acquire): not lost.
                        let lost: Vec<Lease> = held
                            .values()
                            .filter(|(lease, taken)| *taken < sent && !renewed.contains(lease))
                            .map(|(lease, _)| lease.clone())
                            .collect();
                        for lease in &lost {
                            held.remove(&lease.key);
                        }
                        // Renewed, yet neither held nor being acquired here.
                        let acquiring = self.acquiring();
                        let strays: Vec<Lease> = renewed
                            .into_iter()
                            .filter(|lease| {
                                held.get(&lease.key).is_none_or(|(ours, _)| ours != lease)
                                    && !acquiring.contains_key(&lease.key)
                            })
                            .collect();
                        (lost, strays)
                    };
                    self.hand_back_strays(strays).await;
                    if !lost.is_empty() {
                        tracing::warn!(count = lost.len(), "leases lost to other nodes");
                        self.deliver_lost(&listeners, lost);
                    }
                }
                failed => {
                    let error = match failed {
                        Ok(Err(err)) => err.to_string(),
                        _ => "timed out".to_string(),
                    };
                    tracing::error!(%error, "lease renewal failed");
                    if sent.duration_since(last_ok) >= deadline {
                        self.inner.renewing.store(false, Ordering::Relaxed);
                        let (phones, lost): (Vec<Lease>, Vec<Lease>) = self
                            .held()
                            .drain()
                            .map(|(_, (l, _))| l)
                            .partition(|l| matches!(l.key, LeaseKey::Phone(_)));
                        if !phones.is_empty() {
                            tracing::error!(
                                count = phones.len(),
                                "phone leases not renewed in time: suspended, their sessions stay open"
                            );
                            self.suspended()
                                .extend(phones.into_iter().map(|l| (l.key, l)));
                        }
                        if !lost.is_empty() {
                            tracing::error!(
                                count = lost.len(),
                                "leases not renewed in time: this node stops acting on them"
                            );
                            self.deliver_lost(&listeners, lost);
                        }
                    }
                }
            }
            if let Ok(online) = leases::live(&self.inner.db, LeaseKind::Phone).await {
                let online = online
                    .into_iter()
                    .filter_map(|l| match l.key {
                        LeaseKey::Phone(phone) => Some((phone.as_uuid(), l.node)),
                        _ => None,
                    })
                    .collect();
                let _ = listeners.online.try_send(PhonesOnline(online));
            }
        }
    }

    /// Listens on the carrier's channel and hands every notice to the registry; after a lost
    /// connection (notices may have been missed) asks it to resync.
    async fn listen(self) {
        use sea_orm::sqlx::postgres::PgListener;
        loop {
            let Some(listeners) = self.inner.listeners.get().cloned() else {
                return;
            };
            let mut listener = match PgListener::connect(&self.inner.url).await {
                Ok(listener) => listener,
                Err(err) => {
                    tracing::error!(error = %err, "cluster listener cannot connect; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            if let Err(err) = listener.listen(leases::CHANNEL).await {
                tracing::error!(error = %err, "cluster listener cannot LISTEN; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            let _ = listeners.resync.try_send(Resync);
            loop {
                match listener.try_recv().await {
                    Ok(Some(notification)) => {
                        match serde_json::from_str::<Notice>(notification.payload()) {
                            Ok(notice) => {
                                self.deliver_notice(&listeners, notice);
                            }
                            Err(err) => {
                                tracing::warn!(error = %err, payload = notification.payload(), "unknown cluster notice")
                            }
                        }
                    }
                    Ok(None) => {
                        tracing::warn!("cluster listener reconnected; resyncing");
                        let _ = listeners.resync.try_send(Resync);
                    }
                    Err(err) => {
                        tracing::error!(error = %err, "cluster listener failed; reconnecting");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        break;
                    }
                }
                if self.inner.stopping.load(Ordering::Relaxed) {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_small_tagged_json() {
        let phone = Uuid::nil();
        let text = serde_json::to_string(&Notice::Enqueue {
            phone,
            messages: None,
        })
        .unwrap_or_default();
        assert_eq!(
            text,
            r#"{"kind":"enqueue","phone":"00000000-0000-0000-0000-000000000000"}"#
        );
        let change = Notice::Phone {
            phone,
            origin: phone,
            change: PhoneChange::TokenRotated,
        };
        let text = serde_json::to_string(&change).unwrap_or_default();
        assert_eq!(
            serde_json::from_str::<Notice>(&text).ok(),
            Some(change),
            "{text}"
        );
    }

    #[test]
    fn typed_ids_in_notices_are_bare_uuids() {
        let uuid = Uuid::nil();
        let text = serde_json::to_string(&Notice::CampaignMessages {
            campaign: uuid.into(),
            changes: vec![(uuid.into(), MessageStatus::Sent)],
        })
        .unwrap_or_default();
        assert_eq!(
            text,
            r#"{"kind":"campaign_messages","campaign":"00000000-0000-0000-0000-000000000000","changes":[["00000000-0000-0000-0000-000000000000","sent"]]}"#
        );
        for notice in [
            Notice::Campaign {
                campaign: uuid.into(),
            },
            Notice::Endpoint {
                endpoint: uuid.into(),
            },
        ] {
            let text = serde_json::to_string(&notice).unwrap_or_default();
            assert!(
                text.ends_with(r#"":"00000000-0000-0000-0000-000000000000"}"#),
                "{text}"
            );
            assert_eq!(serde_json::from_str::<Notice>(&text).ok(), Some(notice));
        }
    }
}
