//! The Phone actor's message handlers: each turns a command, query or event (declared in
//! `mod.rs`) into calls on the queue, the pace log and the link, and the writes they need.

use actix::prelude::*;

use super::*;

impl Handler<Enqueue> for Phone {
    type Result = ();

    fn handle(&mut self, msg: Enqueue, ctx: &mut Self::Context) {
        let now = self.deps.clock.now_ms();
        for message in &msg.messages {
            self.queue.enqueue(QueuedMessage::from(message), now);
        }
        self.dispatch(ctx);
    }
}

impl Handler<Reserve> for Phone {
    type Result = Option<Ticket>;

    fn handle(&mut self, _: Reserve, _: &mut Self::Context) -> Option<Ticket> {
        let link = self.link.as_ref()?;
        let pace = self.pace?;
        if !self.ready || self.queue.ready_len(QueueClass::Single) > 0 {
            return None;
        }
        // With jitter every send waits a random extra moment: it goes through the queue.
        if pace.jitter_seconds > 0 {
            return None;
        }
        let now = self.deps.clock.now();
        if self.log.next_allowed(pace, now).is_some() {
            return None;
        }
        self.log.record(now);
        Some(Ticket {
            link: link.clone(),
            at: now,
            sim_slot: self.identity.sim_slot,
        })
    }
}

impl Handler<Handed> for Phone {
    type Result = ();

    fn handle(&mut self, msg: Handed, ctx: &mut Self::Context) {
        let item = QueuedMessage::from(&msg.message);
        let current = self
            .link
            .as_ref()
            .is_some_and(|link| link.session_id == msg.ticket.link.session_id);
        if msg.frame_queued && current {
            self.queue.track_in_flight(item);
            self.watch_handed(ctx);
        } else {
            // The session it was reserved on ended (or stalled) before the frame could leave:
            // queued again like any message a disconnect interrupted (the phone dedupes by
            // message id; the pace slot stays spent, which errs on the safe side).
            self.requeue(
                item,
                "phone disconnected before the message was sent; queued again",
                ctx,
            );
        }
    }
}

impl Handler<Release> for Phone {
    type Result = ();

    fn handle(&mut self, msg: Release, ctx: &mut Self::Context) {
        if self.log.unrecord(msg.ticket.at) {
            self.dispatch(ctx);
        }
    }
}

impl Handler<Attach> for Phone {
    type Result = ();

    fn handle(&mut self, msg: Attach, ctx: &mut Self::Context) {
        if let Some(old) = self.link.replace(msg.link) {
            self.close_link(
                old,
                crate::domain::protocol::CLOSE_REPLACED,
                "replaced by a newer session",
            );
            self.requeue_in_flight(ctx, "phone reconnected before reporting; sent again");
        }
        // A SIM line shares its device's session, which its device greeted.
        if let (Some(device), Some(link), None) =
            (self.identity.device_id, &self.link, self.identity.sim_slot)
        {
            let pace = self.pace.unwrap_or_default();
            link.send(ServerFrame::Hello {
                device_id: device,
                phone_number: self.identity.number.clone(),
                pace: PaceOut {
                    per_minute: pace.per_minute,
                    per_30_minutes: pace.per_30_minutes,
                },
            });
        }
        self.dispatch(ctx);
    }
}

impl Handler<Detach> for Phone {
    type Result = ();

    fn handle(&mut self, msg: Detach, ctx: &mut Self::Context) {
        if self
            .link
            .as_ref()
            .is_some_and(|l| l.session_id == msg.session_id)
        {
            self.link = None;
            self.watch_offline(ctx);
            self.requeue_in_flight(ctx, "phone disconnected before reporting; queued again");
        }
    }
}

impl Handler<Report> for Phone {
    type Result = ();

    fn handle(&mut self, msg: Report, ctx: &mut Self::Context) {
        self.on_frame(msg.frame, None, ctx);
    }
}

impl Handler<ReportAndWait> for Phone {
    type Result = ();

    fn handle(&mut self, msg: ReportAndWait, ctx: &mut Self::Context) {
        self.on_frame(msg.frame, Some(msg.done), ctx);
    }
}

impl Phone {
    /// A frame from the phone; `done` is answered once its outcome is stored.
    fn on_frame(&mut self, frame: PhoneFrame, done: Option<Done>, ctx: &mut Context<Self>) {
        match frame {
            PhoneFrame::Sent {
                message_id,
                reference,
            } => self.status_report(message_id, StatusReport::Sent, reference, done, ctx),
            PhoneFrame::Delivered {
                message_id,
                reference,
            } => self.status_report(message_id, StatusReport::Delivered, reference, done, ctx),
            PhoneFrame::Failed {
                message_id,
                error,
                reference,
            } => self.status_report(
                message_id,
                // The one place both transports' failure texts pass: cut here, for both.
                StatusReport::Failed {
                    reason: crate::domain::protocol::cut_failure_text(error),
                },
                reference,
                done,
                ctx,
            ),
            PhoneFrame::Received {
                reference,
                from,
                content,
                received_at: _,
            } => self.inbound(reference, from, content, done, ctx),
            PhoneFrame::Heartbeat { .. } => answer(done),
            PhoneFrame::Status(status) => self.health_frame(status, done, ctx),
        }
    }
}

