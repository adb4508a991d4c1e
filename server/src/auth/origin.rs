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
/// `SameSite=Lax`, so this is the second of two locks. An origin is scheme
/// and host: a page served over plain HTTP under the dashboard's name (on a
/// network that can tamper with it) is another origin than the HTTPS
/// dashboard. `public_origin` is `BATON_PUBLIC_URL`'s (`https://host`).
pub fn cross_site(headers: &HeaderMap, public_origin: Option<&str>) -> Option<String> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    match text("sec-fetch-site") {
        // The browser compared the page's origin with the request's itself.
        Some("same-origin") => return None,
        Some("none") | None => {}
        Some(site) => {
            return Some(format!(
                "the browser says this request comes from another site (Sec-Fetch-Site: {site})"
            ));
        }
    }
    let origin = text(header::ORIGIN.as_str())?;
    let first = |name| {
        text(name)
            .and_then(|h: &str| h.split(',').next())
            .map(str::trim)
    };
    // Baton speaks plain HTTP; a proxy in front says what it was reached by.
    let own_scheme = first("x-forwarded-proto").unwrap_or("http");
    let own_host = first("x-forwarded-host").or_else(|| first(header::HOST.as_str()));
    let own = own_host.map(|host| format!("{own_scheme}://{host}"));
    let same = |expected: Option<&str>| expected.is_some_and(|e| e.eq_ignore_ascii_case(origin));
    if same(own.as_deref()) || same(public_origin) {
        None
    } else {
        Some(format!(
            "this request comes from `{origin}`, not from this server's dashboard (behind a \
             proxy: forward X-Forwarded-Proto and X-Forwarded-Host, or set BATON_PUBLIC_URL)"
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
            ("x-forwarded-proto", "https"),
            ("origin", "https://baton.example"),
        ];
        assert_eq!(cross_site(&headers(&proxied), None), None);
        let public = [
            ("host", "10.0.0.5:3000"),
            ("origin", "https://baton.example"),
        ];
        assert_eq!(
            cross_site(&headers(&public), Some("https://baton.example")),
            None
        );
        // A browser that compared the origins itself is believed.
        let fetch = [
            ("host", "10.0.0.5:3000"),
            ("sec-fetch-site", "same-origin"),
            ("origin", "https://baton.example"),
        ];
        assert_eq!(cross_site(&headers(&fetch), None), None);
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
            // The right host over another scheme is another origin.
            headers(&[host, ("origin", "https://127.0.0.1:3000")]),
            headers(&[host, ("origin", "http://baton.example")]),
            headers(&[
                ("host", "10.0.0.5:3000"),
                ("x-forwarded-host", "baton.example"),
                ("x-forwarded-proto", "https"),
                ("origin", "http://baton.example"),
            ]),
        ] {
            assert!(
                cross_site(&refused, Some("https://baton.example")).is_some(),
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
