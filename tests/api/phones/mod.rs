//! Phones: pairing, the WebSocket protocol, pace, priority, retries, expiry and restarts
//! (docs/api.md, Messages, Phones and Phone WebSocket). `sessions` holds pairing and the
//! WebSocket session, `queue` sending through a phone; the imports here are theirs.

use std::time::Duration;

use serde_json::json;
use smsgw::domain::protocol::{PhoneFrame, ServerFrame};

use crate::backend_tests;
use crate::helpers::{
    Backend, FakePhone, RECIPIENT, SENDER, TestApp, send_body, spawn_app, spawn_app_with,
    spawn_paced, timeline,
};

mod alerts;
mod health;
mod lines;
mod pace;
mod queue;
mod sessions;
mod stats;
