//! Which creations wait for a promotion round in progress, and that claims
//! wait for each other.
//!
//! A round holds [`PROMOTER_LOCK`] exclusively until it commits. A new
//! versioned run could hold back a run the round is promoting (the version
//! gate), so its creation must wait for the round; an unversioned run holds
//! nothing back, so a submit without versions need not wait, and waits
//! (briefly) only to admit its runs (docs/design.md, "Admission").
//! Waiting is read from `pg_locks`, not from a clock.

use std::sync::Arc;
use std::time::Duration;

use super::{CLAIM_LOCK, PROMOTE, PROMOTER_LOCK, PgStore};
use crate::bench::scratch::Scratch;
use crate::plan::{NewPlan, parse_json};
use crate::store::signals::{CHANNEL, Signal};
use crate::store::submission::{IdempotencyKey, Submitted};
use crate::store::{Claim, Result, Store};
use domain::gates::NodeLabels;
use domain::time::Ts;

/// A migrated scratch database and its store.
pub(super) async fn store() -> (Scratch, PgStore) {
    let scratch = Scratch::postgres_for_tests().await;
    let store = PgStore::connect(&scratch.url).await.expect("connect");
    store.migrate().await.expect("migrate");
    (scratch, store)
}

fn plan(name: &str, version: Option<&str>) -> NewPlan {
    let mut task = serde_json::json!({"name": "t", "target": "db/a", "sleep": "0s"});
    if let Some(version) = version {
        task["version"] = version.into();
    }
    let body = serde_json::json!({"name": name, "tasks": [task]});
    parse_json(body.to_string().as_bytes()).expect("a valid plan")
}

/// Requests for the promoter's lock that are waiting.
async fn waiting_for_round(store: &PgStore) -> i64 {
    waiting_for(store, PROMOTER_LOCK).await
}

/// Requests for the advisory lock `key` that are waiting.
async fn waiting_for(store: &PgStore, key: i64) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
            AND ((classid::bigint << 32) | objid::bigint) = $1",
    )
    .bind(key)
    .fetch_one(&store.pool)
    .await
    .expect("pg_locks")
}

