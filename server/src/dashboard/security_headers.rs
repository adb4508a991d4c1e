//! Browser-side defences for every answer: a Content-Security-Policy that
//! lets a page run only the scripts Baton itself put there, and the headers
//! that stop framing, MIME sniffing and referrer leaks.
//!
//! Pages carry inline scripts (hydration, and each page's loaded data), so
//! their policy names a fresh nonce that Leptos also writes onto those
//! scripts; a name that smuggled in a `<script>` would lack it and not run.
//! Every other answer (JSON, files, refusals) gets a policy that allows
//! nothing at all.

use axum::Router;
use axum::http::{HeaderName, HeaderValue, header};
use leptos::prelude::use_context;
use leptos_axum::ResponseOptions;
use tower_http::set_header::SetResponseHeaderLayer;

/// For answers that are not pages: nothing may load or frame them.
const NOTHING: &str = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'";

/// The policy of a page rendered with `nonce`. Styles allow inline
/// attributes: the progress bar sizes its segments with `style="width"`,
/// and a style cannot run code.
fn page_policy(nonce: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
         object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
}

/// Called while a page renders (its Leptos context holds the nonce and the
/// response options): gives that response its own policy.
pub fn set_page_policy() {
    let (Some(nonce), Some(response)) =
        (leptos::nonce::use_nonce(), use_context::<ResponseOptions>())
    else {
        return;
    };
    if let Ok(value) = HeaderValue::from_str(&page_policy(&nonce)) {
        response.insert_header(header::CONTENT_SECURITY_POLICY, value);
    }
}

/// Adds the fixed headers to every answer of `router`, and [`NOTHING`] as
/// the policy of any answer that did not set its own.
pub fn protect(router: Router) -> Router {
    let fixed: [(HeaderName, &str); 3] = [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
    ];
    let router = fixed.into_iter().fold(router, |router, (name, value)| {
        router.layer(SetResponseHeaderLayer::overriding(
            name,
            HeaderValue::from_static(value),
        ))
    });
    router.layer(SetResponseHeaderLayer::if_not_present(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(NOTHING),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_policy_is_a_valid_header_and_names_its_nonce() {
        let policy = page_policy("abc123");
        assert!(HeaderValue::from_str(&policy).is_ok());
        assert!(policy.contains("'nonce-abc123'"));
        assert!(!policy.contains("script-src 'self' 'unsafe-inline'"));
    }
}
