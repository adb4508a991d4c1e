//! Notifications (docs/design.md, "Notifications"): the exactly-once claim
//! per plan and phase, and the outbox rows that carry each notification to
//! its destinations.
//!
//! A finish, sweep or skip that leaves a plan failed or complete claims the
//! plan's notification (`INSERT … ON CONFLICT DO NOTHING` on
//! `notification_claim`, keyed by plan) and, only if that insert won, writes
//! one `delivery` row per destination with the payload — all in the
//! transaction of the status change. A crash after commit loses nothing: any
//! replica's deliverer sends what is in the outbox. Retry deletes the claim
//! in the transaction that creates the new attempts, starting a new phase.

pub mod deliveries;

use std::collections::BTreeMap;

use domain::model::{DeliveryAttemptView, DeliveryView, PlanView, TaskStatus};
use serde::Serialize;

use crate::plan::Webhook;
use crate::secret::Secret;
use domain::time::Ts;

pub const PIPELINE_FAILED: &str = "PIPELINE_FAILED";
pub const PIPELINE_COMPLETED: &str = "PIPELINE_COMPLETED";

/// Where notifications go besides each plan's own webhooks, and the
/// dashboard address their links point at. Set once at start-up.
#[derive(Debug, Clone)]
pub struct NotifyTargets {
    /// `BATON_WEBHOOK_URL`; signed with `BATON_WEBHOOK_SECRET` at send time.
    pub webhook_url: Option<String>,
    /// `BATON_PUBLIC_URL`, without a trailing slash.
    pub public_url: String,
}

impl Default for NotifyTargets {
    fn default() -> Self {
        NotifyTargets {
            webhook_url: None,
            public_url: "http://127.0.0.1:3000".into(),
        }
    }
}

/// A plan whose notification a transaction claimed.
#[derive(Debug, Clone, PartialEq)]
pub struct Notified {
    pub plan_id: i64,
    pub event: &'static str,
    /// Outbox rows queued for it: one per destination, none without one.
    pub deliveries: usize,
}

/// Whether any of `notified` queued a delivery: then, and only then, the
/// transaction's commit wakes the deliverers ([`crate::store::Signal::Deliveries`]).
pub fn any_queued(notified: &[Notified]) -> bool {
    notified.iter().any(|n| n.deliveries > 0)
}

/// Which plans a batch of status changes may have failed or completed.
#[derive(Debug, Default)]
pub struct PlanOutcomes {
    /// Plans where a task failed for good (no automatic retry left).
    pub failed: Vec<i64>,
    /// The plan of each task that became DONE or SKIPPED, once per task.
    pub progressed: Vec<i64>,
}

impl PlanOutcomes {
    /// Each plan once, in id order, with how many of its tasks became DONE
    /// or SKIPPED and whether one failed for good. Plans are locked in this
    /// order, so two transactions never wait on each other's plans in a
    /// cycle.
    pub fn by_plan(&self) -> Vec<PlanOutcome> {
        let mut plans: BTreeMap<i64, PlanOutcome> = BTreeMap::new();
        for plan_id in &self.progressed {
            plans
                .entry(*plan_id)
                .or_insert(PlanOutcome::new(*plan_id))
                .completed_tasks += 1;
        }
        for plan_id in &self.failed {
            plans
                .entry(*plan_id)
                .or_insert(PlanOutcome::new(*plan_id))
                .failed = true;
        }
        plans.into_values().collect()
    }
}

/// What one batch did to one plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanOutcome {
    pub plan_id: i64,
    /// Tasks that became DONE or SKIPPED: they leave the plan's open count.
    pub completed_tasks: i64,
    /// A task failed for good: the plan failed, whatever else happened.
    pub failed: bool,
}

impl PlanOutcome {
    fn new(plan_id: i64) -> Self {
        PlanOutcome {
            plan_id,
            completed_tasks: 0,
            failed: false,
        }
    }
}

/// Claims a plan's notification for this phase; affects one row only for
/// the first claimer.
pub const CLAIM_INSERT: &str = "INSERT INTO notification_claim (plan_id, event, claimed_at)
    VALUES ($1, $2, $3) ON CONFLICT (plan_id) DO NOTHING";

