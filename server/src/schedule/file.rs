//! The schedule file as an operator writes it, and its validation. Like
//! plan files, unknown fields are refused (a typo must not fall back to a
//! default), and every error names its field.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::{
    CatchUp, DEFAULT_CATCH_UP_LIMIT, MAX_CATCH_UP_LIMIT, MAX_PARAM_CHARS, MAX_PARAMS, NewSchedule,
    Overlap, Timing, template,
};
use crate::plan::InvalidPlan;
use crate::plan::limits::MAX_NAME_CHARS;
use domain::time::Ts;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleFile {
    name: String,
    cron: String,
    #[serde(default)]
    time_zone: Option<String>,
    #[serde(default)]
    overlap: Option<String>,
    #[serde(default)]
    catch_up: Option<String>,
    #[serde(default)]
    catch_up_limit: Option<i64>,
    #[serde(default)]
    params: BTreeMap<String, ParamValue>,
    plan: Value,
}

/// A parameter's value: text, or a number or boolean written as text.
/// Read by hand: serde's untagged enums refuse a list or a null with "data
/// did not match any variant of untagged enum", which names nothing.
#[derive(Debug)]
enum ParamValue {
    Text(String),
    Number(serde_json::Number),
    Bool(bool),
}

impl<'de> Deserialize<'de> for ParamValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(text) => Ok(ParamValue::Text(text)),
            serde_json::Value::Number(n) => Ok(ParamValue::Number(n)),
            serde_json::Value::Bool(b) => Ok(ParamValue::Bool(b)),
            other => Err(D::Error::custom(format!(
                "a parameter is text, a number or true/false, not {}",
                match other {
                    serde_json::Value::Null => "null",
                    serde_json::Value::Array(_) => "a list",
                    _ => "an object",
                }
            ))),
        }
    }
}

impl ParamValue {
    fn into_text(self) -> String {
        match self {
            ParamValue::Text(text) => text,
            ParamValue::Number(n) => n.to_string(),
            ParamValue::Bool(b) => b.to_string(),
        }
    }
}

fn invalid(field: &str, message: impl Into<String>) -> InvalidPlan {
    InvalidPlan {
        message: message.into(),
        field: Some(field.to_owned()),
    }
}

/// Parses a schedule written as JSON.
pub fn parse_json(body: &[u8]) -> Result<NewSchedule, InvalidPlan> {
    let value = crate::plan::unique_keys::from_slice(body).map_err(|e| InvalidPlan {
        message: format!("the body is not valid JSON: {e}"),
        field: None,
    })?;
    from_value(value)
}

/// Parses a schedule written as YAML (same fields as JSON).
pub fn parse_yaml(body: &str) -> Result<NewSchedule, InvalidPlan> {
    let value: Value = serde_saphyr::from_str(body).map_err(|e| InvalidPlan {
        message: crate::plan::yaml_problem(&e, "the body"),
        field: None,
    })?;
    from_value(value)
}

/// JSON when the text starts with `{`, else YAML.
pub fn parse_text(text: &str) -> Result<NewSchedule, InvalidPlan> {
    if text.trim_start().starts_with('{') {
        parse_json(text.as_bytes())
    } else {
        parse_yaml(text)
    }
}

fn from_value(value: Value) -> Result<NewSchedule, InvalidPlan> {
    if !value.is_object() {
        return Err(InvalidPlan {
            message: "a schedule must be an object with `name`, `cron` and `plan`".into(),
            field: None,
        });
    }
    let file: ScheduleFile = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        InvalidPlan {
            message: e.inner().to_string(),
            field: (path != ".").then_some(path),
        }
    })?;
    validate(file)
}

fn validate(file: ScheduleFile) -> Result<NewSchedule, InvalidPlan> {
    // One line of printable text, as a plan's name: a schedule's name is
    // printed by `baton schedule list`, where an escape sequence in it
    // could rewrite the operator's terminal.
    let name = crate::plan::name_text(file.name, "name")?;
    let cron = file.cron.trim().to_owned();
    if cron.chars().count() > MAX_NAME_CHARS || cron.contains('\0') {
        return Err(invalid("cron", "the cron expression is too long"));
    }
    let time_zone = file.time_zone.unwrap_or_else(|| "UTC".into());
    let timing = Timing::parse(&cron, time_zone.trim())?;
    let overlap = match file.overlap.as_deref() {
        None => Overlap::Skip,
        Some(text) => Overlap::parse(text).ok_or_else(|| {
            invalid(
                "overlap",
                format!("`{text}` is not an overlap policy: skip, queue or allow"),
            )
        })?,
    };
    let catch_up = catch_up(file.catch_up.as_deref(), file.catch_up_limit)?;
    if file.params.len() > MAX_PARAMS {
        return Err(invalid(
            "params",
            format!("at most {MAX_PARAMS} parameters"),
        ));
    }
    let mut params = BTreeMap::new();
    for (key, value) in file.params {
        let field = format!("params.{key}");
        if !template::valid_name(&key) {
            return Err(invalid(
                &field,
                format!(
                    "`{key}` is not a parameter name (letters, digits and _, not first a digit)"
                ),
            ));
        }
        if template::BUILTIN.contains(&key.as_str()) {
            return Err(invalid(
                &field,
                format!("`{key}` is filled in by every tick; choose another name"),
            ));
        }
        let value = value.into_text();
        if value.chars().count() > MAX_PARAM_CHARS || value.contains('\0') {
            return Err(invalid(
                &field,
                format!(
                    "a parameter's value must be at most {MAX_PARAM_CHARS} characters, without NUL"
                ),
            ));
        }
        params.insert(key, value);
    }
    if !file.plan.is_object() {
        return Err(invalid(
            "plan",
            "the plan template must be an object, as a plan file is",
        ));
    }
    let schedule = NewSchedule {
        name,
        cron,
        time_zone: timing.zone().to_string(),
        overlap,
        catch_up,
        params,
        template: file.plan,
        timing,
    };
    // The template must make a valid plan for the ticks it will see.
    let next = schedule
        .timing
        .next_after(Ts::now())
        .unwrap_or_else(Ts::now);
    schedule.plan_at(next)?;
    Ok(schedule)
}

