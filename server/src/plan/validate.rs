//! Turns a submitted document into a [`NewPlan`], or says precisely what is
//! wrong with it.

use std::collections::HashSet;
use std::time::Duration;

use chrono::Datelike;

use super::file::{PlanFile, TaskFile};
use super::graph::{self, StageDecl, TaskLinks};
use super::limits::{self, DurationBounds};
use super::{
    Approval, CommandSpec, ExecutorSpec, HttpSpec, InvalidPlan, NewPlan, NewTask, Webhook,
};
use crate::secret::Secret;

/// A task's hard deadline when the file names none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// How long pinned work waits for its node by default (docs/design.md,
/// "Gates", gate 5).
pub const DEFAULT_REASSIGN_AFTER: Duration = Duration::from_secs(5 * 60);

/// Parses a plan file written as JSON.
pub fn parse_json(body: &[u8]) -> Result<NewPlan, InvalidPlan> {
    let value = super::unique_keys::from_slice(body).map_err(|e| InvalidPlan {
        message: format!("the body is not valid JSON: {e}"),
        field: None,
    })?;
    parse_value(value)
}

/// Parses a plan file written as YAML (same fields as JSON).
pub fn parse_yaml(body: &str) -> Result<NewPlan, InvalidPlan> {
    let value: serde_json::Value = serde_saphyr::from_str(body).map_err(|e| InvalidPlan {
        message: super::yaml_problem(&e, "the body"),
        field: None,
    })?;
    parse_value(value)
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

/// Validates a plan document already parsed (a schedule fills its template
/// as a value, then validates the result).
pub fn parse_value(value: serde_json::Value) -> Result<NewPlan, InvalidPlan> {
    if !value.is_object() {
        return Err(invalid(
            None,
            "a plan must be an object with `name` and `tasks`",
        ));
    }
    // PostgreSQL cannot store a NUL in text and SQLite would keep it to
    // surprise every reader later, so no string anywhere may carry one.
    if let Some(field) = nul_in(&value) {
        let shown = if field.is_empty() { "the plan" } else { &field };
        return Err(invalid(
            Some(field.clone()),
            format!("{shown} contains a NUL character (\\u0000), which Baton cannot store"),
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

/// The JSON path of the first string (or key) holding a NUL, like
/// `tasks[3].command.env.K`. The path is spelled out only for a hit:
/// every plan is searched, and formatting a path for each of the values
/// of a 10,000-task plan cost more than the search itself.
fn nul_in(value: &serde_json::Value) -> Option<String> {
    let mut path = Vec::new();
    if !nul_below(value, &mut path) {
        return None;
    }
    let mut out = String::new();
    for step in path {
        match step {
            PathStep::Index(i) => out.push_str(&format!("[{i}]")),
            PathStep::Key(k) if out.is_empty() => out.push_str(k),
            PathStep::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
        }
    }
    Some(out)
}

enum PathStep<'a> {
    Index(usize),
    Key(&'a str),
}

/// Whether a NUL is in `value`; on a hit `path` leads to it.
fn nul_below<'a>(value: &'a serde_json::Value, path: &mut Vec<PathStep<'a>>) -> bool {
    let mut step_into = |step: PathStep<'a>, key_has_nul: bool, value: &'a serde_json::Value| {
        path.push(step);
        let hit = key_has_nul || nul_below(value, path);
        if !hit {
            path.pop();
        }
        hit
    };
    match value {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .any(|(i, v)| step_into(PathStep::Index(i), false, v)),
        serde_json::Value::Object(map) => map
            .iter()
            .any(|(k, v)| step_into(PathStep::Key(k), k.contains('\0'), v)),
        _ => false,
    }
}

fn validate(file: PlanFile) -> Result<NewPlan, InvalidPlan> {
    let name = name_text(file.name, "name")?;
    if let Some(limit) = file.parallel_limit
        && !(1..=limits::MAX_PARALLEL_LIMIT).contains(&limit)
    {
        return Err(invalid(
            Some("parallel_limit".into()),
            format!(
                "parallel_limit must be between 1 and {} (got {limit}); leave it out for no limit",
                limits::MAX_PARALLEL_LIMIT
            ),
        ));
    }
    let description = file.description.unwrap_or_default();
    if description.len() > limits::MAX_DESCRIPTION_BYTES {
        return Err(invalid(
            Some("description".into()),
            format!(
                "description must be at most {} bytes (got {})",
                limits::MAX_DESCRIPTION_BYTES,
                description.len()
            ),
        ));
    }
    // Lines and tabs, but no other control character: `baton status`
    // prints the description to a terminal, where an escape sequence could
    // clear the screen or write the operator's clipboard (OSC 52).
    if let Some(c) = description
        .chars()
        .find(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return Err(invalid(
            Some("description".into()),
            format!(
                "description may hold lines and tabs but no other control character \
                 (it holds U+{:04X})",
                u32::from(c)
            ),
        ));
    }
    if file.tasks.is_empty() {
        return Err(invalid(
            Some("tasks".into()),
            "a plan needs at least one task",
        ));
    }
    if file.tasks.len() > limits::MAX_TASKS {
        return Err(invalid(
            Some("tasks".into()),
            format!(
                "a plan holds at most {} tasks (got {}); split the work into several plans",
                limits::MAX_TASKS,
                file.tasks.len()
            ),
        ));
    }
    if file.webhooks.len() > limits::MAX_WEBHOOKS {
        return Err(invalid(
            Some("webhooks".into()),
            format!(
                "a plan names at most {} webhooks (got {})",
                limits::MAX_WEBHOOKS,
                file.webhooks.len()
            ),
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
                .map(|s| required_text(s.expose().to_owned(), &format!("webhooks[{i}].secret")))
                .map(|s| s.map(Secret::new))
                .transpose()?;
            Ok(Webhook { url, secret })
        })
        .collect::<Result<Vec<_>, InvalidPlan>>()?;
    let stages = file
        .stages
        .into_iter()
        .enumerate()
        .map(|(s, stage)| {
            let at = |field: &str| format!("stages[{s}].{field}");
            Ok(StageDecl {
                name: name_text(stage.name, &at("name"))?,
                approval: approval_of(stage.approval, stage.approvers, &at)?,
            })
        })
        .collect::<Result<Vec<_>, InvalidPlan>>()?;
    let mut seen = HashSet::new();
    let mut tasks = Vec::with_capacity(file.tasks.len());
    let mut links = Vec::with_capacity(file.tasks.len());
    for (i, mut task) in file.tasks.into_iter().enumerate() {
        let at = |field: &str| format!("tasks[{i}].{field}");
        let depends_on = std::mem::take(&mut task.depends_on);
        if depends_on.len() > limits::MAX_TASKS {
            return Err(invalid(
                Some(at("depends_on")),
                format!("a task depends on at most {} others", limits::MAX_TASKS),
            ));
        }
        let stage = task
            .stage
            .take()
            .map(|s| name_text(s, &at("stage")))
            .transpose()?;
        let task = validate_task(task, &at)?;
        if !seen.insert(task.name.clone()) {
            return Err(invalid(
                Some(at("name")),
                format!("task name `{}` is used twice in this plan", task.name),
            ));
        }
        tasks.push(task);
        links.push((depends_on, stage));
    }
    let resolved = {
        let links: Vec<TaskLinks> = tasks
            .iter()
            .zip(&links)
            .map(|(task, (depends_on, stage))| TaskLinks {
                name: &task.name,
                depends_on,
                stage: stage.as_deref(),
            })
            .collect();
        graph::resolve(&links, stages)?
    };
    for (i, ((task, deps), (_, stage))) in tasks
        .iter_mut()
        .zip(resolved.depends_on)
        .zip(links)
        .enumerate()
    {
        task.depends_on = deps;
        if let Some(s) = resolved.stage_of[i] {
            task.stage = stage;
            if task.approval.is_none() {
                task.approval = resolved.stages[s].approval.clone();
            }
        }
    }
    super::version_order::check(&tasks)?;
    Ok(NewPlan {
        name,
        description,
        parallel_limit: file.parallel_limit,
        start: file.start.unwrap_or(true),
        webhooks,
        stages: resolved.stages,
        tasks,
    })
}

/// `approval: required | two-person` with optional `approvers`.
fn approval_of(
    kind: Option<String>,
    approvers: Option<Vec<String>>,
    at: &dyn Fn(&str) -> String,
) -> Result<Option<Approval>, InvalidPlan> {
    let two_person = match kind.as_deref().map(str::trim) {
        None => {
            if approvers.is_some() {
                return Err(invalid(
                    Some(at("approvers")),
                    "approvers only apply with `approval: required` or `approval: two-person`",
                ));
            }
            return Ok(None);
        }
        Some("required") => false,
        Some("two-person") => true,
        Some(other) => {
            return Err(invalid(
                Some(at("approval")),
                format!("approval must be `required` or `two-person` (got `{other}`)"),
            ));
        }
    };
    let approvers = approvers.unwrap_or_default();
    if approvers.len() > limits::MAX_APPROVERS {
        return Err(invalid(
            Some(at("approvers")),
            format!("at most {} approvers", limits::MAX_APPROVERS),
        ));
    }
    let approvers = approvers
        .into_iter()
        .enumerate()
        .map(|(k, name)| name_text(name, &format!("{}[{k}]", at("approvers"))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Approval {
        two_person,
        approvers,
    }))
}

fn validate_task(task: TaskFile, at: &dyn Fn(&str) -> String) -> Result<NewTask, InvalidPlan> {
    let name = name_text(task.name, &at("name"))?;
    let target = name_text(task.target, &at("target"))?;
    let version = task
        .version
        .map(|v| name_text(v.into_string(), &at("version")))
        .transpose()?;
    let node = task.node.map(|n| name_text(n, &at("node"))).transpose()?;
    let timeout = optional_duration(task.timeout.as_deref(), &at("timeout"), limits::TIMEOUT)?
        .unwrap_or(DEFAULT_TIMEOUT);
    let max_attempts = task.max_attempts.unwrap_or(1);
    if !(1..=limits::MAX_ATTEMPTS).contains(&max_attempts) {
        return Err(invalid(
            Some(at("max_attempts")),
            format!(
                "{} must be between 1 and {} (got {max_attempts})",
                at("max_attempts"),
                limits::MAX_ATTEMPTS
            ),
        ));
    }
    if let Some(run_at) = task.run_at {
        let (first, last) = limits::RUN_AT_YEARS;
        if !(first..=last).contains(&run_at.year()) {
            return Err(invalid(
                Some(at("run_at")),
                format!(
                    "{} must fall in the years {first} to {last} (got {run_at})",
                    at("run_at")
                ),
            ));
        }
    }
    let heartbeat_interval = optional_duration(
        task.heartbeat_interval.as_deref(),
        &at("heartbeat_interval"),
        limits::HEARTBEAT_INTERVAL,
    )?;
    let heartbeat_timeout = optional_duration(
        task.heartbeat_timeout.as_deref(),
        &at("heartbeat_timeout"),
        limits::HEARTBEAT_TIMEOUT,
    )?;
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
        Some(text) => Some(bounded_duration(
            text,
            &at("reassign_after"),
            limits::REASSIGN_AFTER,
        )?),
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
        depends_on: Vec::new(),
        stage: None,
        approval: approval_of(task.approval, task.approvers, at)?,
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
        command_size(&command, at)?;
        if let Some(key) = command.env.keys().find(|k| k.is_empty() || k.contains('=')) {
            return Err(invalid(
                Some(at("command.env")),
                format!(
                    "{}: `{key}` is not an environment variable name (empty, or holds `=`)",
                    at("command.env")
                ),
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
        http_headers_and_body(&http, at)?;
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
    let duration = bounded_duration(&text, &at("sleep"), limits::SLEEP)?;
    Ok(ExecutorSpec::Sleep { duration })
}

/// argv, environment and working directory stay within what an exec can
/// take and a page can show.
fn command_size(
    command: &super::file::CommandFile,
    at: &dyn Fn(&str) -> String,
) -> Result<(), InvalidPlan> {
    if command.argv.len() > limits::MAX_ARGV {
        return Err(invalid(
            Some(at("command.argv")),
            format!(
                "argv holds at most {} arguments (got {})",
                limits::MAX_ARGV,
                command.argv.len()
            ),
        ));
    }
    let bytes: usize = command.argv.iter().map(String::len).sum::<usize>()
        + command
            .env
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
        + command.cwd.as_ref().map_or(0, String::len);
    if bytes > limits::MAX_COMMAND_BYTES {
        return Err(invalid(
            Some(at("command")),
            format!(
                "argv, env and cwd together must be at most {} KiB (got {bytes} bytes)",
                limits::MAX_COMMAND_BYTES / 1024
            ),
        ));
    }
    Ok(())
}

/// Header names and values an HTTP client can send, and a body of a size
/// the store and the run page can hold.
fn http_headers_and_body(
    http: &super::file::HttpFile,
    at: &dyn Fn(&str) -> String,
) -> Result<(), InvalidPlan> {
    for (name, value) in &http.headers {
        let field = at(&format!("http.headers.{name}"));
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(invalid(
                Some(field.clone()),
                format!("{field}: `{name}` is not a valid HTTP header name"),
            ));
        }
        if reqwest::header::HeaderValue::from_str(value).is_err() {
            return Err(invalid(
                Some(field.clone()),
                format!("{field} must be visible ASCII or spaces, with no line breaks"),
            ));
        }
    }
    let body = http.body.as_ref().map_or(0, String::len);
    if body > limits::MAX_HTTP_BODY_BYTES {
        return Err(invalid(
            Some(at("http.body")),
            format!(
                "the body must be at most {} KiB (got {body} bytes)",
                limits::MAX_HTTP_BODY_BYTES / 1024
            ),
        ));
    }
    Ok(())
}

/// An absolute http:// or https:// URL, kept as written.
fn http_url(text: &str, field: &str) -> Result<String, InvalidPlan> {
    if text.len() > limits::MAX_URL_BYTES {
        return Err(invalid(
            Some(field.to_owned()),
            format!(
                "the URL must be at most {} bytes (got {})",
                limits::MAX_URL_BYTES,
                text.len()
            ),
        ));
    }
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

/// A name, target, version or node: one line of printable text, short
/// enough to show in a table cell and to index.
pub(crate) fn name_text(value: String, field: &str) -> Result<String, InvalidPlan> {
    let text = required_text(value, field)?;
    let chars = text.chars().count();
    if chars > limits::MAX_NAME_CHARS {
        return Err(invalid(
            Some(field.to_owned()),
            format!(
                "{field} must be at most {} characters (got {chars})",
                limits::MAX_NAME_CHARS
            ),
        ));
    }
    if let Some(c) = text.chars().find(|c| c.is_control() || invisible(*c)) {
        return Err(invalid(
            Some(field.to_owned()),
            format!(
                "{field} must be one line of printable text (it holds U+{:04X})",
                u32::from(c)
            ),
        ));
    }
    Ok(text)
}

/// Characters that show as nothing or reorder what is shown: zero-width
/// spaces and joiners, direction marks, embeddings and isolates, the BOM.
/// `db/or\u{200B}ders` looked like `db/orders` and was a separate lock.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

fn optional_duration(
    text: Option<&str>,
    field: &str,
    bounds: DurationBounds,
) -> Result<Option<Duration>, InvalidPlan> {
    text.map(|t| bounded_duration(t, field, bounds)).transpose()
}

fn bounded_duration(
    text: &str,
    field: &str,
    bounds: DurationBounds,
) -> Result<Duration, InvalidPlan> {
    let d = parse_duration(text, field)?;
    match bounds.check(field, d) {
        None => Ok(d),
        Some(message) => Err(invalid(Some(field.to_owned()), message)),
    }
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
    fn what_a_terminal_would_run_is_refused_and_a_key_named_twice_too() {
        let e = refused(
            r#"{"name": "p", "description": "fine\nlines\tand tabs \u001b[2J\u001b]52;c;aGk=\u0007",
                "tasks": [{"name": "a", "target": "t", "sleep": "1s"}]}"#,
        );
        assert_eq!(e.field.as_deref(), Some("description"));
        assert!(e.message.contains("U+001B"), "{}", e.message);
        let ok = r#"{"name": "p", "description": "two\nlines\tok",
            "tasks": [{"name": "a", "target": "t", "sleep": "1s"}]}"#;
        assert_eq!(
            parse_json(ok.as_bytes()).unwrap().description,
            "two\nlines\tok"
        );
        // A second `tasks` list would have replaced the first unseen.
        let e = refused(
            r#"{"name": "p", "tasks": [{"name": "a", "target": "t", "command": {"argv": ["rm", "-rf", "/srv"]}}],
                "tasks": [{"name": "a", "target": "t", "sleep": "1s"}]}"#,
        );
        assert!(
            e.message.contains("the key `tasks` appears twice"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_name_that_looks_like_another_is_refused() {
        for sneaky in ["db/or\u{200B}ders", "db/\u{202E}sredro", "\u{FEFF}orders"] {
            let json = serde_json::json!({"name": "p", "tasks": [
                {"name": "a", "target": sneaky, "sleep": "1s"}]});
            let e = refused(&json.to_string());
            assert_eq!(e.field.as_deref(), Some("tasks[0].target"), "{sneaky:?}");
        }
        let json = serde_json::json!({"name": "p", "tasks": [
            {"name": "café ✓", "target": "db/ÉTÉ", "sleep": "1s"}]});
        parse_json(json.to_string().as_bytes()).unwrap();
    }

    #[test]
    fn yaml_numbers_that_lose_what_was_written_are_refused_as_versions() {
        let yaml = |version: &str| {
            format!("name: p\ntasks:\n  - {{name: a, target: t, sleep: 1s, version: {version}}}\n")
        };
        assert_eq!(
            parse_yaml(&yaml("42")).unwrap().tasks[0].version.as_deref(),
            Some("42")
        );
        assert_eq!(
            parse_yaml(&yaml("\"1.10\"")).unwrap().tasks[0]
                .version
                .as_deref(),
            Some("1.10")
        );
        let e = parse_yaml(&yaml("1.10")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("tasks[0].version"));
        assert!(e.message.contains("write it in quotes"), "{}", e.message);
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

    /// A plan of one task `a` on target `t` with `extra` fields spliced in.
    fn one_task(extra: &str) -> String {
        format!(r#"{{"name": "p", "tasks": [{{"name": "a", "target": "t"{extra}}}]}}"#)
    }

    #[test]
    fn absurd_values_are_refused_with_their_bound() {
        let cases = [
            (
                r#", "sleep": "1s", "timeout": "1000000y""#,
                "tasks[0].timeout",
                "30d",
            ),
            (
                r#", "sleep": "1s", "timeout": "1ns""#,
                "tasks[0].timeout",
                "100ms",
            ),
            (
                r#", "sleep": "1s", "heartbeat_interval": "0s""#,
                "tasks[0].heartbeat_interval",
                "1s",
            ),
            (
                r#", "sleep": "1s", "heartbeat_timeout": "1000000y""#,
                "tasks[0].heartbeat_timeout",
                "1d",
            ),
            (
                r#", "sleep": "1s", "node": "n", "reassign_after": "1000000y""#,
                "tasks[0].reassign_after",
                "365d",
            ),
            (r#", "sleep": "1000000y""#, "tasks[0].sleep", "30d"),
            (
                r#", "sleep": "1s", "max_attempts": 9223372036854775807"#,
                "tasks[0].max_attempts",
                "100",
            ),
            (
                r#", "sleep": "1s", "run_at": "0001-01-01T00:00:00Z""#,
                "tasks[0].run_at",
                "1970",
            ),
            (
                r#", "command": {"argv": ["true"], "env": {"A=B": "x"}}"#,
                "tasks[0].command.env",
                "=",
            ),
            (
                r#", "http": {"url": "http://x", "headers": {"bad name": "v"}}"#,
                "tasks[0].http.headers.bad name",
                "header name",
            ),
            (
                r#", "http": {"url": "http://x", "headers": {"X-A": "line\r\nbreak"}}"#,
                "tasks[0].http.headers.X-A",
                "line breaks",
            ),
        ];
        for (extra, field, bound) in cases {
            let err = refused(&one_task(extra));
            assert_eq!(err.field.as_deref(), Some(field), "{extra}: {err}");
            assert!(err.message.contains(bound), "{extra}: {err}");
        }
        let plan = |tasks: usize| {
            let tasks: Vec<_> = (0..tasks)
                .map(|i| serde_json::json!({"name": format!("t{i}"), "target": "t", "sleep": "0s"}))
                .collect();
            serde_json::json!({"name": "p", "tasks": tasks}).to_string()
        };
        assert!(parse_json(plan(limits::MAX_TASKS).as_bytes()).is_ok());
        let err = refused(&plan(limits::MAX_TASKS + 1));
        assert_eq!(err.field.as_deref(), Some("tasks"));
        assert!(err.message.contains("10000"), "{err}");
        let long = "x".repeat(limits::MAX_NAME_CHARS + 1);
        let err = refused(&one_task(&format!(
            r#", "sleep": "1s", "version": "{long}""#
        )));
        assert_eq!(err.field.as_deref(), Some("tasks[0].version"));
    }

    #[test]
    fn nul_and_control_characters_are_refused_where_they_are() {
        let err = refused(&one_task(r#", "command": {"argv": ["echo", "a\u0000b"]}"#));
        assert_eq!(err.field.as_deref(), Some("tasks[0].command.argv[1]"));
        assert!(err.message.contains("NUL"), "{err}");
        let err = refused(r#"{"name": "p\u0000", "tasks": []}"#);
        assert_eq!(err.field.as_deref(), Some("name"));
        let err = refused(&one_task(r#", "sleep": "1s", "node": "gpu\nnode""#));
        assert_eq!(err.field.as_deref(), Some("tasks[0].node"));
        assert!(err.message.contains("U+000A"), "{err}");
        // Hostile but printable text is data, not an error: pages escape it.
        let ok = parse_json(
            r#"{"name": "x</title><script>alert(1)</script>", "tasks": [{"name": "é ✓", "target": "../../etc", "sleep": "0s"}]}"#
                .as_bytes(),
        );
        assert!(ok.is_ok());
    }

    #[test]
    fn malformed_documents_are_refused_whole() {
        assert_eq!(refused("{not json").field, None);
        assert_eq!(refused("[1, 2]").field, None);
        assert!(parse_yaml("name: [unclosed").is_err());
    }
}
