//! What each live feed reads: the page's own server function, so a pushed
//! view and a server-rendered one can never differ. Here rather than in
//! `components::feed`, which the pages use to name their feed: the key
//! stays below the pages, and only this reader sits above them.

use super::{audit, deliveries, overview, plan, plans, replicas, run, runs, schedules, targets};
use crate::components::feed::Feed;

/// Reads `feed`'s view through the page's own server function and returns
/// it as the JSON of its `Result`, as the browser decodes it. Needs the
/// [`crate::backend::Backend`] in context, as server functions do.
pub async fn read(feed: &Feed) -> String {
    match feed.clone() {
        Feed::Overview => json(overview::load_overview().await),
        Feed::Plans {
            status,
            q,
            page,
            confirm,
        } => json(plans::load_plans(Some(status), Some(q), page, confirm).await),
        Feed::Plan { id, page } => json(plan::load_plan(id, page).await),
        Feed::Runs {
            query: q,
            before,
            confirm,
        } => json(
            runs::load_runs(
                q.status, q.target, q.plan, q.replica, q.actor, q.error, q.since, q.until, before,
                confirm,
            )
            .await,
        ),
        Feed::Run { id } => json(run::load_run(id).await),
        Feed::Audit { query: q, before } => {
            json(audit::load_audit(q.actor, q.action, q.subject, q.since, q.until, before).await)
        }
        Feed::Replicas => json(replicas::load_replicas().await),
        Feed::Deliveries => json(deliveries::load_deliveries().await),
        Feed::Targets => json(targets::load_targets().await),
        Feed::Schedules => json(schedules::load_schedules().await),
        Feed::Schedule { id } => json(schedules::load_schedule(id).await),
    }
}

fn json<T: serde::Serialize>(result: Result<T, crate::error::DashboardError>) -> String {
    serde_json::to_string(&result).unwrap_or_else(|e| {
        // View types are plain data; this is a bug, shown as the page's error.
        serde_json::to_string(&Err::<(), _>(crate::error::DashboardError::Unavailable(
            format!("the view could not be encoded: {e}"),
        )))
        .expect("an error encodes")
    })
}
