//! What is wrong with a YAML document, in words an operator can act on.
//!
//! The parser guards against documents built to exhaust memory (alias
//! bombs, deep nesting) with a budget; a document that breaches it was
//! refused with the breach's debug form (`AliasAnchorRatio { aliases:
//! 150, anchors: 1 }`). This says what was too much and what to do.

use serde_saphyr::Error;
use serde_saphyr::budget::BudgetBreach;

/// Why `document` ("the body", "the file") was refused, with a budget
/// breach told plainly.
pub fn yaml_problem(e: &Error, document: &str) -> String {
    let mut inner = e;
    while let Error::WithSnippet { error, .. } | Error::AliasError { error, .. } = inner {
        inner = error;
    }
    let Error::Budget { breach, location } = inner else {
        return format!("{document} is not valid YAML: {e}");
    };
    let at = format!("line {} column {}", location.line(), location.column());
    let what = match breach {
        BudgetBreach::AliasAnchorRatio { aliases, anchors } => format!(
            "it uses aliases (`*name`) {aliases} times for {anchors} anchor(s) (`&name`), \
             more than a plan or a users file needs: write the repeated values out, or anchor more of them"
        ),
        BudgetBreach::Aliases { aliases } => {
            format!(
                "it uses aliases (`*name`) {aliases} times, more than a plan or a users file needs"
            )
        }
        BudgetBreach::Anchors { anchors } => {
            format!(
                "it defines {anchors} anchors (`&name`), more than a plan or a users file needs"
            )
        }
        BudgetBreach::Depth { depth } => {
            format!(
                "it nests lists and maps {depth} levels deep, more than a plan or a users file needs"
            )
        }
        BudgetBreach::Nodes { nodes } | BudgetBreach::Events { events: nodes } => {
            format!("it expands to more than {nodes} values (through aliases, or simply by size)")
        }
        BudgetBreach::Documents { documents } => {
            format!("it holds {documents} YAML documents (`---`); send one plan per request")
        }
        other => format!("it is larger or more repetitive than the parser takes ({other:?})"),
    };
    format!("{document} is refused at {at}: {what}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_budget_breach_is_told_plainly() {
        let mut text = String::from("name: p\nx: &a {sleep: 0s}\ntasks:\n");
        for i in 0..150 {
            text.push_str(&format!("  - {{name: t{i}, target: t, extra: *a}}\n"));
        }
        let refused = crate::plan::parse_yaml(&text).unwrap_err();
        assert!(
            refused
                .message
                .contains("uses aliases (`*name`) 150 times for 1 anchor(s)"),
            "{}",
            refused.message
        );
        assert!(!refused.message.contains('\n'), "{}", refused.message);
    }
}
