//! Plain-text tables for the terminal: what the dashboard shows, in
//! columns an operator can read and `grep`.

use domain::model::{PausedView, PlanList, PlanView, TargetView, TaskStatus, TaskView};
use domain::search::RunList;

/// A plan's header and one line per task.
pub fn plan(view: &PlanView, base: &str) -> String {
    let mut out = format!(
        "plan {} {}: {}  ({}/plans/{})\n",
        view.id, view.name, view.status, base, view.id
    );
    if !view.description.is_empty() {
        out.push_str(&view.description);
        out.push('\n');
    }
    if let Some(by) = &view.paused_by {
        let at = view
            .paused_at
            .map(|at| format!(" at {}", at.format("%Y-%m-%d %H:%M:%SZ")))
            .unwrap_or_default();
        out.push_str(&format!("paused by {by}{at}: no new run of it starts\n"));
    }
    let mut rows = vec![header(&["TASK", "TARGET", "STATUS", "ATTEMPT", "DETAIL"])];
    rows.extend(view.tasks.iter().map(|t| {
        vec![
            t.name.clone(),
            t.target.clone(),
            t.status.to_string(),
            t.attempt.map(|a| a.to_string()).unwrap_or_default(),
            detail(t),
        ]
    }));
    out.push_str(&table(&rows));
    out
}

/// One line per run, newest first, and how to ask for the next page.
pub fn run_list(list: &RunList) -> String {
    if list.runs.is_empty() {
        return "no run matches\n".to_owned();
    }
    let mut rows = vec![header(&[
        "RUN", "PLAN", "TASK", "TARGET", "STATUS", "REPLICA", "FINISHED", "ERROR",
    ])];
    rows.extend(list.runs.iter().map(|r| {
        vec![
            r.id.to_string(),
            format!("{} {}", r.plan_id, r.plan_name),
            format!("{} #{}", r.task_name, r.attempt),
            r.target.clone(),
            r.status.to_string(),
            r.replica_id.clone().unwrap_or_default(),
            r.finished_at
                .map(|at| at.format("%Y-%m-%d %H:%M:%SZ").to_string())
                .unwrap_or_default(),
            r.error
                .as_deref()
                .and_then(|e| e.lines().next())
                .unwrap_or_default()
                .chars()
                .take(60)
                .collect(),
        ]
    }));
    let mut out = table(&rows);
    if let Some(next) = list.next_before {
        out.push_str(&format!("(more: --before {next})\n"));
    }
    out
}

/// One line per audit entry, newest first.
pub fn audit_list(list: &domain::audit::AuditList) -> String {
    if list.entries.is_empty() {
        return "no entry matches\n".to_owned();
    }
    let mut rows = vec![header(&[
        "ID", "AT", "ACTOR", "FROM", "ACTION", "SUBJECT", "DETAIL",
    ])];
    rows.extend(list.entries.iter().map(|e| {
        let action = match e.outcome {
            domain::audit::Outcome::Done => e.action.clone(),
            domain::audit::Outcome::Refused => format!("{} (refused)", e.action),
        };
        vec![
            e.id.to_string(),
            e.at.format("%Y-%m-%d %H:%M:%SZ").to_string(),
            e.actor.clone(),
            e.address.clone().unwrap_or_default(),
            action,
            e.subject.clone(),
            e.detail.chars().take(80).collect(),
        ]
    }));
    let mut out = table(&rows);
    if let Some(next) = list.next_before {
        out.push_str(&format!("(more: --before {next})\n"));
    }
    out
}

/// One line per plan, newest first, with its tasks counted by status.
pub fn plan_list(list: &PlanList) -> String {
    let mut rows = vec![header(&["ID", "NAME", "STATUS", "TASKS", "CREATED"])];
    rows.extend(list.plans.iter().map(|p| {
        let counts: Vec<String> = TaskStatus::PROGRESS_ORDER
            .iter()
            .filter_map(|s| p.counts.get(s).map(|n| format!("{n} {s}")))
            .collect();
        vec![
            p.id.to_string(),
            p.name.clone(),
            p.status.to_string(),
            counts.join(", "),
            p.created_at.format("%Y-%m-%d %H:%M:%SZ").to_string(),
        ]
    }));
    let mut out = table(&rows);
    if list.total > list.plans.len() as i64 {
        out.push_str(&format!(
            "({} of {} plans; --limit shows more)\n",
            list.plans.len(),
            list.total
        ));
    }
    out
}

