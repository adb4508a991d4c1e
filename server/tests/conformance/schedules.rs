//! Schedules on SQLite and PostgreSQL (docs/design.md, "Schedules";
//! invariant 9): each due tick makes exactly one plan however many rounds
//! race for it; catch-up and overlap policies; daylight-saving days; the
//! operator's actions. Time is passed in, never slept.

use std::collections::BTreeMap;
use std::time::Duration;

use baton::schedule::{NewSchedule, parse_json};
use baton::store::{Store, StoreError};
use chrono::{DateTime, Utc};
use domain::model::{PlanStatus, ScheduleView};
use domain::time::Ts;
use serde_json::{Value, json};

use crate::common::store::{claim, done};
use crate::common::{Kind, TestDb};
use crate::per_backend;

per_backend!(cases:
    each_due_tick_makes_exactly_one_plan_with_rounds_racing,
    catch_up_none_latest_and_all_after_an_outage,
    overlap_skip_queue_and_allow,
    a_0230_berlin_schedule_fires_once_on_each_dst_day,
    trigger_pause_resume_delete_and_refusals,
    a_scheduled_plan_pinned_to_an_offline_node_says_so_and_shows_its_failures,
    a_schedules_secrets_are_shown_hidden_and_kept_through_an_edit,
    a_plan_this_server_would_not_run_is_no_tick_and_no_trigger,
);

const GRACE: Duration = Duration::from_secs(60);

fn at(text: &str) -> Ts {
    Ts(DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc))
}

fn schedule(name: &str, cron: &str, extra: Value) -> NewSchedule {
    let mut doc = json!({
        "name": name,
        "cron": cron,
        "plan": {"name": "${schedule} ${tick}", "tasks": [
            {"name": "t", "target": "sched/${schedule}", "sleep": "0s"}]}
    });
    for (k, v) in extra.as_object().unwrap() {
        doc[k] = v.clone();
    }
    parse_json(doc.to_string().as_bytes()).unwrap()
}

async fn view(s: &dyn Store, id: i64) -> ScheduleView {
    s.schedule_get(id).await.unwrap()
}

mod cases {
    use super::*;

    pub async fn each_due_tick_makes_exactly_one_plan_with_rounds_racing(kind: Kind) {
        const ROUNDS: usize = 8;
        const TICKS: usize = 10;
        let db = TestDb::new(kind).await;
        let stores = db.stores(ROUNDS).await;
        let s = stores[0].as_ref();
        let id = s
            .schedule_create(
                &schedule("every-minute", "* * * * *", json!({"overlap": "allow"})),
                "alice".into(),
                at("2026-01-01T00:00:30Z"),
            )
            .await
            .unwrap();
        for minute in 1..=TICKS {
            let tick = at(&format!("2026-01-01T00:{minute:02}:00Z"));
            let racing = stores.iter().enumerate().map(|(i, store)| {
                let store = store.clone();
                // Each round sees its own clock, a little after the tick.
                let now = tick.plus(Duration::from_millis(100 * i as u64));
                async move {
                    store
                        .schedule_fire_due(&format!("r-{i}"), GRACE, now)
                        .await
                        .unwrap()
                }
            });
            let reports = futures_util::future::join_all(racing).await;
            let created: usize = reports.iter().map(|r| r.created).sum();
            assert_eq!(created, 1, "tick {tick}: {reports:?}");
        }
        let v = view(s, id).await;
        assert_eq!(v.plans.len(), TICKS);
        let mut ticks: Vec<_> = v.plans.iter().map(|p| p.tick_at.unwrap()).collect();
        ticks.sort();
        ticks.dedup();
        assert_eq!(ticks.len(), TICKS, "one plan per tick: {ticks:?}");
        assert!(v.ticks.iter().all(|t| t.outcome == "created"));
        assert_eq!(v.next_ticks[0], at("2026-01-01T00:11:00Z").0);
        // The database refuses a second plan for a tick whoever asks.
        let dup = db
            .try_execute(&format!(
                "UPDATE plan SET schedule_tick_at = (SELECT MAX(schedule_tick_at) FROM plan)
                 WHERE id = {}",
                v.plans[1].id
            ))
            .await;
        assert!(dup.is_err(), "the unique (schedule, tick) key holds");
    }

