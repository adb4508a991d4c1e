//! A stored plan turned back into what people read: each task's
//! definition with its secrets hidden ([`definition`], for every page and
//! API answer), and the plan file that submits the same plan again
//! ([`document`], secrets included, for operators only).

use std::collections::{BTreeMap, HashMap, HashSet};

use domain::definition::{ExecutorView, TaskDefinition, duration_text};
use serde_json::{Map, Value, json};

use crate::plan::{ExecutorSpec, Stage, Webhook};
use crate::store::{
    Store, StoredPlan, StoredTask, names_a_secret, redact, redact_pair, retry_backoff,
};

/// The definition of task `id`, if it exists.
pub async fn task_definition(
    store: &dyn Store,
    id: i64,
) -> crate::store::Result<Option<TaskDefinition>> {
    let tasks = store.tasks_stored(&[id]).await?;
    Ok(tasks.first().map(definition))
}

/// What a task runs and how, with nothing secret in it.
pub fn definition(task: &StoredTask) -> TaskDefinition {
    TaskDefinition {
        task_id: task.id,
        task_name: task.name.clone(),
        executor: executor_view(&task.executor),
        timeout_ms: task.timeout_ms,
        max_attempts: task.max_attempts,
        retry_backoff_ms: (1..task.max_attempts.clamp(1, 100))
            .map(|failed| retry_backoff(failed).as_millis() as i64)
            .collect(),
        heartbeat_interval_ms: task.heartbeat_interval_ms,
        heartbeat_timeout_ms: task.heartbeat_timeout_ms,
        run_at: task.run_at.map(|t| t.0),
        node: task.node.clone(),
        reassign_after_ms: task.reassign_after_ms,
    }
}

fn executor_view(json: &str) -> ExecutorView {
    match serde_json::from_str::<ExecutorSpec>(json) {
        Ok(ExecutorSpec::Command(c)) => ExecutorView::Command {
            argv: argv_view(&c.argv),
            env_names: c.env.into_keys().collect(),
            cwd: c.cwd,
        },
        Ok(ExecutorSpec::Http(h)) => ExecutorView::Http {
            url: redact(&h.url),
            method: h.method,
            header_names: h.headers.into_keys().collect(),
            body_bytes: h.body.map(|b| b.len()),
            expect: h.expect,
        },
        Ok(ExecutorSpec::Sleep { duration }) => ExecutorView::Sleep {
            duration_ms: duration.as_millis() as i64,
        },
        // A library user's own kind: its fields are its own business.
        Err(_) => ExecutorView::Custom {
            name: custom_executor(json).0,
        },
    }
}

/// A command's arguments with what looks secret masked: a URL's password
/// and `token=…`-like parameters, `--password=…`, and the argument after
/// a flag named like a secret (`--password hunter2`). A heuristic: the
/// place for a secret is `env`, whose values never show.
fn argv_view(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for arg in argv {
        let shown = if std::mem::take(&mut hide_next) {
            "***".to_owned()
        } else if arg.contains("://") {
            redact(arg)
        } else if arg.starts_with('-') && !arg.contains('=') && names_a_secret(arg) {
            hide_next = true;
            arg.clone()
        } else {
            redact_pair(arg)
        };
        out.push(shown);
    }
    out
}

/// The plan file (as JSON) that submits `stored` again: the same tasks,
/// gates, executors, limits, stages and webhooks. Defaults are left out,
/// and a dependency that the task's stage implies is not written twice.
pub fn document(stored: &StoredPlan) -> Value {
    let plan = &stored.plan;
    let stages: Vec<Stage> = serde_json::from_str(&plan.stages).unwrap_or_default();
    let webhooks: Vec<Webhook> = serde_json::from_str(&plan.webhooks).unwrap_or_default();
    let mut out = Map::new();
    out.insert("name".into(), json!(plan.name));
    if !plan.description.is_empty() {
        out.insert("description".into(), json!(plan.description));
    }
    if let Some(limit) = plan.parallel_limit {
        out.insert("parallel_limit".into(), json!(limit));
    }
    if !plan.starts_on_submit {
        // Submitted again, it waits for an operator's Run as the first did,
        // even when that one has been run since.
        out.insert("start".into(), json!(false));
    }
    if !webhooks.is_empty() {
        let hooks: Vec<Value> = webhooks
            .iter()
            .map(|w| match &w.secret {
                Some(secret) => json!({"url": w.url, "secret": secret.expose()}),
                None => json!({"url": w.url}),
            })
            .collect();
        out.insert("webhooks".into(), Value::Array(hooks));
    }
    if !stages.is_empty() {
        let list: Vec<Value> = stages.iter().map(stage_entry).collect();
        out.insert("stages".into(), Value::Array(list));
    }
    let implied = stage_edges(stored, &stages);
    let names: HashMap<i64, &str> = stored
        .tasks
        .iter()
        .map(|t| (t.id, t.name.as_str()))
        .collect();
    let mut depends_on: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for edge in &stored.edges {
        if !implied.contains(edge)
            && let Some(name) = names.get(&edge.1)
        {
            depends_on.entry(edge.0).or_default().push(name);
        }
    }
    let tasks: Vec<Value> = stored
        .tasks
        .iter()
        .map(|t| {
            let stage = t
                .stage
                .as_ref()
                .and_then(|name| stages.iter().find(|s| &s.name == name));
            task_entry(t, stage, depends_on.get(&t.id))
        })
        .collect();
    out.insert("tasks".into(), Value::Array(tasks));
    Value::Object(out)
}

