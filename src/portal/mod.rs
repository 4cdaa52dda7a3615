//! The web portal: embedded static assets that call the public /v1 API only.

use actix_web::{HttpResponse, web};

/// Registers `/` (redirect to the portal) and the portal's assets.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/",
        web::get().to(|| async {
            HttpResponse::Found()
                .insert_header((actix_web::http::header::LOCATION, "/portal/"))
                .finish()
        }),
    );
}
