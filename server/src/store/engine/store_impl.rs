//! [`Store`] for every [`Dialect`]: each method is a rule of the engine.

use std::sync::Arc;
use std::time::Duration;

use domain::audit::Person;
use domain::model::{DeliveryView, EventView, PlanList, PlanStatus, PlanView, RunView};

use super::actions::{bulk, plan_bulk};
use super::audit::{self, Asked, Subject};
use super::execution::endings;
use super::gates::{approvals, brakes, pins, promote};
use super::liveness::{Lease, SweepReport};
use super::notifications::deliveries;
use super::sessions::Session;
use super::{
    Dialect, actions, execution, liveness, plans, read_one, reads, retention, schedules, sessions,
};
use crate::plan::NewPlan;
use crate::schedule::NewSchedule;
use crate::store::engine::notifications::{DeliveryOutcome, DueDelivery, NotifyTargets};
use crate::store::engine::reads::overview::OverviewStats;
use crate::store::engine::reads::stored_plan::{StoredPlan, StoredTask};
use crate::store::signals::Signals;
use crate::store::submission::{IdempotencyKey, Submitted};
use crate::store::{
    Backend, Beaten, Claim, ClaimedRun, Finish, FinishReport, LogLine, PromoteReport, PruneCursor,
    PruneReport, PruneScan, ReplicaInfo, ReplicaRecord, Result, RoundClaims, Store, StoreError,
    TickReport,
};
use domain::gates::NodeLabels;
use domain::time::Ts;

#[async_trait::async_trait]
impl<D: Dialect> Store for D {
    fn backend(&self) -> Backend {
        D::BACKEND
    }

    fn signals(&self) -> &Arc<Signals> {
        Dialect::signals(self)
    }

    fn notify_targets_set(&self, targets: NotifyTargets) {
        self.shared().set_targets(targets);
    }

    fn command_policy_set(&self, commands: crate::plan::CommandPolicy) {
        self.shared().set_commands(commands);
    }

    async fn signals_forward(&self) -> Result<()> {
        self.listen().await
    }

    async fn migrate(&self) -> Result<()> {
        Dialect::migrate(self).await
    }

    async fn ready(&self) -> Result<()> {
        let (applied,): (i64,) = read_one(
            self,
            "SELECT COUNT(*) FROM _sqlx_migrations WHERE success",
            &[],
        )
        .await?;
        let known = self.migrator().iter().count() as i64;
        if applied < known {
            return Err(StoreError::Conflict(format!(
                "{applied} of {known} migrations applied; run `baton migrate`"
            )));
        }
        Ok(())
    }

    async fn database_clock(&self) -> Result<Option<Ts>> {
        let Some(sql) = D::CLOCK else {
            return Ok(None);
        };
        let (now,): (Ts,) = read_one(self, sql, &[]).await?;
        Ok(Some(now))
    }

    async fn plan_insert(&self, plan: &NewPlan, by: Person<'_>, now: Ts) -> Result<i64> {
        let asked = Asked::new(by, "plan.submit", Subject::New("plan", &plan.name));
        asked
            .settle(self, plans::plan_insert(self, plan, &asked, now).await, now)
            .await
    }

    async fn plan_insert_keyed(
        &self,
        plan: &NewPlan,
        by: Person<'_>,
        now: Ts,
        key: &IdempotencyKey<'_>,
    ) -> Result<Submitted> {
        let asked = Asked::new(by, "plan.submit", Subject::New("plan", &plan.name));
        let submitted = plans::plan_insert_keyed(self, plan, &asked, now, key).await;
        asked.settle(self, submitted, now).await
    }

    async fn plan_get(&self, id: i64) -> Result<PlanView> {
        reads::plan_get(self, id).await
    }

    async fn plan_stored(&self, id: i64) -> Result<StoredPlan> {
        reads::plan_stored(self, id).await
    }

    async fn plan_export(&self, id: i64, by: Person<'_>, now: Ts) -> Result<StoredPlan> {
        plans::plan_export(self, id, by, now).await
    }

    async fn tasks_stored(&self, ids: &[i64]) -> Result<Vec<StoredTask>> {
        reads::tasks_stored(self, ids).await
    }