/// Submits `plan` in the background and watches `pg_locks` until it either
/// finished (`false`) or asked for the promoter's lock and waits (`true`).
async fn waits_for_round(
    store: &Arc<PgStore>,
    plan: NewPlan,
) -> (bool, tokio::task::JoinHandle<Result<i64>>) {
    let submit = tokio::spawn({
        let store = store.clone();
        async move { store.plan_insert(&plan, "test".into(), Ts::now()).await }
    });
    loop {
        if waiting_for_round(store).await > 0 {
            return (true, submit);
        }
        if submit.is_finished() {
            return (false, submit);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn only_a_versioned_submit_waits_for_a_promotion_round() {
    let (scratch, store) = store().await;
    let store = Arc::new(store);
    let mut round = store.pool.begin().await.expect("begin");
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(PROMOTER_LOCK)
        .execute(&mut *round)
        .await
        .expect("the round's lock");

    let (waited, plain) = waits_for_round(&store, plan("plain", None)).await;
    assert!(!waited, "an unversioned submit waited for the round");
    plain
        .await
        .expect("joined")
        .expect("the unversioned submit");

    let (waited, versioned) = waits_for_round(&store, plan("versioned", Some("0002"))).await;
    assert!(
        waited,
        "a versioned submit went through while a round held the lock"
    );
    assert!(!versioned.is_finished());
    round.commit().await.expect("the round ends");
    versioned
        .await
        .expect("joined")
        .expect("the versioned submit, once the round ended");
    let plans = store.plan_list(None, None, 10, 0).await.expect("list");
    assert_eq!(plans.total, 2);
    drop(store);
    scratch.drop_database().await.expect("drop");
}

/// The round's transaction alone commits without waiting for the disk
/// (`ROUND_BEGIN`): its connection goes back to the pool for claims and
/// finishes, which must wait.
#[tokio::test]
async fn only_the_round_itself_commits_asynchronously() {
    let scratch = Scratch::postgres_for_tests().await;
    // One connection, so the transaction after the round runs on it.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&scratch.url)
        .await
        .expect("connect");
    let store = PgStore {
        pool: pool.clone(),
        liveness: pool.clone(),
        shared: Default::default(),
    };
    let show = "SHOW synchronous_commit";
    let before: String = sqlx::query_scalar(show)
        .fetch_one(&pool)
        .await
        .expect("show");
    let mut round = crate::store::engine::Dialect::round_begin(&store)
        .await
        .expect("the round's lock");
    let during: String = sqlx::query_scalar(show)
        .fetch_one(&mut *round)
        .await
        .expect("show");
    assert_eq!(during, "off");
    round.commit().await.expect("the round ends");
    let after: String = sqlx::query_scalar(show)
        .fetch_one(&pool)
        .await
        .expect("show");
    assert_eq!(after, before, "the round's setting outlived it");
    pool.close().await;
    scratch.drop_database().await.expect("drop");
}

/// A round started while another holds the lock reads no runs and
/// promotes nothing; once the holder is gone the next round promotes.
#[tokio::test]
async fn a_round_that_finds_the_lock_taken_does_nothing() {
    let (scratch, store) = store().await;
    store
        .plan_insert(&plan("later", None), "test".into(), Ts::now())
        .await
        .expect("submit");
    let first = crate::store::engine::Dialect::round_begin(&store)
        .await
        .expect("the first round");
    let second = store
        .run_promote_round(&NodeLabels::default(), None, Ts::now())
        .await
        .expect("the second round");
    assert_eq!((second.promoted, second.waiting), (0, 0));
    first.rollback().await.expect("the first round ends");
    let third = store
        .run_promote_round(&NodeLabels::default(), None, Ts::now())
        .await
        .expect("the third round");
    assert_eq!(third.promoted, 1);
    drop(store);
    scratch.drop_database().await.expect("drop");
}

/// A plan admission would make AVAILABLE: enough shared tasks, each on a
/// target of its own.
fn admissible(name: &str) -> NewPlan {
    admissible_of(name, crate::plan::MIN_ADMITTED_RUNS)
}

/// A plan of `n` shared no-op tasks, each on a target of its own: every
/// run admitted at its submit when the promotion lock is free.
pub(super) fn admissible_of(name: &str, n: usize) -> NewPlan {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            serde_json::json!({"name": format!("t{i}"), "target": format!("{name}/{i}"),
                "exclusive": false, "sleep": "0s"})
        })
        .collect();
    let body = serde_json::json!({"name": name, "tasks": tasks});
    parse_json(body.to_string().as_bytes()).expect("a valid plan")
}

/// Submits [`admissible`] plan `name` with an idempotency key of its own
/// (a keyed submit only tries the promotion lock); the new plan's id.
async fn keyed_submit(store: &PgStore, name: &str) -> i64 {
    let key = IdempotencyKey {
        key: name,
        body_sha256: "0".repeat(64),
    };
    match store
        .plan_insert_keyed(&admissible(name), "test".into(), Ts::now(), &key)
        .await
        .expect("submitted")
    {
        Submitted::Created(id) => id,
        other => panic!("not created: {other:?}"),
    }
}

/// How many of plan `id`'s runs are AVAILABLE and how many PENDING.
async fn available_and_pending(store: &PgStore, id: i64) -> (i64, i64) {
    sqlx::query_as(
        "SELECT COUNT(*) FILTER (WHERE status = 'AVAILABLE'),
            COUNT(*) FILTER (WHERE status = 'PENDING')
         FROM task_run WHERE plan_id = $1",
    )
    .bind(id)
    .fetch_one(&store.pool)
    .await
    .expect("count")
}

/// A submit admits runs only holding the round's lock (docs/design.md,
/// "Admission"): it waits for a short round, then admits; one held past
/// its wait leaves every run PENDING, and so does a keyed submit, which
/// only tries the lock. A round that meets the lock taken says so.
#[tokio::test]
async fn a_submit_admits_only_holding_the_rounds_lock() {
    let (scratch, store) = store().await;
    let store = Arc::new(store);
    let n = crate::plan::MIN_ADMITTED_RUNS as i64;
    // A round in progress: the submit waits for it, then admits.
    let round = crate::store::engine::Dialect::round_begin(store.as_ref())
        .await
        .expect("a round");
    // Asked before the submit starts its wait of 50 ms, which a round
    // run inside it could outlast on a slow machine.
    let busy = store
        .run_promote_round(&NodeLabels::default(), None, Ts::now())
        .await
        .expect("a round meeting the lock taken");
    assert!(busy.lock_busy, "the round did not say the lock was taken");
    let submit = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .plan_insert(&admissible("waited"), "test".into(), Ts::now())
                .await
        }
    });
    while waiting_for_round(&store).await == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    round.rollback().await.expect("the round ends");
    let waited = submit.await.expect("joined").expect("submitted");
    assert_eq!(available_and_pending(&store, waited).await, (n, 0));
    // A round held past the submit's wait: nothing admitted.
    let round = crate::store::engine::Dialect::round_begin(store.as_ref())
        .await
        .expect("a round");
    let late = store
        .plan_insert(&admissible("late"), "test".into(), Ts::now())
        .await
        .expect("submitted");
    assert_eq!(available_and_pending(&store, late).await, (0, n));
    let keyed = keyed_submit(&store, "keyed").await;
    assert_eq!(available_and_pending(&store, keyed).await, (0, n));
    round.rollback().await.expect("the round ends");
    let free = keyed_submit(&store, "free").await;
    assert_eq!(available_and_pending(&store, free).await, (n, 0));
    drop(store);
    scratch.drop_database().await.expect("drop");
}

