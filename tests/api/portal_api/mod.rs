//! The public API the portal stands on (docs/api.md, "Workspace", "Number lookup", "Idempotent
//! creates", "Live events"): every route here is an ordinary `/v1` route any client can call. One file per part of
//! docs/api.md, and one for the portal's read-only views; the imports here are theirs.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::backend_tests;
use crate::helpers::{Backend, RECIPIENT, SENDER, TestApp, poll, spawn_app, spawn_app_with};

mod idempotent_creates;
mod live_events;
mod views;
mod workspace;
