//! Proxies whose `X-Forwarded-For` is believed (`BATON_TRUSTED_PROXIES`):
//! behind a load balancer every request comes from its address, and
//! counting wrong passwords per address would let one guesser lock every
//! user out. A request from a trusted proxy is counted against the address
//! the proxy says it came from: the rightmost `X-Forwarded-For` entry that
//! is not itself a trusted proxy. From anyone else the header is only
//! recorded (the audit log), never believed.

use std::net::IpAddr;

/// Single addresses or CIDR ranges (`10.0.0.0/8`, `fd00::/8`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<(IpAddr, u8)>);

impl TrustedProxies {
    /// The list as `BATON_TRUSTED_PROXIES` gives it; an entry that is not
    /// an address or a range is refused naming it.
    pub fn parse(entries: &[String]) -> anyhow::Result<Self> {
        let mut ranges = Vec::new();
        for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            let (address, bits) = entry.split_once('/').unwrap_or((entry, ""));
            let address: IpAddr = address.parse().map_err(|_| {
                anyhow::anyhow!("BATON_TRUSTED_PROXIES: `{entry}` is not an IP address or range")
            })?;
            let address = address.to_canonical();
            let width = if address.is_ipv4() { 32 } else { 128 };
            let bits = match bits {
                "" => width,
                bits => bits.parse::<u8>().ok().filter(|b| *b <= width).ok_or_else(|| {
                    anyhow::anyhow!(
                        "BATON_TRUSTED_PROXIES: `{entry}` has a prefix length that is not 0–{width}"
                    )
                })?,
            };
            ranges.push((address, bits));
        }
        Ok(TrustedProxies(ranges))
    }

    pub fn contains(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.0
            .iter()
            .any(|(range, bits)| same_prefix(*range, address, *bits))
    }
}

fn same_prefix(a: IpAddr, b: IpAddr, bits: u8) -> bool {
    let (a, b, width) = match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u32::from(a) as u128, u32::from(b) as u128, 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return false,
    };
    let shift = width - u32::from(bits);
    shift >= 128 || (a >> shift) == (b >> shift)
}

/// The address a request is counted against: its peer, or, while the
/// peer is a trusted proxy, the hop before it in `forwarded` (the
/// `X-Forwarded-For` entries in order, nearest last).
pub fn source(
    peer: Option<IpAddr>,
    forwarded: &[IpAddr],
    trusted: &TrustedProxies,
) -> Option<IpAddr> {
    let mut address = peer?.to_canonical();
    for hop in forwarded.iter().rev() {
        if !trusted.contains(address) {
            break;
        }
        address = hop.to_canonical();
    }
    Some(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn only_a_trusted_proxy_is_believed_and_only_for_its_own_hop() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8".into(), " ::1 ".into()]).unwrap();
        assert!(trusted.contains(ip("10.1.2.3")));
        assert!(trusted.contains(ip("::ffff:10.9.9.9")));
        assert!(!trusted.contains(ip("11.0.0.1")));
        let hops = [ip("198.51.100.7"), ip("203.0.113.9")];
        // From the proxy: the client it names.
        assert_eq!(
            source(Some(ip("10.0.0.2")), &hops, &trusted),
            Some(ip("203.0.113.9"))
        );
        // A chain of trusted proxies is walked through.
        let chain = [ip("203.0.113.9"), ip("10.0.0.5")];
        assert_eq!(
            source(Some(ip("10.0.0.2")), &chain, &trusted),
            Some(ip("203.0.113.9"))
        );
        // From anyone else the header is not believed.
        assert_eq!(
            source(Some(ip("192.0.2.1")), &hops, &trusted),
            Some(ip("192.0.2.1"))
        );
        assert_eq!(
            source(Some(ip("10.0.0.2")), &hops, &TrustedProxies::default()),
            Some(ip("10.0.0.2"))
        );
    }

    #[test]
    fn a_bad_entry_is_refused_naming_it() {
        for bad in ["10.0.0.0/33", "proxy.example", "10.0.0.0/x", "::/129"] {
            let e = TrustedProxies::parse(&[bad.into()])
                .unwrap_err()
                .to_string();
            assert!(e.contains(bad), "{e}");
        }
        let any = TrustedProxies::parse(&["0.0.0.0/0".into()]).unwrap();
        assert!(any.contains(ip("8.8.8.8")));
    }
}
