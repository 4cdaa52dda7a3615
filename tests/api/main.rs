//! Integration tests of smsgw through its public interfaces (HTTP, WebSocket, CLI).

mod helpers;

mod auth;
mod messages;
