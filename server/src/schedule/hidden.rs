//! The values of a schedule's template that are secrets: webhook signing
//! secrets, HTTP task headers (API keys) and command environments
//! (passwords). Every signed-in user, viewers included, reads schedules,
//! and a plan's own views never show these; so a schedule's views show
//! each one as [`HIDDEN`], and an update that sends [`HIDDEN`] back (the
//! dashboard's edit form does, the views' text edited) keeps the value the
//! schedule holds at the same place. A viewer saw a webhook secret and a
//! `Bearer` header in a hostile trial.

use std::collections::HashMap;

use serde_json::Value;

/// What a view shows in place of a secret.
pub const HIDDEN: &str = "(hidden)";

/// `template` with every secret replaced by [`HIDDEN`].
pub fn hide(template: &Value) -> Value {
    let mut shown = template.clone();
    for (_, value) in secrets(&mut shown) {
        *value = Value::String(HIDDEN.to_owned());
    }
    shown
}

/// Puts back, wherever `new` says [`HIDDEN`], the value `old` holds at the
/// same place: the same webhook URL, the same task's header or variable.
/// `Err` names a [`HIDDEN`] with nothing to keep.
pub fn keep_hidden(new: &mut Value, old: &Value) -> Result<(), String> {
    let mut old = old.clone();
    let kept: HashMap<String, Value> = secrets(&mut old)
        .into_iter()
        .map(|(place, value)| (place, value.clone()))
        .collect();
    for (place, value) in secrets(new) {
        if value.as_str() != Some(HIDDEN) {
            continue;
        }
        match kept.get(&place) {
            Some(old) if old.as_str() != Some(HIDDEN) => *value = old.clone(),
            _ => {
                return Err(format!(
                    "{place} says {HIDDEN}, but the schedule holds no value there to keep; \
                     write the value itself"
                ));
            }
        }
    }
    Ok(())
}

/// Each secret of `template`, named by where it is: webhooks by URL, a
/// task's by the task's name (its place in the list may change).
fn secrets(template: &mut Value) -> Vec<(String, &mut Value)> {
    let mut found = Vec::new();
    let Some(plan) = template.as_object_mut() else {
        return found;
    };
    let mut webhooks = None;
    let mut tasks = None;
    for (key, value) in plan.iter_mut() {
        match key.as_str() {
            "webhooks" => webhooks = value.as_array_mut(),
            "tasks" => tasks = value.as_array_mut(),
            _ => {}
        }
    }
    for hook in webhooks.into_iter().flatten() {
        let url = hook
            .get("url")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if let Some(secret) = hook.get_mut("secret") {
            found.push((format!("the secret of webhook {url}"), secret));
        }
    }
    for task in tasks.into_iter().flatten() {
        let name = task
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let Some(task) = task.as_object_mut() else {
            continue;
        };
        for (executor, spec) in task.iter_mut() {
            let (field, what) = match executor.as_str() {
                "http" => ("headers", "header"),
                "command" => ("env", "variable"),
                _ => continue,
            };
            let Some(values) = spec.get_mut(field).and_then(Value::as_object_mut) else {
                continue;
            };
            for (key, value) in values.iter_mut() {
                found.push((format!("task {name}'s {what} {key}"), value));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{HIDDEN, hide, keep_hidden};

    fn template() -> serde_json::Value {
        json!({"name": "nightly ${date}",
        "webhooks": [{"url": "https://hooks.example/a", "secret": "TOPSECRET"}],
        "tasks": [
            {"name": "call", "target": "api", "http": {"url": "https://api.example/x",
                "headers": {"Authorization": "Bearer KEY", "Accept": "text/plain"}}},
            {"name": "dump", "target": "db", "command": {"argv": ["pg_dump"],
                "env": {"PGPASSWORD": "pw"}}},
        ]})
    }

    #[test]
    fn a_view_shows_no_secret_and_an_update_keeps_them() {
        let shown = hide(&template());
        let text = shown.to_string();
        for secret in ["TOPSECRET", "Bearer KEY", "text/plain", "\"pw\""] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(shown["tasks"][0]["http"]["url"], "https://api.example/x");
        // Saved back as shown, with the tasks in another order and a new
        // header written out: the old values return, the new one stays.
        let mut edited = shown.clone();
        edited["tasks"].as_array_mut().unwrap().reverse();
        edited["tasks"][1]["http"]["headers"]["X-New"] = json!("new");
        keep_hidden(&mut edited, &template()).unwrap();
        assert_eq!(edited["webhooks"][0]["secret"], "TOPSECRET");
        assert_eq!(
            edited["tasks"][1]["http"]["headers"]["Authorization"],
            "Bearer KEY"
        );
        assert_eq!(edited["tasks"][1]["http"]["headers"]["X-New"], "new");
        assert_eq!(edited["tasks"][0]["command"]["env"]["PGPASSWORD"], "pw");
    }

    #[test]
    fn hidden_with_nothing_to_keep_is_refused() {
        let mut new = template();
        new["tasks"][1]["name"] = json!("renamed");
        new["tasks"][1]["command"]["env"]["PGPASSWORD"] = json!(HIDDEN);
        let e = keep_hidden(&mut new, &template()).unwrap_err();
        assert!(e.contains("task renamed's variable PGPASSWORD"), "{e}");
        let mut fresh = template();
        fresh["webhooks"][0]["secret"] = json!(HIDDEN);
        assert!(keep_hidden(&mut fresh, &serde_json::Value::Null).is_err());
    }
}
