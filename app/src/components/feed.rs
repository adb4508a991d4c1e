//! Which live view a page follows: the key of the server's push feed.
//!
//! A page names its view with a [`Feed`]; the browser asks for
//! [`Feed::path`] (`/live/plan/42?page=2`), the server parses the same
//! path back with [`Feed::parse`] and reads the view with
//! `pages::live_views::read`,
//! which calls the very server function the page calls, so a pushed view
//! and a server-rendered one can never differ. Every way of writing one
//! view parses to the same `Feed`, and so to the same path: the server
//! keys its one refresher per view by that path.

use std::collections::BTreeMap;

use domain::audit::AuditQuery;
use domain::query::{encode_value, field};
use domain::search::{BulkAction, RunQuery};

/// The prefix of every feed's address.
pub const LIVE_PREFIX: &str = "/live/";

/// One live view, with what selects its data (and nothing else).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Feed {
    Overview,
    /// The plans list: status as typed, name search, page from 1, and
    /// the bulk action being confirmed (the page shows its count).
    Plans {
        status: String,
        q: String,
        page: i64,
        confirm: Option<BulkAction>,
    },
    /// A plan's page of tasks, from 1.
    Plan {
        id: i64,
        page: i64,
    },
    /// The runs search: the filter, the page's upper bound and the bulk
    /// action being confirmed (the page shows its count).
    Runs {
        query: RunQuery,
        before: Option<i64>,
        confirm: Option<BulkAction>,
    },
    Run {
        id: i64,
    },
    /// The audit log: the filter and the page's upper bound.
    Audit {
        query: AuditQuery,
        before: Option<i64>,
    },
    Replicas,
    Deliveries,
    Targets,
    Schedules,
    Schedule {
        id: i64,
    },
}

impl Feed {
    /// The plans list's feed, normalised as its server function reads it
    /// (the name search trimmed, the status as typed: a status with spaces
    /// is an error there, so it must be one here too).
    pub fn plans(status: &str, q: &str, page: i64, confirm: Option<BulkAction>) -> Feed {
        Feed::Plans {
            status: status.to_owned(),
            q: q.trim().to_owned(),
            page: page.max(1),
            confirm,
        }
    }

    /// The runs search's feed; empty fields are no filter, as on the page.
    pub fn runs(query: RunQuery, before: Option<i64>, confirm: Option<BulkAction>) -> Feed {
        Feed::Runs {
            query: RunQuery {
                status: field(query.status),
                target: field(query.target),
                plan: field(query.plan),
                replica: field(query.replica),
                actor: field(query.actor),
                error: field(query.error),
                since: field(query.since),
                until: field(query.until),
            },
            before,
            confirm,
        }
    }

    /// The audit log's feed; empty fields are no filter, as on the page.
    pub fn audit(query: AuditQuery, before: Option<i64>) -> Feed {
        Feed::Audit {
            query: AuditQuery {
                actor: field(query.actor),
                action: field(query.action),
                subject: field(query.subject),
                since: field(query.since),
                until: field(query.until),
            },
            before: before.filter(|b| *b > 0),
        }
    }

    /// The feed's address: the canonical spelling of this view.
    pub fn path(&self) -> String {
        let with = |path: &str, params: Vec<(&str, String)>| {
            let query: Vec<String> = params
                .into_iter()
                .map(|(name, value)| format!("{name}={}", encode_value(&value)))
                .collect();
            if query.is_empty() {
                format!("{LIVE_PREFIX}{path}")
            } else {
                format!("{LIVE_PREFIX}{path}?{}", query.join("&"))
            }
        };
        match self {
            Feed::Overview => with("overview", vec![]),
            Feed::Plans {
                status,
                q,
                page,
                confirm,
            } => {
                let mut params = Vec::new();
                if !status.is_empty() {
                    params.push(("status", status.clone()));
                }
                if !q.is_empty() {
                    params.push(("q", q.clone()));
                }
                if *page != 1 {
                    params.push(("page", page.to_string()));
                }
                if let Some(confirm) = confirm {
                    params.push(("confirm", confirm.as_str().to_owned()));
                }
                with("plans", params)
            }
            Feed::Plan { id, page } => with(
                &format!("plan/{id}"),
                (*page != 1)
                    .then(|| ("page", page.to_string()))
                    .into_iter()
                    .collect(),
            ),
            Feed::Runs {
                query,
                before,
                confirm,
            } => {
                let mut params = searched(query.pairs(), *before);
                if let Some(confirm) = confirm {
                    params.push(("confirm", confirm.as_str().to_owned()));
                }
                with("runs", params)
            }
            Feed::Run { id } => with(&format!("run/{id}"), vec![]),
            Feed::Audit { query, before } => with("audit", searched(query.pairs(), *before)),
            Feed::Replicas => with("replicas", vec![]),
            Feed::Deliveries => with("deliveries", vec![]),
            Feed::Targets => with("targets", vec![]),
            Feed::Schedules => with("schedules", vec![]),
            Feed::Schedule { id } => with(&format!("schedule/{id}"), vec![]),
        }
    }

