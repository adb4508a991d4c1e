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

#[cfg(test)]
mod tests {
    #[test]
    fn reserved_characters_are_escaped_and_slashes_kept() {
        assert_eq!(
            super::encode_value("/plans?status=FAILED&x=a b%"),
            "/plans%3Fstatus%3DFAILED%26x%3Da%20b%25"
        );
    }
}