    pub async fn catch_up_none_latest_and_all_after_an_outage(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let created = at("2026-01-01T09:30:00Z");
        let mut ids = BTreeMap::new();
        for (name, extra) in [
            ("none", json!({"catch_up": "none", "overlap": "allow"})),
            ("latest", json!({"catch_up": "latest", "overlap": "allow"})),
            (
                "all",
                json!({"catch_up": "all", "catch_up_limit": 3, "overlap": "allow"}),
            ),
        ] {
            let id = s
                .schedule_create(&schedule(name, "0 * * * *", extra), "alice".into(), created)
                .await
                .unwrap();
            ids.insert(name, id);
        }
        // No replica led from 09:30 until 15:20: ticks 10:00 to 15:00 are late.
        s.schedule_fire_due("r-1", GRACE, at("2026-01-01T15:20:00Z"))
            .await
            .unwrap();
        let ticks = |v: &ScheduleView| {
            let mut t: Vec<_> = v.plans.iter().map(|p| p.tick_at.unwrap()).collect();
            t.sort();
            t
        };
        let none = view(s, ids["none"]).await;
        assert!(none.plans.is_empty());
        let missed = &none.ticks[0];
        assert_eq!(missed.outcome, "missed");
        assert!(
            missed.detail.as_deref().unwrap().starts_with("6 tick(s)"),
            "{missed:?}"
        );
        let latest = view(s, ids["latest"]).await;
        assert_eq!(ticks(&latest), [at("2026-01-01T15:00:00Z").0]);
        let all = view(s, ids["all"]).await;
        assert_eq!(
            ticks(&all),
            ["13", "14", "15"].map(|h| at(&format!("2026-01-01T{h}:00:00Z")).0)
        );
        // Back on time: the 16:00 tick fires at 16:00:20 under every policy.
        s.schedule_fire_due("r-1", GRACE, at("2026-01-01T16:00:20Z"))
            .await
            .unwrap();
        for id in ids.values() {
            let v = view(s, *id).await;
            assert_eq!(v.plans[0].tick_at, Some(at("2026-01-01T16:00:00Z").0));
        }
        // The list reads every schedule's plans and ticks at once: each
        // shows its own, newest first, exactly as its own page does.
        let listed = s.schedule_list().await.unwrap();
        assert_eq!(
            listed.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
            ["all", "latest", "none"]
        );
        for v in &listed {
            assert_eq!(v, &view(s, v.id).await, "{}", v.name);
        }
        assert_eq!(listed[0].plans.len(), 4, "13:00, 14:00, 15:00 and 16:00");
        assert!(listed[2].plans.iter().all(|p| p.name.starts_with("none ")));
    }

    pub async fn overlap_skip_queue_and_allow(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let t0 = at("2026-01-01T00:00:30Z");
        let mut ids = BTreeMap::new();
        for policy in ["skip", "queue", "allow"] {
            let id = s
                .schedule_create(
                    &schedule(policy, "* * * * *", json!({"overlap": policy})),
                    "alice".into(),
                    t0,
                )
                .await
                .unwrap();
            ids.insert(policy, id);
        }
        s.schedule_fire_due("r-1", GRACE, at("2026-01-01T00:01:01Z"))
            .await
            .unwrap();
        // Every first plan is PENDING (open) when the second tick comes.
        let report = s
            .schedule_fire_due("r-1", GRACE, at("2026-01-01T00:02:01Z"))
            .await
            .unwrap();
        assert_eq!(
            (report.created, report.skipped, report.queued),
            (1, 1, 1),
            "{report:?}"
        );
        let skip = view(s, ids["skip"]).await;
        assert_eq!(skip.plans.len(), 1);
        assert_eq!(skip.ticks[0].outcome, "skipped");
        assert!(
            skip.ticks[0]
                .detail
                .as_deref()
                .unwrap()
                .contains("still open")
        );
        let queue = view(s, ids["queue"]).await;
        assert_eq!(queue.plans.len(), 2);
        assert!(queue.plans[0].queued);
        assert_eq!(queue.plans[0].status, PlanStatus::NotStarted);
        // Held by the queue, not by its template: its export starts.
        let exported =
            baton::plan_export::document(&s.plan_stored(queue.plans[0].id).await.unwrap());
        assert!(exported.get("start").is_none(), "{exported}");
        assert_eq!(view(s, ids["allow"]).await.plans.len(), 2);

        // The first queue plan ends: the next round starts the queued one.
        let first = queue.plans[1].id;
        s.run_promote_round(&Default::default(), None, Ts::now())
            .await
            .unwrap();
        let claimed = s
            .run_claim_many(&claim("r-test", &[], 100), Ts::now())
            .await
            .unwrap();
        let mine: Vec<_> = claimed
            .iter()
            .filter(|c| c.plan_id == first)
            .map(|c| done(c.id))
            .collect();
        s.run_finish_many("r-test", &mine, Ts::now()).await.unwrap();
        let report = s
            .schedule_fire_due("r-1", GRACE, at("2026-01-01T00:02:30Z"))
            .await
            .unwrap();
        assert_eq!(report.started, 1, "{report:?}");
        let queue = view(s, ids["queue"]).await;
        assert!(!queue.plans[0].queued);
        assert_eq!(queue.plans[0].status, PlanStatus::Running);
    }

