//! The Registry's handlers of its own messages (declared in `mod.rs`): routing, phones
//! connecting and going away, pairing changes, states, shutdown. Those of the cluster are
//! in `cluster.rs`.

use actix::prelude::*;
use uuid::Uuid;

use super::directory::Target;
use super::*;
use crate::cluster::PhoneChange;

impl Handler<Route> for Registry {
    type Result = Result<Option<Routed>, RouteError>;

    fn handle(&mut self, msg: Route, _: &mut Self::Context) -> Self::Result {
        let target = self
            .directory
            .route(msg.scope, &msg.from_number, msg.device_id)?;
        Ok(target.and_then(|target| match target {
            Target::Here(device_id) => self.phone_addr(device_id).map(|phone| Routed {
                device_id,
                phone: Some(phone),
            }),
            // Online on another node: the send takes the queue, and that node is told.
            Target::Elsewhere(device_id) => Some(Routed {
                device_id,
                phone: None,
            }),
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
        if self.directory.contains(msg.phone_id) || self.deps.cluster.is_none() {
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
                        && !act.directory.contains(record.id)
                    {
                        act.directory.insert(record);
                    }
                    act.connected(msg)
                }),
        )
    }
}

impl Registry {
    /// A transport connected for a device: the device and each of its SIM lines go online on
    /// the same link. The device's actor, which the transport reports to.
    fn connected(&mut self, msg: Connected) -> Option<Addr<Phone>> {
        let addr = self.connect_one(msg.phone_id, msg.link.clone())?;
        for line in self.directory.lines_of(msg.phone_id) {
            self.connect_one(line, msg.link.clone());
        }
        self.links.insert(msg.phone_id, msg.link);
        Some(addr)
    }

    /// One phone (a device or a line) connected on `link`.
    fn connect_one(&mut self, phone_id: Uuid, link: Link) -> Option<Addr<Phone>> {
        let addr = self.phone_addr(phone_id)?;
        let now = self.deps.clock.now_ms();
        let connection = self.directory.connected(phone_id, link.session_id, now)?;
        addr.do_send(phone::Attach { link });
        if connection.came_online {
            self.publish_phone_status(connection.scope, phone_id, true, now);
            self.outage_ended(phone_id, now);
        }
        // Stored at once, so the client API and the other nodes see a connected phone as seen.
        self.write_last_seen(
            connection
                .seen
                .map(|at| vec![(phone_id, at)])
                .unwrap_or_default(),
        );
        Some(addr)
    }

    /// A SIM line was paired (here or on another node): when its device's transport is
    /// connected here, the line goes online on it at once.
    pub(super) fn attach_line(&mut self, record: &PhoneRecord) {
        let Some(line) = record.line else { return };
        // Attached already (a changed record of a connected line): a second Attach of the same
        // link would close it as replaced.
        if self.directory.connected_here(record.id)
            || !self.directory.connected_here(line.device_phone_id)
        {
            return;
        }
        if let Some(link) = self.links.get(&line.device_phone_id).cloned() {
            self.connect_one(record.id, link);
        }
    }
}

impl Handler<ConnectIfIdle> for Registry {
    type Result = ResponseActFuture<Self, Result<Addr<Phone>, NotAttached>>;

    fn handle(&mut self, msg: ConnectIfIdle, ctx: &mut Self::Context) -> Self::Result {
        if self.directory.connected_here(msg.phone_id) {
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
        if self
            .links
            .get(&msg.phone_id)
            .is_some_and(|link| link.session_id == msg.session_id)
        {
            self.links.remove(&msg.phone_id);
        }
        // A device's SIM lines were connected on the same session: they go with it.
        for line in self.directory.lines_of(msg.phone_id) {
            self.disconnect_one(line, msg.session_id, ctx);
        }
        self.disconnect_one(msg.phone_id, msg.session_id, ctx);
    }
}

impl Registry {
    /// Session `session_id` of one phone (a device or a line) closed.
    fn disconnect_one(&mut self, phone_id: Uuid, session_id: u64, ctx: &mut Context<Self>) {
        let now = self.deps.clock.now_ms();
        let Some(gone) = self.directory.disconnected(phone_id, session_id, now) else {
            return;
        };
        if let Some(addr) = &gone.actor {
            addr.do_send(phone::Detach { session_id });
        }
        if gone.went_offline {
            self.publish_phone_status(gone.scope, phone_id, false, now);
            self.outage_began(phone_id, now, ctx);
        }
        if let Some(addr) = gone.actor
            && !gone.reroute_to.is_empty()
        {
            self.reroute_from(ctx, addr, phone_id, gone.reroute_to, false);
        }
        if gone.went_offline
            && let Some(cluster) = self.deps.cluster.clone()
        {
            cluster.tell(crate::cluster::Notice::Offline {
                phone: phone_id,
                node: cluster.node(),
            });
            ctx.run_later(OFFLINE_GRACE, move |act, _| {
                if act.directory.contains(phone_id) && !act.directory.connected_here(phone_id) {
                    act.let_go(phone_id);
                }
            });
        }
        self.write_last_seen(gone.seen.map(|at| vec![(phone_id, at)]).unwrap_or_default());
    }
}

impl Handler<Paired> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Paired, _: &mut Self::Context) {
        self.announce(msg.phone.id, PhoneChange::Paired);
        self.directory.insert(msg.phone.clone());
        self.attach_line(&msg.phone);
    }
}

