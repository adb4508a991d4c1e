//! How the dashboard's server functions reach the engine.
//!
//! The app crate cannot depend on the server crate (the server depends on
//! it), so the server implements [`DashboardSource`] over its store and hands
//! it to Leptos as context. Server functions stay thin: they fetch the
//! [`Backend`] from context and call one method; no connection is opened per
//! call and no SQL lives in this crate.

use std::sync::Arc;

use crate::error::DashboardError;
use domain::model::Identity;
use domain::search::PlanFilter;
use domain::views::{
    Action, DeliveriesPage, Overview, PlanPage, PlansPage, ReplicasPage, RunPage, RunsPage,
    ScheduleAction, SchedulePage, SchedulesPage, TargetChange, TargetsPage, WorkerAction,
};

/// Longest run log tail a page shows; the full log is a link away.
pub const LOG_TAIL_LINES: i64 = 500;

/// What the dashboard may ask of the engine. Errors are already worded
/// for operators; database details stay in the server log.
#[async_trait::async_trait]
pub trait DashboardSource: Send + Sync + 'static {
    async fn overview(&self) -> Result<Overview, DashboardError>;
    /// Plans, newest first, and with `confirm` what that bulk action
    /// would change in the plans the filter matches.
    async fn plans(
        &self,
        filter: PlanFilter,
        limit: i64,
        offset: i64,
        confirm: Option<domain::search::BulkAction>,
    ) -> Result<PlansPage, DashboardError>;
    /// The plan with the tasks from `offset` on, [`domain::views::TASKS_PER_PAGE`]
    /// of them.
    async fn plan(&self, id: i64, offset: i64) -> Result<PlanPage, DashboardError>;
    /// Runs matching `query` with ids below `before`, newest first, and
    /// with `confirm` how many runs that bulk action would change; a
    /// filter that cannot be read is [`DashboardError::Invalid`] naming it.
    async fn runs(
        &self,
        query: domain::search::RunQuery,
        before: Option<i64>,
        limit: i64,
        confirm: Option<domain::search::BulkAction>,
    ) -> Result<RunsPage, DashboardError>;
    /// Applies `action` on behalf of `who` to the runs `query` matches, if
    /// they are still `expected` in number.
    async fn bulk(
        &self,
        who: &Identity,
        action: domain::search::BulkAction,
        query: domain::search::RunQuery,
        expected: i64,
    ) -> Result<domain::search::BulkResult, DashboardError>;
    /// Applies `action` on behalf of `who` to the runs of the plans
    /// `query` matches, if they are still `expected` in number.
    async fn plans_bulk(
        &self,
        who: &Identity,
        action: domain::search::BulkAction,
        query: domain::search::PlanQuery,
        expected: i64,
    ) -> Result<domain::search::BulkResult, DashboardError>;
    /// Audit entries matching `query` with ids below `before`, newest
    /// first; a filter that cannot be read is [`DashboardError::Invalid`]
    /// naming it.
    async fn audit(
        &self,
        query: domain::audit::AuditQuery,
        before: Option<i64>,
        limit: i64,
    ) -> Result<domain::views::AuditPage, DashboardError>;
    /// The run with its events and the last `log_lines` lines of its log.
    async fn run(&self, id: i64, log_lines: i64) -> Result<RunPage, DashboardError>;
    async fn replicas(&self) -> Result<ReplicasPage, DashboardError>;
    /// Drains replica or agent `worker`, or lifts its drain, on behalf of
    /// `who`.
    async fn worker_act(
        &self,
        who: &Identity,
        worker: &str,
        action: WorkerAction,
    ) -> Result<(), DashboardError>;
    async fn deliveries(&self, limit: i64) -> Result<DeliveriesPage, DashboardError>;
    /// Validates and stores a plan file (YAML, or JSON when it starts with
    /// `{`) submitted by `who`; returns the new plan's id.
    async fn submit(&self, who: &Identity, text: &str) -> Result<i64, DashboardError>;
    /// Plan `id` as a YAML plan file that submits it again, secrets
    /// included: operators only.
    async fn export(&self, who: &Identity, id: i64) -> Result<String, DashboardError>;
    /// Applies an operator action to plan or task `id` on behalf of `who`.
    async fn act(&self, who: &Identity, action: Action, id: i64) -> Result<(), DashboardError>;
    /// Every target with live runs or operator settings, by name.
    async fn targets(&self) -> Result<TargetsPage, DashboardError>;
    /// Pauses, resumes or sets the capacity of `target` on behalf of `who`.
    async fn target_act(
        &self,
        who: &Identity,
        target: &str,
        change: TargetChange,
    ) -> Result<(), DashboardError>;
    /// Every schedule, by name.
    async fn schedules(&self) -> Result<SchedulesPage, DashboardError>;
    async fn schedule(&self, id: i64) -> Result<SchedulePage, DashboardError>;
    /// Creates a schedule from a file (YAML, or JSON when it starts with
    /// `{`), or replaces schedule `id`'s; returns its id.
    async fn schedule_save(
        &self,
        who: &Identity,
        id: Option<i64>,
        text: &str,
    ) -> Result<i64, DashboardError>;
    /// Pauses, resumes, triggers or deletes schedule `id`; what the result
    /// line says.
    async fn schedule_act(
        &self,
        who: &Identity,
        id: i64,
        action: ScheduleAction,
    ) -> Result<String, DashboardError>;
}

/// The context value server functions look up.
#[derive(Clone)]
pub struct Backend(pub Arc<dyn DashboardSource>);

/// The engine, from inside a server function.
pub fn source() -> Result<Arc<dyn DashboardSource>, DashboardError> {
    leptos::prelude::use_context::<Backend>()
        .map(|Backend(source)| source)
        .ok_or_else(|| {
            DashboardError::Unavailable("the dashboard is not connected to the engine".into())
        })
}

/// Who is making the current request: the server's authentication layer
/// puts it in the request's extensions before any page or server function
/// runs. Missing means the request was never authenticated.
pub fn identity() -> Result<Identity, DashboardError> {
    leptos::prelude::use_context::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Identity>().cloned())
        .ok_or_else(|| DashboardError::Unauthenticated("sign in to continue".into()))
}
