//! The test-mode phone: a transport that "sends" after `test_mode.deliver_after` and
//! "delivers" after it again (docs/api.md, Test mode), with the magic recipients of test mode.

use std::time::Duration;

use actix::Addr;
use tokio::sync::mpsc;

use super::link::{LINK_CAPACITY, Link, Outgoing, next_session_id};
use super::phone::{Phone, Report};
use crate::domain::protocol::{PhoneFrame, ServerFrame};

/// Every attempt to this test recipient fails.
pub const MAGIC_FAIL: &str = "+15005550001";
/// This test recipient is sent but never delivered.
pub const MAGIC_NEVER_DELIVERED: &str = "+15005550002";

/// Starts a simulated transport for `phone` and returns its link.
pub fn attach(phone: Addr<Phone>, deliver_after: Duration) -> Link {
    let (tx, mut rx) = mpsc::channel(LINK_CAPACITY);
    let session_id = next_session_id();
    actix::spawn(async move {
        while let Some(outgoing) = rx.recv().await {
            let Outgoing::Frame(frame) = outgoing else {
                continue;
            };
            let ServerFrame::Send { message_id, to, .. } = *frame else {
                continue;
            };
            let phone = phone.clone();
            actix::spawn(async move {
                tokio::time::sleep(deliver_after).await;
                if to == MAGIC_FAIL {
                    phone.do_send(Report {
                        session_id,
                        frame: PhoneFrame::Failed {
                            message_id,
                            error: "simulated failure (test recipient +15005550001)".into(),
                            reference: None,
                        },
                    });
                    return;
                }
                phone.do_send(Report {
                    session_id,
                    frame: PhoneFrame::Sent {
                        message_id,
                        reference: None,
                    },
                });
                if to == MAGIC_NEVER_DELIVERED {
                    return;
                }
                tokio::time::sleep(deliver_after).await;
                phone.do_send(Report {
                    session_id,
                    frame: PhoneFrame::Delivered {
                        message_id,
                        reference: None,
                    },
                });
            });
        }
    });
    Link { session_id, tx }
}

/// After a restart: test-mode messages the simulated carrier had not delivered yet are
/// delivered after `deliver_after`, as if the carrier's report had just arrived.
pub fn resume_delivery(phone: Addr<Phone>, message_ids: Vec<uuid::Uuid>, deliver_after: Duration) {
    actix::spawn(async move {
        tokio::time::sleep(deliver_after).await;
        for message_id in message_ids {
            phone.do_send(Report {
                session_id: 0,
                frame: PhoneFrame::Delivered {
                    message_id,
                    reference: None,
                },
            });
        }
    });
}
