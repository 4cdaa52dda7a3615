//! Cluster coordination on PostgreSQL (docs/architecture.md, "Cluster"): the node registry
//! (`cluster_nodes`), the leases with fencing numbers (`leases`) and the notification carrier
//! (`LISTEN`/`NOTIFY` on [`CHANNEL`]).
//!
//! Every time here is the database's clock (`clock_timestamp()`), so nodes whose clocks
//! disagree still agree on when a lease expires. The statements are PostgreSQL's: a single
//! node on SQLite never calls them.
//!
//! # How the leases are used
//!
//! - **Kinds** ([`LeaseKind`]): a phone (its Phone actor runs where the phone connected), a
//!   campaign, a webhook endpoint, and the sweeps ([`Sweep`]: the expiry sweep, retention, and
//!   test mode's simulated phones, which also release held scheduled sends).
//! - **Ownership**: [`acquire`] takes a free, expired or own lease; a new ownership raises the
//!   fence, a renewal keeps it. [`heartbeat`] renews every lease of the node in one statement;
//!   a lease missing from its answer was lost, and one it returns that the node neither holds
//!   nor is acquiring (a stray) is handed back, or it would stay the node's for ever. A graceful
//!   stop hands everything back at once ([`hand_back`]).
//! - **Fencing**: a write acting on an ownership carries its [`Lease`] and is checked in the
//!   writer's transaction, [`holds`] for one (a campaign's `Start`, `Feed` and `Complete`),
//!   [`still_held`] for a batch (a Phone actor's hand-overs, `Transition::fenced`; webhook
//!   attempts, checked by `webhooks::apply_attempts`). A refused write changes nothing; the
//!   actor forgets the lease and the new owner rebuilds from the database. A lease the actor no
//!   longer holds is sent with fence 0, which no lease has.
//! - **Not fenced**: the immediate hand-over (accepted straight into `sending` on the node
//!   whose actor owns the phone) and the simulated phones' hand-overs.

use std::time::Duration;

use sea_orm::{ConnectionTrait, DbBackend, FromQueryResult, Statement, Value};
use uuid::Uuid;

use super::StoreError;
use crate::domain::ids::{CampaignId, EndpointId, PhoneId};

/// The notification channel every node listens on.
pub const CHANNEL: &str = "smsgw_cluster";

/// Now on the database's clock, in milliseconds since the Unix epoch.
const NOW_MS: &str = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)";

/// What kind of thing a lease gives ownership of (the `kind` column of `leases`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "snake_case")]
pub enum LeaseKind {
    /// A phone's actor (its queue and pace); key: the phone id.
    Phone,
    /// A campaign's actor; key: the campaign id.
    Campaign,
    /// A webhook endpoint's delivery actor; key: the endpoint id.
    WebhookEndpoint,
    /// A periodic sweep; key: [`Sweep`]'s name.
    Sweep,
}

impl LeaseKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The one thing a lease gives ownership of: its kind and which one, typed, so a campaign's
/// id cannot name a phone's lease. Stored as the `kind` and `key` columns of `leases` (the
/// key the id's UUID or the sweep's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseKey {
    /// A phone's actor.
    Phone(PhoneId),
    /// A campaign's actor.
    Campaign(CampaignId),
    /// A webhook endpoint's delivery actor.
    WebhookEndpoint(EndpointId),
    /// A periodic sweep.
    Sweep(Sweep),
}

impl LeaseKey {
    /// The `kind` column.
    pub fn kind(self) -> LeaseKind {
        match self {
            LeaseKey::Phone(_) => LeaseKind::Phone,
            LeaseKey::Campaign(_) => LeaseKind::Campaign,
            LeaseKey::WebhookEndpoint(_) => LeaseKind::WebhookEndpoint,
            LeaseKey::Sweep(_) => LeaseKind::Sweep,
        }
    }

    /// The `key` column.
    pub fn key(self) -> String {
        match self {
            LeaseKey::Phone(id) => id.to_string(),
            LeaseKey::Campaign(id) => id.to_string(),
            LeaseKey::WebhookEndpoint(id) => id.to_string(),
            LeaseKey::Sweep(sweep) => sweep.as_str().to_string(),
        }
    }

