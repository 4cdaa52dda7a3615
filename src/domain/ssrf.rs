//! Webhook target address policy: which IP addresses count as public, and the static checks
//! on a webhook URL (scheme, userinfo, host form, port) made before any DNS lookup.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a webhook URL was refused.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
pub enum UrlError {
    /// Not of the form `scheme://authority[path]`, or holds characters a URL cannot.
    #[error("not a valid URL")]
    NotUrl,
    /// The scheme is not https (or http when insecure targets are allowed).
    #[error("URL scheme not allowed")]
    SchemeNotAllowed,
    /// The authority has no host.
    #[error("URL has no host")]
    MissingHost,
    /// The authority holds `user[:password]@`, which would leak credentials and confuse parsers.
    #[error("URL must not contain user info")]
    UserInfo,
    /// The host is an IP literal that is not public.
    #[error("URL targets a blocked address")]
    BlockedAddress,
    /// The host looks numeric but is not a canonical dotted quad (e.g. `2130706433`, `0x7f.1`);
    /// resolvers disagree on such forms, so they are refused outright.
    #[error("URL host is an ambiguous numeric address")]
    AmbiguousHost,
}

/// The host part of a webhook URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// An IP literal: a canonical dotted quad or a bracketed IPv6 address.
    Ip(IpAddr),
    /// A DNS name, lowercased and without a trailing dot; it must still be resolved and every
    /// resolved address checked with [`is_public_ip`].
    Name(String),
}

/// Where a webhook URL points after the static checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// True for https, false for http (only possible with `allow_insecure`).
    pub scheme_https: bool,
    /// The host to connect to.
    pub host: Host,
    /// The explicit port, or 443 / 80 by scheme.
    pub port: u16,
}

/// IPv4 ranges that must never be webhook targets, as (network, prefix length).
const BLOCKED_V4: &[(u32, u32)] = &[
    (0x0000_0000, 8),  // 0.0.0.0/8 "this network"
    (0x0A00_0000, 8),  // 10.0.0.0/8 private
    (0x6440_0000, 10), // 100.64.0.0/10 carrier-grade NAT
    (0x7F00_0000, 8),  // 127.0.0.0/8 loopback
    (0xA9FE_0000, 16), // 169.254.0.0/16 link-local, incl. cloud metadata 169.254.169.254
    (0xAC10_0000, 12), // 172.16.0.0/12 private
    (0xC000_0000, 24), // 192.0.0.0/24 IETF protocol assignments
    (0xC000_0200, 24), // 192.0.2.0/24 documentation
    (0xC0A8_0000, 16), // 192.168.0.0/16 private
    (0xC612_0000, 15), // 198.18.0.0/15 benchmarking
    (0xC633_6400, 24), // 198.51.100.0/24 documentation
    (0xCB00_7100, 24), // 203.0.113.0/24 documentation
    (0xE000_0000, 4),  // 224.0.0.0/4 multicast
    (0xF000_0000, 4),  // 240.0.0.0/4 reserved, incl. broadcast 255.255.255.255
];

/// IPv6 ranges refused outright, as (network, prefix length). Ranges that embed an IPv4
/// address to be judged on its own (::ffff:0:0/96, 64:ff9b::/96, 2002::/16) are handled first.
const BLOCKED_V6: &[(u128, u32)] = &[
    (0, 96),                      // ::/96 IPv4-compatible (deprecated), incl. :: and ::1
    (0xffff << 48, 96),           // ::ffff:0:0:0/96 IPv4-translated (SIIT): never a public target
    (0x0064_ff9b_0001 << 80, 48), // 64:ff9b:1::/48 local-use NAT64
    (0x0100 << 112, 64),          // 100::/64 discard-only
    (0x2001_0000 << 96, 32),      // 2001::/32 Teredo: tunnels to arbitrary IPv4
    (0x2001_0002 << 96, 48),      // 2001:2::/48 benchmarking
    (0x2001_0020 << 96, 28),      // 2001:20::/28 ORCHIDv2
    (0x2001_0db8 << 96, 32),      // 2001:db8::/32 documentation
    (0x3fff << 112, 20),          // 3fff::/20 documentation
    (0xfc00 << 112, 7),           // fc00::/7 unique-local
    (0xfe80 << 112, 10),          // fe80::/10 link-local
    (0xfec0 << 112, 10),          // fec0::/10 site-local (deprecated but still routed internally)
    (0xff00 << 112, 8),           // ff00::/8 multicast
];

