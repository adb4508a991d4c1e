//! The audit log's filter, checked once for the API, the dashboard and
//! `baton audit`: [`AuditQuery`] (text as typed) becomes an
//! [`AuditFilter`], or a [`BadFilter`] naming the field at fault. Text
//! and times are read as the runs search reads them.

use chrono::{DateTime, Utc};

use super::{BadFilter, bad, text, window};
use crate::audit::{ACTIONS, AuditQuery};

/// Which entries a search returns: all of the set fields hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub actor: Option<String>,
    /// The actions the typed prefix names (never empty when set).
    pub actions: Option<Vec<&'static str>>,
    /// Part of the subject, any case.
    pub subject: Option<String>,
    /// At or after.
    pub since: Option<DateTime<Utc>>,
    /// Before.
    pub until: Option<DateTime<Utc>>,
}

/// Checks `q`; relative times count back from `now`.
pub fn parse(q: &AuditQuery, now: DateTime<Utc>) -> Result<AuditFilter, BadFilter> {
    let (since, until) = window(&q.since, &q.until, now)?;
    let actions = match text("action", &q.action)? {
        None => None,
        Some(prefix) => {
            // Expanded to the verbs it names, which the `(action, id)`
            // index then finds one by one; a prefix of none is a typo.
            let prefix = prefix.to_ascii_lowercase();
            let named: Vec<&'static str> = ACTIONS
                .iter()
                .copied()
                .filter(|a| a.starts_with(&prefix))
                .collect();
            if named.is_empty() {
                return Err(bad(
                    "action",
                    format!(
                        "no action starts with `{prefix}`; actions are {}",
                        ACTIONS.join(", ")
                    ),
                ));
            }
            Some(named)
        }
    };
    Ok(AuditFilter {
        actor: text("actor", &q.actor)?,
        actions,
        subject: text("subject", &q.subject)?,
        since,
        until,
    })
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::parse;
    use crate::audit::AuditQuery;

    #[test]
    fn an_action_prefix_names_the_verbs_it_starts() {
        let f = parse(
            &AuditQuery {
                action: Some(" Task. ".into()),
                ..AuditQuery::default()
            },
            Utc::now(),
        )
        .expect("valid");
        assert_eq!(
            f.actions,
            Some(vec![
                "task.approve",
                "task.cancel",
                "task.retry",
                "task.skip"
            ])
        );
        let e = parse(
            &AuditQuery {
                action: Some("tsk".into()),
                ..AuditQuery::default()
            },
            Utc::now(),
        )
        .expect_err("refused");
        assert_eq!(e.field, "action");
        assert!(e.message.contains("no action starts with `tsk`"), "{e}");
    }

    #[test]
    fn bad_times_and_text_name_their_field() {
        let bad = |q: AuditQuery| parse(&q, Utc::now()).expect_err("refused").field;
        assert_eq!(
            bad(AuditQuery {
                since: Some("last tuesday".into()),
                ..AuditQuery::default()
            }),
            "since"
        );
        assert_eq!(
            bad(AuditQuery {
                since: Some("1h".into()),
                until: Some("2h".into()),
                ..AuditQuery::default()
            }),
            "until"
        );
        assert_eq!(
            bad(AuditQuery {
                subject: Some("x\u{7}".into()),
                ..AuditQuery::default()
            }),
            "subject"
        );
    }
}
