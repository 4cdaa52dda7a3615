//! Pure types and rules of the product. No I/O, no clocks, no knowledge of the layers above.

pub mod ai;
pub mod app_protocol;
pub mod campaign;
pub mod change;
pub mod client_settings;
pub mod health;
pub mod ids;
pub mod keys;
pub mod keywords;
pub mod network;
pub mod number_lookup;
pub mod pace;
pub mod phone_number;
pub mod phone_queue;
pub mod protocol;
pub mod quota;
pub mod secrets;
pub mod signing;
pub mod sim_slot;
pub mod sms;
pub mod ssrf;
pub mod stall;
pub mod status;
pub mod status_report;
pub mod template;
pub mod webhook_event;
