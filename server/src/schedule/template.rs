//! `${name}` parameters in a schedule's plan template.
//!
//! Parameters are filled into string values only, after the template is
//! parsed, so a value can never change the document's structure (a value
//! holding `"` or `}` stays text). `$${` writes a literal `${`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::plan::InvalidPlan;

/// Parameters every tick provides; a schedule's own may not reuse them.
pub const BUILTIN: [&str; 3] = ["schedule", "tick", "date"];

/// The template with every `${name}` replaced from `params`; the first
/// unknown or unterminated parameter is an error naming its field (a path
/// inside the template, like `plan.tasks[0].command[1]`).
pub fn fill(template: &Value, params: &BTreeMap<String, String>) -> Result<Value, InvalidPlan> {
    let mut out = template.clone();
    fill_value(&mut out, params, &mut "plan".to_owned())?;
    Ok(out)
}

fn fill_value(
    value: &mut Value,
    params: &BTreeMap<String, String>,
    path: &mut String,
) -> Result<(), InvalidPlan> {
    match value {
        Value::String(text) => {
            if text.contains('$') {
                *text = fill_text(text, params).map_err(|message| InvalidPlan {
                    message,
                    field: Some(path.clone()),
                })?;
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                fill_value(item, params, path)?;
                path.truncate(len);
            }
        }
        Value::Object(fields) => {
            for (key, item) in fields.iter_mut() {
                let len = path.len();
                path.push('.');
                path.push_str(key);
                fill_value(item, params, path)?;
                path.truncate(len);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
    Ok(())
}

fn fill_text(text: &str, params: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after
                .find('}')
                .ok_or_else(|| format!("`${{` without a closing `}}` in `{text}`"))?;
            let name = &after[..end];
            let value = params.get(name).ok_or_else(|| {
                let known: Vec<&str> = params.keys().map(String::as_str).collect();
                format!(
                    "unknown parameter `${{{name}}}` (known: {})",
                    known.join(", ")
                )
            })?;
            out.push_str(value);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Whether `name` may name a parameter: a letter or `_`, then letters,
/// digits or `_`.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params() -> BTreeMap<String, String> {
        [("db", "orders"), ("quote", "a\"b}c")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn fills_strings_anywhere_and_keeps_values_as_text() {
        let template = json!({"name": "vacuum ${db}", "tasks": [
            {"name": "t", "command": ["echo", "${quote}", "$${db}", "cost $5"], "max_attempts": 2}
        ]});
        let filled = fill(&template, &params()).unwrap();
        assert_eq!(filled["name"], "vacuum orders");
        assert_eq!(
            filled["tasks"][0]["command"],
            json!(["echo", "a\"b}c", "${db}", "cost $5"])
        );
        assert_eq!(filled["tasks"][0]["max_attempts"], 2);
    }

    #[test]
    fn names_the_field_of_an_unknown_or_open_parameter() {
        let e = fill(&json!({"tasks": [{"target": "${nope}"}]}), &params()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("plan.tasks[0].target"));
        assert!(e.message.contains("unknown parameter `${nope}`"), "{e}");
        let e = fill(&json!({"name": "x ${db"}), &params()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("plan.name"));
    }

    #[test]
    fn parameter_names() {
        assert!(valid_name("db_1") && valid_name("_x"));
        assert!(!valid_name("") && !valid_name("1db") && !valid_name("a-b") && !valid_name("a}"));
    }
}
