//! The names of the device API compatible with the SMSGate Android app (docs/api.md "Device API
//! for the SMSGate Android app"): a message's states as the app reports them, and the webhook
//! event through which it posts an inbound SMS. Written once here for the server and the
//! simulated app.

/// A message's state in the app's words (`PATCH /message`, `GET /message`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString)]
pub enum AppMessageState {
    /// Received by the app, not yet handed to Android.
    Pending,
    /// Handed to Android.
    Processed,
    Sent,
    Delivered,
    Failed,
}

impl AppMessageState {
    /// The wire name (`Sent`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The app's webhook events smsgw consumes, in the order `GET /webhooks` lists them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString, strum::EnumIter,
)]
pub enum AppEvent {
    /// An SMS arrived on the phone.
    #[strum(serialize = "sms:received")]
    SmsReceived,
    /// The app's periodic health report (battery, charging, network; docs/api.md, "Phone
    /// health").
    #[strum(serialize = "system:ping")]
    SystemPing,
    /// The app started: its SIM cards and their carriers.
    #[strum(serialize = "app:started")]
    AppStarted,
}

impl AppEvent {
    /// The wire name (`sms:received`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back() {
        for state in [
            AppMessageState::Pending,
            AppMessageState::Processed,
            AppMessageState::Sent,
            AppMessageState::Delivered,
            AppMessageState::Failed,
        ] {
            assert_eq!(state.as_str().parse::<AppMessageState>(), Ok(state));
        }
        assert_eq!(AppEvent::SmsReceived.as_str(), "sms:received");
        assert_eq!("system:ping".parse(), Ok(AppEvent::SystemPing));
        assert_eq!("app:started".parse(), Ok(AppEvent::AppStarted));
    }
}
