//! A replica asked to stop (SIGTERM) while its database is gone still
//! stops within its grace, as a supervisor that kills after the grace
//! expects: it waits a quarter of the grace at most for a claim in flight,
//! gives its executions the grace less the reserve for its last writes,
//! stops them, tries those writes (finishes, the hand-back, its heartbeat
//! row) in what the reserve leaves, and exits. Before, each of those
//! writes waited for the database as long as the connection pool would
//! (10 s per try), so a stop with the database unreachable took minutes;
//! then two seconds each after the full grace (7–8 s with a 1 s grace).

mod common;

use std::time::{Duration, Instant};

use common::process::{Baton, Options};
use common::proxy::{Link, Proxy, upstream_of};
use common::{Kind, TestDb, eventually};
use domain::model::TaskStatus;
use serde_json::json;

const GRACE: Duration = Duration::from_secs(1);
/// What exiting may take beyond the grace: the process's own exit and a
/// busy machine's scheduling, nothing that waits for the database.
const BEYOND_GRACE: Duration = Duration::from_millis(500);

async fn stops_in_time_with_the_database(link: Link) {
    let db = TestDb::new(Kind::Postgres).await;
    let proxy = Proxy::start(upstream_of(db.url())).await;
    let options = Options::fast_liveness().env("BATON_SHUTDOWN_GRACE", "1s");
    let mut baton = Baton::start(&proxy.route(db.url()), &options).await;
    let plan = baton
        .submit(json!({"name": "stuck", "tasks": [
            {"name": "long", "target": "t", "command": {"argv": ["sleep", "30"]}},
            {"name": "quick", "target": "u", "command": {"argv": ["true"]}},
        ]}))
        .await
        .id;
    eventually(Duration::from_secs(10), "`long` RUNNING", || async {
        let view = baton.plan(plan).await?;
        (view.tasks[0].status == TaskStatus::Running).then_some(())
    })
    .await;

    proxy.set(link);
    let asked = Instant::now();
    let status = baton
        .sigterm_and_wait(GRACE + BEYOND_GRACE + Duration::from_secs(20))
        .await;
    let took = asked.elapsed();
    eprintln!("{link:?}: stopped in {took:?} ({status})");
    assert!(
        status.success(),
        "with the database {link:?}, baton exited {status}"
    );
    assert!(
        took <= GRACE + BEYOND_GRACE,
        "with the database {link:?}, stopping took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stop_with_the_database_unreachable_ends_in_time() {
    stops_in_time_with_the_database(Link::Blackhole).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stop_with_the_database_refusing_ends_in_time() {
    stops_in_time_with_the_database(Link::Reset).await;
}