/// IPv6 prefixes whose low 32 bits carry an IPv4 address that decides the verdict.
const EMBEDDED_V4_LOW_96: &[u128] = &[
    0xffff << 32,      // ::ffff:0:0/96 IPv4-mapped
    0x0064_ff9b << 96, // 64:ff9b::/96 well-known NAT64
];

/// 2002::/16 6to4: the IPv4 address sits in bits 16..48.
const SIX_TO_FOUR: u128 = 0x2002 << 112;

/// True if `ip` may be a webhook target: not loopback, private, link-local, reserved,
/// documentation, multicast, or a tunnel/translation form that reaches such an address.
/// Written with explicit masks because `IpAddr::is_global` is unstable.
pub fn is_public_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let bits = u32::from(ip);
    !BLOCKED_V4
        .iter()
        .any(|&(net, len)| bits & mask_u32(len) == net)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let bits = u128::from(ip);
    // Translation forms must be judged by their IPv4 payload, which would otherwise slip past
    // the IPv4 rules (e.g. ::ffff:127.0.0.1 reaches loopback on dual-stack sockets).
    // Truncating casts deliberately pick the embedded 32 bits.
    if EMBEDDED_V4_LOW_96
        .iter()
        .any(|&net| bits & mask_u128(96) == net)
    {
        return is_public_v4(Ipv4Addr::from(bits as u32));
    }
    if bits & mask_u128(16) == SIX_TO_FOUR {
        return is_public_v4(Ipv4Addr::from((bits >> 80) as u32));
    }
    !BLOCKED_V6
        .iter()
        .any(|&(net, len)| bits & mask_u128(len) == net)
}

/// Network mask of `len` leading one bits (`len` in 0..=32).
fn mask_u32(len: u32) -> u32 {
    u32::MAX.checked_shl(32 - len).unwrap_or(0)
}

/// Network mask of `len` leading one bits (`len` in 0..=128).
fn mask_u128(len: u32) -> u128 {
    u128::MAX.checked_shl(128 - len).unwrap_or(0)
}

/// Parses a webhook URL and applies the static rules: scheme must be https unless
/// `allow_insecure` (then http too); must have a host; no userinfo; numeric hosts must be a
/// canonical dotted quad or bracketed IPv6; IP literals must be public unless `allow_insecure`.
/// Returns host and port (default 443 / 80).
pub fn check_url(url: &str, allow_insecure: bool) -> Result<Target, UrlError> {
    // Whitespace, control characters and backslashes are where parsers disagree (browsers
    // treat `\` as `/`); refusing them keeps this check and the HTTP client on the same URL.
    if url
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
    {
        return Err(UrlError::NotUrl);
    }
    // Only RFC 3986 characters, with well-formed percent escapes: the HTTP client refuses
    // anything else (a non-ASCII path, say) when it builds the request, so such a URL could
    // never be delivered to.
    if !is_uri_text(url) {
        return Err(UrlError::NotUrl);
    }
    let (scheme, rest) = url.split_once("://").ok_or(UrlError::NotUrl)?;
    if !is_scheme(scheme) {
        return Err(UrlError::NotUrl);
    }
    let scheme_https = if scheme.eq_ignore_ascii_case("https") {
        true
    } else if allow_insecure && scheme.eq_ignore_ascii_case("http") {
        false
    } else {
        return Err(UrlError::SchemeNotAllowed);
    };

    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    if authority.contains('@') {
        return Err(UrlError::UserInfo);
    }

    let (host_part, port_part) = split_host_port(authority)?;
    let port = match port_part {
        None => {
            if scheme_https {
                443
            } else {
                80
            }
        }
        Some(p) => parse_port(p)?,
    };

    let host = parse_host(host_part)?;
    if let Host::Ip(ip) = host
        && !allow_insecure
        && !is_public_ip(ip)
    {
        return Err(UrlError::BlockedAddress);
    }
    Ok(Target {
        scheme_https,
        host,
        port,
    })
}