#[test]
fn the_claim_lock_key_spells_baton_c() {
    let key: i64 = claim_lock_key!().parse().expect("an integer");
    assert_eq!(&key.to_be_bytes(), b"\0baton:c");
    assert_eq!(&PROMOTER_LOCK.to_be_bytes(), b"\0baton:p");
    let key: i64 = promoter_lock_key!().parse().expect("an integer");
    assert_eq!(key, PROMOTER_LOCK);
}

/// A plan of `n` no-op tasks, each on a target of its own, promoted: `n`
/// AVAILABLE runs.
async fn available_runs(store: &PgStore, n: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|i| serde_json::json!({"name": format!("t{i}"), "target": format!("x{i}"), "sleep": "0s"}))
        .collect();
    let body = serde_json::json!({"name": "runs", "tasks": tasks});
    let plan = parse_json(body.to_string().as_bytes()).expect("a valid plan");
    store
        .plan_insert(&plan, "test".into(), Ts::now())
        .await
        .expect("submit");
    store
        .run_promote_round(&NodeLabels::default(), None, Ts::now())
        .await
        .expect("promote");
}

/// Another replica's claim, caught in the middle: its transaction holds
/// the claim lock and has taken the oldest AVAILABLE run (returned), not
/// yet committed.
async fn claim_in_progress(
    store: &PgStore,
    replica: &str,
) -> (sqlx::Transaction<'static, sqlx::Postgres>, i64) {
    let mut tx = store.pool.begin().await.expect("begin");
    sqlx::raw_sql(CLAIM_LOCK)
        .execute(&mut *tx)
        .await
        .expect("the claim lock");
    let run: i64 = sqlx::query_scalar(
        "WITH taken AS (
            UPDATE task_run SET status = 'RUNNING', replica_id = $1, started_at = now()
            WHERE id = (SELECT MIN(run_id) FROM available_run) RETURNING id),
        dequeued AS (DELETE FROM available_run WHERE run_id IN (SELECT id FROM taken))
        SELECT id FROM taken",
    )
    .bind(replica)
    .fetch_one(&mut *tx)
    .await
    .expect("the claim takes a run");
    (tx, run)
}

