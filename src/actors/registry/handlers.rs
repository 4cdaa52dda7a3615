//! The Registry's handlers of its own messages (declared in `mod.rs`): routing, phones
//! connecting and going away, pairing changes, states, shutdown. Those of webhook endpoints
//! are in `work.rs`, those of the cluster in `cluster.rs`.

use actix::prelude::*;
use uuid::Uuid;

use super::*;
use crate::actors::cluster::PhoneChange;

impl Handler<Route> for Registry {
    type Result = Result<Option<Routed>, RouteError>;

    fn handle(&mut self, msg: Route, _: &mut Self::Context) -> Self::Result {
        if let Some(device) = msg.device_id {
            let entry = self.phones.get(&device).ok_or(RouteError::UnknownDevice)?;
            if entry.record.workspace_id != msg.scope.workspace_id
                || entry.record.mode != msg.scope.mode
            {
                return Err(RouteError::UnknownDevice);
            }
            if entry.record.phone_number != msg.from_number {
                return Err(RouteError::NumberMismatch);
            }
        }
        if msg.scope.mode == Mode::Test {
            // The simulated phone of the number sends, never a connected one; the message
            // names a test-mode phone of that number when there is one, as live ones do.
            let named = msg
                .device_id
                .or_else(|| self.test_phone_for(msg.scope, &msg.from_number));
            return Ok(named.map(|device_id| Routed {
                device_id,
                phone: None,
            }));
        }
        let online = match msg.device_id {
            Some(device) => self.is_online(device).then_some(device),
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
        entry.last_seen.heard(now);
        // Stored at once, so the client API and the other nodes see a connected phone as seen.
        let seen = entry.last_seen.take_newer();
        let scope = entry.record.scope();
        addr.do_send(phone::Attach { link: msg.link });
        if came_online {
            self.publish_phone_status(scope, msg.phone_id, true, now);
        }
        self.write_last_seen(seen.map(|at| vec![(msg.phone_id, at)]).unwrap_or_default());
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
        entry.last_seen.heard(now);
        let seen = entry.last_seen.take_newer();
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
        self.write_last_seen(seen.map(|at| vec![(msg.phone_id, at)]).unwrap_or_default());
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
    pub(super) fn unpaired(&mut self, phone_id: Uuid, origin: bool, ctx: &mut Context<Self>) {
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
    pub(super) fn token_rotated(&mut self, phone_id: Uuid) {
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
                                last_seen_at: e.last_seen.live(),
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
        self.store_last_seen(true);
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
        ctx.stop();
    }
}

impl Handler<Seen> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Seen, _: &mut Self::Context) {
        let now = self.deps.clock.now_ms();
        if let Some(entry) = self.phones.get_mut(&msg.phone_id) {
            entry.last_seen.heard(now);
        }
    }
}
