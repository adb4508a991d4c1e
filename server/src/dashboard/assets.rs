//! The dashboard's browser bundle (JS glue, wasm, the files of `public/`)
//! as the `baton` binary carries it: `build.rs` writes the table, the
//! binary includes it, and this file serves it.
//!
//! The JS and wasm have a content hash in their names, so they are cached
//! for a year as immutable; the other files are revalidated by ETag. Release
//! builds carry gzip and brotli copies made at build time, sent to clients
//! that accept them.

use axum::{
    body::Body,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};

/// One file of the bundle.
#[derive(Debug)]
pub struct Asset {
    /// Its URL path, e.g. `/pkg/baton-0123456789abcdef.wasm`.
    pub path: &'static str,
    pub content_type: &'static str,
    /// A quoted content hash, computed at build time: hashing the 1.8 MB
    /// wasm on every request would cost more than sending it.
    pub etag: &'static str,
    /// The name carries a content hash: browsers may keep it forever.
    pub immutable: bool,
    pub raw: &'static [u8],
    pub gzip: Option<&'static [u8]>,
    pub brotli: Option<&'static [u8]>,
}

/// The bundle a binary carries.
#[derive(Debug)]
pub struct Site {
    /// The JS and wasm file stem (`baton-HASH`), which the pages' hydration
    /// script asks for.
    pub output_name: &'static str,
    pub assets: &'static [Asset],
}

impl Site {
    /// No bundle: pages still render, but never hydrate.
    pub const EMPTY: Site = Site {
        output_name: "baton",
        assets: &[],
    };

    /// Whether the wasm bundle is there (not only `public/`'s files).
    pub fn has_bundle(&self) -> bool {
        self.assets.iter().any(|a| a.path.ends_with(".wasm"))
    }

    pub fn find(&self, path: &str) -> Option<&'static Asset> {
        self.assets.iter().find(|a| a.path == path)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Brotli,
    Gzip,
    Identity,
}

/// The best encoding of those stored that the client accepts (a `q=0`
/// refuses one).
fn negotiate(headers: &HeaderMap, asset: &Asset) -> Encoding {
    let accepted = |name: &str| {
        headers
            .get_all(header::ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|item| {
                let mut parts = item.split(';').map(str::trim);
                let coding = parts.next().unwrap_or_default();
                let refused = parts.any(|p| {
                    p.strip_prefix("q=")
                        .and_then(|q| q.parse::<f32>().ok())
                        .is_some_and(|q| q <= 0.0)
                });
                (coding.eq_ignore_ascii_case(name) || coding == "*") && !refused
            })
    };
    if asset.brotli.is_some() && accepted("br") {
        Encoding::Brotli
    } else if asset.gzip.is_some() && accepted("gzip") {
        Encoding::Gzip
    } else {
        Encoding::Identity
    }
}

/// The response for `asset`: 304 when the client's ETag still matches.
pub fn respond(asset: &'static Asset, request: &HeaderMap) -> Response {
    let cache = if asset.immutable {
        "public, max-age=31536000, immutable"
    } else {
        "public, no-cache"
    };
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| t.trim() == asset.etag || t.trim() == "*")
        });
    let mut headers = HeaderMap::new();
    let value = |s: &str| HeaderValue::from_str(s).expect("header values are ASCII");
    headers.insert(header::CACHE_CONTROL, value(cache));
    headers.insert(header::ETAG, value(asset.etag));
    headers.insert(header::VARY, value("accept-encoding"));
    if fresh {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    headers.insert(header::CONTENT_TYPE, value(asset.content_type));
    let body = match negotiate(request, asset) {
        Encoding::Brotli => {
            headers.insert(header::CONTENT_ENCODING, value("br"));
            asset.brotli
        }
        Encoding::Gzip => {
            headers.insert(header::CONTENT_ENCODING, value("gzip"));
            asset.gzip
        }
        Encoding::Identity => None,
    }
    .unwrap_or(asset.raw);
    (headers, Body::from(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    static WASM: Asset = Asset {
        path: "/pkg/baton-00.wasm",
        content_type: "application/wasm",
        etag: "\"00\"",
        immutable: true,
        raw: b"raw",
        gzip: Some(b"gz"),
        brotli: Some(b"br"),
    };
    static ICON: Asset = Asset {
        path: "/favicon.svg",
        content_type: "image/svg+xml",
        etag: "\"01\"",
        immutable: false,
        raw: b"<svg/>",
        gzip: None,
        brotli: None,
    };

    fn accept(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_str(value).unwrap(),
        );
        h
    }

    #[test]
    fn the_best_stored_encoding_the_client_accepts_is_sent() {
        assert_eq!(
            negotiate(&accept("gzip, deflate, br"), &WASM),
            Encoding::Brotli
        );
        assert_eq!(negotiate(&accept("gzip"), &WASM), Encoding::Gzip);
        assert_eq!(negotiate(&accept("br;q=0, gzip"), &WASM), Encoding::Gzip);
        assert_eq!(negotiate(&accept("BR"), &WASM), Encoding::Brotli);
        assert_eq!(negotiate(&accept("identity"), &WASM), Encoding::Identity);
        assert_eq!(negotiate(&HeaderMap::new(), &WASM), Encoding::Identity);
        // Nothing stored compressed: the raw bytes whatever is accepted.
        assert_eq!(negotiate(&accept("br, gzip"), &ICON), Encoding::Identity);
    }

    #[test]
    fn hashed_files_are_immutable_and_others_revalidate() {
        let wasm = respond(&WASM, &accept("br"));
        assert_eq!(wasm.status(), StatusCode::OK);
        let h = wasm.headers();
        assert_eq!(h[header::CONTENT_TYPE], "application/wasm");
        assert_eq!(h[header::CONTENT_ENCODING], "br");
        assert!(
            h[header::CACHE_CONTROL]
                .to_str()
                .unwrap()
                .contains("immutable")
        );

        let icon = respond(&ICON, &HeaderMap::new());
        let etag = icon.headers()[header::ETAG].clone();
        assert_eq!(icon.headers()[header::CACHE_CONTROL], "public, no-cache");
        assert!(icon.headers().get(header::CONTENT_ENCODING).is_none());
        let mut again = HeaderMap::new();
        again.insert(header::IF_NONE_MATCH, etag);
        assert_eq!(respond(&ICON, &again).status(), StatusCode::NOT_MODIFIED);
    }
}
