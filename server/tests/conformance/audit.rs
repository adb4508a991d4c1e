//! The audit log on SQLite and PostgreSQL: every change a person asks
//! for writes exactly one entry, with who, from where and what it
//! touched, in the change's own transaction; refusals and failed
//! sign-ins are recorded; filters and pages; retention.

use std::time::Duration;

use baton::schedule::parse_json;
use baton::store::{Session, Store, StoreError};
use domain::audit::Person;
use domain::audit::{AuditEntry, AuditQuery, Outcome};
use domain::filter::audit::{self as audit_filter, AuditFilter};
use domain::filter::run as run_filter;
use domain::model::TaskStatus;
use domain::search::BulkAction;
use domain::time::Ts;
use serde_json::json;

use crate::common::store::{claim, failed, promote, task_named};
use crate::common::{Kind, TestDb, plan};
use crate::{newest_plan, per_backend};

per_backend!(cases:
    each_action_writes_one_entry_with_who_where_and_what,
    refusals_are_recorded_and_unknown_subjects_are_not,
    a_bulk_retry_of_n_runs_writes_one_entry_naming_n,
    sign_ins_failed_sign_ins_and_sign_outs_are_recorded,
    filters_and_pages_cover_every_entry_once,
    retention_deletes_only_old_entries_and_never_with_a_plan,
    an_action_that_rolls_back_leaves_no_entry,
);

/// Someone at a known address, behind a proxy that says who they are.
const OPS: Person<'static> = Person {
    name: "ops",
    address: Some("10.1.2.3"),
    forwarded_for: Some("203.0.113.7"),
};

/// Every entry, oldest first.
async fn entries(s: &dyn Store) -> Vec<AuditEntry> {
    let mut all = s
        .audit_list(&AuditFilter::default(), None, 500)
        .await
        .unwrap()
        .entries;
    all.reverse();
    all
}

/// The entries written since `from` were exactly `actions`, in order.
async fn written_since(s: &dyn Store, from: usize, actions: &[&str]) -> Vec<AuditEntry> {
    let all = entries(s).await;
    let new: Vec<AuditEntry> = all.into_iter().skip(from).collect();
    let got: Vec<&str> = new.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(got, actions, "{new:#?}");
    new
}

fn query(pairs: &[(&str, &str)]) -> AuditFilter {
    let mut q = AuditQuery::default();
    for (name, value) in pairs {
        let value = Some((*value).to_owned());
        match *name {
            "actor" => q.actor = value,
            "action" => q.action = value,
            "subject" => q.subject = value,
            "since" => q.since = value,
            "until" => q.until = value,
            other => panic!("no field {other}"),
        }
    }
    audit_filter::parse(&q, Ts::now().into()).unwrap()
}

mod cases {
    use super::*;