/// Retry: a new phase may notify again.
pub const CLAIM_DELETE: &str = "DELETE FROM notification_claim WHERE plan_id = $1";

pub const CLAIM_GET: &str = "SELECT event, claimed_at FROM notification_claim WHERE plan_id = $1";

/// Takes tasks that became DONE or SKIPPED off their plan's open count
/// and returns what is left: 0 means the plan is complete. The row lock
/// the UPDATE takes serialises this per plan, and the UPDATE counts from
/// the latest committed value, so of two transactions finishing a plan's
/// last two tasks at once exactly one sees 0.
pub const PLAN_PROGRESS: &str =
    "UPDATE plan SET open_tasks = open_tasks - $2 WHERE id = $1 RETURNING open_tasks";

pub const PLAN_WEBHOOKS: &str = "SELECT webhooks FROM plan WHERE id = $1";

pub const DELIVERY_INSERT: &str = "INSERT INTO delivery (delivery_key, plan_id, event, url, secret,
        payload, created_at, state, attempts, next_attempt_at, destination)
    VALUES ($1, $2, $3, $4, $5, $6, $7, 'PENDING', 0, $7, $8)";

/// Where `url` goes, for [`DELIVERY_TAKE`]'s limit: its scheme, host and
/// port (`https://hooks.slack.com`), so one host's many URLs (a channel
/// each) share one limit.
pub fn destination(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(parsed) => parsed.origin().ascii_serialization(),
        Err(_) => url.to_owned(),
    }
}

/// Deliveries of one plan (or all), newest first.
pub const DELIVERY_LIST: &str = "SELECT id, delivery_key, plan_id, event, url, state, created_at,
        next_attempt_at, delivered_at, last_status_code, last_error
    FROM delivery WHERE CAST($1 AS BIGINT) IS NULL OR plan_id = $1
    ORDER BY id DESC LIMIT $2";

/// Attempts of the deliveries [`DELIVERY_LIST`] returned (`$2`: the
/// smallest id it returned).
pub const DELIVERY_ATTEMPTS: &str =
    "SELECT a.delivery_id, a.attempt, a.replica_id, a.at, a.status_code, a.error
    FROM delivery_attempt a JOIN delivery d ON d.id = a.delivery_id
    WHERE (CAST($1 AS BIGINT) IS NULL OR d.plan_id = $1) AND d.id >= $2 ORDER BY a.id";

/// Takes up to `$2` deliveries due at `$3` for `$1` until `$4`; another
/// replica may take one over once that passes (its sender died).
///
/// At most `$6` deliveries to one destination (scheme, host and port) are
/// in flight at once (taken and not yet recorded, across replicas; two
/// takes at the same instant may each fill the same destination's room): a
/// receiver that answers in 10 s or never ties up that many senders, not
/// all of them, however many URLs it has, and the others' notifications go
/// out meanwhile. Destinations already at their limit are passed over in
/// the first `$5` due rows looked at, so their backlog cannot hide other
/// receivers' rows. Rows without a destination (queued by an older
/// replica) are not limited. PostgreSQL locks the rows looked at with
/// SKIP LOCKED (the window function must stay outside that select).
pub const DELIVERY_TAKE: &str = "UPDATE delivery SET locked_by = $1, locked_until = $4
    WHERE id IN (SELECT id FROM (
            SELECT id, next_attempt_at,
                CASE WHEN destination IS NULL THEN 1 ELSE
                    ROW_NUMBER() OVER (PARTITION BY destination ORDER BY next_attempt_at, id)
                    + (SELECT COUNT(*) FROM delivery busy WHERE busy.destination = looked.destination
                        AND busy.locked_until >= $3) END AS place
            FROM (SELECT d.id, d.destination, d.next_attempt_at FROM delivery d
                WHERE d.state = 'PENDING' AND d.next_attempt_at <= $3
                  AND (d.locked_until IS NULL OR d.locked_until < $3)
                  AND (SELECT COUNT(*) FROM delivery busy WHERE busy.destination = d.destination
                        AND busy.locked_until >= $3) < $6
                ORDER BY d.next_attempt_at, d.id LIMIT $5 {lock}) looked) ranked
        WHERE place <= $6
        ORDER BY next_attempt_at, id LIMIT $2)
    RETURNING id, delivery_key, plan_id, event, url, secret, payload, attempts";

