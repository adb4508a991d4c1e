//! `baton retry|cancel|skip|approve PLAN [TASK]`: the plan page's buttons from the
//! command line, for the incident at hand. Each prints the plan as it is
//! after the action.

use clap::Args;
use domain::model::PlanView;

use super::{ApiClient, ServerArg, render};

#[derive(Args, Debug, Clone)]
pub struct TaskActionArgs {
    /// The plan id.
    pub plan: i64,
    /// A task of the plan, by name or id. Without it, retry and cancel
    /// apply to the whole plan (every FAILED or CANCELED task; every live
    /// one); skip needs a task.
    pub task: Option<String>,
    #[command(flatten)]
    pub server: ServerArg,
}

/// Which button.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskAction {
    Retry,
    Cancel,
    Skip,
    Approve,
}

impl TaskAction {
    fn verb(self) -> &'static str {
        match self {
            TaskAction::Retry => "retry",
            TaskAction::Cancel => "cancel",
            TaskAction::Skip => "skip",
            TaskAction::Approve => "approve",
        }
    }
}

pub async fn task_action(
    action: TaskAction,
    args: TaskActionArgs,
    listen: std::net::SocketAddr,
) -> anyhow::Result<()> {
    let client = args.server.client(listen)?;
    let verb = action.verb();
    let view: PlanView = match &args.task {
        None if action == TaskAction::Skip => {
            anyhow::bail!("name the task to skip: baton skip {} TASK", args.plan)
        }
        None => {
            client
                .post(&format!("plans/{}/{verb}", args.plan), None)
                .await?
        }
        Some(task) => {
            let id = task_id(&client, args.plan, task).await?;
            client.post(&format!("tasks/{id}/{verb}"), None).await?
        }
    };
    // The answer is the plan after the action; a RUNNING run's cancel shows
    // as "canceling" until its replica confirms the kill.
    super::show(&render::plan(&view, client.base()));
    Ok(())
}

/// The id of the task of `plan` named (or numbered) `task`.
async fn task_id(client: &ApiClient, plan: i64, task: &str) -> anyhow::Result<i64> {
    let view = client.plan(plan).await?;
    view.tasks
        .iter()
        .find(|t| t.name == task)
        .or_else(|| view.tasks.iter().find(|t| t.id.to_string() == task))
        .map(|t| t.id)
        .ok_or_else(|| {
            let names: Vec<&str> = view
                .tasks
                .iter()
                .map(|t| t.name.as_str())
                .take(10)
                .collect();
            anyhow::anyhow!(
                "plan {plan} has no task named {task} (its tasks: {}{})",
                names.join(", "),
                if view.tasks.len() > 10 { ", …" } else { "" }
            )
        })
}