    pub async fn a_0230_berlin_schedule_fires_once_on_each_dst_day(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        for (name, start, days, expected) in [
            // Spring forward, 2026-03-29: 02:30 does not exist, it fires at
            // 03:00 CEST (01:00Z).
            (
                "spring",
                "2026-03-27T12:00:00Z",
                4,
                [
                    "2026-03-28T01:30:00Z",
                    "2026-03-29T01:00:00Z",
                    "2026-03-30T00:30:00Z",
                    "2026-03-31T00:30:00Z",
                ],
            ),
            // Fall back, 2026-10-25: 02:30 happens twice, it fires at the
            // first (CEST, 00:30Z) only.
            (
                "autumn",
                "2026-10-23T12:00:00Z",
                4,
                [
                    "2026-10-24T00:30:00Z",
                    "2026-10-25T00:30:00Z",
                    "2026-10-26T01:30:00Z",
                    "2026-10-27T01:30:00Z",
                ],
            ),
        ] {
            let start = at(start);
            let id = s
                .schedule_create(
                    &schedule(
                        name,
                        "30 2 * * *",
                        json!({"time_zone": "Europe/Berlin", "overlap": "allow"}),
                    ),
                    "alice".into(),
                    start,
                )
                .await
                .unwrap();
            // A round every 10 minutes over `days` days.
            let rounds = days * 24 * 6;
            for k in 1..=rounds {
                let now = start.plus(Duration::from_secs(600 * k));
                s.schedule_fire_due("r-1", GRACE, now).await.unwrap();
            }
            let v = view(s, id).await;
            let mut ticks: Vec<_> = v.plans.iter().map(|p| p.tick_at.unwrap()).collect();
            ticks.sort();
            assert_eq!(ticks, expected.map(|t| at(t).0), "{name}");
        }
    }