/// The most deliveries to one destination in flight at once
/// ([`DELIVERY_TAKE`]).
pub const IN_FLIGHT_PER_DESTINATION: i64 = 4;

pub const ATTEMPT_INSERT: &str = "INSERT INTO delivery_attempt
        (delivery_id, attempt, replica_id, at, status_code, error)
    VALUES ($1, $2, $3, $4, $5, $6)";

/// Records an attempt's outcome on the delivery, if this replica still
/// holds it.
pub const DELIVERY_UPDATE: &str = "UPDATE delivery SET attempts = $2, state = $7,
        next_attempt_at = COALESCE($8, next_attempt_at),
        delivered_at = CASE WHEN $7 = 'DELIVERED' THEN $4 ELSE delivered_at END,
        last_status_code = $5, last_error = $6, locked_by = NULL, locked_until = NULL
    WHERE id = $1 AND locked_by = $3";

/// A delivery a replica took to send now.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DueDelivery {
    pub id: i64,
    pub delivery_key: String,
    pub plan_id: i64,
    pub event: String,
    pub url: String,
    /// `None`: sign with `BATON_WEBHOOK_SECRET`.
    pub secret: Option<Secret>,
    pub payload: String,
    /// Attempts made before this one.
    pub attempts: i64,
}

/// How one POST went.
#[derive(Debug, Clone)]
pub struct DeliveryOutcome {
    pub status_code: Option<i64>,
    pub error: Option<String>,
    /// `Some`: try again then; `None` with no error: delivered; `None` with
    /// an error: given up.
    pub retry_at: Option<Ts>,
}

impl DeliveryOutcome {
    pub fn state(&self) -> &'static str {
        match (&self.retry_at, &self.error) {
            (Some(_), _) => "PENDING",
            (None, None) => "DELIVERED",
            (None, Some(_)) => "FAILED",
        }
    }
}

#[derive(sqlx::FromRow)]
pub struct DeliveryRow {
    pub id: i64,
    pub delivery_key: String,
    pub plan_id: i64,
    pub event: String,
    pub url: String,
    pub state: String,
    pub created_at: Ts,
    pub next_attempt_at: Option<Ts>,
    pub delivered_at: Option<Ts>,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
}

#[derive(sqlx::FromRow)]
pub struct AttemptRow {
    pub delivery_id: i64,
    pub attempt: i64,
    pub replica_id: String,
    pub at: Ts,
    pub status_code: Option<i64>,
    pub error: Option<String>,
}

/// Joins deliveries with their attempts, for the API.
pub fn delivery_views(rows: Vec<DeliveryRow>, attempts: Vec<AttemptRow>) -> Vec<DeliveryView> {
    let mut by_delivery: BTreeMap<i64, Vec<DeliveryAttemptView>> = BTreeMap::new();
    for a in attempts {
        by_delivery
            .entry(a.delivery_id)
            .or_default()
            .push(DeliveryAttemptView {
                attempt: a.attempt,
                replica_id: a.replica_id,
                at: a.at.0,
                status_code: a.status_code,
                error: a.error,
            });
    }
    rows.into_iter()
        .map(|d| DeliveryView {
            attempts: by_delivery.remove(&d.id).unwrap_or_default(),
            id: d.id,
            delivery_key: d.delivery_key,
            plan_id: d.plan_id,
            event: d.event,
            // A destination's password is a secret like its signing
            // secret: every viewer reads this list.
            url: crate::store::redact(&d.url),
            next_attempt_at: d
                .next_attempt_at
                .filter(|_| d.state == "PENDING")
                .map(|t| t.0),
            state: d.state,
            created_at: d.created_at.0,
            delivered_at: d.delivered_at.map(|t| t.0),
            last_status_code: d.last_status_code,
            last_error: d.last_error,
        })
        .collect()
}

/// One destination of a notification.
pub struct Destination {
    pub url: String,
    pub secret: Option<Secret>,
}

