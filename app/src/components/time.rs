//! Times as operators read them: relative ("12 s ago") with the exact UTC
//! time on hover, always measured against the server's clock (`now` comes
//! with each page's data; see `views`).

use chrono::{DateTime, Utc};
use leptos::prelude::*;

/// "12 s ago", "in 3 min", "2 h ago", or the date when older than a day.
pub fn relative(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - at).num_seconds();
    let (past, secs) = (secs >= 0, secs.unsigned_abs());
    let span = match secs {
        0..=59 => format!("{secs} s"),
        60..=3_599 => format!("{} min", secs / 60),
        3_600..=86_399 => format!("{} h", secs / 3_600),
        _ => return at.format("%Y-%m-%d").to_string(),
    };
    if past {
        format!("{span} ago")
    } else {
        format!("in {span}")
    }
}

/// The exact time, as shown on hover.
pub fn exact(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// A length of time: "850 ms", "42 s", "3 min 5 s", "2 h 10 min".
pub fn duration(from: DateTime<Utc>, to: DateTime<Utc>) -> String {
    let ms = (to - from).num_milliseconds().max(0);
    let secs = ms / 1_000;
    match secs {
        0 => format!("{ms} ms"),
        1..=59 => format!("{secs} s"),
        60..=3_599 => format!("{} min {} s", secs / 60, secs % 60),
        _ => format!("{} h {} min", secs / 3_600, secs % 3_600 / 60),
    }
}

/// A `<time>` element: relative text, exact time on hover and for machines.
#[component]
pub fn Ago(at: DateTime<Utc>, now: DateTime<Utc>) -> impl IntoView {
    view! {
        <time datetime=at.to_rfc3339() title=exact(at) class="whitespace-nowrap">
            {relative(at, now)}
        </time>
    }
}

/// [`Ago`] for an optional time; a dash when there is none.
#[component]
pub fn MaybeAgo(at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> impl IntoView {
    match at {
        Some(at) => view! { <Ago at now /> }.into_any(),
        None => view! { <span class="text-slate-500">"—"</span> }.into_any(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn relative_times_read_naturally() {
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 14, 0, 0).unwrap();
        let ago = |s: i64| relative(now - chrono::Duration::seconds(s), now);
        assert_eq!(ago(0), "0 s ago");
        assert_eq!(ago(12), "12 s ago");
        assert_eq!(ago(125), "2 min ago");
        assert_eq!(ago(7_200), "2 h ago");
        assert_eq!(ago(-30), "in 30 s");
        assert_eq!(ago(3 * 86_400), "2026-11-19");
    }

    #[test]
    fn durations_pick_a_readable_unit() {
        let t = Utc.with_ymd_and_hms(2026, 11, 22, 14, 0, 0).unwrap();
        let after = |ms: i64| duration(t, t + chrono::Duration::milliseconds(ms));
        assert_eq!(after(850), "850 ms");
        assert_eq!(after(42_000), "42 s");
        assert_eq!(after(185_000), "3 min 5 s");
        assert_eq!(after(7_800_000), "2 h 10 min");
    }
}
