//! Authentication and roles (docs/design.md, "Authorization").
//!
//! Every request but health checks, the sign-in page and static files
//! passes [`guard::guard`], which establishes an [`Identity`] from one of:
//! - `Authorization: Bearer <token>`: an API token from the users file;
//! - `Authorization: Basic …`: a user's name and password;
//! - the `baton_session` cookie, set by signing in on the dashboard.
//!
//! Viewers may read everything; changes (submitting, actions) need an
//! operator: the API's handlers take an [`Operator`], the dashboard's
//! server functions check the role they are handed.
//!
//! With no users file the server is open: everyone is the operator
//! `anonymous`. That is only safe on a loopback address, so `baton serve`
//! refuses any other listen address, the guard refuses requests addressed to
//! a non-loopback host name (DNS rebinding), and every page says so.
//! In both modes a browser request that changes something must come from
//! the dashboard's own origin (CSRF).

mod agent_tokens;
mod client;
mod commands;
mod guard;
mod login;
mod origin;
mod password_cache;
pub mod proxies;
mod reload;
mod secrets;
mod throttle;
mod users;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, header};
use base64::Engine;
use domain::model::{Identity, Role};

pub use self::agent_tokens::{AGENT_ID_PREFIX, AgentGrant, check_labels};
pub use self::client::Client;
pub use self::commands::{NewTokenArgs, hash_password_command, new_token_command};
pub use self::guard::{Credentials, guard};
pub use self::login::{login, logout};
use self::password_cache::PasswordCache;
pub use self::reload::watch_users_file;
pub use self::secrets::{hash_password, new_token, token_hash};
use self::throttle::Throttle;
pub use self::users::Users;
use crate::store::Store;
use domain::time::Ts;

/// The actor recorded for changes made on a server without users.
pub const ANONYMOUS: &str = "anonymous";

/// The dashboard's session cookie.
pub const SESSION_COOKIE: &str = "baton_session";

/// How one server authenticates; shared by the guard and the sign-in
/// handlers.
pub struct Auth {
    /// `None`: no users file, the server is open (loopback only). Swapped
    /// whole when the file changes ([`reload`]).
    users: Option<std::sync::RwLock<Arc<Users>>>,
    store: Arc<dyn Store>,
    session_ttl: Duration,
    /// Cookies get `Secure` when operators reach the dashboard over HTTPS.
    secure_cookie: bool,
    /// `BATON_PUBLIC_URL`'s origin (`https://host[:port]`), one the
    /// dashboard may be served from besides the request's own (behind a
    /// proxy).
    public_origin: Option<String>,
    passwords: PasswordCache,
    throttle: Throttle,
    /// Wrong passwords per source address ([`throttle::ALLOWED_PER_ADDRESS`]).
    by_address: Throttle,
    /// Proxies whose `X-Forwarded-For` names the source address.
    pub(crate) trusted_proxies: proxies::TrustedProxies,
}

/// Why a request carrying credentials was not let in.
#[derive(Debug)]
pub enum AuthError {
    /// The credentials are wrong or malformed; the text says which.
    Refused(String),
    /// Too many wrong passwords for this name lately; the text says how
    /// long to wait.
    TooMany(String, Duration),
    /// The session could not be looked up.
    Unavailable,
}

/// Why a password was not accepted.
#[derive(Debug, PartialEq)]
pub enum PasswordRefused {
    /// Unknown name, no password, or the wrong one: never said which.
    Wrong,
    /// The name's password checks are paused for this long.
    TooMany(Duration),
    /// The source address's password checks are paused for this long.
    TooManyFromHere(Duration),
}

impl Auth {
    /// `public_url` is where operators reach the dashboard
    /// (`BATON_PUBLIC_URL`, default `http(s)://<BATON_LISTEN>`).
    pub fn new(
        users: Option<Users>,
        store: Arc<dyn Store>,
        session_ttl: Duration,
        public_url: &str,
    ) -> anyhow::Result<Auth> {
        let public = reqwest::Url::parse(public_url).ok();
        Ok(Auth {
            passwords: PasswordCache::new()?,
            throttle: Throttle::new(throttle::ALLOWED, throttle::WINDOW),
            by_address: Throttle::new(throttle::ALLOWED_PER_ADDRESS, throttle::WINDOW),
            trusted_proxies: proxies::TrustedProxies::default(),
            users: users.map(|u| std::sync::RwLock::new(Arc::new(u))),
            store,
            session_ttl,
            secure_cookie: public.as_ref().is_some_and(|u| u.scheme() == "https"),
            public_origin: public
                .map(|u| u.origin())
                .filter(|o| o.is_tuple())
                .map(|o| o.ascii_serialization()),
        })
    }

