//! `baton submit` and `baton status` against a real `baton serve`: a plan
//! file goes in, `--wait` follows it to DONE or FAILED with the matching
//! exit code, a bad file is refused naming the field and writes nothing,
//! and `status` shows what the API shows.

mod common;

use std::process::Output;

use common::process::{Baton, Options, spawn_baton};
use common::{Kind, TestDb};

/// Runs `baton ARGS` against `server`, from a directory holding `files`.
async fn baton(server: &Baton, dir: &tempfile::TempDir, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(args)
        .env("BATON_SERVER", &server.base)
        .env_remove("RUST_BACKTRACE")
        .current_dir(dir.path())
        .output()
        .await
        .expect("run baton")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A plan halted behind a failed task ends `submit --wait` and `status
/// --wait` with exit 1 and the blocked tasks, instead of following it
/// forever (a CI job hung there), and the lists call it HALTED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_halted_plan_ends_the_wait_and_says_why() {
    let db = TestDb::new(Kind::Sqlite).await;
    let server = spawn_baton(db.url()).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("halts.yaml"),
        "name: halts\n\
         tasks:\n\
         \x20 - name: migrate\n\
         \x20   target: db/orders\n\
         \x20   command: {argv: [sh, -c, \"echo applying; echo ERROR: deadlock detected >&2; exit 3\"]}\n\
         \x20 - name: deploy\n\
         \x20   target: web\n\
         \x20   sleep: 0s\n\
         \x20   depends_on: [migrate]\n",
    )
    .unwrap();
    let within = std::time::Duration::from_secs(60);
    let out = tokio::time::timeout(
        within,
        baton(&server, &dir, &["submit", "halts.yaml", "--wait"]),
    )
    .await
    .expect("submit --wait returns on a halted plan");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "error: plan 1 halts is HALTED: nothing can move until a task is retried or skipped\n  \
             deploy: blocked: dependency migrate FAILED — retry or skip it"
        ),
        "{stderr}"
    );
    // The failure says why where people look: its error quotes stderr.
    assert!(
        stderr.contains("migrate #1 FAILED: exited with code 3: ERROR: deadlock detected"),
        "{stderr}"
    );

    let out = tokio::time::timeout(within, baton(&server, &dir, &["status", "1", "--wait"]))
        .await
        .expect("status --wait returns on a halted plan");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("is HALTED"));

    for filter in ["HALTED", "failed"] {
        let out = baton(&server, &dir, &["status", "--status", filter]).await;
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(
            stdout
                .lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("1   halts  HALTED")),
            "{filter}: {stdout}"
        );
    }

    // /metrics counts it (before, checked only at 0).
    let metrics = reqwest::get(format!("{}/metrics", server.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.lines().any(|l| l == "baton_plans_halted 1"),
        "{metrics}"
    );

    // The incident from the command line: the log, a retry by task name
    // (the table shows the state after it), the retry's log followed to
    // its end, then a skip that lets the plan finish.
    let out = baton(&server, &dir, &["logs", "1"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout);
    assert!(
        log.contains("applying") && log.contains("ERROR: deadlock detected"),
        "{log}"
    );
    let out = baton(&server, &dir, &["retry", "1", "migrate"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.starts_with("plan 1 halts: RUNNING"), "{stdout}");
    let out = baton(&server, &dir, &["status", "1", "--json"]).await;
    let view: domain::model::PlanView = serde_json::from_slice(&out.stdout).unwrap();
    let retry = view.tasks[0].run_id.unwrap();
    let out = tokio::time::timeout(
        within,
        baton(&server, &dir, &["logs", &retry.to_string(), "--follow"]),
    )
    .await
    .expect("logs --follow returns when the run ends");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("ERROR: deadlock detected"));
    assert!(
        text(&out.stderr).contains(&format!(
            "error: run {retry} ended FAILED: exited with code 3: ERROR: deadlock detected"
        )),
        "{}",
        text(&out.stderr)
    );
    let out = baton(&server, &dir, &["skip", "1"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("name the task to skip"));
    let out = baton(&server, &dir, &["skip", "1", "nope"]).await;
    assert!(
        text(&out.stderr).contains("plan 1 has no task named nope (its tasks: migrate, deploy)"),
        "{}",
        text(&out.stderr)
    );
    let out = baton(&server, &dir, &["skip", "1", "migrate"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = tokio::time::timeout(within, baton(&server, &dir, &["status", "1", "--wait"]))
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    let out = baton(&server, &dir, &["completions", "bash"]).await;
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("baton__subcmd__logs"),
        "a bash script naming the commands"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_waits_for_the_plan_and_status_shows_it() {
    let db = TestDb::new(Kind::Sqlite).await;
    let server = spawn_baton(db.url()).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("release.yaml"),
        "name: cli-release\n\
         parallel_limit: 1\n\
         tasks:\n\
         \x20 - name: migrate\n\
         \x20   target: db/orders\n\
         \x20   command: {argv: [sh, -c, \"echo migrating\"]}\n\
         \x20 - name: deploy\n\
         \x20   target: web\n\
         \x20   sleep: 0s\n",
    )
    .unwrap();

    let out = baton(&server, &dir, &["submit", "release.yaml", "--wait"]).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    assert!(stdout.starts_with("plan 1 cli-release: "), "{stdout}");
    assert!(
        stdout.contains(&format!("{}/plans/1", server.base)),
        "{stdout}"
    );
    assert!(stdout.contains("migrate  db/orders"), "{stdout}");
    assert!(stderr.contains("migrate #1 DONE"), "{stderr}");
    assert!(stderr.contains("deploy #1 DONE"), "{stderr}");
    // No terminal here: the progress comes as plain lines, the last one
    // with every task done.
    assert!(
        stderr.contains("progress: 2/2 tasks done, 0 running, 0 waiting"),
        "{stderr}"
    );

    let out = baton(&server, &dir, &["status"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success());
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("ID  NAME"), "{stdout}");
    assert!(
        lines[1].starts_with("1   cli-release  DONE    2 DONE"),
        "{stdout}"
    );

    let out = baton(&server, &dir, &["status", "1", "--json"]).await;
    let view: domain::model::PlanView = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(view.status, domain::model::PlanStatus::Done);
    assert_eq!(view.tasks.len(), 2);

    // `plan export` gives back a file that `submit` takes: the same plan.
    for (flag, file) in [(None, "again.json"), (Some("--yaml"), "again.yaml")] {
        let mut args = vec!["plan", "export", "1"];
        args.extend(flag);
        let out = baton(&server, &dir, &args).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
        std::fs::write(dir.path().join(file), &out.stdout).unwrap();
        let out = baton(&server, &dir, &["submit", file, "--wait"]).await;
        assert!(out.status.success(), "{file}: {}", text(&out.stderr));
    }
    let exported = |id: &'static str| {
        let (server, dir) = (&server, &dir);
        async move { text(&baton(server, dir, &["plan", "export", id]).await.stdout) }
    };
    let first = exported("1").await;
    assert!(first.contains("\"parallel_limit\": 1"), "{first}");
    assert_eq!(exported("2").await, first);
    assert_eq!(exported("3").await, first);
    let out = baton(&server, &dir, &["plan", "export", "99"]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("plan 99 does not exist"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_pause_and_target_commands_work_the_gates() {
    let db = TestDb::new(Kind::Sqlite).await;
    let server = spawn_baton(db.url()).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gated.yaml"),
        "name: gated\n\
         stages: [{name: migrate}, {name: deploy, approval: required}]\n\
         tasks:\n\
         \x20 - {name: migrate, stage: migrate, target: db/orders, sleep: 0s}\n\
         \x20 - {name: deploy, stage: deploy, target: svc/api, sleep: 0s}\n",
    )
    .unwrap();
    let out = baton(&server, &dir, &["submit", "gated.yaml"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let waiting =
        |view: &domain::model::PlanView| view.tasks[1].waiting_cause.clone().unwrap_or_default();
    let status = || async {
        let out = baton(&server, &dir, &["status", "1", "--json"]).await;
        serde_json::from_slice::<domain::model::PlanView>(&out.stdout).unwrap()
    };
    common::eventually(
        std::time::Duration::from_secs(10),
        "waits for approval",
        || async { (waiting(&status().await) == "waits for approval").then_some(()) },
    )
    .await;

    // Paused, the approved deploy still does not start.
    let out = baton(&server, &dir, &["pause", "1"]).await;
    assert!(
        text(&out.stdout).contains("paused by anonymous"),
        "{}",
        text(&out.stdout)
    );
    let out = baton(&server, &dir, &["paused"]).await;
    assert!(text(&out.stdout).contains("gated"), "{}", text(&out.stdout));
    let out = baton(&server, &dir, &["approve", "1", "deploy"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = baton(&server, &dir, &["approve", "1", "deploy"]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("already approved by anonymous"),
        "{}",
        text(&out.stderr)
    );
    common::eventually(std::time::Duration::from_secs(10), "paused", || async {
        waiting(&status().await)
            .starts_with("plan paused by anonymous")
            .then_some(())
    })
    .await;
    let out = baton(&server, &dir, &["resume", "1"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    common::eventually(std::time::Duration::from_secs(10), "plan DONE", || async {
        (status().await.status == domain::model::PlanStatus::Done).then_some(())
    })
    .await;

    // Targets: a capacity, a pause, the list; nonsense refused.
    let out = baton(&server, &dir, &["target", "capacity", "pool/gpu", "2"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = baton(&server, &dir, &["target", "pause", "pool/gpu"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = baton(&server, &dir, &["target", "list"]).await;
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("pool/gpu") && stdout.contains("by anonymous"),
        "{stdout}"
    );
    let out = baton(&server, &dir, &["target", "capacity", "pool/gpu", "0"]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("capacity must be between 1"),
        "{}",
        text(&out.stderr)
    );
    let out = baton(&server, &dir, &["target", "capacity", "pool/gpu", "lots"]).await;
    assert!(
        text(&out.stderr).contains("whole number or `none`"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_commands_create_show_pause_trigger_and_delete() {
    let db = TestDb::new(Kind::Sqlite).await;
    let server = spawn_baton(db.url()).await;
    let dir = tempfile::tempdir().unwrap();
    let file = |cron: &str, zone: &str| {
        format!(
            "name: nightly\ncron: '{cron}'\ntime_zone: {zone}\nparams: {{db: orders}}\n\
             plan:\n\x20 name: vacuum ${{db}} ${{date}}\n\
             \x20 tasks: [{{name: vacuum, target: 'db/${{db}}', sleep: 0s}}]\n"
        )
    };
    std::fs::write(
        dir.path().join("bad.yaml"),
        file("30 2 * * *", "Europe/Berln"),
    )
    .unwrap();
    let out = baton(&server, &dir, &["schedule", "create", "bad.yaml"]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("(at `time_zone`)"),
        "{}",
        text(&out.stderr)
    );
    let out = baton(&server, &dir, &["schedule", "list"]).await;
    assert_eq!(text(&out.stdout), "no schedules\n", "nothing stored");

    std::fs::write(
        dir.path().join("nightly.yaml"),
        file("30 2 * * *", "Europe/Berlin"),
    )
    .unwrap();
    let out = baton(&server, &dir, &["schedule", "create", "nightly.yaml"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("schedule 1 nightly") && stdout.matches("next  ").count() == 5,
        "{stdout}"
    );
    let out = baton(&server, &dir, &["schedule", "pause", "nightly"]).await;
    assert!(
        text(&out.stdout).contains("paused by anonymous"),
        "{}",
        text(&out.stdout)
    );
    let out = baton(&server, &dir, &["schedule", "list"]).await;
    assert!(
        text(&out.stdout).contains("paused by anonymous"),
        "{}",
        text(&out.stdout)
    );
    let out = baton(&server, &dir, &["schedule", "resume", "1"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = baton(&server, &dir, &["schedule", "trigger", "nightly"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("vacuum orders"),
        "{}",
        text(&out.stdout)
    );
    let out = baton(&server, &dir, &["schedule", "show", "nightly", "--json"]).await;
    let view: domain::model::ScheduleView = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((view.plans.len(), view.plans[0].tick_at), (1, None));
    assert_eq!(view.time_zone, "Europe/Berlin");
    std::fs::write(dir.path().join("hourly.yaml"), file("0 * * * *", "UTC")).unwrap();
    let out = baton(
        &server,
        &dir,
        &["schedule", "update", "nightly", "hourly.yaml"],
    )
    .await;
    assert!(
        text(&out.stdout).contains("0 * * * *"),
        "{}",
        text(&out.stdout)
    );
    let out = baton(&server, &dir, &["schedule", "delete", "nightly"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = baton(&server, &dir, &["schedule", "show", "1"]).await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("404"), "{}", text(&out.stderr));
    let out = baton(&server, &dir, &["status", "1", "--json"]).await;
    assert!(out.status.success(), "the triggered plan stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_plan_exits_non_zero_and_a_bad_file_writes_nothing() {
    let db = TestDb::new(Kind::Sqlite).await;
    let server = spawn_baton(db.url()).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "name: bad\ntasks:\n  - name: x\n    target: t\n    sleep: 1s\n    timeout: soon\n",
    )
    .unwrap();
    let out = baton(&server, &dir, &["submit", "bad.yaml"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("bad.yaml was not submitted"), "{stderr}");
    assert!(stderr.contains("422"), "{stderr}");
    assert!(stderr.contains("(at `tasks[0].timeout`)"), "{stderr}");
    let store = db.store().await;
    let plans = store.plan_list(None, None, 10, 0).await.unwrap();
    assert_eq!(plans.total, 0, "a refused plan writes nothing");

    std::fs::write(
        dir.path().join("fails.json"),
        r#"{"name": "fails", "tasks": [{"name": "boom", "target": "t",
            "command": {"argv": ["sh", "-c", "exit 3"]}}]}"#,
    )
    .unwrap();
    let out = baton(&server, &dir, &["submit", "fails.json", "--wait"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("boom #1 FAILED"), "{stderr}");
    assert!(stderr.contains("plan 1 fails ended FAILED"), "{stderr}");

    let out = baton(&server, &dir, &["status", "--status", "sideways"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("`sideways` is not a plan status") && stderr.contains("(at `status`)"),
        "{stderr}"
    );
}

/// `baton runs` lists what the search finds, and `--act` retries it only
/// at the count expected, refusing to guess without a terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_lists_the_search_and_acts_on_it_at_the_count_expected() {
    let db = TestDb::new(Kind::Sqlite).await;
    let server = spawn_baton(db.url()).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fails.json"),
        r#"{"name": "cli-runs", "tasks": [
            {"name": "boom", "target": "db/a", "command": {"argv": ["sh", "-c", "exit 3"]}},
            {"name": "ok", "target": "db/b", "sleep": "0s"}]}"#,
    )
    .unwrap();
    let out = baton(&server, &dir, &["submit", "fails.json", "--wait"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));

    let out = baton(
        &server,
        &dir,
        &["runs", "--target", "db/", "--status", "failed"],
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("boom #1") && stdout.contains("exited with code 3"),
        "{stdout}"
    );
    assert!(!stdout.contains("ok #1"), "{stdout}");
    let out = baton(&server, &dir, &["runs", "--limit", "1"]).await;
    assert!(
        text(&out.stdout).contains("(more: --before "),
        "{}",
        text(&out.stdout)
    );

    // No terminal: it says how many and asks for the count.
    let out = baton(
        &server,
        &dir,
        &["runs", "--status", "failed", "--act", "retry"],
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("1 run would be retried; pass --expect 1"),
        "{stderr}"
    );
    let out = baton(
        &server,
        &dir,
        &[
            "runs", "--status", "failed", "--act", "retry", "--expect", "2",
        ],
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("now matches 1 run to retry, you saw 2"),
        "{stderr}"
    );
    let out = baton(
        &server,
        &dir,
        &[
            "runs", "--status", "failed", "--act", "retry", "--expect", "1",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "retried 1 run\n");
    let store = db.store().await;
    let plan = store.plan_get(1).await.unwrap();
    let boom = plan.tasks.iter().find(|t| t.name == "boom").unwrap();
    assert_eq!(boom.attempt, Some(2));

    // `baton audit` lists the bulk retry and the refusal before it, from
    // this machine, newest first; a filter by action keeps only those.
    let out = baton(&server, &dir, &["audit", "--action", "runs."]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "a header and two entries: {stdout}");
    assert!(
        lines[1].contains("runs.bulk_retry") && lines[1].contains("1 run"),
        "{stdout}"
    );
    assert!(lines[1].contains("127.0.0.1"), "{stdout}");
    assert!(
        lines[2].contains("runs.bulk_retry (refused)") && lines[2].contains("you saw 2"),
        "{stdout}"
    );
    let out = baton(&server, &dir, &["audit", "--json", "--limit", "1"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(page["entries"][0]["action"], "runs.bulk_retry");
    assert!(page["next_before"].is_i64(), "{page}");
    let out = baton(&server, &dir, &["audit", "--since", "someday"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("since"), "{}", text(&out.stderr));
}

/// `baton plans` (`baton status`) lists by status and name, and `--act`
/// retries the runs of the plans listed only at the count expected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_act_retries_the_listed_plans_at_the_count_expected() {
    let db = TestDb::new(Kind::Sqlite).await;
    let server = spawn_baton(db.url()).await;
    let dir = tempfile::tempdir().unwrap();
    for name in ["cli-orders-1", "cli-orders-2", "cli-billing"] {
        let file = format!("{name}.json");
        std::fs::write(
            dir.path().join(&file),
            format!(
                r#"{{"name": "{name}", "tasks": [
                    {{"name": "boom", "target": "db/{name}", "command": {{"argv": ["sh", "-c", "exit 3"]}}}}]}}"#
            ),
        )
        .unwrap();
        let out = baton(&server, &dir, &["submit", &file, "--wait"]).await;
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    }
    let out = baton(
        &server,
        &dir,
        &["plans", "--status", "failed", "--name", "ORDERS"],
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("cli-orders-1") && stdout.contains("cli-orders-2"),
        "{stdout}"
    );
    assert!(!stdout.contains("cli-billing"), "{stdout}");

    let act = |expect: Option<&'static str>| {
        let mut args = vec![
            "plans", "--status", "failed", "--name", "orders", "--act", "retry",
        ];
        if let Some(n) = expect {
            args.extend(["--expect", n]);
        }
        args
    };
    // No terminal: it says how many and asks for the count.
    let out = baton(&server, &dir, &act(None)).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("2 runs would be retried; pass --expect 2"),
        "{stderr}"
    );
    let out = baton(&server, &dir, &act(Some("3"))).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("now matches 2 runs to retry, you saw 3"),
        "{stderr}"
    );
    let out = baton(&server, &dir, &act(Some("2"))).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "retried 2 runs\n");
    let store = db.store().await;
    for (id, attempt) in [(1, 2), (2, 2), (3, 1)] {
        let plan = store.plan_get(id).await.unwrap();
        assert_eq!(plan.tasks[0].attempt, Some(attempt), "{}", plan.name);
    }
    // A filter that narrows nothing is refused, naming it.
    let out = baton(&server, &dir, &["status", "--act", "cancel", "--yes"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("needs a filter") && stderr.contains("`filter`"),
        "{stderr}"
    );
}

/// `baton hash-password` and `baton new-token` make what the users file
/// holds: a hash the server verifies, a token whose hash is printed.
#[test]
fn the_secret_commands_print_what_the_users_file_needs() {
    use std::io::Write;
    use std::process::{Command, Stdio};

    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("hash-password")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"s3cret\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let hash = text(&out.stdout).trim().to_owned();
    let file = format!("users: [{{name: a, role: operator, password_hash: '{hash}'}}]");
    let users = baton::auth::Users::parse(&file).expect("the printed hash is a valid entry");
    assert!(users.get("a").is_some());

    let empty = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("hash-password")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!empty.status.success());
    assert!(text(&empty.stderr).contains("the password is empty"));

    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("new-token")
        .output()
        .unwrap();
    let printed = text(&out.stdout);
    let field = |name: &str| {
        printed
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {printed}"))
            .trim()
            .to_owned()
    };
    let token = field("token:");
    assert_eq!(
        field("token_hash:"),
        baton::auth::token_hash(&token).to_text()
    );
}

/// Against a server with users, the commands send `BATON_TOKEN`, and
/// without it say how to give one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commands_send_the_api_token() {
    let db = TestDb::new(Kind::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let token = baton::auth::new_token().unwrap();
    let users = dir.path().join("users.yaml");
    std::fs::write(
        &users,
        format!(
            "users: [{{name: ci, role: operator, token_hashes: ['{}']}}]",
            baton::auth::token_hash(&token).to_text()
        ),
    )
    .unwrap();
    let options = Options::default()
        .env("BATON_USERS_FILE", users.to_str().unwrap())
        .env("BATON_TOKEN", &token);
    let server = Baton::start(db.url(), &options).await;
    std::fs::write(
        dir.path().join("p.yaml"),
        "name: with-token\ntasks: [{name: a, target: t, sleep: 0s}]\n",
    )
    .unwrap();

    let out = baton(&server, &dir, &["status"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("401") && stderr.contains("BATON_TOKEN"),
        "{stderr}"
    );

    let with_token = |args: &'static [&'static str]| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(args)
            .env("BATON_SERVER", &server.base)
            .env("BATON_TOKEN", &token)
            .current_dir(dir.path())
            .output()
    };
    let out = with_token(&["submit", "p.yaml", "--wait"]).await.unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = with_token(&["status", "1", "--json"]).await.unwrap();
    let view: domain::model::PlanView = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(view.status, domain::model::PlanStatus::Done);
    let run_id = view.tasks[0].run_id.unwrap();
    let run = db.store().await.run_get(run_id).await.unwrap();
    assert_eq!(run.events[0].actor, "ci", "recorded under the token's user");
}

/// `baton submit --idempotency-key` retries a submit whose answer was lost
/// and gets the plan the first try made: a front that passes the first
/// request on but drops the connection before the answer stands in for a
/// network that times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_submit_whose_answer_was_lost_is_retried_into_the_same_plan() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let db = TestDb::new(Kind::Sqlite).await;
    let server = spawn_baton(db.url()).await;
    let upstream = server.base.trim_start_matches("http://").to_owned();
    let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front_url = format!("http://{}", front.local_addr().unwrap());
    let connections = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = front.accept().await {
            let first = counted.fetch_add(1, Ordering::SeqCst) == 0;
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let mut server = tokio::net::TcpStream::connect(upstream).await.unwrap();
                if first {
                    // The request reaches Baton; the answer never comes back.
                    let mut request = vec![0u8; 64 * 1024];
                    let n = client.read(&mut request).await.unwrap();
                    server.write_all(&request[..n]).await.unwrap();
                    let mut answer = vec![0u8; 64 * 1024];
                    let _ = server.read(&mut answer).await;
                    drop(client);
                } else {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("plan.json"),
        r#"{"name": "once", "tasks": [{"name": "a", "target": "t", "sleep": "0s"}]}"#,
    )
    .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "submit",
            "plan.json",
            "--json",
            "--idempotency-key",
            "once-1",
        ])
        .env("BATON_SERVER", &front_url)
        .current_dir(dir.path())
        .output()
        .await
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("trying again with the same Idempotency-Key"),
        "{stderr}"
    );
    assert!(connections.load(Ordering::SeqCst) >= 2);
    let view: domain::model::PlanView = serde_json::from_slice(&out.stdout).unwrap();
    let store = db.store().await;
    let plans = store.plan_list(None, None, 10, 0).await.unwrap();
    assert_eq!(plans.total, 1, "the retry made no second plan");
    assert_eq!(plans.plans[0].id, view.id);
}

/// `baton --version` names the release and the commit it was built from,
/// so an operator can tell which build each replica runs.
#[test]
fn version_names_the_commit() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("--version")
        .output()
        .expect("run baton");
    assert!(out.status.success());
    let line = text(&out.stdout);
    let expected = format!("baton {} (", env!("CARGO_PKG_VERSION"));
    assert!(line.starts_with(&expected), "{line}");
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success());
    match head {
        // Built from this checkout: the commit checked out (the build
        // script reruns when HEAD moves).
        Some(head) => assert!(
            line.contains(&format!("commit {}", text(&head.stdout).trim())),
            "{line}"
        ),
        None => assert!(line.contains("built outside a git checkout"), "{line}"),
    }
}

/// Settings a replica cannot run with stop `baton serve` before it touches
/// the database, naming the setting (a huge duration panicked after the
/// replica had registered, and was listed as dead); `baton submit` reads
/// no more of a plan file than the server would take.
#[test]
fn bad_settings_stop_serve_before_the_database_and_submit_reads_a_bounded_file() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("baton.db");
    let serve_with = |vars: &[(&str, &str)]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env(
                "BATON_DATABASE_URL",
                format!("sqlite://{}", database.display()),
            )
            .envs(vars.iter().copied())
            .env_remove("RUST_BACKTRACE")
            .output()
            .expect("run baton serve");
        assert!(!out.status.success(), "{vars:?} started");
        text(&out.stderr)
    };
    let serve = |name: &str, value: &str| serve_with(&[(name, value)]);
    let said = serve("BATON_STALE_AFTER", "18446744073709551615s");
    assert!(
        said.contains("BATON_STALE_AFTER must be at most a day"),
        "{said}"
    );
    let said = serve("BATON_ALLOWED_COMMANDS", " , ");
    assert!(
        said.contains("BATON_ALLOWED_COMMANDS names no program"),
        "{said}"
    );
    let said = serve("BATON_SESSION_TTL", "0s");
    assert!(
        said.contains("BATON_SESSION_TTL must be at least a minute"),
        "{said}"
    );
    let said = serve("BATON_PUBLIC_URL", "baton.example.com");
    assert!(
        said.contains("BATON_PUBLIC_URL `baton.example.com`"),
        "{said}"
    );
    // Liveness timings a careless operator might set: a staleness bound a
    // slow commit crosses, and a lease that outlasts it.
    let said = serve("BATON_STALE_AFTER", "200ms");
    assert!(
        said.contains("BATON_STALE_AFTER must be at least 1s, not 200ms"),
        "{said}"
    );
    let said = serve("BATON_POLL_INTERVAL", "1ms");
    assert!(
        said.contains("BATON_POLL_INTERVAL must be at least 10ms, not 1ms"),
        "{said}"
    );
    let said = serve("BATON_SWEEP_INTERVAL", "1us");
    assert!(
        said.contains("BATON_SWEEP_INTERVAL must be at least 100ms, not 1us"),
        "{said}"
    );
    let said = serve("BATON_WORKERS", "18446744073709551615");
    assert!(
        said.contains("BATON_WORKERS must be from 0 (run no tasks) to 10000"),
        "{said}"
    );
    // A label on a replica that runs nothing would keep the tasks pinned
    // to it waiting for it.
    let said = serve_with(&[("BATON_WORKERS", "0"), ("BATON_LABELS", "gpu, eu")]);
    assert!(
        said.contains("BATON_LABELS (gpu,eu) names node labels")
            && said.contains("BATON_WORKERS is 0"),
        "{said}"
    );
    let said = serve("BATON_LEADER_LEASE", "1m");
    assert!(
        said.contains("BATON_LEADER_LEASE (1m) must be at most BATON_STALE_AFTER (10s)"),
        "{said}"
    );
    // A users file anyone on the machine may rewrite, or not a file.
    let users = dir.path().join("users.yaml");
    std::fs::write(
        &users,
        "users:\n  - {name: grafana, role: viewer, token_hashes: []}\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o666)).unwrap();
    let said = serve("BATON_USERS_FILE", users.to_str().unwrap());
    assert!(
        said.contains("every user of this machine may write it (mode 0666)")
            && said.contains("chmod o-w"),
        "{said}"
    );
    let said = serve("BATON_USERS_FILE", "/dev/zero");
    assert!(said.contains("it is not a regular file"), "{said}");
    assert!(!database.exists(), "a refused start created the database");
    // SQLite URLs Baton cannot serve from: refused by name, no file made.
    let said = serve("BATON_DATABASE_URL", "sqlite::memory:");
    assert!(said.contains("in-memory SQLite database"), "{said}");
    let options = format!("sqlite://{}?mode=ro", database.display());
    let said = serve("BATON_DATABASE_URL", &options);
    assert!(said.contains("carries options after `?`"), "{said}");
    let made: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(made, ["users.yaml"], "a refused URL made files");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["submit", "/dev/zero", "--server", "http://127.0.0.1:9"])
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run baton submit");
    let said = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        said.contains("the plan is larger than the server's limit of 8 MiB"),
        "{said}"
    );
}

/// A second `baton serve` on the SQLite file one already serves is
/// refused, naming the process that holds it, and changes nothing; the
/// file is free again once that process is gone, however it ended. SIGHUP
/// ends a serve gracefully.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sqlite_file_takes_one_serve() {
    let db = TestDb::new(Kind::Sqlite).await;
    let mut first = spawn_baton(db.url()).await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("BATON_DATABASE_URL", db.url())
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run baton serve");
    let said = text(&out.stderr);
    assert!(!out.status.success(), "a second serve started: {said}");
    assert!(
        said.contains(&format!(
            "another `baton serve` (process {}) already serves",
            first.pid()
        )),
        "{said}"
    );
    let replicas = first.replicas().await;
    assert_eq!(
        replicas.len(),
        1,
        "the refused serve registered: {replicas:?}"
    );

    first.sigkill().await;
    // spawn_baton waits until the new process has registered.
    let mut again = spawn_baton(db.url()).await;
    // A closed terminal (SIGHUP) stops it gracefully, like SIGTERM.
    // SAFETY: kill only sends a signal, to a child not yet reaped.
    assert_eq!(unsafe { libc::kill(again.pid(), libc::SIGHUP) }, 0);
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), again.wait())
        .await
        .expect("baton exits within 30 s of SIGHUP");
    assert!(status.success(), "{status:?}");
}

/// An answer that is not Baton's (a proxy's error page) is quoted short,
/// on one line, with its escape sequences shown as text: they would
/// otherwise steer the operator's terminal (OSC 52 writes the clipboard).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_error_page_reaches_the_terminal_as_plain_text() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let page = format!(
            "<html>\n<body>\u{1b}]52;c;aGk=\u{7}\u{1b}[2J denied{}</body></html>",
            " and more".repeat(200)
        );
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            let answer = format!(
                "HTTP/1.1 403 Forbidden\r\ncontent-type: text/html\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{page}",
                page.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["status", "--server", &base])
        .env_remove("RUST_BACKTRACE")
        .output()
        .await
        .expect("run baton status");
    let said = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        !said.contains('\u{1b}') && !said.contains('\u{7}'),
        "{said:?}"
    );
    assert!(
        said.contains("the server answered 403 Forbidden: <html> <body>\\u{1b}]52;c;aGk="),
        "{said}"
    );
    assert!(said.contains(" …"), "the page was cut: {said}");
    assert!(said.len() < 1000, "{} bytes quoted", said.len());
}

/// What a person reads in a terminal, a log file or a CI job: an expected
/// failure (here, a server that is not there) is one `error:` line with
/// its causes and no backtrace, even with `RUST_BACKTRACE=1` (returning
/// the error from `main` printed one); and logs written to a pipe carry
/// no colour escapes.
#[test]
fn errors_and_logs_read_plainly_off_a_terminal() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["status", "1"])
        .env("BATON_SERVER", "http://127.0.0.1:1")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run baton");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("baton.db").display());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("migrate")
        .env("BATON_DATABASE_URL", &url)
        .env_remove("NO_COLOR")
        .output()
        .expect("run baton");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("migrations applied"), "{stdout}");
    assert!(
        !stdout.contains('\u{1b}'),
        "colour escapes in a pipe: {stdout:?}"
    );
}

/// A printing command whose reader leaves early (`baton completions bash |
/// head -3`) ends as `ls | head` does, by SIGPIPE, without a panic or a
/// backtrace on stderr (it printed both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_a_printing_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    use tokio::io::AsyncReadExt;

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["completions", "bash"])
        .env("RUST_BACKTRACE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).await.unwrap();
    drop(stdout);
    let out = child.wait_with_output().await.unwrap();
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
        "{:?}: {stderr}",
        out.status
    );
}