impl Handler<Forget> for Phone {
    type Result = ();

    fn handle(&mut self, msg: Forget, _ctx: &mut Self::Context) {
        if self.queue.remove_waiting(msg.message_id)
            && let Some(link) = &self.link
        {
            link.withdraw(msg.message_id);
        }
    }
}

impl Handler<SetPace> for Phone {
    type Result = ();

    fn handle(&mut self, msg: SetPace, ctx: &mut Self::Context) {
        let had_pace = self.pace.is_some();
        self.pace = msg.pace;
        self.jitter.clear();
        if let Some(handle) = self.wake.take() {
            ctx.cancel_future(handle);
            self.wake_at = None;
        }
        if let Some(pace) = self.pace {
            if self.log.covers(pace) && had_pace {
                self.log.keep_for(pace);
            } else {
                // A daily cap set or raised (or a pace where there was none): the log needs
                // more history than it kept; nothing is sent until it is read back.
                self.widen_log(pace, had_pace, ctx);
                return;
            }
        }
        self.dispatch(ctx);
    }
}

impl Handler<GetNextSendAt> for Phone {
    type Result = Option<chrono::DateTime<chrono::Utc>>;

    fn handle(&mut self, _: GetNextSendAt, _: &mut Self::Context) -> Self::Result {
        let now = self.deps.clock.now();
        crate::domain::pace::next_send_at(self.pace, &self.log, &self.jitter, now)
    }
}

impl Handler<GetLineLoad> for Phone {
    type Result = MessageResult<GetLineLoad>;

    fn handle(&mut self, _: GetLineLoad, _: &mut Self::Context) -> Self::Result {
        let now = self.deps.clock.now();
        let next = crate::domain::pace::next_send_at(self.pace, &self.log, &self.jitter, now);
        // The slowest of its windows sets its steady rate.
        let spacing_ms = self.pace.map_or(0, |p| {
            let per_minute = 60_000 / i64::from(p.per_minute.max(1));
            let per_30 = 1_800_000 / i64::from(p.per_30_minutes.max(1));
            per_minute.max(per_30)
        });
        MessageResult(LineLoad {
            next_send_at: next.map(|t| t.timestamp_millis()),
            queued: u32::try_from(
                self.queue
                    .depth()
                    .ready
                    .iter()
                    .map(|(_, n)| n)
                    .sum::<usize>(),
            )
            .unwrap_or(u32::MAX),
            spacing_ms,
            stalled: self.watch.stalled_since().is_some(),
        })
    }
}

impl Handler<Unpair> for Phone {
    type Result = ();

    fn handle(&mut self, msg: Unpair, ctx: &mut Self::Context) {
        if let Some(link) = self.link.take() {
            self.close_link(link, CLOSE_UNPAIRED, "phone unpaired or token rotated");
        }
        if !msg.stop {
            self.requeue_in_flight(ctx, "phone token rotated before reporting; queued again");
            return;
        }
        self.stopping = true;
        let ids = self.queue.drain_all();
        let writer = self.deps.writer.clone();
        ctx.wait(
            async move {
                for id in ids {
                    let transition = Transition::unpair(id).with_detail("the phone was unpaired");
                    if let Err(err) = writer.transition(transition).await {
                        tracing::error!(message_id = %id, error = %err, "could not fail message of unpaired phone");
                    }
                }
            }
            .into_actor(self)
            .map(|_, _, ctx| ctx.stop()),
        );
    }
}

impl Handler<GetQueueDepth> for Phone {
    type Result = QueueDepth;

    fn handle(&mut self, _: GetQueueDepth, _: &mut Self::Context) -> QueueDepth {
        QueueDepth(self.queue.depth())
    }
}

impl Handler<StopPhone> for Phone {
    type Result = ();

    fn handle(&mut self, _: StopPhone, ctx: &mut Self::Context) {
        if let Some(link) = self.link.take() {
            self.close_link(link, CLOSE_GOING_AWAY, "server is stopping");
        }
        // Nothing is lost: the queue is rebuilt from the database at the next start.
        self.queue.drain_all();
        self.stopping = true;
        ctx.stop();
    }
}

impl Handler<LoadQueued> for Phone {
    type Result = ();

    fn handle(&mut self, msg: LoadQueued, ctx: &mut Self::Context) {
        self.load_queued(msg.ids, ctx);
    }
}

impl Handler<HandBack> for Phone {
    type Result = MessageResult<HandBack>;

    fn handle(&mut self, _: HandBack, _: &mut Self::Context) -> Self::Result {
        let ids = self.queue.hand_back();
        MessageResult(ids)
    }
}
