//! The values of a schedule's template that are secrets: webhook signing
//! secrets, HTTP task headers (API keys), command environments
//! (passwords) and the password in a webhook's or an HTTP task's URL.
//! Every signed-in user, viewers included, reads schedules, and a plan's
//! own views never show these; so a schedule's views show each one as
//! [`HIDDEN`], and an update that sends [`HIDDEN`] back (the dashboard's
//! edit form does, the views' text edited) keeps the value the schedule
//! holds at the same place. A viewer saw a webhook secret, a `Bearer`
//! header and URL passwords in hostile trials.
//!
//! A place is bound to where the secret goes, with the schedule's
//! parameters filled in: a webhook's secret to its URL (and which of the
//! webhooks with that URL it is), a header to the task and its URL, a
//! variable to the task and its whole command. An
//! operator who points a task at another host, or changes what it runs,
//! must write its secrets out again: keeping them would have sent a
//! secret they cannot read to a place of their choosing.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::template::{BUILTIN, fill};

/// What a view shows in place of a secret.
pub const HIDDEN: &str = "(hidden)";

/// `template` with every secret replaced by [`HIDDEN`].
pub fn hide(template: &Value) -> Value {
    let mut shown = template.clone();
    for (_, url) in urls(&mut shown) {
        if let Some(hidden) = url.as_str().and_then(password_hidden) {
            *url = Value::String(hidden);
        }
    }
    for (_, value) in secrets(&mut shown) {
        *value = Value::String(HIDDEN.to_owned());
    }
    shown
}

/// Puts back, wherever `new` says [`HIDDEN`], the value `old` holds at the
/// same place. Places are named by where a secret goes once each
/// template's own `${…}` parameters are filled in (`new_params`,
/// `old_params`): a URL written `http://${host}/…` goes somewhere else when
/// only `host` changes, and an operator who never saw the secret once sent
/// it to a host of their choosing that way. `Err` names a [`HIDDEN`] with
/// nothing to keep.
pub fn keep_hidden(
    new: &mut Value,
    new_params: &BTreeMap<String, String>,
    old: &Value,
    old_params: &BTreeMap<String, String>,
) -> Result<(), String> {
    let old_resolved = resolved(old, old_params);
    let new_resolved = resolved(new, new_params);
    let mut old = old.clone();
    // URLs first: the other secrets' places name them.
    let old_urls: HashMap<String, Value> = places(urls, &old_resolved)
        .into_iter()
        .zip(urls(&mut old).into_iter().map(|(_, url)| url.clone()))
        .collect();
    for (place, (_, url)) in places(urls, &new_resolved).into_iter().zip(urls(new)) {
        if !url.as_str().is_some_and(says_hidden_password) {
            continue;
        }
        match old_urls.get(&place) {
            Some(kept) if !kept.as_str().is_some_and(says_hidden_password) => *url = kept.clone(),
            _ => return Err(nothing_to_keep(&format!("the password in {place}"))),
        }
    }
    let kept: HashMap<String, Value> = places(secrets, &old_resolved)
        .into_iter()
        .zip(
            secrets(&mut old)
                .into_iter()
                .map(|(_, value)| value.clone()),
        )
        .collect();
    for (place, (_, value)) in places(secrets, &new_resolved).into_iter().zip(secrets(new)) {
        if value.as_str() != Some(HIDDEN) {
            continue;
        }
        match kept.get(&place) {
            Some(old) if old.as_str() != Some(HIDDEN) => *value = old.clone(),
            _ => return Err(nothing_to_keep(&place)),
        }
    }
    Ok(())
}

/// `template` with the schedule's own parameters filled in. The built-in
/// ones (`${date}`, …) change every tick and stay as they are written, and
/// a template that does not fill (refused elsewhere) stays as written:
/// filling changes only strings, so the places of either line up with the
/// template's own.
fn resolved(template: &Value, params: &BTreeMap<String, String>) -> Value {
    let mut params = params.clone();
    for name in BUILTIN {
        params.insert(name.to_owned(), format!("${{{name}}}"));
    }
    fill(template, &params).unwrap_or_else(|_| template.clone())
}

/// The names of the places `walk` finds in `template`, in its order.
fn places(walk: fn(&mut Value) -> Vec<(String, &mut Value)>, template: &Value) -> Vec<String> {
    let mut copy = template.clone();
    walk(&mut copy)
        .into_iter()
        .map(|(place, _)| place)
        .collect()
}

fn nothing_to_keep(place: &str) -> String {
    format!(
        "{place} says {HIDDEN}, but the schedule holds no value there to keep (a secret \
         stays only where it was: same URL, same task, same command); write the value itself"
    )
}

