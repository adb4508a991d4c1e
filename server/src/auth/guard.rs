//! The middleware in front of every route: refuses what must not reach a
//! handler and tells handlers who is asking.

use std::sync::Arc;

use app::error::DashboardError;
use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use domain::model::ErrorBody;

use super::origin::{cross_site, foreign_host};
use super::{Auth, AuthError, Client};
use crate::refusal::Audience;

/// Checks, in order: a server without users is addressed by a loopback
/// name; a change comes from the dashboard's own origin; the sender is
/// known. Then the request goes on with its [`domain::model::Identity`]
/// (with where it came from, for the audit log) in its extensions. Public paths skip the last check.
pub async fn guard(State(auth): State<Arc<Auth>>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let audience = Audience::of(&request);
    // Decided on the path as sent: a `/pkg/../plans/29` would pass as a
    // public asset here and reach a page once something resolved the dot
    // segments later. No page, route or asset name needs such a path.
    if let Some(why) = path_trick(&path) {
        return audience.refuse(StatusCode::BAD_REQUEST, why);
    }
    if auth.is_open()
        && let Some(host) = foreign_host(request.headers())
    {
        return audience.refuse(
            StatusCode::FORBIDDEN,
            format!(
                "no users are configured, so Baton answers only to loopback addresses, not to \
                 `{host}`; configure users (BATON_USERS_FILE) to serve other names"
            ),
        );
    }
    if !request.method().is_safe()
        && let Some(why) = cross_site(request.headers(), auth.public_origin.as_deref())
    {
        return audience.refuse(StatusCode::FORBIDDEN, format!("refused: {why}"));
    }
    // The sign-in page shows who is signed in, if anyone; other public
    // paths do not care.
    let soft = path == SIGN_IN_PAGE;
    if is_public(&path) && !soft {
        return next.run(request).await;
    }
    // The worker protocol is the agents', and only theirs: no person's
    // credentials open it, and an agent token opens nothing else.
    if path.starts_with(WORKER_PROTOCOL) {
        return match auth.identify_agent(request.headers()) {
            Ok(grant) => {
                request.extensions_mut().insert(grant);
                next.run(request).await
            }
            Err(AuthError::Refused(why)) => audience.refuse(StatusCode::UNAUTHORIZED, why),
            Err(_) => audience.refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "cannot check the agent token".into(),
            ),
        };
    }
    let client = Client::of(request.extensions(), request.headers());
    let source = client.source(&auth.trusted_proxies);
    match auth.identify(request.headers(), source.as_deref()).await {
        Ok(Some(mut who)) => {
            client.stamp(&mut who);
            if path.starts_with(LIVE_FEEDS) && !auth.is_open() {
                let credentials = Credentials::of(&auth, request.headers());
                request.extensions_mut().insert(credentials);
            }
            request.extensions_mut().insert(who);
            next.run(request).await
        }
        _ if soft => next.run(request).await,
        Ok(None) => sign_in_first(audience, &request, "sign in first".into()),
        Err(AuthError::Refused(why)) => sign_in_first(audience, &request, why),
        Err(AuthError::TooMany(why, wait)) if audience == Audience::Api => {
            let mut response = audience.refuse(StatusCode::TOO_MANY_REQUESTS, why);
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(wait.as_secs().max(1)),
            );
            response
        }
        Err(AuthError::TooMany(why, _)) => sign_in_first(audience, &request, why),
        Err(AuthError::Unavailable) => audience.refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "cannot check the session: the database does not answer".into(),
        ),
    }
}

pub const SIGN_IN_PAGE: &str = "/login";

/// Where the worker protocol lives (docs/agents.md).
pub const WORKER_PROTOCOL: &str = "/api/v1/worker/";

/// The dashboard's live feeds: one request that answers for as long as
/// the tab stays open.
const LIVE_FEEDS: &str = "/live/";

/// The credentials a long-lived response was let in with, to ask again
/// later whether they still hold: a feed checked only when it opened kept
/// streaming for as long as the tab stayed open after its user signed
/// out, or after the session expired.
#[derive(Clone)]
pub struct Credentials {
    auth: Arc<Auth>,
    headers: HeaderMap,
}

impl Credentials {
    fn of(auth: &Arc<Auth>, headers: &HeaderMap) -> Self {
        let mut kept = HeaderMap::new();
        for name in [header::AUTHORIZATION, header::COOKIE] {
            for value in headers.get_all(&name) {
                kept.append(name.clone(), value.clone());
            }
        }
        Credentials {
            auth: auth.clone(),
            headers: kept,
        }
    }

    /// Whether they would still be let in now: the session is live, the
    /// user still in the users file.
    pub async fn still_hold(&self) -> bool {
        // Its password, if any, was checked when the feed opened; the
        // re-check counts against no address.
        matches!(self.auth.identify(&self.headers, None).await, Ok(Some(_)))
    }
}

/// Why a request path is refused before anything reads it: a dot segment,
/// plain or percent-encoded (`..`, `%2e%2E`, `.%2e`), an encoded slash or
/// backslash, a backslash, or an encoded NUL.
fn path_trick(path: &str) -> Option<String> {
    let lower = path.to_ascii_lowercase();
    if ["%2f", "%5c", "\\", "%00"]
        .iter()
        .any(|t| lower.contains(t))
    {
        return Some(format!(
            "the path `{path}` holds an encoded slash, a backslash or a NUL; no Baton address does"
        ));
    }
    lower
        .split('/')
        .map(|segment| segment.replace("%2e", "."))
        .any(|segment| segment == "." || segment == "..")
        .then(|| {
            format!("the path `{path}` holds a `.` or `..` segment; ask for the resolved address")
        })
}

/// Paths anyone may fetch: health checks for load balancers, the sign-in
/// page and form, signing out (which must work with an expired session
/// too), and the files the sign-in page needs.
fn is_public(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/readyz" | SIGN_IN_PAGE | "/auth/login" | "/auth/logout" | "/favicon.svg"
    ) || path.starts_with("/pkg/")
}

/// No credentials, or wrong ones: scripts are told how to send them,
/// browsers are sent to the sign-in page and back afterwards.
fn sign_in_first(audience: Audience, request: &Request, why: String) -> Response {
    match audience {
        Audience::Api => {
            let body = ErrorBody {
                error: format!(
                    "{why}: send `Authorization: Bearer <token>`, or Basic credentials of a \
                     user in the users file"
                ),
                field: None,
            };
            let mut response = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Bearer realm="baton", Basic realm="baton""#),
            );
            response
        }
        // A form posted without JavaScript is a page load: go sign in.
        Audience::Form => Redirect::to(SIGN_IN_PAGE).into_response(),
        Audience::ServerFn => (
            StatusCode::UNAUTHORIZED,
            Json(DashboardError::Unauthenticated(format!(
                "{why}: your session has ended; reload the page to sign in again"
            ))),
        )
            .into_response(),
        Audience::Page if request.method().is_safe() => {
            let back = request.uri().path_and_query().map_or("/", |pq| pq.as_str());
            Redirect::to(&format!(
                "{SIGN_IN_PAGE}?next={}",
                domain::query::encode_value(back)
            ))
            .into_response()
        }
        Audience::Page => (StatusCode::UNAUTHORIZED, why).into_response(),
    }
}
