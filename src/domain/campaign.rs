//! Campaign statuses, the moves between them (docs/api.md, Campaigns), and how a recipient's status
//! is read from its message.

use super::status::MessageStatus;

/// Where a campaign is in its life (its wire name in `snake_case`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[schema(as = CampaignStatusOut)]
pub enum CampaignStatus {
    Draft,
    Scheduled,
    Running,
    Paused,
    Completed,
    Canceled,
}

/// An operation on a campaign through the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Launch,
    Pause,
    Resume,
    Cancel,
}

impl CampaignStatus {
    pub const ALL: [CampaignStatus; 6] = [
        CampaignStatus::Draft,
        CampaignStatus::Scheduled,
        CampaignStatus::Running,
        CampaignStatus::Paused,
        CampaignStatus::Completed,
        CampaignStatus::Canceled,
    ];

    /// The wire and storage name.
    pub fn as_str(self) -> &'static str {
        match self {
            CampaignStatus::Draft => "draft",
            CampaignStatus::Scheduled => "scheduled",
            CampaignStatus::Running => "running",
            CampaignStatus::Paused => "paused",
            CampaignStatus::Completed => "completed",
            CampaignStatus::Canceled => "canceled",
        }
    }

    /// Parses a wire or storage name.
    pub fn parse(text: &str) -> Option<CampaignStatus> {
        CampaignStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Whether the campaign has an actor: it is running or waiting for its start.
    pub fn is_live(self) -> bool {
        matches!(self, CampaignStatus::Scheduled | CampaignStatus::Running)
    }

    /// Whether `DELETE /v1/campaigns/{id}` removes a campaign in this status: a draft or a
    /// finished one. A scheduled, running or paused campaign is canceled first, so no actor on
    /// any node is feeding it when it goes.
    pub fn is_deletable(self) -> bool {
        matches!(
            self,
            CampaignStatus::Draft | CampaignStatus::Completed | CampaignStatus::Canceled
        )
    }

    /// The status `control` leads to from `self`, or None when docs/api.md, Campaigns, does not
    /// allow it.
    /// `starts_later`: scheduled_for is still ahead (launch and resume then wait for it).
    pub fn after(self, control: Control, starts_later: bool) -> Option<CampaignStatus> {
        use CampaignStatus::*;
        let started = if starts_later { Scheduled } else { Running };
        match (self, control) {
            (Draft, Control::Launch) => Some(started),
            (Scheduled | Running, Control::Pause) => Some(Paused),
            (Paused, Control::Resume) => Some(started),
            (Draft | Scheduled | Running | Paused, Control::Cancel) => Some(Canceled),
            _ => None,
        }
    }
}

impl std::fmt::Display for CampaignStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a campaign paused itself (`paused_reason`, docs/api.md "Campaigns"); a pause through the
/// API has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "snake_case")]
pub enum PauseReason {
    /// The test-mode daily message quota is used up: the rest waits for a resume.
    DailyQuotaExceeded,
}

impl PauseReason {
    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Why a campaign recipient was skipped or canceled without a message (`skip_reason`,
/// docs/api.md "Campaigns").
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum SkipReason {
    /// The contact opted out (STOP) before the campaign reached it.
    OptedOut,
    /// The number is premium-rate.
    PremiumRate,
}

impl SkipReason {
    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Why a campaign recipient failed before any message was made: its rendered text cannot be
/// sent (`failure_reason`, docs/api.md "Campaigns").
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum RenderFailure {
    /// The rendered text is empty.
    ContentEmpty,
    /// The rendered text is over the segment limit.
    ContentTooLong,
}

impl RenderFailure {
    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What a recipient's status is (the names of `counts` and of the recipients list).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[schema(as = RecipientStatusOut)]
pub enum RecipientStatus {
    Pending,
    Queued,
    Sent,
    Delivered,
    Failed,
    Canceled,
    Skipped,
}

impl RecipientStatus {
    pub const ALL: [RecipientStatus; 7] = [
        RecipientStatus::Pending,
        RecipientStatus::Queued,
        RecipientStatus::Sent,
        RecipientStatus::Delivered,
        RecipientStatus::Failed,
        RecipientStatus::Canceled,
        RecipientStatus::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RecipientStatus::Pending => "pending",
            RecipientStatus::Queued => "queued",
            RecipientStatus::Sent => "sent",
            RecipientStatus::Delivered => "delivered",
            RecipientStatus::Failed => "failed",
            RecipientStatus::Canceled => "canceled",
            RecipientStatus::Skipped => "skipped",
        }
    }

    pub fn parse(text: &str) -> Option<RecipientStatus> {
        RecipientStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
    }

    /// The recipient status of a recipient whose message is in `status`.
    pub fn of_message(status: MessageStatus) -> RecipientStatus {
        match status {
            MessageStatus::Queued | MessageStatus::Sending => RecipientStatus::Queued,
            MessageStatus::Sent => RecipientStatus::Sent,
            MessageStatus::Delivered => RecipientStatus::Delivered,
            MessageStatus::Failed | MessageStatus::Expired => RecipientStatus::Failed,
            MessageStatus::Canceled => RecipientStatus::Canceled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CampaignStatus::*;
    use super::*;

    #[test]
    fn the_contract_table_and_nothing_else() {
        assert_eq!(Draft.after(Control::Launch, false), Some(Running));
        assert_eq!(Draft.after(Control::Launch, true), Some(Scheduled));
        assert_eq!(Scheduled.after(Control::Pause, true), Some(Paused));
        assert_eq!(Running.after(Control::Pause, false), Some(Paused));
        assert_eq!(Paused.after(Control::Resume, false), Some(Running));
        assert_eq!(Paused.after(Control::Resume, true), Some(Scheduled));
        for from in [Draft, Scheduled, Running, Paused] {
            assert_eq!(from.after(Control::Cancel, false), Some(Canceled));
        }
        for from in CampaignStatus::ALL {
            for control in [
                Control::Launch,
                Control::Pause,
                Control::Resume,
                Control::Cancel,
            ] {
                let allowed = matches!(
                    (from, control),
                    (Draft, Control::Launch)
                        | (Scheduled | Running, Control::Pause)
                        | (Paused, Control::Resume)
                        | (Draft | Scheduled | Running | Paused, Control::Cancel)
                );
                assert_eq!(
                    from.after(control, false).is_some(),
                    allowed,
                    "{from} {control:?}"
                );
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for s in CampaignStatus::ALL {
            assert_eq!(CampaignStatus::parse(s.as_str()), Some(s));
        }
        for s in RecipientStatus::ALL {
            assert_eq!(RecipientStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(CampaignStatus::parse("done"), None);
        let reason = PauseReason::DailyQuotaExceeded;
        assert_eq!(reason.as_str(), "daily_quota_exceeded");
        assert_eq!(reason.as_str().parse::<PauseReason>(), Ok(reason));
    }

    /// Only a campaign no actor feeds can be deleted; the others are canceled first.
    #[test]
    fn drafts_and_finished_campaigns_are_deletable() {
        let deletable: Vec<CampaignStatus> = CampaignStatus::ALL
            .into_iter()
            .filter(|s| s.is_deletable())
            .collect();
        assert_eq!(deletable, [Draft, Completed, Canceled]);
        assert!(deletable.iter().all(|s| !s.is_live()));
    }

    #[test]
    fn expired_messages_count_as_failed_and_sending_as_queued() {
        assert_eq!(
            RecipientStatus::of_message(MessageStatus::Expired),
            RecipientStatus::Failed
        );
        assert_eq!(
            RecipientStatus::of_message(MessageStatus::Sending),
            RecipientStatus::Queued
        );
    }
}
