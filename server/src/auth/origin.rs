//! Where a request says it comes from and is addressed to: the checks
//! against cross-site request forgery and DNS rebinding.

use std::net::IpAddr;

use axum::http::{HeaderMap, header};

/// Why a request that would change something is refused as cross-site, or
/// `None` when it comes from this server's own pages or from a client that
/// is not a browser (which sends neither header checked here).
///
/// Browsers send `Sec-Fetch-Site` on every request and `Origin` on every
/// POST; neither can be forged by a page. The session cookie is also
/// `SameSite=Lax`, so this is the second of two locks.
pub fn cross_site(headers: &HeaderMap, public_host: Option<&str>) -> Option<String> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site")
        && !matches!(site, "same-origin" | "none")
    {
        return Some(format!(
            "the browser says this request comes from another site (Sec-Fetch-Site: {site})"
        ));
    }
    let origin = text(header::ORIGIN.as_str())?;
    let origin_host = origin.split_once("://").map(|(_, host)| host);
    let own_host = text("x-forwarded-host")
        .and_then(|h| h.split(',').next())
        .or_else(|| text(header::HOST.as_str()))
        .map(str::trim);
    let same = |host: Option<&str>| matches!((origin_host, host), (Some(a), Some(b)) if a.eq_ignore_ascii_case(b));
    if same(own_host) || same(public_host) {
        None
    } else {
        Some(format!(
            "this request comes from `{origin}`, not from this server's dashboard"
        ))
    }
}

/// The `Host` a request is addressed to when it is not a loopback name or
/// address. A server without users answers only loopback names, so a page
/// on another site cannot reach it by pointing its own name at 127.0.0.1.
pub fn foreign_host(headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().unwrap_or("?");
    (!is_loopback_host(host)).then(|| host.to_owned())
}

fn is_loopback_host(host: &str) -> bool {
    // Drop the port: `[::1]:3000`, `127.0.0.1:3000`, `localhost:3000`.
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn same_origin_and_non_browser_requests_pass() {
        let host = ("host", "127.0.0.1:3000");
        assert_eq!(cross_site(&headers(&[host]), None), None);
        assert_eq!(
            cross_site(&headers(&[host, ("origin", "http://127.0.0.1:3000")]), None),
            None
        );
        assert_eq!(
            cross_site(&headers(&[host, ("sec-fetch-site", "same-origin")]), None),
            None
        );
        // Behind a proxy: the forwarded host, or the public URL's.
        let proxied = [
            ("host", "10.0.0.5:3000"),
            ("x-forwarded-host", "baton.example"),
            ("origin", "https://baton.example"),
        ];
        assert_eq!(cross_site(&headers(&proxied), None), None);
        let public = [
            ("host", "10.0.0.5:3000"),
            ("origin", "https://baton.example"),
        ];
        assert_eq!(cross_site(&headers(&public), Some("baton.example")), None);
    }

    #[test]
    fn other_sites_are_refused() {
        let host = ("host", "127.0.0.1:3000");
        for refused in [
            headers(&[host, ("origin", "https://evil.example")]),
            headers(&[host, ("origin", "null")]),
            headers(&[host, ("sec-fetch-site", "cross-site")]),
            headers(&[host, ("sec-fetch-site", "same-site")]),
            headers(&[host, ("origin", "http://127.0.0.1:3001")]),
        ] {
            assert!(
                cross_site(&refused, Some("baton.example")).is_some(),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn only_loopback_hosts_are_local() {
        for local in [
            "127.0.0.1:3000",
            "127.8.0.1",
            "localhost:3000",
            "LOCALHOST",
            "[::1]:3000",
            "app.localhost",
        ] {
            assert_eq!(foreign_host(&headers(&[("host", local)])), None, "{local}");
        }
        for foreign in [
            "evil.example:3000",
            "10.0.0.5:3000",
            "[fe80::1]:80",
            "localhost.evil.example",
        ] {
            assert_eq!(
                foreign_host(&headers(&[("host", foreign)])).as_deref(),
                Some(foreign)
            );
        }
        assert_eq!(
            foreign_host(&HeaderMap::new()),
            None,
            "HTTP/1.0 without Host"
        );
    }
}