fn claim_as(replica_id: &str) -> Claim<'_> {
    Claim {
        replica_id,
        labels: &[],
        limit: 10,
        heartbeat_timeout: Duration::from_secs(10),
    }
}

/// Claims are serialised by an advisory lock rather than row locks: a claim
/// started while another holds the lock waits for it, then takes only what
/// the first left AVAILABLE.
#[tokio::test]
async fn a_claim_waits_for_the_claim_in_progress() {
    let (scratch, store) = store().await;
    let store = Arc::new(store);
    available_runs(&store, 1).await;
    let (first, _) = claim_in_progress(&store, "r-first").await;
    let second = tokio::spawn({
        let store = store.clone();
        async move { store.run_claim_many(&claim_as("r-second"), Ts::now()).await }
    });
    let key: i64 = claim_lock_key!().parse().expect("an integer");
    while waiting_for(&store, key).await == 0 {
        assert!(!second.is_finished(), "the second claim did not wait");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.commit().await.expect("the first claim ends");
    let claimed = second.await.expect("joined").expect("the second claim");
    assert!(
        claimed.is_empty(),
        "claimed a run already RUNNING: {claimed:?}"
    );
    drop(store);
    scratch.drop_database().await.expect("drop");
}

/// A claim tries the claim lock in its `BEGIN` (`CLAIM_TRIED`); while
/// another claimer holds it, the try fails and the claim takes nothing,
/// even a run that is AVAILABLE and free, until it has waited for the
/// lock. A claim that took runs without the lock would not be serialised.
#[tokio::test]
async fn a_claim_that_finds_the_lock_taken_takes_nothing_until_it_holds_it() {
    let (scratch, store) = store().await;
    let store = Arc::new(store);
    available_runs(&store, 1).await;
    let mut holder = store.pool.begin().await.expect("begin");
    sqlx::raw_sql(CLAIM_LOCK)
        .execute(&mut *holder)
        .await
        .expect("the claim lock");
    let claim = tokio::spawn({
        let store = store.clone();
        async move { store.run_claim_many(&claim_as("r-second"), Ts::now()).await }
    });
    let key: i64 = claim_lock_key!().parse().expect("an integer");
    while waiting_for(&store, key).await == 0 {
        assert!(!claim.is_finished(), "the claim did not wait for the lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status: String = sqlx::query_scalar("SELECT status FROM task_run")
        .fetch_one(&store.pool)
        .await
        .expect("the run");
    assert_eq!(status, "AVAILABLE", "claimed before it held the lock");
    holder.commit().await.expect("the holder lets go");
    let claimed = claim.await.expect("joined").expect("the claim");
    assert_eq!(claimed.len(), 1, "once it holds the lock it claims the run");
    drop(store);
    scratch.drop_database().await.expect("drop");
}

/// A claim is stamped once it holds the claim lock, not when it was asked
/// for: one that waited while a promotion committed must not read as
/// started before that promotion. Stamped when asked, this one started
/// before its run was AVAILABLE.
#[tokio::test]
async fn a_claim_that_waited_for_the_lock_starts_after_the_promotion() {
    let (scratch, store) = store().await;
    let store = Arc::new(store);
    store
        .plan_insert(&plan("p", None), "test".into(), Ts::now())
        .await
        .expect("submit");
    let mut holder = store.pool.begin().await.expect("begin");
    sqlx::raw_sql(CLAIM_LOCK)
        .execute(&mut *holder)
        .await
        .expect("the claim lock");
    let asked = Ts::now();
    let claim = tokio::spawn({
        let store = store.clone();
        async move { store.run_claim_many(&claim_as("r-late"), asked).await }
    });
    let key: i64 = claim_lock_key!().parse().expect("an integer");
    while waiting_for(&store, key).await == 0 {
        assert!(!claim.is_finished(), "the claim did not wait");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let promoted_at = Ts::now();
    let promoted = store
        .run_promote_round(&NodeLabels::default(), None, promoted_at)
        .await
        .expect("promote");
    assert_eq!(promoted.promoted, 1);
    holder.commit().await.expect("the holder lets go");
    let claimed = claim.await.expect("joined").expect("the claim");
    assert_eq!(claimed.len(), 1, "the waiting claim takes the promoted run");
    assert!(
        claimed[0].started_at > promoted_at,
        "started {} before its promotion at {promoted_at} (asked at {asked})",
        claimed[0].started_at
    );
    drop(store);
    scratch.drop_database().await.expect("drop");
}

/// A claimer frozen inside its claim (holding the lock and the rows it
/// updated) stops nobody for long: past the lock timeout the others claim
/// around it, skipping its rows, and once it ends its run is still its own.
#[tokio::test]
async fn a_claim_goes_around_a_frozen_claimer() {
    let (scratch, store) = store().await;
    available_runs(&store, 3).await;
    let (frozen, first) = claim_in_progress(&store, "r-frozen").await;
    let claim = claim_as("r-live");
    let claimed = tokio::time::timeout(
        Duration::from_secs(30),
        store.run_claim_many(&claim, Ts::now()),
    )
    .await
    .expect("the claim went around the frozen claimer")
    .expect("claim");
    let ids: Vec<i64> = claimed.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), 2, "the two runs the frozen claim did not take");
    assert!(!ids.contains(&first), "took the frozen claim's run");
    frozen.commit().await.expect("the frozen claim ends");
    let owner: String = sqlx::query_scalar("SELECT replica_id FROM task_run WHERE id = $1")
        .bind(first)
        .fetch_one(&store.pool)
        .await
        .expect("owner");
    assert_eq!(owner, "r-frozen");
    // The pool still works: the timed-out transaction was rolled back.
    assert!(
        store
            .run_claim_many(&claim, Ts::now())
            .await
            .expect("claim")
            .is_empty()
    );
    drop(store);
    scratch.drop_database().await.expect("drop");
}

/// A replica's transaction left idle (its COMMIT lost to a partition) is
/// aborted by the server after the replica's `stale_after`, so the
/// promotion lock it held is free again for the other replicas; without
/// the limit it is held for as long as the connection lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_transaction_of_a_cut_off_replica_lets_go_of_its_locks() {
    let (scratch, other) = store().await;
    let limit = Duration::from_millis(300);
    let cut = PgStore::connect_with(&scratch.url, Some(limit))
        .await
        .expect("connect");
    let unlimited = PgStore::connect(&scratch.url).await.expect("connect");
    let mut idle = Vec::new();
    for holder in [&cut, &unlimited] {
        let mut tx = holder.pool.begin().await.expect("begin");
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(PROMOTER_LOCK + if idle.is_empty() { 0 } else { 1 })
            .execute(&mut *tx)
            .await
            .expect("lock");
        idle.push(tx);
    }
    let free = |key: i64| {
        let other = &other;
        async move {
            let mut tx = other.pool.begin().await.expect("begin");
            let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
                .bind(key)
                .fetch_one(&mut *tx)
                .await
                .expect("try lock");
            got
        }
    };
    assert!(
        !free(PROMOTER_LOCK).await,
        "held while the transaction is young"
    );
    tokio::time::sleep(limit * 3).await;
    assert!(free(PROMOTER_LOCK).await, "let go once idle past the limit");
    assert!(!free(PROMOTER_LOCK + 1).await, "held with no limit");
    drop(idle);
    drop((cut, unlimited, other));
    scratch.drop_database().await.expect("drop");
}

/// `n` runs claimed by replica r-1 (ids in order, beats of 10 s each),
/// the first one's row held `FOR UPDATE` by the returned transaction.
async fn first_row_held(
    store: &PgStore,
    n: usize,
) -> (
    Vec<i64>,
    sqlx::Transaction<'static, sqlx::Postgres>,
    Vec<(i64, Duration)>,
) {
    available_runs(store, n).await;
    let claimed = store
        .run_claim_many(&claim_as("r-1"), Ts::now())
        .await
        .expect("claim");
    let mut ids: Vec<i64> = claimed.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    assert_eq!(ids.len(), n);
    let mut outsider = store.pool.begin().await.expect("begin");
    sqlx::query("SELECT id FROM task_run WHERE id = $1 FOR UPDATE")
        .bind(ids[0])
        .execute(&mut *outsider)
        .await
        .expect("the outside lock");
    let beats = ids
        .iter()
        .map(|id| (*id, Duration::from_secs(10)))
        .collect();
    (ids, outsider, beats)
}

/// One run row held by an outside client (`SELECT … FOR UPDATE`, left
/// idle) delays only that run's heartbeat: the replica's other runs are
/// beaten at once, and the held one is reported held, not lost. The beat
/// of all runs was one UPDATE, which waited on the held row, and every
/// run of the replica missed its beat and failed.
#[tokio::test]
async fn a_held_run_row_delays_only_its_own_heartbeat() {
    let (scratch, store) = store().await;
    let (ids, outsider, beats) = first_row_held(&store, 3).await;
    let beaten = tokio::time::timeout(
        Duration::from_secs(5),
        store.run_heartbeat_many("r-1", &beats, Ts::now()),
    )
    .await
    .expect("the beat waited on the held row")
    .expect("beat");
    let mut owned = beaten.owned.clone();
    owned.sort_unstable();
    assert_eq!(owned, ids[1..], "{beaten:?}");
    assert_eq!(beaten.held, [ids[0]], "{beaten:?}");
    outsider.rollback().await.expect("release");
    let beaten = store
        .run_heartbeat_many("r-1", &beats, Ts::now())
        .await
        .expect("beat");
    assert_eq!(beaten.owned.len(), 3, "{beaten:?}");
    assert!(beaten.held.is_empty(), "{beaten:?}");
    // Another replica's beat owns none of them, busy or not.
    let stranger = store
        .run_heartbeat_many("r-2", &beats, Ts::now())
        .await
        .expect("beat");
    assert_eq!(stranger, crate::store::Beaten::default());
    drop(store);
    scratch.drop_database().await.expect("drop");
}

/// A beat of a held run row waits in the row's lock queue: when the
/// outside client lets go during the wait, the beat takes the row and
/// extends its deadline before anyone else can look at it. (The sweeper
/// skips held rows, so a beat that only skipped them could lose the race
/// to it once the lock went, and a live run be failed.)
#[tokio::test]
async fn a_held_run_row_is_beaten_the_moment_it_is_let_go() {
    let (scratch, store) = store().await;
    let (ids, outsider, beats) = first_row_held(&store, 2).await;
    let store = std::sync::Arc::new(store);
    let beat = {
        let store = store.clone();
        tokio::spawn(async move { store.run_heartbeat_many("r-1", &beats, Ts::now()).await })
    };
    // Let go as soon as the beat waits in the row's queue.
    let mut watcher = store.pool.acquire().await.expect("connect");
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE task_run r%'",
            )
            .fetch_one(&mut *watcher)
            .await
            .expect("pg_stat_activity");
            if waiting > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the beat waits for the held row");
    outsider.rollback().await.expect("release");
    let beaten = beat.await.expect("join").expect("beat");
    let mut owned = beaten.owned.clone();
    owned.sort_unstable();
    let mut expected = ids.clone();
    expected.sort_unstable();
    assert_eq!(owned, expected, "{beaten:?}");
    assert!(beaten.held.is_empty(), "{beaten:?}");
    drop(watcher);
    drop(store);
    scratch.drop_database().await.expect("drop");
}

