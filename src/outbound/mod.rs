//! What goes out to a webhook endpoint, apart from the actor that decides when: where a
//! request may go ([`target`]: the SSRF-pinned HTTP client and name resolver, also used by
//! the API to check a URL) and what it carries ([`body`]: the smsgw body and what it is built
//! from; [`smsgate_body`]: the SMSGate-format body, docs/compat.md, Webhooks). None of it is
//! an actor or a stored aggregate, so it lives neither in `actors/` nor in `store/`; the two
//! bodies sit side by side because an attempt picks one of them by the endpoint's format.

pub mod body;
pub mod smsgate_body;
pub mod target;
