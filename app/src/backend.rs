//! How the dashboard's server functions reach the engine.
//!
//! The app crate cannot depend on the server crate (the server depends on
//! it), so the server implements [`DashboardSource`] over its store and hands
//! it to Leptos as context. Server functions stay thin: they fetch the
//! [`Backend`] from context and call one method; no connection is opened per
//! call.

use std::sync::Arc;

use crate::model::{PlanList, PlanStatus};

/// What the dashboard may ask of the engine.
#[async_trait::async_trait]
pub trait DashboardSource: Send + Sync + 'static {
    /// Plans, newest first, optionally only those in `status`.
    async fn plan_list(
        &self,
        status: Option<PlanStatus>,
        limit: i64,
        offset: i64,
    ) -> Result<PlanList, String>;
}

/// The context value server functions look up.
#[derive(Clone)]
pub struct Backend(pub Arc<dyn DashboardSource>);
