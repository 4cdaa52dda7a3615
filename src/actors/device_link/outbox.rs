//! What the device API hands a phone: the id a send goes by in the app ([`AppMessageId`]), a
//! hand-over not yet reported ([`Handout`]), and the phone's outbox of them in hand-over order.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::sim_slot::SimSlot;

/// The id a message goes by in the app for one send: the smsgw message id for its first send
/// (so the app, the API and the webhooks speak of one id), `<message id>-<n>` for the n-th send
/// after n - 1 failures the phone reported. The app keeps every id it has seen and answers a
/// known one by reporting its state again, never by sending it again: a retry after `Failed`
/// needs a new id. A send interrupted by a disconnect keeps its id, so the app, which may have
/// sent it already, does not send it twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppMessageId {
    pub message_id: Uuid,
    /// 1 for the first send, one more after each failure the phone reported.
    pub send: u32,
}

impl AppMessageId {
    /// The id of the send that follows `failures` reported failures.
    pub fn after_failures(message_id: Uuid, failures: u32) -> AppMessageId {
        AppMessageId {
            message_id,
            send: failures.saturating_add(1),
        }
    }

    /// Reads an id the app reports; None for anything this server did not hand out.
    pub fn parse(text: &str) -> Option<AppMessageId> {
        let uuid = text.get(..36)?;
        let message_id = Uuid::try_parse(uuid).ok()?;
        let send = match &text[36..] {
            "" => 1,
            rest => {
                let digits = rest.strip_prefix('-')?;
                if digits.is_empty()
                    || digits.starts_with('0')
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return None;
                }
                let send: u32 = digits.parse().ok()?;
                if send < 2 {
                    return None;
                }
                send
            }
        };
        Some(AppMessageId { message_id, send })
    }
}

impl fmt::Display for AppMessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.send <= 1 {
            write!(f, "{}", self.message_id)
        } else {
            write!(f, "{}-{}", self.message_id, self.send)
        }
    }
}

/// A message handed over to the phone and not yet reported on.
#[derive(Debug, Clone)]
pub struct Handout {
    pub message_id: Uuid,
    pub to: String,
    pub content: String,
    pub attempt: u32,
    pub handed_at: DateTime<Utc>,
    /// The id an earlier fetch served this send under (the link's `named` record); None until then.
    pub app_id: Option<AppMessageId>,
    /// The SIM slot of the line that sent it (the app's `simNumber`); None for the device's own.
    pub sim_slot: Option<SimSlot>,
}

/// The hand-overs of one phone not yet reported, in hand-over order, each message at most once.
/// A backlog can hold thousands: adding, finding and removing one message does not walk them.
#[derive(Default)]
pub(super) struct Outbox {
    /// Hand-overs by their place in the order.
    by_place: BTreeMap<u64, Handout>,
    /// The place of each message's hand-over.
    place_of: HashMap<Uuid, u64>,
    /// The place of the next hand-over.
    next: u64,
}

impl Outbox {
    /// Adds a hand-over at the end, in place of an earlier one of the same message.
    pub(super) fn push(&mut self, handout: Handout) {
        self.remove(handout.message_id);
        let place = self.next;
        self.next += 1;
        self.place_of.insert(handout.message_id, place);
        self.by_place.insert(place, handout);
    }

    /// Removes the hand-over of `message_id`; it is returned when there was one.
    pub(super) fn remove(&mut self, message_id: Uuid) -> Option<Handout> {
        let place = self.place_of.remove(&message_id)?;
        self.by_place.remove(&place)
    }

    pub(super) fn get(&self, message_id: Uuid) -> Option<&Handout> {
        self.place_of
            .get(&message_id)
            .and_then(|place| self.by_place.get(place))
    }

    pub(super) fn contains(&self, message_id: Uuid) -> bool {
        self.place_of.contains_key(&message_id)
    }

    /// Oldest hand-over first.
    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = &Handout> {
        self.by_place.values()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_place.is_empty()
    }

    pub(super) fn clear(&mut self) {
        self.by_place.clear();
        self.place_of.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_send_goes_by_the_message_id_and_each_retry_by_a_new_one() {
        let id = Uuid::now_v7();
        let first = AppMessageId::after_failures(id, 0);
        assert_eq!(first.to_string(), id.to_string());
        let third = AppMessageId::after_failures(id, 2);
        assert_eq!(third.to_string(), format!("{id}-3"));
        for app_id in [first, third] {
            assert_eq!(AppMessageId::parse(&app_id.to_string()), Some(app_id));
        }
    }

    #[test]
    fn ids_this_server_never_hands_out_are_not_read() {
        let id = Uuid::now_v7();
        for bad in [
            String::new(),
            "not-a-uuid".to_string(),
            format!("{id}-"),
            format!("{id}-1"),
            format!("{id}-02"),
            format!("{id}-+2"),
            format!("{id}-2x"),
            format!("{id}2"),
            format!("{id}-99999999999"),
            format!("{}é", &id.to_string()[..35]),
        ] {
            assert_eq!(AppMessageId::parse(&bad), None, "{bad}");
        }
    }

    fn handout(message_id: Uuid) -> Handout {
        Handout {
            sim_slot: None,
            message_id,
            to: "+14155550100".into(),
            content: "hi".into(),
            attempt: 1,
            handed_at: Utc::now(),
            app_id: None,
        }
    }

    #[test]
    fn the_outbox_keeps_hand_over_order_and_each_message_once() {
        let mut outbox = Outbox::default();
        let ids: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();
        for id in &ids {
            outbox.push(handout(*id));
        }
        // Handed over again (after a detach, say): one entry, now the newest.
        outbox.push(handout(ids[1]));
        assert!(outbox.remove(ids[3]).is_some());
        assert!(outbox.remove(ids[3]).is_none());
        let order: Vec<Uuid> = outbox.iter().map(|h| h.message_id).collect();
        assert_eq!(order, [ids[0], ids[2], ids[4], ids[1]]);
        let newest: Vec<Uuid> = outbox.iter().rev().map(|h| h.message_id).collect();
        assert_eq!(newest, [ids[1], ids[4], ids[2], ids[0]]);
        assert!(outbox.contains(ids[2]) && !outbox.contains(ids[3]));
        outbox.clear();
        assert!(outbox.is_empty() && !outbox.contains(ids[0]));
    }
}
