//! A node's graceful stop, at SIGTERM or SIGINT: hand cluster work back, stop accepting, close
//! the phone sessions with 1001 "going away", then let in-flight requests finish.

use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use actix_web::dev::ServerHandle;

use crate::actors::campaign::{Campaigns, StopAll};
use crate::actors::phone_session::LiveSessions;
use crate::actors::registry::{Registry, Shutdown};
use crate::actors::webhook_endpoint::{StopEndpoints, WebhookEndpoints};
use crate::cluster::Cluster;
use crate::server::signals::ShutdownSignals;

/// How long a stop waits for phone sessions to close before stopping the HTTP server.
const SESSIONS_CLOSE_WITHIN: Duration = Duration::from_secs(2);

/// Waits for the first stop signal, then stops the node in order. Nothing accepted is lost:
/// queues live in the database and are rebuilt at the next start.
pub(super) async fn on_signal(
    signals: ShutdownSignals,
    handle: ServerHandle,
    registry: Addr<Registry>,
    webhooks: Addr<WebhookEndpoints>,
    campaigns: Addr<Campaigns>,
    sessions: Arc<LiveSessions>,
    cluster: Option<Cluster>,
) {
    signals.recv().await;
    tracing::info!("shutdown requested: closing phone sessions and finishing requests");
    if let Some(cluster) = &cluster {
        // Other nodes take the phones, campaigns, endpoints and sweeps over at once.
        cluster.hand_back().await;
    }
    // No new connections from here on (phones told to go away would reconnect at once).
    handle.pause().await;
    let _ = registry.send(Shutdown).await;
    let _ = webhooks.send(StopEndpoints).await;
    let _ = campaigns.send(StopAll).await;
    // Sessions are not connections the HTTP server waits for: let them send their 1001 close
    // frames (each waits at most 1 s for the phone's answer) first.
    if !sessions.ended_within(SESSIONS_CLOSE_WITHIN).await {
        tracing::warn!(
            left = sessions.count(),
            "phone sessions still open at shutdown"
        );
    }
    handle.stop(true).await;
}
