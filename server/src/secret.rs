//! A value that must never reach a log or an error message: webhook
//! signing secrets. `Debug` prints `"***"`; code that needs the value
//! asks for it by name ([`Secret::expose`]), so every use is visible.
//! (Database passwords travel inside the URL, which `config::DatabaseUrl`
//! redacts the same way.)

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::Type)]
#[serde(transparent)]
#[sqlx(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself, to sign with or to store.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

/// For clap: `--webhook-secret` and `BATON_WEBHOOK_SECRET`.
impl FromStr for Secret {
    type Err = Infallible;

    fn from_str(s: &str) -> Result<Secret, Infallible> {
        Ok(Secret::new(s))
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "\"***\"");
        assert_eq!(format!("{:?}", Some(&s)), "Some(\"***\")");
        assert_eq!(s.expose(), "hunter2");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"hunter2\"");
    }
}
