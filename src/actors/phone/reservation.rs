//! A hand-over reserved on a phone before its message is stored (the send fast path,
//! docs/api.md, Messages): [`Reservation::take`] asks the phone for a free session and a pace
//! slot; once the accept answered, the reservation either hands the stored message over
//! ([`Reservation::hand`]) or gives the slot back ([`Reservation::release`]). The `Reserve` /
//! `Handed` / `Release` messages stay between this file and the phone's actor.

use actix::Addr;

use super::{Handed, Phone, Release, Reserve, Ticket};
use crate::store::messages::Message;

/// A granted reservation: the phone and its ticket. Dropping one without [`Reservation::hand`]
/// or [`Reservation::release`] keeps the pace slot taken until the phone's window moves on;
/// every path of the caller ends in one of the two.
#[derive(Debug)]
pub struct Reservation {
    phone: Addr<Phone>,
    ticket: Ticket,
}

/// The phone's actor could not take the handed message (gone because the phone was unpaired
/// meanwhile, or its mailbox is full): the caller puts the message back in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the phone's actor did not take the handed message")]
pub struct NotTaken;

impl Reservation {
    /// Reserves a hand-over on `phone`: None when it is busy, out of pace, or gone.
    pub async fn take(phone: &Addr<Phone>) -> Option<Reservation> {
        match phone.send(Reserve).await {
            Ok(Some(ticket)) => Some(Reservation {
                phone: phone.clone(),
                ticket,
            }),
            _ => None,
        }
    }

    /// Hands `message`, stored as `sending` on this phone, over: its frame goes straight to
    /// the reserved session (the caller runs beside the busy actor thread, not on it), then
    /// the actor tracks it. Should the phone's report overtake `Handed`, the report still
    /// moves the message (it is `sending` on this phone); `Handed` then only adds an entry
    /// that a later disconnect cannot move back.
    pub fn hand(self, message: Message) -> Result<(), NotTaken> {
        let frame_queued = self.phone.connected() && self.ticket.send_frame(&message);
        let handed = Handed {
            ticket: self.ticket,
            message,
            frame_queued,
        };
        self.phone.try_send(handed).map_err(|_| NotTaken)
    }

    /// The message was not stored: the pace slot goes back.
    pub fn release(self) {
        self.phone.do_send(Release {
            ticket: self.ticket,
        });
    }
}