    /// Believes `X-Forwarded-For` from these proxies for the per-address
    /// count of wrong passwords.
    pub fn trusting(mut self, proxies: proxies::TrustedProxies) -> Self {
        self.trusted_proxies = proxies;
        self
    }

    /// What a new session of `name` remembers of their password.
    pub fn credential_of(&self, name: &str) -> Option<String> {
        self.users()?.get(name)?.credential.clone()
    }

    /// No users are configured.
    pub fn is_open(&self) -> bool {
        self.users.is_none()
    }

    /// The users as the file last read says.
    fn users(&self) -> Option<Arc<Users>> {
        Some(self.users.as_ref()?.read().expect("poisoned").clone())
    }

    /// Puts a newly read users file in force for every later request.
    fn users_set(&self, users: Users) {
        if let Some(current) = &self.users {
            *current.write().expect("poisoned") = Arc::new(users);
        }
    }

    /// Who sent these headers: `Ok(None)` when they carry no credentials
    /// (or a session that has ended), an error when they carry wrong ones.
    /// `from` is the source address password checks are counted against
    /// ([`Client::source`]); `None` counts them against none.
    pub async fn identify(
        &self,
        headers: &HeaderMap,
        from: Option<&str>,
    ) -> Result<Option<Identity>, AuthError> {
        let Some(users) = self.users() else {
            return Ok(Some(Identity {
                name: ANONYMOUS.into(),
                role: Role::Operator,
                open: true,
                address: None,
                forwarded_for: None,
            }));
        };
        if let Some(value) = headers.get(header::AUTHORIZATION) {
            let value = value.to_str().unwrap_or_default().trim();
            return self.identify_header(&users, value, from).await.map(Some);
        }
        let Some(token) = session_token(headers) else {
            return Ok(None);
        };
        let session = self
            .store
            .session_get(&token_hash(token).to_hex(), Ts::now())
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "cannot look up a session");
                AuthError::Unavailable
            })?;
        // A user removed from the file loses their sessions too, and one
        // given a new password loses those made with the old one: changing
        // a leaked password signs its holder out everywhere.
        Ok(session.and_then(|s| {
            let user = users.get(&s.user_name)?;
            let current = s.credential.is_none() || s.credential == user.credential;
            current.then(|| identity(&user.name, user.role))
        }))
    }

    /// The agent token these headers carry: only a bearer token listed
    /// under `agents:` opens the worker protocol (anyone's, on a server
    /// without users, which answers the loopback only).
    pub fn identify_agent(&self, headers: &HeaderMap) -> Result<AgentGrant, AuthError> {
        let Some(users) = self.users() else {
            return Ok(AgentGrant::open());
        };
        let value = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .trim();
        let token = value
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or_else(|| {
                AuthError::Refused(
                    "the worker protocol needs an agent token: `Authorization: Bearer <token>` \
                     (baton new-token --agent)"
                        .into(),
                )
            })?;
        users
            .agents
            .by_token(&token_hash(token))
            .cloned()
            .ok_or_else(|| {
                AuthError::Refused("the token is not an agent token this server knows".into())
            })
    }

    async fn identify_header(
        &self,
        users: &Users,
        value: &str,
        from: Option<&str>,
    ) -> Result<Identity, AuthError> {
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        if scheme.eq_ignore_ascii_case("bearer") {
            let hash = token_hash(rest.trim());
            if let Some(agent) = users.agents.by_token(&hash) {
                return Err(AuthError::Refused(format!(
                    "this is the agent token of `{}`: it may only use the worker protocol \
                     under /api/v1/worker/",
                    agent.name
                )));
            }
            return users
                .by_token(&hash)
                .map(|user| identity(&user.name, user.role))
                .ok_or_else(|| AuthError::Refused("the API token is not known".into()));
        }
        if scheme.eq_ignore_ascii_case("basic") {
            let pair = base64::engine::general_purpose::STANDARD
                .decode(rest.trim())
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok());
            let Some((name, password)) = pair.as_deref().and_then(|p| p.split_once(':')) else {
                return Err(AuthError::Refused(
                    "Basic credentials must be base64 of `name:password`".into(),
                ));
            };
            return self.check_password(name, password, from).await.map_err(
                |refused| match refused {
                    PasswordRefused::Wrong => {
                        AuthError::Refused("wrong user name or password".into())
                    }
                    PasswordRefused::TooMany(wait) => AuthError::TooMany(
                        format!(
                            "too many wrong passwords for `{}`; try again in {} s",
                            name.trim(),
                            wait.as_secs().max(1)
                        ),
                        wait,
                    ),
                    PasswordRefused::TooManyFromHere(wait) => AuthError::TooMany(
                        format!(
                            "too many wrong passwords from your address; try again in {} s",
                            wait.as_secs().max(1)
                        ),
                        wait,
                    ),
                },
            );
        }
        Err(AuthError::Refused(format!(
            "the Authorization scheme `{scheme}` is not supported; use `Bearer <token>` or `Basic`"
        )))
    }

    /// The user, when `password` is theirs; unless the name has had too
    /// many wrong passwords lately (then nothing is checked). A refusal is
    /// logged with the name tried, for the form and Basic auth alike.
    pub async fn check_password(
        &self,
        name: &str,
        password: &str,
        from: Option<&str>,
    ) -> Result<Identity, PasswordRefused> {
        let checked = self.password_identity(name, password, from).await;
        if let Err(refused) = &checked {
            tracing::warn!(user = ?shown_name(name), ?refused, "password refused");
        }
        checked
    }

    async fn password_identity(
        &self,
        name: &str,
        password: &str,
        from: Option<&str>,
    ) -> Result<Identity, PasswordRefused> {
        let users = self.users().ok_or(PasswordRefused::Wrong)?;
        // Longer than any user's name: wrong, and neither counted nor
        // remembered. The throttle keeps a count per name tried, so 1 MB
        // names grew a replica by 30-50 MB a second, for good (hostile
        // trial); and a blocked name skips Argon2, so nothing slowed a
        // flood of such lines into the log.
        if name.trim().chars().count() > users::MAX_USER_NAME_CHARS {
            return Err(PasswordRefused::Wrong);
        }
        let user = users.get(name.trim());
        let hash = user.and_then(|u| u.password_hash.as_deref());
        // A pair that checked out lately passes without counting: a script
        // sending Basic auth on parallel calls is not a guesser.
        if let Some(user) = user.filter(|_| self.passwords.remembered(name, password, hash)) {
            return Ok(identity(&user.name, user.role));
        }
        // The address first: a guesser cycling names is stopped there
        // without counting against (and locking) each name it tries.
        if let Some(from) = from {
            self.by_address
                .begin(from)
                .map_err(PasswordRefused::TooManyFromHere)?;
        }
        if let Err(wait) = self.throttle.begin(name) {
            if let Some(from) = from {
                self.by_address.forgive_one(from);
            }
            return Err(PasswordRefused::TooMany(wait));
        }
        // With no hash (unknown name) this checks a decoy: just as slow.
        let verified = self.passwords.verify(name, password, hash).await;
        match user.filter(|_| verified) {
            Some(user) => {
                self.throttle.succeeded(name);
                if let Some(from) = from {
                    self.by_address.forgive_one(from);
                }
                Ok(identity(&user.name, user.role))
            }
            None => Err(PasswordRefused::Wrong),
        }
    }
}

/// A name someone signed in with, for the log: at most the longest user
/// name, marked when cut.
fn shown_name(name: &str) -> String {
    let name = name.trim();
    match name.char_indices().nth(users::MAX_USER_NAME_CHARS) {
        Some((cut, _)) => format!("{}… ({} bytes)", &name[..cut], name.len()),
        None => name.to_owned(),
    }
}

fn identity(name: &str, role: Role) -> Identity {
    Identity {
        name: name.to_owned(),
        role,
        open: false,
        address: None,
        forwarded_for: None,
    }
}

/// The session token in the request's cookies, if any.
fn session_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, token)| token.trim())
        .filter(|token| !token.is_empty())
}