/// The global webhook first, then the plan's own.
pub fn destinations(targets: &NotifyTargets, plan_webhooks: &str) -> Vec<Destination> {
    let own: Vec<Webhook> = serde_json::from_str(plan_webhooks).unwrap_or_default();
    targets
        .webhook_url
        .iter()
        .map(|url| Destination {
            url: url.clone(),
            secret: None,
        })
        .chain(own.into_iter().map(|w| Destination {
            url: w.url,
            secret: w.secret,
        }))
        .collect()
}

/// The stable id receivers de-duplicate on: plan, event, the claim's time
/// (which tells phases apart) and the destination's position.
pub fn delivery_key(plan_id: i64, event: &str, claimed_at: Ts, destination: usize) -> String {
    format!(
        "baton-{plan_id}-{}-{}-{destination}",
        event.to_ascii_lowercase(),
        claimed_at.micros()
    )
}

#[derive(Serialize)]
struct Payload<'a> {
    event: &'a str,
    plan: PlanRef<'a>,
    counts: BTreeMap<&'static str, i64>,
    failed_tasks: Vec<FailedTask<'a>>,
    occurred_at: chrono::DateTime<chrono::Utc>,
    plan_created_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Serialize)]
struct PlanRef<'a> {
    id: i64,
    name: &'a str,
    url: String,
}

#[derive(Serialize)]
struct FailedTask<'a> {
    id: i64,
    name: &'a str,
    target: &'a str,
    error: Option<&'a str>,
}

/// The JSON body every destination of this notification receives.
pub fn payload(event: &str, plan: &PlanView, public_url: &str, now: Ts) -> String {
    let mut counts = BTreeMap::new();
    for t in &plan.tasks {
        *counts.entry(t.status.as_str()).or_insert(0) += 1;
    }
    let failed_tasks = plan
        .tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Failed)
        .map(|t| FailedTask {
            id: t.id,
            name: &t.name,
            target: &t.target,
            error: t.error.as_deref(),
        })
        .collect();
    let body = Payload {
        event,
        plan: PlanRef {
            id: plan.id,
            name: &plan.name,
            url: format!("{}/plans/{}", public_url.trim_end_matches('/'), plan.id),
        },
        counts,
        failed_tasks,
        occurred_at: now.0,
        plan_created_at: plan.created_at,
    };
    serde_json::to_string(&body).expect("a payload always serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_count_completed_tasks_per_plan_in_id_order() {
        let outcomes = PlanOutcomes {
            failed: vec![2, 3],
            progressed: vec![3, 1, 3],
        };
        let plan = |plan_id, completed_tasks, failed| PlanOutcome {
            plan_id,
            completed_tasks,
            failed,
        };
        assert_eq!(
            outcomes.by_plan(),
            vec![plan(1, 1, false), plan(2, 0, true), plan(3, 2, true)]
        );
    }

    #[test]
    fn the_global_webhook_goes_first_and_keeps_its_secret_out_of_the_row() {
        let targets = NotifyTargets {
            webhook_url: Some("http://ops/hook".into()),
            public_url: "http://baton".into(),
        };
        let own = r#"[{"url": "http://team/hook", "secret": "s3"}]"#;
        let to = destinations(&targets, own);
        assert_eq!(to.len(), 2);
        assert_eq!(
            (
                to[0].url.as_str(),
                to[0].secret.as_ref().map(Secret::expose)
            ),
            ("http://ops/hook", None)
        );
        assert_eq!(
            (
                to[1].url.as_str(),
                to[1].secret.as_ref().map(Secret::expose)
            ),
            ("http://team/hook", Some("s3"))
        );
        assert!(destinations(&NotifyTargets::default(), "[]").is_empty());
    }

    #[test]
    fn delivery_keys_differ_by_phase_and_destination() {
        let t = Ts::from_micros(1_700_000_000_000_000);
        let a = delivery_key(7, PIPELINE_FAILED, t, 0);
        assert_eq!(a, "baton-7-pipeline_failed-1700000000000000-0");
        assert_ne!(a, delivery_key(7, PIPELINE_FAILED, t, 1));
        assert_ne!(a, delivery_key(7, PIPELINE_FAILED, Ts::from_micros(1), 0));
    }
}