/// Only RFC 3986 characters (unreserved, reserved and `%`), each `%` followed by two hex
/// digits.
fn is_uri_text(url: &str) -> bool {
    let bytes = url.as_bytes();
    bytes.iter().enumerate().all(|(at, &b)| match b {
        b'%' => {
            bytes.get(at + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(at + 2).is_some_and(u8::is_ascii_hexdigit)
        }
        b'-' | b'.' | b'_' | b'~' => true,
        b':' | b'/' | b'?' | b'#' | b'[' | b']' | b'@' => true,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' => true,
        _ => b.is_ascii_alphanumeric(),
    })
}

/// RFC 3986 scheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Splits `host[:port]` or `[v6][:port]`; the host keeps its brackets.
fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), UrlError> {
    if authority.starts_with('[') {
        let close = authority.find(']').ok_or(UrlError::NotUrl)?;
        let (host, after) = authority.split_at(close + 1);
        return match after {
            "" => Ok((host, None)),
            _ => after
                .strip_prefix(':')
                .map(|p| (host, Some(p)))
                .ok_or(UrlError::NotUrl),
        };
    }
    match authority.split_once(':') {
        None => Ok((authority, None)),
        // A second colon means an unbracketed IPv6 literal or garbage.
        Some((_, port)) if port.contains(':') => Err(UrlError::NotUrl),
        Some((host, port)) => Ok((host, Some(port))),
    }
}

/// Decimal port in 1..=65535; an empty port (`host:`) is refused rather than defaulted.
fn parse_port(p: &str) -> Result<u16, UrlError> {
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(UrlError::NotUrl);
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(UrlError::NotUrl),
        Ok(port) => Ok(port),
    }
}

fn parse_host(host: &str) -> Result<Host, UrlError> {
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or(UrlError::NotUrl)?;
        if inner.is_empty() {
            return Err(UrlError::MissingHost);
        }
        // Zone ids (`%eth0`) and IPvFuture fail to parse here and are refused.
        return inner
            .parse::<Ipv6Addr>()
            .map(|v6| Host::Ip(IpAddr::V6(v6)))
            .map_err(|_| UrlError::NotUrl);
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.is_empty() {
        return Err(UrlError::MissingHost);
    }
    // Only plain ASCII labels: percent-encoding and Unicode would be decoded differently by
    // the resolver than by this check (IDNs must be given in punycode).
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err(UrlError::NotUrl);
    }
    let labels: Vec<&str> = name.split('.').collect();
    if labels.iter().any(|l| l.is_empty()) {
        return Err(UrlError::NotUrl);
    }
    // WHATWG and inet_aton treat a host whose last label is numeric as IPv4 in decimal, octal
    // or hex shorthand; only the canonical dotted quad is unambiguous.
    if labels.last().is_some_and(|l| looks_numeric(l)) {
        return canonical_dotted_quad(&labels)
            .map(|v4| Host::Ip(IpAddr::V4(v4)))
            .ok_or(UrlError::AmbiguousHost);
    }
    Ok(Host::Name(name.to_ascii_lowercase()))
}