    pub async fn each_action_writes_one_entry_with_who_where_and_what(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let id = s
            .plan_insert(
                &plan(json!({"name": "release-42", "tasks": [
                    {"name": "migrate", "target": "db/orders", "sleep": "0s"},
                    {"name": "deploy", "target": "svc/orders", "sleep": "0s"},
                ]})),
                OPS,
                Ts::now(),
            )
            .await
            .unwrap();
        let submit = written_since(s, 0, &["plan.submit"]).await;
        let e = &submit[0];
        assert_eq!(
            (
                e.actor.as_str(),
                e.address.as_deref(),
                e.forwarded_for.as_deref()
            ),
            ("ops", Some("10.1.2.3"), Some("203.0.113.7"))
        );
        assert_eq!(e.outcome, Outcome::Done);
        assert_eq!(e.subject, format!("plan {id} release-42"));
        assert_eq!((e.plan_id, e.task_id), (Some(id), None));
        assert_eq!(e.detail, "2 tasks");

        promote(s).await;
        let claimed = s
            .run_claim_many(&claim("r-1", &[], 10), Ts::now())
            .await
            .unwrap();
        let v = s.plan_get(id).await.unwrap();
        let migrate = task_named(&v, "migrate").id;
        let run = claimed.iter().find(|c| c.task_id == migrate).unwrap().id;
        s.run_finish_many("r-1", &[failed(run)], Ts::now())
            .await
            .unwrap();
        // The replica's claim and finish are not people's actions.
        assert_eq!(entries(s).await.len(), 1);

        s.task_retry(migrate, OPS, Ts::now()).await.unwrap();
        s.task_cancel(migrate, OPS, Ts::now()).await.unwrap();
        s.task_skip(migrate, OPS, Ts::now()).await.unwrap();
        let task = written_since(s, 1, &["task.retry", "task.cancel", "task.skip"]).await;
        for e in &task {
            assert_eq!(
                e.subject,
                format!("task {migrate} migrate of plan {id} release-42")
            );
            assert_eq!((e.plan_id, e.task_id), (Some(id), Some(migrate)));
            assert_eq!(e.address.as_deref(), Some("10.1.2.3"));
        }
        assert!(
            task[0].detail.starts_with("was FAILED; new run "),
            "{}",
            task[0].detail
        );
        assert!(
            task[1].detail.ends_with("was PENDING"),
            "{}",
            task[1].detail
        );
        assert_eq!(task[2].detail, "was CANCELED");

        s.plan_pause(id, OPS, Ts::now()).await.unwrap();
        s.plan_resume(id, OPS, Ts::now()).await.unwrap();
        s.plan_cancel(id, OPS, Ts::now()).await.unwrap();
        // The other task's run was RUNNING: r-1 kills it and confirms.
        let other = claimed.iter().find(|c| c.task_id != migrate).unwrap().id;
        s.run_finish_many("r-1", &[failed(other)], Ts::now())
            .await
            .unwrap();
        s.plan_retry(id, OPS, Ts::now()).await.unwrap();
        let plans = written_since(
            s,
            4,
            &["plan.pause", "plan.resume", "plan.cancel", "plan.retry"],
        )
        .await;
        assert!(
            plans
                .iter()
                .all(|e| e.plan_id == Some(id) && e.task_id.is_none())
        );
        assert_eq!(plans[2].detail, "1 run");
        assert_eq!(plans[3].detail, "1 task");

        s.target_pause(" db/orders ", OPS, Ts::now()).await.unwrap();
        s.target_resume("db/orders", OPS, Ts::now()).await.unwrap();
        s.target_capacity_set("db/orders", Some(2), OPS, Ts::now())
            .await
            .unwrap();
        let targets =
            written_since(s, 8, &["target.pause", "target.resume", "target.capacity"]).await;
        assert!(
            targets.iter().all(
                |e| e.subject == "target db/orders" && e.target.as_deref() == Some("db/orders")
            )
        );
        assert_eq!(targets[2].detail, "capacity 2");

        let approvals = s
            .plan_insert(
                &plan(json!({"name": "gated", "tasks": [
                    {"name": "one", "target": "g/1", "sleep": "0s", "approval": "required"},
                    {"name": "two", "target": "g/2", "sleep": "0s", "approval": "required"},
                ]})),
                "alice".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        promote(s).await;
        let g = s.plan_get(approvals).await.unwrap();
        s.task_approve(task_named(&g, "one").id, OPS, Ts::now())
            .await
            .unwrap();
        s.plan_approve(approvals, OPS, Ts::now()).await.unwrap();
        let approved = written_since(s, 11, &["plan.submit", "task.approve", "plan.approve"]).await;
        assert_eq!(approved[0].actor, "alice");
        assert_eq!(
            approved[0].address, None,
            "a name from nowhere has no address"
        );
        assert_eq!(approved[1].detail, "1 task approved");
        assert_eq!(approved[2].detail, "1 task approved");

        let doc = json!({"name": "nightly", "cron": "0 3 * * *", "plan": {"name": "n ${tick}",
            "tasks": [{"name": "t", "target": "sched/n", "sleep": "0s"}]}});
        let schedule = parse_json(doc.to_string().as_bytes()).unwrap();
        let sid = s.schedule_create(&schedule, OPS, Ts::now()).await.unwrap();
        s.schedule_update(sid, &schedule, OPS, Ts::now())
            .await
            .unwrap();
        s.schedule_pause(sid, OPS, Ts::now()).await.unwrap();
        s.schedule_resume(sid, OPS, Ts::now()).await.unwrap();
        let made = s.schedule_trigger(sid, OPS, Ts::now()).await.unwrap();
        s.schedule_delete(sid, OPS, Ts::now()).await.unwrap();
        let schedules = written_since(
            s,
            14,
            &[
                "schedule.create",
                "schedule.update",
                "schedule.pause",
                "schedule.resume",
                "schedule.trigger",
                "schedule.delete",
            ],
        )
        .await;
        for e in &schedules {
            assert_eq!(e.subject, format!("schedule {sid} nightly"), "{e:?}");
            assert_eq!(e.schedule_id, Some(sid));
        }
        assert_eq!(schedules[0].detail, "0 3 * * * UTC");
        assert!(
            schedules[4]
                .detail
                .starts_with(&format!("made plan {made} ")),
            "{}",
            schedules[4].detail
        );
        // The deleted schedule's entries still name it.
        assert_eq!(entries(s).await.len(), 20);
    }

    pub async fn refusals_are_recorded_and_unknown_subjects_are_not(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "tasks": [
                    {"name": "a", "target": "db/a", "sleep": "0s"},
                    {"name": "gated", "target": "db/b", "sleep": "0s", "approval": "required",
                        "approvers": ["carol"]},
                ]})),
                "alice".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        promote(s).await;
        let v = s.plan_get(id).await.unwrap();
        let a = task_named(&v, "a");
        assert_eq!(a.status, TaskStatus::Available);

        // 409: a live task cannot be skipped; nothing changes but the log.
        let e = s.task_skip(a.id, OPS, Ts::now()).await.unwrap_err();
        assert!(matches!(e, StoreError::Conflict(_)), "{e}");
        // 403: the approver list says no.
        let gated = task_named(&v, "gated").id;
        let e = s.task_approve(gated, OPS, Ts::now()).await.unwrap_err();
        assert!(matches!(e, StoreError::Forbidden(_)), "{e}");
        // 409 on a brake, whose transaction commits its refusal.
        let e = s.plan_resume(id, OPS, Ts::now()).await.unwrap_err();
        assert!(matches!(e, StoreError::Conflict(_)), "{e}");
        // 422 before any transaction.
        let e = s.target_pause(" ", OPS, Ts::now()).await.unwrap_err();
        assert!(matches!(e, StoreError::Invalid(_)), "{e}");
        // 404: nothing by that id was touched; not recorded.
        let e = s.task_retry(999_999, OPS, Ts::now()).await.unwrap_err();
        assert!(matches!(e, StoreError::NotFound { .. }), "{e}");

        let refused = written_since(
            s,
            1,
            &["task.skip", "task.approve", "plan.resume", "target.pause"],
        )
        .await;
        assert!(
            refused
                .iter()
                .all(|e| e.outcome == Outcome::Refused && e.actor == "ops")
        );
        assert!(
            refused[0]
                .detail
                .contains("only NOT_STARTED, FAILED or CANCELED"),
            "{}",
            refused[0].detail
        );
        assert_eq!(
            refused[0].subject,
            format!("task {} a of plan {id} p", a.id)
        );
        assert!(refused[1].detail.contains("carol"), "{}", refused[1].detail);
        assert_eq!(refused[2].detail, format!("plan {id} is not paused"));
        assert_eq!(s.plan_get(id).await.unwrap(), v, "refusals changed nothing");
    }

    pub async fn a_bulk_retry_of_n_runs_writes_one_entry_naming_n(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        crate::bulk::failed_plan(s, "orders", 3).await;
        let before = entries(s).await.len();
        let f = run_filter::parse(
            &crate::run_search::query(&[("target", "db/orders"), ("status", "FAILED")]),
            Ts::now().into(),
        )
        .unwrap();
        // Seen 2, there are 3: refused and recorded, nothing retried.
        s.run_bulk(&f, BulkAction::Retry, 2, OPS, Ts::now())
            .await
            .unwrap_err();
        let done = s
            .run_bulk(&f, BulkAction::Retry, 3, OPS, Ts::now())
            .await
            .unwrap();
        assert_eq!(done.changed, 3);
        let bulk = written_since(s, before, &["runs.bulk_retry", "runs.bulk_retry"]).await;
        assert_eq!(bulk[0].outcome, Outcome::Refused);
        assert!(bulk[0].detail.contains("you saw 2"), "{}", bulk[0].detail);
        assert_eq!(bulk[1].outcome, Outcome::Done);
        assert_eq!(bulk[1].detail, "3 runs");
        assert_eq!(bulk[1].subject, "runs status=FAILED target=db/orders");
        assert_eq!(bulk[1].address.as_deref(), Some("10.1.2.3"));
        assert_eq!(
            db.count("SELECT COUNT(*) FROM audit").await,
            before as i64 + 2
        );
    }

    pub async fn sign_ins_failed_sign_ins_and_sign_outs_are_recorded(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let t0 = Ts::now();
        let session = Session {
            token_hash: "aa".into(),
            user_name: "alice".into(),
            created_at: t0,
            expires_at: t0.plus(Duration::from_secs(3600)),
            credential: None,
        };
        let alice = Person {
            name: "alice",
            address: Some("127.0.0.1"),
            forwarded_for: None,
        };
        let mallory = Person {
            name: "admin",
            address: Some("192.0.2.66"),
            forwarded_for: Some("127.0.0.1"),
        };
        s.audit_sign_in_failed(mallory, "wrong user name or password", t0)
            .await
            .unwrap();
        s.session_insert(&session, alice, t0).await.unwrap();
        s.session_delete("aa", alice, t0).await.unwrap();
        // Already gone: nothing ends, nothing is recorded.
        s.session_delete("aa", alice, t0).await.unwrap();
        let auth = written_since(
            s,
            0,
            &["auth.sign_in_failed", "auth.sign_in", "auth.sign_out"],
        )
        .await;
        assert_eq!(auth[0].actor, "admin");
        assert_eq!(auth[0].outcome, Outcome::Refused);
        assert_eq!(auth[0].detail, "wrong user name or password");
        assert_eq!(auth[0].address.as_deref(), Some("192.0.2.66"));
        assert_eq!(auth[0].forwarded_for.as_deref(), Some("127.0.0.1"));
        assert!(auth[1..].iter().all(|e| e.actor == "alice"
            && e.outcome == Outcome::Done
            && e.address.as_deref() == Some("127.0.0.1")));
    }

    pub async fn filters_and_pages_cover_every_entry_once(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let t0 = Ts::now().minus(Duration::from_secs(3600));
        let minute = Duration::from_secs(60);
        // 30 entries a minute apart: failed sign-ins by two names, and
        // target pauses and resumes by a third.
        for i in 0..30u32 {
            let at = t0.plus(minute * i);
            match i % 3 {
                0 => s
                    .audit_sign_in_failed("alice".into(), "wrong", at)
                    .await
                    .unwrap(),
                1 => s
                    .audit_sign_in_failed("bob".into(), "wrong", at)
                    .await
                    .unwrap(),
                _ => {
                    let target = format!("db/t{}", i / 3);
                    s.target_pause(&target, "carol".into(), at).await.unwrap()
                }
            }
        }
        let all = entries(s).await;
        assert_eq!(all.len(), 30);
        let ids = |list: &[AuditEntry]| list.iter().map(|e| e.id).collect::<Vec<_>>();
        let newest_first = |mut list: Vec<AuditEntry>| {
            list.reverse();
            list
        };
        let expect = |keep: &dyn Fn(&AuditEntry) -> bool| {
            ids(&newest_first(
                all.iter().filter(|e| keep(e)).cloned().collect(),
            ))
        };
        let search =
            async |f: AuditFilter| ids(&s.audit_list(&f, None, 500).await.unwrap().entries);

        assert_eq!(
            search(query(&[("actor", "alice")])).await,
            expect(&|e| e.actor == "alice")
        );
        assert_eq!(
            search(query(&[("actor", "ALICE")])).await,
            Vec::<i64>::new(),
            "exactly"
        );
        assert_eq!(
            search(query(&[("action", "target.")])).await,
            expect(&|e| e.action == "target.pause")
        );
        assert_eq!(
            search(query(&[("action", "auth.sign_in_failed")])).await,
            expect(&|e| e.action == "auth.sign_in_failed")
        );
        assert_eq!(
            search(query(&[("subject", "DB/T3")])).await,
            expect(&|e| e.subject.contains("db/t3")),
            "any case"
        );
        assert_eq!(search(query(&[("subject", "db/t3")])).await.len(), 1);
        // Minutes 10 to 19: since is inclusive, until exclusive.
        let since = t0.plus(minute * 10).to_string();
        let until = t0.plus(minute * 20).to_string();
        assert_eq!(
            search(query(&[("since", &since), ("until", &until)])).await,
            expect(&|e| {
                let at = Ts::from(e.at);
                at >= t0.plus(minute * 10) && at < t0.plus(minute * 20)
            })
        );
        assert_eq!(
            search(query(&[("since", &since), ("until", &until)]))
                .await
                .len(),
            10
        );
        assert_eq!(
            search(query(&[("actor", "carol"), ("since", &since)]))
                .await
                .len(),
            (10..30).filter(|i| i % 3 == 2).count()
        );

        // Pages of 7 through everything: no gap, no repeat, newest first.
        let mut paged = Vec::new();
        let mut before = None;
        loop {
            let page = s
                .audit_list(&AuditFilter::default(), before, 7)
                .await
                .unwrap();
            assert!(page.entries.len() <= 7);
            paged.extend(ids(&page.entries));
            match page.next_before {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        assert_eq!(paged, ids(&newest_first(all.clone())));
        // And through a filter.
        let mut paged = Vec::new();
        let mut before = None;
        let bobs = query(&[("actor", "bob")]);
        loop {
            let page = s.audit_list(&bobs, before, 3).await.unwrap();
            paged.extend(ids(&page.entries));
            match page.next_before {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        assert_eq!(paged, expect(&|e| e.actor == "bob"));
    }

    pub async fn retention_deletes_only_old_entries_and_never_with_a_plan(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let day = Duration::from_secs(86_400);
        let now = Ts::now();
        let old = now.minus(day * 40);
        // An old plan, skipped whole long ago: retention may prune it.
        let id = s
            .plan_insert(
                &plan(json!({"name": "old", "start": false, "tasks": [
                    {"name": "a", "target": "t", "sleep": "0s"}]})),
                "alice".into(),
                old,
            )
            .await
            .unwrap();
        let task = s.plan_get(id).await.unwrap().tasks[0].id;
        s.task_skip(task, "alice".into(), old).await.unwrap();
        s.audit_sign_in_failed("eve".into(), "wrong", now.minus(day))
            .await
            .unwrap();
        newest_plan(s).await;
        assert_eq!(entries(s).await.len(), 4);

        let cutoff = now.minus(day * 30);
        let scan = s.plan_prune_scan(cutoff, None, 10).await.unwrap();
        let ids: Vec<i64> = scan.prunable.iter().map(|p| p.plan_id).collect();
        assert_eq!(ids, vec![id]);
        assert_eq!(s.plan_prune(&ids, cutoff).await.unwrap().plans, 1);
        // The plan is gone; the record of who submitted and skipped it is
        // not (until it is old itself).
        let left = entries(s).await;
        assert_eq!(left.len(), 4);
        assert_eq!(left[0].subject, format!("plan {id} old"));

        // In batches: one at a time, oldest first, only the old ones.
        assert_eq!(s.audit_prune(cutoff, 1).await.unwrap(), 1);
        assert_eq!(s.audit_prune(cutoff, 1).await.unwrap(), 1);
        assert_eq!(s.audit_prune(cutoff, 1).await.unwrap(), 0);
        let left = entries(s).await;
        assert_eq!(left.len(), 2, "eve's and the newest plan's");
        assert_eq!(left[0].actor, "eve");
    }

    pub async fn an_action_that_rolls_back_leaves_no_entry(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let s = s.as_ref();
        let id = s
            .plan_insert(
                &plan(json!({"name": "p", "start": false, "tasks": [
                    {"name": "a", "target": "db/a", "sleep": "0s"}]})),
                "alice".into(),
                Ts::now(),
            )
            .await
            .unwrap();
        // From now on the audit table refuses every row: an action's
        // entry is the last thing it writes, so its whole change must
        // roll back with it.
        match kind {
            Kind::Sqlite => {
                db.execute(
                    "CREATE TRIGGER audit_refuses BEFORE INSERT ON audit
                     BEGIN SELECT RAISE(ABORT, 'audit refused'); END",
                )
                .await
            }
            Kind::Postgres => {
                db.execute(
                    "CREATE FUNCTION audit_refuses() RETURNS trigger LANGUAGE plpgsql
                     AS $$ BEGIN RAISE EXCEPTION 'audit refused'; END $$",
                )
                .await;
                db.execute(
                    "CREATE TRIGGER audit_refuses BEFORE INSERT ON audit
                     FOR EACH ROW EXECUTE FUNCTION audit_refuses()",
                )
                .await
            }
        }
        let runs = db.count("SELECT COUNT(*) FROM task_run").await;
        let e = s.plan_start(id, OPS, Ts::now()).await.unwrap_err();
        assert!(matches!(e, StoreError::Database(_)), "{e}");
        let e = s.target_pause("db/a", OPS, Ts::now()).await.unwrap_err();
        assert!(matches!(e, StoreError::Database(_)), "{e}");
        assert_eq!(
            db.count("SELECT COUNT(*) FROM task_run").await,
            runs,
            "not started"
        );
        assert_eq!(
            db.count("SELECT COUNT(*) FROM target_setting").await,
            0,
            "not paused"
        );
        assert_eq!(
            db.count("SELECT COUNT(*) FROM audit").await,
            1,
            "the submit's only"
        );
        // The store works on once the table takes rows again.
        match kind {
            Kind::Sqlite => db.execute("DROP TRIGGER audit_refuses").await,
            Kind::Postgres => db.execute("DROP TRIGGER audit_refuses ON audit").await,
        }
        s.target_pause("db/a", OPS, Ts::now()).await.unwrap();
        assert_eq!(db.count("SELECT COUNT(*) FROM audit").await, 2);
    }
}
