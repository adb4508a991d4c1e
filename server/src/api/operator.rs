//! The extractor API handlers that change something take: it lets only
//! operators through.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use domain::model::Identity;

use super::ApiError;

/// The operator making this request.
pub struct Operator(pub Identity);

impl<S: Send + Sync> FromRequestParts<S> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        match parts.extensions.get::<Identity>() {
            Some(who) if who.role.may_act() => Ok(Operator(who.clone())),
            Some(who) => Err(ApiError::Forbidden(format!(
                "{} is a viewer; only operators may submit plans or act on them",
                who.name
            ))),
            // Only reachable if a route were mounted outside the guard.
            None => Err(ApiError::Unauthenticated("sign in first".into())),
        }
    }
}
