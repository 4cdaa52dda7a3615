//! Test mode in the registry: the simulated phones, one per test-mode sending number (docs/api.md,
//! "Test mode"). In a cluster they run on one node at a time, the holder of the `test_mode`
//! sweep lease; the other nodes hand it the test-mode messages they store (a `simulate`
//! notice), and a node taking the lease over (its holder died or stopped) rebuilds them from
//! the database first (docs/architecture.md, "Cluster").

use std::collections::HashMap;

use actix::prelude::*;
use uuid::Uuid;

use super::directory::NumberKey;
use super::{NOTICE_IDS, Registry};
use crate::actors::Deps;
use crate::actors::phone::{self, Phone, PhoneIdentity};
use crate::cluster::Notice;
use crate::domain::status::MessageStatus;
use crate::store::cluster::{LeaseKey, Sweep};
use crate::store::messages::{self, Message};
use crate::store::scoped::Scope;
use crate::store::writer::Transition;

/// Whether the simulated phones run on this node.
#[derive(Debug)]
pub(super) enum TestModeHere {
    /// Another node runs them (or none does yet): test-mode messages go to it.
    No,
    /// This node took test mode and reads the database; messages stored meanwhile wait here.
    Rebuilding(Vec<Message>),
    /// They run here (always, on a single node).
    Yes,
}

/// Test-mode messages to take over, read from the database: the `queued` ones (those left
/// `sending` are queued again with `reason` first) and the `sent` ones whose simulated delivery
/// is still to come.
pub(super) struct Unfinished {
    pub(super) queued: Vec<Message>,
    pub(super) awaiting_delivery: Vec<Message>,
}

/// Reads the unfinished outbound messages (every one, or test mode's only) and queues again
/// those left `sending`: their phone (or simulated phone) went away before reporting.
pub(super) async fn unfinished(
    deps: &Deps,
    test_mode_only: bool,
    reason: &'static str,
) -> Result<Unfinished, crate::store::StoreError> {
    let mut pending = if test_mode_only {
        messages::unfinished_in_test_mode(&deps.db).await?
    } else {
        messages::unfinished_outbound(&deps.db).await?
    };
    for message in pending
        .iter_mut()
        .filter(|m| m.status == MessageStatus::Sending)
    {
        if let Some(row) = deps
            .writer
            .transition(Transition::requeue(message.id, reason))
            .await?
        {
            *message = row;
        }
    }
    pending.retain(|m| m.status == MessageStatus::Queued);
    let awaiting_delivery = messages::sent_in_test_mode(&deps.db).await?;
    Ok(Unfinished {
        queued: pending,
        awaiting_delivery,
    })
}

impl Registry {
    /// The simulated phone of a test-mode sending number, attached to its simulator.
    pub(super) fn simulated_addr(&mut self, scope: Scope, number: &str) -> Addr<Phone> {
        let key = NumberKey::new(scope, number);
        if let Some(addr) = self.directory.simulated(&key) {
            return addr;
        }
        let identity = PhoneIdentity {
            device_id: None,
            scope,
            number: number.to_string(),
            sim_slot: None,
        };
        let addr = Phone::new(self.deps.clone(), identity, None).start();
        let link = crate::actors::simulator::attach(
            addr.clone(),
            self.deps.settings.test_mode.deliver_after,
        );
        addr.do_send(phone::Attach { link });
        self.directory.simulated_started(key, addr.clone());
        addr
    }

    /// Hands test-mode messages to their simulated phones when they run here; while test mode
    /// is being rebuilt here they wait; else the node running it is told (`simulate` notices).
    pub(super) fn simulate(&mut self, messages: Vec<Message>) {
        if messages.is_empty() {
            return;
        }
        match &mut self.test_mode {
            TestModeHere::Rebuilding(waiting) => {
                waiting.extend(messages);
                return;
            }
            TestModeHere::No => {
                if let Some(cluster) = &self.deps.cluster {
                    for chunk in messages.chunks(NOTICE_IDS) {
                        cluster.tell(Notice::Simulate {
                            messages: Some(chunk.iter().map(|m| m.id).collect()),
                        });
                    }
                }
                return;
            }
            TestModeHere::Yes => {}
        }
        let mut per_sim: HashMap<NumberKey, Vec<Message>> = HashMap::new();
        for message in messages {
            let scope = Scope {
                workspace_id: message.workspace_id,
                mode: message.mode,
            };
            per_sim
                .entry(NumberKey::new(scope, &message.from_number))
                .or_default()
                .push(message);
        }
        for (key, messages) in per_sim {
            self.simulated_addr(key.scope, &key.number)
                .do_send(phone::Enqueue { messages });
        }
    }

