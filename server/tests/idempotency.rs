//! Idempotent submits on both backends: a repeated submit with the same
//! `Idempotency-Key` and document answers the first plan; the key with
//! another document is refused; racing submits with one key make one plan;
//! a key counts for 24 hours.

mod common;

use std::time::Duration;

use baton::store::{IdempotencyKey, Submitted};
use common::server::Server;
use common::{Kind, plan};
use domain::model::PlanList;
use serde_json::{Value, json};

per_backend!(cases:
    the_same_key_and_document_answer_the_first_plan,
    racing_submits_with_one_key_make_one_plan,
);

fn document(name: &str) -> String {
    json!({"name": name, "tasks": [{"name": "a", "target": "t", "run_at": "2999-01-01T00:00:00Z", "sleep": "0s"}]})
        .to_string()
}

async fn submit(s: &Server, key: Option<&str>, body: &str) -> (u16, Value) {
    let mut request = s
        .http
        .post(format!("{}/api/v1/plans", s.base))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let r = request.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn plan_count(s: &Server) -> i64 {
    let list: PlanList = s.get("/api/v1/plans").await;
    list.total
}

mod cases {
    use super::*;

    pub async fn the_same_key_and_document_answer_the_first_plan(kind: Kind) {
        let s = Server::start(kind).await;
        let (status, first) = submit(&s, Some("release-42-abc"), &document("p")).await;
        assert_eq!(status, 201, "{first}");
        let (status, again) = submit(&s, Some("release-42-abc"), &document("p")).await;
        assert_eq!(status, 200, "a replay, not a creation: {again}");
        assert_eq!(again["id"], first["id"]);
        assert_eq!(plan_count(&s).await, 1);

        let (status, body) = submit(&s, Some("release-42-abc"), &document("other")).await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["field"], "Idempotency-Key");
        assert_eq!(plan_count(&s).await, 1, "nothing stored");

        for bad in ["has space", &"k".repeat(256)] {
            let (status, body) = submit(&s, Some(bad), &document("p")).await;
            assert_eq!(status, 422, "{bad}: {body}");
            assert_eq!(body["field"], "Idempotency-Key");
        }
        // Without a key every submit is a new plan, as before.
        submit(&s, None, &document("p")).await;
        submit(&s, None, &document("p")).await;
        assert_eq!(plan_count(&s).await, 3);

        // A day later the key is free again (and its record is gone).
        let key = IdempotencyKey {
            key: "release-42-abc",
            body_sha256: "0".repeat(64),
        };
        let later = common::now().plus(Duration::from_secs(25 * 60 * 60));
        let made = s
            .store
            .plan_insert_keyed(&plan(json!({"name": "later", "tasks": [{"name": "a", "target": "t", "sleep": "0s"}]})), "t".into(), later, &key)
            .await
            .unwrap();
        let Submitted::Created(id) = made else {
            panic!("{made:?}")
        };
        assert_ne!(Some(id), first["id"].as_i64());
    }

    pub async fn racing_submits_with_one_key_make_one_plan(kind: Kind) {
        let s = Server::start(kind).await;
        for round in 0..5 {
            let key = format!("race-{round}");
            let body = document(&format!("race-{round}"));
            let answers =
                futures_util::future::join_all((0..16).map(|_| submit(&s, Some(&key), &body)))
                    .await;
            let created = answers.iter().filter(|(status, _)| *status == 201).count();
            assert_eq!(created, 1, "{answers:?}");
            let ids: std::collections::HashSet<_> = answers
                .iter()
                .map(|(_, b)| b["id"].as_i64().unwrap())
                .collect();
            assert_eq!(ids.len(), 1, "every racer got the one plan: {answers:?}");
        }
        assert_eq!(plan_count(&s).await, 5);
    }
}
