//! The web portal: embedded static assets (plain HTML, vanilla JS, CSS under `assets/`) that call
//! the public /v1 API only, and the QR code of a pairing token (`GET /portal/qr.svg`).
//!
//! Nothing is fetched from elsewhere and nothing is built: the files are compiled into the binary
//! as they are. Pages carry a strict Content-Security-Policy (scripts and styles from this
//! server only, no inline script); assets are revalidated on every load (`no-cache` with an
//! ETag), so a new binary's portal is seen at once without stale files.
//!
//! # The page
//!
//! Files: `index.html`, `api.js`, `app.js`, `portal.css`, `favicon.svg`, and
//! `vendor/qrcode.js` (qrcode-generator 2.0.4 from npm, MIT, unchanged, its licence beside
//! it). [`routes`] serves each at its own path outside `/v1` (no API-key middleware), `/` and
//! `/portal` as redirects to `/portal/`, and the server-side QR code kept for API users (the
//! pairing panel draws its own in the browser).
//!
//! - `api.js` holds the page's one `fetch`: `Portal.api()` for JSON calls to `/v1` (any answer
//!   or network failure turned into the envelope) and `Portal.stream()` for
//!   `GET /v1/events/stream`, read with a stream reader because the browser's own SSE client
//!   cannot send `x-api-key`. Sign-in checks the key with `GET /v1/workspace` before keeping it
//!   (sessionStorage, or localStorage when "Remember on this browser" is ticked).
//! - `app.js`: `guard()` runs a form's submissions one at a time with a `request_id` kept
//!   until the form is edited; `normalize()` reads nationally typed numbers through
//!   `GET /v1/numbers/lookup`; lists page with the API's cursors (`Pager`) and the open section
//!   is read again every 15 s (`?refresh_ms=` changes it); phone status comes from the event
//!   stream, polling while it is down. Errors show the envelope's `message` in plain words with
//!   the `error_code` in brackets and mark the input `data.field` names.
//! - Everything the API returns is inserted as text, never as HTML (inbound SMS come from
//!   strangers); SVG (the chart, the QR code) is built with DOM calls.
//!
//! `tests/api/portal.rs` fetches every file the page names and checks each `/v1` call the
//! scripts make against `/openapi.json`; `tests/browser/` drives the page in headless Chromium.

use std::sync::OnceLock;

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};
use qrcode::render::svg;
use qrcode::{EcLevel, QrCode};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::ApiError;

/// Content-Security-Policy of the portal page: everything from this origin only, no inline
/// script or style, no framing, forms and `fetch` to this server only.
pub const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; \
     frame-ancestors 'none'";

/// Content-Security-Policy of assets that are not pages (scripts, styles, images): opened on
/// their own they may run nothing.
const ASSET_CSP: &str = "default-src 'none'; frame-ancestors 'none'";

/// Longest `data` the QR route encodes, in bytes (a device token is about 50).
pub const QR_DATA_MAX_BYTES: usize = 512;

/// Side of the rendered QR code, in SVG user units (pixels at 100 %), at least.
const QR_MIN_SIDE_PX: u32 = 240;

/// One embedded file and where it is served.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

/// Every file of the portal. `/portal/` is the page; the page names the others.
const ASSETS: &[Asset] = &[
    Asset {
        path: "/portal/",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("assets/index.html"),
    },
    // qrcode-generator 2.0.4 by Kazuhiko Arase (MIT; npm package `qrcode-generator`, its
    // `dist/qrcode.js` unchanged; licence in `assets/vendor/LICENSE`): draws the pairing QR code
    // in the browser.
    Asset {
        path: "/portal/vendor/qrcode.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/vendor/qrcode.js"),
    },
    Asset {
        path: "/portal/api.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/api.js"),
    },
    Asset {
        path: "/portal/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/app.js"),
    },
    Asset {
        path: "/portal/portal.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("assets/portal.css"),
    },
    Asset {
        path: "/portal/favicon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("assets/favicon.svg"),
    },
];

/// Registers `/` and `/portal` (redirects to the portal), the portal's files and its QR route.
/// None of them needs an API key: the page asks for one and sends it to /v1 itself.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(to_portal))
        .route("/portal", web::get().to(to_portal))
        .route("/portal/qr.svg", web::get().to(qr_svg));
    for (index, asset) in ASSETS.iter().enumerate() {
        cfg.route(
            asset.path,
            web::get().to(move |req: HttpRequest| async move { serve(index, &req) }),
        );
    }
}

async fn to_portal() -> HttpResponse {
    HttpResponse::Found()
        .insert_header((header::LOCATION, "/portal/"))
        .finish()
}

/// Strong ETags of the assets (a hash of their bytes), in the order of [`ASSETS`].
fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| ASSETS.iter().map(|asset| etag_of(asset.body)).collect())
}

