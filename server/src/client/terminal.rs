//! Text from the server, made safe to print on an operator's terminal.
//!
//! Names and descriptions are checked at submit, but a run's error, a
//! custom executor's detail or a proxy's error page in front of the server
//! are not: an escape sequence in them would reach the terminal and could
//! clear the screen, retitle the window or write the clipboard (OSC 52).

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every control character but line breaks and tabs written
/// as a visible escape (`\u{1b}`).
pub fn safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match unsafe_char(c) {
            true => {
                let _ = write!(out, "{}", c.escape_unicode());
            }
            false => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// One line of `text`, at most `max` characters, safe to print: for
/// bodies that are not the server's own JSON (a proxy's HTML page).
pub fn excerpt(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = flat.chars().take(max).collect();
    let more = if flat.chars().count() > max {
        " …"
    } else {
        ""
    };
    format!("{}{more}", safe(&cut))
}

fn unsafe_char(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_reach_the_terminal_as_text() {
        assert_eq!(safe("plain\tline\n"), "plain\tline\n");
        assert_eq!(safe("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(safe("\u{9b}31m\r"), "\\u{9b}31m\\u{d}");
        assert_eq!(safe("\u{1b}]52;c;aGk=\u{7}"), "\\u{1b}]52;c;aGk=\\u{7}");
    }

    #[test]
    fn an_excerpt_is_one_short_safe_line() {
        let page = "<html>\n  <body>\u{1b}[31m Bad   Gateway </body>\n</html>";
        assert_eq!(
            excerpt(page, 200),
            "<html> <body>\\u{1b}[31m Bad Gateway </body> </html>"
        );
        assert_eq!(excerpt(&"x".repeat(50), 10), "xxxxxxxxxx …");
    }
}
