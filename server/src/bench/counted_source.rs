//! The dashboard's engine seam with a counter on its page reads, for
//! `bench --live`: every page's database work goes through one
//! [`DashboardSource`] call, from a server function (polling) or from the
//! live feed alike, so counting the calls counts what viewers cost.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use app::backend::DashboardSource;
use app::error::DashboardError;
use domain::model::Identity;
use domain::search::PlanFilter;
use domain::search::{BulkAction, BulkResult, PlanQuery, RunQuery};
use domain::views::{
    Action, DeliveriesPage, Overview, PlanPage, PlansPage, ReplicasPage, RunPage, RunsPage,
    ScheduleAction, SchedulePage, SchedulesPage, TargetChange, TargetsPage,
};

pub struct CountedSource {
    inner: Arc<dyn DashboardSource>,
    reads: Arc<AtomicU64>,
}

impl CountedSource {
    /// `inner`, counting its page reads into `reads` (actions are not
    /// counted: the bench makes none).
    pub fn new(inner: Arc<dyn DashboardSource>, reads: Arc<AtomicU64>) -> Self {
        CountedSource { inner, reads }
    }

    fn read(&self) -> &dyn DashboardSource {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.as_ref()
    }
}

#[async_trait::async_trait]
impl DashboardSource for CountedSource {
    async fn overview(&self) -> Result<Overview, DashboardError> {
        self.read().overview().await
    }

    async fn plans(
        &self,
        filter: PlanFilter,
        limit: i64,
        offset: i64,
        confirm: Option<BulkAction>,
    ) -> Result<PlansPage, DashboardError> {
        self.read().plans(filter, limit, offset, confirm).await
    }

    async fn plan(&self, id: i64, offset: i64) -> Result<PlanPage, DashboardError> {
        self.read().plan(id, offset).await
    }

    async fn runs(
        &self,
        query: RunQuery,
        before: Option<i64>,
        limit: i64,
        confirm: Option<BulkAction>,
    ) -> Result<RunsPage, DashboardError> {
        self.read().runs(query, before, limit, confirm).await
    }

    async fn bulk(
        &self,
        who: &Identity,
        action: BulkAction,
        query: RunQuery,
        expected: i64,
    ) -> Result<BulkResult, DashboardError> {
        self.inner.bulk(who, action, query, expected).await
    }

    async fn plans_bulk(
        &self,
        who: &Identity,
        action: BulkAction,
        query: PlanQuery,
        expected: i64,
    ) -> Result<BulkResult, DashboardError> {
        self.inner.plans_bulk(who, action, query, expected).await
    }

    async fn audit(
        &self,
        query: domain::audit::AuditQuery,
        before: Option<i64>,
        limit: i64,
    ) -> Result<domain::views::AuditPage, DashboardError> {
        self.read().audit(query, before, limit).await
    }

    async fn run(&self, id: i64, log_lines: i64) -> Result<RunPage, DashboardError> {
        self.read().run(id, log_lines).await
    }

    async fn replicas(&self) -> Result<ReplicasPage, DashboardError> {
        self.read().replicas().await
    }

    async fn deliveries(&self, limit: i64) -> Result<DeliveriesPage, DashboardError> {
        self.read().deliveries(limit).await
    }

    async fn submit(&self, who: &Identity, text: &str) -> Result<i64, DashboardError> {
        self.inner.submit(who, text).await
    }

    async fn export(&self, who: &Identity, id: i64) -> Result<String, DashboardError> {
        self.inner.export(who, id).await
    }

    async fn act(&self, who: &Identity, action: Action, id: i64) -> Result<(), DashboardError> {
        self.inner.act(who, action, id).await
    }

    async fn targets(&self) -> Result<TargetsPage, DashboardError> {
        self.read().targets().await
    }

    async fn target_act(
        &self,
        who: &Identity,
        target: &str,
        change: TargetChange,
    ) -> Result<(), DashboardError> {
        self.inner.target_act(who, target, change).await
    }

    async fn worker_act(
        &self,
        who: &Identity,
        worker: &str,
        action: domain::views::WorkerAction,
    ) -> Result<(), DashboardError> {
        self.inner.worker_act(who, worker, action).await
    }

    async fn schedules(&self) -> Result<SchedulesPage, DashboardError> {
        self.read().schedules().await
    }

    async fn schedule(&self, id: i64) -> Result<SchedulePage, DashboardError> {
        self.read().schedule(id).await
    }

    async fn schedule_save(
        &self,
        who: &Identity,
        id: Option<i64>,
        text: &str,
    ) -> Result<i64, DashboardError> {
        self.inner.schedule_save(who, id, text).await
    }

    async fn schedule_act(
        &self,
        who: &Identity,
        id: i64,
        action: ScheduleAction,
    ) -> Result<String, DashboardError> {
        self.inner.schedule_act(who, id, action).await
    }
}
