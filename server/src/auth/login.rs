//! Signing in and out of the dashboard: plain form posts, so they work
//! without JavaScript, answered with a redirect (303).
//!
//! A session is a random token in an `HttpOnly` cookie (scripts cannot read
//! it), `SameSite=Lax` (other sites' forms and scripts do not send it), and
//! `Secure` when the public URL is HTTPS. The database keeps its SHA-256, so
//! every replica knows every session and signing out ends it everywhere.

use std::sync::Arc;

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use domain::query::encode_value;
use serde::Deserialize;

use super::guard::SIGN_IN_PAGE;
use super::{Auth, Client, PasswordRefused, SESSION_COOKIE, new_token, session_token, token_hash};
use crate::store::Session;
use domain::audit::client_text;
use domain::time::Ts;

#[derive(Deserialize)]
pub struct SignIn {
    name: String,
    password: String,
    /// Where to go afterwards: a path on this server.
    #[serde(default)]
    next: String,
}

/// `POST /auth/login`. Sign-ins and wrong passwords are recorded in the
/// audit log with the client's address; a name whose checks are paused
/// (too many wrong passwords) is not, as nothing was checked and the
/// wrong passwords before it are there.
pub async fn login(
    State(auth): State<Arc<Auth>>,
    client: Client,
    Form(form): Form<SignIn>,
) -> Response {
    let next = local_path(&form.next);
    if auth.is_open() {
        return Redirect::to(next).into_response();
    }
    let source = client.source(&auth.trusted_proxies);
    let who = match auth
        .check_password(&form.name, &form.password, source.as_deref())
        .await
    {
        Ok(who) => who,
        Err(refused) => {
            let failed = match refused {
                PasswordRefused::Wrong => "1",
                PasswordRefused::TooMany(_) | PasswordRefused::TooManyFromHere(_) => "too-many",
            };
            if refused == PasswordRefused::Wrong {
                let tried = match client_text(form.name.trim()) {
                    name if name.is_empty() => "(no name)".to_owned(),
                    name => name,
                };
                let recorded = auth
                    .store
                    .audit_sign_in_failed(
                        client.person(&tried),
                        "wrong user name or password",
                        Ts::now(),
                    )
                    .await;
                if let Err(e) = recorded {
                    tracing::warn!(error = %e, "cannot record a failed sign-in");
                }
            }
            let again = format!("{SIGN_IN_PAGE}?failed={failed}&next={}", encode_value(next));
            return Redirect::to(&again).into_response();
        }
    };
    let token = match new_token() {
        Ok(token) => token,
        Err(e) => return unavailable(e),
    };
    let now = Ts::now();
    let session = Session {
        token_hash: token_hash(&token).to_hex(),
        user_name: who.name.clone(),
        created_at: now,
        expires_at: now.plus(auth.session_ttl),
        credential: auth.credential_of(&who.name),
    };
    let signed_in = auth
        .store
        .session_insert(&session, client.person(&who.name), now)
        .await;
    if let Err(e) = signed_in {
        return unavailable(e.into());
    }
    tracing::info!(user = who.name, role = who.role.as_str(), "signed in");
    let cookie = format!(
        "{SESSION_COOKIE}={token}; Path=/; Max-Age={}; HttpOnly; SameSite=Lax{}",
        auth.session_ttl.as_secs(),
        if auth.secure_cookie { "; Secure" } else { "" }
    );
    with_cookie(Redirect::to(next), &cookie)
}

/// `POST /auth/logout`: ends the session here and on every replica. A
/// session that has already expired is over; nothing is recorded.
pub async fn logout(State(auth): State<Arc<Auth>>, client: Client, headers: HeaderMap) -> Response {
    if let Some(token) = session_token(&headers) {
        let hash = token_hash(token).to_hex();
        let now = Ts::now();
        let ended = match auth.store.session_get(&hash, now).await {
            Ok(Some(session)) => {
                auth.store
                    .session_delete(&hash, client.person(&session.user_name), now)
                    .await
            }
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = ended {
            return unavailable(e.into());
        }
    }
    let cookie = format!("{SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax");
    with_cookie(Redirect::to(SIGN_IN_PAGE), &cookie)
}

fn with_cookie(redirect: Redirect, cookie: &str) -> Response {
    let mut response = redirect.into_response();
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn unavailable(e: anyhow::Error) -> Response {
    tracing::error!(error = format!("{e:#}"), "sign-in failed");
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "cannot sign in right now: the database does not answer; try again",
    )
        .into_response()
}

/// `next` when it is a path on this server, else `/`: a sign-in link must
/// not send anyone to another site afterwards.
pub fn local_path(next: &str) -> &str {
    let local = next.starts_with('/') && !next.starts_with("//") && !next.contains('\\');
    if local && !next.chars().any(char::is_control) {
        next
    } else {
        "/"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed_after_sign_in() {
        assert_eq!(local_path("/plans/3?x=1"), "/plans/3?x=1");
        for outside in [
            "https://evil.example",
            "//evil.example",
            "/\\evil.example",
            "",
            "plans",
        ] {
            assert_eq!(local_path(outside), "/", "{outside}");
        }
    }
}
