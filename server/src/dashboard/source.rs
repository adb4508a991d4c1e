//! The engine as the dashboard's server functions see it: each page's data
//! in one call, and the operator actions. Errors are worded for operators;
//! database errors are logged here and never shown.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use app::backend::DashboardSource;
use app::error::DashboardError;
use domain::audit::AuditQuery;
use domain::model::{Identity, TaskView};
use domain::search::PlanFilter;
use domain::search::{BulkAction, BulkResult, PlanQuery, RunQuery};
use domain::views::{
    Action, Attention, AttentionKind, AuditPage, DEPENDENCY_NAMES, DeliveriesPage, Overview,
    PlanPage, PlansPage, ReplicasPage, RunPage, RunsPage, ScheduleAction, SchedulePage,
    SchedulesPage, TASKS_PER_PAGE, TargetChange, TargetsPage, TaskPlace, TieCounts,
    awaits_approval, graph_drawn,
};

use crate::plan;
use crate::plan::CommandPolicy;
use crate::replica_views::replica_views;
use crate::schedule;
use crate::store::{Store, StoreError};
use domain::audit::Person;
use domain::filter::audit as audit_filter;
use domain::filter::plan as plan_filter;
use domain::filter::run::{self as run_filter, RunFilter};
use domain::time::Ts;

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
        let attention = self.attention(&deliveries).await.map_err(failed)?;
        Ok(Overview {
            now: now.0,
            live: stats.live,
            last_hour: stats.last_hour,
            per_minute: stats.per_minute,
            replicas,
            failures: stats.failures,
            deliveries,
            attention,
        })
    }

    async fn plans(
        &self,
        filter: PlanFilter,
        limit: i64,
        offset: i64,
        confirm: Option<BulkAction>,
    ) -> Result<PlansPage, DashboardError> {
        let now = Ts::now();
        let list = self
            .store
            .plan_list(filter.status, filter.name.as_deref(), limit, offset)
            .await
            .map_err(failed)?;
        let confirm = match confirm {
            // Only on a filtered list, and only the action asked about.
            Some(action) if filter != PlanFilter::default() => {
                let count = self
                    .store
                    .plan_bulk_count(&filter, action)
                    .await
                    .map_err(failed)?;
                Some((action, count))
            }
            _ => None,
        };
        Ok(PlansPage {
            now: now.0,
            list,
            confirm,
        })
    }

    async fn plan(&self, id: i64, offset: i64) -> Result<PlanPage, DashboardError> {
        let now = Ts::now();
        let mut plan = self.store.plan_get(id).await.map_err(failed)?;
        let mut task_counts = BTreeMap::new();
        for task in &plan.tasks {
            *task_counts.entry(task.status).or_insert(0) += 1;
        }
        let tasks_total = plan.tasks.len() as i64;
        let dependencies = plan.tasks.iter().map(|t| t.depends_on.len() as i64).sum();
        let awaiting_approval = plan.tasks.iter().filter(|t| awaits_approval(t)).count() as i64;
        // Past the end shows the last page rather than nothing.
        let last_page = (tasks_total - 1).max(0) / TASKS_PER_PAGE * TASKS_PER_PAGE;
        let tasks_offset = offset.clamp(0, last_page);
        let places: HashMap<String, TaskPlace> = plan
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let page = i as i64 / TASKS_PER_PAGE + 1;
                (t.name.clone(), TaskPlace { id: t.id, page })
            })
            .collect();
        plan.tasks = plan
            .tasks
            .into_iter()
            .skip(tasks_offset as usize)
            .take(TASKS_PER_PAGE as usize)
            .collect();
        let cut = if graph_drawn(tasks_total, dependencies) {
            BTreeMap::new()
        } else {
            cut_ties(&mut plan.tasks)
        };
        let elsewhere = places_elsewhere(&plan.tasks, &places, tasks_offset);
        let deliveries = self
            .store
            .delivery_list(Some(id), PLAN_DELIVERIES)
            .await
            .map_err(failed)?;
        let shown: Vec<i64> = plan.tasks.iter().map(|t| t.id).collect();
        let definitions = self
            .store
            .tasks_stored(&shown)
            .await
            .map_err(failed)?
            .iter()
            .map(crate::plan_export::definition)
            .collect();
        Ok(PlanPage {
            now: now.0,
            plan,
            task_counts,
            tasks_total,
            tasks_offset,
            deliveries,
            dependencies,
            awaiting_approval,
            elsewhere,
            cut,
            definitions,
        })
    }

    async fn runs(
        &self,
        query: RunQuery,
        before: Option<i64>,
        limit: i64,
        confirm: Option<BulkAction>,
    ) -> Result<RunsPage, DashboardError> {
        let now = Ts::now();
        let filter = run_filter::parse(&query, now.into())?;
        let list = self
            .store
            .run_search(&filter, before, limit)
            .await
            .map_err(failed)?;
        let confirm = match confirm {
            Some(action) if filter != RunFilter::default() => {
                // Only the action asked about: Retry's count reads every
                // failed run, Cancel's only the live ones.
                let n = self
                    .store
                    .run_bulk_count(&filter, action)
                    .await
                    .map_err(failed)?;
                Some((action, n))
            }
            _ => None,
        };
        let resolved = RunQuery {
            since: filter.since.map(domain::time::rfc3339),
            until: filter.until.map(domain::time::rfc3339),
            ..query
        };
        Ok(RunsPage {
            now: now.0,
            list,
            resolved,
            confirm,
        })
    }

    async fn bulk(
        &self,
        who: &Identity,
        action: BulkAction,
        query: RunQuery,
        expected: i64,
    ) -> Result<BulkResult, DashboardError> {
        may_act(who)?;
        let filter = run_filter::parse_for_bulk(&query, Ts::now().into())?;
        self.store
            .run_bulk(&filter, action, expected, who.into(), Ts::now())
            .await
            .map_err(failed)
    }

    async fn plans_bulk(
        &self,
        who: &Identity,
        action: BulkAction,
        query: PlanQuery,
        expected: i64,
    ) -> Result<BulkResult, DashboardError> {
        may_act(who)?;
        let filter = plan_filter::parse_for_bulk(&query)?;
        self.store
            .plan_bulk(&filter, action, expected, who.into(), Ts::now())
            .await
            .map_err(failed)
    }

    async fn audit(
        &self,
        query: AuditQuery,
        before: Option<i64>,
        limit: i64,
    ) -> Result<AuditPage, DashboardError> {
        let now = Ts::now();
        let filter = audit_filter::parse(&query, now.into())?;
        let list = self
            .store
            .audit_list(&filter, before, limit)
            .await
            .map_err(failed)?;
        Ok(AuditPage { now: now.0, list })
    }

    async fn run(&self, id: i64, log_lines: i64) -> Result<RunPage, DashboardError> {
        let now = Ts::now();
        let mut run = self.store.run_get(id).await.map_err(failed)?;
        run.definition = crate::plan_export::task_definition(self.store.as_ref(), run.task_id)
            .await
            .map_err(failed)?;
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

    async fn worker_act(
        &self,
        who: &Identity,
        worker: &str,
        action: domain::views::WorkerAction,
    ) -> Result<(), DashboardError> {
        may_act(who)?;
        let drain = action == domain::views::WorkerAction::Drain;
        let found = self
            .store
            .replica_drain(worker, drain, Person::from(who), Ts::now())
            .await
            .map_err(failed)?;
        match found {
            true => Ok(()),
            false => Err(DashboardError::NotFound(format!(
                "no replica or agent {} has a heartbeat row",
                domain::audit::client_text(worker)
            ))),
        }
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
            .plan_insert(&new_plan, who.into(), Ts::now())
            .await
            .map_err(failed)
    }

    async fn export(&self, who: &Identity, id: i64) -> Result<String, DashboardError> {
        may_act(who)?;
        let stored = self
            .store
            .plan_export(id, who.into(), Ts::now())
            .await
            .map_err(failed)?;
        crate::plan_export::yaml(&crate::plan_export::document(&stored))
            .map_err(|e| failed(crate::store::StoreError::Corrupt(e.to_string())))
    }

    async fn act(&self, who: &Identity, action: Action, id: i64) -> Result<(), DashboardError> {
        may_act(who)?;
        crate::actions::act(&*self.store, action, id, who.into(), Ts::now())
            .await
            .map(drop)
            .map_err(failed)
    }

    async fn targets(&self) -> Result<TargetsPage, DashboardError> {
        let now = Ts::now();
        let targets = self.store.target_list().await.map_err(failed)?;
        Ok(TargetsPage {
            now: now.0,
            targets,
        })
    }

    async fn target_act(
        &self,
        who: &Identity,
        target: &str,
        change: TargetChange,
    ) -> Result<(), DashboardError> {
        may_act(who)?;
        let (store, actor, now) = (&self.store, Person::from(who), Ts::now());
        match change {
            TargetChange::Pause => store.target_pause(target, actor, now).await,
            TargetChange::Resume => store.target_resume(target, actor, now).await,
            TargetChange::Capacity(capacity) => {
                store
                    .target_capacity_set(target, capacity, actor, now)
                    .await
            }
        }
        .map_err(failed)
    }

    async fn schedules(&self) -> Result<SchedulesPage, DashboardError> {
        let now = Ts::now();
        let schedules = self.store.schedule_list().await.map_err(failed)?;
        Ok(SchedulesPage {
            now: now.0,
            schedules,
        })
    }

    async fn schedule(&self, id: i64) -> Result<SchedulePage, DashboardError> {
        let now = Ts::now();
        let schedule = self.store.schedule_get(id).await.map_err(failed)?;
        let file = schedule_file(&schedule);
        Ok(SchedulePage {
            now: now.0,
            schedule,
            file,
        })
    }

    async fn schedule_save(
        &self,
        who: &Identity,
        id: Option<i64>,
        text: &str,
    ) -> Result<i64, DashboardError> {
        may_act(who)?;
        let invalid = |e: crate::plan::InvalidPlan| DashboardError::Invalid {
            message: e.message,
            field: e.field,
        };
        let new = schedule::parse_text(text).map_err(invalid)?;
        let sample = new.timing.next_after(Ts::now()).unwrap_or_else(Ts::now);
        let plan = new.plan_at(sample).map_err(invalid)?;
        self.commands
            .check(&plan)
            .map_err(|e| DashboardError::Invalid {
                message: e.message,
                field: e.field.map(|f| format!("plan.{f}")),
            })?;
        match id {
            None => {
                self.store
                    .schedule_create(&new, who.into(), Ts::now())
                    .await
            }
            Some(id) => self
                .store
                .schedule_update(id, &new, who.into(), Ts::now())
                .await
                .map(|()| id),
        }
        .map_err(failed)
    }

    async fn schedule_act(
        &self,
        who: &Identity,
        id: i64,
        action: ScheduleAction,
    ) -> Result<String, DashboardError> {
        may_act(who)?;
        let (store, actor, now) = (&self.store, Person::from(who), Ts::now());
        match action {
            ScheduleAction::Pause => store
                .schedule_pause(id, actor, now)
                .await
                .map(|()| "Schedule paused: its ticks make no plan until it is resumed.".into()),
            ScheduleAction::Resume => store
                .schedule_resume(id, actor, now)
                .await
                .map(|()| "Schedule resumed from its next tick.".into()),
            ScheduleAction::Trigger => store
                .schedule_trigger(id, actor, now)
                .await
                .map(|plan| format!("Plan #{plan} made and started.")),
            ScheduleAction::Delete => store
                .schedule_delete(id, actor, now)
                .await
                .map(|()| "Schedule deleted; the plans it made stay.".into()),
        }
        .map_err(failed)
    }
}

