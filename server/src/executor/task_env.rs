//! The environment a command starts with (docs/security.md, "What a
//! command sees"): what a program needs to run at all, the names the
//! operator chose to pass on (`BATON_TASK_ENV`), the task's own `env`, and
//! the run's variables — never Baton's own settings. A command inheriting
//! the server's environment printed `BATON_DATABASE_URL`, password and all,
//! into a log every viewer reads, and with that URL a task could write
//! approvals and sessions straight into the database.

use std::ffi::OsString;

/// Passed on from the server's environment whatever the operator says:
/// without these, programs cannot find each other, a home, or a locale.
const ALWAYS: [&str; 10] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
];

/// Every `LC_*` locale variable is passed on too.
const LOCALE_PREFIX: &str = "LC_";

/// Names a command never inherits, even when listed: Baton's own settings.
const RESERVED_PREFIX: &str = "BATON_";

/// Which of the server's variables a command inherits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskEnv {
    /// Extra names from `BATON_TASK_ENV`.
    pass: Vec<String>,
}

impl TaskEnv {
    /// `names` as `BATON_TASK_ENV` lists them; a `BATON_*` name, or one no
    /// variable could have, is refused naming it.
    pub fn new(names: &[String]) -> anyhow::Result<Self> {
        let mut pass = Vec::new();
        for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
            anyhow::ensure!(
                !name.to_ascii_uppercase().starts_with(RESERVED_PREFIX),
                "BATON_TASK_ENV lists {name}: Baton's own settings (BATON_*) are never \
                 passed to commands; a task needing a value gets it in its plan's `env`"
            );
            anyhow::ensure!(
                name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && !name.starts_with(|c: char| c.is_ascii_digit()),
                "BATON_TASK_ENV lists {name:?}, which is not a variable name (letters, \
                 digits and _, not starting with a digit)"
            );
            pass.push(name.to_owned());
        }
        Ok(TaskEnv { pass })
    }

    /// Whether a command inherits the server's variable `name`.
    pub fn passes(&self, name: &str) -> bool {
        if name.starts_with(RESERVED_PREFIX) {
            return false;
        }
        ALWAYS.contains(&name)
            || name.starts_with(LOCALE_PREFIX)
            || self.pass.iter().any(|p| p == name)
    }

    /// The server's variables a command inherits, from `vars`.
    pub fn inherited(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        vars.into_iter()
            .filter(|(name, _)| name.to_str().is_some_and(|n| self.passes(n)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn only_what_programs_need_and_what_the_operator_names_is_inherited() {
        let env = TaskEnv::new(&["HTTPS_PROXY".into(), " AWS_REGION ".into()]).unwrap();
        let server = vars(&[
            ("PATH", "/usr/bin"),
            ("LC_ALL", "C.UTF-8"),
            ("BATON_DATABASE_URL", "postgres://baton:hunter2@db/baton"),
            ("BATON_WEBHOOK_SECRET", "s3cret"),
            ("AWS_SECRET_ACCESS_KEY", "k"),
            ("AWS_REGION", "eu-west-1"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("LD_PRELOAD", "/tmp/evil.so"),
        ]);
        let got: Vec<String> = env
            .inherited(server)
            .into_iter()
            .map(|(k, _)| k.into_string().unwrap())
            .collect();
        assert_eq!(got, ["PATH", "LC_ALL", "AWS_REGION", "HTTPS_PROXY"]);
    }

    #[test]
    fn baton_settings_and_non_names_are_refused_naming_them() {
        let e = TaskEnv::new(&["BATON_DATABASE_URL".into()]).unwrap_err();
        assert!(e.to_string().contains("BATON_DATABASE_URL"), "{e}");
        let e = TaskEnv::new(&["baton_token".into()]).unwrap_err();
        assert!(e.to_string().contains("baton_token"), "{e}");
        for bad in ["A=B", "1ABC", "A B", "Ä"] {
            let e = TaskEnv::new(&[bad.into()]).unwrap_err();
            assert!(e.to_string().contains("not a variable name"), "{bad}: {e}");
        }
        assert_eq!(TaskEnv::new(&[" ".into()]).unwrap(), TaskEnv::default());
    }
}
