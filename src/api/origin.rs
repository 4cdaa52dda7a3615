//! Where a request comes from: the client's address (which the failed-auth budget counts) and
//! the base URL the client reached this server at (which pairing and inbound URLs are built
//! on). Forwarded headers are believed only from a peer in `server.trusted_proxies`
//! (docs/api.md, "Behind a proxy").

use std::net::IpAddr;

use actix_web::HttpRequest;
use actix_web::http::header::{self, HeaderMap};

use super::AppState;
use crate::config::Settings;
use crate::domain::network::{AddressRange, unmapped};

/// Forwarded hops walked at most, counted from the nearest (bounded work per request).
const MAX_HOPS: usize = 32;
/// Longest host name (with port) taken from a request to build URLs on.
const MAX_HOST_LEN: usize = 255;

/// The client of a request: the peer, or, when the peer is a trusted proxy, the address the
/// proxies forwarded: read from the right of `X-Forwarded-For` (else `Forwarded: for=`), the
/// first address that is not itself a trusted proxy. None when the connection has no peer
/// address (never over TCP).
pub fn client_ip(settings: &Settings, req: &HttpRequest) -> Option<IpAddr> {
    let peer = unmapped(req.peer_addr()?.ip());
    Some(forwarded_client(
        &settings.server.trusted_proxies,
        peer,
        req.headers(),
    ))
}

/// The base URL phones reach this server at: `server.public_url`; else the scheme and host a
/// trusted proxy forwarded; else this server's own scheme (https with `server.tls`, whatever
/// the HTTP version) and the request's `Host`.
pub fn public_base(state: &AppState, req: &HttpRequest) -> String {
    let settings = &state.settings;
    if let Some(url) = &settings.server.public_url {
        return url.trim_end_matches('/').to_string();
    }
    let trusted = req
        .peer_addr()
        .is_some_and(|peer| is_trusted(&settings.server.trusted_proxies, peer.ip()));
    let headers = req.headers();
    let forwarded_scheme = trusted.then(|| forwarded_scheme(headers)).flatten();
    let scheme = forwarded_scheme.unwrap_or(if settings.server.tls.is_some() {
        "https"
    } else {
        "http"
    });
    let host = trusted
        .then(|| forwarded_host(headers))
        .flatten()
        .or_else(|| header_text(headers, &header::HOST))
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .filter(|host| plain_host(host))
        .unwrap_or("localhost");
    format!("{scheme}://{host}")
}

/// `base` (`http…://host`) as the matching WebSocket base (`ws…://host`).
pub fn websocket_base(base: &str) -> String {
    match base.split_once("://") {
        Some(("https", rest)) => format!("wss://{rest}"),
        Some((_, rest)) => format!("ws://{rest}"),
        None => base.to_string(),
    }
}

fn is_trusted(proxies: &[AddressRange], address: IpAddr) -> bool {
    proxies.iter().any(|range| range.contains(address))
}

/// Walks the forwarded addresses from the nearest hop outwards while the hop that added them
/// is a trusted proxy. An entry that is not an address (`unknown`, an obfuscated name) ends
/// the walk at the last address known.
fn forwarded_client(proxies: &[AddressRange], peer: IpAddr, headers: &HeaderMap) -> IpAddr {
    if !is_trusted(proxies, peer) {
        return peer;
    }
    let mut hops = forwarded_for(headers);
    let mut client = peer;
    while is_trusted(proxies, client) {
        match hops.pop() {
            Some(Some(address)) => client = unmapped(address),
            Some(None) | None => break,
        }
    }
    client
}

/// The forwarded addresses in the order the hops added them (the nearest last):
/// `X-Forwarded-For`, else the `for=` of `Forwarded`; None for an entry that is no address.
fn forwarded_for(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let listed: Vec<&str> = list_values(headers, "x-forwarded-for");
    let entries: Vec<&str> = if listed.is_empty() {
        forwarded_pairs(headers)
            .filter_map(|(name, value)| name.eq_ignore_ascii_case("for").then_some(value))
            .collect()
    } else {
        listed
    };
    let skip = entries.len().saturating_sub(MAX_HOPS);
    entries[skip..].iter().map(|e| node_address(e)).collect()
}

/// An address of `X-Forwarded-For` or `Forwarded: for=`: `192.0.2.1`, `"192.0.2.1:4711"`,
/// `"[2001:db8::1]:4711"`, `2001:db8::1`.
fn node_address(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim().trim_matches('"');
    if let Ok(address) = entry.parse() {
        return Some(address);
    }
    if let Some(rest) = entry.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    let (address, port) = entry.rsplit_once(':')?;
    port.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| address.parse().ok())
        .flatten()
}

/// The scheme the nearest trusted proxy forwarded: the last `X-Forwarded-Proto` value, else
/// the last `proto=` of `Forwarded`; only `http` or `https`.
fn forwarded_scheme(headers: &HeaderMap) -> Option<&'static str> {
    let value = list_values(headers, "x-forwarded-proto")
        .last()
        .copied()
        .or_else(|| forwarded_last(headers, "proto"))?;
    let value = value.trim().trim_matches('"');
    if value.eq_ignore_ascii_case("https") {
        Some("https")
    } else if value.eq_ignore_ascii_case("http") {
        Some("http")
    } else {
        None
    }
}