    async fn plan_list(
        &self,
        status: Option<PlanStatus>,
        name: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> Result<PlanList> {
        reads::plan_list(self, status, name, limit, offset).await
    }

    async fn plan_start(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()> {
        let asked = Asked::new(by, "plan.start", Subject::Plan(id));
        let done = actions::raced(actions::plan_start(self, id, &asked, now).await);
        asked.settle(self, done, now).await
    }

    async fn plan_retry(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()> {
        let asked = Asked::new(by, "plan.retry", Subject::Plan(id));
        let done = actions::raced(actions::plan_retry(self, id, &asked, now).await);
        asked.settle(self, done, now).await
    }

    async fn plan_cancel(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()> {
        let asked = Asked::new(by, "plan.cancel", Subject::Plan(id));
        let done = actions::raced(actions::plan_cancel(self, id, &asked, now).await);
        asked.settle(self, done, now).await
    }

    async fn task_retry(&self, id: i64, by: Person<'_>, now: Ts) -> Result<i64> {
        let asked = Asked::new(by, "task.retry", Subject::Task(id));
        let done = actions::raced(actions::task_retry(self, id, &asked, now).await);
        asked.settle(self, done, now).await
    }

    async fn task_cancel(&self, id: i64, by: Person<'_>, now: Ts) -> Result<i64> {
        let asked = Asked::new(by, "task.cancel", Subject::Task(id));
        let done = actions::raced(actions::task_cancel(self, id, &asked, now).await);
        asked.settle(self, done, now).await
    }

    async fn task_skip(&self, id: i64, by: Person<'_>, now: Ts) -> Result<i64> {
        let asked = Asked::new(by, "task.skip", Subject::Task(id));
        let done = actions::raced(actions::task_skip(self, id, &asked, now).await);
        asked.settle(self, done, now).await
    }

    async fn task_approve(&self, id: i64, by: Person<'_>, now: Ts) -> Result<(i64, usize)> {
        let asked = Asked::new(by, "task.approve", Subject::Task(id));
        let done = approvals::task_approve(self, id, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn plan_approve(&self, id: i64, by: Person<'_>, now: Ts) -> Result<usize> {
        let asked = Asked::new(by, "plan.approve", Subject::Plan(id));
        let done = approvals::plan_approve(self, id, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn plan_pause(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()> {
        let asked = Asked::new(by, "plan.pause", Subject::Plan(id));
        let done = brakes::plan_pause(self, id, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn plan_resume(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()> {
        let asked = Asked::new(by, "plan.resume", Subject::Plan(id));
        let done = brakes::plan_resume(self, id, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn target_pause(&self, target: &str, by: Person<'_>, now: Ts) -> Result<()> {
        let asked = Asked::new(by, "target.pause", Subject::Target(target));
        let done = brakes::target_pause(self, target, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn target_resume(&self, target: &str, by: Person<'_>, now: Ts) -> Result<()> {
        let asked = Asked::new(by, "target.resume", Subject::Target(target));
        let done = brakes::target_resume(self, target, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn target_capacity_set(
        &self,
        target: &str,
        capacity: Option<i64>,
        by: Person<'_>,
        now: Ts,
    ) -> Result<()> {
        let asked = Asked::new(by, "target.capacity", Subject::Target(target));
        let done = brakes::target_capacity_set(self, target, capacity, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn target_list(&self) -> Result<Vec<domain::model::TargetView>> {
        brakes::target_list(self).await
    }

    async fn paused_list(&self) -> Result<domain::model::PausedView> {
        brakes::paused_list(self).await
    }

    async fn paused_plans(&self) -> Result<Vec<domain::model::PausedPlan>> {
        brakes::paused_plans(self).await
    }

    async fn approvals_waiting(&self, limit: i64) -> Result<Vec<(i64, String, i64)>> {
        approvals::approvals_waiting(self, limit).await
    }

    async fn schedule_create(
        &self,
        schedule: &NewSchedule,
        by: Person<'_>,
        now: Ts,
    ) -> Result<i64> {
        let asked = Asked::new(
            by,
            "schedule.create",
            Subject::New("schedule", &schedule.name),
        );
        let done = schedules::schedule_create(self, schedule, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn schedule_update(
        &self,
        id: i64,
        schedule: &NewSchedule,
        by: Person<'_>,
        now: Ts,
    ) -> Result<()> {
        let asked = Asked::new(by, "schedule.update", Subject::Schedule(id));
        let done = schedules::schedule_update(self, id, schedule, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn schedule_delete(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()> {
        let asked = Asked::new(by, "schedule.delete", Subject::Schedule(id));
        let done = schedules::schedule_delete(self, id, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn schedule_pause(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()> {
        let asked = Asked::new(by, "schedule.pause", Subject::Schedule(id));
        let done = schedules::schedule_pause(self, id, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn schedule_resume(&self, id: i64, by: Person<'_>, now: Ts) -> Result<()> {
        let asked = Asked::new(by, "schedule.resume", Subject::Schedule(id));
        let done = schedules::schedule_resume(self, id, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn schedule_trigger(&self, id: i64, by: Person<'_>, now: Ts) -> Result<i64> {
        let asked = Asked::new(by, "schedule.trigger", Subject::Schedule(id));
        let done = schedules::schedule_trigger(self, id, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn schedule_fire_due(
        &self,
        replica: &str,
        grace: Duration,
        now: Ts,
    ) -> Result<TickReport> {
        schedules::schedule_fire_due(self, replica, grace, now).await
    }

    async fn schedule_get(&self, id: i64) -> Result<domain::model::ScheduleView> {
        schedules::schedule_get(self, id).await
    }

    async fn schedule_list(&self) -> Result<Vec<domain::model::ScheduleView>> {
        schedules::schedule_list(self).await
    }

    async fn run_promote_round(
        &self,
        nodes: &NodeLabels,
        claim: Option<&dyn RoundClaims>,
        now: Ts,
    ) -> Result<PromoteReport> {
        promote::run_promote_round(self, nodes, claim, now).await
    }

    async fn run_claim_many(&self, claim: &Claim<'_>, now: Ts) -> Result<Vec<ClaimedRun>> {
        let claimed = execution::run_claim_many(self, claim, now).await?;
        // No loop waits on a claim, but pages show it (RUNNING, where):
        // tell this replica's dashboard feed.
        if !claimed.is_empty() {
            Dialect::signals(self).touch();
        }
        Ok(claimed)
    }

    async fn run_available_nodes(&self) -> Result<Vec<String>> {
        let nodes: Vec<(String,)> = self.read(super::gates::AVAILABLE_NODES.into(), &[]).await?;
        Ok(nodes.into_iter().map(|(node,)| node).collect())
    }

    async fn run_finish_many(
        &self,
        replica_id: &str,
        finishes: &[Finish],
        now: Ts,
    ) -> Result<FinishReport> {
        endings::run_finish_many(self, replica_id, finishes, now).await
    }

    async fn run_heartbeat_many(
        &self,
        replica_id: &str,
        beats: &[(i64, Duration)],
        now: Ts,
    ) -> Result<Beaten> {
        execution::run_heartbeat_many(self, replica_id, beats, now).await
    }

    async fn run_log_append(
        &self,
        replica_id: &str,
        run_id: i64,
        lines: &[LogLine],
    ) -> Result<bool> {
        let kept = self.log_append(replica_id, run_id, lines).await?;
        // The run page tails the log: tell this replica's dashboard feed.
        if !lines.is_empty() {
            Dialect::signals(self).touch();
        }
        Ok(kept)
    }

    async fn run_get(&self, id: i64) -> Result<RunView> {
        reads::run_get(self, id).await
    }

    async fn run_search(
        &self,
        filter: &domain::filter::run::RunFilter,
        before: Option<i64>,
        limit: i64,
    ) -> Result<domain::search::RunList> {
        reads::run_search(self, filter, before, limit).await
    }

    async fn run_bulk_count(
        &self,
        filter: &domain::filter::run::RunFilter,
        action: domain::search::BulkAction,
    ) -> Result<i64> {
        bulk::bulk_count(self, filter, action).await
    }

    async fn run_bulk(
        &self,
        filter: &domain::filter::run::RunFilter,
        action: domain::search::BulkAction,
        expected: i64,
        by: Person<'_>,
        now: Ts,
    ) -> Result<domain::search::BulkResult> {
        let verb = bulk::verb(bulk::List::Runs, action);
        let asked = Asked::new(by, verb, Subject::Filter(bulk::described(filter)));
        let done = bulk::bulk_apply(self, filter, action, expected, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn plan_bulk_count(
        &self,
        filter: &domain::search::PlanFilter,
        action: domain::search::BulkAction,
    ) -> Result<domain::search::PlanBulkCount> {
        plan_bulk::plan_bulk_count(self, filter, action).await
    }

    async fn plan_bulk(
        &self,
        filter: &domain::search::PlanFilter,
        action: domain::search::BulkAction,
        expected: i64,
        by: Person<'_>,
        now: Ts,
    ) -> Result<domain::search::BulkResult> {
        let verb = bulk::verb(bulk::List::Plans, action);
        let described = domain::filter::plan::described(filter);
        let asked = Asked::new(by, verb, Subject::Filter(described));
        let done = plan_bulk::plan_bulk_apply(self, filter, action, expected, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn run_log(&self, id: i64) -> Result<String> {
        reads::run_log(self, id).await
    }

    async fn run_log_tail(&self, id: i64, limit: i64) -> Result<domain::views::LogTail> {
        reads::run_log_tail(self, id, limit).await
    }

    async fn overview_stats(&self, now: Ts) -> Result<OverviewStats> {
        reads::overview_stats(self, now).await
    }

    async fn event_list(&self, after_id: i64, limit: i64) -> Result<Vec<EventView>> {
        reads::event_list(self, after_id, limit).await
    }

    async fn run_sweep(
        &self,
        stale_after: Duration,
        troubled_at: Option<Ts>,
        now: Ts,
    ) -> Result<SweepReport> {
        endings::run_sweep(self, stale_after, troubled_at, now).await
    }

    async fn run_unpin_stranded(&self, stale_after: Duration, now: Ts) -> Result<Vec<i64>> {
        pins::run_unpin_stranded(self, stale_after, now).await
    }

    async fn run_queue_repair(&self, now: Ts) -> Result<Option<u64>> {
        super::queue_repair::repair(self, now).await
    }

    async fn run_hand_back_many(
        &self,
        replica_id: &str,
        run_ids: &[i64],
        detail: &str,
        now: Ts,
    ) -> Result<Vec<i64>> {
        endings::run_hand_back_many(self, replica_id, run_ids, detail, now).await
    }

    async fn lease_acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
        now: Ts,
    ) -> Result<Lease> {
        liveness::lease_acquire(self, name, holder, ttl, now).await
    }

    async fn lease_release(&self, name: &str, holder: &str) -> Result<()> {
        liveness::lease_release(self, name, holder).await
    }

    async fn lease_get(&self, name: &str) -> Result<Option<Lease>> {
        liveness::lease_get(self, name).await
    }

    async fn delivery_take_due(
        &self,
        replica_id: &str,
        limit: i64,
        lock_for: Duration,
        now: Ts,
    ) -> Result<Vec<DueDelivery>> {
        deliveries::delivery_take_due(self, replica_id, limit, now.plus(lock_for), now).await
    }

    async fn delivery_record(
        &self,
        replica_id: &str,
        delivery: &DueDelivery,
        outcome: &DeliveryOutcome,
        now: Ts,
    ) -> Result<()> {
        deliveries::delivery_record(self, replica_id, delivery, outcome, now).await
    }

    async fn delivery_list(&self, plan_id: Option<i64>, limit: i64) -> Result<Vec<DeliveryView>> {
        reads::delivery_list(self, plan_id, limit).await
    }

    async fn replica_upsert(&self, replica: &ReplicaInfo, now: Ts) -> Result<bool> {
        liveness::replica_upsert(self, replica, now).await
    }

    async fn replica_drain(
        &self,
        worker_id: &str,
        drain: bool,
        by: Person<'_>,
        now: Ts,
    ) -> Result<bool> {
        let action = if drain {
            "worker.drain"
        } else {
            "worker.resume"
        };
        let asked = Asked::new(by, action, Subject::Worker(worker_id));
        let done = liveness::replica_drain(self, worker_id, drain, &asked, now).await;
        asked.settle(self, done, now).await
    }

    async fn replicas_draining(&self) -> Result<Vec<String>> {
        liveness::replicas_draining(self).await
    }

    async fn replica_list(&self) -> Result<Vec<ReplicaRecord>> {
        reads::replica_list(self).await
    }

    async fn replica_delete(&self, replica_id: &str) -> Result<()> {
        liveness::replica_delete(self, replica_id).await
    }

    async fn replica_prune(&self, before: Ts) -> Result<u64> {
        liveness::replica_prune(self, before).await
    }

    async fn plan_prune_scan(
        &self,
        cutoff: Ts,
        from: Option<PruneCursor>,
        limit: i64,
    ) -> Result<PruneScan> {
        retention::plan_prune_scan(self, cutoff, from, limit).await
    }

    async fn plan_prune(&self, ids: &[i64], cutoff: Ts) -> Result<PruneReport> {
        retention::plan_prune(self, ids, cutoff).await
    }

    async fn session_insert(&self, session: &Session, by: Person<'_>, now: Ts) -> Result<()> {
        sessions::session_insert(self, session, by, now).await
    }

    async fn session_get(&self, token_hash: &str, now: Ts) -> Result<Option<Session>> {
        sessions::session_get(self, token_hash, now).await
    }

    async fn session_delete(&self, token_hash: &str, by: Person<'_>, now: Ts) -> Result<()> {
        sessions::session_delete(self, token_hash, by, now).await
    }

    async fn audit_list(
        &self,
        filter: &domain::filter::audit::AuditFilter,
        before: Option<i64>,
        limit: i64,
    ) -> Result<domain::audit::AuditList> {
        audit::audit_list(self, filter, before, limit).await
    }

    async fn audit_sign_in_failed(&self, by: Person<'_>, reason: &str, now: Ts) -> Result<()> {
        audit::sign_in_failed(self, by, reason, now).await
    }

    async fn audit_prune(&self, cutoff: Ts, limit: i64) -> Result<u64> {
        audit::audit_prune(self, cutoff, limit).await
    }
}