/// A stored schedule written back as a file, for the edit form.
fn schedule_file(s: &domain::model::ScheduleView) -> String {
    let mut file = serde_json::json!({
        "name": s.name,
        "cron": s.cron,
        "time_zone": s.time_zone,
        "overlap": s.overlap,
        "catch_up": s.catch_up,
        "params": s.params,
        "plan": serde_json::from_str::<serde_json::Value>(&s.template).unwrap_or_default(),
    });
    if let Some(limit) = s.catch_up_limit {
        file["catch_up_limit"] = limit.into();
    }
    serde_json::to_string_pretty(&file).unwrap_or_default()
}

/// Cuts each task's `depends_on` and `dependents` to the names a row
/// shows; how long the lists of the tasks it cut were.
fn cut_ties(tasks: &mut [TaskView]) -> BTreeMap<i64, TieCounts> {
    let mut cut = BTreeMap::new();
    for task in tasks {
        let counts = TieCounts {
            depends_on: task.depends_on.len(),
            dependents: task.dependents.len(),
        };
        if counts.depends_on > DEPENDENCY_NAMES || counts.dependents > DEPENDENCY_NAMES {
            task.depends_on.truncate(DEPENDENCY_NAMES);
            task.dependents.truncate(DEPENDENCY_NAMES);
            cut.insert(task.id, counts);
        }
    }
    cut
}