    /// The key a stored (`kind`, `key`) names; None for a kind or key this build does not
    /// know (a newer node's).
    pub fn parse(kind: &str, key: &str) -> Option<LeaseKey> {
        Some(match kind.parse().ok()? {
            LeaseKind::Phone => LeaseKey::Phone(key.parse().ok()?),
            LeaseKind::Campaign => LeaseKey::Campaign(key.parse().ok()?),
            LeaseKind::WebhookEndpoint => LeaseKey::WebhookEndpoint(key.parse().ok()?),
            LeaseKind::Sweep => LeaseKey::Sweep(key.parse().ok()?),
        })
    }
}

impl std::fmt::Display for LeaseKey {
    /// `kind/key`, for logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind().as_str(), self.key())
    }
}

/// The periodic sweeps one node at a time runs (keys of [`LeaseKind::Sweep`] leases).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::EnumIter,
)]
#[strum(serialize_all = "snake_case")]
pub enum Sweep {
    /// Queued messages past `expires_at`.
    Expiry,
    /// Content removal and record deletion.
    Retention,
    /// Test mode's simulated phones: their queues (scheduled sends included) and simulated
    /// deliveries. A live phone's scheduled sends are released by the phone's owner.
    TestMode,
}

impl Sweep {
    /// The stored name (the `key` of its lease).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A lease a node holds: the thing, and the fencing number of this ownership. A write that
/// acts on the ownership carries it ([`holds`]) and is refused once the lease moved on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    pub key: LeaseKey,
    pub node: Uuid,
    pub fence: i64,
}

impl Lease {
    /// What names this ownership in a statement, as `kind, key, node_id, fence` values.
    fn identity(&self) -> [Value; 4] {
        [
            self.key.kind().as_str().into(),
            self.key.key().into(),
            self.node.into(),
            self.fence.into(),
        ]
    }
}

/// A registered node.
#[derive(Debug, Clone, PartialEq, Eq, FromQueryResult)]
pub struct Node {
    pub id: Uuid,
    pub address: String,
    pub started_at: i64,
    pub heartbeat_at: i64,
    pub stopping: bool,
}

/// A row of `leases` as a statement returns it (`kind, key, node_id, fence`).
#[derive(FromQueryResult)]
struct LeaseRow {
    kind: String,
    key: String,
    node_id: Uuid,
    fence: i64,
}

impl LeaseRow {
    /// The lease, None for a kind or key this build does not know (a newer node's).
    fn into_lease(self) -> Option<Lease> {
        Some(Lease {
            key: LeaseKey::parse(&self.kind, &self.key)?,
            node: self.node_id,
            fence: self.fence,
        })
    }
}

/// The leases `sql` returns (as [`LeaseRow`]s), those of unknown kinds left out.
async fn read_leases<C: ConnectionTrait>(
    db: &C,
    sql: &str,
    values: Vec<Value>,
) -> Result<Vec<Lease>, StoreError> {
    let rows = LeaseRow::find_by_statement(statement(sql, values))
        .all(db)
        .await?;
    Ok(rows.into_iter().filter_map(LeaseRow::into_lease).collect())
}

