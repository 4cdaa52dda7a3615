//! The two surfaces compatible with SMSGate (docs/compat.md, docs/api.md "Device API for the
//! SMSGate Android app"), outside `/v1` and its envelope, each speaking the upstream's own
//! conventions:
//!
//! - [`client`]: the client API the SMSGate client libraries (Python, JavaScript, Go) call,
//!   mounted at `/3rdparty/v1` and `/api/3rdparty/v1`;
//! - [`device`]: the device API the SMSGate Android app calls, mounted at `/mobile/v1` and
//!   `/api/mobile/v1`.
//!
//! Both reach the server through the same use cases and store as `/v1`; the URL paths are the
//! upstream's, the module names say what each surface serves.

pub mod client;
pub mod device;
