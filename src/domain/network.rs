//! Client addresses: the ranges `server.trusted_proxies` lists (an address or a CIDR), and the
//! address a failed-auth budget counts a client under (docs/api.md, "Authentication and modes",
//! and "Behind a proxy").

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An address range: one address (`10.0.0.7`, `::1`) or a CIDR (`10.0.0.0/8`, `fd00::/8`).
/// An IPv4 range also holds the IPv4-mapped IPv6 form of its addresses (`::ffff:10.0.0.7`), as
/// a dual-stack listener sees IPv4 peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressRange {
    network: IpAddr,
    prefix_len: u8,
}

/// Text that is neither an IP address nor a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an IP address or a CIDR (such as 10.0.0.7, 10.0.0.0/8 or fd00::/8)")]
pub struct InvalidRange(pub String);

impl AddressRange {
    /// Whether `address` is in the range.
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, unmapped(address)) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                masked_v4(address, self.prefix_len) == network
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                masked_v6(address, self.prefix_len) == network
            }
            _ => false,
        }
    }
}

impl FromStr for AddressRange {
    type Err = InvalidRange;

    /// Parses `ADDRESS` or `ADDRESS/PREFIX`; host bits set under the prefix (`10.1.2.3/8`) are
    /// refused, as they usually mean a mistyped range.
    fn from_str(text: &str) -> Result<AddressRange, InvalidRange> {
        let invalid = || InvalidRange(text.to_string());
        let trimmed = text.trim();
        let (address, prefix) = match trimmed.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (trimmed, None),
        };
        let network = unmapped(address.parse::<IpAddr>().map_err(|_| invalid())?);
        let max_len = if network.is_ipv4() { 32 } else { 128 };
        let prefix_len = match prefix {
            None => max_len,
            Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                digits
                    .parse::<u8>()
                    .ok()
                    .filter(|len| *len <= max_len)
                    .ok_or_else(invalid)?
            }
            Some(_) => return Err(invalid()),
        };
        let masked = match network {
            IpAddr::V4(v4) => IpAddr::V4(masked_v4(v4, prefix_len)),
            IpAddr::V6(v6) => IpAddr::V6(masked_v6(v6, prefix_len)),
        };
        if masked != network {
            return Err(invalid());
        }
        Ok(AddressRange {
            network,
            prefix_len,
        })
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

/// The address a per-client budget counts `address` under: an IPv4-mapped IPv6 address as the
/// IPv4 address it carries (each IPv4 client of a dual-stack listener is its own client), any
/// other IPv6 address as its /64 (which one host can fill with addresses).
pub fn budget_address(address: IpAddr) -> IpAddr {
    match unmapped(address) {
        IpAddr::V6(v6) => IpAddr::V6(masked_v6(v6, 64)),
        v4 => v4,
    }
}

/// `address` with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) turned into its IPv4 address.
pub fn unmapped(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

fn masked_v4(address: Ipv4Addr, prefix_len: u8) -> Ipv4Addr {
    let mask = u32::MAX
        .checked_shl(32 - u32::from(prefix_len))
        .unwrap_or(0);
    Ipv4Addr::from(u32::from(address) & mask)
}

fn masked_v6(address: Ipv6Addr, prefix_len: u8) -> Ipv6Addr {
    let mask = u128::MAX
        .checked_shl(128 - u32::from(prefix_len))
        .unwrap_or(0);
    Ipv6Addr::from(u128::from(address) & mask)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn range(text: &str) -> AddressRange {
        text.parse().unwrap()
    }

    #[test]
    fn ipv4_mapped_addresses_count_as_their_ipv4_address() {
        assert_eq!(budget_address(ip("::ffff:127.0.0.2")), ip("127.0.0.2"));
        assert_ne!(
            budget_address(ip("::ffff:127.0.0.1")),
            budget_address(ip("::ffff:127.0.0.2"))
        );
        assert_eq!(budget_address(ip("192.0.2.7")), ip("192.0.2.7"));
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_prefix() {
        assert_eq!(
            budget_address(ip("2001:db8:1:2:aaaa::1")),
            ip("2001:db8:1:2::")
        );
        assert_eq!(
            budget_address(ip("2001:db8:1:2::1")),
            budget_address(ip("2001:db8:1:2:ffff::9"))
        );
        assert_ne!(
            budget_address(ip("2001:db8:1:2::1")),
            budget_address(ip("2001:db8:1:3::1"))
        );
        // The loopback is a /64 of its own, apart from every IPv4 client.
        assert_ne!(
            budget_address(ip("::1")),
            budget_address(ip("::ffff:0.0.0.1"))
        );
    }

    #[test]
    fn ranges_are_single_addresses_or_cidrs() {
        assert!(range("127.0.0.1").contains(ip("127.0.0.1")));
        assert!(!range("127.0.0.1").contains(ip("127.0.0.2")));
        assert!(range("10.0.0.0/8").contains(ip("10.255.1.2")));
        assert!(!range("10.0.0.0/8").contains(ip("11.0.0.1")));
        assert!(range("0.0.0.0/0").contains(ip("203.0.113.9")));
        assert!(!range("0.0.0.0/0").contains(ip("2001:db8::1")));
        assert!(range("fd00::/8").contains(ip("fd12::1")));
        assert!(range("::1").contains(ip("::1")));
        assert!(!range("::1").contains(ip("127.0.0.1")));
        // A dual-stack listener sees IPv4 peers as IPv4-mapped addresses.
        assert!(range("10.0.0.0/8").contains(ip("::ffff:10.1.2.3")));
        assert!(range("::ffff:10.0.0.7").contains(ip("10.0.0.7")));
        assert_eq!(range(" 192.168.1.0/24 ").to_string(), "192.168.1.0/24");
    }

    #[test]
    fn anything_else_is_refused_with_its_text() {
        for bad in [
            "",
            "localhost",
            "10.0.0.0/",
            "10.0.0.0/33",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
            "10.1.2.3/8",
            "fd00::/129",
            "10.0.0.0/8/8",
            "1.2.3",
        ] {
            let err = bad.parse::<AddressRange>().unwrap_err();
            assert_eq!(err, InvalidRange(bad.to_string()));
            assert!(err.to_string().contains("not an IP address or a CIDR"));
        }
    }
}