fn statement(sql: &str, values: Vec<Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

/// Registers the node `id` reachable at `address` (a fresh id at every start).
pub async fn register_node<C: ConnectionTrait>(
    db: &C,
    id: Uuid,
    address: &str,
) -> Result<(), StoreError> {
    let sql = format!(
        "INSERT INTO cluster_nodes (id, address, started_at, heartbeat_at, stopping) \
         VALUES ($1, $2, {NOW_MS}, {NOW_MS}, FALSE)"
    );
    db.execute_raw(statement(&sql, vec![id.into(), address.into()]))
        .await?;
    Ok(())
}

/// One heartbeat of `node`: stamps its row and renews, in the same statement, every lease it
/// still holds (unexpired) for `ttl`. Answers the leases renewed: one the node believes it
/// holds and that is missing here was lost (expired, or taken), and the node stops acting on it.
pub async fn heartbeat<C: ConnectionTrait>(
    db: &C,
    node: Uuid,
    ttl: Duration,
) -> Result<Vec<Lease>, StoreError> {
    let sql = format!(
        "WITH beat AS (UPDATE cluster_nodes SET heartbeat_at = {NOW_MS} WHERE id = $1) \
         UPDATE leases SET expires_at = {NOW_MS} + $2 \
         WHERE node_id = $1 AND expires_at > {NOW_MS} \
         RETURNING kind, key, node_id, fence"
    );
    // The renewal locks every lease row of the node, while a fenced write of the writer holds
    // some of them `FOR SHARE` and may then want another: PostgreSQL breaks such a cycle by
    // failing one side (40P01). The renewal is the one worth repeating at once.
    let mut tries = 0;
    loop {
        match read_leases(db, &sql, vec![node.into(), ttl_ms(ttl).into()]).await {
            Err(err) if tries < 3 && super::is_deadlock(&err) => tries += 1,
            other => return other,
        }
    }
}

/// Takes the lease on `key` for `node` until `ttl` from now, when it is free,
/// expired or already `node`'s. A new ownership (first, after expiry, or taken from another
/// node that let go) raises the fencing number; a node renewing its own keeps it. None: another
/// node holds it.
pub async fn acquire<C: ConnectionTrait>(
    db: &C,
    node: Uuid,
    key: LeaseKey,
    ttl: Duration,
) -> Result<Option<Lease>, StoreError> {
    let sql = format!(
        "INSERT INTO leases (kind, key, node_id, fence, expires_at) \
         VALUES ($1, $2, $3, 1, {NOW_MS} + $4) \
         ON CONFLICT (kind, key) DO UPDATE SET \
           fence = CASE WHEN leases.node_id = EXCLUDED.node_id AND leases.expires_at > {NOW_MS} \
                        THEN leases.fence ELSE leases.fence + 1 END, \
           node_id = EXCLUDED.node_id, expires_at = EXCLUDED.expires_at \
         WHERE leases.node_id = EXCLUDED.node_id OR leases.expires_at <= {NOW_MS} \
         RETURNING kind, key, node_id, fence"
    );
    let values = vec![
        key.kind().as_str().into(),
        key.key().into(),
        node.into(),
        ttl_ms(ttl).into(),
    ];
    Ok(read_leases(db, &sql, values).await?.into_iter().next())
}

/// Lets go of `lease` at once (it expires now; the row stays, so the next owner's fencing
/// number is higher). A no-op when the lease already moved on.
pub async fn release<C: ConnectionTrait>(db: &C, lease: &Lease) -> Result<(), StoreError> {
    db.execute_raw(statement(
        "UPDATE leases SET expires_at = 0 \
         WHERE kind = $1 AND key = $2 AND node_id = $3 AND fence = $4",
        lease.identity().into(),
    ))
    .await?;
    Ok(())
}

/// A graceful stop's hand-back: marks `node` stopping and lets go of all its leases at once,
/// in one transaction, so other nodes take them over without waiting for expiry.
pub async fn hand_back<C: ConnectionTrait>(db: &C, node: Uuid) -> Result<u64, StoreError> {
    let result = db
        .execute_raw(statement(
            "WITH stop AS (UPDATE cluster_nodes SET stopping = TRUE WHERE id = $1) \
             UPDATE leases SET expires_at = 0 WHERE node_id = $1",
            vec![node.into()],
        ))
        .await?;
    Ok(result.rows_affected())
}

/// Whether `lease` is still held as given (same node, same fencing number, unexpired). Inside
/// a transaction it also locks the lease row (`FOR SHARE`) until the transaction ends, so it
/// cannot be taken over while the fenced write commits: call it in the transaction of the
/// write that acts on the ownership, and write nothing when it answers false.
pub async fn holds<C: ConnectionTrait>(db: &C, lease: &Lease) -> Result<bool, StoreError> {
    let sql = format!(
        "SELECT 1 AS held FROM leases \
         WHERE kind = $1 AND key = $2 AND node_id = $3 AND fence = $4 AND expires_at > {NOW_MS} \
         FOR SHARE"
    );
    let row = db
        .query_one_raw(statement(&sql, lease.identity().into()))
        .await?;
    Ok(row.is_some())
}

/// Of `leases` (all `node`'s), those still held as given: same fence, unexpired. One
/// statement for a whole batch of fenced writes; inside the batch's transaction it locks the
/// lease rows (`FOR SHARE`) until it commits, so none can be taken over before the fenced
/// writes are in.
pub async fn still_held<C: ConnectionTrait>(
    db: &C,
    leases: &[&Lease],
) -> Result<std::collections::HashSet<Lease>, StoreError> {
    let mut held = std::collections::HashSet::new();
    for chunk in leases.chunks(256) {
        let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * 4);
        let mut terms = Vec::with_capacity(chunk.len());
        for (i, lease) in chunk.iter().enumerate() {
            let n = i * 4;
            terms.push(format!(
                "(kind = ${} AND key = ${} AND node_id = ${} AND fence = ${})",
                n + 1,
                n + 2,
                n + 3,
                n + 4
            ));
            values.extend(lease.identity());
        }
        let sql = format!(
            "SELECT kind, key, node_id, fence FROM leases WHERE expires_at > {NOW_MS} AND ({}) \
             FOR SHARE",
            terms.join(" OR ")
        );
        held.extend(read_leases(db, &sql, values).await?);
    }
    Ok(held)
}

