//! Where the writer's committed changes go (the writer's change listener): day counts to
//! `DailyStats`, status events to the portal's live streams, campaign messages' changes to the
//! campaigns, inbound messages to the AI responder, and one metric per transition. What goes
//! where is [`Routed::of`], a plain function; [`ChangeRouter`] sends it.

use std::sync::{Arc, OnceLock};

use actix::Recipient;

use crate::actors::ai::Received;
use crate::actors::campaign::{CampaignChange, CampaignChanges};
use crate::actors::daily_stats::Counted;
use crate::domain::change::ChangeKind;
use crate::live_events::{LiveEvent, LiveEvents, LiveMessageStatus};
use crate::store::messages::Message;
use crate::store::scoped::Scope;
use crate::store::writer::{Change, ChangeListener};

/// Where one batch of committed changes goes. An AI draft goes nowhere but the day counts
/// (which ignore it): it is no transition of its message.
pub struct Routed {
    /// Day counts of the batch (`DailyStats`).
    pub counted: Counted,
    /// One status event per change, to the streams of the message's workspace and mode.
    pub live: Vec<(Scope, LiveEvent)>,
    /// The changes of campaign messages, in commit order.
    pub campaigns: Vec<CampaignChange>,
    /// Inbound messages just stored.
    pub received: Vec<Message>,
}

impl Routed {
    /// Sorts a batch of committed changes by where each goes.
    pub fn of(changes: Vec<Change>) -> Routed {
        let counted = Counted::of(&changes);
        let mut routed = Routed {
            counted,
            live: Vec::with_capacity(changes.len()),
            campaigns: Vec::new(),
            received: Vec::new(),
        };
        for change in changes {
            if change.kind == ChangeKind::AiDraft {
                continue;
            }
            let message = change.message;
            let status = LiveMessageStatus {
                id: message.id,
                status: message.status,
                direction: message.direction,
            };
            let scope = Scope {
                workspace_id: message.workspace_id,
                mode: message.mode,
            };
            routed.live.push((scope, LiveEvent::MessageStatus(status)));
            if let Some(campaign) = message.campaign_id {
                routed.campaigns.push(CampaignChange {
                    campaign,
                    message: message.id.into(),
                    status: message.status,
                });
            }
            if change.kind == ChangeKind::Received {
                routed.received.push(message);
            }
        }
        routed
    }
}

/// Sends each batch of committed changes where [`Routed::of`] says. The campaigns and the AI
/// responder start after the writer (they need it), so they are attached once they run; a
/// change committed before that reaches neither, as before their first start they rebuild
/// themselves from the database anyway.
pub struct ChangeRouter {
    daily_stats: Recipient<Counted>,
    live: Arc<LiveEvents>,
    campaigns: OnceLock<Recipient<CampaignChanges>>,
    ai: OnceLock<Recipient<Received>>,
}

impl ChangeRouter {
    /// A router to the day counts and the live streams; campaigns and AI attach later.
    pub fn new(daily_stats: Recipient<Counted>, live: Arc<LiveEvents>) -> Arc<ChangeRouter> {
        Arc::new(ChangeRouter {
            daily_stats,
            live,
            campaigns: OnceLock::new(),
            ai: OnceLock::new(),
        })
    }

    /// From now on, campaign messages' changes go to `campaigns` (the first call wins).
    pub fn attach_campaigns(&self, campaigns: Recipient<CampaignChanges>) {
        let _ = self.campaigns.set(campaigns);
    }

    /// From now on, inbound messages go to `ai` (the first call wins).
    pub fn attach_ai(&self, ai: Recipient<Received>) {
        let _ = self.ai.set(ai);
    }

    /// The writer's change listener that routes through this router.
    pub fn listener(self: &Arc<Self>) -> ChangeListener {
        let router = self.clone();
        Arc::new(move |changes: Vec<Change>| router.deliver(changes))
    }

