//! Query strings the dashboard writes itself (filter links, the sign-in
//! page's `next`).

/// Percent-encodes a query value. `/` stays as it is: it is legal in a
/// query, and keeps a `next=/plans/3` readable.
pub fn encode_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The filled-in fields of a search form, as `(name, value)` in the order
/// given: values trimmed, empty ones left out.
pub fn filled<'a>(fields: &[(&'static str, &'a Option<String>)]) -> Vec<(&'static str, &'a str)> {
    fields
        .iter()
        .filter_map(|(name, value)| {
            value
                .as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(|v| (*name, v))
        })
        .collect()
}

/// A search field as the server reads it: trimmed, and `None` when empty.
pub fn field(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// A query string (without `?`) of `pairs`, then `extra`.
pub fn query_string(pairs: Vec<(&str, &str)>, extra: &[(&str, String)]) -> String {
    pairs
        .into_iter()
        .map(|(name, value)| (name, value.to_owned()))
        .chain(extra.iter().map(|(n, v)| (*n, v.clone())))
        .map(|(name, value)| format!("{name}={}", encode_value(&value)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    #[test]
    fn reserved_characters_are_escaped_and_slashes_kept() {
        assert_eq!(
            super::encode_value("/plans?status=FAILED&x=a b%"),
            "/plans%3Fstatus%3DFAILED%26x%3Da%20b%25"
        );
    }

    #[test]
    fn blank_fields_are_no_filter() {
        let (a, b, c) = (Some(" db/x ".to_owned()), Some("  ".to_owned()), None);
        let pairs = super::filled(&[("target", &a), ("plan", &b), ("actor", &c)]);
        assert_eq!(pairs, vec![("target", "db/x")]);
        assert_eq!(
            super::query_string(pairs, &[("before", "9".into())]),
            "target=db/x&before=9"
        );
        assert_eq!(super::field(b), None);
    }
}