/// Decimal digits, or `0x`/`0X` followed by hex digits (possibly none, as WHATWG allows).
fn looks_numeric(label: &str) -> bool {
    if let Some(hex) = label
        .strip_prefix("0x")
        .or_else(|| label.strip_prefix("0X"))
    {
        return hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    label.bytes().all(|b| b.is_ascii_digit())
}

/// Four decimal octets 0..=255 without leading zeros (which some parsers read as octal).
fn canonical_dotted_quad(labels: &[&str]) -> Option<Ipv4Addr> {
    let [a, b, c, d] = labels else {
        return None;
    };
    let octet = |s: &str| -> Option<u8> {
        let decimal = !s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit());
        if !decimal || (s.len() > 1 && s.starts_with('0')) {
            return None;
        }
        s.parse().ok()
    };
    Some(Ipv4Addr::new(octet(a)?, octet(b)?, octet(c)?, octet(d)?))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ip_classes() {
        let cases: &[(&str, bool)] = &[
            // IPv4 blocked
            ("0.0.0.0", false),
            ("0.255.255.255", false),
            ("127.0.0.1", false),
            ("127.255.255.254", false),
            ("10.0.0.1", false),
            ("10.255.255.255", false),
            ("172.16.0.1", false),
            ("172.31.255.255", false),
            ("192.168.1.1", false),
            ("169.254.0.1", false),
            ("169.254.169.254", false),
            ("100.64.0.1", false),
            ("100.127.255.255", false),
            ("192.0.0.8", false),
            ("192.0.2.1", false),
            ("198.51.100.7", false),
            ("203.0.113.9", false),
            ("198.18.0.1", false),
            ("198.19.255.255", false),
            ("224.0.0.1", false),
            ("239.255.255.250", false),
            ("240.0.0.1", false),
            ("255.255.255.255", false),
            // IPv4 public, incl. neighbours of blocked ranges
            ("8.8.8.8", true),
            ("1.1.1.1", true),
            ("1.0.0.0", true),
            ("9.255.255.255", true),
            ("11.0.0.0", true),
            ("100.63.255.255", true),
            ("100.128.0.0", true),
            ("126.255.255.255", true),
            ("128.0.0.0", true),
            ("169.253.255.255", true),
            ("169.255.0.0", true),
            ("172.15.255.255", true),
            ("172.32.0.0", true),
            ("192.0.1.1", true),
            ("192.0.3.1", true),
            ("192.167.255.255", true),
            ("192.169.0.0", true),
            ("198.17.255.255", true),
            ("198.20.0.0", true),
            ("198.51.101.1", true),
            ("203.0.114.1", true),
            ("223.255.255.255", true),
            // IPv6 blocked
            ("::", false),
            ("::1", false),
            ("::8.8.8.8", false), // IPv4-compatible: refused whatever it embeds
            ("::ffff:127.0.0.1", false),
            ("::ffff:7f00:1", false),
            ("::ffff:10.1.2.3", false),
            ("::ffff:169.254.169.254", false),
            ("64:ff9b::a00:1", false),
            ("64:ff9b::127.0.0.1", false),
            ("64:ff9b:1::808:808", false),
            ("2002:c0a8:0101::1", false),
            ("2002:7f00:1::", false),
            ("2001::1", false),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", false),
            ("fc00::1", false),
            ("fd00::1", false),
            ("fe80::1", false),
            ("febf::1", false),
            ("fec0::1", false),
            ("ff02::1", false),
            ("ff0e::1", false),
            ("2001:db8::1", false),
            ("3fff::1", false),
            ("3fff:fff::1", false),
            ("100::1", false),
            ("2001:20::1", false),
            ("2001:2f::1", false),
            ("2001:2::1", false),
            ("::ffff:0:7f00:1", false), // IPv4-translated, whatever it embeds
            ("::ffff:0:808:808", false),
            ("::ffff:0:0:0", false),
            // IPv6 public
            ("2606:4700::1111", true),
            ("2001:4860:4860::8888", true),
            ("::ffff:8.8.8.8", true),
            ("64:ff9b::808:808", true),
            ("2002:0808:0808::1", true),
            ("2001:db9::1", true),
            ("2001:1::1", true),
            ("2001:2:1::1", true),
            ("2001:30::1", true),
            ("3fff:1000::1", true),
            ("100:0:0:1::1", true),
            ("fbff::1", true),
            ("64:ff9b:2::1", true),
        ];
        for &(addr, public) in cases {
            assert_eq!(is_public_ip(ip(addr)), public, "{addr}");
        }
    }

    fn target(url: &str, insecure: bool) -> Result<Target, UrlError> {
        check_url(url, insecure)
    }

    fn name(s: &str) -> Host {
        Host::Name(s.to_owned())
    }

    #[test]
    fn url_accepts() {
        let cases: &[(&str, bool, bool, Host, u16)] = &[
            (
                "https://example.com:8443/hook",
                false,
                true,
                name("example.com"),
                8443,
            ),
            (
                "https://Example.COM./x?y#z",
                false,
                true,
                name("example.com"),
                443,
            ),
            (
                "HTTPS://hooks.example.com",
                false,
                true,
                name("hooks.example.com"),
                443,
            ),
            (
                "https://example.com?q=@",
                false,
                true,
                name("example.com"),
                443,
            ),
            (
                "https://example.com/a@b",
                false,
                true,
                name("example.com"),
                443,
            ),
            ("http://example.com/", true, false, name("example.com"), 80),
            (
                "https://8.8.8.8/",
                false,
                true,
                Host::Ip(ip("8.8.8.8")),
                443,
            ),
            (
                "https://[2606:4700::1111]:444/",
                false,
                true,
                Host::Ip(ip("2606:4700::1111")),
                444,
            ),
            (
                "http://127.0.0.1:8080/",
                true,
                false,
                Host::Ip(ip("127.0.0.1")),
                8080,
            ),
            ("http://[::1]/", true, false, Host::Ip(ip("::1")), 80),
            (
                "https://localhost:65535",
                false,
                true,
                name("localhost"),
                65535,
            ),
            (
                "https://a_b.example-1.com",
                false,
                true,
                name("a_b.example-1.com"),
                443,
            ),
            (
                "https://0x7f.example.com/",
                false,
                true,
                name("0x7f.example.com"),
                443,
            ),
            (
                "https://1.2.3.4./",
                false,
                true,
                Host::Ip(ip("1.2.3.4")),
                443,
            ),
        ];
        for (url, insecure, https, host, port) in cases {
            let t = target(url, *insecure).unwrap();
            assert_eq!(t.scheme_https, *https, "{url}");
            assert_eq!(&t.host, host, "{url}");
            assert_eq!(t.port, *port, "{url}");
        }
    }

    #[test]
    fn url_refuses() {
        use UrlError::*;
        let cases: &[(&str, bool, UrlError)] = &[
            ("http://example.com/", false, SchemeNotAllowed),
            ("ftp://example.com/", false, SchemeNotAllowed),
            ("ftp://example.com/", true, SchemeNotAllowed),
            ("example.com", false, NotUrl),
            ("https:example.com", false, NotUrl),
            ("://example.com", false, NotUrl),
            ("https://exa mple.com", false, NotUrl),
            ("https://example.com\\@evil.com", false, NotUrl),
            ("https://user@host", false, UserInfo),
            ("https://user:pw@host/", false, UserInfo),
            ("https://@host/", false, UserInfo),
            ("https:///path", false, MissingHost),
            ("https://", false, MissingHost),
            ("https://.", false, MissingHost),
            ("https://:443/", false, MissingHost),
            ("https://example.com:0/", false, NotUrl),
            ("https://example.com:65536/", false, NotUrl),
            ("https://example.com:/", false, NotUrl),
            ("https://example.com:+1/", false, NotUrl),
            ("https://example..com/", false, NotUrl),
            ("https://ex%61mple.com/", false, NotUrl),
            ("https://exämple.com/", false, NotUrl),
            ("https://::1/", false, NotUrl),
            ("https://[::1/", false, NotUrl),
            ("https://[::1]x/", false, NotUrl),
            ("https://[fe80::1%25eth0]/", false, NotUrl),
            ("https://[]/", false, MissingHost),
            ("https://[127.0.0.1]/", false, NotUrl),
            ("https://127.0.0.1/", false, BlockedAddress),
            (
                "https://169.254.169.254/latest/meta-data",
                false,
                BlockedAddress,
            ),
            ("https://[::1]/", false, BlockedAddress),
            ("https://[::ffff:127.0.0.1]/", false, BlockedAddress),
            ("https://[::ffff:7f00:1]/", false, BlockedAddress),
            ("https://[::ffff:0:808:808]/", false, BlockedAddress),
            ("https://example.com/caf\u{e9}", false, NotUrl),
            ("https://example.com/a b", false, NotUrl),
            ("https://example.com/a\"b", false, NotUrl),
            ("https://example.com/a<b>", false, NotUrl),
            ("https://example.com/%zz", false, NotUrl),
            ("https://example.com/?q=\u{fc}", false, NotUrl),
            ("https://example.com/#\u{fc}", false, NotUrl),
            ("https://[fd00::1]:8443/", false, BlockedAddress),
            ("https://2130706433/", false, AmbiguousHost),
            ("https://2130706433/", true, AmbiguousHost),
            ("https://0x7f.1/", false, AmbiguousHost),
            ("https://0x7f000001/", false, AmbiguousHost),
            ("https://0177.0.0.1/", false, AmbiguousHost),
            ("https://127.1/", false, AmbiguousHost),
            ("https://127.0.0.1.1/", false, AmbiguousHost),
            ("https://8.8.8.08/", false, AmbiguousHost),
            ("https://256.0.0.1/", false, AmbiguousHost),
            ("https://example.123/", false, AmbiguousHost),
            ("https://example.0x/", false, AmbiguousHost),
        ];
        for (url, insecure, err) in cases {
            assert_eq!(target(url, *insecure), Err(*err), "{url}");
        }
    }
}