    /// Counts each transition, then sends the batch where it goes. Never waits: every send is
    /// a `do_send` to a bounded mailbox or a live stream's bounded buffer.
    pub fn deliver(&self, changes: Vec<Change>) {
        for change in changes.iter().filter(|c| c.kind != ChangeKind::AiDraft) {
            metrics::counter!(crate::telemetry::names::MESSAGE_TRANSITIONS, "kind" => change.kind.as_str())
                .increment(1);
            tracing::debug!(message_id = %change.message.id, kind = change.kind.as_str(), "message changed");
            if change.message.campaign_id.is_some() {
                crate::telemetry::count_campaign_message(change.kind);
            }
        }
        let routed = Routed::of(changes);
        if !routed.counted.counts.is_empty() {
            self.daily_stats.do_send(routed.counted);
        }
        self.live.publish(routed.live);
        if !routed.campaigns.is_empty()
            && let Some(campaigns) = self.campaigns.get()
        {
            campaigns.do_send(CampaignChanges(routed.campaigns));
        }
        if !routed.received.is_empty()
            && let Some(ai) = self.ai.get()
        {
            ai.do_send(Received(routed.received));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use actix::{Actor, Context, Handler};
    use uuid::Uuid;

    use super::*;
    use crate::domain::ids::{CampaignId, WorkspaceId};
    use crate::domain::status::{Direction, MessageStatus, Mode, QueueClass};

    fn message(
        direction: Direction,
        status: MessageStatus,
        campaign: Option<CampaignId>,
    ) -> Message {
        Message {
            id: Uuid::now_v7(),
            workspace_id: WorkspaceId::from(Uuid::now_v7()),
            mode: Mode::Live,
            direction,
            status,
            class: QueueClass::Single,
            from_number: String::new(),
            to_number: "+14155550100".into(),
            content: "hello".into(),
            segments: 1,
            encoding: crate::domain::sms::Encoding::Gsm7,
            device_id: None,
            pinned: false,
            campaign_id: campaign,
            request_id: None,
            scheduled_for: None,
            expires_at: 0,
            created_at: 0,
            updated_at: 0,
            sent_at: None,
            delivered_at: None,
            failed_at: None,
            failure_reason: None,
            send_attempts: 0,
            client: None,
            pool_id: None,
        }
    }

    fn change(kind: ChangeKind, message: Message) -> Change {
        Change { kind, message }
    }

    fn outbound(status: MessageStatus, campaign: Option<CampaignId>) -> Change {
        change(
            ChangeKind::Moved(status),
            message(Direction::Outbound, status, campaign),
        )
    }

    fn inbound() -> Change {
        change(
            ChangeKind::Received,
            message(Direction::Inbound, MessageStatus::Delivered, None),
        )
    }

    #[test]
    fn a_status_move_goes_to_the_live_streams_of_its_scope_only() {
        let moved = outbound(MessageStatus::Sent, None);
        let (id, scope) = (
            moved.message.id,
            Scope {
                workspace_id: moved.message.workspace_id,
                mode: Mode::Live,
            },
        );
        let routed = Routed::of(vec![moved]);
        assert_eq!(routed.live.len(), 1);
        let (to, LiveEvent::MessageStatus(event)) = &routed.live[0] else {
            panic!("not a message status event");
        };
        assert_eq!(
            (*to, event.id, event.status),
            (scope, id, MessageStatus::Sent)
        );
        assert!(routed.campaigns.is_empty() && routed.received.is_empty());
        assert_eq!(routed.counted.counts.len(), 1, "a send is counted");
    }

    #[test]
    fn a_campaign_message_change_also_goes_to_its_campaign_in_commit_order() {
        let campaign = CampaignId::from(Uuid::now_v7());
        let first = outbound(MessageStatus::Sent, Some(campaign));
        let second = outbound(MessageStatus::Failed, Some(campaign));
        let ids = [first.message.id, second.message.id];
        let routed = Routed::of(vec![first, outbound(MessageStatus::Sent, None), second]);
        let to_campaign: Vec<_> = routed
            .campaigns
            .iter()
            .map(|c| (c.campaign, c.message.as_uuid(), c.status))
            .collect();
        assert_eq!(
            to_campaign,
            [
                (campaign, ids[0], MessageStatus::Sent),
                (campaign, ids[1], MessageStatus::Failed)
            ]
        );
        assert_eq!(routed.live.len(), 3);
    }

    #[test]
    fn an_inbound_message_goes_to_the_ai_responder_and_the_live_streams() {
        let received = inbound();
        let id = received.message.id;
        let routed = Routed::of(vec![received]);
        assert_eq!(
            routed.received.iter().map(|m| m.id).collect::<Vec<_>>(),
            [id]
        );
        assert_eq!(routed.live.len(), 1);
    }

    #[test]
    fn an_ai_draft_goes_nowhere() {
        let draft = change(
            ChangeKind::AiDraft,
            message(
                Direction::Inbound,
                MessageStatus::Delivered,
                Some(CampaignId::from(Uuid::now_v7())),
            ),
        );
        let routed = Routed::of(vec![draft]);
        assert!(routed.live.is_empty());
        assert!(routed.campaigns.is_empty());
        assert!(routed.received.is_empty());
        assert!(routed.counted.counts.is_empty());
    }

    /// Keeps what it is sent.
    #[derive(Default)]
    struct Collect {
        counted: usize,
        campaign_changes: Vec<CampaignChange>,
        received: Vec<Uuid>,
    }

    impl Actor for Collect {
        type Context = Context<Self>;
    }

    impl Handler<Counted> for Collect {
        type Result = ();
        fn handle(&mut self, counted: Counted, _: &mut Context<Self>) {
            self.counted += counted.counts.len();
        }
    }

    impl Handler<CampaignChanges> for Collect {
        type Result = ();
        fn handle(&mut self, changes: CampaignChanges, _: &mut Context<Self>) {
            self.campaign_changes.extend(changes.0);
        }
    }

    impl Handler<Received> for Collect {
        type Result = ();
        fn handle(&mut self, received: Received, _: &mut Context<Self>) {
            self.received.extend(received.0.iter().map(|m| m.id));
        }
    }

    #[derive(actix::Message)]
    #[rtype(result = "(usize, usize, Vec<Uuid>)")]
    struct Take;

    impl Handler<Take> for Collect {
        type Result = actix::MessageResult<Take>;
        fn handle(&mut self, _: Take, _: &mut Context<Self>) -> Self::Result {
            actix::MessageResult((
                self.counted,
                self.campaign_changes.len(),
                std::mem::take(&mut self.received),
            ))
        }
    }

    #[actix_web::test]
    async fn the_listener_reaches_campaigns_and_ai_only_once_they_are_attached() {
        let collect = Collect::default().start();
        let router = ChangeRouter::new(collect.clone().recipient(), Arc::default());
        let listener = router.listener();
        let campaign = CampaignId::from(Uuid::now_v7());

        listener(vec![
            outbound(MessageStatus::Sent, Some(campaign)),
            inbound(),
        ]);
        assert_eq!(collect.send(Take).await.unwrap(), (2, 0, vec![]));

        router.attach_campaigns(collect.clone().recipient());
        router.attach_ai(collect.clone().recipient());
        let received = inbound();
        let id = received.message.id;
        listener(vec![
            outbound(MessageStatus::Sent, Some(campaign)),
            received,
        ]);
        let (counted, to_campaigns, to_ai) = collect.send(Take).await.unwrap();
        assert_eq!((counted, to_campaigns, to_ai), (4, 1, vec![id]));
    }
}
