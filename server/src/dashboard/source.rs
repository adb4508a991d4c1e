//! The engine as the dashboard's server functions see it: each page's data
//! in one call, and the operator actions. Errors are worded for operators;
//! database errors are logged here and never shown.

use std::sync::Arc;
use std::time::Duration;

use app::backend::{DashboardSource, PlanFilter};
use app::error::DashboardError;
use app::model::Identity;
use app::views::{
    Action, DeliveriesPage, Overview, PlanPage, PlansPage, ReplicasPage, RunPage, TASKS_PER_PAGE,
};

use crate::executor::CommandPolicy;
use crate::liveness::replica_views;
use crate::plan;
use crate::store::{Store, StoreError, Ts};

/// Deliveries the overview lists.
const OVERVIEW_DELIVERIES: i64 = 8;
/// Deliveries the plan page lists (each with its attempts).
const PLAN_DELIVERIES: i64 = 50;

pub struct StoreSource {
    pub store: Arc<dyn Store>,
    /// A replica whose heartbeat is older than this is shown stale.
    pub stale_after: Duration,
    /// Which commands plans may run on this server.
    pub commands: CommandPolicy,
}

#[async_trait::async_trait]
impl DashboardSource for StoreSource {
    async fn overview(&self) -> Result<Overview, DashboardError> {
        let now = Ts::now();
        let stats = self.store.overview_stats(now).await.map_err(failed)?;
        let replicas = replica_views(self.store.as_ref(), self.stale_after, now)
            .await
            .map_err(failed)?;
        let deliveries = self
            .store
            .delivery_list(None, OVERVIEW_DELIVERIES)
            .await
            .map_err(failed)?;
        Ok(Overview {
            now: now.0,
            live: stats.live,
            last_hour: stats.last_hour,
            per_minute: stats.per_minute,
            replicas,
            failures: stats.failures,
            deliveries,
        })
    }

    async fn plans(
        &self,
        filter: PlanFilter,
        limit: i64,
        offset: i64,
    ) -> Result<PlansPage, DashboardError> {
        let now = Ts::now();
        let list = self
            .store
            .plan_list(filter.status, filter.name.as_deref(), limit, offset)
            .await
            .map_err(failed)?;
        Ok(PlansPage { now: now.0, list })
    }

    async fn plan(&self, id: i64, offset: i64) -> Result<PlanPage, DashboardError> {
        let now = Ts::now();
        let mut plan = self.store.plan_get(id).await.map_err(failed)?;
        let mut task_counts = std::collections::BTreeMap::new();
        for task in &plan.tasks {
            *task_counts.entry(task.status).or_insert(0) += 1;
        }
        let tasks_total = plan.tasks.len() as i64;
        // Past the end shows the last page rather than nothing.
        let last_page = (tasks_total - 1).max(0) / TASKS_PER_PAGE * TASKS_PER_PAGE;
        let tasks_offset = offset.clamp(0, last_page);
        plan.tasks = plan
            .tasks
            .into_iter()
            .skip(tasks_offset as usize)
            .take(TASKS_PER_PAGE as usize)
            .collect();
        let deliveries = self
            .store
            .delivery_list(Some(id), PLAN_DELIVERIES)
            .await
            .map_err(failed)?;
        Ok(PlanPage {
            now: now.0,
            plan,
            task_counts,
            tasks_total,
            tasks_offset,
            deliveries,
        })
    }

    async fn run(&self, id: i64, log_lines: i64) -> Result<RunPage, DashboardError> {
        let now = Ts::now();
        let run = self.store.run_get(id).await.map_err(failed)?;
        let log = self
            .store
            .run_log_tail(id, log_lines)
            .await
            .map_err(failed)?;
        Ok(RunPage {
            now: now.0,
            run,
            log,
        })
    }

    async fn replicas(&self) -> Result<ReplicasPage, DashboardError> {
        let now = Ts::now();
        let replicas = replica_views(self.store.as_ref(), self.stale_after, now)
            .await
            .map_err(failed)?;
        Ok(ReplicasPage {
            now: now.0,
            replicas,
        })
    }

    async fn deliveries(&self, limit: i64) -> Result<DeliveriesPage, DashboardError> {
        let now = Ts::now();
        let deliveries = self
            .store
            .delivery_list(None, limit)
            .await
            .map_err(failed)?;
        Ok(DeliveriesPage {
            now: now.0,
            deliveries,
        })
    }

    async fn submit(&self, who: &Identity, text: &str) -> Result<i64, DashboardError> {
        may_act(who)?;
        let new_plan = plan::parse_text(text)
            .and_then(|p| self.commands.check(&p).map(|()| p))
            .map_err(|e| DashboardError::Invalid {
                message: e.message,
                field: e.field,
            })?;
        self.store
            .plan_insert(&new_plan, &who.name, Ts::now())
            .await
            .map_err(failed)
    }

    async fn act(&self, who: &Identity, action: Action, id: i64) -> Result<(), DashboardError> {
        may_act(who)?;
        crate::actions::act(&*self.store, action, id, &who.name, Ts::now())
            .await
            .map(drop)
            .map_err(failed)
    }
}

/// Viewers may look but not change anything (SPEC §9).
fn may_act(who: &Identity) -> Result<(), DashboardError> {
    if who.role.may_act() {
        Ok(())
    } else {
        Err(DashboardError::Forbidden(format!(
            "{} is a viewer; only operators may submit plans or act on them",
            who.name
        )))
    }
}

/// What an operator is told when the engine says no.
fn failed(e: StoreError) -> DashboardError {
    match e {
        StoreError::NotFound { .. } => DashboardError::NotFound(e.to_string()),
        StoreError::Conflict(message) => DashboardError::Conflict(message),
        other => {
            tracing::error!(error = %other, "dashboard request failed");
            DashboardError::Unavailable(
                "the engine could not answer (see the server log); the page retries on its own"
                    .into(),
            )
        }
    }
}
