//! Text made safe for the HTML the server writes.

/// Text for an element whose children the server writes into its HTML as
/// they are: leptos_meta's `<Title>`, and tachys' `<textarea>` (it does not
/// escape a textarea's children). A plan named `x</title><script>…`, or a
/// schedule file holding `</textarea><meta http-equiv=refresh …>`, would
/// close the element and inject markup (hostile trials did both). On the
/// server the text is escaped; in the browser it is set as text (the
/// title, or the textarea's `value`), which needs no escaping.
pub fn unescaped_child_text(text: String) -> String {
    if cfg!(feature = "ssr") {
        escape_html(&text)
    } else {
        text
    }
}

/// Text made safe to place inside an HTML element or a quoted attribute.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