    /// Loads the test-mode messages another node stored (a `simulate` notice: those of `ids`,
    /// or every queued one), when test mode runs here.
    pub(super) fn load_simulated(&mut self, ctx: &mut Context<Self>, ids: Option<Vec<Uuid>>) {
        if matches!(self.test_mode, TestModeHere::No) {
            return;
        }
        let db = self.deps.db.clone();
        ctx.spawn(
            async move { messages::queued_in_test_mode(&db, ids.as_deref()).await }
                .into_actor(self)
                .map(|result, act, _| match result {
                    Ok(messages) => act.simulate(messages),
                    Err(err) => tracing::warn!(error = %err, "test-mode messages not loaded"),
                }),
        );
    }

    /// Delivers, after `test_mode.deliver_after`, the test-mode messages left `sent`.
    pub(super) fn resume_simulated_deliveries(&mut self, sent: Vec<Message>) {
        let mut per_sim: HashMap<NumberKey, Vec<Uuid>> = HashMap::new();
        for m in sent
            .into_iter()
            .filter(|m| m.to_number != crate::actors::simulator::MAGIC_NEVER_DELIVERED)
        {
            let scope = Scope {
                workspace_id: m.workspace_id,
                mode: m.mode,
            };
            per_sim
                .entry(NumberKey {
                    scope,
                    number: m.from_number,
                })
                .or_default()
                .push(m.id);
        }
        let deliver_after = self.deps.settings.test_mode.deliver_after;
        for (key, ids) in per_sim {
            let phone = self.simulated_addr(key.scope, &key.number);
            crate::actors::simulator::resume_delivery(phone, ids, deliver_after);
        }
    }

    /// In a cluster, takes the `test_mode` lease when no live node holds it (its holder died
    /// or stopped) and rebuilds the simulated phones from the database.
    pub(super) fn take_over_test_mode(&mut self, ctx: &mut Context<Self>) {
        let Some(cluster) = self.deps.cluster.clone() else {
            return;
        };
        if !matches!(self.test_mode, TestModeHere::No) {
            return;
        }
        ctx.spawn(
            async move {
                cluster
                    .acquire(LeaseKey::Sweep(Sweep::TestMode))
                    .await
                    .is_some()
            }
            .into_actor(self)
            .map(|taken, act, ctx| {
                if taken && matches!(act.test_mode, TestModeHere::No) {
                    tracing::info!("took test mode over");
                    act.rebuild_test_mode(ctx);
                }
            }),
        );
    }

    /// Test mode just became this node's: its unfinished messages are read (test-mode messages
    /// stored meanwhile wait), then handed to the simulated phones.
    fn rebuild_test_mode(&mut self, ctx: &mut Context<Self>) {
        self.test_mode = TestModeHere::Rebuilding(Vec::new());
        let deps = self.deps.clone();
        ctx.spawn(
            async move {
                unfinished(
                    &deps,
                    true,
                    "test mode was taken over before the simulated phone reported; queued again",
                )
                .await
            }
            .into_actor(self)
            .map(|result, act, _| act.test_mode_rebuilt(result)),
        );
    }

    /// Test mode runs here from now on: what was read and what waited meanwhile go to the
    /// simulated phones.
    pub(super) fn test_mode_rebuilt(
        &mut self,
        result: Result<Unfinished, crate::store::StoreError>,
    ) {
        let waited = match std::mem::replace(&mut self.test_mode, TestModeHere::Yes) {
            TestModeHere::Rebuilding(waited) => waited,
            _ => Vec::new(),
        };
        match result {
            Ok(found) => {
                self.resume_simulated_deliveries(found.awaiting_delivery);
                self.simulate(found.queued);
            }
            Err(err) => tracing::error!(error = %err, "test-mode messages not rebuilt"),
        }
        self.simulate(waited);
    }

    /// The `test_mode` lease was lost: the simulated phones stop here (their messages are in
    /// the database, and the node taking the lease rebuilds them).
    pub(super) fn stop_test_mode(&mut self) {
        if self.deps.cluster.is_none() {
            return;
        }
        tracing::warn!("test-mode lease lost: the simulated phones stop here");
        self.test_mode = TestModeHere::No;
        for addr in self.directory.drain_simulated() {
            addr.do_send(phone::StopPhone);
        }
    }
}