/// Replica r-1's heartbeat row, started at `t0`.
fn replica_r1(t0: Ts) -> crate::store::ReplicaInfo {
    crate::store::ReplicaInfo {
        replica_id: "r-1".into(),
        hostname: "test".into(),
        labels: Vec::new(),
        version: "test".into(),
        started_at: t0,
    }
}

async fn count(store: &PgStore, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(&store.pool)
        .await
        .expect("count")
}

/// A held run row let go between two of its beat's waits, past the row's
/// own deadline, goes to whoever asks first, here a sweep: the sweep
/// spares the run, since the beat that waited out its lock timeout
/// recorded itself beside the row (`held_run_heartbeat`). Before, nobody was
/// in the row's lock queue between one wait and the next, and a sweep
/// that came then failed a live run (seen once in CI, in
/// `outside_locks_fail_no_run_and_stop_no_command`).
#[tokio::test]
async fn a_held_run_row_let_go_between_beats_is_not_swept() {
    let (scratch, store) = store().await;
    let t0 = Ts::now();
    let replica = replica_r1(t0);
    store.replica_upsert(&replica, t0).await.expect("heartbeat");
    let (ids, outsider, beats) = first_row_held(&store, 1).await;
    // The row has been held 10 s, past its deadline; the replica beats on.
    let t1 = t0.plus(Duration::from_secs(10));
    store.replica_upsert(&replica, t1).await.expect("heartbeat");
    let beaten = store
        .run_heartbeat_many("r-1", &beats, t1)
        .await
        .expect("beat");
    assert_eq!(beaten.held, ids, "{beaten:?}");
    // Another replica's beat of the held row is no proof for it.
    let stranger = store
        .run_heartbeat_many("r-2", &beats, t1)
        .await
        .expect("beat");
    assert_eq!(stranger, crate::store::Beaten::default());
    outsider.rollback().await.expect("release");

    let stale_after = Duration::from_secs(60);
    let t2 = t1.plus(Duration::from_secs(1));
    let swept = store.run_sweep(stale_after, None, t2).await.expect("sweep");
    assert!(swept.failed.is_empty(), "a live run was failed: {swept:?}");
    let beaten = store
        .run_heartbeat_many("r-1", &beats, t2)
        .await
        .expect("beat");
    assert_eq!(beaten.owned, ids, "{beaten:?}");

    // A replica that stops beating is judged by the later deadline.
    let t3 = t2.plus(Duration::from_secs(11));
    let swept = store.run_sweep(stale_after, None, t3).await.expect("sweep");
    let past = t2.plus(Duration::from_secs(10)).clock();
    assert_eq!(
        swept.failed,
        [(
            ids[0],
            format!("run heartbeat missed: replica r-1 did not extend it past {past}")
        )]
    );
    let left = count(&store, "SELECT count(*) FROM held_run_heartbeat").await;
    assert_eq!(left, 1, "pruned by the next sweep, once the run ended");
    store.run_sweep(stale_after, None, t3).await.expect("sweep");
    let left = count(&store, "SELECT count(*) FROM held_run_heartbeat").await;
    assert_eq!(left, 0, "a beat beside a run that ended is pruned");
    drop(store);
    scratch.drop_database().await.expect("drop");
}