impl Handler<PaceChanged> for Registry {
    type Result = ();

    fn handle(&mut self, msg: PaceChanged, _: &mut Self::Context) {
        self.announce(msg.phone_id, PhoneChange::PaceChanged);
        let Some(pace) = self.directory.set_pace(msg.phone_id, msg.pace) else {
            return;
        };
        if let Some(addr) = self.directory.actor(msg.phone_id) {
            addr.do_send(phone::SetPace { pace: Some(pace) });
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
    /// A device's SIM lines were deleted with it: each is unpaired first.
    pub(super) fn unpaired(&mut self, phone_id: Uuid, origin: bool, ctx: &mut Context<Self>) {
        for line in self.directory.lines_of(phone_id) {
            self.unpaired(line, origin, ctx);
        }
        self.links.remove(&phone_id);
        let Some(removed) = self.directory.unpaired(phone_id) else {
            return;
        };
        match removed.actor {
            Some(addr) => {
                // Unpinned messages move to another phone with the number; pinned ones fail.
                if !removed.reroute_to.is_empty() {
                    self.reroute_from(ctx, addr.clone(), phone_id, removed.reroute_to, true);
                }
                addr.do_send(phone::Unpair { stop: true });
            }
            None if !origin || removed.online_elsewhere => {}
            None => {
                // No actor: fail its queued messages straight from the database.
                let deps = self.deps.clone();
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
    /// The device's transport closes, and with it its SIM lines'.
    pub(super) fn token_rotated(&mut self, phone_id: Uuid) {
        for line in self.directory.lines_of(phone_id) {
            if let Some(addr) = self.directory.token_rotated(line) {
                addr.do_send(phone::Unpair { stop: false });
            }
        }
        self.links.remove(&phone_id);
        if let Some(addr) = self.directory.token_rotated(phone_id) {
            addr.do_send(phone::Unpair { stop: false });
        }
    }
}

impl Handler<GetPhoneStates> for Registry {
    type Result = MessageResult<GetPhoneStates>;

    fn handle(&mut self, msg: GetPhoneStates, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.directory.states(msg.ids))
    }
}

impl Handler<CountOnline> for Registry {
    type Result = usize;

    fn handle(&mut self, _: CountOnline, _: &mut Self::Context) -> usize {
        self.directory.count_connected_here()
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
        for addr in self.directory.drain() {
            addr.do_send(phone::StopPhone);
        }
        ctx.stop();
    }
}

impl Handler<Seen> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Seen, _: &mut Self::Context) {
        let now = self.deps.clock.now_ms();
        self.directory.seen(msg.phone_id, now);
    }
}

impl Handler<LineFrame> for Registry {
    type Result = ();

    fn handle(&mut self, msg: LineFrame, _: &mut Self::Context) {
        let phone_id = self
            .directory
            .line_on(msg.device_id, msg.sim_slot)
            .unwrap_or(msg.device_id);
        // Unknown (unpaired meanwhile): a waiting transport hears nothing stored and the phone
        // retries, as for any unpaired phone.
        let Some(addr) = self.phone_addr(phone_id) else {
            return;
        };
        match msg.done {
            Some(done) => addr.do_send(phone::ReportAndWait {
                frame: msg.frame,
                done,
            }),
            None => addr.do_send(phone::Report {
                session_id: msg.session_id,
                frame: msg.frame,
            }),
        }
    }
}
