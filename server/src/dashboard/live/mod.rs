//! The dashboard's live feed: one snapshot per view per replica, pushed to
//! every tab that watches it as server-sent events (`GET /live/{view}`).
//!
//! Before it, each open tab refetched its page's server function every two
//! seconds, so the dashboard's database cost grew with its viewers: the
//! load of an incident, when everyone opens the same pages. Now:
//!
//! - [`Hub`] (`hub.rs`) keeps, per view (a [`app::components::feed::Feed`],
//!   keyed by its canonical path), one refresher while at least one
//!   subscriber watches it, and bounds how many views and subscribers a
//!   replica serves.
//! - The refresher (`refresher.rs`) reads its view through the page's own
//!   server function, so a pushed view and a rendered one cannot differ;
//!   at most once per `interval`, and only after a change signal (any
//!   commit in this process, other replicas' through LISTEN/NOTIFY) or
//!   after `idle_refresh` without one (heartbeat ages, other replicas'
//!   claims). It encodes the view once and every subscriber gets the same
//!   bytes.
//! - `stream.rs` answers `GET /live/{view}`: the current view at once,
//!   then each new one, with keep-alive comments, until the tab goes away
//!   or the replica stops.
//!
//! The route sits behind the authentication guard like the pages; any
//! signed-in role may follow a view (the views carry nothing a viewer may
//! not see, and nothing per user).

mod hub;
mod refresher;
mod shared;
mod stream;

use std::time::Duration;

use anyhow::ensure;

pub use self::hub::{Hub, LiveStats, Refusal, Subscription};
pub use self::stream::follow;

/// Default of [`LiveConfig::interval`].
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(1000);
/// Default of [`LiveConfig::idle_refresh`].
pub const DEFAULT_IDLE_REFRESH: Duration = Duration::from_secs(5);
/// Default of [`LiveConfig::max_views`].
pub const DEFAULT_MAX_VIEWS: usize = 256;
/// Default of [`LiveConfig::max_subscribers`].
pub const DEFAULT_MAX_SUBSCRIBERS: usize = 1_000;
/// Default of [`LiveConfig::max_per_user`].
pub const DEFAULT_MAX_PER_USER: usize = 32;

/// The bounds of [`LiveConfig::interval`]: faster would make the feed the
/// database's load again; slower is no longer live.
const INTERVAL_RANGE: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(60));

/// How a replica's live feed reads and whom it serves.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// The shortest time between two reads of one view, whatever the
    /// signals and the number of viewers. Default 1 s
    /// (`BATON_LIVE_INTERVAL`).
    pub interval: Duration,
    /// A watched view is read again after this long even with no change
    /// signalled: heartbeat ages move, and other replicas' claims, log lines
    /// and heartbeats announce nothing. At least `interval`. Default 5 s
    /// (`BATON_LIVE_IDLE_REFRESH`).
    pub idle_refresh: Duration,
    /// The most distinct views followed at once. Default 256
    /// (`BATON_LIVE_MAX_VIEWS`).
    pub max_views: usize,
    /// The most open feed connections. Default 1,000
    /// (`BATON_LIVE_MAX_SUBSCRIBERS`).
    pub max_subscribers: usize,
    /// The most open feed connections of one user, so one user cannot take
    /// the replica's views or connections from the others (one viewer's
    /// 256 views once stalled a SQLite replica). Default 32
    /// (`BATON_LIVE_MAX_PER_USER`).
    pub max_per_user: usize,
}

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig {
            interval: DEFAULT_INTERVAL,
            idle_refresh: DEFAULT_IDLE_REFRESH,
            max_views: DEFAULT_MAX_VIEWS,
            max_subscribers: DEFAULT_MAX_SUBSCRIBERS,
            max_per_user: DEFAULT_MAX_PER_USER,
        }
    }
}

impl LiveConfig {
    pub fn new(
        interval: Duration,
        idle_refresh: Duration,
        max_views: usize,
        max_subscribers: usize,
    ) -> anyhow::Result<LiveConfig> {
        let (shortest, longest) = INTERVAL_RANGE;
        ensure!(
            (shortest..=longest).contains(&interval),
            "BATON_LIVE_INTERVAL must be between {} and {} (got {})",
            humantime::format_duration(shortest),
            humantime::format_duration(longest),
            humantime::format_duration(interval)
        );
        ensure!(
            idle_refresh >= interval,
            "BATON_LIVE_IDLE_REFRESH ({}) must be at least BATON_LIVE_INTERVAL ({})",
            humantime::format_duration(idle_refresh),
            humantime::format_duration(interval)
        );
        ensure!(
            max_views >= 1 && max_subscribers >= 1,
            "BATON_LIVE_MAX_VIEWS and BATON_LIVE_MAX_SUBSCRIBERS must be at least 1 \
             (got {max_views} and {max_subscribers})"
        );
        Ok(LiveConfig {
            interval,
            idle_refresh,
            max_views,
            max_subscribers,
            max_per_user: DEFAULT_MAX_PER_USER,
        })
    }

    /// With at most `n` open feed connections per user.
    pub fn per_user(mut self, n: usize) -> anyhow::Result<LiveConfig> {
        ensure!(
            n >= 1,
            "BATON_LIVE_MAX_PER_USER must be at least 1 (got {n})"
        );
        self.max_per_user = n;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::LiveConfig;

    #[test]
    fn settings_out_of_range_are_refused_with_their_name() {
        let ms = Duration::from_millis;
        let refused = [
            (ms(10), ms(5000), 1, 1, "BATON_LIVE_INTERVAL"),
            (ms(1000), ms(500), 1, 1, "BATON_LIVE_IDLE_REFRESH"),
            (ms(1000), ms(5000), 0, 1, "BATON_LIVE_MAX_VIEWS"),
        ];
        for (interval, idle, views, subscribers, name) in refused {
            let error = LiveConfig::new(interval, idle, views, subscribers)
                .unwrap_err()
                .to_string();
            assert!(error.contains(name), "{error}");
        }
        assert!(LiveConfig::new(ms(1000), ms(1000), 1, 1).is_ok());
    }
}
