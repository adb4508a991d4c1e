//! Samples of the database's clock, which [`domain::time::clock`] anchors
//! this process's clock on (docs/design.md, "One clock").

use std::time::Instant;

use chrono::Utc;
use domain::time::clock::{FIRST_SAMPLES, Sample, adopt};

use super::{Result, Store};

/// One sample of `store`'s clock; `None` where the database's clock is this
/// host's (SQLite).
pub async fn sample(store: &dyn Store) -> Result<Option<Sample>> {
    let sent = Instant::now();
    let wall_at_sent = Utc::now().timestamp_micros();
    let Some(database) = store.database_clock().await? else {
        return Ok(None);
    };
    Ok(Some(Sample {
        sent,
        wall_at_sent,
        received: Instant::now(),
        database: database.micros(),
    }))
}

/// Anchors this process's clock on `store`'s before anything is written:
/// the quickest of a few samples.
pub async fn anchor(store: &dyn Store) -> Result<()> {
    let mut best: Option<Sample> = None;
    for _ in 0..FIRST_SAMPLES {
        let Some(sample) = sample(store).await? else {
            return Ok(());
        };
        if best.is_none_or(|b| sample.round_trip() < b.round_trip()) {
            best = Some(sample);
        }
    }
    if let Some(best) = best {
        adopt(&best);
    }
    Ok(())
}
