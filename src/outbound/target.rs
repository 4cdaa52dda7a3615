//! Where webhook requests may go: name resolution through an injectable [`NameResolver`], the
//! SSRF policy applied to every resolved address, and the HTTP client that connects only to
//! the addresses that passed it.
//!
//! The awc connector resolves each host once through [`PinnedResolver`], which drops every
//! non-public address (src/domain/ssrf.rs) before awc sees it: the TCP connection goes to an
//! address that was checked, so a name that re-resolves to 127.0.0.1 cannot slip through.
//! IP-literal hosts never reach a resolver (awc parses them itself), so [`check_literal`]
//! judges them before each request. Redirects are not followed and awc reads no proxy settings.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use actix_tls::connect::{Connector as TcpConnector, Resolve, Resolver};
use awc::error::{ConnectError, SendRequestError};

use crate::domain::ssrf::{self, Host, UrlError};

/// A future that resolves a host name (not `Send`: awc's resolver runs on one thread).
pub type LookupFuture<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + 'a>>;

/// Turns a host name into addresses. Production uses the system resolver; tests inject a
/// [`StaticResolver`] so no DNS query leaves the machine.
pub trait NameResolver: Send + Sync + 'static {
    /// Every address of `host`.
    fn lookup<'a>(&'a self, host: &'a str) -> LookupFuture<'a>;
}

/// Shared handle to the resolver in use.
pub type SharedResolver = Arc<dyn NameResolver>;

/// The operating system's resolver (getaddrinfo on a blocking thread).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl NameResolver for SystemResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> LookupFuture<'a> {
        let host = host.to_string();
        Box::pin(async move {
            let addrs = tokio::task::spawn_blocking(move || {
                (host.as_str(), 0u16)
                    .to_socket_addrs()
                    .map(|it| it.map(|a| a.ip()).collect::<Vec<_>>())
            })
            .await
            .map_err(io::Error::other)??;
            Ok(addrs)
        })
    }
}

/// A fixed table of names, changeable at run time (tests script DNS rebinding with it).
/// Unknown names fail like NXDOMAIN.
#[derive(Debug, Default)]
pub struct StaticResolver {
    names: RwLock<HashMap<String, Vec<IpAddr>>>,
}

impl StaticResolver {
    /// An empty table: every lookup fails.
    pub fn new() -> StaticResolver {
        StaticResolver::default()
    }

    /// Makes `host` resolve to `addrs` from now on.
    pub fn set(&self, host: &str, addrs: Vec<IpAddr>) {
        if let Ok(mut names) = self.names.write() {
            names.insert(host.to_ascii_lowercase(), addrs);
        }
    }
}

impl NameResolver for StaticResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> LookupFuture<'a> {
        let found = self
            .names
            .read()
            .ok()
            .and_then(|names| names.get(&host.to_ascii_lowercase()).cloned());
        Box::pin(async move {
            found.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such host"))
        })
    }
}

/// Every resolved address of a host was refused by the SSRF policy.
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves only to non-public addresses")]
pub struct BlockedAddress {
    pub host: String,
}

/// awc's resolver: resolves once, keeps only public addresses (all of them when insecure
/// targets are allowed) and hands exactly those to the TCP connector.
#[derive(Clone)]
pub struct PinnedResolver {
    resolver: SharedResolver,
    allow_insecure: bool,
}

impl Resolve for PinnedResolver {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> futures_util::future::LocalBoxFuture<'a, Result<Vec<SocketAddr>, Box<dyn std::error::Error>>>
    {
        Box::pin(async move {
            let addrs = self.resolver.lookup(host).await?;
            let allowed: Vec<SocketAddr> = addrs
                .into_iter()
                .filter(|ip| self.allow_insecure || ssrf::is_public_ip(*ip))
                .map(|ip| SocketAddr::new(ip, port))
                .collect();
            if allowed.is_empty() {
                return Err(Box::new(BlockedAddress {
                    host: host.to_string(),
                }) as Box<dyn std::error::Error>);
            }
            Ok(allowed)
        })
    }
}

/// The HTTP client of one webhook endpoint: pinned resolution, `timeout` for the whole
/// request (connect included), no redirects, no proxy.
pub fn client(resolver: SharedResolver, allow_insecure: bool, timeout: Duration) -> awc::Client {
    let pinned = PinnedResolver {
        resolver,
        allow_insecure,
    };
    let tcp = TcpConnector::new(Resolver::custom(pinned)).service();
    let connector = awc::Connector::new()
        .connector(tcp)
        .timeout(timeout)
        .handshake_timeout(timeout);
    awc::Client::builder()
        .connector(connector)
        .timeout(timeout)
        .disable_redirects()
        .no_default_headers()
        .finish()
}

/// Why a target URL was refused at creation (422 field url).
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{0}")]
    Url(#[from] UrlError),
    #[error("the host does not resolve")]
    Unresolvable,
    #[error("the host resolves to a non-public address ({0})")]
    Blocked(IpAddr),
}

/// The creation-time check: the static URL rules, then (unless insecure targets are allowed)
/// every address the host resolves to must be public. No request is made to the target.
pub async fn check_target(
    url: &str,
    allow_insecure: bool,
    resolver: &dyn NameResolver,
) -> Result<(), TargetError> {
    let target = ssrf::check_url(url, allow_insecure)?;
    if allow_insecure {
        return Ok(());
    }
    if let Host::Name(name) = &target.host {
        let addrs = resolver
            .lookup(name)
            .await
            .map_err(|_| TargetError::Unresolvable)?;
        if addrs.is_empty() {
            return Err(TargetError::Unresolvable);
        }
        if let Some(bad) = addrs.iter().find(|ip| !ssrf::is_public_ip(**ip)) {
            return Err(TargetError::Blocked(*bad));
        }
    }
    Ok(())
}