/// `url` with its password shown as [`HIDDEN`]; `None` when it has none.
fn password_hidden(url: &str) -> Option<String> {
    let mut parsed = reqwest::Url::parse(url).ok()?;
    parsed.password()?;
    parsed.set_password(Some(HIDDEN)).ok()?;
    Some(parsed.to_string())
}

/// Whether `url`'s password is [`HIDDEN`], as a view showed it.
fn says_hidden_password(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| u.password() == Some(HIDDEN))
}

/// How a URL reads in a place's name: its password, if any, as [`HIDDEN`],
/// so a URL as stored and as a view showed it name the same place.
fn url_place(url: &str) -> String {
    password_hidden(url).unwrap_or_else(|| url.to_owned())
}

/// The webhooks and tasks of a plan template, to walk.
fn parts(template: &mut Value) -> (Vec<&mut Value>, Vec<&mut Value>) {
    let Some(plan) = template.as_object_mut() else {
        return (Vec::new(), Vec::new());
    };
    let (mut webhooks, mut tasks) = (Vec::new(), Vec::new());
    for (key, value) in plan.iter_mut() {
        let list = match value.as_array_mut() {
            Some(list) => list.iter_mut().collect(),
            None => continue,
        };
        match key.as_str() {
            "webhooks" => webhooks = list,
            "tasks" => tasks = list,
            _ => {}
        }
    }
    (webhooks, tasks)
}

/// `webhook URL` for the first webhook with a URL, `webhook URL (number 2
/// with that URL)` for the second with the same one, and so on.
fn webhook_places(webhooks: &[&mut Value]) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    webhooks
        .iter()
        .map(|hook| {
            let url = url_place(hook.get("url").and_then(Value::as_str).unwrap_or(""));
            let nth = seen.entry(url.clone()).or_default();
            *nth += 1;
            match *nth {
                1 => format!("webhook {url}"),
                n => format!("webhook {url} (number {n} with that URL)"),
            }
        })
        .collect()
}