fn stage_entry(stage: &Stage) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), json!(stage.name));
    if let Some(approval) = &stage.approval {
        out.insert("approval".into(), json!(approval.kind()));
        if !approval.approvers.is_empty() {
            out.insert("approvers".into(), json!(approval.approvers));
        }
    }
    Value::Object(out)
}

/// The edges the stages make: every task of a stage waits for every task
/// of the stage before it.
fn stage_edges(stored: &StoredPlan, stages: &[Stage]) -> HashSet<(i64, i64)> {
    let position = |task: &StoredTask| {
        let name = task.stage.as_ref()?;
        stages.iter().position(|s| &s.name == name)
    };
    let mut edges = HashSet::new();
    for t in &stored.tasks {
        let Some(k) = position(t).filter(|&k| k > 0) else {
            continue;
        };
        for before in stored.tasks.iter().filter(|b| position(b) == Some(k - 1)) {
            edges.insert((t.id, before.id));
        }
    }
    edges
}

fn task_entry(task: &StoredTask, stage: Option<&Stage>, depends_on: Option<&Vec<&str>>) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), json!(task.name));
    if let Some(stage) = stage {
        out.insert("stage".into(), json!(stage.name));
    }
    out.insert("target".into(), json!(task.target));
    if !task.exclusive {
        out.insert("exclusive".into(), json!(false));
    }
    if let Some(version) = &task.version {
        out.insert("version".into(), json!(version));
    }
    if let Some(deps) = depends_on {
        out.insert("depends_on".into(), json!(deps));
    }
    let approvers: Vec<String> = task
        .approvers
        .as_deref()
        .and_then(|a| serde_json::from_str(a).ok())
        .unwrap_or_default();
    // The column holds the stage's approval too; written on the task, it
    // would ask for an approval of its own.
    let from_stage = stage
        .and_then(|s| s.approval.as_ref())
        .is_some_and(|a| Some(a.kind()) == task.approval.as_deref() && a.approvers == approvers);
    if let Some(kind) = task.approval.as_deref().filter(|_| !from_stage) {
        out.insert("approval".into(), json!(kind));
        if !approvers.is_empty() {
            out.insert("approvers".into(), json!(approvers));
        }
    }
    if let Some(at) = task.run_at {
        out.insert("run_at".into(), json!(domain::time::rfc3339(at.0)));
    }
    if let Some(node) = &task.node {
        out.insert("node".into(), json!(node));
        let reassign = match task.reassign_after_ms {
            Some(ms) => duration_text(ms),
            None => "never".to_owned(),
        };
        out.insert("reassign_after".into(), json!(reassign));
    }
    out.insert("timeout".into(), json!(duration_text(task.timeout_ms)));
    if task.max_attempts != 1 {
        out.insert("max_attempts".into(), json!(task.max_attempts));
    }
    if let Some(ms) = task.heartbeat_interval_ms {
        out.insert("heartbeat_interval".into(), json!(duration_text(ms)));
    }
    if let Some(ms) = task.heartbeat_timeout_ms {
        out.insert("heartbeat_timeout".into(), json!(duration_text(ms)));
    }
    let (kind, fields) = executor_entry(&task.executor);
    out.insert(kind, fields);
    Value::Object(out)
}

/// The executor as a plan file names it: `command: {…}`, `http: {…}`,
/// `sleep: 2s`; another kind keeps its stored fields under its name.
fn executor_entry(json: &str) -> (String, Value) {
    match serde_json::from_str::<ExecutorSpec>(json) {
        Ok(ExecutorSpec::Command(c)) => {
            let mut fields = Map::new();
            fields.insert("argv".into(), json!(c.argv));
            if !c.env.is_empty() {
                fields.insert("env".into(), json!(c.env));
            }
            if let Some(cwd) = c.cwd {
                fields.insert("cwd".into(), json!(cwd));
            }
            ("command".into(), Value::Object(fields))
        }
        Ok(ExecutorSpec::Http(h)) => {
            let mut fields = Map::new();
            fields.insert("url".into(), json!(h.url));
            fields.insert("method".into(), json!(h.method));
            if !h.headers.is_empty() {
                fields.insert("headers".into(), json!(h.headers));
            }
            if let Some(body) = h.body {
                fields.insert("body".into(), json!(body));
            }
            if !h.expect.is_empty() {
                fields.insert("expect".into(), json!(h.expect));
            }
            ("http".into(), Value::Object(fields))
        }
        Ok(ExecutorSpec::Sleep { duration }) => (
            "sleep".into(),
            json!(duration_text(duration.as_millis() as i64)),
        ),
        Err(_) => custom_executor(json),
    }
}

/// A library user's own executor kind: its name and its other fields.
fn custom_executor(json: &str) -> (String, Value) {
    let mut value: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    if let Some(fields) = value.as_object_mut() {
        fields.remove("kind");
    }
    (kind, value)
}

/// A plan file as YAML, for people to read and edit before submitting it
/// again. Strings YAML would read as something else (`"0042"`, `"true"`)
/// come out quoted, so the text reads back as the same document.
pub fn yaml(document: &Value) -> anyhow::Result<String> {
    Ok(serde_saphyr::to_string(document)?)
}
