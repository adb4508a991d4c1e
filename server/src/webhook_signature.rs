//! `X-Baton-Signature: sha256=<hex HMAC-SHA256 of the body>`, so a receiver
//! can tell Baton's deliveries from forgeries.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

pub const SIGNATURE_HEADER: &str = "X-Baton-Signature";

/// The header value for `body` signed with `secret`.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts keys of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Checks a received header value in constant time (for receivers and
/// tests).
pub fn verify(secret: &str, body: &[u8], header: &str) -> bool {
    let Some(given) = header
        .strip_prefix("sha256=")
        .and_then(|h| hex::decode(h).ok())
    else {
        return false;
    };
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts keys of any length");
    mac.update(body);
    mac.verify_slice(&given).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_match_the_published_hmac_and_reject_tampering() {
        // RFC 4231 test case 2.
        let signed = sign("Jefe", b"what do ya want for nothing?");
        assert_eq!(
            signed,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert!(verify("Jefe", b"what do ya want for nothing?", &signed));
        assert!(!verify("Jefe", b"what do ya want for nothing!", &signed));
        assert!(!verify("other", b"what do ya want for nothing?", &signed));
        assert!(!verify("Jefe", b"x", "md5=00"));
    }
}