/// The per-request check of a stored URL before it is sent: the static rules again (IP
/// literals are never seen by the resolver, so they are judged here). The error is the
/// attempt's: `blocked_address` for a refused IP literal, `invalid_url` for any other rule.
pub fn check_literal(url: &str, allow_insecure: bool) -> Result<(), AttemptError> {
    ssrf::check_url(url, allow_insecure)
        .map(|_| ())
        .map_err(|err| match err {
            UrlError::BlockedAddress => AttemptError::BlockedAddress,
            _ => AttemptError::InvalidUrl,
        })
}

/// The typed error of a failed attempt, as the deliveries log shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptError {
    Dns,
    Connect,
    Tls,
    Timeout,
    BlockedAddress,
    /// The stored URL cannot be made into a request (it predates the URL rules, or the HTTP
    /// client refused it); nothing was sent and no retry can help.
    InvalidUrl,
    Redirect,
    HttpStatus,
    /// Retention removed the message record; nothing was sent.
    MessageDeleted,
}

impl AttemptError {
    /// The stable name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptError::Dns => "dns",
            AttemptError::Connect => "connect",
            AttemptError::Tls => "tls",
            AttemptError::Timeout => "timeout",
            AttemptError::BlockedAddress => "blocked_address",
            AttemptError::InvalidUrl => "invalid_url",
            AttemptError::Redirect => "redirect",
            AttemptError::HttpStatus => "http_status",
            AttemptError::MessageDeleted => "message_deleted",
        }
    }

    /// Whether the retry schedule applies (timeouts, connection errors); 3xx/4xx, blocked
    /// targets, unusable URLs and deleted messages end the delivery at once. 5xx is decided by the caller.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            AttemptError::Dns | AttemptError::Connect | AttemptError::Tls | AttemptError::Timeout
        )
    }
}

/// Classifies an awc failure.
pub fn classify(err: &SendRequestError) -> AttemptError {
    match err {
        SendRequestError::Timeout => AttemptError::Timeout,
        SendRequestError::Url(_) => AttemptError::InvalidUrl,
        SendRequestError::Connect(connect) => match connect {
            ConnectError::Resolver(inner) if inner.downcast_ref::<BlockedAddress>().is_some() => {
                AttemptError::BlockedAddress
            }
            ConnectError::Resolver(_) | ConnectError::NoRecords | ConnectError::Unresolved => {
                AttemptError::Dns
            }
            ConnectError::Timeout => AttemptError::Timeout,
            ConnectError::Io(io) if is_tls_error(io) => AttemptError::Tls,
            ConnectError::SslIsNotSupported => AttemptError::Tls,
            _ => AttemptError::Connect,
        },
        _ => AttemptError::Connect,
    }
}

fn is_tls_error(err: &io::Error) -> bool {
    err.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
        || err.kind() == io::ErrorKind::InvalidData
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_the_client_cannot_use_is_not_retried() {
        let err = SendRequestError::Url(awc::error::InvalidUrl::MissingHost);
        assert_eq!(classify(&err), AttemptError::InvalidUrl);
        assert!(!AttemptError::InvalidUrl.is_retryable());
        assert_eq!(
            check_literal("https://example.com/caf\u{e9}", false),
            Err(AttemptError::InvalidUrl)
        );
        assert_eq!(
            check_literal("https://127.0.0.1/", false),
            Err(AttemptError::BlockedAddress)
        );
        assert_eq!(check_literal("https://example.com/ok", false), Ok(()));
    }

    #[actix_web::test]
    async fn creation_refuses_names_resolving_to_private_addresses() {
        let resolver = StaticResolver::new();
        resolver.set("evil.example", vec!["127.0.0.1".parse().unwrap()]);
        resolver.set("good.example", vec!["93.184.216.34".parse().unwrap()]);
        assert!(matches!(
            check_target("https://evil.example/hook", false, &resolver).await,
            Err(TargetError::Blocked(_))
        ));
        assert!(matches!(
            check_target("https://missing.example/hook", false, &resolver).await,
            Err(TargetError::Unresolvable)
        ));
        assert!(
            check_target("https://good.example/hook", false, &resolver)
                .await
                .is_ok()
        );
        assert!(
            check_target("http://evil.example/hook", true, &resolver)
                .await
                .is_ok()
        );
    }

    #[actix_web::test]
    async fn pinned_resolver_drops_non_public_addresses() {
        let inner = Arc::new(StaticResolver::new());
        inner.set(
            "mixed.example",
            vec![
                "10.0.0.1".parse().unwrap(),
                "93.184.216.34".parse().unwrap(),
            ],
        );
        inner.set("local.example", vec!["127.0.0.1".parse().unwrap()]);
        let pinned = PinnedResolver {
            resolver: inner,
            allow_insecure: false,
        };
        let addrs = Resolve::lookup(&pinned, "mixed.example", 443)
            .await
            .unwrap();
        assert_eq!(addrs, vec!["93.184.216.34:443".parse().unwrap()]);
        let err = Resolve::lookup(&pinned, "local.example", 443)
            .await
            .unwrap_err();
        assert!(err.downcast_ref::<BlockedAddress>().is_some());
    }
}
