//! Integration tests of smsgw through its public interfaces (HTTP, WebSocket, CLI).

// Tests fail loudly on the first broken expectation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod helpers;

mod ai;
mod api_keys;
mod auth;
mod backup;
mod campaigns;
mod cluster;
mod cluster_failover;
mod cluster_fencing;
mod cluster_work;
mod contacts;
mod first_run;
mod hardening;
mod inbound;
mod loadtest;
mod messages;
mod mobile;
mod openapi;
mod ops;
mod outage;
mod phone_queue;
mod phone_sim;
mod phones;
mod pools;
mod portal;
mod portal_api;
mod quotas;
mod retention;
mod secrets;
mod thirdparty;
mod thirdparty_webhooks;
mod tls;
mod upgrade;
mod webhooks;