/// One line per target: capacity, pause, what holds it, what waits.
pub fn targets(targets: &[TargetView]) -> String {
    let mut rows = vec![header(&[
        "TARGET", "CAPACITY", "HOLDING", "WAITING", "PAUSED", "LINE",
    ])];
    rows.extend(targets.iter().map(|t| {
        let holding = match (t.holding, t.first_holder) {
            (0, _) => "0".to_owned(),
            (n, Some(first)) if t.held_exclusively => format!("{n} (exclusive, run #{first})"),
            (n, Some(first)) => format!("{n} (first run #{first})"),
            (n, None) => n.to_string(),
        };
        vec![
            t.target.clone(),
            t.capacity.map_or("-".to_owned(), |c| c.to_string()),
            holding,
            t.waiting.to_string(),
            t.paused_by
                .as_ref()
                .map(|by| format!("by {by}"))
                .unwrap_or_default(),
            t.halted_by
                .as_ref()
                .map(|h| {
                    format!(
                        "halted at {} by run #{} ({})",
                        h.version,
                        h.run_id,
                        h.status.as_str()
                    )
                })
                .unwrap_or_default(),
        ]
    }));
    table(&rows)
}

/// The paused plans, then the paused targets.
pub fn paused(view: &PausedView) -> String {
    if view.plans.is_empty() && view.targets.is_empty() {
        return "nothing is paused\n".to_owned();
    }
    let mut rows = vec![header(&["PLAN", "NAME", "PAUSED BY", "SINCE"])];
    rows.extend(view.plans.iter().map(|p| {
        vec![
            p.id.to_string(),
            p.name.clone(),
            p.paused_by.clone(),
            p.paused_at.format("%Y-%m-%d %H:%M:%SZ").to_string(),
        ]
    }));
    let mut out = String::new();
    if !view.plans.is_empty() {
        out.push_str(&table(&rows));
    }
    if !view.targets.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&targets(&view.targets));
    }
    out
}

/// `baton workers`: replicas and agents, as `/replicas` shows them.
pub fn workers(workers: &[domain::model::ReplicaView]) -> String {
    if workers.is_empty() {
        return "no replica or agent has written a heartbeat\n".to_owned();
    }
    let mut rows = vec![header(&[
        "ID",
        "KIND",
        "HOST",
        "LABELS",
        "STATE",
        "LAST HEARTBEAT",
        "RUNNING",
        "VERSION",
    ])];
    rows.extend(workers.iter().map(|w| {
        let kind = match w.kind {
            domain::model::WorkerKind::Replica => "replica",
            domain::model::WorkerKind::Agent => "agent",
        };
        let mut state = match (w.alive, w.leader) {
            (true, true) => "alive, leader",
            (true, false) => "alive",
            (false, _) => "stale",
        }
        .to_owned();
        if let Some(by) = &w.draining_by {
            state.push_str(&format!(", draining (by {by})"));
        }
        vec![
            w.replica_id.clone(),
            kind.to_owned(),
            w.hostname.clone(),
            w.labels.join(","),
            state,
            w.last_heartbeat.format("%Y-%m-%d %H:%M:%SZ").to_string(),
            w.running.to_string(),
            w.version.clone(),
        ]
    }));
    table(&rows)
}

/// What an operator wants to know beside a task's status.
fn detail(task: &TaskView) -> String {
    match task.status {
        TaskStatus::Pending => task.waiting_cause.clone().unwrap_or_default(),
        TaskStatus::Running => {
            let on = task.replica_id.as_ref().map(|r| format!("on {r}"));
            match (&task.cancel_requested_by, on) {
                (Some(by), Some(on)) => format!("{on}, canceling (asked by {by})"),
                (Some(by), None) => format!("canceling (asked by {by})"),
                (None, on) => on.unwrap_or_default(),
            }
        }
        TaskStatus::Failed | TaskStatus::Canceled => task.error.clone().unwrap_or_default(),
        _ => String::new(),
    }
}

fn header(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// Left-aligned columns two spaces apart; the last column is not padded,
/// so long details do not drag trailing blanks.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_and_lines_carry_no_trailing_blanks() {
        let rows = vec![
            header(&["TASK", "STATUS", "DETAIL"]),
            vec![
                "migrate-orders".into(),
                "PENDING".into(),
                "plan limit 2".into(),
            ],
            vec!["x".into(), "DONE".into(), String::new()],
        ];
        assert_eq!(
            table(&rows),
            "TASK            STATUS   DETAIL\n\
             migrate-orders  PENDING  plan limit 2\n\
             x               DONE\n"
        );
    }
}