/// Where each task the shown ones name is, when it is on another page.
fn places_elsewhere(
    shown: &[TaskView],
    places: &HashMap<String, TaskPlace>,
    offset: i64,
) -> BTreeMap<String, TaskPlace> {
    let page = offset / TASKS_PER_PAGE + 1;
    shown
        .iter()
        .flat_map(|t| t.depends_on.iter().chain(&t.dependents))
        .filter_map(|name| {
            let place = places.get(name)?;
            (place.page != page).then(|| (name.clone(), *place))
        })
        .collect()
}

/// Viewers may look but not change anything (docs/design.md, "Authorization").
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

impl StoreSource {
    /// The Overview's "needs attention" strip: halted version lines,
    /// approvals waiting, paused plans and targets, and the failed ones
    /// among the latest `deliveries`, at most [`ATTENTION_EACH`] of a kind.
    async fn attention(
        &self,
        deliveries: &[domain::model::DeliveryView],
    ) -> crate::store::Result<Vec<Attention>> {
        let item = |kind, text: String, href: String| Attention { kind, text, href };
        // One read of the targets gives both their halted lines and their
        // pauses.
        let targets = self.store.target_list().await?;
        let halted = targets.iter().filter_map(|t| {
            let h = t.halted_by.as_ref()?;
            Some(item(
                AttentionKind::HaltedLine,
                format!(
                    "{}: line halted at version {} by run #{} ({}): retry or skip it",
                    t.target,
                    h.version,
                    h.run_id,
                    h.status.as_str()
                ),
                format!("/runs/{}", h.run_id),
            ))
        });
        let approvals = self.store.approvals_waiting(ATTENTION_EACH as i64).await?;
        let approvals = approvals.into_iter().map(|(plan, name, n)| {
            let waiting = match n {
                1 => "1 task waits".to_owned(),
                n => format!("{n} tasks wait"),
            };
            item(
                AttentionKind::Approval,
                format!("plan #{plan} {name}: {waiting} for approval"),
                format!("/plans/{plan}"),
            )
        });
        let paused_plans = self.store.paused_plans().await?.into_iter().map(|p| {
            item(
                AttentionKind::PausedPlan,
                format!("plan #{} {} paused by {}", p.id, p.name, p.paused_by),
                format!("/plans/{}", p.id),
            )
        });
        let paused_targets = targets.iter().filter_map(|t| {
            Some(item(
                AttentionKind::PausedTarget,
                format!("target {} paused by {}", t.target, t.paused_by.as_ref()?),
                "/targets".to_owned(),
            ))
        });
        let failed = deliveries.iter().filter(|d| d.state == "FAILED").map(|d| {
            item(
                AttentionKind::FailedDelivery,
                format!(
                    "webhook {} of plan #{} to {} gave up: {}",
                    d.event,
                    d.plan_id,
                    d.url,
                    d.last_error.as_deref().unwrap_or("no answer")
                ),
                "/deliveries".to_owned(),
            )
        });
        let mut items = Vec::new();
        items.extend(halted.take(ATTENTION_EACH));
        items.extend(approvals);
        items.extend(paused_plans.take(ATTENTION_EACH));
        items.extend(paused_targets.take(ATTENTION_EACH));
        items.extend(failed.take(ATTENTION_EACH));
        Ok(items)
    }
}

/// The most items of one kind the "needs attention" strip shows.
const ATTENTION_EACH: usize = 10;

/// A runs, plans or audit filter that cannot be read, naming its field.
/// What an operator is told when the engine says no.
fn failed(e: StoreError) -> DashboardError {
    match e {
        StoreError::NotFound { .. } => DashboardError::NotFound(e.to_string()),
        StoreError::Conflict(message) => DashboardError::Conflict(message),
        // An approver list or a two-person rule says no to this operator.
        StoreError::Forbidden(message) => DashboardError::Forbidden(message),
        StoreError::Invalid(message) => DashboardError::Invalid {
            message,
            field: None,
        },
        other => {
            tracing::error!(error = %other, "dashboard request failed");
            DashboardError::Unavailable(
                "the engine could not answer (see the server log); the page retries on its own"
                    .into(),
            )
        }
    }
}
