//! Where a request came from, for the audit log: the address of the
//! socket it arrived on, and what `X-Forwarded-For` claimed.
//!
//! Only the socket's address is the server's own observation; behind a
//! proxy it is the proxy's. `X-Forwarded-For` is recorded as sent, as
//! information for a reader: any client can write one, so nothing decides
//! anything by it unless it comes from a proxy the operator trusts
//! ([`super::proxies`]; the sign-in throttle's per-address count).

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap};

use domain::audit::client_text;

/// A request's origin as the audit log records it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Client {
    /// The peer's IP address (no port: it changes per connection and
    /// tells a reader nothing). `None` when the server was not started
    /// with connection info (a router served without it).
    pub address: Option<String>,
    /// `X-Forwarded-For` as sent, control characters dropped and cut to
    /// a bounded length.
    pub forwarded_for: Option<String>,
    /// The addresses `X-Forwarded-For` names in order (at most
    /// [`MAX_HOPS`], the nearest kept), for [`Client::source`].
    hops: Vec<IpAddr>,
}

/// `X-Forwarded-For` entries kept for [`Client::source`]; a longer chain
/// is cut at its far end.
const MAX_HOPS: usize = 16;

impl Client {
    pub fn of(extensions: &Extensions, headers: &HeaderMap) -> Client {
        let address = extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| peer.ip().to_canonical().to_string());
        let forwarded: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let forwarded_for = (!forwarded.is_empty())
            .then(|| client_text(&forwarded.join(", ")))
            .filter(|f| !f.trim().is_empty());
        let mut hops: Vec<IpAddr> = forwarded
            .iter()
            .flat_map(|value| value.split(','))
            .filter_map(|hop| hop.trim().parse().ok())
            .collect();
        if hops.len() > MAX_HOPS {
            hops.drain(..hops.len() - MAX_HOPS);
        }
        Client {
            address,
            forwarded_for,
            hops,
        }
    }

    /// The address password checks are counted against: the peer's, or
    /// the client's a trusted proxy names.
    pub fn source(&self, trusted: &super::proxies::TrustedProxies) -> Option<String> {
        let peer = self.address.as_deref().and_then(|a| a.parse().ok());
        super::proxies::source(peer, &self.hops, trusted).map(|ip| ip.to_string())
    }

    /// The person `name`, asking from here.
    pub fn person<'a>(&'a self, name: &'a str) -> domain::audit::Person<'a> {
        domain::audit::Person {
            name,
            address: self.address.as_deref(),
            forwarded_for: self.forwarded_for.as_deref(),
        }
    }

    /// `who`, with this origin.
    pub fn stamp(self, who: &mut domain::model::Identity) {
        who.address = self.address;
        who.forwarded_for = self.forwarded_for;
    }
}

/// For the sign-in handlers, which run before (and without) the guard's
/// identity.
impl<S: Send + Sync> FromRequestParts<S> for Client {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Client::of(&parts.extensions, &parts.headers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_address_is_kept_and_forwarded_for_only_recorded() {
        let mut extensions = Extensions::new();
        extensions.insert(ConnectInfo::<SocketAddr>(
            "[::ffff:127.0.0.1]:50123".parse().unwrap(),
        ));
        let mut headers = HeaderMap::new();
        headers.append("x-forwarded-for", "203.0.113.9".parse().unwrap());
        headers.append("x-forwarded-for", "10.0.0.1".parse().unwrap());
        let client = Client::of(&extensions, &headers);
        assert_eq!(client.address.as_deref(), Some("127.0.0.1"));
        assert_eq!(
            client.forwarded_for.as_deref(),
            Some("203.0.113.9, 10.0.0.1")
        );
        let long = "1".repeat(500);
        headers.insert("x-forwarded-for", long.parse().unwrap());
        let client = Client::of(&Extensions::new(), &headers);
        assert_eq!(client.address, None);
        assert_eq!(client.forwarded_for.map(|f| f.len()), Some(200));
    }
}