    /// The feed that `view` (the path after [`LIVE_PREFIX`]) with the
    /// decoded query `params` names; `None` for no view.
    pub fn parse(view: &str, params: &BTreeMap<String, String>) -> Option<Feed> {
        let param = |name: &str| params.get(name).cloned().unwrap_or_default();
        let page = || param("page").parse::<i64>().unwrap_or(1).max(1);
        let id = |text: &str| text.parse::<i64>().ok();
        let feed = match view.split_once('/') {
            None => match view {
                "overview" => Feed::Overview,
                "plans" => Feed::plans(
                    &param("status"),
                    &param("q"),
                    page(),
                    BulkAction::parse(&param("confirm")),
                ),
                "runs" => Feed::runs(
                    RunQuery {
                        status: Some(param("status")),
                        target: Some(param("target")),
                        plan: Some(param("plan")),
                        replica: Some(param("replica")),
                        actor: Some(param("actor")),
                        error: Some(param("error")),
                        since: Some(param("since")),
                        until: Some(param("until")),
                    },
                    param("before").parse::<i64>().ok(),
                    BulkAction::parse(&param("confirm")),
                ),
                "audit" => Feed::audit(
                    AuditQuery {
                        actor: Some(param("actor")),
                        action: Some(param("action")),
                        subject: Some(param("subject")),
                        since: Some(param("since")),
                        until: Some(param("until")),
                    },
                    param("before").parse::<i64>().ok(),
                ),
                "replicas" => Feed::Replicas,
                "deliveries" => Feed::Deliveries,
                "targets" => Feed::Targets,
                "schedules" => Feed::Schedules,
                _ => return None,
            },
            Some(("plan", rest)) => Feed::Plan {
                id: id(rest)?,
                page: page(),
            },
            Some(("run", rest)) => Feed::Run { id: id(rest)? },
            Some(("schedule", rest)) => Feed::Schedule { id: id(rest)? },
            Some(_) => return None,
        };
        Some(feed)
    }
}

/// A search's filled-in fields and its page's cursor, as feed parameters.
fn searched<'a>(pairs: Vec<(&'a str, &str)>, before: Option<i64>) -> Vec<(&'a str, String)> {
    pairs
        .into_iter()
        .map(|(name, value)| (name, value.to_owned()))
        .chain(before.map(|b| ("before", b.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::Feed;
    use domain::audit::AuditQuery;
    use domain::search::{BulkAction, RunQuery};

    fn parse(path: &str) -> Option<Feed> {
        let (view, query) = path
            .strip_prefix(super::LIVE_PREFIX)?
            .split_once('?')
            .unwrap_or((path.strip_prefix(super::LIVE_PREFIX)?, ""));
        let params: BTreeMap<String, String> = query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.replace("%2F", "/").replace("%20", " ")))
            .collect();
        Feed::parse(view, &params)
    }

    /// What the browser asks for is what the server keys by.
    #[test]
    fn every_feed_survives_its_path() {
        let feeds = [
            Feed::Overview,
            Feed::plans("FAILED", "nightly run", 3, None),
            Feed::plans("", "", 1, None),
            Feed::plans("FAILED", "orders", 1, Some(BulkAction::Skip)),
            Feed::Plan { id: 42, page: 2 },
            Feed::Plan { id: 42, page: 1 },
            Feed::runs(
                RunQuery {
                    target: Some("db/orders".into()),
                    status: Some(" failed ".into()),
                    ..Default::default()
                },
                Some(900),
                Some(BulkAction::Retry),
            ),
            Feed::Run { id: 7 },
            Feed::audit(
                AuditQuery {
                    action: Some("task.".into()),
                    subject: Some(" release 42 ".into()),
                    ..Default::default()
                },
                Some(12),
            ),
            Feed::audit(AuditQuery::default(), None),
            Feed::Replicas,
            Feed::Deliveries,
            Feed::Targets,
            Feed::Schedules,
            Feed::Schedule { id: 3 },
        ];
        for feed in feeds {
            assert_eq!(parse(&feed.path()), Some(feed.clone()), "{}", feed.path());
        }
    }

    /// One view has one spelling, so one refresher serves all its viewers.
    #[test]
    fn a_view_written_two_ways_is_one_feed() {
        assert_eq!(parse("/live/plan/42?page=1"), parse("/live/plan/42"));
        assert_eq!(parse("/live/plan/42?page=-5"), parse("/live/plan/42"));
        assert_eq!(
            parse("/live/runs?status=&target=db/x").map(|f| f.path()),
            Some("/live/runs?target=db/x".to_owned())
        );
    }

    #[test]
    fn what_is_no_view_is_refused() {
        for path in [
            "/live/plan/x",
            "/live/plan/",
            "/live/nothing",
            "/live/run/1/2",
            "/live/",
        ] {
            assert_eq!(parse(path), None, "{path}");
        }
    }
}