    pub async fn trigger_pause_resume_delete_and_refusals(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let t0 = at("2026-01-01T00:00:30Z");
        let def = schedule("hourly", "0 * * * *", json!({"params": {}}));
        let id = s.schedule_create(&def, "alice".into(), t0).await.unwrap();
        match s.schedule_create(&def, "alice".into(), t0).await {
            Err(StoreError::Conflict(m)) => assert!(m.contains("already exists"), "{m}"),
            other => panic!("a second schedule of the same name: {other:?}"),
        }
        // Trigger: a plan now, with no tick, started.
        let plan = s.schedule_trigger(id, "bob".into(), t0).await.unwrap();
        let v = view(s, id).await;
        assert_eq!((v.plans[0].id, v.plans[0].tick_at), (plan, None));
        assert_eq!(s.plan_get(plan).await.unwrap().status, PlanStatus::Running);

        s.schedule_pause(id, "bob".into(), t0).await.unwrap();
        assert!(matches!(
            s.schedule_pause(id, "bob".into(), t0).await,
            Err(StoreError::Conflict(_))
        ));
        let v = view(s, id).await;
        assert_eq!(v.paused_by.as_deref(), Some("bob"));
        assert!(v.next_ticks.is_empty());
        // Paused through 01:00 and 02:00: nothing made.
        let report = s
            .schedule_fire_due("r-1", GRACE, at("2026-01-01T02:00:10Z"))
            .await
            .unwrap();
        assert_eq!(report, Default::default());
        s.schedule_resume(id, "ops".into(), at("2026-01-01T02:30:00Z"))
            .await
            .unwrap();
        assert!(matches!(
            s.schedule_resume(id, "ops".into(), Ts::now()).await,
            Err(StoreError::Conflict(_))
        ));
        let v = view(s, id).await;
        assert_eq!(v.next_ticks[0], at("2026-01-01T03:00:00Z").0);
        assert_eq!(v.next_ticks.len(), 5);

        // An edit of the expression starts from the first new tick.
        let edited = schedule("hourly", "15 * * * *", json!({}));
        s.schedule_update(id, &edited, "carol".into(), at("2026-01-01T02:40:00Z"))
            .await
            .unwrap();
        let v = view(s, id).await;
        assert_eq!(
            (v.next_ticks[0], v.updated_by.as_str()),
            (at("2026-01-01T03:15:00Z").0, "carol")
        );

        s.schedule_delete(id, "ops".into(), Ts::now())
            .await
            .unwrap();
        assert!(matches!(
            s.schedule_get(id).await,
            Err(StoreError::NotFound { .. })
        ));
        assert!(matches!(
            s.schedule_trigger(id, "bob".into(), t0).await,
            Err(StoreError::NotFound { .. })
        ));
        // Its plans stay, and a new schedule (of the same name) does not
        // inherit them: ids are never given twice.
        s.plan_get(plan).await.unwrap();
        let again = s.schedule_create(&def, "alice".into(), t0).await.unwrap();
        assert_ne!(again, id);
        assert!(view(s, again).await.plans.is_empty());
    }

    /// Scheduled plans are plans: pinned work waits with its cause (and
    /// is reassigned like any other), and failures show on the schedule.
    pub async fn a_scheduled_plan_pinned_to_an_offline_node_says_so_and_shows_its_failures(
        kind: Kind,
    ) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let def = parse_json(
            json!({"name": "pinned", "cron": "0 * * * * *", "overlap": "allow",
                "plan": {"name": "p ${tick}", "tasks": [
                    {"name": "t", "target": "gpu/0", "node": "gpu", "sleep": "0s"}]}})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let t0 = Ts::now();
        let id = s.schedule_create(&def, "alice".into(), t0).await.unwrap();
        let tick = view(s, id).await.next_ticks[0];
        let now = Ts(tick).plus(Duration::from_secs(5));
        s.schedule_fire_due("r-1", GRACE, now).await.unwrap();
        let plan = view(s, id).await.plans[0].id;
        s.run_promote_round(&Default::default(), None, now)
            .await
            .unwrap();
        let task = &s.plan_get(plan).await.unwrap().tasks[0];
        assert!(
            task.waiting_cause
                .as_deref()
                .unwrap_or_default()
                .starts_with("no live replica or agent labelled gpu"),
            "{task:?}"
        );
        // After reassign_after (default 5 min) it may run anywhere.
        let later = now.plus(Duration::from_secs(6 * 60));
        s.run_promote_round(&Default::default(), None, later)
            .await
            .unwrap();
        let task = &s.plan_get(plan).await.unwrap().tasks[0];
        assert_eq!(
            task.status,
            domain::model::TaskStatus::Available,
            "{task:?}"
        );
        // Its failure shows among the schedule's last plans.
        s.plan_cancel(plan, "bob".into(), Ts::now()).await.unwrap();
        assert_eq!(view(s, id).await.plans[0].status, PlanStatus::Canceled);
    }

