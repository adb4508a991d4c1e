//! Turns a submitted document into a [`NewPlan`], or says precisely what is
//! wrong with it.

use std::collections::HashSet;
use std::time::Duration;

use super::file::{PlanFile, TaskFile};
use super::{CommandSpec, ExecutorSpec, HttpSpec, InvalidPlan, NewPlan, NewTask, Webhook};

/// A task's hard deadline when the file names none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// How long pinned work waits for its node by default (SPEC §5).
pub const DEFAULT_REASSIGN_AFTER: Duration = Duration::from_secs(5 * 60);

/// Parses a plan file written as JSON.
pub fn parse_json(body: &[u8]) -> Result<NewPlan, InvalidPlan> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| InvalidPlan {
        message: format!("the body is not valid JSON: {e}"),
        field: None,
    })?;
    from_value(value)
}

/// Parses a plan file written as YAML (same fields as JSON).
pub fn parse_yaml(body: &str) -> Result<NewPlan, InvalidPlan> {
    let value: serde_json::Value = serde_saphyr::from_str(body).map_err(|e| InvalidPlan {
        message: format!("the body is not valid YAML: {e}"),
        field: None,
    })?;
    from_value(value)
}

/// Parses a plan file pasted as text: JSON when it starts with `{`, else
/// YAML (of which JSON is nearly a subset, but JSON's errors read better).
pub fn parse_text(text: &str) -> Result<NewPlan, InvalidPlan> {
    if text.trim_start().starts_with('{') {
        parse_json(text.as_bytes())
    } else {
        parse_yaml(text)
    }
}

fn from_value(value: serde_json::Value) -> Result<NewPlan, InvalidPlan> {
    if !value.is_object() {
        return Err(invalid(
            None,
            "a plan must be an object with `name` and `tasks`",
        ));
    }
    let file: PlanFile = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        InvalidPlan {
            field: Some(field_of(&path, &message)),
            message,
        }
    })?;
    validate(file)
}

/// serde reports a missing field at its parent's path; point at the field
/// itself so the operator sees `tasks[0].name`, not `tasks[0]`. (Unknown
/// fields already come with their own name in the path.)
fn field_of(path: &str, message: &str) -> String {
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    match (path, missing) {
        (".", Some(name)) => name.to_owned(),
        (_, Some(name)) => format!("{path}.{name}"),
        _ => path.to_owned(),
    }
}

fn invalid(field: Option<String>, message: impl Into<String>) -> InvalidPlan {
    InvalidPlan {
        message: message.into(),
        field,
    }
}

fn validate(file: PlanFile) -> Result<NewPlan, InvalidPlan> {
    let name = required_text(file.name, "name")?;
    if let Some(limit) = file.parallel_limit
        && limit < 1
    {
        return Err(invalid(
            Some("parallel_limit".into()),
            format!("parallel_limit must be at least 1 (got {limit}); leave it out for no limit"),
        ));
    }
    if file.tasks.is_empty() {
        return Err(invalid(
            Some("tasks".into()),
            "a plan needs at least one task",
        ));
    }
    let webhooks = file
        .webhooks
        .into_iter()
        .enumerate()
        .map(|(i, hook)| {
            let url = http_url(&hook.url, &format!("webhooks[{i}].url"))?;
            let secret = hook
                .secret
                .map(|s| required_text(s, &format!("webhooks[{i}].secret")))
                .transpose()?;
            Ok(Webhook { url, secret })
        })
        .collect::<Result<Vec<_>, InvalidPlan>>()?;
    let mut seen = HashSet::new();
    let mut tasks = Vec::with_capacity(file.tasks.len());
    for (i, task) in file.tasks.into_iter().enumerate() {
        let at = |field: &str| format!("tasks[{i}].{field}");
        let task = validate_task(task, &at)?;
        if !seen.insert(task.name.clone()) {
            return Err(invalid(
                Some(at("name")),
                format!("task name `{}` is used twice in this plan", task.name),
            ));
        }
        tasks.push(task);
    }
    Ok(NewPlan {
        name,
        description: file.description.unwrap_or_default(),
        parallel_limit: file.parallel_limit,
        start: file.start.unwrap_or(true),
        webhooks,
        tasks,
    })
}

