//! Actor start-up: every long-lived actor and supervisor of a node starts here, once, in this
//! order (a later one may need an earlier one's address).

use actix::{Actor, Addr};

use crate::actors::Deps;
use crate::actors::ai::AiResponder;
use crate::actors::campaign::Campaigns;
use crate::actors::registry::Registry;
use crate::actors::retention::Retention;
use crate::actors::webhook_endpoint::{WebhookEndpoints, WebhookFanout};
use crate::change_router::ChangeRouter;

/// The actors a running node holds on to.
pub(super) struct Actors {
    pub(super) registry: Addr<Registry>,
    pub(super) webhooks: Addr<WebhookEndpoints>,
    pub(super) campaigns: Addr<Campaigns>,
    pub(super) retention: Addr<Retention>,
}

/// Starts the node's actors once (never `from_registry()`: an `ArbiterService` is one per
/// worker thread) and attaches them to the change router and the webhook fan-out.
pub(super) fn start(deps: Deps, router: &ChangeRouter, fanout: &WebhookFanout) -> Actors {
    let retention = actix::Supervisor::start({
        let deps = deps.clone();
        move |_| Retention::new(deps.clone())
    });
    // Before the Registry: the cluster's endpoint notices reach it from the start.
    let webhooks = WebhookEndpoints::new(deps.clone()).start();
    fanout.attach(webhooks.clone().recipient());
    let registry = Registry::new(deps.clone())
        .with_alerts(webhooks.clone().recipient())
        .start();
    // Campaigns and AI replies send through the send use case (`crate::send`), injected.
    let send_deps = crate::send::SendDeps {
        writer: deps.writer.clone(),
        registry: registry.clone(),
        clock: deps.clock.clone(),
        settings: deps.settings.clone(),
        db: deps.db.clone(),
    };
    let feeder = crate::send::campaign_feeder(send_deps.clone(), deps.db.clone());
    let campaigns = Campaigns::new(deps.clone(), feeder).start();
    router.attach_campaigns(campaigns.clone().recipient());
    let ai = actix::Supervisor::start({
        let send = crate::send::auto_replies(send_deps);
        move |_| AiResponder::new(deps.clone(), send.clone())
    });
    router.attach_ai(ai.recipient());
    Actors {
        registry,
        webhooks,
        campaigns,
        retention,
    }
}