    /// Viewers read schedules: a webhook secret, an HTTP header and a
    /// command's environment are shown hidden, and an edit that sends the
    /// hidden values back keeps them (a hostile trial read a secret and a
    /// `Bearer` header as a viewer).
    pub async fn a_schedules_secrets_are_shown_hidden_and_kept_through_an_edit(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let doc = |cron: &str, secret: &str| {
            let text = json!({"name": "secretive", "cron": cron, "plan": {"name": "p ${tick}",
                "webhooks": [{"url": "https://hooks.example/a", "secret": secret}],
                "tasks": [
                    {"name": "call", "target": "api", "http": {"url": "https://api.example/x",
                        "headers": {"Authorization": "Bearer KEY-123"}}},
                    {"name": "dump", "target": "db", "command": {"argv": ["true"],
                        "env": {"PGPASSWORD": "pw-456"}}}]}});
            parse_json(text.to_string().as_bytes()).unwrap()
        };
        let id = s
            .schedule_create(
                &doc("0 * * * *", "TOPSECRET-789"),
                "alice".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        let stored = |needle: &'static str| {
            let db = &db;
            async move {
                db.count(&format!(
                    "SELECT COUNT(*) FROM schedule WHERE template LIKE '%{needle}%'"
                ))
                .await
            }
        };
        let shown = view(s, id).await.template;
        for secret in ["TOPSECRET-789", "KEY-123", "pw-456"] {
            assert!(!shown.contains(secret), "{secret} shown: {shown}");
            assert_eq!(stored(secret).await, 1, "{secret} stored");
        }
        let listed = serde_json::to_string(&s.schedule_list().await.unwrap()).unwrap();
        assert!(!listed.contains("TOPSECRET-789"), "{listed}");
        // Saved back as shown, with another expression: all three kept.
        let mut edited = doc("30 * * * *", "(hidden)");
        edited.template = serde_json::from_str(&shown).unwrap();
        s.schedule_update(id, &edited, "carol".into(), Ts::now())
            .await
            .unwrap();
        for secret in ["TOPSECRET-789", "KEY-123", "pw-456"] {
            assert_eq!(stored(secret).await, 1, "{secret} kept");
        }
        assert_eq!(view(s, id).await.cron, "30 * * * *");
        // A hidden value with nothing to keep is refused, and nothing changes.
        let mut renamed = edited.clone();
        renamed.template["tasks"][1]["name"] = json!("other");
        assert!(matches!(
            s.schedule_update(id, &renamed, "carol".into(), Ts::now()).await,
            Err(StoreError::Invalid(m)) if m.contains("task other's variable PGPASSWORD")
        ));
        assert_eq!(stored("pw-456").await, 1);
        let fresh = doc("0 * * * *", "(hidden)");
        let mut fresh = fresh;
        fresh.name = "another".into();
        assert!(matches!(
            s.schedule_create(&fresh, "alice".into(), Ts::now()).await,
            Err(StoreError::Invalid(_))
        ));
    }

    /// A schedule made before commands were turned off (or an allow-list
    /// came in): its ticks are `failed`, naming why, and Trigger is
    /// refused, as a submit of the same plan would be; nothing is made.
    pub async fn a_plan_this_server_would_not_run_is_no_tick_and_no_trigger(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = at("2026-01-01T00:00:30Z");
        let def = parse_json(
            json!({"name": "cmd", "cron": "0 * * * *", "plan": {"name": "p ${tick}",
                "tasks": [{"name": "t", "target": "x", "command": {"argv": ["true"]}}]}})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let id = s.schedule_create(&def, "alice".into(), t0).await.unwrap();
        s.command_policy_set(baton::plan::CommandPolicy::from_settings(true, &[]));
        match s.schedule_trigger(id, "bob".into(), t0).await {
            Err(StoreError::Invalid(m)) => {
                assert!(m.contains("would not run here"), "{m}");
                assert!(m.contains("tasks[0].command.argv[0]"), "{m}");
            }
            other => panic!("a trigger of a plan with commands: {other:?}"),
        }
        let report = s
            .schedule_fire_due("r-1", GRACE, at("2026-01-01T01:00:10Z"))
            .await
            .unwrap();
        assert_eq!((report.created, report.failed), (0, 1), "{report:?}");
        let v = view(s.as_ref(), id).await;
        assert!(v.plans.is_empty(), "a plan was made: {:?}", v.plans);
        assert_eq!(v.ticks[0].outcome, "failed");
        assert!(
            v.ticks[0]
                .detail
                .as_deref()
                .unwrap()
                .contains("would not run here"),
            "{:?}",
            v.ticks[0]
        );
        // Allowed again: the next tick makes its plan.
        s.command_policy_set(baton::plan::CommandPolicy::default());
        let report = s
            .schedule_fire_due("r-1", GRACE, at("2026-01-01T02:00:10Z"))
            .await
            .unwrap();
        assert_eq!(report.created, 1, "{report:?}");
    }
}
