//! Query strings that name only what a route reads. axum's `Query` drops
//! a parameter its type does not name, so `?stauts=FAILED` searched every
//! run, and a bulk count (and the action bound to it) matched more than
//! the operator meant. [`StrictQuery`] refuses such a parameter by name.

use axum::extract::{FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use domain::search::{PlanQuery, RunQuery};
use serde::de::DeserializeOwned;

use super::ApiError;

/// The parameters a query type reads. Listed by hand: serde cannot say
/// which keys a type with flattened fields took. A name missing here
/// refuses a parameter the route reads, which its tests would show.
pub trait Params {
    fn names() -> Vec<&'static str>;
}

impl Params for RunQuery {
    fn names() -> Vec<&'static str> {
        RunQuery::PARAMS.to_vec()
    }
}

impl Params for PlanQuery {
    fn names() -> Vec<&'static str> {
        PlanQuery::PARAMS.to_vec()
    }
}

/// A filter's parameters and a keyset page's (`before`, `limit`).
pub fn paged(filter: &[&'static str]) -> Vec<&'static str> {
    [filter, &["before", "limit"]].concat()
}

/// A query string read into `T`; any other parameter is a 422 naming it.
pub struct StrictQuery<T>(pub T);

impl<T: DeserializeOwned + Params, S: Send + Sync> FromRequestParts<S> for StrictQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let unreadable = |e: axum::extract::rejection::QueryRejection| ApiError::Invalid {
            message: format!("the query string cannot be read: {}", e.body_text()),
            field: None,
        };
        let Query(pairs) =
            Query::<Vec<(String, String)>>::try_from_uri(&parts.uri).map_err(unreadable)?;
        let names = T::names();
        if let Some((name, _)) = pairs
            .iter()
            .find(|(name, _)| !names.contains(&name.as_str()))
        {
            return Err(ApiError::invalid(
                name,
                format!(
                    "`{name}` is not a parameter of {}; it takes {}",
                    parts.uri.path(),
                    names.join(", ")
                ),
            ));
        }
        let Query(known) = Query::<T>::try_from_uri(&parts.uri).map_err(unreadable)?;
        Ok(StrictQuery(known))
    }
}

/// For the routes that read no query string: any parameter is a 422 naming
/// it. `POST /schedules/{id}/trigger?x=1` made a plan and
/// `GET /schedules?name=x` listed every schedule, as if the parameter had
/// been read (hostile trial).
pub async fn no_query(request: Request, next: Next) -> Response {
    let Some(query) = request.uri().query().filter(|q| !q.is_empty()) else {
        return next.run(request).await;
    };
    // The first parameter's name, percent-decoded as the client meant it.
    let name = reqwest::Url::parse(&format!("http://query/?{query}"))
        .ok()
        .and_then(|url| url.query_pairs().next().map(|(name, _)| name.into_owned()))
        .unwrap_or_else(|| query.to_owned());
    ApiError::invalid(
        &name,
        format!(
            "`{name}` is not a parameter of {}; it takes none",
            request.uri().path()
        ),
    )
    .into_response()
}