fn task_name(task: &Value) -> String {
    task.get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// Each URL that may hold a password, named by where it is.
fn urls(template: &mut Value) -> Vec<(String, &mut Value)> {
    let (webhooks, tasks) = parts(template);
    let places = webhook_places(&webhooks);
    let mut found = Vec::new();
    for (hook, place) in webhooks.into_iter().zip(places) {
        if let Some(url) = hook.get_mut("url") {
            found.push((place, url));
        }
    }
    for task in tasks {
        let name = task_name(task);
        if let Some(url) = task.get_mut("http").and_then(|h| h.get_mut("url")) {
            let place = format!(
                "task {name}'s URL {}",
                url_place(url.as_str().unwrap_or(""))
            );
            found.push((place, url));
        }
    }
    found
}

/// Each secret of `template` but URL passwords, named by where it is and
/// where it goes: a task is found by its name (its place in the list may
/// change), and its secrets belong to its URL or its command.
fn secrets(template: &mut Value) -> Vec<(String, &mut Value)> {
    let (webhooks, tasks) = parts(template);
    let places = webhook_places(&webhooks);
    let mut found = Vec::new();
    for (hook, place) in webhooks.into_iter().zip(places) {
        if let Some(secret) = hook.get_mut("secret") {
            found.push((format!("the secret of {place}"), secret));
        }
    }
    for task in tasks {
        let name = task_name(task);
        let Some(task) = task.as_object_mut() else {
            continue;
        };
        for (executor, spec) in task.iter_mut() {
            let (field, what, bound) = match executor.as_str() {
                "http" => (
                    "headers",
                    "header",
                    format!(
                        "for {}",
                        url_place(spec.get("url").and_then(Value::as_str).unwrap_or(""))
                    ),
                ),
                "command" => (
                    "env",
                    "variable",
                    format!(
                        "for the command {}",
                        spec.get("argv").map(Value::to_string).unwrap_or_default()
                    ),
                ),
                _ => continue,
            };
            let Some(values) = spec.get_mut(field).and_then(Value::as_object_mut) else {
                continue;
            };
            for (key, value) in values.iter_mut() {
                found.push((format!("task {name}'s {what} {key} {bound}"), value));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use std::collections::BTreeMap;

    use super::{HIDDEN, hide, keep_hidden};

    fn none() -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    /// URL passwords are hidden too, and two webhooks with one URL each
    /// keep their own secret.
    #[test]
    fn url_passwords_hide_and_webhooks_sharing_a_url_keep_their_own_secret() {
        let stored = json!({"name": "n",
            "webhooks": [
                {"url": "http://hook:WHPW@hooks.example/dup", "secret": "S-ONE"},
                {"url": "http://hook:WHPW@hooks.example/dup", "secret": "S-TWO"}],
            "tasks": [{"name": "call", "target": "api",
                "http": {"url": "http://bob:TASKPW@api.example/x"}}]});
        let shown = hide(&stored);
        let text = shown.to_string();
        for secret in ["WHPW", "TASKPW", "S-ONE", "S-TWO"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(
            shown["webhooks"][0]["url"],
            "http://hook:(hidden)@hooks.example/dup"
        );
        let mut edited = shown.clone();
        keep_hidden(&mut edited, &none(), &stored, &none()).unwrap();
        assert_eq!(edited, stored);
        // A hidden password for a URL the schedule never held is refused.
        let mut elsewhere = shown;
        elsewhere["tasks"][0]["http"]["url"] = json!("http://bob:(hidden)@evil.example/x");
        let e = keep_hidden(&mut elsewhere, &none(), &stored, &none()).unwrap_err();
        assert!(
            e.contains("the password in task call's URL http://bob:(hidden)@evil.example/x"),
            "{e}"
        );
    }

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
        keep_hidden(&mut edited, &none(), &template(), &none()).unwrap();
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
        let e = keep_hidden(&mut new, &none(), &template(), &none()).unwrap_err();
        assert!(e.contains("task renamed's variable PGPASSWORD"), "{e}");
        // Another host for a header, another command for a variable: the
        // secret stays behind, and must be written out again.
        let mut moved = hide(&template());
        moved["tasks"][0]["http"]["url"] = json!("https://attacker.example/x");
        let e = keep_hidden(&mut moved, &none(), &template(), &none()).unwrap_err();
        assert!(
            e.contains("task call's header") && e.contains("for https://attacker.example/x"),
            "{e}"
        );
        let mut rerun = hide(&template());
        rerun["tasks"][1]["command"]["argv"] = json!(["sh", "-c", "echo $PGPASSWORD"]);
        let e = keep_hidden(&mut rerun, &none(), &template(), &none()).unwrap_err();
        assert!(e.contains("variable PGPASSWORD for the command"), "{e}");
        let mut fresh = template();
        fresh["webhooks"][0]["secret"] = json!(HIDDEN);
        assert!(keep_hidden(&mut fresh, &none(), &serde_json::Value::Null, &none()).is_err());
    }

    /// A secret goes where the filled-in URL or command says: changing
    /// only a parameter the URL uses moves it, so it must be written out
    /// again; changing one it does not use keeps it.
    #[test]
    fn a_secret_is_bound_to_its_url_with_the_parameters_filled_in() {
        let stored = json!({"name": "n", "tasks": [
            {"name": "call", "target": "api", "http": {"url": "https://${host}/x",
                "headers": {"Authorization": "Bearer KEY"}}},
            {"name": "dump", "target": "db", "command": {"argv": ["pg_dump", "${db}"],
                "env": {"PGPASSWORD": "pw"}}},
        ]});
        let params = |host: &str, db: &str, other: &str| {
            BTreeMap::from([
                ("host".to_owned(), host.to_owned()),
                ("db".to_owned(), db.to_owned()),
                ("other".to_owned(), other.to_owned()),
            ])
        };
        let old = params("api.example", "orders", "1");
        let mut same = hide(&stored);
        keep_hidden(
            &mut same,
            &params("api.example", "orders", "2"),
            &stored,
            &old,
        )
        .unwrap();
        assert_eq!(same, stored);

        let mut moved = hide(&stored);
        let e = keep_hidden(
            &mut moved,
            &params("evil.example", "orders", "1"),
            &stored,
            &old,
        )
        .unwrap_err();
        assert!(
            e.contains("task call's header Authorization for https://evil.example/x"),
            "{e}"
        );
        let mut other_db = hide(&stored);
        let e = keep_hidden(
            &mut other_db,
            &params("api.example", "users", "1"),
            &stored,
            &old,
        )
        .unwrap_err();
        assert!(e.contains("variable PGPASSWORD for the command"), "{e}");
        // Written out literally, the same destination keeps the secret.
        let mut literal = hide(&stored);
        literal["tasks"][0]["http"]["url"] = json!("https://api.example/x");
        literal["tasks"][1] = stored["tasks"][1].clone();
        keep_hidden(&mut literal, &old, &stored, &old).unwrap();
        assert_eq!(
            literal["tasks"][0]["http"]["headers"]["Authorization"],
            "Bearer KEY"
        );
    }
}