fn validate_task(task: TaskFile, at: &dyn Fn(&str) -> String) -> Result<NewTask, InvalidPlan> {
    let name = required_text(task.name, &at("name"))?;
    let target = required_text(task.target, &at("target"))?;
    let version = task
        .version
        .map(|v| required_text(v.into_string(), &at("version")))
        .transpose()?;
    let node = task
        .node
        .map(|n| required_text(n, &at("node")))
        .transpose()?;
    let timeout =
        optional_duration(task.timeout.as_deref(), &at("timeout"))?.unwrap_or(DEFAULT_TIMEOUT);
    if timeout.is_zero() {
        return Err(invalid(
            Some(at("timeout")),
            "timeout must be longer than zero",
        ));
    }
    let max_attempts = task.max_attempts.unwrap_or(1);
    if max_attempts < 1 {
        return Err(invalid(
            Some(at("max_attempts")),
            format!("max_attempts must be at least 1 (got {max_attempts})"),
        ));
    }
    let heartbeat_interval = optional_duration(
        task.heartbeat_interval.as_deref(),
        &at("heartbeat_interval"),
    )?;
    let heartbeat_timeout =
        optional_duration(task.heartbeat_timeout.as_deref(), &at("heartbeat_timeout"))?;
    if let (Some(interval), Some(timeout)) = (heartbeat_interval, heartbeat_timeout)
        && interval > timeout / 2
    {
        return Err(invalid(
            Some(at("heartbeat_interval")),
            format!(
                "heartbeat_interval ({}) must be at most half of heartbeat_timeout ({})",
                humantime::format_duration(interval),
                humantime::format_duration(timeout)
            ),
        ));
    }
    let reassign_after = match task.reassign_after.as_deref().map(str::trim) {
        None => Some(DEFAULT_REASSIGN_AFTER),
        Some("never") => None,
        Some(text) => Some(parse_duration(text, &at("reassign_after"))?),
    };
    let pinned = node.is_some();
    if task.reassign_after.is_some() && !pinned {
        return Err(invalid(
            Some(at("reassign_after")),
            "reassign_after only applies to a task pinned with `node`",
        ));
    }
    let executor = executor_of(task.command, task.http, task.sleep, at)?;
    Ok(NewTask {
        name,
        target,
        exclusive: task.exclusive.unwrap_or(true),
        version,
        run_at: task.run_at,
        node,
        timeout,
        max_attempts,
        heartbeat_interval,
        heartbeat_timeout,
        // Only pinned runs ever lose a pin.
        reassign_after: reassign_after.filter(|_| pinned),
        executor,
    })
}

fn executor_of(
    command: Option<super::file::CommandFile>,
    http: Option<super::file::HttpFile>,
    sleep: Option<String>,
    at: &dyn Fn(&str) -> String,
) -> Result<ExecutorSpec, InvalidPlan> {
    let given = [command.is_some(), http.is_some(), sleep.is_some()]
        .iter()
        .filter(|g| **g)
        .count();
    if given != 1 {
        let what = if given == 0 {
            "no executor"
        } else {
            "more than one executor"
        };
        return Err(invalid(
            Some(at("command")),
            format!(
                "a task needs exactly one of `command`, `http` or `sleep`, and this one has {what}"
            ),
        ));
    }
    if let Some(command) = command {
        if command.argv.is_empty() || command.argv[0].trim().is_empty() {
            return Err(invalid(
                Some(at("command.argv")),
                "argv needs at least the program to run",
            ));
        }
        return Ok(ExecutorSpec::Command(CommandSpec {
            argv: command.argv,
            env: command.env,
            cwd: command.cwd,
        }));
    }
    if let Some(http) = http {
        http_url(&http.url, &at("http.url"))?;
        let method = http
            .method
            .unwrap_or_else(|| "GET".into())
            .to_ascii_uppercase();
        if reqwest::Method::from_bytes(method.as_bytes()).is_err() {
            return Err(invalid(
                Some(at("http.method")),
                format!("`{method}` is not an HTTP method"),
            ));
        }
        if let Some(bad) = http.expect.iter().find(|c| !(100..=599).contains(*c)) {
            return Err(invalid(
                Some(at("http.expect")),
                format!("{bad} is not an HTTP status code"),
            ));
        }
        return Ok(ExecutorSpec::Http(HttpSpec {
            url: http.url,
            method,
            headers: http.headers,
            body: http.body,
            expect: http.expect,
        }));
    }
    let text = sleep.unwrap_or_default();
    let duration = parse_duration(&text, &at("sleep"))?;
    Ok(ExecutorSpec::Sleep { duration })
}