/// The same for a replica's own row: held, and let go between two of
/// its beat's waits, past the row's stamp. The sweep that takes the row
/// first judges the replica by the beat recorded beside it
/// (`held_replica_heartbeat`) and fails none of its runs; without it,
/// every run of a live replica failed.
#[tokio::test]
async fn a_held_replica_row_let_go_between_beats_is_not_swept() {
    let (scratch, store) = store().await;
    let t0 = Ts::now();
    let replica = replica_r1(t0);
    store.replica_upsert(&replica, t0).await.expect("heartbeat");
    available_runs(&store, 1).await;
    let claimed = store
        .run_claim_many(&claim_as("r-1"), t0)
        .await
        .expect("claim");
    let run = claimed[0].id;
    let mut outsider = store.pool.begin().await.expect("begin");
    sqlx::query("SELECT * FROM replica WHERE replica_id = 'r-1' FOR UPDATE")
        .execute(&mut *outsider)
        .await
        .expect("the outside lock");
    // Held for 20 s, far past the row's stamp; the replica beats on.
    let t1 = t0.plus(Duration::from_secs(20));
    let held = store
        .replica_upsert(&replica, t1)
        .await
        .expect_err("held up");
    assert!(held.is_lock_wait(), "{held}");
    let beaten = store
        .run_heartbeat_many("r-1", &[(run, Duration::from_secs(10))], t1)
        .await
        .expect("beat");
    assert_eq!(beaten.owned, [run], "{beaten:?}");
    outsider.rollback().await.expect("release");

    let stale_after = Duration::from_secs(10);
    let t2 = t1.plus(Duration::from_secs(1));
    let swept = store.run_sweep(stale_after, None, t2).await.expect("sweep");
    assert!(
        swept.failed.is_empty(),
        "a live replica's run failed: {swept:?}"
    );

    // A replica that stops beating is stale from the recorded beat.
    let t3 = t1.plus(Duration::from_secs(11));
    let swept = store.run_sweep(stale_after, None, t3).await.expect("sweep");
    let cause = format!("replica r-1 stopped heart-beating at {}", t1.clock());
    assert_eq!(swept.failed, [(run, cause)]);
    let records = "SELECT count(*) FROM held_replica_heartbeat";
    let left = count(&store, records).await;
    assert_eq!(left, 1, "the replica still has its row");
    store.replica_delete("r-1").await.expect("delete");
    store.run_sweep(stale_after, None, t3).await.expect("sweep");
    let left = count(&store, records).await;
    assert_eq!(left, 0, "a record beside a row that is gone is pruned");
    drop(store);
    scratch.drop_database().await.expect("drop");
}