/// The host the nearest trusted proxy forwarded: the last `X-Forwarded-Host` value, else the
/// last `host=` of `Forwarded`; only a plain `name[:port]`.
fn forwarded_host(headers: &HeaderMap) -> Option<&str> {
    let value = list_values(headers, "x-forwarded-host")
        .last()
        .copied()
        .or_else(|| forwarded_last(headers, "host"))?;
    Some(value.trim().trim_matches('"')).filter(|host| plain_host(host))
}

/// A host a URL can be built on: `name`, `name:port`, `1.2.3.4:port` or `[v6]:port`, nothing
/// that would change the URL's meaning (`/`, `@`, `?`, spaces).
fn plain_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= MAX_HOST_LEN
        && host.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']')
        })
}

fn header_text<'a>(headers: &'a HeaderMap, name: &header::HeaderName) -> Option<&'a str> {
    headers.get(name)?.to_str().ok()
}

/// The comma-separated values of every `name` header, in order (linear in the request head,
/// which the HTTP server bounds).
fn list_values<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    headers
        .get_all(name)
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .collect()
}

/// The `name=value` pairs of every `Forwarded` element, in order.
fn forwarded_pairs(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(header::FORWARDED)
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split([',', ';']))
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (name.trim(), value.trim()))
}

/// The last `name=` value of `Forwarded`.
fn forwarded_last<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    forwarded_pairs(headers)
        .filter(|(pair_name, _)| pair_name.eq_ignore_ascii_case(name))
        .last()
        .map(|(_, value)| value)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        map
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn ranges(texts: &[&str]) -> Vec<AddressRange> {
        texts.iter().map(|t| t.parse().unwrap()).collect()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let sent = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(
            forwarded_client(&[], ip("192.0.2.1"), &sent),
            ip("192.0.2.1")
        );
        let other = ranges(&["10.0.0.0/8"]);
        assert_eq!(
            forwarded_client(&other, ip("192.0.2.1"), &sent),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn behind_trusted_proxies_the_client_is_the_first_untrusted_hop_from_the_right() {
        let proxies = ranges(&["10.0.0.0/8"]);
        // The client's own (spoofed) entry on the left is not reached.
        let sent = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.9, 10.0.0.5")]);
        assert_eq!(
            forwarded_client(&proxies, ip("10.0.0.1"), &sent),
            ip("203.0.113.9")
        );
        let sent = headers(&[(
            "forwarded",
            "for=192.0.2.60;proto=https, for=\"[2001:db8::7]:4711\"",
        )]);
        assert_eq!(
            forwarded_client(&proxies, ip("10.0.0.1"), &sent),
            ip("2001:db8::7")
        );
        let sent = headers(&[("forwarded", "for=\"192.0.2.43:47011\"")]);
        assert_eq!(
            forwarded_client(&proxies, ip("::ffff:10.0.0.1"), &sent),
            ip("192.0.2.43")
        );
        // Nothing forwarded, or an unknown hop: the last address known.
        assert_eq!(
            forwarded_client(&proxies, ip("10.0.0.1"), &HeaderMap::new()),
            ip("10.0.0.1")
        );
        let sent = headers(&[("x-forwarded-for", "203.0.113.9, unknown")]);
        assert_eq!(
            forwarded_client(&proxies, ip("10.0.0.1"), &sent),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn forwarded_scheme_and_host_are_the_nearest_proxys_and_plain() {
        let sent = headers(&[
            ("x-forwarded-proto", "http, HTTPS"),
            ("x-forwarded-host", "evil.example, sms.example.com:8443"),
        ]);
        assert_eq!(forwarded_scheme(&sent), Some("https"));
        assert_eq!(forwarded_host(&sent), Some("sms.example.com:8443"));
        let sent = headers(&[(
            "forwarded",
            "host=a.example;proto=http, host=\"b.example\";proto=https",
        )]);
        assert_eq!(forwarded_scheme(&sent), Some("https"));
        assert_eq!(forwarded_host(&sent), Some("b.example"));
        let sent = headers(&[
            ("x-forwarded-proto", "gopher"),
            ("x-forwarded-host", "user@evil.example/x"),
        ]);
        assert_eq!(forwarded_scheme(&sent), None);
        assert_eq!(forwarded_host(&sent), None);
    }

    #[test]
    fn only_plain_hosts_build_urls() {
        for host in [
            "sms.example.com",
            "127.0.0.1:8080",
            "[::1]:8443",
            "gw-1.internal",
        ] {
            assert!(plain_host(host), "{host}");
        }
        let long = "a".repeat(MAX_HOST_LEN + 1);
        for host in [
            "",
            "user@evil.example",
            "a.example/x",
            "a b",
            "a.example?x",
            &long,
        ] {
            assert!(!plain_host(host), "{host}");
        }
    }

    #[test]
    fn node_addresses_take_ports_and_brackets() {
        assert_eq!(node_address("192.0.2.1"), Some(ip("192.0.2.1")));
        assert_eq!(node_address("\"192.0.2.1:80\""), Some(ip("192.0.2.1")));
        assert_eq!(node_address("[2001:db8::1]:80"), Some(ip("2001:db8::1")));
        assert_eq!(node_address("2001:db8::1"), Some(ip("2001:db8::1")));
        assert_eq!(node_address("_hidden"), None);
        assert_eq!(node_address("unknown"), None);
    }
}
