//! A committed change of a message, as the writer publishes it after its batch commits. Its
//! own file below both the writer (which publishes changes) and the webhook subscriptions
//! (which turn them into deliveries), so neither imports the other for it.

use crate::domain::change::ChangeKind;

use super::messages::Message;

/// A committed change, published after its batch commits (the webhook fan-out listens).
#[derive(Debug, Clone)]
pub struct Change {
    pub kind: ChangeKind,
    pub message: Message,
}
