//! smsgw: an SMS gateway that sends and receives through the customer's own paired phones.
//!
//! Layers point one way: `startup → api → send → actors → store → domain` (see docs/architecture.md).

pub mod actors;
pub mod api;
pub mod backup;
pub mod change_router;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod domain;
pub mod error;
pub mod live_events;
pub mod outbound;
pub mod portal;
pub mod secrets;
pub mod send;
pub mod server;
pub mod single_node;
pub mod startup;
pub mod store;
pub mod telemetry;
/// `smsgw phone-sim` and `smsgw loadtest`: clients of the server, only with the `tools` feature.
#[cfg(feature = "tools")]
pub mod tools;

#[cfg(test)]
mod layering;
