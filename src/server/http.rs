//! The HTTP server: binding the listener, and the actix-web application served over plain TCP
//! or TLS, with actix-http's upgrade hook for the phones' WebSockets.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use actix_http::{HttpService, KeepAlive};
use actix_service::{fn_service, map_config};
use actix_web::dev::{AppConfig, Server};
use actix_web::{App, web};

use crate::api::{self, AppState};
use crate::config::Settings;

/// Seconds the HTTP server gives in-flight requests to finish after a stop.
const SHUTDOWN_TIMEOUT_SECS: u64 = 7;

/// How long a client may take to send a request's head.
const CLIENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a closing connection waits for the client to go.
const CLIENT_DISCONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Binds `server.bind` (port 0 picks a free port); returns the listener and its address.
pub fn bind(settings: &Settings) -> std::io::Result<(TcpListener, SocketAddr)> {
    let tcp = TcpListener::bind(&settings.server.bind)?;
    let address = tcp.local_addr()?;
    Ok((tcp, address))
}

/// The HTTP server: the actix-web application, plus actix-http's upgrade hook for WebSocket
/// upgrades, which hands the phone's bare connection to [`api::phone_ws::upgrade`] (an upgrade
/// served by actix-web itself keeps 16 KiB of buffers per connection for its life). Everything
/// else is what `actix_web::HttpServer` would build: same timeouts, graceful stop that closes
/// idle keep-alive connections, signals left to `Application::run_until_stopped`.
pub fn serve(
    tcp: TcpListener,
    address: SocketAddr,
    settings: &Settings,
    tls: Option<rustls::ServerConfig>,
    state: web::Data<AppState>,
    webhook_api: web::Data<api::webhooks::WebhookApi>,
) -> std::io::Result<Server> {
    let mut builder = Server::build()
        .disable_signals()
        .shutdown_timeout(SHUTDOWN_TIMEOUT_SECS);
    if settings.server.workers > 0 {
        builder = builder.workers(settings.server.workers);
    }
    let stopping = builder.graceful_shutdown_signal();
    // The same service over plain TCP or TLS; only the last step differs.
    macro_rules! service {
        ($finish:ident $(, $config:expr)?) => {
            move || {
            let (state, webhook_api, stopping) =
                (state.clone(), webhook_api.clone(), stopping.clone());
            let upgrade_state = state.clone();
            let app = App::new()
                .wrap(actix_web::middleware::from_fn(
                    crate::telemetry::observe_request,
                ))
                .app_data(state)
                .app_data(webhook_api)
                .configure(api::configure)
                .configure(crate::portal::routes)
                .default_service(web::to(api::not_found));
            HttpService::build()
                // Small writes (a 202, a phone's frame) leave at once instead of waiting for
                // the peer's delayed ACK (up to 40 ms on Linux) behind Nagle's algorithm.
                .tcp_nodelay(true)
                .keep_alive(KeepAlive::default())
                .client_request_timeout(CLIENT_REQUEST_TIMEOUT)
                .client_disconnect_timeout(CLIENT_DISCONNECT_TIMEOUT)
                .local_addr(address)
                .graceful_shutdown_signal(move || {
                    let stopping = stopping.clone();
                    async move { stopping.notified().await }
                })
                .upgrade(fn_service(move |(req, framed)| {
                    api::phone_ws::upgrade(upgrade_state.clone(), req, framed)
                }))
                .finish(map_config(app, |_| AppConfig::default()))
                .$finish($($config.clone())?)
            }
        };
    }
    match tls {
        // actix-http offers HTTP/2 and HTTP/1.1 by ALPN; of HTTP/2's limits it exposes only the
        // flow-control windows, so the h2 crate's defaults apply (docs/api.md, "HTTPS").
        Some(config) => builder.listen("smsgw-https", tcp, service!(rustls_0_23, config)),
        None => builder.listen("smsgw-http", tcp, service!(tcp)),
    }
    .map(|builder| builder.run())
}

/// Warns once at start when phones on other machines can reach this server but
/// `server.public_url` is unset: the URLs handed to them then follow each request's `Host`
/// (docs/api.md, "Behind a proxy"). A bind given as a host name is not judged.
pub fn warn_without_public_url(settings: &Settings) {
    let reachable = settings
        .server
        .bind
        .parse::<SocketAddr>()
        .is_ok_and(|address| !address.ip().is_loopback());
    if settings.server.public_url.is_none() && reachable {
        tracing::warn!(
            bind = %settings.server.bind,
            "server.public_url is unset: pairing and inbound URLs use the Host each request came with; set it to the URL phones reach this server at"
        );
    }
}
