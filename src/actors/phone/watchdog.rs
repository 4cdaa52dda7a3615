//! The Phone actor's stall watchdog and health reports (docs/api.md, "Phone health"): the
//! decision is `domain::stall::StallWatch`'s; this feeds it the hand-overs and reports, arms
//! its one timer, and tells the registry ([`HealthTo`]) when the line is marked or unmarked
//! and when the phone reported its health on the WebSocket (`status` frame).

use actix::prelude::*;
use uuid::Uuid;

use super::*;
use crate::domain::health::{HealthReport, PhoneHealth, StatusFrame};
use crate::domain::stall::{StallCause, StallChange, StallLimits};

/// A device reported its health (the device API's `system:ping`/`app:started`, the
/// WebSocket `status` frame); `health` is what is stored now. Handled by the registry.
#[derive(Message)]
#[rtype(result = "()")]
pub struct HealthReported {
    pub phone_id: Uuid,
    pub health: PhoneHealth,
}

/// The stall watchdog of a line's Phone actor marked it stalled (docs/api.md, "Phone
/// health"): the line is online, but its messages got no report for `phones.stall_after`, or
/// its last `phones.stall_failures` attempts failed. Handled by the registry.
#[derive(Message)]
#[rtype(result = "()")]
pub struct LineStalled {
    pub phone_id: Uuid,
    /// When the watchdog marked it (ms).
    pub since: i64,
    pub cause: StallCause,
}

/// A stalled line reported a success: its stall is over. Handled by the registry.
#[derive(Message)]
#[rtype(result = "()")]
pub struct LineUnstalled {
    pub phone_id: Uuid,
}

/// Where a Phone actor tells what its watchdog and its phone's health reports change (the
/// registry; a test-mode phone has none).
#[derive(Clone)]
pub struct HealthTo {
    pub health: Recipient<HealthReported>,
    pub stalled: Recipient<LineStalled>,
    pub unstalled: Recipient<LineUnstalled>,
}

impl Phone {
    fn stall_limits(&self) -> StallLimits {
        let phones = &self.deps.settings.phones;
        StallLimits {
            after_ms: i64::try_from(phones.stall_after.as_millis()).unwrap_or(i64::MAX),
            failures: phones.stall_failures,
        }
    }

    /// A message was handed over to the phone now.
    pub(super) fn watch_handed(&mut self, ctx: &mut Context<Self>) {
        if self.health_to.is_none() {
            return;
        }
        self.watch.handed(self.deps.clock.now_ms());
        self.arm_watch(ctx);
    }

    /// A report moved a message: `success` for `sent`/`delivered`, else a failed attempt.
    pub(super) fn watch_reported(&mut self, success: bool, ctx: &mut Context<Self>) {
        if self.health_to.is_none() {
            return;
        }
        let still_waiting = self.queue.depth().in_flight > 0;
        let now = self.deps.clock.now_ms();
        let change = self
            .watch
            .reported(success, still_waiting, now, self.stall_limits());
        self.tell_stall(change);
        self.arm_watch(ctx);
    }

    /// The transport went away: no report is awaited.
    pub(super) fn watch_offline(&mut self, ctx: &mut Context<Self>) {
        self.watch.offline();
        if let Some(handle) = self.watch_timer.take() {
            ctx.cancel_future(handle);
        }
    }

    /// A stall marked before a restart (an open `stalled` episode): a success still ends it.
    pub(super) fn restore_stall(&mut self, ctx: &mut Context<Self>) {
        let (Some(_), Some(device)) = (&self.health_to, self.identity.device_id) else {
            return;
        };
        let db = self.deps.db.clone();
        ctx.spawn(
            async move { crate::store::health::open_alerts(&db, &[device]).await }
                .into_actor(self)
                .map(move |found, act, _| {
                    let since = found.ok().and_then(|mut open| {
                        open.remove(&device)?
                            .into_iter()
                            .find(|a| a.kind == crate::domain::health::AlertKind::Stalled)
                            .map(|a| a.since)
                    });
                    if let (Some(since), None) = (since, act.watch.stalled_since()) {
                        act.watch = StallWatch::restore(since);
                    }
                }),
        );
    }

    /// One timer, at the instant the watchdog could next mark the line.
    fn arm_watch(&mut self, ctx: &mut Context<Self>) {
        if let Some(handle) = self.watch_timer.take() {
            ctx.cancel_future(handle);
        }
        let Some(at) = self.watch.next_check_at(self.stall_limits()) else {
            return;
        };
        let delay = std::time::Duration::from_millis(
            u64::try_from(at - self.deps.clock.now_ms()).unwrap_or(0),
        );
        self.watch_timer = Some(ctx.run_later(delay, |act, ctx| {
            act.watch_timer = None;
            let now = act.deps.clock.now_ms();
            let change = act.watch.check(now, act.stall_limits());
            act.tell_stall(change);
            act.arm_watch(ctx);
        }));
    }

    fn tell_stall(&self, change: Option<StallChange>) {
        let (Some(to), Some(phone_id)) = (&self.health_to, self.identity.device_id) else {
            return;
        };
        match change {
            Some(StallChange::Marked { since, cause }) => to.stalled.do_send(LineStalled {
                phone_id,
                since,
                cause,
            }),
            Some(StallChange::Unmarked) => to.unstalled.do_send(LineUnstalled { phone_id }),
            None => {}
        }
    }

    /// A WebSocket `status` frame: stored over the device's earlier health; a fact out of
    /// bounds is refused with an `error` frame naming it, and nothing is stored.
    pub(super) fn health_frame(
        &mut self,
        frame: StatusFrame,
        done: Option<Done>,
        ctx: &mut Context<Self>,
    ) {
        let report = match HealthReport::of_frame(frame) {
            Ok(report) => report,
            Err(refusal) => {
                self.reject(
                    FrameErrorCode::BadFrame,
                    format!("frame refused: {refusal}"),
                );
                answer(done);
                return;
            }
        };
        let (Some(device), Some(to)) = (self.identity.device_id, self.health_to.clone()) else {
            answer(done);
            return;
        };
        let db = self.deps.db.clone();
        let now = self.deps.clock.now_ms();
        ctx.spawn(
            async move {
                match crate::store::health::record(&db, device, report, now).await {
                    Ok(health) => to.health.do_send(HealthReported {
                        phone_id: device,
                        health,
                    }),
                    Err(err) => {
                        tracing::error!(phone_id = %device, error = %err, "health not stored")
                    }
                }
                answer(done);
            }
            .into_actor(self),
        );
    }
}
