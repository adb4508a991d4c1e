//! A typed client of `/api/v1`, for the command line and `baton bench
//! --server`.

use std::time::Duration;

use anyhow::{Context, bail};
use domain::model::{ErrorBody, PlanList, PlanView};
use domain::search::{BulkCounts, PlanBulkCounts, PlanQuery, RunList, RunQuery};
use reqwest::{RequestBuilder, Response, header};
use serde::de::DeserializeOwned;

/// The format of a plan file sent to `POST /api/v1/plans`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanFormat {
    Json,
    Yaml,
}

impl PlanFormat {
    fn content_type(self) -> &'static str {
        match self {
            PlanFormat::Json => "application/json",
            PlanFormat::Yaml => "application/yaml",
        }
    }
}

pub struct ApiClient {
    http: reqwest::Client,
    /// `http://host:port`, no trailing slash.
    base: String,
}

/// How long a command waits to reach the server, and for one answer.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
/// How much of an answer that is not Baton's JSON an error quotes.
const NOT_OURS_EXCERPT: usize = 300;

impl ApiClient {
    /// `token` is sent as `Authorization: Bearer` on every request; a
    /// server without users needs none.
    /// `extra_roots` are certificate authorities trusted beside the
    /// system's (`--ca-cert`).
    pub fn new(
        base: impl Into<String>,
        token: Option<&str>,
        extra_roots: &[reqwest::Certificate],
    ) -> anyhow::Result<Self> {
        let mut headers = header::HeaderMap::new();
        if let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) {
            let mut value = header::HeaderValue::from_str(&format!("Bearer {token}"))
                .context("the API token holds characters no HTTP header can carry")?;
            value.set_sensitive(true);
            headers.insert(header::AUTHORIZATION, value);
        }
        Ok(ApiClient {
            http: crate::tls::trusting(reqwest::Client::builder(), extra_roots)
                .default_headers(headers)
                // A server (or a proxy) that accepts and never answers hung
                // `submit --wait` in a deploy pipeline for good.
                .connect_timeout(CONNECT_TIMEOUT)
                .timeout(REQUEST_TIMEOUT)
                .build()
                .context("cannot set up the HTTP client")?,
            base: base.into(),
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /api/v1/plans`: the created plan.
    pub async fn submit(&self, body: Vec<u8>, format: PlanFormat) -> anyhow::Result<PlanView> {
        let request = self
            .http
            .post(format!("{}/api/v1/plans", self.base))
            .header(header::CONTENT_TYPE, format.content_type())
            .body(body);
        self.send(request).await
    }

    /// `POST /api/v1/plans` with an `Idempotency-Key`. A try that gets no
    /// answer (timeout, dropped connection) or a 502/503/504 from a proxy
    /// is repeated with the same key, which cannot make a second plan: the
    /// server answers the plan the first try made.
    pub async fn submit_keyed(
        &self,
        body: Vec<u8>,
        format: PlanFormat,
        key: &str,
    ) -> anyhow::Result<PlanView> {
        const TRIES: u32 = 4;
        const TRY_TIMEOUT: Duration = Duration::from_secs(30);
        let mut pause = Duration::from_millis(500);
        for attempt in 1..=TRIES {
            let sent = self
                .http
                .post(format!("{}/api/v1/plans", self.base))
                .header(header::CONTENT_TYPE, format.content_type())
                .header("idempotency-key", key)
                .timeout(TRY_TIMEOUT)
                .body(body.clone())
                .send()
                .await;
            let why = match sent {
                Ok(r) if !matches!(r.status().as_u16(), 502..=504) || attempt == TRIES => {
                    return self.read(r).await;
                }
                Ok(r) => format!("the server answered {}", r.status()),
                Err(e) if attempt == TRIES => {
                    return Err(e).with_context(|| self.unreachable());
                }
                Err(e) => e.to_string(),
            };
            eprintln!(
                "submit try {attempt} of {TRIES} failed ({why}); trying again with the same Idempotency-Key"
            );
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
        unreachable!("the last try returns")
    }

    /// `GET /api/v1/plans/{id}`.
    pub async fn plan(&self, id: i64) -> anyhow::Result<PlanView> {
        self.send(self.http.get(format!("{}/api/v1/plans/{id}", self.base)))
            .await
    }

    /// `GET /api/v1/plans`, newest first.
    pub async fn plans(
        &self,
        status: Option<&str>,
        name: Option<&str>,
        limit: i64,
    ) -> anyhow::Result<PlanList> {
        let mut query = vec![("limit", limit.to_string())];
        if let Some(status) = status {
            query.push(("status", status.to_owned()));
        }
        if let Some(name) = name {
            query.push(("name", name.to_owned()));
        }
        let request = self
            .http
            .get(format!("{}/api/v1/plans", self.base))
            .query(&query);
        self.send(request).await
    }

    /// `GET /api/v1/runs`: runs matching `filter`, newest first.
    pub async fn runs(
        &self,
        filter: &RunQuery,
        before: Option<i64>,
        limit: i64,
    ) -> anyhow::Result<RunList> {
        let query = paged(filter.pairs(), before, limit);
        let request = self
            .http
            .get(format!("{}/api/v1/runs", self.base))
            .query(&query);
        self.send(request).await
    }

    /// `GET /api/v1/audit`: a page of the audit log, newest first.
    pub async fn audit(
        &self,
        filter: &domain::audit::AuditQuery,
        before: Option<i64>,
        limit: i64,
    ) -> anyhow::Result<domain::audit::AuditList> {
        let query = paged(filter.pairs(), before, limit);
        let request = self
            .http
            .get(format!("{}/api/v1/audit", self.base))
            .query(&query);
        self.send(request).await
    }

    /// `GET /api/v1/runs/bulk`: how many runs each bulk action would change.
    pub async fn runs_bulk_counts(&self, filter: &RunQuery) -> anyhow::Result<BulkCounts> {
        let query: Vec<(&str, &str)> = filter.pairs();
        let request = self
            .http
            .get(format!("{}/api/v1/runs/bulk", self.base))
            .query(&query);
        self.send(request).await
    }

    /// `GET /api/v1/plans/bulk`: how many runs, in how many plans, each
    /// bulk action on a plans filter would change.
    pub async fn plans_bulk_counts(&self, filter: &PlanQuery) -> anyhow::Result<PlanBulkCounts> {
        let query: Vec<(&str, &str)> = filter.pairs();
        let request = self
            .http
            .get(format!("{}/api/v1/plans/bulk", self.base))
            .query(&query);
        self.send(request).await
    }

    /// `POST /api/v1/{path}` with an optional JSON body.
    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<T> {
        let mut request = self.http.post(format!("{}/api/v1/{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        self.send(request).await
    }

    /// `GET /api/v1/targets`.
    pub async fn targets(&self) -> anyhow::Result<Vec<domain::model::TargetView>> {
        self.get("targets").await
    }

    /// `GET /api/v1/{path}`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.send(self.http.get(format!("{}/api/v1/{path}", self.base)))
            .await
    }

    /// `GET /api/v1/{path}` answered with text (a run's log).
    pub async fn get_text(&self, path: &str) -> anyhow::Result<String> {
        let request = self.http.get(format!("{}/api/v1/{path}", self.base));
        let response = request.send().await.with_context(|| self.unreachable())?;
        self.accepted(response)
            .await?
            .text()
            .await
            .with_context(|| format!("{} broke off its answer", self.base))
    }

    /// `POST` or `PUT` a file (JSON or YAML) to `/api/v1/{path}`.
    pub async fn send_file<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Vec<u8>,
        format: PlanFormat,
    ) -> anyhow::Result<T> {
        let request = self
            .http
            .request(method, format!("{}/api/v1/{path}", self.base))
            .header(header::CONTENT_TYPE, format.content_type())
            .body(body);
        self.send(request).await
    }

    /// `DELETE /api/v1/{path}`, answered with no body.
    pub async fn delete(&self, path: &str) -> anyhow::Result<()> {
        let response = self
            .http
            .delete(format!("{}/api/v1/{path}", self.base))
            .send()
            .await
            .with_context(|| self.unreachable())?;
        if !response.status().is_success() {
            bail!(Self::refusal(response).await);
        }
        Ok(())
    }

    /// Sends a request and reads a JSON answer, or turns the server's
    /// `{"error", "field"}` into an error that names both.
    async fn send<T: DeserializeOwned>(&self, request: RequestBuilder) -> anyhow::Result<T> {
        let response = request.send().await.with_context(|| self.unreachable())?;
        self.read(response).await
    }

    fn unreachable(&self) -> String {
        format!(
            "cannot reach Baton at {}: is `baton serve` running there? \
             (set --server or BATON_SERVER)",
            self.base
        )
    }

    async fn read<T: DeserializeOwned>(&self, response: Response) -> anyhow::Result<T> {
        self.accepted(response)
            .await?
            .json()
            .await
            .with_context(|| format!("{} answered with JSON this client cannot read", self.base))
    }

    /// The response, if the server accepted the request; else its refusal
    /// as an error (with a hint about tokens for a 401).
    async fn accepted(&self, response: Response) -> anyhow::Result<Response> {
        if response.status() == reqwest::StatusCode::UNAUTHORIZED {
            bail!(
                "{} (this server has users: pass an API token with --token or BATON_TOKEN)",
                Self::refusal(response).await
            );
        }
        if !response.status().is_success() {
            bail!(Self::refusal(response).await);
        }
        Ok(response)
    }

    async fn refusal(response: Response) -> String {
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let said = match serde_json::from_str::<ErrorBody>(&text) {
            Ok(ErrorBody {
                error,
                field: Some(field),
            }) => format!("{error} (at `{field}`)"),
            Ok(ErrorBody { error, field: None }) => error,
            // Not Baton's answer (a proxy's error page): a glimpse of it.
            Err(_) => super::terminal::excerpt(&text, NOT_OURS_EXCERPT),
        };
        format!(
            "the server answered {status}: {}",
            super::terminal::safe(&said)
        )
    }
}

/// A search's filled-in fields plus the page it asks for, as query
/// parameters.
fn paged<'a>(
    pairs: Vec<(&'a str, &str)>,
    before: Option<i64>,
    limit: i64,
) -> Vec<(&'a str, String)> {
    pairs
        .into_iter()
        .map(|(name, value)| (name, value.to_owned()))
        .chain([("limit", limit.to_string())])
        .chain(before.map(|b| ("before", b.to_string())))
        .collect()
}