/// A strong ETag of `body`: a hash of its bytes.
fn etag_of(body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    format!("\"{}\"", hex::encode(&digest[..12]))
}

/// The page's placeholder for `server.public_url` (docs/api.md, CLI: used in pairing links).
const PUBLIC_URL_META: &str = r#"<meta name="smsgw-public-url" content="">"#;

/// The page with `server.public_url` in its meta tag (HTML-escaped), when one is configured:
/// the pairing view shows it as the server's address (else the page's own origin).
fn page_with_public_url(page: &'static [u8], req: &HttpRequest) -> Option<Vec<u8>> {
    let url = req
        .app_data::<web::Data<crate::api::AppState>>()?
        .settings
        .server
        .public_url
        .clone()?;
    let escaped = url
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let filled = format!(r#"<meta name="smsgw-public-url" content="{escaped}">"#);
    let text = std::str::from_utf8(page).ok()?;
    Some(text.replacen(PUBLIC_URL_META, &filled, 1).into_bytes())
}

/// Answers one asset, or 304 when the browser's copy (`If-None-Match`) is current.
fn serve(index: usize, req: &HttpRequest) -> HttpResponse {
    let (Some(asset), Some(etag)) = (ASSETS.get(index), etags().get(index)) else {
        return HttpResponse::NotFound().finish();
    };
    let filled = asset
        .content_type
        .starts_with("text/html")
        .then(|| page_with_public_url(asset.body, req))
        .flatten();
    // The filled page has its own ETag (the public URL is part of it).
    let filled_etag = filled.as_deref().map(etag_of);
    let etag = filled_etag.as_ref().unwrap_or(etag);
    let current = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| {
            tags.split(',')
                .any(|tag| tag.trim() == etag || tag.trim() == "*")
        });
    let mut response = if current {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    response
        .insert_header((header::ETAG, etag.as_str()))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"));
    if asset.content_type.starts_with("text/html") {
        response
            .insert_header((header::CONTENT_SECURITY_POLICY, PAGE_CSP))
            .insert_header((header::X_FRAME_OPTIONS, "DENY"));
    } else {
        response.insert_header((header::CONTENT_SECURITY_POLICY, ASSET_CSP));
    }
    if current {
        return response.finish();
    }
    response
        .insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        ))
        .body(match filled {
            Some(body) => actix_web::body::BoxBody::new(body),
            None => actix_web::body::BoxBody::new(asset.body),
        })
}

/// Query of `GET /portal/qr.svg`.
#[derive(Debug, Deserialize)]
struct QrQuery {
    data: Option<String>,
}

/// `GET /portal/qr.svg?data=TEXT`: TEXT as a QR code (error correction M), in SVG. The pairing
/// view shows a new phone's device token with it. The answer is never stored by a cache, since
/// it encodes a secret. Missing, empty or too long `data`: 422 `validation_failed`, field `data`.
async fn qr_svg(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let query = web::Query::<QrQuery>::from_query(req.query_string())
        .map_err(|err| ApiError::validation("data", format!("the query is not valid: {err}")))?;
    let data = query
        .into_inner()
        .data
        .filter(|data| !data.is_empty())
        .ok_or_else(|| ApiError::validation("data", "data is required: the text to encode"))?;
    if data.len() > QR_DATA_MAX_BYTES {
        return Err(ApiError::validation(
            "data",
            format!("data is longer than {QR_DATA_MAX_BYTES} bytes"),
        ));
    }
    let code = QrCode::with_error_correction_level(data.as_bytes(), EcLevel::M)
        .map_err(|err| ApiError::validation("data", format!("data cannot be a QR code: {err}")))?;
    let image = code
        .render::<svg::Color>()
        .min_dimensions(QR_MIN_SIDE_PX, QR_MIN_SIDE_PX)
        .quiet_zone(true)
        .build();
    Ok(HttpResponse::Ok()
        .content_type("image/svg+xml")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::CONTENT_SECURITY_POLICY, ASSET_CSP))
        .body(image))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_has_a_distinct_path_and_etag() {
        let mut paths: Vec<_> = ASSETS.iter().map(|a| a.path).collect();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), ASSETS.len());
        assert_eq!(etags().len(), ASSETS.len());
        assert!(etags().iter().all(|e| e.starts_with('"') && e.len() == 26));
    }

    #[test]
    fn the_page_has_no_inline_script_or_style() {
        let page = std::str::from_utf8(ASSETS[0].body).unwrap_or_default();
        assert!(page.starts_with("<!doctype html>"));
        for inline in ["<script>", "<style", " style=", " onclick=", "javascript:"] {
            assert!(!page.contains(inline), "inline {inline} in index.html");
        }
    }
}
