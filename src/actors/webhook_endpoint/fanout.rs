//! The writer's commit hook that creates deliveries.

use std::sync::{Arc, OnceLock};

use actix::prelude::*;

use super::DeliveriesCreated;
use crate::actors::registry::Registry;
use crate::store::webhooks::{PendingDelivery, Subscriptions};
use crate::store::writer::{Change, CommitHook};

/// The writer's commit hook: matches committed changes against the subscription index
/// (no query) and, after the commit, tells the registry about the new deliveries.
pub struct WebhookFanout {
    subscriptions: Arc<Subscriptions>,
    registry: OnceLock<Addr<Registry>>,
}

impl WebhookFanout {
    /// A fan-out over `subscriptions`; deliveries committed before [`WebhookFanout::attach`]
    /// are picked up by the registry's start-up rebuild.
    pub fn new(subscriptions: Arc<Subscriptions>) -> WebhookFanout {
        WebhookFanout {
            subscriptions,
            registry: OnceLock::new(),
        }
    }

    /// Connects the registry that starts the endpoint actors.
    pub fn attach(&self, registry: Addr<Registry>) {
        let _ = self.registry.set(registry);
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
        if let Some(registry) = self.registry.get() {
            registry.do_send(DeliveriesCreated { deliveries });
        }
    }
}
