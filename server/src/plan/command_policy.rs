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

    /// `Err` says why `program` may not start here with `env` (the
    /// task's variables, by name).
    pub fn allows<'a>(
        &self,
        program: &str,
        mut env: impl Iterator<Item = &'a String>,
    ) -> Result<(), String> {
        if let CommandPolicy::Only(_) = self
            && let Some(name) = env.find(|n| steers_program(n))
        {
            return Err(format!(
                "a task may not set `{name}` on this server: with a list of allowed commands \
                 (BATON_ALLOWED_COMMANDS), PATH and the loader's LD_* variables would choose \
                 another program than the one named"
            ));
        }
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
            self.allows(program, std::iter::empty())
                .map_err(|message| InvalidPlan {
                    message: format!("tasks[{i}].command.argv[0]: {message}"),
                    field: Some(format!("tasks[{i}].command.argv[0]")),
                })?;
            self.allows(program, command.env.keys())
                .map_err(|message| InvalidPlan {
                    message: format!("tasks[{i}].command.env: {message}"),
                    field: Some(format!("tasks[{i}].command.env")),
                })?;
        }
        Ok(())
    }
}

/// Where only some programs may start, a task's environment must not pick
/// the program (`PATH`: `{"PATH": "/tmp/x"}` made `echo` run /tmp/x/echo)
/// or inject code into it (the dynamic loader's `LD_PRELOAD` and kin,
/// which also reached the supervisor).
fn steers_program(name: &str) -> bool {
    name == "PATH" || name.starts_with("LD_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_compared_as_written() {
        let policy = CommandPolicy::from_settings(false, &["psql".into(), "/usr/bin/env".into()]);
        let none = || std::iter::empty();
        assert!(policy.allows("psql", none()).is_ok());
        assert!(policy.allows("/usr/bin/env", none()).is_ok());
        for refused in ["./psql", "/tmp/psql", "env", "sh", "psql ", ""] {
            assert!(policy.allows(refused, none()).is_err(), "{refused}");
        }
        for name in ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH"] {
            let env = [name.to_owned()];
            let why = policy.allows("psql", env.iter()).unwrap_err();
            assert!(why.contains(&format!("may not set `{name}`")), "{why}");
        }
        let env = ["PGHOST".to_owned(), "path".to_owned()];
        assert!(policy.allows("psql", env.iter()).is_ok());
        let env = ["PATH".to_owned()];
        assert!(CommandPolicy::Any.allows("psql", env.iter()).is_ok());
        assert_eq!(
            CommandPolicy::from_settings(false, &[" ".into()]),
            CommandPolicy::Any
        );
        let off = CommandPolicy::from_settings(true, &["psql".into()]);
        assert!(
            off.allows("psql", std::iter::empty())
                .unwrap_err()
                .contains("runs no commands")
        );
    }
}
