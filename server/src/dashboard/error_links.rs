//! Error messages in links are the server's own.
//!
//! Without JavaScript, a form whose server function fails is sent back to
//! its page by Leptos with the error in the link (`?__path=…&__err=…`), and
//! the page shows it as its error notice. Anyone could write such a link,
//! so a page showed whatever text a link carried ("your session expired,
//! sign in at evil.example") on a page people trust. Here the redirect
//! that carries an error is signed (`__errsig`, an HMAC of `__path` and
//! `__err`), and a page asked for with an error that carries no valid
//! signature is sent to the same address without it.
//!
//! The key is derived from the users file, which every replica of a
//! deployment shares, so a redirect written by one replica shows on
//! another; without a users file (one replica on loopback) it is random
//! per process, and an error followed to another process is dropped, not
//! shown.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

const ERROR: &str = "__err";
const PATH: &str = "__path";
const SIGNATURE: &str = "__errsig";

/// Signs and checks the errors links carry.
pub struct ErrorLinks {
    key: [u8; 32],
}

impl ErrorLinks {
    /// The key for a deployment whose users file holds `users` (its bytes:
    /// Argon2 hashes with random salts, which no outsider knows); random
    /// when there is none.
    pub fn new(users: Option<&[u8]>) -> anyhow::Result<Self> {
        let key = match users {
            Some(users) => {
                let mut digest = Sha256::new();
                digest.update(b"baton: errors in links\n");
                digest.update(users);
                digest.finalize().into()
            }
            None => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key)
                    .map_err(|e| anyhow::anyhow!("no randomness for the link key: {e}"))?;
                key
            }
        };
        Ok(ErrorLinks { key })
    }

    fn mac(&self, path: &str, error: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(path.as_bytes());
        mac.update(b"\n");
        mac.update(error.as_bytes());
        mac
    }

    fn sign(&self, path: &str, error: &str) -> String {
        hex::encode(self.mac(path, error).finalize().into_bytes())
    }

    fn verifies(&self, path: &str, error: &str, signature: &str) -> bool {
        hex::decode(signature).is_ok_and(|given| self.mac(path, error).verify_slice(&given).is_ok())
    }

    /// `location` with a signature for the error it carries; `None` when
    /// it carries none (or cannot be read).
    fn signed(&self, location: &str) -> Option<String> {
        let (mut url, relative) = parse(location)?;
        let pairs = pairs(&url);
        let error = value(&pairs, ERROR)?;
        let path = value(&pairs, PATH).unwrap_or_default();
        let signature = self.sign(path, error);
        url.query_pairs_mut().append_pair(SIGNATURE, &signature);
        Some(shown(&url, relative))
    }

    /// Where a request for `uri` whose error is not ours goes instead: the
    /// same address without it; `None` when it carries none or a valid one.
    fn unsigned_error_dropped(&self, uri: &str) -> Option<String> {
        let (mut url, relative) = parse(uri)?;
        let pairs = pairs(&url);
        let error = value(&pairs, ERROR)?;
        let path = value(&pairs, PATH).unwrap_or_default();
        let signature = value(&pairs, SIGNATURE).unwrap_or_default();
        if self.verifies(path, error, signature) {
            return None;
        }
        let kept: Vec<&(String, String)> = pairs
            .iter()
            .filter(|(name, _)| ![ERROR, PATH, SIGNATURE].contains(&name.as_str()))
            .collect();
        if kept.is_empty() {
            url.set_query(None);
        } else {
            url.query_pairs_mut()
                .clear()
                .extend_pairs(kept.iter().map(|(n, v)| (n, v)));
        }
        Some(shown(&url, relative))
    }
}

/// The middleware: signs the errors this server's redirects carry, and
/// drops those of links it did not write.
pub async fn error_links(
    State(links): State<Arc<ErrorLinks>>,
    request: Request,
    next: Next,
) -> Response {
    if matches!(*request.method(), Method::GET | Method::HEAD)
        && let Some(query) = request.uri().query()
        && query.contains(ERROR)
    {
        let uri = request.uri().to_string();
        if let Some(clean) = links.unsigned_error_dropped(&uri) {
            return Redirect::to(&clean).into_response();
        }
    }
    let mut response = next.run(request).await;
    if response.status().is_redirection()
        && let Some(location) = response
            .headers()
            .get(header::LOCATION)
            .and_then(|l| l.to_str().ok())
        && location.contains(ERROR)
        && let Some(signed) = links.signed(location)
        && let Ok(value) = HeaderValue::from_str(&signed)
    {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// A location or request target as a URL; `true` when it was relative
/// (a path), so it is given back as one.
fn parse(target: &str) -> Option<(reqwest::Url, bool)> {
    match reqwest::Url::parse(target) {
        Ok(url) => Some((url, false)),
        Err(_) => {
            let base = reqwest::Url::parse("http://relative.invalid/").ok()?;
            Some((base.join(target).ok()?, true))
        }
    }
}

fn shown(url: &reqwest::Url, relative: bool) -> String {
    if !relative {
        return url.to_string();
    }
    let mut out = url.path().to_owned();
    if let Some(query) = url.query() {
        out.push('?');
        out.push_str(query);
    }
    if let Some(fragment) = url.fragment() {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

fn pairs(url: &reqwest::Url) -> Vec<(String, String)> {
    url.query_pairs().into_owned().collect()
}

fn value<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_own_error_passes_and_a_forged_one_is_dropped() {
        let links = ErrorLinks::new(Some(b"alice:operator:$argon2id$...")).unwrap();
        let ours = links
            .signed("http://127.0.0.1:3000/runs?status=FAILED&__path=%2F_fn%2Fruns_bulk&__err=eyJ9")
            .unwrap();
        assert!(ours.contains("__errsig="), "{ours}");
        let target = ours.trim_start_matches("http://127.0.0.1:3000");
        assert_eq!(links.unsigned_error_dropped(target), None, "{target}");
        // Another replica with the same users file agrees.
        let twin = ErrorLinks::new(Some(b"alice:operator:$argon2id$...")).unwrap();
        assert_eq!(twin.unsigned_error_dropped(target), None);

        // A link someone wrote, or ours with its text changed.
        for forged in [
            "/runs?status=FAILED&__path=%2F_fn%2Fruns_bulk&__err=UGhpc2g".to_owned(),
            target.replace("__err=eyJ9", "__err=UGhpc2g"),
        ] {
            assert_eq!(
                links.unsigned_error_dropped(&forged).as_deref(),
                Some("/runs?status=FAILED"),
                "{forged}"
            );
        }
        assert_eq!(
            links.unsigned_error_dropped("/?__err=x").as_deref(),
            Some("/")
        );
        // Another deployment's key does not sign for this one.
        let other = ErrorLinks::new(None).unwrap();
        assert!(other.unsigned_error_dropped(target).is_some());
        // Links without an error are left alone.
        assert_eq!(links.unsigned_error_dropped("/runs?status=FAILED"), None);
    }
}
