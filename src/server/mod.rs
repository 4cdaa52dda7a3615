//! The HTTP side of a node: the listener, HTTPS (`server.tls`), the actix-web service with its
//! WebSocket upgrade hook, and the stop signals. `startup` wires these to the actors.

pub mod http;
pub mod signals;
pub mod tls;
