//! The writer's commit hook that creates deliveries.

use std::sync::{Arc, OnceLock};

use actix::prelude::*;

use super::DeliveriesCreated;
use crate::store::webhooks::{PendingDelivery, Subscriptions};
use crate::store::writer::{Change, CommitHook};

/// The writer's commit hook: matches committed changes against the subscription index
/// (no query) and, after the commit, tells the endpoints' supervisor about the new deliveries.
pub struct WebhookFanout {
    subscriptions: Arc<Subscriptions>,
    endpoints: OnceLock<Recipient<DeliveriesCreated>>,
}

impl WebhookFanout {
    /// A fan-out over `subscriptions`; deliveries committed before [`WebhookFanout::attach`]
    /// are picked up by the supervisor's start-up rebuild.
    pub fn new(subscriptions: Arc<Subscriptions>) -> WebhookFanout {
        WebhookFanout {
            subscriptions,
            endpoints: OnceLock::new(),
        }
    }

    /// Connects the supervisor that starts the endpoint actors ([`super::WebhookEndpoints`]).
    pub fn attach(&self, endpoints: Recipient<DeliveriesCreated>) {
        let _ = self.endpoints.set(endpoints);
    }
}

impl CommitHook for WebhookFanout {
    fn stage(
        &self,
        changes: &[Change],
        now_ms: i64,
        current: Option<&Subscriptions>,
    ) -> Vec<PendingDelivery> {
        current
            .unwrap_or(&self.subscriptions)
            .deliveries_for(changes, now_ms)
    }

    fn committed(&self, deliveries: Vec<PendingDelivery>) {
        if let Some(endpoints) = self.endpoints.get() {
            endpoints.do_send(DeliveriesCreated { deliveries });
        }
    }
}