/// The live holder of `key`, if any.
pub async fn holder<C: ConnectionTrait>(
    db: &C,
    key: LeaseKey,
) -> Result<Option<Lease>, StoreError> {
    let sql = format!(
        "SELECT kind, key, node_id, fence FROM leases \
         WHERE kind = $1 AND key = $2 AND expires_at > {NOW_MS}"
    );
    let values = vec![key.kind().as_str().into(), key.key().into()];
    Ok(read_leases(db, &sql, values).await?.into_iter().next())
}

/// Every live lease of `kind` (for phones: the phones online somewhere in the cluster).
pub async fn live<C: ConnectionTrait>(db: &C, kind: LeaseKind) -> Result<Vec<Lease>, StoreError> {
    let sql = format!(
        "SELECT kind, key, node_id, fence FROM leases WHERE kind = $1 AND expires_at > {NOW_MS}"
    );
    read_leases(db, &sql, vec![kind.as_str().into()]).await
}

/// The nodes that heartbeat within `within` and are not stopping, oldest first.
pub async fn live_nodes<C: ConnectionTrait>(
    db: &C,
    within: Duration,
) -> Result<Vec<Node>, StoreError> {
    let sql = format!(
        "SELECT id, address, started_at, heartbeat_at, stopping FROM cluster_nodes \
         WHERE heartbeat_at > {NOW_MS} - $1 AND NOT stopping ORDER BY started_at, id"
    );
    Ok(
        Node::find_by_statement(statement(&sql, vec![ttl_ms(within).into()]))
            .all(db)
            .await?,
    )
}

/// Removes the rows of nodes silent for longer than `after` (and their expired leases' node
/// ids stay in `leases` until taken: only the row in `cluster_nodes` goes).
pub async fn forget_silent_nodes<C: ConnectionTrait>(
    db: &C,
    after: Duration,
) -> Result<u64, StoreError> {
    let sql = format!("DELETE FROM cluster_nodes WHERE heartbeat_at < {NOW_MS} - $1");
    let result = db
        .execute_raw(statement(&sql, vec![ttl_ms(after).into()]))
        .await?;
    Ok(result.rows_affected())
}

/// Sends `payload` (small JSON) to every node listening on [`CHANNEL`], the sender included.
/// Inside a transaction it is delivered at commit, and not at all on rollback.
pub async fn notify<C: ConnectionTrait>(db: &C, payload: &str) -> Result<(), StoreError> {
    db.execute_raw(statement(
        "SELECT pg_notify($1, $2)",
        vec![CHANNEL.into(), payload.into()],
    ))
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use strum::IntoEnumIterator;
    use uuid::Uuid;

    use super::*;

    #[test]
    fn a_key_reads_back_from_its_columns() {
        let uuid = Uuid::now_v7();
        let mut keys = vec![
            LeaseKey::Phone(uuid.into()),
            LeaseKey::Campaign(uuid.into()),
            LeaseKey::WebhookEndpoint(uuid.into()),
        ];
        keys.extend(Sweep::iter().map(LeaseKey::Sweep));
        for key in keys {
            assert_eq!(LeaseKey::parse(key.kind().as_str(), &key.key()), Some(key));
        }
        assert_eq!(LeaseKey::Phone(uuid.into()).key(), uuid.to_string());
        assert_eq!(LeaseKey::Sweep(Sweep::TestMode).key(), "test_mode");
        assert_eq!(
            LeaseKey::WebhookEndpoint(uuid.into()).kind().as_str(),
            "webhook_endpoint"
        );
    }

    #[test]
    fn a_kind_or_key_of_a_newer_node_is_not_read() {
        assert_eq!(LeaseKey::parse("shard", "1"), None);
        assert_eq!(LeaseKey::parse("sweep", "compaction"), None);
        assert_eq!(LeaseKey::parse("phone", "not-a-uuid"), None);
    }
}
