//! The client API compatible with the SMSGate clients (Python, JavaScript, Go), mounted at
//! `/3rdparty/v1` and `/api/3rdparty/v1` (docs/compat.md). Outside `/v1`: the `x-api-key`
//! middleware and the OpenAPI registry do not apply; handlers take [`auth::Caller`] (Basic or
//! Bearer with an smsgw API key) and answer [`error::ClientError`] (`{"message": …}`).
//!
//! Messages go through the send use case (`crate::send`), one smsgw message per recipient,
//! grouped under the SMSGate message id.

pub mod auth;
mod devices;
pub mod error;
mod health;
mod inbox;
mod logs;
mod messages;
mod settings;
mod webhooks;
pub mod wire;

use actix_web::{HttpResponse, web};

use error::ClientError;

/// Where the clients point: the upstream cloud path and the self-hosted one.
pub const MOUNTS: [&str; 2] = ["/3rdparty/v1", "/api/3rdparty/v1"];

/// Registers the client API under both mounts.
pub fn routes(cfg: &mut web::ServiceConfig) {
    for mount in MOUNTS {
        cfg.service(
            web::scope(mount)
                .app_data(web::QueryConfig::default().error_handler(|err, _| {
                    ClientError::bad_request(format!("the query string is not valid: {err}")).into()
                }))
                .configure(health::configure)
                .configure(devices::configure)
                .configure(messages::configure)
                .configure(inbox::configure)
                .configure(logs::configure)
                .configure(webhooks::configure)
                .configure(settings::configure)
                .default_service(web::to(not_found)),
        );
    }
}

/// Unknown routes (and known ones with another method) answer 404 `{message}`.
async fn not_found() -> Result<HttpResponse, ClientError> {
    Err(ClientError::not_found("not found"))
}