/// A plan cancel that waits for a round's row locks sees the promoted
/// runs AVAILABLE once the round commits, and must take their queue rows
/// out too, although the round inserted them after the cancel's statement
/// began (`runs_cancel` deletes them in a statement of its own). Before,
/// the rows stayed queued for runs that were CANCELED.
#[tokio::test]
async fn a_cancel_that_waited_for_a_round_dequeues_what_it_promoted() {
    let (scratch, store) = store().await;
    let store = Arc::new(store);
    let plan_id = store
        .plan_insert(&plan("racing", None), "test".into(), Ts::now())
        .await
        .expect("submit");
    // A round in progress: the run promoted and queued by the round's own
    // statement, not yet committed.
    let runs: Vec<i64> = sqlx::query_scalar("SELECT id FROM task_run WHERE plan_id = $1")
        .bind(plan_id)
        .fetch_all(&store.pool)
        .await
        .expect("the plan's run");
    let mut round = store.begin(PROMOTE.begin).await.expect("begin");
    let promoted: i64 = sqlx::query_scalar(PROMOTE.sql)
        .bind(&runs)
        .bind(Ts::now())
        .bind(CHANNEL)
        .bind(Signal::Available.payload())
        .fetch_one(&mut *round)
        .await
        .expect("the round promotes");
    assert_eq!(promoted, 1, "the round promoted the run");
    let cancel = tokio::spawn({
        let store = store.clone();
        async move { store.plan_cancel(plan_id, "ops".into(), Ts::now()).await }
    });
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&store.pool)
        .await
        .expect("pg_stat_activity");
        if waiting > 0 {
            break;
        }
        assert!(
            !cancel.is_finished(),
            "the cancel did not wait for the round"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    round.commit().await.expect("the round commits");
    cancel.await.expect("joined").expect("the cancel");
    let (canceled, queued): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM task_run WHERE plan_id = $1 AND status = 'CANCELED'),
            (SELECT COUNT(*) FROM available_run)",
    )
    .bind(plan_id)
    .fetch_one(&store.pool)
    .await
    .expect("read back");
    assert_eq!(
        (canceled, queued),
        (1, 0),
        "CANCELED runs and queue rows left after the cancel"
    );
    drop(store);
    scratch.drop_database().await.expect("drop");
}
