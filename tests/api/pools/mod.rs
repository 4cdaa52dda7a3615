//! Sender pools (docs/api.md, "Pools"): `crud` holds creating, listing, changing and deleting
//! pools and their validation; `sending` holds `from_pool` sends, the choice of a line,
//! stickiness, failover and the 503 with no line online. The imports here are theirs.

use std::time::Duration;

use serde_json::{Value, json};

use crate::backend_tests;
use crate::helpers::{Backend, TestApp, spawn_app};

mod campaigns;
mod crud;
mod failover;
mod sending;

/// `POST /v1/pools` with these phones, as the live key; the answer's data.
async fn create_pool(app: &TestApp, name: &str, phone_ids: &[&str]) -> Value {
    app.post(
        "/v1/pools",
        &app.live_key,
        json!({ "name": name, "phone_ids": phone_ids }),
    )
    .await
    .expect(201)
    .data()
    .clone()
}