/// An absolute http:// or https:// URL, kept as written.
fn http_url(text: &str, field: &str) -> Result<String, InvalidPlan> {
    let url = reqwest::Url::parse(text).map_err(|e| {
        invalid(
            Some(field.to_owned()),
            format!("`{text}` is not a valid URL: {e}"),
        )
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(
            Some(field.to_owned()),
            "the URL must start with http:// or https://",
        ));
    }
    Ok(text.to_owned())
}

fn required_text(value: String, field: &str) -> Result<String, InvalidPlan> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(invalid(
            Some(field.to_owned()),
            format!("{field} must not be empty"),
        ));
    }
    Ok(trimmed.to_owned())
}

fn optional_duration(text: Option<&str>, field: &str) -> Result<Option<Duration>, InvalidPlan> {
    text.map(|t| parse_duration(t, field)).transpose()
}

fn parse_duration(text: &str, field: &str) -> Result<Duration, InvalidPlan> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        invalid(
            Some(field.to_owned()),
            format!("`{text}` is not a duration ({e}); write it like `90s`, `10m` or `1h 30m`"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(json: &str) -> InvalidPlan {
        parse_json(json.as_bytes()).expect_err("plan should be refused")
    }

    const GOOD: &str = r#"{"name": "release-42", "tasks": [
        {"name": "a", "target": "db/orders", "sleep": "0s"},
        {"name": "b", "target": "db/orders", "version": "0042", "timeout": "10m",
         "command": {"argv": ["sh", "-c", "echo hi"], "env": {"K": "V"}}}
    ]}"#;

    #[test]
    fn a_good_plan_gets_defaults() {
        let plan = parse_json(GOOD.as_bytes()).unwrap();
        assert_eq!(plan.name, "release-42");
        assert!(plan.start);
        assert_eq!(plan.tasks[0].timeout, DEFAULT_TIMEOUT);
        assert!(plan.tasks[0].exclusive);
        assert_eq!(plan.tasks[0].max_attempts, 1);
        assert_eq!(plan.tasks[1].timeout, Duration::from_secs(600));
        assert_eq!(plan.tasks[1].version.as_deref(), Some("0042"));
        assert_eq!(plan.tasks[0].reassign_after, None, "not pinned");
        assert!(plan.webhooks.is_empty());
    }

    #[test]
    fn pinned_tasks_wait_five_minutes_unless_told() {
        let task = |extra: &str| {
            let json = format!(
                r#"{{"name": "p", "tasks": [{{"name": "a", "target": "t", "node": "gpu", "sleep": "1s"{extra}}}]}}"#
            );
            parse_json(json.as_bytes()).unwrap().tasks[0].reassign_after
        };
        assert_eq!(task(""), Some(DEFAULT_REASSIGN_AFTER));
        assert_eq!(
            task(r#", "reassign_after": "30s""#),
            Some(Duration::from_secs(30))
        );
        assert_eq!(task(r#", "reassign_after": "never""#), None);
    }

    #[test]
    fn yaml_reads_like_json() {
        let yaml = "name: release-42\nparallel_limit: 2\ntasks:\n  - name: a\n    target: db/orders\n    version: 42\n    sleep: 2s\n";
        let plan = parse_yaml(yaml).unwrap();
        assert_eq!(plan.parallel_limit, Some(2));
        assert_eq!(plan.tasks[0].version.as_deref(), Some("42"));
        assert_eq!(
            plan.tasks[0].executor,
            ExecutorSpec::Sleep {
                duration: Duration::from_secs(2)
            }
        );
    }

    #[test]
    fn each_mistake_names_its_field() {
        let cases = [
            (r#"{"tasks": []}"#, "name"),
            (r#"{"name": " ", "tasks": []}"#, "name"),
            (r#"{"name": "p", "tasks": []}"#, "tasks"),
            (r#"{"name": "p", "colour": 1, "tasks": []}"#, "colour"),
            (
                r#"{"name": "p", "parallel_limit": 0, "tasks": [{"name": "a", "target": "t", "sleep": "1s"}]}"#,
                "parallel_limit",
            ),
            (
                r#"{"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s"}, {"name": "a", "target": "t", "sleep": "1s"}]}"#,
                "tasks[1].name",
            ),
            (
                r#"{"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s"}, {"name": "b", "target": "t", "sleep": "1s"}, {"name": "c", "target": "t", "timeout": "10 parsecs", "sleep": "1s"}]}"#,
                "tasks[2].timeout",
            ),
            (
                r#"{"name": "p", "tasks": [{"name": "a", "target": "t"}]}"#,
                "tasks[0].command",
            ),
            (
                r#"{"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s", "command": {"argv": ["true"]}}]}"#,
                "tasks[0].command",
            ),
            (
                r#"{"name": "p", "tasks": [{"target": "t", "sleep": "1s"}]}"#,
                "tasks[0].name",
            ),
            (
                r#"{"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s", "timout": "1s"}]}"#,
                "tasks[0].timout",
            ),
            (
                r#"{"name": "p", "tasks": [{"name": "a", "target": "t", "node": "gpu", "reassign_after": "soon", "sleep": "1s"}]}"#,
                "tasks[0].reassign_after",
            ),
            (
                r#"{"name": "p", "tasks": [{"name": "a", "target": "t", "reassign_after": "1m", "sleep": "1s"}]}"#,
                "tasks[0].reassign_after",
            ),
            (
                r#"{"name": "p", "webhooks": [{"url": "ftp://x"}], "tasks": [{"name": "a", "target": "t", "sleep": "1s"}]}"#,
                "webhooks[0].url",
            ),
            (
                r#"{"name": "p", "webhooks": [{"url": "http://x", "token": "y"}], "tasks": [{"name": "a", "target": "t", "sleep": "1s"}]}"#,
                "webhooks[0].token",
            ),
            (
                r#"{"name": "p", "tasks": [{"name": "a", "target": "t", "http": {"url": "nope"}}]}"#,
                "tasks[0].http.url",
            ),
            (
                r#"{"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s", "max_attempts": 0}]}"#,
                "tasks[0].max_attempts",
            ),
            (
                r#"{"name": "p", "tasks": [{"name": "a", "target": "t", "sleep": "1s", "heartbeat_interval": "6s", "heartbeat_timeout": "10s"}]}"#,
                "tasks[0].heartbeat_interval",
            ),
        ];
        for (json, field) in cases {
            let err = refused(json);
            assert_eq!(err.field.as_deref(), Some(field), "{json}: {err}");
            assert!(!err.message.is_empty());
        }
    }

    #[test]
    fn malformed_documents_are_refused_whole() {
        assert_eq!(refused("{not json").field, None);
        assert_eq!(refused("[1, 2]").field, None);
        assert!(parse_yaml("name: [unclosed").is_err());
    }
}