fn catch_up(text: Option<&str>, limit: Option<i64>) -> Result<CatchUp, InvalidPlan> {
    let policy = match text {
        None | Some("latest") => CatchUp::Latest,
        Some("none") => CatchUp::None,
        Some("all") => {
            let limit = limit.unwrap_or(i64::from(DEFAULT_CATCH_UP_LIMIT));
            if !(1..=i64::from(MAX_CATCH_UP_LIMIT)).contains(&limit) {
                return Err(invalid(
                    "catch_up_limit",
                    format!("catch_up_limit must be 1 to {MAX_CATCH_UP_LIMIT}"),
                ));
            }
            return Ok(CatchUp::All {
                limit: limit as u32,
            });
        }
        Some(other) => {
            return Err(invalid(
                "catch_up",
                format!("`{other}` is not a catch-up policy: none, latest or all"),
            ));
        }
    };
    if limit.is_some() {
        return Err(invalid(
            "catch_up_limit",
            "catch_up_limit applies only to `catch_up: all`",
        ));
    }
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(text: &str) -> Option<String> {
        parse_yaml(text).unwrap_err().field
    }

    const PLAN: &str =
        "plan: {name: \"v ${db}\", tasks: [{name: t, target: \"db/${db}\", sleep: 0s}]}";

    #[test]
    fn a_valid_schedule_with_defaults() {
        let s = parse_yaml(&format!(
            "name: nightly\ncron: '30 2 * * *'\nparams: {{db: orders}}\n{PLAN}"
        ))
        .unwrap();
        assert_eq!(
            (s.overlap, s.catch_up, s.time_zone.as_str()),
            (Overlap::Skip, CatchUp::Latest, "UTC")
        );
        assert_eq!(s.plan_at(Ts::now()).unwrap().name, "v orders");
    }

    #[test]
    fn a_parameter_of_another_kind_is_named() {
        let text = format!("name: job\ncron: '* * * * *'\nparams: {{db: [a, b]}}\n{PLAN}");
        let e = parse_yaml(&text).unwrap_err();
        assert!(
            e.message
                .contains("a parameter is text, a number or true/false, not a list"),
            "{}",
            e.message
        );
        assert_eq!(e.field.as_deref(), Some("params.db"));
    }

    #[test]
    fn bad_input_names_its_field() {
        let base = |extra: &str| {
            format!("name: job\ncron: '* * * * *'\nparams: {{db: x}}\n{extra}\n{PLAN}")
        };
        assert_eq!(
            field_of(&format!("name: job\ncron: '61 * * * *'\n{PLAN}")).as_deref(),
            Some("cron")
        );
        assert_eq!(
            field_of(&base("time_zone: Europe/Berln")).as_deref(),
            Some("time_zone")
        );
        assert_eq!(
            field_of(&base("overlap: sometimes")).as_deref(),
            Some("overlap")
        );
        assert_eq!(
            field_of(&base("catch_up: most")).as_deref(),
            Some("catch_up")
        );
        assert_eq!(
            field_of(&base("catch_up: all\ncatch_up_limit: 0")).as_deref(),
            Some("catch_up_limit")
        );
        assert_eq!(
            field_of(&base("catch_up_limit: 3")).as_deref(),
            Some("catch_up_limit")
        );
        assert_eq!(
            field_of(&base("timezone: UTC")).as_deref(),
            Some("timezone")
        );
        // A template that is not a valid plan, or uses an unknown parameter.
        assert_eq!(
            field_of("name: job\ncron: '@daily'\nplan: {name: p, tasks: [{name: t, target: x, sleep: 0s, timeout: 1ms}]}").as_deref(),
            Some("plan.tasks[0].timeout")
        );
        assert_eq!(
            field_of(&format!("name: job\ncron: '@daily'\n{PLAN}")).as_deref(),
            Some("plan.name")
        );
        assert_eq!(
            field_of(&format!(
                "name: job\ncron: '@daily'\nparams: {{tick: x}}\n{PLAN}"
            ))
            .as_deref(),
            Some("params.tick")
        );
        assert_eq!(
            field_of(&format!("name: job\ncron: '0 0 30 2 *'\n{PLAN}")).as_deref(),
            Some("cron")
        );
    }
}
