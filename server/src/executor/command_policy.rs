//! Which programs the command executor may start on this server.
//!
//! Whoever may submit a plan may run any command as the server's user:
//! that is what the command executor is for, and it is remote code
//! execution by design. Operators narrow it here: `BATON_ALLOWED_COMMANDS`
//! names the programs a task's `argv[0]` may be, and
//! `BATON_DISABLE_COMMANDS` turns the executor off. The policy is checked
//! twice: at submit, so a plan that would be refused is never stored, and
//! again by the replica that would start the program, which may be
//! configured more strictly than the one that took the plan, and which
//! also sees plans stored before the policy was set.

use std::collections::BTreeSet;

use crate::plan::{ExecutorSpec, InvalidPlan, NewPlan};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum CommandPolicy {
    /// Any program (the default; see docs/security.md).
    #[default]
    Any,
    /// Only these `argv[0]`s, compared as written: `/usr/bin/psql` allows
    /// that path only; `psql` allows `psql` looked up on the server's
    /// `PATH`, not `./psql` nor `/tmp/psql`.
    Only(BTreeSet<String>),
    /// No command runs at all.
    Disabled,
}

impl CommandPolicy {
    /// The policy from the two settings; disabling wins over a list.
    pub fn from_settings(disabled: bool, allowed: &[String]) -> Self {
        let allowed: BTreeSet<String> = allowed
            .iter()
            .map(|a| a.trim().to_owned())
            .filter(|a| !a.is_empty())
            .collect();
        if disabled {
            CommandPolicy::Disabled
        } else if allowed.is_empty() {
            CommandPolicy::Any
        } else {
            CommandPolicy::Only(allowed)
        }
    }

    /// `Err` says why `program` may not start here.
    pub fn allows(&self, program: &str) -> Result<(), String> {
        match self {
            CommandPolicy::Any => Ok(()),
            CommandPolicy::Only(allowed) if allowed.contains(program) => Ok(()),
            CommandPolicy::Only(allowed) => Err(format!(
                "`{program}` is not one of this server's allowed commands ({}; BATON_ALLOWED_COMMANDS)",
                allowed.iter().cloned().collect::<Vec<_>>().join(", ")
            )),
            CommandPolicy::Disabled => Err(
                "this server runs no commands (BATON_DISABLE_COMMANDS); use an http or sleep task"
                    .to_owned(),
            ),
        }
    }

    /// Refuses a plan with a task this server would not run, naming it.
    pub fn check(&self, plan: &NewPlan) -> Result<(), InvalidPlan> {
        for (i, task) in plan.tasks.iter().enumerate() {
            let ExecutorSpec::Command(command) = &task.executor else {
                continue;
            };
            let program = command.argv.first().map_or("", String::as_str);
            self.allows(program).map_err(|message| InvalidPlan {
                message: format!("tasks[{i}].command.argv[0]: {message}"),
                field: Some(format!("tasks[{i}].command.argv[0]")),
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_compared_as_written() {
        let policy = CommandPolicy::from_settings(false, &["psql".into(), "/usr/bin/env".into()]);
        assert!(policy.allows("psql").is_ok());
        assert!(policy.allows("/usr/bin/env").is_ok());
        for refused in ["./psql", "/tmp/psql", "env", "sh", "psql ", ""] {
            assert!(policy.allows(refused).is_err(), "{refused}");
        }
        assert_eq!(
            CommandPolicy::from_settings(false, &[" ".into()]),
            CommandPolicy::Any
        );
        let off = CommandPolicy::from_settings(true, &["psql".into()]);
        assert!(off.allows("psql").unwrap_err().contains("runs no commands"));
    }
}
