//! Natural ordering of version strings: `2 < 10`, `1.9 < 1.10`, `0041 < 0042`.
//!
//! Versions are split into runs of digits and runs of other characters;
//! digit runs compare as numbers (leading zeros ignored, so any length
//! works), other runs compare as text. A version that is a prefix of another
//! sorts first (`1.2 < 1.2.1`).

use std::cmp::Ordering;

pub fn compare(a: &str, b: &str) -> Ordering {
    let mut left = Segments(a);
    let mut right = Segments(b);
    loop {
        match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let order = compare_segment(x, y);
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

fn compare_segment(x: &str, y: &str) -> Ordering {
    let digits = |s: &str| s.as_bytes()[0].is_ascii_digit();
    match (digits(x), digits(y)) {
        (true, true) => {
            let x = x.trim_start_matches('0');
            let y = y.trim_start_matches('0');
            // Equal-length digit strings compare like the numbers they are.
            x.len().cmp(&y.len()).then_with(|| x.cmp(y))
        }
        // Numbers sort before words at the same position: 1.2 < 1.beta.
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => x.cmp(y),
    }
}

/// Splits a version into maximal runs of ASCII digits and of other
/// characters.
struct Segments<'a>(&'a str);

impl<'a> Iterator for Segments<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let first = self.0.chars().next()?;
        let digit = first.is_ascii_digit();
        let end = self
            .0
            .find(|c: char| c.is_ascii_digit() != digit)
            .unwrap_or(self.0.len());
        let (segment, rest) = self.0.split_at(end);
        self.0 = rest;
        Some(segment)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_as_numbers() {
        let ordered = ["1", "2", "10", "0041", "42", "0100"];
        for pair in ordered.windows(2) {
            assert_eq!(compare(pair[0], pair[1]), Ordering::Less, "{pair:?}");
            assert_eq!(compare(pair[1], pair[0]), Ordering::Greater, "{pair:?}");
        }
    }

    #[test]
    fn dotted_versions_compare_segment_by_segment() {
        let ordered = ["1.2", "1.2.1", "1.9", "1.10", "1.10.0-rc1", "2.0", "10.0"];
        for pair in ordered.windows(2) {
            assert_eq!(compare(pair[0], pair[1]), Ordering::Less, "{pair:?}");
        }
        assert_eq!(compare("0042", "42"), Ordering::Equal);
        assert_eq!(compare("v1.9", "v1.10"), Ordering::Less);
    }

    #[test]
    fn huge_numbers_do_not_overflow() {
        assert_eq!(
            compare("99999999999999999999999", "100000000000000000000000"),
            Ordering::Less
        );
    }
}
