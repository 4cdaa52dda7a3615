//! Tools built on the server library, not part of the server: `smsgw phone-sim` (a simulated
//! phone) and `smsgw loadtest` (the load-test harness). Compiled only with the cargo feature
//! `tools` (on by default; see Cargo.toml), so the server's module tree reads as the server.
//! Both are clients of the server: nothing outside `tools` imports them.

pub mod loadtest;
pub mod phone_sim;
